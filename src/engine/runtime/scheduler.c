/*
 * scheduler.c - the generation loop every request goes through: a priority
 * queue, continuous batching with chunked prefill, sampling, stop checks,
 * streaming text, and preemption when the KV pool runs dry.
 *
 * Life of a request.  opus_sched_submit validates and copies it into the
 * queue, ordered by (priority, arrival).  At each opus_sched_step:
 *
 *  1. cancelled requests get their DONE (CANCELLED) and lose their blocks;
 *  2. queued requests are admitted in queue order while the pool has the
 *     blocks their whole known token list (+1 for the first decode) needs,
 *     beyond what the prefills already running still need.  One that does
 *     not fit may preempt running requests of a lower class (larger
 *     priority number) when that makes room for it; otherwise it is
 *     skipped and smaller ones behind it are admitted (no head-of-line
 *     blocking), until it has waited in the queue for the starvation limit
 *     (opus_sched_set_starvation): then nothing behind it is admitted, so
 *     the blocks that free up go to it;
 *  3. one opus_forward batch is built: a decode token for every generating
 *     sequence first, then prefill chunks of the others, in admission order,
 *     up to max_batch_tokens (so a long prompt is spread over several steps
 *     while everyone else keeps getting a token per step); while there are
 *     decodes in the batch, prefill tokens are also bounded by the step
 *     time target (opus_sched_set_step_target) at the measured cost per
 *     token, so the running requests' inter-token latency stays near it,
 *     and short prompts go before long ones, so a small request's first
 *     token does not wait for a long prompt's chunks;
 *  4. if the pool runs out (OPUS_ERR_CAPACITY), the sequence of the lowest
 *     priority holding the most blocks (the most recently admitted among
 *     equals) is preempted, which frees the most room per recomputation and
 *     never picks a small newcomer before a large one: its blocks are released
 *     and it goes back to the queue, to be recomputed from its prompt and
 *     the tokens it has generated so far; its sampler (RNG state included)
 *     and its text state are kept, so its output does not change;
 *  5. each sequence whose last known token was in the batch samples its next
 *     token from its own logits row with its own sampler, then the stop
 *     checks run and text is emitted.
 *
 * A request's state is just its token list (prompt, then generated) and its
 * sequence's n_pos: tokens[n_pos..n_tokens) still have to go through the
 * model, and when the last of them does, a new token is sampled.  Decode is
 * the case n_tokens - n_pos == 1; after a preemption n_pos is 0 and the same
 * code recomputes everything.
 *
 * Text: each token's piece goes through a UTF-8 stream (complete characters
 * only; anything invalid becomes U+FFFD, so every TEXT event is valid
 * UTF-8), then into a hold buffer.  Stop strings are searched in that
 * buffer; text that could still be the start of a stop string is held back
 * until the next token decides.  Nothing from the first byte of a matched
 * stop string on is emitted.
 *
 * Prefix caching: whenever a request is admitted with an empty sequence
 * (first admission, or after a preemption) it looks up the longest prefix
 * of its token list made of full blocks that are in the KV pool's prefix
 * cache (kv.c), attaches those blocks to its sequence read-only and only
 * computes the rest.  The last known token is never taken from the cache:
 * its logits are needed.  After every forward pass, blocks that became full
 * are published under their chain hash, so later requests (and this one,
 * if it is preempted) find them.  At the first admission the prompt's
 * tokens count as prefix queries and the attached ones as hits (n_cached in
 * DONE).  Because a block's K/V depend only on its prefix and the forward
 * pass is deterministic per row, a hit never changes the output.
 *
 * Prefix-cache scopes: a request's chain hashes start from a root derived
 * from its cache_scope, so requests of different scopes never find each
 * other's blocks (nor learn, by a hit or its timing, what the other sent).
 *
 * Fair share (virtual token counters, Sheng et al., OSDI '24): every tenant
 * has a counter of the service it got, prompt tokens put through the model
 * plus twice the tokens generated, divided by its weight.  Within a class
 * the queue is ordered by the counter of the request's tenant, then
 * arrival, so the least-served backlogged tenant goes first whatever its
 * number of sessions.  A tenant that comes back after being idle
 * (OPUS_SCHED_FAIR_IDLE_MS without a live request) has its counter lifted
 * to the least counter of the tenants waiting, so idleness banks no credit.
 * A queued request may preempt a running one of another tenant of the same
 * class whose counter is ahead of its own by more than
 * OPUS_SCHED_FAIR_MARGIN (the victim is recomputed from the prefix cache),
 * so a tenant with one session is not stuck behind another's many.
 *
 * Priorities age: a queued request's effective class is its priority minus
 * one for every aging period it has waited (OPUS_SCHED_AGING_MS unless
 * opus_sched_set_aging says otherwise; not below its min_priority, the
 * ceiling its role was given), so a low
 * class still progresses under a steady stream of higher ones.  The queue
 * is ordered by (effective class, arrival); a running request keeps the
 * effective class it was admitted with.  A queued request preempts running
 * ones only of a lower own class that were not promoted to its effective
 * class (see may_preempt), so aging never causes preemption ping-pong and
 * nobody is preempted within a class.
 *
 * Threading: not thread-safe; one thread calls everything.  The event
 * callback runs inside opus_sched_step and may call opus_sched_submit,
 * opus_sched_cancel, opus_sched_n_active and opus_sched_get_stats, but not
 * opus_sched_step or opus_sched_free.  Event text is valid only during the
 * callback.
 */
#include "runtime/scheduler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * A context's model, parameters, threads and KV pool through model.h's
 * accessors and kv.h (the prefix cache), never the context struct.
 */
#include "base/threadpool.h"
#include "model/kv.h"
#include "runtime/constrain.h"
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
	double		step_target_ms; /* prefill bound while decoding, 0 = off */
	double		ms_per_token;	/* measured step cost per token (EWMA), 0 = unknown */
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
};

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static int64_t
blocks_for(const struct opus_sched *s, int64_t n_pos)
{
	return (n_pos + s->block_size - 1) / s->block_size;
}

/* ---- creation ---- */

enum opus_status
opus_sched_create(struct opus_ctx *ctx, opus_event_fn cb, void *user,
				  struct opus_sched **out, struct opus_error *err)
{
	struct opus_sched *s;

