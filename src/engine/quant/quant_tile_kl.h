/*
 * quant_tile_kl.h - template of the K-quant tile kernels (one weight row
 * times up to 8 tokens at a time), included by quant_avx2.c once per
 * instruction set.  Before including, define TL_NAME(x), the variant's name
 * for x (x##_avx2), and TL_Q4_K for the Q4_K tiles too.  The variants differ only in the registers the compiler
 * may use (the AVX-512 one has 32, so the unpacked block stays in them).
 *
 * The tile unpacks a super-block of one row once (8 vectors of 32 quants as
 * unsigned bytes, and 8 vectors of the matching 16-bit sub-block scales:
 * vector j meets activation quants 32j..32j+31) and every token of the
 * group runs the integer part against it.  Each token's integer sums are
 * exactly the one-row kernel's (Q5_K, Q6_K: the same 8 lanes, each over the
 * same products; Q4_K: the same per-chunk sums; integer additions are
 * exact, so their order is free) and the float steps are the one-row
 * kernels' own, so every result is bit-identical to vec_dot (or to the
 * other order registered for it) of that row and token, whatever the
 * grouping.
 */

/* a super-block of one row, unpacked */
struct TL_NAME(kl_block)
{
	__m256i		q[8];			/* quants 32j..32j+31 as unsigned bytes */
	__m256i		s[8];			/* their sub-block scales, 16-bit, as madd pairs */
	__m256i		off;			/* Q6_K: the 16 scales (16-bit) for the -32 offset;
								 * Q4_K/Q5_K: the 8 mins, each twice (16-bit) */
	float		d,
				dmin;
};

static inline __attribute__((always_inline)) void
TL_NAME(q6_K_unpack) (const opus_block_q6_K *a, struct TL_NAME(kl_block) *u)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	const __m256i m2 = _mm256_set1_epi8(0x30);
	__m128i		sc8 = _mm_loadu_si128((const __m128i *) a->scales);

	u->off = _mm256_cvtepi8_epi16(sc8);
	u->d = f16(a->d);
	u->dmin = 0.0f;
#pragma GCC unroll 2
	for (int h = 0; h < 2; h++)
	{
		__m256i		qh = load256(a->qh + 32 * h);
		__m256i		l0 = load256(a->ql + 64 * h);
		__m256i		l1 = load256(a->ql + 64 * h + 32);
		__m256i		s16 = _mm256_broadcastsi128_si256(
													  _mm_cvtepi8_epi16(h ? _mm_unpackhi_epi64(sc8, sc8) : sc8));

		u->q[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4),
									  _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
		u->q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
										  _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
		u->q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
										  _mm256_and_si256(qh, m2));
		u->q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
										  _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
			u->s[4 * h + k] = q6_scale_pair(s16, k);
	}
}

static inline __attribute__((always_inline)) void
TL_NAME(q5_K_unpack) (const opus_block_q5_K *a, struct TL_NAME(kl_block) *u)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	const __m256i bit4 = _mm256_set1_epi8(0x10);
	__m256i		hbits = load256(a->qh);
	__m128i		sc,
				mn;
	__m256i		sc16;

	k_unpack_scales(a->scales, &sc, &mn);
	sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc));
	u->off = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
	u->d = f16(a->d);
	u->dmin = f16(a->dmin);
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++)
	{
		__m256i		q = load256(a->qs + 32 * c);

		u->q[2 * c] = _mm256_or_si256(_mm256_and_si256(q, m4),
									  _mm256_and_si256(_mm256_slli_epi16(hbits, 4), bit4));
		u->q[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
										  _mm256_and_si256(_mm256_slli_epi16(hbits, 3), bit4));
		u->s[2 * c] = bcast_i16(sc16, 2 * c);
		u->s[2 * c + 1] = bcast_i16(sc16, 2 * c + 1);
		hbits = _mm256_srli_epi16(hbits, 2);
	}
}

static inline __attribute__((always_inline)) void
TL_NAME(q4_K_unpack) (const opus_block_q4_K *a, struct TL_NAME(kl_block) *u)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	__m128i		sc,
				mn;
	__m256i		sc16;

	k_unpack_scales(a->scales, &sc, &mn);
	sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc));
	u->off = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
	u->d = f16(a->d);
	u->dmin = f16(a->dmin);
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++)
	{
		__m256i		q = load256(a->qs + 32 * c);

		u->q[2 * c] = _mm256_and_si256(q, m4);
		u->q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
		u->s[2 * c] = bcast_i16(sc16, 2 * c);
		u->s[2 * c + 1] = bcast_i16(sc16, 2 * c + 1);
	}
}

