/*
 * forward_int.h - internal to the forward pass: the CPU kernels that
 * model/forward.c picks once per context (a plain version and an AVX2 one
 * for each), and nothing else.  It holds:
 *
 *   attention over the paged KV cache, F16 and Q8_0 (struct opus_attn_args;
 *     forward_compat.c, forward_avx2.c, attn_q8_0.c)
 *   F32 -> F16 rows, SwiGLU / GeGLU, ggml's vector expf (forward_compat.c,
 *     forward_avx2.c)
 *   Q8_0 / Q8_1 activation quantizers (forward_compat.c, forward_avx2.c)
 *   the tiled matmul row kernels and their scatter (matmul_avx2.c)
 *
 * Included by those files, by model/forward.c (which calls them through
 * function pointers) and by the tests that check each fast kernel against
 * its reference (test/unit/test_matmul.c, test_quant.c, test_kv_q8.c;
 * test/golden/logits/kernel_orders.c).  For a given choice every result
 * is a fixed sequence of operations, so it does not depend on threads or
 * batch composition.
 */
#ifndef OPUS_FORWARD_INT_H
#define OPUS_FORWARD_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/qtype.h"

/* dst[i] = F16(src[i]) */
typedef void (*opus_to_f16_fn) (uint16_t *dst, const float *src, int n);

/*
 * Attention of n_h (1..3) query heads that share one KV head, for one token
 * at position n_kv - 1 of its sequence.  The KV cache is read through the
 * sequence's block table: position p lives in block blocks[p / bs], slot
 * p % bs; that block's K for this layer and KV head starts k_off bytes into
 * it, laid out [head_dim][bs] (transposed), and V starts v_off bytes in,
 * laid out [bs][head_dim].  Both F16.  The AVX2 kernel needs hd % 16 == 0
 * and hd <= 256, and gives the same results for any block size.
 */
struct opus_attn_args
{
	const float *q;				/* [n_h][hd] roped queries */
	float	   *out;			/* [n_h][hd] results */
	int			n_h;
	int			hd;				/* head size, a multiple of 16 for the AVX2 kernel */
	int			n_kv;			/* positions attended: 0..n_kv-1 */
	int			kv0;			/* positions before kv0 masked (sliding window), else 0 */
	float		scale;			/* 1 / sqrt(hd) */
	int			bs;				/* positions per KV block */
	const uint8_t *kv_mem;		/* the block pool */
	size_t		block_bytes;
	const int32_t *blocks;		/* the sequence's block table */
	size_t		k_off;
	size_t		v_off;
	float	   *scores;			/* scratch: n_h * (n_kv rounded up to 16) floats */
	/*
	 * false: llama.cpp's order for a one-token batch (ggml_vec_dot_f16);
	 * true: its order for a multi-token batch (llamafile tinyBLAS, 16
	 * lanes; needs hd % 16 == 0)
	 */
	bool		gemm;
};

typedef void (*opus_attend_fn) (const struct opus_attn_args *a);

void		opus_fwd_attend_avx2(const struct opus_attn_args *a);

/*
 * Attention over a Q8_0 KV cache (same arguments; gemm is ignored).  At
 * k_off and at v_off a block holds quants [bs][hd] int8 followed by
 * scales [hd / 32][bs] F16; hd must be a multiple of 32 (and <= 256 for
 * the AVX2 kernel).  The arithmetic, which both versions follow bit for
 * bit (unit-tested), for each head:
 *  - the query is quantized to Q8_0 as activations are (opus_act_q8_0_*):
 *    per 32 dims a scale dq_b and 32 int8 quants;
 *  - score of position p: s = 0; for each 32-dim group b in order,
 *    s = fmaf((float) isum_b, dk_b * dq_b, s) with isum_b the exact integer
 *    dot product of the quants; then s * scale;
 *  - softmax as opus_fwd_attend_ref's (ggml's vector exp, sums of 16
 *    positions in float accumulated in double), weights w_p = e_p * inv
 *    NOT rounded to F16;
 *  - output dim d of group b: acc = 0; for p = 0.. n_kv - 1 in order,
 *    acc = fmaf(w_p * dv_{p,b}, (float) vq_{p,d}, acc).
 * So a result depends on the query and the cached positions only, never
 * on the block size, the batch or the threads.
 */
