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
	bool		seen[OPUS_STEPCOST_CLASSES];
};

/* An empty table (nothing known). */
void		opus_stepcost_init(struct opus_stepcost *c);

/* Record a step of n_tokens (>= 1) that took ms milliseconds. */
void		opus_stepcost_observe(struct opus_stepcost *c, int32_t n_tokens, double ms);

/*
 * The predicted time of a step of n_tokens (>= 1), or a negative value
 * when nothing has been measured yet.  Below the smallest measured class
 * it is that class's time; above the largest, that class's time scaled by
 * the token count.
 */
double		opus_stepcost_predict(const struct opus_stepcost *c, int32_t n_tokens);

/*
 * The most tokens, at most limit, that can join a step already carrying
 * n_fixed tokens with the step predicted to take at most target_ms; 0 when
 * not even one fits; -1 when nothing has been measured yet.
 */
int32_t		opus_stepcost_fit(const struct opus_stepcost *c, double target_ms,
							  int32_t n_fixed, int32_t limit);

#endif
