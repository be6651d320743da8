/*
 * opus_kernels.h - the CUDA kernels of the engine's GPU backend, as plain C
 * launchers (extern "C"), so the host side (src/engine/model/backend_cuda.c) is
 * ordinary C compiled by gcc.
 *
 * Every launcher enqueues its kernel(s) on `stream` and returns the launch
 * status (cudaGetLastError()); execution errors surface at the next
 * synchronising call.  Pointers are device pointers unless said otherwise.
 * Shapes are row-major; "ld" is the distance between rows in elements.
 *
 * Determinism: each output element is computed by one thread (or one warp /
 * block with a fixed reduction tree) with a fixed sequence of operations
 * that depends only on that row's inputs and the shapes of the model, never
 * on the number of tokens in the launch or on the other rows: no atomics,
 * no reductions whose order follows the batch.
 */
#ifndef OPUS_KERNELS_H
#define OPUS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C"
{
#endif

/* Tokens a matvec launch processes per pass over the weights. */
#define OPUS_K_MATVEC_TOKENS 8

/* Attention: most head_dim supported (128 threads x 2 dims). */
#define OPUS_K_ATTN_MAX_HD 256

/* Whether the kernels handle weight type `type` (GGUF id). */
int			opus_k_type_supported(int type);

/* x[t][0..n_embd) = row tok[t] of the (type) embedding table, t < n_tok. */
cudaError_t opus_k_embed(cudaStream_t stream, int type, const uint8_t *table,
						 size_t row_bytes, const int32_t *tok, int n_tok,
						 int n_embd, float *x);

/*
 * y[k] = x[src] / rms(x[src]) * w for k < n_rows, src = rows ? rows[k] : k.
 * Squares in float, summed in double (as the CPU), one block per row.
 */
cudaError_t opus_k_rmsnorm(cudaStream_t stream, const float *x, size_t ldx,
						   const int32_t *rows, int n_rows, const float *w,
						   int n, float eps, float *y, size_t ldy);

/*
 * Decode matrix-vector products, dequantizing W on the fly:
 * y[t][r] = (accumulate ? y[t][r] : 0) + (dot(W[r], x[t]) + bias[r])
 * for r < n_out, t < n_tok.  W: n_out rows of row_bytes, n_in % 32 == 0.
 * One warp per row; lane l sums chunks l, l + 32, ... (32 elements each,
 * FMAs in element order) and a fixed xor-butterfly adds the lanes, so a
 * token's result does not depend on n_tok.  bias may be NULL.
 */
cudaError_t opus_k_matvec(cudaStream_t stream, int type, const uint8_t *W,
						  size_t row_bytes, int64_t n_in, int64_t n_out,
						  const float *x, size_t ldx, int n_tok,
						  float *y, size_t ldy, const float *bias, int accumulate);

/*
 * Rows r0..r0+n_rows-1 of W dequantized to F16: out[(r - r0) * n_in + k].
 */
cudaError_t opus_k_dequant_f16(cudaStream_t stream, int type, const uint8_t *W,
							   size_t row_bytes, int64_t n_in, int64_t r0,
							   int64_t n_rows, void *out);

/* out[t][k] = F16(x[t][k]) for t < n_rows, 0 for n_rows <= t < n_rows_pad. */
cudaError_t opus_k_to_f16(cudaStream_t stream, const float *x, size_t ldx,
						  int n_rows, int n_rows_pad, int64_t n_cols, void *out);

/*
 * After a GEMM into a scratch tile c[t][i] (ldc): for t < n_tok, i < m:
 * y[t][col0 + i] = (accumulate ? y : 0) + (c[t][i] + bias[col0 + i]).
 */
cudaError_t opus_k_store_tile(cudaStream_t stream, const float *c, size_t ldc,
							  int n_tok, int64_t m, float *y, size_t ldy,
							  int64_t col0, const float *bias, int accumulate);

/*
 * RoPE in place on n_heads heads of head_dim for n_tok rows of v (ld
 * elements apart), with per-row tables cs/sn [n_tok][rope_dim / 2]; neox:
 * pairs (i, i + rope_dim/2), else (2i, 2i + 1).  Same fused arithmetic as
 * the CPU (fmaf(x0, c, -(x1 s)), fmaf(x0, s, x1 c)).
 */
cudaError_t opus_k_rope(cudaStream_t stream, float *v, size_t ld, int n_tok,
						int n_heads, int head_dim, int rope_dim, int neox,
						const float *cs, const float *sn);

/*
 * The paged KV cache (kv.c's F16 layout): a block is block_bytes; layer L's
 * K starts layer_off = L * layer_bytes into it, V kv_half_bytes later; KV
 * head g's K is [head_dim][bs] halves (transposed), its V [bs][head_dim],
 * each bs * head_dim halves after the previous head's.  Token t sits at
 * position pos[t] of a sequence whose block table is blocks[bt_off[t]...].
 */
struct opus_k_kv
{
	uint8_t    *pool;
	size_t		block_bytes;
	size_t		layer_off;
	size_t		kv_half_bytes;
	int			bs;				/* positions per block */
	int			n_head_kv;
	int			head_dim;
	const int32_t *pos;			/* [n_tok] */
	const int32_t *bt_off;		/* [n_tok] */
	const int32_t *blocks;		/* concatenated block tables */
};

/* Store k, v ([n_tok][n_head_kv * head_dim]) as F16 at each token's position. */
cudaError_t opus_k_kv_store(cudaStream_t stream, const struct opus_k_kv *kv,
							const float *k, const float *v, int n_tok);

/*
 * Causal attention of every query head of n_tok tokens over positions
 * 0..pos[t] of their sequences: out[t][h] = softmax(q k^T * scale) V, one
 * block per (token, head), positions in fixed chunks with an online
 * softmax.  head_dim <= OPUS_K_ATTN_MAX_HD.
 */
cudaError_t opus_k_attention(cudaStream_t stream, const struct opus_k_kv *kv,
							 const float *q, float *out, int n_tok, int n_head,
							 float scale);

/* h[i] = silu(g[i]) * u[i] for i < n. */
cudaError_t opus_k_swiglu(cudaStream_t stream, const float *g, const float *u,
						  float *h, int64_t n);

/* dst[r][c] = src[idx[r]][c] for r < n_rows, c < n_cols. */
cudaError_t opus_k_gather_rows(cudaStream_t stream, const float *src, size_t ld_src,
							   const int32_t *idx, int n_rows, int64_t n_cols,
							   float *dst, size_t ld_dst);

/*
 * Mixture of experts: out[t][c] += sum over k < n_used, in order, of
 * w[t * n_used + k] * y[pair_row[t * n_used + k]][c], for t < n_tok, c < n.
 */
cudaError_t opus_k_moe_combine(cudaStream_t stream, const float *y, size_t ld_y,
							   const int32_t *pair_row, const float *w, int n_tok,
							   int n_used, int64_t n, float *out, size_t ld_out);

/* out[r] = index of the largest of row r (the first on ties), r < n_rows. */
cudaError_t opus_k_argmax(cudaStream_t stream, const float *x, size_t ldx,
						  int n_rows, int n, int32_t *out);

#ifdef __cplusplus
}
#endif

#endif							/* OPUS_KERNELS_H */
