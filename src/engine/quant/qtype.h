/*
 * qtype.h - tensor element types (GGUF/ggml numbering), their block layouts,
 * and the row-level kernels: dequantize, quantize, dot product.
 *
 * Numbering and block sizes follow the GGUF specification so files written by
 * llama.cpp load unchanged.  Every type GGUF defines has a size entry (so the
 * GGUF reader can validate any file); only the types with `supported` set have
 * kernels.  Unknown ids are rejected by opus_qtype_info() returning NULL.
 *
 * Kernels (see quant.c):
 *  - dequantize a row of n elements (n a multiple of the block size) to f32;
 *  - quantize a row of f32 into the type (the reference quantizer, used by
 *    `opus_engine quantize` and for activations);
 *  - vec_dot: the dot product of one weight row (type T) with one activation
 *    row already converted to T's vec_dot_type (as ggml: Q8_0 for the 32-block
 *    types, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants, F16 for F16, BF16 for
 *    BF16, F32 for F32).
 * Each kernel has a plain reference (`_ref`) and, where it pays, an AVX2+FMA
 * variant chosen once at start-up (opus_qtype_init_cpu); tests compare them.
 */
#ifndef OPUS_QTYPE_H
#define OPUS_QTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum opus_qtype
{
	OPUS_TYPE_F32 = 0,
	OPUS_TYPE_F16 = 1,
	OPUS_TYPE_Q4_0 = 2,
	OPUS_TYPE_Q4_1 = 3,
	/* 4, 5 were Q4_2, Q4_3: removed */
	OPUS_TYPE_Q5_0 = 6,
	OPUS_TYPE_Q5_1 = 7,
	OPUS_TYPE_Q8_0 = 8,
	OPUS_TYPE_Q8_1 = 9,
	OPUS_TYPE_Q2_K = 10,
	OPUS_TYPE_Q3_K = 11,
	OPUS_TYPE_Q4_K = 12,
	OPUS_TYPE_Q5_K = 13,
	OPUS_TYPE_Q6_K = 14,
	OPUS_TYPE_Q8_K = 15,
	OPUS_TYPE_IQ2_XXS = 16,
	OPUS_TYPE_IQ2_XS = 17,
	OPUS_TYPE_IQ3_XXS = 18,
	OPUS_TYPE_IQ1_S = 19,
	OPUS_TYPE_IQ4_NL = 20,
	OPUS_TYPE_IQ3_S = 21,
	OPUS_TYPE_IQ2_S = 22,
	OPUS_TYPE_IQ4_XS = 23,
	OPUS_TYPE_I8 = 24,
	OPUS_TYPE_I16 = 25,
	OPUS_TYPE_I32 = 26,
	OPUS_TYPE_I64 = 27,
	OPUS_TYPE_F64 = 28,
	OPUS_TYPE_IQ1_M = 29,
	OPUS_TYPE_BF16 = 30,
	/* 31..33 removed (Q4_0_4_4 ...) */
	OPUS_TYPE_TQ1_0 = 34,
	OPUS_TYPE_TQ2_0 = 35,
	/* 36..38 removed */
	OPUS_TYPE_MXFP4 = 39,
	OPUS_TYPE__COUNT = 40
};

/* Converts one activation row (n f32) into `vec_dot_type` blocks. */
typedef void (*opus_from_float_fn) (const float *x, void *dst, int64_t n);
/* Dequantizes n elements of a row of this type into f32. */
typedef void (*opus_to_float_fn) (const void *src, float *y, int64_t n);
/* Dot product of a weight row (this type) and an activation row (vec_dot_type). */
typedef float (*opus_vec_dot_fn) (int64_t n, const void *w, const void *x);

/*
 * n_rows dot products of weight rows (w, w + w_stride, ...) with one
 * activation row: out[r] = vec_dot(n, w + r * w_stride, x), bit-identical.
 */
typedef void (*opus_vec_dot_rows_fn) (int64_t n, int n_rows, const void *w, size_t w_stride,
									  const void *x, float *out);

/*
 * The same for n_tok activation rows (x + t * x_stride):
 * out[t * ld + r] = vec_dot(n, w + r * w_stride, x + t * x_stride).
 */
typedef void (*opus_vec_dot_tile_fn) (int64_t n, int n_rows, const void *w, size_t w_stride,
									  int n_tok, const void *x, size_t x_stride, float *out,
									  int ld);