	*out = NULL;
	if (!ctx || !cb)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "scheduler needs a context and an event callback");
	s = calloc(1, sizeof(*s));
	if (!s)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for the scheduler");
	s->ctx = ctx;
	s->tok = opus_model_tokenizer(opus_ctx_model(ctx));
	s->n_vocab = opus_model_hparams(opus_ctx_model(ctx))->n_vocab;
	s->block_size = opus_ctx_params(ctx)->block_size > 0 ? opus_ctx_params(ctx)->block_size : 16;
	s->n_ctx = opus_ctx_params(ctx)->n_ctx;
	s->max_batch = opus_ctx_params(ctx)->max_batch_tokens;
	s->n_blocks = opus_ctx_params(ctx)->n_blocks;
	s->root_hash = opus_kv_hash_root(opus_model_identity(opus_ctx_model(ctx)), s->block_size);
	s->aging_ms = OPUS_SCHED_AGING_MS;
	s->starve_ms = OPUS_SCHED_STARVE_MS;
	s->step_target_ms = 0.0;
	s->cb = cb;
	s->user = user;
	s->cap_piece = 256;
	s->items = calloc((size_t) s->max_batch, sizeof(*s->items));
	s->item_req = calloc((size_t) s->max_batch, sizeof(*s->item_req));
	s->piece = malloc((size_t) s->cap_piece);
	s->utf8_out = malloc((size_t) s->cap_piece + 8);
	s->match = malloc(((size_t) blocks_for(s, s->n_ctx) + 1) * sizeof(int32_t));
	if (!s->items || !s->item_req || !s->piece || !s->utf8_out || !s->match)
	{
		opus_sched_free(s);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for the scheduler");
	}
	s->stats.kv_blocks_total = s->n_blocks;
	*out = s;
	return OPUS_OK;
}

static void
req_free(struct opus_sched *s, struct sched_req *r)
{
	if (!r)
		return;
	if (r->tenant >= 0 && --s->tenants[r->tenant].n_live == 0)
		s->tenants[r->tenant].t_idle = now_ms();
	opus_seq_release(s->ctx, &r->seq);
	opus_sampler_free(r->sampler);
	opus_grammar_state_free(r->gstate);
	opus_grammar_release(r->grammar);
	free(r->gmask);
	free(r->tokens);
	free(r->hashes);
	free(r->stop_buf);
	free(r->text);
	free(r);
}

void
opus_sched_free(struct opus_sched *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->n_queue; i++)
		req_free(s, s->queue[i]);
	for (int i = 0; i < s->n_run; i++)
		req_free(s, s->run[i]);
	free(s->queue);
	free(s->run);
	free(s->items);
	free(s->item_req);
	free(s->greqs);
	opus_constrain_free(s->cons);
	free(s->match);
	free(s->logits);
	free(s->piece);
	free(s->utf8_out);
	free(s->tenants);
	free(s);
}

/* ---- queue ---- */

static bool
grow_ptrs(struct sched_req ***arr, int *cap, int need)
{
	struct sched_req **a;
	int			c;

	if (need <= *cap)
		return true;
	c = *cap > 0 ? *cap * 2 : 16;
	while (c < need)
		c *= 2;
	a = realloc(*arr, (size_t) c * sizeof(**arr));
	if (!a)
		return false;
	*arr = a;
	*cap = c;
	return true;
}

static double
tenant_vtc(const struct opus_sched *s, const struct sched_req *r)
{
	return s->tenants[r->tenant].vtc;
}

/* Queue order: (effective class, tenant's counter, arrival). */
static bool
queue_before(const struct opus_sched *s, const struct sched_req *a,
			 const struct sched_req *b)
{
	double		va,
				vb;

	if (a->eff_priority != b->eff_priority)
		return a->eff_priority < b->eff_priority;
	va = tenant_vtc(s, a);
	vb = tenant_vtc(s, b);
	if (va != vb)
		return va < vb;
	return a->arrival < b->arrival;
}

/* Insert into the queue in queue order.  Capacity must be there. */
static void
queue_insert(struct opus_sched *s, struct sched_req *r)
{
	int			i = s->n_queue;

	while (i > 0 && queue_before(s, r, s->queue[i - 1]))
	{
		s->queue[i] = s->queue[i - 1];
		i--;
	}
	s->queue[i] = r;
	s->n_queue++;
	r->running = false;
}

/*
 * The index of tenant id (added when new, with weight), its counter lifted
 * when it comes back from idleness; -1 when out of memory.
 */
static int
tenant_enter(struct opus_sched *s, uint32_t id, uint32_t weight)
{
	int			i;
	struct sched_tenant *t;

	for (i = 0; i < s->n_tenants; i++)
		if (s->tenants[i].id == id)
			break;
	if (i == s->n_tenants)
	{
		if (s->n_tenants == s->cap_tenants)
		{
			int			c = s->cap_tenants ? s->cap_tenants * 2 : 8;
			struct sched_tenant *a = realloc(s->tenants, (size_t) c * sizeof(*a));

			if (!a)
				return -1;
			s->tenants = a;
			s->cap_tenants = c;
		}
		memset(&s->tenants[i], 0, sizeof(s->tenants[i]));
		s->tenants[i].id = id;
		s->tenants[i].t_idle = -1e300;
		s->n_tenants++;
	}
	t = &s->tenants[i];
	t->weight = weight;
	if (t->n_live == 0 && now_ms() - t->t_idle >= OPUS_SCHED_FAIR_IDLE_MS)
	{
		/* no banked credit: start level with the least-served busy tenant */
		bool		any = false;
		double		lo = 0.0;

		for (int k = 0; k < s->n_tenants; k++)
			if (k != i && s->tenants[k].n_live > 0 && (!any || s->tenants[k].vtc < lo))
			{
				lo = s->tenants[k].vtc;
				any = true;
			}
		if (any && t->vtc < lo)
			t->vtc = lo;
	}
	t->n_live++;
	return i;
}

static struct sched_req *
find_req(const struct opus_sched *s, uint64_t id)
{
	for (int i = 0; i < s->n_queue; i++)
		if (s->queue[i]->id == id && !s->queue[i]->finished)
			return s->queue[i];
	for (int i = 0; i < s->n_run; i++)
		if (s->run[i]->id == id && !s->run[i]->finished)
			return s->run[i];
	return NULL;
}

