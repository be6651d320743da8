/*
 * jobs.c - the C helpers of batch jobs (the jobs themselves are SQL and
 * PL/pgSQL, sql/install/30_jobs.sql): rendering a prompt template over a
 * row.
 *
 * A template is text with placeholders {{column}}: each is replaced by the
 * value of that column of the row, given as a jsonb object (to_jsonb(row)):
 * strings as they are, other values in their JSON text form, NULL as the
 * empty string.  Blanks around the name are ignored; the name is the
 * column's name exactly as stored (no quoting), so {{the "body"}} names
 * the column the "body".  A "{{" with no "}}" after it is literal text.
 * Values are only ever copied into the prompt, never interpreted, so
 * rendering cannot inject anything.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "opus_pg.h"

PG_FUNCTION_INFO_V1(opus_render);
PG_FUNCTION_INFO_V1(opus_template_columns);
PG_FUNCTION_INFO_V1(opus_job_check_not_in_block);

/*
 * Find the next placeholder in s[pos..len): sets *start (at "{{"), *end
 * (after "}}") and the trimmed name.  False if there is none.
 */
static bool
next_placeholder(const char *s, int len, int pos, int *start, int *end,
				 const char **name, int *name_len)
{
	int			i;

	for (i = pos; i + 1 < len; i++)
	{
		int			j;

		if (s[i] != '{' || s[i + 1] != '{')
			continue;
		for (j = i + 2; j + 1 < len; j++)
		{
			if (s[j] == '}' && s[j + 1] == '}')
			{
				int			a = i + 2;
				int			b = j;

				while (a < b && (s[a] == ' ' || s[a] == '\t'))
					a++;
				while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t'))
					b--;
				*start = i;
				*end = j + 2;
				*name = s + a;
				*name_len = b - a;
				return true;
			}
		}
		return false;			/* an unclosed "{{": the rest is literal */
	}
	return false;
}

/* The text of one jsonb value as it goes into a prompt. */
static void
append_value(StringInfo buf, JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			break;
		case jbvString:
			appendBinaryStringInfo(buf, v->val.string.val, v->val.string.len);
			break;
		case jbvNumeric:
			appendStringInfoString(buf, DatumGetCString(DirectFunctionCall1(numeric_out,
																			NumericGetDatum(v->val.numeric))));
			break;
		case jbvBool:
			appendStringInfoString(buf, v->val.boolean ? "true" : "false");
			break;
		case jbvBinary:
			(void) JsonbToCString(buf, v->val.binary.data, v->val.binary.len);
			break;
		default:
			elog(ERROR, "opus_render: unexpected jsonb value type %d", (int) v->type);
	}
}

/*
 * opus_render(template text, vars jsonb) RETURNS text: the template with
 * every {{name}} replaced by vars->name.  A name vars lacks is an error
 * (42703), so a typo does not silently produce an empty prompt.
 */
Datum
opus_render(PG_FUNCTION_ARGS)
{
	text	   *tt = PG_GETARG_TEXT_PP(0);
	Jsonb	   *vars = PG_GETARG_JSONB_P(1);
	const char *s = VARDATA_ANY(tt);
	int			len = VARSIZE_ANY_EXHDR(tt);
	int			pos = 0;
	int			start,
				end,
				name_len;
	const char *name;
	StringInfoData buf;

	if (!JB_ROOT_IS_OBJECT(vars))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("template variables must be a JSON object")));
	initStringInfo(&buf);
	while (next_placeholder(s, len, pos, &start, &end, &name, &name_len))
	{
		JsonbValue	v;

		appendBinaryStringInfo(&buf, s + pos, start - pos);
		if (!getKeyJsonValueFromContainer(&vars->root, name, name_len, &v))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("prompt template refers to \"%.*s\", which is not a column of the row",
							name_len, name),
					 errhint("Placeholders are written {{column name}}, with the name as it is stored (no quotes).")));
		append_value(&buf, &v);
		pos = end;
	}
	appendBinaryStringInfo(&buf, s + pos, len - pos);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(buf.data, buf.len));
}

/* opus_template_columns(template text) RETURNS text[]: the names used. */
Datum
opus_template_columns(PG_FUNCTION_ARGS)
{
	text	   *tt = PG_GETARG_TEXT_PP(0);
	const char *s = VARDATA_ANY(tt);
	int			len = VARSIZE_ANY_EXHDR(tt);
	int			pos = 0;
	int			start,
				end,
				name_len;
	const char *name;
	ArrayBuildState *astate = NULL;

	while (next_placeholder(s, len, pos, &start, &end, &name, &name_len))
	{
		astate = accumArrayResult(astate,
								  PointerGetDatum(cstring_to_text_with_len(name, name_len)),
								  false, TEXTOID, CurrentMemoryContext);
		pos = end;
	}
	if (astate == NULL)
		PG_RETURN_ARRAYTYPE_P(construct_empty_array(TEXTOID));
	PG_RETURN_DATUM(makeArrayResult(astate, CurrentMemoryContext));
}

/*
 * opus_job_check_not_in_block(): raise 25001 inside an explicit transaction
 * block (BEGIN ... CALL opus_job_run), where the run could not commit its
 * chunks.
 */
Datum
opus_job_check_not_in_block(PG_FUNCTION_ARGS)
{
	if (IsTransactionBlock())
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("opus_job_run cannot run inside a transaction block"),
				 errdetail("A run commits its results in chunks."),
				 errhint("CALL it on its own, outside BEGIN ... COMMIT.")));
	PG_RETURN_VOID();
}
