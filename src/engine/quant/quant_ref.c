/*
 * quant_ref.c - reference (plain C) kernels for every supported tensor type:
 * dequantize a row, quantize a row, and the dot product of a weight row with
 * an activation row in the weight type's vec_dot_type.  Also the exact IEEE
 * half / bfloat16 conversions.
 *
 * Layouts and semantics follow ggml (see quant_blocks.h) so that files written
 * by llama.cpp load unchanged and our logits track llama.cpp's:
 *  - the quantizers are ggml's reference quantizers (deterministic; for the
 *    K-quants the same weighted scale/min search), written anew here;
 *  - activations are quantized to Q8_0 / Q8_1 (which carries s = d*sum(q))
 *    / Q8_K (f32 d and per-16 sums) exactly as ggml's reference does;
 *  - the dot products use ggml's integer-sum-then-scale formulation, e.g.
 *    Q4_1 . Q8_1 = sum over blocks of d*d8*sumi + m*s8, Q4_K . Q8_K takes the
 *    min term from Q8_K's bsums.
 *
 * These are the definitions the AVX2 kernels (quant_avx2.c) are tested
 * against.  Float accumulation of F32/F16/BF16 dot products is done in double
 * here so the reference is the accurate one.
 *
 * All functions are pure and thread-safe.  n is the number of elements and
 * must be a multiple of the type's block size (the caller checks; see
 * opus_qtype_row_size).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "quant/qtype.h"
#include "quant/quant_blocks.h"
#include "quant/quant_kernels.h"

/* ---------------------------------------------------------------------
 * IEEE half and bfloat16
 * --------------------------------------------------------------------- */