/* Compile (or find in the cache) r's grammar; its state and mask. */
static enum opus_status
setup_grammar(struct opus_sched *s, struct sched_req *r,
			  const struct opus_gen_params *p, struct opus_error *err)
{
	struct opus_grammar_error gerr;

	if (!s->cons)
	{
		enum opus_status st = opus_constrain_create(s->tok, &s->cons, err);

		if (st != OPUS_OK)
			return st;
	}
	if (!s->greqs)
	{
		s->greqs = calloc((size_t) s->max_batch, sizeof(*s->greqs));
		if (!s->greqs)
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for a grammar");
	}
	r->grammar = opus_grammar_get(p->grammar, p->grammar_len, &gerr);
	if (!r->grammar)
		return opus_error_set(err, opus_grammar_status(gerr.code), "%s", gerr.msg);
	r->gstate = opus_grammar_state_new(r->grammar);
	r->gmask = malloc(sizeof(uint32_t) * (size_t) opus_constrain_mask_words(s->cons));
	if (!r->gstate || !r->gmask)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for a grammar");
	return OPUS_OK;
}

enum opus_status
opus_sched_submit(struct opus_sched *s, uint64_t id, const int32_t *prompt,
				  int32_t n_prompt, const struct opus_gen_params *p,
				  struct opus_error *err)
{
	struct sched_req *r;
	enum opus_status st;
	int64_t		need;
	size_t		stop_total = 0;
	enum opus_param_id bad = OPUS_P__COUNT;
	double		bad_value = 0;

	if (!p)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "generation parameters missing");
	if (n_prompt <= 0 || !prompt)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "prompt is empty");
	OPUS_PARAMS_REQUEST(OPUS_PARAM_CHECK_FIELD)
	OPUS_PARAMS_SESSION(OPUS_PARAM_CHECK_FIELD)
	if (bad != OPUS_P__COUNT)
		return opus_param_error(err, bad, bad_value);
	if (p->min_priority < 0 || p->min_priority > p->priority)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "min_priority must be 0 to priority %d (got %d)",
							  (int) p->priority, (int) p->min_priority);
	if (p->weight > OPUS_SCHED_MAX_WEIGHT)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "weight must be 1 to %d (got %u)", OPUS_SCHED_MAX_WEIGHT,
							  (unsigned) p->weight);
	if (p->n_stop < 0 || p->n_stop > OPUS_MAX_STOP)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "at most %d stop strings are allowed (got %d)",
							  OPUS_MAX_STOP, (int) p->n_stop);
	for (int i = 0; i < p->n_stop; i++)
	{
		size_t		len = p->stop[i] ? strnlen(p->stop[i], OPUS_MAX_STOP_LEN + 1) : 0;

		if (len == 0 || len > OPUS_MAX_STOP_LEN)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "stop string %d must be 1 to %d bytes long",
								  i + 1, OPUS_MAX_STOP_LEN);
		stop_total += len + 1;
	}
	st = opus_sampling_validate(&p->sampling, err);
	if (st != OPUS_OK)
		return st;
	for (int32_t i = 0; i < n_prompt; i++)
		if (prompt[i] < 0 || prompt[i] >= s->n_vocab)
			return opus_error_set(err, OPUS_ERR_TOKENIZE,
								  "prompt token %d is %d, out of range 0..%d",
								  (int) i, (int) prompt[i], (int) s->n_vocab - 1);
	if ((int64_t) n_prompt + p->max_tokens > s->n_ctx)
		return opus_error_set(err, OPUS_ERR_CONTEXT,
							  "prompt of %d tokens plus max_tokens %d is %lld, over the context size %d",
							  (int) n_prompt, (int) p->max_tokens,
							  (long long) n_prompt + p->max_tokens, (int) s->n_ctx);
	/* positions ever cached: every token but the last one sampled */
	need = blocks_for(s, (int64_t) n_prompt + p->max_tokens - 1);
	if (need > s->n_blocks)
		return opus_error_set(err, OPUS_ERR_CAPACITY,
							  "prompt of %d tokens plus max_tokens %d needs %lld kv blocks, more than the whole kv cache (%lld blocks of %d tokens)",
							  (int) n_prompt, (int) p->max_tokens, (long long) need,
							  (long long) s->n_blocks, (int) s->block_size);
	if (find_req(s, id))
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "request id %llu is already in use", (unsigned long long) id);

	if (!grow_ptrs(&s->queue, &s->cap_queue, s->n_queue + 1) ||
		!grow_ptrs(&s->run, &s->cap_run, s->n_queue + s->n_run + 1))
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory queueing a request");
	r = calloc(1, sizeof(*r));
	if (!r)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory queueing a request");
	r->tenant = -1;
	r->tokens = malloc(((size_t) n_prompt + (size_t) p->max_tokens) * sizeof(int32_t));
	r->hashes = malloc(((size_t) blocks_for(s, (int64_t) n_prompt + p->max_tokens) + 1) *
					   sizeof(uint64_t));
	r->stop_buf = stop_total ? malloc(stop_total) : NULL;
	if (!r->tokens || !r->hashes || (stop_total && !r->stop_buf))
	{
		req_free(s, r);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory queueing a request");
	}
	st = opus_sampler_create(&p->sampling, s->n_vocab, &r->sampler, err);
	if (st != OPUS_OK)
	{
		req_free(s, r);
		return st;
	}
	if (p->grammar)
	{
		st = setup_grammar(s, r, p, err);
		if (st != OPUS_OK)
		{
			req_free(s, r);
			return st;
		}
	}
	r->tenant = tenant_enter(s, p->tenant, p->weight ? p->weight : 1);
	if (r->tenant < 0)
	{
		req_free(s, r);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory queueing a request");
	}
	memcpy(r->tokens, prompt, (size_t) n_prompt * sizeof(int32_t));
	r->id = id;
	r->root = opus_kv_hash_scope(s->root_hash, p->cache_scope);
	r->min_priority = p->min_priority;
	r->arrival = s->next_arrival++;
	r->priority = p->priority;
	r->eff_priority = p->priority;
	r->n_prompt = n_prompt;
	r->n_tokens = n_prompt;
	r->max_tokens = p->max_tokens;
	r->ignore_eos = p->ignore_eos;
	opus_seq_init(&r->seq);
	{
		char	   *w = r->stop_buf;

		for (int i = 0; i < p->n_stop; i++)
		{
			size_t		len = strlen(p->stop[i]);

			memcpy(w, p->stop[i], len + 1);
			r->stop[i] = w;
			r->stop_len[i] = (int) len;
			w += len + 1;
		}
		r->n_stop = p->n_stop;
	}
	r->t_submit = now_ms();
	r->t_queued = r->t_submit;
	queue_insert(s, r);
	return OPUS_OK;
}

