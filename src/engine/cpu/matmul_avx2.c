/*
 * matmul_avx2.c - tiled matrix-multiplication kernels for the forward pass:
 * R weight rows (1..4) times C activation rows (1..4) per call, for the
 * weight types that dominate common models (Q4_1 with Q8_1 activations,
 * Q8_0 with Q8_0; Q4_0 with Q8_0 in llama.cpp's Q4_0 order, eight weight
 * rows in the lanes; Q5_0 with Q8_0, which Q4_K_M files use for rows that
 * are not a multiple of 256, see matmul_tile.h).  A kernel runs a range of weight rows against a group of
 * up to 8 tokens, sharing each unpacked weight block among the tokens, which
 * is where batched prefill and many-sequence decode get their speed; a
 * single sequence's decode uses the 1-token kernel.
 *
 * Three variants come from one template (matmul_tile.h): plain AVX2 (integer
 * block sums with maddubs + madd), AVX-VNNI (vpdpbusd) and the same
 * instruction in its AVX-512 VNNI encoding at 256 bits (CPUs that have
 * AVX-512 VNNI but not AVX-VNNI, e.g. AMD Zen 4; off with OPUS_NO_AVX512).  A third, for 6..8
 * tokens on CPUs with AVX-512 VNNI, works on token pairs in 512-bit
 * registers (below).  All compute the exact same integer sums and the same
 * float operations, so they give bit-identical results; which one runs only
 * changes speed (OPUS_NO_AVX512 in the environment turns the 512-bit one
 * off, for tests and comparisons).  Other weight types use the per-row
 * vec_dot kernels of the type table.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/forward_int.h"
#include "quant/quant_blocks.h"

/*
 * Decode (one token) streams each weight matrix once: prefetch this far
 * ahead of the block being read (measured: about 4% faster decode).
 */
#define MM_PREFETCH 4096

/*
 * Rows of up to this many blocks (4096 elements) take the scaled form for
 * 6..8 tokens; its buffers live on the stack: MM_MAX_NB * 8 * (32 + 2 * 4)
 * bytes (40 KiB), plus MM_MAX_NB * 2 * 4 (Q4_1's block minimums).
 */
#define MM_MAX_NB 128

/* ---- AVX2: u8 x s8 pairs to 16 bits (cannot saturate here), then to 32 ---- */

static inline __m256i
mm_dot_avx2(__m256i w, __m256i x)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

/* the 16-bit pair sums of both products added first (|sum| < 4 * 2,048: no overflow) */
static inline __m256i
mm_dot2_avx2(__m256i w, __m256i x, __m256i v, __m256i y)
{
	return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w, x), _mm256_maddubs_epi16(v, y)),
							 _mm256_set1_epi16(1));
}

#define MM_NAME(x) x##_avx2
#define MM_DOT(w, x) mm_dot_avx2(w, x)
#define MM_DOT2(w, x, v, y) mm_dot2_avx2(w, x, v, y)
#include "cpu/matmul_tile.h"
#undef MM_NAME
#undef MM_DOT
#undef MM_DOT2

/* ---- AVX-VNNI ---- */

#pragma GCC push_options
#pragma GCC target("avxvnni")

static inline __m256i
mm_dot_vnni(__m256i w, __m256i x)
{
	return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w, x);
}

#define MM_NAME(x) x##_vnni
#define MM_DOT(w, x) mm_dot_vnni(w, x)
#define MM_DOT2(w, x, v, y) _mm256_dpbusd_avx_epi32(mm_dot_vnni(w, x), v, y)
#include "cpu/matmul_tile.h"
#undef MM_NAME
#undef MM_DOT
#undef MM_DOT2

#pragma GCC pop_options

/* ---- AVX-512 VNNI at 256 bits (EVEX; CPUs with AVX-512 VNNI but no AVX-VNNI, e.g. AMD Zen 4) ---- */

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512vnni")

static inline __m256i
mm_dot_vnni256(__m256i w, __m256i x)
{
	return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
}

#define MM_NAME(x) x##_vnni256
#define MM_DOT(w, x) mm_dot_vnni256(w, x)
#define MM_DOT2(w, x, v, y) _mm256_dpbusd_epi32(mm_dot_vnni256(w, x), v, y)
#include "cpu/matmul_tile.h"
#undef MM_NAME
#undef MM_DOT
#undef MM_DOT2

#pragma GCC pop_options

