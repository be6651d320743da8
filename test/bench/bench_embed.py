#!/usr/bin/env python3
"""bench_embed.py - the two halves of test/bench/bench_embed.sh.

  bench_embed.py texts DIR [N_SHORT N_LONG]
                                 write DIR/short.txt (1,000 texts of 10-60
                                 tokens) and DIR/long.txt (200 of ~400), or
                                 the first N_SHORT and N_LONG of them
  bench_embed.py llama MODEL FILE THREADS
                                 embed FILE's lines with llama-cpp-python
                                 (llama.cpp, all inputs in one embed() call,
                                 batched across inputs up to n_batch = 512 tokens, its default and the model context)
                                 and print "seconds texts tokens"
"""
import random
import sys
import time

WORDS = ("the database index query planner table row column vacuum buffer cache "
         "transaction commit rollback replica network latency model embedding vector "
         "search ranking document sentence paragraph language token encoder layer "
         "attention weight matrix product memory thread process kernel schedule "
         "request session tenant budget quota priority stream result error message "
         "garden river mountain winter summer coffee bread music violin concert "
         "football marathon telescope galaxy planet comet orbit station").split()


def make_texts(d, n_short=1000, n_long=200):
    rng = random.Random(19)
    short = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 55))).capitalize() + "."
             for _ in range(1000)]
    long = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(380, 410))).capitalize() + "."
            for _ in range(200)]
    with open(f"{d}/short.txt", "w") as f:
        f.writelines(t + "\n" for t in short[:n_short])
    with open(f"{d}/long.txt", "w") as f:
        f.writelines(t + "\n" for t in long[:n_long])


def llama(model, path, threads):
    from llama_cpp import Llama
    texts = [l.rstrip("\n") for l in open(path)]
    llm = Llama(model_path=model, embedding=True, n_ctx=512, n_batch=512, n_ubatch=512,
                n_threads=threads, n_threads_batch=threads, verbose=False)
    llm.embed(texts[:4])                  # warm up
    t0 = time.monotonic()
    _, ntok = llm.embed(texts, normalize=True, return_count=True)
    print(f"{time.monotonic() - t0:.4f} {len(texts)} {ntok}")


if __name__ == "__main__":
    if sys.argv[1] == "texts":
        make_texts(sys.argv[2], *(int(a) for a in sys.argv[3:5]))
    else:
        llama(sys.argv[2], sys.argv[3], int(sys.argv[4]))