bool
opus_sched_cancel(struct opus_sched *s, uint64_t id)
{
	struct sched_req *r = find_req(s, id);

	if (!r)
		return false;
	r->cancelled = true;
	return true;
}

void
opus_sched_set_starvation(struct opus_sched *s, double ms)
{
	s->starve_ms = ms > 0.0 ? ms : 0.0;
}

void
opus_sched_set_step_target(struct opus_sched *s, double ms)
{
	s->step_target_ms = ms > 0.0 ? ms : 0.0;
}

void
opus_sched_set_aging(struct opus_sched *s, double ms_per_class)
{
	s->aging_ms = ms_per_class > 0.0 ? ms_per_class : 0.0;
}

int
opus_sched_n_active(const struct opus_sched *s)
{
	int			n = 0;

	for (int i = 0; i < s->n_queue; i++)
		n += !s->queue[i]->finished;
	for (int i = 0; i < s->n_run; i++)
		n += !s->run[i]->finished;
	return n;
}

void
opus_sched_get_stats(const struct opus_sched *s, struct opus_sched_stats *out)
{
	*out = s->stats;
	out->n_queued = s->n_queue;
	out->n_running = s->n_run;
	out->kv_blocks_total = s->n_blocks;
	out->kv_blocks_used = s->n_blocks - opus_ctx_free_blocks(s->ctx);
	out->kv_blocks_cached = opus_kv_n_cached(opus_ctx_kv(s->ctx));
}

bool
opus_sched_get_request(const struct opus_sched *s, uint64_t id,
					   struct opus_sched_req_info *out)
{
	const struct sched_req *r = find_req(s, id);

	if (!r || r->finished)
		return false;
	memset(out, 0, sizeof(*out));
	out->running = r->running;
	out->generating = r->have_token;
	out->priority = r->priority;
	out->tenant = s->tenants[r->tenant].id;
	out->tenant_service = s->tenants[r->tenant].vtc;
	out->n_prompt = r->n_prompt;
	out->n_prompt_done = r->seq.n_pos < r->n_prompt ? r->seq.n_pos : r->n_prompt;
	out->n_generated = r->n_tokens - r->n_prompt;
	out->kv_blocks = r->seq.n_blocks;
	return true;
}

/* ---- events ---- */

static void
emit_done(struct opus_sched *s, struct sched_req *r, enum opus_finish finish,
		  const struct opus_error *error)
{
	struct opus_event ev;
	double		t = now_ms();

	memset(&ev, 0, sizeof(ev));
	ev.kind = OPUS_EV_DONE;
	ev.id = r->id;
	ev.finish = finish;
	ev.n_prompt = r->n_prompt;
	ev.n_completion = r->n_tokens - r->n_prompt;
	ev.n_cached = r->n_cached;
	ev.queue_ms = (r->ever_admitted ? r->t_admit : t) - r->t_submit;
	ev.ttft_ms = r->have_token ? r->t_first - r->t_submit : 0.0;
	ev.total_ms = t - r->t_submit;
	if (error)
		ev.error = *error;
	r->finished = true;
	s->cb(s->user, &ev);
}

/* Emit the first n bytes of the held text (if any) and drop them. */
static void
emit_text(struct opus_sched *s, struct sched_req *r, int32_t n)
{
	struct opus_event ev;

	if (n <= 0)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.kind = OPUS_EV_TEXT;
	ev.id = r->id;
	ev.text = r->text;
	ev.text_len = n;
	ev.n_tokens = r->n_text_tokens;
	r->n_text_tokens = 0;
	s->cb(s->user, &ev);
	memmove(r->text, r->text + n, (size_t) (r->n_text - n));
	r->n_text -= n;
}

/* ---- text ---- */

static bool
text_reserve(struct sched_req *r, int64_t extra)
{
	int64_t		need = (int64_t) r->n_text + extra;
	int64_t		cap;
	char	   *t;

	if (need <= r->cap_text)
		return true;
	if (need > INT32_MAX / 2)
		return false;
	cap = r->cap_text > 0 ? r->cap_text : 64;
	while (cap < need)
		cap *= 2;
	t = realloc(r->text, (size_t) cap);
	if (!t)
		return false;
	r->text = t;
	r->cap_text = (int32_t) cap;
	return true;
}

/*
 * Length of the valid UTF-8 sequence at b[0..n), or -(length of its maximal
 * valid prefix, at least 1) if it is invalid or cut short.
 */
static int
utf8_seq(const uint8_t *b, int n)
{
	uint8_t		c = b[0];
	int			len;
	uint8_t		lo = 0x80,
				hi = 0xbf;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
	{
		len = 3;
		if (c == 0xe0)
			lo = 0xa0;			/* no overlongs */
		else if (c == 0xed)
			hi = 0x9f;			/* no surrogates */
	}
	else if (c >= 0xf0 && c <= 0xf4)
	{
		len = 4;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;			/* <= U+10FFFF */
	}
	else
		return -1;
	for (int k = 1; k < len; k++)
	{
		if (k >= n || b[k] < lo || b[k] > hi)
			return -k;
		lo = 0x80;
		hi = 0xbf;
	}
	return len;
}

/* Append bytes to the held text, each invalid UTF-8 subpart as U+FFFD. */
static bool
text_append(struct sched_req *r, const char *src, int n)
{
	const uint8_t *b = (const uint8_t *) src;
	int			i = 0;

	/* worst case: every byte becomes 3 */
	if (!text_reserve(r, (int64_t) n * 3))
		return false;
	while (i < n)
	{
		int			l = utf8_seq(b + i, n - i);

		if (l > 0)
		{
			memcpy(r->text + r->n_text, b + i, (size_t) l);
			r->n_text += l;
			i += l;
		}
		else
		{
			memcpy(r->text + r->n_text, "\xef\xbf\xbd", 3);
			r->n_text += 3;
			i += -l;
		}
	}
	return true;
}

/*
 * Stop strings over the held text.  Returns the offset of the earliest
 * match, or -1 with *emit_len set to how much can go out now: all but the
 * longest tail that is a proper prefix of some stop string, cut back to a
 * character boundary.  Since such tails are always held, a match can never
 * start in text already emitted.
 */
