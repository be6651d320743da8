/*
 * matmul_tile.h - the body of the tiled quantized matmul kernels, included
 * by matmul_avx2.c once per instruction-set variant (a C "template").
 *
 * The includer defines:
 *   MM_NAME(x)      the variant's name for x (e.g. x##_avx2)
 *   MM_DOT(w, x)    8 int32 lanes of sums of u8 w times s8 x products
 *
 * A tile kernel computes out[c * R + r] = dot(weight row r, activation row c)
 * for R weight rows and C activation rows.  The arithmetic for one output is
 * the same whatever R and C are (per block, in block order: the exact
 * integer block sum, converted to float, times the rounded product of the
 * two block scales, fused-added into one 8-lane accumulator; the Q4_1 "min"
 * term accumulated separately with scalar FMAs; then a fixed horizontal sum),
 * so a token's result never depends on how rows and tokens were tiled.
 */

/* Q4_1 weights x Q8_1 activations; xs holds each activation row's block d[] then s[]. */
static inline __attribute__((always_inline)) void
MM_NAME(q4_1_tile) (const int R, const int C, int nb,
					const uint8_t *w, size_t w_stride,
					const uint8_t *x, size_t x_stride,
					const float *xs, size_t xs_stride, float *out)
{
	__m256		acc[4][4];
	float		ms[4][4];
	const __m256i lowmask = _mm256_set1_epi8(0x0F);

	_Pragma("GCC unroll 4")
	for (int r = 0; r < R; r++)
		_Pragma("GCC unroll 4")
		for (int c = 0; c < C; c++)
		{
			acc[r][c] = _mm256_setzero_ps();
			ms[r][c] = 0.0f;
		}
	for (int b = 0; b < nb; b++)
	{
		__m256i		wq[4];
		float		dw[4],
					mw[4];

		_Pragma("GCC unroll 4")
		for (int r = 0; r < R; r++)
		{
			const opus_block_q4_1 *blk = (const opus_block_q4_1 *) (w + r * w_stride) + b;
			__m128i		q = _mm_loadu_si128((const __m128i *) blk->qs);
			uint32_t	dm_bits;
			__m128		dm;

			wq[r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), lowmask);
			memcpy(&dm_bits, &blk->d, sizeof(dm_bits));	/* d and m are adjacent */
			dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int) dm_bits));
			dw[r] = _mm_cvtss_f32(dm);
			mw[r] = _mm_cvtss_f32(_mm_movehdup_ps(dm));
		}
		_Pragma("GCC unroll 4")
		for (int c = 0; c < C; c++)
		{
			const opus_block_q8_1 *xb = (const opus_block_q8_1 *) (x + c * x_stride) + b;
			__m256i		xv = _mm256_loadu_si256((const __m256i *) xb->qs);
			float		dx = xs[c * xs_stride + b];
			float		sx = xs[c * xs_stride + nb + b];

			_Pragma("GCC unroll 4")
			for (int r = 0; r < R; r++)
			{
				__m256		p = _mm256_cvtepi32_ps(MM_DOT(wq[r], xv));

				acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), p, acc[r][c]);
				ms[r][c] = fmaf(mw[r], sx, ms[r][c]);
			}
		}
	}
	_Pragma("GCC unroll 4")
	for (int r = 0; r < R; r++)
		_Pragma("GCC unroll 4")
		for (int c = 0; c < C; c++)
			out[c * R + r] = mm_hsum(acc[r][c]) + ms[r][c];
}

/* Q8_0 weights x Q8_0 activations; xs holds each activation row's block d[]. */
static inline __attribute__((always_inline)) void
MM_NAME(q8_0_tile) (const int R, const int C, int nb,
					const uint8_t *w, size_t w_stride,
					const uint8_t *x, size_t x_stride,
					const float *xs, size_t xs_stride, float *out)
{
	__m256		acc[4][4];

	_Pragma("GCC unroll 4")
	for (int r = 0; r < R; r++)
		_Pragma("GCC unroll 4")
		for (int c = 0; c < C; c++)
			acc[r][c] = _mm256_setzero_ps();
	for (int b = 0; b < nb; b++)
	{
		__m256i		wq[4],
					wa[4];
		float		dw[4];

		_Pragma("GCC unroll 4")
		for (int r = 0; r < R; r++)
		{
			const opus_block_q8_0 *blk = (const opus_block_q8_0 *) (w + r * w_stride) + b;

			wq[r] = _mm256_loadu_si256((const __m256i *) blk->qs);
			wa[r] = _mm256_sign_epi8(wq[r], wq[r]);
			dw[r] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(blk->d)));
		}
		_Pragma("GCC unroll 4")
		for (int c = 0; c < C; c++)
		{
			const opus_block_q8_0 *xb = (const opus_block_q8_0 *) (x + c * x_stride) + b;
			__m256i		xv = _mm256_loadu_si256((const __m256i *) xb->qs);
			float		dx = xs[c * xs_stride + b];

			_Pragma("GCC unroll 4")
			for (int r = 0; r < R; r++)
			{
				__m256		p = _mm256_cvtepi32_ps(MM_DOT(wa[r], _mm256_sign_epi8(xv, wq[r])));

				acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), p, acc[r][c]);
			}
		}
	}
	_Pragma("GCC unroll 4")
	for (int r = 0; r < R; r++)
		_Pragma("GCC unroll 4")
		for (int c = 0; c < C; c++)
			out[c * R + r] = mm_hsum(acc[r][c]);
}

#define MM_INSTANCE(type, R, C) \
static void \
MM_NAME(type##_##R##x##C) (int nb, const uint8_t *w, size_t ws, const uint8_t *x, \
						   size_t xst, const float *xs, size_t xss, float *out) \
{ \
	MM_NAME(type##_tile) (R, C, nb, w, ws, x, xst, xs, xss, out); \
}
#define MM_INSTANCES(type) \
	MM_INSTANCE(type, 1, 1) MM_INSTANCE(type, 1, 2) MM_INSTANCE(type, 1, 3) MM_INSTANCE(type, 1, 4) \
	MM_INSTANCE(type, 2, 1) MM_INSTANCE(type, 2, 2) MM_INSTANCE(type, 2, 3) MM_INSTANCE(type, 2, 4) \
	MM_INSTANCE(type, 3, 1) MM_INSTANCE(type, 3, 2) MM_INSTANCE(type, 3, 3) MM_INSTANCE(type, 3, 4) \
	MM_INSTANCE(type, 4, 1) MM_INSTANCE(type, 4, 2) MM_INSTANCE(type, 4, 3) MM_INSTANCE(type, 4, 4)

MM_INSTANCES(q4_1)
MM_INSTANCES(q8_0)

#define MM_ROW(type, R) \
	{MM_NAME(type##_##R##x1), MM_NAME(type##_##R##x2), MM_NAME(type##_##R##x3), MM_NAME(type##_##R##x4)}

static const opus_mm_tile_fn MM_NAME(q4_1_table)[4][4] = {
	MM_ROW(q4_1, 1), MM_ROW(q4_1, 2), MM_ROW(q4_1, 3), MM_ROW(q4_1, 4)
};
static const opus_mm_tile_fn MM_NAME(q8_0_table)[4][4] = {
	MM_ROW(q8_0, 1), MM_ROW(q8_0, 2), MM_ROW(q8_0, 3), MM_ROW(q8_0, 4)
};

#undef MM_ROW
#undef MM_INSTANCES
#undef MM_INSTANCE
