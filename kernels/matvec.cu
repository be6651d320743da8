/*
 * matvec.cu - decode matrix-vector products on quantized weights, the
 * weights dequantized in registers as they are read (opus_dequant.h).
 *
 * One warp per output row, up to OPUS_K_MATVEC_TOKENS tokens per pass over
 * the row, so a decode batch of 8 reads each weight once.  Lane l takes the
 * row's 32-element chunks l, l + 32, l + 64, ...; for each token it adds the
 * chunk's dot product (FMAs in element order, from 0) to its partial sum,
 * and the 32 partial sums are added by a fixed xor butterfly.  A token's
 * result is the same whatever else is in the launch.
 *
 * Block b works on row block b / gy and token groups b % gy, b % gy + gy,
 * ...: the gy blocks that read the same rows for different token groups
 * have adjacent indices, so they run at about the same time and the rows
 * come from DRAM once per step (L2 serves the others) rather than once per
 * group of 8 tokens.
 */
#include "common.cuh"

#define MV_WARPS 4				/* rows per block */
#define MV_T OPUS_K_MATVEC_TOKENS

template <int T>
__global__ void __launch_bounds__(MV_WARPS * 32)
matvec_kernel(const uint8_t *__restrict__ W, size_t row_bytes, int64_t n_in,
			  int64_t n_out, const float *__restrict__ x, size_t ldx, int n_tok,
			  float *__restrict__ y, size_t ldy, const float *__restrict__ bias,
			  int accumulate, int gy)
{
	int			lane = threadIdx.x & 31;
	int64_t		r = (int64_t) (blockIdx.x / (unsigned int) gy) * MV_WARPS + (threadIdx.x >> 5);
	int64_t		n_chunks = n_in / OPUS_DQ_CHUNK;
	int			n_groups = (n_tok + MV_T - 1) / MV_T;
	const uint8_t *row;

	/* a whole warp leaves together; there is no block-wide barrier */
	if (r >= n_out)
		return;
	row = W + (size_t) r * row_bytes;
	for (int tg = (int) (blockIdx.x % (unsigned int) gy); tg < n_groups; tg += gy)
	{
		int			t0 = tg * MV_T;
		int			nt = n_tok - t0 < MV_T ? n_tok - t0 : MV_T;
		float		acc[MV_T];

#pragma unroll
		for (int i = 0; i < MV_T; i++)
			acc[i] = 0.0f;
		for (int64_t c = lane; c < n_chunks; c += 32)
		{
			float		w[OPUS_DQ_CHUNK];

			opus_dq_chunk(T, row, c, w);
#pragma unroll
			for (int i = 0; i < MV_T; i++)
			{
				if (i < nt)
				{
					const float4 *xp = (const float4 *) (x + (size_t) (t0 + i) * ldx +
														 (size_t) c * OPUS_DQ_CHUNK);
					float		s = 0.0f;

#pragma unroll
					for (int j = 0; j < OPUS_DQ_CHUNK / 4; j++)
					{
						float4		v = xp[j];

						s = fmaf(w[4 * j], v.x, s);
						s = fmaf(w[4 * j + 1], v.y, s);
						s = fmaf(w[4 * j + 2], v.z, s);
						s = fmaf(w[4 * j + 3], v.w, s);
					}
					acc[i] = __fadd_rn(acc[i], s);
				}
			}
		}
#pragma unroll
		for (int i = 0; i < MV_T; i++)
		{
			float		a = acc[i];

			/* a + b == b + a exactly, so every lane ends with the same sum */
			for (int off = 16; off > 0; off >>= 1)
				a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, off));
			acc[i] = a;
		}
#pragma unroll
		for (int i = 0; i < MV_T; i++)
		{
			if (i < nt && lane == i)
			{
				float	   *d = y + (size_t) (t0 + i) * ldy + r;
				float		v = acc[i];

				if (bias)
					v = __fadd_rn(v, bias[r]);
				*d = accumulate ? __fadd_rn(*d, v) : v;
			}
		}
	}
}

extern "C" cudaError_t
opus_k_matvec(cudaStream_t stream, int type, const uint8_t *W, size_t row_bytes,
			  int64_t n_in, int64_t n_out, const float *x, size_t ldx, int n_tok,
			  float *y, size_t ldy, const float *bias, int accumulate)
{
	int64_t		row_blocks;
	int64_t		gy;
	int			n_groups = (n_tok + MV_T - 1) / MV_T;

	if (n_tok <= 0 || n_out <= 0)
		return cudaSuccess;
	if (n_in % OPUS_DQ_CHUNK != 0 || ldx % 4 != 0 || ((uintptr_t) x & 15) != 0)
		return cudaErrorInvalidValue;
	/* grid.x = row blocks x gy token-group slots, under the 2^31 - 1 limit */
	row_blocks = (int64_t) opus_k_grid(n_out, MV_WARPS);
	gy = n_groups;
	if (gy > INT32_MAX / row_blocks)
		gy = INT32_MAX / row_blocks;
	if (gy < 1)
		return cudaErrorInvalidValue;
	return opus_k_dispatch_type(type, [&]<int T> () {
		matvec_kernel<T><<<(unsigned int) (row_blocks * gy), MV_WARPS * 32, 0, stream>>>(
			W, row_bytes, n_in, n_out, x, ldx, n_tok, y, ldy, bias, accumulate, (int) gy);
	});
}
