/*
 * protocol.h - the wire format between the opus_pg supervisor (a PostgreSQL
 * background worker) and the engine process (`opus_engine serve --fd N`).
 *
 * This is the one file both sides include: the format (this comment, the
 * constants, the message structs) and the codec's prototypes.  The codec
 * itself is protocol.c, linked into opus_pg.so and the engine alike.  Both
 * are plain C (no PostgreSQL and no engine headers) and compile under
 * PostgreSQL's warning flags (declarations before statements) as well as
 * the engine's gnu11.
 *
 * Transport: a connected AF_UNIX SOCK_STREAM socket.  Every message is a
 * frame: a 16-byte header followed by `length` payload bytes.  All integers
 * are little-endian, floats are IEEE-754 bit patterns in little-endian.
 *
 *   header   u32 length      payload bytes, <= OPUS_PROTO_MAX_PAYLOAD
 *            u16 type        enum opus_proto_type
 *            u16 flags       must be 0
 *            u64 id          request id (SUBMIT/CANCEL/TEXT/TOKENS/DONE), else 0
 *
 * Conversation:
 *   supervisor -> engine   HELLO (magic, version, configuration)
 *   engine -> supervisor   READY (magic, version, model information)
 *                          or FATAL (status code, message), then exit(1)
 *   supervisor -> engine   SUBMIT(id, ...), CANCEL(id), PING
 *   engine -> supervisor   TEXT(id, bytes)*, TOKENS(id, ids)*, then exactly
 *                          one DONE(id, ...) per SUBMIT; PROGRESS(id, ...)
 *                          while a generation is queued or running (after
 *                          each step in which it changed); STATS (when the
 *                          request counts change, and every 250 ms while
 *                          busy); EXPERTS (MoE models only: with STATS,
 *                          when the expert load counters moved); PONG
 *
 * Nobody trusts the other side: every parse function below validates every
 * field (sizes, ranges, finite floats, enum values, NUL bytes in strings)
 * and returns false with a static reason on anything malformed.  The
 * parsers are pure functions over a byte buffer (fuzzable): they never
 * read outside [buf, buf + len) and keep pointers into it only where the
 * result struct says so.
 *
 * Status codes in DONE and FATAL frames are the engine's enum opus_status
 * values (src/engine/base/status.h); they are repeated here as OPUS_PROTO_ERR_*
 * so that the PostgreSQL side need not include engine headers.  The engine
 * checks at compile time that both lists agree.
 */
#ifndef OPUS_PROTOCOL_H
#define OPUS_PROTOCOL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "params.h"

#define OPUS_PROTO_MAGIC		0x5355504FU /* "OPUS" read as little-endian u32 */
#define OPUS_PROTO_VERSION		11	/* 2: PROGRESS, prefix counters in STATS;
									 * 3: KV settings in HELLO, priority in SUBMIT;
									 * 4: EXPERTS; 5: tenant block in SUBMIT;
									 * 6: step target, starvation limit in HELLO;
									 * 7: chat roles tool and tools;
									 * 8: allow_special_tokens and a grammar
									 * block in SUBMIT; 9: EMBED, EMBEDDING;
									 * 10: vocab_hash in READY;
									 * 11: chat item members */
#define OPUS_PROTO_HEADER_SIZE	16
#define OPUS_PROTO_MAX_PAYLOAD	(16U * 1024 * 1024)
#define OPUS_PROTO_MAX_STOP		OPUS_PARAM_MAX_STOP /* stop strings per request */
#define OPUS_PROTO_MAX_STOP_LEN OPUS_PARAM_MAX_STOP_LEN /* bytes per stop string */
#define OPUS_PROTO_MAX_MESSAGES 65536	/* chat messages per request */
#define OPUS_PROTO_MAX_GRAMMAR	(1U << 20)	/* GBNF bytes (the compiler's limit) */
#define OPUS_PROTO_MSG_LEN		256 /* error message buffer incl. NUL */
#define OPUS_PROTO_PATH_LEN		1024	/* model path buffer incl. NUL */
#define OPUS_PROTO_NAME_LEN		128 /* model name buffer incl. NUL */
#define OPUS_PROTO_SHORT_LEN	32	/* arch / type / device names incl. NUL */
#define OPUS_PROTO_MAX_TOKENS	OPUS_PARAM_MAX_TOKENS	/* max_tokens upper bound */
#define OPUS_PROTO_MAX_PRIORITY OPUS_PARAM_MAX_PRIORITY /* priority 0 (first) .. this */
#define OPUS_PROTO_MAX_WEIGHT	1000	/* fair-share weight upper bound */
#define OPUS_PROTO_MAX_BLOCK_SIZE 4096	/* kv_block_size upper bound */
#define OPUS_PROTO_MAX_EXPERT_LAYERS 1024	/* EXPERTS n_layer upper bound */
#define OPUS_PROTO_MAX_EXPERTS	1024	/* EXPERTS n_expert upper bound */
#define OPUS_PROTO_MAX_EXPERT_COUNTS 65536	/* n_layer * n_expert upper bound */

