/*
 * forward_avx2.c - AVX2+FMA+F16C attention kernel and F16 conversion for
 * the forward pass (see forward_int.h).  Called only after the CPU was found
 * to support them.
 *
 * Attention for up to 3 query heads sharing a KV head (K stored transposed
 * in each block, [dim][slot], so 16 positions' scores for one dimension are
 * two vector FMAs; V stored [slot][dim]).  The arithmetic of one head does
 * not depend on how many heads share the call, nor on the block size:
 *  - score of position p: sum over dims d in order, d even into one chain
 *    and d odd into another (FMA), chains added, times scale;
 *  - softmax: max, e = exp(s - max) with the vector exp below, sum over
 *    positions with lane p % 8 accumulating p in order, lanes reduced as
 *    ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); weights e * (1 / sum);
 *  - like llama.cpp (whose attention multiplies F16 K and V by queries and
 *    weights converted to F16), queries and weights are rounded to F16,
 *    which keeps our logits measurably closer to the oracle's;
 *  - output dim i: sum over positions, even p into one chain and odd p into
 *    another (FMA), chains added.
 * And its twin for a Q8_0 KV cache (opus_fwd_attend_q8_0_avx2: integer
 * q.k per 32 dimensions, float output; forward_int.h states its order).
 */
#include "cpu/forward_int.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant/qtype.h"

static inline __m256 expf_ggml(__m256 x);

/* Keep v as computed: no fusing of the product that made it into a later add. */
static inline __m256
opaque(__m256 v)
{
	__asm__("" : "+x"(v));
	return v;
}

/*
 * Sum of 16 values as ggml's AVX-512 reductions add, for 8 independent
 * lanes: v[i] is a vector of value i of 8 sums.  (v_i + v_{i+8}), then
 * (+ 4), then (0+2) and (1+3), then those two.
 */
static inline __m256
reduce16_lanes(const __m256 *v)
{
	__m256		a[8],
				b[4];

	for (int i = 0; i < 8; i++)
		a[i] = _mm256_add_ps(v[i], v[i + 8]);
	for (int i = 0; i < 4; i++)
		b[i] = _mm256_add_ps(a[i], a[i + 4]);
	return _mm256_add_ps(_mm256_add_ps(b[0], b[2]), _mm256_add_ps(b[1], b[3]));
}

/* ggml_vec_dot_f16's end on 8 lanes: acc[j * 16 + l] -> (0+2) + (1+3) per l, reduced */
static inline __m256
tree64_lanes(const __m256 *acc)
{
	__m256		t[16];

	for (int l = 0; l < 16; l++)
		t[l] = _mm256_add_ps(_mm256_add_ps(acc[l], acc[32 + l]),
							 _mm256_add_ps(acc[16 + l], acc[48 + l]));
	return reduce16_lanes(t);
}

/* Sum of the 16 floats of lo (0-7) and hi (8-15) in ggml's AVX-512 order. */
static inline float
reduce16(__m256 lo, __m256 hi)
{
	__m256		a = _mm256_add_ps(lo, hi);
	__m128		b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));

	b = _mm_add_ps(b, _mm_movehl_ps(b, b));
	b = _mm_add_ss(b, _mm_movehdup_ps(b));
	return _mm_cvtss_f32(b);
}

/*
 * Softmax of s[0..n) in place, then (round) weights rounded to F16, as
 * opus_fwd_attend_ref (s has room up to n rounded up to 16).
 */
static void
softmax_ggml(float *s, int n, bool round)
{
	float		max = -INFINITY,
				inv;
	double		sum = 0.0;

	for (int p = 0; p < n; p++)
		max = s[p] > max ? s[p] : max;
	for (int p0 = 0; p0 < n; p0 += 16)
	{
		__m256		e[2];
		float		tmp[16];

		for (int k = 0; k < 2; k++)
		{
			__m256i		idx = _mm256_add_epi32(_mm256_set1_epi32(p0 + 8 * k),
											   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
			__m256		live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx));

			e[k] = _mm256_and_ps(live, expf_ggml(_mm256_sub_ps(_mm256_loadu_ps(s + p0 + 8 * k),
															   _mm256_set1_ps(max))));
		}
		_mm256_storeu_ps(tmp, e[0]);
		_mm256_storeu_ps(tmp + 8, e[1]);
		memcpy(s + p0, tmp, sizeof(float) * (n - p0 < 16 ? n - p0 : 16));
		sum += (double) reduce16(e[0], e[1]);
	}
	inv = (float) (1.0 / sum);
	for (int p = 0; p < n; p += 8)
	{
		__m256		w = _mm256_mul_ps(_mm256_loadu_ps(s + p), _mm256_set1_ps(inv));

		if (round)
			w = _mm256_cvtph_ps(_mm256_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT));
		_mm256_storeu_ps(s + p, w);
	}
}