/* ---- AVX-512 (VNNI, BW, VL, DQ): token pairs in 512-bit registers ---- */

/*
 * For 6..8 tokens on CPUs with AVX-512 VNNI.  Where 512-bit operations run
 * at full width (AMD Zen 5, Intel server cores) this halves the operations
 * per token and block: each 512-bit dot product and fused multiply-add
 * serves two tokens, their lanes interleaved (lane 2i: token 2p's lane i,
 * lane 2i + 1: token 2p + 1's).  Every lane still does exactly the
 * arithmetic of the 256-bit kernels (the same integer block sums, the same
 * scale products, the same fused adds in block order, the same final
 * reduction), so results are bit-identical to them and batch-invariant.
 *
 * Per call the tokens' quants are interleaved by pairs into xp (and for Q8_0
 * the per-lane correction -128 * sum(x) of the offset-binary weights: the
 * weight bytes get 128 added so that vpdpbusd's unsigned operand can hold
 * them, and the accumulator starts at the correction instead of zero; for
 * Q5_0 likewise -16 * sum(x), its quants taken unsigned, 0..31).
 * Each weight row's scales d_w * d_x for the 8 tokens are computed one row
 * ahead and read as pairs with a 64-bit broadcast.
 */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")

struct mm_z512_buf
{
	__m512i		xp[MM_MAX_NB * 4];	/* [b][pair] interleaved quants */
	__m512i		corr[MM_MAX_NB * 4];	/* Q8_0, Q5_0: [b][pair] accumulator start */
	float		sc[2][MM_MAX_NB * 8] __attribute__((aligned(64)));
};

/* each thread's own (72 KiB: too much for some thread stacks) */
static _Thread_local struct mm_z512_buf z512_buf;

/*
 * Interleave tokens 2p and 2p + 1 of block b (tokens >= C read as zeros);
 * with an offset (Q8_0: 128, Q5_0: 16) also the accumulator start
 * -offset * (each lane's sum of x).
 */
static inline void
z512_gather(int C, int nb, const uint8_t *x, size_t x_stride, size_t blk_bytes,
			size_t qs_off, int offset, struct mm_z512_buf *buf)
{
	const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19,
										 4, 20, 5, 21, 6, 22, 7, 23);
	const __m512i off = _mm512_set1_epi8((char) offset);

	for (int b = 0; b < nb; b++)
	{
		for (int p = 0; p < 4; p++)
		{
			__m256i		x0 = _mm256_setzero_si256(),
						x1 = _mm256_setzero_si256();
			__m512i		v;

			if (2 * p < C)
				x0 = _mm256_loadu_si256((const __m256i *) (x + (size_t) (2 * p) * x_stride + b * blk_bytes + qs_off));
			if (2 * p + 1 < C)
				x1 = _mm256_loadu_si256((const __m256i *) (x + (size_t) (2 * p + 1) * x_stride + b * blk_bytes + qs_off));
			v = _mm512_permutex2var_epi32(_mm512_castsi256_si512(x0), il, _mm512_castsi256_si512(x1));
			buf->xp[b * 4 + p] = v;
			if (offset)
				buf->corr[b * 4 + p] = _mm512_sub_epi32(_mm512_setzero_si512(),
														_mm512_dpbusd_epi32(_mm512_setzero_si512(), off, v));
		}
	}
}

/* sc[b * 8 + c] = d_w(b) * d_x(b, c) of one weight row, as row_scales_avx2. */
static inline void
z512_scales(int nb, const uint8_t *wr, size_t block_bytes, const float *xs, float *sc)
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
 * Weights stream from memory (a model is bigger than the caches): fetch the
 * row after next while this one is computed (past the end of the unit's
 * rows this touches the next unit's, which is harmless).
 */
static inline __attribute__((always_inline)) void
z512_prefetch(const uint8_t *row, size_t bytes)
{
	for (size_t off = 0; off < bytes; off += 64)
		_mm_prefetch((const char *) row + off, _MM_HINT_T0);
}

/* The scale pair of tokens 2p, 2p + 1 in every lane pair. */
static inline __attribute__((always_inline)) __m512
z512_scale_pair(const float *scb, int p)
{
	double		pair;

	memcpy(&pair, scb + 2 * p, sizeof(pair));
	return _mm512_castpd_ps(_mm512_set1_pd(pair));
}

/* Split the pair accumulators into the 8 per-token 256-bit accumulators and store row r. */
static inline __attribute__((always_inline)) void
z512_finish(int C, const __m512 *acc, __m256 ms, float *out)
{
	const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
	const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0);
	__m256		a[8];

	_Pragma("GCC unroll 4")
	for (int p = 0; p < 4; p++)
	{
		a[2 * p] = _mm512_castps512_ps256(_mm512_permutexvar_ps(ev, acc[p]));
		a[2 * p + 1] = _mm512_castps512_ps256(_mm512_permutexvar_ps(od, acc[p]));
	}
	store_avx2(C, out, _mm256_add_ps(reduce_avx2(8, a), ms));
}

