/*
 * test_sampler.c - the sampler on handcrafted logits (no model): parameter
 * validation, greedy, top_k / top_p / min_p, penalties, temperature, seeds,
 * the drawn distribution, and non-finite logits.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "runtime/sampler.h"
#include "unit.h"

#define MAXV 64

static struct opus_sampling_params
params(float temp)
{
	struct opus_sampling_params p;

	opus_sampling_defaults(&p);
	p.temperature = temp;
	return p;
}

static struct opus_sampler *
make(const struct opus_sampling_params *p, int32_t n_vocab)
{
	struct opus_sampler *s = NULL;
	struct opus_error err = {0};
	enum opus_status st = opus_sampler_create(p, n_vocab, &s, &err);

	CHECK(st == OPUS_OK && s, "sampler_create: %s", err.msg);
	return s;
}

/* Draw n times from a fresh copy of base each time; count[] per token. */
static void
draw_counts(struct opus_sampler *s, const float *base, int32_t nv, int n,
			int *count)
{
	float	   *row = malloc(sizeof(float) * (size_t) nv);

	memset(count, 0, sizeof(int) * (size_t) nv);
	for (int i = 0; i < n; i++)
	{
		int32_t		t;

		memcpy(row, base, sizeof(float) * (size_t) nv);
		t = opus_sampler_sample(s, row, NULL, 0);
		if (t >= 0 && t < nv)
			count[t]++;
		else
			CHECK(0, "token %d out of range", (int) t);
	}
	free(row);
}

/* ---- validation ---- */

static void
expect_invalid(struct opus_sampling_params p, const char *name, const char *what)
{
	struct opus_error err = {0};
	struct opus_sampler *s = NULL;
	enum opus_status st = opus_sampling_validate(&p, &err);

	CHECK(st == OPUS_ERR_INVALID_ARG && err.code == OPUS_ERR_INVALID_ARG,
		  "%s (%s) accepted", name, what);
	CHECK(strstr(err.msg, name) != NULL, "message '%s' does not name %s",
		  err.msg, name);
	st = opus_sampler_create(&p, 10, &s, NULL);
	CHECK(st == OPUS_ERR_INVALID_ARG && s == NULL, "create accepted %s (%s)",
		  name, what);
}

static void
expect_valid(struct opus_sampling_params p, const char *what)
{
	struct opus_error err = {0};

	CHECK(opus_sampling_validate(&p, &err) == OPUS_OK, "%s rejected: %s",
		  what, err.msg);
}

