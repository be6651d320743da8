/*
 * opus_pg.h - declarations shared by the files of the opus_pg extension
 * library: settings, the shared-memory state (request slots and engine
 * status), the supervisor entry point and the error mapping.
 *
 * Nothing here includes engine headers; the wire format comes from
 * src/protocol.h only.
 */
#ifndef OPUS_PG_H
#define OPUS_PG_H

#include "postgres.h"

#include "fmgr.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "model_decl.h"
#include "protocol.h"

/* ---- settings (settings.c) ---- */

extern char *opus_model;
extern char *opus_device;
extern int	opus_threads;
extern int	opus_max_requests;
extern int	opus_kv_cache_size_mb;
extern int	opus_default_max_tokens;
extern int	opus_request_timeout_ms;
extern int	opus_max_prompt_bytes;
extern int	opus_request_buffer_kb;
extern char *opus_engine_path;
extern int	opus_kv_block_size;
extern int	opus_kv_cache_type;	/* OPUS_PROTO_KV_* */
extern int	opus_max_batch_tokens;
extern int	opus_step_latency_target_ms;
extern int	opus_admission_starvation_ms;
extern int	opus_engine_liveness_timeout_ms;
extern bool opus_allow_special_tokens;	/* opus.allow_special_tokens */
extern char *opus_priority;	/* opus.priority (tenants.c) */
extern int	opus_priority_value;	/* opus.priority as a class number */
extern char *opus_models;		/* opus.models: the named models (models.c) */
extern int	opus_model_warmup_timeout_ms;
extern int	opus_model_probation_s;
extern char *opus_model_fallback;	/* opus.model_fallback: the default model's */
extern int	opus_model_max_ttft_ms; /* opus.model_max_ttft: its objective */
extern int	opus_memory_budget_mb;

#define OPUS_PRIORITY_INTERACTIVE	0
#define OPUS_PRIORITY_BATCH			10

/* Parse "interactive", "batch" or 0..OPUS_PROTO_MAX_PRIORITY; false if invalid (tenants.c). */
extern bool OpusParsePriority(const char *v, int *out);

/* The core settings above (settings.c). */
extern void OpusDefineSettings(void);

/* True when loaded through shared_preload_libraries (shared memory exists; shmem.c). */
extern bool opus_pg_preloaded;

/* Raise 55000 unless preloaded and attached to shared memory (shmem.c). */
extern void OpusCheckPreloaded(void);
/* Raise 55000 if the installed SQL is another version (version.c). */
extern void OpusCheckSqlVersion(void);

#ifndef OPUS_PG_VERSION
#error "OPUS_PG_VERSION (the control file's default_version) comes from the Makefile"
#endif

/* ---- shared state (shmem.c) ---- */

typedef enum OpusSlotState
{
	OPUS_SLOT_FREE = 0,			/* nobody uses it */
	OPUS_SLOT_FILLING,			/* claimed by a backend that is copying in */
	OPUS_SLOT_SUBMITTED,		/* ready for the supervisor to send */
	OPUS_SLOT_RUNNING,			/* sent to the engine */
	OPUS_SLOT_DONE,				/* result ready for the backend */
	OPUS_SLOT_ERROR,			/* error ready for the backend */
	OPUS_SLOT_CANCELLED			/* abandoned by its backend */
} OpusSlotState;

/* A slot whose request has finished (DONE or ERROR): its result can be read. */
static inline bool
OpusSlotFinished(OpusSlotState st)
{
	return st == OPUS_SLOT_DONE || st == OPUS_SLOT_ERROR;
}

