/*
 * test_stepcost.c - the step cost table (runtime/stepcost.h) the step time
 * target reads: nothing known, interpolation between measured step sizes,
 * a monotone prediction under noisy measurements, the edges (below the
 * smallest and above the largest measured size), moving averages, and how
 * many tokens fit a target.
 *
 * The case the table exists for: steps of one decode token that take 60 ms
 * and 512-token steps that take 2,500 ms (4.9 ms per token).  Dividing the
 * target by the per-token cost of the large steps lets 50 prompt tokens
 * join a decode under a 250 ms target; on a loaded machine a 17-token step
 * was measured at 300 ms, and the table then lets 12 join.
 */
#include <math.h>
#include <string.h>

#include "runtime/stepcost.h"
#include "unit.h"

static bool
near(double a, double b)
{
	return fabs(a - b) < 1e-9 * (fabs(b) + 1.0);
}

static void
test_empty(void)
{
	struct opus_stepcost c;

	opus_stepcost_init(&c);
	CHECK(opus_stepcost_predict(&c, 1) < 0.0, "nothing measured: no prediction");
	CHECK(opus_stepcost_fit(&c, 250.0, 1, 512) == -1, "nothing measured: fit is -1");
	opus_stepcost_observe(&c, 0, 10.0);
	opus_stepcost_observe(&c, 5, -1.0);
	opus_stepcost_observe(&c, 5, NAN);
	CHECK(opus_stepcost_predict(&c, 1) < 0.0, "empty steps and bad times are not recorded");
}

static void
test_interpolate(void)
{
	struct opus_stepcost c;
	double		p;

	opus_stepcost_init(&c);
	opus_stepcost_observe(&c, 1, 60.0);
	opus_stepcost_observe(&c, 512, 2500.0);
	CHECK(near(opus_stepcost_predict(&c, 1), 60.0), "a measured size: %g", opus_stepcost_predict(&c, 1));
	CHECK(near(opus_stepcost_predict(&c, 512), 2500.0), "the other measured size");
	p = opus_stepcost_predict(&c, 17);
	CHECK(near(p, 60.0 + 16.0 * 2440.0 / 511.0), "between them, linear: %g", p);
	/* 60 + k * 2440 / 511 <= 250 for 1 + k tokens: k <= 39.79 */
	CHECK(opus_stepcost_fit(&c, 250.0, 1, 511) == 39, "fit behind one decode: %d",
		  opus_stepcost_fit(&c, 250.0, 1, 511));

	/* the 17-token step measured on a loaded machine */
	opus_stepcost_observe(&c, 17, 300.0);
	p = opus_stepcost_predict(&c, 13);
	CHECK(near(p, 60.0 + 12.0 * 240.0 / 16.0), "below the 17-token class: %g", p);
	/* 60 + (x - 1) * 15 <= 250: x <= 13.67, 12 beside the decode */
	CHECK(opus_stepcost_fit(&c, 250.0, 1, 511) == 12, "fit with small steps measured: %d",
		  opus_stepcost_fit(&c, 250.0, 1, 511));
	CHECK(opus_stepcost_fit(&c, 50.0, 1, 511) == 0, "a target below one decode step fits nothing");
	CHECK(opus_stepcost_fit(&c, 1e9, 1, 511) == 511, "a huge target fits the limit");
	CHECK(opus_stepcost_fit(&c, 1e9, 1, 0) == 0, "a limit of 0 fits nothing");
}

static void
test_edges(void)
{
	struct opus_stepcost c;

	opus_stepcost_init(&c);
	opus_stepcost_observe(&c, 512, 2500.0);
	CHECK(near(opus_stepcost_predict(&c, 1), 2500.0),
		  "below the smallest measured size: its time (never less)");
	CHECK(opus_stepcost_fit(&c, 250.0, 1, 511) == 0, "so nothing fits until small steps are measured");
	opus_stepcost_init(&c);
	opus_stepcost_observe(&c, 32, 200.0);
	CHECK(near(opus_stepcost_predict(&c, 64), 400.0), "above the largest: scaled by the tokens: %g",
		  opus_stepcost_predict(&c, 64));
	CHECK(near(opus_stepcost_predict(&c, 1 << 30), 200.0 * (double) (1 << 30) / 32.0),
		  "far above: still scaled");
}

static void
test_monotone(void)
{
	struct opus_stepcost c;
	double		last = 0.0;
	bool		ok = true;

	opus_stepcost_init(&c);
	/* noise: the 8-token steps happened to run faster than the 4-token ones */
	opus_stepcost_observe(&c, 4, 100.0);
	opus_stepcost_observe(&c, 8, 80.0);
	opus_stepcost_observe(&c, 64, 300.0);
	for (int n = 1; n <= 256; n++)
	{
		double		p = opus_stepcost_predict(&c, n);

		if (p < last)
			ok = false;
		last = p;
	}
	CHECK(ok, "the prediction never falls as the step grows");
	CHECK(near(opus_stepcost_predict(&c, 8), 100.0), "a cheaper larger class reads as the smaller one's time");
}

static void
test_average(void)
{
	struct opus_stepcost c;

	opus_stepcost_init(&c);
	opus_stepcost_observe(&c, 1, 60.0);
	opus_stepcost_observe(&c, 1, 160.0);
	CHECK(near(opus_stepcost_predict(&c, 1), 90.0), "moving average, 0.3 to the new step: %g",
		  opus_stepcost_predict(&c, 1));
	/* 16 and 17 tokens share a class; 22 does not (16 * sqrt(2) = 22.6) */
	opus_stepcost_init(&c);
	opus_stepcost_observe(&c, 16, 100.0);
	opus_stepcost_observe(&c, 17, 100.0);
	opus_stepcost_observe(&c, 23, 200.0);
	CHECK(near(opus_stepcost_predict(&c, 23), 200.0), "23 tokens: its own class");
	CHECK(near(opus_stepcost_predict(&c, 16), 100.0), "16 and 17: one class, below its mean: %g",
		  opus_stepcost_predict(&c, 16));
}

int
main(void)
{
	test_empty();
	test_interpolate();
	test_edges();
	test_monotone();
	test_average();
	return UNIT_DONE();
}
