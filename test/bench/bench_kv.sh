#!/bin/sh
# bench_kv.sh [-t THREADS] [-r REPS] [-a] - the Q8_0 KV cache against the
# F16 one on the default Q4_1 model.
#
#  1. Accuracy (test/bench/kv_accuracy.c, ~2 minutes on 2 cores): on the 34
#     golden prompts (test/golden/logits), teacher-forced top-1 agreement
#     with llama.cpp and with the F16 cache, mean / max |logit diff| against
#     the F16 cache, greedy 32-token continuations equal to the F16 cache's;
#     a column for the F16 cache in llama.cpp's summation order shows what
#     float reordering alone moves (the noise floor).  -a skips this part.
#  2. Speed (opus_engine bench --kv-type): prefill and decode tokens/s and
#     CPU ms per token, at a 512-token prompt + 128 decoded and at a
#     1536-token prompt + 64 decoded (attention, the part the cache type
#     changes, grows with the context); median of REPS runs each, q8_0 / f16
#     as a ratio.  On a shared machine, compare CPU ms per token.
# A script that prints, not a pass/fail test (test_kv_q8 holds the bounds).
# Defaults: 2 threads, 5 reps.
set -eu

threads=2
reps=5
accuracy=1
while getopts t:r:ah opt; do
	case $opt in
		t) threads=$OPTARG ;;
		r) reps=$OPTARG ;;
		a) accuracy=0 ;;
		*) echo "usage: $0 [-t THREADS] [-r REPS] [-a]" >&2; exit 2 ;;
	esac
done

model=models/SmolLM2-135M-Instruct.Q4_1.gguf
# the CPU-only objects (with CUDA, `make engine` builds backend.o elsewhere)
make -s engine build/engine/model/backend.o
mkdir -p build/bench

if [ "$accuracy" = 1 ]; then
	gcc -std=gnu11 -D_GNU_SOURCE -iquote src/engine -O2 -g -fno-math-errno \
		test/bench/kv_accuracy.c build/engine/*/*.o build/shared/*.o -o build/bench/kv_accuracy -lm -lpthread -lutf8proc
	echo "== accuracy: q8_0 kv against f16 kv, $threads threads"
	build/bench/kv_accuracy "$model" test/golden/logits "$threads"
	echo
fi

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
echo "== speed: opus_engine bench, $threads threads, median of $reps"
printf '%-28s %12s %12s %14s %14s %8s\n' "" "f16 tok/s" "q8_0 tok/s" "f16 cpu ms/t" "q8_0 cpu ms/t" "cpu q8/f16"
for cfg in "512 128" "1536 64"; do
	set -- $cfg
	for t in f16 q8_0; do
		build/opus_engine bench --model "$model" --threads "$threads" --reps "$reps" \
			--prompt-tokens "$1" --gen-tokens "$2" --kv-type "$t" |
			sed -n "s/^\(prefill\|decode\) .*tok_s=\([0-9.]*\) cpu_ms_per_tok=\([0-9.]*\).*/$t \1 \2 \3/p" >>"$tmp"
	done
	for phase in prefill decode; do
		awk -v phase="$phase" -v label="$phase ($1 + $2)" '
			$2 == phase && $1 == "f16" { ft = $3; fc = $4 }
			$2 == phase && $1 == "q8_0" { qt = $3; qc = $4 }
			END { printf "%-28s %12.1f %12.1f %14.3f %14.3f %8.3f\n", label, ft, qt, fc, qc, qc / fc }' "$tmp"
	done
	: >"$tmp"
done