static int32_t
find_stop(const struct sched_req *r, int32_t *emit_len)
{
	int32_t		first = -1;
	int32_t		hold = 0;
	int32_t		emit;

	*emit_len = r->n_text;
	if (r->n_text == 0 || r->n_stop == 0)
		return -1;
	for (int i = 0; i < r->n_stop; i++)
	{
		const char *m = memmem(r->text, (size_t) r->n_text, r->stop[i],
							   (size_t) r->stop_len[i]);

		if (m && (first < 0 || m - r->text < first))
			first = (int32_t) (m - r->text);
	}
	if (first >= 0)
		return first;
	for (int i = 0; i < r->n_stop; i++)
	{
		int32_t		k = r->stop_len[i] - 1;

		if (k > r->n_text)
			k = r->n_text;
		for (; k > hold; k--)
		{
			if (memcmp(r->text + r->n_text - k, r->stop[i], (size_t) k) == 0)
			{
				hold = k;
				break;
			}
		}
	}
	emit = r->n_text - hold;
	while (emit > 0 && emit < r->n_text && ((uint8_t) r->text[emit] & 0xc0) == 0x80)
		emit--;
	*emit_len = emit;
	return -1;
}

/* The piece of tok into s->piece (grown as needed); its length. */
static int
token_piece(struct opus_sched *s, int32_t tok)
{
	int			n = opus_tokenizer_piece(s->tok, tok, false, s->piece, s->cap_piece);

	if (n > s->cap_piece)
	{
		char	   *p = realloc(s->piece, (size_t) n);
		char	   *o = realloc(s->utf8_out, (size_t) n + 8);

		if (p)
			s->piece = p;
		if (o)
			s->utf8_out = o;
		if (!p || !o)
			return 0;
		s->cap_piece = n;
		n = opus_tokenizer_piece(s->tok, tok, false, s->piece, s->cap_piece);
	}
	return n < 0 ? 0 : n;
}

/* ---- finishing ---- */

static void
release_seq(struct opus_sched *s, struct sched_req *r)
{
	opus_seq_release(s->ctx, &r->seq);
	r->n_published = 0;
}

/* Flush held text (up to a stop string in it) and emit DONE. */
static void
finish_req(struct opus_sched *s, struct sched_req *r, enum opus_finish finish)
{
	int			n = opus_utf8_stream_flush(&r->utf8, s->utf8_out);
	int32_t		emit = 0;
	int32_t		stop;

	release_seq(s, r);
	if (n > 0)
		(void) text_append(r, s->utf8_out, n);
	stop = find_stop(r, &emit);
	if (stop >= 0)
	{
		emit = stop;
		finish = OPUS_FINISH_STOP;
	}
	else
		emit = r->n_text;
	emit_text(s, r, emit);
	emit_done(s, r, finish, NULL);
}

static void
fail_req(struct opus_sched *s, struct sched_req *r, const struct opus_error *e)
{
	release_seq(s, r);
	emit_done(s, r, OPUS_FINISH_ERROR, e);
}

/*
 * A new token for r: record it, run the stop checks, emit what text can go
 * out.  Finishes the request when a stop condition holds.
 */
static void
accept_token(struct opus_sched *s, struct sched_req *r, int32_t tok)
{
	int32_t		n_gen;
	int32_t		emit = 0;

	r->tokens[r->n_tokens++] = tok;
	n_gen = r->n_tokens - r->n_prompt;
	if (!r->have_token)
	{
		r->have_token = true;
		r->t_first = now_ms();
	}
	if (!r->ignore_eos && opus_tokenizer_is_eog(s->tok, tok))
	{
		finish_req(s, r, OPUS_FINISH_STOP);
		return;
	}
	r->n_text_tokens++;
	{
		int			n = token_piece(s, tok);

		if (n > 0)
		{
			int			m = opus_utf8_stream_feed(&r->utf8, s->piece, n, s->utf8_out);

			if (!text_append(r, s->utf8_out, m))
			{
				struct opus_error e;

				opus_error_set(&e, OPUS_ERR_NOMEM, "out of memory for generated text");
				fail_req(s, r, &e);
				return;
			}
		}
	}
	{
		int32_t		stop = find_stop(r, &emit);

		if (stop >= 0)
		{
			release_seq(s, r);
			emit_text(s, r, stop);
			emit_done(s, r, OPUS_FINISH_STOP, NULL);
			return;
		}
	}
	if (n_gen >= r->max_tokens || r->n_tokens >= s->n_ctx)
	{
		finish_req(s, r, OPUS_FINISH_LENGTH);
		return;
	}
	emit_text(s, r, emit);
}

/* ---- the step ---- */

/* Drop finished requests from both lists and free them. */
static void
reap(struct opus_sched *s)
{
	int			k = 0;

	for (int i = 0; i < s->n_run; i++)
	{
		if (s->run[i]->finished)
			req_free(s, s->run[i]);
		else
			s->run[k++] = s->run[i];
	}
	s->n_run = k;
	k = 0;
	for (int i = 0; i < s->n_queue; i++)
	{
		if (s->queue[i]->finished)
			req_free(s, s->queue[i]);
		else
			s->queue[k++] = s->queue[i];
	}
	s->n_queue = k;
}

/* DONE (CANCELLED) for every cancelled request; they are reaped after. */
static void
handle_cancels(struct opus_sched *s)
{
	bool		again = true;

	/*
	 * The callback may submit, which can move both arrays and insert into
	 * the queue, so rescan after every event instead of holding positions.
	 */
	while (again)
	{
		again = false;
		for (int i = 0; i < s->n_run && !again; i++)
		{
			struct sched_req *r = s->run[i];

			if (r->cancelled && !r->finished)
			{
				release_seq(s, r);
				emit_done(s, r, OPUS_FINISH_CANCELLED, NULL);
				again = true;
			}
		}
		for (int i = 0; i < s->n_queue && !again; i++)
		{
			struct sched_req *r = s->queue[i];

			if (r->cancelled && !r->finished)
			{
				emit_done(s, r, OPUS_FINISH_CANCELLED, NULL);
				again = true;
			}
		}
	}
	reap(s);
}

/* Blocks the prefills already running still need to reach their next sample. */
static int64_t
blocks_promised(const struct opus_sched *s)
{
	int64_t		n = 0;

	for (int i = 0; i < s->n_run; i++)
	{
		const struct sched_req *r = s->run[i];
		int64_t		want = blocks_for(s, r->n_tokens) - r->seq.n_blocks;

		if (want > 0)
			n += want;
	}
	return n;
}

/*
 * Positions r needs cached before its next sample, plus one for the first
 * decode after it (but never beyond what the request can ever use).
 */
