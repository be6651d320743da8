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
 *
 * Attention pairs: steps of about 40 tokens whose time grows with their
 * pairs as measured with the default model (88 ms at 2,300 pairs, 256 ms
 * at 90,500: 1.9 us a pair) teach the slope, and a prompt deep in its
 * context then gets fewer tokens than one near its start; decode steps
 * whose contexts move by a few tokens teach nearly nothing from timing
 * noise.
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
	CHECK(opus_stepcost_predict(&c, 1, 0.0) < 0.0, "nothing measured: no prediction");
	CHECK(opus_stepcost_fit(&c, 250.0, 1, 0.0, 0, 512) == -1, "nothing measured: fit is -1");
	opus_stepcost_observe(&c, 0, 0.0, 10.0);
	opus_stepcost_observe(&c, 5, 0.0, -1.0);
	opus_stepcost_observe(&c, 5, 0.0, NAN);
	CHECK(opus_stepcost_predict(&c, 1, 0.0) < 0.0, "empty steps and bad times are not recorded");
}

static void
test_interpolate(void)
{
	struct opus_stepcost c;
	double		p;

	opus_stepcost_init(&c);
	opus_stepcost_observe(&c, 1, 0.0, 60.0);
	opus_stepcost_observe(&c, 512, 0.0, 2500.0);
	CHECK(near(opus_stepcost_predict(&c, 1, 0.0), 60.0), "a measured size: %g", opus_stepcost_predict(&c, 1, 0.0));
	CHECK(near(opus_stepcost_predict(&c, 512, 0.0), 2500.0), "the other measured size");
	p = opus_stepcost_predict(&c, 17, 0.0);
	CHECK(near(p, 60.0 + 16.0 * 2440.0 / 511.0), "between them, linear: %g", p);
	/* 60 + k * 2440 / 511 <= 250 for 1 + k tokens: k <= 39.79 */
	CHECK(opus_stepcost_fit(&c, 250.0, 1, 0.0, 0, 511) == 39, "fit behind one decode: %d",
		  opus_stepcost_fit(&c, 250.0, 1, 0.0, 0, 511));

	/* the 17-token step measured on a loaded machine */
	opus_stepcost_observe(&c, 17, 0.0, 300.0);
	p = opus_stepcost_predict(&c, 13, 0.0);
	CHECK(near(p, 60.0 + 12.0 * 240.0 / 16.0), "below the 17-token class: %g", p);
	/* 60 + (x - 1) * 15 <= 250: x <= 13.67, 12 beside the decode */
	CHECK(opus_stepcost_fit(&c, 250.0, 1, 0.0, 0, 511) == 12, "fit with small steps measured: %d",
		  opus_stepcost_fit(&c, 250.0, 1, 0.0, 0, 511));
	CHECK(opus_stepcost_fit(&c, 50.0, 1, 0.0, 0, 511) == 0, "a target below one decode step fits nothing");
	CHECK(opus_stepcost_fit(&c, 1e9, 1, 0.0, 0, 511) == 511, "a huge target fits the limit");
	CHECK(opus_stepcost_fit(&c, 1e9, 1, 0.0, 0, 0) == 0, "a limit of 0 fits nothing");
}

