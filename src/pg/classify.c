/*
 * classify.c - opus_classify and opus_extract (docs/structured-output.md):
 * a chat request held to a constraint (structured.c turns the labels or the
 * schema into the grammar), its answer checked and typed.
 *
 *   output cut at max_tokens, or not one of the labels / not valid JSON  22P02
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/catcache.h"
#include "utils/syscache.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "opus_pg.h"
#include "structured.h"
#include "text/grammar.h"
#include "text/json_schema.h"
#include "text/regex_gbnf.h"

PG_FUNCTION_INFO_V1(opus_classify);
PG_FUNCTION_INFO_V1(opus_classify_enum);
PG_FUNCTION_INFO_V1(opus_extract);

/* ---------------------------------------------------------------------
 * opus_classify and opus_extract: a chat request (an instruction as the
 * system message, the input as the user's) held to a constraint, greedy.
 * --------------------------------------------------------------------- */

static void
run_constrained(FunctionCallInfo fcinfo, const char *system, text *input,
				const char *grammar, int max_tokens, OpusResult *res)
{
	OpusRequest req;
	size_t		total;

	OpusCheckPreloaded();
	memset(&req, 0, sizeof(req));
	req.kind = OPUS_KIND_CHAT;
	req.n_messages = 2;
	req.roles = palloc(sizeof(uint8) * 2);
	req.contents = palloc(sizeof(char *) * 2);
	req.content_lens = palloc(sizeof(size_t) * 2);
	req.roles[0] = OPUS_ROLE_SYSTEM;
	req.contents[0] = OpusTextToUtf8(system, strlen(system), &req.content_lens[0]);
	req.roles[1] = OPUS_ROLE_USER;
	req.contents[1] = OpusTextToUtf8(VARDATA_ANY(input), VARSIZE_ANY_EXHDR(input),
									 &req.content_lens[1]);
	total = req.content_lens[0] + req.content_lens[1];
	OpusCheckPromptSize(total, "the instruction and input are");
	/* max_tokens, model, fallback where the function has them; greedy */
	OpusParseOptions(fcinfo, &req);
	OpusParseModelArg(fcinfo, &req);
	req.params.temperature = 0.0f;
	if (max_tokens > 0)
		req.params.max_tokens = max_tokens;
	req.grammar = grammar;
	req.grammar_len = strlen(grammar);
	OpusRunRequest(&req, res);
}

/* The label text[] argument: checked, its labels (server encoding). */
static char *
classify_labels(ArrayType *labels, char ***out, int *n_out)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	StringInfoData list;

	if (ARR_NDIM(labels) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("labels must be a one-dimensional array")));
	deconstruct_array(labels, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("labels must not be empty")));
	*out = palloc(sizeof(char *) * n);
	initStringInfo(&list);
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("labels must not contain nulls")));
		(*out)[i] = TextDatumGetCString(elems[i]);
		appendStringInfo(&list, "%s%s", i ? "\n" : "", (*out)[i]);
	}
	*n_out = n;
	return list.data;
}

/* The label the model chose among labels (an array of text), as text. */
static char *
classify(FunctionCallInfo fcinfo, text *input, ArrayType *labels)
{
	char	  **l;
	int			n;
	char	   *list = classify_labels(labels, &l, &n);
	char	   *grammar = OpusConstraintGrammar(NULL, NULL, NULL, labels);
	char	   *system;
	OpusResult	res;
	size_t		longest = 0;
	char	   *out;

	for (int i = 0; i < n; i++)
		longest = Max(longest, strlen(l[i]));
	system = psprintf("Classify the user's text. Answer with exactly one of these labels and nothing else:\n%s", list);
	/* a token is at least one byte: the longest label and the end fit */
	run_constrained(fcinfo, system, input, grammar, (int) Min(longest * 4 + 2, OPUS_PARAM_MAX_TOKENS), &res);
	out = OpusTextFromUtf8(res.data, res.len);
	for (int i = 0; i < n; i++)
		if (strcmp(out, l[i]) == 0)
			return out;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
			 errmsg("the model's answer is not one of the labels"),
			 errdetail("The answer was \"%s\"%s.", out,
					   res.finish == OPUS_PROTO_FINISH_LENGTH ? " (cut at max_tokens)" : "")));
	return NULL;				/* not reached */
}