static int64_t
admit_need(const struct opus_sched *s, const struct sched_req *r)
{
	int64_t		pos = (int64_t) r->n_tokens + 1;
	int64_t		most = (int64_t) r->n_prompt + r->max_tokens - 1;

	if (pos > most)
		pos = most;
	return blocks_for(s, pos);
}

/* Chain hashes of r's first nb full blocks (computed once, as needed). */
static void
hash_blocks(struct opus_sched *s, struct sched_req *r, int32_t nb)
{
	while (r->n_hashed < nb)
	{
		int32_t		i = r->n_hashed;
		uint64_t	parent = i == 0 ? r->root : r->hashes[i - 1];

		r->hashes[i] = opus_kv_hash_block(parent, r->tokens + (size_t) i * s->block_size,
										  s->block_size);
		r->n_hashed++;
	}
}

/*
 * The longest run of r's leading full blocks that the prefix cache holds,
 * leaving at least r's last known token to compute, into s->match; returns
 * its length and sets *n_idle to how many of them no sequence references
 * (attaching those takes them out of the allocatable count).  Only for an
 * empty sequence.
 */
static int32_t
prefix_lookup(struct opus_sched *s, struct sched_req *r, int64_t *n_idle)
{
	const struct opus_kv *kv = opus_ctx_kv(s->ctx);
	int32_t		max = (r->n_tokens - 1) / s->block_size;
	int32_t		m = 0;

	*n_idle = 0;
	if (r->seq.n_pos != 0)
		return 0;
	hash_blocks(s, r, max);
	for (; m < max; m++)
	{
		uint64_t	parent = m == 0 ? r->root : r->hashes[m - 1];
		int32_t		id = opus_kv_cache_find(kv, r->hashes[m], parent,
											r->tokens + (size_t) m * s->block_size);

		if (id < 0)
			break;
		s->match[m] = id;
		if (opus_kv_refcount(kv, id) == 0)
			(*n_idle)++;
	}
	return m;
}

/*
 * Move queue[qi] to the running set, attaching the n_match cached blocks
 * in s->match to its (empty) sequence.
 */
static void
sched_admit(struct opus_sched *s, int qi, int32_t n_match)
{
	struct sched_req *r = s->queue[qi];
	struct opus_error err;
	int32_t		attached = 0;

	memmove(s->queue + qi, s->queue + qi + 1, (size_t) (s->n_queue - qi - 1) * sizeof(*s->queue));
	s->n_queue--;
	/* a failed attach (out of memory) leaves a shorter, still valid prefix */
	while (attached < n_match &&
		   opus_seq_append_block(s->ctx, &r->seq, s->match[attached], &err) == OPUS_OK)
		attached++;
	r->n_published = attached;
	r->running = true;
	r->admitted = s->next_admit++;
	if (!r->ever_admitted)
	{
		int32_t		hit = attached * s->block_size;

		r->ever_admitted = true;
		r->t_admit = now_ms();
		r->n_cached = hit < r->n_prompt ? hit : r->n_prompt;
		s->stats.prefix_query_tokens += r->n_prompt;
		s->stats.prefix_hit_tokens += r->n_cached;
	}
	s->run[s->n_run++] = r;
}

/*
 * Publish r's blocks that have become full since the last call in the
 * prefix cache.  A block whose key is cached already (the same prefix
 * computed by another sequence in the same step) stays private.
 */
static void
publish_blocks(struct opus_sched *s, struct sched_req *r)
{
	int32_t		full = r->seq.n_pos / s->block_size;

	if (full > r->seq.n_blocks)
		full = r->seq.n_blocks;
	hash_blocks(s, r, full);
	for (int32_t i = r->n_published; i < full; i++)
	{
		uint64_t	parent = i == 0 ? r->root : r->hashes[i - 1];

		(void) opus_kv_cache_insert(opus_ctx_kv(s->ctx), r->seq.blocks[i], r->hashes[i], parent,
									r->tokens + (size_t) i * s->block_size);
	}
	if (full > r->n_published)
		r->n_published = full;
}

/*
 * Recompute queued requests' effective classes (aging, never above a
 * request's min_priority) and restore the queue order, which the tenants'
 * counters also move.
 */
static void
age_queue(struct opus_sched *s)
{
	double		t = now_ms();
	int			n = s->n_queue;

	for (int i = 0; s->aging_ms > 0.0 && i < s->n_queue; i++)
	{
		struct sched_req *r = s->queue[i];
		double		steps = (t - r->t_submit) / s->aging_ms;
		int32_t		eff = r->priority;

		if (steps >= (double) (eff - r->min_priority))
			eff = r->min_priority;
		else if (steps >= 1.0)
			eff -= (int32_t) steps;
		r->eff_priority = eff;
	}
	s->n_queue = 0;
	for (int i = 0; i < n; i++)
		queue_insert(s, s->queue[i]);
}

/*
 * Whether queued request h may preempt running request r to be admitted:
 * r's own class is lower (a larger number) and it was not promoted by
 * aging to h's effective class or above; or r is of h's class (or lower)
 * but of another tenant, whose counter is ahead of h's tenant's by more
 * than the fair-share margin.  Within a tenant and class nobody is
 * preempted for anybody (first come, first served).
 */
static bool
may_preempt(const struct opus_sched *s, const struct sched_req *h,
			const struct sched_req *r)
{
	if (r->finished)
		return false;
	if (r->priority > h->priority && r->eff_priority > h->eff_priority)
		return true;
	return r->tenant != h->tenant && r->priority >= h->priority &&
		r->eff_priority >= h->eff_priority &&
		tenant_vtc(s, r) > tenant_vtc(s, h) + OPUS_SCHED_FAIR_MARGIN;
}

/*
 * Blocks preempting every running request of a lower class than prio would
 * give back (what they hold plus what was promised to them), and whether
 * there is any.
 */
static int64_t
lower_class_blocks(const struct opus_sched *s, const struct sched_req *h, bool *any)
{
	int64_t		n = 0;

	*any = false;
	for (int i = 0; i < s->n_run; i++)
	{
		const struct sched_req *r = s->run[i];
		int64_t		want = blocks_for(s, r->n_tokens);

		if (!may_preempt(s, h, r))
			continue;
		*any = true;
		n += want > r->seq.n_blocks ? want : r->seq.n_blocks;
	}
	return n;
}

static bool preempt_one(struct opus_sched *s, const struct sched_req *h);

