/*
 * reqlog.c - the request log: a shared-memory ring of request records and
 * the "opus_pg logger" background worker that writes them to the table
 * opus_requests.
 *
 * Design.  The supervisor pushes a START record when it hands a generation
 * or embedding request to the engine and a FINISH record when the request ends (done,
 * error, cancelled, or failed because the engine died or could not start).
 * Pushing is a copy under a spinlock: it never blocks and never waits for
 * the logger; when the ring is full the record is dropped and counted
 * (pg_stat_opus_engine.log_dropped).  Backends never touch the ring.
 *
 * The logger is a separate background worker so that the supervisor, which
 * relays every token, never runs SQL or waits on a transaction.  It connects
 * to one database, opus.database (default 'postgres'), and writes into the
 * opus_requests table of the opus_pg extension installed there; that one
 * table receives the requests of every database on the server (column dbid
 * says where each ran).  In other databases the extension's opus_requests
 * table stays empty.  While the extension is not installed in opus.database
 * the records are discarded (counted as dropped) and a LOG line says so once.
 *
 * Every opus.log_flush_interval (or sooner when the ring is half full) the
 * logger takes what the ring holds and writes it in one transaction (with
 * synchronous_commit off: a crash may lose the last batch): a
 * FINISH whose START is in the same batch becomes a single INSERT of the
 * finished row; a START alone is INSERTed with status 'running'; a FINISH
 * alone UPDATEs its running row (or INSERTs if there is none).  At start-up
 * the logger marks 'interrupted' every 'running' row that no live request
 * owns (rows left by a server crash or restart, or by a logger restart), so
 * no row stays 'running'.  Once a minute it deletes rows older than
 * opus.log_retention.  opus.log_requests and opus.log_sample_rate decide,
 * in the supervisor, which requests are logged at all.
 *
 * Locking rules
 * -------------
 * OpusLog->mutex (a spinlock) protects head, tail, the counters, the
 * logger's procno and the records between tail and head.  Records are
 * copied in (supervisor) and out (logger) under it; nothing else is done
 * while it is held.  There is one producer (the supervisor) and one
 * consumer (the logger).
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "opus_pg.h"
#include "opus_stats.h"

bool		opus_log_requests = true;
double		opus_log_sample_rate = 1.0;
int			opus_log_retention_min = 7 * 24 * 60;
char	   *opus_log_database = NULL;
int			opus_log_queue_size = 4096;
static int	opus_log_flush_interval_ms = 1000;

#define RETENTION_EVERY_MS	60000
#define BATCH_MAX			1024

typedef struct OpusLogShared
{
	slock_t		mutex;
	uint64		head;			/* records pushed */
	uint64		tail;			/* records taken by the logger */
	int64		written;		/* records the logger committed */
	int64		dropped;		/* ring full, or no table to write to */
	int			logger_procno;	/* -1 when no logger */
	int			capacity;
	OpusLogRecord recs[FLEXIBLE_ARRAY_MEMBER];
} OpusLogShared;

static OpusLogShared *OpusLog = NULL;