static inline __m256
cvt8(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) p));
}

/* q[d] times the keys of 8 positions at dimension d (kb: dimension rows bs apart) */
static inline __m256
qk8(const float *q, const uint16_t *kb, int bs, int d)
{
	return _mm256_fmadd_ps(_mm256_broadcast_ss(q + d), cvt8(kb + (size_t) d * bs), _mm256_setzero_ps());
}

/*
 * Scores (before scaling) of one head for 8 positions whose keys start at
 * kb, in llama.cpp's order: ggml_vec_dot_f16 (one-token batches) or
 * tinyBLAS (gemm: lane l of 16 chains dimensions l, l + 16, ... fused,
 * lanes reduced).  For vec_dot, dimensions past hd & ~63 are left to the
 * caller.
 */
static inline __m256
scores8(const float *q, const uint16_t *kb, int bs, int hd, bool gemm, __m256 *acc)
{
	if (gemm)
	{
		for (int l = 0; l < 16; l++)
		{
			acc[l] = _mm256_setzero_ps();
			for (int d = l; d < hd; d += 16)
				acc[l] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + d), cvt8(kb + (size_t) d * bs), acc[l]);
		}
		return reduce16_lanes(acc);
	}
	if (hd == 64)
	{
		/* tree64_lanes of single products, computed in the order it is needed */
		__m256		b[4];

		for (int i = 0; i < 4; i++)
		{
			__m256		t[4];

			for (int k = 0; k < 4; k++)
			{
				int			l = i + 4 * k;	/* t_i, t_{i+4}, t_{i+8}, t_{i+12} */

				t[k] = _mm256_add_ps(_mm256_add_ps(qk8(q, kb, bs, l), qk8(q, kb, bs, l + 32)),
									 _mm256_add_ps(qk8(q, kb, bs, l + 16), qk8(q, kb, bs, l + 48)));
			}
			b[i] = _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3]));
		}
		return _mm256_add_ps(_mm256_add_ps(b[0], b[2]), _mm256_add_ps(b[1], b[3]));
	}
	for (int i = 0; i < 64; i++)
	{
		acc[i] = _mm256_setzero_ps();
		for (int d = i; d < (hd & ~63); d += 64)
			acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + d), cvt8(kb + (size_t) d * bs), acc[i]);
	}
	return tree64_lanes(acc);
}

/*
 * sc[h] = tree64_lanes(acc[h]) for h < n_h.  Kept out of line: inlined
 * into attend_n, the first head's scores for n_h >= 2 came out wrong with
 * GCC 12.2 at -O1 and -O2 (right at -O0, with -fno-tree-dominator-opts,
 * and with clang); the cause was not found.
 */
static __attribute__((noinline)) void
scores8_reduce(int n_h, __m256 (*acc)[64], float (*sc)[8])
{
	for (int h = 0; h < n_h; h++)
		_mm256_storeu_ps(sc[h], tree64_lanes(acc[h]));
}

/*
 * scores8's vec_dot form (hd a multiple of 64 above 64) for the NH heads
 * at once: each 8-position vector of K is converted from F16 once and
 * multiplied by every head's query; per head the same chains in the same
 * order, so the same bits as NH calls of scores8.  sc[h] gets head h's
 * 8 scores (before scaling).
 */
