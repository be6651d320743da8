/*
 * matmul_tile.h - the body of the tiled quantized matmul kernels, included
 * by matmul_avx2.c once per instruction-set variant (a C "template"; no
 * include guard on purpose).
 *
 * The includer defines:
 *   MM_NAME(x)      the variant's name for x (e.g. x##_avx2)
 *   MM_DOT(w, x)    8 int32 lanes of sums of u8 w times s8 x products
 *   MM_DOT2(w, x, v, y)  the same for w x + v y (lane i: products 4i..4i+3
 *                   of both pairs); each product below 2,048 in magnitude
 *
 * A kernel made for C tokens (1..8) computes, for n_rows weight rows and the
 * C activation rows of one token group, out[r * 8 + c] = dot(row r, token c).
 * Each unpacked weight block is shared by the C tokens.  Activation block
 * scales come pre-converted and transposed per group of 8 tokens:
 * xs[b * 8 + c] = d of block b of token c, and for Q8_1 xs[(nb + b) * 8 + c]
 * = its s.
 *
 * Two forms compute each output: "direct" (every token's block scale
 * multiplied in the inner loop; few tokens) and "scaled" (for 6..8 tokens:
 * the activations copied once per call into an aligned buffer, and each
 * weight row's block scales multiplied by all the tokens' at once, one row
 * ahead, then broadcast from memory: fewer operations per token and block).
 * Both produce the same floating-point values, so the form never changes a
 * result.
 *
 * The arithmetic for one output is the same whatever C is, so a token's
 * result never depends on how tokens were grouped: per block, in order, the
 * exact integer block sum converted to float, times (weight d * activation
 * d) rounded to float, fused-added into one 8-lane accumulator; the Q4_1
 * min term fused-added separately (m * s per block, in order); at the end
 * the accumulator's lanes reduced as ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)),
 * then the min term added.
 */

/*
 * Reduce C accumulators to one vector (lane c = the sum of acc[c]'s eight
 * lanes); lanes >= C are garbage.  The additions reproduce, for every lane,
 * the horizontal sum llama.cpp's x86 dot products end with (ggml's
 * hsum_float_8): upper 128-bit half plus lower half, then lanes 0+2 and
 * 1+3, then those two: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).  Matching it
 * makes each matmul output bit-identical to llama.cpp's CPU vec_dot, so the
 * activations that get re-quantized to 8 bits round the same way.
 */
static inline __attribute__((always_inline)) __m256
MM_NAME(reduce) (const int C, const __m256 *acc)
{
	__m256		a[8];
	__m256		p[4],
				u[2],
				h;

	if (C == 1)
	{
		__m128		b = _mm_add_ps(_mm256_extractf128_ps(acc[0], 1), _mm256_castps256_ps128(acc[0]));

		b = _mm_add_ps(b, _mm_movehl_ps(b, b));
		b = _mm_add_ss(b, _mm_movehdup_ps(b));
		return _mm256_castps128_ps256(b);
	}
	_Pragma("GCC unroll 8")
	for (int c = 0; c < 8; c++)
		a[c] = c < C ? acc[c] : _mm256_setzero_ps();
	/* p[j]: low 128 bits token 2j, high token 2j+1; lane i = a_i + a_{i+4} */
	_Pragma("GCC unroll 4")
	for (int j = 0; j < 4; j++)
		p[j] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * j], a[2 * j + 1], 0x20),
							 _mm256_permute2f128_ps(a[2 * j], a[2 * j + 1], 0x31));
	/* u[k]: per 128 bits [b0+b2, b1+b3] of two tokens (4k+0|1 and 4k+2|3) */
	_Pragma("GCC unroll 2")
	for (int k = 0; k < 2; k++)
		u[k] = _mm256_add_ps(_mm256_shuffle_ps(p[2 * k], p[2 * k + 1], 0x44),
							 _mm256_shuffle_ps(p[2 * k], p[2 * k + 1], 0xEE));
	/* lanes: tokens 0,2,4,6 | 1,3,5,7 */
	h = _mm256_hadd_ps(u[0], u[1]);
	return _mm256_permutevar8x32_ps(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Store lanes 0..C-1 of v to out. */
static inline __attribute__((always_inline)) void
MM_NAME(store) (const int C, float *out, __m256 v)
{
	if (C == 8)
		_mm256_storeu_ps(out, v);
	else
	{
		float		tmp[8];

		_mm256_storeu_ps(tmp, v);
		_Pragma("GCC unroll 8")
		for (int c = 0; c < C; c++)
			out[c] = tmp[c];
	}
}

/*
 * A Q4_1 block's 32 quants as bytes 0..15: element i (i < 16) the low
 * nibble of byte i, element 16 + i its high nibble.  The 16 bytes are
 * loaded into both 128-bit halves and the upper half shifted right by 4
 * (one variable shift, no cross-lane insert).
 */
static inline __attribute__((always_inline)) __m256i
MM_NAME(q4_1_unpack) (const uint8_t *qs)
{
	__m256i		q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) qs));

	return _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_setr_epi64x(0, 0, 4, 4)),
							_mm256_set1_epi8(0x0F));
}