static inline uint32_t
f32_bits(float f)
{
	uint32_t	u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float
bits_f32(uint32_t u)
{
	float		f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

float
opus_fp16_to_fp32(uint16_t h)
{
	uint32_t	sign = (uint32_t) (h & 0x8000) << 16;
	uint32_t	exp = (h >> 10) & 0x1f;
	uint32_t	mant = h & 0x3ff;

	if (exp == 0)
	{
		/* zero or subnormal: mant * 2^-24, exact in f32 */
		float		v = (float) mant * 0x1p-24f;

		return sign ? -v : v;
	}
	if (exp == 31)
	{
		if (mant == 0)
			return bits_f32(sign | 0x7f800000u);
		/* NaN: keep the payload, set the quiet bit (as F16C does) */
		return bits_f32(sign | 0x7fc00000u | (mant << 13));
	}
	return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t
opus_fp32_to_fp16(float f)
{
	uint32_t	u = f32_bits(f);
	uint32_t	sign = (u >> 16) & 0x8000;
	uint32_t	a = u & 0x7fffffffu;

	if (a > 0x7f800000u)
		return (uint16_t) (sign | 0x7e00 | ((a >> 13) & 0x3ff));	/* NaN */
	if (a >= 0x477ff000u)
		return (uint16_t) (sign | 0x7c00);	/* rounds to (or is) inf */
	if (a < 0x38800000u)
	{
		/* below the smallest normal half: result is a multiple of 2^-24 */
		uint32_t	exp = a >> 23;
		uint32_t	m = (a & 0x7fffff) | 0x800000;
		uint32_t	shift;
		uint32_t	q,
					rem,
					half;

		if (exp < 102)
			return (uint16_t) sign;		/* below 2^-25: rounds to zero */
		shift = 126 - exp;		/* 14..24 */
		q = m >> shift;
		rem = m & ((1u << shift) - 1);
		half = 1u << (shift - 1);
		if (rem > half || (rem == half && (q & 1)))
			q++;
		return (uint16_t) (sign | q);
	}
	else
	{
		uint32_t	base = a - 0x38000000u;	/* rebias exponent 127 -> 15 */
		uint32_t	q = base >> 13;
		uint32_t	rem = base & 0x1fff;

		if (rem > 0x1000 || (rem == 0x1000 && (q & 1)))
			q++;
		return (uint16_t) (sign | q);
	}
}

float
opus_bf16_to_fp32(uint16_t h)
{
	return bits_f32((uint32_t) h << 16);
}

uint16_t
opus_fp32_to_bf16(float f)
{
	uint32_t	u = f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t) ((u >> 16) | 0x40);	/* NaN: force quiet */
	return (uint16_t) ((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

#define F16(h) opus_fp16_to_fp32(h)

/* ---------------------------------------------------------------------
 * rounding helpers
 * --------------------------------------------------------------------- */

/*
 * Round to nearest, ties to even, for |v| < 2^22 (ggml's nearest_int).  Out
 * of range or NaN input gives an unspecified int but never undefined
 * behaviour; every caller clamps the result.
 */
static inline int
nearest_int(float v)
{
	float		t = v + 12582912.0f;	/* 1.5 * 2^23 */
	int32_t		i;

	memcpy(&i, &t, sizeof(i));
	return (i & 0x007fffff) - 0x00400000;
}

/* (int) trunc(v) clamped to [0, hi]; NaN gives 0. */
static inline int
trunc_clamp(float v, int hi)
{
	if (!(v > 0.0f))
		return 0;
	if (v >= (float) hi)
		return hi;
	return (int) v;
}

/* roundf(v) (ties away from zero) clamped to [-127, 127]; NaN gives 0. */
static inline int8_t
round_q8(float v)
{
	float		r = roundf(v);

	if (!(r > -127.0f))
		return (int8_t) (r != r ? 0 : -127);
	if (r > 127.0f)
		return 127;
	return (int8_t) r;
}

static inline int
clamp_int(int v, int lo, int hi)
{
	return v < lo ? lo : (v > hi ? hi : v);
}

/* ---------------------------------------------------------------------
 * F32, F16, BF16
 * --------------------------------------------------------------------- */

static void
f32_to_float(const void *src, float *y, int64_t n)
{
	memcpy(y, src, (size_t) n * sizeof(float));
}

static void
f32_from_float(const float *x, void *dst, int64_t n)
{
	memcpy(dst, x, (size_t) n * sizeof(float));
}

static float
f32_vec_dot(int64_t n, const void *w, const void *x)
{
	const float *a = w;
	const float *b = x;
	double		sum = 0.0;

	for (int64_t i = 0; i < n; i++)
		sum += (double) a[i] * (double) b[i];
	return (float) sum;
}

static void
f16_to_float(const void *src, float *y, int64_t n)
{
	const uint16_t *h = src;

	for (int64_t i = 0; i < n; i++)
		y[i] = opus_fp16_to_fp32(h[i]);
}

static void
f16_from_float(const float *x, void *dst, int64_t n)
{
	uint16_t   *h = dst;

	for (int64_t i = 0; i < n; i++)
		h[i] = opus_fp32_to_fp16(x[i]);
}

/* Products of two halves are exact in f32; accumulate in double. */
static float
f16_vec_dot(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w;
	const uint16_t *b = x;
	double		sum = 0.0;

	for (int64_t i = 0; i < n; i++)
		sum += (double) (opus_fp16_to_fp32(a[i]) * opus_fp16_to_fp32(b[i]));
	return (float) sum;
}

static void
bf16_to_float(const void *src, float *y, int64_t n)
{
	const uint16_t *h = src;

	for (int64_t i = 0; i < n; i++)
		y[i] = opus_bf16_to_fp32(h[i]);
}

static void
bf16_from_float(const float *x, void *dst, int64_t n)
{
	uint16_t   *h = dst;

	for (int64_t i = 0; i < n; i++)
		h[i] = opus_fp32_to_bf16(x[i]);
}

static float
bf16_vec_dot(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w;
	const uint16_t *b = x;
	double		sum = 0.0;

	for (int64_t i = 0; i < n; i++)
		sum += (double) (opus_bf16_to_fp32(a[i]) * opus_bf16_to_fp32(b[i]));
	return (float) sum;
}

/* ---------------------------------------------------------------------
 * 32-element block types
 * --------------------------------------------------------------------- */

/* Index of the first element of largest magnitude (its sign matters). */
static inline float
signed_absmax(const float *x, int n)
{
	float		amax = 0.0f;
	float		max = 0.0f;

	for (int j = 0; j < n; j++)
	{
		if (amax < fabsf(x[j]))
		{
			amax = fabsf(x[j]);
			max = x[j];
		}
	}
	return max;
}

static void
q4_0_from_float(const float *x, void *dst, int64_t n)
{
	opus_block_q4_0 *y = dst;

	for (int64_t i = 0; i < n / OPUS_QK32; i++, x += OPUS_QK32)
	{
		/* the extreme value maps to -8, the full negative range */
		float		d = signed_absmax(x, OPUS_QK32) / -8.0f;
		float		id = d != 0.0f ? 1.0f / d : 0.0f;

		y[i].d = opus_fp32_to_fp16(d);
		for (int j = 0; j < OPUS_QK32 / 2; j++)
		{
			int			lo = trunc_clamp(x[j] * id + 8.5f, 15);
			int			hi = trunc_clamp(x[j + 16] * id + 8.5f, 15);

			y[i].qs[j] = (uint8_t) (lo | (hi << 4));
		}
	}
}

static void
q4_0_to_float(const void *src, float *y, int64_t n)
{
	const opus_block_q4_0 *b = src;

	for (int64_t i = 0; i < n / OPUS_QK32; i++, y += OPUS_QK32)
	{
		float		d = F16(b[i].d);

		for (int j = 0; j < 16; j++)
		{
			y[j] = (float) ((b[i].qs[j] & 0x0F) - 8) * d;
			y[j + 16] = (float) ((b[i].qs[j] >> 4) - 8) * d;
		}
	}
}

static float
q4_0_vec_dot(int64_t n, const void *w, const void *x)
{
	const opus_block_q4_0 *a = w;
	const opus_block_q8_0 *b = x;
	float		sum = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK32; i++)
	{
		int			sumi = 0;

		for (int j = 0; j < 16; j++)
		{
			sumi += ((a[i].qs[j] & 0x0F) - 8) * b[i].qs[j];
			sumi += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
		}
		sum += (F16(a[i].d) * F16(b[i].d)) * (float) sumi;
	}
	return sum;
}

/* min/max of a block, for the asymmetric types */
static inline void
block_minmax(const float *x, int n, float *pmin, float *pmax)
{
	float		mn = FLT_MAX;
	float		mx = -FLT_MAX;

	for (int j = 0; j < n; j++)
	{
		if (x[j] < mn)
			mn = x[j];
		if (x[j] > mx)
			mx = x[j];
	}
	*pmin = mn;
	*pmax = mx;
}

static void
q4_1_from_float(const float *x, void *dst, int64_t n)
{
	opus_block_q4_1 *y = dst;

	for (int64_t i = 0; i < n / OPUS_QK32; i++, x += OPUS_QK32)
	{
		float		mn,
					mx;
		float		d,
					id;

		block_minmax(x, OPUS_QK32, &mn, &mx);
		d = (mx - mn) / 15.0f;
		id = d != 0.0f ? 1.0f / d : 0.0f;
		y[i].d = opus_fp32_to_fp16(d);
		y[i].m = opus_fp32_to_fp16(mn);
		for (int j = 0; j < 16; j++)
		{
			int			lo = trunc_clamp((x[j] - mn) * id + 0.5f, 15);
			int			hi = trunc_clamp((x[j + 16] - mn) * id + 0.5f, 15);

			y[i].qs[j] = (uint8_t) (lo | (hi << 4));
		}
	}
}

static void
q4_1_to_float(const void *src, float *y, int64_t n)
{
	const opus_block_q4_1 *b = src;

	for (int64_t i = 0; i < n / OPUS_QK32; i++, y += OPUS_QK32)
	{
		float		d = F16(b[i].d);
		float		m = F16(b[i].m);

		for (int j = 0; j < 16; j++)
		{
			y[j] = (float) (b[i].qs[j] & 0x0F) * d + m;
			y[j + 16] = (float) (b[i].qs[j] >> 4) * d + m;
		}
	}
}

static float
q4_1_vec_dot(int64_t n, const void *w, const void *x)
{
	const opus_block_q4_1 *a = w;
	const opus_block_q8_1 *b = x;
	float		sum = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK32; i++)
	{
		int			sumi = 0;

		for (int j = 0; j < 16; j++)
		{
			sumi += (a[i].qs[j] & 0x0F) * b[i].qs[j];
			sumi += (a[i].qs[j] >> 4) * b[i].qs[j + 16];
		}
		sum += (F16(a[i].d) * F16(b[i].d)) * (float) sumi +
			F16(a[i].m) * F16(b[i].s);
	}
	return sum;
}

static inline uint32_t
load_u32(const uint8_t *p)
{
	uint32_t	v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static void
q5_0_from_float(const float *x, void *dst, int64_t n)
{
	opus_block_q5_0 *y = dst;

	for (int64_t i = 0; i < n / OPUS_QK32; i++, x += OPUS_QK32)
	{
		float		d = signed_absmax(x, OPUS_QK32) / -16.0f;
		float		id = d != 0.0f ? 1.0f / d : 0.0f;
		uint32_t	qh = 0;

		y[i].d = opus_fp32_to_fp16(d);
		for (int j = 0; j < 16; j++)
		{
			int			lo = trunc_clamp(x[j] * id + 16.5f, 31);
			int			hi = trunc_clamp(x[j + 16] * id + 16.5f, 31);

			y[i].qs[j] = (uint8_t) ((lo & 0x0F) | ((hi & 0x0F) << 4));
			qh |= (uint32_t) (lo >> 4) << j;
			qh |= (uint32_t) (hi >> 4) << (j + 16);
		}
		memcpy(y[i].qh, &qh, sizeof(qh));
	}
}

static void
q5_0_to_float(const void *src, float *y, int64_t n)
{
	const opus_block_q5_0 *b = src;

	for (int64_t i = 0; i < n / OPUS_QK32; i++, y += OPUS_QK32)
	{
		float		d = F16(b[i].d);
		uint32_t	qh = load_u32(b[i].qh);

		for (int j = 0; j < 16; j++)
		{
			int			lo = (b[i].qs[j] & 0x0F) | (int) (((qh >> j) & 1) << 4);
			int			hi = (b[i].qs[j] >> 4) | (int) (((qh >> (j + 16)) & 1) << 4);

			y[j] = (float) (lo - 16) * d;
			y[j + 16] = (float) (hi - 16) * d;
		}
	}
}

static float
q5_0_vec_dot(int64_t n, const void *w, const void *x)
{
	const opus_block_q5_0 *a = w;
	const opus_block_q8_0 *b = x;
	float		sum = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK32; i++)
	{
		uint32_t	qh = load_u32(a[i].qh);
		int			sumi = 0;

		for (int j = 0; j < 16; j++)
		{
			int			lo = (a[i].qs[j] & 0x0F) | (int) (((qh >> j) & 1) << 4);
			int			hi = (a[i].qs[j] >> 4) | (int) (((qh >> (j + 16)) & 1) << 4);

			sumi += (lo - 16) * b[i].qs[j] + (hi - 16) * b[i].qs[j + 16];
		}
		sum += (F16(a[i].d) * F16(b[i].d)) * (float) sumi;
	}
	return sum;
}

static void
q5_1_from_float(const float *x, void *dst, int64_t n)
{
	opus_block_q5_1 *y = dst;

	for (int64_t i = 0; i < n / OPUS_QK32; i++, x += OPUS_QK32)
	{
		float		mn,
					mx;
		float		d,
					id;
		uint32_t	qh = 0;

		block_minmax(x, OPUS_QK32, &mn, &mx);
		d = (mx - mn) / 31.0f;
		id = d != 0.0f ? 1.0f / d : 0.0f;
		y[i].d = opus_fp32_to_fp16(d);
		y[i].m = opus_fp32_to_fp16(mn);
		for (int j = 0; j < 16; j++)
		{
			int			lo = trunc_clamp((x[j] - mn) * id + 0.5f, 31);
			int			hi = trunc_clamp((x[j + 16] - mn) * id + 0.5f, 31);

			y[i].qs[j] = (uint8_t) ((lo & 0x0F) | ((hi & 0x0F) << 4));
			qh |= (uint32_t) (lo >> 4) << j;
			qh |= (uint32_t) (hi >> 4) << (j + 16);
		}
		memcpy(y[i].qh, &qh, sizeof(qh));
	}
}

static void
q5_1_to_float(const void *src, float *y, int64_t n)
{
	const opus_block_q5_1 *b = src;

	for (int64_t i = 0; i < n / OPUS_QK32; i++, y += OPUS_QK32)
	{
		float		d = F16(b[i].d);
		float		m = F16(b[i].m);
		uint32_t	qh = load_u32(b[i].qh);

		for (int j = 0; j < 16; j++)
		{
			int			lo = (b[i].qs[j] & 0x0F) | (int) (((qh >> j) & 1) << 4);
			int			hi = (b[i].qs[j] >> 4) | (int) (((qh >> (j + 16)) & 1) << 4);

			y[j] = (float) lo * d + m;
			y[j + 16] = (float) hi * d + m;
		}
	}
}

static float
q5_1_vec_dot(int64_t n, const void *w, const void *x)
{
	const opus_block_q5_1 *a = w;
	const opus_block_q8_1 *b = x;
	float		sum = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK32; i++)
	{
		uint32_t	qh = load_u32(a[i].qh);
		int			sumi = 0;

		for (int j = 0; j < 16; j++)
		{
			int			lo = (a[i].qs[j] & 0x0F) | (int) (((qh >> j) & 1) << 4);
			int			hi = (a[i].qs[j] >> 4) | (int) (((qh >> (j + 16)) & 1) << 4);

			sumi += lo * b[i].qs[j] + hi * b[i].qs[j + 16];
		}
		sum += (F16(a[i].d) * F16(b[i].d)) * (float) sumi +
			F16(a[i].m) * F16(b[i].s);
	}
	return sum;
}

/* absolute maximum of a block */
static inline float
block_amax(const float *x, int n)
{
	float		amax = 0.0f;

	for (int j = 0; j < n; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	return amax;
}

static void
q8_0_from_float(const float *x, void *dst, int64_t n)
{
	opus_block_q8_0 *y = dst;

	for (int64_t i = 0; i < n / OPUS_QK32; i++, x += OPUS_QK32)
	{
		float		d = block_amax(x, OPUS_QK32) / 127.0f;
		float		id = d != 0.0f ? 1.0f / d : 0.0f;

		y[i].d = opus_fp32_to_fp16(d);
		for (int j = 0; j < OPUS_QK32; j++)
			y[i].qs[j] = round_q8(x[j] * id);
	}
}

static void
q8_0_to_float(const void *src, float *y, int64_t n)
{
	const opus_block_q8_0 *b = src;

	for (int64_t i = 0; i < n / OPUS_QK32; i++, y += OPUS_QK32)
	{
		float		d = F16(b[i].d);

		for (int j = 0; j < OPUS_QK32; j++)
			y[j] = (float) b[i].qs[j] * d;
	}
}

static float
q8_0_vec_dot(int64_t n, const void *w, const void *x)
{
	const opus_block_q8_0 *a = w;
	const opus_block_q8_0 *b = x;
	float		sum = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK32; i++)
	{
		int			sumi = 0;

		for (int j = 0; j < OPUS_QK32; j++)
			sumi += a[i].qs[j] * b[i].qs[j];
		sum += (F16(a[i].d) * F16(b[i].d)) * (float) sumi;
	}
	return sum;
}

static void
q8_1_from_float(const float *x, void *dst, int64_t n)
{
	opus_block_q8_1 *y = dst;

	for (int64_t i = 0; i < n / OPUS_QK32; i++, x += OPUS_QK32)
	{
		float		d = block_amax(x, OPUS_QK32) / 127.0f;
		float		id = d != 0.0f ? 1.0f / d : 0.0f;
		int			sum = 0;

		y[i].d = opus_fp32_to_fp16(d);
		for (int j = 0; j < OPUS_QK32; j++)
		{
			y[i].qs[j] = round_q8(x[j] * id);
			sum += y[i].qs[j];
		}
		y[i].s = opus_fp32_to_fp16((float) sum * d);
	}
}

static void
q8_1_to_float(const void *src, float *y, int64_t n)
{
	const opus_block_q8_1 *b = src;

	for (int64_t i = 0; i < n / OPUS_QK32; i++, y += OPUS_QK32)
	{
		float		d = F16(b[i].d);

		for (int j = 0; j < OPUS_QK32; j++)
			y[j] = (float) b[i].qs[j] * d;
	}
}

/* ---------------------------------------------------------------------
 * K-quant scale search (ggml's reference quantizer, reimplemented)
 * --------------------------------------------------------------------- */

/*
 * Fit x[0..n) ~ scale * L[i] - the_min with L in [0, nmax], minimising the
 * weighted squared error: start from the plain min/max grid, then try nstep+1
 * slightly different grids (iscale = (nmax + rmin + rdelta*is) / range) and
 * for each solve the weighted least-squares scale and offset for the levels
 * it picked; keep the best.  Returns the scale, stores the (positive) min.
 */
static float
fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
			  float *the_min, float rmin, float rdelta, int nstep)
{
	uint8_t		Laux[32];
	float		mn = x[0];
	float		mx = x[0];
	float		sum_w = w[0];
	float		sum_x = w[0] * x[0];
	float		iscale,
				scale,
				best_err;

	for (int i = 1; i < n; i++)
	{
		if (x[i] < mn)
			mn = x[i];
		if (x[i] > mx)
			mx = x[i];
		sum_w += w[i];
		sum_x += w[i] * x[i];
	}
	if (mn > 0.0f)
		mn = 0.0f;
	if (mx == mn)
	{
		memset(L, 0, (size_t) n);
		*the_min = -mn;
		return 0.0f;
	}
	iscale = (float) nmax / (mx - mn);
	scale = 1.0f / iscale;
	best_err = 0.0f;
	for (int i = 0; i < n; i++)
	{
		int			l = clamp_int(nearest_int(iscale * (x[i] - mn)), 0, nmax);
		float		diff = scale * (float) l + mn - x[i];

		L[i] = (uint8_t) l;
		best_err += w[i] * (diff * diff);
	}
	for (int is = 0; is <= nstep; is++)
	{
		float		sum_l = 0.0f,
					sum_l2 = 0.0f,
					sum_xl = 0.0f;
		float		D;

		iscale = (rmin + rdelta * (float) is + (float) nmax) / (mx - mn);
		for (int i = 0; i < n; i++)
		{
			int			l = clamp_int(nearest_int(iscale * (x[i] - mn)), 0, nmax);

			Laux[i] = (uint8_t) l;
			sum_l += w[i] * (float) l;
			sum_l2 += w[i] * (float) l * (float) l;
			sum_xl += w[i] * (float) l * x[i];
		}
		D = sum_w * sum_l2 - sum_l * sum_l;
		if (D > 0.0f)
		{
			float		this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
			float		this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
			float		err = 0.0f;

			if (this_min > 0.0f)
			{
				this_min = 0.0f;
				this_scale = sum_xl / sum_l2;
			}
			for (int i = 0; i < n; i++)
			{
				float		diff = this_scale * (float) Laux[i] + this_min - x[i];

				err += w[i] * (diff * diff);
			}
			if (err < best_err)
			{
				memcpy(L, Laux, (size_t) n);
				best_err = err;
				scale = this_scale;
				mn = this_min;
			}
		}
	}
	*the_min = -mn;
	return scale;
}

#define GROUP_MAX_EPS 1e-15f

/*
 * Symmetric fit x ~ scale * (L[i] - nmax), L in [0, 2*nmax), weighting each
 * element by x^2 (ggml's make_qx_quants with rmse_type 1): try the grids
 * iscale = -(nmax + 0.1*is)/max for is in -9..9 and keep the one with the
 * best least-squares scale.  Returns the scale.
 */
static float
fit_scale_sym(int n, int nmax, const float *x, uint8_t *L)
{
	float		mx = 0.0f,
				amax = 0.0f;
	float		iscale,
				scale,
				best,
				sumlx = 0.0f,
				suml2 = 0.0f;

	for (int i = 0; i < n; i++)
	{
		if (fabsf(x[i]) > amax)
		{
			amax = fabsf(x[i]);
			mx = x[i];
		}
	}
	if (amax < GROUP_MAX_EPS)
	{
		memset(L, 0, (size_t) n);
		return 0.0f;
	}
	iscale = -(float) nmax / mx;
	for (int i = 0; i < n; i++)
	{
		int			l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
		float		w = x[i] * x[i];

		L[i] = (uint8_t) (l + nmax);
		sumlx += w * x[i] * (float) l;
		suml2 += w * (float) l * (float) l;
	}
	scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
	best = scale * sumlx;
	for (int is = -9; is <= 9; is++)
	{
		if (is == 0)
			continue;
		iscale = -((float) nmax + 0.1f * (float) is) / mx;
		sumlx = suml2 = 0.0f;
		for (int i = 0; i < n; i++)
		{
			int			l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
			float		w = x[i] * x[i];

			sumlx += w * x[i] * (float) l;
			suml2 += w * (float) l * (float) l;
		}
		if (suml2 > 0.0f && sumlx * sumlx > best * suml2)
		{
			for (int i = 0; i < n; i++)
				L[i] = (uint8_t) (nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
			scale = sumlx / suml2;
			best = scale * sumlx;
		}
	}
	return scale;
}

/*
 * Shared part of the Q4_K / Q5_K quantizers: fit each 32-element sub-block,
 * quantize the 8 scales and 8 mins to 6 bits against the super-block d/dmin,
 * pack them, and re-pick the levels L (0..nmax) with the final scales.
 */
static void
k_quant_scales(const float *x, int nmax, float rmin, float rdelta, int nstep,
			   uint16_t *pd, uint16_t *pdmin, uint8_t *packed, uint8_t *L)
{
	float		scales[8],
				mins[8],
				w[32];
	float		max_scale = 0.0f,
				max_min = 0.0f;
	float		inv_scale,
				inv_min,
				d,
				dmin;

	for (int j = 0; j < 8; j++)
	{
		const float *xs = x + 32 * j;
		float		sum_x2 = 0.0f;
		float		av_x;

		for (int l = 0; l < 32; l++)
			sum_x2 += xs[l] * xs[l];
		av_x = sqrtf(sum_x2 / 32.0f);
		for (int l = 0; l < 32; l++)
			w[l] = av_x + fabsf(xs[l]);
		scales[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j],
								  rmin, rdelta, nstep);
		if (scales[j] > max_scale)
			max_scale = scales[j];
		if (mins[j] > max_min)
			max_min = mins[j];
	}

	inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
	inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
	memset(packed, 0, OPUS_K_SCALE_SIZE);
	for (int j = 0; j < 8; j++)
	{
		int			ls = clamp_int(nearest_int(inv_scale * scales[j]), 0, 63);
		int			lm = clamp_int(nearest_int(inv_min * mins[j]), 0, 63);

		if (j < 4)
		{
			packed[j] = (uint8_t) ls;
			packed[j + 4] = (uint8_t) lm;
		}
		else
		{
			packed[j + 4] = (uint8_t) ((ls & 0x0F) | ((lm & 0x0F) << 4));
			packed[j - 4] |= (uint8_t) ((ls >> 4) << 6);
			packed[j] |= (uint8_t) ((lm >> 4) << 6);
		}
	}
	*pd = opus_fp32_to_fp16(max_scale / 63.0f);
	*pdmin = opus_fp32_to_fp16(max_min / 63.0f);

	d = F16(*pd);
	dmin = F16(*pdmin);
	for (int j = 0; j < 8; j++)
	{
		uint8_t		sc,
					m;
		float		ds,
					dm;

		opus_k_scale_min(j, packed, &sc, &m);
		ds = d * (float) sc;
		if (ds == 0.0f)
			continue;
		dm = dmin * (float) m;
		for (int l = 0; l < 32; l++)
			L[32 * j + l] = (uint8_t) clamp_int(nearest_int((x[32 * j + l] + dm) / ds), 0, nmax);
	}
}

/* ---------------------------------------------------------------------
 * Q4_K
 * --------------------------------------------------------------------- */

static void
q4_K_from_float(const float *x, void *dst, int64_t n)
{
	opus_block_q4_K *y = dst;
	uint8_t		L[OPUS_QK_K];

	for (int64_t i = 0; i < n / OPUS_QK_K; i++, x += OPUS_QK_K)
	{
		k_quant_scales(x, 15, -1.0f, 0.1f, 20, &y[i].d, &y[i].dmin,
					   y[i].scales, L);
		for (int c = 0; c < 4; c++)
			for (int l = 0; l < 32; l++)
				y[i].qs[32 * c + l] = (uint8_t) (L[64 * c + l] | (L[64 * c + 32 + l] << 4));
	}
}

static void
q4_K_to_float(const void *src, float *y, int64_t n)
{
	const opus_block_q4_K *b = src;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		float		d = F16(b[i].d);
		float		dmin = F16(b[i].dmin);

		for (int c = 0; c < 4; c++, y += 64)
		{
			const uint8_t *q = b[i].qs + 32 * c;
			uint8_t		sc,
						m;
			float		d1,
						m1,
						d2,
						m2;

			opus_k_scale_min(2 * c, b[i].scales, &sc, &m);
			d1 = d * (float) sc;
			m1 = dmin * (float) m;
			opus_k_scale_min(2 * c + 1, b[i].scales, &sc, &m);
			d2 = d * (float) sc;
			m2 = dmin * (float) m;
			for (int l = 0; l < 32; l++)
			{
				y[l] = d1 * (float) (q[l] & 0x0F) - m1;
				y[l + 32] = d2 * (float) (q[l] >> 4) - m2;
			}
		}
	}
}