struct opus_qtype_info
{
	const char *name;			/* "Q4_1" as llama.cpp prints it */
	int			block_size;		/* elements per block */
	int			type_size;		/* bytes per block */
	bool		supported;		/* has kernels below */
	enum opus_qtype vec_dot_type;	/* activation type for vec_dot */
	opus_to_float_fn to_float;	/* chosen variant (AVX2 or ref) */
	opus_from_float_fn from_float;	/* quantize f32 -> this type (chosen variant) */
	opus_vec_dot_fn vec_dot;	/* chosen variant */
	opus_to_float_fn to_float_ref;
	opus_from_float_fn from_float_ref;
	opus_vec_dot_fn vec_dot_ref;
};

/*
 * Type table entry, or NULL for an id GGUF does not define (removed ids too).
 * The returned pointer is to static storage; the kernel pointers are valid
 * after opus_qtype_init_cpu().
 */
const struct opus_qtype_info *opus_qtype_info(uint32_t type);

/* Look a type up by name (case-insensitive, "q4_k"), or -1. */
int			opus_qtype_from_name(const char *name);

/*
 * Bytes of a row of n elements; returns false (and leaves *out alone) if n is
 * not a multiple of the block size or the size overflows.
 */
bool		opus_qtype_row_size(enum opus_qtype t, int64_t n, size_t *out);

/*
 * Pick the fastest kernels this CPU supports (AVX2+FMA+F16C or reference).
 * Idempotent and thread-safe to call repeatedly; call before using kernels.
 * If force_ref is true, reference kernels are used everywhere (tests).
 */
void		opus_qtype_init_cpu(bool force_ref);
/* "avx2" or "ref": what opus_qtype_init_cpu chose. */
const char *opus_qtype_cpu_variant(void);

/*
 * out[r] = dot(n, w + r * w_stride, x) for r < n_rows, bit-identical to
 * calling dot row by row, but through a kernel that works on several rows at
 * once (each activation load shared, the per-row sums reduced together)
 * where one is registered for `dot` (any vec_dot of the type table, or one
 * of the llama.cpp-order variants), else row by row.
 */
void		opus_vec_dot_rows(opus_vec_dot_fn dot, int64_t n, int n_rows, const void *w,
							  size_t w_stride, const void *x, float *out);

/*
 * out[t * ld + r] = dot(n, w + r * w_stride, x + t * x_stride) for r <
 * n_rows, t < n_tok: bit-identical to dot one by one, through a tile kernel
 * (each unpacked weight block shared by up to 8 tokens) where one is
 * registered for `dot`, else opus_vec_dot_rows per token.
 */
void		opus_vec_dot_tile(opus_vec_dot_fn dot, int64_t n, int n_rows, const void *w,
							  size_t w_stride, int n_tok, const void *x, size_t x_stride,
							  float *out, int ld);

/* IEEE half and bfloat16 conversions (exact, round-to-nearest-even). */
float		opus_fp16_to_fp32(uint16_t h);
uint16_t	opus_fp32_to_fp16(float f);
float		opus_bf16_to_fp32(uint16_t h);
uint16_t	opus_fp32_to_bf16(float f);

/*
 * llama.cpp sums K-quant matmuls in orders that depend on the number of
 * tokens (activation rows) in the matmul (quant_ref.c and quant_avx2.c
 * describe them): Q5_K/Q6_K one way (vec_dot) for fewer than
 * OPUS_LLAMA_TILED_MIN_ROWS tokens and another for more; Q4_K matrices whose
 * row count is not a multiple of 8 two ways of their own (the one for few
 * tokens with the AVX2 kernels only); repacked Q4_K (row count a multiple of 8)
 * vec_dot's way for whole groups of 4 tokens and another for the n_tok % 4
 * last ones.  With opus_ctx_params.llama_batch_order the forward pass uses
 * the returned dot product (vec_dot's arguments) for tokens *from ..
 * *until - 1 of a matmul of n_tok tokens with weights of this type and
 * n_rows rows, vec_dot for the others.  NULL (range empty): vec_dot's order
 * is llama.cpp's for any n_tok.
 */
#define OPUS_LLAMA_TILED_MIN_ROWS 8
opus_vec_dot_fn opus_vec_dot_llama_batch(enum opus_qtype type, int64_t n_rows, int n_tok,
										 int *from, int *until);

#endif							/* OPUS_QTYPE_H */
