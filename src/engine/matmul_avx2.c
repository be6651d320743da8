/*
 * matmul_avx2.c - tiled matrix-multiplication kernels for the forward pass:
 * R weight rows (1..4) times C activation rows (1..4) per call, for the
 * weight types that dominate common models (Q4_1 with Q8_1 activations,
 * Q8_0 with Q8_0).  A kernel runs a range of weight rows against a group of
 * up to 8 tokens, sharing each unpacked weight block among the tokens, which
 * is where batched prefill and many-sequence decode get their speed; a
 * single sequence's decode uses the 1-token kernel.
 *
 * Two variants come from one template (matmul_tile.h): plain AVX2 (integer
 * block sums with maddubs + madd) and AVX-VNNI (vpdpbusd).  Both compute the
 * exact same integer sums and the same float operations, so they give
 * bit-identical results; which one runs only changes speed.  Other weight
 * types use the per-row vec_dot kernels of the type table.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "forward_int.h"
#include "quant_blocks.h"

/*
 * Decode (one token) streams each weight matrix once: prefetch this far
 * ahead of the block being read (measured: about 4% faster decode).
 */
#define MM_PREFETCH 4096

/*
 * Rows of up to this many blocks (4096 elements) take the scaled form for
 * 6..8 tokens; its buffers live on the stack: MM_MAX_NB * 8 * (32 + 2 * 4)
 * bytes (40 KiB).
 */
#define MM_MAX_NB 128

/* ---- AVX2: u8 x s8 pairs to 16 bits (cannot saturate here), then to 32 ---- */

static inline __m256i
mm_dot_avx2(__m256i w, __m256i x)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

#define MM_NAME(x) x##_avx2
#define MM_DOT(w, x) mm_dot_avx2(w, x)
#include "matmul_tile.h"
#undef MM_NAME
#undef MM_DOT

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
#include "matmul_tile.h"
#undef MM_NAME
#undef MM_DOT

#pragma GCC pop_options

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

	if (C < 1 || C > 8)
		return NULL;
	switch (wtype)
	{
		case OPUS_TYPE_Q4_1:
			return use_vnni ? q4_1_table_vnni[C - 1] : q4_1_table_avx2[C - 1];
		case OPUS_TYPE_Q8_0:
			return use_vnni ? q8_0_table_vnni[C - 1] : q8_0_table_avx2[C - 1];
		default:
			return NULL;
	}
}
