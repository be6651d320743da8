#!/usr/bin/env bash
# bench_embed.sh - sentence embeddings per second: the engine's BERT encoder
# (opus_engine embed, model/model_bert.c) against llama.cpp
# (llama-cpp-python, embedding=True) on the same GGUF file, in the same run.
#
# Two workloads (test/bench/bench_embed.py texts): 1,000 short texts (10-60
# tokens) and 200 long ones (about 400 tokens).  Each side loads the model
# once per round, then embeds all texts of a workload in one call (the
# engine packs inputs into forward passes of up to 4,096 tokens; llama.cpp
# batches across inputs up to n_batch = 512 tokens, its default: a larger
# batch costs it more, as every token of a batch attends over the whole
# batch under a mask); only that call is
# timed (tokenizing included, loading not).  Every figure is the median over
# ROUNDS rounds; the load average is printed with the table (the machine
# may be shared: rerun when it is busy).
#
# usage: test/bench/bench_embed.sh
# Env: MODEL (default models/all-MiniLM-L6-v2.gguf, make model-minilm),
# THREADS (2), ROUNDS (3), SKIP_LLAMA (1 = the engine only).
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-models/all-MiniLM-L6-v2.gguf}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
ENGINE=build/opus_engine
[ -f "$MODEL" ] || { echo "bench_embed: $MODEL absent (make model-minilm)" >&2; exit 1; }
[ -x "$ENGINE" ] || make -s "$ENGINE"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 test/bench/bench_embed.py texts "$tmp"

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-8s %6s %8s | %12s %10s | %12s %10s | %6s\n' workload texts tokens \
	"opus emb/s" "opus tok/s" "llama emb/s" "llama tok/s" ratio
for w in short long; do
	: >"$tmp/opus.$w"
	: >"$tmp/llama.$w"
	for _ in $(seq "$ROUNDS"); do
		# "embed: N texts, T tokens, S s, ..."
		"$ENGINE" embed --model "$MODEL" --threads "$THREADS" --quiet --input "$tmp/$w.txt" \
			2>&1 | awk '/^embed:/ { gsub(",", ""); print $6, $2, $4 }' >>"$tmp/opus.$w"
		if [ "${SKIP_LLAMA:-0}" != 1 ]; then
			python3 test/bench/bench_embed.py llama "$MODEL" "$tmp/$w.txt" "$THREADS" \
				>>"$tmp/llama.$w" 2>/dev/null
		fi
	done
	n=$(head -1 "$tmp/opus.$w" | cut -d' ' -f2)
	ntok=$(head -1 "$tmp/opus.$w" | cut -d' ' -f3)
	os=$(cut -d' ' -f1 "$tmp/opus.$w" | median)
	if [ -s "$tmp/llama.$w" ]; then
		ls=$(cut -d' ' -f1 "$tmp/llama.$w" | median)
	else
		ls=nan
	fi
	awk -v w="$w" -v n="$n" -v t="$ntok" -v os="$os" -v ls="$ls" 'BEGIN {
		printf "%-8s %6d %8d | %12.1f %10.0f | %12s %10s | %6s\n", w, n, t, n / os, t / os,
			(ls == "nan") ? "-" : sprintf("%.1f", n / ls), (ls == "nan") ? "-" : sprintf("%.0f", t / ls),
			(ls == "nan") ? "-" : sprintf("%.2fx", ls / os) }'
done
echo "model $MODEL, $THREADS threads, median of $ROUNDS rounds; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
