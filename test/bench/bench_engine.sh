#!/bin/sh
# bench_engine.sh [-r REPS] [-t THREADS] [-m MODEL] [-p PROMPT_TOKENS] [-g GEN_TOKENS]
#
# Prefill and decode tokens/s of opus_engine and of llama.cpp (through
# llama-cpp-python, test/bench/bench_llama.py) on the same GGUF file, same
# machine, same run; prints a table with median / min / max of each and the
# ratio of the medians.  A script that prints, not a pass/fail test.
#
# Each repetition runs both engines once, in a fresh process each, the order
# alternating (opus first on odd repetitions, llama.cpp first on even ones)
# so that drifts in machine load fall on both.  Each process loads the model,
# warms up, then times one prefill of the prompt (pseudo-random tokens, the
# same for both) followed by greedy decode of GEN_TOKENS single tokens.
#
# Defaults: 5 repetitions, 2 threads, models/SmolLM2-135M-Instruct.Q4_1.gguf,
# a 512-token prompt, 128 decoded tokens.  Environment: OPUS_ENGINE
# (default build/opus_engine), PYTHON (default python3).
set -eu

reps=5
threads=2
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
n_pp=512
n_tg=128
engine=${OPUS_ENGINE:-build/opus_engine}
python=${PYTHON:-python3}
here=$(dirname "$0")

usage()
{
	echo "usage: $0 [-r REPS] [-t THREADS] [-m MODEL] [-p PROMPT_TOKENS] [-g GEN_TOKENS]" >&2
	exit 2
}

while getopts r:t:m:p:g:h opt; do
	case $opt in
		r) reps=$OPTARG ;;
		t) threads=$OPTARG ;;
		m) model=$OPTARG ;;
		p) n_pp=$OPTARG ;;
		g) n_tg=$OPTARG ;;
		*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || usage
for v in "$reps" "$threads" "$n_pp" "$n_tg"; do
	case $v in
		''|*[!0-9]*) usage ;;
	esac
done
[ "$reps" -ge 1 ] || usage
[ -x "$engine" ] || { echo "$0: $engine not found (run make engine)" >&2; exit 1; }
[ -f "$model" ] || { echo "$0: $model not found (run make model)" >&2; exit 1; }
"$python" -c "import llama_cpp" 2>/dev/null ||
	{ echo "$0: llama-cpp-python is not installed (pip install llama-cpp-python)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

run_opus()
{
	"$engine" bench --model "$model" --threads "$threads" --reps 1 \
		--prompt-tokens "$n_pp" --gen-tokens "$n_tg" > "$tmp/out" ||
		{ echo "$0: opus_engine bench failed" >&2; exit 1; }
	sed -n 's/^\(prefill\|decode\) .*tok_s=\([0-9.]*\).*/opus \1 \2/p' "$tmp/out" >> "$tmp/results"
}

run_llama()
{
	"$python" "$here/bench_llama.py" --model "$model" --threads "$threads" --reps 1 \
		--prompt-tokens "$n_pp" --gen-tokens "$n_tg" > "$tmp/out" ||
		{ echo "$0: bench_llama.py failed" >&2; exit 1; }
	sed -n 's/^\(prefill\|decode\) .*tok_s=\([0-9.]*\).*/llama \1 \2/p' "$tmp/out" >> "$tmp/results"
}

: > "$tmp/results"
echo "model $model, $threads threads, prefill $n_pp tokens, decode $n_tg tokens, $reps repetitions"
echo "cpu: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
i=1
while [ "$i" -le "$reps" ]; do
	if [ $((i % 2)) -eq 1 ]; then
		run_opus
		run_llama
	else
		run_llama
		run_opus
	fi
	printf 'rep %d/%d: %s\n' "$i" "$reps" "$(tail -4 "$tmp/results" | tr '\n' ' ')" >&2
	i=$((i + 1))
done

"$python" - "$tmp/results" "$n_pp" "$n_tg" <<'PY'
import statistics
import sys

res = {}
for line in open(sys.argv[1]):
    eng, metric, val = line.split()
    res.setdefault((eng, metric), []).append(float(val))
labels = {"prefill": "prefill %s tok" % sys.argv[2], "decode": "decode %s tok" % sys.argv[3]}


def cell(v):
    if not v:
        return "-"
    return "%.1f (%.1f, %.1f)" % (statistics.median(v), min(v), max(v))


rows = [("metric", "opus tok/s median (min, max)",
         "llama.cpp tok/s median (min, max)", "ratio opus/llama")]
for m in ("prefill", "decode"):
    o, l = res.get(("opus", m), []), res.get(("llama", m), [])
    ratio = "%.2fx" % (statistics.median(o) / statistics.median(l)) if o and l else "-"
    rows.append((labels[m], cell(o), cell(l), ratio))
w = [max(len(r[i]) for r in rows) for i in range(4)]
for k, r in enumerate(rows):
    print("| " + " | ".join(r[i].ljust(w[i]) for i in range(4)) + " |")
    if k == 0:
        print("|" + "|".join("-" * (w[i] + 2) for i in range(4)) + "|")
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
ncpu=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
if awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v n="$ncpu" -v t="$threads" \
	'BEGIN { exit !(l + 0 > n - t + 0.5) }'; then
	echo "warning: the machine was busy (load above what $threads benchmark threads on $ncpu CPUs leave);"
	echo "  llama.cpp's spinning thread barrier loses far more than opus_engine when its threads"
	echo "  are descheduled, so these ratios overstate opus; rerun on an idle machine"
fi
