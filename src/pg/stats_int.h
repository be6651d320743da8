/*
 * stats_int.h - the shared-memory layout behind the statistics views, shared
 * by stats.c (which writes it) and stats_views.c (which reads it).  The
 * locking rules are at the top of stats.c.
 */
#ifndef OPUS_STATS_INT_H
#define OPUS_STATS_INT_H

#include "opus_pg.h"
#include "opus_stats.h"

#include "utils/hsearch.h"

/* pg_stat_opus: one entry per (user, database, model). */
typedef struct OpusStatKey
{
	Oid			userid;
	Oid			dbid;
	char		model[OPUS_STAT_MODEL_LEN];	/* NUL-padded */
} OpusStatKey;

typedef struct OpusStatCounters
{
	int64		calls;			/* completed requests */
	int64		errors;			/* ERROR or FAILED */
	int64		cancellations;
	int64		rejections;		/* refused before queuing */
	int64		prompt_tokens;	/* of completed requests */
	int64		completion_tokens;
	int64		cached_tokens;
	double		total_time;		/* ms, end to end, completed requests */
	double		min_time;
	double		max_time;
	double		mean_time;
	double		sum_var_time;	/* Welford's M2 */
	double		total_queue_time;
	int64		n_ttft;			/* completed requests with a first token */
	double		total_ttft;
	int64		n_tpot;			/* completed requests with >= 2 tokens */
	double		total_tpot;
} OpusStatCounters;

typedef struct OpusStatEntry
{
	OpusStatKey key;			/* hash key: must be first */
	slock_t		mutex;			/* protects c */
	OpusStatCounters c;
} OpusStatEntry;

/* Latency histograms: fixed upper bounds in ms, the last one +Inf. */
typedef enum OpusHistId
{
	OPUS_HIST_QUEUE = 0,		/* submitted -> admitted by the engine */
	OPUS_HIST_TTFT,				/* submitted -> first token */
	OPUS_HIST_ITL,				/* between consecutive output tokens */
	OPUS_HIST_E2E,				/* submitted -> finished */
	OPUS_HIST__COUNT
} OpusHistId;

#define OPUS_HIST_NBUCKETS 28
extern const double OpusHistBounds[OPUS_HIST_NBUCKETS];	/* last = +Inf */
extern const char *const OpusHistNames[OPUS_HIST__COUNT];

typedef struct OpusHistogram
{
	int64		counts[OPUS_HIST_NBUCKETS];	/* per bucket, not cumulative */
	int64		count;
	double		sum;			/* ms */
	double		max;			/* ms */
} OpusHistogram;

/* pg_stat_opus_activity: per request slot. */
typedef struct OpusSlotActivity
{
	slock_t		mutex;			/* protects everything below */
	uint64		request_id;		/* the request described; 0 = none */
	/* written by the backend while it fills the slot */
	int32		max_tokens;
	int32		text_len;
	char		text[OPUS_ACTIVITY_TEXT_LEN];	/* UTF-8, clipped on a character */
	/* written by the supervisor */
	uint8		phase;			/* enum opus_proto_phase; 0 = not seen yet */
	int32		priority;
	int32		n_prompt;
	int32		n_prompt_done;
	int32		n_generated;
	int32		kv_blocks;
	TimestampTz sent_at;		/* handed to the engine; 0 = not yet */
	TimestampTz started_at;		/* first admitted by the engine; 0 = not yet */
} OpusSlotActivity;

/* Throughput samples: cumulative token counts, >= 1 s apart but the newest. */
#define OPUS_RATE_SAMPLES 128
typedef struct OpusRateSample
{
	TimestampTz t;
	int64		gen;
	int64		prompt;
} OpusRateSample;

/*
 * One model entry's engine (entry 0 = the default model), as last started
 * and reported: a row of pg_stat_opus_engine.  The totals count every
 * engine that served the entry since it was declared (or the server
 * started): a restart or a swap does not reset them.
 */
typedef struct OpusEngineStats
{
	char		model[OPUS_STAT_MODEL_LEN]; /* the file's short name */
	char		device[OPUS_PROTO_SHORT_LEN];
	int			threads;
	bool		have_last;		/* `last` is from the serving engine */
	struct opus_proto_stats last;
	int64		gen_total;		/* from PROGRESS and DONE */
	int64		prompt_total;	/* the rest from STATS */
	int64		steps_total;
	int64		preempt_total;
	int64		prefix_hit_total;
	int64		prefix_query_total;
	int			n_samples;
	int			sample_head;	/* index of the newest sample */
	OpusRateSample samples[OPUS_RATE_SAMPLES];
	/* latency of the requests it served (pg_stat_opus_latency) */
	OpusHistogram hist[OPUS_HIST__COUNT];
} OpusEngineStats;

typedef struct OpusStatsShared
{
	LWLock	   *lock;			/* the pg_stat_opus hash */
	slock_t		mutex;			/* everything below but activity[] */
	TimestampTz stats_reset;
	int64		evictions;

	/* each model entry's engine (OpusModel(i) is entry i) */
	OpusEngineStats engines[OPUS_MAX_MODELS];

	int			n_slots;
	OpusSlotActivity activity[FLEXIBLE_ARRAY_MEMBER];
} OpusStatsShared;

extern OpusStatsShared *OpusStats;

/*
 * The name pg_stat_opus, the request log and the latency views give model
 * entry m: its declared name, or for the default model (0) the short name
 * of its file.  out has OPUS_STAT_MODEL_LEN bytes.
 */
extern void OpusStatsModelLabel(int m, char *out);
extern HTAB *OpusStatHash;

#endif							/* OPUS_STATS_INT_H */