static void
test_validation(void)
{
	struct opus_sampling_params d = params(1.0f);
	struct opus_sampling_params p;
	struct opus_sampler *s = NULL;
	const float bad_temp[] = {-0.001f, 100.5f, NAN, INFINITY, -INFINITY};
	const float bad_top_p[] = {0.0f, -0.5f, 1.0001f, NAN, INFINITY};
	const float bad_min_p[] = {-0.01f, 1.01f, NAN, -INFINITY};
	const float bad_pen[] = {-2.01f, 2.01f, NAN, INFINITY};
	const float bad_rep[] = {0.0f, -1.0f, 10.01f, NAN, INFINITY};

	expect_valid(d, "defaults");
	CHECK(d.temperature == 1.0f && d.top_p == 1.0f && d.min_p == 0.0f &&
		  d.top_k == 0 && d.repetition_penalty == 1.0f &&
		  d.presence_penalty == 0.0f && d.frequency_penalty == 0.0f,
		  "defaults are not the neutral OpenAI ones");

	/* boundaries that are allowed */
	p = d;
	p.temperature = 0.0f;
	expect_valid(p, "temperature 0");
	p = d;
	p.temperature = 100.0f;
	expect_valid(p, "temperature 100");
	p = d;
	p.top_p = 1.0f;
	expect_valid(p, "top_p 1");
	p = d;
	p.top_p = 1e-6f;
	expect_valid(p, "top_p tiny");
	p = d;
	p.min_p = 0.0f;
	expect_valid(p, "min_p 0");
	p = d;
	p.min_p = 1.0f;
	expect_valid(p, "min_p 1");
	p = d;
	p.top_k = 0;
	expect_valid(p, "top_k 0");
	p = d;
	p.presence_penalty = -2.0f;
	p.frequency_penalty = 2.0f;
	expect_valid(p, "penalties at +-2");
	p = d;
	p.repetition_penalty = 10.0f;
	expect_valid(p, "repetition 10");
	p = d;
	p.repeat_last_n = -1;
	expect_valid(p, "repeat_last_n -1");
	p = d;
	p.repeat_last_n = 0;
	expect_valid(p, "repeat_last_n 0");

	for (size_t i = 0; i < sizeof(bad_temp) / sizeof(bad_temp[0]); i++)
	{
		p = d;
		p.temperature = bad_temp[i];
		expect_invalid(p, "temperature", "out of range");
	}
	for (size_t i = 0; i < sizeof(bad_top_p) / sizeof(bad_top_p[0]); i++)
	{
		p = d;
		p.top_p = bad_top_p[i];
		expect_invalid(p, "top_p", "out of range");
	}
	for (size_t i = 0; i < sizeof(bad_min_p) / sizeof(bad_min_p[0]); i++)
	{
		p = d;
		p.min_p = bad_min_p[i];
		expect_invalid(p, "min_p", "out of range");
	}
	p = d;
	p.top_k = -1;
	expect_invalid(p, "top_k", "negative");
	for (size_t i = 0; i < sizeof(bad_pen) / sizeof(bad_pen[0]); i++)
	{
		p = d;
		p.presence_penalty = bad_pen[i];
		expect_invalid(p, "presence_penalty", "out of range");
		p = d;
		p.frequency_penalty = bad_pen[i];
		expect_invalid(p, "frequency_penalty", "out of range");
	}
	for (size_t i = 0; i < sizeof(bad_rep) / sizeof(bad_rep[0]); i++)
	{
		p = d;
		p.repetition_penalty = bad_rep[i];
		expect_invalid(p, "repetition_penalty", "out of range");
	}
	p = d;
	p.repeat_last_n = -2;
	expect_invalid(p, "repeat_last_n", "below -1");

	CHECK(opus_sampler_create(&d, 0, &s, NULL) == OPUS_ERR_INVALID_ARG &&
		  s == NULL, "n_vocab 0 accepted");
}

/* ---- greedy and non-finite logits ---- */

static void
test_greedy(void)
{
	struct opus_sampling_params p = params(0.0f);
	struct opus_sampler *s = make(&p, 6);
	float		a[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, -3.0f};
	float		b[6] = {NAN, 1.0f, NAN, 3.0f, NAN, 2.0f};
	float		c[6] = {-INFINITY, NAN, -INFINITY, NAN, -INFINITY, -INFINITY};
	float		e[6] = {1.0f, INFINITY, 2.0f, INFINITY, 0.0f, 0.0f};
	float		f[6] = {NAN, NAN, NAN, NAN, NAN, NAN};

	CHECK(opus_sampler_sample(s, a, NULL, 0) == 1, "greedy: tie must go to lowest id");
	CHECK(opus_sampler_sample(s, b, NULL, 0) == 3, "greedy ignores NaN");
	CHECK(isinf(b[0]) && b[0] < 0, "NaN is -inf after sampling at temperature 0");
	CHECK(opus_sampler_sample(s, c, NULL, 0) == 0, "all -inf/NaN gives token 0");
	CHECK(opus_sampler_sample(s, e, NULL, 0) == 1, "+inf wins, lowest id");
	CHECK(opus_sampler_sample(s, f, NULL, 0) == 0, "all NaN gives token 0");
	opus_sampler_free(s);

	/* temperature > 0 with non-finite logits never picks a NaN/-inf token */
	p = params(1.0f);
	s = make(&p, 6);
	{
		float		g[6] = {NAN, 1.0f, -INFINITY, 1.0f, NAN, 0.0f};
		float		h[6] = {1.0f, INFINITY, 5.0f, INFINITY, NAN, 0.0f};
		float		k[6] = {NAN, -INFINITY, NAN, -INFINITY, NAN, -INFINITY};
		int			cnt[6];
		int			bad = 0;

		draw_counts(s, g, 6, 3000, cnt);
		bad = cnt[0] + cnt[2] + cnt[4];
		CHECK(bad == 0, "NaN/-inf token drawn %d times", bad);
		CHECK(cnt[1] > 0 && cnt[3] > 0 && cnt[5] > 0, "finite tokens all drawn");
		draw_counts(s, h, 6, 3000, cnt);
		CHECK(cnt[1] + cnt[3] == 3000 && cnt[1] > 1200 && cnt[3] > 1200,
			  "+inf tokens share the draws equally (%d, %d)", cnt[1], cnt[3]);
		draw_counts(s, k, 6, 100, cnt);
		CHECK(cnt[0] == 100, "no finite logit: token 0");
	}
	opus_sampler_free(s);
}

