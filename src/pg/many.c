/*
 * many.c - set-based generation (opus_generate_many, opus_chat_many) and
 * embedding (opus_embed_many).
 *
 * A call keeps a window of requests in flight (ordinary, non-async slots,
 * marked slot->bulk), refilling it as results arrive so the engine can
 * batch them, and returns one row per input in input order.  If anything
 * fails, the error cleanup cancels every request still in flight.  The
 * backend's memory does not grow with the number of inputs (many_common).
 *
 * The windows count against the slot budget of asynchronous requests
 * (async.c: OpusAsyncCap, OpusAsyncRoleCap), so set-based calls never take
 * the synchronous reserve; see Capacity at the top of async.c.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "opus_pg.h"

PG_FUNCTION_INFO_V1(opus_generate_many);
PG_FUNCTION_INFO_V1(opus_chat_many);
PG_FUNCTION_INFO_V1(opus_embed_many);

/* How often a call looks at the requests it does not sleep on. */
#define POLL_MS			5

/* Requests of one opus_generate_many call that are in flight. */
typedef struct ManyState
{
	int			window;
	int			n_inflight;
	int		   *input;			/* [window] input ordinal (0-based) */
	uint64	   *ids;			/* [window] request id */
} ManyState;

/*
 * Claim a slot for a set-based call's window, within the budget (the
 * async cap and the role's share, see Capacity at the top); -1 when no
 * slot is free or the budget is spent (the caller waits for its own
 * requests).  A call with nothing in flight (alone) may take one slot
 * beyond the budget, as a synchronous call would, so it never waits on
 * results nobody reads.
 */
static int
claim_bulk(uint8 kind, uint64 *id, bool alone)
{
	int			index = OpusClaimSlot(kind, false, id, true);
	OpusSlot   *slot;
	int			n_role;
	int			n;

	if (index < 0)
		return -1;
	if (OpusAsyncCap() <= 0)
		return index;			/* async disabled: a window of 1, like a synchronous call */
	slot = OpusGetSlot(index);
	SpinLockAcquire(&slot->mutex);
	slot->bulk = true;
	SpinLockRelease(&slot->mutex);
	n = OpusAsyncBudgetHeld(GetUserId(), &n_role);
	if (n <= OpusAsyncCap() && n_role <= OpusAsyncRoleCap())
		return index;
	SpinLockAcquire(&slot->mutex);
	slot->bulk = false;
	if (!alone)
		slot->state = OPUS_SLOT_FREE;
	SpinLockRelease(&slot->mutex);
	return alone ? index : -1;
}

static void
many_cleanup(int code, Datum arg)
{
	ManyState  *ms = (ManyState *) DatumGetPointer(arg);
	int			k;

	for (k = 0; k < ms->n_inflight; k++)
		OpusAbandonRequest(ms->ids[k]);
	ms->n_inflight = 0;
}

/*
 * A finished row waiting for the rows before it (results come back in any
 * order, rows go out in input order).
 */
typedef struct ManyRow
{
	bool		done;
	char	   *output;
	uint8		finish;
	int32		n_prompt;
	int32		n_completion;
	Datum		embedding;		/* EMBED: the real[] */
} ManyRow;

/*
 * How many rows past the first unfinished one may be in flight or waiting,
 * in windows: bounds the backend's memory whatever the number of inputs
 * (a slow first row holds back submissions, not memory).
 */
#define MANY_REORDER_WINDOWS 4

/* Parse and check one input into req (allocations in the current context). */
static void
parse_item(uint8 kind, Datum elem, const OpusRequest *proto, bool random_seed,
		   OpusRequest *req)
{
	*req = *proto;
	if (kind == OPUS_KIND_CHAT)
		OpusParseMessages(DatumGetJsonbP(elem), req);
	else
	{
		text	   *t = DatumGetTextPP(elem);

		req->text = OpusTextToUtf8(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), &req->text_len);
		OpusCheckPromptSize(req->text_len, kind == OPUS_KIND_EMBED ? "input to embed is" : "prompt is");
	}
	if (random_seed)
		req->params.seed = pg_prng_uint64(&pg_global_prng_state);
	OpusCheckRequestSize(req);
}

