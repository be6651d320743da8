/*
 * functions.c - the synchronous SQL-callable functions of opus_pg:
 * opus_generate, opus_chat and their completion forms, tokenization, model
 * and engine status, and opus_last_request.
 *
 * Their input comes from input.c (prompt, messages) and args.c (options,
 * from the table in src/params.h); the jsonb results from result.c; text
 * crosses encodings in encoding.c.
 */
#include "postgres.h"

#include <time.h>

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "opus_pg.h"

PG_FUNCTION_INFO_V1(opus_generate);
PG_FUNCTION_INFO_V1(opus_chat);
PG_FUNCTION_INFO_V1(opus_completion);
PG_FUNCTION_INFO_V1(opus_chat_completion);
PG_FUNCTION_INFO_V1(opus_tokenize);
PG_FUNCTION_INFO_V1(opus_detokenize);
PG_FUNCTION_INFO_V1(opus_model_info);
PG_FUNCTION_INFO_V1(opus_engine_status);
PG_FUNCTION_INFO_V1(opus_last_request);

/* The last successful request of this session (opus_last_request()). */
static OpusResult last_result;
static uint8 last_kind;
static bool have_last_result = false;

static void
remember(uint8 kind, const OpusResult *res)
{
	last_result = *res;
	last_result.data = NULL;
	last_kind = kind;
	have_last_result = true;
}

/* ---------------------------------------------------------------------
 * Generation
 * --------------------------------------------------------------------- */

static void
run_generation(FunctionCallInfo fcinfo, uint8 kind, OpusRequest *req, OpusResult *res)
{
	OpusParseGeneration(fcinfo, kind, req);
	OpusRunRequest(req, res);
	remember(kind, res);
}

Datum
opus_generate(PG_FUNCTION_ARGS)
{
	OpusRequest req;
	OpusResult	res;

	run_generation(fcinfo, OPUS_KIND_GENERATE, &req, &res);
	PG_RETURN_TEXT_P(cstring_to_text(OpusTextFromUtf8(res.data, res.len)));
}

Datum
opus_chat(PG_FUNCTION_ARGS)
{
	OpusRequest req;
	OpusResult	res;

	run_generation(fcinfo, OPUS_KIND_CHAT, &req, &res);
	PG_RETURN_TEXT_P(cstring_to_text(OpusTextFromUtf8(res.data, res.len)));
}

Datum
opus_completion(PG_FUNCTION_ARGS)
{
	OpusRequest req;
	OpusResult	res;

	run_generation(fcinfo, OPUS_KIND_GENERATE, &req, &res);
	PG_RETURN_DATUM(OpusCompletionJsonb(false, false, &res));
}

Datum
opus_chat_completion(PG_FUNCTION_ARGS)
{
	OpusRequest req;
	OpusResult	res;

	run_generation(fcinfo, OPUS_KIND_CHAT, &req, &res);
	PG_RETURN_DATUM(OpusCompletionJsonb(true, res.tools, &res));
}

/* ---------------------------------------------------------------------
 * Tokens
 * --------------------------------------------------------------------- */

/* Neutral parameters for requests that do not sample. */
static void
neutral_params(OpusRequest *req)
{
	req->params.max_tokens = 1;
	req->params.temperature = 0.0f;
	req->params.top_p = 1.0f;
	req->params.top_k = 0;
	req->params.min_p = 0.0f;
	req->params.repetition_penalty = 1.0f;
}

Datum
opus_tokenize(PG_FUNCTION_ARGS)
{
	OpusRequest req;
	OpusResult	res;
	Datum	   *elems;
	int			n;
	int			i;

	OpusCheckPreloaded();
	memset(&req, 0, sizeof(req));
	req.kind = OPUS_KIND_TOKENIZE;
	neutral_params(&req);
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("text to tokenize must not be null")));
	{
		text	   *t = PG_GETARG_TEXT_PP(0);

		req.text = OpusTextToUtf8(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), &req.text_len);
	}
	OpusCheckPromptSize(req.text_len, "text to tokenize is");
	OpusRunRequest(&req, &res);
	remember(OPUS_KIND_TOKENIZE, &res);

	if (res.len % 4 != 0)
		elog(ERROR, "opus_pg: token result of %u bytes is not a whole number of tokens", res.len);
	n = (int) (res.len / 4);
	elems = palloc(sizeof(Datum) * Max(n, 1));
	for (i = 0; i < n; i++)
		elems[i] = Int32GetDatum((int32) opus_proto_get_u32((const uint8_t *) res.data + 4 * i));
	PG_RETURN_ARRAYTYPE_P(construct_array(elems, n, INT4OID, sizeof(int32), true, TYPALIGN_INT));
}

