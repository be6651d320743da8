/*
 * scheduler.h - the generation scheduler: requests in, token and completion
 * events out, one batched forward pass per step.
 *
 * The caller (the `serve` loop, or the `run` CLI) owns the thread that calls
 * every function here; the scheduler is not thread-safe.  Each
 * opus_sched_step() admits queued requests (by priority, then arrival) while
 * KV blocks allow, runs one opus_forward() over a decode token of every
 * generating sequence plus prefill chunks of new ones up to the token budget,
 * samples, checks stop conditions, and emits events through the callback
 * before returning.  A cancelled request is dropped and its blocks freed at
 * the next step boundary.
 */
#ifndef OPUS_SCHEDULER_H
#define OPUS_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "runtime/sampler.h"
#include "base/status.h"

#define OPUS_MAX_STOP OPUS_PARAM_MAX_STOP	/* stop strings per request */
#define OPUS_MAX_STOP_LEN OPUS_PARAM_MAX_STOP_LEN	/* bytes per stop string */
#define OPUS_SCHED_AGING_MS 2000.0	/* default: a waiting request moves up one class per 2 s */
#define OPUS_SCHED_MAX_WEIGHT 1000	/* fair-share weight upper bound */
#define OPUS_SCHED_FAIR_MARGIN 64.0	/* virtual tokens: fair-share preemption threshold */
#define OPUS_SCHED_FAIR_IDLE_MS 500.0	/* a tenant idle this long loses its banked credit */
#define OPUS_SCHED_FAIR_CREDIT 256.0	/* virtual tokens: the most a tenant with nothing
										 * queued may be behind those with requests queued */
#define OPUS_SCHED_STARVE_MS 10000.0	/* default: after 10 s in the queue nobody overtakes */
#define OPUS_SCHED_HOLD_MS 500.0	/* default: the longest a finished tenant's room is held */

enum opus_finish
{
	OPUS_FINISH_NONE = 0,
	OPUS_FINISH_STOP = 1,		/* EOS/EOT or a stop string */
	OPUS_FINISH_LENGTH = 2,		/* max_tokens or context full */
	OPUS_FINISH_CANCELLED = 3,
	OPUS_FINISH_ERROR = 4
};

struct opus_gen_params
{
	struct opus_sampling_params sampling;
	/* ranges: OPUS_PARAMS_REQUEST and _SESSION in params.h */
	int32_t		max_tokens;
	int32_t		priority;		/* 0 = interactive (first), larger = later */
	int32_t		min_priority;	/* aging never lifts it above this class (<= priority) */
	uint64_t	cache_scope;	/* prefix-cache scope: different scopes never share */
	uint32_t	tenant;			/* fair-share tenant (0 is a tenant like any other) */
	uint32_t	weight;			/* its share weight, 1..OPUS_SCHED_MAX_WEIGHT (0 = 1) */
	int32_t		n_stop;
	const char *stop[OPUS_MAX_STOP];	/* copied at submit */
	bool		ignore_eos;
	/*
	 * GBNF grammar (text/grammar.h) the output must match, or NULL: only
	 * tokens it allows are sampled, end-of-generation only where it accepts.
	 * Compiled at submit (cached by hash); a malformed grammar fails the
	 * submit (OPUS_ERR_INVALID_ARG, OPUS_ERR_CAPACITY past a size limit).
	 * A state with no allowed token ends the request with finish ERROR.
	 */
	const char *grammar;
	size_t		grammar_len;
};

enum opus_event_kind
{
	OPUS_EV_TEXT = 1,			/* new completion text (complete UTF-8) */
	OPUS_EV_DONE = 2			/* final record; no events follow for this id */
};

struct opus_event
{
	enum opus_event_kind kind;
	uint64_t	id;
	/* OPUS_EV_TEXT */
	const char *text;
	int32_t		text_len;
	int32_t		n_tokens;		/* tokens this text covers */
	/* OPUS_EV_DONE */
	enum opus_finish finish;
	int32_t		n_prompt;
	int32_t		n_completion;
	int32_t		n_cached;		/* prompt tokens served from the prefix cache */
	double		queue_ms;		/* submit -> first scheduled */
	double		ttft_ms;		/* submit -> first token */
	double		total_ms;		/* submit -> done */
	struct opus_error error;	/* code OPUS_OK unless finish == ERROR */
};

typedef void (*opus_event_fn) (void *user, const struct opus_event *ev);

struct opus_sched;

enum opus_status opus_sched_create(struct opus_ctx *ctx, opus_event_fn cb,
								   void *user, struct opus_sched **out,
								   struct opus_error *err);
void		opus_sched_free(struct opus_sched *s);

/*
 * Queue a request with already-tokenized prompt (copied).  Validates the
 * parameters; a prompt that cannot fit the context with max_tokens, or can
 * never fit the KV pool, is rejected here (OPUS_ERR_CONTEXT /
 * OPUS_ERR_CAPACITY) and no event is emitted.  ids must be unique among live
 * requests.
 */
