/*
 * quant_avx2.c - AVX2 + FMA + F16C kernels: the dot products of every weight
 * type with its activation type (the engine's hot path), activation
 * quantization (Q8_0 / Q8_1 / Q8_K / F16) and dequantization of the common
 * types.  Compiled with -mavx2 -mfma -mf16c; opus_qtype_init_cpu() only
 * installs these after checking the CPU.
 *
 * Contract with quant_ref.c (tested by test/unit/test_quant.c):
 *  - from_float and to_float produce bit-identical output to the reference
 *    (same formulas, same rounding; products are kept apart from the
 *    following addition so the compiler cannot fuse them into an FMA);
 *  - vec_dot computes the same integer block sums exactly and differs only
 *    in the order of the float accumulation across blocks.
 *
 * The integer dot products use the usual AVX2 scheme: _mm256_maddubs_epi16
 * (unsigned 8-bit x signed 8-bit, pairs summed into 16 bits; no saturation
 * is possible for these value ranges), then _mm256_madd_epi16 to widen to
 * 32 bits (by 1, or by the sub-block scales), one FMA per block into a float
 * accumulator and a single horizontal sum at the end.
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant_blocks.h"
#include "quant/quant_kernels.h"

/* ---------------------------------------------------------------------
 * helpers
 * --------------------------------------------------------------------- */

static inline float
hsum_ps(__m256 v)
{
	__m128		s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

static inline int
hsum_epi32(__m256i v)
{
	__m128i		s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));

	s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
	return _mm_cvtsi128_si32(s);
}

static inline float
hmax_ps(__m256 v)
{
	__m128		s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	s = _mm_max_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

static inline float
f16(uint16_t h)
{
	return _cvtsh_ss(h);
}

static inline uint16_t
to_f16(float f)
{
	return (uint16_t) _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

/* Hide a product from the optimiser so it cannot be fused with an add. */
static inline __m256
unfused(__m256 v)
{
	__asm__("" : "+x"(v));
	return v;
}

/* 16 bytes of packed nibbles -> 32 bytes in element order (lows, then highs) */
static inline __m256i
nibbles32(const uint8_t *qs)
{
	/* broadcast load, shift, blend: no cross-lane shuffle */
	__m256i		v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) qs));

	v = _mm256_blend_epi32(v, _mm256_srli_epi16(v, 4), 0xF0);
	return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* byte j = 0xFF where bit j of the 32-bit word is set, else 0 */
static inline __m256i
bits_to_bytes(uint32_t bits)
{
	const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0,
											1, 1, 1, 1, 1, 1, 1, 1,
											2, 2, 2, 2, 2, 2, 2, 2,
											3, 3, 3, 3, 3, 3, 3, 3);
	const __m256i bit = _mm256_set1_epi64x((long long) 0x8040201008040201ULL);
	__m256i		v = _mm256_shuffle_epi8(_mm256_set1_epi32((int) bits), spread);

	return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* sum of u[k]*s[k] over groups of 4 bytes, as 8 int32 (u unsigned, s signed) */
static inline __m256i
dot_u8_i8(__m256i u, __m256i s)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* the same for two signed vectors (|a| <= 128, so maddubs cannot saturate) */
static inline __m256i
dot_i8_i8(__m256i a, __m256i b)
{
	return dot_u8_i8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

static inline __m256i
load256(const void *p)
{
	return _mm256_loadu_si256((const __m256i *) p);
}

static inline uint32_t
load_u32(const uint8_t *p)
{
	uint32_t	v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* ---------------------------------------------------------------------
 * F32 / F16 / BF16 dot products (f32 accumulation, 4 x 8 lanes)
 * --------------------------------------------------------------------- */

static float
f32_vec_dot_avx2(int64_t n, const void *w, const void *x)
{
	const float *a = w;
	const float *b = x;
	__m256		acc0 = _mm256_setzero_ps(),
				acc1 = _mm256_setzero_ps(),
				acc2 = _mm256_setzero_ps(),
				acc3 = _mm256_setzero_ps();
	int64_t		i = 0;
	float		sum;

	for (; i + 32 <= n; i += 32)
	{
		acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
		acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
		acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
		acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
	}
	for (; i + 8 <= n; i += 8)
		acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
	sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
	for (; i < n; i++)
		sum += a[i] * b[i];
	return sum;
}

static inline __m256
load_f16x8(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) p));
}

static float
f16_vec_dot_avx2(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w;
	const uint16_t *b = x;
	__m256		acc0 = _mm256_setzero_ps(),
				acc1 = _mm256_setzero_ps(),
				acc2 = _mm256_setzero_ps(),
				acc3 = _mm256_setzero_ps();
	int64_t		i = 0;
	float		sum;

	for (; i + 32 <= n; i += 32)
	{
		acc0 = _mm256_fmadd_ps(load_f16x8(a + i), load_f16x8(b + i), acc0);
		acc1 = _mm256_fmadd_ps(load_f16x8(a + i + 8), load_f16x8(b + i + 8), acc1);
		acc2 = _mm256_fmadd_ps(load_f16x8(a + i + 16), load_f16x8(b + i + 16), acc2);
		acc3 = _mm256_fmadd_ps(load_f16x8(a + i + 24), load_f16x8(b + i + 24), acc3);
	}
	for (; i + 8 <= n; i += 8)
		acc0 = _mm256_fmadd_ps(load_f16x8(a + i), load_f16x8(b + i), acc0);
	sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
	for (; i < n; i++)
		sum += f16(a[i]) * f16(b[i]);
	return sum;
}

static inline __m256
load_bf16x8(const uint16_t *p)
{
	__m256i		v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *) p));

	return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static inline float
bf16(uint16_t h)
{
	uint32_t	u = (uint32_t) h << 16;
	float		f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static float
bf16_vec_dot_avx2(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w;
	const uint16_t *b = x;
	__m256		acc0 = _mm256_setzero_ps(),
				acc1 = _mm256_setzero_ps(),
				acc2 = _mm256_setzero_ps(),
				acc3 = _mm256_setzero_ps();
	int64_t		i = 0;
	float		sum;

	for (; i + 32 <= n; i += 32)
	{
		acc0 = _mm256_fmadd_ps(load_bf16x8(a + i), load_bf16x8(b + i), acc0);
		acc1 = _mm256_fmadd_ps(load_bf16x8(a + i + 8), load_bf16x8(b + i + 8), acc1);
		acc2 = _mm256_fmadd_ps(load_bf16x8(a + i + 16), load_bf16x8(b + i + 16), acc2);
		acc3 = _mm256_fmadd_ps(load_bf16x8(a + i + 24), load_bf16x8(b + i + 24), acc3);
	}
	for (; i + 8 <= n; i += 8)
		acc0 = _mm256_fmadd_ps(load_bf16x8(a + i), load_bf16x8(b + i), acc0);
	sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
	for (; i < n; i++)
		sum += bf16(a[i]) * bf16(b[i]);
	return sum;
}

/*
 * F16 / BF16 several rows of one activation row (decode): the activation
 * row is converted to f32 once per call (exact), then each row runs
 * f16_vec_dot_avx2's (bf16_vec_dot_avx2's) very FMAs against it, so the
 * results are bit-identical and each row costs one conversion per 8
 * elements instead of two.  Rows longer than XF_MAX take the row kernel.
 */
#define XF_MAX 16384
static _Thread_local float xf_buf[XF_MAX] __attribute__((aligned(32)));

static inline __attribute__((always_inline)) float
f16_row_xf(int64_t n, const uint16_t *a, const float *xf, bool bf)
{
	__m256		acc0 = _mm256_setzero_ps(),
				acc1 = _mm256_setzero_ps(),
				acc2 = _mm256_setzero_ps(),
				acc3 = _mm256_setzero_ps();
	int64_t		i = 0;
	float		sum;

	for (; i + 32 <= n; i += 32)
	{
		_mm_prefetch((const char *) (a + i) + 1024, _MM_HINT_T0);
		acc0 = _mm256_fmadd_ps(bf ? load_bf16x8(a + i) : load_f16x8(a + i), _mm256_load_ps(xf + i), acc0);
		acc1 = _mm256_fmadd_ps(bf ? load_bf16x8(a + i + 8) : load_f16x8(a + i + 8), _mm256_load_ps(xf + i + 8), acc1);
		acc2 = _mm256_fmadd_ps(bf ? load_bf16x8(a + i + 16) : load_f16x8(a + i + 16), _mm256_load_ps(xf + i + 16), acc2);
		acc3 = _mm256_fmadd_ps(bf ? load_bf16x8(a + i + 24) : load_f16x8(a + i + 24), _mm256_load_ps(xf + i + 24), acc3);
	}
	for (; i + 8 <= n; i += 8)
		acc0 = _mm256_fmadd_ps(bf ? load_bf16x8(a + i) : load_f16x8(a + i), _mm256_load_ps(xf + i), acc0);
	sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
	for (; i < n; i++)
		sum += (bf ? bf16(a[i]) : f16(a[i])) * xf[i];
	return sum;
}

static inline __attribute__((always_inline)) void
f16_rows_any(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out, bool bf)
{
	const uint16_t *xh = x;
	int64_t		i = 0;

	if (n > XF_MAX)
	{
		for (int r = 0; r < n_rows; r++)
			out[r] = (bf ? bf16_vec_dot_avx2 : f16_vec_dot_avx2) (n, (const uint8_t *) w + r * ws, x);
		return;
	}
	for (; i + 8 <= n; i += 8)
		_mm256_store_ps(xf_buf + i, bf ? load_bf16x8(xh + i) : load_f16x8(xh + i));
	for (; i < n; i++)
		xf_buf[i] = bf ? bf16(xh[i]) : f16(xh[i]);
	for (int r = 0; r < n_rows; r++)
		out[r] = f16_row_xf(n, (const uint16_t *) ((const uint8_t *) w + r * ws), xf_buf, bf);
}

static void
f16_rows_avx2(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out)
{
	f16_rows_any(n, n_rows, w, ws, x, out, false);
}

static void
bf16_rows_avx2(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out)
{
	f16_rows_any(n, n_rows, w, ws, x, out, true);
}

static void
f16_to_float_avx2(const void *src, float *y, int64_t n)
{
	const uint16_t *h = src;
	int64_t		i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, load_f16x8(h + i));
	for (; i < n; i++)
		y[i] = f16(h[i]);
}