/* Q4_1 x Q8_1, 6..8 tokens, nb <= MM_MAX_NB. */
static void
q4_1_z512(int C, int nb, int n_rows, const uint8_t *w, size_t w_stride,
		  const uint8_t *x, size_t x_stride, const float *xs, float *out)
{
	struct mm_z512_buf *buf = &z512_buf;
	const __m256i lowmask = _mm256_set1_epi8(0x0F);
	const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);

	z512_gather(C, nb, x, x_stride, sizeof(opus_block_q8_1), 4, 0, buf);
	z512_scales(nb, w, sizeof(opus_block_q4_1), xs, buf->sc[0]);
	for (int r = 0; r < n_rows; r++)
	{
		const opus_block_q4_1 *wr = (const opus_block_q4_1 *) (w + (size_t) r * w_stride);
		const float *scr = buf->sc[r & 1];
		__m512		acc[4];
		__m256		ms = _mm256_setzero_ps();

		if (r + 1 < n_rows)
			z512_scales(nb, w + (size_t) (r + 1) * w_stride, sizeof(opus_block_q4_1), xs,
						buf->sc[(r + 1) & 1]);
		z512_prefetch(w + (size_t) (r + 8) * w_stride, w_stride);
		_Pragma("GCC unroll 4")
		for (int p = 0; p < 4; p++)
			acc[p] = _mm512_setzero_ps();
		for (int b = 0; b < nb; b++)
		{
			__m128i		q = _mm_loadu_si128((const __m128i *) wr[b].qs);
			__m256i		wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), lowmask);
			__m512i		wz = _mm512_permutexvar_epi32(dup, _mm512_castsi256_si512(wq));
			__m256		mw = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(wr[b].m)));
			const float *scb = scr + b * 8;

			ms = _mm256_fmadd_ps(mw, _mm256_loadu_ps(xs + (size_t) (nb + b) * 8), ms);
			_Pragma("GCC unroll 4")
			for (int p = 0; p < 4; p++)
			{
				__m512		v = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wz,
																		buf->xp[b * 4 + p]));

				acc[p] = _mm512_fmadd_ps(z512_scale_pair(scb, p), v, acc[p]);
			}
		}
		z512_finish(C, acc, ms, out + (size_t) r * 8);
	}
}

/* Q8_0 x Q8_0, 6..8 tokens, nb <= MM_MAX_NB. */
static void
q8_0_z512(int C, int nb, int n_rows, const uint8_t *w, size_t w_stride,
		  const uint8_t *x, size_t x_stride, const float *xs, float *out)
{
	struct mm_z512_buf *buf = &z512_buf;
	const __m256i b80 = _mm256_set1_epi8((char) 0x80);
	const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);

	z512_gather(C, nb, x, x_stride, sizeof(opus_block_q8_0), 2, 128, buf);
	z512_scales(nb, w, sizeof(opus_block_q8_0), xs, buf->sc[0]);
	for (int r = 0; r < n_rows; r++)
	{
		const opus_block_q8_0 *wr = (const opus_block_q8_0 *) (w + (size_t) r * w_stride);
		const float *scr = buf->sc[r & 1];
		__m512		acc[4];

		if (r + 1 < n_rows)
			z512_scales(nb, w + (size_t) (r + 1) * w_stride, sizeof(opus_block_q8_0), xs,
						buf->sc[(r + 1) & 1]);
		z512_prefetch(w + (size_t) (r + 8) * w_stride, w_stride);
		_Pragma("GCC unroll 4")
		for (int p = 0; p < 4; p++)
			acc[p] = _mm512_setzero_ps();
		for (int b = 0; b < nb; b++)
		{
			/* offset binary: w + 128 as unsigned bytes */
			__m256i		wu = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *) wr[b].qs), b80);
			__m512i		wz = _mm512_permutexvar_epi32(dup, _mm512_castsi256_si512(wu));
			const float *scb = scr + b * 8;

			_Pragma("GCC unroll 4")
			for (int p = 0; p < 4; p++)
			{
				__m512		v = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(buf->corr[b * 4 + p], wz,
																		buf->xp[b * 4 + p]));

				acc[p] = _mm512_fmadd_ps(z512_scale_pair(scb, p), v, acc[p]);
			}
		}
		z512_finish(C, acc, _mm256_setzero_ps(), out + (size_t) r * 8);
	}
}