/* sum_j scales_j * (quants_j . activation quants 32j..), into init's lanes */
static inline __attribute__((always_inline)) __m256i
TL_NAME(kl_sums) (const struct TL_NAME(kl_block) *u, const int8_t *xq, __m256i sumi)
{
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++)
		sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(u->q[j], load256(xq + 32 * j)),
														u->s[j]));
	return sumi;
}

/*
 * Q6_K row w times tokens x .. x + (C - 1) * xst (Q8_K), C <= 8:
 * out[t * ld] = q6_K_vec_dot_avx2 (tiled false) or
 * opus_q6_K_vec_dot_tiled_avx2 (tiled true) of the row and token t.
 */
static inline __attribute__((always_inline)) void
TL_NAME(q6_K_row) (int64_t n, const opus_block_q6_K *a, int C, const uint8_t *x, size_t xst,
				   float *out, int ld, bool tiled)
{
	__m256		acc[8];
	float		accs[8];

	for (int t = 0; t < C; t++)
	{
		acc[t] = _mm256_setzero_ps();
		accs[t] = 0.0f;
	}
	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		struct TL_NAME(kl_block) u;

		_mm_prefetch((const char *) (a + i) + 1024, _MM_HINT_T0);
		TL_NAME(q6_K_unpack) (&a[i], &u);
		for (int t = 0; t < C; t++)
		{
			const opus_block_q8_K *b = (const opus_block_q8_K *) (x + (size_t) t * xst) + i;
			__m256i		off = _mm256_madd_epi16(u.off, load256(b->bsums));
			__m256i		sumi = TL_NAME(kl_sums) (&u, b->qs,
												 _mm256_sub_epi32(_mm256_setzero_si256(),
																  _mm256_slli_epi32(off, 5)));

			if (tiled)
				accs[t] = k_tiled_step(accs[t], (float) hsum_epi32(sumi) * u.d, b->d);
			else
				acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(b->d * u.d), _mm256_cvtepi32_ps(sumi), acc[t]);
		}
	}
	for (int t = 0; t < C; t++)
		out[(size_t) t * ld] = tiled ? accs[t] : hsum_ps(acc[t]);
}

/* the same for Q5_K (q5_K_vec_dot_avx2 / opus_q5_K_vec_dot_tiled_avx2) */
static inline __attribute__((always_inline)) void
TL_NAME(q5_K_row) (int64_t n, const opus_block_q5_K *a, int C, const uint8_t *x, size_t xst,
				   float *out, int ld, bool tiled)
{
	__m256		acc[8];
	float		accs[8];

	for (int t = 0; t < C; t++)
	{
		acc[t] = _mm256_setzero_ps();
		accs[t] = 0.0f;
	}
	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		struct TL_NAME(kl_block) u;

		_mm_prefetch((const char *) (a + i) + 1024, _MM_HINT_T0);
		TL_NAME(q5_K_unpack) (&a[i], &u);
		for (int t = 0; t < C; t++)
		{
			const opus_block_q8_K *b = (const opus_block_q8_K *) (x + (size_t) t * xst) + i;
			int			mins = hsum_epi32(_mm256_madd_epi16(u.off, load256(b->bsums)));
			__m256i		sumi = TL_NAME(kl_sums) (&u, b->qs, _mm256_setzero_si256());

			if (tiled)
			{
				float		d = u.d * (float) hsum_epi32(sumi);

				__asm__("" : "+x"(d));
				accs[t] = k_tiled_step(accs[t], __builtin_fmaf(-u.dmin, (float) mins, d), b->d);
			}
			else
			{
				accs[t] = __builtin_fmaf(-b->d * u.dmin, (float) mins, accs[t]);
				acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(b->d * u.d), _mm256_cvtepi32_ps(sumi), acc[t]);
			}
		}
	}
	for (int t = 0; t < C; t++)
		out[(size_t) t * ld] = tiled ? accs[t] : hsum_ps(acc[t]) + accs[t];
}

/* d of super-block i of token t (of C; t >= C: token C - 1) */
static inline __attribute__((always_inline)) float
TL_NAME(q8_K_d) (const uint8_t *x, size_t xst, int64_t i, int t, int C)
{
	return ((const opus_block_q8_K *) (x + (size_t) (t < C ? t : C - 1) * xst) + i)->d;
}

