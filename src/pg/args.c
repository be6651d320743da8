/*
 * args.c - the request parameters of the SQL functions: found by name among
 * the called function's arguments (pg_proc), checked against the one table
 * (src/params.h) with its error messages, and put into an OpusRequest.
 *
 * The generation functions (opus_generate, opus_chat, opus_completion,
 * opus_chat_completion, opus_submit, opus_submit_chat, opus_generate_many,
 * opus_chat_many, the streaming ones) take the table's SQL parameters as named arguments with
 * the table's DEFAULTs; a NULL argument means its default (or what the
 * table's null_means says).  No C code here knows their positions.
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/syscache.h"

#include "opus_pg.h"
#include "structured.h"

/*
 * The argument positions (among the input arguments, as fcinfo counts them)
 * of n names (NULL: none) of the called function; -1 for a name it does not
 * have.
 */
static void
arg_positions(FunctionCallInfo fcinfo, const char *const *names, int n, int *pos)
{
	HeapTuple	tp;
	Oid		   *types;
	char	  **argnames;
	char	   *modes;
	int			nall;
	int			in = 0;

	for (int j = 0; j < n; j++)
		pos[j] = -1;
	if (fcinfo->flinfo == NULL || !OidIsValid(fcinfo->flinfo->fn_oid))
		return;
	tp = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
	if (!HeapTupleIsValid(tp))
		elog(ERROR, "cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
	nall = get_func_arg_info(tp, &types, &argnames, &modes);
	ReleaseSysCache(tp);
	for (int i = 0; i < nall; i++)
	{
		char		mode = modes ? modes[i] : PROARGMODE_IN;

		if (mode == PROARGMODE_OUT || mode == PROARGMODE_TABLE)
			continue;
		if (argnames && argnames[i])
			for (int j = 0; j < n; j++)
				if (names[j] && strcmp(argnames[i], names[j]) == 0)
					pos[j] = in;
		in++;
	}
}

int
OpusArgNo(FunctionCallInfo fcinfo, const char *name)
{
	int			pos;

	arg_positions(fcinfo, &name, 1, &pos);
	return pos < fcinfo->nargs ? pos : -1;
}

/* The argument named name is absent or NULL. */
bool
OpusArgIsNull(FunctionCallInfo fcinfo, const char *name)
{
	int			argno = OpusArgNo(fcinfo, name);

	return argno < 0 || PG_ARGISNULL(argno);
}

static void
range_error(enum opus_param_id id, double v)
{
	char		range[OPUS_PARAM_RANGE_LEN];
	char		given[64];

	/* integers as integers (2147483647, not 2.14748e+09) */
	if (opus_params[id].kind == OPUS_PARAM_INT)
		snprintf(given, sizeof(given), "%.0f", v);
	else
		opus_param_format(given, sizeof(given), v);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s must be %s", opus_params[id].name,
					opus_param_range(id, range, sizeof(range))),
			 errdetail("The value given was %s.", given)));
}

/*
 * A number parameter: false (and v untouched) when the argument is absent or
 * NULL, else true with the value, checked.
 */
static bool
number_arg(FunctionCallInfo fcinfo, const int *pos, enum opus_param_id id, double *v)
{
	int			argno = pos[id];

	if (argno < 0 || argno >= fcinfo->nargs || PG_ARGISNULL(argno))
		return false;
	if (opus_params[id].kind == OPUS_PARAM_INT)
		*v = (double) PG_GETARG_INT32(argno);
	else
		*v = PG_GETARG_FLOAT8(argno);
	if (!opus_param_ok(id, *v))
		range_error(id, *v);
	return true;
}

/* The stop strings (argument argno) into req, as UTF-8. */
static void
parse_stop(FunctionCallInfo fcinfo, int argno, OpusRequest *req)
{
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(argno);
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("stop must be a one-dimensional array")));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n > OPUS_PARAM_MAX_STOP)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("too many stop strings"),
				 errdetail("%d were given; at most %d are allowed.", n, OPUS_PARAM_MAX_STOP)));
	for (int i = 0; i < n; i++)
	{
		text	   *t;
		size_t		len;
		const char *s;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("stop strings must not be null")));
		t = DatumGetTextPP(elems[i]);
		s = OpusTextToUtf8(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), &len);
		if (!opus_param_ok(OPUS_P_stop, (double) len))
		{
			char		range[OPUS_PARAM_RANGE_LEN];

			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("stop strings must be %s bytes long",
							opus_param_range(OPUS_P_stop, range, sizeof(range))),
					 errdetail("Stop string %d has %zu bytes.", i + 1, len)));
		}
		req->stop[i].ptr = s;
		req->stop[i].len = (uint32) len;
	}
	req->n_stop = n;
}