/* sum over sub-blocks of min * (sum of the activation quants it covers) */
static inline int
k_min_term(const uint8_t *packed, const int16_t *bsums)
{
	int			summ = 0;

	for (int j = 0; j < 8; j++)
	{
		uint8_t		sc,
					m;

		opus_k_scale_min(j, packed, &sc, &m);
		summ += m * (bsums[2 * j] + bsums[2 * j + 1]);
	}
	return summ;
}

/* sum_j sc_j * dot(sub-block j) of one Q4_K super-block with Q8_K (exact) */
static int
q4_K_block_sum(const opus_block_q4_K *a, const opus_block_q8_K *b)
{
	int			sumi = 0;

	for (int j = 0; j < 8; j++)
	{
		const uint8_t *q = a->qs + 32 * (j / 2);
		const int8_t *q8 = b->qs + 32 * j;
		int			shift = (j & 1) * 4;
		uint8_t		sc,
					m;
		int			s = 0;

		opus_k_scale_min(j, a->scales, &sc, &m);
		for (int l = 0; l < 32; l++)
			s += ((q[l] >> shift) & 0x0F) * q8[l];
		sumi += sc * s;
	}
	return sumi;
}

static float
q4_K_vec_dot(int64_t n, const void *w, const void *x)
{
	const opus_block_q4_K *a = w;
	const opus_block_q8_K *b = x;
	float		sum = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
		sum += (F16(a[i].d) * b[i].d) * (float) q4_K_block_sum(&a[i], &b[i]) -
			(F16(a[i].dmin) * b[i].d) * (float) k_min_term(a[i].scales, b[i].bsums);
	return sum;
}

