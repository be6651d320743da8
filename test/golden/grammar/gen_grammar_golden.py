#!/usr/bin/env python3
"""Greedy outputs of llama.cpp (llama-cpp-python's LlamaGrammar) under the
GBNF grammars of cases.json, with the default model; written to golden.json.

    python3 test/golden/grammar/gen_grammar_golden.py [MODEL]

Each case also has a Python regular expression equivalent to its grammar,
the independent validity check of test/golden/grammar/check_grammar_golden.py.
"""
import json
import os
import re
import sys

import llama_cpp
from llama_cpp import Llama, LlamaGrammar

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
model = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
cases = json.load(open(os.path.join(HERE, "cases.json")))
llm = Llama(model_path=model, n_ctx=512, n_threads=2, seed=0, verbose=False,
            logits_all=False)
out = []
for c in cases:
    g = LlamaGrammar.from_string(c["grammar"], verbose=False)
    r = llm.create_completion(c["prompt"], max_tokens=c["max_tokens"],
                              temperature=0.0, top_k=1, top_p=1.0, min_p=0.0,
                              repeat_penalty=1.0, grammar=g)
    text = r["choices"][0]["text"]
    fin = r["choices"][0]["finish_reason"]
    ok = re.fullmatch(c["regex"], text) is not None
    print(f"{c['name']:10s} {fin:6s} valid={ok} {text!r}")
    out.append({"name": c["name"], "text": text, "finish_reason": fin})
json.dump({"generator": f"llama-cpp-python {llama_cpp.__version__}",
           "model": os.path.basename(model), "cases": out},
          open(os.path.join(HERE, "golden.json"), "w"), indent=1,
          ensure_ascii=False)