static inline __attribute__((always_inline)) void
scores8_heads(const int NH, const float *q, const uint16_t *kb, int bs, int hd,
			  __m256 (*acc)[64], float (*sc)[8])
{
	const int	np = hd & ~63;

	for (int i = 0; i < 64; i++)
	{
		__m256		a[3];

		_Pragma("GCC unroll 3")
		for (int h = 0; h < NH; h++)
			a[h] = _mm256_setzero_ps();
		for (int d = i; d < np; d += 64)
		{
			__m256		k = cvt8(kb + (size_t) d * bs);

			_Pragma("GCC unroll 3")
			for (int h = 0; h < NH; h++)
				a[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + (size_t) h * hd + d), k, a[h]);
		}
		_Pragma("GCC unroll 3")
		for (int h = 0; h < NH; h++)
			acc[h][i] = a[h];
	}
	scores8_reduce(NH, acc, sc);
}

/*
 * Output dimensions dc .. dc + 8 NV of NH heads: accumulator j (of M)
 * sums the positions p = j mod M in order (fused); the accumulators are
 * then combined per dimension as ggml_vec_dot_f16 (M = 64, tree64) or
 * tinyBLAS (M = 16, reduce16) does.  Each V row is converted once for the
 * heads; the positions of accumulator j are walked block by block.
 */
static inline __attribute__((always_inline)) void
attend_out(const int NH, const int NV, const struct opus_attn_args *a, int dc,
		   int stride, int M, __m256 (*part)[64])
{
	const int	bs = a->bs;
	const int	hd = a->hd;

	for (int j = 0; j < M; j++)
	{
		__m256		r[3][4];
		int			blk = j / bs,
					off = j % bs;

		_Pragma("GCC unroll 3")
		for (int h = 0; h < NH; h++)
			_Pragma("GCC unroll 4")
			for (int k = 0; k < NV; k++)
				r[h][k] = _mm256_setzero_ps();
		for (int p = j; p < a->n_kv; p += M)
		{
			const uint16_t *vr = (const uint16_t *) (a->kv_mem + (size_t) a->blocks[blk] * a->block_bytes +
													 a->v_off) + (size_t) off * hd + dc;
			__m256		v[4];

			_Pragma("GCC unroll 4")
			for (int k = 0; k < NV; k++)
				v[k] = cvt8(vr + 8 * k);
			_Pragma("GCC unroll 3")
			for (int h = 0; h < NH; h++)
			{
				__m256		wp = _mm256_broadcast_ss(a->scores + (size_t) h * stride + p);

				_Pragma("GCC unroll 4")
				for (int k = 0; k < NV; k++)
					r[h][k] = _mm256_fmadd_ps(wp, v[k], r[h][k]);
			}
			off += M;
			while (off >= bs)
			{
				off -= bs;
				blk++;
			}
		}
		_Pragma("GCC unroll 3")
		for (int h = 0; h < NH; h++)
			_Pragma("GCC unroll 4")
			for (int k = 0; k < NV; k++)
				part[h * 4 + k][j] = r[h][k];
	}
	_Pragma("GCC unroll 3")
	for (int h = 0; h < NH; h++)
		for (int k = 0; k < NV; k++)
			_mm256_storeu_ps(a->out + (size_t) h * hd + dc + 8 * k,
							 M == 16 ? reduce16_lanes(part[h * 4 + k]) : tree64_lanes(part[h * 4 + k]));
}

/*
 * Attention of NH query heads sharing a KV head, the arithmetic of
 * opus_fwd_attend_ref (llama.cpp's) on vectors of 8 positions (scores) or
 * 8 dimensions (output).
 */