/*
 * Admit in queue order while the pool allows.  A request that does not fit
 * may preempt running requests of lower classes (larger priority numbers)
 * when that makes room; otherwise it is passed over and the ones behind it
 * that fit are admitted, unless it has waited in the queue for starve_ms:
 * then admission stops at it, so the blocks that free up are kept for it.
 * Requests behind it are of its class or lower (queue order), so the stop
 * never holds back a more urgent class.  The queue must have room for every
 * running request.
 */
static void
admit(struct opus_sched *s)
{
	int64_t		avail = opus_ctx_free_blocks(s->ctx) - blocks_promised(s);
	double		t = now_ms();
	int			i = 0;
	bool		passed = false;	/* some request was passed over */
	double		passed_vtc = 0.0;	/* the least-served tenant's among them */

	while (i < s->n_queue)
	{
		struct sched_req *h = s->queue[i];
		int64_t		n_idle;
		int32_t		m = prefix_lookup(s, h, &n_idle);
		int64_t		need = admit_need(s, h) - h->seq.n_blocks - m + n_idle;
		bool		any;

		/*
		 * Overtaking never undoes fair share: a request may pass one that
		 * does not fit only if its tenant is not more served than that
		 * one's (by the fair-share margin).
		 */
		if (passed && tenant_vtc(s, h) > passed_vtc + OPUS_SCHED_FAIR_MARGIN)
		{
			i++;
			continue;
		}
		if (need <= avail && s->n_run < s->max_batch)
		{
			avail -= need;
			sched_admit(s, i, m);
			continue;
		}
		if (lower_class_blocks(s, h, &any) + avail >= need && any && preempt_one(s, h))
		{
			/* the victim (a lower class, or a more-served tenant) is queued behind h */
			avail = opus_ctx_free_blocks(s->ctx) - blocks_promised(s);
			continue;
		}
		if (s->starve_ms > 0.0 && t - h->t_queued >= s->starve_ms)
			break;
		if (!passed || tenant_vtc(s, h) < passed_vtc)
			passed_vtc = tenant_vtc(s, h);
		passed = true;
		i++;
	}
}

/*
 * Fill s->items: a decode token for each generating sequence, then prefill
 * chunks, in admission order, up to max_batch tokens.  Returns the count.
 */
/* Prompts with at most this many blocks left go before longer ones in a step. */
#define SHORT_PREFILL_BLOCKS 4

static int
build_batch(struct opus_sched *s, int *n_logit_rows)
{
	int			n = 0;
	int			budget = s->max_batch;
	int			rows = 0;

	/*
	 * pass 0: decodes; pass 1: short prefills (at most SHORT_PREFILL_BLOCKS
	 * blocks to go), so a small request's prompt is not queued behind a
	 * long one's chunks; pass 2: the other prefills.
	 */
	for (int pass = 0; pass < 3; pass++)
	{
		/*
		 * Prefill behind decodes: at most what fits the step time target
		 * at the measured cost per token (but at least one block's worth,
		 * so a long prompt always progresses).
		 */
		if (pass == 1 && n > 0 && s->step_target_ms > 0.0 && s->ms_per_token > 0.0)
		{
			double		fit = s->step_target_ms / s->ms_per_token - (double) n;
			int			cap = fit < (double) budget ? (int) fit : budget;

			if (cap < s->block_size)
				cap = s->block_size;
			if (cap < budget)
				budget = cap;
		}
		for (int i = 0; i < s->n_run && budget > 0; i++)
		{
			struct sched_req *r = s->run[i];
			int32_t		todo = r->n_tokens - r->seq.n_pos;
			int32_t		chunk;
			struct opus_batch_item *it;

			if (r->finished || todo <= 0 || (pass == 0) != (todo == 1))
				continue;
			if (pass > 0 && (pass == 1) != (todo <= SHORT_PREFILL_BLOCKS * s->block_size))
				continue;
			chunk = todo < budget ? todo : budget;
			it = &s->items[n];
			memset(it, 0, sizeof(*it));
			it->seq = &r->seq;
			it->tokens = r->tokens + r->seq.n_pos;
			it->n_tokens = chunk;
			it->logits_all = false;
			it->logits = NULL;
			r->logits = NULL;
			if (chunk == todo)
				rows++;			/* the row is assigned once the count is known */
			s->item_req[n++] = r;
			budget -= chunk;
		}
	}
	*n_logit_rows = rows;
	return n;
}

/* Point the items that end a request's known tokens at logits rows. */
static bool
assign_logits(struct opus_sched *s, int n_items, int rows)
{
	int			row = 0;

	if (rows > s->cap_logit_rows)
	{
		float	   *l = realloc(s->logits, (size_t) rows * (size_t) s->n_vocab * sizeof(float));

		if (!l)
			return false;
		s->logits = l;
		s->cap_logit_rows = rows;
	}
	for (int i = 0; i < n_items; i++)
	{
		struct sched_req *r = s->item_req[i];
		struct opus_batch_item *it = &s->items[i];

		if (r->seq.n_pos + it->n_tokens == r->n_tokens)
		{
			it->logits = s->logits + (size_t) row++ * (size_t) s->n_vocab;
			r->logits = it->logits;
		}
	}
	return true;
}

/*
 * Preempt the running request of the lowest effective class (largest
 * number), of the most-served tenant, that holds the most blocks (the most
 * recently admitted among equals), among those h may preempt (any, when h
 * is NULL): release its blocks and requeue it for recomputation.  False if
 * there is none.  Taking the largest frees the most room per
 * recomputation, and a small request admitted last is not the one thrown
 * out again and again while large ones grow.
 */
static bool
preempt_one(struct opus_sched *s, const struct sched_req *h)
{
	int			v = -1;

	for (int i = 0; i < s->n_run; i++)
	{
		struct sched_req *r = s->run[i];

		if (r->finished || (h && !may_preempt(s, h, r)))
			continue;
		if (v < 0 || r->eff_priority > s->run[v]->eff_priority ||
			(r->eff_priority == s->run[v]->eff_priority &&
			 (tenant_vtc(s, r) > tenant_vtc(s, s->run[v]) ||
			  (tenant_vtc(s, r) == tenant_vtc(s, s->run[v]) &&
			   (r->seq.n_blocks > s->run[v]->seq.n_blocks ||
				(r->seq.n_blocks == s->run[v]->seq.n_blocks &&
				 r->admitted > s->run[v]->admitted))))))
			v = i;
	}
	if (v < 0)
		return false;
	{
		struct sched_req *r = s->run[v];

		if (h && !(r->priority > h->priority && r->eff_priority > h->eff_priority))
			s->stats.fair_preemptions++;
		release_seq(s, r);
		r->logits = NULL;
		memmove(s->run + v, s->run + v + 1, (size_t) (s->n_run - v - 1) * sizeof(*s->run));
		s->n_run--;
		r->t_queued = now_ms();
		queue_insert(s, r);		/* capacity: cap_queue >= all requests */
		s->stats.preemptions++;
	}
	return true;
}

