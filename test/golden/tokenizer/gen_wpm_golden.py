#!/usr/bin/env python3
"""
gen_wpm_golden.py - WordPiece ("bert") tokenizer goldens from llama.cpp.

    python3 test/golden/tokenizer/gen_wpm_golden.py \
        [--model models/all-MiniLM-L6-v2.gguf]

writes, next to this script:
  wpm-vocab.gguf   a small vocabulary-only GGUF cut from the model's
                   WordPiece vocabulary (its specials and first 3,000 ids,
                   plus every continuation piece of one or two characters),
                   renumbered, with the model's bert.* and tokenizer keys, so
                   the unit test and the fuzzer have a WordPiece vocabulary
                   without the model (many words become [UNK] in it)
  wpm.golden       llama.cpp on wpm-vocab.gguf
  minilm.golden    llama.cpp on the model itself (make model-minilm)
The corpus is corpus.py's plus WPM_EXTRA below (accents precomposed and
combining, CJK, punctuation runs, code, long words, special-token text).
The file format is gen_tokenizer_golden.py's.
"""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from corpus import CORPUS  # noqa: E402
from gen_tokenizer_golden import load_vocab, write_golden  # noqa: E402

import gguf  # noqa: E402

WPM_EXTRA = [s.encode("utf-8") for s in [
    "Café déjà vu — naïve résumé",
    "cafe\u0301 de\u0301ja\u0300",          # combining marks stay separate
    "Ångström Øre Ærø straße İstanbul ǅemal",
    "ÉCOLE NORMALE SUPÉRIEURE",
    "东京是日本的首都。北京欢迎你！",
    "日本語のテキストと한국어 텍스트",
    "mixed中文and English混合",
    "𠀀𠀁 CJK extension B 𪜀",
    "emoji 🙂🙃 👩‍💻 🇫🇷 ❤️",
    "punctuation!!! ??? ... --- ((())) [[x]] {y}",
    "a.b,c;d:e!f?g",
    "\"quoted\" 'single' «guillemets» „low“",
    "e-mail: someone@example.com, url: https://example.org/a?b=c&d=e#f",
    "def f(x): return x**2 + 3*x - 1  # comment",
    "SELECT embedding FROM docs WHERE id = 42 AND title LIKE '%foo%';",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "x_y_z snake_case CamelCaseWord kebab-case-word",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "supercalifragilisticexpialidocious " * 3,
    "unbelievably hyperparameterized transformers",
    "a" * 120,
    "ab" * 80,
    "[CLS] [SEP] [UNK] [PAD] [MASK] [unused0] ##ing",
    "[CLS]hello[SEP]world",
    "##ing ##s ## #",
    "12,345.67 $100 €50 £3 ¥9 100% 3.14159 1e-9",
    "½ ¾ ² ³ ™ © ®",
    "tab\there\nnewline\r\ncrlf\u00a0nbsp\u2003emsp\u3000ideographic",
    "zero\u200bwidth\u200cjoin\u200dx\ufeffbom",
    "soft\u00adhyphen and control\x01\x02chars\x7f",
    "Ελληνικά κείμενα με τόνους",
    "Русский текст, Ёё",
    "العربية مع التشكيل: مُحَمَّد",
    "עברית עם ניקוד",
    "हिन्दी पाठ",
    "ภาษาไทย",
    "Tiếng Việt có dấu",
    "Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３",
    "ﬁ ligature ﬂ ﬀ",
    "Ⅻ ① ㈱ ㎞",
    "I'm don't won't y'all o'clock",
    "The U.S.A. and e.g. i.e. etc.",
]]

CORPUS_WPM = CORPUS + WPM_EXTRA


def copy_fields(r, w, skip=()):
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name in skip or name == "general.architecture":
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(field.parts[i]) for i in field.data]
            else:
                val = [field.parts[i][0].item() for i in field.data]
            w.add_key_value(name, val, vtype, sub_type=sub)
        elif vtype == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(field.parts[field.data[0]]), vtype)
        else:
            w.add_key_value(name, field.parts[field.data[0]][0].item(), vtype)


def make_small_vocab(model, dst):
    r = gguf.GGUFReader(model)
    tf = r.fields["tokenizer.ggml.tokens"]
    toks = [bytes(tf.parts[i]) for i in tf.data]
    ttf = r.fields["tokenizer.ggml.token_type"]
    types = [int(ttf.parts[i][0]) for i in ttf.data]
    keep = []
    for i, t in enumerate(toks):
        s = t.decode("utf-8")
        special = s.startswith("[") and s.endswith("]")
        if i < 3000 and not (s.startswith("[unused") and i > 8):
            keep.append(i)
        elif not special and not s.startswith("\u2581") and len(s) <= 2:
            keep.append(i)
    remap = {old: new for new, old in enumerate(keep)}
    w = gguf.GGUFWriter(dst, arch="bert")
    skip = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type"} | \
        {k for k in r.fields if k.startswith("tokenizer.ggml.") and k.endswith("_token_id")}
    copy_fields(r, w, skip)
    w.add_token_list([toks[i] for i in keep])
    w.add_token_types([types[i] for i in keep])
    for k in sorted(skip - {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type"}):
        f = r.fields[k]
        w.add_key_value(k, remap[int(f.parts[f.data[0]][0])], gguf.GGUFValueType.UINT32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {dst}: {len(keep)} tokens")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/all-MiniLM-L6-v2.gguf")
    args = ap.parse_args()
    small = os.path.join(HERE, "wpm-vocab.gguf")
    make_small_vocab(args.model, small)
    _, v = load_vocab(small)
    write_golden(v, os.path.join(HERE, "wpm.golden"), CORPUS_WPM,
                 "wpm-vocab.gguf (cut from all-MiniLM-L6-v2's vocabulary)")
    _, v = load_vocab(args.model)
    write_golden(v, os.path.join(HERE, "minilm.golden"), CORPUS_WPM,
                 os.path.basename(args.model))


if __name__ == "__main__":
    main()
