#!/usr/bin/env python3
"""
bench_models_llama.py - llama.cpp's side of test/bench/bench_models.sh.

One model per process, as llama.cpp's router and Ollama serve several
models: bench_models.sh starts this once per model (twice at once for
"both models").  SESSIONS client threads send greedy requests (the
prompt after a number of their own, "Story S-K: ...", so no two share a
cached prefix; max TOKENS tokens) one after the other for SECONDS, like
the opus_pg sessions of bench_models.sh, against

  server      llama.cpp's HTTP server (llama-server) with SESSIONS parallel
              slots and continuous batching, when --server-bin names one;
  sequential  llama-cpp-python in this process, the sessions' requests served
              one at a time (what an application gets without a batching
              server).

Start barrier: once the model is loaded and warmed up, the process creates
READY_FILE and waits for GO_FILE, so two processes measure the same window.
Prints one line:

  llama label=L mode=M requests=R tokens=T seconds=S req_s=X tok_s=Y p50_ms=Z

(requests started in the window; their latency, client side, in ms).

Usage: bench_models_llama.py --mode server|sequential --model FILE --label L
         --ready-file F --go-file G --prompt TEXT [--sessions 16] [--seconds 10]
         [--tokens 16] [--threads 2] [--server-bin llama-server]
         [--port 18090] [--logdir /tmp]
"""

import argparse
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_batching_llama as bbl  # noqa: E402



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["server", "sequential"], required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--go-file", required=True)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--server-bin", default="llama-server")
    ap.add_argument("--server-args", default="")
    ap.add_argument("--port", type=int, default=18090)
    ap.add_argument("--logdir", default="/tmp")
    ap.add_argument("--prompt", required=True)
    a = ap.parse_args()

    server = None
    if a.mode == "server":
        server = bbl.start_server(a, a.sessions)

        def one(prompt, tokens):
            return bbl.stream_server(a.port, prompt, tokens)
    else:
        seq = bbl.Sequential(a.model, a.threads)

        def one(prompt, tokens):
            return seq.run(prompt, tokens)
    try:
        one("Story 0: " + a.prompt, 4)  # warm-up, not timed
        open(a.ready_file, "w").close()
        while not os.path.exists(a.go_file):
            time.sleep(0.02)

        results = []
        lock = threading.Lock()
        t0 = time.monotonic()
        deadline = t0 + a.seconds

        def session(i):
            k = 0
            while True:
                start = time.monotonic()
                if start >= deadline:
                    return
                k += 1
                r = one("Story %d-%d: %s" % (i, k, a.prompt), a.tokens)
                ms = (time.monotonic() - start) * 1e3
                # llama-cpp-python's stream ends with one more chunk than
                # it generated tokens: count at most max_tokens
                with lock:
                    results.append((ms, min(r[2], a.tokens) if r else 0))

        ths = [threading.Thread(target=session, args=(i,)) for i in range(a.sessions)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        toks = sum(n for _, n in results)
        print("llama label=%s mode=%s requests=%d tokens=%d seconds=%.2f req_s=%.2f "
              "tok_s=%.1f p50_ms=%.1f"
              % (a.label, a.mode, len(results), toks, a.seconds,
                 len(results) / a.seconds, toks / a.seconds,
                 bbl.percentile([ms for ms, _ in results], 0.5)), flush=True)
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except Exception:
                server.kill()


if __name__ == "__main__":
    main()
