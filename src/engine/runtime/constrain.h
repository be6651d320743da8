/*
 * constrain.h - grammar-constrained decoding on top of text/grammar.h: the
 * grammar vocabulary of a tokenizer, the mask applied to a logits row, and
 * the automaton advanced by a sampled token.
 *
 * Per step and sequence: opus_grammar_mask(state, c->vocab, mask) (may run
 * on any thread: read-only), then opus_constrain_apply() sets every token
 * the grammar does not allow to -inf (end-of-generation tokens are allowed
 * exactly when the state accepts), the sampler picks among the rest, and
 * opus_constrain_accept() feeds the chosen token's bytes.
 */
#ifndef OPUS_CONSTRAIN_H
#define OPUS_CONSTRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "text/grammar.h"
#include "text/tokenizer.h"

struct opus_constrain
{
	const struct opus_tokenizer *tok;
	opus_grammar_vocab *vocab;	/* every token but end-of-generation ones */
	int32_t		n_vocab;
	int32_t    *eog;			/* end-of-generation ids */
	int32_t		n_eog;
};

enum opus_status opus_constrain_create(const struct opus_tokenizer *t,
									   struct opus_constrain **out,
									   struct opus_error *err);
void		opus_constrain_free(struct opus_constrain *c);

/* Words of a mask (n_vocab bits). */
static inline int32_t
opus_constrain_mask_words(const struct opus_constrain *c)
{
	return (c->n_vocab + 31) / 32;
}

/*
 * logits[t] = -inf for every token not allowed; returns the number of
 * tokens left (0: the grammar allows nothing here).
 */
int32_t		opus_constrain_apply(const struct opus_constrain *c,
								 const opus_grammar_state *s,
								 const uint32_t *mask, float *logits);

/* Feed token tok (end-of-generation: nothing).  false when rejected. */
bool		opus_constrain_accept(const struct opus_constrain *c,
								  opus_grammar_state *s, int32_t tok);

#endif							/* OPUS_CONSTRAIN_H */