static void
tools_error(int index, const char *problem)
{
	if (index < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tools must be a JSON array of tool definitions"),
				 errdetail("%s", problem),
				 errhint("Pass tools like '[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\"}}}]'.")));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("malformed tool definition at index %d", index),
			 errdetail("%s", problem),
			 errhint("Each tool needs \"type\": \"function\" and a \"function\" object with a string \"name\".")));
}

/*
 * The tools argument (jsonb, OpenAI form) of a chat request: checked, then
 * kept as its JSON text (UTF-8) in req->tools; the request carries it before
 * the messages as an OPUS_ROLE_TOOLS item, which the engine hands to the
 * model's template as `tools`.
 */
static void
parse_tools(FunctionCallInfo fcinfo, int argno, OpusRequest *req)
{
	Jsonb	   *jb = PG_GETARG_JSONB_P(argno);
	int			n;
	char	   *json;
	size_t		len;

	if (req->kind != OPUS_KIND_CHAT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tools are only for chat requests")));
	if (!JB_ROOT_IS_ARRAY(jb) || JB_ROOT_IS_SCALAR(jb))
		tools_error(-1, "The value is not a JSON array.");
	n = JB_ROOT_COUNT(jb);
	for (int i = 0; i < n; i++)
	{
		JsonbValue *elem = getIthJsonbValueFromContainer(&jb->root, i);
		JsonbValue	v;
		JsonbValue	name;

		if (elem == NULL || elem->type != jbvBinary ||
			!JsonContainerIsObject(elem->val.binary.data))
			tools_error(i, "The tool is not a JSON object.");
		if (!getKeyJsonValueFromContainer(elem->val.binary.data, "type", 4, &v) ||
			v.type != jbvString || v.val.string.len != 8 ||
			memcmp(v.val.string.val, "function", 8) != 0)
			tools_error(i, "The tool has no \"type\": \"function\".");
		if (!getKeyJsonValueFromContainer(elem->val.binary.data, "function", 8, &v) ||
			v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data))
			tools_error(i, "The tool has no \"function\" object.");
		if (!getKeyJsonValueFromContainer(v.val.binary.data, "name", 4, &name) ||
			name.type != jbvString || name.val.string.len == 0)
			tools_error(i, "The function has no non-empty string \"name\".");
	}
	json = JsonbToCString(NULL, &jb->root, VARSIZE(jb));
	json = (char *) OpusTextToUtf8(json, strlen(json), &len);
	if (len > OPUS_PARAM_MAX_TOOLS_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("tools are too long"),
				 errdetail("The tool definitions take %zu bytes; at most %d are allowed.",
						   len, OPUS_PARAM_MAX_TOOLS_LEN)));
	req->tools = json;
	req->tools_len = len;
}

/* Argument id of the call when the function has it and it is not NULL, else -1. */
static int
given(FunctionCallInfo fcinfo, const int *pos, enum opus_param_id id)
{
	int			argno = pos[id];

	return argno >= 0 && argno < fcinfo->nargs && !PG_ARGISNULL(argno) ? argno : -1;
}

/*
 * The output constraint (response_format, grammar, regex, choices; at most
 * one) as the GBNF grammar the engine enforces (src/pg/structured.c: every
 * error is raised there, before anything is queued).  A function without
 * these arguments leaves req->grammar as it is.
 */
static void
parse_constraint(FunctionCallInfo fcinfo, const int *pos, OpusRequest *req)
{
	int			rf = given(fcinfo, pos, OPUS_P_response_format);
	int			gr = given(fcinfo, pos, OPUS_P_grammar);
	int			re = given(fcinfo, pos, OPUS_P_regex);
	int			ch = given(fcinfo, pos, OPUS_P_choices);
	char	   *g;

	if (rf < 0 && gr < 0 && re < 0 && ch < 0)
		return;
	g = OpusConstraintGrammar(rf < 0 ? NULL : PG_GETARG_JSONB_P(rf),
							  gr < 0 ? NULL : PG_GETARG_TEXT_PP(gr),
							  re < 0 ? NULL : PG_GETARG_TEXT_PP(re),
							  ch < 0 ? NULL : PG_GETARG_ARRAYTYPE_P(ch));
	req->grammar = g;
	req->grammar_len = g != NULL ? strlen(g) : 0;
}

