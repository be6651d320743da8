/*
 * norm_rope.cu - token embedding lookup (dequantized rows of the table),
 * RMSNorm and RoPE.
 *
 * RMSNorm: one block per row; each thread sums the float squares of a fixed
 * set of elements in double, then a fixed tree adds the threads' sums (the
 * CPU adds all squares in one double sequence: same values up to the last
 * bits of the sum).  RoPE uses the CPU's fused arithmetic and the host's
 * cos/sin tables, so it gives the CPU's results for the same inputs.
 */
#include "common.cuh"

#define NORM_THREADS 256
#define EMBED_THREADS 128
#define EW_THREADS 256

template <int T>
__global__ void
embed_kernel(const uint8_t *__restrict__ table, size_t row_bytes,
			 const int32_t *__restrict__ tok, int n_tok, int n_embd, float *__restrict__ x)
{
	for (int t = blockIdx.x; t < n_tok; t += gridDim.x)
	{
		const uint8_t *row = table + (size_t) tok[t] * row_bytes;

		for (int c = threadIdx.x; c < n_embd / OPUS_DQ_CHUNK; c += blockDim.x)
			opus_dq_chunk(T, row, c, x + (size_t) t * n_embd + (size_t) c * OPUS_DQ_CHUNK);
	}
}

extern "C" cudaError_t
opus_k_embed(cudaStream_t stream, int type, const uint8_t *table, size_t row_bytes,
			 const int32_t *tok, int n_tok, int n_embd, float *x)
{
	unsigned int blocks = n_tok < 65536 ? (unsigned int) n_tok : 65536u;

	if (n_embd % OPUS_DQ_CHUNK != 0)
		return cudaErrorInvalidValue;
	if (n_tok <= 0)
		return cudaSuccess;
	return opus_k_dispatch_type(type, [&]<int T> () {
		embed_kernel<T><<<blocks, EMBED_THREADS, 0, stream>>>(table, row_bytes, tok, n_tok,
															 n_embd, x);
	});
}

__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(const float *__restrict__ x, size_t ldx, const int32_t *__restrict__ rows,
			   int n_rows, const float *__restrict__ w, int n, float eps,
			   float *__restrict__ y, size_t ldy)
{
	__shared__ double red[NORM_THREADS];
	int			tid = threadIdx.x;

	for (int k = blockIdx.x; k < n_rows; k += gridDim.x)
	{
		const float *xr = x + (size_t) (rows ? rows[k] : k) * ldx;
		float	   *yr = y + (size_t) k * ldy;
		double		ss = 0.0;
		float		scale;

		for (int i = tid; i < n; i += NORM_THREADS)
		{
			float		v = xr[i];

			ss += (double) __fmul_rn(v, v);
		}
		red[tid] = ss;
		__syncthreads();
		for (int s = NORM_THREADS / 2; s > 0; s >>= 1)
		{
			if (tid < s)
				red[tid] += red[tid + s];
			__syncthreads();
		}
		scale = 1.0f / sqrtf((float) (red[0] / n) + eps);
		for (int i = tid; i < n; i += NORM_THREADS)
			yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
		/* red[0] is read above: wait before the next row overwrites it */
		__syncthreads();
	}
}

extern "C" cudaError_t
opus_k_rmsnorm(cudaStream_t stream, const float *x, size_t ldx, const int32_t *rows,
			   int n_rows, const float *w, int n, float eps, float *y, size_t ldy)
{
	unsigned int blocks = n_rows < 65536 ? (unsigned int) n_rows : 65536u;

	if (n_rows <= 0)
		return cudaSuccess;
	rmsnorm_kernel<<<blocks, NORM_THREADS, 0, stream>>>(x, ldx, rows, n_rows, w, n, eps, y, ldy);
	return cudaGetLastError();
}

__global__ void
rope_kernel(float *__restrict__ v, size_t ld, int n_tok, int n_heads, int head_dim,
			int half, int neox, const float *__restrict__ cs, const float *__restrict__ sn)
{
	int64_t		idx = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
	int64_t		t;
	int			h,
				i,
				i0,
				i1;
	float	   *xv;
	float		c,
				s,
				x0,
				x1;

	if (idx >= (int64_t) n_tok * n_heads * half)
		return;
	i = (int) (idx % half);
	h = (int) ((idx / half) % n_heads);
	t = idx / ((int64_t) half * n_heads);
	xv = v + (size_t) t * ld + (size_t) h * head_dim;
	i0 = neox ? i : 2 * i;
	i1 = neox ? i + half : 2 * i + 1;
	c = cs[(size_t) t * half + i];
	s = sn[(size_t) t * half + i];
	x0 = xv[i0];
	x1 = xv[i1];
	xv[i0] = fmaf(x0, c, -__fmul_rn(x1, s));
	xv[i1] = fmaf(x0, s, __fmul_rn(x1, c));
}

extern "C" cudaError_t
opus_k_rope(cudaStream_t stream, float *v, size_t ld, int n_tok, int n_heads, int head_dim,
			int rope_dim, int neox, const float *cs, const float *sn)
{
	int			half = rope_dim / 2;
	int64_t		n = (int64_t) n_tok * n_heads * half;

	if (n <= 0)
		return cudaSuccess;
	rope_kernel<<<opus_k_grid(n, EW_THREADS), EW_THREADS, 0, stream>>>(v, ld, n_tok, n_heads,
																		head_dim, half, neox,
																		cs, sn);
	return cudaGetLastError();
}