/* KV cache element types (HELLO kv_cache_type). */
#define OPUS_PROTO_KV_F16		0
#define OPUS_PROTO_KV_Q8_0		1

/* Engine status codes (must equal enum opus_status in src/engine/base/status.h). */
#define OPUS_PROTO_ERR_OK			0
#define OPUS_PROTO_ERR_INTERNAL		1
#define OPUS_PROTO_ERR_IO			2
#define OPUS_PROTO_ERR_FORMAT		3
#define OPUS_PROTO_ERR_UNSUPPORTED	4
#define OPUS_PROTO_ERR_NOMEM		5
#define OPUS_PROTO_ERR_INVALID_ARG	6
#define OPUS_PROTO_ERR_NOT_FOUND	7
#define OPUS_PROTO_ERR_CONTEXT		8
#define OPUS_PROTO_ERR_CAPACITY		9
#define OPUS_PROTO_ERR_CANCELLED	10
#define OPUS_PROTO_ERR_PROTOCOL		11
#define OPUS_PROTO_ERR_DEVICE		12
#define OPUS_PROTO_ERR_TOKENIZE		13
#define OPUS_PROTO_ERR_TEMPLATE		14
#define OPUS_PROTO_ERR__COUNT		15

enum opus_proto_type
{
	OPUS_MSG_HELLO = 1,			/* supervisor -> engine */
	OPUS_MSG_READY = 2,			/* engine -> supervisor */
	OPUS_MSG_FATAL = 3,			/* engine -> supervisor; engine exits next */
	OPUS_MSG_SUBMIT = 4,		/* supervisor -> engine */
	OPUS_MSG_CANCEL = 5,		/* supervisor -> engine, empty payload */
	OPUS_MSG_TEXT = 6,			/* engine -> supervisor, UTF-8 bytes */
	OPUS_MSG_TOKENS = 7,		/* engine -> supervisor, i32 token ids */
	OPUS_MSG_DONE = 8,			/* engine -> supervisor */
	OPUS_MSG_STATS = 9,			/* engine -> supervisor */
	OPUS_MSG_PING = 10,			/* supervisor -> engine, empty payload */
	OPUS_MSG_PONG = 11,			/* engine -> supervisor, empty payload */
	OPUS_MSG_PROGRESS = 12,		/* engine -> supervisor, per request */
	OPUS_MSG_EXPERTS = 13,		/* engine -> supervisor, expert load (MoE) */
	OPUS_MSG_EMBEDDING = 14,	/* engine -> supervisor, f32 vector (EMBED) */
	OPUS_MSG__COUNT
};

enum opus_proto_kind
{
	OPUS_KIND_GENERATE = 1,		/* prompt text -> completion text */
	OPUS_KIND_CHAT = 2,			/* messages -> assistant text */
	OPUS_KIND_TOKENIZE = 3,		/* text -> TOKENS */
	OPUS_KIND_DETOKENIZE = 4,	/* token ids -> TEXT */
	OPUS_KIND_EMBED = 5,		/* text -> EMBEDDING (an encoder model) */
	OPUS_KIND__COUNT
};

/* EMBED: SUBMIT n_items carries these flags (data: the text). */
#define OPUS_PROTO_EMBED_NORMALIZE	1	/* L2-normalise the vector */
#define OPUS_PROTO_EMBED_TRUNCATE	2	/* cut an input over the context */
#define OPUS_PROTO_EMBED_FLAGS		3

enum opus_proto_role
{
	OPUS_ROLE_SYSTEM = 0,
	OPUS_ROLE_USER = 1,
	OPUS_ROLE_ASSISTANT = 2,
	OPUS_ROLE_TOOL = 3,			/* a tool's result */
	OPUS_ROLE_TOOLS = 4,		/* not a message: the tool definitions (a JSON
								 * array) for the template; at most one */
	OPUS_ROLE_MEMBERS = 5,		/* not a message: the other members of the
								 * message item just before it (a JSON object:
								 * tool_calls, tool_call_id, name, a content
								 * that is not a string, ...); at most one per
								 * message */
	OPUS_ROLE__COUNT
};