/* ---------------------------------------------------------------------
 * Q5_K
 * --------------------------------------------------------------------- */

static void
q5_K_from_float(const float *x, void *dst, int64_t n)
{
	opus_block_q5_K *y = dst;
	uint8_t		L[OPUS_QK_K];

	for (int64_t i = 0; i < n / OPUS_QK_K; i++, x += OPUS_QK_K)
	{
		k_quant_scales(x, 31, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin,
					   y[i].scales, L);
		memset(y[i].qh, 0, sizeof(y[i].qh));
		for (int c = 0; c < 4; c++)
		{
			for (int l = 0; l < 32; l++)
			{
				int			lo = L[64 * c + l];
				int			hi = L[64 * c + 32 + l];

				y[i].qh[l] |= (uint8_t) (((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
				y[i].qs[32 * c + l] = (uint8_t) ((lo & 0x0F) | ((hi & 0x0F) << 4));
			}
		}
	}
}

static void
q5_K_to_float(const void *src, float *y, int64_t n)
{
	const opus_block_q5_K *b = src;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		float		d = F16(b[i].d);
		float		dmin = F16(b[i].dmin);

		for (int c = 0; c < 4; c++, y += 64)
		{
			const uint8_t *q = b[i].qs + 32 * c;
			uint8_t		sc,
						m;
			float		d1,
						m1,
						d2,
						m2;

			opus_k_scale_min(2 * c, b[i].scales, &sc, &m);
			d1 = d * (float) sc;
			m1 = dmin * (float) m;
			opus_k_scale_min(2 * c + 1, b[i].scales, &sc, &m);
			d2 = d * (float) sc;
			m2 = dmin * (float) m;
			for (int l = 0; l < 32; l++)
			{
				int			lo = (q[l] & 0x0F) | (((b[i].qh[l] >> (2 * c)) & 1) << 4);
				int			hi = (q[l] >> 4) | (((b[i].qh[l] >> (2 * c + 1)) & 1) << 4);

				y[l] = d1 * (float) lo - m1;
				y[l + 32] = d2 * (float) hi - m2;
			}
		}
	}
}

/* sum_j sc_j * dot(sub-block j) of one Q5_K super-block with Q8_K (exact) */
static int
q5_K_block_sum(const opus_block_q5_K *a, const opus_block_q8_K *b)
{
	int			sumi = 0;

	for (int j = 0; j < 8; j++)
	{
		const uint8_t *q = a->qs + 32 * (j / 2);
		const int8_t *q8 = b->qs + 32 * j;
		int			shift = (j & 1) * 4;
		uint8_t		sc,
					m;
		int			s = 0;

		opus_k_scale_min(j, a->scales, &sc, &m);
		for (int l = 0; l < 32; l++)
		{
			int			v = ((q[l] >> shift) & 0x0F) | (((a->qh[l] >> j) & 1) << 4);

			s += v * q8[l];
		}
		sumi += sc * s;
	}
	return sumi;
}

static float
q5_K_vec_dot(int64_t n, const void *w, const void *x)
{
	const opus_block_q5_K *a = w;
	const opus_block_q8_K *b = x;
	float		sum = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
		sum += (F16(a[i].d) * b[i].d) * (float) q5_K_block_sum(&a[i], &b[i]) -
			(F16(a[i].dmin) * b[i].d) * (float) k_min_term(a[i].scales, b[i].bsums);
	return sum;
}

/* ---------------------------------------------------------------------
 * Q6_K: element 128h + 32k + l (h = half, k = 0..3, l = 0..31) keeps its low
 * 4 bits in ql[64h + l + 32*(k & 1)] (low nibble for k < 2, high for k >= 2)
 * and its top 2 bits in bits 2k..2k+1 of qh[32h + l]; it uses scale
 * scales[8h + 2k + l/16], i.e. scale g covers elements 16g..16g+15.
 * --------------------------------------------------------------------- */

static inline int
q6_K_level(const opus_block_q6_K *b, int e)
{
	int			h = e / 128,
				k = (e % 128) / 32,
				l = e % 32;
	uint8_t		lq = b->ql[64 * h + l + 32 * (k & 1)];
	int			lo = k < 2 ? (lq & 0x0F) : (lq >> 4);
	int			hi = (b->qh[32 * h + l] >> (2 * k)) & 3;

	return (lo | (hi << 4)) - 32;
}

static void
q6_K_from_float(const float *x, void *dst, int64_t n)
{
	opus_block_q6_K *y = dst;
	uint8_t		L[OPUS_QK_K];

	for (int64_t i = 0; i < n / OPUS_QK_K; i++, x += OPUS_QK_K)
	{
		float		scales[16];
		float		max_scale = 0.0f,
					max_abs_scale = 0.0f;
		float		iscale,
					d;

		for (int g = 0; g < 16; g++)
		{
			scales[g] = fit_scale_sym(16, 32, x + 16 * g, L + 16 * g);
			if (fabsf(scales[g]) > max_abs_scale)
			{
				max_abs_scale = fabsf(scales[g]);
				max_scale = scales[g];
			}
		}
		memset(&y[i], 0, sizeof(y[i]));
		if (max_abs_scale < GROUP_MAX_EPS)
			continue;

		iscale = -128.0f / max_scale;
		y[i].d = opus_fp32_to_fp16(1.0f / iscale);
		for (int g = 0; g < 16; g++)
			y[i].scales[g] = (int8_t) clamp_int(nearest_int(iscale * scales[g]), -128, 127);

		d = F16(y[i].d);
		for (int g = 0; g < 16; g++)
		{
			float		dg = d * (float) y[i].scales[g];

			if (dg == 0.0f)
				continue;
			for (int l = 0; l < 16; l++)
				L[16 * g + l] = (uint8_t) (32 + clamp_int(nearest_int(x[16 * g + l] / dg), -32, 31));
		}

		for (int h = 0; h < 2; h++)
		{
			const uint8_t *Lh = L + 128 * h;

			for (int l = 0; l < 32; l++)
			{
				y[i].ql[64 * h + l] = (uint8_t) ((Lh[l] & 0x0F) | ((Lh[l + 64] & 0x0F) << 4));
				y[i].ql[64 * h + l + 32] = (uint8_t) ((Lh[l + 32] & 0x0F) | ((Lh[l + 96] & 0x0F) << 4));
				y[i].qh[32 * h + l] = (uint8_t) ((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
												 ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
			}
		}
	}
}

static void
q6_K_to_float(const void *src, float *y, int64_t n)
{
	const opus_block_q6_K *b = src;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++, y += OPUS_QK_K)
	{
		float		d = F16(b[i].d);

		for (int e = 0; e < OPUS_QK_K; e++)
			y[e] = d * (float) b[i].scales[e / 16] * (float) q6_K_level(&b[i], e);
	}
}

/* sum_g scale_g * dot(group g) of one Q6_K super-block with Q8_K (exact) */
static int
q6_K_block_sum(const opus_block_q6_K *a, const opus_block_q8_K *b)
{
	int			sumi = 0;

	for (int g = 0; g < 16; g++)
	{
		int			s = 0;

		for (int l = 0; l < 16; l++)
			s += q6_K_level(a, 16 * g + l) * b->qs[16 * g + l];
		sumi += a->scales[g] * s;
	}
	return sumi;
}

static float
q6_K_vec_dot(int64_t n, const void *w, const void *x)
{
	const opus_block_q6_K *a = w;
	const opus_block_q8_K *b = x;
	float		sum = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
		sum += (F16(a[i].d) * b[i].d) * (float) q6_K_block_sum(&a[i], &b[i]);
	return sum;
}

/*
 * The K-quant multi-token order: llama.cpp (ggml-cpu's "tiled" kernels, as
 * built for an x86 CPU with AVX512-VNNI, the golden oracle's build) computes
 * a matmul with Q2_K..Q6_K weights and at least OPUS_LLAMA_TILED_MIN_ROWS
 * activation rows this way (its repack kernels take Q4_K matrices whose row
 * count is a multiple of 8 first; see opus_vec_dot_llama_batch): per
 * super-block in order, from the exact integer sums s (quants times scales)
 * and m (mins times bsums), r = fma(-w.dmin, m, w.d * s) (Q6_K: r = s *
 * w.d), then acc = acc + r * x.d with the product rounded on its own.  The
 * one-token order (vec_dot) accumulates into 8 lanes instead.
 */
static inline float
k_tiled_step(float acc, float r, float xd)
{
	return fmaf(r, xd, acc);
}

static float
q4_K_vec_dot_tiled(int64_t n, const void *w, const void *x)
{
	const opus_block_q4_K *a = w;
	const opus_block_q8_K *b = x;
	float		acc = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		volatile float d = F16(a[i].d) * (float) q4_K_block_sum(&a[i], &b[i]);

		acc = k_tiled_step(acc, fmaf(-F16(a[i].dmin),
									 (float) k_min_term(a[i].scales, b[i].bsums), d),
						   b[i].d);
	}
	return acc;
}

/*
 * Q4_K in llama.cpp's repacked (q4_K_8x8) order for single tokens: chains
 * acc = fma(s, w.d * x.d, acc), accm = fma(m, w.dmin * x.d, accm) per
 * super-block, the result acc - accm (quant_avx2.c's Q4_K vec_dot runs the
 * same chains per pair of sub-blocks, its order for groups of 4 tokens).
 */
static float
q4_K_vec_dot_gemv(int64_t n, const void *w, const void *x)
{
	const opus_block_q4_K *a = w;
	const opus_block_q8_K *b = x;
	float		acc = 0.0f,
				accm = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		acc = fmaf((float) q4_K_block_sum(&a[i], &b[i]), F16(a[i].d) * b[i].d, acc);
		accm = fmaf((float) k_min_term(a[i].scales, b[i].bsums), F16(a[i].dmin) * b[i].d, accm);
	}
	return acc - accm;
}

static float
q5_K_vec_dot_tiled(int64_t n, const void *w, const void *x)
{
	const opus_block_q5_K *a = w;
	const opus_block_q8_K *b = x;
	float		acc = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
	{
		volatile float d = F16(a[i].d) * (float) q5_K_block_sum(&a[i], &b[i]);

		acc = k_tiled_step(acc, fmaf(-F16(a[i].dmin),
									 (float) k_min_term(a[i].scales, b[i].bsums), d),
						   b[i].d);
	}
	return acc;
}

static float
q6_K_vec_dot_tiled(int64_t n, const void *w, const void *x)
{
	const opus_block_q6_K *a = w;
	const opus_block_q8_K *b = x;
	float		acc = 0.0f;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++)
		acc = k_tiled_step(acc, (float) q6_K_block_sum(&a[i], &b[i]) * F16(a[i].d), b[i].d);
	return acc;
}

