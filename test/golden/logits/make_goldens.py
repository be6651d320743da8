#!/usr/bin/env python3
"""
make_goldens.py - llama.cpp (through llama-cpp-python) as the oracle for the
engine's forward pass.

Writes, into the directory of this script:

  greedy.txt        for each prompt: its token ids and llama.cpp's greedy
                    continuation (up to MAX_NEW tokens, stopping after an
                    end-of-generation token) on the default Q4_1 model.
  greedy_<type>.txt the same on the variants named by --greedy-types
                    (default f16: float weights, where the two engines'
                    logits agree to ~0.1 and greedy text should match).
  tf_<name>.txt     teacher-forced logits: prompt + continuation evaluated in
                    one batch with logits for every position; for each
                    position llama.cpp's top-1 and top-2 token ids and logits.
                    <name> is "default" (the downloaded Q4_1 file) or the
                    lower-case tensor type of models/smollm2-<type>.gguf, the
                    variants our quantizer writes (test/tools/make_model_variants.sh).

Every tf file records the SHA-256 of the model file it was made on, so the C
check (test/unit/test_golden_logits.c) can tell a changed model file from a
forward-pass bug.

Usage (from the repository root):
  python3 test/golden/logits/make_goldens.py [--types default,q4_1,...]
      [--greedy-types f16] [--greedy-only] [--tf-only]

By default it regenerates the greedy files and every tf file whose model is
present; a missing variant is reported and skipped.  The tf files use the
token sequences of greedy.txt (the default model's continuation) for every
type, so --tf-only reads greedy.txt instead of regenerating it.
"""

import argparse
import hashlib
import os
import sys

import numpy as np
import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
DEFAULT_MODEL = os.path.join("models", "SmolLM2-135M-Instruct.Q4_1.gguf")
VARIANT_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0",
                 "q5_1", "q4_k", "q5_k", "q6_k"]
MAX_NEW = 32
N_THREADS = 2
N_CTX = 512

