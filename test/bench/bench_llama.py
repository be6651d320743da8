#!/usr/bin/env python3
"""
bench_llama.py - llama.cpp's side of test/bench/bench_engine.sh.

Measures, through llama-cpp-python's low-level API (llama_decode), what
`opus_engine bench` measures, on the same model file and the same prompt:

  prefill  the N-token pseudo-random prompt in one llama_decode (n_batch 512,
           logits of the last token only), after a warm-up prefill;
  decode   G single-token llama_decode calls after that prompt, each token the
           argmax of the previous logits (greedy, as opus_engine bench does).

The prompt is the same xorshift64 sequence as opus_engine bench's (see
opus_cli_bench in src/engine/cli/cli_run.c).  Prints, like opus_engine bench:

  prefill tokens=N tok_s=X
  decode tokens=G tok_s=Y

Usage: bench_llama.py --model FILE [--prompt-tokens 512] [--gen-tokens 128]
                      [--threads 2] [--reps 1]   (medians over reps)
"""

import argparse
import ctypes
import statistics
import sys
import time

import numpy as np
import llama_cpp


def bench_prompt(n, n_vocab):
    mask = (1 << 64) - 1
    x = 0x9E3779B97F4A7C15
    out = []
    for _ in range(n):
        x ^= (x << 13) & mask
        x ^= x >> 7
        x ^= (x << 17) & mask
        out.append(x % n_vocab)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    a = ap.parse_args()

    n_ctx = 1024
    while n_ctx < a.prompt_tokens + a.gen_tokens:
        n_ctx *= 2
    llm = llama_cpp.Llama(model_path=a.model, n_threads=a.threads,
                          n_threads_batch=a.threads, n_batch=512,
                          n_ubatch=512, n_ctx=n_ctx, logits_all=False,
                          verbose=False)
    ctx = llm._ctx.ctx
    mem = llama_cpp.llama_get_memory(ctx)
    n_vocab = llm.n_vocab()
    prompt = bench_prompt(a.prompt_tokens, n_vocab)

    def decode(tokens):
        arr = (llama_cpp.llama_token * len(tokens))(*tokens)
        for i in range(0, len(tokens), 512):
            k = min(512, len(tokens) - i)
            sub = ctypes.cast(ctypes.byref(arr, i * ctypes.sizeof(
                llama_cpp.llama_token)), ctypes.POINTER(llama_cpp.llama_token))
            rc = llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(sub, k))
            if rc != 0:
                sys.exit("llama_decode failed: %d" % rc)

    def last_argmax():
        p = llama_cpp.llama_get_logits_ith(ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(p, shape=(n_vocab,))))

    # warm-up: fault the weights in, let the thread pool spin up
    decode(prompt[:min(16, len(prompt))])
    llama_cpp.llama_synchronize(ctx)
    llama_cpp.llama_memory_clear(mem, True)

    pp, tg = [], []
    for _ in range(a.reps):
        llama_cpp.llama_memory_clear(mem, True)
        t0 = time.perf_counter()
        decode(prompt)
        llama_cpp.llama_synchronize(ctx)
        t1 = time.perf_counter()
        nxt = last_argmax()
        one = (llama_cpp.llama_token * 1)()
        for _ in range(a.gen_tokens):
            one[0] = nxt
            rc = llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(one, 1))
            if rc != 0:
                sys.exit("llama_decode failed: %d" % rc)
            nxt = last_argmax()
        t2 = time.perf_counter()
        pp.append(a.prompt_tokens / (t1 - t0))
        tg.append(a.gen_tokens / (t2 - t1) if a.gen_tokens else 0.0)
    print("model %s llama-cpp-python %s threads %d reps %d"
          % (a.model, llama_cpp.__version__, a.threads, a.reps))
    print("prefill tokens=%d tok_s=%.2f" % (a.prompt_tokens, statistics.median(pp)))
    print("decode tokens=%d tok_s=%.2f" % (a.gen_tokens, statistics.median(tg)))


if __name__ == "__main__":
    main()
