/*
 * elementwise.cu - SwiGLU, argmax over rows (greedy sampling on the device,
 * and the kernel checks), and which weight types the kernels handle.
 */
#include "common.cuh"

#define EW_THREADS 256
#define AM_THREADS 256

extern "C" int
opus_k_type_supported(int type)
{
	return opus_dq_block_size(type) != 0;
}

__global__ void
swiglu_kernel(const float *__restrict__ g, const float *__restrict__ u, float *__restrict__ h,
			  int64_t n)
{
	int64_t		i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
	float		x;

	if (i >= n)
		return;
	x = g[i];
	h[i] = __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, expf(-x))), u[i]);
}

extern "C" cudaError_t
opus_k_swiglu(cudaStream_t stream, const float *g, const float *u, float *h, int64_t n)
{
	if (n <= 0)
		return cudaSuccess;
	swiglu_kernel<<<opus_k_grid(n, EW_THREADS), EW_THREADS, 0, stream>>>(g, u, h, n);
	return cudaGetLastError();
}

__global__ void __launch_bounds__(AM_THREADS)
argmax_kernel(const float *__restrict__ x, size_t ldx, int n_rows, int n, int32_t *__restrict__ out)
{
	__shared__ float bv[AM_THREADS];
	__shared__ int bi[AM_THREADS];
	int			tid = threadIdx.x;

	for (int r = blockIdx.x; r < n_rows; r += gridDim.x)
	{
		const float *xr = x + (size_t) r * ldx;
		float		best = -INFINITY;
		int			besti = -1;

		for (int i = tid; i < n; i += AM_THREADS)
		{
			if (besti < 0 || xr[i] > best)
			{
				best = xr[i];
				besti = i;
			}
		}
		bv[tid] = best;
		bi[tid] = besti;
		__syncthreads();
		for (int s = AM_THREADS / 2; s > 0; s >>= 1)
		{
			if (tid < s)
			{
				float		ov = bv[tid + s];
				int			oi = bi[tid + s];

				if (oi >= 0 && (bi[tid] < 0 || ov > bv[tid] || (ov == bv[tid] && oi < bi[tid])))
				{
					bv[tid] = ov;
					bi[tid] = oi;
				}
			}
			__syncthreads();
		}
		if (tid == 0)
			out[r] = bi[0];
		__syncthreads();
	}
}

extern "C" cudaError_t
opus_k_argmax(cudaStream_t stream, const float *x, size_t ldx, int n_rows, int n, int32_t *out)
{
	unsigned int blocks = n_rows < 65536 ? (unsigned int) n_rows : 65536u;

	if (n_rows <= 0 || n <= 0)
		return cudaSuccess;
	argmax_kernel<<<blocks, AM_THREADS, 0, stream>>>(x, ldx, n_rows, n, out);
	return cudaGetLastError();
}