/* Finish reasons (must equal enum opus_finish in src/engine/runtime/scheduler.h). */
enum opus_proto_finish
{
	OPUS_PROTO_FINISH_NONE = 0,
	OPUS_PROTO_FINISH_STOP = 1,
	OPUS_PROTO_FINISH_LENGTH = 2,
	OPUS_PROTO_FINISH_CANCELLED = 3,
	OPUS_PROTO_FINISH_ERROR = 4,
	OPUS_PROTO_FINISH__COUNT
};

struct opus_proto_header
{
	uint32_t	length;
	uint16_t	type;
	uint16_t	flags;
	uint64_t	id;
};

/* HELLO: what the engine should load and how big to make things. */
struct opus_proto_hello
{
	uint32_t	magic;
	uint32_t	version;
	int32_t		n_threads;		/* >= 1 */
	int32_t		n_ctx;			/* 0 = the model's training context */
	int64_t		kv_cache_bytes; /* > 0 */
	char		device[OPUS_PROTO_SHORT_LEN];	/* "cpu", ... */
	char		model_path[OPUS_PROTO_PATH_LEN];
	int32_t		kv_block_size;	/* token positions per KV block, 1..MAX_BLOCK_SIZE */
	int32_t		max_batch_tokens;	/* tokens per batched step, >= 1 */
	int32_t		kv_cache_type;	/* OPUS_PROTO_KV_* */
	int32_t		step_target_ms; /* prefill bound behind decodes, 0 = none */
	int32_t		starve_ms;		/* queue wait after which nobody overtakes, 0 = never */
};

/* READY: the model the engine has loaded. */
struct opus_proto_ready
{
	uint32_t	magic;
	uint32_t	version;
	int64_t		n_params;
	int32_t		n_ctx;			/* positions per sequence the engine accepts */
	int32_t		n_ctx_train;
	int32_t		n_vocab;
	int32_t		n_layer;
	int32_t		n_embd;
	int32_t		n_head;
	int32_t		n_head_kv;
	int32_t		pid;
	int64_t		kv_tokens;		/* token positions the KV pool holds */
	uint64_t	vocab_hash;		/* the vocabulary's identity (a model and its fallback share it) */
	char		name[OPUS_PROTO_NAME_LEN];
	char		arch[OPUS_PROTO_SHORT_LEN];
	char		tensor_type[OPUS_PROTO_SHORT_LEN];
	char		chat_template[OPUS_PROTO_SHORT_LEN];
};

/* FATAL: the engine cannot serve (for example the model did not load). */
struct opus_proto_fatal
{
	uint32_t	code;			/* OPUS_PROTO_ERR_* */
	char		message[OPUS_PROTO_MSG_LEN];
};

/* Generation parameters: their ranges are the table in params.h. */
struct opus_proto_params
{
	int32_t		max_tokens;
	int32_t		top_k;
	float		temperature;
	float		top_p;
	float		min_p;
	float		presence_penalty;
	float		frequency_penalty;
	float		repetition_penalty;
	uint64_t	seed;
	int32_t		priority;
	int32_t		allow_special_tokens;	/* 0 or 1 (OPUS_PARAMS_FLAGS) */
};

/*
 * Who a request is for, as the server (never the client) decided it: the
 * prefix-cache scope (requests of different scopes never share cached
 * blocks; 0 = the server-wide scope), the fair-share tenant and its weight,
 * and the best class aging may lift the request to (its role's ceiling).
 */
struct opus_proto_tenant
{
	uint64_t	cache_scope;
	uint32_t	tenant;			/* the role's OID; 0 = nobody in particular */
	uint32_t	weight;			/* [1, OPUS_PROTO_MAX_WEIGHT] */
	int32_t		min_priority;	/* [0, params.priority] */
};

#define OPUS_PROTO_TENANT_SIZE (8 + 4 + 4 + 4)

/* A byte string inside a payload buffer (not NUL-terminated). */
struct opus_proto_str
{
	const char *ptr;
	uint32_t	len;
};

