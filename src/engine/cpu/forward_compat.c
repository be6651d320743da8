/*
 * forward_compat.c - plain (scalar) versions of the forward pass steps
 * whose float arithmetic reproduces llama.cpp's CPU backend (ggml) bit for
 * bit, as built for an x86 CPU with AVX-512 (the golden oracle's build):
 * the vector exp of softmax and SiLU, SwiGLU, RoPE's rotation and the
 * attention of one query token.  forward_avx2.c has AVX2 versions that give
 * the same bits; these are the fallback for other CPUs and document the
 * arithmetic one operation at a time.
 *
 * Why: with quantized weights the activations are re-quantized to 8 bits
 * before every matrix product, so a last-bit difference anywhere flips
 * some roundings and grows over the layers into logit noise of ~0.1-0.3;
 * reproducing each float operation keeps the engine's logits on
 * llama.cpp's.  The sequences below were read from ggml's sources (vec.h,
 * vec.cpp, ops.cpp) and checked against its compiled library; this is our
 * own implementation of that arithmetic.
 */
#include "cpu/forward_int.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "quant/qtype.h"

/*
 * ggml's vectorised e^x (AVX-512 build; "adapted from ARM's optimized
 * routines"): n = round(x / ln 2) by the 1.5*2^23 trick, b = x - n ln 2 in
 * two fused steps, a degree-5 polynomial in b evaluated by fused steps as
 * ((c5 b + c4) b^2 + (c3 b + c2)) b^2 + (c1 b + 1), scaled by 2^n exactly
 * (one rounding, also for subnormal results); |n| > 192: 0 or infinity.
 */
float
opus_ggml_expf(float x)
{
	const float r = 0x1.8p23f;
	float		z = fmaf(x, 0x1.715476p+0f, r);
	float		n = z - r;
	float		b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
	float		u = b * b;
	float		j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
							  fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
						 u, fmaf(0x1.ffffecp-1f, b, 1.0f));

	if (isnan(n))
		return n;
	if (fabsf(n) > 192.0f)
		return n <= 0.0f ? 0.0f : INFINITY;
	return ldexpf(j, (int) n);
}

/*
 * h[i] = silu(g[i]) * u[i] for i in [i0, i1) of a row of n: ggml's
 * swiglu: silu(x) = x / (1 + e^(0 - x)) with the vector exp for the
 * elements of whole 16-wide vectors, the C library's expf for a tail of
 * n % 16 elements.
 */
void
opus_fwd_swiglu_ref(float *h, const float *g, const float *u, int64_t i0,
					int64_t i1, int64_t n)
{
	int64_t		nv = n & ~(int64_t) 15;

	for (int64_t i = i0; i < i1; i++)
	{
		float		x = g[i];
		float		e = i < nv ? opus_ggml_expf(0.0f - x) : expf(-x);

		h[i] = x / (1.0f + e) * u[i];
	}
}

/*
 * The tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2)))
 * of the F16 value xr in float, rounded to F16: an entry of ggml's GELU
 * table.
 */
static float
gelu_tanh_f16(float xr)
{
	float		y = 0.5f * xr * (1.0f + tanhf(0.79788456080286535587989211986876f * xr *
											  (1.0f + 0.044715f * xr * xr)));

	return opus_fp16_to_fp32(opus_fp32_to_fp16(y));
}

/*
 * ggml's CPU gelu of one value (GGML_GELU_FP16): 0 at or below -10, x at
 * or above 10, else the table entry of x rounded to F16 (ggml reads it from
 * a table of all halves).
 */
static float
gelu_f16(float x)
{
	if (x <= -10.0f)
		return 0.0f;
	if (x >= 10.0f)
		return x;
	return gelu_tanh_f16(opus_fp16_to_fp32(opus_fp32_to_fp16(x)));
}

/*
 * h[i] = gelu(g[i]) * u[i] for i in [i0, i1): ggml's CPU geglu, which reads
 * GELU from a table over F16 inputs: g rounded to F16, the tanh
 * approximation 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) of that
 * value in float, rounded to F16; 0 at or below -10 and the identity at or
 * above 10.
 */
void
opus_fwd_geglu_ref(float *h, const float *g, const float *u, int64_t i0,
				   int64_t i1, int64_t n)
{
	(void) n;
	for (int64_t i = i0; i < i1; i++)
		h[i] = g[i] <= -10.0f ? 0.0f : gelu_f16(g[i]) * u[i];
}

