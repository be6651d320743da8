/*
 * test_activation.c - the feed-forward activations' AVX2 kernels against
 * their plain versions (forward_compat.c), bit for bit.
 *
 * GeGLU (gemma3): opus_fwd_geglu_avx2 reads GELU from the table the
 * reference builds, so it must give the reference's bits for every F16
 * input (all 65,536 bit patterns, and floats between them, which round to
 * them), at the edges -10 and 10 and beyond, for infinities and NaN, and
 * for ranges [i0, i1) that do not start or end on a vector.  SwiGLU: the
 * same for opus_fwd_swiglu_avx2 on random rows.  Skipped without AVX2.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/forward_int.h"
#include "quant/qtype.h"
#include "unit.h"

enum
{
	N = 1 << 17
};

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint32_t
next_u32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t) (rng >> 11);
}

/* a and b hold the same floats (NaN equal to NaN) */
static int
count_diff(const float *a, const float *b, int64_t n)
{
	int			bad = 0;

	for (int64_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(isnan(a[i]) && isnan(b[i])))
		{
			if (bad++ < 5)
				fprintf(stderr, "element %lld: %.9g, reference %.9g\n", (long long) i, a[i], b[i]);
		}
	return bad;
}

static void
test_geglu(float *g, float *u, float *h, float *want)
{
	static const float edges[] = {-10.0f, 10.0f, -9.999f, 9.999f, -10.001f, 10.001f, INFINITY,
	-INFINITY, NAN, 0.0f, -0.0f, 1e-8f, -65504.0f, 65520.0f, 1e30f};
	int			bad;

	/* every F16 value, then floats between neighbours, then the edges */
	for (int i = 0; i < (1 << 16); i++)
		g[i] = opus_fp16_to_fp32((uint16_t) i);
	for (int i = 1 << 16; i < N; i++)
		g[i] = ((float) (next_u32() % 2000001) / 100000.0f - 10.0f) * 1.3f;
	for (size_t k = 0; k < sizeof(edges) / sizeof(edges[0]); k++)
		g[N - 64 + (int) k] = edges[k];
	for (int i = 0; i < N; i++)
		u[i] = (float) (next_u32() % 2001) / 500.0f - 2.0f;
	opus_fwd_geglu_ref(want, g, u, 0, N, N);
	opus_fwd_geglu_avx2(h, g, u, 0, N, N);
	bad = count_diff(h, want, N);
	CHECK(bad == 0, "geglu avx2 == reference on %d inputs (%d differ)", N, bad);

	/* ranges that start and end inside a vector: the rest untouched */
	bad = 0;
	for (int k = 0; k < 64; k++)
	{
		int64_t		i0 = next_u32() % 1000,
					i1 = i0 + next_u32() % 300;

		memset(h, 0x55, sizeof(float) * 1400);
		memcpy(want, h, sizeof(float) * 1400);
		opus_fwd_geglu_ref(want, g + 40000, u, i0, i1, 1400);
		opus_fwd_geglu_avx2(h, g + 40000, u, i0, i1, 1400);
		bad += count_diff(h, want, 1400) != 0;
	}
	CHECK(bad == 0, "geglu avx2 == reference on sub-ranges (%d of 64 differ)", bad);
}

static void
test_swiglu(float *g, float *u, float *h, float *want)
{
	int			bad = 0;

	for (int k = 0; k < 16; k++)
	{
		int64_t		n = 16 * (1 + next_u32() % 200) + (k % 2 ? (int64_t) (next_u32() % 16) : 0);
		int64_t		i0 = next_u32() % 40,
					i1 = n - next_u32() % 40;

		for (int64_t i = 0; i < n; i++)
		{
			g[i] = (float) (next_u32() % 2000001) / 50000.0f - 20.0f;
			u[i] = (float) (next_u32() % 2001) / 500.0f - 2.0f;
		}
		memset(h, 0, sizeof(float) * (size_t) n);
		memset(want, 0, sizeof(float) * (size_t) n);
		opus_fwd_swiglu_ref(want, g, u, i0, i1, n);
		opus_fwd_swiglu_avx2(h, g, u, i0, i1, n);
		bad += count_diff(h, want, n) != 0;
	}
	CHECK(bad == 0, "swiglu avx2 == reference (%d of 16 rows differ)", bad);
}

int
main(void)
{
	float	   *g = malloc(sizeof(float) * N),
			   *u = malloc(sizeof(float) * N),
			   *h = malloc(sizeof(float) * N),
			   *want = malloc(sizeof(float) * N);

	opus_qtype_init_cpu(false);
	CHECK(g && u && h && want, "alloc");
	if (strcmp(opus_qtype_cpu_variant(), "avx2") != 0)
		printf("no AVX2: activation kernels not tested\n");
	else if (g && u && h && want)
	{
		test_geglu(g, u, h, want);
		test_swiglu(g, u, h, want);
	}
	free(g);
	free(u);
	free(h);
	free(want);
	return UNIT_DONE();
}
