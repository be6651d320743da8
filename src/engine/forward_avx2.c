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
 */
#include "forward_int.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "qtype.h"

/* e^x for x <= 0 (inputs below -87.3 give 0), about 1 ulp (Cephes polynomial). */
static inline __m256
exp_nonpos(__m256 x)
{
	const __m256 lo = _mm256_set1_ps(-87.3f);
	__m256		small = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
	__m256		n,
				r,
				r2,
				p;
	__m256i		e;

	x = _mm256_max_ps(x, lo);
	n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
						_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	r2 = _mm256_mul_ps(r, r);
	p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, r2, r);
	p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
	return _mm256_andnot_ps(small, p);
}

static inline float
hsum_tree(__m256 v)
{
	__m256		h = _mm256_hadd_ps(v, v);

	h = _mm256_hadd_ps(h, h);
	return _mm_cvtss_f32(_mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

/* Softmax of s[0..n) in place (s has room up to n rounded up to 8). */
static void
softmax(float *s, int n)
{
	int			n8 = (n + 7) / 8 * 8;
	__m256		vmax = _mm256_set1_ps(-INFINITY);
	__m256		vsum = _mm256_setzero_ps();
	float		max,
				inv;

	for (int p = n; p < n8; p++)
		s[p] = -INFINITY;
	for (int p = 0; p < n8; p += 8)
		vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + p));
	{
		__m128		m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));

		m = _mm_max_ps(m, _mm_movehl_ps(m, m));
		m = _mm_max_ss(m, _mm_movehdup_ps(m));
		max = _mm_cvtss_f32(m);
	}
	vmax = _mm256_set1_ps(max);
	for (int p = 0; p < n8; p += 8)
	{
		__m256		e = exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(s + p), vmax));

		_mm256_storeu_ps(s + p, e);
		vsum = _mm256_add_ps(vsum, e);
	}
	inv = 1.0f / hsum_tree(vsum);
	vmax = _mm256_set1_ps(inv);
	for (int p = 0; p < n8; p += 8)
	{
		__m256		w = _mm256_mul_ps(_mm256_loadu_ps(s + p), vmax);

		/* weights rounded to F16, as llama.cpp's F16 V product does */
		w = _mm256_cvtph_ps(_mm256_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT));
		_mm256_storeu_ps(s + p, w);
	}
}

static inline __attribute__((always_inline)) void
attend_n(const int NH, const struct opus_attn_args *a)
{
	const int	hd = a->hd;
	const int	n_kv = a->n_kv;
	const int	bs = a->bs;
	const int	stride = (n_kv + 15) / 16 * 16;	/* per head in scores */
	const __m256 scale = _mm256_set1_ps(a->scale);
	float		qbuf[3 * 256];
	const float *qr = qbuf;

	/* queries rounded to F16, as llama.cpp's F16 K product does */
	for (int i = 0; i < NH * hd; i += 8)
		_mm256_storeu_ps(qbuf + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(a->q + i),
																	 _MM_FROUND_TO_NEAREST_INT)));

	/*
	 * Scores, 16 positions of one block at a time.  Loads are always 16
	 * slots wide; with blocks smaller than 16 (or the last, partial group)
	 * the extra lanes read other cache data of the same block (K is
	 * followed by V) and are dropped.
	 */
	for (int p0 = 0; p0 < n_kv; p0 += bs)
	{
		const uint16_t *kb = (const uint16_t *) (a->kv_mem +
												 (size_t) a->blocks[p0 / bs] * a->block_bytes + a->k_off);
		int			cnt = n_kv - p0 < bs ? n_kv - p0 : bs;

		for (int o = 0; o < cnt; o += 16)
		{
			__m256		acc[3][2][2];	/* [head][chain][half] */
			int			m = cnt - o < 16 ? cnt - o : 16;

			_Pragma("GCC unroll 3")
			for (int h = 0; h < NH; h++)
				for (int c = 0; c < 2; c++)
					acc[h][c][0] = acc[h][c][1] = _mm256_setzero_ps();
			for (int d = 0; d < hd; d += 2)
			{
				_Pragma("GCC unroll 2")
				for (int c = 0; c < 2; c++)
				{
					const uint16_t *kr = kb + (size_t) (d + c) * bs + o;
					__m256		k0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) kr));
					__m256		k1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (kr + 8)));

					_Pragma("GCC unroll 3")
					for (int h = 0; h < NH; h++)
					{
						__m256		qd = _mm256_broadcast_ss(qr + (size_t) h * hd + d + c);

						acc[h][c][0] = _mm256_fmadd_ps(qd, k0, acc[h][c][0]);
						acc[h][c][1] = _mm256_fmadd_ps(qd, k1, acc[h][c][1]);
					}
				}
			}
			_Pragma("GCC unroll 3")
			for (int h = 0; h < NH; h++)
			{
				float	   *sc = a->scores + (size_t) h * stride + p0 + o;
				float		tmp[16];

				_mm256_storeu_ps(tmp, _mm256_mul_ps(_mm256_add_ps(acc[h][0][0], acc[h][1][0]), scale));
				_mm256_storeu_ps(tmp + 8, _mm256_mul_ps(_mm256_add_ps(acc[h][0][1], acc[h][1][1]), scale));
				memcpy(sc, tmp, sizeof(float) * m);
			}
		}
	}

	for (int h = 0; h < NH; h++)
		softmax(a->scores + (size_t) h * stride, n_kv);

	/* output, 16 dimensions at a time; positions alternate between two chains */
	for (int d0 = 0; d0 < hd; d0 += 16)
	{
		__m256		acc[3][2][2];	/* [head][chain][half] */

		_Pragma("GCC unroll 3")
		for (int h = 0; h < NH; h++)
			for (int c = 0; c < 2; c++)
				acc[h][c][0] = acc[h][c][1] = _mm256_setzero_ps();
		for (int p = 0; p < n_kv; p += 2)
		{
			_Pragma("GCC unroll 2")
			for (int c = 0; c < 2; c++)
			{
				const uint16_t *vr;
				__m256		v0,
							v1;

				if (p + c >= n_kv)
					break;
				vr = (const uint16_t *) (a->kv_mem + (size_t) a->blocks[(p + c) / bs] * a->block_bytes +
										 a->v_off) + (size_t) ((p + c) % bs) * hd + d0;
				v0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) vr));
				v1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (vr + 8)));
				_Pragma("GCC unroll 3")
				for (int h = 0; h < NH; h++)
				{
					__m256		w = _mm256_broadcast_ss(a->scores + (size_t) h * stride + p + c);

					acc[h][c][0] = _mm256_fmadd_ps(w, v0, acc[h][c][0]);
					acc[h][c][1] = _mm256_fmadd_ps(w, v1, acc[h][c][1]);
				}
			}
		}
		_Pragma("GCC unroll 3")
		for (int h = 0; h < NH; h++)
		{
			float	   *o = a->out + (size_t) h * hd + d0;

			_mm256_storeu_ps(o, _mm256_add_ps(acc[h][0][0], acc[h][1][0]));
			_mm256_storeu_ps(o + 8, _mm256_add_ps(acc[h][0][1], acc[h][1][1]));
		}
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