static void
f16_from_float_avx2(const float *x, void *dst, int64_t n)
{
	uint16_t   *h = dst;
	int64_t		i = 0;

	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *) (h + i),
						 _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		h[i] = to_f16(x[i]);
}

/* ---------------------------------------------------------------------
 * 32-block weight types
 * --------------------------------------------------------------------- */

/*
 * Q4_0 block dot as 8 int32: sum (q - 8) * y = sum q*y - 8 * sum y, both
 * with maddubs (cheaper than making q signed and using the sign trick).
 */
static inline __m256i
q4_0_dot(const opus_block_q4_0 *a, const opus_block_q8_0 *b)
{
	__m256i		y = load256(b->qs);
	__m256i		p = _mm256_sub_epi16(_mm256_maddubs_epi16(nibbles32(a->qs), y),
									 _mm256_maddubs_epi16(_mm256_set1_epi8(8), y));

	return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/*
 * Eight vectors of 8 int32 to one: lane k = the sum of v[k]'s lanes (exact
 * integer sums, so the order of the additions does not matter).
 */
static inline __m256i
hsum8_epi32(const __m256i *v)
{
	__m256i		a0 = _mm256_hadd_epi32(v[0], v[1]);
	__m256i		a1 = _mm256_hadd_epi32(v[2], v[3]);
	__m256i		a2 = _mm256_hadd_epi32(v[4], v[5]);
	__m256i		a3 = _mm256_hadd_epi32(v[6], v[7]);
	__m256i		b0 = _mm256_hadd_epi32(a0, a1);
	__m256i		b1 = _mm256_hadd_epi32(a2, a3);

	return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20),
							_mm256_permute2x128_si256(b0, b1, 0x31));
}

/* the f16 scale (first field) of 8 consecutive blocks of `stride` bytes */
static inline __m256
scales8(const uint8_t *blk, size_t stride)
{
	uint16_t	h[8];

	for (int k = 0; k < 8; k++)
		memcpy(&h[k], blk + k * stride, sizeof(uint16_t));
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) h));
}

/*
 * Q4_0 sums in llama.cpp's order for Q4_0 weights on x86 (its "repack"
 * kernels, ggml_gemv/gemm_q4_0_8x8_q8_0, which give the same bits for one
 * token and for many): one scalar accumulator, per block in order
 * acc = fma((float) exact block sum, w.d * x.d rounded, acc).  Eight blocks'
 * integer sums and scale products are computed at once; the chain itself
 * stays sequential.
 */
static float
q4_0_vec_dot_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q4_0 *a = w;
	const opus_block_q8_0 *b = x;
	float		acc = 0.0f;
	int64_t		nb = n / OPUS_QK32,
				i = 0;

	for (; i + 8 <= nb; i += 8)
	{
		__m256i		s[8];
		float		fs[8],
					sc[8];

		for (int k = 0; k < 8; k++)
			s[k] = q4_0_dot(&a[i + k], &b[i + k]);
		_mm256_storeu_ps(fs, _mm256_cvtepi32_ps(hsum8_epi32(s)));
		_mm256_storeu_ps(sc, _mm256_mul_ps(scales8((const uint8_t *) &a[i], sizeof(*a)),
										   scales8((const uint8_t *) &b[i], sizeof(*b))));
		for (int k = 0; k < 8; k++)
			acc = __builtin_fmaf(fs[k], sc[k], acc);
	}
	for (; i < nb; i++)
		acc = __builtin_fmaf((float) hsum_epi32(q4_0_dot(&a[i], &b[i])), f16(a[i].d) * f16(b[i].d), acc);
	return acc;
}

/*
 * The two f16 scales at the start of a Q4_1/Q5_1 block (d, m) and of a Q8_1
 * block (d, s), converted together: lane 0 = d*d8, lane 1 = m*s.
 */
static inline __m128
scales_dm(const void *wblk, const void *xblk)
{
	uint32_t	w,
				x;

	memcpy(&w, wblk, 4);
	memcpy(&x, xblk, 4);
	return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int) w)),
					  _mm_cvtph_ps(_mm_cvtsi32_si128((int) x)));
}

static float
q4_1_vec_dot_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q4_1 *a = w;
	const opus_block_q8_1 *b = x;
	__m256		acc0 = _mm256_setzero_ps(),
				acc1 = _mm256_setzero_ps();
	__m128		summ = _mm_setzero_ps();
	int64_t		nb = n / OPUS_QK32,
				i = 0;

	for (; i + 1 < nb; i += 2)
	{
		__m256i		s0 = dot_u8_i8(nibbles32(a[i].qs), load256(b[i].qs));
		__m256i		s1 = dot_u8_i8(nibbles32(a[i + 1].qs), load256(b[i + 1].qs));
		__m128		dm0 = scales_dm(&a[i], &b[i]);
		__m128		dm1 = scales_dm(&a[i + 1], &b[i + 1]);

		acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm0), _mm256_cvtepi32_ps(s0), acc0);
		acc1 = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm1), _mm256_cvtepi32_ps(s1), acc1);
		summ = _mm_add_ps(summ, _mm_add_ps(dm0, dm1));
	}
	for (; i < nb; i++)
	{
		__m256i		s0 = dot_u8_i8(nibbles32(a[i].qs), load256(b[i].qs));
		__m128		dm0 = scales_dm(&a[i], &b[i]);

		acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm0), _mm256_cvtepi32_ps(s0), acc0);
		summ = _mm_add_ps(summ, dm0);
	}
	return hsum_ps(_mm256_add_ps(acc0, acc1)) + _mm_cvtss_f32(_mm_shuffle_ps(summ, summ, 1));
}

/* Q5_0/Q5_1 quants as unsigned bytes 0..31 */
static inline __m256i
q5_values(const uint8_t *qs, const uint8_t *qh)
{
	__m256i		hb = bits_to_bytes(load_u32(qh));

	return _mm256_or_si256(nibbles32(qs), _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
}

/* Q5_0 block dot as 8 int32: sum q*y - 16 * sum y (q unsigned 0..31) */
static inline __m256i
q5_0_dot(const opus_block_q5_0 *a, const opus_block_q8_0 *b)
{
	__m256i		y = load256(b->qs);
	__m256i		p = _mm256_sub_epi16(_mm256_maddubs_epi16(q5_values(a->qs, a->qh), y),
									 _mm256_maddubs_epi16(_mm256_set1_epi8(16), y));

	return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/*
 * llama.cpp's order (ggml_vec_dot_q5_0_q8_0 for AVX2, and tinyBLAS for
 * several tokens): one 8-lane accumulator, acc = fma(w.d * x.d, block sums,
 * acc) per block in order, then hsum_ps.
 */
static float
q5_0_vec_dot_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q5_0 *a = w;
	const opus_block_q8_0 *b = x;
	__m256		acc = _mm256_setzero_ps();
	int64_t		nb = n / OPUS_QK32;

	for (int64_t i = 0; i < nb; i++)
		acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(a[i].d) * f16(b[i].d)),
							  _mm256_cvtepi32_ps(q5_0_dot(&a[i], &b[i])), acc);
	return hsum_ps(acc);
}

/*
 * llama.cpp's order (ggml_vec_dot_q5_1_q8_1, AVX2): one 8-lane accumulator,
 * acc = fma(w.d * x.d, block sums, acc) per block; the min term as a scalar
 * chain ms = fma(w.m, x.s, ms); the result hsum_ps(acc) + ms.
 */
static float
q5_1_vec_dot_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q5_1 *a = w;
	const opus_block_q8_1 *b = x;
	__m256		acc = _mm256_setzero_ps();
	float		ms = 0.0f;
	int64_t		nb = n / OPUS_QK32;

	for (int64_t i = 0; i < nb; i++)
	{
		__m256i		s0 = dot_u8_i8(q5_values(a[i].qs, a[i].qh), load256(b[i].qs));
		__m128		dm = scales_dm(&a[i], &b[i]);

		acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm), _mm256_cvtepi32_ps(s0), acc);
		ms = __builtin_fmaf(f16(a[i].m), f16(b[i].s), ms);
	}
	return hsum_ps(acc) + ms;
}

/*
 * Q5_1, several rows of one activation row (decode): four rows per pass
 * share the activation's loads and scale conversion; their (d, m) pairs
 * are converted in one instruction, the products w.d * x.d land in the
 * even lanes and the four min-term chains run in the odd lanes of one
 * vector (lane 2k + 1: fma(w.m, x.s, ms) of row k, the scalar chain of
 * q5_1_vec_dot_avx2).  Every row's arithmetic is q5_1_vec_dot_avx2's, so
 * the results are bit-identical to it.  The weights stream from memory:
 * the four rows two passes ahead are prefetched as one linear run.
 */
static inline __attribute__((always_inline)) void
q5_1_rows4(int64_t nb, const uint8_t *w, size_t ws, const opus_block_q8_1 *b, float *out,
		   const int R)
{
	size_t		pf_step = (4 * ws + (size_t) nb - 1) / (size_t) nb;
	__m256		acc[4],
				ms = _mm256_setzero_ps();
	float		m[8];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		acc[r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < nb; i++)
	{
		const opus_block_q5_1 *a[4];
		uint32_t	dm[4] = {0, 0, 0, 0},
					xdm;
		const char *pf = (const char *) w + 8 * ws + (size_t) i * pf_step;
		__m256		wdm,
					sc;
		__m128		xf;
		__m256i		y = load256(b[i].qs);

		for (size_t off = 0; off < pf_step; off += 64)
			_mm_prefetch(pf + off, _MM_HINT_T0);
#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
		{
			a[r] = (const opus_block_q5_1 *) (w + (size_t) r * ws) + i;
			memcpy(&dm[r], a[r], sizeof(dm[r]));
		}
		/* lanes: d0 m0 d1 m1 d2 m2 d3 m3 */
		wdm = _mm256_cvtph_ps(_mm_setr_epi32((int) dm[0], (int) dm[1], (int) dm[2], (int) dm[3]));
		memcpy(&xdm, &b[i], sizeof(xdm));
		xf = _mm_cvtph_ps(_mm_cvtsi32_si128((int) xdm));
		sc = _mm256_mul_ps(wdm, _mm256_broadcastss_ps(xf));
		ms = _mm256_fmadd_ps(wdm, _mm256_broadcastss_ps(_mm_movehdup_ps(xf)), ms);
#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
		{
			__m256i		s0 = dot_u8_i8(q5_values(a[r]->qs, a[r]->qh), y);

			acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, _mm256_set1_epi32(2 * r)),
									 _mm256_cvtepi32_ps(s0), acc[r]);
		}
	}
	_mm256_storeu_ps(m, ms);
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r] = hsum_ps(acc[r]) + m[2 * r + 1];
}