static inline __attribute__((always_inline)) void
attend_n(const int NH, const struct opus_attn_args *a)
{
	const int	hd = a->hd;
	const int	n_kv = a->n_kv;
	const int	bs = a->bs;
	const bool	gemm = a->gemm;
	const int	np = hd & ~63;		/* vec_dot: dimensions in whole 64-wide steps */
	const int	M = gemm ? 16 : 64; /* output: accumulators over positions */
	const bool	heads = !gemm && hd > 64;	/* scores of all heads at once (scores8_heads) */
	const int	stride = (n_kv + 15) / 16 * 16;	/* per head in scores */
	const __m256 scale = _mm256_set1_ps(a->scale);
	float		qbuf[3 * 256];
	__m256		acc[64];
	__m256		part[12][64];	/* [head * 4 + vector][accumulator] */

	/* queries rounded to F16, as llama.cpp's F16 K product does */
	for (int i = 0; i < NH * hd; i += 8)
		_mm256_storeu_ps(qbuf + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(a->q + i),
																	 _MM_FROUND_TO_NEAREST_INT)));

	/*
	 * Scores, 8 positions of one block at a time.  Loads are 8 slots wide;
	 * with blocks smaller than 8 (or the last, partial group) the extra
	 * lanes read other cache data of the same block (K is followed by V)
	 * and are dropped.
	 */
	for (int p0 = 0; p0 < n_kv; p0 += bs)
	{
		const uint16_t *kb = (const uint16_t *) (a->kv_mem +
												 (size_t) a->blocks[p0 / bs] * a->block_bytes + a->k_off);
		int			cnt = n_kv - p0 < bs ? n_kv - p0 : bs;

		for (int o = 0; o < cnt; o += 8)
		{
			int			m = cnt - o < 8 ? cnt - o : 8;
			float		sc[3][8];

			if (heads)
				scores8_heads(NH, qbuf, kb + o, bs, hd, part, sc);
			for (int h = 0; h < NH; h++)
			{
				const float *qh = qbuf + (size_t) h * hd;
				float		tmp[8];

				if (heads)
					memcpy(tmp, sc[h], sizeof(tmp));
				else
					_mm256_storeu_ps(tmp, scores8(qh, kb + o, bs, hd, gemm, acc));
				if (!gemm && np < hd)
				{
					/* vec_dot's tail of hd % 64 products, added in double */
					for (int j = 0; j < m; j++)
					{
						double		sd = (double) tmp[j];

						for (int d = np; d < hd; d++)
							sd += (double) (qh[d] * opus_fp16_to_fp32(kb[(size_t) d * bs + o + j]));
						tmp[j] = (float) sd;
					}
				}
				_mm256_storeu_ps(tmp, opaque(_mm256_mul_ps(_mm256_loadu_ps(tmp), scale)));
				memcpy(a->scores + (size_t) h * stride + p0 + o, tmp, sizeof(float) * m);
			}
		}
	}

	for (int h = 0; h < NH; h++)
	{
		/* the sliding window: earlier positions masked as llama.cpp does (-inf) */
		for (int p = 0; p < a->kv0; p++)
			a->scores[(size_t) h * stride + p] = -INFINITY;
		softmax_ggml(a->scores + (size_t) h * stride, n_kv, true);
	}

	/* output, 32 (or a last 16) dimensions at a time */
	for (int dc = 0; dc < hd; dc += 32)
	{
		if (hd - dc >= 32)
			attend_out(NH, 4, a, dc, stride, M, part);
		else
			attend_out(NH, 2, a, dc, stride, M, part);
	}
}

void
opus_fwd_attend_avx2(const struct opus_attn_args *a)
{
	switch (a->n_h)
	{
		case 1:
			attend_n(1, a);
			break;
		case 2:
			attend_n(2, a);
			break;
		default:
			attend_n(3, a);
			break;
	}
}

/* ---- attention over a Q8_0 KV cache (forward_int.h states the arithmetic) ---- */

/* Lane j: the sum of the 8 int32 of v[j] (exact). */
static inline __m256i
hsum8x8_epi32(const __m256i *v)
{
	__m256i		a = _mm256_hadd_epi32(v[0], v[1]);
	__m256i		b = _mm256_hadd_epi32(v[2], v[3]);
	__m256i		c = _mm256_hadd_epi32(v[4], v[5]);
	__m256i		d = _mm256_hadd_epi32(v[6], v[7]);
	__m256i		ab = _mm256_hadd_epi32(a, b);	/* v0..v3: low halves | high halves */
	__m256i		cd = _mm256_hadd_epi32(c, d);

	return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20),
							_mm256_permute2x128_si256(ab, cd, 0x31));
}

