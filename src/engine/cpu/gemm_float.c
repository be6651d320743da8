/*
 * gemm_float.c - the plain version of the F32 / F16 matrix products of
 * gemm_float.h: each output's operations one at a time, in the order the
 * header states (gemm_float_avx2.c gives the same bits).
 */
#include "cpu/gemm_float.h"

#include <math.h>

#include "quant/qtype.h"

/* The 8-lane sum as tinyBLAS's hsum: upper half plus lower, then pairs. */
static float
lane_sum(const float *a)
{
	float		v0 = a[0] + a[4],
				v1 = a[1] + a[5],
				v2 = a[2] + a[6],
				v3 = a[3] + a[7];

	return (v0 + v2) + (v1 + v3);
}

void
opus_gemm_f32_ref(int64_t n, int n_rows, const void *w, size_t w_stride,
				  int n_tok, const void *x, size_t x_stride, float *out, int64_t ld)
{
	for (int t = 0; t < n_tok; t++)
	{
		const float *xt = (const float *) ((const uint8_t *) x + (size_t) t * x_stride);

		for (int r = 0; r < n_rows; r++)
		{
			const float *wr = (const float *) ((const uint8_t *) w + (size_t) r * w_stride);
			float		acc[8] = {0};

			for (int64_t l = 0; l < n; l += 8)
				for (int j = 0; j < 8; j++)
					acc[j] = l + j < n ? fmaf(wr[l + j], xt[l + j], acc[j]) : fmaf(0.0f, 0.0f, acc[j]);
			out[(size_t) t * ld + r] = lane_sum(acc);
		}
	}
}

void
opus_gemm_f16_ref(int64_t n, int n_rows, const void *w, size_t w_stride,
				  int n_tok, const void *x, size_t x_stride, float *out, int64_t ld)
{
	for (int t = 0; t < n_tok; t++)
	{
		const uint16_t *xt = (const uint16_t *) ((const uint8_t *) x + (size_t) t * x_stride);

		for (int r = 0; r < n_rows; r++)
		{
			const uint16_t *wr = (const uint16_t *) ((const uint8_t *) w + (size_t) r * w_stride);
			float		acc[8] = {0};

			for (int64_t l = 0; l < n; l += 8)
				for (int j = 0; j < 8; j++)
					acc[j] = l + j < n ?
						fmaf(opus_fp16_to_fp32(wr[l + j]), opus_fp16_to_fp32(xt[l + j]), acc[j]) :
						fmaf(0.0f, 0.0f, acc[j]);
			out[(size_t) t * ld + r] = lane_sum(acc);
		}
	}
}
