/*
 * stepcost.c - the step cost table (stepcost.h): per size class of a step,
 * moving averages of its token count and its time; predictions interpolate
 * between the classes measured.
 */
#include <string.h>

#include "runtime/stepcost.h"

/* weight of a new step in its class's moving averages */
#define STEPCOST_ALPHA 0.3

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

void
opus_stepcost_observe(struct opus_stepcost *c, int32_t n_tokens, double ms)
{
	int			k;

	if (n_tokens < 1 || !(ms >= 0.0))
		return;
	k = stepcost_class(n_tokens);
	if (!c->seen[k])
	{
		c->n[k] = (double) n_tokens;
		c->ms[k] = ms;
		c->seen[k] = true;
		return;
	}
	c->n[k] += STEPCOST_ALPHA * ((double) n_tokens - c->n[k]);
	c->ms[k] += STEPCOST_ALPHA * (ms - c->ms[k]);
}

double
opus_stepcost_predict(const struct opus_stepcost *c, int32_t n_tokens)
{
	double		x = (double) (n_tokens < 1 ? 1 : n_tokens);
	double		env = 0.0;		/* running maximum of the times: monotone */
	double		lo_n = 0.0,
				lo_ms = -1.0;

	for (int k = 0; k < OPUS_STEPCOST_CLASSES; k++)
	{
		if (!c->seen[k])
			continue;
		if (c->ms[k] > env)
			env = c->ms[k];
		if (c->n[k] <= x)
		{
			lo_n = c->n[k];
			lo_ms = env;
			continue;
		}
		/* the first class above x */
		if (lo_ms < 0.0)
			return env;			/* below every measured class */
		if (c->n[k] <= lo_n)
			return env;
		return lo_ms + (env - lo_ms) * (x - lo_n) / (c->n[k] - lo_n);
	}
	if (lo_ms < 0.0)
		return -1.0;			/* nothing measured */
	return lo_ms * x / lo_n;	/* above every measured class */
}

int32_t
opus_stepcost_fit(const struct opus_stepcost *c, double target_ms,
				  int32_t n_fixed, int32_t limit)
{
	int32_t		lo = 0,
				hi;

	if (opus_stepcost_predict(c, 1) < 0.0)
		return -1;
	if (limit <= 0)
		return 0;
	if (n_fixed < 0)
		n_fixed = 0;
	/* the prediction grows with the token count: bisect */
	hi = limit;
	if (opus_stepcost_predict(c, n_fixed + hi) <= target_ms)
		return hi;
	while (hi - lo > 1)
	{
		int32_t		mid = lo + (hi - lo) / 2;

		if (opus_stepcost_predict(c, n_fixed + mid) <= target_ms)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}
