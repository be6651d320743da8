/*
 * experts.c - the expert load of a Mixture-of-Experts model behind
 * pg_stat_opus_experts: tokens routed to each (layer, expert).
 *
 * The engine counts, per forward pass, the tokens its router sends to each
 * expert of each layer (opus_ctx_expert_load) and sends the cumulative
 * counters since its start in an EXPERTS frame along with STATS when they
 * moved (src/protocol.h).  The supervisor turns them into totals since the
 * last reset: each frame adds what grew since the previous frame of the
 * same engine, so an engine restart with the same model continues the
 * totals, and a different model (name, architecture, tensor type, layers or
 * parameters in READY, or another expert shape) starts them from zero.
 * A dense model sends no EXPERTS frames: the view is empty.
 *
 *   opus_stat_experts_v1()      pg_stat_opus_experts (layer, expert,
 *                               tokens, share of the layer's tokens)
 *   opus_stat_experts_reset()   pg_stat_opus_experts_reset() (revoked from
 *                               PUBLIC): the totals back to zero
 *
 * Locking: OpusExperts->lock (an LWLock) protects the whole struct: the
 * supervisor takes it exclusive to add a frame, a reset exclusive, readers
 * shared while copying the counters out (at most 128 kB); no other lock is
 * held with it.  The previous frame's counters (`prev`) are the
 * supervisor's own memory.
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "opus_pg.h"
#include "opus_experts.h"

typedef struct OpusExpertsShared
{
	LWLock	   *lock;
	/* the model the totals are for (from READY) */
	char		name[OPUS_PROTO_NAME_LEN];
	char		arch[OPUS_PROTO_SHORT_LEN];
	char		tensor_type[OPUS_PROTO_SHORT_LEN];
	int32		model_layers;
	int64		model_params;
	/* the expert shape as reported; 0 = no EXPERTS frame (dense) */
	int32		n_layer;
	int32		n_expert;
	int32		n_layer_kept;	/* layers that fit OPUS_EXPERTS_CAPACITY */
	TimestampTz reset_at;
	int64		tokens[OPUS_EXPERTS_CAPACITY];	/* [layer * n_expert + e] */
} OpusExpertsShared;

static OpusExpertsShared *OpusExperts = NULL;

/* The supervisor's copy of the running engine's last EXPERTS counters. */
static int64 *prev = NULL;
static bool have_prev = false;

PG_FUNCTION_INFO_V1(opus_stat_experts_v1);
PG_FUNCTION_INFO_V1(opus_stat_experts_reset);

void
OpusExpertsShmemRequest(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(OpusExpertsShared)));
	RequestNamedLWLockTranche("opus_pg experts", 1);
}

