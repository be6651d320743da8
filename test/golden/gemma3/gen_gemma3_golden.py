#!/usr/bin/env python3
"""
gen_gemma3_golden.py - llama.cpp (through llama-cpp-python) as the oracle for
the engine's gemma3 architecture on the real Gemma 3 270M file
(models/gemma-3-270m-q4_k_m.gguf, `make model-gemma3`).

Writes gemma3.txt next to this script: for each prompt (the default model's
golden prompts, test/golden/logits/make_goldens.py, with its two ChatML
prompts replaced by Gemma turn markup, plus a few more):

  prompt     llama.cpp's token ids (add_bos as the model says: BOS 2)
  cont       its greedy continuation (argmax, up to MAX_NEW tokens, ending
             after an end-of-generation token), prompt in one batch, then
             one token per llama_decode
  cont_margin  top1 - top2 logit at each greedy step
  tf_top1    teacher forcing: prompt + cont in ONE batch, logits for every
             position; the top-1 token after each position
  tf_margin  top1 - top2 logit at each of those positions
  cont_text  the continuation's text (escaped as in make_goldens.py)

The "long 1" records (prompts past the 512-token sliding window, context
N_CTX_LONG) have no tf_top1/tf_margin lines: their check is the greedy
steps' top-1 (cont) where cont_margin >= 0.5, with llama.cpp's tokens fed.

The check is test/unit/test_gemma3.c.  Usage, from the repository root:
  python3 test/golden/gemma3/gen_gemma3_golden.py
"""

import os
import sys

import numpy as np
import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "logits"))
import make_goldens as mg  # noqa: E402  (PROMPTS, escape, sha256)

MODEL = os.path.join("models", "gemma-3-270m-q4_k_m.gguf")
MAX_NEW = 16
N_THREADS = 2
N_CTX = 128

CHAT = [
    (1, "<start_of_turn>user\nGive me three tips for sleeping better."
        "<end_of_turn>\n<start_of_turn>model\n"),
    (1, "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
        "<start_of_turn>model\n"),
    (1, "<start_of_turn>user\nWrite a haiku about PostgreSQL.<end_of_turn>\n"
        "<start_of_turn>model\n"),
    (0, "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"),
]
# 31 of the default model's raw prompts (all but the last two: the run
# takes 1-2 minutes per prompt on a busy 2-core machine) and the 4 chat ones
PROMPTS = [p for p in mg.PROMPTS if "<|im_start|>" not in p[1]][:31] + CHAT

# Past the sliding window (gemma3.attention.sliding_window = 512): prompts
# of 600-900 tokens whose answer sits more than 512 tokens back, so only
# the global layers can see it.  No teacher-forcing record for these (a
# logits_all row per position is 1 MB); the greedy steps' own top-1 and
# margins are the check.
COLOURS = ["red", "blue", "green", "yellow", "purple", "orange", "black",
           "white", "grey", "brown", "pink", "silver"]
THINGS = ["apple", "river", "castle", "violin", "garden", "rocket", "lantern",
          "teapot", "bicycle", "mountain", "island", "library", "window",
          "dragon", "compass", "harbour", "meadow", "anchor", "candle",
          "forest", "bridge", "mirror", "tower", "feather", "pebble",
          "quilt", "saddle", "thimble", "valley", "whistle"]


def long_list(n_items):
    lines = ["Here is a list of things and their colours."]
    for i in range(n_items):
        lines.append("Item %d: the %s is %s." % (
            i + 1, THINGS[i % len(THINGS)], COLOURS[(7 * i + 3) % len(COLOURS)]))
    return "\n".join(lines)


LONG = [
    (0, long_list(60) + "\nQuestion: what colour is the apple in item 1?"
        "\nAnswer: the apple is"),
    (1, "<start_of_turn>user\n" + long_list(60) + "\n\nWhich item is the "
        "castle, and what colour is it?<end_of_turn>\n<start_of_turn>model\n"),
]
N_CTX_LONG = 1024


