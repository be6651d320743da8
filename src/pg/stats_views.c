/*
 * stats_views.c - the set-returning functions behind the statistics views.
 * Each carries an API version in its symbol (opus_stat_v1 ...): a later
 * release adds columns in a new function (v2) and an upgrade script points
 * the view at it, while the old symbol keeps working for old scripts.
 *
 *   opus_stat_v1()                 pg_stat_opus
 *   opus_stat_activity_v2()        pg_stat_opus_activity (v2: a model column)
 *   opus_stat_engine_v2()          pg_stat_opus_engine (one row per model;
 *                                  v1: the default model's row, for 0.1.0)
 *   opus_stat_latency_v2()         pg_stat_opus_latency (per model: count, mean, p50/p95/p99)
 *   opus_stat_latency_buckets_v2() pg_stat_opus_latency_buckets (per model, cumulative, Prometheus style)
 *   (the _v1 functions: 0.1.0's columns, all models together)
 *   opus_stat_reset()              pg_stat_opus_reset() (revoked from PUBLIC)
 *
 * Everything is readable by everyone; the prompt text in
 * pg_stat_opus_activity is '<insufficient privilege>' unless the request is
 * the reader's own (or a role whose privileges the reader has) or the reader
 * has pg_read_all_stats.  Fields are copied out of shared memory under the
 * locks described at the top of stats.c, never held while building tuples.
 */
#include "postgres.h"

#include <math.h>
#include <unistd.h>

#include "catalog/pg_authid.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "opus_pg.h"
#include "stats_int.h"

PG_FUNCTION_INFO_V1(opus_stat_v1);
PG_FUNCTION_INFO_V1(opus_stat_activity_v1);
PG_FUNCTION_INFO_V1(opus_stat_activity_v2);
PG_FUNCTION_INFO_V1(opus_stat_engine_v1);
PG_FUNCTION_INFO_V1(opus_stat_engine_v2);
PG_FUNCTION_INFO_V1(opus_stat_latency_v1);
PG_FUNCTION_INFO_V1(opus_stat_latency_v2);
PG_FUNCTION_INFO_V1(opus_stat_latency_buckets_v1);
PG_FUNCTION_INFO_V1(opus_stat_latency_buckets_v2);
PG_FUNCTION_INFO_V1(opus_stat_reset);

static void
check_stats(void)
{
	OpusCheckPreloaded();
	if (OpusStats == NULL || OpusStatHash == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("opus_pg statistics are not initialised")));
}

/* ---------------------------------------------------------------------
 * pg_stat_opus
 * --------------------------------------------------------------------- */

#define STAT_COLS 18

