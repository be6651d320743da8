/*
 * scheduler.c - the generation loop every request goes through (this file:
 * creation, the queue, submit, the getters and the step; events, text and
 * stop strings in sched_text.c; admission, the prefix cache, aging and
 * preemption in sched_admit.c; sched_int.h is what they share): a priority
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
 *     decodes or short prompts in the batch, the other prefill tokens are
 *     also bounded by the step time target (opus_sched_set_step_target)
 *     at the step cost measured for each step size (stepcost.h), so the
 *     running requests' inter-token latency stays within it (when not
 *     even a block fits, prompts advance by a block every other step),
 *     and short prompts go before long ones, so a small request's first
 *     token does not wait for a long prompt's chunks; long prompts alone
 *     are chunked by the target too (at least a block), so a request
 *     that arrives does not wait for a long step in flight;
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
 * Blocks are published under that root as their scope, and eviction is fair
 * between scopes (kv.c): one scope flooding the cache evicts its own.
 *
 * Fair share (virtual token counters, Sheng et al., OSDI '24): every tenant
 * has a counter of the service it got, prompt tokens put through the model
 * plus twice the tokens generated, divided by its weight.  Within a class
 * the queue is ordered by the counter of the request's tenant, then
 * arrival, so the least-served backlogged tenant goes first whatever its
 * number of sessions.  A tenant that comes back after being idle
 * (OPUS_SCHED_FAIR_IDLE_MS without a live request) has its counter lifted
 * to the least counter of the tenants waiting, so idleness banks no credit.
 * A tenant that is live but has nothing queued when a request of it
 * arrives (one session, its last call running or just finished) is lifted
 * to at most OPUS_SCHED_FAIR_CREDIT behind the least counter of the
 * tenants with requests queued (opus_sched_set_fair_credit): it still goes
 * first, but the service it could not use does not pile up into an
 * unbounded lead that would later hold the others back.
 * A queued request may preempt a running one of another tenant of the same
 * class whose counter is ahead of its own by more than
 * OPUS_SCHED_FAIR_MARGIN (the victim is recomputed from the prefix cache),
 * or ahead at all when its own tenant has nothing running and the other
 * keeps a request running, so a tenant with one session is not stuck
 * behind another's many.  And when the last live request of a tenant ends
 * and the tenant has been quick to send its next one (its smoothed think
 * time at most OPUS_SCHED_HOLD_MS, or three steps on a slow engine), the
 * blocks it held are kept from
 * more-served tenants' admissions for twice that time or until its next
 * request arrives (an anticipatory hold, as anticipatory disk schedulers
 * wait a moment for the process that just read): a one-session client in
 * a loop finds its room at its next call, without preempting anybody.  A
 * hold never applies while nothing runs, so the engine never idles for it.
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
#include "runtime/sched_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
	s->fair_credit = OPUS_SCHED_FAIR_CREDIT;
	s->hold_ms = OPUS_SCHED_HOLD_MS;
	s->step_target_ms = 0.0;
	s->mask_overlap = true;
	opus_stepcost_init(&s->cost);
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
	free(s->gstates);
	free(s->gmasks);
	opus_masker_free(s->masker);
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

double
sched_tenant_vtc(const struct opus_sched *s, const struct sched_req *r)
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
	va = sched_tenant_vtc(s, a);
	vb = sched_tenant_vtc(s, b);
	if (va != vb)
		return va < vb;
	return a->arrival < b->arrival;
}

/* Insert into the queue in queue order.  Capacity must be there. */
void
sched_queue_insert(struct opus_sched *s, struct sched_req *r)
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
		s->tenants[i].think_ms = -1.0;
		s->n_tenants++;
	}
	t = &s->tenants[i];
	t->weight = weight;
	if (t->n_live == 0 && t->t_idle > -1e300)
	{
		/* its think time: from its last request's end to this one */
		double		think = now_ms() - t->t_idle;

		/* one long pause counts as a long think time, not as forever */
		if (think > 10.0 * OPUS_SCHED_HOLD_MS)
			think = 10.0 * OPUS_SCHED_HOLD_MS;

		t->think_ms = t->think_ms < 0.0 ? think : 0.7 * t->think_ms + 0.3 * think;
	}
	/* whatever was held for it is its own again */
	t->hold_until = 0.0;
	t->hold_blocks = 0;
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
	if (s->fair_credit > 0.0)
	{
		/*
		 * Bounded credit: with nothing of its own waiting, the tenant is not
		 * backlogged, and what it could not use went to those who were; it
		 * starts at most fair_credit behind the least-served of them.
		 */
		bool		queued = false,
					any = false;
		double		lo = 0.0;

		for (int q = 0; q < s->n_queue; q++)
		{
			const struct sched_req *r = s->queue[q];

			if (r->finished)
				continue;
			if (r->tenant == i)
				queued = true;
			else if (!any || s->tenants[r->tenant].vtc < lo)
			{
				lo = s->tenants[r->tenant].vtc;
				any = true;
			}
		}
		if (!queued && any && t->vtc < lo - s->fair_credit)
			t->vtc = lo - s->fair_credit;
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
	if (!s->masker)
	{
		enum opus_status st;

		s->greqs = calloc((size_t) s->max_batch, sizeof(*s->greqs));
		s->gstates = calloc((size_t) s->max_batch, sizeof(*s->gstates));
		s->gmasks = calloc((size_t) s->max_batch, sizeof(*s->gmasks));
		if (!s->greqs || !s->gstates || !s->gmasks)
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for a grammar");
		st = opus_masker_create(&s->masker, err);
		if (st != OPUS_OK)
			return st;
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
	sched_queue_insert(s, r);
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
opus_sched_set_fair_credit(struct opus_sched *s, double credit)
{
	s->fair_credit = credit > 0.0 ? credit : 0.0;
}

void
opus_sched_set_mask_overlap(struct opus_sched *s, bool on)
{
	s->mask_overlap = on;
}

void
opus_sched_set_hold(struct opus_sched *s, double ms)
{
	s->hold_ms = ms > 0.0 ? ms : 0.0;
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
				sched_release_seq(s, r);
				sched_emit_done(s, r, OPUS_FINISH_CANCELLED, NULL);
				again = true;
			}
		}
		for (int i = 0; i < s->n_queue && !again; i++)
		{
			struct sched_req *r = s->queue[i];

			if (r->cancelled && !r->finished)
			{
				sched_emit_done(s, r, OPUS_FINISH_CANCELLED, NULL);
				again = true;
			}
		}
	}
	reap(s);
}

