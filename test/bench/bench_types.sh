#!/bin/sh
# bench_types.sh - the tensor-type matrix: for each weight type x model shape
# x thread count, prefill and decode tok/s of opus_engine and of llama.cpp
# (llama-cpp-python, bench_llama.py) on the same `opus_engine genmodel` file,
# same run; medians of REPS runs, the order of the two engines alternated;
# the weight bytes read per decoded token, the decode bound they give with
# the read bandwidth measured by a small probe (bench_matvec's), each
# engine's share of that bound, and the load average.  Prints, not pass/fail.
#
# Environment (defaults):
#   TYPES="q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k f16 bf16"
#   SHAPES="smollm2 1b 8b"   smollm2: SmolLM2-135M; 1b: llama3-8b --shrink 2
#                            --layers 16 (Llama-3.2-1B-like widths);
#                            8b: llama3-8b --layers 4 (8B widths, 4 layers)
#   THREADS="1 2"  REPS=3  PP=128 (prompt tokens)  TG=32 (decoded tokens)
#   MODELS=build/bench/models (generated models are kept there)
# Run from the repository root after `make engine`.
set -eu
engine=${OPUS_ENGINE:-build/opus_engine}
python=${PYTHON:-python3}
here=$(dirname "$0")
[ -x "$engine" ] || { echo "$0: $engine not found (run make engine)" >&2; exit 1; }
"$python" -c "import llama_cpp, gguf" 2>/dev/null ||
	{ echo "$0: needs llama-cpp-python and gguf (pip install llama-cpp-python gguf)" >&2; exit 1; }
BUILD_ONLY=1 sh "$here/bench_matvec.sh" >/dev/null
exec "$python" - "$engine" "$here" <<'PY'
import os, re, statistics, subprocess, sys

engine, here = sys.argv[1], sys.argv[2]
env = os.environ
types = env.get("TYPES", "q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k f16 bf16").split()
shapes = env.get("SHAPES", "smollm2 1b 8b").split()
threads = [int(t) for t in env.get("THREADS", "1 2").split()]
reps = int(env.get("REPS", "3"))
pp, tg = int(env.get("PP", "128")), int(env.get("TG", "32"))
models = env.get("MODELS", "build/bench/models")
os.makedirs(models, exist_ok=True)
shape_args = {
    "smollm2": ["--shape", "smollm2-135m"],
    "1b": ["--shape", "llama3-8b", "--shrink", "2", "--layers", "16"],
    "8b": ["--shape", "llama3-8b", "--layers", "4"],
}


def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def probe():
    out = subprocess.run(["build/bench/bench_matvec", "none", "5"], env=dict(env, PROBE_ONLY="1"),
                         check=True, capture_output=True, text=True).stdout
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"read_bw_(\d) ([0-9.]+)", out)}


def bytes_per_token(path):
    """Weight bytes a decoded token reads: every matrix once; of the token
    embedding only a row, unless it is also the output matrix (tied)."""
    import gguf
    r = gguf.GGUFReader(path)
    names = {t.name: int(t.n_bytes) for t in r.tensors}
    total = sum(names.values())
    if "output.weight" in names:
        total -= names.get("token_embd.weight", 0)
    return total


def model(shape, typ):
    path = os.path.join(models, "%s-%s.gguf" % (shape, typ))
    if not os.path.exists(path):
        subprocess.run([engine, "genmodel", *shape_args[shape], "--type", typ, "--out", path,
                        "--threads", "2"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return path


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res = {}
    for m in re.finditer(r"^(prefill|decode) .*tok_s=([0-9.]+)", out, re.M):
        res[m.group(1)] = float(m.group(2))
    return res


bw = probe()
print("read bandwidth (probe): %s; load average %s; prefill %d tokens, decode %d, median of %d"
      % (", ".join("%d thread%s %.1f GB/s" % (t, "s" if t > 1 else "", bw[t]) for t in sorted(bw)),
         loadavg(), pp, tg, reps))
hdr = ("shape", "type", "thr", "MB/tok", "pp opus", "pp llama", "pp x", "tg opus", "tg llama",
       "tg x", "tg bound", "opus %bd", "llama %bd", "load")
print("| " + " | ".join(hdr) + " |")
print("|" + "|".join("---" if i < 2 else "---:" for i in range(len(hdr))) + "|")
for shape in shapes:
    for typ in types:
        path = model(shape, typ)
        bpt = bytes_per_token(path)
        for t in threads:
            res = {"opus": [], "llama": []}
            for i in range(reps):
                cmds = [("opus", [engine, "bench", "--model", path, "--threads", str(t), "--reps", "1",
                                  "--prompt-tokens", str(pp), "--gen-tokens", str(tg)]),
                        ("llama", [sys.executable, os.path.join(here, "bench_llama.py"), "--model", path,
                                   "--threads", str(t), "--reps", "1", "--prompt-tokens", str(pp),
                                   "--gen-tokens", str(tg)])]
                if i % 2:
                    cmds.reverse()
                for name, cmd in cmds:
                    res[name].append(run(cmd))

            def med(name, k):
                return statistics.median(r[k] for r in res[name])

            bound = bw.get(t, bw[max(bw)]) * 1e9 / bpt
            row = (shape, typ, str(t), "%.0f" % (bpt / 1e6),
                   "%.1f" % med("opus", "prefill"), "%.1f" % med("llama", "prefill"),
                   "%.2f" % (med("opus", "prefill") / med("llama", "prefill")),
                   "%.1f" % med("opus", "decode"), "%.1f" % med("llama", "decode"),
                   "%.2f" % (med("opus", "decode") / med("llama", "decode")),
                   "%.1f" % bound, "%.0f%%" % (100 * med("opus", "decode") / bound),
                   "%.0f%%" % (100 * med("llama", "decode") / bound), loadavg().split()[0])
            print("| " + " | ".join(row) + " |", flush=True)
PY
