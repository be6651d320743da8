/*
 * genmodel_rows.c - the tensor rows of `opus_engine genmodel`: random
 * valid blocks of each weight type with the deviation of a trained layer,
 * norms near 1, Llama 3.1's rope scaling factors (cli_genmodel.c describes
 * the distributions).  A row depends only on (seed, tensor name, row).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/genmodel.h"
#include "quant/quant_blocks.h"

/* approximately normal(0, 1): the sum of four 16-bit uniforms (|x| < 3.5) */
static inline float
gauss(uint64_t *s)
{
	uint64_t	r = splitmix64(s);
	int32_t		sum = (int32_t) (r & 0xFFFF) + (int32_t) ((r >> 16) & 0xFFFF) +
		(int32_t) ((r >> 32) & 0xFFFF) + (int32_t) (r >> 48);

	return ((float) sum - 131070.0f) * (1.0f / 37837.23f);
}

static inline void
rand_bytes(uint64_t *s, uint8_t *p, size_t n)
{
	while (n >= 8)
	{
		uint64_t	r = splitmix64(s);

		memcpy(p, &r, 8);
		p += 8;
		n -= 8;
	}
	if (n > 0)
	{
		uint64_t	r = splitmix64(s);

		memcpy(p, &r, n);
	}
}


/*
 * Standard deviations of the uniform quant levels: 0..15 -> 4.61, 0..31 ->
 * 9.23, 0..63 -> 18.47, -127..127 -> 73.6; K-quant sub-block scales uniform
 * in 16..31 have root mean square 23.95.
 */
#define SD16 4.6098f
#define SD32 9.2331f
#define SD64 18.4752f
#define SD255 73.6116f
#define RMS_SC 23.9531f

/* Q4_K / Q5_K scales: sub-block j gets scale sc[j] and min m[j] (6 bits). */
static void
pack_k_scales(const uint8_t *sc, const uint8_t *m, uint8_t *q)
{
	for (int j = 0; j < 4; j++)
	{
		q[j] = sc[j] & 63;
		q[j + 4] = m[j] & 63;
	}
	for (int j = 4; j < 8; j++)
	{
		q[j + 4] = (uint8_t) ((sc[j] & 0x0F) | ((m[j] & 0x0F) << 4));
		q[j - 4] |= (uint8_t) ((sc[j] >> 4) << 6);
		q[j] |= (uint8_t) ((m[j] >> 4) << 6);
	}
}