enum opus_status opus_sched_submit(struct opus_sched *s, uint64_t id,
								   const int32_t *prompt, int32_t n_prompt,
								   const struct opus_gen_params *p,
								   struct opus_error *err);

/* Cancel; a DONE event with OPUS_FINISH_CANCELLED follows at the next step. Unknown id: false. */
bool		opus_sched_cancel(struct opus_sched *s, uint64_t id);

/*
 * Run one step.  Returns OPUS_OK (even if individual requests failed: they
 * get DONE events with finish ERROR); an error return means the engine
 * itself is unusable.
 */
enum opus_status opus_sched_step(struct opus_sched *s, struct opus_error *err);

/*
 * Priority aging: a queued request's effective class drops by one for every
 * ms_per_class milliseconds it has waited (0 turns aging off).  Default
 * OPUS_SCHED_AGING_MS.
 */
void		opus_sched_set_aging(struct opus_sched *s, double ms_per_class);

/*
 * Starvation limit: a queued request that does not fit the free KV blocks
 * is overtaken by smaller ones behind it until it has waited ms in the
 * queue (since submission or its last preemption); then nothing behind it
 * is admitted until it fits.  0 = always overtake.  Default
 * OPUS_SCHED_STARVE_MS.
 */
void		opus_sched_set_starvation(struct opus_sched *s, double ms);

/*
 * Step time target: a step's prefill tokens beyond its decodes and short
 * prompts are limited to what keeps the step's predicted time within the
 * target (stepcost.h: the time measured on steps of each size), so a long
 * prompt does not stretch the running requests' inter-token latency, nor
 * a newcomer's wait for the step in flight.  When not even one KV block
 * fits, prompts get what fits (maybe nothing) and a block in the next step,
 * alternately, so they still advance; alone in a step, a prompt gets at
 * least a block.  0 (the default) = only max_batch_tokens limits prefill.
 */
void		opus_sched_set_step_target(struct opus_sched *s, double ms);

/*
 * Fair-share credit bound: when a request arrives for a tenant with no
 * request waiting in the queue, its counter is lifted to at least the least
 * counter of the tenants with requests waiting, minus credit virtual
 * tokens, so a tenant that is never backlogged (one session, always
 * running) cannot bank an unbounded lead for later.  0 = no bound.
 * Default OPUS_SCHED_FAIR_CREDIT.
 */
void		opus_sched_set_fair_credit(struct opus_sched *s, double credit);

/*
 * Grammar masks during the forward pass (on, the default): a helper thread
 * computes the step's masks while the forward pass runs, and what it has
 * not reached when the pass ends is shared over the thread pool.  Off: all
 * over the thread pool after the pass.  The masks are the same either way.
 */
void		opus_sched_set_mask_overlap(struct opus_sched *s, bool on);

/*
 * Anticipatory hold: when the last live request of a tenant finishes
 * normally and the tenant's past returns (from its previous finish to its
 * next submit, smoothed) took at most ms (or three steps' time, when that
 * is longer: a loaded engine's clients are slow too), the KV blocks that
 * request held are kept from the admission of more-served tenants'
 * requests for twice that time (at most the same bound), or until the
 * tenant's next request arrives, whichever is first; never while nothing
 * runs.  0 = off.  Default OPUS_SCHED_HOLD_MS.
 */
void		opus_sched_set_hold(struct opus_sched *s, double ms);

/* Requests queued or running. */
int			opus_sched_n_active(const struct opus_sched *s);

struct opus_sched_stats
{
	int64_t		steps;
	int64_t		tokens_prefill;
	int64_t		tokens_decode;
	int32_t		batch_size;		/* sequences in the last step */
	int32_t		n_queued;
	int32_t		n_running;
	int64_t		kv_blocks_total;
	int64_t		kv_blocks_used;
	int64_t		kv_blocks_cached;
	int64_t		prefix_hit_tokens;
	int64_t		prefix_query_tokens;
	int64_t		preemptions;
	int64_t		fair_preemptions;	/* of them, for a less-served tenant of the same class */
	int64_t		masks;			/* grammar masks computed */
	int64_t		masks_overlapped;	/* of them, during the forward pass */
	double		masks_wait_ms;	/* step time spent on masks after the pass */
};
void		opus_sched_get_stats(const struct opus_sched *s,
								 struct opus_sched_stats *out);

/* Where one live request is (for progress reports). */
struct opus_sched_req_info
{
	bool		running;		/* admitted (else queued or preempted) */
	bool		generating;		/* has produced its first token */
	int32_t		priority;
	uint32_t	tenant;
	double		tenant_service;	/* its tenant's virtual token counter */
	int32_t		n_prompt;
	int32_t		n_prompt_done;	/* prompt positions in the KV cache */
	int32_t		n_generated;
	int32_t		kv_blocks;		/* blocks its sequence holds */
};

/* Fill *out for a live (not yet DONE) request; false if id is unknown or done. */
bool		opus_sched_get_request(const struct opus_sched *s, uint64_t id,
								   struct opus_sched_req_info *out);

#endif							/* OPUS_SCHEDULER_H */