/* Q4_1 weights x Q8_1 activations. */
static inline __attribute__((always_inline)) void
MM_NAME(q4_1_direct) (const int C, int nb, int n_rows,
					const uint8_t *w, size_t w_stride,
					const uint8_t *x, size_t x_stride,
					const float *xs, float *out)
{
	for (int r = 0; r < n_rows; r++)
	{
		const opus_block_q4_1 *wr = (const opus_block_q4_1 *) (w + (size_t) r * w_stride);
		__m256		acc[8];
		__m256		ms = _mm256_setzero_ps();

		_Pragma("GCC unroll 8")
		for (int c = 0; c < C; c++)
			acc[c] = _mm256_setzero_ps();
		for (int b = 0; b < nb; b++)
		{
			__m256i		wq = MM_NAME(q4_1_unpack) (wr[b].qs);

			if (C == 1)
				_mm_prefetch((const char *) (wr + b) + MM_PREFETCH, _MM_HINT_T0);
			uint32_t	dm_bits;
			__m128		dm;
			__m256		dw,
						mw;

			memcpy(&dm_bits, &wr[b].d, sizeof(dm_bits));	/* d and m are adjacent */
			dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int) dm_bits));
			dw = _mm256_broadcastss_ps(dm);
			mw = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
			ms = _mm256_fmadd_ps(mw, _mm256_loadu_ps(xs + (size_t) (nb + b) * 8), ms);
			_Pragma("GCC unroll 8")
			for (int c = 0; c < C; c++)
			{
				const opus_block_q8_1 *xb = (const opus_block_q8_1 *) (x + c * x_stride) + b;
				__m256		p = _mm256_cvtepi32_ps(MM_DOT(wq, _mm256_loadu_si256((const __m256i *) xb->qs)));
				__m256		scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(xs + (size_t) b * 8 + c));

				acc[c] = _mm256_fmadd_ps(scale, p, acc[c]);
			}
		}
		MM_NAME(store) (C, out + (size_t) r * 8, _mm256_add_ps(MM_NAME(reduce) (C, acc), ms));
	}
}

/*
 * A Q5_0 block's quants as signed bytes q - 16 (-16..15, ggml's way: the
 * fifth bit clear puts 0xF0 above the nibble).
 */
static inline __attribute__((always_inline)) __m256i
MM_NAME(q5_0_quants) (const opus_block_q5_0 *b)
{
	const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
											2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
	const __m256i bit = _mm256_set1_epi64x((long long) 0x8040201008040201ULL);
	uint32_t	qh;
	__m128i		q = _mm_loadu_si128((const __m128i *) b->qs);
	__m256i		lo,
				hb;

	memcpy(&qh, b->qh, sizeof(qh));
	/* byte j: 0xFF where bit j of qh is set */
	hb = _mm256_shuffle_epi8(_mm256_set1_epi32((int) qh), spread);
	hb = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit);
	lo = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
	return _mm256_or_si256(lo, _mm256_andnot_si256(hb, _mm256_set1_epi8((char) 0xF0)));
}

