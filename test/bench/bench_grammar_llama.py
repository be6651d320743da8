#!/usr/bin/env python3
"""
bench_grammar_llama.py - llama.cpp's side of test/bench/bench_grammar.sh.

Decode tokens/s of llama.cpp (llama-cpp-python's Llama.generate, greedy)
with and without a GBNF grammar (LlamaGrammar, the same text opus_pg
enforces), on the same model file and the same prompts as bench_grammar.c.
Decode tokens/s is (tokens - 1) / (time from the first token to the last):
each token's llama_decode plus its sampling, grammar included; prompt
processing is left out.  llama-cpp-python generates one sequence at a time,
so this is its batch-1 figure.

Prints one line per round and then:
  free tok_s=X
  json tok_s=Y

Usage: bench_grammar_llama.py --model FILE --grammar FILE [--threads 2]
                              [--gen-tokens 96] [--rounds 3]  (medians)
       bench_grammar_llama.py --model FILE --compile DIR N
           llama.cpp's parse of DIR/1.gbnf .. DIR/N.gbnf
           (llama_sampler_init_grammar over the model's vocabulary), median
           of 5 each: one line "I MS" per grammar (MS 0: refused).
"""

import argparse
import statistics
import sys
import time

import llama_cpp


def one(llm, prompt, gen, grammar):
    toks = llm.tokenize(prompt.encode(), add_bos=True)
    times = []
    eos = llm.token_eos()
    for t in llm.generate(toks, temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                          repeat_penalty=1.0, grammar=grammar, reset=True):
        times.append(time.perf_counter())
        if len(times) >= gen or (grammar is not None and t == eos):
            break
    if len(times) < 2:
        return 0.0, len(times)
    return (len(times) - 1) / (times[-1] - times[0]), len(times)


def compile_times(model, d, n):
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    for i in range(1, n + 1):
        with open("%s/%d.gbnf" % (d, i), "rb") as f:
            text = f.read()
        ms = []
        for _ in range(5):
            t0 = time.perf_counter()
            s = llama_cpp.llama_sampler_init_grammar(vocab, text, b"root")
            t1 = time.perf_counter()
            if not s:
                ms = []
                break
            llama_cpp.llama_sampler_free(s)
            ms.append((t1 - t0) * 1e3)
        print("%d %.3f" % (i, statistics.median(ms) if ms else 0.0))
        sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--compile", nargs=2, metavar=("DIR", "N"))
    ap.add_argument("--grammar")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.compile:
        compile_times(a.model, a.compile[0], int(a.compile[1]))
        return
    if not a.grammar:
        ap.error("--grammar is required")

    gbnf = open(a.grammar).read()
    llm = llama_cpp.Llama(model_path=a.model, n_threads=a.threads,
                          n_threads_batch=a.threads, n_ctx=2048,
                          verbose=False)
    prompt = ("List the people of team %d as JSON, with their names, ages "
              "and email addresses:")
    # warm-up: fault the weights in
    one(llm, prompt % 1, 4, None)
    free, json = [], []
    for r in range(a.rounds):
        # a fresh grammar object per run: its state starts at the root
        order = [False, True] if r % 2 == 0 else [True, False]
        for constrained in order:
            g = llama_cpp.LlamaGrammar.from_string(gbnf, verbose=False) if constrained else None
            tps, n = one(llm, prompt % 1, a.gen_tokens, g)
            (json if constrained else free).append(tps)
            print("round %d %s tok_s=%.2f tokens=%d"
                  % (r + 1, "json" if constrained else "free", tps, n))
            sys.stdout.flush()
    print("model %s llama-cpp-python %s threads %d rounds %d"
          % (a.model, llama_cpp.__version__, a.threads, a.rounds))
    print("free tok_s=%.2f" % statistics.median(free))
    print("json tok_s=%.2f" % statistics.median(json))


if __name__ == "__main__":
    main()
