#!/bin/bash
# run.sh (test/gpu/emu) - the GPU check's kernels (and optionally forward)
# mode with the real device code of kernels/ run on the CPU: every .cu file
# compiled as host C++ against inc/cuda_runtime.h (threads per block,
# barriers, warp exchange), linked with the fake CUDA runtime
# (test/gpu/fake, its launchers renamed away, device buffers of the exact
# size so ASan sees every out-of-bounds access) and the fake cuBLAS, under
# ASan+UBSan.  Slow (a pool thread per CUDA thread of a block): `kernels`
# takes ~2 min on 2 cores.
# For reviews without a GPU; it checks indexing, bounds, barriers and
# results within the stated tolerances, not GPU speed or bit patterns.
#
#   test/gpu/emu/run.sh                       # test_gpu kernels
#   test/gpu/emu/run.sh forward --model F --tokens 8 --cpu-threads 1
set -e
cd "$(dirname "$0")/../../.."
OUT=build/gpu/emu
SAN="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
make -s -f src/engine/engine.mk -f test/test.mk build/gpu/test_gpu_fake build/gpu/fake/libfakecublas.so
mkdir -p $OUT
for f in kernels/*.cu; do
	b=$(basename "$f" .cu)
	# kernel<<<grid, block, smem, stream>>>(args) -> emu_launch(kernel, grid, block, smem, stream, args)
	perl -0pe 's/(\w+(?:<\w+>)?)<<<(.*?)>>>\(/emu_launch($1, $2, /gs' "$f" > $OUT/$b.cc
	g++ -std=c++20 $SAN -ffp-contract=off -mf16c -I test/gpu/emu/inc -iquote kernels \
		-isystem "$CUDA_INC" -w -c $OUT/$b.cc -o $OUT/$b.o
done
g++ -std=c++20 $SAN -I test/gpu/emu/inc -isystem "$CUDA_INC" -w -c test/gpu/emu/emu_globals.cc -o $OUT/emu_globals.o
D=""
for k in type_supported embed rmsnorm matvec dequant_f16 to_f16 store_tile rope kv_store attention \
	swiglu gather_rows moe_combine argmax; do
	D="$D -Dopus_k_$k=fake_opus_k_$k"
done
# the fake runtime with exact-size device buffers and its launchers renamed
sed -e 's/void\t   \*p = aligned_alloc(256, sz > 0 ? sz : 256);/void *p = malloc(n > 0 ? n : 1); sz = n > 0 ? n : 1;/' \
	-e 's/memset(p, 0xFF, sz > 0 ? sz : 256);/memset(p, 0xFF, sz);/' test/gpu/fake/fake_cuda.c > $OUT/fake_cuda_emu.c
grep -q 'malloc(n > 0 ? n : 1)' $OUT/fake_cuda_emu.c || { echo "emu: fake_cuda.c's allocator changed; update run.sh" >&2; exit 1; }
CFL="-std=gnu11 -D_GNU_SOURCE -iquote src/engine -iquote src $SAN -DOPUS_HAVE_CUDA -iquote kernels -isystem $CUDA_INC"
gcc $CFL $D -c $OUT/fake_cuda_emu.c -o $OUT/fake_cuda_emu.o
gcc $CFL -c src/engine/model/backend_cuda.c -o $OUT/backend_cuda.o
gcc $CFL -iquote test/unit -c test/gpu/test_gpu.c -o $OUT/test_gpu.o
g++ $SAN $OUT/test_gpu.o $(ls build/engine-san/*/*.o build/shared-san/*.o | grep -v /backend.o) build/gpu/fake/backend.o \
	$OUT/backend_cuda.o $OUT/fake_cuda_emu.o $(ls $OUT/*.o | grep -v -e test_gpu.o -e fake_cuda_emu.o -e backend_cuda.o) \
	$PWD/build/gpu/fake/libfakecublas.so -Wl,-rpath,$PWD/build/gpu/fake -o $OUT/test_gpu_emu \
	-lm -lpthread -lutf8proc -ldl
export OPUS_CUBLAS_LIB=$PWD/build/gpu/fake/libfakecublas.so
[ $# -eq 0 ] && set -- kernels
exec $OUT/test_gpu_emu "$@"