opus_vec_dot_fn
opus_vec_dot_llama_batch(enum opus_qtype type, int64_t n_rows, int n_tok, int *from, int *until)
{
	bool		avx2 = strcmp(opus_qtype_cpu_variant(), "avx2") == 0;
	bool		tiled = n_tok >= OPUS_LLAMA_TILED_MIN_ROWS;

	*from = 0;
	*until = 0;
	switch (type)
	{
		case OPUS_TYPE_Q4_K:
			if (n_rows % 8 == 0)
			{
				/* repacked: vec_dot's order for groups of 4, the rest one by one */
				*from = n_tok - n_tok % 4;
				*until = n_tok;
				return avx2 ? opus_q4_K_vec_dot_gemv_avx2 : q4_K_vec_dot_gemv;
			}
			if (avx2 && !tiled)
			{
				/* not repacked, few tokens: ggml's own Q4_K vec_dot (AVX2 only) */
				*until = n_tok;
				return opus_q4_K_vec_dot_ggml_avx2;
			}
			*until = tiled ? n_tok : 0;
			return avx2 ? opus_q4_K_vec_dot_tiled_avx2 : q4_K_vec_dot_tiled;
		case OPUS_TYPE_Q5_K:
			*until = tiled ? n_tok : 0;
			return avx2 ? opus_q5_K_vec_dot_tiled_avx2 : q5_K_vec_dot_tiled;
		case OPUS_TYPE_Q6_K:
			*until = tiled ? n_tok : 0;
			return avx2 ? opus_q6_K_vec_dot_tiled_avx2 : q6_K_vec_dot_tiled;
		default:
			return NULL;
	}
}