/*
 * Signed 8-bit weights (Q8_0, or Q5_0 unpacked by q5_0_quants) x Q8_0
 * activations, one body for both: wt picks the block layout and the
 * unpacking, the rest is the same.  Each token takes the sign trick (|w|
 * times x with w's sign), which gives the lane sums of llama.cpp's vec_dot
 * for either type.
 */
static inline __attribute__((always_inline)) __m256i
MM_NAME(s8_quants) (const enum opus_qtype wt, const uint8_t *blk)
{
	if (wt == OPUS_TYPE_Q5_0)
		return MM_NAME(q5_0_quants) ((const opus_block_q5_0 *) blk);
	return _mm256_loadu_si256((const __m256i *) ((const opus_block_q8_0 *) blk)->qs);
}

static inline __attribute__((always_inline)) void
MM_NAME(s8_direct) (const int C, const enum opus_qtype wt, int nb, int n_rows,
					const uint8_t *w, size_t w_stride,
					const uint8_t *x, size_t x_stride,
					const float *xs, float *out)
{
	const size_t bb = wt == OPUS_TYPE_Q5_0 ? sizeof(opus_block_q5_0) : sizeof(opus_block_q8_0);

	for (int r = 0; r < n_rows; r++)
	{
		const uint8_t *wr = w + (size_t) r * w_stride;
		__m256		acc[8];

		_Pragma("GCC unroll 8")
		for (int c = 0; c < C; c++)
			acc[c] = _mm256_setzero_ps();
		for (int b = 0; b < nb; b++)
		{
			const uint8_t *wb = wr + (size_t) b * bb;
			__m256i		wq = MM_NAME(s8_quants) (wt, wb);
			__m256i		wa = _mm256_sign_epi8(wq, wq);
			uint16_t	d;

			if (C == 1)
				_mm_prefetch((const char *) wb + MM_PREFETCH, _MM_HINT_T0);
			memcpy(&d, wb, sizeof(d));	/* the block scale comes first */
			__m256		dw = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(d)));

			_Pragma("GCC unroll 8")
			for (int c = 0; c < C; c++)
			{
				const opus_block_q8_0 *xb = (const opus_block_q8_0 *) (x + c * x_stride) + b;
				__m256i		xv = _mm256_loadu_si256((const __m256i *) xb->qs);
				__m256		p = _mm256_cvtepi32_ps(MM_DOT(wa, _mm256_sign_epi8(xv, wq)));
				__m256		scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(xs + (size_t) b * 8 + c));

				acc[c] = _mm256_fmadd_ps(scale, p, acc[c]);
			}
		}
		MM_NAME(store) (C, out + (size_t) r * 8, MM_NAME(reduce) (C, acc));
	}
}

/*
 * ---- the "scaled" form ----
 *
 * Copy the group's activation quants (32 bytes per block and token, at
 * qs_off in blocks of blk_bytes) to xr[b * 8 + c], 32-byte aligned, so the
 * inner loop's loads never straddle cache lines.
 */
static inline __attribute__((always_inline)) void
MM_NAME(gather_x) (const int C, int nb, const uint8_t *x, size_t x_stride,
				   size_t blk_bytes, size_t qs_off, __m256i *xr)
{
	for (int b = 0; b < nb; b++)
	{
		_Pragma("GCC unroll 8")
		for (int c = 0; c < C; c++)
			xr[b * 8 + c] = _mm256_loadu_si256((const __m256i *) (x + c * x_stride + b * blk_bytes + qs_off));
	}
}

/*
 * sc[b * 8 + c] = d_w(b) * d_x(b, c) for one weight row (the weight block
 * scale is the first fp16 of each block_bytes-byte block): the very
 * products the direct form computes per token.
 */
static inline __attribute__((always_inline)) void
MM_NAME(row_scales) (int nb, const uint8_t *wr, size_t block_bytes, const float *xs,
					 float *sc)
{
	for (int b = 0; b < nb; b++)
	{
		uint16_t	d;
		__m256		dw;

		memcpy(&d, wr + (size_t) b * block_bytes, sizeof(d));
		dw = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(d)));
		_mm256_store_ps(sc + b * 8, _mm256_mul_ps(dw, _mm256_loadu_ps(xs + (size_t) b * 8)));
	}
}