void
opus_fwd_gelu_ref(float *y, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = gelu_f16(y[i]);
}

/*
 * The GELU of opus_fwd_geglu_ref as a table over F16 inputs, as ggml keeps
 * it: entry h (h an F16 bit pattern) is gelu_tanh_f16 of the value h means, so
 * gelu(x) = table[fp16(x)] for -10 < x < 10 (and NaN).  65,537 entries (a
 * 32-bit gather at entry 65,535 reads one past it).  Built once with the
 * reference's own function, so the vector kernels that read it give its
 * bits.
 */
static uint16_t gelu_f16_table[(1 << 16) + 1];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void
gelu_table_init(void)
{
	for (int i = 0; i < (1 << 16); i++)
		gelu_f16_table[i] = opus_fp32_to_fp16(gelu_tanh_f16(opus_fp16_to_fp32((uint16_t) i)));
}

const uint16_t *
opus_fwd_gelu_table(void)
{
	pthread_once(&gelu_once, gelu_table_init);
	return gelu_f16_table;
}

/*
 * Sum of 16 floats the way ggml's AVX-512 reductions add (the upper 8
 * lanes to the lower, then 4, then 2, then 1).
 */
static float
reduce16(const float *v)
{
	float		a[8],
				b[4],
				c0,
				c1;

	for (int i = 0; i < 8; i++)
		a[i] = v[i] + v[i + 8];
	for (int i = 0; i < 4; i++)
		b[i] = a[i] + a[i + 4];
	c0 = b[0] + b[2];
	c1 = b[1] + b[3];
	return c0 + c1;
}

/*
 * The end of ggml_vec_dot_f16 (AVX-512 build), which runs 64 elements at a
 * time into four 16-lane accumulators (element s + 16 j + l into
 * accumulator j, lane l, fused): accumulators combined (0+2) + (1+3), then
 * the lanes reduced.  acc[16 j + l] is accumulator j's lane l.
 */
static float
tree64(const float *acc)
{
	float		t[16];

	for (int l = 0; l < 16; l++)
		t[l] = (acc[l] + acc[32 + l]) + (acc[16 + l] + acc[48 + l]);
	return reduce16(t);
}

/*
 * Attention of one query token the way llama.cpp's CPU graph computes it
 * (flash attention off).  For a one-token batch (a->gemm false): KQ =
 * ggml_vec_dot_f16 of the query rounded to F16 with each F16 key; soft_max_ext: times scale, max,
 * e = exp(s - max) with the vector exp, summed 16 positions at a time
 * (reduced in float, accumulated in double; positions from 0), weights
 * e * (float) (1 / sum) rounded to F16; output dimension d =
 * ggml_vec_dot_f16 over the positions of the weights with V's column d.
 * For a multi-token batch (a->gemm) both products go through llamafile's
 * tinyBLAS instead (16 lanes, element i into lane i % 16, fused, lanes
 * reduced); the softmax is the same.
 */
