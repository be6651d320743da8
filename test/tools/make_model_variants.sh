#!/bin/sh
# make_model_variants.sh [TYPE ...] - write the default model in every tensor
# type with our own quantizer, for the golden logits check
# (test/unit/test_golden_logits.c, goldens in test/golden/logits/); with
# SRC and NAME, another model (make golden-embed: all-MiniLM-L6-v2 in F16
# and Q8_0 for test/unit/test_bert.c, goldens in test/golden/embed/).
#
#   build/opus_engine quantize models/SmolLM2-135M-Instruct.Q4_1.gguf \
#       models/smollm2-<type>.gguf <TYPE>
#
# for TYPE in F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K (or the
# types given as arguments).  A file is rewritten when it is missing or older
# than the source model or build/opus_engine.  Prints each file's SHA-256;
# the goldens record the hash each tf_<type>.txt was made on, so a change in
# the quantizer's output shows up as a clear hash mismatch in the check.
#
# Environment: OPUS_ENGINE (default build/opus_engine), SRC (default
# models/SmolLM2-135M-Instruct.Q4_1.gguf), OUTDIR (default models), NAME
# (default smollm2: files OUTDIR/NAME-<type>.gguf).
set -eu

engine=${OPUS_ENGINE:-build/opus_engine}
src=${SRC:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
outdir=${OUTDIR:-models}
name=${NAME:-smollm2}

if [ $# -eq 0 ]; then
	set -- F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K
fi
if [ ! -x "$engine" ]; then
	echo "make_model_variants.sh: $engine not found (run make engine)" >&2
	exit 1
fi
if [ ! -f "$src" ]; then
	echo "make_model_variants.sh: $src not found (run make model)" >&2
	exit 1
fi
mkdir -p "$outdir"

for type in "$@"; do
	lower=$(printf '%s' "$type" | tr 'A-Z' 'a-z')
	out="$outdir/$name-$lower.gguf"
	if [ -f "$out" ] && [ ! "$out" -ot "$src" ] && [ ! "$out" -ot "$engine" ]; then
		:
	else
		rm -f "$out.tmp"
		if ! "$engine" quantize "$src" "$out.tmp" "$type" >/dev/null; then
			rm -f "$out.tmp"
			echo "make_model_variants.sh: quantize to $type failed" >&2
			exit 1
		fi
		mv "$out.tmp" "$out"
	fi
	sha256sum "$out"
done
