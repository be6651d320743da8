/*
 * masker.h - the allowed-token masks of a step's constrained sequences,
 * computed while the forward pass runs.
 *
 * A sequence's mask depends only on its automaton state, which is fixed
 * from the moment its last token was accepted until the token the coming
 * forward pass yields is sampled: the masks of a step can be computed at
 * the same time as the step's forward pass.  opus_masker_start hands a list
 * of (state, mask) pairs to the masker's helper thread and returns at once;
 * the caller runs the forward pass; opus_masker_finish then takes the masks
 * the helper has not claimed yet, shared out over the forward pass's thread
 * pool, and waits for the at most one mask the helper is still computing.
 * With overlap off, start only records the list and finish computes every
 * mask over the pool (the path before the helper existed).
 *
 * Masks are claimed one at a time from an atomic counter, and each is
 * opus_grammar_mask of its own state, read-only on the state: the result does
 * not depend on which thread computed which mask or when (test_grammar holds
 * it bit for bit to the plain walk).
 *
 * Contract: between start and finish, the states must not change, the state
 * and mask arrays and the masks themselves must stay allocated, and the
 * caller does not read the masks.  One caller thread per masker.
 */
#ifndef OPUS_MASKER_H
#define OPUS_MASKER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "text/grammar.h"

struct opus_masker;

/* Create a masker and start its helper thread. */
enum opus_status opus_masker_create(struct opus_masker **out, struct opus_error *err);
/* Stop and join the helper (no job may be open). */
void		opus_masker_free(struct opus_masker *m);

/*
 * Open a job: masks[i] = opus_grammar_mask(states[i], v, masks[i]) for
 * i < n.  overlap: wake the helper now; otherwise leave all to finish.
 * No other job may be open.
 */
void		opus_masker_start(struct opus_masker *m, const opus_grammar_vocab *v,
							  const opus_grammar_state *const *states,
							  uint32_t *const *masks, int n, bool overlap);

/*
 * Close the job: compute what is left (over pool when it has more than one
 * thread and more than one mask is left; pool may be NULL) and wait for the
 * helper.  Every mask is complete on return.  Returns how many masks the
 * helper computed (for tests and statistics).
 */
int			opus_masker_finish(struct opus_masker *m, struct opus_pool *pool);

#endif							/* OPUS_MASKER_H */