/*
 * Memory stays flat whatever the number of inputs: the inputs are checked
 * one by one (nothing kept), parsed again when submitted, and rows go to
 * the tuplestore (which spills to disk beyond work_mem) as soon as every
 * row before them is done; at most MANY_REORDER_WINDOWS windows of rows are
 * in flight or waiting.
 */
static Datum
many_common(FunctionCallInfo fcinfo, uint8 kind)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *arr;
	ArrayIterator it;
	Datum		elem;
	bool		isnull;
	int			n;
	int			window;
	int			span;
	bool		random_seed = kind != OPUS_KIND_EMBED && OpusArgIsNull(fcinfo, "seed");
	const char *what = kind == OPUS_KIND_CHAT ? "conversation" :
		kind == OPUS_KIND_EMBED ? "input" : "prompt";
	int			window_arg = OpusArgNo(fcinfo, "window");
	OpusRequest proto;
	OpusRequest req;
	ManyRow    *rows;
	ManyState  *ms;
	MemoryContext item_cxt;
	MemoryContext old_cxt;
	int			next = 0;
	int			emitted = 0;
	int			k;

	OpusCheckPreloaded();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%ss must not be null", what)));
	arr = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%ss must be a one-dimensional array", what)));
	n = ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr));

	if (window_arg < 0 || PG_ARGISNULL(window_arg))
		window = Min(16, Max(1, OpusAsyncCap()));
	else
	{
		window = PG_GETARG_INT32(window_arg);
		if (window < 1 || window > 10000)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("window must be between 1 and 10000"),
					 errdetail("The value given was %d.", window)));
	}
	/* a window beyond the role's share of the budget would only wait */
	window = Min(window, Max(1, OpusAsyncRoleCap()));
	window = Min(window, OpusShared->n_slots);
	span = window * MANY_REORDER_WINDOWS;

	/* Validate everything before queuing anything, keeping nothing. */
	memset(&proto, 0, sizeof(proto));
	proto.kind = kind;
	if (kind == OPUS_KIND_EMBED)
		OpusParseEmbedArgs(fcinfo, &proto);
	else
	{
		OpusParseOptions(fcinfo, &proto);
		OpusParseModelArg(fcinfo, &proto);
	}
	item_cxt = AllocSetContextCreate(CurrentMemoryContext, "opus_pg set-based input",
									 ALLOCSET_DEFAULT_SIZES);
	it = array_create_iterator(arr, 0, NULL);
	for (k = 0; array_iterate(it, &elem, &isnull); k++)
	{
		if (isnull)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s %d must not be null", what, k + 1)));
		old_cxt = MemoryContextSwitchTo(item_cxt);
		parse_item(kind, elem, &proto, false, &req);
		MemoryContextSwitchTo(old_cxt);
		MemoryContextReset(item_cxt);
	}
	array_free_iterator(it);

	InitMaterializedSRF(fcinfo, 0);
	rows = palloc0(sizeof(ManyRow) * span);
	ms = palloc0(sizeof(ManyState));
	ms->window = window;
	ms->input = palloc(sizeof(int) * window);
	ms->ids = palloc(sizeof(uint64) * window);
	it = array_create_iterator(arr, 0, NULL);

	PG_ENSURE_ERROR_CLEANUP(many_cleanup, PointerGetDatum(ms));
	{
		while (emitted < n)
		{
			bool		progressed = false;

			/* Fill the window with whatever slots are free. */
			while (ms->n_inflight < window && next < n && next < emitted + span)
			{
				uint64		id;
				int			index = claim_bulk(kind, &id, ms->n_inflight == 0);

				if (index < 0)
					break;
				if (!array_iterate(it, &elem, &isnull) || isnull)
					elog(ERROR, "opus_pg: input %d of a set-based call went missing", next + 1);
				ms->input[ms->n_inflight] = next;
				ms->ids[ms->n_inflight] = id;
				ms->n_inflight++;
				old_cxt = MemoryContextSwitchTo(item_cxt);
				parse_item(kind, elem, &proto, random_seed, &req);
				OpusSubmitSlot(OpusGetSlot(index), &req, GetCurrentTimestamp());
				MemoryContextSwitchTo(old_cxt);
				MemoryContextReset(item_cxt);
				next++;
			}

			/* Collect every finished request. */
			for (k = 0; k < ms->n_inflight;)
			{
				OpusSlot   *slot = OpusGetSlot(OpusSlotIndexFromId(ms->ids[k]));
				OpusSlotState st;
				OpusResult	res;
				int			err_code;
				char		err_message[OPUS_PROTO_MSG_LEN];
				char		err_detail[OPUS_PROTO_MSG_LEN];
				ManyRow    *row = &rows[ms->input[k] % span];

				SpinLockAcquire(&slot->mutex);
				st = slot->state;
				SpinLockRelease(&slot->mutex);
				if (!OpusSlotFinished(st))
				{
					k++;
					continue;
				}
				err_code = OpusCollectResult(slot, &res, err_message, err_detail);
				SpinLockAcquire(&slot->mutex);
				slot->state = OPUS_SLOT_FREE;
				SpinLockRelease(&slot->mutex);
				ms->ids[k] = ms->ids[ms->n_inflight - 1];
				ms->input[k] = ms->input[ms->n_inflight - 1];
				ms->n_inflight--;
				if (err_code != 0)
					OpusRaiseError(err_code, err_message, err_detail);
				if (kind == OPUS_KIND_EMBED)
					row->embedding = OpusEmbeddingArray(res.data, res.len);
				else
					row->output = OpusTextFromUtf8(res.data, res.len);
				pfree(res.data);
				row->finish = res.finish;
				row->n_prompt = res.n_prompt;
				row->n_completion = res.n_completion;
				row->done = true;
				progressed = true;
			}

			/* Rows whose predecessors are all done go out, in input order. */
			while (emitted < n && rows[emitted % span].done)
			{
				ManyRow    *row = &rows[emitted % span];
				Datum		values[5];
				bool		vnulls[5];

				memset(vnulls, 0, sizeof(vnulls));
				values[0] = Int32GetDatum(emitted + 1);
				if (kind == OPUS_KIND_EMBED)
				{
					values[1] = row->embedding;
					tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, vnulls);
					pfree(DatumGetPointer(row->embedding));
					memset(row, 0, sizeof(*row));
					emitted++;
					continue;
				}
				values[1] = CStringGetTextDatum(row->output);
				values[2] = CStringGetTextDatum(row->finish == OPUS_PROTO_FINISH_LENGTH ? "length" : "stop");
				values[3] = Int32GetDatum(row->n_prompt);
				values[4] = Int32GetDatum(row->n_completion);
				tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, vnulls);
				pfree(DatumGetPointer(values[1]));
				pfree(DatumGetPointer(values[2]));
				pfree(row->output);
				memset(row, 0, sizeof(*row));
				emitted++;
			}
			if (progressed || emitted == n)
				continue;

			/*
			 * Nothing finished: sleep on the oldest request (its completion
			 * wakes us at once), looking at the others every POLL_MS.  With
			 * nothing in flight, every slot is busy: wait for one.
			 */
			if (ms->n_inflight > 0)
			{
				OpusSlot   *slot = OpusGetSlot(OpusSlotIndexFromId(ms->ids[0]));

				ConditionVariablePrepareToSleep(&slot->cv);
				(void) ConditionVariableTimedSleep(&slot->cv, POLL_MS, PG_WAIT_EXTENSION);
				ConditionVariableCancelSleep();
			}
			else
			{
				(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
								 10, PG_WAIT_EXTENSION);
				ResetLatch(MyLatch);
				CHECK_FOR_INTERRUPTS();
			}
		}
	}
	PG_END_ENSURE_ERROR_CLEANUP(many_cleanup, PointerGetDatum(ms));
	array_free_iterator(it);
	MemoryContextDelete(item_cxt);
	return (Datum) 0;
}

Datum
opus_generate_many(PG_FUNCTION_ARGS)
{
	return many_common(fcinfo, OPUS_KIND_GENERATE);
}

Datum
opus_chat_many(PG_FUNCTION_ARGS)
{
	return many_common(fcinfo, OPUS_KIND_CHAT);
}

Datum
opus_embed_many(PG_FUNCTION_ARGS)
{
	return many_common(fcinfo, OPUS_KIND_EMBED);
}
