/*
 * sched_admit.c - the scheduler's admission policy: blocks promised to
 * running prefills, prefix-cache lookup and publication of full blocks,
 * admission in queue order (with the starvation limit), priority aging,
 * and preemption (of lower classes, or of a tenant ahead on fair share).
 * The header comment of scheduler.c describes the policies.
 */
#include "runtime/sched_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
 * prefix cache, under r's scope (its chain root: the scope's share of the
 * cache is counted by it), with its tenant's fair-share weight as the
 * scope's weight.  A block whose key is cached already (the same prefix
 * computed by another sequence in the same step) stays private.
 */
void
sched_publish_blocks(struct opus_sched *s, struct sched_req *r)
{
	int32_t		full = r->seq.n_pos / s->block_size;

	if (full > r->seq.n_blocks)
		full = r->seq.n_blocks;
	hash_blocks(s, r, full);
	for (int32_t i = r->n_published; i < full; i++)
	{
		uint64_t	parent = i == 0 ? r->root : r->hashes[i - 1];

		(void) opus_kv_cache_insert(opus_ctx_kv(s->ctx), r->seq.blocks[i], r->hashes[i], parent,
									r->tokens + (size_t) i * s->block_size, r->root,
									s->tenants[r->tenant].weight);
	}
	if (full > r->n_published)
		r->n_published = full;
}

/*
 * Recompute queued requests' effective classes (aging, never above a
 * request's min_priority) and restore the queue order, which the tenants'
 * counters also move.
 */
void
sched_age_queue(struct opus_sched *s)
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
		sched_queue_insert(s, s->queue[i]);
}

/* Requests of tenant k in the running set (not finished). */
static int
tenant_running(const struct opus_sched *s, int32_t k)
{
	int			n = 0;

	for (int i = 0; i < s->n_run; i++)
		n += s->run[i]->tenant == k && !s->run[i]->finished;
	return n;
}

/*
 * Whether queued request h may preempt running request r to be admitted:
 * r's own class is lower (a larger number) and it was not promoted by
 * aging to h's effective class or above; or r is of h's class (or lower)
 * but of another tenant, whose counter is ahead of h's tenant's by more
 * than the fair-share margin, or ahead at all when h's tenant has nothing
 * running and r's tenant keeps another request running (a one-session
 * tenant back with its next call takes its place back at once instead of
 * waiting for a more-served tenant's request to end; the margin applies
 * again as soon as it runs, so the two never swap back and forth).  Within
 * a tenant and class nobody is preempted for anybody (first come, first
 * served).
 */
