#!/bin/bash
# run.sh - the GPU check (issue 8, test/gpu/README): the one script a
# session with an NVIDIA GPU runs.  Builds the CUDA engine, checks every
# kernel against the CPU reference, generates random-weight models with the
# project's own generator (no network: `opus_engine genmodel`), compares
# whole forward passes on the GPU and the CPU, checks the GPU's batch
# invariance, and prints the throughput table against the memory-bandwidth
# bound.  Meant to finish in under 5 minutes on an H200.
#
# Environment:
#   GPU_MODELS   where generated models go (default /tmp/opus_gpu_models;
#                about 14 GB for the two 8B-shaped models)
#   BW_GBPS      memory bandwidth for the bound (default 4800, the H200)
#   DEVICE       CUDA device ordinal (default 0)
#   QUICK=1      skip the 8B-shaped and MoE models
#   JOBS         make -j (default: all cores)
#
# Exit status: 0 when every check passed, 1 otherwise, 77 without a GPU.
# Output: one line per step with the elapsed seconds, the checks' own
# output, then the throughput table and a summary.

set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
MODELS=${GPU_MODELS:-/tmp/opus_gpu_models}
BW=${BW_GBPS:-4800}
DEV=${DEVICE:-0}
JOBS=${JOBS:-$(nproc)}
T0=$(date +%s)
FAILED=()
TABLE=$(mktemp)

say() { echo "[$(($(date +%s) - T0))s] $*"; }
fail() { FAILED+=("$1"); say "FAILED: $1"; }

# step NAME TIMEOUT CMD...: run a check, record a failure (77 = skipped)
step()
{
	local name=$1 t=$2 rc
	shift 2
	say "== $name"
	timeout -k 5 "$t" "$@"
	rc=$?
	if [ $rc -eq 77 ]; then
		say "$name: skipped (no GPU)"
		return 77
	elif [ $rc -ne 0 ]; then
		fail "$name (exit $rc)"
	fi
	return $rc
}

# ---- the machine ------------------------------------------------------------
say "opus_pg GPU check at $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores"
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap --format=csv,noheader
else
	say "no nvidia-smi"
fi

# ---- build --------------------------------------------------------------------
# `make gpu` builds build/opus_engine with the CUDA backend and
# build/gpu/test_gpu.  Without pg_config the top-level Makefile may not
# load; engine.mk alone builds the same targets.
say "== build"
# only this GPU's architecture (a quicker build than the default three)
SM=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
ARCHS=()
[ -n "$SM" ] && ARCHS=("CUDA_ARCHS=-gencode arch=compute_$SM,code=sm_$SM -gencode arch=compute_$SM,code=compute_$SM")
if ! make -j"$JOBS" CUDA=1 "${ARCHS[@]}" gpu >/tmp/opus_gpu_build.log 2>&1 &&
	! make -j"$JOBS" -f src/engine/engine.mk CUDA=1 "${ARCHS[@]}" gpu >>/tmp/opus_gpu_build.log 2>&1; then
	tail -30 /tmp/opus_gpu_build.log
	if [ -x build/opus_engine ] && [ -x build/gpu/test_gpu ]; then
		# go on for the information, but a stale binary is not a pass
		fail "build (the checks below ran the binaries already in build/, maybe stale)"
	else
		fail "build"
		exit 1
	fi
fi
# a carried libutf8proc (build/gpu-lib) when the machine lacks it
[ -d build/gpu-lib ] && export LD_LIBRARY_PATH="$ROOT/build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ENGINE=build/opus_engine
TG=build/gpu/test_gpu
say "built: $(ls -la $ENGINE $TG | awk '{print $5, $9}' | tr '\n' ' ')"

# ---- kernels --------------------------------------------------------------------
step kernels 60 $TG kernels --device "$DEV"
if [ $? -eq 77 ]; then
	rm -f "$TABLE"
	exit 77
fi