void
gen_row(const struct tensor_spec *t, int64_t row, uint64_t seed, uint8_t *dst,
		float *scratch)
{
	uint64_t	s = seed ^ hash_str(t->name);
	int64_t		n = t->ne[0];
	float		sigma = t->sigma;

	s ^= splitmix64(&s) + (uint64_t) row * 0xD1B54A32D192ED03ULL;
	(void) splitmix64(&s);

	if (t->kind == KIND_NORM)
	{
		float	   *y = (float *) dst;

		for (int64_t i = 0; i < n; i++)
			y[i] = 0.95f + 0.1f * unif(&s);
		return;
	}
	if (t->kind == KIND_ROPE_FREQS)
	{
		/* Llama 3.1: factor 8, low/high frequency factors 1/4, 8192 positions */
		float	   *y = (float *) dst;
		const double factor = 8.0,
					lo = 1.0,
					hi = 4.0,
					old_ctx = 8192.0;
		double		head_dim = 2.0 * (double) n;

		for (int64_t i = 0; i < n; i++)
		{
			double		freq = pow(t->sigma, -2.0 * (double) i / head_dim);
			double		wavelen = 2.0 * M_PI / freq;
			double		f;

			if (wavelen < old_ctx / hi)
				f = 1.0;
			else if (wavelen > old_ctx / lo)
				f = factor;
			else
			{
				double		smooth = (old_ctx / wavelen - lo) / (hi - lo);

				f = 1.0 / ((1.0 - smooth) / factor + smooth);
			}
			y[i] = (float) f;
		}
		return;
	}

	switch (t->type)
	{
		case OPUS_TYPE_F32:
			{
				float	   *y = (float *) dst;

				for (int64_t i = 0; i < n; i++)
					y[i] = sigma * gauss(&s);
				break;
			}
		case OPUS_TYPE_F16:
		case OPUS_TYPE_BF16:
			/* the engine's row converter (F16C where the CPU has it: exact RNE either way) */
			for (int64_t i = 0; i < n; i++)
				scratch[i] = sigma * gauss(&s);
			opus_qtype_info(t->type)->from_float(scratch, dst, n);
			break;
		case OPUS_TYPE_Q8_0:
			{
				opus_block_q8_0 *b = (opus_block_q8_0 *) dst;

				for (int64_t k = 0; k < n / OPUS_QK32; k++)
				{
					rand_bytes(&s, (uint8_t *) b[k].qs, OPUS_QK32);
					for (int j = 0; j < OPUS_QK32; j++)
						b[k].qs[j] = b[k].qs[j] == -128 ? 0 : b[k].qs[j];
					b[k].d = t->dtab[0][splitmix64(&s) & 63];
				}
				break;
			}
		case OPUS_TYPE_Q4_0:
			{
				opus_block_q4_0 *b = (opus_block_q4_0 *) dst;

				for (int64_t k = 0; k < n / OPUS_QK32; k++)
				{
					uint64_t	r[2] = {splitmix64(&s), splitmix64(&s)};

					memcpy(b[k].qs, r, 16);
					b[k].d = t->dtab[0][splitmix64(&s) & 63];
				}
				break;
			}
		case OPUS_TYPE_Q4_1:
			{
				opus_block_q4_1 *b = (opus_block_q4_1 *) dst;

				for (int64_t k = 0; k < n / OPUS_QK32; k++)
				{
					uint64_t	r[2] = {splitmix64(&s), splitmix64(&s)};
					int			idx = (int) (splitmix64(&s) & 63);

					memcpy(b[k].qs, r, 16);
					b[k].d = t->dtab[0][idx];
					b[k].m = t->dtab[1][idx];
				}
				break;
			}
		case OPUS_TYPE_Q5_0:
			{
				opus_block_q5_0 *b = (opus_block_q5_0 *) dst;

				for (int64_t k = 0; k < n / OPUS_QK32; k++)
				{
					uint64_t	r[3] = {splitmix64(&s), splitmix64(&s), splitmix64(&s)};

					memcpy(b[k].qs, r, 16);
					memcpy(b[k].qh, &r[2], 4);
					b[k].d = t->dtab[0][(r[2] >> 32) & 63];
				}
				break;
			}
		case OPUS_TYPE_Q5_1:
			{
				opus_block_q5_1 *b = (opus_block_q5_1 *) dst;

				for (int64_t k = 0; k < n / OPUS_QK32; k++)
				{
					uint64_t	r[3] = {splitmix64(&s), splitmix64(&s), splitmix64(&s)};
					int			idx = (int) ((r[2] >> 32) & 63);

					memcpy(b[k].qs, r, 16);
					memcpy(b[k].qh, &r[2], 4);
					b[k].d = t->dtab[0][idx];
					b[k].m = t->dtab[1][idx];
				}
				break;
			}
		case OPUS_TYPE_Q4_K:
		case OPUS_TYPE_Q5_K:
			{
				bool		five = t->type == OPUS_TYPE_Q5_K;
				size_t		bsz = five ? sizeof(opus_block_q5_K) : sizeof(opus_block_q4_K);

				for (int64_t k = 0; k < n / OPUS_QK_K; k++)
				{
					uint8_t    *p = dst + (size_t) k * bsz;
					uint16_t	dd[2];
					uint8_t		sc[8];
					uint8_t		scales[OPUS_K_SCALE_SIZE];
					uint64_t	r = splitmix64(&s);
					int			idx = (int) (r >> 58);

					/*
					 * value = d * sc * q - dmin * sc with dmin = mid-level * d:
					 * zero mean; the 6-bit scale and min of each sub-block are equal
					 */
					for (int j = 0; j < 8; j++)
						sc[j] = (uint8_t) (16 + ((r >> (4 * j)) & 15));
					memset(scales, 0, sizeof(scales));
					pack_k_scales(sc, sc, scales);
					dd[0] = t->dtab[0][idx];
					dd[1] = t->dtab[1][idx];
					memcpy(p, dd, 4);
					memcpy(p + 4, scales, sizeof(scales));
					/* qh (Q5_K) then qs: the rest of the block */
					rand_bytes(&s, p + 4 + OPUS_K_SCALE_SIZE, bsz - 4 - OPUS_K_SCALE_SIZE);
				}
				break;
			}
		case OPUS_TYPE_Q6_K:
			{
				opus_block_q6_K *b = (opus_block_q6_K *) dst;

				for (int64_t k = 0; k < n / OPUS_QK_K; k++)
				{
					uint64_t	r = splitmix64(&s);
					uint64_t	sg = splitmix64(&s);

					rand_bytes(&s, b[k].ql, sizeof(b[k].ql));
					rand_bytes(&s, b[k].qh, sizeof(b[k].qh));
					/* int8 sub-block scales of random sign: zero mean */
					for (int j = 0; j < OPUS_QK_K / 16; j++)
					{
						int			v = 16 + (int) ((r >> (4 * j)) & 15);

						b[k].scales[j] = (int8_t) (((sg >> j) & 1) ? -v : v);
					}
					b[k].d = t->dtab[0][(sg >> 32) & 63];
				}
				break;
			}
		default:
			memset(dst, 0, t->row_bytes);	/* not reached: types are checked */
			break;
	}
}

/*
 * The block scales a matrix's rows draw from (fp16 bits): 32 levels between
 * 0.8 and 1.2 times the nominal scale; for the symmetric types (Q8_0, Q4_0,
 * Q5_0) indices 32..63 are the negated scales, so a block's mean is zero on
 * average.  dtab[1]: the matching offset (Q4_1/Q5_1 m, K-quant dmin).
 */
void
fill_scale_table(struct tensor_spec *t)
{
	float		sd = 1.0f,
				mid = 0.0f;
	bool		sym = false;

	switch (t->type)
	{
		case OPUS_TYPE_Q8_0:
			sd = SD255;
			sym = true;
			break;
		case OPUS_TYPE_Q4_0:
			sd = SD16;
			sym = true;
			break;
		case OPUS_TYPE_Q5_0:
			sd = SD32;
			sym = true;
			break;
		case OPUS_TYPE_Q4_1:
			sd = SD16;
			mid = -7.5f;
			break;
		case OPUS_TYPE_Q5_1:
			sd = SD32;
			mid = -15.5f;
			break;
		case OPUS_TYPE_Q4_K:
			sd = SD16 * RMS_SC;
			mid = 7.5f;
			break;
		case OPUS_TYPE_Q5_K:
			sd = SD32 * RMS_SC;
			mid = 15.5f;
			break;
		case OPUS_TYPE_Q6_K:
			sd = SD64 * RMS_SC;
			break;
		default:
			return;
	}
	for (int k = 0; k < 64; k++)
	{
		float		d = t->sigma / sd * (0.8f + 0.4f * (float) (k & 31) / 31.0f);

		if (sym && k >= 32)
			d = -d;
		t->dtab[0][k] = opus_fp32_to_fp16(d);
		t->dtab[1][k] = opus_fp32_to_fp16(mid * opus_fp16_to_fp32(t->dtab[0][k]));
	}
}