/* ---------------------------------------------------------------------
 * Q8_K (activations for the K-quants)
 * --------------------------------------------------------------------- */

static void
q8_K_from_float(const float *x, void *dst, int64_t n)
{
	opus_block_q8_K *y = dst;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++, x += OPUS_QK_K)
	{
		float		mx = signed_absmax(x, OPUS_QK_K);
		float		iscale;

		if (mx == 0.0f)
		{
			memset(&y[i], 0, sizeof(y[i]));
			continue;
		}
		/* the extreme value maps to -127 (ggml keeps the range symmetric) */
		iscale = -127.0f / mx;
		for (int j = 0; j < OPUS_QK_K; j++)
			y[i].qs[j] = (int8_t) clamp_int(nearest_int(iscale * x[j]), -127, 127);
		for (int g = 0; g < 16; g++)
		{
			int			s = 0;

			for (int l = 0; l < 16; l++)
				s += y[i].qs[16 * g + l];
			y[i].bsums[g] = (int16_t) s;
		}
		y[i].d = 1.0f / iscale;
	}
}

static void
q8_K_to_float(const void *src, float *y, int64_t n)
{
	const opus_block_q8_K *b = src;

	for (int64_t i = 0; i < n / OPUS_QK_K; i++, y += OPUS_QK_K)
		for (int j = 0; j < OPUS_QK_K; j++)
			y[j] = b[i].d * (float) b[i].qs[j];
}