typedef struct OpusSlot
{
	slock_t		mutex;			/* protects state, request_id, pids */
	OpusSlotState state;
	uint32		generation;		/* bumped at every claim */
	uint64		request_id;		/* (generation << 32) | (index + 1) */
	int			backend_pid;
	Oid			userid;
	Oid			dbid;
	uint8		kind;			/* enum opus_proto_kind */
	uint8		model;			/* model entry the request is for (0 = default) */
	uint32		model_epoch;	/* that entry's epoch when the backend chose it */
	int8		fallback;		/* may go to the fallback model: 1 yes, 0 no, -1 = batch class only */
	int32		priority;		/* the session's class at submission (opus.priority) */
	uint8		served_model;	/* model entry that served it (supervisor) */
	TimestampTz submit_time;
	bool		async;			/* opus_submit: outlives the call (async.c) */
	bool		stream;			/* read while RUNNING (stream.c): wake per TEXT */
	bool		bulk;			/* a set-based call's window (async.c): shares the async budget */
	bool		tools;			/* a chat request with tool definitions: its
								 * completion object gives tool_calls */
	TimestampTz finish_time;	/* when it became DONE/ERROR (supervisor) */
	ConditionVariable cv;		/* broadcast when state becomes DONE/ERROR */

	/* Written by the backend while FILLING, read by the supervisor. */
	uint32		payload_len;	/* SUBMIT payload bytes at the start of buf */
	struct opus_proto_params params;	/* as encoded there (the request log) */
	uint16		n_stop;			/* stop strings encoded there */
	uint32		embed_flags;	/* EMBED: OPUS_PROTO_EMBED_* encoded there */

	/* Written by the supervisor while RUNNING, read by the backend at DONE/ERROR. */
	uint32		result_len;		/* TEXT or TOKENS bytes at the start of buf */
	uint8		finish;			/* enum opus_proto_finish */
	int32		n_prompt;
	int32		n_completion;
	int32		n_cached;
	double		queue_ms;
	double		ttft_ms;
	double		total_ms;
	int32		served_version; /* model version that served it (supervisor) */
	int			err_code;		/* OPUS_PROTO_ERR_* or OPUS_PG_ERR_*; 0 = none */
	char		err_message[OPUS_PROTO_MSG_LEN];
	char		err_detail[OPUS_PROTO_MSG_LEN];
} OpusSlot;

typedef enum OpusEngineState
{
	OPUS_ENGINE_STOPPED = 0,	/* no supervisor yet, or it is shutting down */
	OPUS_ENGINE_STARTING,		/* spawned, waiting for READY */
	OPUS_ENGINE_READY,			/* serving */
	OPUS_ENGINE_BACKOFF,		/* died; restart scheduled */
	OPUS_ENGINE_FAILED			/* cannot start (model / binary); retried with backoff */
} OpusEngineState;

/* OPUS_MAX_MODELS, OPUS_MODEL_NAME_LEN, OPUS_EMBED_PREFIX_LEN: model_decl.h */

/* Warm-up prompts of a swap (opus_model_swap's canaries argument). */
#define OPUS_MAX_CANARIES		4
#define OPUS_CANARY_LEN			256

typedef struct OpusCanary
{
	char		prompt[OPUS_CANARY_LEN];
	char		expect[OPUS_CANARY_LEN];	/* the greedy output it must give */
	bool		has_expect;
	int			max_tokens;
} OpusCanary;

/* A model's swap, as OpusEngineStatus.swap_state says it. */
typedef enum OpusSwapState
{
	OPUS_SWAP_NONE = 0,
	OPUS_SWAP_LOADING,			/* the new version's engine is starting */
	OPUS_SWAP_WARMING,			/* ... and running its canary prompts */
	OPUS_SWAP_DRAINING,			/* switched; the old version finishes its requests */
	OPUS_SWAP_DRAIN_FIRST		/* two versions do not fit: the old one drains first */
} OpusSwapState;

