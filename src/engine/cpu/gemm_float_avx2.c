/*
 * gemm_float_avx2.c - the AVX2 version of the F32 / F16 matrix products of
 * gemm_float.h: tiles of up to 4 weight rows by 3 tokens, one 8-lane
 * accumulator per output (12 accumulators, 3 activation vectors and one
 * weight vector: the 16 registers), so each weight vector loaded serves 3
 * tokens and each activation vector 4 rows.  Every output takes the same
 * operations whatever the tile around it: gemm_float.c's, bit for bit.
 */
#include "cpu/gemm_float.h"

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#define RM_MAX 4
#define RN_MAX 3

/* Elements l..l+7 of a row as floats (F16 converted exactly). */
static inline __attribute__((always_inline)) __m256
load8(const bool f16, const uint8_t *row, int64_t l)
{
	if (f16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) ((const uint16_t *) row + l)));
	return _mm256_loadu_ps((const float *) row + l);
}

/* The last rem (1..7) elements from l, zero-padded to 8. */
static inline __attribute__((always_inline)) __m256
load_tail(const bool f16, const uint8_t *row, int64_t l, int rem)
{
	uint8_t		buf[32] = {0};

	memcpy(buf, row + l * (f16 ? 2 : 4), (size_t) rem * (f16 ? 2 : 4));
	return load8(f16, buf, 0);
}

static inline __attribute__((always_inline)) float
hsum8(__m256 v)
{
	__m128		s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* One tile: RM weight rows (w, ws bytes apart) by RN tokens (x, xs apart). */
static inline __attribute__((always_inline)) void
tile(const bool f16, const int RM, const int RN, int64_t n, const uint8_t *w, size_t ws,
	 const uint8_t *x, size_t xs, float *out, int64_t ld)
{
	__m256		acc[RN_MAX][RM_MAX];
	int64_t		n8 = n & ~(int64_t) 7;

	_Pragma("GCC unroll 3")
		for (int j = 0; j < RN; j++)
		_Pragma("GCC unroll 4")
			for (int i = 0; i < RM; i++)
			acc[j][i] = _mm256_setzero_ps();
	for (int64_t l = 0; l < n8; l += 8)
	{
		__m256		b[RN_MAX];

		_Pragma("GCC unroll 3")
			for (int j = 0; j < RN; j++)
			b[j] = load8(f16, x + (size_t) j * xs, l);
		_Pragma("GCC unroll 4")
			for (int i = 0; i < RM; i++)
		{
			__m256		a = load8(f16, w + (size_t) i * ws, l);

			_Pragma("GCC unroll 3")
				for (int j = 0; j < RN; j++)
				acc[j][i] = _mm256_fmadd_ps(a, b[j], acc[j][i]);
		}
	}
	if (n8 < n)
	{
		__m256		b[RN_MAX];

		for (int j = 0; j < RN; j++)
			b[j] = load_tail(f16, x + (size_t) j * xs, n8, (int) (n - n8));
		for (int i = 0; i < RM; i++)
		{
			__m256		a = load_tail(f16, w + (size_t) i * ws, n8, (int) (n - n8));

			for (int j = 0; j < RN; j++)
				acc[j][i] = _mm256_fmadd_ps(a, b[j], acc[j][i]);
		}
	}
	_Pragma("GCC unroll 3")
		for (int j = 0; j < RN; j++)
		_Pragma("GCC unroll 4")
			for (int i = 0; i < RM; i++)
			out[j * ld + i] = hsum8(acc[j][i]);
}

#define TILE_CASE(RM, RN) \
	case (RM) * 4 + (RN): \
		tile(f16, RM, RN, n, w, ws, x, xs, out, ld); \
		break

/* A tile of nr (1..4) rows by nt (1..3) tokens. */
static inline __attribute__((always_inline)) void
tile_any(const bool f16, int nr, int nt, int64_t n, const uint8_t *w, size_t ws,
		 const uint8_t *x, size_t xs, float *out, int64_t ld)
{
	switch (nr * 4 + nt)
	{
			TILE_CASE(4, 3);
			TILE_CASE(4, 2);
			TILE_CASE(4, 1);
			TILE_CASE(3, 3);
			TILE_CASE(3, 2);
			TILE_CASE(3, 1);
			TILE_CASE(2, 3);
			TILE_CASE(2, 2);
			TILE_CASE(2, 1);
			TILE_CASE(1, 3);
			TILE_CASE(1, 2);
			TILE_CASE(1, 1);
	}
}

/*
 * Token groups of 3 outside, row groups of 4 inside: a group's activation
 * rows stay in L1 while the call's weight rows (the caller passes a chunk
 * of a few rows) stream past them.
 */
static inline __attribute__((always_inline)) void
gemm(const bool f16, int64_t n, int n_rows, const void *w, size_t ws, int n_tok,
	 const void *x, size_t xs, float *out, int64_t ld)
{
	for (int t = 0; t < n_tok; t += RN_MAX)
	{
		int			nt = n_tok - t < RN_MAX ? n_tok - t : RN_MAX;
		const uint8_t *xt = (const uint8_t *) x + (size_t) t * xs;

		for (int r = 0; r < n_rows; r += RM_MAX)
		{
			int			nr = n_rows - r < RM_MAX ? n_rows - r : RM_MAX;

			tile_any(f16, nr, nt, n, (const uint8_t *) w + (size_t) r * ws, ws, xt, xs,
					 out + (size_t) t * ld + r, ld);
		}
	}
}

void
opus_gemm_f32_avx2(int64_t n, int n_rows, const void *w, size_t w_stride,
				   int n_tok, const void *x, size_t x_stride, float *out, int64_t ld)
{
	gemm(false, n, n_rows, w, w_stride, n_tok, x, x_stride, out, ld);
}

void
opus_gemm_f16_avx2(int64_t n, int n_rows, const void *w, size_t w_stride,
				   int n_tok, const void *x, size_t x_stride, float *out, int64_t ld)
{
	gemm(true, n, n_rows, w, w_stride, n_tok, x, x_stride, out, ld);
}