/* The 8 int32 partial sums of the products of 32 int8 quants q and k (sign trick). */
static inline __m256i
dot32_i8(__m256i q, __m256i k)
{
	__m256i		p = _mm256_maddubs_epi16(_mm256_abs_epi8(k), _mm256_sign_epi8(q, k));

	return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/*
 * NH query heads against a Q8_0 KV head: scores 8 positions of one block
 * at a time (one integer dot product per position and 32-dim group, the
 * 8 positions' sums gathered into one vector), output 16 dimensions at a
 * time (NH x 2 accumulators: with NH x 4 a 3-head call spills registers).
 */
static inline __attribute__((always_inline)) void
attend_q8_n(const int NH, const struct opus_attn_args *a)
{
	const int	hd = a->hd;
	const int	nb = hd / 32;
	const int	n_kv = a->n_kv;
	const int	bs = a->bs;
	const int	stride = (n_kv + 15) / 16 * 16;
	const __m256 scale = _mm256_set1_ps(a->scale);
	uint8_t		qq[3][8 * 34];	/* the queries as Q8_0 blocks */
	float		dq[3][8];

	for (int h = 0; h < NH; h++)
	{
		opus_act_q8_0_avx2(a->q + (size_t) h * hd, qq[h], hd);
		for (int b = 0; b < nb; b++)
		{
			uint16_t	dh;

			memcpy(&dh, qq[h] + 34 * b, sizeof(dh));
			dq[h][b] = _cvtsh_ss(dh);
		}
	}

	for (int p0 = 0; p0 < n_kv; p0 += bs)
	{
		const uint8_t *base = a->kv_mem + (size_t) a->blocks[p0 / bs] * a->block_bytes + a->k_off;
		const int8_t *kq = (const int8_t *) base;
		const uint16_t *ks = (const uint16_t *) (base + (size_t) bs * hd);
		int			cnt = n_kv - p0 < bs ? n_kv - p0 : bs;

		for (int o = 0; o < cnt; o += 8)
		{
			int			m = cnt - o < 8 ? cnt - o : 8;
			__m256		s[3];

			for (int h = 0; h < NH; h++)
				s[h] = _mm256_setzero_ps();
			for (int b = 0; b < nb; b++)
			{
				__m256		dk;
				__m256i		k[8];

				if (o + 8 <= bs)
					dk = cvt8(ks + (size_t) b * bs + o);
				else
				{
					uint16_t	tmp[8] = {0};

					memcpy(tmp, ks + (size_t) b * bs + o, sizeof(uint16_t) * m);
					dk = cvt8(tmp);
				}
				for (int j = 0; j < 8; j++)
					k[j] = j < m ? _mm256_loadu_si256((const __m256i *) (kq + (size_t) (o + j) * hd + 32 * b))
						: _mm256_setzero_si256();
				for (int h = 0; h < NH; h++)
				{
					__m256i		qv = _mm256_loadu_si256((const __m256i *) (qq[h] + 34 * b + 2));
					__m256i		d[8];

					for (int j = 0; j < 8; j++)
						d[j] = dot32_i8(qv, k[j]);
					s[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8x8_epi32(d)),
										   _mm256_mul_ps(dk, _mm256_set1_ps(dq[h][b])), s[h]);
				}
			}
			for (int h = 0; h < NH; h++)
			{
				float		tmp[8];

				_mm256_storeu_ps(tmp, _mm256_mul_ps(s[h], scale));
				memcpy(a->scores + (size_t) h * stride + p0 + o, tmp, sizeof(float) * m);
			}
		}
	}

	for (int h = 0; h < NH; h++)
	{
		/* the sliding window: earlier positions masked as llama.cpp does (-inf) */
		for (int p = 0; p < a->kv0; p++)
			a->scores[(size_t) h * stride + p] = -INFINITY;
		softmax_ggml(a->scores + (size_t) h * stride, n_kv, false);
	}

	/* output: 16 dimensions at a time (NH x 2 accumulators stay in registers) */
	for (int dc = 0; dc < hd; dc += 16)
	{
		const int	b = dc / 32;
		__m256		r[3][2];

		_Pragma("GCC unroll 3")
		for (int h = 0; h < NH; h++)
			for (int k = 0; k < 2; k++)
				r[h][k] = _mm256_setzero_ps();
		for (int p0 = 0; p0 < n_kv; p0 += bs)
		{
			const uint8_t *base = a->kv_mem + (size_t) a->blocks[p0 / bs] * a->block_bytes + a->v_off;
			const int8_t *vq = (const int8_t *) base + dc;
			const uint16_t *vs = (const uint16_t *) (base + (size_t) bs * hd) + (size_t) b * bs;
			const float *sp = a->scores + p0;
			int			cnt = n_kv - p0 < bs ? n_kv - p0 : bs;

			for (int off = 0; off < cnt; off++)
			{
				const int8_t *row = vq + (size_t) off * hd;
				float		dv = _cvtsh_ss(vs[off]);
				__m256		v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *) row)));
				__m256		v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *) (row + 8))));

				_Pragma("GCC unroll 3")
				for (int h = 0; h < NH; h++)
				{
					__m256		w = _mm256_set1_ps(sp[(size_t) h * stride + off] * dv);

					r[h][0] = _mm256_fmadd_ps(w, v0, r[h][0]);
					r[h][1] = _mm256_fmadd_ps(w, v1, r[h][1]);
				}
			}
		}
		_Pragma("GCC unroll 3")
		for (int h = 0; h < NH; h++)
			for (int k = 0; k < 2; k++)
				_mm256_storeu_ps(a->out + (size_t) h * hd + dc + 8 * k, r[h][k]);
	}
}

