#!/usr/bin/env python3
"""
make_goldens.py - llama.cpp (llama-cpp-python) as the oracle for the MoE
forward pass, on the random-weight models of test/tools/gen_moe_model.py.

For every model models/moe/<arch>-<type>.gguf present (arch: mixtral,
qwen2moe, qwen3moe, olmoe; type: f32, f16, q8_0, q4_k) it writes
logits_<arch>-<type>.txt here: each prompt of PROMPTS is tokenized by
llama.cpp and evaluated in one batch with logits for every position; per
position the top-5 token ids with their logits and the logits of SAMPLE_IDS
(16 fixed token ids) are recorded.  The file records the model's SHA-256
and the generator seed, so the C check (test/unit/test_golden_moe.c) tells a
regenerated-differently model from a forward-pass bug.

The per-expert ("mixtral-legacy") files are not loaded by current llama.cpp;
their check is that opus_engine gives the same logits as on the stacked
"mixtral" file of the same weights.

Usage (repository root, models generated first):
  python3 test/tools/gen_moe_model.py
  python3 test/golden/moe/make_goldens.py [--models mixtral-f32,...]
"""

import argparse
import glob
import hashlib
import os
import sys

import numpy as np
import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
MODEL_DIR = os.path.join("models", "moe")
SEED = 20240607  # test/tools/gen_moe_model.py's default
N_THREADS = 2
N_CTX = 256
TOP = 5

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "def fibonacci(n):\n    return",
    "SELECT name FROM users WHERE id = 42;",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
]

# token ids whose logits are recorded at every position (fixed, spread over
# the vocabulary)
SAMPLE_IDS = [0, 17, 198, 260, 504, 1024, 2000, 3575, 4649, 8192, 12345,
              20000, 30001, 40000, 45678, 49151]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            blk = f.read(1 << 22)
            if not blk:
                break
            h.update(blk)
    return h.hexdigest()


def make(name, path):
    llm = llama_cpp.Llama(model_path=path, n_ctx=N_CTX, n_batch=N_CTX,
                          n_ubatch=N_CTX, n_threads=N_THREADS,
                          n_threads_batch=N_THREADS, logits_all=True,
                          verbose=False)
    out = os.path.join(HERE, "logits_%s.txt" % name)
    margins = []
    with open(out, "w", encoding="utf-8") as f:
        f.write("# opus_pg golden: MoE logits from llama.cpp, model %s\n" % name)
        f.write("# made by test/golden/moe/make_goldens.py with llama-cpp-python "
                "%s (n_threads %d, one batch per prompt, logits_all)\n"
                % (llama_cpp.__version__, N_THREADS))
        f.write("# per prompt: P <index> n <tokens> <ids>; per position: pos, "
                "then %d pairs top-id logit, then the logits of sample_ids\n" % TOP)
        f.write("model %s\n" % name)
        f.write("file %s\n" % os.path.relpath(path, ROOT))
        f.write("sha256 %s\n" % sha256(path))
        f.write("seed %d\n" % SEED)
        f.write("sample_ids %d %s\n" % (len(SAMPLE_IDS), " ".join(map(str, SAMPLE_IDS))))
        f.write("n_prompts %d\n" % len(PROMPTS))
        for i, text in enumerate(PROMPTS):
            toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
            llm.reset()
            llm.eval(toks)
            sc = np.array(llm.scores[:len(toks)], dtype=np.float32)
            f.write("P %d n %d %s\n" % (i, len(toks), " ".join(map(str, toks))))
            for pos in range(len(toks)):
                row = sc[pos]
                order = np.argsort(-row, kind="stable")[:TOP]
                margins.append(float(row[order[0]] - row[order[1]]))
                f.write("%d %s | %s\n" % (
                    pos,
                    " ".join("%d %.5f" % (int(t), row[t]) for t in order),
                    " ".join("%.5f" % row[t] for t in SAMPLE_IDS)))
    m = np.array(margins)
    print("%-14s %d positions, top1-top2 margin: median %.3f, < 0.05 at %d"
          % (name, len(m), np.median(m), int((m < 0.05).sum())), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="")
    a = ap.parse_args()
    os.chdir(ROOT)
    if a.models:
        names = a.models.split(",")
    else:
        names = sorted(os.path.basename(p)[:-5]
                       for p in glob.glob(os.path.join(MODEL_DIR, "*.gguf"))
                       if "legacy" not in p)
    for name in names:
        path = os.path.join(MODEL_DIR, name + ".gguf")
        if not os.path.exists(path):
            print("%s skipped: %s is absent" % (name, path), file=sys.stderr)
            continue
        make(name, path)


if __name__ == "__main__":
    main()