void
OpusExpertsShmemInit(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	OpusExperts = ShmemInitStruct("opus_pg experts", sizeof(OpusExpertsShared), &found);
	if (!found)
	{
		memset(OpusExperts, 0, sizeof(OpusExpertsShared));
		OpusExperts->lock = &(GetNamedLWLockTranche("opus_pg experts"))->lock;
		OpusExperts->reset_at = GetCurrentTimestamp();
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Forget the totals and the shape.  Caller holds the lock exclusive. */
static void
clear_locked(void)
{
	OpusExperts->n_layer = 0;
	OpusExperts->n_expert = 0;
	OpusExperts->n_layer_kept = 0;
	memset(OpusExperts->tokens, 0, sizeof(OpusExperts->tokens));
	OpusExperts->reset_at = GetCurrentTimestamp();
}

/*
 * A new engine is ready: its counters start from zero.  Another model than
 * the totals are for clears them.
 */
void
OpusExpertsEngineReady(const struct opus_proto_ready *r)
{
	if (OpusExperts == NULL)
		return;
	have_prev = false;
	LWLockAcquire(OpusExperts->lock, LW_EXCLUSIVE);
	if (strcmp(OpusExperts->name, r->name) != 0 ||
		strcmp(OpusExperts->arch, r->arch) != 0 ||
		strcmp(OpusExperts->tensor_type, r->tensor_type) != 0 ||
		OpusExperts->model_layers != r->n_layer ||
		OpusExperts->model_params != r->n_params)
	{
		clear_locked();
		strlcpy(OpusExperts->name, r->name, sizeof(OpusExperts->name));
		strlcpy(OpusExperts->arch, r->arch, sizeof(OpusExperts->arch));
		strlcpy(OpusExperts->tensor_type, r->tensor_type, sizeof(OpusExperts->tensor_type));
		OpusExperts->model_layers = r->n_layer;
		OpusExperts->model_params = r->n_params;
	}
	LWLockRelease(OpusExperts->lock);
}

/* An EXPERTS frame (validated) from the running engine. */
void
OpusExpertsEngineReport(const struct opus_proto_experts *x)
{
	int32		kept;
	size_t		n,
				i;

	if (OpusExperts == NULL)
		return;
	if (prev == NULL)
		prev = MemoryContextAllocZero(TopMemoryContext,
									  sizeof(int64) * OPUS_EXPERTS_CAPACITY);
	kept = Min(x->n_layer, OPUS_EXPERTS_CAPACITY / x->n_expert);
	n = (size_t) kept * x->n_expert;

	LWLockAcquire(OpusExperts->lock, LW_EXCLUSIVE);
	if (OpusExperts->n_layer != x->n_layer || OpusExperts->n_expert != x->n_expert)
	{
		clear_locked();
		OpusExperts->n_layer = x->n_layer;
		OpusExperts->n_expert = x->n_expert;
		OpusExperts->n_layer_kept = kept;
		if (kept < x->n_layer)
			ereport(LOG,
					(errmsg("opus_pg: expert load of %d layers x %d experts; pg_stat_opus_experts keeps the first %d layers",
							x->n_layer, x->n_expert, kept)));
	}
	for (i = 0; i < n; i++)
	{
		int64		cur = opus_proto_expert_count(x, i);
		int64		grew = (have_prev && cur >= prev[i]) ? cur - prev[i] : cur;

		if (grew > PG_INT64_MAX - OpusExperts->tokens[i])
			OpusExperts->tokens[i] = PG_INT64_MAX;
		else
			OpusExperts->tokens[i] += grew;
		prev[i] = cur;
	}
	LWLockRelease(OpusExperts->lock);
	have_prev = true;
}

static void
check_experts(void)
{
	OpusCheckPreloaded();
	if (OpusExperts == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("opus_pg statistics are not initialised")));
}

/* pg_stat_opus_experts: one row per (layer, expert) of a MoE model. */
Datum
opus_stat_experts_v1(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int32		n_layer,
				n_expert;
	int64	   *tokens;
	int			l,
				e;

	check_experts();
	InitMaterializedSRF(fcinfo, 0);
	tokens = palloc(sizeof(int64) * OPUS_EXPERTS_CAPACITY);
	LWLockAcquire(OpusExperts->lock, LW_SHARED);
	n_layer = OpusExperts->n_layer_kept;
	n_expert = OpusExperts->n_expert;
	memcpy(tokens, OpusExperts->tokens, sizeof(int64) * (size_t) n_layer * n_expert);
	LWLockRelease(OpusExperts->lock);

	for (l = 0; l < n_layer; l++)
	{
		const int64 *row = tokens + (size_t) l * n_expert;
		double		sum = 0;

		for (e = 0; e < n_expert; e++)
			sum += (double) row[e];
		for (e = 0; e < n_expert; e++)
		{
			Datum		values[4];
			bool		nulls[4] = {false, false, false, false};

			values[0] = Int32GetDatum(l);
			values[1] = Int32GetDatum(e);
			values[2] = Int64GetDatum(row[e]);
			if (sum > 0)
				values[3] = Float8GetDatum((double) row[e] / sum);
			else
				nulls[3] = true;
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	pfree(tokens);
	return (Datum) 0;
}

/* pg_stat_opus_experts_reset(): the totals back to zero; the reset time. */
Datum
opus_stat_experts_reset(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();

	check_experts();
	LWLockAcquire(OpusExperts->lock, LW_EXCLUSIVE);
	memset(OpusExperts->tokens, 0, sizeof(OpusExperts->tokens));
	OpusExperts->reset_at = now;
	LWLockRelease(OpusExperts->lock);
	PG_RETURN_TIMESTAMPTZ(now);
}
