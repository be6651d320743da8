/*
 * toolcalls.c - tool calls in a chat answer, in the OpenAI shape.
 *
 * When a chat request has tool definitions (tools => ...), the model's
 * template tells it how to call a tool, and the answer carries the call in
 * that template family's format.  Recognised, in this order:
 *
 *   Hermes / Qwen 2.5 / Qwen 3   <tool_call>{"name": ..., "arguments": {...}}</tool_call>
 *                                (one block per call, text around them is content)
 *   Mistral / Mixtral            [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
 *                                (text before the marker is content)
 *   Llama 3.1 / 3.2 / 3.3        the whole answer one JSON object
 *                                {"name": ..., "parameters": {...}}, optionally
 *                                after <|python_tag|>
 *
 * A candidate that is not valid JSON, or a call without a string "name",
 * makes the answer plain content (no partial results).  Each call becomes
 * {"id": PREFIX<i>, "type": "function", "function": {"name": ...,
 * "arguments": "<JSON text>"}} as OpenAI's chat.completion has it
 * ("arguments" or "parameters", an object or a string; {} when absent).
 * docs/tools.md.
 */
#include "postgres.h"

#include <limits.h>

#include "common/jsonapi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"

#include "opus_pg.h"

PG_FUNCTION_INFO_V1(opus_tool_calls);

#define MAX_CALLS 64

/* s[0..len) is one valid JSON value (checked without raising an error). */
static bool
json_valid(const char *s, size_t len)
{
	JsonLexContext *lex;

	if (len == 0 || len > (size_t) INT_MAX)
		return false;
	lex = makeJsonLexContextCstringLen(unconstify(char *, s), (int) len, GetDatabaseEncoding(), true);
	return pg_parse_json(lex, &nullSemAction) == JSON_SUCCESS;
}

static bool
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Trim s[0..*len) in place: returns the new start, *len its length. */
static const char *
trim(const char *s, size_t *len)
{
	while (*len > 0 && is_space(s[0]))
	{
		s++;
		(*len)--;
	}
	while (*len > 0 && is_space(s[*len - 1]))
		(*len)--;
	return s;
}

static const char *
find(const char *s, size_t len, const char *what)
{
	size_t		n = strlen(what);

	for (size_t i = 0; n <= len && i <= len - n; i++)
		if (memcmp(s + i, what, n) == 0)
			return s + i;
	return NULL;
}

/*
 * One call object (v, a jbvBinary) appended to calls as an OpenAI tool call
 * numbered i (with indexed, led by "index": i, as a stream chunk's delta has
 * it); false if it is not an object with a string "name".
 */
static bool
append_call(StringInfo calls, const JsonbValue *v, const char *id_prefix, bool indexed, int i)
{
	JsonbValue	name;
	JsonbValue	args;
	char	   *name_s;
	char	   *args_s;

	if (v->type != jbvBinary || !JsonContainerIsObject(v->val.binary.data))
		return false;
	if (!getKeyJsonValueFromContainer(v->val.binary.data, "name", 4, &name) ||
		name.type != jbvString || name.val.string.len == 0)
		return false;
	name_s = pnstrdup(name.val.string.val, name.val.string.len);
	if (getKeyJsonValueFromContainer(v->val.binary.data, "arguments", 9, &args) ||
		getKeyJsonValueFromContainer(v->val.binary.data, "parameters", 10, &args))
	{
		if (args.type == jbvString)
			args_s = pnstrdup(args.val.string.val, args.val.string.len);
		else if (args.type == jbvBinary)
			args_s = JsonbToCString(NULL, args.val.binary.data, args.val.binary.len);
		else
			args_s = JsonbToCString(NULL, &JsonbValueToJsonb(&args)->root, -1);
	}
	else
		args_s = "{}";
	if (calls->len > 1)
		appendStringInfoString(calls, ", ");
	appendStringInfoChar(calls, '{');
	if (indexed)
		appendStringInfo(calls, "\"index\": %d, ", i);
	appendStringInfo(calls, "\"id\": \"%s%d\", \"type\": \"function\", \"function\": {\"name\": ",
					 id_prefix, i);
	escape_json(calls, name_s);
	appendStringInfoString(calls, ", \"arguments\": ");
	escape_json(calls, args_s);
	appendStringInfoString(calls, "}}");
	return true;
}

/*
 * The JSON text s[0..len) (an object, or with allow_array an array of
 * objects) as calls; returns how many, -1 if it is not valid calls.
 */
