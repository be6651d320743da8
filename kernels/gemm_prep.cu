/*
 * gemm_prep.cu - the element-wise kernels around the cuBLAS products of
 * prefill: weight rows dequantized to F16 (opus_dequant.h, then rounded to
 * nearest), activations converted to F16 in fixed-size token tiles padded
 * with zeros, and the F32 result tile added (with the bias) into its rows.
 */
#include "common.cuh"

#define EW_THREADS 256

template <int T>
__global__ void
dequant_f16_kernel(const uint8_t *__restrict__ W, size_t row_bytes, int64_t n_in,
				   int64_t r0, int64_t n_rows, __half *__restrict__ out)
{
	int64_t		cpr = n_in / OPUS_DQ_CHUNK;
	int64_t		idx = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
	int64_t		r,
				c;
	float		y[OPUS_DQ_CHUNK];
	__half2    *o;

	if (idx >= n_rows * cpr)
		return;
	r = idx / cpr;
	c = idx % cpr;
	opus_dq_chunk(T, W + (size_t) (r0 + r) * row_bytes, c, y);
	o = (__half2 *) (out + (size_t) r * n_in + (size_t) c * OPUS_DQ_CHUNK);
#pragma unroll
	for (int j = 0; j < OPUS_DQ_CHUNK / 2; j++)
		o[j] = __floats2half2_rn(y[2 * j], y[2 * j + 1]);
}

extern "C" cudaError_t
opus_k_dequant_f16(cudaStream_t stream, int type, const uint8_t *W, size_t row_bytes,
				   int64_t n_in, int64_t r0, int64_t n_rows, void *out)
{
	int64_t		n = n_rows * (n_in / OPUS_DQ_CHUNK);

	if (n_in % OPUS_DQ_CHUNK != 0)
		return cudaErrorInvalidValue;
	if (n <= 0)
		return cudaSuccess;
	return opus_k_dispatch_type(type, [&]<int T> () {
		dequant_f16_kernel<T><<<opus_k_grid(n, EW_THREADS), EW_THREADS, 0, stream>>>(
			W, row_bytes, n_in, r0, n_rows, (__half *) out);
	});
}

__global__ void
to_f16_kernel(const float *__restrict__ x, size_t ldx, int n_rows, int n_rows_pad,
			  int64_t n_cols, __half *__restrict__ out)
{
	int64_t		idx = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
	int64_t		t,
				k;

	if (idx >= (int64_t) n_rows_pad * n_cols)
		return;
	t = idx / n_cols;
	k = idx % n_cols;
	out[idx] = __float2half_rn(t < n_rows ? x[(size_t) t * ldx + k] : 0.0f);
}

extern "C" cudaError_t
opus_k_to_f16(cudaStream_t stream, const float *x, size_t ldx, int n_rows, int n_rows_pad,
			  int64_t n_cols, void *out)
{
	int64_t		n = (int64_t) n_rows_pad * n_cols;

	if (n <= 0)
		return cudaSuccess;
	to_f16_kernel<<<opus_k_grid(n, EW_THREADS), EW_THREADS, 0, stream>>>(
		x, ldx, n_rows, n_rows_pad, n_cols, (__half *) out);
	return cudaGetLastError();
}

__global__ void
store_tile_kernel(const float *__restrict__ c, size_t ldc, int n_tok, int64_t m,
				  float *__restrict__ y, size_t ldy, int64_t col0,
				  const float *__restrict__ bias, int accumulate)
{
	int64_t		idx = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
	int64_t		t,
				i;
	float		v;
	float	   *d;

	if (idx >= (int64_t) n_tok * m)
		return;
	t = idx / m;
	i = idx % m;
	v = c[(size_t) t * ldc + i];
	if (bias)
		v = __fadd_rn(v, bias[col0 + i]);
	d = y + (size_t) t * ldy + col0 + i;
	*d = accumulate ? __fadd_rn(*d, v) : v;
}

extern "C" cudaError_t
opus_k_store_tile(cudaStream_t stream, const float *c, size_t ldc, int n_tok, int64_t m,
				  float *y, size_t ldy, int64_t col0, const float *bias, int accumulate)
{
	int64_t		n = (int64_t) n_tok * m;

	if (n <= 0)
		return cudaSuccess;
	store_tile_kernel<<<opus_k_grid(n, EW_THREADS), EW_THREADS, 0, stream>>>(
		c, ldc, n_tok, m, y, ldy, col0, bias, accumulate);
	return cudaGetLastError();
}
