/*
 * quant_tile_k.h - template of the K-quant tile kernels (several weight
 * rows times several tokens), included by quant_avx2.c once per instruction
 * set.  Before including, define:
 *   TK_NAME(x)          the variant's name for x (x##_avx2)
 *   TK_DOT4(acc, w, x)  acc + 8 int32 lanes of sums of 4 u8 w times s8 x products
 *
 * Eight weight rows sit in the lanes: a 64-quant chunk of the 8 rows is
 * unpacked once (nibbles, then a 32-bit transpose: vector j holds quants
 * 4j..4j+3 of every row) and met by every token's quants, 4 at a time
 * broadcast, so each row's sub-block sum builds up in its own lane with no
 * horizontal reduction; the sub-block scales and the min terms are applied
 * to the 8 rows at once (transposed).  The sums are the exact integers of
 * the one-row kernels and the float chains are theirs, lane by lane, so the
 * results are bit-identical to vec_dot (or to its gemv order) row by row,
 * for any number of tokens.
 */

/*
 * Q4_K: rows w .. w + 7 * ws times tokens x .. x + (C - 1) * xst (Q8_K),
 * C <= 8; out[t * ld + r].  gemv false: q4_K_vec_dot_avx2's chains (per
 * pair of sub-blocks); true: opus_q4_K_vec_dot_gemv_avx2's (per super-block).
 */
static inline __attribute__((always_inline)) void
TK_NAME(q4_K_tile8) (int64_t n, const uint8_t *w, size_t ws, int C, const uint8_t *x,
					 size_t xst, float *out, int ld, bool gemv)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	__m256		acc[8],
				accm[8];

	for (int t = 0; t < C; t++)
		acc[t] = accm[t] = _mm256_setzero_ps();
	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		size_t		off = (size_t) i * sizeof(opus_block_q4_K);
		__m256		dw = rows8_f16(w, ws, off),
					dmw = rows8_f16(w, ws, off + 2);
		__m256i		st[8],
					mt[8],
					stot[8];

		rows8_prefetch(w, ws, off, sizeof(opus_block_q4_K));
		{
			__m256i		sv[8],
						mv[8];

			for (int r = 0; r < 8; r++)
			{
				__m128i		sc,
							mn;

				k_unpack_scales(((const opus_block_q4_K *) (w + r * ws + off))->scales, &sc, &mn);
				sv[r] = _mm256_cvtepu8_epi32(sc);
				mv[r] = _mm256_cvtepu8_epi32(mn);
			}
			transpose8_epi32(sv, st);
			transpose8_epi32(mv, mt);
		}
		for (int t = 0; t < C; t++)
			stot[t] = _mm256_setzero_si256();
		for (int c = 0; c < 4; c++)
		{
			__m256i		lo[8],
						hi[8],
						wl[8],
						wh[8];

			for (int r = 0; r < 8; r++)
			{
				__m256i		q = load256(((const opus_block_q4_K *) (w + r * ws + off))->qs + 32 * c);

				lo[r] = _mm256_and_si256(q, m4);
				hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			}
			transpose8_epi32(lo, wl);
			transpose8_epi32(hi, wh);
			for (int t = 0; t < C; t++)
			{
				const opus_block_q8_K *bt = (const opus_block_q8_K *) (x + (size_t) t * xst) + i;
				const int8_t *xq = bt->qs + 64 * c;
				__m256i		al = _mm256_setzero_si256(),
							ah = _mm256_setzero_si256(),
							s;

#pragma GCC unroll 8
				for (int j = 0; j < 8; j++)
				{
					al = TK_DOT4(al, wl[j], _mm256_set1_epi32((int) load_u32((const uint8_t *) xq + 4 * j)));
					ah = TK_DOT4(ah, wh[j], _mm256_set1_epi32((int) load_u32((const uint8_t *) xq + 32 + 4 * j)));
				}
				s = _mm256_add_epi32(_mm256_mullo_epi32(al, st[2 * c]),
									 _mm256_mullo_epi32(ah, st[2 * c + 1]));
				if (gemv)
					stot[t] = _mm256_add_epi32(stot[t], s);
				else
				{
					__m256		xd = _mm256_set1_ps(bt->d);
					__m256i		m = _mm256_add_epi32(
													 _mm256_mullo_epi32(mt[2 * c], _mm256_set1_epi32(bt->bsums[4 * c] + bt->bsums[4 * c + 1])),
													 _mm256_mullo_epi32(mt[2 * c + 1], _mm256_set1_epi32(bt->bsums[4 * c + 2] + bt->bsums[4 * c + 3])));

					acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, xd), acc[t]);
					accm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmw, xd), accm[t]);
				}
			}
		}
		if (gemv)
		{
			for (int t = 0; t < C; t++)
			{
				const opus_block_q8_K *bt = (const opus_block_q8_K *) (x + (size_t) t * xst) + i;
				__m256		xd = _mm256_set1_ps(bt->d);
				__m256i		m = _mm256_setzero_si256();

				for (int j = 0; j < 8; j++)
					m = _mm256_add_epi32(m, _mm256_mullo_epi32(mt[j],
															   _mm256_set1_epi32(bt->bsums[2 * j] + bt->bsums[2 * j + 1])));
				acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(stot[t]), _mm256_mul_ps(dw, xd), acc[t]);
				accm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmw, xd), accm[t]);
			}
		}
	}
	for (int t = 0; t < C; t++)
		_mm256_storeu_ps(out + (size_t) t * ld, _mm256_sub_ps(acc[t], accm[t]));
}

/* any rows and tokens: groups of 8 rows x up to 8 tokens, the rest row by row */
static inline __attribute__((always_inline)) void
TK_NAME(q4_K_tile_any) (int64_t n, int n_rows, const void *w, size_t ws, int n_tok,
						const void *x, size_t xst, float *out, int ld, bool gemv)
{
	for (int t0 = 0; t0 < n_tok; t0 += 8)
	{
		int			C = n_tok - t0 < 8 ? n_tok - t0 : 8;
		const uint8_t *xt = (const uint8_t *) x + (size_t) t0 * xst;
		int			r = 0;

		for (; r + 8 <= n_rows; r += 8)
			TK_NAME(q4_K_tile8) (n, (const uint8_t *) w + r * ws, ws, C, xt, xst,
								 out + (size_t) t0 * ld + r, ld, gemv);
		for (; r < n_rows; r++)
			for (int t = 0; t < C; t++)
				out[(size_t) (t0 + t) * ld + r] =
					(gemv ? opus_q4_K_vec_dot_gemv_avx2 : q4_K_vec_dot_avx2) (n, (const uint8_t *) w + r * ws,
																			   xt + (size_t) t * xst);
	}
}

static void
TK_NAME(q4_K_tile) (int64_t n, int n_rows, const void *w, size_t ws, int n_tok,
					const void *x, size_t xst, float *out, int ld)
{
	TK_NAME(q4_K_tile_any) (n, n_rows, w, ws, n_tok, x, xst, out, ld, false);
}

static void
TK_NAME(q4_K_gemv_tile) (int64_t n, int n_rows, const void *w, size_t ws, int n_tok,
						 const void *x, size_t xst, float *out, int ld)
{
	TK_NAME(q4_K_tile_any) (n, n_rows, w, ws, n_tok, x, xst, out, ld, true);
}