static void
test_edges(void)
{
	struct opus_stepcost c;

	opus_stepcost_init(&c);
	opus_stepcost_observe(&c, 512, 0.0, 2500.0);
	CHECK(near(opus_stepcost_predict(&c, 1, 0.0), 2500.0),
		  "below the smallest measured size: its time (never less)");
	CHECK(opus_stepcost_fit(&c, 250.0, 1, 0.0, 0, 511) == 0, "so nothing fits until small steps are measured");
	opus_stepcost_init(&c);
	opus_stepcost_observe(&c, 32, 0.0, 200.0);
	CHECK(near(opus_stepcost_predict(&c, 64, 0.0), 400.0), "above the largest: scaled by the tokens: %g",
		  opus_stepcost_predict(&c, 64, 0.0));
	CHECK(near(opus_stepcost_predict(&c, 1 << 30, 0.0), 200.0 * (double) (1 << 30) / 32.0),
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
	opus_stepcost_observe(&c, 4, 0.0, 100.0);
	opus_stepcost_observe(&c, 8, 0.0, 80.0);
	opus_stepcost_observe(&c, 64, 0.0, 300.0);
	for (int n = 1; n <= 256; n++)
	{
		double		p = opus_stepcost_predict(&c, n, 0.0);

		if (p < last)
			ok = false;
		last = p;
	}
	CHECK(ok, "the prediction never falls as the step grows");
	CHECK(near(opus_stepcost_predict(&c, 8, 0.0), 100.0), "a cheaper larger class reads as the smaller one's time");
}

static void
test_average(void)
{
	struct opus_stepcost c;

	opus_stepcost_init(&c);
	opus_stepcost_observe(&c, 1, 0.0, 60.0);
	opus_stepcost_observe(&c, 1, 0.0, 160.0);
	CHECK(near(opus_stepcost_predict(&c, 1, 0.0), 90.0), "moving average, 0.3 to the new step: %g",
		  opus_stepcost_predict(&c, 1, 0.0));
	/* 16 and 17 tokens share a class; 22 does not (16 * sqrt(2) = 22.6) */
	opus_stepcost_init(&c);
	opus_stepcost_observe(&c, 16, 0.0, 100.0);
	opus_stepcost_observe(&c, 17, 0.0, 100.0);
	opus_stepcost_observe(&c, 23, 0.0, 200.0);
	CHECK(near(opus_stepcost_predict(&c, 23, 0.0), 200.0), "23 tokens: its own class");
	CHECK(near(opus_stepcost_predict(&c, 16, 0.0), 100.0), "16 and 17: one class, below its mean: %g",
		  opus_stepcost_predict(&c, 16, 0.0));
}

/* deterministic noise in [-1, 1] */
static double
jitter(int i)
{
	return (double) ((i * 7919) % 201 - 100) / 100.0;
}

static void
test_pairs(void)
{
	struct opus_stepcost c;
	double		p_shallow,
				p_deep;
	int32_t		f_shallow,
				f_deep;
	bool		old_ok = true;

	opus_stepcost_init(&c);
	CHECK(near(opus_stepcost_pairs(0, 1), 1.0) && near(opus_stepcost_pairs(10, 1), 11.0) &&
		  near(opus_stepcost_pairs(100, 4), 4.0 * 100.0 + 10.0) && opus_stepcost_pairs(5, 0) == 0.0,
		  "pairs: each query attends to the keys up to itself");
	opus_stepcost_observe(&c, 1, 12.0, 9.0);	/* a decode */
	/* 40-token steps down a 2,300-token prompt: 80 ms + 1.9 us per pair, with noise */
	for (int i = 0; i < 120; i++)
	{
		int32_t		pos = (i * 37) % 2300;
		double		pr = opus_stepcost_pairs(pos, 40) + 12.0;

		opus_stepcost_observe(&c, 41, pr, 80.0 + 0.0019 * pr + 4.0 * jitter(i));
	}
	CHECK(fabs(c.ms_per_pair - 0.0019) < 0.0002, "the slope is learnt: %g ms a pair", c.ms_per_pair);
	p_shallow = opus_stepcost_predict(&c, 41, opus_stepcost_pairs(0, 40) + 12.0);
	p_deep = opus_stepcost_predict(&c, 41, opus_stepcost_pairs(2260, 40) + 12.0);
	CHECK(fabs(p_shallow - 81.6) < 8.0 && fabs(p_deep - 255.4) < 12.0,
		  "40 tokens near the start %g ms, deep %g ms", p_shallow, p_deep);
	f_shallow = opus_stepcost_fit(&c, 250.0, 1, 12.0, 0, 511);
	f_deep = opus_stepcost_fit(&c, 250.0, 1, 12.0, 2300, 511);
	CHECK(f_deep < 40 && f_deep >= 30 && f_shallow > f_deep,
		  "under 250 ms a deep prompt gets fewer tokens (%d) than a shallow one (%d)", f_deep, f_shallow);
	CHECK(opus_stepcost_predict(&c, 1, 5000.0) > opus_stepcost_predict(&c, 1, 12.0),
		  "a decode with a long context costs more");

	/* decodes whose contexts move a token per step, with timing noise */
	opus_stepcost_init(&c);
	for (int i = 0; i < 300; i++)
		opus_stepcost_observe(&c, 4, 400.0 + (double) (i % 50), 30.0 + 5.0 * jitter(i));
	CHECK(c.ms_per_pair * 50000.0 < 5.0, "small variations in pairs teach next to nothing: %g ms for 50,000",
		  c.ms_per_pair * 50000.0);
	CHECK(c.ms_per_pair >= 0.0, "never a negative slope");

	/* without pairs the table is the token table */
	opus_stepcost_init(&c);
	opus_stepcost_observe(&c, 1, 0.0, 60.0);
	opus_stepcost_observe(&c, 512, 0.0, 2500.0);
	for (int n = 1; n <= 512; n += 37)
		if (!near(opus_stepcost_predict(&c, n, 0.0), opus_stepcost_predict(&c, n, 1e6)))
			old_ok = false;
	CHECK(old_ok && c.ms_per_pair == 0.0, "no pairs measured: pairs change nothing");
}

int
main(void)
{
	test_empty();
	test_interpolate();
	test_edges();
	test_monotone();
	test_average();
	test_pairs();
	return UNIT_DONE();
}
