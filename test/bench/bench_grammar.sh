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
#
# Then the compile time of each schema: the schema above and every schema of
# the converter's corpus (test/golden/json_schema/corpus.py) that converts,
# ours (JSON Schema -> GBNF, and GBNF -> automaton) against llama.cpp's
# grammar parse of the same GBNF text (llama_sampler_init_grammar), medians
# of 5.
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

# compile time of each schema
mkdir -p "$work/schemas" "$work/gbnf"
cp "$schema" "$work/schemas/000.json"
echo "$(basename "$schema")" >"$work/names.txt"
"$python" - "$work/schemas" >>"$work/names.txt" <<'EOF'
import json, sys
sys.path.insert(0, "test/golden/json_schema")
import corpus
n = 0
for c in corpus.CASES:
    if "error" in c:
        continue
    n += 1
    with open("%s/%03d.json" % (sys.argv[1], n), "w") as f:
        json.dump(c["schema"], f)
    print(c["name"])
EOF
build/bench/bench_grammar --compile "$work/gbnf" "$work"/schemas/*.json >"$work/ctimes.txt"
n_schemas=$(wc -l <"$work/ctimes.txt")
if "$python" -c 'import llama_cpp' 2>/dev/null; then
	"$python" test/bench/bench_grammar_llama.py --model "$model" --compile "$work/gbnf" "$n_schemas" \
		>"$work/llama_ctimes.txt"
else
	: >"$work/llama_ctimes.txt"
fi

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
	printf "%-6s %11s %11s %7s %11s %11s %7s %11s %11s %11s %11s %9s\n", "batch", "opus free", "opus json",
		"json/free", "opus json", "json masks", "helper", "mask wait", "mask wait", "llama free", "llama json", "opus/llama"
	printf "%-6s %11s %11s %7s %11s %11s %7s %11s %11s %11s %11s %9s\n", "", "tok/s", "tok/s", "", "1st round",
		"after pass", "share", "us/step", "after pass", "tok/s", "tok/s", "json"
	next
}
$1 == "masks" { masks = sprintf("mask work alone (one output of %d tokens replayed, fresh grammar): %.1f us/token cold, %.1f us/token warm", $4, $2, $3); next }
{
	printf "%-6s %11.1f %11.1f %6.0f%% %11.1f %11.1f %6.0f%% %11.1f %11.1f %11.1f %11.1f %8.2fx\n", $1, $2, $3, $4 + 0, $5,
		$8, $9 + 0, $10, $11, lf, lj, (lj > 0 ? $3 / lj : 0)
}
END { if (masks != "") print "\n" masks }' "$work/opus.txt"
echo
echo "json masks after pass: the masks computed over the thread pool after the forward pass (the"
echo "helper thread off); helper share: the masks the helper computed during the pass (median);"
echo "mask wait: step time spent on masks once the forward pass is done, us per step (median), with the"
echo "helper and with it off."
echo "llama.cpp generates one sequence at a time (llama-cpp-python): its figures are batch 1 in every row."
echo "opus: tokens per request free $(awk 'NR > 1 && $1 != "masks" { printf "%s%s", sep, $6; sep = " / " }' "$work/opus.txt"), json $(awk 'NR > 1 && $1 != "masks" { printf "%s%s", sep, $7; sep = " / " }' "$work/opus.txt") (by batch)"
echo "load average: $load0 (before), $load1 (after)"
echo
echo "== compile time of each schema (medians of 5; llama.cpp: llama_sampler_init_grammar on the same GBNF)"
awk -v names="$work/names.txt" -v llama="$work/llama_ctimes.txt" '
BEGIN {
	while ((getline l < names) > 0) name[++nn] = l
	while ((getline l < llama) > 0) { split(l, f, " "); if (f[1] ~ /^[0-9]+$/) lt[f[1]] = f[2] }
	printf "%-28s %7s %7s %6s %9s %9s %9s %9s\n", "schema", "bytes", "GBNF", "elems", "to GBNF", "compile", "llama.cpp", "llama/ours"
	printf "%-28s %7s %7s %6s %9s %9s %9s %9s\n", "", "", "bytes", "", "ms", "ms", "ms", ""
}
{
	ours = $5 + $6
	l = ($1 in lt) ? lt[$1] : 0
	printf "%-28s %7d %7d %6d %9.3f %9.3f %9.3f %8.1fx\n", substr(name[$1], 1, 28), $2, $3, $4, $5, $6, l,
		(ours > 0 && l > 0 ? l / ours : 0)
	sum += ours; if (ours > max) max = ours; suml += l; n++
}
END { if (n) printf "%d schemas: ours %.3f ms mean (%.3f ms max), llama.cpp %.3f ms mean\n", n, sum / n, max, suml / n }
' "$work/ctimes.txt"
