/*
 * stats.c - the shared-memory statistics of opus_pg: per (user, database,
 * model) counters (pg_stat_opus), per-slot progress (pg_stat_opus_activity),
 * engine totals and throughput samples (pg_stat_opus_engine) and the latency
 * histograms; and the hooks that keep them.
 *
 * Who writes: the supervisor, as requests move through it (sent, PROGRESS,
 * DONE, failed, cancelled) and as the engine reports STATS.  It is the one
 * process that sees every request end, with the slot's user and database
 * and the engine's usage and timings, so nothing is counted twice and the
 * backends' hot path does not change.  Backends write only two things: the
 * activity text of a slot they are filling, and a rejection (a request
 * refused before it was queued, which the supervisor never sees).
 *
 * Generation requests (opus_generate, opus_chat, their jsonb, streaming,
 * set-based and asynchronous forms) and embedding requests (opus_embed,
 * opus_embed_many, opus_submit_embed: prompt tokens, no completion tokens,
 * no time to first token) are counted, logged and put in the histograms;
 * tokenize and detokenize appear in pg_stat_opus_activity only.
 *
 * Locking rules
 * -------------
 * OpusStats->lock (an LWLock) protects the pg_stat_opus hash table's
 * structure: shared to look an entry up, exclusive to insert, evict, reset
 * or delete.  Each entry's mutex (a spinlock) protects its counters; it is
 * taken, with the LWLock held in either mode, for a few assignments.
 * Eviction: when an insert finds opus.stat_max_entries entries, the 5% (at
 * least one) with the fewest requests (calls + errors + cancellations +
 * rejections) are removed, as pg_stat_statements removes its least-used
 * entries, and `evictions` counts them.
 *
 * OpusStats->mutex (a spinlock) protects the histograms, the engine fields,
 * the throughput samples, stats_reset and evictions.  Writers: the
 * supervisor (and backends' resets); readers copy the fields out.
 *
 * activity[i].mutex protects activity entry i.  The backend that claimed
 * slot i writes request_id, max_tokens and the text while the slot is
 * FILLING; the supervisor writes the progress fields while it owns the slot.
 * A reader copies the entry and uses it only if its request_id is the id it
 * read from the slot (under the slot's own mutex).
 *
 * Lock order: OpusStats->lock before an entry mutex; no other lock is held
 * with a spinlock.
 */
#include "postgres.h"

#include <math.h>

#include "common/pg_prng.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "opus_pg.h"
#include "stats_int.h"

int			opus_stat_max_entries = 1000;

OpusStatsShared *OpusStats = NULL;
HTAB	   *OpusStatHash = NULL;

const double OpusHistBounds[OPUS_HIST_NBUCKETS] = {
	0.5, 1, 2.5, 5, 10, 15, 20, 25, 30, 40, 50, 75, 100, 150, 200, 250, 300,
	400, 500, 750, 1000, 2500, 5000, 10000, 30000, 60000, 300000,
	INFINITY
};

const char *const OpusHistNames[OPUS_HIST__COUNT] = {
	"queue", "time_to_first_token", "inter_token_latency", "end_to_end"
};

/*
 * The supervisor's private view of each slot it has sent (only in the
 * supervisor process; allocated on first use).
 */
typedef struct OpusTrack
{
	uint64		id;				/* request tracked; 0 = none */
	bool		logged;			/* sampled into the request log */
	TimestampTz sent_at;
	TimestampTz first_token_at; /* when the first token was seen */
	TimestampTz last_token_at;	/* when n_generated last grew */
	int32		n_generated;
	int			model;			/* the model entry serving it */
	struct opus_proto_params params;
	int32		n_stop;
} OpusTrack;

static OpusTrack *track = NULL;