/* ---------------------------------------------------------------------
 * registration
 * --------------------------------------------------------------------- */

static void
set_ref(struct opus_qtype_info *t, enum opus_qtype type, bool supported,
		enum opus_qtype vdt, opus_to_float_fn to, opus_from_float_fn from,
		opus_vec_dot_fn dot)
{
	struct opus_qtype_info *q = &t[type];

	q->supported = supported;
	q->vec_dot_type = vdt;
	q->to_float = q->to_float_ref = to;
	q->from_float = q->from_float_ref = from;
	q->vec_dot = q->vec_dot_ref = dot;
}

/*
 * Q8_1 and Q8_K are activation formats only (ggml has no weight kernels for
 * them either): they get to_float/from_float but no vec_dot, and are not
 * marked supported so a model file using them is rejected.
 */
void
opus_quant_register_ref(struct opus_qtype_info *t)
{
	set_ref(t, OPUS_TYPE_F32, true, OPUS_TYPE_F32, f32_to_float, f32_from_float, f32_vec_dot);
	set_ref(t, OPUS_TYPE_F16, true, OPUS_TYPE_F16, f16_to_float, f16_from_float, f16_vec_dot);
	set_ref(t, OPUS_TYPE_BF16, true, OPUS_TYPE_BF16, bf16_to_float, bf16_from_float, bf16_vec_dot);
	set_ref(t, OPUS_TYPE_Q4_0, true, OPUS_TYPE_Q8_0, q4_0_to_float, q4_0_from_float, q4_0_vec_dot);
	set_ref(t, OPUS_TYPE_Q4_1, true, OPUS_TYPE_Q8_1, q4_1_to_float, q4_1_from_float, q4_1_vec_dot);
	set_ref(t, OPUS_TYPE_Q5_0, true, OPUS_TYPE_Q8_0, q5_0_to_float, q5_0_from_float, q5_0_vec_dot);
	set_ref(t, OPUS_TYPE_Q5_1, true, OPUS_TYPE_Q8_1, q5_1_to_float, q5_1_from_float, q5_1_vec_dot);
	set_ref(t, OPUS_TYPE_Q8_0, true, OPUS_TYPE_Q8_0, q8_0_to_float, q8_0_from_float, q8_0_vec_dot);
	set_ref(t, OPUS_TYPE_Q8_1, false, OPUS_TYPE_Q8_1, q8_1_to_float, q8_1_from_float, NULL);
	set_ref(t, OPUS_TYPE_Q4_K, true, OPUS_TYPE_Q8_K, q4_K_to_float, q4_K_from_float, q4_K_vec_dot);
	set_ref(t, OPUS_TYPE_Q5_K, true, OPUS_TYPE_Q8_K, q5_K_to_float, q5_K_from_float, q5_K_vec_dot);
	set_ref(t, OPUS_TYPE_Q6_K, true, OPUS_TYPE_Q8_K, q6_K_to_float, q6_K_from_float, q6_K_vec_dot);
	set_ref(t, OPUS_TYPE_Q8_K, false, OPUS_TYPE_Q8_K, q8_K_to_float, q8_K_from_float, NULL);
}