static int
parse_calls(StringInfo calls, const char *s, size_t len, bool allow_array,
			const char *id_prefix, bool indexed, int first)
{
	Jsonb	   *jb;
	JsonbValue	root;
	int			n = 0;

	s = trim(s, &len);
	if (len == 0 || !(s[0] == '{' || (allow_array && s[0] == '[')) || !json_valid(s, len))
		return -1;
	jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(pnstrdup(s, len))));
	if (JB_ROOT_IS_ARRAY(jb))
	{
		int			count = JB_ROOT_COUNT(jb);

		if (count == 0 || first + count > MAX_CALLS)
			return -1;
		for (int i = 0; i < count; i++)
		{
			JsonbValue *e = getIthJsonbValueFromContainer(&jb->root, i);

			if (e == NULL || !append_call(calls, e, id_prefix, indexed, first + n))
				return -1;
			n++;
		}
		return n;
	}
	if (first + 1 > MAX_CALLS)
		return -1;
	root.type = jbvBinary;
	root.val.binary.data = &jb->root;
	root.val.binary.len = VARSIZE(jb) - VARHDRSZ;
	return append_call(calls, &root, id_prefix, indexed, first) ? 1 : -1;
}

/*
 * Tool calls in content[0..len) (database encoding): returns their number
 * (0: none, the answer is plain content), with calls set to a JSON array of
 * OpenAI tool calls and *rest to the text outside them (trimmed; NULL when
 * empty).  With indexed, each call carries its position ("index": 0, 1,
 * ...) as OpenAI's chat.completion.chunk deltas do.  calls is initialised
 * here.
 */
int
OpusParseToolCalls(const char *content, size_t len, const char *id_prefix, bool indexed,
				   StringInfo calls, char **rest)
{
	static const char open_tag[] = "<tool_call>";
	static const char close_tag[] = "</tool_call>";
	static const char mistral[] = "[TOOL_CALLS]";
	static const char python_tag[] = "<|python_tag|>";
	StringInfoData text;
	const char *p;
	int			n = 0;

	initStringInfo(calls);
	appendStringInfoChar(calls, '[');
	initStringInfo(&text);
	*rest = NULL;

	if ((p = find(content, len, open_tag)) != NULL)
	{
		const char *s = content;
		const char *end = content + len;

		while (p != NULL)
		{
			const char *body = p + strlen(open_tag);
			const char *close = find(body, (size_t) (end - body), close_tag);
			size_t		body_len = (size_t) ((close ? close : end) - body);
			int			k;

			appendBinaryStringInfo(&text, s, (int) (p - s));
			k = parse_calls(calls, body, body_len, false, id_prefix, indexed, n);
			if (k < 0)
				goto none;
			n += k;
			s = close ? close + strlen(close_tag) : end;
			p = find(s, (size_t) (end - s), open_tag);
		}
		appendBinaryStringInfo(&text, s, (int) (end - s));
	}
	else if ((p = find(content, len, mistral)) != NULL)
	{
		const char *body = p + strlen(mistral);

		appendBinaryStringInfo(&text, content, (int) (p - content));
		n = parse_calls(calls, body, (size_t) (content + len - body), true, id_prefix, indexed, 0);
		if (n < 0)
			goto none;
	}
	else
	{
		const char *s = content;
		size_t		l = len;

		s = trim(s, &l);
		if (l >= strlen(python_tag) && memcmp(s, python_tag, strlen(python_tag)) == 0)
		{
			s += strlen(python_tag);
			l -= strlen(python_tag);
		}
		n = parse_calls(calls, s, l, false, id_prefix, indexed, 0);
		if (n < 0)
			goto none;
	}
	appendStringInfoChar(calls, ']');
	{
		size_t		l = (size_t) text.len;
		const char *t = trim(text.data, &l);

		if (l > 0)
			*rest = pnstrdup(t, l);
	}
	return n;

none:
	resetStringInfo(calls);
	appendStringInfoString(calls, "[]");
	return 0;
}

/*
 * opus_tool_calls(content text) returns jsonb: the tool calls in a chat
 * answer as an OpenAI tool_calls array (ids call_0, call_1, ...), or NULL
 * when the text holds none.  Strict.
 */
Datum
opus_tool_calls(PG_FUNCTION_ARGS)
{
	text	   *t = PG_GETARG_TEXT_PP(0);
	StringInfoData calls;
	char	   *rest;

	if (OpusParseToolCalls(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), "call_", false, &calls, &rest) == 0)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(calls.data)));
}