static void
q5_1_rows_avx2(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out)
{
	const uint8_t *wr = w;
	int			r = 0;

	for (; r + 4 <= n_rows; r += 4)
		q5_1_rows4(n / OPUS_QK32, wr + (size_t) r * ws, ws, x, out + r, 4);
	for (; r < n_rows; r++)
		q5_1_rows4(n / OPUS_QK32, wr + (size_t) r * ws, ws, x, out + r, 1);
}

/*
 * Q5_1 tile (prefill): a row's block unpacked once for up to 8 tokens, each
 * token's steps q5_1_vec_dot_avx2's (its block sums, w.d * x.d rounded, the
 * fused add into its 8 lanes, the scalar min chain), so bit-identical.
 */
static void
q5_1_tile_avx2(int64_t n, int n_rows, const void *w, size_t ws, int n_tok, const void *x,
			   size_t xst, float *out, int ld)
{
	int64_t		nb = n / OPUS_QK32;

	for (int t0 = 0; t0 < n_tok; t0 += 8)
	{
		int			C = n_tok - t0 < 8 ? n_tok - t0 : 8;
		const uint8_t *xt = (const uint8_t *) x + (size_t) t0 * xst;

		for (int r = 0; r < n_rows; r++)
		{
			const opus_block_q5_1 *a = (const opus_block_q5_1 *) ((const uint8_t *) w + (size_t) r * ws);
			__m256		acc[8];
			float		ms[8];

			for (int c = 0; c < C; c++)
			{
				acc[c] = _mm256_setzero_ps();
				ms[c] = 0.0f;
			}
			for (int64_t i = 0; i < nb; i++)
			{
				__m256i		q = q5_values(a[i].qs, a[i].qh);
				uint32_t	wdm_bits;
				__m128		wdm;
				float		mw;

				memcpy(&wdm_bits, &a[i], sizeof(wdm_bits));
				wdm = _mm_cvtph_ps(_mm_cvtsi32_si128((int) wdm_bits));
				mw = _mm_cvtss_f32(_mm_movehdup_ps(wdm));
				for (int c = 0; c < C; c++)
				{
					const opus_block_q8_1 *b = (const opus_block_q8_1 *) (xt + (size_t) c * xst) + i;
					uint32_t	xdm_bits;
					__m128		xdm,
								dm;

					memcpy(&xdm_bits, b, sizeof(xdm_bits));
					xdm = _mm_cvtph_ps(_mm_cvtsi32_si128((int) xdm_bits));
					dm = _mm_mul_ps(wdm, xdm);
					acc[c] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm),
											 _mm256_cvtepi32_ps(dot_u8_i8(q, load256(b->qs))), acc[c]);
					ms[c] = __builtin_fmaf(mw, _mm_cvtss_f32(_mm_movehdup_ps(xdm)), ms[c]);
				}
			}
			for (int c = 0; c < C; c++)
				out[(size_t) (t0 + c) * ld + r] = hsum_ps(acc[c]) + ms[c];
		}
	}
}

static float
q8_0_vec_dot_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q8_0 *a = w;
	const opus_block_q8_0 *b = x;
	__m256		acc0 = _mm256_setzero_ps(),
				acc1 = _mm256_setzero_ps();
	int64_t		nb = n / OPUS_QK32,
				i = 0;

	for (; i + 1 < nb; i += 2)
	{
		__m256i		s0 = dot_i8_i8(load256(a[i].qs), load256(b[i].qs));
		__m256i		s1 = dot_i8_i8(load256(a[i + 1].qs), load256(b[i + 1].qs));

		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(a[i].d) * f16(b[i].d)),
							   _mm256_cvtepi32_ps(s0), acc0);
		acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(a[i + 1].d) * f16(b[i + 1].d)),
							   _mm256_cvtepi32_ps(s1), acc1);
	}
	for (; i < nb; i++)
	{
		__m256i		s0 = dot_i8_i8(load256(a[i].qs), load256(b[i].qs));

		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(a[i].d) * f16(b[i].d)),
							   _mm256_cvtepi32_ps(s0), acc0);
	}
	return hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* ---------------------------------------------------------------------
 * K-quants
 * --------------------------------------------------------------------- */

/*
 * Unpack the 12 scale bytes of a Q4_K/Q5_K block into 8 scales (bytes 0..7
 * of *sc) and 8 mins (bytes 0..7 of *mn), see opus_k_scale_min.
 */
static inline void
k_unpack_scales(const uint8_t *packed, __m128i *sc, __m128i *mn)
{
	uint32_t	w[3];
	uint32_t	sc_lo,
				sc_hi,
				mn_lo,
				mn_hi;

	memcpy(w, packed, sizeof(w));
	sc_lo = w[0] & 0x3f3f3f3fu;
	mn_lo = w[1] & 0x3f3f3f3fu;
	sc_hi = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
	mn_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
	*sc = _mm_set_epi32(0, 0, (int) sc_hi, (int) sc_lo);
	*mn = _mm_set_epi32(0, 0, (int) mn_hi, (int) mn_lo);
}

/* broadcast 16-bit lane k (0..7) of each 128-bit half to the whole half */
static inline __m256i
bcast_i16(__m256i v, int k)
{
	return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short) ((2 * k) | ((2 * k + 1) << 8))));
}

/* the min term of a Q4_K/Q5_K block: sum_j m_j * (bsums[2j] + bsums[2j+1]) */
static inline __m256i
k_min_products(__m128i mn, const int16_t *bsums)
{
	__m256i		m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));

	return _mm256_madd_epi16(m16, load256(bsums));
}

/*
 * The integer sums of one Q4_K / Q5_K super-block with Q8_K: 8 lanes whose
 * sum is sum_j sc_j * dot(sub-block j) (exact); *mins gets
 * sum_j m_j * (bsums[2j] + bsums[2j+1]) (exact).
 */
static inline __m256i
q4_K_block(const opus_block_q4_K *a, const opus_block_q8_K *b, int *mins)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	__m128i		sc,
				mn;
	__m256i		sc16,
				sumi = _mm256_setzero_si256();

	k_unpack_scales(a->scales, &sc, &mn);
	sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc));
	*mins = hsum_epi32(k_min_products(mn, b->bsums));
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++)
	{
		__m256i		q = load256(a->qs + 32 * c);
		__m256i		lo = _mm256_and_si256(q, m4);
		__m256i		hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
		__m256i		plo = _mm256_maddubs_epi16(lo, load256(b->qs + 64 * c));
		__m256i		phi = _mm256_maddubs_epi16(hi, load256(b->qs + 64 * c + 32));

		plo = _mm256_madd_epi16(plo, bcast_i16(sc16, 2 * c));
		phi = _mm256_madd_epi16(phi, bcast_i16(sc16, 2 * c + 1));
		sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
	}
	return sumi;
}

static inline __m256i
q5_K_block(const opus_block_q5_K *a, const opus_block_q8_K *b, int *mins)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	const __m256i bit4 = _mm256_set1_epi8(0x10);
	__m256i		hbits = load256(a->qh);
	__m128i		sc,
				mn;
	__m256i		sc16,
				sumi = _mm256_setzero_si256();

	k_unpack_scales(a->scales, &sc, &mn);
	sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc));
	*mins = hsum_epi32(k_min_products(mn, b->bsums));
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++)
	{
		__m256i		q = load256(a->qs + 32 * c);
		/* bit 2c of qh[l] -> bit 4 of the low value, bit 2c+1 -> high */
		__m256i		lo = _mm256_or_si256(_mm256_and_si256(q, m4),
										 _mm256_and_si256(_mm256_slli_epi16(hbits, 4), bit4));
		__m256i		hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
										 _mm256_and_si256(_mm256_slli_epi16(hbits, 3), bit4));
		__m256i		plo = _mm256_maddubs_epi16(lo, load256(b->qs + 64 * c));
		__m256i		phi = _mm256_maddubs_epi16(hi, load256(b->qs + 64 * c + 32));

		plo = _mm256_madd_epi16(plo, bcast_i16(sc16, 2 * c));
		phi = _mm256_madd_epi16(phi, bcast_i16(sc16, 2 * c + 1));
		sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
		hbits = _mm256_srli_epi16(hbits, 2);
	}
	return sumi;
}

/*
 * Q4_K in llama.cpp's order for Q4_K weights on x86 (its repacked q4_K_8x8
 * kernels): two scalar chains acc = fma(s, w.d * x.d, acc) and accm =
 * fma(m, w.dmin * x.d, accm) from the exact sums s (quants times scales)
 * and m (mins times bsums), the result acc - accm.  For groups of 4 tokens
 * (ggml_gemm_q4_K_8x8_q8_K, what a prompt mostly goes through) the chains
 * step per pair of sub-blocks: that is vec_dot; for single tokens
 * (ggml_gemv_q4_K_8x8_q8_K) per super-block: opus_q4_K_vec_dot_gemv_avx2.
 */
static float
q4_K_vec_dot_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q4_K *a = w;
	const opus_block_q8_K *b = x;
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	float		acc = 0.0f,
				accm = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		float		d = f16(a[i].d) * b[i].d,
					dmin = f16(a[i].dmin) * b[i].d;
		__m128i		sc,
					mn;
		__m256i		sc16;
		int32_t		m8[8];

		k_unpack_scales(a[i].scales, &sc, &mn);
		sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc));
		_mm256_storeu_si256((__m256i *) m8, k_min_products(mn, b[i].bsums));
		for (int c = 0; c < 4; c++)
		{
			__m256i		q = load256(a[i].qs + 32 * c);
			__m256i		lo = _mm256_and_si256(q, m4);
			__m256i		hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			__m256i		plo = _mm256_maddubs_epi16(lo, load256(b[i].qs + 64 * c));
			__m256i		phi = _mm256_maddubs_epi16(hi, load256(b[i].qs + 64 * c + 32));

			plo = _mm256_madd_epi16(plo, bcast_i16(sc16, 2 * c));
			phi = _mm256_madd_epi16(phi, bcast_i16(sc16, 2 * c + 1));
			acc = __builtin_fmaf((float) hsum_epi32(_mm256_add_epi32(plo, phi)), d, acc);
			accm = __builtin_fmaf((float) (m8[2 * c] + m8[2 * c + 1]), dmin, accm);
		}
	}
	return acc - accm;
}