/* ---- top_k ---- */

static void
test_top_k(void)
{
	enum
	{
		NV = 1000
	};
	float	   *base = malloc(sizeof(float) * NV);
	float	   *row = malloc(sizeof(float) * NV);
	int		   *cnt = malloc(sizeof(int) * NV);
	uint64_t	x = 12345;
	int32_t		best = 0;
	int			mismatch = 0;

	for (int i = 0; i < NV; i++)
	{
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		base[i] = (float) ((x >> 40) % 1000) / 250.0f;	/* 0..4, many ties */
		if (base[i] > base[best])
			best = i;
	}
	/* top_k = 1 is greedy, over many seeds and temperatures */
	for (int seed = 0; seed < 50; seed++)
	{
		struct opus_sampling_params p = params(0.3f + (float) seed * 0.2f);
		struct opus_sampler *s;

		p.top_k = 1;
		p.seed = (uint64_t) seed;
		s = make(&p, NV);
		for (int i = 0; i < 20; i++)
		{
			memcpy(row, base, sizeof(float) * NV);
			if (opus_sampler_sample(s, row, NULL, 0) != best)
				mismatch++;
		}
		opus_sampler_free(s);
	}
	CHECK(mismatch == 0, "top_k=1 differs from greedy %d times", mismatch);

	/* top_k = 3 keeps exactly the three best */
	{
		float		v[8] = {0.1f, 3.0f, 0.2f, 2.9f, 0.3f, 2.8f, 2.7f, 0.0f};
		struct opus_sampling_params p = params(5.0f);	/* flatten */
		struct opus_sampler *s;
		int			c8[8];

		p.top_k = 3;
		s = make(&p, 8);
		draw_counts(s, v, 8, 6000, c8);
		CHECK(c8[1] + c8[3] + c8[5] == 6000, "top_k=3 drew outside the top 3");
		CHECK(c8[1] > 1500 && c8[3] > 1500 && c8[5] > 1500,
			  "top_k=3: all three drawn (%d %d %d)", c8[1], c8[3], c8[5]);
		opus_sampler_free(s);
	}
	/* top_k larger than the vocabulary is no filter */
	{
		float		v[4] = {1.0f, 1.0f, 1.0f, 1.0f};
		struct opus_sampling_params p = params(1.0f);
		struct opus_sampler *s;
		int			c4[4];

		p.top_k = 100;
		s = make(&p, 4);
		draw_counts(s, v, 4, 4000, c4);
		CHECK(c4[0] > 800 && c4[1] > 800 && c4[2] > 800 && c4[3] > 800,
			  "top_k > n_vocab filtered something");
		opus_sampler_free(s);
	}
	free(base);
	free(row);
	free(cnt);
}

/* ---- top_p ---- */

