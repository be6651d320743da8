#!/usr/bin/env python3
"""
bench_batching_llama.py - llama.cpp's side of test/bench/bench_batching.sh.

N concurrent sessions, each sending REQS completion requests one after the
other (greedy, n_predict TOKENS; request k of session i uses prompt
(i * REQS + k) mod len(PROMPTS), as bench_batching.sh's pgbench script
does), against:

  server      llama.cpp's own HTTP server (llama-server) started with N
              parallel slots and continuous batching (its best mode for
              concurrent clients), 2 threads; requests stream, so time to
              first token and inter-token gaps are seen by the client;
  sequential  llama-cpp-python in this process: one model, the sessions'
              requests served one at a time (what an application gets
              without a batching server); times are client-side too.

Prints one line per level:
  level clients=N requests=R tokens=T seconds=S tok_s=X ttft_p50=A ttft_p99=B itl_p50=C
(times in ms; itl = (last token time - first token time) / (tokens - 1) per
request, median over requests).

Usage: bench_batching_llama.py --mode server|sequential --model FILE
         --prompts FILE --levels 1,4,16,32 [--tokens 64] [--reqs 2]
         [--server-bin llama-server] [--threads 2] [--port 18080]
"""

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def stream_server(port, prompt, tokens):
    """One streaming /completion request; returns (ttft_ms, itl_ms, n_tokens)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": prompt, "n_predict": tokens, "temperature": 0,
                       "stream": True, "cache_prompt": True})
    t0 = time.monotonic()
    conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("server answered %d: %s" % (resp.status, resp.read()[:200]))
    t_first = t_last = None
    n = 0
    buf = b""
    done = False
    while not done:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data: "):
                    continue
                d = json.loads(line[6:])
                now = time.monotonic()
                if d.get("content") or d.get("tokens"):
                    if t_first is None:
                        t_first = now
                    t_last = now
                if d.get("stop"):
                    n = d.get("tokens_predicted", n)
                    done = True
    conn.close()
    if t_first is None or n == 0:
        return None
    itl = (t_last - t_first) / (n - 1) * 1e3 if n > 1 else float("nan")
    return ((t_first - t0) * 1e3, itl, n)


class Sequential:
    def __init__(self, model, threads):
        import llama_cpp
        self.llm = llama_cpp.Llama(model_path=model, n_threads=threads,
                                   n_threads_batch=threads, n_ctx=1024,
                                   verbose=False)
        self.lock = threading.Lock()

    def run(self, prompt, tokens):
        t0 = time.monotonic()
        with self.lock:
            t_first = t_last = None
            n = 0
            for out in self.llm.create_completion(prompt, max_tokens=tokens,
                                                  temperature=0.0, stream=True):
                now = time.monotonic()
                if t_first is None:
                    t_first = now
                t_last = now
                n += 1
        if t_first is None:
            return None
        itl = (t_last - t_first) / (n - 1) * 1e3 if n > 1 else float("nan")
        return ((t_first - t0) * 1e3, itl, n)


def start_server(a, n):
    ctx_per_slot = 512
    cmd = [a.server_bin, "-m", a.model, "-t", str(a.threads), "-tb", str(a.threads),
           "-c", str(ctx_per_slot * n), "-np", str(n), "--port", str(a.port),
           "--host", "127.0.0.1", "-b", "512", "--no-webui"] + a.server_args.split()
    log = open(os.path.join(a.logdir, "llama-server-%d.log" % n), "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        if p.poll() is not None:
            raise RuntimeError("llama-server exited (see %s)" % log.name)
        try:
            c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=2)
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            c.close()
            if r.status == 200:
                return p
        except OSError:
            pass
        time.sleep(0.2)
    p.kill()
    raise RuntimeError("llama-server did not become healthy")


def level(a, n, prompts, one):
    results = []
    lock = threading.Lock()

    def session(i):
        # request k of session i: prompt (i * reqs + k) mod len, as pgbench's
        for k in range(a.reqs):
            r = one(prompts[(i * a.reqs + k) % len(prompts)], a.tokens)
            if r:
                with lock:
                    results.append(r)

    # warm-up (not timed)
    one(prompts[0], 4)
    ths = [threading.Thread(target=session, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    sec = time.monotonic() - t0
    toks = sum(r[2] for r in results)
    ttft = [r[0] for r in results]
    itl = [r[1] for r in results if r[1] == r[1]]
    print("level clients=%d requests=%d tokens=%d seconds=%.2f tok_s=%.1f "
          "ttft_p50=%.1f ttft_p99=%.1f itl_p50=%.1f"
          % (n, len(results), toks, sec, toks / sec, percentile(ttft, 0.5),
             percentile(ttft, 0.99), percentile(itl, 0.5)), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["server", "sequential"], required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--levels", default="1,4,16,32")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reqs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--server-bin", default="llama-server")
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--server-args", default="", help="extra llama-server options")
    ap.add_argument("--logdir", default="/tmp")
    a = ap.parse_args()
    with open(a.prompts) as f:
        prompts = [l.rstrip("\n") for l in f if l.strip()]
    levels = [int(x) for x in a.levels.split(",")]
    if a.mode == "sequential":
        seq = Sequential(a.model, a.threads)
        for n in levels:
            level(a, n, prompts, seq.run)
        return
    for n in levels:
        p = start_server(a, n)
        try:
            level(a, n, prompts, lambda pr, t: stream_server(a.port, pr, t))
        finally:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


if __name__ == "__main__":
    sys.exit(main())
