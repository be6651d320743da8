/*
 * opus_dequant.h - dequantization of the engine's weight types, 32 elements
 * at a time, as inline functions that compile both as C (gcc: the CPU-side
 * unit test test/unit/test_cuda_dequant.c) and as CUDA device code
 * (the kernels/ .cu files).  The same source therefore runs in both places and is
 * checked bit for bit against quant_ref.c's to_float on the CPU.
 *
 * A row of n elements (n a multiple of the type's block size) is read as
 * n / 32 chunks; opus_dq_chunk(type, row, c, y) writes elements 32c..32c+31
 * of the row into y[0..31].  Blocks are read byte by byte at their GGUF /
 * ggml offsets (no struct layouts, so no alignment assumption and nothing
 * C-only such as _Static_assert); quant_blocks.h documents the layouts.
 *
 * Arithmetic: every product and sum is written out with OPUS_DQ_MUL /
 * OPUS_DQ_SUB / OPUS_DQ_ADD, which are plain operators in C (the engine is
 * built for baseline x86-64, where gcc does not contract a*b+c into an FMA)
 * and the round-to-nearest intrinsics in device code (nvcc would otherwise
 * fuse them), in the same order as quant_ref.c, so the values are identical.
 */
#ifndef OPUS_DEQUANT_H
#define OPUS_DEQUANT_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define OPUS_HD __host__ __device__ __forceinline__
#else
#define OPUS_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define OPUS_DQ_MUL(a, b) __fmul_rn((a), (b))
#define OPUS_DQ_ADD(a, b) __fadd_rn((a), (b))
#define OPUS_DQ_SUB(a, b) __fsub_rn((a), (b))
#else
#define OPUS_DQ_MUL(a, b) ((a) * (b))
#define OPUS_DQ_ADD(a, b) ((a) + (b))
#define OPUS_DQ_SUB(a, b) ((a) - (b))
#endif

/* GGUF type ids (= enum opus_qtype; backend_cuda.c checks they agree) */
#define OPUS_DQ_F32		0
#define OPUS_DQ_F16		1
#define OPUS_DQ_Q4_0	2
#define OPUS_DQ_Q4_1	3
#define OPUS_DQ_Q5_0	6
#define OPUS_DQ_Q5_1	7
#define OPUS_DQ_Q8_0	8
#define OPUS_DQ_Q4_K	12
#define OPUS_DQ_Q5_K	13
#define OPUS_DQ_Q6_K	14
#define OPUS_DQ_BF16	30

#define OPUS_DQ_CHUNK 32		/* elements per opus_dq_chunk call */

OPUS_HD float
opus_dq_bits_f32(uint32_t u)
{
#if defined(__CUDA_ARCH__)
	return __uint_as_float(u);
#else
	float		f;

	memcpy(&f, &u, sizeof(f));
	return f;
#endif
}

/* IEEE half bits to float, exactly as opus_fp16_to_fp32 (quant_ref.c). */
OPUS_HD float
opus_dq_h2f(uint16_t h)
{
	uint32_t	sign = (uint32_t) (h & 0x8000) << 16;
	uint32_t	e = (h >> 10) & 0x1f;
	uint32_t	mant = h & 0x3ff;

	if (e == 0)
	{
		/* zero or subnormal: mant * 2^-24, exact */
		float		v = (float) mant * 5.9604644775390625e-08f;

		return sign ? -v : v;
	}
	if (e == 31)
	{
		if (mant == 0)
			return opus_dq_bits_f32(sign | 0x7f800000u);
		return opus_dq_bits_f32(sign | 0x7fc00000u | (mant << 13));
	}
	return opus_dq_bits_f32(sign | ((e + 112) << 23) | (mant << 13));
}

OPUS_HD uint16_t
opus_dq_u16(const uint8_t *p)
{
	return (uint16_t) (p[0] | (p[1] << 8));
}

OPUS_HD uint32_t
opus_dq_u32(const uint8_t *p)
{
	return (uint32_t) p[0] | ((uint32_t) p[1] << 8) | ((uint32_t) p[2] << 16) |
		((uint32_t) p[3] << 24);
}