# ---- models ---------------------------------------------------------------------
mkdir -p "$MODELS"
gen()
{
	local shape=$1 type=$2 out=$3
	shift 3
	[ -s "$out" ] && return 0
	timeout -k 5 240 $ENGINE genmodel --shape "$shape" --type "$type" --out "$out.tmp" \
		--threads "$JOBS" "$@" >/dev/null && mv "$out.tmp" "$out"
}
say "== models into $MODELS ($(df -h "$MODELS" | awk 'NR==2 {print $4}') free)"
TYPES="f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k"
for t in $TYPES; do
	gen tiny "$t" "$MODELS/tiny-$t.gguf" || fail "genmodel tiny $t"
done
gen smollm2-135m q4_1 "$MODELS/smollm2-q4_1.gguf" || fail "genmodel smollm2-135m"
if [ "${QUICK:-0}" != 1 ]; then
	gen llama3-8b q4_k "$MODELS/llama3-8b-q4_k.gguf" || fail "genmodel llama3-8b q4_k"
	gen llama3-8b q8_0 "$MODELS/llama3-8b-q8_0.gguf" || fail "genmodel llama3-8b q8_0"
	gen mixtral-moe q4_k "$MODELS/mixtral-q4_k.gguf" || fail "genmodel mixtral-moe"
fi
ls -la "$MODELS" | awk 'NR > 1 {printf "  %8.1f MiB  %s\n", $5 / 1048576, $9}'

# ---- whole forward passes: GPU vs CPU, and GPU invariance ---------------------------
for t in $TYPES; do
	step "forward tiny-$t" 60 $TG forward --model "$MODELS/tiny-$t.gguf" --device "$DEV" --tokens 64
done
step "forward smollm2-q4_1" 60 $TG forward --model "$MODELS/smollm2-q4_1.gguf" --device "$DEV" --tokens 64
# the real default model when the work tree carries it
if [ -s models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
	step "forward SmolLM2-135M-Instruct" 60 $TG forward --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
		--device "$DEV" --tokens 64
	say "== run on the real model (greedy, cuda vs cpu text)"
	for d in "cuda:$DEV" cpu; do
		echo "--device $d: $(timeout 60 $ENGINE run --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
			--prompt 'The capital of France is' -n 16 --device "$d" 2>/dev/null | tr '\n' ' ')"
	done
fi
if [ "${QUICK:-0}" != 1 ]; then
	# few tokens: the CPU side of an 8B model is slow
	step "forward llama3-8b-q4_k" 120 $TG forward --model "$MODELS/llama3-8b-q4_k.gguf" --device "$DEV" --tokens 8
	step "forward mixtral-q4_k" 120 $TG forward --model "$MODELS/mixtral-q4_k.gguf" --device "$DEV" --tokens 8
fi

# ---- throughput ---------------------------------------------------------------------
bench()
{
	local name=$1
	shift
	say "== bench $name"
	timeout -k 5 150 $TG bench --device "$DEV" --bw "$BW" "$@" | tee -a "$TABLE" ||
		fail "bench $name"
}
bench smollm2-q4_1 --model "$MODELS/smollm2-q4_1.gguf" --batches 1,16,64,256 --prefill 512 --steps 64
if [ "${QUICK:-0}" != 1 ]; then
	bench llama3-8b-q4_k --model "$MODELS/llama3-8b-q4_k.gguf" --batches 1,16,64,256 --prefill 512 --steps 16
	bench llama3-8b-q8_0 --model "$MODELS/llama3-8b-q8_0.gguf" --batches 1,16,64 --prefill 512 --steps 16
	bench mixtral-q4_k --model "$MODELS/mixtral-q4_k.gguf" --batches 1,16,64 --prefill 256 --steps 16
fi
say "== CPU reference for the small model (batch 1 and 16)"
timeout -k 5 60 $TG bench --cpu --model "$MODELS/smollm2-q4_1.gguf" --batches 1,16 --prefill 128 --steps 8 |
	sed 's/^/cpu: /' | tee -a "$TABLE" || fail "bench cpu"

# ---- summary ------------------------------------------------------------------------
echo
echo "==== throughput (bound: ${BW} GB/s / weight bytes read per decode token) ===="
cat "$TABLE"
rm -f "$TABLE"
echo
say "done in $(($(date +%s) - T0)) s"
if [ ${#FAILED[@]} -gt 0 ]; then
	echo "GPU check: ${#FAILED[@]} failed: ${FAILED[*]}"
	exit 1
fi
echo "GPU check: all passed"
exit 0
