/*
 * forward_avx2.c - AVX2+FMA+F16C versions of the attention kernels declared
 * in forward_int.h.  Called only after the CPU was found to support them.
 */
#include "forward_int.h"

#include <immintrin.h>

#include "qtype.h"

static inline float
hsum256(__m256 v)
{
	__m128		lo = _mm256_castps256_ps128(v);
	__m128		hi = _mm256_extractf128_ps(v, 1);

	lo = _mm_add_ps(lo, hi);
	lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
	lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
	return _mm_cvtss_f32(lo);
}

float
opus_fwd_dot_f16_avx2(const float *a, const uint16_t *b, int n)
{
	__m256		acc0 = _mm256_setzero_ps();
	__m256		acc1 = _mm256_setzero_ps();
	int			i = 0;
	float		sum;

	for (; i + 16 <= n; i += 16)
	{
		__m256		b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (b + i)));
		__m256		b1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (b + i + 8)));

		acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), b0, acc0);
		acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), b1, acc1);
	}
	for (; i + 8 <= n; i += 8)
	{
		__m256		b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (b + i)));

		acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), b0, acc0);
	}
	sum = hsum256(_mm256_add_ps(acc0, acc1));
	for (; i < n; i++)
		sum += a[i] * opus_fp16_to_fp32(b[i]);
	return sum;
}

void
opus_fwd_axpy_f16_avx2(float *y, float s, const uint16_t *x, int n)
{
	__m256		vs = _mm256_set1_ps(s);
	int			i = 0;

	for (; i + 8 <= n; i += 8)
	{
		__m256		x0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (x + i)));

		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, x0, _mm256_loadu_ps(y + i)));
	}
	for (; i < n; i++)
		y[i] += s * opus_fp16_to_fp32(x[i]);
}

void
opus_fwd_to_f16_avx2(uint16_t *dst, const float *src, int n)
{
	int			i = 0;

	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *) (dst + i),
						 _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		dst[i] = opus_fp32_to_fp16(src[i]);
}
