#!/usr/bin/env python3
"""Embedding goldens for the BERT-family encoders (test/unit/test_bert.c),
from llama.cpp through llama-cpp-python (Llama(..., embedding=True)) on the
same GGUF files the engine loads:

  minilm        models/all-MiniLM-L6-v2.gguf (F32, make model-minilm)
  minilm-f16    models/all-MiniLM-L6-v2-f16.gguf   } written by
  minilm-q8_0   models/all-MiniLM-L6-v2-q8_0.gguf  } `opus_engine quantize`
                (test/tools/make_model_variants.sh, as make golden-embed does)
  nomic         models/nomic-bert-test.gguf, a random-weight nomic-bert
                (test/tools/gen_nomic_model.py; WordPiece vocabulary of
                test/golden/tokenizer/wpm-vocab.gguf)

Writes next to this script:
  texts.txt      one text per line (no newlines inside; 240 texts: short
                 sentences in topic clusters, accents, CJK, emoji, code,
                 punctuation runs, long words, and 20 long texts of ~300-480
                 tokens)
  <vocab>.ntok   llama.cpp's token count of each text (with [CLS] [SEP]), for
                 the vocabularies minilm (all three MiniLM files; checked
                 equal) and nomic
  <tag>.sha256   the SHA-256 of the model file the goldens below were made on
  <tag>.f32      the pooled embeddings, NOT normalised, n x n_embd float32
                 little-endian
  <tag>.top5     (MiniLM) for each of the first 40 texts (queries), the
                 indices of its 5 nearest other texts by cosine similarity

Usage (repository root):
  gen_embed_golden.py [--models models] [--only minilm,minilm-f16,...]
The tokenization goldens of the MiniLM vocabulary are test/golden/tokenizer/
minilm.golden (488 strings, gen_wpm_golden.py).
"""
import argparse
import hashlib
import os
import random
import sys

import numpy as np
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))

# tag: (file under --models, vocabulary tag, write top-5, context)
MODELS = {
    "minilm": ("all-MiniLM-L6-v2.gguf", "minilm", True, 512),
    "minilm-f16": ("all-MiniLM-L6-v2-f16.gguf", "minilm", True, 512),
    "minilm-q8_0": ("all-MiniLM-L6-v2-q8_0.gguf", "minilm", True, 512),
    # the small test vocabulary splits many words into pieces: up to ~800 tokens
    "nomic": ("nomic-bert-test.gguf", "nomic", False, 2048),
}

TOPICS = {
    "database": ["PostgreSQL", "an index", "the query planner", "a B-tree", "the write-ahead log",
                 "a vacuum run", "a foreign key", "the buffer cache", "a materialized view",
                 "a transaction"],
    "cooking": ["the soup", "fresh basil", "a sourdough loaf", "the oven", "olive oil",
                "a risotto", "the dumplings", "roasted garlic", "the pastry", "a curry"],
    "space": ["the telescope", "a distant galaxy", "the Martian rover", "a comet",
              "the space station", "a neutron star", "the lunar lander", "Jupiter's moons",
              "a solar flare", "the orbit"],
    "sports": ["the goalkeeper", "a marathon", "the tennis final", "the relay team",
               "a penalty kick", "the cycling stage", "the referee", "a home run",
               "the ski jump", "the swimmer"],
    "music": ["the violin", "a jazz trio", "the orchestra", "a pop song", "the drummer",
              "a piano sonata", "the choir", "an electric guitar", "the opera", "a vinyl record"],
    "health": ["the vaccine", "a night of sleep", "the heart rate", "a daily walk",
               "the blood test", "a balanced diet", "the physiotherapist", "a fever",
               "the immune system", "a vitamin"],
}
VERBS = ["improves", "needs", "changes", "surprised", "depends on", "was compared with",
         "is described by", "helps", "slowed down", "was replaced by"]
ENDS = ["yesterday.", "in the new report.", "after the update.", "every morning.",
        "according to the experts.", "for the first time.", "without any warning.",
        "during the long winter.", "as expected.", "in a surprising way."]

