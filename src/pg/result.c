/*
 * result.c - result shaping: the jsonb completion objects in the OpenAI
 * shapes (text_completion, chat.completion; the last chunk of a stream
 * shares their end) and the served model's name they carry.
 */
#include "postgres.h"

#include <time.h>

#include "common/pg_prng.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"

#include "opus_pg.h"

static void append_completion_end(StringInfo buf, const OpusResult *res, const char *finish);

/*
 * The served model's name: the declared name of a named model; for the
 * default model its file's short name (the file name without ".gguf").
 */
char *
OpusServedModelName(int model)
{
	OpusEngineStatus *e = OpusModel(model);
	char		path[OPUS_PROTO_PATH_LEN];
	char	   *base;
	size_t		len;

	SpinLockAcquire(&e->mutex);
	strlcpy(path, e->model_path, sizeof(path));
	if (model > 0)
		strlcpy(path, e->name, sizeof(path));
	SpinLockRelease(&e->mutex);
	if (model > 0)
		return pstrdup(path);
	base = strrchr(path, '/');
	base = pstrdup(base ? base + 1 : path);
	len = strlen(base);
	if (len > 5 && strcmp(base + len - 5, ".gguf") == 0)
		base[len - 5] = '\0';
	return base;
}

/*
 * The end of an OpenAI completion object after its choice's content:
 * logprobs, finish_reason, usage and timings, closing the object.  Shared
 * by the whole completions here and the last chunk of a stream (stream.c).
 * finish: the finish_reason, or NULL for the one res gives.
 */
void
OpusAppendCompletionEnd(StringInfo buf, const OpusResult *res, const char *finish)
{
	append_completion_end(buf, res, finish);
}

/* ... with finish_reason `finish` (NULL: from res). */
static void
append_completion_end(StringInfo buf, const OpusResult *res, const char *finish)
{
	if (finish == NULL)
		finish = res->finish == OPUS_PROTO_FINISH_LENGTH ? "length" : "stop";
	appendStringInfo(buf, "\"logprobs\": null, \"finish_reason\": \"%s\"}], ", finish);
	appendStringInfo(buf,
					 "\"usage\": {\"prompt_tokens\": %d, \"completion_tokens\": %d, \"total_tokens\": %d, "
					 "\"prompt_tokens_details\": {\"cached_tokens\": %d}}, ",
					 res->n_prompt, res->n_completion, res->n_prompt + res->n_completion,
					 res->n_cached);
	appendStringInfo(buf,
					 "\"timings\": {\"queue_ms\": %.3f, \"ttft_ms\": %.3f, \"engine_ms\": %.3f, \"total_ms\": %.3f}}",
					 res->queue_ms, res->ttft_ms, res->total_ms, res->elapsed_ms);
}

/*
 * An OpenAI completion object for res.  tools (chat only): the request had
 * tool definitions, so an answer the model formatted as tool calls
 * (toolcalls.c) becomes message.tool_calls, with finish_reason
 * "tool_calls" when generation stopped by itself.
 */
Datum
OpusCompletionJsonb(bool chat, bool tools, const OpusResult *res)
{
	StringInfoData buf;
	char	   *content = OpusTextFromUtf8(res->data, res->len);
	uint64		r = pg_prng_uint64(&pg_global_prng_state);
	char		call_prefix[32];
	StringInfoData calls;
	char	   *rest = NULL;
	int			n_calls = 0;
	const char *finish = NULL;

	snprintf(call_prefix, sizeof(call_prefix), "call_%016llx_", (unsigned long long) r);
	if (chat && tools)
		n_calls = OpusParseToolCalls(content, strlen(content), call_prefix, false, &calls, &rest);
	if (n_calls > 0 && res->finish == OPUS_PROTO_FINISH_STOP)
		finish = "tool_calls";

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"id\": \"%s-%016llx%08x\", \"object\": \"%s\", \"created\": %lld, \"model\": ",
					 chat ? "chatcmpl" : "cmpl", (unsigned long long) r,
					 (unsigned int) (res->request_id >> 32),
					 chat ? "chat.completion" : "text_completion",
					 (long long) time(NULL));
	escape_json(&buf, OpusServedModelName(res->served_model));
	appendStringInfo(&buf, ", \"model_version\": %d", res->served_version);
	appendStringInfoString(&buf, ", \"choices\": [{\"index\": 0, ");
	if (chat)
	{
		appendStringInfoString(&buf, "\"message\": {\"role\": \"assistant\", \"content\": ");
		if (n_calls > 0 && rest == NULL)
			appendStringInfoString(&buf, "null");
		else
			escape_json(&buf, n_calls > 0 ? rest : content);
		if (n_calls > 0)
			appendStringInfo(&buf, ", \"tool_calls\": %s", calls.data);
		appendStringInfoString(&buf, "}, ");
	}
	else
	{
		appendStringInfoString(&buf, "\"text\": ");
		escape_json(&buf, content);
		appendStringInfoString(&buf, ", ");
	}
	append_completion_end(&buf, res, finish);
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
}