/*
 * Fill s->items: a decode token for each generating sequence, then prefill
 * chunks, in admission order, up to max_batch tokens.  Returns the count.
 *
 * The step time target: the prompt tokens behind the decodes and short
 * prompts (pass 1) of the step are limited to what keeps the step's
 * predicted time (stepcost.h, measured on steps of each size) within
 * s->step_target_ms.  When that is less than a block, the waiting prompts
 * get it (maybe nothing) in one step and at least one block in the next: a
 * long prompt still advances by a block every other step, and every other
 * step of the running requests stays within the target even when one
 * block alone would exceed it.  Long prompts alone in a step are chunked
 * by the target too (at least a block), so a request that arrives waits
 * for at most one such step before it is in one.
 */
/*
 * Steps are planned at this fraction of the target: the same step's time
 * varies by 10-20% on a shared machine, and the target is the bound
 * running requests are promised, not the mean (the default model on 2
 * cores, a 2,342-token prompt beside a decode, planned at the full 250 ms:
 * the steps carrying its chunks took 256 ms median, 276 at p90).
 */
#define STEP_TARGET_PLAN 0.85

/* Prompts with at most this many blocks left go before longer ones in a step. */
#define SHORT_PREFILL_BLOCKS 4

static int
build_batch(struct opus_sched *s, int *n_logit_rows)
{
	int			n = 0;
	int			budget = s->max_batch;
	int			rows = 0;
	bool		capped = false;
	bool		lean = false;	/* the target left prompts less than a block */
	int64_t		wanted = 0;		/* prompt tokens waiting, and given this step */
	int64_t		given = 0;
	double		pairs = 0.0;	/* attention pairs of the items so far */

	/*
	 * pass 0: decodes; pass 1: short prefills (at most SHORT_PREFILL_BLOCKS
	 * blocks to go), so a small request's prompt is not queued behind a
	 * long one's chunks; pass 2: the other prefills.
	 */
	for (int pass = 0; pass < 3; pass++)
	{
		/*
		 * Prefill behind decodes, long prefill behind a short one (a
		 * request waiting for its first token), or long prefill alone: at
		 * most what fits the step time target, counting the tokens already
		 * in the batch.
		 */
		if (pass > 0 && !capped && (n > 0 || pass == 2) && s->step_target_ms > 0.0)
		{
			int32_t		deepest = 0;	/* the prompts' tokens attend to this many keys at most */
			int32_t		cap;

			for (int i = 0; i < s->n_run; i++)
			{
				struct sched_req *r = s->run[i];

				if (!r->finished && r->n_tokens - r->seq.n_pos > 1 && r->seq.n_pos > deepest)
					deepest = r->seq.n_pos;
			}
			cap = opus_stepcost_fit(&s->cost, s->step_target_ms * STEP_TARGET_PLAN, s->max_batch - budget,
									pairs, deepest, budget);

			capped = true;
			if (cap >= 0 && cap < s->block_size)
			{
				if (n == 0 || s->prefill_lean)
					cap = s->block_size;	/* alone, or the other step of two: a block */
				else
					lean = true;
			}
			if (cap >= 0 && cap < budget)
				budget = cap;
		}
		for (int i = 0; i < s->n_run; i++)
		{
			struct sched_req *r = s->run[i];
			int32_t		todo = r->n_tokens - r->seq.n_pos;
			int32_t		chunk;
			struct opus_batch_item *it;

			if (r->finished || todo <= 0 || (pass == 0) != (todo == 1))
				continue;
			if (pass > 0 && (pass == 1) != (todo <= SHORT_PREFILL_BLOCKS * s->block_size))
				continue;
			if (pass > 0)
				wanted += todo;
			if (budget <= 0)
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
			pairs += opus_stepcost_pairs(r->seq.n_pos, chunk);
			if (pass > 0)
				given += chunk;
		}
	}
	/* a lean step only counts when it held a prompt back */
	s->prefill_lean = lean && given < wanted;
	s->step_pairs = pairs;
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
 * The allowed-token masks of the batch's constrained rows that lack their
 * state's mask, handed to the masker: computed by its helper thread while
 * the forward pass runs (unless s->mask_overlap is off), the rest over the
 * thread pool in masks_finish.  The states do not change before the
 * sampling that follows masks_finish.
 */
static void
masks_start(struct opus_sched *s, int n_items)
{
	int			n = 0;

	if (!s->masker || s->n_greqs > 0)
		return;
	for (int i = 0; i < n_items; i++)
	{
		struct sched_req *r = s->item_req[i];

		if (r->logits && !r->finished && r->gstate && !r->gmask_ok)
		{
			s->greqs[n] = r;
			s->gstates[n] = r->gstate;
			s->gmasks[n] = r->gmask;
			n++;
		}
	}
	if (n == 0)
		return;
	s->n_greqs = n;
	opus_masker_start(s->masker, s->cons->vocab, s->gstates, s->gmasks, n,
					  s->mask_overlap);
}

/* Every mask of the open job complete (before any request is freed). */
static void
masks_finish(struct opus_sched *s)
{
	double		t0;

	if (s->n_greqs == 0)
		return;
	t0 = now_ms();
	s->stats.masks_overlapped += opus_masker_finish(s->masker, opus_ctx_pool(s->ctx));
	s->stats.masks_wait_ms += now_ms() - t0;
	s->stats.masks += s->n_greqs;
	for (int k = 0; k < s->n_greqs; k++)
		s->greqs[k]->gmask_ok = true;
	s->n_greqs = 0;
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
	bool		lean = s->prefill_lean; /* the last step's, for every try below */

	handle_cancels(s);
	/* the queue must be able to take back any running request */
	if (!grow_ptrs(&s->queue, &s->cap_queue, s->n_queue + s->n_run + 1))
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory in the scheduler");
	sched_age_queue(s);
	sched_admit_queued(s);
	s->stats.batch_size = 0;
	if (s->n_run == 0)
		return OPUS_OK;

	for (;;)
	{
		s->prefill_lean = lean;
		n_items = build_batch(s, &rows);
		if (n_items == 0)
			return OPUS_OK;
		if (!assign_logits(s, n_items, rows))
			return opus_error_set(err, OPUS_ERR_NOMEM,
								  "out of memory for %d logits rows", rows);
		masks_start(s, n_items);
		t_step = now_ms();
		st = opus_forward(s->ctx, s->items, n_items, &ferr);
		t_step = now_ms() - t_step;
		if (st != OPUS_ERR_CAPACITY)
			break;
		/* the batch changes: what was started is kept, the rest starts anew */
		masks_finish(s);
		/* the pool ran out: preempt, unless a single sequence is left */
		if (s->n_run <= 1 || !sched_preempt_one(s, NULL))
			break;
	}
	masks_finish(s);
	if (st != OPUS_OK)
	{
		/* fail what was in the batch; the engine itself goes on */
		for (int i = 0; i < n_items; i++)
			if (!s->item_req[i]->finished)
				sched_fail_req(s, s->item_req[i], &ferr);
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
		sched_publish_blocks(s, s->item_req[i]);
	opus_stepcost_observe(&s->cost, (int32_t) (n_prefill + n_decode), s->step_pairs, t_step);
	s->step_ms = s->step_ms > 0.0 ? 0.8 * s->step_ms + 0.2 * t_step : t_step;
	s->stats.steps++;
	s->stats.tokens_prefill += n_prefill;
	s->stats.tokens_decode += n_decode;
	s->stats.batch_size = n_items;

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
			sched_fail_req(s, r, &e);
			continue;
		}
		tok = opus_sampler_sample(r->sampler, r->logits, r->tokens, r->n_tokens);
		r->logits = NULL;
		r->gmask_ok = false;
		if (r->gstate && !opus_constrain_accept(s->cons, r->gstate, tok))
		{
			struct opus_error e;

			opus_error_set(&e, OPUS_ERR_INTERNAL,
						   "sampled token %d is not allowed by the grammar", (int) tok);
			sched_fail_req(s, r, &e);
			continue;
		}
		sched_accept_token(s, r, tok);
	}
	reap(s);
	return OPUS_OK;
}
