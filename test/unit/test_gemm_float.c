/*
 * test_gemm_float.c - the encoder's float kernels against their plain
 * versions, bit for bit: the F32 / F16 matrix products of cpu/gemm_float.h
 * and ggml's table GELU (opus_fwd_gelu_*).
 *
 * Products: row lengths with and without a partial last group of 8, row
 * and token counts that are not multiples of the 4 x 3 tile, strides wider
 * than a row; the AVX2 result must equal the plain one exactly, and every
 * token computed alone must equal the same token computed in the group (a
 * token's result does not depend on the others).  The plain version is
 * also checked against a double-precision product within float rounding.
 * GELU: every half, and random floats in and beyond (-10, 10).  Skipped
 * without AVX2.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/forward_int.h"
#include "cpu/gemm_float.h"
#include "quant/qtype.h"
#include "unit.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint32_t
next_u32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t) (rng >> 11);
}

static float
next_float(float a)
{
	return ((float) (next_u32() % 2000001) / 1000000.0f - 1.0f) * a;
}

/* One case: n elements, nr rows, nt tokens; f16 picks the type. */
static void
check_case(bool f16, int64_t n, int nr, int nt, int pad)
{
	size_t		es = f16 ? 2 : 4,
				ws = (size_t) (n + pad) * es,
				xs = (size_t) (n + 3 * pad) * es;
	uint8_t    *w = calloc((size_t) nr, ws),
			   *x = calloc((size_t) nt, xs);
	int64_t		ld = nr + 5;
	float	   *ref = calloc((size_t) nt * ld, sizeof(float)),
			   *got = calloc((size_t) nt * ld, sizeof(float)),
			   *one = calloc((size_t) ld, sizeof(float));
	opus_gemm_fn fref = f16 ? opus_gemm_f16_ref : opus_gemm_f32_ref,
				fast = f16 ? opus_gemm_f16_avx2 : opus_gemm_f32_avx2;
	int			bad = 0,
				bad_alone = 0,
				bad_exact = 0;

	for (int r = 0; r < nr; r++)
		for (int64_t i = 0; i < n; i++)
		{
			float		v = next_float(2.0f);

			if (f16)
				((uint16_t *) (w + r * ws))[i] = opus_fp32_to_fp16(v);
			else
				((float *) (w + r * ws))[i] = v;
		}
	for (int t = 0; t < nt; t++)
		for (int64_t i = 0; i < n; i++)
		{
			float		v = next_float(3.0f);

			if (f16)
				((uint16_t *) (x + t * xs))[i] = opus_fp32_to_fp16(v);
			else
				((float *) (x + t * xs))[i] = v;
		}
	fref(n, nr, w, ws, nt, x, xs, ref, ld);
	fast(n, nr, w, ws, nt, x, xs, got, ld);
	for (int t = 0; t < nt; t++)
	{
		fast(n, nr, w, ws, 1, x + t * xs, xs, one, ld);
		for (int r = 0; r < nr; r++)
		{
			double		s = 0.0,
						mag = 0.0;

			for (int64_t i = 0; i < n; i++)
			{
				double		a = f16 ? opus_fp16_to_fp32(((uint16_t *) (w + r * ws))[i]) :
					((float *) (w + r * ws))[i];
				double		b = f16 ? opus_fp16_to_fp32(((uint16_t *) (x + t * xs))[i]) :
					((float *) (x + t * xs))[i];

				s += a * b;
				mag += fabs(a * b);
			}
			bad += memcmp(&ref[t * ld + r], &got[t * ld + r], sizeof(float)) != 0;
			bad_alone += memcmp(&one[r], &got[t * ld + r], sizeof(float)) != 0;
			bad_exact += fabs(ref[t * ld + r] - s) > 1e-6 * (mag + 1.0) * (double) (n / 8 + 8);
		}
	}
	CHECK(bad == 0 && bad_alone == 0 && bad_exact == 0,
		  "%s n=%lld rows=%d tokens=%d pad=%d: %d differ from the plain version, %d alone vs "
		  "grouped, %d off the exact product", f16 ? "F16" : "F32", (long long) n, nr, nt, pad,
		  bad, bad_alone, bad_exact);
	free(w);
	free(x);
	free(ref);
	free(got);
	free(one);
}

static void
check_gelu(void)
{
	enum
	{
		N = (1 << 16) + 4000
	};
	static float a[N],
				b[N];
	int			bad = 0;

	for (int i = 0; i < (1 << 16); i++)
		a[i] = opus_fp16_to_fp32((uint16_t) i);
	for (int i = 1 << 16; i < N; i++)
		a[i] = next_float(i % 3 ? 12.0f : 1.0f);
	memcpy(b, a, sizeof(a));
	opus_fwd_gelu_ref(a, N);
	/* odd offsets and lengths: the vector body and the scalar tail */
	opus_fwd_gelu_avx2(b, 5);
	opus_fwd_gelu_avx2(b + 5, N - 5);
	for (int i = 0; i < N; i++)
		if (!(isnan(a[i]) && isnan(b[i])) && memcmp(&a[i], &b[i], sizeof(float)) != 0)
			bad++;
	CHECK(bad == 0, "gelu: AVX2 == plain for every half and %d floats (%d differ)",
		  N - (1 << 16), bad);
	CHECK(a[0] == 0.0f && opus_fp16_to_fp32(opus_fp32_to_fp16(1.0f)) == 1.0f &&
		  fabsf(b[0x3c00] - 0.8413f) < 1e-3f, "gelu(0) = 0, gelu(1) ~ 0.8413 (%g)", b[0x3c00]);
}

int
main(void)
{
	static const int64_t ns[] = {1, 7, 8, 13, 32, 384, 389, 1536};

	opus_qtype_init_cpu(false);
	if (strcmp(opus_qtype_cpu_variant(), "avx2") != 0)
	{
		printf("no AVX2: the AVX2 float kernels not tested\n");
		CHECK(true, "placeholder");
		return UNIT_DONE();
	}
	for (int f16 = 0; f16 < 2; f16++)
		for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
			for (int c = 0; c < 3; c++)
				check_case(f16, ns[i], 1 + (int) (next_u32() % 13), 1 + (int) (next_u32() % 10),
						   c == 2 ? 3 : 0);
	check_gelu();
	return UNIT_DONE();
}
