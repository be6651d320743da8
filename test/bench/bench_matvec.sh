#!/bin/sh
# bench_matvec.sh [REPS] - build test/bench/bench_matvec.c against the
# engine's quant kernels and run it (ours vs llama.cpp's ggml vec_dot vs the
# measured read bandwidth, per weight type, 1 and 2 threads, matrices
# streamed from memory).  TYPES=Q4_K,Q6_K picks types, MAT_MB=1 a matrix that
# stays in the caches, NTOK=8 the tile kernels (8 tokens per weight read),
# CPU_TIME=1 timing by CPU time (a loaded machine), BUILD_ONLY=1 just builds.
# Run from the repo root.
set -e
LIB=$(python3 -c 'import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-cpu.so"))' 2>/dev/null || echo none)
OUT=build/bench
mkdir -p $OUT
CFLAGS="-std=gnu11 -D_GNU_SOURCE -iquote src/engine -O2 -g -fno-math-errno -pthread"
gcc $CFLAGS -mavx2 -mfma -mf16c -c src/engine/quant/quant_avx2.c -o $OUT/quant_avx2.o
gcc $CFLAGS -mavx2 test/bench/bench_matvec.c src/engine/quant/qtype.c src/engine/quant/quant_ref.c \
	src/engine/base/status.c $OUT/quant_avx2.o -o $OUT/bench_matvec -lm -ldl
[ -n "${BUILD_ONLY:-}" ] || $OUT/bench_matvec "$LIB" "${1:-5}"
