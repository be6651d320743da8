/*
 * threadpool.c - persistent worker threads with spin-then-sleep wake-up and
 * a spinning barrier (see threadpool.h for the contract).
 *
 * Synchronisation: the caller publishes (fn, arg) and bumps `gen`; workers
 * waiting for a new generation spin for a while, then sleep on a futex on
 * `gen`.  The barrier works the same way on `bar_gen`: the last thread to
 * arrive bumps it; the others spin briefly, then sleep.  A futex wake is
 * only issued when some thread announced (via a sleeper count) that it may
 * be asleep; both sides use sequentially consistent atomics, so a wake-up
 * cannot be lost.  A region ends with a barrier, so opus_pool_run returns
 * when every thread is done.
 *
 * Spinning keeps the many short steps of a decode pass cheap on an idle
 * machine; sleeping soon after keeps an oversubscribed machine (more
 * runnable threads than cores) from burning the CPU the late thread needs.
 */
#include "base/threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void) 0)
#endif

/* Pause-loop iterations before a worker goes to sleep between regions. */
#define SPIN_BEFORE_SLEEP 5000
/* Pause-loop iterations before a thread waiting at a barrier sleeps. */
#define SPIN_AT_BARRIER 1000

struct opus_pool
{
	int			n_threads;
	pthread_t  *threads;		/* n_threads - 1 workers */
	struct worker_arg *wargs;

	opus_pool_fn fn;			/* current region, valid while gen is odd-new */
	void	   *arg;

	_Alignas(64) atomic_uint gen;	/* bumped for each region */
	_Alignas(64) atomic_int n_sleeping;
	_Alignas(64) atomic_int bar_count;
	_Alignas(64) atomic_uint bar_gen;
	_Alignas(64) atomic_int bar_sleeping;
	_Alignas(64) atomic_int stop;
};

struct worker_arg
{
	struct opus_pool *pool;
	int			ith;
};

static void
futex_wait(atomic_uint *addr, unsigned int val)
{
	syscall(SYS_futex, (unsigned int *) addr, FUTEX_WAIT_PRIVATE, val,
			NULL, NULL, 0);
}

static void
futex_wake_all(atomic_uint *addr)
{
	syscall(SYS_futex, (unsigned int *) addr, FUTEX_WAKE_PRIVATE, INT_MAX,
			NULL, NULL, 0);
}

/* Wait (spinning, then sleeping) until p->gen differs from last; return it. */
static unsigned int
wait_new_gen(struct opus_pool *p, unsigned int last)
{
	unsigned int g;

	for (int i = 0; i < SPIN_BEFORE_SLEEP; i++)
	{
		g = atomic_load_explicit(&p->gen, memory_order_acquire);
		if (g != last)
			return g;
		cpu_relax();
	}
	for (;;)
	{
		atomic_fetch_add(&p->n_sleeping, 1);
		futex_wait(&p->gen, last);
		atomic_fetch_sub(&p->n_sleeping, 1);
		g = atomic_load(&p->gen);
		if (g != last)
			return g;
	}
}

static void *
worker_main(void *varg)
{
	struct worker_arg *wa = varg;
	struct opus_pool *p = wa->pool;
	unsigned int last = 0;

	for (;;)
	{
		last = wait_new_gen(p, last);
		if (atomic_load(&p->stop))
			break;
		p->fn(p->arg, wa->ith, p->n_threads);
		opus_pool_barrier(p);
	}
	return NULL;
}

enum opus_status
opus_pool_create(int n_threads, struct opus_pool **out, struct opus_error *err)
{
	struct opus_pool *p;

	*out = NULL;
	if (n_threads < 1 || n_threads > OPUS_MAX_THREADS)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "thread count %d out of range 1..%d",
							  n_threads, OPUS_MAX_THREADS);
	p = aligned_alloc(64, (sizeof(*p) + 63) / 64 * 64);
	if (!p)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for thread pool");
	memset(p, 0, sizeof(*p));
	p->n_threads = n_threads;
	atomic_init(&p->gen, 0);
	atomic_init(&p->n_sleeping, 0);
	atomic_init(&p->bar_count, 0);
	atomic_init(&p->bar_gen, 0);
	atomic_init(&p->bar_sleeping, 0);
	atomic_init(&p->stop, 0);
	if (n_threads > 1)
	{
		p->threads = calloc(n_threads - 1, sizeof(pthread_t));
		p->wargs = calloc(n_threads - 1, sizeof(struct worker_arg));
		if (!p->threads || !p->wargs)
		{
			free(p->threads);
			free(p->wargs);
			free(p);
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for thread pool");
		}
		for (int i = 0; i < n_threads - 1; i++)
		{
			int			rc;

			p->wargs[i].pool = p;
			p->wargs[i].ith = i + 1;
			rc = pthread_create(&p->threads[i], NULL, worker_main, &p->wargs[i]);
			if (rc != 0)
			{
				/* stop the ones already started */
				p->n_threads = i + 1;
				opus_pool_free(p);
				return opus_error_set(err, OPUS_ERR_NOMEM,
									  "could not start worker thread: %s",
									  strerror(rc));
			}
		}
	}
	*out = p;
	return OPUS_OK;
}

void
opus_pool_free(struct opus_pool *p)
{
	if (!p)
		return;
	if (p->n_threads > 1)
	{
		atomic_store(&p->stop, 1);
		atomic_fetch_add(&p->gen, 1);
		futex_wake_all(&p->gen);
		for (int i = 0; i < p->n_threads - 1; i++)
			pthread_join(p->threads[i], NULL);
	}
	free(p->threads);
	free(p->wargs);
	free(p);
}

int
opus_pool_size(const struct opus_pool *p)
{
	return p->n_threads;
}

void
opus_pool_run(struct opus_pool *p, opus_pool_fn fn, void *arg)
{
	if (p->n_threads == 1)
	{
		fn(arg, 0, 1);
		return;
	}
	p->fn = fn;
	p->arg = arg;
	atomic_fetch_add(&p->gen, 1);
	if (atomic_load(&p->n_sleeping) > 0)
		futex_wake_all(&p->gen);

	fn(arg, 0, p->n_threads);
	opus_pool_barrier(p);
}

void
opus_pool_barrier(struct opus_pool *p)
{
	unsigned int g;

	if (p->n_threads == 1)
		return;
	g = atomic_load(&p->bar_gen);
	if (atomic_fetch_add(&p->bar_count, 1) == p->n_threads - 1)
	{
		/* last to arrive: release the others */
		atomic_store(&p->bar_count, 0);
		atomic_fetch_add(&p->bar_gen, 1);
		if (atomic_load(&p->bar_sleeping) > 0)
			futex_wake_all(&p->bar_gen);
		return;
	}
	for (int i = 0; i < SPIN_AT_BARRIER; i++)
	{
		if (atomic_load_explicit(&p->bar_gen, memory_order_acquire) != g)
			return;
		cpu_relax();
	}
	while (atomic_load(&p->bar_gen) == g)
	{
		atomic_fetch_add(&p->bar_sleeping, 1);
		futex_wait(&p->bar_gen, g);
		atomic_fetch_sub(&p->bar_sleeping, 1);
	}
}