typedef struct OpusEngineStatus
{
	slock_t		mutex;			/* protects everything below */
	/* the model entry (models.c); entry 0 is the default model, always in use */
	bool		in_use;
	uint32		epoch;			/* bumped whenever the entry is (re)declared */
	char		name[OPUS_MODEL_NAME_LEN];
	char		role[NAMEDATALEN];	/* only members may use it; "" = everyone */
	int32		version;		/* 1, +1 at every swap or rollback */
	OpusSwapState swap_state;
	char		swap_path[OPUS_PROTO_PATH_LEN]; /* the version being swapped in */
	char		prev_path[OPUS_PROTO_PATH_LEN]; /* rollback target, "" = none */
	TimestampTz probation_until;	/* automatic rollback possible until then */
	TimestampTz swapped_at;
	int64		rollbacks;
	int64		weights_bytes;	/* model file size */
	int64		kv_bytes;		/* KV arena size */
	int			threads;
	/* fallback under overload (declared with fallback= and max_ttft=) */
	char		fallback[OPUS_MODEL_NAME_LEN];	/* "" = none */
	/* an embedding model's input prefixes (opus.models; "" = none) */
	char		query_prefix[OPUS_EMBED_PREFIX_LEN];
	char		document_prefix[OPUS_EMBED_PREFIX_LEN];
	int			max_ttft_ms;	/* time-to-first-token objective, 0 = none */
	bool		overloaded;		/* the objective is missed now */
	double		recent_ttft_ms; /* the signal: slowest waiting / recent mean */
	int64		fallbacks;		/* requests sent to the fallback instead */
	/* requests from SQL (opus_model_swap / opus_model_rollback) */
	bool		swap_requested;
	bool		rollback_requested;
	char		requested_path[OPUS_PROTO_PATH_LEN];
	int			n_requested_canaries;	/* 0 = the default canaries */
	OpusCanary	requested_canaries[OPUS_MAX_CANARIES];
	/* the engine serving the entry */
	OpusEngineState state;
	int			supervisor_pid;
	int			supervisor_procno;	/* for SetLatch; -1 when none */
	int			engine_pid;
	int64		starts;			/* engine processes spawned */
	int64		restarts;		/* unexpected engine exits */
	TimestampTz started_at;		/* last spawn */
	TimestampTz ready_at;		/* last READY */
	int			last_err_code;	/* error for callers while FAILED */
	char		last_error[OPUS_PROTO_MSG_LEN];
	char		last_error_detail[OPUS_PROTO_MSG_LEN];
	char		last_exit[OPUS_PROTO_MSG_LEN];	/* how the last engine ended */
	bool		unresponsive;	/* READY but not answering a ping, nor using CPU */
	char		model_path[OPUS_PROTO_PATH_LEN];
	struct opus_proto_ready model;	/* valid when ever_ready */
	bool		ever_ready;
	struct opus_proto_stats stats;
	ConditionVariable cv;		/* broadcast on every state change */
} OpusEngineStatus;

typedef struct OpusSharedState
{
	OpusEngineStatus engine;	/* the default model's engine (model entry 0) */
	OpusEngineStatus more_models[OPUS_MAX_MODELS - 1];	/* entries 1.. */
	int			n_slots;
	Size		slot_buf_size;	/* bytes of buf per slot */
	Size		slot_stride;	/* bytes between slot starts */
	/* n_slots x (OpusSlot + buffer), MAXALIGNed, follow */
} OpusSharedState;

extern OpusSharedState *OpusShared;

extern Size OpusShmemSize(void);
extern void OpusShmemInit(void);
extern OpusSlot *OpusGetSlot(int index);
extern char *OpusSlotBuf(OpusSlot *slot);
extern int	OpusSlotIndexFromId(uint64 request_id);
/* Ids of requests handed to an engine and not ended (palloc'd array). */
extern uint64 *OpusLiveRequestIds(int *n);
/* An engine state as the views show it ("ready", "restarting", ...). */
extern const char *OpusEngineStateName(OpusEngineState st, bool unresponsive);
extern void OpusWakeSupervisor(void);

/* Model entry i (0 = the default model). */
static inline OpusEngineStatus *
OpusModel(int i)
{
	return i == 0 ? &OpusShared->engine : &OpusShared->more_models[i - 1];
}

/* ---- models (models.c) ---- */

/* OpusModelDecl, OpusParseModels, opus_model_name_valid: model_decl.h */
extern void OpusDefineModelSettings(bool preloading);
extern int	OpusLookupModel(const char *name, uint32 *epoch, char *display, size_t displen);
extern bool OpusResolveModelPath(const char *setting, char *out, size_t outlen);

/* ---- supervisor (supervisor.c) ---- */

extern PGDLLEXPORT void OpusSupervisorMain(Datum arg);
extern void OpusRegisterSupervisor(void);

/* ---- requests (request.c) ---- */