# (special, text): special=1 parses special-token text (the chat prompt,
# as a chat request is tokenized); every other prompt uses special=False.
PROMPTS = [
    (0, "The capital of France is"),
    (0, "Once upon a time, in a small village by the sea,"),
    (0, "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    (0, "Here is a list of fruits:\n1. Apple\n2. Banana\n3."),
    (0, "Question: What is the boiling point of water at sea level?\nAnswer:"),
    (1, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
        "trained by Hugging Face<|im_end|>\n<|im_start|>user\n"
        "Give me three tips for sleeping better.<|im_end|>\n"
        "<|im_start|>assistant\n"),
    (0, "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"),
    (0, "1, 2, 3, 4, 5, 6, 7,"),
    (0, "The year 1969 was important because"),
    (0, "La capitale de l'Allemagne est"),
    (0, "Der schnelle braune Fuchs springt über den faulen Hund. Das bedeutet"),
    (0, "東京は日本の首都です。"),
    (0, "SELECT name, email FROM users WHERE"),
    (0, "#include <stdio.h>\n\nint main(void)\n{\n"),
    (0, "Q: Why is the sky blue?\nA:"),
    (0, "To make a cup of tea, first"),
    (0, "The quick brown fox"),
    (0, "Photosynthesis is the process by which"),
    (0, "import numpy as np\n\nx = np.arange(10)\n"),
    (0, "Dear Sir or Madam,\n\nI am writing to"),
    (0, "The three primary colors are"),
    (0, "In mathematics, a prime number is"),
    (0, "- eggs\n- milk\n- bread\n-"),
    (0, "3.14159 is the value of"),
    (0, "¿Cuál es la montaña más alta del mundo?"),
    (0, "PostgreSQL is an open-source relational database that"),
    (0, "<html>\n<head>\n<title>"),
    (0, "Water boils at 100 degrees Celsius and freezes at"),
    (0, "The best way to learn a new programming language is"),
    (0, "Translate to English: Je suis très content de vous voir."),
    (0, "   Indented text with    many   spaces and\ttabs\t\tfollows"),
    (0, "Emoji are fun 🎉🐍! My favourite is"),
    (0, "Monday, Tuesday, Wednesday,"),
    (0, "function add(a, b) {\n  return"),
]


def escape(b):
    """Bytes to one printable line: \\\\, \\n, \\t, \\r, and \\xHH for
    other control bytes and for bytes that are not valid UTF-8; valid
    UTF-8 is written as is."""
    s = b.decode("utf-8", errors="surrogateescape")
    out = []
    for ch in s:
        c = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif c < 0x20 or c == 0x7F:
            out.append("\\x%02x" % c)
        elif 0xDC80 <= c <= 0xDCFF:
            out.append("\\x%02x" % (c - 0xDC00))
        else:
            out.append(ch)
    return "".join(out)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            blk = f.read(1 << 22)
            if not blk:
                break
            h.update(blk)
    return h.hexdigest()


def load(path):
    return llama_cpp.Llama(model_path=path, n_ctx=N_CTX, n_batch=N_CTX,
                           n_ubatch=N_CTX, n_threads=N_THREADS,
                           n_threads_batch=N_THREADS, logits_all=True,
                           verbose=False)


def header(f, what):
    f.write("# opus_pg golden: %s\n" % what)
    f.write("# made by test/golden/logits/make_goldens.py with "
            "llama-cpp-python %s (n_threads %d, n_batch %d)\n"
            % (llama_cpp.__version__, N_THREADS, N_CTX))


def make_greedy(path, name="default"):
    llm = load(path)
    eog = {llm.token_eos()}
    # llama.cpp's end-of-generation set (EOS, EOT, <|im_end|> ...)
    model = llm._model.model
    vocab = llama_cpp.llama_model_get_vocab(model)
    records = []
    for i, (special, text) in enumerate(PROMPTS):
        ptoks = llm.tokenize(text.encode("utf-8"), add_bos=True,
                             special=bool(special))
        llm.reset()
        llm.eval(ptoks)
        cont = []
        margins = []
        for _ in range(MAX_NEW):
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            tok = int(np.argmax(row))
            top2 = np.partition(row, -2)[-2:]
            margins.append(float(top2[1] - top2[0]))
            cont.append(tok)
            if tok in eog or llama_cpp.llama_vocab_is_eog(vocab, tok):
                break
            llm.eval([tok])
        ctext = llm.detokenize(cont, special=False)
        records.append((special, text, ptoks, cont, ctext, margins))
        print("greedy %-7s %2d: %d+%d tokens %r" % (name, i, len(ptoks), len(cont),
                                               ctext[:50]), file=sys.stderr)
    out = os.path.join(HERE, "greedy.txt" if name == "default"
                       else "greedy_%s.txt" % name)
    with open(out, "w", encoding="utf-8") as f:
        header(f, "greedy continuations (argmax), model %s" % name)
        f.write("# per prompt: P <index> special <0|1>; text; prompt <n> ids; "
                "cont <n> ids; cont_margin <n> top1-top2 logit margin at "
                "each step; cont_text (text lines escaped: \\\\ \\n \\t "
                "\\r \\xHH)\n")
        f.write("model %s\n" % os.path.basename(path))
        f.write("sha256 %s\n" % sha256(path))
        f.write("max_new %d\n" % MAX_NEW)
        f.write("n_prompts %d\n" % len(records))
        for i, (special, text, ptoks, cont, ctext, margins) in \
                enumerate(records):
            f.write("P %d special %d\n" % (i, special))
            f.write("text %s\n" % escape(text.encode("utf-8")))
            f.write("prompt %d %s\n" % (len(ptoks), " ".join(map(str, ptoks))))
            f.write("cont %d %s\n" % (len(cont), " ".join(map(str, cont))))
            f.write("cont_margin %d %s\n" % (len(margins), " ".join(
                "%.4f" % m for m in margins)))
            f.write("cont_text %s\n" % escape(ctext))
    return records


def read_greedy():
    recs = []
    with open(os.path.join(HERE, "greedy.txt"), encoding="utf-8") as f:
        cur = None
        for line in f:
            w = line.split()
            if not w or w[0].startswith("#"):
                continue
            if w[0] == "P":
                cur = {}
                recs.append(cur)
            elif w[0] in ("prompt", "cont"):
                cur[w[0]] = [int(x) for x in w[2:]]
                assert len(cur[w[0]]) == int(w[1])
    return [(None, None, r["prompt"], r["cont"], None, None) for r in recs]


def make_tf(name, path, records):
    llm = load(path)
    out = os.path.join(HERE, "tf_%s.txt" % name)
    agree = 0
    total = 0
    with open(out, "w", encoding="utf-8") as f:
        header(f, "teacher-forced top-2 logits, type %s" % name)
        f.write("# per prompt: P <index> n <positions>; then per position "
                "(logits after token <pos>): pos top1 logit1 top2 logit2\n")
        f.write("type %s\n" % name)
        f.write("file %s\n" % os.path.relpath(path, ROOT))
        f.write("sha256 %s\n" % sha256(path))
        f.write("n_prompts %d\n" % len(records))
        for i, (_, _, ptoks, cont, _, _) in enumerate(records):
            full = ptoks + cont
            llm.reset()
            llm.eval(full)
            sc = np.array(llm.scores[:len(full)], dtype=np.float32)
            f.write("P %d n %d\n" % (i, len(full)))
            for pos in range(len(full)):
                row = sc[pos]
                t1 = int(np.argmax(row))
                l1 = row[t1]
                row2 = row.copy()
                row2[t1] = -np.inf
                t2 = int(np.argmax(row2))
                l2 = row2[t2]
                f.write("%d %d %.4f %d %.4f\n" % (pos, t1, l1, t2, l2))
                if pos >= len(ptoks) - 1 and pos < len(full) - 1:
                    total += 1
                    agree += (t1 == full[pos + 1])
    print("tf %-8s %s: top-1 == Q4_1 greedy continuation at %d/%d positions"
          % (name, os.path.relpath(path, ROOT), agree, total), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", default="default," + ",".join(VARIANT_TYPES))
    ap.add_argument("--greedy-only", action="store_true")
    ap.add_argument("--greedy-types", default="f16",
                    help="variants that also get a greedy_<type>.txt "
                    "(besides greedy.txt on the default model)")
    ap.add_argument("--tf-only", action="store_true")
    a = ap.parse_args()
    os.chdir(ROOT)
    if a.tf_only:
        records = read_greedy()
    else:
        records = make_greedy(DEFAULT_MODEL)
        for name in filter(None, a.greedy_types.split(",")):
            path = os.path.join("models", "smollm2-%s.gguf" % name)
            if os.path.exists(path):
                make_greedy(path, name)
            else:
                print("greedy %-7s skipped: %s is absent" % (name, path),
                      file=sys.stderr)
    if a.greedy_only:
        return
    for name in a.types.split(","):
        path = DEFAULT_MODEL if name == "default" else \
            os.path.join("models", "smollm2-%s.gguf" % name)
        if not os.path.exists(path):
            print("tf %-8s skipped: %s is absent" % (name, path),
                  file=sys.stderr)
            continue
        make_tf(name, path, records)


if __name__ == "__main__":
    main()