/*
 * Q5_0 x Q8_0, 6..8 tokens, nb <= MM_MAX_NB: the quants as unsigned q
 * (0..31: the low nibble, plus 16 where the block's bit is set, one masked
 * add with qh as the byte mask), the accumulator starting at -16 * sum(x),
 * so each lane is exactly the sum (q - 16) x of the sign trick.
 */
static void
q5_0_z512(int C, int nb, int n_rows, const uint8_t *w, size_t w_stride,
		  const uint8_t *x, size_t x_stride, const float *xs, float *out)
{
	struct mm_z512_buf *buf = &z512_buf;
	const __m256i lowmask = _mm256_set1_epi8(0x0F);
	const __m256i b10 = _mm256_set1_epi8(0x10);
	const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);

	z512_gather(C, nb, x, x_stride, sizeof(opus_block_q8_0), 2, 16, buf);
	z512_scales(nb, w, sizeof(opus_block_q5_0), xs, buf->sc[0]);
	for (int r = 0; r < n_rows; r++)
	{
		const opus_block_q5_0 *wr = (const opus_block_q5_0 *) (w + (size_t) r * w_stride);
		const float *scr = buf->sc[r & 1];
		__m512		acc[4];

		if (r + 1 < n_rows)
			z512_scales(nb, w + (size_t) (r + 1) * w_stride, sizeof(opus_block_q5_0), xs,
						buf->sc[(r + 1) & 1]);
		z512_prefetch(w + (size_t) (r + 8) * w_stride, w_stride);
		_Pragma("GCC unroll 4")
		for (int p = 0; p < 4; p++)
			acc[p] = _mm512_setzero_ps();
		for (int b = 0; b < nb; b++)
		{
			__m128i		q = _mm_loadu_si128((const __m128i *) wr[b].qs);
			uint32_t	qh;
			__m256i		wu;
			__m512i		wz;
			const float *scb = scr + b * 8;

			memcpy(&qh, wr[b].qh, sizeof(qh));
			wu = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), lowmask);
			wu = _mm256_mask_add_epi8(wu, (__mmask32) qh, wu, b10);
			wz = _mm512_permutexvar_epi32(dup, _mm512_castsi256_si512(wu));
			_Pragma("GCC unroll 4")
			for (int p = 0; p < 4; p++)
			{
				__m512		v = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(buf->corr[b * 4 + p], wz,
																		buf->xp[b * 4 + p]));

				acc[p] = _mm512_fmadd_ps(z512_scale_pair(scb, p), v, acc[p]);
			}
		}
		z512_finish(C, acc, _mm256_setzero_ps(), out + (size_t) r * 8);
	}
}

#define Z512_INSTANCE(type, C) \
static void \
type##_z512_##C(int nb, int n_rows, const uint8_t *w, size_t ws, \
				const uint8_t *x, size_t xst, const float *xs, float *out) \
{ \
	if (nb <= MM_MAX_NB) \
		type##_z512(C, nb, n_rows, w, ws, x, xst, xs, out); \
	else \
		type##_table_vnni256[C - 1] (nb, n_rows, w, ws, x, xst, xs, out); \
}

Z512_INSTANCE(q4_1, 6) Z512_INSTANCE(q4_1, 7) Z512_INSTANCE(q4_1, 8)
Z512_INSTANCE(q8_0, 6) Z512_INSTANCE(q8_0, 7) Z512_INSTANCE(q8_0, 8)
Z512_INSTANCE(q5_0, 6) Z512_INSTANCE(q5_0, 7) Z512_INSTANCE(q5_0, 8)
#undef Z512_INSTANCE

#pragma GCC pop_options

static bool
cpu_has_avx512vnni(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
		__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
		__builtin_cpu_supports("avx512vnni");
}

