/*
 * threadpool.h - a persistent pool of worker threads for the forward pass.
 *
 * opus_pool_run(pool, fn, arg) runs fn(arg, ith, nth) once on every thread
 * of the pool (the caller is thread 0, workers are 1..nth-1) and returns when
 * all have finished.  Inside fn, threads synchronise with opus_pool_barrier()
 * (every thread must call it the same number of times).  Work inside a
 * region is usually shared out with an opus_pool_counter: an atomic "next
 * chunk" counter that threads claim from, so a thread that was descheduled
 * does not hold the others up (results must not depend on which thread does
 * which chunk).
 *
 * Waiting: workers spin briefly for the next region (low wake-up latency
 * between the many small regions of a decode step), then sleep on a futex.
 * Barriers spin, yielding the CPU after a while so oversubscribed machines
 * still make progress.
 *
 * A pool is used by one caller thread at a time.
 */
#ifndef OPUS_THREADPOOL_H
#define OPUS_THREADPOOL_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/status.h"

#define OPUS_MAX_THREADS 256

struct opus_pool;

typedef void (*opus_pool_fn) (void *arg, int ith, int nth);

/* Create a pool of n_threads threads (including the caller), 1..OPUS_MAX_THREADS. */
enum opus_status opus_pool_create(int n_threads, struct opus_pool **out,
								  struct opus_error *err);
/* Stop and join the workers. */
void		opus_pool_free(struct opus_pool *p);
int			opus_pool_size(const struct opus_pool *p);

/* Run fn on every thread; returns after all of them returned. */
void		opus_pool_run(struct opus_pool *p, opus_pool_fn fn, void *arg);

/* Inside fn: wait until every thread of the pool has reached this barrier. */
void		opus_pool_barrier(struct opus_pool *p);

/* A work counter on its own cache line. */
struct opus_pool_counter
{
	_Alignas(64) atomic_int next;
	char		pad[64 - sizeof(atomic_int)];
};

#endif							/* OPUS_THREADPOOL_H */