float
opus_q4_K_vec_dot_gemv_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q4_K *a = w;
	const opus_block_q8_K *b = x;
	float		acc = 0.0f,
				accm = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		int			mins;
		int			s = hsum_epi32(q4_K_block(&a[i], &b[i], &mins));

		acc = __builtin_fmaf((float) s, f16(a[i].d) * b[i].d, acc);
		accm = __builtin_fmaf((float) mins, f16(a[i].dmin) * b[i].d, accm);
	}
	return acc - accm;
}

/*
 * ggml_vec_dot_q4_K_q8_K's own order (AVX2), which llama.cpp runs for Q4_K
 * matrices it does not repack (row count not a multiple of 8) and fewer
 * than 8 tokens: per super-block acc = fma(x.d * w.d, lanes, acc) into one
 * 8-lane accumulator; the min products in 4 lanes (sub-blocks 2k and 2k+1
 * in lane k), accm = fma(-x.d * w.dmin, mins4, accm); the result
 * hsum_ps(acc) + ((m0 + m2) + (m1 + m3)).
 */
float
opus_q4_K_vec_dot_ggml_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q4_K *a = w;
	const opus_block_q8_K *b = x;
	__m256		acc = _mm256_setzero_ps();
	__m128		accm = _mm_setzero_ps();

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		int			mins;
		__m256i		sumi = q4_K_block(&a[i], &b[i], &mins);
		__m128i		sc,
					mn;
		__m256i		p;

		k_unpack_scales(a[i].scales, &sc, &mn);
		p = k_min_products(mn, b[i].bsums);
		p = _mm256_permute4x64_epi64(_mm256_hadd_epi32(p, p), 0x08);
		accm = _mm_fmadd_ps(_mm_set1_ps(-b[i].d * f16(a[i].dmin)),
							_mm_cvtepi32_ps(_mm256_castsi256_si128(p)), accm);
		acc = _mm256_fmadd_ps(_mm256_set1_ps(b[i].d * f16(a[i].d)),
							  _mm256_cvtepi32_ps(sumi), acc);
	}
	accm = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
	accm = _mm_add_ss(accm, _mm_movehdup_ps(accm));
	return hsum_ps(acc) + _mm_cvtss_f32(accm);
}

/*
 * Q5_K's order (ggml_vec_dot_q5_K_q8_K, AVX2; not repacked on x86): per
 * super-block acc = fma(x.d * w.d, lanes, acc) into one 8-lane accumulator,
 * the mins as a scalar chain summs = fma(-x.d * w.dmin, mins, summs); the
 * result hsum_ps(acc) + summs.
 */
static float
q5_K_vec_dot_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q5_K *a = w;
	const opus_block_q8_K *b = x;
	__m256		acc = _mm256_setzero_ps();
	float		summs = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		int			mins;
		__m256i		sumi = q5_K_block(&a[i], &b[i], &mins);

		summs = __builtin_fmaf(-b[i].d * f16(a[i].dmin), (float) mins, summs);
		acc = _mm256_fmadd_ps(_mm256_set1_ps(b[i].d * f16(a[i].d)),
							  _mm256_cvtepi32_ps(sumi), acc);
	}
	return hsum_ps(acc) + summs;
}

/*
 * Q6_K: quants are 0..63 with an offset of 32.  The offset's contribution,
 * 32 * sum_g scale_g * sum(q8 of group g), comes from Q8_K's bsums (both use
 * groups of 16), so the main loop works on unsigned values.  A 32-element
 * run uses scale 2k in its low 128-bit half and 2k+1 in its high half.
 */
static inline __m256i
q6_scale_pair(__m256i s16, int k)
{
	const __m128i lo = _mm_set1_epi16((short) ((4 * k) | ((4 * k + 1) << 8)));
	const __m128i hi = _mm_set1_epi16((short) ((4 * k + 2) | ((4 * k + 3) << 8)));

	return _mm256_shuffle_epi8(s16, _mm256_set_m128i(hi, lo));
}

/* 8 lanes summing to sum_g scale_g * dot(group g) of one super-block (exact) */
static inline __m256i
q6_K_block(const opus_block_q6_K *a, const opus_block_q8_K *b)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	const __m256i m2 = _mm256_set1_epi8(0x30);
	__m128i		sc8 = _mm_loadu_si128((const __m128i *) a->scales);
	__m256i		off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), load256(b->bsums));
	__m256i		sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));

#pragma GCC unroll 2
	for (int h = 0; h < 2; h++)
	{
		const uint8_t *ql = a->ql + 64 * h;
		const int8_t *q8 = b->qs + 128 * h;
		__m256i		qh = load256(a->qh + 32 * h);
		__m256i		l0 = load256(ql);
		__m256i		l1 = load256(ql + 32);
		__m256i		s16 = _mm256_broadcastsi128_si256(
													  _mm_cvtepi8_epi16(h ? _mm_unpackhi_epi64(sc8, sc8) : sc8));
		__m256i		q[4];

		q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
							   _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
		q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
							   _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
		q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
							   _mm256_and_si256(qh, m2));
		q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
							   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
		{
			__m256i		p = _mm256_maddubs_epi16(q[k], load256(q8 + 32 * k));

			sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, q6_scale_pair(s16, k)));
		}
	}
	return sumi;
}

/* ggml_vec_dot_q6_K_q8_K's order: acc = fma(x.d * w.d, lanes, acc), hsum_ps */
static float
q6_K_vec_dot_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q6_K *a = w;
	const opus_block_q8_K *b = x;
	__m256		acc = _mm256_setzero_ps();

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
		acc = _mm256_fmadd_ps(_mm256_set1_ps(b[i].d * f16(a[i].d)),
							  _mm256_cvtepi32_ps(q6_K_block(&a[i], &b[i])), acc);
	return hsum_ps(acc);
}

/*
 * The K-quant multi-token order (see opus_vec_dot_llama_batch): per
 * super-block in order, from the exact sums s (scaled quants) and m (mins),
 * r = fma(-w.dmin, m, w.d * s) (Q6_K: r = s * w.d), then acc = acc + r * x.d
 * with the product rounded before the addition.
 */
static inline float
k_tiled_step(float acc, float r, float xd)
{
	return __builtin_fmaf(r, xd, acc);
}

float
opus_q4_K_vec_dot_tiled_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q4_K *a = w;
	const opus_block_q8_K *b = x;
	float		acc = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		int			mins;
		int			s = hsum_epi32(q4_K_block(&a[i], &b[i], &mins));
		float		d = f16(a[i].d) * (float) s;

		__asm__("" : "+x"(d));
		acc = k_tiled_step(acc, __builtin_fmaf(-f16(a[i].dmin), (float) mins, d), b[i].d);
	}
	return acc;
}

float
opus_q5_K_vec_dot_tiled_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q5_K *a = w;
	const opus_block_q8_K *b = x;
	float		acc = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		int			mins;
		int			s = hsum_epi32(q5_K_block(&a[i], &b[i], &mins));
		float		d = f16(a[i].d) * (float) s;

		__asm__("" : "+x"(d));
		acc = k_tiled_step(acc, __builtin_fmaf(-f16(a[i].dmin), (float) mins, d), b[i].d);
	}
	return acc;
}

float
opus_q6_K_vec_dot_tiled_avx2(int64_t n, const void *w, const void *x)
{
	const opus_block_q6_K *a = w;
	const opus_block_q8_K *b = x;
	float		acc = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
		acc = k_tiled_step(acc, (float) hsum_epi32(q6_K_block(&a[i], &b[i])) * f16(a[i].d),
						   b[i].d);
	return acc;
}

/* ---------------------------------------------------------------------
 * several weight rows at once (opus_vec_dot_rows): decode's matrix-vector
 * products.  Eight rows share each activation load; their integer sums are
 * reduced together (hsum8_epi32: lane r = row r) and the float chains of the
 * eight rows run in the lanes of one vector, each lane doing exactly the
 * operations of the one-row kernel (the same exact integer sums, the same
 * products rounded the same way, the same fused adds in the same order), so
 * out[r] is bit-identical to vec_dot of row r.  Rows past the last group of
 * eight go through the one-row kernel.
 * --------------------------------------------------------------------- */

/* 8x8 int32 transpose: t[j] lane r = v[r] lane j */
static inline void
transpose8_epi32(const __m256i *v, __m256i *t)
{
	__m256i		a[8],
				b[8];

	for (int k = 0; k < 8; k += 2)
	{
		a[k] = _mm256_unpacklo_epi32(v[k], v[k + 1]);
		a[k + 1] = _mm256_unpackhi_epi32(v[k], v[k + 1]);
	}
	for (int k = 0; k < 8; k += 4)
	{
		b[k] = _mm256_unpacklo_epi64(a[k], a[k + 2]);
		b[k + 1] = _mm256_unpackhi_epi64(a[k], a[k + 2]);
		b[k + 2] = _mm256_unpacklo_epi64(a[k + 1], a[k + 3]);
		b[k + 3] = _mm256_unpackhi_epi64(a[k + 1], a[k + 3]);
	}
	for (int k = 0; k < 4; k++)
	{
		t[k] = _mm256_permute2x128_si256(b[k], b[k + 4], 0x20);
		t[k + 4] = _mm256_permute2x128_si256(b[k], b[k + 4], 0x31);
	}
}

/* the f16 at byte `off` of 8 rows' block i, as floats */
static inline __m256
rows8_f16(const uint8_t *w, size_t ws, size_t off)
{
	uint16_t	h[8];

	for (int r = 0; r < 8; r++)
		memcpy(&h[r], w + r * ws + off, sizeof(uint16_t));
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) h));
}

/* prefetch block `off` of 8 rows, some distance ahead */
#define ROWS_PREFETCH 1024
static inline void
rows8_prefetch(const uint8_t *w, size_t ws, size_t off, size_t bytes)
{
	for (int r = 0; r < 8; r++)
		for (size_t o = 0; o < bytes; o += 64)
			_mm_prefetch((const char *) w + r * ws + off + ROWS_PREFETCH + o, _MM_HINT_T0);
}

