#!/bin/sh
# bench_gemma3.sh [-r REPS] [-p PROMPT_TOKENS] [-g GEN_TOKENS]
#
# Gemma 3 270M (Q4_K_M, `make model-gemma3`) prefill and decode tokens/s of
# opus_engine against llama.cpp (llama-cpp-python), with 1 and then 2
# threads, same machine, same run: test/bench/bench_engine.sh on that file
# once per thread count (its table: median / min / max, ratio of medians;
# the load average before and after).  A script that prints, not a
# pass/fail test.  The target, as for SmolLM2: >= 1.0x decode,
# >= 1.5x prefill.
#
# Defaults: 5 repetitions, a 512-token prompt (past the 512-token sliding
# window by the decoded tokens), 128 decoded tokens.  Environment:
# GEMMA3_MODEL (default models/gemma-3-270m-q4_k_m.gguf), and those of
# bench_engine.sh (OPUS_ENGINE, PYTHON).
set -eu

reps=5
n_pp=512
n_tg=128
model=${GEMMA3_MODEL:-models/gemma-3-270m-q4_k_m.gguf}
here=$(dirname "$0")

while getopts r:p:g:h opt; do
	case $opt in
		r) reps=$OPTARG ;;
		p) n_pp=$OPTARG ;;
		g) n_tg=$OPTARG ;;
		*) echo "usage: $0 [-r REPS] [-p PROMPT_TOKENS] [-g GEN_TOKENS]" >&2; exit 2 ;;
	esac
done
[ -f "$model" ] || { echo "$0: $model not found (run make model-gemma3)" >&2; exit 1; }

for t in 1 2; do
	sh "$here/bench_engine.sh" -r "$reps" -t "$t" -m "$model" -p "$n_pp" -g "$n_tg"
	echo
done