/*
 * row_scales for a Q4_1 row, and mf[b] = its block b's min as a float, so
 * the inner loop reads it with a plain broadcast load.
 */
static inline __attribute__((always_inline)) void
MM_NAME(q4_1_row_scales) (int nb, const uint8_t *wr, const float *xs, float *sc, float *mf)
{
	for (int b = 0; b < nb; b++)
	{
		uint32_t	dm_bits;
		__m128		dm;

		memcpy(&dm_bits, wr + (size_t) b * sizeof(opus_block_q4_1), sizeof(dm_bits));	/* d, m */
		dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int) dm_bits));
		_mm256_store_ps(sc + b * 8, _mm256_mul_ps(_mm256_broadcastss_ps(dm),
												  _mm256_loadu_ps(xs + (size_t) b * 8)));
		_mm_store_ss(mf + b, _mm_movehdup_ps(dm));
	}
}

/* Q4_1 weights x Q8_1 activations, scaled form (nb <= MM_MAX_NB). */
static inline __attribute__((always_inline)) void
MM_NAME(q4_1_scaled) (const int C, int nb, int n_rows,
					  const uint8_t *w, size_t w_stride,
					  const uint8_t *x, size_t x_stride,
					  const float *xs, float *out)
{
	float		sc[2][MM_MAX_NB * 8] __attribute__((aligned(32)));
	float		mf[2][MM_MAX_NB];
	__m256i		xr[MM_MAX_NB * 8];

	MM_NAME(gather_x) (C, nb, x, x_stride, sizeof(opus_block_q8_1), 4, xr);
	MM_NAME(q4_1_row_scales) (nb, w, xs, sc[0], mf[0]);
	for (int r = 0; r < n_rows; r++)
	{
		const opus_block_q4_1 *wr = (const opus_block_q4_1 *) (w + (size_t) r * w_stride);
		const float *scr = sc[r & 1];
		const float *mfr = mf[r & 1];
		__m256		acc[8];
		__m256		ms = _mm256_setzero_ps();

		/* the next row's scales: stored well before they are read */
		if (r + 1 < n_rows)
			MM_NAME(q4_1_row_scales) (nb, w + (size_t) (r + 1) * w_stride, xs,
									  sc[(r + 1) & 1], mf[(r + 1) & 1]);
		_Pragma("GCC unroll 8")
		for (int c = 0; c < C; c++)
			acc[c] = _mm256_setzero_ps();
		for (int b = 0; b < nb; b++)
		{
			__m256i		wq = MM_NAME(q4_1_unpack) (wr[b].qs);
			__m256		mw = _mm256_broadcast_ss(mfr + b);
			const float *scb = scr + b * 8;

			ms = _mm256_fmadd_ps(mw, _mm256_loadu_ps(xs + (size_t) (nb + b) * 8), ms);
			_Pragma("GCC unroll 8")
			for (int c = 0; c < C; c++)
			{
				__m256		p = _mm256_cvtepi32_ps(MM_DOT(wq, xr[b * 8 + c]));

				acc[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(scb + c), p, acc[c]);
			}
		}
		MM_NAME(store) (C, out + (size_t) r * 8, _mm256_add_ps(MM_NAME(reduce) (C, acc), ms));
	}
}