/*
 * Q4_K, 8 rows.  gemv false: vec_dot's chains (per pair of sub-blocks);
 * true: opus_q4_K_vec_dot_gemv_avx2's (per super-block).
 */
static inline __attribute__((always_inline)) void
q4_K_rows8(int64_t n, const uint8_t *w, size_t ws, const opus_block_q8_K *b, float *out,
		   bool gemv)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	__m256		acc = _mm256_setzero_ps(),
				accm = _mm256_setzero_ps();

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		size_t		off = (size_t) i * sizeof(opus_block_q4_K);
		__m256		xd = _mm256_set1_ps(b[i].d);
		__m256		dv = _mm256_mul_ps(rows8_f16(w, ws, off), xd);
		__m256		dmv = _mm256_mul_ps(rows8_f16(w, ws, off + 2), xd);
		__m256i		sc16[8],
					mt[8],
					stot = _mm256_setzero_si256();

		rows8_prefetch(w, ws, off, sizeof(opus_block_q4_K));
		{
			__m256i		mv[8];

			for (int r = 0; r < 8; r++)
			{
				const opus_block_q4_K *a = (const opus_block_q4_K *) (w + r * ws + off);
				__m128i		sc,
							mn;

				k_unpack_scales(a->scales, &sc, &mn);
				sc16[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc));
				mv[r] = k_min_products(mn, b[i].bsums);
			}
			transpose8_epi32(mv, mt);
		}
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
		{
			__m256i		x0 = load256(b[i].qs + 64 * c),
						x1 = load256(b[i].qs + 64 * c + 32);
			__m256i		v[8],
						s;

#pragma GCC unroll 8
			for (int r = 0; r < 8; r++)
			{
				const opus_block_q4_K *a = (const opus_block_q4_K *) (w + r * ws + off);
				__m256i		q = load256(a->qs + 32 * c);
				__m256i		plo = _mm256_maddubs_epi16(_mm256_and_si256(q, m4), x0);
				__m256i		phi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), x1);

				v[r] = _mm256_add_epi32(_mm256_madd_epi16(plo, bcast_i16(sc16[r], 2 * c)),
										_mm256_madd_epi16(phi, bcast_i16(sc16[r], 2 * c + 1)));
			}
			s = hsum8_epi32(v);
			if (gemv)
				stot = _mm256_add_epi32(stot, s);
			else
			{
				acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dv, acc);
				accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(mt[2 * c], mt[2 * c + 1])),
									   dmv, accm);
			}
		}
		if (gemv)
		{
			__m256i		mtot = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(mt[0], mt[1]),
																 _mm256_add_epi32(mt[2], mt[3])),
												_mm256_add_epi32(_mm256_add_epi32(mt[4], mt[5]),
																 _mm256_add_epi32(mt[6], mt[7])));

			acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(stot), dv, acc);
			accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mtot), dmv, accm);
		}
	}
	_mm256_storeu_ps(out, _mm256_sub_ps(acc, accm));
}

static void
q4_K_rows_avx2(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out)
{
	int			r = 0;

	for (; r + 8 <= n_rows; r += 8)
		q4_K_rows8(n, (const uint8_t *) w + r * ws, ws, x, out + r, false);
	for (; r < n_rows; r++)
		out[r] = q4_K_vec_dot_avx2(n, (const uint8_t *) w + r * ws, x);
}

static void
q4_K_gemv_rows_avx2(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out)
{
	int			r = 0;

	for (; r + 8 <= n_rows; r += 8)
		q4_K_rows8(n, (const uint8_t *) w + r * ws, ws, x, out + r, true);
	for (; r < n_rows; r++)
		out[r] = opus_q4_K_vec_dot_gemv_avx2(n, (const uint8_t *) w + r * ws, x);
}

/*
 * Q4_K, 8 rows, AVX-512 VNNI (decode's matrix-vector products).  Per
 * super-block, each row's quants meet the activation with vpdpbusd, a
 * 512-bit register per two sub-blocks and no scales (so 4 instructions a
 * row instead of 16); the 8 rows' 32 registers are then reduced together
 * (three levels of pairwise unpack-and-add give one lane per row and
 * sub-block), and the sub-block scales, unpacked for the 8 rows at once
 * from their transposed headers, multiply the exact sub-block sums
 * afterwards.  The chunk sums (scales times quants) and min sums are the
 * same exact integers as q4_K_vec_dot_avx2's, and the float chains, 8 rows
 * in the lanes, are its own (gemv: opus_q4_K_vec_dot_gemv_avx2's), so every
 * result is bit-identical to the one-row kernel.
 */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")

/* lane selection of the scales for reduced register v (see q4_K_rows8_z) */
struct q4k_z_sel
{
	__m512i		idx[4];
	__m512i		shift[4];
};

static void
q4k_z_sel_init(struct q4k_z_sel *sel)
{
	/* reduced register v holds sub-blocks alpha (128-bit lanes 0, 2) and beta (1, 3) */
	static const int alpha[4] = {0, 1, 4, 5};
	static const int beta[4] = {2, 3, 6, 7};

	for (int v = 0; v < 4; v++)
	{
		int32_t		idx[16],
					sh[16];

		for (int k = 0; k < 16; k++)
		{
			int			row = (k & 3) + 4 * (k >> 3);
			int			sb = (k & 4) ? beta[v] : alpha[v];

			idx[k] = (sb >= 4 ? 8 : 0) + row;
			sh[k] = 8 * (sb & 3);
		}
		sel->idx[v] = _mm512_loadu_si512(idx);
		sel->shift[v] = _mm512_loadu_si512(sh);
	}
}

static inline __attribute__((always_inline)) __m512i
z_pair_add32(__m512i a, __m512i b)
{
	return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}

static inline __attribute__((always_inline)) __m512i
z_pair_add64(__m512i a, __m512i b)
{
	return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

static inline __attribute__((always_inline)) __m512i
z_pair_add128(__m512i a, __m512i b)
{
	return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xDD));
}

/* the activation quants of a super-block in the order of the weight registers */
static inline __attribute__((always_inline)) void
q4k_z_act(const int8_t *xq, __m512i *xz)
{
#pragma GCC unroll 2
	for (int p = 0; p < 2; p++)
	{
		/* [lo 2p | lo 2p+1], [hi 2p | hi 2p+1] */
		xz[2 * p] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(xq + 128 * p)),
									   load256(xq + 128 * p + 64), 1);
		xz[2 * p + 1] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(xq + 128 * p + 32)),
										   load256(xq + 128 * p + 96), 1);
	}
}

/*
 * A row's quants as 4 registers: [sub-block 0 | 2], [1 | 3], [4 | 6], [5 | 7]
 * (low nibbles of chunks 0 and 1, their high nibbles, the same for 2, 3).
 */
static inline __attribute__((always_inline)) void
q4k_z_weights(const opus_block_q4_K *a, __m512i *u)
{
	const __m512i m4 = _mm512_set1_epi8(0x0F);

#pragma GCC unroll 2
	for (int p = 0; p < 2; p++)
	{
		__m512i		q = _mm512_loadu_si512(a->qs + 64 * p);

		u[2 * p] = _mm512_and_si512(q, m4);
		u[2 * p + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
	}
}

/*
 * e[r][v] (8 rows, 16 lanes each) reduced: f[v] holds the sum of each of
 * e[r][v]'s two 8-lane halves, 128-bit lanes: first half rows 0-3, second
 * half rows 0-3, first half rows 4-7, second half rows 4-7.
 */
static inline __attribute__((always_inline)) void
q4k_z_reduce(__m512i (*e)[4], __m512i *f)
{
	__m512i		g[4][4];

#pragma GCC unroll 4
	for (int q = 0; q < 4; q++)
#pragma GCC unroll 4
		for (int v = 0; v < 4; v++)
			g[q][v] = z_pair_add32(e[2 * q][v], e[2 * q + 1][v]);
#pragma GCC unroll 4
	for (int v = 0; v < 4; v++)
		f[v] = z_pair_add128(z_pair_add64(g[0][v], g[1][v]), z_pair_add64(g[2][v], g[3][v]));
}

/* the 8 rows' super-block headers (lane r = row r) */
struct q4k_z_head
{
	__m256		d,				/* w.d, w.dmin as floats */
				dmin;
	__m512i		scv[4];			/* sub-block scales in f[v]'s layout */
	__m256i		mn_lo,			/* mins 0..3, 4..7 as bytes */
				mn_hi;
};

static inline __attribute__((always_inline)) void
q4k_z_head(const uint8_t *w, size_t ws, size_t off, const struct q4k_z_sel *sel,
		   struct q4k_z_head *hd)
{
	const __m256i m6 = _mm256_set1_epi8(0x3F),
				m4l = _mm256_set1_epi8(0x0F),
				m2h = _mm256_set1_epi8(0x30);
	__m256i		l[4],
				t[4],
				dw0,
				w0,
				w1,
				w2,
				sc_lo,
				sc_hi;
	__m512i		zs;

#pragma GCC unroll 4
	for (int k = 0; k < 4; k++)
		l[k] = _mm256_set_m128i(_mm_loadu_si128((const __m128i *) (w + (k + 4) * ws + off)),
								_mm_loadu_si128((const __m128i *) (w + k * ws + off)));
	t[0] = _mm256_unpacklo_epi32(l[0], l[1]);
	t[1] = _mm256_unpackhi_epi32(l[0], l[1]);
	t[2] = _mm256_unpacklo_epi32(l[2], l[3]);
	t[3] = _mm256_unpackhi_epi32(l[2], l[3]);
	dw0 = _mm256_unpacklo_epi64(t[0], t[2]);	/* d | dmin << 16 */
	w0 = _mm256_unpackhi_epi64(t[0], t[2]);	/* scale bytes 0..3 */
	w1 = _mm256_unpacklo_epi64(t[1], t[3]);	/* 4..7 */
	w2 = _mm256_unpackhi_epi64(t[1], t[3]);	/* 8..11 */
	hd->d = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_and_si256(dw0, _mm256_set1_epi32(0xFFFF))));
	hd->dmin = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(dw0, 16)));
	/* k_unpack_scales for 8 rows */
	sc_lo = _mm256_and_si256(w0, m6);
	hd->mn_lo = _mm256_and_si256(w1, m6);
	sc_hi = _mm256_or_si256(_mm256_and_si256(w2, m4l), _mm256_and_si256(_mm256_srli_epi32(w0, 2), m2h));
	hd->mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m4l),
								_mm256_and_si256(_mm256_srli_epi32(w1, 2), m2h));
	zs = _mm512_inserti64x4(_mm512_castsi256_si512(sc_lo), sc_hi, 1);
