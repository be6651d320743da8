/*
 * stream.c - streaming calls: opus_generate_stream, opus_chat_stream and
 * their *_stream_completion forms return one row per chunk of newly
 * decoded text while the request runs.
 *
 * A stream is an ordinary request to the engine (same SUBMIT, same
 * batching, same output for the same seed); only the backend's side
 * differs.  The slot is marked `stream`, so the supervisor broadcasts the
 * slot's condition variable after every TEXT frame it appends; the set-
 * returning function runs in value-per-call mode and, at each call, sends
 * what the previous call returned (pq_flush) and then returns the text
 * that arrived since, waiting for some if there is none.  The engine only
 * ever sends whole UTF-8 characters and holds back text that could start a
 * stop string, so a chunk never splits a character or shows part of a stop
 * string.
 *
 * The request outlives a single call, so PG_ENSURE_ERROR_CLEANUP cannot
 * guard it.  Instead the open streams of this backend are kept in a small
 * list, and each is given up (the slot marked CANCELLED, as for any
 * cancelled request) by whichever comes first: the executor shutting the
 * function down early (cursor closed, LIMIT reached, rescan), the
 * (sub)transaction aborting (pg_cancel_backend, statement_timeout, an
 * ERROR), or the process exiting (pg_terminate_backend, client gone).
 */
#include "postgres.h"

#include <time.h>

#include "access/xact.h"
#include "common/pg_prng.h"
#include "fmgr.h"
#include "funcapi.h"
#include "libpq/libpq.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "tcop/dest.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "opus_pg.h"

PG_FUNCTION_INFO_V1(opus_generate_stream);
PG_FUNCTION_INFO_V1(opus_chat_stream);
PG_FUNCTION_INFO_V1(opus_generate_stream_completion);
PG_FUNCTION_INFO_V1(opus_chat_stream_completion);

/* One stream, in the function's multi-call memory. */
typedef struct OpusStream
{
	uint64		id;				/* request id; 0 once finished or given up */
	int			open_index;		/* in open_streams[] while id != 0 */
	int			index;			/* slot index */
	uint32		consumed;		/* result bytes already returned */
	TimestampTz start;
	ExprContext *econtext;		/* where stream_shutdown is registered */
	bool		chat;
	bool		completion;		/* rows are completion chunks (jsonb) */
	bool		sent_role;		/* the first chat chunk (with the role) is out */
	bool		finished;		/* the request is over; the final row is next */
	bool		tools;			/* chat completion chunks of a request with tools:
								 * the final chunk gives the answer's tool calls */
	StringInfoData text;		/* (tools) the answer so far */
	char	   *cmpl_id;		/* "chatcmpl-..." shared by every chunk */
	int64		created;
	char	   *model;
} OpusStream;

/*
 * The open streams' request ids, in static memory: the transaction
 * callbacks run when the function's memory may already be gone.  A slot
 * each, and a cursor can hold several; 16 is plenty.
 */
#define MAX_OPEN_STREAMS 16
static struct
{
	uint64		id;				/* 0 = unused */
	SubTransactionId subid;		/* the subtransaction that opened it */
} open_streams[MAX_OPEN_STREAMS];
static bool callbacks_registered = false;

/* Give up on open stream k (the slot is marked CANCELLED, as any cancel). */
static void
abandon_open(int k)
{
	uint64		id = open_streams[k].id;

	open_streams[k].id = 0;
	if (id != 0)
		OpusAbandonRequest(id);
}

static void
abandon_matching(bool all, SubTransactionId subid)
{
	for (int k = 0; k < MAX_OPEN_STREAMS; k++)
		if (open_streams[k].id != 0 && (all || open_streams[k].subid == subid))
			abandon_open(k);
}

static void
stream_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
		abandon_matching(true, InvalidSubTransactionId);
}

static void
stream_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		abandon_matching(false, mySubid);
}

static void
stream_exit_callback(int code, Datum arg)
{
	abandon_matching(true, InvalidSubTransactionId);
}

/* The stream is over (finished, or given up): forget it everywhere. */
static void
close_stream(OpusStream *st, bool abandon)
{
	if (st->id != 0 && open_streams[st->open_index].id == st->id)
	{
		if (abandon)
			abandon_open(st->open_index);
		open_streams[st->open_index].id = 0;
	}
	st->id = 0;
}

/*
 * The executor shuts the function down before the set ended (cursor
 * closed, LIMIT reached, rescan).  Unregistered once the request is over,
 * so st is alive whenever this runs.
 */
static void
stream_shutdown(Datum arg)
{
	close_stream((OpusStream *) DatumGetPointer(arg), true);
}

static void
register_callbacks(void)
{
	if (callbacks_registered)
		return;
	RegisterXactCallback(stream_xact_callback, NULL);
	RegisterSubXactCallback(stream_subxact_callback, NULL);
	before_shmem_exit(stream_exit_callback, (Datum) 0);
	callbacks_registered = true;
}