/*
 * SUBMIT payload:
 *   u8 kind, u8 0, u16 n_stop, params (8 x 4-byte fields, u64 seed,
 *   i32 priority, u32 allow_special_tokens (0 or 1)),
 *   n_stop x (u32 len, bytes), tenant (u64 cache_scope, u32 tenant,
 *   u32 weight, i32 min_priority), grammar (u32 len, bytes: GBNF the
 *   output must match, len 0 = none, no NUL), u32 n_items, u32 data_len,
 *   data.
 * data: GENERATE/TOKENIZE: the prompt bytes (n_items = 0);
 *       EMBED: the text bytes (n_items = OPUS_PROTO_EMBED_* flags);
 *       CHAT: n_items x (u8 role, u32 len, bytes): at least one message,
 *             at most one OPUS_ROLE_TOOLS item (tools JSON), and after a
 *             message at most one OPUS_ROLE_MEMBERS item (JSON object);
 *       DETOKENIZE: n_items x i32 token ids (data_len = 4 * n_items).
 * The parsed struct points into the payload buffer.
 */
struct opus_proto_submit
{
	uint8_t		kind;
	uint16_t	n_stop;
	struct opus_proto_params params;
	struct opus_proto_str stop[OPUS_PROTO_MAX_STOP];
	struct opus_proto_tenant tenant;
	struct opus_proto_str grammar;	/* len 0: none */
	uint32_t	n_items;
	const uint8_t *data;
	uint32_t	data_len;
};

/* DONE: the final record of a request. */
struct opus_proto_done
{
	uint8_t		finish;			/* enum opus_proto_finish */
	uint32_t	code;			/* OPUS_PROTO_ERR_*; OK unless finish == ERROR */
	int32_t		n_prompt;
	int32_t		n_completion;
	int32_t		n_cached;
	double		queue_ms;
	double		ttft_ms;
	double		total_ms;
	char		message[OPUS_PROTO_MSG_LEN];
};

/* STATS: engine-wide counters, sent when they change. */
struct opus_proto_stats
{
	int32_t		n_active;		/* requests queued or running */
	int32_t		n_queued;
	int32_t		n_running;
	int32_t		batch_size;
	int64_t		steps;
	int64_t		tokens_prefill;
	int64_t		tokens_decode;
	int64_t		kv_blocks_total;
	int64_t		kv_blocks_used;
	int64_t		kv_blocks_cached;
	int64_t		preemptions;
	int64_t		prefix_hit_tokens;	/* prompt tokens served from the prefix cache */
	int64_t		prefix_query_tokens;	/* prompt tokens looked up in it */
};

/* Phases of a generation request (PROGRESS). */
enum opus_proto_phase
{
	OPUS_PROTO_PHASE_QUEUED = 1,	/* waiting for admission (or preempted) */
	OPUS_PROTO_PHASE_PREFILL = 2,	/* admitted, prompt being processed */
	OPUS_PROTO_PHASE_DECODE = 3,	/* generating tokens */
	OPUS_PROTO_PHASE__COUNT
};

/*
 * PROGRESS: where one generation request is (header id = its id).
 *   u8 phase, u8 0, u16 0, i32 priority, i32 n_prompt, i32 n_prompt_done,
 *   i32 n_generated, i32 kv_blocks
 */
struct opus_proto_progress
{
	uint8_t		phase;			/* enum opus_proto_phase */
	int32_t		priority;		/* >= 0; 0 = first */
	int32_t		n_prompt;		/* prompt tokens */
	int32_t		n_prompt_done;	/* prompt tokens in the KV cache, <= n_prompt */
	int32_t		n_generated;	/* completion tokens so far */
	int32_t		kv_blocks;		/* KV blocks the request holds */
};

/*
 * EXPERTS: tokens routed to each (layer, expert) since the engine's context
 * was created, counts[layer * n_expert + expert] (header id 0).
 *   u32 n_layer, u32 n_expert, n_layer * n_expert x u64 count
 * Each count is <= INT64_MAX.  The parsed struct points into the payload.
 */
struct opus_proto_experts
{
	int32_t		n_layer;		/* [1, OPUS_PROTO_MAX_EXPERT_LAYERS] */
	int32_t		n_expert;		/* [1, OPUS_PROTO_MAX_EXPERTS] */
	const uint8_t *counts;		/* n_layer * n_expert little-endian u64 */
};

