/*
 * supervisor_int.h - the supervisor's own state, shared by the files that
 * make up the supervisor background worker and by nothing else:
 *
 *   supervisor.c   the worker: start-up, model declarations, the main loop
 *   engine_proc.c  an engine process's lifecycle: start (fork + exec, KV
 *                  arena, memory budget), stop, loss, restart with backoff,
 *                  liveness, and the model status it publishes
 *   swap.c         live swap: candidate, warm-up, switch, drain, rollback
 *   relay.c        slots <-> engines: requests out, frames in, results into
 *                  the slots, routing to a fallback under overload
 *
 * All of it runs in the supervisor process only, single-threaded; no lock
 * guards these variables.  Shared memory follows the rules at the top of
 * shmem.c.  The symbols are hidden: they are not part of opus_pg.so's
 * interface.
 */
#ifndef OPUS_SUPERVISOR_INT_H
#define OPUS_SUPERVISOR_INT_H

#include "storage/latch.h"

#include "opus_pg.h"

#define BACKOFF_MIN_MS		500
#define BACKOFF_MAX_MS		30000
#define HEALTHY_AFTER_MS	30000
#define N_CANARIES			3
#define PROBATION_MIN_REQUESTS 8

/* Effective settings of a model's engine (declaration + opus.* defaults). */
typedef struct EngineConfig
{
	char		path[OPUS_PROTO_PATH_LEN];	/* resolved model file */
	char		device[OPUS_PROTO_SHORT_LEN];
	int			threads;
	int			kv_cache_mb;
	int			kv_cache_type;
	int			max_batch_tokens;
} EngineConfig;

/* One engine process as the supervisor sees it. */
typedef struct EngineProc
{
	int			model;			/* model entry index */
	pid_t		pid;			/* 0 = none */
	pgsocket	sock;			/* PGINVALID_SOCKET = none */
	bool		ready;
	TimestampTz spawned_at;
	TimestampTz ready_at;
	bool		got_fatal;
	int			fatal_code;
	char		fatal_msg[OPUS_PROTO_MSG_LEN];
	EngineConfig cfg;			/* what it was started with */
	struct opus_proto_ready info;	/* valid when ready */
	int			kv_fd;			/* its KV arena, -1 = none */
	int64		kv_fd_bytes;
	bool		kv_tried;
	/* warm-up (a swap's candidate) */
	bool		warming;
	int			warm_done;
	int			warm_n;			/* canaries sent */
	char		warm_text[OPUS_MAX_CANARIES][OPUS_CANARY_LEN];	/* their outputs so far */
	size_t		warm_len[OPUS_MAX_CANARIES];
	TimestampTz warm_deadline;
	/* wait set */
	int			wes_pos;
	bool		wes_write;
	/* liveness (check_engine_alive) */
	TimestampTz heard_at;		/* last bytes received */
	TimestampTz ping_at;		/* outstanding PING sent then; 0 = none */
	TimestampTz progress_at;	/* last sign of life: bytes, or CPU time used */
	int64		cpu_ticks;		/* engine CPU time at progress_at, -1 = unknown */
	/* received bytes not yet parsed */
	char	   *in;
	size_t		in_len;
	size_t		in_cap;
	/* bytes to send: out[out_off .. out_len) */
	char	   *out;
	size_t		out_off;
	size_t		out_len;
	size_t		out_cap;
} EngineProc;

/* A model entry as the supervisor runs it (shared state: OpusModel(i)). */
typedef struct ModelCtl
{
	bool		declared;		/* entry in use */
	bool		removing;		/* dropped from opus.models: drain, then free */
	uint32		epoch;
	OpusModelDecl decl;
	char		override_path[OPUS_PROTO_PATH_LEN]; /* swapped-in file, "" = decl's */
	EngineProc	procs[2];
	int			cur;			/* procs[cur] serves */
	EngineConfig applied;		/* the serving engine's settings at its start */
	bool		reload_pending; /* restart the serving engine when idle */
	int			backoff_ms;
	TimestampTz next_start_at;
	char		last_logged[OPUS_PROTO_MSG_LEN];
	/* swap */
	OpusSwapState swap;
	bool		swap_is_rollback;
	char		swap_why[OPUS_PROTO_MSG_LEN];	/* an automatic rollback's reason */
	char		note[OPUS_PROTO_MSG_LEN];	/* last_error to show once ready again */
	TimestampTz swap_started;
	EngineConfig swap_cfg;		/* what the candidate runs */
	bool		drained_first;	/* the serving engine was stopped for the swap */
	int			n_canaries;		/* this swap's own canaries, 0 = the defaults */
	OpusCanary	canaries[OPUS_MAX_CANARIES];
	char		prev_path[OPUS_PROTO_PATH_LEN];
	TimestampTz probation_until;
	int64		probation_done;
	int64		probation_errors;
	/* the serving version's vocabulary (READY), for the fallback rule */
	bool		vocab_known;
	int32		n_vocab;
	uint64		vocab_hash;
	/* fallback under overload */
	int			fallback;		/* model entry, -1 = none */
	bool		fallback_vocab_bad; /* it has another vocabulary: not used */
	double		ttft_ewma;		/* recent time to first token (ms) */
	TimestampTz last_done;
	bool		overloaded;
	bool		awaiting_first; /* holds a request that has no token yet */
} ModelCtl;

#pragma GCC visibility push(hidden)

/* supervisor.c: every model entry; wes_dirty = rebuild the wait set */
extern ModelCtl models[OPUS_MAX_MODELS];
extern bool wes_dirty;

#define PROC_IS_SERVING(p)	(&models[(p)->model].procs[models[(p)->model].cur] == (p))

/* engine_proc.c */
extern void set_model_state(int m, OpusEngineState state);
extern void publish_swap(int m);
extern const char *model_label(int m);
extern void close_arena(EngineProc *p);
extern void stop_engine(EngineProc *p, bool kill_now, int grace_ms, char *how, size_t howlen);
extern void publish_ready(int m, EngineProc *p);
extern void engine_lost(EngineProc *p, bool kill_now, const char *reason);
extern bool model_config(int m, EngineConfig *cfg);
extern bool config_equal(const EngineConfig *a, const EngineConfig *b);
extern int64 engine_bytes(const EngineConfig *cfg);
extern bool fits_budget(const EngineConfig *cfg, const EngineProc *self, int64 *need, int64 *used, int64 *budget);
extern bool start_engine(int m, EngineProc *p, const EngineConfig *cfg, int *code, char *msg, char *detail);
extern void maybe_start_engine(int m);
extern void check_engine_exited(EngineProc *p);
extern void set_unresponsive(EngineProc *p, bool on);
extern long check_engine_alive(EngineProc *p);

/* relay.c */
extern void relay_init(void);
extern void fail_in_flight(EngineProc *p, int code, const char *message, const char *detail);
extern int n_in_flight(const EngineProc *p);
extern void recover_slots(void);
extern void send_frame(EngineProc *p, uint16 type, uint64 id, const void *payload, size_t len);
extern bool flush_output(EngineProc *p);
extern bool read_engine(EngineProc *p);
extern void process_slots(void);

/* swap.c */
extern void swap_failed(int m, const char *message, const char *detail);
extern void send_canaries(EngineProc *p);
extern void canary_text(EngineProc *p, uint64 id, const uint8_t *data, size_t len);
extern void canary_done(EngineProc *p, uint64 id, const struct opus_proto_done *d);
extern void advance_models(void);

#pragma GCC visibility pop

#endif							/* OPUS_SUPERVISOR_INT_H */