SPECIAL = [
    "Café au lait, crème brûlée et déjà-vu à Noël.",
    "Ångström, Øresund, Łódź, Ærø: naïve façades.",
    "Straße, Größe, Fußgänger, Äpfel und Öfen.",
    "日本語のテキストを埋め込みます。",
    "北京是中国的首都，上海是最大的城市。",
    "한국어 문장도 포함합니다.",
    "Emoji party 🎉🎉 with 🐍 python and 🚀 rockets!",
    "I ❤️ embeddings 😀👍🏽",
    "def f(x): return x ** 2 + 1  # square plus one",
    "SELECT id, name FROM users WHERE age > 30 ORDER BY name;",
    "for (int i = 0; i < n; i++) { sum += a[i] * b[i]; }",
    "<div class=\"main\">Hello &amp; welcome</div>",
    "!!! ??? ... --- *** ### $$$ %%% &&&",
    "(((nested))) [[brackets]] {{braces}} <<angles>>",
    "antidisestablishmentarianism supercalifragilisticexpialidocious",
    "pneumonoultramicroscopicsilicovolcanoconiosis is a long word",
    "Donaudampfschifffahrtsgesellschaftskapitän",
    "e-mail: someone@example.com, url: https://example.org/a/b?c=d",
    "Version 1.2.3-rc4 released on 2024-05-06 at 12:34:56 UTC",
    "ΑΒΓΔ αβγδ: Ελληνικά γράμματα",
    "Русский текст с буквой ё и Ё.",
    "עברית ועוד العربية في النص",
    "ÀÉÎÕÜ àéîõü ÇçÑñ",
    "tab\tseparated\tvalues",
    "MIXED case TeXt WiTh CaPs",
    "x",
    "",
    "   leading and trailing spaces   ",
    "numbers 3.14159 2.71828 1,000,000 42",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
]


def corpus():
    rng = random.Random(19)
    texts = []
    # 180 short sentences in 6 topic clusters
    for topic, nouns in TOPICS.items():
        for _ in range(30):
            a, b = rng.sample(nouns, 2)
            texts.append(f"{a[0].upper()}{a[1:]} {rng.choice(VERBS)} {b} {rng.choice(ENDS)}")
    texts += SPECIAL                       # 30
    # 20 long texts (several hundred tokens) from one topic each
    for i in range(20):
        topic = list(TOPICS)[i % len(TOPICS)]
        nouns = TOPICS[topic]
        parts = []
        for _ in range(rng.randint(22, 34)):
            a, b = rng.sample(nouns, 2)
            parts.append(f"{a} {rng.choice(VERBS)} {b} {rng.choice(ENDS)}")
        texts.append(" ".join(parts))
    # 10 more short mixed ones
    for i in range(10):
        t1, t2 = rng.sample(list(TOPICS), 2)
        texts.append(f"{rng.choice(TOPICS[t1])} and {rng.choice(TOPICS[t2])} {rng.choice(ENDS)}")
    assert all("\n" not in t for t in texts)
    return texts


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def run_model(tag, path, vocab, top5, n_ctx, texts, ntoks):
    llm = Llama(model_path=path, embedding=True, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                verbose=False)
    ntok = [len(llm.tokenize(t.encode(), add_bos=True, special=False)) for t in texts]
    assert max(ntok) <= n_ctx, max(ntok)
    if vocab in ntoks:
        assert ntoks[vocab] == ntok, f"{tag}: token counts differ from {vocab}'s"
    ntoks[vocab] = ntok
    embs = np.array([llm.embed(t, normalize=False) for t in texts], dtype=np.float32)
    embs.astype("<f4").tofile(os.path.join(HERE, f"{tag}.f32"))
    with open(os.path.join(HERE, f"{tag}.sha256"), "w") as f:
        f.write(sha256(path) + "\n")
    if top5:
        unit = embs / np.linalg.norm(embs, axis=1, keepdims=True)
        sim = unit @ unit.T
        with open(os.path.join(HERE, f"{tag}.top5"), "w") as f:
            for q in range(40):
                s = sim[q].copy()
                s[q] = -np.inf
                f.write(" ".join(str(int(i)) for i in np.argsort(-s, kind="stable")[:5]) + "\n")
    print(f"{tag}: {len(texts)} texts, {embs.shape[1]} dims, tokens {min(ntok)}..{max(ntok)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="models")
    ap.add_argument("--only", default=",".join(MODELS))
    a = ap.parse_args()
    texts = corpus()
    with open(os.path.join(HERE, "texts.txt"), "w", encoding="utf-8") as f:
        for t in texts:
            f.write(t + "\n")
    ntoks = {}
    for tag in a.only.split(","):
        name, vocab, top5, n_ctx = MODELS[tag]
        run_model(tag, os.path.join(a.models, name), vocab, top5, n_ctx, texts, ntoks)
    for vocab, ntok in ntoks.items():
        with open(os.path.join(HERE, f"{vocab}.ntok"), "w") as f:
            f.write(" ".join(map(str, ntok)) + "\n")


if __name__ == "__main__":
    main()