#pragma GCC unroll 4
	for (int v = 0; v < 4; v++)
		hd->scv[v] = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(sel->idx[v], zs),
														sel->shift[v]),
									  _mm512_set1_epi32(0xFF));
}

/*
 * One token's float steps for 8 rows: chunk sums (scales times sub-block
 * sums f), min sums from the token's bsums, then the chains of
 * q4_K_vec_dot_avx2 (gemv: opus_q4_K_vec_dot_gemv_avx2) in the lanes.
 */
static inline __attribute__((always_inline)) void
q4k_z_step(const __m512i *f, const struct q4k_z_head *hd, const opus_block_q8_K *b, bool gemv,
		   __m256 *acc, __m256 *accm)
{
	const __m512i chunk_order = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
	/* pshufb: bytes 2c', 2c' + 1 of each dword as two 16-bit words */
	const __m256i pick01 = _mm256_setr_epi32(0x80018000, 0x80058004, 0x80098008, 0x800D800C,
											 0x80018000, 0x80058004, 0x80098008, 0x800D800C);
	const __m256i pick23 = _mm256_setr_epi32(0x80038002, 0x80078006, 0x800B800A, 0x800F800E,
											 0x80038002, 0x80078006, 0x800B800A, 0x800F800E);
	__m256		xd = _mm256_set1_ps(b->d),
				dv = _mm256_mul_ps(hd->d, xd),
				dmv = _mm256_mul_ps(hd->dmin, xd);
	__m512i		s01,
				s23;
	__m256i		sc[4],
				mc[4],
				bs;

	/* chunk c: scale 2c times sub-block 2c plus scale 2c + 1 times sub-block 2c + 1 */
	s01 = _mm512_permutexvar_epi32(chunk_order, _mm512_add_epi32(_mm512_mullo_epi32(f[0], hd->scv[0]),
																 _mm512_mullo_epi32(f[1], hd->scv[1])));
	s23 = _mm512_permutexvar_epi32(chunk_order, _mm512_add_epi32(_mm512_mullo_epi32(f[2], hd->scv[2]),
																 _mm512_mullo_epi32(f[3], hd->scv[3])));
	sc[0] = _mm512_castsi512_si256(s01);
	sc[1] = _mm512_extracti64x4_epi64(s01, 1);
	sc[2] = _mm512_castsi512_si256(s23);
	sc[3] = _mm512_extracti64x4_epi64(s23, 1);
	/* min sums: m_2c * bs_2c + m_2c+1 * bs_2c+1, bs_j = bsums[2j] + bsums[2j + 1] */
	bs = _mm256_madd_epi16(load256(b->bsums), _mm256_set1_epi16(1));
	bs = _mm256_packs_epi32(bs, bs);
	mc[0] = _mm256_madd_epi16(_mm256_shuffle_epi8(hd->mn_lo, pick01),
							  _mm256_permutevar8x32_epi32(bs, _mm256_set1_epi32(0)));
	mc[1] = _mm256_madd_epi16(_mm256_shuffle_epi8(hd->mn_lo, pick23),
							  _mm256_permutevar8x32_epi32(bs, _mm256_set1_epi32(1)));
	mc[2] = _mm256_madd_epi16(_mm256_shuffle_epi8(hd->mn_hi, pick01),
							  _mm256_permutevar8x32_epi32(bs, _mm256_set1_epi32(4)));
	mc[3] = _mm256_madd_epi16(_mm256_shuffle_epi8(hd->mn_hi, pick23),
							  _mm256_permutevar8x32_epi32(bs, _mm256_set1_epi32(5)));
	if (gemv)
	{
		*acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_add_epi32(sc[0], sc[1]),
																   _mm256_add_epi32(sc[2], sc[3]))),
							   dv, *acc);
		*accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_add_epi32(mc[0], mc[1]),
																	_mm256_add_epi32(mc[2], mc[3]))),
								dmv, *accm);
	}
	else
	{
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
		{
			*acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sc[c]), dv, *acc);
			*accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mc[c]), dmv, *accm);
		}
	}
}

/* 8 rows, one token (out[r], r < 8) */
static inline __attribute__((always_inline)) void
q4_K_rows8_z(int64_t n, const uint8_t *w, size_t ws, const opus_block_q8_K *b, float *out,
			 bool gemv, const struct q4k_z_sel *sel)
{
	__m256		acc = _mm256_setzero_ps(),
				accm = _mm256_setzero_ps();

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		size_t		off = (size_t) i * sizeof(opus_block_q4_K);
		__m512i		xz[4],
					e[8][4],
					f[4];
		struct q4k_z_head hd;

		rows8_prefetch(w, ws, off, sizeof(opus_block_q4_K));
		q4k_z_act(b[i].qs, xz);
#pragma GCC unroll 8
		for (int r = 0; r < 8; r++)
		{
			__m512i		u[4];

			q4k_z_weights((const opus_block_q4_K *) (w + r * ws + off), u);
#pragma GCC unroll 4
			for (int v = 0; v < 4; v++)
				e[r][v] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[v], xz[v]);
		}
		q4k_z_reduce(e, f);
		q4k_z_head(w, ws, off, sel, &hd);
		q4k_z_step(f, &hd, &b[i], gemv, &acc, &accm);
	}
	_mm256_storeu_ps(out, _mm256_sub_ps(acc, accm));
}

/*
 * 8 rows times C tokens (C <= 8; x + t * xst): out[t * ld + r].  Each
 * super-block's unpacked quants and headers serve all the tokens.
 */
static inline __attribute__((always_inline)) void
q4_K_tile8_z(int64_t n, const uint8_t *w, size_t ws, int C, const uint8_t *x, size_t xst,
			 float *out, int ld, bool gemv, const struct q4k_z_sel *sel)
{
	__m256		acc[8],
				accm[8];

	for (int t = 0; t < C; t++)
		acc[t] = accm[t] = _mm256_setzero_ps();
	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		size_t		off = (size_t) i * sizeof(opus_block_q4_K);
		__m512i		u[8][4];
		struct q4k_z_head hd;

		rows8_prefetch(w, ws, off, sizeof(opus_block_q4_K));
#pragma GCC unroll 8
		for (int r = 0; r < 8; r++)
			q4k_z_weights((const opus_block_q4_K *) (w + r * ws + off), u[r]);
		q4k_z_head(w, ws, off, sel, &hd);
		for (int t = 0; t < C; t++)
		{
			const opus_block_q8_K *b = (const opus_block_q8_K *) (x + (size_t) t * xst) + i;
			__m512i		xz[4],
						e[8][4],
						f[4];

			q4k_z_act(b->qs, xz);
#pragma GCC unroll 8
			for (int r = 0; r < 8; r++)
#pragma GCC unroll 4
				for (int v = 0; v < 4; v++)
					e[r][v] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[r][v], xz[v]);
			q4k_z_reduce(e, f);
			q4k_z_step(f, &hd, b, gemv, &acc[t], &accm[t]);
		}
	}
	for (int t = 0; t < C; t++)
		_mm256_storeu_ps(out + (size_t) t * ld, _mm256_sub_ps(acc[t], accm[t]));
}

static inline __attribute__((always_inline)) void
q4_K_rows_z_any(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out,
				bool gemv)
{
	struct q4k_z_sel sel;
	int			r = 0;

	q4k_z_sel_init(&sel);
	for (; r + 8 <= n_rows; r += 8)
		q4_K_rows8_z(n, (const uint8_t *) w + r * ws, ws, x, out + r, gemv, &sel);
	for (; r < n_rows; r++)
		out[r] = (gemv ? opus_q4_K_vec_dot_gemv_avx2 : q4_K_vec_dot_avx2) (n, (const uint8_t *) w + r * ws, x);
}

static void
q4_K_rows_z(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out)
{
	q4_K_rows_z_any(n, n_rows, w, ws, x, out, false);
}

static void
q4_K_gemv_rows_z(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out)
{
	q4_K_rows_z_any(n, n_rows, w, ws, x, out, true);
}

static inline __attribute__((always_inline)) void
q4_K_tile_z_any(int64_t n, int n_rows, const void *w, size_t ws, int n_tok, const void *x,
				size_t xst, float *out, int ld, bool gemv)
{
	struct q4k_z_sel sel;

	q4k_z_sel_init(&sel);
	for (int t0 = 0; t0 < n_tok; t0 += 8)
	{
		int			C = n_tok - t0 < 8 ? n_tok - t0 : 8;
		const uint8_t *xt = (const uint8_t *) x + (size_t) t0 * xst;
		int			r = 0;

		for (; r + 8 <= n_rows; r += 8)
			q4_K_tile8_z(n, (const uint8_t *) w + r * ws, ws, C, xt, xst,
						 out + (size_t) t0 * ld + r, ld, gemv, &sel);
		for (; r < n_rows; r++)
			for (int t = 0; t < C; t++)
				out[(size_t) (t0 + t) * ld + r] =
					(gemv ? opus_q4_K_vec_dot_gemv_avx2 : q4_K_vec_dot_avx2) (n, (const uint8_t *) w + r * ws,
																			   xt + (size_t) t * xst);
	}
}

static void
q4_K_tile_z(int64_t n, int n_rows, const void *w, size_t ws, int n_tok, const void *x,
			size_t xst, float *out, int ld)
{
	q4_K_tile_z_any(n, n_rows, w, ws, n_tok, x, xst, out, ld, false);
}

static void
q4_K_gemv_tile_z(int64_t n, int n_rows, const void *w, size_t ws, int n_tok, const void *x,
				 size_t xst, float *out, int ld)
{
	q4_K_tile_z_any(n, n_rows, w, ws, n_tok, x, xst, out, ld, true);
}

/*
 * Q6_K, AVX-512 BW (decode): the two 128-quant halves of a super-block in
 * the two halves of 512-bit registers, so each instruction does the work of
 * two in q6_K_block; the halves are added at the end, lane by lane, which
 * gives q6_K_block's exact 8 lanes, and the float steps are
 * q6_K_vec_dot_avx2's (opus_q6_K_vec_dot_tiled_avx2's when tiled), so the
 * results are bit-identical.
 */