typedef struct OpusRequest
{
	uint8		kind;
	struct opus_proto_params params;
	int			n_stop;
	struct opus_proto_str stop[OPUS_PROTO_MAX_STOP];
	/* GENERATE / TOKENIZE: UTF-8 text */
	const char *text;
	size_t		text_len;
	/*
	 * CHAT: messages (UTF-8, roles OPUS_ROLE_*), and the tool definitions
	 * (tools => ..., a JSON array as UTF-8; NULL = none), sent before them
	 * as an OPUS_ROLE_TOOLS item
	 */
	int			n_messages;
	uint8	   *roles;
	const char **contents;
	size_t	   *content_lens;
	/* each message's other members (a JSON object, UTF-8; NULL = none),
	 * sent after it as an OPUS_ROLE_MEMBERS item (NULL array = none) */
	const char **members;
	size_t	   *member_lens;
	const char *tools;
	size_t		tools_len;
	/* EMBED: text plus OPUS_PROTO_EMBED_* flags */
	uint32		embed_flags;
	/* EMBED: the model's prefix for this input_type, sent before text */
	const char *prefix;
	size_t		prefix_len;
	/* DETOKENIZE */
	int32	   *tokens;
	int			n_tokens;
	/* GBNF grammar the output must match (NULL = none; GENERATE / CHAT) */
	const char *grammar;
	size_t		grammar_len;
	/* the model entry it is for (OpusLookupModel), 0 = the default */
	int			model;
	uint32		model_epoch;
	int			fallback;		/* 1, 0, -1 = by class (fallback => NULL) */
} OpusRequest;

typedef struct OpusResult
{
	uint64		request_id;
	char	   *data;			/* palloc'd copy of the result bytes (+ NUL) */
	uint32		len;
	uint8		finish;
	int32		n_prompt;
	int32		n_completion;
	int32		n_cached;
	double		queue_ms;
	double		ttft_ms;
	double		total_ms;
	double		elapsed_ms;		/* as seen by the backend, claim to result */
	int			model;			/* model entry asked for */
	int			served_model;	/* model entry that served it (a fallback?) */
	int32		served_version; /* its version then */
	bool		tools;			/* the request had tool definitions (OpusSlot.tools) */
} OpusResult;

extern void OpusRunRequest(const OpusRequest *req, OpusResult *res);
extern void OpusCheckRequestSize(const OpusRequest *req);
extern uint32 OpusEncodeRequest(const OpusRequest *req, char *buf, Size cap,
								 struct opus_proto_params *sent);
extern int	OpusRoleAsyncQuota(void);	/* opus.role_max_async_requests of the current role */
extern int	OpusClaimSlot(uint8 kind, bool async, uint64 *id_out, bool missing_ok);
extern void OpusSubmitSlot(OpusSlot *slot, const OpusRequest *req, TimestampTz start);
extern void OpusAbandonRequest(uint64 id);
extern int	OpusCollectResult(OpusSlot *slot, OpusResult *res, char *err_message, char *err_detail);
extern void OpusWaitEngineReady(struct opus_proto_ready *info, char *path, size_t pathlen);
extern void OpusWaitModelReady(int model, struct opus_proto_ready *info, char *path, size_t pathlen);

/* ---- text to and from the engine's UTF-8 (encoding.c) ---- */
extern const char *OpusTextToUtf8(const char *s, size_t len, size_t *out_len);
extern char *OpusTextFromUtf8(const char *s, size_t len);

/* ---- the input of a generation call: prompt or messages (input.c) ---- */
extern void OpusCheckPromptSize(size_t len, const char *what_is);
extern void OpusParseMessages(Jsonb *jb, OpusRequest *req);
extern void OpusParseGeneration(FunctionCallInfo fcinfo, uint8 kind, OpusRequest *req);

/* ---- result shaping: OpenAI completion objects (result.c) ---- */
extern Datum OpusCompletionJsonb(bool chat, bool tools, const OpusResult *res);
extern void OpusAppendCompletionEnd(StringInfo buf, const OpusResult *res, const char *finish);
extern char *OpusServedModelName(int model);