/* s8_direct's kernels (Q8_0 or Q5_0 weights), scaled form (nb <= MM_MAX_NB). */
static inline __attribute__((always_inline)) void
MM_NAME(s8_scaled) (const int C, const enum opus_qtype wt, int nb, int n_rows,
					const uint8_t *w, size_t w_stride,
					const uint8_t *x, size_t x_stride,
					const float *xs, float *out)
{
	const size_t bb = wt == OPUS_TYPE_Q5_0 ? sizeof(opus_block_q5_0) : sizeof(opus_block_q8_0);
	float		sc[2][MM_MAX_NB * 8] __attribute__((aligned(32)));
	__m256i		xr[MM_MAX_NB * 8];

	MM_NAME(gather_x) (C, nb, x, x_stride, sizeof(opus_block_q8_0), 2, xr);
	MM_NAME(row_scales) (nb, w, bb, xs, sc[0]);
	for (int r = 0; r < n_rows; r++)
	{
		const uint8_t *wr = w + (size_t) r * w_stride;
		const float *scr = sc[r & 1];
		__m256		acc[8];

		if (r + 1 < n_rows)
			MM_NAME(row_scales) (nb, w + (size_t) (r + 1) * w_stride, bb, xs, sc[(r + 1) & 1]);
		_Pragma("GCC unroll 8")
		for (int c = 0; c < C; c++)
			acc[c] = _mm256_setzero_ps();
		for (int b = 0; b < nb; b++)
		{
			__m256i		wq = MM_NAME(s8_quants) (wt, wr + (size_t) b * bb);
			__m256i		wa = _mm256_sign_epi8(wq, wq);
			const float *scb = scr + b * 8;

			_Pragma("GCC unroll 8")
			for (int c = 0; c < C; c++)
			{
				__m256		p = _mm256_cvtepi32_ps(MM_DOT(wa, _mm256_sign_epi8(xr[b * 8 + c], wq)));

				acc[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(scb + c), p, acc[c]);
			}
		}
		MM_NAME(store) (C, out + (size_t) r * 8, MM_NAME(reduce) (C, acc));
	}
}

/* The C-token kernels: scaled form for 6..8 tokens when the row fits, else direct. */
static inline __attribute__((always_inline)) void
MM_NAME(q4_1_rows) (const int C, int nb, int n_rows,
					const uint8_t *w, size_t w_stride,
					const uint8_t *x, size_t x_stride,
					const float *xs, float *out)
{
	if (C >= 6 && nb <= MM_MAX_NB)
		MM_NAME(q4_1_scaled) (C, nb, n_rows, w, w_stride, x, x_stride, xs, out);
	else
		MM_NAME(q4_1_direct) (C, nb, n_rows, w, w_stride, x, x_stride, xs, out);
}

static inline __attribute__((always_inline)) void
MM_NAME(q8_0_rows) (const int C, int nb, int n_rows,
					const uint8_t *w, size_t w_stride,
					const uint8_t *x, size_t x_stride,
					const float *xs, float *out)
{
	if (C >= 6 && nb <= MM_MAX_NB)
		MM_NAME(s8_scaled) (C, OPUS_TYPE_Q8_0, nb, n_rows, w, w_stride, x, x_stride, xs, out);
	else
		MM_NAME(s8_direct) (C, OPUS_TYPE_Q8_0, nb, n_rows, w, w_stride, x, x_stride, xs, out);
}

/*
 * Q4_0 weights x Q8_0 activations in llama.cpp's order for Q4_0 (its
 * repacked q4_0_8x8 kernels, the same for one token and many): per output
 * one scalar chain over the blocks in order, acc = fma((float) exact block
 * sum, w.d * x.d rounded, acc), no horizontal sum.  Eight weight rows run in
 * the eight lanes: per block each row's partial sums are reduced to one
 * lane (exact integers), so every lane is exactly that chain.  Rows beyond
 * a multiple of 8 take the same chain one at a time.
 *
 * Two rows' blocks share a register (row 2j in the low 128 bits, row 2j + 1
 * in the high): one AND gives both rows' first 16 quants, a shift and an
 * AND their last 16, met by the activation's halves broadcast to both
 * 128-bit lanes (MM_DOT2), and three horizontal adds reduce the four
 * registers to one lane per row, in the order rows 0, 2, 4, 6, 1, 3, 5, 7
 * (the weight scales are gathered in that order, the results stored back
 * in row order).  For one token (decode) the weights stream from memory:
 * eight rows read side by side are eight streams, which the hardware
 * prefetchers follow badly, so the group two groups ahead is prefetched as
 * one linear run, a slice per block (measured: 4.4 -> 7.2 GB/s on a
 * 2,048-wide matrix, 80% of the read bandwidth, where 8 plain streams reach
 * 6).
 */