static inline __attribute__((always_inline)) __m256i
q6k_z_block(const opus_block_q6_K *a, const __m512i *xz, __m256i bsums)
{
	const __m512i m4 = _mm512_set1_epi8(0x0F);
	const __m512i m2 = _mm512_set1_epi8(0x30);
	__m128i		sc8 = _mm_loadu_si128((const __m128i *) a->scales);
	__m256i		off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), bsums);
	__m512i		l0 = _mm512_inserti64x4(_mm512_castsi256_si512(load256(a->ql)), load256(a->ql + 64), 1);
	__m512i		l1 = _mm512_inserti64x4(_mm512_castsi256_si512(load256(a->ql + 32)), load256(a->ql + 96), 1);
	__m512i		qh = _mm512_loadu_si512(a->qh);
	__m512i		s16 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8))),
										 _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_unpackhi_epi64(sc8, sc8))), 1);
	__m512i		q[4],
				sum = _mm512_setzero_si512();
	__m256i		sumi;

	q[0] = _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), m2));
	q[1] = _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 2), m2));
	q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), _mm512_and_si512(qh, m2));
	q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
						   _mm512_and_si512(_mm512_srli_epi16(qh, 2), m2));
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++)
	{
		/* q6_scale_pair's selection in each 256-bit half: scale 2k, then 2k + 1 */
		const __m512i pair = _mm512_broadcast_i64x4(_mm256_set_m128i(_mm_set1_epi16((short) ((4 * k + 2) | ((4 * k + 3) << 8))),
																	 _mm_set1_epi16((short) ((4 * k) | ((4 * k + 1) << 8)))));

		sum = _mm512_add_epi32(sum, _mm512_madd_epi16(_mm512_maddubs_epi16(q[k], xz[k]),
													  _mm512_shuffle_epi8(s16, pair)));
	}
	sumi = _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
	return _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 5));
}

/* one row (the hardware prefetcher follows a single stream best) */
static inline __attribute__((always_inline)) float
q6_K_row_z(int64_t n, const opus_block_q6_K *a, const opus_block_q8_K *b, bool tiled)
{
	__m256		acc = _mm256_setzero_ps();
	float		accs = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		const int8_t *xq = b[i].qs;
		__m512i		xz[4];
		__m256i		sumi;

#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
			xz[k] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(xq + 32 * k)), load256(xq + 128 + 32 * k), 1);
		sumi = q6k_z_block(&a[i], xz, load256(b[i].bsums));
		if (tiled)
			accs = k_tiled_step(accs, (float) hsum_epi32(sumi) * f16(a[i].d), b[i].d);
		else
			acc = _mm256_fmadd_ps(_mm256_set1_ps(b[i].d * f16(a[i].d)), _mm256_cvtepi32_ps(sumi), acc);
	}
	return tiled ? accs : hsum_ps(acc);
}

static inline __attribute__((always_inline)) void
q6_K_rows_z_any(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out,
				bool tiled)
{
	for (int r = 0; r < n_rows; r++)
		out[r] = q6_K_row_z(n, (const opus_block_q6_K *) ((const uint8_t *) w + r * ws), x, tiled);
}

static void
q6_K_rows_z(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out)
{
	q6_K_rows_z_any(n, n_rows, w, ws, x, out, false);
}

static void
q6_K_tiled_rows_z(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out)
{
	q6_K_rows_z_any(n, n_rows, w, ws, x, out, true);
}

/*
 * Q5_K, AVX-512 BW (decode): chunks 2p and 2p + 1 of a super-block in the
 * two halves of 512-bit registers (the fifth bits shifted per half), the
 * halves added lane by lane at the end: q5_K_block's exact 8 lanes, and
 * q5_K_vec_dot_avx2's (opus_q5_K_vec_dot_tiled_avx2's) float steps, so
 * bit-identical.
 */
static inline __attribute__((always_inline)) __m256i
q5k_z_block(const opus_block_q5_K *a, const __m512i *xz, const opus_block_q8_K *b, int *mins)
{
	const __m512i m4 = _mm512_set1_epi8(0x0F);
	const __m512i bit4 = _mm512_set1_epi8(0x10);
	__m512i		qh = _mm512_broadcast_i64x4(load256(a->qh));
	__m128i		sc,
				mn;
	__m512i		sc16,
				sum = _mm512_setzero_si512();

	k_unpack_scales(a->scales, &sc, &mn);
	*mins = hsum_epi32(k_min_products(mn, b->bsums));
	sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sc));
#pragma GCC unroll 2
	for (int p = 0; p < 2; p++)
	{
		/*
		 * low half chunk 2p, high half chunk 2p + 1: their fifth bits are
		 * qh bits 4p, 4p + 1 | 4p + 2, 4p + 3, their scales 4p, 4p + 1 |
		 * 4p + 2, 4p + 3
		 */
		const __m512i sel_lo = _mm512_inserti64x4(_mm512_set1_epi16((short) (4 * p)),
												  _mm256_set1_epi16((short) (4 * p + 2)), 1);
		const __m512i shift = sel_lo;
		const __m512i sel_hi = _mm512_inserti64x4(_mm512_set1_epi16((short) (4 * p + 1)),
												  _mm256_set1_epi16((short) (4 * p + 3)), 1);
		__m512i		q = _mm512_loadu_si512(a->qs + 64 * p);
		__m512i		hb = _mm512_srlv_epi16(qh, shift);
		__m512i		lo = _mm512_or_si512(_mm512_and_si512(q, m4),
										 _mm512_and_si512(_mm512_slli_epi16(hb, 4), bit4));
		__m512i		hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4),
										 _mm512_and_si512(_mm512_slli_epi16(hb, 3), bit4));

		sum = _mm512_add_epi32(sum, _mm512_madd_epi16(_mm512_maddubs_epi16(lo, xz[2 * p]),
													  _mm512_permutexvar_epi16(sel_lo, sc16)));
		sum = _mm512_add_epi32(sum, _mm512_madd_epi16(_mm512_maddubs_epi16(hi, xz[2 * p + 1]),
													  _mm512_permutexvar_epi16(sel_hi, sc16)));
	}
	return _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
}

static inline __attribute__((always_inline)) float
q5_K_row_z(int64_t n, const opus_block_q5_K *a, const opus_block_q8_K *b, bool tiled)
{
	__m256		acc = _mm256_setzero_ps();
	float		accs = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		__m512i		xz[4];
		int			mins;
		__m256i		sumi;

		q4k_z_act(b[i].qs, xz);
		sumi = q5k_z_block(&a[i], xz, &b[i], &mins);
		if (tiled)
		{
			float		d = f16(a[i].d) * (float) hsum_epi32(sumi);

			__asm__("" : "+x"(d));
			accs = k_tiled_step(accs, __builtin_fmaf(-f16(a[i].dmin), (float) mins, d), b[i].d);
		}
		else
		{
			accs = __builtin_fmaf(-b[i].d * f16(a[i].dmin), (float) mins, accs);
			acc = _mm256_fmadd_ps(_mm256_set1_ps(b[i].d * f16(a[i].d)), _mm256_cvtepi32_ps(sumi), acc);
		}
	}
	return tiled ? accs : hsum_ps(acc) + accs;
}

static void
q5_K_rows_z(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out)
{
	for (int r = 0; r < n_rows; r++)
		out[r] = q5_K_row_z(n, (const opus_block_q5_K *) ((const uint8_t *) w + r * ws), x, false);
}

static void
q5_K_tiled_rows_z(int64_t n, int n_rows, const void *w, size_t ws, const void *x, float *out)
{
	for (int r = 0; r < n_rows; r++)
		out[r] = q5_K_row_z(n, (const opus_block_q5_K *) ((const uint8_t *) w + r * ws), x, true);
}

#pragma GCC pop_options

/*
 * ---- the K-quant tile kernels (quant_tile_kl.h): AVX2, and the same code
 * with the AVX-512 register file (32 vector registers: the unpacked block
 * stays in them); the same bits either way ----
 */
#define TL_NAME(x) x##_avx2
#define TL_Q4_K
#include "quant/quant_tile_kl.h"
#undef TL_Q4_K
#undef TL_NAME

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw")
#define TL_NAME(x) x##_avx512
#include "quant/quant_tile_kl.h"
#undef TL_NAME
#pragma GCC pop_options

/* AVX-512 F, VL and BW usable, and not turned off (OPUS_NO_AVX512) */
static bool
use_avx512bw(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
		__builtin_cpu_supports("avx512bw") && getenv("OPUS_NO_AVX512") == NULL;
}

/* ---------------------------------------------------------------------
 * activation quantization
 * --------------------------------------------------------------------- */

/* roundf(): round half away from zero, then clamp to [-127, 127]; NaN -> 0 */
static inline __m256
round_q8_ps(__m256 v)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);
	__m256		t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
	__m256		frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
	__m256		one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
	__m256		up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);

	t = _mm256_add_ps(t, _mm256_and_ps(up, one));
	t = _mm256_min_ps(t, _mm256_set1_ps(127.0f));
	t = _mm256_max_ps(t, _mm256_set1_ps(-127.0f));
	/* NaN (from inf * 0) gives 0, as in the reference */
	return _mm256_and_ps(t, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
}

/* four vectors of 8 int32 (in range) -> 32 int8 in order */
static inline __m256i
pack_i32_to_i8(__m256i i0, __m256i i1, __m256i i2, __m256i i3)
{
	__m256i		p01 = _mm256_packs_epi32(i0, i1);
	__m256i		p23 = _mm256_packs_epi32(i2, i3);
	__m256i		p = _mm256_packs_epi16(p01, p23);

	return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline float
block_amax32(const float *x, __m256 v[4])
{
	const __m256 sign = _mm256_set1_ps(-0.0f);
	__m256		m;

	for (int k = 0; k < 4; k++)
		v[k] = _mm256_loadu_ps(x + 8 * k);
	m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
					  _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
	return hmax_ps(m);
}

/* quantize one 32-element block like the reference; returns sum of quants */
static inline int
q8_block32(const float *x, int8_t *qs, float *pd)
{
	__m256		v[4];
	__m256i		iv[4];
	float		d = block_amax32(x, v) / 127.0f;
	float		id = d != 0.0f ? 1.0f / d : 0.0f;
	__m256		vid = _mm256_set1_ps(id);

	for (int k = 0; k < 4; k++)
		iv[k] = _mm256_cvttps_epi32(round_q8_ps(_mm256_mul_ps(v[k], vid)));
	_mm256_storeu_si256((__m256i *) qs, pack_i32_to_i8(iv[0], iv[1], iv[2], iv[3]));
	*pd = d;
	return hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]),
									   _mm256_add_epi32(iv[2], iv[3])));
}

