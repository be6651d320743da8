/*
 * masker.c - a step's grammar masks computed by a helper thread while the
 * forward pass runs (masker.h for the contract).
 *
 * Locking: mu guards open, gen, helper_in and stop; the job's fields (v,
 * states, masks, n) are written by the caller before it opens the job under
 * mu and only read while the job is open.  The helper enters a job only
 * while it is open (setting helper_in under mu) and leaves it by clearing
 * helper_in under mu; finish closes the job only once helper_in is clear,
 * so the helper never reads a closed job's fields.  Masks are claimed from
 * the atomic counter next: each index is computed by exactly one thread.
 */
#include "runtime/masker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct opus_masker
{
	pthread_t	th;
	pthread_mutex_t mu;
	pthread_cond_t wake;		/* helper: a job opened, or stop */
	pthread_cond_t left;		/* caller: the helper left the job */
	bool		open;
	bool		helper_in;
	bool		stop;
	unsigned int gen;			/* bumped by every overlapped job */

	/* the open job */
	const opus_grammar_vocab *v;
	const opus_grammar_state *const *states;
	uint32_t   *const *masks;
	int			n;
	struct opus_pool_counter next;
	atomic_int	by_helper;
};

/* Claim and compute masks until none is left; returns how many. */
static int
claim_all(struct opus_masker *m)
{
	int			done = 0;

	for (;;)
	{
		int			k = atomic_fetch_add(&m->next.next, 1);

		if (k >= m->n)
			return done;
		opus_grammar_mask(m->states[k], m->v, m->masks[k]);
		done++;
	}
}

static void *
helper_main(void *arg)
{
	struct opus_masker *m = arg;
	unsigned int seen = 0;

	pthread_mutex_lock(&m->mu);
	for (;;)
	{
		while (!m->stop && !(m->open && m->gen != seen))
			pthread_cond_wait(&m->wake, &m->mu);
		if (m->stop)
			break;
		seen = m->gen;
		m->helper_in = true;
		pthread_mutex_unlock(&m->mu);

		atomic_fetch_add(&m->by_helper, claim_all(m));

		pthread_mutex_lock(&m->mu);
		m->helper_in = false;
		pthread_cond_signal(&m->left);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

enum opus_status
opus_masker_create(struct opus_masker **out, struct opus_error *err)
{
	struct opus_masker *m;
	int			rc;

	*out = NULL;
	m = aligned_alloc(64, (sizeof(*m) + 63) / 64 * 64);
	if (!m)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for the grammar masker");
	memset(m, 0, sizeof(*m));
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->wake, NULL);
	pthread_cond_init(&m->left, NULL);
	atomic_init(&m->next.next, 0);
	atomic_init(&m->by_helper, 0);
	rc = pthread_create(&m->th, NULL, helper_main, m);
	if (rc != 0)
	{
		pthread_cond_destroy(&m->left);
		pthread_cond_destroy(&m->wake);
		pthread_mutex_destroy(&m->mu);
		free(m);
		return opus_error_set(err, OPUS_ERR_NOMEM,
							  "could not start the grammar masker thread: %s", strerror(rc));
	}
	*out = m;
	return OPUS_OK;
}

void
opus_masker_free(struct opus_masker *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->stop = true;
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->th, NULL);
	pthread_cond_destroy(&m->left);
	pthread_cond_destroy(&m->wake);
	pthread_mutex_destroy(&m->mu);
	free(m);
}

void
opus_masker_start(struct opus_masker *m, const opus_grammar_vocab *v,
				  const opus_grammar_state *const *states,
				  uint32_t *const *masks, int n, bool overlap)
{
	m->v = v;
	m->states = states;
	m->masks = masks;
	m->n = n;
	atomic_store(&m->next.next, 0);
	atomic_store(&m->by_helper, 0);
	pthread_mutex_lock(&m->mu);
	m->open = true;
	if (overlap && n > 0)
	{
		m->gen++;
		pthread_cond_signal(&m->wake);
	}
	pthread_mutex_unlock(&m->mu);
}

static void
pool_worker(void *arg, int ith, int nth)
{
	(void) ith;
	(void) nth;
	claim_all(arg);
}

int
opus_masker_finish(struct opus_masker *m, struct opus_pool *pool)
{
	int			left = m->n - atomic_load(&m->next.next);

	if (left > 1 && pool && opus_pool_size(pool) > 1)
		opus_pool_run(pool, pool_worker, m);
	else if (left > 0)
		claim_all(m);
	pthread_mutex_lock(&m->mu);
	while (m->helper_in)
		pthread_cond_wait(&m->left, &m->mu);
	m->open = false;
	pthread_mutex_unlock(&m->mu);
	return atomic_load(&m->by_helper);
}