static bool
cpu_has_avxvnni(void)
{
	unsigned int a,
				b,
				c,
				d;

	/* CPUID.(EAX=7,ECX=1):EAX bit 4; AVX state support is implied by AVX2 use */
	if (!__get_cpuid_count(7, 1, &a, &b, &c, &d))
		return false;
	return (a >> 4) & 1;
}

opus_mm_rows_fn
opus_mm_rows_avx2(enum opus_qtype wtype, int C, bool allow_vnni)
{
	bool		use_vnni = allow_vnni && cpu_has_avxvnni();
	bool		use_512 = allow_vnni && cpu_has_avx512vnni() && getenv("OPUS_NO_AVX512") == NULL;
	static const opus_mm_rows_fn q4_1_z512[3] = {q4_1_z512_6, q4_1_z512_7, q4_1_z512_8};
	static const opus_mm_rows_fn q8_0_z512[3] = {q8_0_z512_6, q8_0_z512_7, q8_0_z512_8};
	static const opus_mm_rows_fn q5_0_z512[3] = {q5_0_z512_6, q5_0_z512_7, q5_0_z512_8};

	if (C < 1 || C > 8)
		return NULL;
	switch (wtype)
	{
		case OPUS_TYPE_Q4_1:
			if (use_512 && C >= 6)
				return q4_1_z512[C - 6];
			return use_vnni ? q4_1_table_vnni[C - 1] : use_512 ? q4_1_table_vnni256[C - 1] :
				q4_1_table_avx2[C - 1];
		case OPUS_TYPE_Q8_0:
			if (use_512 && C >= 6)
				return q8_0_z512[C - 6];
			return use_vnni ? q8_0_table_vnni[C - 1] : use_512 ? q8_0_table_vnni256[C - 1] :
				q8_0_table_avx2[C - 1];
		case OPUS_TYPE_Q4_0:
			return use_vnni ? q4_0_table_vnni[C - 1] : use_512 ? q4_0_table_vnni256[C - 1] :
				q4_0_table_avx2[C - 1];
		case OPUS_TYPE_Q5_0:
			if (use_512 && C >= 6)
				return q5_0_z512[C - 6];
			return use_vnni ? q5_0_table_vnni[C - 1] : use_512 ? q5_0_table_vnni256[C - 1] :
				q5_0_table_avx2[C - 1];
		default:
			return NULL;
	}
}

void
opus_mm_scatter_avx2(const float *out, int64_t n, int cc, float *const *dst,
					 const float *bias, bool accumulate)
{
	int64_t		i = 0;

	for (; i + 8 <= n; i += 8)
	{
		__m256		v[8],
					u[8],
					s[8];

		for (int k = 0; k < 8; k++)
			v[k] = _mm256_loadu_ps(out + (i + k) * 8);
		/* 8x8 transpose: s[c] = rows i..i+7 of token c */
		for (int k = 0; k < 8; k += 2)
		{
			u[k] = _mm256_unpacklo_ps(v[k], v[k + 1]);
			u[k + 1] = _mm256_unpackhi_ps(v[k], v[k + 1]);
		}
		for (int k = 0; k < 8; k += 4)
		{
			v[k] = _mm256_shuffle_ps(u[k], u[k + 2], 0x44);
			v[k + 1] = _mm256_shuffle_ps(u[k], u[k + 2], 0xEE);
			v[k + 2] = _mm256_shuffle_ps(u[k + 1], u[k + 3], 0x44);
			v[k + 3] = _mm256_shuffle_ps(u[k + 1], u[k + 3], 0xEE);
		}
		for (int k = 0; k < 4; k++)
		{
			s[k] = _mm256_permute2f128_ps(v[k], v[k + 4], 0x20);
			s[k + 4] = _mm256_permute2f128_ps(v[k], v[k + 4], 0x31);
		}
		for (int c = 0; c < cc; c++)
		{
			__m256		val = s[c];

			if (bias)
				val = _mm256_add_ps(val, _mm256_loadu_ps(bias + i));
			if (accumulate)
				val = _mm256_add_ps(_mm256_loadu_ps(dst[c] + i), val);
			_mm256_storeu_ps(dst[c] + i, val);
		}
	}
	for (; i < n; i++)
	{
		for (int c = 0; c < cc; c++)
		{
			float		val = out[i * 8 + c];

			if (bias)
				val += bias[i];
			if (accumulate)
				dst[c][i] += val;
			else
				dst[c][i] = val;
		}
	}
}
