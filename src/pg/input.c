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

/* Is v the JSON string s? */
static bool
is_string(const JsonbValue *v, const char *s)
{
	return v->type == jbvString && v->val.string.len == (int) strlen(s) &&
		memcmp(v->val.string.val, s, v->val.string.len) == 0;
}

/*
 * An assistant message's tool_calls (OpenAI: [{"id": ..., "type":
 * "function", "function": {"name": ..., "arguments": "<JSON text>"}}]):
 * checked as far as templates rely on it.
 */
static void
check_tool_calls(int index, const JsonbValue *calls)
{
	int			n;

	if (calls->type != jbvBinary || !JsonContainerIsArray(calls->val.binary.data) ||
		JsonContainerIsScalar(calls->val.binary.data))
		messages_error(index, "The message's \"tool_calls\" is not a JSON array.");
	n = JsonContainerSize(calls->val.binary.data);
	for (int k = 0; k < n; k++)
	{
		JsonbValue *c = getIthJsonbValueFromContainer(calls->val.binary.data, k);
		JsonbValue	f;
		JsonbValue	v;

		if (c == NULL || c->type != jbvBinary || !JsonContainerIsObject(c->val.binary.data) ||
			!getKeyJsonValueFromContainer(c->val.binary.data, "function", 8, &f) ||
			f.type != jbvBinary || !JsonContainerIsObject(f.val.binary.data) ||
			!getKeyJsonValueFromContainer(f.val.binary.data, "name", 4, &v) ||
			v.type != jbvString || v.val.string.len == 0)
			messages_error(index, psprintf("Tool call %d has no \"function\" object with a non-empty string \"name\".", k));
		if (getKeyJsonValueFromContainer(f.val.binary.data, "arguments", 9, &v) &&
			v.type != jbvString &&
			!(v.type == jbvBinary && JsonContainerIsObject(v.val.binary.data)))
			messages_error(index, psprintf("Tool call %d has \"arguments\" that are neither a string nor an object.", k));
		if (getKeyJsonValueFromContainer(c->val.binary.data, "type", 4, &v) &&
			!is_string(&v, "function"))
			messages_error(index, psprintf("Tool call %d has a \"type\" other than \"function\".", k));
	}
}

/*
 * The members of message object obj other than "role" (and "content" when
 * it is a string, sent as the content), as a JSON object in UTF-8 for the
 * template; a missing content becomes "content": null.  NULL when there are
 * none.
 */
static const char *
message_members(JsonbContainer *obj, bool content_is_text, size_t *len)
{
	JsonbParseState *state = NULL;
	JsonbIterator *it = JsonbIteratorInit(obj);
	JsonbIteratorToken tok;
	JsonbValue	k;
	JsonbValue	v;
	JsonbValue *res;
	bool		any = false;
	bool		has_content = false;
	Jsonb	   *out;
	char	   *json;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		if (tok != WJB_KEY)
			continue;
		(void) JsonbIteratorNext(&it, &v, true);
		if (is_string(&k, "role"))
			continue;
		if (is_string(&k, "content"))
		{
			has_content = true;
			if (content_is_text)
				continue;
		}
		pushJsonbValue(&state, WJB_KEY, &k);
		pushJsonbValue(&state, WJB_VALUE, &v);
		any = true;
	}
	if (!has_content && !content_is_text)
	{
		k.type = jbvString;
		k.val.string.val = "content";
		k.val.string.len = 7;
		v.type = jbvNull;
		pushJsonbValue(&state, WJB_KEY, &k);
		pushJsonbValue(&state, WJB_VALUE, &v);
		any = true;
	}
	res = pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	if (!any)
		return NULL;
	out = JsonbValueToJsonb(res);
	json = JsonbToCString(NULL, &out->root, VARSIZE(out));
	return OpusTextToUtf8(json, strlen(json), len);
}

/*
 * OpenAI-form chat messages into req (pointers into jb).  Each message's
 * members beside role and content (an assistant's tool_calls, a tool
 * result's tool_call_id, ...) go to the template as they are
 * (docs/tools.md); content must be a string, except that an assistant
 * message with tool_calls may have none (null).
 */
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
	req->members = palloc0(sizeof(char *) * n);
	req->member_lens = palloc0(sizeof(size_t) * n);
	for (i = 0; i < n; i++)
	{
		JsonbValue *elem = getIthJsonbValueFromContainer(&jb->root, i);
		JsonbValue	v;
		char	   *role;
		bool		has_calls;
		bool		has_content;
		bool		text;

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
		has_calls = getKeyJsonValueFromContainer(elem->val.binary.data, "tool_calls", 10, &v);
		if (has_calls && req->roles[i] != OPUS_ROLE_ASSISTANT)
			messages_error(i, "Only assistant messages have \"tool_calls\".");
		if (has_calls)
			check_tool_calls(i, &v);
		if (getKeyJsonValueFromContainer(elem->val.binary.data, "tool_call_id", 12, &v) &&
			v.type != jbvString)
			messages_error(i, "The message's \"tool_call_id\" is not a string.");
		has_content = getKeyJsonValueFromContainer(elem->val.binary.data, "content", 7, &v);
		text = has_content && v.type == jbvString;
		if (!text && !(has_calls && (!has_content || v.type == jbvNull)))
			messages_error(i, "The message has no string \"content\".");
		if (text)
			req->contents[i] = OpusTextToUtf8(v.val.string.val, v.val.string.len, &req->content_lens[i]);
		else
		{
			req->contents[i] = "";
			req->content_lens[i] = 0;
		}
		total += req->content_lens[i];
		req->members[i] = message_members(elem->val.binary.data, text, &req->member_lens[i]);
		if (req->members[i])
			total += req->member_lens[i];
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