/*
 * The allowed-token masks of this step's constrained rows, shared out over
 * the forward pass's thread pool (each mask is independent and read-only on
 * its state, so the result does not depend on which thread does which).
 */
struct mask_job
{
	struct opus_sched *s;
	int			n;
	struct opus_pool_counter next;
};

static void
mask_worker(void *arg, int ith, int nth)
{
	struct mask_job *j = arg;

	(void) ith;
	(void) nth;
	for (;;)
	{
		int			k = atomic_fetch_add(&j->next.next, 1);
		struct sched_req *r;

		if (k >= j->n)
			break;
		r = j->s->greqs[k];
		opus_grammar_mask(r->gstate, j->s->cons->vocab, r->gmask);
	}
}

static void
compute_masks(struct opus_sched *s, int n_items)
{
	struct mask_job j = {.s = s};

	if (!s->cons)
		return;
	for (int i = 0; i < n_items; i++)
	{
		struct sched_req *r = s->item_req[i];

		if (r->logits && !r->finished && r->gstate)
			s->greqs[j.n++] = r;
	}
	if (j.n == 0)
		return;
	atomic_init(&j.next.next, 0);
	if (j.n > 1 && opus_ctx_pool(s->ctx))
		opus_pool_run(opus_ctx_pool(s->ctx), mask_worker, &j);
	else
		mask_worker(&j, 0, 1);
}

enum opus_status
opus_sched_step(struct opus_sched *s, struct opus_error *err)
{
	int			n_items = 0;
	int			rows = 0;
	enum opus_status st;
	struct opus_error ferr = {0};
	int64_t		n_prefill = 0,
				n_decode = 0;
	double		t_step;

	handle_cancels(s);
	/* the queue must be able to take back any running request */
	if (!grow_ptrs(&s->queue, &s->cap_queue, s->n_queue + s->n_run + 1))
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory in the scheduler");
	age_queue(s);
	admit(s);
	s->stats.batch_size = 0;
	if (s->n_run == 0)
		return OPUS_OK;

	for (;;)
	{
		n_items = build_batch(s, &rows);
		if (n_items == 0)
			return OPUS_OK;
		if (!assign_logits(s, n_items, rows))
			return opus_error_set(err, OPUS_ERR_NOMEM,
								  "out of memory for %d logits rows", rows);
		t_step = now_ms();
		st = opus_forward(s->ctx, s->items, n_items, &ferr);
		t_step = now_ms() - t_step;
		if (st != OPUS_ERR_CAPACITY)
			break;
		/* the pool ran out: preempt, unless a single sequence is left */
		if (s->n_run <= 1 || !preempt_one(s, NULL))
			break;
	}
	if (st != OPUS_OK)
	{
		/* fail what was in the batch; the engine itself goes on */
		for (int i = 0; i < n_items; i++)
			if (!s->item_req[i]->finished)
				fail_req(s, s->item_req[i], &ferr);
		reap(s);
		return OPUS_OK;
	}

	/*
	 * Charge the service: each position a request computes for the first
	 * time (a prompt token 1, a generated one 2).  Recomputing positions
	 * after a preemption is not charged again: the tenant did not choose
	 * it, and charging it would let preemptions starve the victim's tenant.
	 */
	for (int i = 0; i < n_items; i++)
	{
		struct sched_req *r = s->item_req[i];
		struct sched_tenant *t = &s->tenants[r->tenant];
		int32_t		end = r->seq.n_pos;	/* forward advanced it past the item */
		int32_t		start = end - s->items[i].n_tokens;
		int32_t		gen_from;
		double		cost;

		if (s->items[i].n_tokens == 1 && s->items[i].logits)
			n_decode++;
		else
			n_prefill += s->items[i].n_tokens;
		if (start < r->n_charged)
			start = r->n_charged;
		if (end <= start)
			continue;
		/* positions past the prompt were generated: each counts twice */
		gen_from = start > r->n_prompt ? start : r->n_prompt;
		cost = (double) (end - start) + (double) (end > gen_from ? end - gen_from : 0);
		r->n_charged = end;
		t->vtc += cost / (double) t->weight;
	}
	for (int i = 0; i < n_items; i++)
		publish_blocks(s, s->item_req[i]);
	/*
	 * Cost per token, from steps with enough tokens that the per-step
	 * overhead (reading the weights once) does not dominate.
	 */
	if (n_prefill + n_decode >= 2 * s->block_size)
	{
		double		c = t_step / (double) (n_prefill + n_decode);

		s->ms_per_token = s->ms_per_token > 0.0 ? 0.7 * s->ms_per_token + 0.3 * c : c;
	}
	s->stats.steps++;
	s->stats.tokens_prefill += n_prefill;
	s->stats.tokens_decode += n_decode;
	s->stats.batch_size = n_items;

	compute_masks(s, n_items);

	/* sample, in admission order; only the request's own RNG and row */
	for (int i = 0; i < n_items; i++)
	{
		struct sched_req *r = s->item_req[i];
		int32_t		tok;

		if (!r->logits || r->finished)
			continue;
		if (r->gstate &&
			opus_constrain_apply(s->cons, r->gstate, r->gmask, r->logits) == 0)
		{
			struct opus_error e;

			r->logits = NULL;
			opus_error_set(&e, OPUS_ERR_INVALID_ARG,
						   "the grammar allows no token after %d generated tokens",
						   (int) (r->n_tokens - r->n_prompt));
			fail_req(s, r, &e);
			continue;
		}
		tok = opus_sampler_sample(r->sampler, r->logits, r->tokens, r->n_tokens);
		r->logits = NULL;
		if (r->gstate && !opus_constrain_accept(s->cons, r->gstate, tok))
		{
			struct opus_error e;

			opus_error_set(&e, OPUS_ERR_INTERNAL,
						   "sampled token %d is not allowed by the grammar", (int) tok);
			fail_req(s, r, &e);
			continue;
		}
		accept_token(s, r, tok);
	}
	reap(s);
	return OPUS_OK;
}
