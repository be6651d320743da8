/*
 * forward_int.h - internal: the small f16 kernels of attention, with a plain
 * version (forward.c) and an AVX2+F16C one (forward_avx2.c) chosen once when
 * a context is created.  For a given choice every result is a fixed sequence
 * of operations, so it does not depend on threads or batch composition.
 */
#ifndef OPUS_FORWARD_INT_H
#define OPUS_FORWARD_INT_H

#include <stdint.h>

/* sum_i a[i] * b[i], b in F16, n a multiple of 2 */
typedef float (*opus_dot_f16_fn) (const float *a, const uint16_t *b, int n);
/* y[i] += s * x[i], x in F16 */
typedef void (*opus_axpy_f16_fn) (float *y, float s, const uint16_t *x, int n);
/* dst[i] = F16(src[i]) */
typedef void (*opus_to_f16_fn) (uint16_t *dst, const float *src, int n);

float		opus_fwd_dot_f16_avx2(const float *a, const uint16_t *b, int n);
void		opus_fwd_axpy_f16_avx2(float *y, float s, const uint16_t *x, int n);
void		opus_fwd_to_f16_avx2(uint16_t *dst, const float *src, int n);

#endif							/* OPUS_FORWARD_INT_H */
