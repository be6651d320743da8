/*
 * input.c - the input of a generation call: the prompt (text) or the chat
 * messages (jsonb in the OpenAI form) of opus_generate, opus_chat and
 * their completion, async, streaming and set-based variants, converted to
 * UTF-8 and checked against opus.max_prompt_bytes before anything is
 * queued.  The generation options come from args.c (src/params.h).
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "opus_pg.h"

/* what_is: "prompt is", "chat messages are", ... */
void
OpusCheckPromptSize(size_t len, const char *what_is)
{
	if (len > (size_t) opus_max_prompt_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s too large", what_is),
				 errdetail("It has %zu bytes; opus.max_prompt_bytes is %d.", len, opus_max_prompt_bytes)));
}

/* Prompt argument 0 as UTF-8. */
static void
parse_prompt(FunctionCallInfo fcinfo, OpusRequest *req)
{
	text	   *t;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("prompt must not be null")));
	t = PG_GETARG_TEXT_PP(0);
	req->text = OpusTextToUtf8(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), &req->text_len);
	OpusCheckPromptSize(req->text_len, "prompt is");
}

static void
messages_error(int index, const char *problem)
{
	if (index < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("messages must be a non-empty JSON array of message objects"),
				 errdetail("%s", problem),
				 errhint("Pass messages like '[{\"role\": \"user\", \"content\": \"Hello\"}]'.")));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("malformed chat message at index %d", index),
			 errdetail("%s", problem),
			 errhint("Each message needs \"role\" (\"system\", \"user\", \"assistant\" or \"tool\") and a string \"content\".")));
}

/* Messages argument 0 (jsonb, OpenAI form) into req. */
static void
parse_messages(FunctionCallInfo fcinfo, OpusRequest *req)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("messages must not be null")));
	OpusParseMessages(PG_GETARG_JSONB_P(0), req);
}

/* OpenAI-form chat messages into req (pointers into jb). */
void
OpusParseMessages(Jsonb *jb, OpusRequest *req)
{
	int			n;
	int			i;
	size_t		total = 0;

	if (!JB_ROOT_IS_ARRAY(jb) || JB_ROOT_IS_SCALAR(jb))
		messages_error(-1, "The value is not a JSON array.");
	n = JB_ROOT_COUNT(jb);
	if (n == 0)
		messages_error(-1, "The array is empty.");
	if (n > OPUS_PROTO_MAX_MESSAGES)
		messages_error(-1, "There are too many messages.");

	req->n_messages = n;
	req->roles = palloc(sizeof(uint8) * n);
	req->contents = palloc(sizeof(char *) * n);
	req->content_lens = palloc(sizeof(size_t) * n);
	for (i = 0; i < n; i++)
	{
		JsonbValue *elem = getIthJsonbValueFromContainer(&jb->root, i);
		JsonbValue	v;
		char	   *role;

		if (elem == NULL || elem->type != jbvBinary ||
			!JsonContainerIsObject(elem->val.binary.data))
			messages_error(i, "The message is not a JSON object.");
		if (!getKeyJsonValueFromContainer(elem->val.binary.data, "role", 4, &v) ||
			v.type != jbvString)
			messages_error(i, "The message has no string \"role\".");
		role = pnstrdup(v.val.string.val, v.val.string.len);
		if (strcmp(role, "system") == 0)
			req->roles[i] = OPUS_ROLE_SYSTEM;
		else if (strcmp(role, "user") == 0)
			req->roles[i] = OPUS_ROLE_USER;
		else if (strcmp(role, "assistant") == 0)
			req->roles[i] = OPUS_ROLE_ASSISTANT;
		else if (strcmp(role, "tool") == 0)
			req->roles[i] = OPUS_ROLE_TOOL;
		else
			messages_error(i, psprintf("The role \"%s\" is not one of \"system\", \"user\", \"assistant\", \"tool\".", role));
		if (!getKeyJsonValueFromContainer(elem->val.binary.data, "content", 7, &v) ||
			v.type != jbvString)
			messages_error(i, "The message has no string \"content\".");
		req->contents[i] = OpusTextToUtf8(v.val.string.val, v.val.string.len, &req->content_lens[i]);
		total += req->content_lens[i];
	}
	OpusCheckPromptSize(total, "chat messages are");
}

/* A generation request (prompt or chat messages + options) from fcinfo. */
void
OpusParseGeneration(FunctionCallInfo fcinfo, uint8 kind, OpusRequest *req)
{
	OpusCheckPreloaded();
	memset(req, 0, sizeof(*req));
	req->kind = kind;
	if (kind == OPUS_KIND_CHAT)
		parse_messages(fcinfo, req);
	else
		parse_prompt(fcinfo, req);
	OpusParseOptions(fcinfo, req);
	OpusParseModelArg(fcinfo, req);
}