/* 8 * (sum of the quants of block b of token c), for c < C, b < nb */
static inline __attribute__((always_inline)) void
MM_NAME(q4_0_ysums) (const int C, int nb, const uint8_t *x, size_t x_stride, int32_t *ys)
{
	const __m256i ones = _mm256_set1_epi8(1);

	for (int c = 0; c < C; c++)
		for (int b = 0; b < nb; b++)
		{
			const opus_block_q8_0 *xb = (const opus_block_q8_0 *) (x + c * x_stride) + b;
			__m256i		t = MM_DOT(ones, _mm256_loadu_si256((const __m256i *) xb->qs));
			__m128i		h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));

			h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
			h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
			ys[b * 8 + c] = 8 * _mm_cvtsi128_si32(h);
		}
}

#define MM_Q4_0_MAX_NB 512

static inline __attribute__((always_inline)) void
MM_NAME(q4_0_rows) (const int C, int nb, int n_rows,
					const uint8_t *w, size_t w_stride,
					const uint8_t *x, size_t x_stride,
					const float *xs, float *out)
{
	const __m256i lowmask = _mm256_set1_epi8(0x0F);
	const __m256i ones = _mm256_set1_epi8(1);
	int32_t		ys[MM_Q4_0_MAX_NB * 8];
	bool		grouped = nb <= MM_Q4_0_MAX_NB && n_rows >= 8;
	size_t		group_bytes = 8 * w_stride;
	int			r = 0;

	if (grouped)
		MM_NAME(q4_0_ysums) (C, nb, x, x_stride, ys);
	for (; grouped && r + 8 <= n_rows; r += 8)
	{
		const uint8_t *g = w + (size_t) r * w_stride;
		/* the slice of the group two ahead that block b prefetches */
		size_t		pf_step = (group_bytes + (size_t) nb - 1) / (size_t) nb;
		__m256		acc[8];

		_Pragma("GCC unroll 8")
		for (int c = 0; c < C; c++)
			acc[c] = _mm256_setzero_ps();
		for (int b = 0; b < nb; b++)
		{
			__m256i		lo[4],
						hi[4];
			uint64_t	d_even = 0,
						d_odd = 0;
			__m256		dw;

			if (C == 1)
			{
				const char *pf = (const char *) g + 2 * group_bytes + (size_t) b * pf_step;

				for (size_t off = 0; off < pf_step; off += 64)
					_mm_prefetch(pf + off, _MM_HINT_T0);
			}
			_Pragma("GCC unroll 4")
			for (int j = 0; j < 4; j++)
			{
				const opus_block_q4_0 *b0 = (const opus_block_q4_0 *) (g + (size_t) (2 * j) * w_stride) + b;
				const opus_block_q4_0 *b1 = (const opus_block_q4_0 *) (g + (size_t) (2 * j + 1) * w_stride) + b;
				__m256i		v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *) b0->qs)),
														_mm_loadu_si128((const __m128i *) b1->qs), 1);

				lo[j] = _mm256_and_si256(v, lowmask);
				hi[j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), lowmask);
				/* lanes 0..3: rows 0, 2, 4, 6; lanes 4..7: rows 1, 3, 5, 7 */
				d_even |= (uint64_t) b0->d << (16 * j);
				d_odd |= (uint64_t) b1->d << (16 * j);
			}
			/* built in registers (a store then a vector load would stall) */
			dw = _mm256_cvtph_ps(_mm_set_epi64x((long long) d_odd, (long long) d_even));
			_Pragma("GCC unroll 8")
			for (int c = 0; c < C; c++)
			{
				const opus_block_q8_0 *xb = (const opus_block_q8_0 *) (x + c * x_stride) + b;
				__m256i		ylo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) xb->qs));
				__m256i		yhi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) (xb->qs + 16)));
				__m256i		p[4];
				__m256i		isum;

				/* sum (q - 8) y = sum q y - 8 sum y */
				_Pragma("GCC unroll 4")
				for (int j = 0; j < 4; j++)
					p[j] = MM_DOT2(lo[j], ylo, hi[j], yhi);
				isum = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
				isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(ys[b * 8 + c]));
				acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
										 _mm256_mul_ps(dw, _mm256_broadcast_ss(xs + (size_t) b * 8 + c)),
										 acc[c]);
			}
		}
		_Pragma("GCC unroll 8")
		for (int c = 0; c < C; c++)
		{
			float		v[8];

			_mm256_storeu_ps(v, acc[c]);
			_Pragma("GCC unroll 4")
			for (int j = 0; j < 4; j++)
			{
				out[(size_t) (r + 2 * j) * 8 + c] = v[j];
				out[(size_t) (r + 2 * j + 1) * 8 + c] = v[4 + j];
			}
		}
	}
	for (; r < n_rows; r++)
	{
		const opus_block_q4_0 *wr = (const opus_block_q4_0 *) (w + (size_t) r * w_stride);

		for (int c = 0; c < C; c++)
		{
			const opus_block_q8_0 *xr = (const opus_block_q8_0 *) (x + c * x_stride);
			float		a = 0.0f;

			for (int b = 0; b < nb; b++)
			{
				__m128i		q = _mm_loadu_si128((const __m128i *) wr[b].qs);
				__m256i		wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), lowmask);
				__m256i		xv = _mm256_loadu_si256((const __m256i *) xr[b].qs);
				__m256i		t = _mm256_sub_epi32(MM_DOT(wq, xv), _mm256_slli_epi32(MM_DOT(ones, xv), 3));
				__m128i		h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
				float		dw = _cvtsh_ss(wr[b].d);

				h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
				h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
				a = __builtin_fmaf((float) _mm_cvtsi128_si32(h), dw * xs[(size_t) b * 8 + c], a);
			}
			out[(size_t) r * 8 + c] = a;
		}
	}
}