void
OpusLogDefineSettings(bool preloading)
{
	DefineCustomBoolVariable("opus.log_requests",
							 "Record generation requests in the opus_requests table.",
							 NULL,
							 &opus_log_requests,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);
	DefineCustomRealVariable("opus.log_sample_rate",
							 "Fraction of generation requests recorded in opus_requests.",
							 NULL,
							 &opus_log_sample_rate,
							 1.0, 0.0, 1.0,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("opus.log_retention",
							"How long opus_requests keeps rows (0 = forever).",
							NULL,
							&opus_log_retention_min,
							7 * 24 * 60, 0, INT_MAX / 60,
							PGC_SIGHUP,
							GUC_UNIT_MIN,
							NULL, NULL, NULL);
	DefineCustomIntVariable("opus.log_flush_interval",
							"How often the request logger writes what it has queued.",
							NULL,
							&opus_log_flush_interval_ms,
							1000, 10, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	if (!preloading)
		return;
	DefineCustomStringVariable("opus.database",
							   "The database whose opus_requests table the request logger writes.",
							   NULL,
							   &opus_log_database,
							   "postgres",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);
	DefineCustomIntVariable("opus.log_queue_size",
							"Request records queued in shared memory for the logger.",
							"Records that do not fit are dropped and counted.",
							&opus_log_queue_size,
							4096, 16, 1000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
}

Size
OpusLogShmemSize(void)
{
	return add_size(offsetof(OpusLogShared, recs),
					mul_size(opus_log_queue_size, sizeof(OpusLogRecord)));
}

void
OpusLogShmemInit(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	OpusLog = ShmemInitStruct("opus_pg request log", OpusLogShmemSize(), &found);
	if (!found)
	{
		memset(OpusLog, 0, offsetof(OpusLogShared, recs));
		SpinLockInit(&OpusLog->mutex);
		OpusLog->logger_procno = -1;
		OpusLog->capacity = opus_log_queue_size;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Caller: the supervisor.  Never blocks. */
void
OpusLogPush(const OpusLogRecord *rec)
{
	bool		wake = false;
	int			procno;

	if (OpusLog == NULL)
		return;
	SpinLockAcquire(&OpusLog->mutex);
	if (OpusLog->head - OpusLog->tail >= (uint64) OpusLog->capacity)
		OpusLog->dropped++;
	else
	{
		memcpy(&OpusLog->recs[OpusLog->head % OpusLog->capacity], rec, sizeof(*rec));
		OpusLog->head++;
		wake = OpusLog->head - OpusLog->tail >= (uint64) OpusLog->capacity / 2;
	}
	procno = OpusLog->logger_procno;
	SpinLockRelease(&OpusLog->mutex);
	if (wake && procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

void
OpusLogWake(void)
{
	int			procno;

	if (OpusLog == NULL)
		return;
	SpinLockAcquire(&OpusLog->mutex);
	procno = OpusLog->logger_procno;
	SpinLockRelease(&OpusLog->mutex);
	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

void
OpusLogCounters(int64 *written, int64 *dropped, int64 *pending)
{
	*written = *dropped = *pending = 0;
	if (OpusLog == NULL)
		return;
	SpinLockAcquire(&OpusLog->mutex);
	*written = OpusLog->written;
	*dropped = OpusLog->dropped;
	*pending = (int64) (OpusLog->head - OpusLog->tail);
	SpinLockRelease(&OpusLog->mutex);
}

void
OpusRegisterLogger(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "opus_pg");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "OpusLoggerMain");
	snprintf(worker.bgw_name, BGW_MAXLEN, "opus_pg logger");
	snprintf(worker.bgw_type, BGW_MAXLEN, "opus_pg logger");
	worker.bgw_main_arg = (Datum) 0;
	worker.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&worker);
}

/* ---------------------------------------------------------------------
 * The logger
 * --------------------------------------------------------------------- */

/* Take up to max records from the ring into out; returns how many. */
static int
ring_take(OpusLogRecord *out, int max)
{
	int			n = 0;

	SpinLockAcquire(&OpusLog->mutex);
	while (n < max && OpusLog->tail < OpusLog->head)
	{
		memcpy(&out[n++], &OpusLog->recs[OpusLog->tail % OpusLog->capacity],
			   sizeof(OpusLogRecord));
		OpusLog->tail++;
	}
	SpinLockRelease(&OpusLog->mutex);
	return n;
}

static void
count_result(int64 written, int64 dropped)
{
	SpinLockAcquire(&OpusLog->mutex);
	OpusLog->written += written;
	OpusLog->dropped += dropped;
	SpinLockRelease(&OpusLog->mutex);
}

static const char *
finish_name(uint8 finish)
{
	switch (finish)
	{
		case OPUS_PROTO_FINISH_STOP:
			return "stop";
		case OPUS_PROTO_FINISH_LENGTH:
			return "length";
		case OPUS_PROTO_FINISH_CANCELLED:
			return "cancelled";
		case OPUS_PROTO_FINISH_ERROR:
			return "error";
	}
	return NULL;
}

/* The generation parameters (an embedding's options) as a jsonb text. */
static char *
params_json(const OpusLogRecord *r)
{
	const struct opus_proto_params *p = &r->params;

	if (r->kind == OPUS_KIND_EMBED)
		return psprintf("{\"normalize\": %s, \"truncate\": %s}",
						(r->embed_flags & OPUS_PROTO_EMBED_NORMALIZE) ? "true" : "false",
						(r->embed_flags & OPUS_PROTO_EMBED_TRUNCATE) ? "true" : "false");
	return psprintf("{\"max_tokens\": %d, \"temperature\": %g, \"top_p\": %g, \"top_k\": %d, "
					"\"min_p\": %g, \"presence_penalty\": %g, \"frequency_penalty\": %g, "
					"\"repetition_penalty\": %g, \"seed\": " UINT64_FORMAT ", \"stop_count\": %d}",
					p->max_tokens, (double) p->temperature, (double) p->top_p, p->top_k,
					(double) p->min_p, (double) p->presence_penalty,
					(double) p->frequency_penalty, (double) p->repetition_penalty,
					p->seed, r->n_stop);
}

static Datum
text_or_null(const char *s, char *isnull_flag)
{
	if (s == NULL || s[0] == '\0')
	{
		*isnull_flag = 'n';
		return (Datum) 0;
	}
	*isnull_flag = ' ';
	return CStringGetTextDatum(s);
}

static Datum
ts_or_null(TimestampTz t, char *isnull_flag)
{
	*isnull_flag = t != 0 ? ' ' : 'n';
	return TimestampTzGetDatum(t);
}

#define INSERT_NARGS 17
#define UPDATE_NARGS 11

/*
 * The version of the extension in this database when it is not the
 * library's (palloc'd), set by log_table(); NULL otherwise.
 */
static char *other_sql_version = NULL;

/*
 * The schema-qualified table name, or NULL if the extension (or its table)
 * is not in this database, or is of another version than the library (its
 * table may have other columns: the records wait for ALTER EXTENSION
 * opus_pg UPDATE, see docs/upgrade.md).  Needs a transaction and SPI.
 */
static char *
log_table(void)
{
	int			rc;
	char	   *version;

	other_sql_version = NULL;
	rc = SPI_execute("SELECT pg_catalog.format('%I.opus_requests', n.nspname), e.extversion "
					 "FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n "
					 "ON n.oid = e.extnamespace WHERE e.extname = 'opus_pg' "
					 "AND pg_catalog.to_regclass(pg_catalog.format('%I.opus_requests', n.nspname)) IS NOT NULL",
					 true, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		return NULL;
	version = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	if (version == NULL || strcmp(version, OPUS_PG_VERSION) != 0)
	{
		other_sql_version = version ? version : "?";
		return NULL;
	}
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

static void
insert_row(SPIPlanPtr plan, const OpusLogRecord *st, const OpusLogRecord *fin)
{
	const OpusLogRecord *r = fin ? fin : st;
	Datum		v[INSERT_NARGS];
	char		n[INSERT_NARGS + 1];
	int			k = 0;

	memset(n, ' ', sizeof(n));
	n[INSERT_NARGS] = '\0';
	v[k++] = Int64GetDatum((int64) r->request_id);
	v[k++] = ObjectIdGetDatum(r->userid);
	v[k++] = ObjectIdGetDatum(r->dbid);
	v[k++] = Int32GetDatum(r->backend_pid);
	v[k] = text_or_null(r->model, &n[k]);
	k++;
	v[k++] = CStringGetTextDatum(r->kind == OPUS_KIND_CHAT ? "chat" :
								 r->kind == OPUS_KIND_EMBED ? "embed" : "generate");
	v[k++] = CStringGetTextDatum(params_json(r));
	v[k++] = CStringGetTextDatum(OpusReqStatusName((OpusReqStatus) r->status));
	v[k] = text_or_null(fin ? finish_name(fin->finish) : NULL, &n[k]);
	k++;
	v[k] = Int32GetDatum(r->n_prompt);
	n[k++] = fin && r->n_prompt >= 0 ? ' ' : 'n';
	v[k] = Int32GetDatum(r->n_completion);
	n[k++] = fin && r->n_completion >= 0 ? ' ' : 'n';
	v[k] = Int32GetDatum(r->n_cached);
	n[k++] = fin && r->n_cached >= 0 ? ' ' : 'n';
	v[k] = text_or_null(fin ? fin->error : NULL, &n[k]);
	k++;
	v[k] = ts_or_null(r->submitted_at, &n[k]);
	k++;
	v[k] = ts_or_null(r->started_at ? r->started_at : (st ? st->started_at : 0), &n[k]);
	k++;
	v[k] = ts_or_null(fin ? fin->first_token_at : 0, &n[k]);
	k++;
	v[k] = ts_or_null(fin ? fin->finished_at : 0, &n[k]);
	k++;
	Assert(k == INSERT_NARGS);
	if (SPI_execute_plan(plan, v, n, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "opus_pg logger: insert into opus_requests failed");
}

/* Update the running row of fin's request; false if there is none. */
static bool
update_row(SPIPlanPtr plan, const OpusLogRecord *fin)
{
	Datum		v[UPDATE_NARGS];
	char		n[UPDATE_NARGS + 1];
	int			k = 0;

	memset(n, ' ', sizeof(n));
	n[UPDATE_NARGS] = '\0';
	v[k++] = Int64GetDatum((int64) fin->request_id);
	v[k++] = TimestampTzGetDatum(fin->submitted_at);
	v[k++] = CStringGetTextDatum(OpusReqStatusName((OpusReqStatus) fin->status));
	v[k] = text_or_null(finish_name(fin->finish), &n[k]);
	k++;
	v[k] = Int32GetDatum(fin->n_prompt);
	n[k++] = fin->n_prompt >= 0 ? ' ' : 'n';
	v[k] = Int32GetDatum(fin->n_completion);
	n[k++] = fin->n_completion >= 0 ? ' ' : 'n';
	v[k] = Int32GetDatum(fin->n_cached);
	n[k++] = fin->n_cached >= 0 ? ' ' : 'n';
	v[k] = text_or_null(fin->error, &n[k]);
	k++;
	v[k] = ts_or_null(fin->started_at, &n[k]);
	k++;
	v[k] = ts_or_null(fin->first_token_at, &n[k]);
	k++;
	v[k] = ts_or_null(fin->finished_at, &n[k]);
	k++;
	Assert(k == UPDATE_NARGS);
	if (SPI_execute_plan(plan, v, n, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "opus_pg logger: update of opus_requests failed");
	return SPI_processed > 0;
}

/* Why records were last discarded (0: they were not), so each reason is logged once. */
static int	discard_logged = 0;

/*
 * Write one batch in one transaction.  Returns the number of records
 * written (the rest were dropped: no table).  Raises on SQL errors.
 */
static int
write_batch(OpusLogRecord *recs, int n)
{
	static const Oid ins_types[INSERT_NARGS] = {
		INT8OID, OIDOID, OIDOID, INT4OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID,
		INT4OID, INT4OID, INT4OID, TEXTOID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID
	};
	static const Oid upd_types[UPDATE_NARGS] = {
		INT8OID, TIMESTAMPTZOID, TEXTOID, TEXTOID, INT4OID, INT4OID, INT4OID, TEXTOID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID
	};
	char	   *table;
	SPIPlanPtr	ins,
				upd;
	bool	   *merged;
	int			i,
				j;

	table = log_table();
	if (table == NULL)
	{
		int			why = other_sql_version != NULL ? 2 : 1;

		if (discard_logged != why && other_sql_version != NULL)
			ereport(LOG,
					(errmsg("opus_pg: the extension in database \"%s\" is version %s, the library %s; request records are discarded",
							opus_log_database, other_sql_version, OPUS_PG_VERSION),
					 errhint("Run ALTER EXTENSION opus_pg UPDATE in database \"%s\" (see docs/upgrade.md).",
							 opus_log_database)));
		else if (discard_logged != why)
			ereport(LOG,
					(errmsg("opus_pg: the request log table is missing in database \"%s\"; request records are discarded",
							opus_log_database),
					 errhint("Run CREATE EXTENSION opus_pg in database \"%s\", or set opus.database.",
							 opus_log_database)));
		discard_logged = why;
		return 0;
	}
	discard_logged = 0;

	ins = SPI_prepare(psprintf("INSERT INTO %s (request_id, userid, dbid, backend_pid, model, kind, "
							   "params, status, finish_reason, prompt_tokens, completion_tokens, "
							   "cached_tokens, error, submitted_at, started_at, first_token_at, finished_at, "
							   "username) "
							   "VALUES ($1, $2, $3, $4, $5, $6, $7::pg_catalog.jsonb, $8, $9, $10, $11, "
							   "$12, $13, $14, $15, $16, $17, "
							   "(SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) $2))",
							   table),
					  INSERT_NARGS, (Oid *) ins_types);
	upd = SPI_prepare(psprintf("UPDATE %s SET status = $3, finish_reason = $4, prompt_tokens = $5, "
							   "completion_tokens = $6, cached_tokens = $7, error = $8, "
							   "started_at = COALESCE($9, started_at), first_token_at = $10, "
							   "finished_at = $11 "
							   "WHERE request_id = $1 AND submitted_at = $2 AND status = 'running'",
							   table),
					  UPDATE_NARGS, (Oid *) upd_types);
	if (ins == NULL || upd == NULL)
		elog(ERROR, "opus_pg logger: could not prepare statements: %s",
			 SPI_result_code_string(SPI_result));

	/* A START followed in this batch by its FINISH is one finished row. */
	merged = palloc0(sizeof(bool) * n);
	for (i = 0; i < n; i++)
	{
		const OpusLogRecord *st = NULL;

		if (merged[i])
			continue;
		if (recs[i].event == OPUS_LOG_START)
		{
			for (j = i + 1; j < n; j++)
			{
				if (recs[j].event == OPUS_LOG_FINISH && !merged[j] &&
					recs[j].request_id == recs[i].request_id &&
					recs[j].submitted_at == recs[i].submitted_at)
					break;
			}
			if (j < n)
			{
				merged[j] = true;
				insert_row(ins, &recs[i], &recs[j]);
			}
			else
				insert_row(ins, &recs[i], NULL);
			continue;
		}
		if (!update_row(upd, &recs[i]))
			insert_row(ins, st, &recs[i]);
	}
	pfree(merged);
	return n;
}

/*
 * At start-up: rows still 'running' that no live request owns were left by
 * a server crash or restart (or a logger restart): mark them interrupted.
 */
static void
sweep_interrupted(void)
{
	char	   *table;
	uint64	   *live;
	int			n_live;
	Datum	   *elems;
	ArrayType  *arr;
	Datum		args[2];
	Oid			types[2] = {INT8ARRAYOID, TIMESTAMPTZOID};
	int			i;

	table = log_table();
	if (table == NULL)
		return;
	live = OpusLiveRequestIds(&n_live);
	elems = palloc(sizeof(Datum) * Max(n_live, 1));
	for (i = 0; i < n_live; i++)
		elems[i] = Int64GetDatum((int64) live[i]);
	arr = construct_array(elems, n_live, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
	args[0] = PointerGetDatum(arr);
	args[1] = TimestampTzGetDatum(PgStartTime);
	if (SPI_execute_with_args(psprintf("UPDATE %s SET status = 'interrupted', "
									   "finished_at = pg_catalog.now(), "
									   "error = COALESCE(error, 'the server or the request logger restarted while the request was running') "
									   "WHERE status = 'running' AND "
									   "(submitted_at < $2 OR request_id <> ALL ($1))", table),
							  2, types, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "opus_pg logger: marking interrupted requests failed");
	if (SPI_processed > 0)
		ereport(LOG,
				(errmsg("opus_pg: marked %llu running request log rows as interrupted",
						(unsigned long long) SPI_processed)));
}

static void
apply_retention(void)
{
	char	   *table;

	if (opus_log_retention_min <= 0)
		return;
	table = log_table();
	if (table == NULL)
		return;
	if (SPI_execute(psprintf("DELETE FROM %s WHERE submitted_at < pg_catalog.now() - "
							 "pg_catalog.make_interval(mins => %d)",
							 table, opus_log_retention_min), false, 0) != SPI_OK_DELETE)
		elog(ERROR, "opus_pg logger: retention delete failed");
}

typedef enum LoggerTask
{
	TASK_SWEEP,
	TASK_BATCH,
	TASK_RETENTION
} LoggerTask;

/*
 * Run one task in its own transaction.  An SQL error is reported, the
 * transaction rolled back, and the batch's records counted as dropped; the
 * logger carries on.
 */
static void
run_task(LoggerTask task, OpusLogRecord *recs, int n)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	int			written = 0;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "opus_pg logger: SPI_connect failed");
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING,
							   task == TASK_SWEEP ? "opus_pg logger: marking interrupted requests" :
							   task == TASK_BATCH ? "opus_pg logger: writing request records" :
							   "opus_pg logger: deleting old request records");
		if (task == TASK_SWEEP)
			sweep_interrupted();
		else if (task == TASK_BATCH)
			written = write_batch(recs, n);
		else
			apply_retention();
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
		if (task == TASK_BATCH)
			count_result(written, n - written);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcxt);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		if (task == TASK_BATCH)
			count_result(0, n);
		pg_usleep(100000L);		/* no hot loop on a persistent error */
	}
	PG_END_TRY();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

static void
logger_exit(int code, Datum arg)
{
	SpinLockAcquire(&OpusLog->mutex);
	OpusLog->logger_procno = -1;
	SpinLockRelease(&OpusLog->mutex);
}

void
OpusLoggerMain(Datum arg)
{
	OpusLogRecord *batch;
	TimestampTz last_retention = 0;
	MemoryContext loop_cxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	if (OpusLog == NULL || OpusShared == NULL)
		ereport(ERROR, (errmsg("opus_pg shared memory is not initialised")));
	BackgroundWorkerInitializeConnection(opus_log_database, NULL, 0);
	/*
	 * The log is accounting, not data callers wait on: a crash may lose the
	 * last batch (those requests' START rows are then marked interrupted),
	 * so the logger does not wait for WAL flushes.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	/*
	 * The logger runs as the bootstrap superuser: it must not resolve a name
	 * in a schema other roles can create objects in (a public.format(text,
	 * name) would otherwise be called instead of pg_catalog's, as superuser).
	 * Its queries name the log table with its schema.
	 */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);

	SpinLockAcquire(&OpusLog->mutex);
	OpusLog->logger_procno = MyProc->pgprocno;
	SpinLockRelease(&OpusLog->mutex);
	before_shmem_exit(logger_exit, (Datum) 0);

	batch = MemoryContextAlloc(TopMemoryContext, sizeof(OpusLogRecord) * BATCH_MAX);
	loop_cxt = AllocSetContextCreate(TopMemoryContext, "opus_pg logger", ALLOCSET_DEFAULT_SIZES);

	MemoryContextSwitchTo(loop_cxt);
	run_task(TASK_SWEEP, NULL, 0);
	MemoryContextReset(loop_cxt);

	for (;;)
	{
		bool		shutdown = ShutdownRequestPending;
		int			n;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		/* Drain what is queued (all of it before exiting). */
		while ((n = ring_take(batch, BATCH_MAX)) > 0)
		{
			run_task(TASK_BATCH, batch, n);
			MemoryContextReset(loop_cxt);
			if (n < BATCH_MAX)
				break;
		}
		if (shutdown)
			break;
		if (opus_log_retention_min > 0 &&
			TimestampDifferenceExceeds(last_retention, GetCurrentTimestamp(), RETENTION_EVERY_MS))
		{
			run_task(TASK_RETENTION, NULL, 0);
			MemoryContextReset(loop_cxt);
			last_retention = GetCurrentTimestamp();
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 opus_log_flush_interval_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	proc_exit(0);
}

const char *
OpusReqStatusName(OpusReqStatus st)
{
	switch (st)
	{
		case OPUS_REQ_RUNNING:
			return "running";
		case OPUS_REQ_COMPLETED:
			return "completed";
		case OPUS_REQ_ERROR:
			return "error";
		case OPUS_REQ_CANCELLED:
			return "cancelled";
		case OPUS_REQ_FAILED:
			return "failed";
		case OPUS_REQ_INTERRUPTED:
			return "interrupted";
	}
	return "unknown";
}