static void
test_top_p(void)
{
	/* probabilities 0.5 0.25 0.15 0.1 */
	float		v[4] = {logf(0.5f), logf(0.25f), logf(0.15f), logf(0.1f)};
	int			c[4];
	struct opus_sampling_params p;
	struct opus_sampler *s;

	p = params(1.0f);
	p.top_p = 0.7f;				/* nucleus {0, 1}: 0.75 */
	s = make(&p, 4);
	draw_counts(s, v, 4, 9000, c);
	CHECK(c[2] == 0 && c[3] == 0, "top_p=0.7 kept tokens 2/3 (%d %d)", c[2], c[3]);
	CHECK(fabs(c[0] / 9000.0 - 2.0 / 3.0) < 0.03, "top_p renormalises: %d/9000",
		  c[0]);
	opus_sampler_free(s);

	p.top_p = 0.45f;			/* nucleus {0} */
	s = make(&p, 4);
	draw_counts(s, v, 4, 2000, c);
	CHECK(c[0] == 2000, "top_p=0.45 is greedy here (%d)", c[0]);
	opus_sampler_free(s);

	p.top_p = 0.8f;				/* nucleus {0, 1, 2}: 0.9 */
	s = make(&p, 4);
	draw_counts(s, v, 4, 9000, c);
	CHECK(c[3] == 0 && c[2] > 0, "top_p=0.8 nucleus wrong (%d %d)", c[2], c[3]);
	opus_sampler_free(s);

	/* top_p after top_k renormalises over the k left: 2/3, 1/3 */
	p.top_k = 2;
	p.top_p = 0.6f;
	s = make(&p, 4);
	draw_counts(s, v, 4, 2000, c);
	CHECK(c[0] == 2000, "top_k=2 then top_p=0.6 keeps only token 0 (%d)", c[0]);
	opus_sampler_free(s);
	p.top_p = 0.7f;
	s = make(&p, 4);
	draw_counts(s, v, 4, 6000, c);
	CHECK(c[1] > 1500 && c[2] == 0 && c[3] == 0,
		  "top_k=2 then top_p=0.7 keeps 0 and 1 (%d %d)", c[0], c[1]);
	opus_sampler_free(s);

	/*
	 * A large vocabulary: three strong tokens and 49997 at logit 0.  A small
	 * nucleus must come from the first selection round, a large one needs
	 * almost the whole vocabulary; in both, the kept low tokens are the
	 * lowest ids (ties go to the lowest id) and the count is the minimal one.
	 */
	{
		enum
		{
			NV = 50000
		};
		float	   *big = malloc(sizeof(float) * NV);
		int		   *cb = malloc(sizeof(int) * NV);
		double		z;
		double		e10 = exp(10.0),
					e9 = exp(9.0),
					e85 = exp(8.5);
		int			n_rest;
		int			max_rest = -1;
		int			outside = 0;

		for (int i = 0; i < NV; i++)
			big[i] = 0.0f;
		big[7] = 10.0f;
		big[123] = 9.0f;
		big[40000] = 8.5f;
		z = e10 + e9 + e85 + (NV - 3);

		p = params(1.0f);
		p.top_p = 0.3f;			/* 0.259 < 0.3 <= 0.354: {7, 123} */
		s = make(&p, NV);
		draw_counts(s, big, NV, 3000, cb);
		CHECK(cb[7] + cb[123] == 3000 && cb[123] > 0,
			  "top_p=0.3 over 50000 tokens: {7,123} (%d %d)", cb[7], cb[123]);
		opus_sampler_free(s);

		p.top_p = 0.95f;
		/* minimal number of logit-0 tokens to reach 0.95 */
		n_rest = (int) ceil((0.95 * z - e10 - e9 - e85) - 1e-6);
		s = make(&p, NV);
		draw_counts(s, big, NV, 3000, cb);
		for (int i = 0, rank = 0; i < NV; i++)
		{
			if (i == 7 || i == 123 || i == 40000)
				continue;
			if (cb[i] > 0)
			{
				if (rank >= n_rest)
					outside++;
				if (rank > max_rest)
					max_rest = rank;
			}
			rank++;
		}
		CHECK(outside == 0, "top_p=0.95 drew %d tokens outside the nucleus", outside);
		CHECK(max_rest > n_rest - 1500, "top_p=0.95 nucleus too small (max rank %d of %d)",
			  max_rest, n_rest);
		CHECK(cb[40000] > 0, "token 40000 is in the 0.95 nucleus");
		opus_sampler_free(s);
		free(big);
		free(cb);
	}
}