static void
q8_0_from_float_avx2(const float *x, void *dst, int64_t n)
{
	opus_block_q8_0 *y = dst;

	for (int64_t i = 0; i < n / OPUS_QK32; i++)
	{
		float		d;

		(void) q8_block32(x + OPUS_QK32 * i, y[i].qs, &d);
		y[i].d = to_f16(d);
	}
}

static void
q8_1_from_float_avx2(const float *x, void *dst, int64_t n)
{
	opus_block_q8_1 *y = dst;

	for (int64_t i = 0; i < n / OPUS_QK32; i++)
	{
		float		d;
		int			sum = q8_block32(x + OPUS_QK32 * i, y[i].qs, &d);

		y[i].d = to_f16(d);
		y[i].s = to_f16((float) sum * d);
	}
}

static void
q8_K_from_float_avx2(const float *x, void *dst, int64_t n)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);
	opus_block_q8_K *y = dst;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++, x += OPUS_QK_K)
	{
		__m256		m = _mm256_setzero_ps();
		float		amax,
					mx = 0.0f,
					iscale;
		__m256		vamax;
		__m256		vis;

		for (int k = 0; k < OPUS_QK_K; k += 8)
			m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
		amax = hmax_ps(m);
		if (amax == 0.0f)
		{
			memset(&y[i], 0, sizeof(y[i]));
			continue;
		}
		/* the first element of largest magnitude, with its sign */
		vamax = _mm256_set1_ps(amax);
		for (int k = 0; k < OPUS_QK_K; k += 8)
		{
			__m256		v = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k));
			int			hit = _mm256_movemask_ps(_mm256_cmp_ps(v, vamax, _CMP_EQ_OQ));

			if (hit)
			{
				mx = x[k + __builtin_ctz((unsigned) hit)];
				break;
			}
		}
		iscale = -127.0f / mx;
		vis = _mm256_set1_ps(iscale);
		for (int k = 0; k < OPUS_QK_K; k += 32)
		{
			__m256i		iv[4];
			__m256i		q;
			long long	sad[4];

			for (int j = 0; j < 4; j++)
			{
				__m256i		t = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * j), vis));

				t = _mm256_min_epi32(t, _mm256_set1_epi32(127));
				iv[j] = _mm256_max_epi32(t, _mm256_set1_epi32(-127));
			}
			q = pack_i32_to_i8(iv[0], iv[1], iv[2], iv[3]);
			_mm256_storeu_si256((__m256i *) (y[i].qs + k), q);
			/* sums of 16 signed bytes: bias to unsigned, sum absolute values */
			_mm256_storeu_si256((__m256i *) sad,
								_mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8((char) 0x80)),
												_mm256_setzero_si256()));
			y[i].bsums[k / 16] = (int16_t) (sad[0] + sad[1] - 16 * 128);
			y[i].bsums[k / 16 + 1] = (int16_t) (sad[2] + sad[3] - 16 * 128);
		}
		y[i].d = 1.0f / iscale;
	}
}

/* ---------------------------------------------------------------------
 * dequantization
 * --------------------------------------------------------------------- */

/* 32 bytes of small ints (signed if sgn) times d (plus m) into y[0..31] */
static inline void
store_scaled(__m256i q, bool sgn, __m256 d, const __m256 *m, float *y)
{
	__m128i		halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};

	for (int h = 0; h < 2; h++)
	{
		for (int k = 0; k < 2; k++)
		{
			__m128i		b8 = k ? _mm_unpackhi_epi64(halves[h], halves[h]) : halves[h];
			__m256i		i32 = sgn ? _mm256_cvtepi8_epi32(b8) : _mm256_cvtepu8_epi32(b8);
			__m256		v = _mm256_mul_ps(_mm256_cvtepi32_ps(i32), d);

			if (m)
				v = _mm256_add_ps(unfused(v), *m);
			_mm256_storeu_ps(y + 16 * h + 8 * k, v);
		}
	}
}

static void
q4_0_to_float_avx2(const void *src, float *y, int64_t n)
{
	const opus_block_q4_0 *b = src;

	for (int64_t i = 0; i < n / OPUS_QK32; i++)
		store_scaled(_mm256_sub_epi8(nibbles32(b[i].qs), _mm256_set1_epi8(8)), true,
					 _mm256_set1_ps(f16(b[i].d)), NULL, y + OPUS_QK32 * i);
}

static void
q4_1_to_float_avx2(const void *src, float *y, int64_t n)
{
	const opus_block_q4_1 *b = src;

	for (int64_t i = 0; i < n / OPUS_QK32; i++)
	{
		__m256		m = _mm256_set1_ps(f16(b[i].m));

		store_scaled(nibbles32(b[i].qs), false, _mm256_set1_ps(f16(b[i].d)), &m,
					 y + OPUS_QK32 * i);
	}
}

static void
q8_0_to_float_avx2(const void *src, float *y, int64_t n)
{
	const opus_block_q8_0 *b = src;

	for (int64_t i = 0; i < n / OPUS_QK32; i++)
		store_scaled(load256(b[i].qs), true, _mm256_set1_ps(f16(b[i].d)), NULL,
					 y + OPUS_QK32 * i);
}

/* ---------------------------------------------------------------------
 * registration
 * --------------------------------------------------------------------- */

void
opus_quant_register_avx2(struct opus_qtype_info *t)
{
	t[OPUS_TYPE_F32].vec_dot = f32_vec_dot_avx2;
	t[OPUS_TYPE_F16].vec_dot = f16_vec_dot_avx2;
	t[OPUS_TYPE_F16].to_float = f16_to_float_avx2;
	t[OPUS_TYPE_F16].from_float = f16_from_float_avx2;
	t[OPUS_TYPE_BF16].vec_dot = bf16_vec_dot_avx2;
	t[OPUS_TYPE_Q4_0].vec_dot = q4_0_vec_dot_avx2;
	t[OPUS_TYPE_Q4_0].to_float = q4_0_to_float_avx2;
	t[OPUS_TYPE_Q4_1].vec_dot = q4_1_vec_dot_avx2;
	t[OPUS_TYPE_Q4_1].to_float = q4_1_to_float_avx2;
	t[OPUS_TYPE_Q5_0].vec_dot = q5_0_vec_dot_avx2;
	t[OPUS_TYPE_Q5_1].vec_dot = q5_1_vec_dot_avx2;
	t[OPUS_TYPE_Q8_0].vec_dot = q8_0_vec_dot_avx2;
	t[OPUS_TYPE_Q8_0].to_float = q8_0_to_float_avx2;
	t[OPUS_TYPE_Q8_0].from_float = q8_0_from_float_avx2;
	t[OPUS_TYPE_Q8_1].from_float = q8_1_from_float_avx2;
	t[OPUS_TYPE_Q4_K].vec_dot = q4_K_vec_dot_avx2;
	t[OPUS_TYPE_Q5_K].vec_dot = q5_K_vec_dot_avx2;
	t[OPUS_TYPE_Q6_K].vec_dot = q6_K_vec_dot_avx2;
	t[OPUS_TYPE_Q8_K].from_float = q8_K_from_float_avx2;
	opus_quant_register_rows(q5_1_vec_dot_avx2, q5_1_rows_avx2);
	opus_quant_register_rows(f16_vec_dot_avx2, f16_rows_avx2);
	opus_quant_register_rows(bf16_vec_dot_avx2, bf16_rows_avx2);
	opus_quant_register_tile(q5_1_vec_dot_avx2, q5_1_tile_avx2);
	if (use_avx512bw() && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni"))
	{
		opus_quant_register_rows(q4_K_vec_dot_avx2, q4_K_rows_z);
		opus_quant_register_rows(opus_q4_K_vec_dot_gemv_avx2, q4_K_gemv_rows_z);
		opus_quant_register_tile(q4_K_vec_dot_avx2, q4_K_tile_z);
		opus_quant_register_tile(opus_q4_K_vec_dot_gemv_avx2, q4_K_gemv_tile_z);
	}
	else
	{
		opus_quant_register_rows(q4_K_vec_dot_avx2, q4_K_rows_avx2);
		opus_quant_register_rows(opus_q4_K_vec_dot_gemv_avx2, q4_K_gemv_rows_avx2);
		opus_quant_register_tile(q4_K_vec_dot_avx2, q4_K_tile_avx2);
		opus_quant_register_tile(opus_q4_K_vec_dot_gemv_avx2, q4_K_gemv_tile_avx2);
	}
	if (use_avx512bw())
	{
		opus_quant_register_rows(q6_K_vec_dot_avx2, q6_K_rows_z);
		opus_quant_register_rows(opus_q6_K_vec_dot_tiled_avx2, q6_K_tiled_rows_z);
		opus_quant_register_rows(q5_K_vec_dot_avx2, q5_K_rows_z);
		opus_quant_register_rows(opus_q5_K_vec_dot_tiled_avx2, q5_K_tiled_rows_z);
		opus_quant_register_tile(q5_K_vec_dot_avx2, q5_K_tile_avx512);
		opus_quant_register_tile(opus_q5_K_vec_dot_tiled_avx2, q5_K_tiled_tile_avx512);
		opus_quant_register_tile(q6_K_vec_dot_avx2, q6_K_tile_avx512);
		opus_quant_register_tile(opus_q6_K_vec_dot_tiled_avx2, q6_K_tiled_tile_avx512);
		opus_quant_register_tile(q5_0_vec_dot_avx2, q5_0_tile_avx512);
	}
	else
	{
		opus_quant_register_tile(q5_K_vec_dot_avx2, q5_K_tile_avx2);
		opus_quant_register_tile(opus_q5_K_vec_dot_tiled_avx2, q5_K_tiled_tile_avx2);
		opus_quant_register_tile(q6_K_vec_dot_avx2, q6_K_tile_avx2);
		opus_quant_register_tile(opus_q6_K_vec_dot_tiled_avx2, q6_K_tiled_tile_avx2);
		opus_quant_register_tile(q5_0_vec_dot_avx2, q5_0_tile_avx2);
	}
}