Datum
opus_stat_v1(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS hs;
	OpusStatEntry *e;

	check_stats();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(OpusStats->lock, LW_SHARED);
	hash_seq_init(&hs, OpusStatHash);
	while ((e = hash_seq_search(&hs)) != NULL)
	{
		Datum		values[STAT_COLS];
		bool		nulls[STAT_COLS];
		OpusStatCounters c;
		int			k = 0;

		SpinLockAcquire(&e->mutex);
		c = e->c;
		SpinLockRelease(&e->mutex);
		memset(nulls, 0, sizeof(nulls));
		values[k++] = ObjectIdGetDatum(e->key.userid);
		values[k++] = ObjectIdGetDatum(e->key.dbid);
		values[k++] = CStringGetTextDatum(e->key.model);
		values[k++] = Int64GetDatum(c.calls);
		values[k++] = Int64GetDatum(c.errors);
		values[k++] = Int64GetDatum(c.cancellations);
		values[k++] = Int64GetDatum(c.rejections);
		values[k++] = Int64GetDatum(c.prompt_tokens);
		values[k++] = Int64GetDatum(c.completion_tokens);
		values[k++] = Int64GetDatum(c.cached_tokens);
		values[k++] = Float8GetDatum(c.total_time);
		values[k++] = Float8GetDatum(c.min_time);
		values[k++] = Float8GetDatum(c.max_time);
		values[k++] = Float8GetDatum(c.mean_time);
		values[k++] = Float8GetDatum(c.calls > 1 ? sqrt(c.sum_var_time / c.calls) : 0.0);
		values[k++] = Float8GetDatum(c.calls > 0 ? c.total_queue_time / c.calls : 0.0);
		if (c.n_ttft > 0)
			values[k++] = Float8GetDatum(c.total_ttft / c.n_ttft);
		else
			nulls[k++] = true;
		if (c.n_tpot > 0)
			values[k++] = Float8GetDatum(c.total_tpot / c.n_tpot);
		else
			nulls[k++] = true;
		Assert(k == STAT_COLS);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(OpusStats->lock);
	return (Datum) 0;
}

/* ---------------------------------------------------------------------
 * pg_stat_opus_activity
 * --------------------------------------------------------------------- */

static const char *
kind_name(uint8 kind)
{
	switch (kind)
	{
		case OPUS_KIND_GENERATE:
			return "generate";
		case OPUS_KIND_CHAT:
			return "chat";
		case OPUS_KIND_TOKENIZE:
			return "tokenize";
		case OPUS_KIND_DETOKENIZE:
			return "detokenize";
		case OPUS_KIND_EMBED:
			return "embed";
	}
	return "unknown";
}

/* UTF-8 bytes -> a text datum in the database encoding (NULL if impossible). */
static bool
utf8_text_datum(const char *s, int len, Datum *out)
{
	int			enc = GetDatabaseEncoding();
	char	   *conv;

	if (enc == PG_UTF8 || enc == PG_SQL_ASCII)
	{
		*out = PointerGetDatum(cstring_to_text_with_len(s, len));
		return true;
	}
	PG_TRY();
	{
		char	   *z = pnstrdup(s, len);

		conv = pg_any_to_server(z, len, PG_UTF8);
		*out = CStringGetTextDatum(conv);
	}
	PG_CATCH();
	{
		FlushErrorState();
		return false;
	}
	PG_END_TRY();
	return true;
}

static bool
can_see_text(Oid owner)
{
	Oid			me = GetUserId();

	return me == owner || has_privs_of_role(me, owner) ||
		has_privs_of_role(me, ROLE_PG_READ_ALL_STATS);
}

#define ACT_COLS 15

/*
 * One row per queued or running request.  with_model: API version 2, a
 * model column after kind (the model serving it, or asked for while it
 * waits for the supervisor); version 1 (0.1.0) has none.
 */
static void
stat_activity(FunctionCallInfo fcinfo, bool with_model)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	OpusSlotActivity *a = palloc(sizeof(OpusSlotActivity));
	int			i;

	check_stats();
	InitMaterializedSRF(fcinfo, 0);

	for (i = 0; i < OpusShared->n_slots; i++)
	{
		OpusSlot   *slot = OpusGetSlot(i);
		OpusSlotState st;
		uint64		id;
		int			pid;
		Oid			userid,
					dbid;
		uint8		kind;
		int			model;
		TimestampTz submitted;
		Datum		values[ACT_COLS];
		bool		nulls[ACT_COLS];
		char		label[OPUS_STAT_MODEL_LEN];
		const char *state;
		int			k = 0;

		SpinLockAcquire(&slot->mutex);
		st = slot->state;
		id = slot->request_id;
		pid = slot->backend_pid;
		userid = slot->userid;
		dbid = slot->dbid;
		SpinLockRelease(&slot->mutex);
		if (st != OPUS_SLOT_SUBMITTED && st != OPUS_SLOT_RUNNING)
			continue;
		/* set at claim, before SUBMITTED; stable until the slot is FREE */
		pg_read_barrier();
		kind = slot->kind;
		submitted = slot->submit_time;
		/* the supervisor sets served_model before RUNNING */
		model = st == OPUS_SLOT_RUNNING ? slot->served_model : slot->model;

		SpinLockAcquire(&OpusStats->activity[i].mutex);
		memcpy(a, &OpusStats->activity[i], sizeof(OpusSlotActivity));
		SpinLockRelease(&OpusStats->activity[i].mutex);
		if (a->request_id != id)
			continue;			/* the slot moved on meanwhile */

		if (st == OPUS_SLOT_SUBMITTED || a->phase == 0)
			state = (kind == OPUS_KIND_GENERATE || kind == OPUS_KIND_CHAT ||
					 st == OPUS_SLOT_SUBMITTED) ? "queued" : "running";
		else if (a->phase == OPUS_PROTO_PHASE_PREFILL)
			state = "prefill";
		else if (a->phase == OPUS_PROTO_PHASE_DECODE)
			state = "decode";
		else
			state = "queued";

		memset(nulls, 0, sizeof(nulls));
		values[k++] = Int32GetDatum(pid);
		values[k++] = ObjectIdGetDatum(userid);
		values[k++] = ObjectIdGetDatum(dbid);
		values[k++] = Int64GetDatum((int64) id);
		values[k++] = CStringGetTextDatum(kind_name(kind));
		if (with_model)
		{
			OpusStatsModelLabel(model, label);
			if (label[0] != '\0')
				values[k++] = CStringGetTextDatum(label);
			else
				nulls[k++] = true;
		}
		values[k++] = CStringGetTextDatum(state);
		values[k++] = Int32GetDatum(a->priority);
		values[k++] = TimestampTzGetDatum(submitted);
		if (a->started_at != 0)
			values[k++] = TimestampTzGetDatum(a->started_at);
		else
			nulls[k++] = true;
		values[k++] = Int32GetDatum(a->n_prompt);
		values[k++] = Int32GetDatum(a->n_generated);
		if (a->max_tokens > 0)
			values[k++] = Int32GetDatum(a->max_tokens);
		else
			nulls[k++] = true;
		values[k++] = Int32GetDatum(a->kv_blocks);
		if (!can_see_text(userid))
			values[k++] = CStringGetTextDatum("<insufficient privilege>");
		else if (!utf8_text_datum(a->text, a->text_len, &values[k++]))
			nulls[k - 1] = true;
		Assert(k == ACT_COLS - (with_model ? 0 : 1));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(a);
}

Datum
opus_stat_activity_v1(PG_FUNCTION_ARGS)
{
	stat_activity(fcinfo, false);
	return (Datum) 0;
}

Datum
opus_stat_activity_v2(PG_FUNCTION_ARGS)
{
	stat_activity(fcinfo, true);
	return (Datum) 0;
}

/* ---------------------------------------------------------------------
 * pg_stat_opus_engine
 * --------------------------------------------------------------------- */

/* Resident set size of a process in bytes, or -1. */
static int64
process_rss(int pid)
{
	char		path[64];
	FILE	   *f;
	long		size,
				resident;
	int64		r = -1;

	if (pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/statm", pid);
	f = AllocateFile(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &size, &resident) == 2)
		r = (int64) resident * (int64) sysconf(_SC_PAGESIZE);
	FreeFile(f);
	return r;
}

/*
 * Tokens per second over the window ending now: the cumulative count now
 * minus the count at (now - window).  That count is read from the samples
 * around it: interpolated between two samples less than 1.5 s apart (the
 * engine was busy, the count grew steadily), else the older sample's (the
 * count was flat across a longer gap: samples are taken whenever tokens
 * are counted).  Caller holds OpusStats->mutex.
 */
static void
window_rates(const OpusEngineStats *es, TimestampTz now, int window_s,
			 double *gen_rate, double *prompt_rate)
{
	TimestampTz from = now - (TimestampTz) window_s * USECS_PER_SEC;
	double		gen0 = 0,
				prompt0 = 0;
	const OpusRateSample *newer = NULL;
	int			j;

	for (j = 0; j < es->n_samples; j++)
	{
		const OpusRateSample *s = &es->samples[(es->sample_head + OPUS_RATE_SAMPLES - j) % OPUS_RATE_SAMPLES];

		if (s->t <= from)
		{
			gen0 = (double) s->gen;
			prompt0 = (double) s->prompt;
			if (newer != NULL && newer->t - s->t < 3 * USECS_PER_SEC / 2)
			{
				double		f = (double) (from - s->t) / (double) (newer->t - s->t);

				gen0 += f * (double) (newer->gen - s->gen);
				prompt0 += f * (double) (newer->prompt - s->prompt);
			}
			break;
		}
		newer = s;
	}
	*gen_rate = ((double) es->gen_total - gen0) / window_s;
	*prompt_rate = ((double) es->prompt_total - prompt0) / window_s;
}

/* What every row of pg_stat_opus_engine shares: the slot pool, the log. */
typedef struct EngineViewCommon
{
	TimestampTz now;
	bool		read_all;
	int			busy;
	int			submitted[OPUS_MAX_MODELS]; /* waiting for the supervisor, by model asked */
	int64		log_written,
				log_dropped,
				log_pending;
	long		n_entries;
	int64		evictions;
	TimestampTz stats_reset;
} EngineViewCommon;

static void
engine_view_common(EngineViewCommon *c)
{
	int			i;

	memset(c, 0, sizeof(*c));
	c->now = GetCurrentTimestamp();
	c->read_all = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	for (i = 0; i < OpusShared->n_slots; i++)
	{
		OpusSlot   *slot = OpusGetSlot(i);
		OpusSlotState st;
		int			m;

		SpinLockAcquire(&slot->mutex);
		st = slot->state;
		m = slot->model;
		SpinLockRelease(&slot->mutex);
		c->busy += st != OPUS_SLOT_FREE;
		if (st == OPUS_SLOT_SUBMITTED && m < OPUS_MAX_MODELS)
			c->submitted[m]++;
	}
	OpusLogCounters(&c->log_written, &c->log_dropped, &c->log_pending);
	LWLockAcquire(OpusStats->lock, LW_SHARED);
	c->n_entries = hash_get_num_entries(OpusStatHash);
	LWLockRelease(OpusStats->lock);
	SpinLockAcquire(&OpusStats->mutex);
	c->evictions = OpusStats->evictions;
	c->stats_reset = OpusStats->stats_reset;
	SpinLockRelease(&OpusStats->mutex);
}

#define ENG_COLS 38

/*
 * The ENG_COLS columns of API version 1 for model entry m into values[] /
 * nulls[] (from index 0), and its name into name[] (NULL: not in use).
 * Returns false if entry m is not in use.
 */
static bool
engine_row(int m, const EngineViewCommon *c, Datum *values, bool *nulls, char *name)
{
	OpusEngineStatus *ep = OpusModel(m);
	OpusEngineStatus e;
	OpusEngineStats *s = palloc(sizeof(OpusEngineStats));
	double		gen10,
				prompt10,
				gen60,
				prompt60;
	int64		rss;
	int			k = 0;

	SpinLockAcquire(&ep->mutex);
	memcpy(&e, ep, sizeof(e));
	SpinLockRelease(&ep->mutex);
	if (m > 0 && !e.in_use)
	{
		pfree(s);
		return false;
	}
	strlcpy(name, m == 0 ? "default" : e.name, OPUS_MODEL_NAME_LEN);

	SpinLockAcquire(&OpusStats->mutex);
	memcpy(s, &OpusStats->engines[m], sizeof(*s));
	SpinLockRelease(&OpusStats->mutex);
	window_rates(s, c->now, 10, &gen10, &prompt10);
	window_rates(s, c->now, 60, &gen60, &prompt60);
	rss = e.state == OPUS_ENGINE_READY || e.state == OPUS_ENGINE_STARTING ?
		process_rss(e.engine_pid) : -1;

	memset(nulls, 0, sizeof(bool) * ENG_COLS);
#define PUT_OR_NULL(cond, datum) \
	do { if (cond) values[k++] = (datum); else nulls[k++] = true; } while (0)
	PUT_OR_NULL(e.engine_pid > 0, Int32GetDatum(e.engine_pid));
	values[k++] = CStringGetTextDatum(OpusEngineStateName(e.state, e.unresponsive));
	PUT_OR_NULL(s->model[0] != '\0', CStringGetTextDatum(s->model));
	PUT_OR_NULL(s->device[0] != '\0', CStringGetTextDatum(s->device));
	PUT_OR_NULL(s->threads > 0, Int32GetDatum(s->threads));
	PUT_OR_NULL(e.started_at != 0, TimestampTzGetDatum(e.started_at));
	PUT_OR_NULL(e.ready_at != 0 && e.state == OPUS_ENGINE_READY, TimestampTzGetDatum(e.ready_at));
	PUT_OR_NULL(e.ready_at != 0 && e.state == OPUS_ENGINE_READY,
				Float8GetDatum((double) (c->now - e.ready_at) / USECS_PER_SEC));
	values[k++] = Int64GetDatum(e.starts);
	values[k++] = Int64GetDatum(e.restarts);
	PUT_OR_NULL(e.last_error[0] != '\0', CStringGetTextDatum(e.last_error));
	PUT_OR_NULL(e.last_exit[0] != '\0', CStringGetTextDatum(e.last_exit));
	values[k++] = Int64GetDatum(s->steps_total);
	values[k++] = Int32GetDatum(s->have_last ? s->last.batch_size : 0);
	values[k++] = Float8GetDatum(s->steps_total > 0 ?
								 (double) s->gen_total / s->steps_total : 0.0);
	values[k++] = Float8GetDatum(gen10);
	values[k++] = Float8GetDatum(gen60);
	values[k++] = Float8GetDatum(prompt10);
	values[k++] = Float8GetDatum(prompt60);
	values[k++] = Int64GetDatum(s->gen_total);
	values[k++] = Int64GetDatum(s->prompt_total);
	PUT_OR_NULL(s->have_last, Int64GetDatum(s->last.kv_blocks_total));
	PUT_OR_NULL(s->have_last, Int64GetDatum(s->last.kv_blocks_used));
	PUT_OR_NULL(s->have_last, Int64GetDatum(s->last.kv_blocks_cached));
	/*
	 * Server-wide prefix counters move with other roles' cache hits: only
	 * for pg_read_all_stats (tenants.c, docs/tenants.md).
	 */
	PUT_OR_NULL(c->read_all, Int64GetDatum(s->prefix_hit_total));
	PUT_OR_NULL(c->read_all, Int64GetDatum(s->prefix_query_total));
	values[k++] = Int64GetDatum(s->preempt_total);
	values[k++] = Int32GetDatum(c->submitted[m] + (s->have_last ? s->last.n_queued : 0));
	values[k++] = Int32GetDatum(s->have_last ? s->last.n_running : 0);
	/* the rest is server-wide, the same on every row */
	values[k++] = Int32GetDatum(c->busy);
	values[k++] = Int32GetDatum(OpusShared->n_slots);
	PUT_OR_NULL(rss >= 0, Int64GetDatum(rss));
	values[k++] = Int64GetDatum(c->log_written);
	values[k++] = Int64GetDatum(c->log_dropped);
	values[k++] = Int64GetDatum(c->log_pending);
	values[k++] = Int64GetDatum((int64) c->n_entries);
	values[k++] = Int64GetDatum(c->evictions);
	values[k++] = TimestampTzGetDatum(c->stats_reset);
#undef PUT_OR_NULL
	Assert(k == ENG_COLS);
	pfree(s);
	return true;
}

/*
 * API version 1: one row, the default model's engine (what 0.1.0's
 * pg_stat_opus_engine showed; kept for databases not yet updated).
 */
Datum
opus_stat_engine_v1(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	EngineViewCommon c;
	Datum		values[ENG_COLS];
	bool		nulls[ENG_COLS];
	char		name[OPUS_MODEL_NAME_LEN];

	check_stats();
	InitMaterializedSRF(fcinfo, 0);
	engine_view_common(&c);
	if (engine_row(0, &c, values, nulls, name))
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/*
 * API version 2: one row per declared model (its serving engine), the
 * model's name first, then the columns of version 1.  The default model's
 * row (name = 'default') reads as version 1's row did.
 */
Datum
opus_stat_engine_v2(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	EngineViewCommon c;
	Datum		values[1 + ENG_COLS];
	bool		nulls[1 + ENG_COLS];
	char		name[OPUS_MODEL_NAME_LEN];
	int			m;

	check_stats();
	InitMaterializedSRF(fcinfo, 0);
	engine_view_common(&c);
	for (m = 0; m < OPUS_MAX_MODELS; m++)
	{
		if (!engine_row(m, &c, values + 1, nulls + 1, name))
			continue;
		values[0] = CStringGetTextDatum(name);
		nulls[0] = false;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* ---------------------------------------------------------------------
 * Latency histograms
 * --------------------------------------------------------------------- */

/*
 * The q-quantile of a histogram, interpolated linearly inside the bucket
 * that holds it (from the bucket's lower to its upper bound; the +Inf
 * bucket gives the largest value seen), and never above that maximum.
 */
static double
hist_quantile(const OpusHistogram *h, double q)
{
	double		target = q * (double) h->count;
	double		cum = 0;
	int			b;

	for (b = 0; b < OPUS_HIST_NBUCKETS; b++)
	{
		double		n = (double) h->counts[b];

		if (n > 0 && cum + n >= target)
		{
			double		lo = b == 0 ? 0.0 : OpusHistBounds[b - 1];
			double		hi = OpusHistBounds[b];
			double		v;

			if (isinf(hi))
				return Max(lo, h->max);
			v = lo + (hi - lo) * ((target - cum) / n);
			return Min(v, h->max);
		}
		cum += n;
	}
	return h->max;
}

/*
 * The histograms of every model entry in use into hist[m] (in_use[m]
 * says which), and their sum over all entries (what version 1 shows)
 * into all.
 */
static void
copy_histograms(OpusHistogram (*hist)[OPUS_HIST__COUNT], bool *in_use, OpusHistogram *all)
{
	int			m,
				h,
				b;

	for (m = 0; m < OPUS_MAX_MODELS; m++)
	{
		SpinLockAcquire(&OpusModel(m)->mutex);
		in_use[m] = m == 0 || OpusModel(m)->in_use;
		SpinLockRelease(&OpusModel(m)->mutex);
	}
	SpinLockAcquire(&OpusStats->mutex);
	for (m = 0; m < OPUS_MAX_MODELS; m++)
		memcpy(hist[m], OpusStats->engines[m].hist, sizeof(OpusStats->engines[m].hist));
	SpinLockRelease(&OpusStats->mutex);
	memset(all, 0, sizeof(OpusHistogram) * OPUS_HIST__COUNT);
	for (m = 0; m < OPUS_MAX_MODELS; m++)
		for (h = 0; h < OPUS_HIST__COUNT; h++)
		{
			for (b = 0; b < OPUS_HIST_NBUCKETS; b++)
				all[h].counts[b] += hist[m][h].counts[b];
			all[h].count += hist[m][h].count;
			all[h].sum += hist[m][h].sum;
			all[h].max = Max(all[h].max, hist[m][h].max);
		}
}

#define LAT_COLS 9

/* Rows of pg_stat_opus_latency for hist[], after a model column if model. */
static void
latency_rows(ReturnSetInfo *rsinfo, const char *model, const OpusHistogram *hist)
{
	int			h;

	for (h = 0; h < OPUS_HIST__COUNT; h++)
	{
		const OpusHistogram *hg = &hist[h];
		Datum		values[LAT_COLS];
		bool		nulls[LAT_COLS];
		bool		empty = hg->count == 0;
		int			k = 0;

		memset(nulls, 0, sizeof(nulls));
		if (model)
			values[k++] = CStringGetTextDatum(model);
		values[k++] = CStringGetTextDatum(OpusHistNames[h]);
		values[k++] = Int64GetDatum(hg->count);
		values[k++] = Float8GetDatum(hg->sum);
		nulls[k] = nulls[k + 1] = nulls[k + 2] = nulls[k + 3] = nulls[k + 4] = empty;
		if (!empty)
		{
			values[k] = Float8GetDatum(hg->sum / hg->count);
			values[k + 1] = Float8GetDatum(hg->max);
			values[k + 2] = Float8GetDatum(hist_quantile(hg, 0.50));
			values[k + 3] = Float8GetDatum(hist_quantile(hg, 0.95));
			values[k + 4] = Float8GetDatum(hist_quantile(hg, 0.99));
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/* Cumulative bucket rows for hist[], after a model column if model. */
static void
bucket_rows(ReturnSetInfo *rsinfo, const char *model, const OpusHistogram *hist)
{
	int			h,
				b;

	for (h = 0; h < OPUS_HIST__COUNT; h++)
	{
		int64		cum = 0;

		for (b = 0; b < OPUS_HIST_NBUCKETS; b++)
		{
			Datum		values[4];
			bool		nulls[4] = {false, false, false, false};
			int			k = 0;

			cum += hist[h].counts[b];
			if (model)
				values[k++] = CStringGetTextDatum(model);
			values[k++] = CStringGetTextDatum(OpusHistNames[h]);
			values[k++] = Float8GetDatum(OpusHistBounds[b]);
			values[k++] = Int64GetDatum(cum);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
}

/*
 * pg_stat_opus_latency and _buckets.  Version 2: per model (named as in
 * pg_stat_opus), every model in use; version 1 (0.1.0): all models
 * together.
 */
static void
stat_latency(FunctionCallInfo fcinfo, bool per_model, bool buckets)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	OpusHistogram (*hist)[OPUS_HIST__COUNT] = palloc(sizeof(OpusHistogram) * OPUS_MAX_MODELS * OPUS_HIST__COUNT);
	OpusHistogram all[OPUS_HIST__COUNT];
	bool		in_use[OPUS_MAX_MODELS];
	char		label[OPUS_STAT_MODEL_LEN];
	int			m;

	check_stats();
	InitMaterializedSRF(fcinfo, 0);
	copy_histograms(hist, in_use, all);
	if (!per_model)
	{
		if (buckets)
			bucket_rows(rsinfo, NULL, all);
		else
			latency_rows(rsinfo, NULL, all);
	}
	else
		for (m = 0; m < OPUS_MAX_MODELS; m++)
		{
			if (!in_use[m])
				continue;
			OpusStatsModelLabel(m, label);
			if (buckets)
				bucket_rows(rsinfo, label, hist[m]);
			else
				latency_rows(rsinfo, label, hist[m]);
		}
	pfree(hist);
}

Datum
opus_stat_latency_v1(PG_FUNCTION_ARGS)
{
	stat_latency(fcinfo, false, false);
	return (Datum) 0;
}

Datum
opus_stat_latency_v2(PG_FUNCTION_ARGS)
{
	stat_latency(fcinfo, true, false);
	return (Datum) 0;
}

Datum
opus_stat_latency_buckets_v1(PG_FUNCTION_ARGS)
{
	stat_latency(fcinfo, false, true);
	return (Datum) 0;
}

Datum
opus_stat_latency_buckets_v2(PG_FUNCTION_ARGS)
{
	stat_latency(fcinfo, true, true);
	return (Datum) 0;
}

/* ---------------------------------------------------------------------
 * Reset
 * --------------------------------------------------------------------- */

/*
 * Discard pg_stat_opus entries and the histograms; returns the reset time.
 * Engine totals (tokens, steps, restarts) are not reset: they describe the
 * server's lifetime, like pg_stat_bgwriter's buffers_alloc.
 */
Datum
opus_stat_reset(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS hs;
	OpusStatEntry *e;
	TimestampTz now = GetCurrentTimestamp();
	int			m;

	check_stats();
	LWLockAcquire(OpusStats->lock, LW_EXCLUSIVE);
	hash_seq_init(&hs, OpusStatHash);
	while ((e = hash_seq_search(&hs)) != NULL)
		hash_search(OpusStatHash, &e->key, HASH_REMOVE, NULL);
	SpinLockAcquire(&OpusStats->mutex);
	for (m = 0; m < OPUS_MAX_MODELS; m++)
		memset(OpusStats->engines[m].hist, 0, sizeof(OpusStats->engines[m].hist));
	OpusStats->evictions = 0;
	OpusStats->stats_reset = now;
	SpinLockRelease(&OpusStats->mutex);
	LWLockRelease(OpusStats->lock);
	PG_RETURN_TIMESTAMPTZ(now);
}
