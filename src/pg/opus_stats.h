/*
 * opus_stats.h - observability: the shared-memory statistics behind
 * pg_stat_opus, pg_stat_opus_activity, pg_stat_opus_engine and the latency
 * histograms (stats.c, stats_views.c), and the request log (reqlog.c).
 *
 * Who calls what:
 *   _PG_init              OpusStatsDefineSettings, OpusLogDefineSettings,
 *                         OpusRegisterLogger; shmem hooks call
 *                         OpusStatsShmemRequest / OpusStatsShmemInit
 *   backends (request.c)  OpusStatsSlotFilled (activity text of a slot being
 *                         filled), OpusStatsRejected (refused before queuing)
 *   the supervisor        OpusStatsEngineDeclared/Spawned/Ready/Stats/Lost and the
 *                         OpusStatsRequest* hooks as requests move
 *   the logger worker     OpusLoggerMain (reqlog.c)
 * Locking rules are at the top of stats.c and reqlog.c.
 */
#ifndef OPUS_STATS_H
#define OPUS_STATS_H

#include "postgres.h"

#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "protocol.h"

#define OPUS_STAT_MODEL_LEN		64	/* model name in a pg_stat_opus key, incl. NUL */
#define OPUS_ACTIVITY_TEXT_LEN	1024	/* prompt bytes kept for pg_stat_opus_activity */
#define OPUS_LOG_ERROR_LEN		128 /* error message bytes in a log record */

/* ---- settings ---- */

extern int	opus_stat_max_entries;	/* POSTMASTER */
extern bool opus_log_requests;	/* SIGHUP */
extern double opus_log_sample_rate;	/* SIGHUP */
extern int	opus_log_retention_min;	/* SIGHUP, minutes, 0 = forever */
extern char *opus_log_database;	/* POSTMASTER */
extern int	opus_log_queue_size;	/* POSTMASTER, records */

extern void OpusStatsDefineSettings(bool preloading);
extern void OpusLogDefineSettings(bool preloading);

/* ---- shared memory (stats.c, reqlog.c) ---- */

extern void OpusStatsShmemRequest(void);	/* in shmem_request_hook */
extern void OpusStatsShmemInit(void);	/* in shmem_startup_hook */
extern Size OpusLogShmemSize(void);
extern void OpusLogShmemInit(void);

/* ---- backends ---- */

struct OpusRequest;
extern void OpusStatsSlotFilled(int slot_index, uint64 request_id,
								const struct OpusRequest *req);
extern void OpusStatsRejected(uint8 kind);

/* ---- the supervisor ---- */

/* m: the model entry (0 = the default model) whose serving engine this is. */
extern void OpusStatsEngineDeclared(int m);
extern void OpusStatsEngineSpawned(int m, const char *model_path, const char *device,
								   int threads);
extern void OpusStatsEngineReady(int m);
extern void OpusStatsEngineStats(int m, const struct opus_proto_stats *s);
extern void OpusStatsEngineLost(int m);

/* Request status in pg_stat_opus and the log. */
typedef enum OpusReqStatus
{
	OPUS_REQ_RUNNING = 0,
	OPUS_REQ_COMPLETED,			/* finished normally (stop or length) */
	OPUS_REQ_ERROR,				/* the engine refused or failed this request */
	OPUS_REQ_CANCELLED,			/* the caller gave up (cancel, timeout, exit) */
	OPUS_REQ_FAILED,			/* the engine died or could not run it */
	OPUS_REQ_INTERRUPTED		/* the server or logger restarted meanwhile */
} OpusReqStatus;

/* The status as the request log shows it (reqlog.c). */
extern const char *OpusReqStatusName(OpusReqStatus st);

/* Slot i's request (SUBMITTED, payload in the slot buffer) goes to the engine. */
extern void OpusStatsRequestSent(int slot_index);
/* A PROGRESS frame for the request the engine holds for slot i. */
extern void OpusStatsRequestProgress(int slot_index, const struct opus_proto_progress *p);
/* DONE for slot i (slot usage fields already written); error: reported as one. */
extern void OpusStatsRequestDone(int slot_index, const struct opus_proto_done *d, bool error);
/* Slot i ends without DONE: failed (engine died/down) or cancelled by its backend. */
extern void OpusStatsRequestFailed(int slot_index, int err_code, const char *message);
extern void OpusStatsRequestCancelled(int slot_index);

/* ---- the request log (reqlog.c) ---- */

typedef struct OpusLogRecord
{
	uint8		event;			/* OPUS_LOG_START or OPUS_LOG_FINISH */
	uint8		status;			/* OpusReqStatus */
	uint8		finish;			/* enum opus_proto_finish */
	uint8		kind;			/* enum opus_proto_kind */
	int			backend_pid;
	uint64		request_id;
	Oid			userid;
	Oid			dbid;
	struct opus_proto_params params;
	int32		n_stop;
	uint32		embed_flags;	/* EMBED: OPUS_PROTO_EMBED_* */
	int32		n_prompt;
	int32		n_completion;
	int32		n_cached;
	TimestampTz submitted_at;
	TimestampTz started_at;		/* 0 = unknown */
	TimestampTz first_token_at; /* 0 = none */
	TimestampTz finished_at;	/* 0 for START */
	char		model[OPUS_STAT_MODEL_LEN];
	char		error[OPUS_LOG_ERROR_LEN];
} OpusLogRecord;

#define OPUS_LOG_START	1
#define OPUS_LOG_FINISH 2

/* Queue a record for the logger; never blocks (counts a drop when full). */
extern void OpusLogPush(const OpusLogRecord *rec);
/* Counters for pg_stat_opus_engine. */
extern void OpusLogCounters(int64 *written, int64 *dropped, int64 *pending);
/* Wake the logger after a batch of pushes (the supervisor, once per loop). */
extern void OpusLogWake(void);

extern void OpusRegisterLogger(void);
extern PGDLLEXPORT void OpusLoggerMain(Datum arg);

#endif							/* OPUS_STATS_H */