/* Claim a slot, mark it streaming and submit req; remembers the stream. */
static void
start_stream(OpusStream *st, const OpusRequest *req)
{
	int			k;
	OpusSlot   *slot;

	for (k = 0; k < MAX_OPEN_STREAMS; k++)
		if (open_streams[k].id == 0)
			break;
	if (k == MAX_OPEN_STREAMS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many open opus streams in this session"),
				 errdetail("At most %d streams can be open at once.", MAX_OPEN_STREAMS),
				 errhint("Close cursors over streaming calls that are no longer read.")));
	register_callbacks();
	OpusCheckRequestSize(req);
	st->start = GetCurrentTimestamp();
	st->index = OpusClaimSlot(req->kind, false, &st->id, false);
	open_streams[k].id = st->id;
	open_streams[k].subid = GetCurrentSubTransactionId();
	st->open_index = k;
	RegisterExprContextCallback(st->econtext, stream_shutdown, PointerGetDatum(st));
	slot = OpusGetSlot(st->index);
	slot->stream = true;
	OpusSubmitSlot(slot, req, st->start);
}

/*
 * Wait until st's slot has result bytes past st->consumed or is finished.
 * Returns true with the new bytes in *data, *len (palloc'd), or false when
 * the request ended with nothing more to read (*res filled; the slot is
 * freed; an error raises its SQLSTATE).
 */
static bool
next_chunk(OpusStream *st, char **data, uint32 *len, OpusResult *res)
{
	OpusSlot   *slot = OpusGetSlot(st->index);
	int			timeout_ms = opus_request_timeout_ms;
	bool		sleeping = false;

	for (;;)
	{
		OpusSlotState state;
		uint32		have;

		CHECK_FOR_INTERRUPTS();
		SpinLockAcquire(&slot->mutex);
		state = slot->state;
		SpinLockRelease(&slot->mutex);
		pg_read_barrier();
		have = slot->result_len;
		pg_read_barrier();
		if (state != OPUS_SLOT_DONE && state != OPUS_SLOT_ERROR && have > st->consumed)
		{
			*len = have - st->consumed;
			*data = palloc(*len + 1);
			memcpy(*data, OpusSlotBuf(slot) + st->consumed, *len);
			(*data)[*len] = '\0';
			st->consumed = have;
			if (sleeping)
				ConditionVariableCancelSleep();
			return true;
		}
		if (state == OPUS_SLOT_DONE || state == OPUS_SLOT_ERROR)
		{
			char		err_message[OPUS_PROTO_MSG_LEN];
			char		err_detail[OPUS_PROTO_MSG_LEN];
			int			err_code;

			if (sleeping)
				ConditionVariableCancelSleep();
			err_code = OpusCollectResult(slot, res, err_message, err_detail);
			if (err_code == 0 && res->len > st->consumed)
			{
				/* The tail that arrived with DONE: return it first. */
				*len = res->len - st->consumed;
				*data = palloc(*len + 1);
				memcpy(*data, res->data + st->consumed, *len);
				(*data)[*len] = '\0';
				st->consumed = res->len;
				return true;
			}
			SpinLockAcquire(&slot->mutex);
			slot->state = OPUS_SLOT_FREE;
			SpinLockRelease(&slot->mutex);
			close_stream(st, false);
			UnregisterExprContextCallback(st->econtext, stream_shutdown, PointerGetDatum(st));
			if (err_code != 0)
				OpusRaiseError(err_code, err_message, err_detail);
			res->elapsed_ms = (double) (GetCurrentTimestamp() - st->start) / 1000.0;
			return false;
		}
		if (!sleeping)
		{
			ConditionVariablePrepareToSleep(&slot->cv);
			sleeping = true;
			continue;			/* recheck: a frame may have landed meanwhile */
		}
		if (timeout_ms > 0)
		{
			long		elapsed = (long) ((GetCurrentTimestamp() - st->start) / 1000);

			if (elapsed >= timeout_ms)
				ereport(ERROR,
						(errcode(ERRCODE_QUERY_CANCELED),
						 errmsg("canceling opus request due to opus.request_timeout"),
						 errdetail("The request did not finish within %d ms.", timeout_ms)));
			(void) ConditionVariableTimedSleep(&slot->cv, timeout_ms - elapsed, PG_WAIT_EXTENSION);
		}
		else
			ConditionVariableSleep(&slot->cv, PG_WAIT_EXTENSION);
	}
}

/* Send the rows returned so far now, not when the send buffer fills. */
static void
flush_client(void)
{
	if (whereToSendOutput == DestRemote)
		(void) pq_flush();
}

/*
 * One chat.completion.chunk / text_completion chunk as jsonb: content (a
 * text chunk), or the final chunk (res given).  A stream with tools ends
 * with the answer's tool calls (toolcalls.c), if it is one, in the last
 * chunk's delta (each call with its "index", as OpenAI's chunks have
 * them) and finish_reason "tool_calls"; its text came as content chunks
 * before, as it was generated.
 */
