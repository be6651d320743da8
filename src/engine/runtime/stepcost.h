/*
 * stepcost.h - what a forward step costs as a function of its token count,
 * learnt from the steps the scheduler runs (stepcost.c).
 *
 * A step's time is not proportional to its tokens: every step reads all the
 * weights once and synchronises the thread pool once per operation, so a
 * step of one decode token and a step of 17 tokens cost about the same on an
 * idle machine, and a 512-token step costs far less than 512 decode steps.
 * The table keeps, per size class of the step (about sqrt(2) apart), the
 * moving average of the token count and of the time; a step's cost is read
 * off the table by linear interpolation between the measured classes
 * (monotone: a larger step is never predicted cheaper than a smaller one).
 *
 * Attention does not follow the token count: a prompt token at position
 * 2,000 attends to 2,000 keys, one at position 20 to 20, so 40 prompt
 * tokens deep in a long prompt cost three times what 40 near its start do
 * (256 against 88 ms with the default model on 2 cores).  Each step is
 * therefore also described by its attention pairs (query tokens times the
 * keys each attends to, summed), and the table keeps, next to each class's
 * averages, the class's mean pairs; one cost per pair, shared by all
 * classes, is learnt from how a class's times move with its pairs (a
 * decayed least-squares slope, damped while the pairs have varied little,
 * never negative).  A prediction is the class interpolation of the times
 * less their pairs' share, plus the cost of the step's own pairs; with no
 * variation in pairs seen it is the token table alone.
 *
 * Owned by one scheduler; not thread-safe.
 */
#ifndef OPUS_STEPCOST_H
#define OPUS_STEPCOST_H

#include <stdbool.h>
#include <stdint.h>

/* size classes: 2 per doubling, steps of 1 .. 2^20 tokens */
#define OPUS_STEPCOST_CLASSES 41

struct opus_stepcost
{
	double		n[OPUS_STEPCOST_CLASSES];	/* moving average of the token count */
	double		ms[OPUS_STEPCOST_CLASSES];	/* moving average of the step time */
	double		pairs[OPUS_STEPCOST_CLASSES];	/* moving average of the attention pairs */
	bool		seen[OPUS_STEPCOST_CLASSES];
	double		sxx;			/* decayed sums of pair and time deviations */
	double		sxy;			/* from their class means, for the slope */
	double		ms_per_pair;	/* the learnt cost of one attention pair, >= 0 */
};

/* An empty table (nothing known). */
void		opus_stepcost_init(struct opus_stepcost *c);

/*
 * Record a step of n_tokens (>= 1) with the given attention pairs (>= 0)
 * that took ms milliseconds.
 */
void		opus_stepcost_observe(struct opus_stepcost *c, int32_t n_tokens, double pairs, double ms);

/* Attention pairs of n query tokens at positions pos .. pos + n - 1. */
double		opus_stepcost_pairs(int32_t pos, int32_t n);

/*
 * The predicted time of a step of n_tokens (>= 1) with the given attention
 * pairs, or a negative value when nothing has been measured yet.  Below
 * the smallest measured class its time is that class's; above the
 * largest, that class's scaled by the token count.
 */
double		opus_stepcost_predict(const struct opus_stepcost *c, int32_t n_tokens, double pairs);

/*
 * The most prompt tokens, at most limit, starting at position pos, that
 * can join a step already carrying n_fixed tokens and pairs_fixed pairs
 * with the step predicted to take at most target_ms; 0 when not even one
 * fits; -1 when nothing has been measured yet.
 */
int32_t		opus_stepcost_fit(const struct opus_stepcost *c, double target_ms,
							  int32_t n_fixed, double pairs_fixed, int32_t pos, int32_t limit);

#endif