/* Elements per block and bytes per block of a type this file handles, else 0. */
OPUS_HD int
opus_dq_block_size(int type)
{
	switch (type)
	{
		case OPUS_DQ_F32:
		case OPUS_DQ_F16:
		case OPUS_DQ_BF16:
			return 1;
		case OPUS_DQ_Q4_0:
		case OPUS_DQ_Q4_1:
		case OPUS_DQ_Q5_0:
		case OPUS_DQ_Q5_1:
		case OPUS_DQ_Q8_0:
			return 32;
		case OPUS_DQ_Q4_K:
		case OPUS_DQ_Q5_K:
		case OPUS_DQ_Q6_K:
			return 256;
		default:
			return 0;
	}
}

OPUS_HD int
opus_dq_type_size(int type)
{
	switch (type)
	{
		case OPUS_DQ_F32:
			return 4;
		case OPUS_DQ_F16:
		case OPUS_DQ_BF16:
			return 2;
		case OPUS_DQ_Q4_0:
			return 18;
		case OPUS_DQ_Q4_1:
			return 20;
		case OPUS_DQ_Q5_0:
			return 22;
		case OPUS_DQ_Q5_1:
			return 24;
		case OPUS_DQ_Q8_0:
			return 34;
		case OPUS_DQ_Q4_K:
			return 144;
		case OPUS_DQ_Q5_K:
			return 176;
		case OPUS_DQ_Q6_K:
			return 210;
		default:
			return 0;
	}
}

/* ---- per type: elements 32c..32c+31 of a row into y ---- */

OPUS_HD void
opus_dq_f32(const uint8_t *row, int64_t c, float *y)
{
	const uint8_t *p = row + c * 32 * 4;

	for (int j = 0; j < 32; j++)
		y[j] = opus_dq_bits_f32(opus_dq_u32(p + 4 * j));
}

OPUS_HD void
opus_dq_f16(const uint8_t *row, int64_t c, float *y)
{
	const uint8_t *p = row + c * 32 * 2;

	for (int j = 0; j < 32; j++)
		y[j] = opus_dq_h2f(opus_dq_u16(p + 2 * j));
}

OPUS_HD void
opus_dq_bf16(const uint8_t *row, int64_t c, float *y)
{
	const uint8_t *p = row + c * 32 * 2;

	for (int j = 0; j < 32; j++)
		y[j] = opus_dq_bits_f32((uint32_t) opus_dq_u16(p + 2 * j) << 16);
}

/* Q4_0: d (f16), qs[16]; element j low nibble of qs[j], j+16 high; (q - 8) * d */
OPUS_HD void
opus_dq_q4_0(const uint8_t *row, int64_t c, float *y)
{
	const uint8_t *b = row + c * 18;
	float		d = opus_dq_h2f(opus_dq_u16(b));
	const uint8_t *qs = b + 2;

	for (int j = 0; j < 16; j++)
	{
		y[j] = OPUS_DQ_MUL((float) ((qs[j] & 0x0F) - 8), d);
		y[j + 16] = OPUS_DQ_MUL((float) ((qs[j] >> 4) - 8), d);
	}
}

/* Q4_1: d, m (f16), qs[16]; q * d + m */
OPUS_HD void
opus_dq_q4_1(const uint8_t *row, int64_t c, float *y)
{
	const uint8_t *b = row + c * 20;
	float		d = opus_dq_h2f(opus_dq_u16(b));
	float		m = opus_dq_h2f(opus_dq_u16(b + 2));
	const uint8_t *qs = b + 4;

	for (int j = 0; j < 16; j++)
	{
		y[j] = OPUS_DQ_ADD(OPUS_DQ_MUL((float) (qs[j] & 0x0F), d), m);
		y[j + 16] = OPUS_DQ_ADD(OPUS_DQ_MUL((float) (qs[j] >> 4), d), m);
	}
}