static Datum
chunk_jsonb(OpusStream *st, const char *content, const OpusResult *res)
{
	StringInfoData buf;
	const char *calls = NULL;
	const char *finish = NULL;

	if (res != NULL && st->tools)
	{
		StringInfoData c;
		char	   *rest;
		char		prefix[32];

		snprintf(prefix, sizeof(prefix), "call_%016llx_",
				 (unsigned long long) pg_prng_uint64(&pg_global_prng_state));
		if (OpusParseToolCalls(st->text.data, st->text.len, prefix, true, &c, &rest) > 0)
		{
			calls = c.data;
			if (res->finish == OPUS_PROTO_FINISH_STOP)
				finish = "tool_calls";
		}
	}

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"id\": ");
	escape_json(&buf, st->cmpl_id);
	appendStringInfo(&buf, ", \"object\": \"%s\", \"created\": " INT64_FORMAT ", \"model\": ",
					 st->chat ? "chat.completion.chunk" : "text_completion", st->created);
	escape_json(&buf, st->model);
	appendStringInfoString(&buf, ", \"choices\": [{\"index\": 0, ");
	if (st->chat)
	{
		appendStringInfoString(&buf, "\"delta\": {");
		if (!st->sent_role)
			appendStringInfoString(&buf, "\"role\": \"assistant\"");
		if (content != NULL)
		{
			if (!st->sent_role)
				appendStringInfoString(&buf, ", ");
			appendStringInfoString(&buf, "\"content\": ");
			escape_json(&buf, content);
		}
		else if (calls != NULL)
		{
			if (!st->sent_role)
				appendStringInfoString(&buf, ", ");
			appendStringInfoString(&buf, "\"tool_calls\": ");
			appendStringInfoString(&buf, calls);
		}
		appendStringInfoString(&buf, "}, ");
		st->sent_role = true;
	}
	else
	{
		appendStringInfoString(&buf, "\"text\": ");
		escape_json(&buf, content ? content : "");
		appendStringInfoString(&buf, ", ");
	}
	if (res == NULL)
		appendStringInfoString(&buf, "\"logprobs\": null, \"finish_reason\": null}]}");
	else
		OpusAppendCompletionEnd(&buf, res, finish);
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
}

static Datum
stream_srf(FunctionCallInfo fcinfo, bool chat, bool completion)
{
	FuncCallContext *funcctx;
	OpusStream *st;
	char	   *data;
	uint32		len;
	OpusResult	res;

	if (SRF_IS_FIRSTCALL())
	{
		ReturnSetInfo *rsi = (ReturnSetInfo *) fcinfo->resultinfo;
		MemoryContext old;
		OpusRequest req;

		OpusCheckPreloaded();
		if (rsi == NULL || !IsA(rsi, ReturnSetInfo) ||
			(rsi->allowedModes & SFRM_ValuePerCall) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("set-valued function called in context that cannot accept a set")));

		funcctx = SRF_FIRSTCALL_INIT();
		old = MemoryContextSwitchTo(funcctx->multi_call_memory_ctx);
		st = palloc0(sizeof(OpusStream));
		st->chat = chat;
		st->completion = completion;
		if (completion)
		{
			st->cmpl_id = psprintf("%s-%016llx", chat ? "chatcmpl" : "cmpl",
								   (unsigned long long) pg_prng_uint64(&pg_global_prng_state));
			st->created = (int64) time(NULL);
		}
		OpusParseGeneration(fcinfo, chat ? OPUS_KIND_CHAT : OPUS_KIND_GENERATE, &req);
		if (completion)
			st->model = OpusServedModelName(req.model);
		st->tools = chat && completion && req.tools != NULL;
		if (st->tools)
			initStringInfo(&st->text);
		funcctx->user_fctx = st;
		st->econtext = rsi->econtext;
		start_stream(st, &req);
		MemoryContextSwitchTo(old);
	}
	funcctx = SRF_PERCALL_SETUP();
	st = (OpusStream *) funcctx->user_fctx;
	if (st->finished)
		SRF_RETURN_DONE(funcctx);

	flush_client();
	if (next_chunk(st, &data, &len, &res))
	{
		char	   *content = OpusTextFromUtf8(data, len);

		if (st->tools)
		{
			MemoryContext old = MemoryContextSwitchTo(funcctx->multi_call_memory_ctx);

			appendStringInfoString(&st->text, content);
			MemoryContextSwitchTo(old);
		}
		if (completion)
			SRF_RETURN_NEXT(funcctx, chunk_jsonb(st, content, NULL));
		SRF_RETURN_NEXT(funcctx, PointerGetDatum(cstring_to_text(content)));
	}
	st->finished = true;
	if (completion)
		SRF_RETURN_NEXT(funcctx, chunk_jsonb(st, NULL, &res));
	SRF_RETURN_DONE(funcctx);
}

Datum
opus_generate_stream(PG_FUNCTION_ARGS)
{
	return stream_srf(fcinfo, false, false);
}

Datum
opus_chat_stream(PG_FUNCTION_ARGS)
{
	return stream_srf(fcinfo, true, false);
}

Datum
opus_generate_stream_completion(PG_FUNCTION_ARGS)
{
	return stream_srf(fcinfo, false, true);
}

Datum
opus_chat_stream_completion(PG_FUNCTION_ARGS)
{
	return stream_srf(fcinfo, true, true);
}
