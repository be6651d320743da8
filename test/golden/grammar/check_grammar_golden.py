#!/usr/bin/env python3
"""Our greedy output under each GBNF grammar of cases.json (opus_engine run
--grammar-file) against llama.cpp's (golden.json, gen_grammar_golden.py).

    python3 test/golden/grammar/check_grammar_golden.py [ENGINE] [MODEL]

Passes when at least 80% of the cases are identical and every output of
ours is valid: it matches the case's regular expression (an equivalent of
its grammar checked by Python's re, independent of our automaton), unless
it stopped at max_tokens (then it must be a prefix llama.cpp also produced
or the case counts as a mismatch only).  Exit 0 pass, 1 fail, 77 skip.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
engine = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "opus_engine")
model = sys.argv[2] if len(sys.argv) > 2 else os.environ.get(
    "OPUS_MODEL", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
if not os.path.exists(model) or not os.path.exists(engine):
    print(f"skip: {model} or {engine} missing")
    sys.exit(77)
cases = json.load(open(os.path.join(HERE, "cases.json")))
golden = {c["name"]: c for c in json.load(open(os.path.join(HERE, "golden.json")))["cases"]}
same = 0
bad = 0
for c in cases:
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as f:
        f.write(c["grammar"])
        gfile = f.name
    try:
        r = subprocess.run([engine, "run", "--model", model, "--prompt", c["prompt"],
                            "-n", str(c["max_tokens"]), "--grammar-file", gfile,
                            "--threads", "2"], capture_output=True, timeout=300)
    finally:
        os.unlink(gfile)
    if r.returncode != 0:
        print(f"FAIL {c['name']}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
        bad += 1
        continue
    text = r.stdout.decode("utf-8", errors="replace")
    if text.endswith("\n"):
        text = text[:-1]
    m = re.search(r"generated: (\d+) tokens", r.stderr.decode())
    n_gen = int(m.group(1)) if m else -1
    hit_length = n_gen >= c["max_tokens"]
    valid = re.fullmatch(c["regex"], text) is not None
    g = golden[c["name"]]["text"]
    eq = text == g
    same += eq
    if not valid and not hit_length:
        bad += 1
    print(f"{'same' if eq else 'DIFF'} {'valid' if valid else ('length' if hit_length else 'INVALID')} "
          f"{c['name']:10s} ours {text!r}" + ("" if eq else f" llama.cpp {g!r}"))
ratio = same / len(cases)
print(f"{same}/{len(cases)} identical to llama.cpp ({100 * ratio:.0f}%, need 80%), {bad} invalid")
sys.exit(0 if ratio >= 0.8 and bad == 0 else 1)