/* Q5_0: d, qh (u32 LE), qs[16]; fifth bit j of qh; (q - 16) * d */
OPUS_HD void
opus_dq_q5_0(const uint8_t *row, int64_t c, float *y)
{
	const uint8_t *b = row + c * 22;
	float		d = opus_dq_h2f(opus_dq_u16(b));
	uint32_t	qh = opus_dq_u32(b + 2);
	const uint8_t *qs = b + 6;

	for (int j = 0; j < 16; j++)
	{
		int			lo = (qs[j] & 0x0F) | (int) (((qh >> j) & 1) << 4);
		int			hi = (qs[j] >> 4) | (int) (((qh >> (j + 16)) & 1) << 4);

		y[j] = OPUS_DQ_MUL((float) (lo - 16), d);
		y[j + 16] = OPUS_DQ_MUL((float) (hi - 16), d);
	}
}

/* Q5_1: d, m, qh, qs[16]; q * d + m */
OPUS_HD void
opus_dq_q5_1(const uint8_t *row, int64_t c, float *y)
{
	const uint8_t *b = row + c * 24;
	float		d = opus_dq_h2f(opus_dq_u16(b));
	float		m = opus_dq_h2f(opus_dq_u16(b + 2));
	uint32_t	qh = opus_dq_u32(b + 4);
	const uint8_t *qs = b + 8;

	for (int j = 0; j < 16; j++)
	{
		int			lo = (qs[j] & 0x0F) | (int) (((qh >> j) & 1) << 4);
		int			hi = (qs[j] >> 4) | (int) (((qh >> (j + 16)) & 1) << 4);

		y[j] = OPUS_DQ_ADD(OPUS_DQ_MUL((float) lo, d), m);
		y[j + 16] = OPUS_DQ_ADD(OPUS_DQ_MUL((float) hi, d), m);
	}
}

/* Q8_0: d, qs[32] int8; q * d */
OPUS_HD void
opus_dq_q8_0(const uint8_t *row, int64_t c, float *y)
{
	const uint8_t *b = row + c * 34;
	float		d = opus_dq_h2f(opus_dq_u16(b));

	for (int j = 0; j < 32; j++)
		y[j] = OPUS_DQ_MUL((float) (int8_t) b[2 + j], d);
}

