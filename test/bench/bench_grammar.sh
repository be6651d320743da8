#!/bin/sh
# bench_grammar.sh [-r ROUNDS] [-t THREADS] [-m MODEL] [-g GEN_TOKENS] [-s SCHEMA] [-b LEVELS]
#
# Structured output's cost: decode tokens/s with and without a JSON Schema
# constraint, in opus_pg's engine at batch 1 and 16 (test/bench/bench_grammar.c:
# the scheduler, no server) and in llama.cpp (llama-cpp-python, LlamaGrammar
# on the same GBNF text, test/bench/bench_grammar_llama.py; it generates one
# sequence at a time), same model file, same prompts, same run.  Also the
# time to turn the schema into GBNF and to compile it.  Prints a table with
# the ratios and the load average; a script that prints, not a pass/fail
# test.  Targets (issue 20): constrained >= 90% of unconstrained at batch 1
# and 16, and >= 3x llama.cpp's constrained decode.
#
# Defaults: 3 rounds (medians), 2 threads, the default model, 96 tokens,
# test/bench/grammar/people.json (an object with an array of at least 40
# objects of strings, integers, an email and an enum: every output runs to
# GEN_TOKENS), batch sizes 1,16.  Environment: PYTHON (default python3).
set -eu

rounds=3
threads=2
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
gen=96
schema=test/bench/grammar/people.json
levels=1,16
python=${PYTHON:-python3}

while getopts r:t:m:g:s:b:h opt; do
	case $opt in
		r) rounds=$OPTARG ;;
		t) threads=$OPTARG ;;
		m) model=$OPTARG ;;
		g) gen=$OPTARG ;;
		s) schema=$OPTARG ;;
		b) levels=$OPTARG ;;
		*) echo "usage: $0 [-r ROUNDS] [-t THREADS] [-m MODEL] [-g GEN_TOKENS] [-s SCHEMA] [-b LEVELS]" >&2; exit 2 ;;
	esac
done

# the CPU-only objects (with CUDA, `make engine` builds backend.o elsewhere)
make -s engine build/engine/model/backend.o
mkdir -p build/bench
gcc -std=gnu11 -D_GNU_SOURCE -iquote src/engine -iquote src -O2 -g -fno-math-errno \
	test/bench/bench_grammar.c build/engine/*/*.o build/shared/*.o -o build/bench/bench_grammar \
	-lm -lpthread -lutf8proc

work=$(mktemp -d /tmp/bench_grammar.XXXXXX)
trap 'rm -rf "$work"' EXIT
build/bench/bench_grammar --gbnf "$schema" >"$work/schema.gbnf" 2>"$work/compile.txt"

load0=$(cut -d' ' -f1-3 /proc/loadavg)
build/bench/bench_grammar "$model" "$schema" -t "$threads" -g "$gen" -r "$rounds" -b "$levels" >"$work/opus.txt"
if "$python" -c 'import llama_cpp' 2>/dev/null; then
	"$python" test/bench/bench_grammar_llama.py --model "$model" --grammar "$work/schema.gbnf" \
		--threads "$threads" --gen-tokens "$gen" --rounds "$rounds" >"$work/llama.txt"
else
	echo "llama-cpp-python is not installed: llama.cpp's columns are 0" >&2
	: >"$work/llama.txt"
fi
load1=$(cut -d' ' -f1-3 /proc/loadavg)

llama_free=$(sed -n 's/^free tok_s=//p' "$work/llama.txt")
llama_json=$(sed -n 's/^json tok_s=//p' "$work/llama.txt")
llama_free=${llama_free:-0}
llama_json=${llama_json:-0}

echo "== structured output: decode tok/s, $threads threads, $gen tokens, median of $rounds rounds"
echo "model $model, schema $schema"
cat "$work/compile.txt"
echo
awk -v lf="$llama_free" -v lj="$llama_json" '
NR == 1 {
	printf "%-6s %11s %11s %7s %11s %11s %11s %9s\n", "batch", "opus free", "opus json",
		"json/free", "opus json", "llama free", "llama json", "opus/llama"
	printf "%-6s %11s %11s %7s %11s %11s %11s %9s\n", "", "tok/s", "tok/s", "", "1st round", "tok/s", "tok/s", "json"
	next
}
$1 == "masks" { masks = sprintf("mask work alone (one output of %d tokens replayed, fresh grammar): %.1f us/token cold, %.1f us/token warm", $4, $2, $3); next }
{
	printf "%-6s %11.1f %11.1f %6.0f%% %11.1f %11.1f %11.1f %8.2fx\n", $1, $2, $3, $4 + 0, $5,
		lf, lj, (lj > 0 ? $3 / lj : 0)
}
END { if (masks != "") print "\n" masks }' "$work/opus.txt"
echo
echo "llama.cpp generates one sequence at a time (llama-cpp-python): its figures are batch 1 in every row."
echo "opus: tokens per request free $(awk 'NR > 1 && $1 != "masks" { printf "%s%s", sep, $6; sep = " / " }' "$work/opus.txt"), json $(awk 'NR > 1 && $1 != "masks" { printf "%s%s", sep, $7; sep = " / " }' "$work/opus.txt") (by batch)"
echo "load average: $load0 (before), $load1 (after)"
