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
 *
 * It also holds the switch to a job's owner (opus_job_enter_owner): every
 * transaction of a run evaluates the owner's SQL (source query, prompt
 * expression, the target's triggers) as the owner inside a
 * security-restricted operation, the way PostgreSQL runs a materialized
 * view's query or an index expression for maintenance: SET ROLE and SET
 * SESSION AUTHORIZATION are refused there (so the owner's code cannot get
 * back to the privileges of whoever runs the job, e.g. a superuser or
 * pg_cron), so are temporary objects, cursors WITH HOLD and the like, and
 * any setting the owner's code changes is undone at the end of the
 * transaction.
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/guc.h"
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
PG_FUNCTION_INFO_V1(opus_job_enter_owner);
PG_FUNCTION_INFO_V1(opus_job_execute_as);

/*
 * The state of the switch to a job owner: whom and what to switch back to at
 * the commit of the transaction that switched (its abort undoes the switch
 * by itself).
 */
static bool job_switched = false;
static Oid	job_saved_userid = InvalidOid;
static int	job_saved_sec_context = 0;
static int	job_guc_nest_level = 0;
static bool job_callbacks_registered = false;

static void check_owner_member(Oid userid, Oid owner);

/*
 * Run as owner inside a security-restricted operation (see the top of the
 * file), on top of the caller's security context sec_context.
 */
static inline void
become_owner(Oid owner, int sec_context)
{
	SetUserIdAndSecContext(owner, sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
}

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

/*
 * At the commit of a transaction that switched to a job owner: undo the
 * settings the owner's code changed (the nest level opened at the switch)
 * and switch back, before the next transaction starts.  This runs after
 * the deferred triggers (they still fire as the owner).  An abort needs
 * nothing: AbortTransaction restores the user, the security context and
 * the settings itself.
 */
static void
job_xact_callback(XactEvent event, void *arg)
{
	if (!job_switched)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
			AtEOXact_GUC(false, job_guc_nest_level);
			SetUserIdAndSecContext(job_saved_userid, job_saved_sec_context);
			job_switched = false;
			break;
		case XACT_EVENT_PRE_PREPARE:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot prepare a transaction of an opus job run")));
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			job_switched = false;
			break;
		default:
			break;
	}
}

/*
 * opus_job_enter_owner(owner regrole): for the rest of this transaction, run
 * as owner inside a security-restricted operation (see the top of the
 * file).  The caller must be a member of owner (a superuser is a member of
 * every role), as for SET ROLE; a second call in the same transaction must
 * name the role already switched to.
 */
Datum
opus_job_enter_owner(PG_FUNCTION_ARGS)
{
	Oid			owner = PG_GETARG_OID(0);
	Oid			userid;
	int			sec_context;

	GetUserIdAndSecContext(&userid, &sec_context);
	if (job_switched)
	{
		if (userid != owner)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("this transaction already runs as another job owner")));
		PG_RETURN_VOID();
	}
	check_owner_member(userid, owner);

	/*
	 * At the top level of the transaction only: a subtransaction's commit
	 * would fold the nest level opened here into its parent's.
	 */
	if (IsSubTransaction())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("opus_job_enter_owner must be called at the top level of a transaction")));
	if (!job_callbacks_registered)
	{
		RegisterXactCallback(job_xact_callback, NULL);
		job_callbacks_registered = true;
	}
	job_saved_userid = userid;
	job_saved_sec_context = sec_context;
	job_guc_nest_level = NewGUCNestLevel();
	become_owner(owner, sec_context);
	job_switched = true;
	PG_RETURN_VOID();
}

/* Refuse to act as owner unless the current user is a member of it. */
static void
check_owner_member(Oid userid, Oid owner)
{
	if (!OidIsValid(owner) || !is_member_of_role(userid, owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to act as role %u", owner),
				 errdetail("Only members of the job owner's role may run, change or drop the job.")));
}

/*
 * opus_job_execute_as(owner regrole, sql text): run one SQL statement as
 * owner inside a security-restricted operation and switch back at once
 * (an error switches back through the (sub)transaction abort).  Used where
 * a member or a superuser changes or drops another role's job: checking a
 * new prompt expression (planning may run the owner's immutable functions)
 * and dropping the target table (only what the owner may drop).
 */
Datum
opus_job_execute_as(PG_FUNCTION_ARGS)
{
	Oid			owner = PG_GETARG_OID(0);
	char	   *sql = text_to_cstring(PG_GETARG_TEXT_PP(1));
	Oid			userid;
	int			sec_context;
	int			nest_level;
	int			ret;

	GetUserIdAndSecContext(&userid, &sec_context);
	check_owner_member(userid, owner);
	nest_level = NewGUCNestLevel();
	become_owner(owner, sec_context);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ret = SPI_execute(sql, false, 0);
	if (ret < 0)
		elog(ERROR, "SPI_execute failed: %s", SPI_result_code_string(ret));
	SPI_finish();
	AtEOXact_GUC(false, nest_level);
	SetUserIdAndSecContext(userid, sec_context);
	PG_RETURN_VOID();
}