def main():
    path = MODEL
    llm = llama_cpp.Llama(model_path=path, n_ctx=N_CTX, n_batch=N_CTX,
                          n_ubatch=N_CTX, n_threads=N_THREADS,
                          n_threads_batch=N_THREADS, logits_all=True,
                          verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    recs = []
    for i, (special, text) in enumerate(PROMPTS):
        ptoks = llm.tokenize(text.encode("utf-8"), add_bos=True,
                             special=bool(special))
        llm.reset()
        llm.eval(ptoks)
        cont, margins = [], []
        for _ in range(MAX_NEW):
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            tok = int(np.argmax(row))
            top2 = np.partition(row, -2)[-2:]
            margins.append(float(top2[1] - top2[0]))
            cont.append(tok)
            if llama_cpp.llama_vocab_is_eog(vocab, tok):
                break
            llm.eval([tok])
        # teacher forcing: everything in one batch
        llm.reset()
        seq = ptoks + cont
        llm.eval(seq)
        tf1, tfm = [], []
        for p in range(len(seq)):
            row = np.array(llm.scores[p], dtype=np.float32)
            tf1.append(int(np.argmax(row)))
            top2 = np.partition(row, -2)[-2:]
            tfm.append(float(top2[1] - top2[0]))
        ctext = llm.detokenize(cont, special=False)
        recs.append((special, text, ptoks, cont, margins, tf1, tfm, ctext))
        print("%2d: %d+%d %r" % (i, len(ptoks), len(cont), ctext[:60]),
              file=sys.stderr)
    del llm
    llm = llama_cpp.Llama(model_path=path, n_ctx=N_CTX_LONG, n_batch=N_CTX,
                          n_ubatch=N_CTX, n_threads=N_THREADS,
                          n_threads_batch=N_THREADS, logits_all=False,
                          verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    for special, text in LONG:
        ptoks = llm.tokenize(text.encode("utf-8"), add_bos=True,
                             special=bool(special))
        assert 512 + 64 < len(ptoks) + MAX_NEW <= N_CTX_LONG, len(ptoks)
        llm.reset()
        llm.eval(ptoks)
        cont, margins = [], []
        for _ in range(MAX_NEW):
            # without logits_all, llm.scores is not filled: the last
            # token's logits straight from the context
            row = np.ctypeslib.as_array(
                llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1),
                shape=(llm.n_vocab(),)).astype(np.float32)
            tok = int(np.argmax(row))
            top2 = np.partition(row, -2)[-2:]
            margins.append(float(top2[1] - top2[0]))
            cont.append(tok)
            if llama_cpp.llama_vocab_is_eog(vocab, tok):
                break
            llm.eval([tok])
        ctext = llm.detokenize(cont, special=False)
        recs.append((special, text, ptoks, cont, margins, None, None, ctext))
        print("long: %d+%d %r" % (len(ptoks), len(cont), ctext[:60]),
              file=sys.stderr)
    out = os.path.join(HERE, "gemma3.txt")
    with open(out, "w", encoding="utf-8") as f:
        f.write("# opus_pg golden: gemma3 greedy + teacher-forced top-1\n")
        f.write("# made by test/golden/gemma3/gen_gemma3_golden.py with "
                "llama-cpp-python %s (n_threads %d, n_batch %d)\n"
                % (llama_cpp.__version__, N_THREADS, N_CTX))
        f.write("model %s\n" % os.path.basename(path))
        f.write("sha256 %s\n" % mg.sha256(path))
        f.write("max_new %d\n" % MAX_NEW)
        f.write("n_prompts %d\n" % len(recs))
        for i, (special, text, ptoks, cont, margins, tf1, tfm, ctext) in \
                enumerate(recs):
            f.write("P %d special %d long %d\n" % (i, special, tf1 is None))
            f.write("text %s\n" % mg.escape(text.encode("utf-8")))
            f.write("prompt %d %s\n" % (len(ptoks), " ".join(map(str, ptoks))))
            f.write("cont %d %s\n" % (len(cont), " ".join(map(str, cont))))
            f.write("cont_margin %d %s\n" % (len(margins), " ".join(
                "%.4f" % m for m in margins)))
            if tf1 is not None:
                f.write("tf_top1 %d %s\n" % (len(tf1), " ".join(map(str, tf1))))
                f.write("tf_margin %d %s\n" % (len(tfm), " ".join(
                    "%.4f" % m for m in tfm)))
            f.write("cont_text %s\n" % mg.escape(ctext))


if __name__ == "__main__":
    main()