void
opus_fwd_attend_ref(const struct opus_attn_args *a)
{
	int			bs = a->bs;
	int			hd = a->hd;
	int			n = a->n_kv;
	int			stride = (n + 15) / 16 * 16;
	int			np = hd & ~63;	/* dimensions in whole 64-wide steps */
	bool		gemm = a->gemm && hd % 16 == 0;
	int			M = gemm ? 16 : 64; /* output accumulators over positions */

	for (int h = 0; h < a->n_h; h++)
	{
		const float *q = a->q + (size_t) h * hd;
		float	   *s = a->scores + (size_t) h * stride;
		float	   *out = a->out + (size_t) h * hd;
		float		max = -INFINITY,
					inv;
		double		sum = 0.0;

		for (int p = 0; p < n; p++)
		{
			const uint16_t *kb = (const uint16_t *) (a->kv_mem + (size_t) a->blocks[p / bs] * a->block_bytes +
													 a->k_off) + p % bs;
			float		acc[64] = {0};
			double		dot;

			if (gemm)
			{
				/* tinyBLAS: dimension d into lane d % 16 (fused), lanes reduced */
				for (int d = 0; d < hd; d++)
					acc[d & 15] = fmaf(opus_fp16_to_fp32(opus_fp32_to_fp16(q[d])),
									   opus_fp16_to_fp32(kb[(size_t) d * bs]), acc[d & 15]);
				dot = (double) reduce16(acc);
			}
			else
			{
				/*
				 * ggml_vec_dot_f16 of the query rounded to F16 and the key:
				 * dimension d of the whole 64-wide steps into accumulator d %
				 * 64 (fused), the accumulators combined by tree64, a tail of
				 * hd % 64 products (rounded to float) added in double
				 */
				for (int d = 0; d < np; d++)
					acc[d & 63] = fmaf(opus_fp16_to_fp32(opus_fp32_to_fp16(q[d])),
									   opus_fp16_to_fp32(kb[(size_t) d * bs]), acc[d & 63]);
				dot = (double) tree64(acc);
				for (int d = np; d < hd; d++)
					dot += (double) (opus_fp16_to_fp32(opus_fp32_to_fp16(q[d])) *
									 opus_fp16_to_fp32(kb[(size_t) d * bs]));
			}
			s[p] = p < a->kv0 ? -INFINITY : (float) dot * a->scale;
			if (s[p] > max)
				max = s[p];
		}
		for (int p0 = 0; p0 < n; p0 += 16)
		{
			float		e[16];

			for (int i = 0; i < 16; i++)
				e[i] = p0 + i < n ? opus_ggml_expf(s[p0 + i] - max) : 0.0f;
			memcpy(s + p0, e, sizeof(float) * (n - p0 < 16 ? n - p0 : 16));
			sum += (double) reduce16(e);
		}
		inv = (float) (1.0 / sum);
		for (int p = 0; p < n; p++)
			s[p] = opus_fp16_to_fp32(opus_fp32_to_fp16(s[p] * inv));
		/*
		 * V: accumulator p % M takes position p (fused; llama.cpp's zero
		 * weights of the padded positions add nothing), combined as
		 * ggml_vec_dot_f16 (tree64) or tinyBLAS (reduce16) does
		 */
		for (int d = 0; d < hd; d++)
		{
			float		acc[64] = {0};

			for (int p = 0; p < n; p++)
			{
				const uint16_t *vr = (const uint16_t *) (a->kv_mem + (size_t) a->blocks[p / bs] * a->block_bytes +
														 a->v_off) + (size_t) (p % bs) * hd;

				acc[p & (M - 1)] = fmaf(s[p], opus_fp16_to_fp32(vr[d]), acc[p & (M - 1)]);
			}
			out[d] = gemm ? reduce16(acc) : tree64(acc);
		}
	}
}

/*
 * Activation quantizers as ggml's x86 CPU backend runs them (not ggml's
 * reference quantizer, which the model quantizer reproduces): per 32-block
 * d = amax / 127, id = 127 / amax (not 1 / d), q = x * id rounded to
 * nearest, ties to even; Q8_1's s = F16(sum(q) * d).
 */
static int
act_block(const float *x, int8_t *qs, float *pd)
{
	float		amax = 0.0f,
				id;
	int			sum = 0;

	for (int i = 0; i < 32; i++)
		amax = fmaxf(amax, fabsf(x[i]));
	*pd = amax / 127.0f;
	id = amax != 0.0f ? 127.0f / amax : 0.0f;
	for (int i = 0; i < 32; i++)
	{
		float		v = rintf(x[i] * id);

		qs[i] = (int8_t) (v > 127.0f ? 127 : v < -128.0f ? -128 : (int) v);
		sum += qs[i];
	}
	return sum;
}

void
opus_act_q8_0_ref(const float *x, void *dst, int64_t n)
{
	uint8_t    *y = dst;

	for (int64_t b = 0; b < n / 32; b++, y += 34)
	{
		float		d;
		uint16_t	h;

		(void) act_block(x + 32 * b, (int8_t *) (y + 2), &d);
		h = opus_fp32_to_fp16(d);
		memcpy(y, &h, 2);
	}
}

void
opus_act_q8_1_ref(const float *x, void *dst, int64_t n)
{
	uint8_t    *y = dst;

	for (int64_t b = 0; b < n / 32; b++, y += 36)
	{
		float		d;
		int			sum = act_block(x + 32 * b, (int8_t *) (y + 4), &d);
		uint16_t	h[2];

		h[0] = opus_fp32_to_fp16(d);
		h[1] = opus_fp32_to_fp16((float) sum * d);
		memcpy(y, h, 4);
	}
}
