/*
 * sampler.h - turning a row of logits into the next token.
 *
 * Order of operations (as llama.cpp's common sampler chain):
 * penalties (repetition, presence, frequency over the last repeat_last_n
 * tokens) -> greedy if temperature == 0 -> top_k -> top_p -> min_p ->
 * temperature -> softmax -> draw with the request's own RNG.
 * The RNG is seeded per request, so the same seed gives the same text
 * whatever else the engine is doing.
 */
#ifndef OPUS_SAMPLER_H
#define OPUS_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "params.h"
#include "base/status.h"

struct opus_sampling_params
{
	/* ranges and defaults: OPUS_PARAMS_SAMPLING in params.h */
	float		temperature;	/* 0 = greedy */
	float		top_p;			/* 1 = off */
	float		min_p;			/* 0 = off */
	int32_t		top_k;			/* 0 = off */
	float		presence_penalty;
	float		frequency_penalty;
	float		repetition_penalty;	/* 1 = off */
	int32_t		repeat_last_n;	/* tokens considered by penalties; -1 = all */
	uint64_t	seed;
};

/* Defaults: greedy-free OpenAI defaults (temperature 1, top_p 1, ...). */
void		opus_sampling_defaults(struct opus_sampling_params *p);

/* OPUS_ERR_INVALID_ARG naming the first out-of-range field (the ranges:
 * the table in params.h). */
enum opus_status opus_sampling_validate(const struct opus_sampling_params *p,
										struct opus_error *err);

/* OPUS_ERR_INVALID_ARG: "<name> must be <range> (got <v>)". */
enum opus_status opus_param_error(struct opus_error *err, enum opus_param_id id,
								  double v);

struct opus_sampler;

enum opus_status opus_sampler_create(const struct opus_sampling_params *p,
									 int32_t n_vocab,
									 struct opus_sampler **out,
									 struct opus_error *err);
void		opus_sampler_free(struct opus_sampler *s);

/*
 * Pick the next token.  logits (n_vocab) may be modified in place; with
 * temperature 0 it holds the penalised logits (NaN as -inf) on return.
 * history: the tokens so far (prompt and generated) for penalties.
 * NaN logits count as -inf; if any logit is +inf only those tokens remain
 * (equally likely); if none is above -inf the result is token 0.
 */
int32_t		opus_sampler_sample(struct opus_sampler *s, float *logits,
								const int32_t *history, int64_t n_history);

#endif							/* OPUS_SAMPLER_H */
