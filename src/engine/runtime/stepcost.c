/*
 * stepcost.c - the step cost table (stepcost.h): per size class of a step,
 * moving averages of its token count and its time; predictions interpolate
 * between the classes measured.
 */
#include <string.h>

#include "runtime/stepcost.h"

/* weight of a new step in its class's moving averages */
#define STEPCOST_ALPHA 0.3
/* how much of the slope's sums each new step keeps (about 100 steps) */
#define STEPCOST_DECAY 0.99
/*
 * Damping of the slope, in squared pairs: variations of a few hundred
 * pairs (decodes' contexts moving by a token per step) with timing noise
 * teach nothing; steps whose pairs differ by thousands from their class's
 * (prompt chunks at different depths) do.
 */
#define STEPCOST_DAMP 1e6

/* Class of a step of n tokens: 2 * log2(n), rounded down (n >= 1). */
static int
stepcost_class(int32_t n)
{
	int			b = 0;
	int			k;

	if (n < 1)
		n = 1;
	while (b < 31 && ((int64_t) 1 << (b + 1)) <= n)
		b++;
	/* the upper half of [2^b, 2^(b+1)) starts at 2^b * sqrt(2) */
	k = 2 * b + ((int64_t) n * n >= ((int64_t) 1 << (2 * b + 1)) ? 1 : 0);
	return k < OPUS_STEPCOST_CLASSES ? k : OPUS_STEPCOST_CLASSES - 1;
}

void
opus_stepcost_init(struct opus_stepcost *c)
{
	memset(c, 0, sizeof(*c));
}

double
opus_stepcost_pairs(int32_t pos, int32_t n)
{
	if (n <= 0)
		return 0.0;
	if (pos < 0)
		pos = 0;
	/* keys pos + 1 .. pos + n, each query attending to itself and before */
	return (double) n * (double) pos + (double) n * ((double) n + 1.0) / 2.0;
}

void
opus_stepcost_observe(struct opus_stepcost *c, int32_t n_tokens, double pairs, double ms)
{
	int			k;
	double		dp,
				dm;

	if (n_tokens < 1 || !(ms >= 0.0) || !(pairs >= 0.0))
		return;
	k = stepcost_class(n_tokens);
	if (!c->seen[k])
	{
		c->n[k] = (double) n_tokens;
		c->ms[k] = ms;
		c->pairs[k] = pairs;
		c->seen[k] = true;
		return;
	}
	/* the slope: how this step's time departs from its class's with its pairs */
	dp = pairs - c->pairs[k];
	dm = ms - c->ms[k];
	c->sxx = STEPCOST_DECAY * c->sxx + dp * dp;
	c->sxy = STEPCOST_DECAY * c->sxy + dp * dm;
	c->ms_per_pair = c->sxy > 0.0 ? c->sxy / (c->sxx + STEPCOST_DAMP) : 0.0;
	c->n[k] += STEPCOST_ALPHA * ((double) n_tokens - c->n[k]);
	c->ms[k] += STEPCOST_ALPHA * dm;
	c->pairs[k] += STEPCOST_ALPHA * dp;
}

/* A class's time without its pairs' share (never below 0). */
static double
stepcost_base(const struct opus_stepcost *c, int k)
{
	double		b = c->ms[k] - c->ms_per_pair * c->pairs[k];

	return b > 0.0 ? b : 0.0;
}

double
opus_stepcost_predict(const struct opus_stepcost *c, int32_t n_tokens, double pairs)
{
	double		x = (double) (n_tokens < 1 ? 1 : n_tokens);
	double		env = 0.0;		/* running maximum of the times: monotone */
	double		lo_n = 0.0,
				lo_ms = -1.0;
	double		att = pairs > 0.0 ? c->ms_per_pair * pairs : 0.0;

	for (int k = 0; k < OPUS_STEPCOST_CLASSES; k++)
	{
		double		b;

		if (!c->seen[k])
			continue;
		b = stepcost_base(c, k);
		if (b > env)
			env = b;
		if (c->n[k] <= x)
		{
			lo_n = c->n[k];
			lo_ms = env;
			continue;
		}
		/* the first class above x */
		if (lo_ms < 0.0)
			return env + att;	/* below every measured class */
		if (c->n[k] <= lo_n)
			return env + att;
		return lo_ms + (env - lo_ms) * (x - lo_n) / (c->n[k] - lo_n) + att;
	}
	if (lo_ms < 0.0)
		return -1.0;			/* nothing measured */
	return lo_ms * x / lo_n + att;	/* above every measured class */
}

int32_t
opus_stepcost_fit(const struct opus_stepcost *c, double target_ms,
				  int32_t n_fixed, double pairs_fixed, int32_t pos, int32_t limit)
{
	int32_t		lo = 0,
				hi;

	if (opus_stepcost_predict(c, 1, 0.0) < 0.0)
		return -1;
	if (limit <= 0)
		return 0;
	if (n_fixed < 0)
		n_fixed = 0;
	if (!(pairs_fixed >= 0.0))
		pairs_fixed = 0.0;
	/* the prediction grows with the token count and the pairs: bisect */
	hi = limit;
	if (opus_stepcost_predict(c, n_fixed + hi, pairs_fixed + opus_stepcost_pairs(pos, hi)) <= target_ms)
		return hi;
	while (hi - lo > 1)
	{
		int32_t		mid = lo + (hi - lo) / 2;

		if (opus_stepcost_predict(c, n_fixed + mid, pairs_fixed + opus_stepcost_pairs(pos, mid)) <= target_ms)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}