/* ---- request parameters of the SQL functions (args.c; src/params.h) ---- */
extern void OpusParseOptions(FunctionCallInfo fcinfo, OpusRequest *req);
extern int	OpusArgNo(FunctionCallInfo fcinfo, const char *name);
extern bool OpusArgIsNull(FunctionCallInfo fcinfo, const char *name);
extern void OpusParseModelArg(FunctionCallInfo fcinfo, OpusRequest *req);
/* embed.c */
extern void OpusParseEmbedArgs(FunctionCallInfo fcinfo, OpusRequest *req);
extern Datum OpusEmbeddingArray(const char *data, uint32 len);
extern Datum OpusEmbeddingJsonb(const OpusResult *res);
extern void OpusParseEmbedRequest(FunctionCallInfo fcinfo, OpusRequest *req);

/* ---- tool calls in a chat answer (toolcalls.c) ---- */
extern int	OpusParseToolCalls(const char *content, size_t len, const char *id_prefix,
							   bool indexed, StringInfo calls, char **rest);

/* ---- DROP EXTENSION guard (dropguard.c) ---- */
extern void OpusRegisterDropGuard(void);

/* ---- asynchronous requests (async.c) ---- */

extern int	opus_max_async_requests;
extern int	opus_async_retention_s;
extern int	opus_max_async_requests_per_role;
extern void OpusDefineAsyncSettings(void);
extern int	OpusAsyncCap(void);
extern int	OpusAsyncRoleCap(void);
extern int	OpusAsyncBudgetHeld(Oid role, int *n_role);

/* ---- finished async results nobody has read yet (resultstore.c) ---- */

extern int	opus_async_result_store_kb;

/* The store's unit: a result takes a chain of chunks of this many bytes. */
#define OPUS_RESULT_CHUNK		1024

/* What the opus_async view shows of a stored result. */
typedef struct OpusStoredResult
{
	uint64		request_id;
	Oid			userid;
	int			backend_pid;
	uint8		kind;
	bool		error;
	TimestampTz submit_time;
	TimestampTz finish_time;
} OpusStoredResult;

extern void OpusDefineResultStoreSettings(bool preloading);
extern void OpusResultStoreShmemRequest(void);
extern void OpusResultStoreShmemInit(void);
extern bool OpusResultStoreEnabled(void);
extern bool OpusResultStorePut(OpusSlot *slot, bool error);
extern bool OpusResultStoreLookup(uint64 id, Oid *userid, uint8 *kind, bool *error);
extern int	OpusResultStoreTake(uint64 id, OpusResult *res, char *err_message,
								char *err_detail, bool *found);
extern bool OpusResultStoreDrop(uint64 id);
extern void OpusResultStoreExpire(TimestampTz now, int64 retention_ms);
extern int	OpusResultStoreRoleChunks(Oid role, int *n_chunks);
extern int	OpusResultStoreCountDb(Oid dbid);
extern OpusStoredResult *OpusResultStoreList(int *n);

/* ---- errors (errors.c) ---- */

/* PostgreSQL-side error codes that share err_code with OPUS_PROTO_ERR_*. */
#define OPUS_PG_ERR_ENGINE_DIED		1001	/* engine exited mid-request */
#define OPUS_PG_ERR_ENGINE_DOWN		1002	/* engine cannot start */
#define OPUS_PG_ERR_MODEL_MISSING	1003	/* model file not found */
#define OPUS_PG_ERR_RESULT_TOO_LARGE 1004	/* result overflowed the slot buffer */
#define OPUS_PG_ERR_ENGINE_MISSING	1005	/* engine binary not found */
#define OPUS_PG_ERR_PROTOCOL		1006	/* engine broke the protocol */
#define OPUS_PG_ERR_MODEL_UNKNOWN	1007	/* no such model (removed meanwhile) */
#define OPUS_PG_ERR_MODEL_MEMORY	1008	/* model does not fit opus.memory_budget */

extern int	OpusSqlstateFor(int err_code);
extern void OpusRaiseError(int err_code, const char *message, const char *detail) pg_attribute_noreturn();

#endif							/* OPUS_PG_H */