void
opus_fwd_attend_q8_0_avx2(const struct opus_attn_args *a)
{
	switch (a->n_h)
	{
		case 1:
			attend_q8_n(1, a);
			break;
		case 2:
			attend_q8_n(2, a);
			break;
		default:
			attend_q8_n(3, a);
			break;
	}
}

/*
 * Eight at a time: x to F16 (F16C, to nearest even as opus_fp32_to_fp16),
 * opus_fwd_gelu_table's halves gathered and widened, then 0 where x <= -10 and x
 * where x >= 10.  Within (-10, 10) gelu's F16 result is exact in the table.
 */
void
opus_fwd_gelu_avx2(float *y, int64_t n)
{
	const __m256 lo = _mm256_set1_ps(-10.0f),
				hi = _mm256_set1_ps(10.0f);
	const __m256i low16 = _mm256_set1_epi32(0xffff);
	const uint16_t *gelu_table = opus_fwd_gelu_table();
	int64_t		i = 0;

	for (; i + 8 <= n; i += 8)
	{
		__m256		x = _mm256_loadu_ps(y + i);
		__m256i		idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
		__m256i		g = _mm256_and_si256(_mm256_i32gather_epi32((const int *) gelu_table, idx, 2),
										 low16);
		__m256i		p = _mm256_permute4x64_epi64(_mm256_packus_epi32(g, g), 0x08);
		__m256		r = _mm256_cvtph_ps(_mm256_castsi256_si128(p));

		r = _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
		r = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LE_OQ), r);
		_mm256_storeu_ps(y + i, r);
	}
	for (; i < n; i++)
		y[i] = y[i] <= -10.0f ? 0.0f : y[i] >= 10.0f ? y[i] :
			opus_fp16_to_fp32(gelu_table[opus_fp32_to_fp16(y[i])]);
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

/* ---- llama.cpp-compatible arithmetic (see forward_compat.c) ---- */


/*
 * opus_ggml_expf on 8 lanes: ggml's AVX-512 vector exp, whose final
 * scaling by 2^n (vscalefps) is here a product with 2^n built from z's
 * bits, exact for |n| <= 126; other lanes go to the scalar version.
 */
static inline __m256
expf_ggml(__m256 x)
{
	const __m256 r = _mm256_set1_ps(0x1.8p23f);
	__m256		z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
	__m256		n = _mm256_sub_ps(z, r);
	__m256		b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
									 _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
	__m256		u = _mm256_mul_ps(b, b);
	__m256		j = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b,
																	 _mm256_set1_ps(0x1.573e2ep-5f)), u,
												 _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b,
																 _mm256_set1_ps(0x1.fffdb6p-2f))),
									u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
	__m256		k = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(z), 23),
														 _mm256_castps_si256(_mm256_set1_ps(1.0f))));
	__m256		res = opaque(_mm256_mul_ps(j, k));
	/* |n| > 126, or NaN */
	int			odd = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n),
													   _mm256_set1_ps(126.0f), _CMP_NLE_UQ));

	if (odd)
	{
		float		xv[8],
					rv[8];

		_mm256_storeu_ps(xv, x);
		_mm256_storeu_ps(rv, res);
		for (int i = 0; i < 8; i++)
			if (odd & (1 << i))
				rv[i] = opus_ggml_expf(xv[i]);
		res = _mm256_loadu_ps(rv);
	}
	return res;
}

