/*
 * attn_q8_0.c - the plain attention kernel over a Q8_0 KV cache
 * (opus_ctx_params.kv_type = OPUS_KV_Q8_0).  forward_int.h states the
 * arithmetic; forward_avx2.c has the AVX2 version, which gives the same
 * bits.  This one is the fallback for CPUs without AVX2, for head sizes
 * the AVX2 kernel does not take, and the reference the unit tests hold the
 * AVX2 kernel to.
 *
 * Layout read (kv.c): for one KV head of one layer in a block, quants
 * [bs][hd] int8, then scales [hd / 32][bs] F16.
 */
#include "cpu/forward_int.h"

#include <math.h>
#include <string.h>

#include "quant/qtype.h"

#define QK 32					/* values per Q8_0 group */

/* The sum of 16 floats in ggml's AVX-512 reduction order (as forward_compat.c). */
static float
sum16(const float *v)
{
	float		a[8],
				b[4];

	for (int i = 0; i < 8; i++)
		a[i] = v[i] + v[i + 8];
	for (int i = 0; i < 4; i++)
		b[i] = a[i] + a[i + 4];
	return (b[0] + b[2]) + (b[1] + b[3]);
}

/* Position p's quants (row of hd) and the scale of its group b, for the head at off. */
static inline const int8_t *
q8_row(const struct opus_attn_args *a, size_t off, int p)
{
	return (const int8_t *) (a->kv_mem + (size_t) a->blocks[p / a->bs] * a->block_bytes + off) +
		(size_t) (p % a->bs) * a->hd;
}

static inline float
q8_scale(const struct opus_attn_args *a, size_t off, int p, int b)
{
	const uint8_t *base = a->kv_mem + (size_t) a->blocks[p / a->bs] * a->block_bytes + off +
		(size_t) a->bs * a->hd;
	uint16_t	h;

	memcpy(&h, base + ((size_t) b * a->bs + (size_t) (p % a->bs)) * sizeof(uint16_t), sizeof(h));
	return opus_fp16_to_fp32(h);
}

void
opus_fwd_attend_q8_0_ref(const struct opus_attn_args *a)
{
	int			hd = a->hd;
	int			nb = hd / QK;
	int			n = a->n_kv;
	int			stride = (n + 15) / 16 * 16;

	for (int h = 0; h < a->n_h; h++)
	{
		const float *q = a->q + (size_t) h * hd;
		float	   *s = a->scores + (size_t) h * stride;
		float	   *out = a->out + (size_t) h * hd;
		uint8_t		qq[34];
		float		max = -INFINITY,
					inv;
		double		sum = 0.0;

		/* scores: per group, the exact integer dot product of the quants */
		for (int p = 0; p < n; p++)
			s[p] = 0.0f;
		for (int b = 0; b < nb; b++)
		{
			const int8_t *qs = (const int8_t *) (qq + 2);
			uint16_t	dh;
			float		dq;

			opus_act_q8_0_ref(q + (size_t) b * QK, qq, QK);
			memcpy(&dh, qq, sizeof(dh));
			dq = opus_fp16_to_fp32(dh);
			for (int p = 0; p < n; p++)
			{
				const int8_t *kq = q8_row(a, a->k_off, p) + b * QK;
				int32_t		isum = 0;

				for (int i = 0; i < QK; i++)
					isum += (int32_t) qs[i] * kq[i];
				s[p] = fmaf((float) isum, q8_scale(a, a->k_off, p, b) * dq, s[p]);
			}
		}
		for (int p = 0; p < n; p++)
		{
			s[p] = p < a->kv0 ? -INFINITY : s[p] * a->scale;
			if (s[p] > max)
				max = s[p];
		}

		/* softmax (weights kept in float) */
		for (int p0 = 0; p0 < n; p0 += 16)
		{
			float		e[16];

			for (int i = 0; i < 16; i++)
				e[i] = p0 + i < n ? opus_ggml_expf(s[p0 + i] - max) : 0.0f;
			memcpy(s + p0, e, sizeof(float) * (n - p0 < 16 ? n - p0 : 16));
			sum += (double) sum16(e);
		}
		inv = (float) (1.0 / sum);
		for (int p = 0; p < n; p++)
			s[p] = s[p] * inv;

		/* output: per dimension one chain over the positions in order */
		for (int b = 0; b < nb; b++)
		{
			float		acc[QK] = {0};

			for (int p = 0; p < n; p++)
			{
				const int8_t *vq = q8_row(a, a->v_off, p) + b * QK;
				float		w = s[p] * q8_scale(a, a->v_off, p, b);

				for (int i = 0; i < QK; i++)
					acc[i] = fmaf(w, (float) vq[i], acc[i]);
			}
			memcpy(out + (size_t) b * QK, acc, sizeof(acc));
		}
	}
}
