/*
 * forward_int.h - internal: the small f16 kernels of attention, with a plain
 * version (forward.c) and an AVX2+F16C one (forward_avx2.c) chosen once when
 * a context is created.  For a given choice every result is a fixed sequence
 * of operations, so it does not depend on threads or batch composition.
 */
#ifndef OPUS_FORWARD_INT_H
#define OPUS_FORWARD_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qtype.h"

/* sum_i a[i] * b[i], b in F16, n a multiple of 2 */
typedef float (*opus_dot_f16_fn) (const float *a, const uint16_t *b, int n);
/* y[i] += s * x[i], x in F16 */
typedef void (*opus_axpy_f16_fn) (float *y, float s, const uint16_t *x, int n);
/* dst[i] = F16(src[i]) */
typedef void (*opus_to_f16_fn) (uint16_t *dst, const float *src, int n);

float		opus_fwd_dot_f16_avx2(const float *a, const uint16_t *b, int n);
void		opus_fwd_axpy_f16_avx2(float *y, float s, const uint16_t *x, int n);
void		opus_fwd_to_f16_avx2(uint16_t *dst, const float *src, int n);

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

#endif							/* OPUS_FORWARD_INT_H */