/* ---- min_p ---- */

static void
test_min_p(void)
{
	float		v[4] = {logf(0.5f), logf(0.25f), logf(0.15f), logf(0.1f)};
	int			c[4];
	struct opus_sampling_params p = params(1.0f);
	struct opus_sampler *s;

	p.min_p = 0.4f;				/* threshold 0.2: {0, 1} */
	s = make(&p, 4);
	draw_counts(s, v, 4, 6000, c);
	CHECK(c[2] == 0 && c[3] == 0 && c[1] > 1500,
		  "min_p=0.4 keeps {0,1} (%d %d %d %d)", c[0], c[1], c[2], c[3]);
	opus_sampler_free(s);

	p.min_p = 0.25f;			/* threshold 0.125: {0, 1, 2} */
	s = make(&p, 4);
	draw_counts(s, v, 4, 6000, c);
	CHECK(c[3] == 0 && c[2] > 0, "min_p=0.25 keeps {0,1,2} (%d %d)", c[2], c[3]);
	opus_sampler_free(s);

	/* same through the candidate (top_k) path */
	p.top_k = 3;
	p.min_p = 0.4f;
	s = make(&p, 4);
	draw_counts(s, v, 4, 6000, c);
	CHECK(c[2] == 0 && c[3] == 0 && c[1] > 1500,
		  "top_k + min_p=0.4 keeps {0,1} (%d %d)", c[2], c[3]);
	opus_sampler_free(s);

	p.top_k = 0;
	p.min_p = 1.0f;				/* only the max */
	s = make(&p, 4);
	draw_counts(s, v, 4, 1000, c);
	CHECK(c[0] == 1000, "min_p=1 is greedy");
	opus_sampler_free(s);
}

/* ---- penalties ---- */

