/*
 * cuda_runtime.h (test/gpu/emu) - a stand-in for the CUDA headers that lets
 * the device code of kernels/ compile as host C++ and run on the CPU: a
 * block's threads run on a pool of persistent std::threads (emu_globals.cc),
 * __syncthreads is a block barrier,
 * __shfl_xor_sync an exchange through a per-warp barrier, __shared__
 * variables statics (blocks run one after another), the _rn intrinsics
 * plain float operations (built with -ffp-contract=off), half conversions
 * F16C's round-to-nearest.  expf/fmaf are the host's, so results match the
 * GPU's within tolerances, not bit for bit.  For reviews without a GPU
 * (test/gpu/emu/run.sh); nothing in the engine uses it.
 */
#ifndef EMU_CUDA_RUNTIME_H
#define EMU_CUDA_RUNTIME_H
#include <cuda_runtime_api.h>
#include <vector_types.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
#include <barrier>
#include <thread>
#include <vector>
#include <functional>
#include <atomic>
#include <stdio.h>
#include <stdlib.h>
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#undef __restrict__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(x)
#define __restrict__ __restrict
#define __CUDA_ARCH__ 900

struct emu_idx { unsigned int x, y, z; };
extern thread_local emu_idx threadIdx, blockIdx;
extern emu_idx blockDim, gridDim;
extern std::barrier<> *emu_block_barrier;
extern std::barrier<> *emu_warp_barrier[32];
extern float emu_shfl_buf[32][32];

static inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }
static inline float __shfl_xor_sync(unsigned, float v, int off)
{
	int t = threadIdx.x, w = t >> 5, l = t & 31;
	float r;
	emu_shfl_buf[w][l] = v;
	emu_warp_barrier[w]->arrive_and_wait();
	r = emu_shfl_buf[w][l ^ off];
	emu_warp_barrier[w]->arrive_and_wait();
	return r;
}
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
static inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

struct __half { uint16_t h; };
struct __half2 { __half x, y; };
static inline __half __float2half_rn(float f) { __half r; r.h = _cvtss_sh(f, 0); return r; }
static inline float __half2float(__half h) { return _cvtsh_ss(h.h); }
static inline __half2 __floats2half2_rn(float a, float b) { __half2 r; r.x = __float2half_rn(a); r.y = __float2half_rn(b); return r; }

/* run the grid block by block on a pool of EMU_POOL persistent threads */
#define EMU_POOL 256
void emu_run_block(int nthr, const std::function<void(int)> &job);

template <typename K, typename... A>
static void emu_launch(K kern, dim3 g, dim3 b, size_t smem, cudaStream_t s, A... args)
{
	int nthr = (int) (b.x * b.y * b.z);
	if (b.y != 1 || b.z != 1 || nthr > EMU_POOL || nthr % 32 != 0) { fprintf(stderr, "emu: block shape\n"); abort(); }
	if (g.x == 0 || g.y == 0 || g.z == 0 || g.y > 65535 || g.z > 65535) { fprintf(stderr, "emu: grid %u %u %u\n", g.x, g.y, g.z); abort(); }
	gridDim = {g.x, g.y, g.z};
	blockDim = {b.x, b.y, b.z};
	for (unsigned bz = 0; bz < g.z; bz++)
	for (unsigned by = 0; by < g.y; by++)
	for (unsigned bx = 0; bx < g.x; bx++)
	{
		std::barrier<> bb(nthr);
		emu_block_barrier = &bb;
		for (int w = 0; w < nthr / 32; w++)
			emu_warp_barrier[w] = new std::barrier<>(32);
		emu_run_block(nthr, [&](int t) {
			threadIdx = {(unsigned) t, 0, 0};
			blockIdx = {bx, by, bz};
			kern(args...);
		});
		for (int w = 0; w < nthr / 32; w++)
			delete emu_warp_barrier[w];
	}
}
#endif
