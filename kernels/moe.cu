/*
 * moe.cu - the device side of a mixture-of-experts layer: gathering each
 * (token, choice) pair's input row into its expert's group, and combining a
 * token's expert outputs.  Routing runs on the host with moe.c's code (the
 * router logits come back, the groups go down); the expert products are the
 * ordinary matvec kernel over each group.
 *
 * The combine adds a token's choices in choice order, with the CPU's
 * arithmetic (acc += w * y, then out += acc), so the result depends only on
 * the token's own routing and expert outputs.
 */
#include "common.cuh"

#define EW_THREADS 256

__global__ void
gather_rows_kernel(const float *__restrict__ src, size_t ld_src, const int32_t *__restrict__ idx,
				   int n_rows, int64_t n_cols, float *__restrict__ dst, size_t ld_dst)
{
	int64_t		i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
	int64_t		r,
				c;

	if (i >= (int64_t) n_rows * n_cols)
		return;
	r = i / n_cols;
	c = i % n_cols;
	dst[(size_t) r * ld_dst + c] = src[(size_t) idx[r] * ld_src + c];
}

extern "C" cudaError_t
opus_k_gather_rows(cudaStream_t stream, const float *src, size_t ld_src, const int32_t *idx,
				   int n_rows, int64_t n_cols, float *dst, size_t ld_dst)
{
	int64_t		n = (int64_t) n_rows * n_cols;

	if (n <= 0)
		return cudaSuccess;
	gather_rows_kernel<<<opus_k_grid(n, EW_THREADS), EW_THREADS, 0, stream>>>(
		src, ld_src, idx, n_rows, n_cols, dst, ld_dst);
	return cudaGetLastError();
}

__global__ void
moe_combine_kernel(const float *__restrict__ y, size_t ld_y, const int32_t *__restrict__ pair_row,
				   const float *__restrict__ w, int n_tok, int n_used, int64_t n,
				   float *__restrict__ out, size_t ld_out)
{
	int64_t		i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
	int64_t		t,
				c;
	float		acc = 0.0f;

	if (i >= (int64_t) n_tok * n)
		return;
	t = i / n;
	c = i % n;
	for (int k = 0; k < n_used; k++)
	{
		size_t		p = (size_t) t * n_used + k;

		acc = __fadd_rn(acc, __fmul_rn(w[p], y[(size_t) pair_row[p] * ld_y + c]));
	}
	out[(size_t) t * ld_out + c] = __fadd_rn(out[(size_t) t * ld_out + c], acc);
}

extern "C" cudaError_t
opus_k_moe_combine(cudaStream_t stream, const float *y, size_t ld_y, const int32_t *pair_row,
				   const float *w, int n_tok, int n_used, int64_t n, float *out, size_t ld_out)
{
	int64_t		total = (int64_t) n_tok * n;

	if (total <= 0)
		return cudaSuccess;
	moe_combine_kernel<<<opus_k_grid(total, EW_THREADS), EW_THREADS, 0, stream>>>(
		y, ld_y, pair_row, w, n_tok, n_used, n, out, ld_out);
	return cudaGetLastError();
}