/*
 * opus_classify(input text, labels text[], model text, fallback boolean)
 * returns text: one of the labels, chosen by the model (greedy).
 */
Datum
opus_classify(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(classify(fcinfo, PG_GETARG_TEXT_PP(0),
											  PG_GETARG_ARRAYTYPE_P(1))));
}

/*
 * opus_classify(input text, label anyenum, model text, fallback boolean)
 * returns anyenum: one of the enum's labels (the value given only names
 * the type; NULL::my_enum will do).
 */
Datum
opus_classify_enum(PG_FUNCTION_ARGS)
{
	Oid			enumtype = get_fn_expr_argtype(fcinfo->flinfo, 1);
	CatCList   *list;
	Datum	   *labels;
	Oid		   *oids;
	int			n;
	char	   *answer;
	ArrayType  *arr;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	if (!OidIsValid(enumtype))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("could not determine the enum type of the label argument")));
	list = SearchSysCacheList1(ENUMTYPOIDNAME, ObjectIdGetDatum(enumtype));
	n = list->n_members;
	labels = palloc(sizeof(Datum) * Max(n, 1));
	oids = palloc(sizeof(Oid) * Max(n, 1));
	/* in the enum's order (the cache list is by name) */
	{
		float4	   *order = palloc(sizeof(float4) * Max(n, 1));

		for (int i = 0; i < n; i++)
		{
			HeapTuple	tup = &list->members[i]->tuple;
			Form_pg_enum en = (Form_pg_enum) GETSTRUCT(tup);
			int			j = i;

			while (j > 0 && order[j - 1] > en->enumsortorder)
			{
				order[j] = order[j - 1];
				labels[j] = labels[j - 1];
				oids[j] = oids[j - 1];
				j--;
			}
			order[j] = en->enumsortorder;
			labels[j] = CStringGetTextDatum(NameStr(en->enumlabel));
			oids[j] = en->oid;
		}
	}
	ReleaseCatCacheList(list);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the enum type %s has no labels", format_type_be(enumtype))));
	arr = construct_array(labels, n, TEXTOID, -1, false, TYPALIGN_INT);
	answer = classify(fcinfo, PG_GETARG_TEXT_PP(0), arr);
	for (int i = 0; i < n; i++)
		if (strcmp(TextDatumGetCString(labels[i]), answer) == 0)
			PG_RETURN_OID(oids[i]);
	elog(ERROR, "label \"%s\" not found", answer);
	PG_RETURN_NULL();			/* not reached */
}

/*
 * opus_extract(input text, schema jsonb, max_tokens integer, model text,
 * fallback boolean) returns jsonb: the data of the input as JSON matching
 * the JSON Schema (greedy).  22P02 when the output is cut at max_tokens or
 * does not parse.
 */
Datum
opus_extract(PG_FUNCTION_ARGS)
{
	Jsonb	   *schema;
	char	   *schema_text;
	char	   *rf;
	char	   *grammar;
	char	   *system;
	char	   *out;
	OpusResult	res;
	Datum		result = (Datum) 0;
	bool		ok = false;
	MemoryContext mcx = CurrentMemoryContext;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_NULL();
	schema = PG_GETARG_JSONB_P(1);
	schema_text = JsonbToCString(NULL, &schema->root, VARSIZE(schema));
	rf = psprintf("{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"extract\", \"schema\": %s}}",
				  schema_text);
	grammar = OpusConstraintGrammar(DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(rf))),
									NULL, NULL, NULL);
	system = psprintf("Extract the data from the user's text as JSON that matches this JSON Schema:\n%s",
					  schema_text);
	run_constrained(fcinfo, system, PG_GETARG_TEXT_PP(0), grammar, 0, &res);
	out = OpusTextFromUtf8(res.data, res.len);
	if (res.finish == OPUS_PROTO_FINISH_LENGTH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("the extracted JSON was cut at max_tokens (%d tokens)", res.n_completion),
				 errdetail("The output was: %s", out),
				 errhint("Pass a larger max_tokens.")));
	PG_TRY();
	{
		result = DirectFunctionCall1(jsonb_in, CStringGetDatum(out));
		ok = true;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(mcx);
		FlushErrorState();
	}
	PG_END_TRY();
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("the extracted output is not valid JSON"),
				 errdetail("The output was: %s", out)));
	PG_RETURN_DATUM(result);
}
