/*
 * gemm_float.h - matrix products of F32 and F16 weights with activations of
 * the same type, in the arithmetic of llama.cpp's CPU matmul for a batch of
 * two or more tokens (llamafile's tinyBLAS, AVX2 build): for each output,
 * one 8-lane accumulator takes a fused multiply-add of elements l..l+7 of
 * the weight row and the activation row, l = 0, 8, 16, ... in order (a
 * last partial group as if zero-padded), and the lanes are summed as
 * ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
 *
 * gemm_float.c has the plain version (one operation at a time),
 * gemm_float_avx2.c the AVX2 one (tiles of 4 weight rows by 3 tokens);
 * both give the same bits, and an output does not depend on the other rows
 * or tokens of the call, so a token's results do not depend on how tokens
 * are grouped.  Used by the BERT-family encoders (model/model_bert.c).
 */
#ifndef OPUS_GEMM_FLOAT_H
#define OPUS_GEMM_FLOAT_H

#include <stddef.h>
#include <stdint.h>

/*
 * out[t * ld + r] = dot(weight row r, activation row t) for r < n_rows,
 * t < n_tok; rows of n elements, w_stride and x_stride bytes apart.
 * opus_gemm_f32_*: F32 weights and activations; opus_gemm_f16_*: F16 ones
 * (IEEE half, converted exactly to F32 before the products).
 */
typedef void (*opus_gemm_fn) (int64_t n, int n_rows, const void *w, size_t w_stride,
							  int n_tok, const void *x, size_t x_stride,
							  float *out, int64_t ld);

void		opus_gemm_f32_ref(int64_t n, int n_rows, const void *w, size_t w_stride,
							  int n_tok, const void *x, size_t x_stride,
							  float *out, int64_t ld);
void		opus_gemm_f16_ref(int64_t n, int n_rows, const void *w, size_t w_stride,
							  int n_tok, const void *x, size_t x_stride,
							  float *out, int64_t ld);
/* Only call when the CPU has AVX2, FMA and F16C. */
void		opus_gemm_f32_avx2(int64_t n, int n_rows, const void *w, size_t w_stride,
							   int n_tok, const void *x, size_t x_stride,
							   float *out, int64_t ld);
void		opus_gemm_f16_avx2(int64_t n, int n_rows, const void *w, size_t w_stride,
							   int n_tok, const void *x, size_t x_stride,
							   float *out, int64_t ld);

#endif							/* OPUS_GEMM_FLOAT_H */
