/*
 * test_matmul.c - the tiled matmul kernels of matmul_avx2.c against a
 * scalar model of their arithmetic, bit for bit.
 *
 * The model (see matmul_tile.h): per block, eight lanes, lane i the exact
 * integer sum of the 4 products at positions 4i..4i+3, converted to float
 * and fused-multiply-added with (d_w * d_x rounded to float) into the
 * lane's accumulator; at the end ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), and
 * for Q4_1 plus the separately fused sum of m_w * s_x.
 *
 * For Q4_1 (x Q8_1), Q8_0 and Q5_0 (x Q8_0) weights, random rows of several
 * lengths (including ones past the scaled form's stack limit, so both the
 * direct and the scaled form run), every group size C = 1..8, with and
 * without AVX-VNNI: each kernel output must equal the model exactly, so a
 * token's result is the same whatever C and variant computed it (the
 * batch invariance the forward pass relies on).  Row counts that are not a
 * multiple of anything, and activation rows with a stride wider than the
 * row.  Also the transposing store of the results (opus_mm_scatter_avx2)
 * against the plain loop.  Where the CPU has AVX-512 VNNI, everything runs twice: with its
 * 512-bit kernels (6..8 tokens) and with them switched off
 * (OPUS_NO_AVX512), so the 256-bit ones are checked too.  Skipped without
 * AVX2.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/forward_int.h"
#include "quant/qtype.h"
#include "unit.h"

static uint64_t rng = 0x243f6a8885a308d3ULL;

static uint32_t
next_u32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t) (rng >> 11);
}

/* uniform in [-a, a) with an occasional large value */
static float
next_float(float a)
{
	float		u = (float) (next_u32() % 2000001) / 1000000.0f - 1.0f;

	if (next_u32() % 97 == 0)
		u *= 8.0f;
	return u * a;
}

/* The kernels' arithmetic for weight row w and activation row x, in scalar C. */
static float
model_dot(enum opus_qtype wt, int nb, const uint8_t *w, const uint8_t *x)
{
	float		acc[8] = {0};
	float		ms = 0.0f;

	for (int b = 0; b < nb; b++)
	{
		const uint8_t *wb;
		const uint8_t *xb;
		const int8_t *xq;
		uint16_t	h[2];
		float		dw,
					dx;

		if (wt == OPUS_TYPE_Q4_1)
		{
			wb = w + (size_t) b * 20;
			xb = x + (size_t) b * 36;
			xq = (const int8_t *) (xb + 4);
		}
		else
		{
			wb = w + (size_t) b * (wt == OPUS_TYPE_Q5_0 ? 22 : 34);
			xb = x + (size_t) b * 34;
			xq = (const int8_t *) (xb + 2);
		}
		memcpy(h, wb, sizeof(h));
		dw = opus_fp16_to_fp32(h[0]);
		if (wt == OPUS_TYPE_Q4_1)
		{
			uint16_t	sx;

			memcpy(&sx, xb + 2, sizeof(sx));
			ms = fmaf(opus_fp16_to_fp32(h[1]), opus_fp16_to_fp32(sx), ms);
		}
		memcpy(h, xb, sizeof(h[0]));
		dx = opus_fp16_to_fp32(h[0]);
		for (int i = 0; i < 8; i++)
		{
			int32_t		isum = 0;
			float		scale = dw * dx;

			for (int k = 4 * i; k < 4 * i + 4; k++)
			{
				int			q;

				if (wt == OPUS_TYPE_Q4_1)
					q = k < 16 ? (wb[4 + k] & 15) : (wb[4 + k - 16] >> 4);
				else if (wt == OPUS_TYPE_Q5_0)
				{
					uint32_t	qh;

					memcpy(&qh, wb + 2, sizeof(qh));
					q = (k < 16 ? (wb[6 + k] & 15) : (wb[6 + k - 16] >> 4)) +
						(int) (((qh >> k) & 1) << 4) - 16;
				}
				else
					q = (int8_t) wb[2 + k];
				isum += q * xq[k];
			}
			acc[i] = fmaf(scale, (float) isum, acc[i]);
		}
	}
	return (((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))) + ms;
}

/*
 * One case: n_rows rows of nb blocks of weight type wt, 8 activation rows
 * (x_stride bytes apart) quantized from random floats; every kernel
 * against vec_dot.
 */