void
OpusStatsDefineSettings(bool preloading)
{
	if (!preloading)
		return;
	DefineCustomIntVariable("opus.stat_max_entries",
							"Entries (user, database, model) pg_stat_opus keeps in shared memory.",
							"When full, the least-used 5% are evicted.",
							&opus_stat_max_entries,
							1000, 10, 1000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
}

static Size
stats_struct_size(int n_slots)
{
	return add_size(offsetof(OpusStatsShared, activity),
					mul_size(n_slots, sizeof(OpusSlotActivity)));
}

void
OpusStatsShmemRequest(void)
{
	Size		size;

	size = MAXALIGN(stats_struct_size(opus_max_requests));
	size = add_size(size, hash_estimate_size(opus_stat_max_entries, sizeof(OpusStatEntry)));
	size = add_size(size, OpusLogShmemSize());
	RequestAddinShmemSpace(size);
	RequestNamedLWLockTranche("opus_pg stats", 1);
}

void
OpusStatsShmemInit(void)
{
	bool		found;
	HASHCTL		info;
	int			i;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	OpusStats = ShmemInitStruct("opus_pg stats", stats_struct_size(opus_max_requests), &found);
	if (!found)
	{
		memset(OpusStats, 0, stats_struct_size(opus_max_requests));
		OpusStats->lock = &(GetNamedLWLockTranche("opus_pg stats"))->lock;
		SpinLockInit(&OpusStats->mutex);
		OpusStats->stats_reset = GetCurrentTimestamp();
		OpusStats->n_slots = opus_max_requests;
		for (i = 0; i < OpusStats->n_slots; i++)
			SpinLockInit(&OpusStats->activity[i].mutex);
	}
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(OpusStatKey);
	info.entrysize = sizeof(OpusStatEntry);
	OpusStatHash = ShmemInitHash("opus_pg stats hash",
								 opus_stat_max_entries, opus_stat_max_entries,
								 &info, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
	OpusLogShmemInit();
}

static bool
is_generation(uint8 kind)
{
	return kind == OPUS_KIND_GENERATE || kind == OPUS_KIND_CHAT;
}

/* Is a request of this kind counted in pg_stat_opus and the request log? */
static bool
is_counted(uint8 kind)
{
	return is_generation(kind) || kind == OPUS_KIND_EMBED;
}

/* A model path's short name: the file name without ".gguf". */
static void
model_short_name(const char *path, char *out, size_t outlen)
{
	const char *base = strrchr(path, '/');
	size_t		len;

	strlcpy(out, base ? base + 1 : path, outlen);
	len = strlen(out);
	if (len > 5 && strcmp(out + len - 5, ".gguf") == 0)
		out[len - 5] = '\0';
}

/* The model pg_stat_opus charges a request to now. */
static void
current_model(char *out)
{
	SpinLockAcquire(&OpusStats->mutex);
	memcpy(out, OpusStats->engines[0].model, OPUS_STAT_MODEL_LEN);
	SpinLockRelease(&OpusStats->mutex);
}

void
OpusStatsModelLabel(int m, char *out)
{
	if (m <= 0 || m >= OPUS_MAX_MODELS)
	{
		current_model(out);
		return;
	}
	memset(out, 0, OPUS_STAT_MODEL_LEN);
	SpinLockAcquire(&OpusModel(m)->mutex);
	strlcpy(out, OpusModel(m)->name, OPUS_STAT_MODEL_LEN);
	SpinLockRelease(&OpusModel(m)->mutex);
}

/*
 * The model pg_stat_opus and the request log charge slot's request to:
 * the named model that served it (a fallback, if it went to one), else
 * the default model's short name.
 */
static void
slot_model(const OpusSlot *slot, char *out)
{
	OpusStatsModelLabel(slot->served_model, out);
}

static double
ms_between(TimestampTz a, TimestampTz b)
{
	return b > a ? (double) (b - a) / 1000.0 : 0.0;
}

/* ---------------------------------------------------------------------
 * pg_stat_opus entries
 * --------------------------------------------------------------------- */

static int
entry_usage_cmp(const void *a, const void *b)
{
	const OpusStatEntry *x = *(OpusStatEntry *const *) a;
	const OpusStatEntry *y = *(OpusStatEntry *const *) b;
	int64		ux = x->c.calls + x->c.errors + x->c.cancellations + x->c.rejections;
	int64		uy = y->c.calls + y->c.errors + y->c.cancellations + y->c.rejections;

	if (ux != uy)
		return ux < uy ? -1 : 1;
	return memcmp(&x->key, &y->key, sizeof(OpusStatKey));
}

/* Evict the least-used entries.  Caller holds OpusStats->lock exclusively. */
static void
stats_evict(void)
{
	HASH_SEQ_STATUS hs;
	OpusStatEntry **all;
	OpusStatEntry *e;
	long		n = hash_get_num_entries(OpusStatHash);
	long		k = 0;
	long		drop;
	long		i;

	all = palloc(sizeof(OpusStatEntry *) * Max(n, 1));
	hash_seq_init(&hs, OpusStatHash);
	while ((e = hash_seq_search(&hs)) != NULL)
		all[k++] = e;
	qsort(all, k, sizeof(OpusStatEntry *), entry_usage_cmp);
	drop = Max(1, k * 5 / 100);
	for (i = 0; i < drop && i < k; i++)
		hash_search(OpusStatHash, &all[i]->key, HASH_REMOVE, NULL);
	pfree(all);
	SpinLockAcquire(&OpusStats->mutex);
	OpusStats->evictions += Min(drop, k);
	SpinLockRelease(&OpusStats->mutex);
}

/*
 * Apply fn to the counters of (userid, dbid, model), creating the entry if
 * needed.  Takes the hash lock shared (exclusive only to insert).
 */
typedef void (*counter_fn) (OpusStatCounters *c, const void *arg);

static void
stats_apply(Oid userid, Oid dbid, const char *model, counter_fn fn, const void *arg)
{
	OpusStatKey key;
	OpusStatEntry *e;
	bool		found;

	memset(&key, 0, sizeof(key));
	key.userid = userid;
	key.dbid = dbid;
	strlcpy(key.model, model, sizeof(key.model));

	LWLockAcquire(OpusStats->lock, LW_SHARED);
	e = hash_search(OpusStatHash, &key, HASH_FIND, NULL);
	if (!e)
	{
		LWLockRelease(OpusStats->lock);
		LWLockAcquire(OpusStats->lock, LW_EXCLUSIVE);
		e = hash_search(OpusStatHash, &key, HASH_FIND, NULL);
		if (!e)
		{
			if (hash_get_num_entries(OpusStatHash) >= opus_stat_max_entries)
				stats_evict();
			e = hash_search(OpusStatHash, &key, HASH_ENTER_NULL, &found);
			if (!e)
			{
				LWLockRelease(OpusStats->lock);
				return;			/* out of shared memory: not counted */
			}
			if (!found)
			{
				SpinLockInit(&e->mutex);
				memset(&e->c, 0, sizeof(e->c));
			}
		}
	}
	SpinLockAcquire(&e->mutex);
	fn(&e->c, arg);
	SpinLockRelease(&e->mutex);
	LWLockRelease(OpusStats->lock);
}

typedef struct CompletedArg
{
	int32		n_prompt;
	int32		n_completion;
	int32		n_cached;
	double		e2e_ms;
	double		queue_ms;
	double		ttft_ms;		/* < 0: no token */
	double		tpot_ms;		/* < 0: fewer than two tokens */
} CompletedArg;

static void
count_completed(OpusStatCounters *c, const void *arg)
{
	const CompletedArg *a = arg;
	double		old_mean = c->mean_time;

	c->calls++;
	c->prompt_tokens += a->n_prompt;
	c->completion_tokens += a->n_completion;
	c->cached_tokens += a->n_cached;
	c->total_time += a->e2e_ms;
	if (c->calls == 1)
	{
		c->min_time = a->e2e_ms;
		c->max_time = a->e2e_ms;
	}
	else
	{
		c->min_time = Min(c->min_time, a->e2e_ms);
		c->max_time = Max(c->max_time, a->e2e_ms);
	}
	/* Welford, as pg_stat_statements does */
	c->mean_time += (a->e2e_ms - old_mean) / c->calls;
	c->sum_var_time += (a->e2e_ms - old_mean) * (a->e2e_ms - c->mean_time);
	c->total_queue_time += a->queue_ms;
	if (a->ttft_ms >= 0)
	{
		c->n_ttft++;
		c->total_ttft += a->ttft_ms;
	}
	if (a->tpot_ms >= 0)
	{
		c->n_tpot++;
		c->total_tpot += a->tpot_ms;
	}
}

static void
count_error(OpusStatCounters *c, const void *arg)
{
	c->errors++;
}

static void
count_cancel(OpusStatCounters *c, const void *arg)
{
	c->cancellations++;
}

static void
count_reject(OpusStatCounters *c, const void *arg)
{
	c->rejections++;
}

/* ---------------------------------------------------------------------
 * Histograms
 * --------------------------------------------------------------------- */

/*
 * Add `weight` observations of value ms to model entry m's histogram h.
 * Caller holds OpusStats->mutex.
 */
static void
hist_add(int m, OpusHistId h, double ms, int64 weight)
{
	OpusHistogram *hg = &OpusStats->engines[m].hist[h];
	int			b = 0;

	if (!(ms >= 0))
		ms = 0;
	while (b < OPUS_HIST_NBUCKETS - 1 && ms > OpusHistBounds[b])
		b++;
	hg->counts[b] += weight;
	hg->count += weight;
	hg->sum += ms * weight;
	if (ms > hg->max)
		hg->max = ms;
}

/* ---------------------------------------------------------------------
 * Backends
 * --------------------------------------------------------------------- */

/*
 * Record what pg_stat_opus_activity shows of the request being put into
 * slot i.  Caller: the backend that claimed slot i, while it is FILLING.
 */
void
OpusStatsSlotFilled(int slot_index, uint64 request_id, const OpusRequest *req)
{
	OpusSlotActivity *a;
	const char *text = NULL;
	size_t		len = 0;
	int			clip;

	if (OpusStats == NULL || slot_index < 0 || slot_index >= OpusStats->n_slots)
		return;
	a = &OpusStats->activity[slot_index];
	if (req->kind == OPUS_KIND_GENERATE || req->kind == OPUS_KIND_TOKENIZE ||
		req->kind == OPUS_KIND_EMBED)
	{
		text = req->text;
		len = req->text_len;
	}
	else if (req->kind == OPUS_KIND_CHAT && req->n_messages > 0)
	{
		/* the last message: what the caller just said */
		text = req->contents[req->n_messages - 1];
		len = req->content_lens[req->n_messages - 1];
	}
	clip = text ? pg_encoding_mbcliplen(PG_UTF8, text, (int) Min(len, (size_t) INT_MAX),
										OPUS_ACTIVITY_TEXT_LEN - 1) : 0;

	SpinLockAcquire(&a->mutex);
	a->request_id = request_id;
	a->max_tokens = is_generation(req->kind) ? req->params.max_tokens : 0;
	a->text_len = clip;
	if (clip > 0)
		memcpy(a->text, text, clip);
	a->phase = 0;
	a->priority = 0;
	a->n_prompt = 0;
	a->n_prompt_done = 0;
	a->n_generated = 0;
	a->kv_blocks = 0;
	a->sent_at = 0;
	a->started_at = 0;
	SpinLockRelease(&a->mutex);
}

/* A generation request refused before it was queued (53000, 54000). */
void
OpusStatsRejected(uint8 kind)
{
	char		model[OPUS_STAT_MODEL_LEN];

	if (OpusStats == NULL || !is_counted(kind))
		return;
	current_model(model);
	stats_apply(GetUserId(), MyDatabaseId, model, count_reject, NULL);
}

/* ---------------------------------------------------------------------
 * The supervisor: the engine
 * --------------------------------------------------------------------- */

/* Model entry m is (re)declared: its engine's totals start again at zero. */
void
OpusStatsEngineDeclared(int m)
{
	SpinLockAcquire(&OpusStats->mutex);
	memset(&OpusStats->engines[m], 0, sizeof(OpusStats->engines[m]));
	SpinLockRelease(&OpusStats->mutex);
}

void
OpusStatsEngineSpawned(int m, const char *model_path, const char *device, int threads)
{
	OpusEngineStats *es = &OpusStats->engines[m];
	char		name[OPUS_STAT_MODEL_LEN];

	model_short_name(model_path, name, sizeof(name));
	SpinLockAcquire(&OpusStats->mutex);
	memset(es->model, 0, sizeof(es->model));
	strlcpy(es->model, name, sizeof(es->model));
	strlcpy(es->device, device, sizeof(es->device));
	es->threads = threads;
	es->have_last = false;
	SpinLockRelease(&OpusStats->mutex);
}

void
OpusStatsEngineReady(int m)
{
	OpusEngineStats *es = &OpusStats->engines[m];

	SpinLockAcquire(&OpusStats->mutex);
	es->have_last = false;
	memset(&es->last, 0, sizeof(es->last));
	SpinLockRelease(&OpusStats->mutex);
}

void
OpusStatsEngineLost(int m)
{
	OpusEngineStats *es = &OpusStats->engines[m];

	SpinLockAcquire(&OpusStats->mutex);
	es->have_last = false;
	es->last.n_active = 0;
	es->last.n_queued = 0;
	es->last.n_running = 0;
	es->last.batch_size = 0;
	SpinLockRelease(&OpusStats->mutex);
}

/* Add a throughput sample to es.  Caller holds OpusStats->mutex. */
static void
add_rate_sample(OpusEngineStats *es, TimestampTz now)
{
	OpusRateSample *newest;
	int			prev;

	if (es->n_samples >= 2)
	{
		prev = (es->sample_head + OPUS_RATE_SAMPLES - 1) % OPUS_RATE_SAMPLES;
		/* The newest sample floats until it is 1 s after the one before. */
		if (!TimestampDifferenceExceeds(es->samples[prev].t, now, 1000))
		{
			newest = &es->samples[es->sample_head];
			newest->t = now;
			newest->gen = es->gen_total;
			newest->prompt = es->prompt_total;
			return;
		}
	}
	if (es->n_samples > 0)
		es->sample_head = (es->sample_head + 1) % OPUS_RATE_SAMPLES;
	if (es->n_samples < OPUS_RATE_SAMPLES)
		es->n_samples++;
	newest = &es->samples[es->sample_head];
	newest->t = now;
	newest->gen = es->gen_total;
	newest->prompt = es->prompt_total;
}

/*
 * A STATS frame from model entry m's serving engine: totals grow by what
 * it moved.  (Generated tokens are counted from PROGRESS and DONE instead,
 * exactly: the engine's tokens_decode counts tokens fed back, one fewer
 * per request.)
 */
void
OpusStatsEngineStats(int m, const struct opus_proto_stats *s)
{
	OpusEngineStats *es = &OpusStats->engines[m];
	const struct opus_proto_stats *p;
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&OpusStats->mutex);
	p = &es->last;
#define GROW(total, field) \
	es->total += (es->have_last && s->field >= p->field) ? \
		s->field - p->field : s->field
	GROW(prompt_total, tokens_prefill);
	GROW(steps_total, steps);
	GROW(preempt_total, preemptions);
	GROW(prefix_hit_total, prefix_hit_tokens);
	GROW(prefix_query_total, prefix_query_tokens);
#undef GROW
	es->last = *s;
	es->have_last = true;
	add_rate_sample(es, now);
	SpinLockRelease(&OpusStats->mutex);
}

/* ---------------------------------------------------------------------
 * The supervisor: requests
 * --------------------------------------------------------------------- */

static void
ensure_track(void)
{
	if (track == NULL)
		track = MemoryContextAllocZero(TopMemoryContext,
									   sizeof(OpusTrack) * OpusShared->n_slots);
}

/* Is slot i's request sampled into the log?  Decided once, when sent. */
static bool
sample_for_log(void)
{
	if (!opus_log_requests || opus_log_sample_rate <= 0)
		return false;
	if (opus_log_sample_rate >= 1)
		return true;
	return pg_prng_double(&pg_global_prng_state) < opus_log_sample_rate;
}

static void
fill_log_record(OpusLogRecord *rec, OpusSlot *slot, const OpusTrack *t)
{
	memset(rec, 0, sizeof(*rec));
	rec->kind = slot->kind;
	rec->backend_pid = slot->backend_pid;
	rec->request_id = slot->request_id;
	rec->userid = slot->userid;
	rec->dbid = slot->dbid;
	rec->submitted_at = slot->submit_time;
	rec->embed_flags = slot->embed_flags;	/* written while FILLING, like kind */
	if (t)
	{
		rec->params = t->params;
		rec->n_stop = t->n_stop;
	}
	slot_model(slot, rec->model);
}

void
OpusStatsRequestSent(int i)
{
	OpusSlot   *slot = OpusGetSlot(i);
	OpusTrack  *t;
	OpusSlotActivity *a = &OpusStats->activity[i];
	TimestampTz now = GetCurrentTimestamp();

	ensure_track();
	t = &track[i];
	memset(t, 0, sizeof(*t));
	SpinLockAcquire(&a->mutex);
	if (a->request_id == slot->request_id)
	{
		a->sent_at = now;
		a->phase = is_generation(slot->kind) ? OPUS_PROTO_PHASE_QUEUED : 0;
	}
	SpinLockRelease(&a->mutex);
	if (!is_counted(slot->kind))
		return;

	t->id = slot->request_id;
	t->model = slot->served_model < OPUS_MAX_MODELS ? slot->served_model : 0;
	t->sent_at = now;
	t->params = slot->params;	/* as the backend encoded them */
	t->n_stop = slot->n_stop;
	t->logged = sample_for_log();
	if (t->logged)
	{
		OpusLogRecord rec;

		fill_log_record(&rec, slot, t);
		rec.event = OPUS_LOG_START;
		rec.status = OPUS_REQ_RUNNING;
		rec.started_at = now;
		OpusLogPush(&rec);
	}
}

/*
 * The request tracked by t has generated n tokens so far (seen at now):
 * count the new ones, and put the gaps between output tokens in the
 * inter-token histogram (k new tokens over dt: k observations of dt / k;
 * the first token's wait is time to first token, not a gap).
 */
static void
tokens_generated(OpusTrack *t, int32 n, TimestampTz now)
{
	int64		k = (int64) n - t->n_generated;
	OpusEngineStats *es = &OpusStats->engines[t->model];

	if (k <= 0)
		return;
	SpinLockAcquire(&OpusStats->mutex);
	es->gen_total += k;
	if (t->n_generated > 0 && t->last_token_at > 0)
		hist_add(t->model, OPUS_HIST_ITL, ms_between(t->last_token_at, now) / k, k);
	add_rate_sample(es, now);
	SpinLockRelease(&OpusStats->mutex);
	if (t->n_generated == 0)
		t->first_token_at = now;
	t->n_generated = n;
	t->last_token_at = now;
}

void
OpusStatsRequestProgress(int i, const struct opus_proto_progress *p)
{
	OpusSlot   *slot = OpusGetSlot(i);
	OpusSlotActivity *a = &OpusStats->activity[i];
	OpusTrack  *t;
	TimestampTz now = GetCurrentTimestamp();

	ensure_track();
	t = &track[i];
	SpinLockAcquire(&a->mutex);
	if (a->request_id == slot->request_id)
	{
		a->phase = p->phase;
		a->priority = p->priority;
		a->n_prompt = p->n_prompt;
		a->n_prompt_done = p->n_prompt_done;
		a->n_generated = p->n_generated;
		a->kv_blocks = p->kv_blocks;
		if (a->started_at == 0 && p->phase != OPUS_PROTO_PHASE_QUEUED)
			a->started_at = now;
	}
	SpinLockRelease(&a->mutex);

	if (t->id != slot->request_id)
		return;
	tokens_generated(t, p->n_generated, now);
}

/* Forget slot i's activity and tracking (the request is over). */
static void
clear_slot(int i, uint64 id)
{
	OpusSlotActivity *a = &OpusStats->activity[i];

	SpinLockAcquire(&a->mutex);
	if (a->request_id == id)
		a->request_id = 0;
	SpinLockRelease(&a->mutex);
	if (track && track[i].id == id)
		track[i].id = 0;
}

static bool
slot_is_cancelled(OpusSlot *slot)
{
	bool		c;

	SpinLockAcquire(&slot->mutex);
	c = slot->state == OPUS_SLOT_CANCELLED;
	SpinLockRelease(&slot->mutex);
	return c;
}

/*
 * A request that ends without usage: count it and log it.  t is its
 * tracking entry if it was sent to the engine, else NULL (then it is
 * logged only if logging is on and the sample says so now).
 */
static void
end_without_usage(int i, OpusReqStatus status, const char *message)
{
	OpusSlot   *slot = OpusGetSlot(i);
	OpusTrack  *t = (track && track[i].id == slot->request_id && slot->request_id != 0) ?
		&track[i] : NULL;
	char		model[OPUS_STAT_MODEL_LEN];
	bool		logged;

	if (!is_counted(slot->kind))
	{
		clear_slot(i, slot->request_id);
		return;
	}
	slot_model(slot, model);
	stats_apply(slot->userid, slot->dbid, model,
				status == OPUS_REQ_CANCELLED ? count_cancel : count_error, NULL);
	logged = t ? t->logged : sample_for_log();
	if (logged)
	{
		OpusLogRecord rec;

		fill_log_record(&rec, slot, t);
		rec.event = OPUS_LOG_FINISH;
		rec.status = status;
		rec.finish = status == OPUS_REQ_CANCELLED ? OPUS_PROTO_FINISH_CANCELLED :
			OPUS_PROTO_FINISH_ERROR;
		rec.started_at = t ? t->sent_at : 0;
		rec.first_token_at = t ? t->first_token_at : 0;
		rec.finished_at = GetCurrentTimestamp();
		/* token counts as far as the engine reported them; -1 = unknown */
		rec.n_prompt = rec.n_completion = rec.n_cached = -1;
		if (t)
		{
			OpusSlotActivity *a = &OpusStats->activity[i];

			SpinLockAcquire(&a->mutex);
			if (a->request_id == slot->request_id && a->phase != 0 &&
				a->n_prompt > 0)
			{
				rec.n_prompt = a->n_prompt;
				rec.n_completion = a->n_generated;
			}
			SpinLockRelease(&a->mutex);
		}
		if (message)
			strlcpy(rec.error, message, sizeof(rec.error));
		OpusLogPush(&rec);
	}
	clear_slot(i, slot->request_id);
}

void
OpusStatsRequestDone(int i, const struct opus_proto_done *d, bool error)
{
	OpusSlot   *slot = OpusGetSlot(i);
	OpusTrack  *t;
	TimestampTz now = GetCurrentTimestamp();
	CompletedArg arg;
	char		model[OPUS_STAT_MODEL_LEN];
	double		pre_ms;

	ensure_track();
	t = &track[i];
	if (!is_counted(slot->kind) || t->id != slot->request_id)
	{
		clear_slot(i, slot->request_id);
		return;
	}
	if (slot_is_cancelled(slot) || d->finish == OPUS_PROTO_FINISH_CANCELLED)
	{
		end_without_usage(i, OPUS_REQ_CANCELLED, NULL);
		return;
	}
	if (error)
	{
		end_without_usage(i, OPUS_REQ_ERROR, slot->err_message);
		return;
	}

	/* The tokens of the last step (no PROGRESS follows it). */
	tokens_generated(t, d->n_completion, now);

	/* Times from the backend's submit; the engine's are from its receipt. */
	pre_ms = ms_between(slot->submit_time, t->sent_at);
	memset(&arg, 0, sizeof(arg));
	arg.n_prompt = d->n_prompt;
	arg.n_completion = d->n_completion;
	arg.n_cached = d->n_cached;
	arg.e2e_ms = ms_between(slot->submit_time, now);
	arg.queue_ms = pre_ms + d->queue_ms;
	arg.ttft_ms = d->n_completion > 0 ? pre_ms + d->ttft_ms : -1;
	arg.tpot_ms = d->n_completion > 1 ?
		Max(arg.e2e_ms - arg.ttft_ms, 0.0) / (d->n_completion - 1) : -1;
	slot_model(slot, model);
	stats_apply(slot->userid, slot->dbid, model, count_completed, &arg);

	SpinLockAcquire(&OpusStats->mutex);
	hist_add(t->model, OPUS_HIST_QUEUE, arg.queue_ms, 1);
	if (arg.ttft_ms >= 0)
		hist_add(t->model, OPUS_HIST_TTFT, arg.ttft_ms, 1);
	hist_add(t->model, OPUS_HIST_E2E, arg.e2e_ms, 1);
	SpinLockRelease(&OpusStats->mutex);

	if (t->logged)
	{
		OpusLogRecord rec;

		fill_log_record(&rec, slot, t);
		rec.event = OPUS_LOG_FINISH;
		rec.status = OPUS_REQ_COMPLETED;
		rec.finish = d->finish;
		rec.n_prompt = d->n_prompt;
		rec.n_completion = d->n_completion;
		rec.n_cached = d->n_cached;
		rec.started_at = t->sent_at + (TimestampTz) (d->queue_ms * 1000.0);
		if (d->n_completion > 0)
			rec.first_token_at = t->sent_at + (TimestampTz) (d->ttft_ms * 1000.0);
		rec.finished_at = now;
		OpusLogPush(&rec);
	}
	clear_slot(i, slot->request_id);
}

void
OpusStatsRequestFailed(int i, int err_code, const char *message)
{
	OpusSlot   *slot = OpusGetSlot(i);

	ensure_track();
	end_without_usage(i, slot_is_cancelled(slot) ? OPUS_REQ_CANCELLED : OPUS_REQ_FAILED,
					  message);
}

void
OpusStatsRequestCancelled(int i)
{
	ensure_track();
	end_without_usage(i, OPUS_REQ_CANCELLED, NULL);
}