void
OpusParseOptions(FunctionCallInfo fcinfo, OpusRequest *req)
{
	struct opus_proto_params *p = &req->params;
	const char *names[OPUS_P__COUNT];
	int			pos[OPUS_P__COUNT];
	double		v;
	const char *bad;

	for (int i = 0; i < OPUS_P__COUNT; i++)
		names[i] = opus_params[i].sql ? opus_params[i].name : NULL;
	arg_positions(fcinfo, names, OPUS_P__COUNT, pos);

	/* in the order of the arguments: the first bad one is reported */
	p->max_tokens = number_arg(fcinfo, pos, OPUS_P_max_tokens, &v) ? (int32) v : opus_default_max_tokens;
	p->temperature = (float) (number_arg(fcinfo, pos, OPUS_P_temperature, &v) ? v : OPUS_PARAM_DEFAULT(temperature));
	p->top_p = (float) (number_arg(fcinfo, pos, OPUS_P_top_p, &v) ? v : OPUS_PARAM_DEFAULT(top_p));
	p->top_k = (int32) (number_arg(fcinfo, pos, OPUS_P_top_k, &v) ? v : OPUS_PARAM_DEFAULT(top_k));
	p->min_p = (float) (number_arg(fcinfo, pos, OPUS_P_min_p, &v) ? v : OPUS_PARAM_DEFAULT(min_p));
	p->presence_penalty = (float) (number_arg(fcinfo, pos, OPUS_P_presence_penalty, &v) ? v : OPUS_PARAM_DEFAULT(presence_penalty));
	p->frequency_penalty = (float) (number_arg(fcinfo, pos, OPUS_P_frequency_penalty, &v) ? v : OPUS_PARAM_DEFAULT(frequency_penalty));
	p->repetition_penalty = (float) (number_arg(fcinfo, pos, OPUS_P_repetition_penalty, &v) ? v : OPUS_PARAM_DEFAULT(repetition_penalty));
	if (pos[OPUS_P_seed] < 0 || PG_ARGISNULL(pos[OPUS_P_seed]))
		p->seed = pg_prng_uint64(&pg_global_prng_state);
	else
		p->seed = (uint64) PG_GETARG_INT64(pos[OPUS_P_seed]);

	/* a double inside a range can still round to a float outside it */
	if ((bad = opus_proto_check_params(p)) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is out of range", bad)));

	req->n_stop = 0;
	req->tools = NULL;
	req->tools_len = 0;
	if (pos[OPUS_P_stop] >= 0 && !PG_ARGISNULL(pos[OPUS_P_stop]))
		parse_stop(fcinfo, pos[OPUS_P_stop], req);
	if (pos[OPUS_P_tools] >= 0 && !PG_ARGISNULL(pos[OPUS_P_tools]))
		parse_tools(fcinfo, pos[OPUS_P_tools], req);
	parse_constraint(fcinfo, pos, req);
}

/*
 * The model argument (text, NULL = the default model) and the fallback
 * argument (boolean; NULL = only batch-class requests may go to the model's
 * fallback under overload) into req: 42704 for an unknown name, 42501 for a
 * model the role may not use.  A function without those arguments uses the
 * default model.
 */
void
OpusParseModelArg(FunctionCallInfo fcinfo, OpusRequest *req)
{
	const char *const names[2] = {opus_params[OPUS_P_model].name, opus_params[OPUS_P_fallback].name};
	int			pos[2];

	arg_positions(fcinfo, names, 2, pos);
	req->model = 0;
	req->model_epoch = 0;
	req->fallback = -1;
	if (pos[0] >= 0 && pos[0] < PG_NARGS() && !PG_ARGISNULL(pos[0]))
	{
		char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(pos[0]));

		req->model = OpusLookupModel(name, &req->model_epoch, NULL, 0);
	}
	if (pos[1] >= 0 && pos[1] < PG_NARGS() && !PG_ARGISNULL(pos[1]))
		req->fallback = PG_GETARG_BOOL(pos[1]) ? 1 : 0;
}