static void
check_case(enum opus_qtype wt, int nb, int n_rows, size_t x_extra)
{
	const struct opus_qtype_info *wi = opus_qtype_info(wt);
	const struct opus_qtype_info *xi = opus_qtype_info(wi->vec_dot_type);
	int64_t		n = (int64_t) nb * 32;
	size_t		w_stride = (size_t) nb * wi->type_size;
	size_t		x_stride = (size_t) nb * xi->type_size + x_extra;
	float	   *f = malloc(sizeof(float) * (size_t) n);
	uint8_t    *w = malloc(w_stride * (size_t) n_rows);
	uint8_t    *x = calloc(8, x_stride);
	float	   *xs = calloc((size_t) 2 * 8 * nb, sizeof(float));
	float	   *want = malloc(sizeof(float) * (size_t) n_rows * 8);
	float	   *out = malloc(sizeof(float) * (size_t) n_rows * 8);
	int			bad = 0;

	CHECK(f && w && x && xs && want && out, "alloc");
	if (!f || !w || !x || !xs || !want || !out)
		goto done;
	for (int r = 0; r < n_rows; r++)
	{
		float		a = 0.01f + (float) (next_u32() % 100) / 50.0f;

		for (int64_t i = 0; i < n; i++)
			f[i] = next_float(a);
		wi->from_float(f, w + (size_t) r * w_stride, n);
	}
	for (int c = 0; c < 8; c++)
	{
		float		a = 0.1f + (float) (next_u32() % 100) / 10.0f;

		for (int64_t i = 0; i < n; i++)
			f[i] = next_float(a);
		xi->from_float(f, x + (size_t) c * x_stride, n);
		/* the block scales as floats, transposed, as the forward pass keeps them */
		for (int b = 0; b < nb; b++)
		{
			const uint8_t *blk = x + (size_t) c * x_stride + (size_t) b * xi->type_size;
			uint16_t	h[2];

			memcpy(h, blk, sizeof(h));
			xs[b * 8 + c] = opus_fp16_to_fp32(h[0]);
			if (wi->vec_dot_type == OPUS_TYPE_Q8_1)
				xs[(nb + b) * 8 + c] = opus_fp16_to_fp32(h[1]);
		}
	}
	for (int r = 0; r < n_rows; r++)
		for (int c = 0; c < 8; c++)
			want[r * 8 + c] = model_dot(wt, nb, w + (size_t) r * w_stride, x + (size_t) c * x_stride);

	for (int vnni = 0; vnni < 2; vnni++)
	{
		for (int C = 1; C <= 8; C++)
		{
			opus_mm_rows_fn fn = opus_mm_rows_avx2(wt, C, vnni != 0);

			CHECK(fn != NULL, "%s C=%d has a kernel", wi->name, C);
			if (!fn)
				continue;
			memset(out, 0xff, sizeof(float) * (size_t) n_rows * 8);
			fn(nb, n_rows, w, w_stride, x, x_stride, xs, out);
			for (int r = 0; r < n_rows; r++)
				for (int c = 0; c < C; c++)
					if (memcmp(&out[r * 8 + c], &want[r * 8 + c], sizeof(float)) != 0)
					{
						if (bad++ < 5)
							fprintf(stderr, "%s nb=%d vnni=%d C=%d row %d token %d: %.9g, model %.9g\n",
									wi->name, nb, vnni, C, r, c, out[r * 8 + c], want[r * 8 + c]);
					}
		}
	}
	CHECK(bad == 0, "%s, %d blocks, %d rows: tile kernels == scalar model bit for bit (%d differ)",
		  wi->name, nb, n_rows, bad);
done:
	free(f);
	free(w);
	free(x);
	free(xs);
	free(want);
	free(out);
}

/* opus_mm_scatter_avx2 against the plain loop mm_scatter keeps for other CPUs. */
static void
check_scatter(void)
{
	enum
	{
		N = 29
	};
	float		out[N * 8],
				bias[N],
				init[8][N],
				got[8][N],
				want[8][N];
	int			bad = 0;

	for (int i = 0; i < N * 8; i++)
		out[i] = next_float(3.0f);
	for (int i = 0; i < N; i++)
		bias[i] = next_float(1.0f);
	for (int c = 0; c < 8; c++)
		for (int i = 0; i < N; i++)
			init[c][i] = next_float(2.0f);
	for (int cc = 1; cc <= 8; cc++)
		for (int mode = 0; mode < 4; mode++)
		{
			bool		acc = mode & 1;
			const float *b = (mode & 2) ? bias : NULL;
			float	   *dst[8];

			memcpy(got, init, sizeof(got));
			memcpy(want, init, sizeof(want));
			for (int c = 0; c < 8; c++)
				dst[c] = got[c];
			opus_mm_scatter_avx2(out, N, cc, dst, b, acc);
			for (int c = 0; c < cc; c++)
				for (int i = 0; i < N; i++)
				{
					float		v = out[i * 8 + c];

					if (b)
						v += b[i];
					if (acc)
						want[c][i] += v;
					else
						want[c][i] = v;
				}
			bad += memcmp(got, want, sizeof(got)) != 0;
		}
	CHECK(bad == 0, "opus_mm_scatter_avx2 == the plain store loop (%d of 32 cases differ)", bad);
}

int
main(void)
{
	static const int nbs[] = {1, 3, 18, 48, 128, 129, 300};
	static const enum opus_qtype types[] = {OPUS_TYPE_Q4_1, OPUS_TYPE_Q8_0, OPUS_TYPE_Q5_0};

	opus_qtype_init_cpu(false);
	if (strcmp(opus_qtype_cpu_variant(), "avx2") != 0)
	{
		printf("no AVX2: tile kernels not tested\n");
		CHECK(opus_mm_rows_avx2 != NULL, "placeholder");
		return UNIT_DONE();
	}
	CHECK(opus_mm_rows_avx2(OPUS_TYPE_Q5_1, 8, true) == NULL &&
		  opus_mm_rows_avx2(OPUS_TYPE_Q4_1, 0, true) == NULL &&
		  opus_mm_rows_avx2(OPUS_TYPE_Q4_1, 9, true) == NULL,
		  "no kernel for other types or group sizes");
	for (int no512 = 0; no512 < 2; no512++)
	{
		if (no512)
			setenv("OPUS_NO_AVX512", "1", 1);
		for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
			for (size_t i = 0; i < sizeof(nbs) / sizeof(nbs[0]); i++)
				check_case(types[t], nbs[i], 1 + (int) (next_u32() % 37), i % 2 ? 64 : 0);
	}
	unsetenv("OPUS_NO_AVX512");
	check_scatter();
	return UNIT_DONE();
}
