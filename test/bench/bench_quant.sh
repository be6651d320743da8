#!/bin/sh
# bench_quant.sh - build test/bench/bench_quant.c against the engine's quant
# kernels and run it against llama-cpp-python's libggml-cpu.so (ours vs
# llama.cpp dot-product throughput per tensor type).  Run from the repo root.
set -e
LIB=$(python3 -c 'import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-cpu.so"))')
OUT=build/bench
mkdir -p $OUT
CFLAGS="-std=gnu11 -D_GNU_SOURCE -iquote src/engine -O2 -g -fno-math-errno"
gcc $CFLAGS -mavx2 -mfma -mf16c -c src/engine/quant/quant_avx2.c -o $OUT/quant_avx2.o
gcc $CFLAGS test/bench/bench_quant.c src/engine/quant/qtype.c src/engine/quant/quant_ref.c \
	src/engine/base/status.c $OUT/quant_avx2.o -o $OUT/bench_quant -lm -lpthread -ldl
$OUT/bench_quant "$LIB"
