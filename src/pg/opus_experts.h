/*
 * opus_experts.h - expert load of a Mixture-of-Experts model: tokens routed
 * to each (layer, expert), as the engine reports them in EXPERTS frames,
 * kept in shared memory for pg_stat_opus_experts (experts.c).
 *
 * Who calls what:
 *   shmem hooks (opus_pg.c)  OpusExpertsShmemRequest / OpusExpertsShmemInit
 *   the supervisor           OpusExpertsEngineReady on READY,
 *                            OpusExpertsEngineReport on EXPERTS
 */
#ifndef OPUS_EXPERTS_H
#define OPUS_EXPERTS_H

#include "protocol.h"

/*
 * Counters kept: 64 layers x 256 experts (or any shape with as many
 * counters; a model with more keeps its first layers that fit).
 */
#define OPUS_EXPERTS_CAPACITY (64 * 256)

extern void OpusExpertsShmemRequest(void);	/* in shmem_request_hook */
extern void OpusExpertsShmemInit(void); /* in shmem_startup_hook */

extern void OpusExpertsEngineReady(const struct opus_proto_ready *r);
extern void OpusExpertsEngineReport(const struct opus_proto_experts *x);

#endif							/* OPUS_EXPERTS_H */
