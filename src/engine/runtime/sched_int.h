/*
 * sched_int.h - what the scheduler's files share: a request's state
 * (struct sched_req), the scheduler (struct opus_sched) and its fair-share
 * tenants, and the functions one file calls in another.  Only
 * scheduler.c (lifecycle, queue, submit, the step), sched_text.c (events,
 * text and stop strings, finishing) and sched_admit.c (admission, prefix
 * cache, aging, preemption) include it.
 */
#ifndef OPUS_SCHED_INT_H
#define OPUS_SCHED_INT_H

#include "runtime/scheduler.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/*
 * A context's model, parameters, threads and KV pool through model.h's
 * accessors and kv.h (the prefix cache), never the context struct.
 */
#include "base/threadpool.h"
#include "model/kv.h"
#include "runtime/constrain.h"
#include "runtime/masker.h"
#include "runtime/stepcost.h"
#include "text/grammar.h"

struct sched_req
{
	uint64_t	id;
	uint64_t	arrival;		/* submit order: FIFO within a priority */
	uint64_t	admitted;		/* admission order (preemption victims) */
	int32_t		priority;
	int32_t		eff_priority;	/* priority after aging (queue order, preemption) */
	int32_t		min_priority;	/* aging floor */
	int32_t		tenant;			/* index into s->tenants */
	uint64_t	root;			/* parent hash of its first block (its cache scope) */
	bool		running;		/* in s->run (else in s->queue) */
	bool		cancelled;
	bool		finished;		/* DONE emitted; freed at the end of the step */
	bool		ever_admitted;
	bool		have_token;

	int32_t    *tokens;			/* [n_prompt + max_tokens] prompt, generated */
	int32_t		n_prompt;
	int32_t		n_tokens;
	int32_t		max_tokens;
	int32_t		n_cached;		/* prompt tokens from the prefix cache */
	int32_t		n_charged;		/* positions its tenant was charged for computing */
	struct opus_seq seq;
	uint64_t   *hashes;			/* chain hashes of full token blocks [0, n_hashed) */
	int32_t		n_hashed;
	int32_t		n_published;	/* seq blocks [0, n_published) are in the prefix cache */
	struct opus_sampler *sampler;
	bool		ignore_eos;
	opus_grammar *grammar;		/* a cache reference, or NULL */
	opus_grammar_state *gstate;
	uint32_t   *gmask;			/* this step's allowed tokens */
	bool		gmask_ok;		/* gmask is gstate's (cleared when it advances) */

	int			n_stop;
	char	   *stop[OPUS_MAX_STOP];	/* into stop_buf */
	int			stop_len[OPUS_MAX_STOP];
	char	   *stop_buf;

	struct opus_utf8_stream utf8;
	char	   *text;			/* generated text not emitted yet */
	int32_t		n_text;
	int32_t		cap_text;
	int32_t		n_text_tokens;	/* tokens since the last TEXT event */

	double		t_submit;		/* ms, CLOCK_MONOTONIC */
	double		t_queued;		/* last (re)entry into the queue */
	double		t_admit;
	double		t_first;

	float	   *logits;			/* this step's row, or NULL */
};

struct opus_sched
{
	struct opus_ctx *ctx;
	const struct opus_tokenizer *tok;
	int32_t		n_vocab;
	int32_t		block_size;
	int32_t		n_ctx;
	int32_t		max_batch;
	int64_t		n_blocks;
	uint64_t	root_hash;		/* parent hash of every first block */
	double		aging_ms;		/* waiting time per class of promotion, 0 = off */
	double		starve_ms;		/* queue wait after which nobody overtakes, 0 = never */
	double		fair_credit;	/* bound on a non-backlogged tenant's lag, 0 = none */
	double		hold_ms;		/* longest anticipatory hold, 0 = off */
	double		step_target_ms; /* prefill bound while decoding, 0 = off */
	struct opus_stepcost cost;	/* measured step time by token count */
	bool		prefill_lean;	/* the last step gave waiting prompts less than a block */
	double		step_pairs;		/* attention pairs of the step being built (stepcost.h) */
	double		step_ms;		/* measured step time (EWMA), 0 = unknown */
	opus_event_fn cb;
	void	   *user;

	struct sched_req **queue;	/* sorted by (priority, arrival) */
	int			n_queue;
	int			cap_queue;
	struct sched_req **run;		/* admission order */
	int			n_run;
	int			cap_run;
	uint64_t	next_arrival;
	uint64_t	next_admit;

	/* per-step scratch */
	int32_t    *match;			/* [blocks_for(n_ctx)] prefix-cache lookup result */
	struct opus_batch_item *items;	/* [max_batch] */
	struct sched_req **item_req;	/* [max_batch] */
	float	   *logits;			/* [cap_logit_rows][n_vocab] */
	int			cap_logit_rows;
	char	   *piece;			/* token piece */
	int			cap_piece;
	char	   *utf8_out;		/* cap_piece + 8 */

	struct opus_constrain *cons;	/* grammar vocabulary, built at the first grammar */
	struct sched_req **greqs;	/* [max_batch] this step's constrained rows */
	const opus_grammar_state **gstates; /* [max_batch] their states, */
	uint32_t  **gmasks;			/* [max_batch] and masks (the masker's job) */
	int			n_greqs;		/* rows of the open masker job, 0 none */
	struct opus_masker *masker; /* started with the first grammar */
	bool		mask_overlap;	/* masks during the forward pass (default) */

	struct sched_tenant *tenants;	/* never shrinks; one per tenant id seen */
	int			n_tenants;
	int			cap_tenants;

	struct opus_sched_stats stats;
};

/* A fair-share tenant: its virtual token counter. */
struct sched_tenant
{
	uint32_t	id;
	uint32_t	weight;
	double		vtc;			/* service / weight, in virtual tokens */
	int32_t		n_live;			/* requests queued or running */
	double		t_idle;			/* when n_live last became 0 */
	double		think_ms;		/* smoothed t_idle to next submit, < 0 = no sample */
	double		hold_until;		/* its anticipatory hold ends (ms), while n_live 0 */
	int64_t		hold_blocks;	/* blocks held for it until then */
};

static inline double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static inline int64_t
blocks_for(const struct opus_sched *s, int64_t n_pos)
{
	return (n_pos + s->block_size - 1) / s->block_size;
}

/* scheduler.c */
double		sched_tenant_vtc(const struct opus_sched *s, const struct sched_req *r);
void		sched_queue_insert(struct opus_sched *s, struct sched_req *r);

/* sched_text.c */
void		sched_emit_done(struct opus_sched *s, struct sched_req *r, enum opus_finish finish,
							const struct opus_error *error);
void		sched_release_seq(struct opus_sched *s, struct sched_req *r);
void		sched_fail_req(struct opus_sched *s, struct sched_req *r, const struct opus_error *e);
void		sched_accept_token(struct opus_sched *s, struct sched_req *r, int32_t tok);

/* sched_admit.c */
void		sched_hold_for(struct opus_sched *s, const struct sched_req *r);
void		sched_publish_blocks(struct opus_sched *s, struct sched_req *r);
void		sched_age_queue(struct opus_sched *s);
void		sched_admit_queued(struct opus_sched *s);
bool		sched_preempt_one(struct opus_sched *s, const struct sched_req *h);

#endif
