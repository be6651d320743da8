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
 * Tiled matmul kernel (matmul_avx2.c): out[c * R + r] = dot(weight row r,
 * activation row c) for the R and C it was made for.  w: first weight row,
 * w_stride bytes apart; x: first quantized activation row, x_stride bytes
 * apart; xs: each activation row's block scales as floats (d[nb], then for
 * Q8_1 s[nb]), xs_stride floats apart; nb blocks per row.
 */
typedef void (*opus_mm_tile_fn) (int nb, const uint8_t *w, size_t w_stride,
								 const uint8_t *x, size_t x_stride,
								 const float *xs, size_t xs_stride, float *out);

/*
 * The R x C (1..4 each) kernel for a weight type, or NULL if the type has no
 * tiled kernel.  allow_vnni: use AVX-VNNI if the CPU has it (same results).
 * Only call when the CPU has AVX2+FMA+F16C.
 */
opus_mm_tile_fn opus_mm_tile_avx2(enum opus_qtype wtype, int R, int C,
								  bool allow_vnni);

#endif							/* OPUS_FORWARD_INT_H */
