/*
 * attention.cu - the paged KV cache on the device: storing a step's K and V
 * (F16, kv.c's layout) and causal attention over a sequence's blocks.
 *
 * Attention: one block of AT_THREADS threads per (token, query head).  The
 * positions 0..pos are taken in chunks of AT_THREADS, one position per
 * thread: score = (q . k) * scale with the FMAs in head-dimension order;
 * the chunk's maximum and sum of exp(score - max) come from fixed trees in
 * shared memory; the running (max, sum, output) is rescaled (online
 * softmax), and thread d adds weight * V[p][d] over the chunk's positions
 * in order.  Nothing depends on the other tokens or heads of the launch,
 * so a token's output is independent of the batch.  Used for decode and for
 * prompt chunks alike: a step's K and V are stored before attention runs,
 * so earlier tokens of the same step are visible and later ones are cut off
 * by the position bound.
 */
#include "common.cuh"

#define AT_THREADS 128
#define EW_THREADS 256

static_assert(OPUS_K_ATTN_MAX_HD <= 2 * AT_THREADS, "two head dimensions per thread at most");

__global__ void
kv_store_kernel(struct opus_k_kv kv, const float *__restrict__ k, const float *__restrict__ v,
				int n_tok)
{
	int64_t		idx = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
	int			hd = kv.head_dim;
	int			d,
				g,
				p,
				slot;
	int64_t		t;
	int32_t		blk;
	uint8_t    *base;
	__half	   *K,
			   *V;
	size_t		src;

	if (idx >= (int64_t) n_tok * kv.n_head_kv * hd)
		return;
	d = (int) (idx % hd);
	g = (int) ((idx / hd) % kv.n_head_kv);
	t = idx / ((int64_t) hd * kv.n_head_kv);
	p = kv.pos[t];
	blk = kv.blocks[kv.bt_off[t] + p / kv.bs];
	slot = p % kv.bs;
	base = kv.pool + (size_t) blk * kv.block_bytes + kv.layer_off;
	K = (__half *) base + (size_t) g * kv.bs * hd;
	V = (__half *) (base + kv.kv_half_bytes) + (size_t) g * kv.bs * hd;
	src = (size_t) t * kv.n_head_kv * hd + (size_t) g * hd + d;
	K[(size_t) d * kv.bs + slot] = __float2half_rn(k[src]);
	V[(size_t) slot * hd + d] = __float2half_rn(v[src]);
}

extern "C" cudaError_t
opus_k_kv_store(cudaStream_t stream, const struct opus_k_kv *kv, const float *k,
				const float *v, int n_tok)
{
	int64_t		n = (int64_t) n_tok * kv->n_head_kv * kv->head_dim;

	if (n <= 0)
		return cudaSuccess;
	kv_store_kernel<<<opus_k_grid(n, EW_THREADS), EW_THREADS, 0, stream>>>(*kv, k, v, n_tok);
	return cudaGetLastError();
}

__global__ void __launch_bounds__(AT_THREADS)
attention_kernel(struct opus_k_kv kv, const float *__restrict__ q, float *__restrict__ out,
				 int n_tok, int n_head, float scale)
{
	__shared__ float qs[OPUS_K_ATTN_MAX_HD];
	__shared__ float sc[AT_THREADS];
	__shared__ float red[AT_THREADS];
	int			tid = threadIdx.x;
	int			h = blockIdx.x;
	int			hd = kv.head_dim;
	int			g = h / (n_head / kv.n_head_kv);
	int			d0 = tid;
	int			d1 = tid + AT_THREADS;

	for (int t = blockIdx.y; t < n_tok; t += gridDim.y)
	{
		const float *qt = q + ((size_t) t * n_head + h) * hd;
		const int32_t *bt = kv.blocks + kv.bt_off[t];
		int			n_kv = kv.pos[t] + 1;
		float		m = -INFINITY;
		float		l = 0.0f;
		float		acc0 = 0.0f;
		float		acc1 = 0.0f;

		for (int d = tid; d < hd; d += AT_THREADS)
			qs[d] = qt[d];
		__syncthreads();
		for (int p0 = 0; p0 < n_kv; p0 += AT_THREADS)
		{
			int			p = p0 + tid;
			int			n_here = n_kv - p0 < AT_THREADS ? n_kv - p0 : AT_THREADS;
			float		s = -INFINITY;
			float		m_new,
						e,
						corr;

			if (p < n_kv)
			{
				const __half *K = (const __half *) (kv.pool + (size_t) bt[p / kv.bs] * kv.block_bytes +
													kv.layer_off) +
					(size_t) g * kv.bs * hd + p % kv.bs;
				float		a = 0.0f;

				for (int d = 0; d < hd; d++)
					a = fmaf(qs[d], __half2float(K[(size_t) d * kv.bs]), a);
				s = __fmul_rn(a, scale);
			}
			/* the chunk's maximum */
			red[tid] = s;
			__syncthreads();
			for (int st = AT_THREADS / 2; st > 0; st >>= 1)
			{
				if (tid < st)
					red[tid] = fmaxf(red[tid], red[tid + st]);
				__syncthreads();
			}
			m_new = fmaxf(m, red[0]);
			__syncthreads();
			/* weights and their sum */
			e = p < n_kv ? expf(s - m_new) : 0.0f;
			sc[tid] = e;
			red[tid] = e;
			__syncthreads();
			for (int st = AT_THREADS / 2; st > 0; st >>= 1)
			{
				if (tid < st)
					red[tid] = __fadd_rn(red[tid], red[tid + st]);
				__syncthreads();
			}
			corr = expf(m - m_new);	/* 0 on the first chunk (m = -inf) */
			l = __fadd_rn(__fmul_rn(l, corr), red[0]);
			acc0 = __fmul_rn(acc0, corr);
			acc1 = __fmul_rn(acc1, corr);
			for (int j = 0; j < n_here; j++)
			{
				int			pp = p0 + j;
				const __half *V = (const __half *) (kv.pool + (size_t) bt[pp / kv.bs] * kv.block_bytes +
													kv.layer_off + kv.kv_half_bytes) +
					((size_t) g * kv.bs + pp % kv.bs) * hd;
				float		wj = sc[j];

				if (d0 < hd)
					acc0 = fmaf(wj, __half2float(V[d0]), acc0);
				if (d1 < hd)
					acc1 = fmaf(wj, __half2float(V[d1]), acc1);
			}
			m = m_new;
			/* sc and red are rewritten by the next chunk (or token) */
			__syncthreads();
		}
		{
			float	   *o = out + ((size_t) t * n_head + h) * hd;

			if (d0 < hd)
				o[d0] = acc0 / l;
			if (d1 < hd)
				o[d1] = acc1 / l;
		}
	}
}

extern "C" cudaError_t
opus_k_attention(cudaStream_t stream, const struct opus_k_kv *kv, const float *q, float *out,
				 int n_tok, int n_head, float scale)
{
	dim3		grid;

	if (n_tok <= 0)
		return cudaSuccess;
	if (kv->head_dim > OPUS_K_ATTN_MAX_HD || kv->head_dim < 1 || kv->n_head_kv < 1 ||
		n_head % kv->n_head_kv != 0)
		return cudaErrorInvalidValue;
	grid.x = (unsigned int) n_head;
	grid.y = n_tok < OPUS_K_GRID_YZ_MAX ? (unsigned int) n_tok : OPUS_K_GRID_YZ_MAX;
	grid.z = 1;
	attention_kernel<<<grid, AT_THREADS, 0, stream>>>(*kv, q, out, n_tok, n_head, scale);
	return cudaGetLastError();
}