/*
 * Q5_0 weights x Q8_0 activations, llama.cpp's order for Q5_0 (the bits of
 * q5_0_vec_dot_avx2: one 8-lane accumulator per output, block sums fused in
 * with w.d * x.d in block order, reduced as ggml's hsum at the end; the
 * reduction of matmul_tile.h above).  The weight quants are unpacked once
 * per block by q5_0_quants, shared by the C tokens, and each token takes
 * the sign trick of Q8_0, which gives exactly q5_0_vec_dot_avx2's lane
 * sums sum (q - 16) x: s8_scaled for 6..8 tokens when the row fits, else
 * s8_direct (the Q8_0 kernels' bodies); the same values either way.
 *
 * One token (decode): four rows at a time, so that four independent
 * chains of fused adds (one per output, in block order as always) and
 * their unpacking overlap; the rest one by one.
 */
static inline __attribute__((always_inline)) void
MM_NAME(q5_0_one) (int nb, int n_rows, const uint8_t *w, size_t w_stride,
				   const uint8_t *x, const float *xs, float *out)
{
	const opus_block_q8_0 *xb = (const opus_block_q8_0 *) x;
	int			r = 0;

	for (; r + 4 <= n_rows; r += 4)
	{
		__m256		acc[4];

		_Pragma("GCC unroll 4")
		for (int k = 0; k < 4; k++)
			acc[k] = _mm256_setzero_ps();
		for (int b = 0; b < nb; b++)
		{
			__m256i		xv = _mm256_loadu_si256((const __m256i *) xb[b].qs);
			__m256		dx = _mm256_broadcast_ss(xs + (size_t) b * 8);

			_Pragma("GCC unroll 4")
			for (int k = 0; k < 4; k++)
			{
				const opus_block_q5_0 *wb = (const opus_block_q5_0 *) (w + (size_t) (r + k) * w_stride) + b;
				__m256i		wq = MM_NAME(q5_0_quants) (wb);
				__m256		dw = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(wb->d)));
				__m256		p = _mm256_cvtepi32_ps(MM_DOT(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv, wq)));

				_mm_prefetch((const char *) wb + MM_PREFETCH, _MM_HINT_T0);
				acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), p, acc[k]);
			}
		}
		_Pragma("GCC unroll 4")
		for (int k = 0; k < 4; k++)
			MM_NAME(store) (1, out + (size_t) (r + k) * 8, MM_NAME(reduce) (1, &acc[k]));
	}
	if (r < n_rows)
		MM_NAME(s8_direct) (1, OPUS_TYPE_Q5_0, nb, n_rows - r, w + (size_t) r * w_stride, w_stride,
							x, 0, xs, out + (size_t) r * 8);
}