static void
test_penalties(void)
{
	/* temperature 0: the row holds the penalised logits on return */
	const float base[8] = {2.0f, -2.0f, 1.0f, 0.0f, 4.0f, -1.0f, 3.0f, 0.5f};
	const int32_t hist[] = {0, 1, 1, 3, 5, 5, 5, 99, -4};
	int			nh = (int) (sizeof(hist) / sizeof(hist[0]));
	float		row[8];
	struct opus_sampling_params p;
	struct opus_sampler *s;

	/* repetition only, whole history */
	p = params(0.0f);
	p.repetition_penalty = 2.0f;
	p.repeat_last_n = -1;
	s = make(&p, 8);
	memcpy(row, base, sizeof(row));
	opus_sampler_sample(s, row, hist, nh);
	CHECK(row[0] == 1.0f, "rep: positive divided (%g)", row[0]);
	CHECK(row[1] == -4.0f, "rep: negative multiplied (%g)", row[1]);
	CHECK(row[3] == 0.0f, "rep: zero stays (%g)", row[3]);
	CHECK(row[5] == -2.0f, "rep: applied once per distinct token (%g)", row[5]);
	CHECK(row[2] == 1.0f && row[4] == 4.0f && row[6] == 3.0f && row[7] == 0.5f,
		  "rep: tokens not in history untouched");
	opus_sampler_free(s);

	/* presence + frequency only */
	p = params(0.0f);
	p.presence_penalty = 0.5f;
	p.frequency_penalty = 0.25f;
	p.repeat_last_n = -1;
	s = make(&p, 8);
	memcpy(row, base, sizeof(row));
	opus_sampler_sample(s, row, hist, nh);
	CHECK(row[0] == 1.25f, "pres/freq count 1: %g", row[0]);
	CHECK(row[1] == -3.0f, "pres/freq count 2: %g", row[1]);
	CHECK(row[3] == -0.75f, "pres/freq count 1 at 0: %g", row[3]);
	CHECK(row[5] == -2.25f, "pres/freq count 3: %g", row[5]);
	CHECK(row[2] == 1.0f && row[4] == 4.0f && row[6] == 3.0f && row[7] == 0.5f,
		  "pres/freq: others untouched");
	opus_sampler_free(s);

	/* all three, window of the last 4 entries: 5 5 (99) (-4) -> token 5 x2 */
	p = params(0.0f);
	p.repetition_penalty = 2.0f;
	p.presence_penalty = 0.5f;
	p.frequency_penalty = 0.25f;
	p.repeat_last_n = 4;
	s = make(&p, 8);
	memcpy(row, base, sizeof(row));
	opus_sampler_sample(s, row, hist, nh);
	CHECK(row[5] == -3.0f, "window: -1*2 - 0.5 - 2*0.25 = %g", row[5]);
	CHECK(row[0] == 2.0f && row[1] == -2.0f && row[3] == 0.0f,
		  "window: tokens before the window untouched");
	opus_sampler_free(s);

	/* repeat_last_n 0 disables; negative presence raises */
	p = params(0.0f);
	p.repetition_penalty = 3.0f;
	p.repeat_last_n = 0;
	s = make(&p, 8);
	memcpy(row, base, sizeof(row));
	opus_sampler_sample(s, row, hist, nh);
	CHECK(memcmp(row, base, sizeof(row)) == 0, "repeat_last_n 0 disables penalties");
	opus_sampler_free(s);

	p = params(0.0f);
	p.presence_penalty = -2.0f;
	p.repeat_last_n = -1;
	s = make(&p, 8);
	memcpy(row, base, sizeof(row));
	CHECK(opus_sampler_sample(s, row, hist, nh) == 0,
		  "token 0 raised to 4 ties token 4: lowest id");
	CHECK(row[1] == 0.0f, "negative presence raises: %g", row[1]);
	opus_sampler_free(s);

	/* the effect on the choice: penalising the argmax moves greedy away */
	p = params(0.0f);
	p.repetition_penalty = 1.5f;
	s = make(&p, 8);
	{
		const int32_t h4[] = {4};

		memcpy(row, base, sizeof(row));
		CHECK(opus_sampler_sample(s, row, h4, 1) == 6,
			  "repetition of token 4 moves greedy to token 6");
	}
	opus_sampler_free(s);
}

/* ---- seeds and the distribution ---- */

static void
test_seed(void)
{
	enum
	{
		NV = 100,
		N = 1000
	};
	float		base[NV];
	float		row[NV];
	int32_t		a[N],
				b[N],
				c[N];
	int			same = 0;

	for (int i = 0; i < NV; i++)
		base[i] = (float) (i % 7) * 0.1f;
	for (int run = 0; run < 3; run++)
	{
		struct opus_sampling_params p = params(1.0f);
		struct opus_sampler *s;
		int32_t    *out = run == 0 ? a : run == 1 ? b : c;

		p.seed = run == 2 ? 43 : 42;
		p.top_k = 50;
		s = make(&p, NV);
		for (int i = 0; i < N; i++)
		{
			memcpy(row, base, sizeof(row));
			out[i] = opus_sampler_sample(s, row, out, i);
		}
		opus_sampler_free(s);
	}
	CHECK(memcmp(a, b, sizeof(a)) == 0, "same seed gave a different sequence");
	for (int i = 0; i < N; i++)
		same += a[i] == c[i];
	CHECK(same < N / 10, "different seeds agree on %d of %d draws", same, N);

	/* greedy samples consume no randomness */
	{
		struct opus_sampling_params p = params(1.0f);
		struct opus_sampler *s1,
				   *s2;
		float		r[NV];
		int			diff = 0;

		s1 = make(&p, NV);
		s2 = make(&p, NV);
		for (int i = 0; i < 200; i++)
		{
			int32_t		t1,
						t2;

			memcpy(r, base, sizeof(r));
			t1 = opus_sampler_sample(s1, r, NULL, 0);
			memcpy(r, base, sizeof(r));
			t2 = opus_sampler_sample(s2, r, NULL, 0);
			diff += t1 != t2;
		}
		CHECK(diff == 0, "two samplers with one seed diverged");
		opus_sampler_free(s1);
		opus_sampler_free(s2);
	}
}