/*
 * Q4_K row w times tokens x .. x + (C - 1) * xst (Q8_K), C <= 8:
 * out[t * ld] = q4_K_vec_dot_avx2 (gemv false: chains stepping per 64-quant
 * chunk) or opus_q4_K_vec_dot_gemv_avx2 (gemv true: per super-block) of the
 * row and token t.  Per super-block each token's 4 chunk sums and 4 min
 * sums (exact integers) are stored, then the float chains of the C tokens
 * run in the lanes of one vector (tokens in the order 0,2,4,6,1,3,5,7,
 * which the loads' transpose gives), each lane the one-row kernel's chain.
 */
static inline __attribute__((always_inline)) void
TL_NAME(q4_K_row) (int64_t n, const opus_block_q4_K *a, int C, const uint8_t *x, size_t xst,
				   float *out, int ld, bool gemv)
{
	__m256		acc = _mm256_setzero_ps(),
				accm = _mm256_setzero_ps();
	int32_t		st[8][4] __attribute__((aligned(32))),
				mt[8][4] __attribute__((aligned(32)));

	memset(st, 0, sizeof(st));
	memset(mt, 0, sizeof(mt));
	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		struct TL_NAME(kl_block) u;
		__m256i		r[4],
					lo[4],
					hi[4],
					sv[4],
					mv[4];
		__m256		dxp,
					dv,
					dmv;

		_mm_prefetch((const char *) (a + i) + 1024, _MM_HINT_T0);
		TL_NAME(q4_K_unpack) (&a[i], &u);
		for (int t = 0; t < C; t++)
		{
			const opus_block_q8_K *b = (const opus_block_q8_K *) (x + (size_t) t * xst) + i;
			__m256i		v[4],
						h,
						m;

#pragma GCC unroll 4
			for (int c = 0; c < 4; c++)
				v[c] = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u.q[2 * c], load256(b->qs + 64 * c)),
														  u.s[2 * c]),
										_mm256_madd_epi16(_mm256_maddubs_epi16(u.q[2 * c + 1], load256(b->qs + 64 * c + 32)),
														  u.s[2 * c + 1]));
			/* lane c of each half: chunk c's partial sum; then the halves */
			h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
			_mm_store_si128((__m128i *) st[t], _mm_add_epi32(_mm256_castsi256_si128(h),
															 _mm256_extracti128_si256(h, 1)));
			/* min pairs: sub-blocks 2c, 2c + 1 */
			m = _mm256_madd_epi16(u.off, load256(b->bsums));
			m = _mm256_permute4x64_epi64(_mm256_hadd_epi32(m, m), 0xD8);
			_mm_store_si128((__m128i *) mt[t], _mm256_castsi256_si128(m));
		}
		/* columns c of st/mt, lanes in token order 0,2,4,6,1,3,5,7 */
		for (int k = 0; k < 4; k++)
		{
			/* two 16-byte loads, as stored (a 32-byte one would wait for both stores) */
			r[k] = _mm256_set_m128i(_mm_load_si128((const __m128i *) st[2 * k + 1]),
									_mm_load_si128((const __m128i *) st[2 * k]));
			mv[k] = _mm256_set_m128i(_mm_load_si128((const __m128i *) mt[2 * k + 1]),
									 _mm_load_si128((const __m128i *) mt[2 * k]));
		}
		lo[0] = _mm256_unpacklo_epi32(r[0], r[1]);
		hi[0] = _mm256_unpackhi_epi32(r[0], r[1]);
		lo[1] = _mm256_unpacklo_epi32(r[2], r[3]);
		hi[1] = _mm256_unpackhi_epi32(r[2], r[3]);
		lo[2] = _mm256_unpacklo_epi32(mv[0], mv[1]);
		hi[2] = _mm256_unpackhi_epi32(mv[0], mv[1]);
		lo[3] = _mm256_unpacklo_epi32(mv[2], mv[3]);
		hi[3] = _mm256_unpackhi_epi32(mv[2], mv[3]);
		sv[0] = _mm256_unpacklo_epi64(lo[0], lo[1]);
		sv[1] = _mm256_unpackhi_epi64(lo[0], lo[1]);
		sv[2] = _mm256_unpacklo_epi64(hi[0], hi[1]);
		sv[3] = _mm256_unpackhi_epi64(hi[0], hi[1]);
		mv[0] = _mm256_unpacklo_epi64(lo[2], lo[3]);
		mv[1] = _mm256_unpackhi_epi64(lo[2], lo[3]);
		mv[2] = _mm256_unpacklo_epi64(hi[2], hi[3]);
		mv[3] = _mm256_unpackhi_epi64(hi[2], hi[3]);
		/*
		 * The tokens' d in the same lane order, read from their blocks
		 * (stored one by one and loaded as a vector, they would wait for
		 * the stores); lanes past C repeat token C - 1 and are not used.
		 */
		dxp = _mm256_setr_ps(TL_NAME(q8_K_d) (x, xst, i, 0, C), TL_NAME(q8_K_d) (x, xst, i, 2, C),
							 TL_NAME(q8_K_d) (x, xst, i, 4, C), TL_NAME(q8_K_d) (x, xst, i, 6, C),
							 TL_NAME(q8_K_d) (x, xst, i, 1, C), TL_NAME(q8_K_d) (x, xst, i, 3, C),
							 TL_NAME(q8_K_d) (x, xst, i, 5, C), TL_NAME(q8_K_d) (x, xst, i, 7, C));
		dv = _mm256_mul_ps(_mm256_set1_ps(u.d), dxp);
		dmv = _mm256_mul_ps(_mm256_set1_ps(u.dmin), dxp);
		if (gemv)
		{
			acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_add_epi32(sv[0], sv[1]),
																	  _mm256_add_epi32(sv[2], sv[3]))),
								  dv, acc);
			accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_add_epi32(mv[0], mv[1]),
																	   _mm256_add_epi32(mv[2], mv[3]))),
								   dmv, accm);
		}
		else
		{
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++)
			{
				acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sv[c]), dv, acc);
				accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mv[c]), dmv, accm);
			}
		}
	}
	{
		float		res[8];

		_mm256_storeu_ps(res, _mm256_permutevar8x32_ps(_mm256_sub_ps(acc, accm),
													   _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
		for (int t = 0; t < C; t++)
			out[(size_t) t * ld] = res[t];
	}
}

/*
 * Q5_0 row w times tokens x .. x + (C - 1) * xst (Q8_0), C <= 8:
 * out[t * ld] = q5_0_vec_dot_avx2 of the row and token t.  Each block's
 * quants are unpacked once (q5_values) and every token runs q5_0_dot's
 * integer steps against them (the same 8 lanes, each over the same
 * products) and the one-row kernel's float step, so the bits are vec_dot's.
 * (bool unused: Q5_0 has one order.)
 */
static inline __attribute__((always_inline)) void
TL_NAME(q5_0_row) (int64_t n, const opus_block_q5_0 *a, int C, const uint8_t *x, size_t xst,
				   float *out, int ld, bool unused)
{
	const __m256i k16 = _mm256_set1_epi8(16);
	const __m256i one = _mm256_set1_epi16(1);
	__m256		acc[8];

	(void) unused;
	for (int t = 0; t < C; t++)
		acc[t] = _mm256_setzero_ps();
	for (int64_t i = 0; i < n / OPUS_QK32; i++)
	{
		__m256i		q = q5_values(a[i].qs, a[i].qh);
		float		wd = f16(a[i].d);

		_mm_prefetch((const char *) (a + i) + 512, _MM_HINT_T0);
		for (int t = 0; t < C; t++)
		{
			const opus_block_q8_0 *b = (const opus_block_q8_0 *) (x + (size_t) t * xst) + i;
			__m256i		y = load256(b->qs);
			__m256i		p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, y), _mm256_maddubs_epi16(k16, y));

			acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(wd * f16(b->d)),
									 _mm256_cvtepi32_ps(_mm256_madd_epi16(p, one)), acc[t]);
		}
	}
	for (int t = 0; t < C; t++)
		out[(size_t) t * ld] = hsum_ps(acc[t]);
}

/* any rows and tokens: each row against groups of up to 8 tokens */
#define TL_TILE(type, suffix, tiled) \
static void \
TL_NAME(type##_##suffix) (int64_t n, int n_rows, const void *w, size_t ws, int n_tok, \
						  const void *x, size_t xst, float *out, int ld) \
{ \
	for (int r = 0; r < n_rows; r++) \
		for (int t0 = 0; t0 < n_tok; t0 += 8) \
			TL_NAME(type##_row) (n, (const void *) ((const uint8_t *) w + (size_t) r * ws), \
								 n_tok - t0 < 8 ? n_tok - t0 : 8, \
								 (const uint8_t *) x + (size_t) t0 * xst, xst, \
								 out + (size_t) t0 * ld + r, ld, tiled); \
}

TL_TILE(q6_K, tile, false)
TL_TILE(q6_K, tiled_tile, true)
TL_TILE(q5_K, tile, false)
TL_TILE(q5_K, tiled_tile, true)
TL_TILE(q5_0, tile, false)
#ifdef TL_Q4_K					/* where Q4_K has no better tile (quant_avx2.c) */
TL_TILE(q4_K, tile, false)
TL_TILE(q4_K, gemv_tile, true)
#endif

#undef TL_TILE