Datum
opus_detokenize(PG_FUNCTION_ARGS)
{
	OpusRequest req;
	OpusResult	res;
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			i;

	OpusCheckPreloaded();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("token array must not be null")));
	arr = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("token array must be one-dimensional")));
	deconstruct_array(arr, INT4OID, sizeof(int32), true, TYPALIGN_INT, &elems, &nulls, &n);

	memset(&req, 0, sizeof(req));
	req.kind = OPUS_KIND_DETOKENIZE;
	neutral_params(&req);
	req.n_tokens = n;
	req.tokens = palloc(sizeof(int32) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("token ids must not be null"),
					 errdetail("Element %d is null.", i + 1)));
		req.tokens[i] = DatumGetInt32(elems[i]);
		if (req.tokens[i] < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("token id %d is out of range", req.tokens[i]),
					 errdetail("Token ids are not negative.")));
	}
	if (n == 0)
		PG_RETURN_TEXT_P(cstring_to_text(""));
	OpusRunRequest(&req, &res);
	remember(OPUS_KIND_DETOKENIZE, &res);
	PG_RETURN_TEXT_P(cstring_to_text(OpusTextFromUtf8(res.data, res.len)));
}

/* ---------------------------------------------------------------------
 * Model and engine status
 * --------------------------------------------------------------------- */

Datum
opus_model_info(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	struct opus_proto_ready info;
	char		path[OPUS_PROTO_PATH_LEN];
	Datum		values[9];
	bool		nulls[9];

	OpusCheckPreloaded();
	OpusWaitEngineReady(&info, path, sizeof(path));
	InitMaterializedSRF(fcinfo, 0);
	memset(nulls, 0, sizeof(nulls));
	values[0] = CStringGetTextDatum(info.name);
	values[1] = CStringGetTextDatum(info.arch);
	values[2] = Int64GetDatum(info.n_params);
	values[3] = CStringGetTextDatum(info.tensor_type);
	values[4] = Int32GetDatum(info.n_ctx);
	values[5] = Int32GetDatum(info.n_vocab);
	values[6] = Int32GetDatum(info.n_layer);
	values[7] = Int32GetDatum(info.n_embd);
	values[8] = CStringGetTextDatum(path);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

Datum
opus_engine_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	OpusEngineStatus snap;
	Datum		values[14];
	bool		nulls[14];
	int			busy = 0;
	int			i;

	OpusCheckPreloaded();
	SpinLockAcquire(&OpusShared->engine.mutex);
	memcpy(&snap, &OpusShared->engine, sizeof(snap));
	SpinLockRelease(&OpusShared->engine.mutex);
	for (i = 0; i < OpusShared->n_slots; i++)
	{
		OpusSlot   *slot = OpusGetSlot(i);

		SpinLockAcquire(&slot->mutex);
		busy += slot->state != OPUS_SLOT_FREE;
		SpinLockRelease(&slot->mutex);
	}

	InitMaterializedSRF(fcinfo, 0);
	memset(nulls, 0, sizeof(nulls));
	values[0] = CStringGetTextDatum(OpusEngineStateName(snap.state, snap.unresponsive));
	values[1] = Int32GetDatum(snap.supervisor_pid);
	nulls[1] = snap.supervisor_pid == 0;
	values[2] = Int32GetDatum(snap.engine_pid);
	nulls[2] = snap.engine_pid == 0;
	values[3] = Int64GetDatum(snap.starts);
	values[4] = Int64GetDatum(snap.restarts);
	values[5] = TimestampTzGetDatum(snap.started_at);
	nulls[5] = snap.started_at == 0;
	values[6] = TimestampTzGetDatum(snap.ready_at);
	nulls[6] = snap.ready_at == 0;
	values[7] = CStringGetTextDatum(snap.model_path);
	nulls[7] = snap.model_path[0] == '\0';
	values[8] = CStringGetTextDatum(snap.last_error);
	nulls[8] = snap.last_error[0] == '\0';
	values[9] = CStringGetTextDatum(snap.last_exit);
	nulls[9] = snap.last_exit[0] == '\0';
	values[10] = Int32GetDatum(busy);
	values[11] = Int32GetDatum(snap.stats.n_active);
	values[12] = Int32GetDatum(OpusShared->n_slots);
	values[13] = Int64GetDatum(snap.stats.tokens_decode);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/*
 * opus_last_request(): usage and timings of this session's last successful
 * request (no row before the first).  engine_ms is the engine's own time
 * for the request (submit to done); total_ms is the backend's, from
 * claiming a slot to having the result; their difference is the cost of
 * the relay.
 */
Datum
opus_last_request(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	static const char *const kinds[] = {"", "generate", "chat", "tokenize", "detokenize"};
	Datum		values[9];
	bool		nulls[9];

	OpusCheckPreloaded();
	InitMaterializedSRF(fcinfo, 0);
	if (!have_last_result)
		return (Datum) 0;
	memset(nulls, 0, sizeof(nulls));
	values[0] = CStringGetTextDatum(last_kind < lengthof(kinds) ? kinds[last_kind] : "");
	values[1] = CStringGetTextDatum(last_result.finish == OPUS_PROTO_FINISH_LENGTH ? "length" : "stop");
	values[2] = Int32GetDatum(last_result.n_prompt);
	values[3] = Int32GetDatum(last_result.n_completion);
	values[4] = Int32GetDatum(last_result.n_cached);
	values[5] = Float8GetDatum(last_result.queue_ms);
	values[6] = Float8GetDatum(last_result.ttft_ms);
	values[7] = Float8GetDatum(last_result.total_ms);
	values[8] = Float8GetDatum(last_result.elapsed_ms);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}