/* The 6-bit scale and min of sub-block j of a Q4_K/Q5_K (as opus_k_scale_min). */
OPUS_HD void
opus_dq_scale_min(int j, const uint8_t *q, int *sc, int *m)
{
	if (j < 4)
	{
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	}
	else
	{
		*sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/*
 * Q4_K (144 bytes per 256): d, dmin (f16), scales[12], qs[128].  Chunk c is
 * sub-block j = c % 8 of super-block c / 8: the 64-element group j / 2,
 * low nibbles for even j, high for odd; d * sc * q - dmin * m.
 */
OPUS_HD void
opus_dq_q4_k(const uint8_t *row, int64_t c, float *y)
{
	const uint8_t *b = row + (c / 8) * 144;
	int			j = (int) (c % 8);
	float		d = opus_dq_h2f(opus_dq_u16(b));
	float		dmin = opus_dq_h2f(opus_dq_u16(b + 2));
	const uint8_t *q = b + 16 + 32 * (j / 2);
	int			sc,
				m;
	float		d1,
				m1;

	opus_dq_scale_min(j, b + 4, &sc, &m);
	d1 = OPUS_DQ_MUL(d, (float) sc);
	m1 = OPUS_DQ_MUL(dmin, (float) m);
	for (int l = 0; l < 32; l++)
	{
		int			v = (j & 1) ? (q[l] >> 4) : (q[l] & 0x0F);

		y[l] = OPUS_DQ_SUB(OPUS_DQ_MUL(d1, (float) v), m1);
	}
}

/*
 * Q5_K (176 bytes): d, dmin, scales[12], qh[32], qs[128]; the fifth bit of
 * element l of sub-block j is bit j of qh[l].
 */
OPUS_HD void
opus_dq_q5_k(const uint8_t *row, int64_t c, float *y)
{
	const uint8_t *b = row + (c / 8) * 176;
	int			j = (int) (c % 8);
	float		d = opus_dq_h2f(opus_dq_u16(b));
	float		dmin = opus_dq_h2f(opus_dq_u16(b + 2));
	const uint8_t *qh = b + 16;
	const uint8_t *q = b + 48 + 32 * (j / 2);
	int			sc,
				m;
	float		d1,
				m1;

	opus_dq_scale_min(j, b + 4, &sc, &m);
	d1 = OPUS_DQ_MUL(d, (float) sc);
	m1 = OPUS_DQ_MUL(dmin, (float) m);
	for (int l = 0; l < 32; l++)
	{
		int			v = ((j & 1) ? (q[l] >> 4) : (q[l] & 0x0F)) | (((qh[l] >> j) & 1) << 4);

		y[l] = OPUS_DQ_SUB(OPUS_DQ_MUL(d1, (float) v), m1);
	}
}

/*
 * Q6_K (210 bytes): ql[128], qh[64], scales[16] int8, d (f16).  Element
 * 128h + 32k + l keeps its low 4 bits in ql[64h + l + 32 (k & 1)] (low
 * nibble for k < 2, else high) and its top 2 bits in bits 2k, 2k+1 of
 * qh[32h + l]; value d * scales[e / 16] * (q - 32).  Chunk c covers
 * e0 = 32 (c % 8), so h = e0 / 128, k = (e0 % 128) / 32.
 */
OPUS_HD void
opus_dq_q6_k(const uint8_t *row, int64_t c, float *y)
{
	const uint8_t *b = row + (c / 8) * 210;
	int			e0 = 32 * (int) (c % 8);
	int			h = e0 / 128;
	int			k = (e0 % 128) / 32;
	const uint8_t *ql = b + 64 * h + 32 * (k & 1);
	const uint8_t *qh = b + 128 + 32 * h;
	const int8_t *scales = (const int8_t *) (b + 192);
	float		d = opus_dq_h2f(opus_dq_u16(b + 208));

	for (int l = 0; l < 32; l++)
	{
		int			lo = k < 2 ? (ql[l] & 0x0F) : (ql[l] >> 4);
		int			hi = (qh[l] >> (2 * k)) & 3;
		int			lvl = (lo | (hi << 4)) - 32;

		y[l] = OPUS_DQ_MUL(OPUS_DQ_MUL(d, (float) scales[(e0 + l) / 16]), (float) lvl);
	}
}

/* Elements 32c..32c+31 of a row of `type` into y; false for a type not handled. */
OPUS_HD int
opus_dq_chunk(int type, const uint8_t *row, int64_t c, float *y)
{
	switch (type)
	{
		case OPUS_DQ_F32:
			opus_dq_f32(row, c, y);
			return 1;
		case OPUS_DQ_F16:
			opus_dq_f16(row, c, y);
			return 1;
		case OPUS_DQ_BF16:
			opus_dq_bf16(row, c, y);
			return 1;
		case OPUS_DQ_Q4_0:
			opus_dq_q4_0(row, c, y);
			return 1;
		case OPUS_DQ_Q4_1:
			opus_dq_q4_1(row, c, y);
			return 1;
		case OPUS_DQ_Q5_0:
			opus_dq_q5_0(row, c, y);
			return 1;
		case OPUS_DQ_Q5_1:
			opus_dq_q5_1(row, c, y);
			return 1;
		case OPUS_DQ_Q8_0:
			opus_dq_q8_0(row, c, y);
			return 1;
		case OPUS_DQ_Q4_K:
			opus_dq_q4_k(row, c, y);
			return 1;
		case OPUS_DQ_Q5_K:
			opus_dq_q5_k(row, c, y);
			return 1;
		case OPUS_DQ_Q6_K:
			opus_dq_q6_k(row, c, y);
			return 1;
		default:
			return 0;
	}
}

#endif							/* OPUS_DEQUANT_H */