void		opus_fwd_attend_q8_0_ref(const struct opus_attn_args *a);
void		opus_fwd_attend_q8_0_avx2(const struct opus_attn_args *a);
void		opus_fwd_to_f16_avx2(uint16_t *dst, const float *src, int n);

/*
 * llama.cpp-compatible arithmetic (forward_compat.c: plain C; the _avx2
 * versions give the same bits).  opus_fwd_attend_ref is the plain attention
 * kernel (any head size and block size).  swiglu: h[i] = silu(g[i]) * u[i] for i in [i0, i1)
 * of a row of n elements.
 */
typedef void (*opus_swiglu_fn) (float *h, const float *g, const float *u,
								int64_t i0, int64_t i1, int64_t n);

float		opus_ggml_expf(float x);
void		opus_fwd_attend_ref(const struct opus_attn_args *a);
void		opus_fwd_swiglu_ref(float *h, const float *g, const float *u,
								int64_t i0, int64_t i1, int64_t n);
/* gemma3's GeGLU: h[i] = gelu_tanh(g[i]) * u[i], as ggml's CPU geglu (F16 table). */
void		opus_fwd_geglu_ref(float *h, const float *g, const float *u,
							   int64_t i0, int64_t i1, int64_t n);
void		opus_fwd_swiglu_avx2(float *h, const float *g, const float *u,
								 int64_t i0, int64_t i1, int64_t n);
/* opus_fwd_geglu_ref's GELU as F16 results by F16 input (built once, read-only) */
const uint16_t *opus_fwd_gelu_table(void);
/* opus_fwd_geglu_ref's bits, 8 lanes at a time through that table */
void		opus_fwd_geglu_avx2(float *h, const float *g, const float *u,
								int64_t i0, int64_t i1, int64_t n);

/*
 * y[i] = gelu(y[i]) for i < n, as ggml's CPU gelu (what opus_fwd_geglu_ref
 * computes with u = 1); the AVX2 version reads a table of all halves,
 * built on first use.  Same bits (for inputs that are not NaN).
 */
typedef void (*opus_gelu_fn) (float *y, int64_t n);

void		opus_fwd_gelu_ref(float *y, int64_t n);
void		opus_fwd_gelu_avx2(float *y, int64_t n);

/*
 * Q8_0 / Q8_1 activation rows (n a multiple of 32) quantized as ggml's x86
 * CPU backend does before a matrix product (its reference quantizer, which
 * quantize.c reproduces for weights, differs in the last bit of the scale
 * inverse and in how ties round).
 */
typedef void (*opus_act_quant_fn) (const float *x, void *dst, int64_t n);

void		opus_act_q8_0_ref(const float *x, void *dst, int64_t n);
void		opus_act_q8_1_ref(const float *x, void *dst, int64_t n);
void		opus_act_q8_0_avx2(const float *x, void *dst, int64_t n);
void		opus_act_q8_1_avx2(const float *x, void *dst, int64_t n);

/*
 * Tiled matmul kernel (matmul_avx2.c), made for a group of C tokens (1..8):
 * out[r * 8 + c] = dot(weight row r, activation row c) for r < n_rows.
 * w: first weight row, w_stride bytes apart; x: the group's first quantized
 * activation row, x_stride bytes apart; xs: the group's block scales as
 * floats, transposed: xs[b * 8 + c] = d of block b of token c, and for Q8_1
 * xs[(nb + b) * 8 + c] = s; nb blocks per row.  A token's results do not
 * depend on C.
 */
typedef void (*opus_mm_rows_fn) (int nb, int n_rows, const uint8_t *w,
								 size_t w_stride, const uint8_t *x,
								 size_t x_stride, const float *xs, float *out);

/*
 * The C-token kernel for a weight type, or NULL if the type has none.
 * allow_vnni: use AVX-VNNI if the CPU has it (same results).  Only call
 * when the CPU has AVX2+FMA+F16C.
 */
opus_mm_rows_fn opus_mm_rows_avx2(enum opus_qtype wtype, int C, bool allow_vnni);

/*
 * Store a tile kernel's results the way forward.c's mm_scatter does (out[i *
 * 8 + c] for row i < n and token c < cc into dst[c][i], plus bias[i] when
 * bias is not NULL, added to dst[c][i] when accumulate), 8 rows at a time
 * through an in-register transpose; the same values.
 */
void		opus_mm_scatter_avx2(const float *out, int64_t n, int cc, float *const *dst,
								 const float *bias, bool accumulate);

#endif							/* OPUS_FORWARD_INT_H */