#define OPUS_PROTO_HELLO_SIZE	(4 + 4 + 4 + 4 + 8 + OPUS_PROTO_SHORT_LEN + OPUS_PROTO_PATH_LEN + 5 * 4)
#define OPUS_PROTO_READY_SIZE	(4 + 4 + 8 + 4 * 8 + 8 + 8 + OPUS_PROTO_NAME_LEN + 3 * OPUS_PROTO_SHORT_LEN)
#define OPUS_PROTO_STATS_SIZE	(4 * 4 + 9 * 8)
#define OPUS_PROTO_PROGRESS_SIZE (4 + 5 * 4)
#define OPUS_PROTO_EXPERTS_SIZE(n_counts) (8 + 8 * (size_t) (n_counts))
#define OPUS_PROTO_DONE_FIXED	(1 + 3 + 4 + 3 * 4 + 3 * 8 + 2)
#define OPUS_PROTO_SUBMIT_FIXED (1 + 1 + 2 + 8 * 4 + 8 + 4 + 4)

/* ---------------------------------------------------------------------
 * Little-endian primitives
 * --------------------------------------------------------------------- */

void opus_proto_put_u32(uint8_t *p, uint32_t v);
void opus_proto_put_u64(uint8_t *p, uint64_t v);

uint32_t opus_proto_get_u32(const uint8_t *p);

/* A bounded writer: on overflow it stops writing and sets `overflow`. */
struct opus_proto_writer
{
	uint8_t    *buf;
	size_t		cap;
	size_t		len;
	bool		overflow;
};

void opus_proto_writer_init(struct opus_proto_writer *w, void *buf, size_t cap);

void opus_proto_w_u8(struct opus_proto_writer *w, uint8_t v);

void opus_proto_w_u32(struct opus_proto_writer *w, uint32_t v);
void opus_proto_w_u64(struct opus_proto_writer *w, uint64_t v);

void opus_proto_w_bytes(struct opus_proto_writer *w, const void *src, size_t n);

/* ---------------------------------------------------------------------
 * Header
 * --------------------------------------------------------------------- */

enum opus_proto_result
{
	OPUS_PROTO_OK = 0,
	OPUS_PROTO_NEED_MORE = 1,	/* fewer than OPUS_PROTO_HEADER_SIZE bytes */
	OPUS_PROTO_BAD = 2			/* malformed: drop the connection */
};

void opus_proto_encode_header(uint8_t *p, uint32_t length, uint16_t type, uint64_t id);

/*
 * Decode a frame header from the first `len` bytes of buf.  The caller then
 * needs OPUS_PROTO_HEADER_SIZE + h->length bytes for the whole frame.
 */
enum opus_proto_result opus_proto_parse_header(const uint8_t *buf, size_t len,
						struct opus_proto_header *h, const char **why);

/* ---------------------------------------------------------------------
 * Validation helpers shared by the supervisor and the engine (the ranges
 * of the request parameters are the table in params.h).
 * --------------------------------------------------------------------- */

/* NULL when params are valid, else the name of the first bad field. */
const char *opus_proto_check_params(const struct opus_proto_params *p);

/* ---------------------------------------------------------------------
 * HELLO
 * --------------------------------------------------------------------- */

void opus_proto_encode_hello(struct opus_proto_writer *w, const struct opus_proto_hello *m);

/*
 * The parsers of HELLO and READY read the magic number and protocol version
 * that open both messages first, and check them; on a mismatch they set
 * *why and return false.  They are checked before the message's size, which
 * another protocol version may change: a peer from another build gets
 * OPUS_PROTO_VERSION_MISMATCH with its version in the parsed version, and
 * opus_proto_version_mismatch() words the error naming both versions.
 * Every version keeps the header, the first 8 bytes of HELLO and READY, and
 * FATAL as they are, so that this message always gets through.
 */
#define OPUS_PROTO_VERSION_MISMATCH "protocol version mismatch"

/*
 * The error for a peer speaking protocol version peer_version: "protocol
 * version mismatch: <peer> speaks version 5, <self> version 4 (...)".
 */
void opus_proto_version_mismatch(char *buf, size_t size, const char *peer,
							uint32_t peer_version, const char *self);
bool opus_proto_parse_hello(const uint8_t *buf, size_t len,
					   struct opus_proto_hello *m, const char **why);

/* ---------------------------------------------------------------------
 * READY
 * --------------------------------------------------------------------- */

void opus_proto_encode_ready(struct opus_proto_writer *w, const struct opus_proto_ready *m);
bool opus_proto_parse_ready(const uint8_t *buf, size_t len,
					   struct opus_proto_ready *m, const char **why);