void
opus_fwd_swiglu_avx2(float *h, const float *g, const float *u, int64_t i0,
					 int64_t i1, int64_t n)
{
	int64_t		nv = n & ~(int64_t) 15;
	int64_t		i = i0;
	int64_t		end = i1 < nv ? i1 : nv;

	for (; i + 8 <= end; i += 8)
	{
		__m256		x = _mm256_loadu_ps(g + i);
		__m256		e = expf_ggml(_mm256_sub_ps(_mm256_setzero_ps(), x));
		__m256		y = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));

		_mm256_storeu_ps(h + i, _mm256_mul_ps(y, _mm256_loadu_ps(u + i)));
	}
	if (i < i1)
		opus_fwd_swiglu_ref(h, g, u, i, i1, n);
}

/*
 * h[i] = gelu(g[i]) * u[i], opus_fwd_geglu_ref's bits: g rounded to F16
 * (F16C, to nearest even, as opus_fp32_to_fp16), its GELU gathered from
 * opus_fwd_gelu_table and widened, times u; lanes at or below -10 give 0,
 * at or above 10 g * u.
 */
void
opus_fwd_geglu_avx2(float *h, const float *g, const float *u, int64_t i0,
					int64_t i1, int64_t n)
{
	const int  *tab = (const int *) opus_fwd_gelu_table();
	const __m256i low16 = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
										   0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
	const __m256 lo = _mm256_set1_ps(-10.0f);
	const __m256 hi = _mm256_set1_ps(10.0f);
	int64_t		i = i0;

	for (; i + 8 <= i1; i += 8)
	{
		__m256		x = _mm256_loadu_ps(g + i);
		__m256		uv = _mm256_loadu_ps(u + i);
		__m256i		idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
		/* 32 bits at entry idx: the entry in the low half (little-endian) */
		__m256i		t = _mm256_shuffle_epi8(_mm256_i32gather_epi32(tab, idx, 2), low16);
		__m256		y = _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(t, 0x08)));
		__m256		r = _mm256_blendv_ps(_mm256_mul_ps(y, uv), _mm256_mul_ps(x, uv),
										 _mm256_cmp_ps(x, hi, _CMP_GE_OQ));

		_mm256_storeu_ps(h + i, _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LE_OQ), r));
	}
	if (i < i1)
		opus_fwd_geglu_ref(h, g, u, i, i1, n);
}

/* One 32-block of an activation row; returns the sum of the quants. */
static inline int
act_block_avx2(const float *x, int8_t *qs, float *pd)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);
	__m256		v[4],
				m,
				vid;
	__m128		m4;
	__m256i		iv[4],
				p;
	float		amax,
				id;

	for (int k = 0; k < 4; k++)
		v[k] = _mm256_loadu_ps(x + 8 * k);
	m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
					  _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
	m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
	m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
	m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
	amax = _mm_cvtss_f32(m4);
	*pd = amax / 127.0f;
	id = amax != 0.0f ? 127.0f / amax : 0.0f;
	vid = _mm256_set1_ps(id);
	for (int k = 0; k < 4; k++)
		iv[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], vid),
												   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	p = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
	p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
	_mm256_storeu_si256((__m256i *) qs, p);
	{
		__m256i		s = _mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]), _mm256_add_epi32(iv[2], iv[3]));
		__m128i		s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));

		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
		return _mm_cvtsi128_si32(s4);
	}
}

void
opus_act_q8_0_avx2(const float *x, void *dst, int64_t n)
{
	uint8_t    *y = dst;

	for (int64_t b = 0; b < n / 32; b++, y += 34)
	{
		float		d;
		uint16_t	h;

		(void) act_block_avx2(x + 32 * b, (int8_t *) (y + 2), &d);
		h = opus_fp32_to_fp16(d);
		memcpy(y, &h, 2);
	}
}

void
opus_act_q8_1_avx2(const float *x, void *dst, int64_t n)
{
	uint8_t    *y = dst;

	for (int64_t b = 0; b < n / 32; b++, y += 36)
	{
		float		d;
		int			sum = act_block_avx2(x + 32 * b, (int8_t *) (y + 4), &d);
		uint16_t	h[2];

		h[0] = opus_fp32_to_fp16(d);
		h[1] = opus_fp32_to_fp16((float) sum * d);
		memcpy(y, h, 4);
	}
}