static bool
may_preempt(const struct opus_sched *s, const struct sched_req *h,
			const struct sched_req *r)
{
	double		vr,
				vh;

	if (r->finished)
		return false;
	if (r->priority > h->priority && r->eff_priority > h->eff_priority)
		return true;
	if (r->tenant == h->tenant || r->priority < h->priority || r->eff_priority < h->eff_priority)
		return false;
	vr = sched_tenant_vtc(s, r);
	vh = sched_tenant_vtc(s, h);
	if (vr > vh + OPUS_SCHED_FAIR_MARGIN)
		return true;
	return vr > vh && tenant_running(s, h->tenant) == 0 && tenant_running(s, r->tenant) >= 2;
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


/*
 * Anticipatory hold (opus_sched_set_hold), called as r finishes normally,
 * before its blocks are released: if r is its tenant's only live request
 * and the tenant came back quickly before (its smoothed think time at most
 * hold_ms, or three steps' time if that is longer), the blocks r holds are
 * set aside for the tenant's next request for twice that think time (at
 * most the same bound).  A tenant with one session
 * (one request at a time) otherwise loses its place at every finish: the
 * queued requests of a more-served tenant are admitted into its room in
 * the next step, and its next request, arriving a client's round trip
 * later, waits for room or preempts for it.
 */
void
sched_hold_for(struct opus_sched *s, const struct sched_req *r)
{
	struct sched_tenant *t = &s->tenants[r->tenant];
	const struct opus_kv *kv = opus_ctx_kv(s->ctx);
	int64_t		n = 0;
	double		lim = s->hold_ms > 3.0 * s->step_ms ? s->hold_ms : 3.0 * s->step_ms;

	if (s->hold_ms <= 0.0 || t->n_live != 1 || t->think_ms < 0.0 || t->think_ms > lim)
		return;
	/* the blocks its release gives back (not those others share) */
	for (int32_t i = 0; i < r->seq.n_blocks; i++)
		n += opus_kv_refcount(kv, r->seq.blocks[i]) == 1;
	t->hold_until = now_ms() + (2.0 * t->think_ms < lim ? 2.0 * t->think_ms : lim);
	t->hold_blocks = n;
}

/*
 * Blocks held (sched_hold_for) for tenants other than h's that have nothing
 * live, whose hold has not expired and whose counter is not above h's
 * tenant's (they would go before it, were their next request here).  None
 * while nothing runs: a hold never idles the engine.
 */
static int64_t
blocks_held(const struct opus_sched *s, const struct sched_req *h, double t)
{
	int64_t		n = 0;

	if (s->n_run == 0)
		return 0;
	for (int i = 0; i < s->n_tenants; i++)
	{
		const struct sched_tenant *o = &s->tenants[i];

		if (i != h->tenant && o->n_live == 0 && o->hold_blocks > 0 && t < o->hold_until &&
			o->vtc <= s->tenants[h->tenant].vtc)
			n += o->hold_blocks;
	}
	return n;
}

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
void
sched_admit_queued(struct opus_sched *s)
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
		int64_t		room = avail - blocks_held(s, h, t);
		bool		any;

		/*
		 * Overtaking never undoes fair share: a request may pass one that
		 * does not fit only if its tenant is not more served than that
		 * one's (by the fair-share margin).
		 */
		if (passed && sched_tenant_vtc(s, h) > passed_vtc + OPUS_SCHED_FAIR_MARGIN)
		{
			i++;
			continue;
		}
		if (need <= room && s->n_run < s->max_batch)
		{
			avail -= need;
			sched_admit(s, i, m);
			continue;
		}
		if (lower_class_blocks(s, h, &any) + room >= need && any && sched_preempt_one(s, h))
		{
			/* the victim (a lower class, or a more-served tenant) is queued behind h */
			avail = opus_ctx_free_blocks(s->ctx) - blocks_promised(s);
			continue;
		}
		if (s->starve_ms > 0.0 && t - h->t_queued >= s->starve_ms)
			break;
		if (!passed || sched_tenant_vtc(s, h) < passed_vtc)
			passed_vtc = sched_tenant_vtc(s, h);
		passed = true;
		i++;
	}
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
bool
sched_preempt_one(struct opus_sched *s, const struct sched_req *h)
{
	int			v = -1;

	for (int i = 0; i < s->n_run; i++)
	{
		struct sched_req *r = s->run[i];

		if (r->finished || (h && !may_preempt(s, h, r)))
			continue;
		if (v < 0 || r->eff_priority > s->run[v]->eff_priority ||
			(r->eff_priority == s->run[v]->eff_priority &&
			 (sched_tenant_vtc(s, r) > sched_tenant_vtc(s, s->run[v]) ||
			  (sched_tenant_vtc(s, r) == sched_tenant_vtc(s, s->run[v]) &&
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
		sched_release_seq(s, r);
		r->logits = NULL;
		memmove(s->run + v, s->run + v + 1, (size_t) (s->n_run - v - 1) * sizeof(*s->run));
		s->n_run--;
		r->t_queued = now_ms();
		sched_queue_insert(s, r);		/* capacity: cap_queue >= all requests */
		s->stats.preemptions++;
	}
	return true;
}