/* ---------------------------------------------------------------------
 * FATAL: u32 code, u16 len, message bytes
 * --------------------------------------------------------------------- */

void opus_proto_encode_fatal(struct opus_proto_writer *w, uint32_t code, const char *msg);

bool opus_proto_parse_fatal(const uint8_t *buf, size_t len,
					   struct opus_proto_fatal *m, const char **why);

/* ---------------------------------------------------------------------
 * SUBMIT
 * --------------------------------------------------------------------- */

/*
 * Encode the fixed part and the stop strings; the caller then writes
 * n_items, data_len and the data with opus_proto_encode_submit_data or by
 * hand (chat messages: opus_proto_encode_chat_message each).
 */
void opus_proto_encode_submit_head(struct opus_proto_writer *w, uint8_t kind,
							  const struct opus_proto_params *p,
							  int n_stop, const struct opus_proto_str *stop);

/* The tenant block: after the head (and stop strings), before the data head. */
void opus_proto_encode_submit_tenant(struct opus_proto_writer *w,
								const struct opus_proto_tenant *t);

/* The grammar block: after the tenant block (len 0: no grammar). */
void opus_proto_encode_submit_grammar(struct opus_proto_writer *w,
								 const char *grammar, uint32_t len);

/* n_items and data_len, then `data_len` bytes of data follow. */
void opus_proto_encode_submit_data_head(struct opus_proto_writer *w,
								   uint32_t n_items, uint32_t data_len);
void opus_proto_encode_chat_message(struct opus_proto_writer *w, uint8_t role,
							   const char *content, uint32_t len);

/* Iterate chat messages in a validated SUBMIT's data; *pos starts at 0. */
void opus_proto_next_chat_message(const struct opus_proto_submit *m, uint32_t *pos,
							 uint8_t *role, struct opus_proto_str *content);
int32_t opus_proto_token_at(const struct opus_proto_submit *m, uint32_t i);
bool opus_proto_parse_submit(const uint8_t *buf, size_t len,
						struct opus_proto_submit *m, const char **why);

/* ---------------------------------------------------------------------
 * DONE
 * --------------------------------------------------------------------- */

void opus_proto_encode_done(struct opus_proto_writer *w, const struct opus_proto_done *m);
bool opus_proto_parse_done(const uint8_t *buf, size_t len,
					  struct opus_proto_done *m, const char **why);

/* ---------------------------------------------------------------------
 * STATS
 * --------------------------------------------------------------------- */

void opus_proto_encode_stats(struct opus_proto_writer *w, const struct opus_proto_stats *m);
bool opus_proto_parse_stats(const uint8_t *buf, size_t len,
					   struct opus_proto_stats *m, const char **why);

/* ---------------------------------------------------------------------
 * PROGRESS
 * --------------------------------------------------------------------- */

void opus_proto_encode_progress(struct opus_proto_writer *w, const struct opus_proto_progress *m);
bool opus_proto_parse_progress(const uint8_t *buf, size_t len,
						  struct opus_proto_progress *m, const char **why);

/* ---------------------------------------------------------------------
 * EXPERTS
 * --------------------------------------------------------------------- */

/* The caller checks the shape against the limits (the parser does too). */
void opus_proto_encode_experts(struct opus_proto_writer *w, int32_t n_layer,
						  int32_t n_expert, const uint64_t *counts);
bool opus_proto_parse_experts(const uint8_t *buf, size_t len,
						 struct opus_proto_experts *m, const char **why);

/* Count i (layer * n_expert + expert) of a validated EXPERTS frame. */
int64_t opus_proto_expert_count(const struct opus_proto_experts *m, size_t i);

/* ---------------------------------------------------------------------
 * TEXT / TOKENS / CANCEL / PING / PONG payload checks
 * --------------------------------------------------------------------- */

/* TEXT: any bytes but NUL (the receiver checks UTF-8 itself). */
bool opus_proto_parse_text(const uint8_t *buf, size_t len, const char **why);

/* TOKENS: a whole number of non-negative i32 ids. */
bool opus_proto_parse_tokens(const uint8_t *buf, size_t len, const char **why);
/* EMBEDDING: one or more finite little-endian f32. */
bool opus_proto_parse_embedding(const uint8_t *buf, size_t len, const char **why);

/* CANCEL, PING, PONG carry no payload. */
bool opus_proto_parse_empty(size_t len, const char **why);

#endif							/* OPUS_PROTOCOL_H */