static void
test_distribution(void)
{
	const double prob[3] = {0.6, 0.3, 0.1};
	float		v[3];
	int			c[3];
	const int	n = 20000;
	struct opus_sampling_params p = params(1.0f);
	struct opus_sampler *s;
	double		q[3],
				qs = 0.0;

	for (int i = 0; i < 3; i++)
		v[i] = (float) log(prob[i]) + 3.0f;	/* shift: softmax is invariant */
	p.seed = 7;
	s = make(&p, 3);
	draw_counts(s, v, 3, n, c);
	for (int i = 0; i < 3; i++)
		CHECK(fabs((double) c[i] / n - prob[i]) < 0.015,
			  "T=1 token %d: %.4f vs %.2f", i, (double) c[i] / n, prob[i]);
	opus_sampler_free(s);

	/* temperature 2: p^(1/2) renormalised */
	for (int i = 0; i < 3; i++)
		qs += q[i] = sqrt(prob[i]);
	p.temperature = 2.0f;
	p.seed = 8;
	s = make(&p, 3);
	draw_counts(s, v, 3, n, c);
	for (int i = 0; i < 3; i++)
		CHECK(fabs((double) c[i] / n - q[i] / qs) < 0.015,
			  "T=2 token %d: %.4f vs %.4f", i, (double) c[i] / n, q[i] / qs);
	opus_sampler_free(s);

	/* tiny temperature is (almost) greedy and never NaN */
	p.temperature = 1e-38f;
	s = make(&p, 3);
	draw_counts(s, v, 3, 500, c);
	CHECK(c[0] == 500, "temperature 1e-38 is greedy (%d)", c[0]);
	opus_sampler_free(s);
}

/* ---- a vocabulary-sized row: timing, printed only ---- */

static void
test_speed(void)
{
	enum
	{
		NV = 152064
	};
	float	   *base = malloc(sizeof(float) * NV);
	float	   *row = malloc(sizeof(float) * NV);
	struct opus_sampling_params p = params(0.8f);
	struct opus_sampler *s;
	struct timespec t0,
				t1;
	uint64_t	x = 99;
	int			n = 50;

	for (int i = 0; i < NV; i++)
	{
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		base[i] = (float) ((x >> 33) % 100000) / 10000.0f;
	}
	p.top_k = 40;
	p.top_p = 0.9f;
	p.repetition_penalty = 1.1f;
	s = make(&p, NV);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++)
	{
		int32_t		t;

		memcpy(row, base, sizeof(float) * NV);
		t = opus_sampler_sample(s, row, NULL, 0);
		CHECK(t >= 0 && t < NV, "token in range");
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("top_k=40 top_p=0.9 over %d: %.3f ms/sample (sanitizer build)\n", NV,
		   ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6) / n);
	opus_sampler_free(s);

	p.top_k = 0;
	s = make(&p, NV);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++)
	{
		memcpy(row, base, sizeof(float) * NV);
		(void) opus_sampler_sample(s, row, NULL, 0);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("top_p=0.9 alone over %d: %.3f ms/sample (sanitizer build)\n", NV,
		   ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6) / n);
	opus_sampler_free(s);
	free(base);
	free(row);
}

int
main(void)
{
	test_validation();
	test_greedy();
	test_top_k();
	test_top_p();
	test_min_p();
	test_penalties();
	test_seed();
	test_distribution();
	test_speed();
	return UNIT_DONE();
}