static inline __attribute__((always_inline)) void
MM_NAME(q5_0_rows) (const int C, int nb, int n_rows,
					const uint8_t *w, size_t w_stride,
					const uint8_t *x, size_t x_stride,
					const float *xs, float *out)
{
	if (C >= 6 && nb <= MM_MAX_NB)
		MM_NAME(s8_scaled) (C, OPUS_TYPE_Q5_0, nb, n_rows, w, w_stride, x, x_stride, xs, out);
	else if (C == 1)
		MM_NAME(q5_0_one) (nb, n_rows, w, w_stride, x, xs, out);
	else
		MM_NAME(s8_direct) (C, OPUS_TYPE_Q5_0, nb, n_rows, w, w_stride, x, x_stride, xs, out);
}

#define MM_INSTANCE(type, C) \
static void \
MM_NAME(type##_##C) (int nb, int n_rows, const uint8_t *w, size_t ws, \
					 const uint8_t *x, size_t xst, const float *xs, float *out) \
{ \
	MM_NAME(type##_rows) (C, nb, n_rows, w, ws, x, xst, xs, out); \
}

MM_INSTANCE(q4_1, 1) MM_INSTANCE(q4_1, 2) MM_INSTANCE(q4_1, 3) MM_INSTANCE(q4_1, 4)
MM_INSTANCE(q4_1, 5) MM_INSTANCE(q4_1, 6) MM_INSTANCE(q4_1, 7) MM_INSTANCE(q4_1, 8)
MM_INSTANCE(q8_0, 1) MM_INSTANCE(q8_0, 2) MM_INSTANCE(q8_0, 3) MM_INSTANCE(q8_0, 4)
MM_INSTANCE(q8_0, 5) MM_INSTANCE(q8_0, 6) MM_INSTANCE(q8_0, 7) MM_INSTANCE(q8_0, 8)
MM_INSTANCE(q4_0, 1) MM_INSTANCE(q4_0, 2) MM_INSTANCE(q4_0, 3) MM_INSTANCE(q4_0, 4)
MM_INSTANCE(q4_0, 5) MM_INSTANCE(q4_0, 6) MM_INSTANCE(q4_0, 7) MM_INSTANCE(q4_0, 8)
MM_INSTANCE(q5_0, 1) MM_INSTANCE(q5_0, 2) MM_INSTANCE(q5_0, 3) MM_INSTANCE(q5_0, 4)
MM_INSTANCE(q5_0, 5) MM_INSTANCE(q5_0, 6) MM_INSTANCE(q5_0, 7) MM_INSTANCE(q5_0, 8)

static const opus_mm_rows_fn MM_NAME(q4_1_table)[8] = {
	MM_NAME(q4_1_1), MM_NAME(q4_1_2), MM_NAME(q4_1_3), MM_NAME(q4_1_4),
	MM_NAME(q4_1_5), MM_NAME(q4_1_6), MM_NAME(q4_1_7), MM_NAME(q4_1_8),
};
static const opus_mm_rows_fn MM_NAME(q8_0_table)[8] = {
	MM_NAME(q8_0_1), MM_NAME(q8_0_2), MM_NAME(q8_0_3), MM_NAME(q8_0_4),
	MM_NAME(q8_0_5), MM_NAME(q8_0_6), MM_NAME(q8_0_7), MM_NAME(q8_0_8),
};
static const opus_mm_rows_fn MM_NAME(q4_0_table)[8] = {
	MM_NAME(q4_0_1), MM_NAME(q4_0_2), MM_NAME(q4_0_3), MM_NAME(q4_0_4),
	MM_NAME(q4_0_5), MM_NAME(q4_0_6), MM_NAME(q4_0_7), MM_NAME(q4_0_8),
};
static const opus_mm_rows_fn MM_NAME(q5_0_table)[8] = {
	MM_NAME(q5_0_1), MM_NAME(q5_0_2), MM_NAME(q5_0_3), MM_NAME(q5_0_4),
	MM_NAME(q5_0_5), MM_NAME(q5_0_6), MM_NAME(q5_0_7), MM_NAME(q5_0_8),
};

#undef MM_INSTANCE
#undef MM_Q4_0_MAX_NB
