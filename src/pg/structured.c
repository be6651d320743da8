/*
 * structured.c - output constraints in the backend (docs/structured-output.md):
 * the request parameters response_format, grammar, regex and choices turned
 * into the one GBNF text the engine enforces, with every error raised here,
 * before a request is queued.
 *
 * The converters are the engine's plain-C ones (src/engine/text/
 * json_schema.c, regex_gbnf.c) and the grammar compiler (grammar.c), linked
 * into this library; they allocate with malloc, so every result is copied
 * into the current memory context and freed before anything can raise.
 *
 *   unsupported keyword, format, regex construct      0A000
 *   malformed or unsatisfiable constraint, two kinds  22023
 *   past a documented size limit                      54000
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

PG_FUNCTION_INFO_V1(opus_constraint_grammar);

/* Copy a malloc'd grammar into palloc'd memory (NULL stays NULL) and free it. */
static char *
take_grammar(char *g)
{
	char	   *r = NULL;

	if (g != NULL)
	{
		r = pstrdup(g);
		free(g);
	}
	return r;
}

static void
raise_status(enum opus_status st, const char *msg)
{
	ereport(ERROR,
			(errcode(OpusSqlstateFor((int) st)),
			 errmsg("%s", msg)));
}

/* Check that the engine's compiler takes g (a user's GBNF, or ours: what names it). */
static void
check_gbnf(const char *g, size_t len, const char *what)
{
	struct opus_grammar_error gerr;
	opus_grammar *c;
	enum opus_status st;
	char		msg[OPUS_ERROR_MSG_LEN + 32];

	memset(&gerr, 0, sizeof(gerr));
	c = opus_grammar_compile(g, len, &gerr);
	if (c != NULL)
	{
		opus_grammar_free(c);
		return;
	}
	st = opus_grammar_status(gerr.code);
	/* the compiler's messages begin with "grammar" already */
	if (what != NULL)
		snprintf(msg, sizeof(msg), "%s: %s", what, gerr.msg);
	else
		snprintf(msg, sizeof(msg), "%s", gerr.msg);
	raise_status(st, msg);
}

/*
 * The GBNF text of a request's constraint, or NULL when there is none
 * (every argument NULL, or response_format {"type":"text"}).  At most one
 * of the four may be given (22023).  Raises the errors listed above.
 */
char *
OpusConstraintGrammar(Jsonb *response_format, text *grammar, text *regex, ArrayType *choices)
{
	struct opus_error err;
	enum opus_status st;
	char	   *out = NULL;
	int			kinds = (response_format != NULL) + (grammar != NULL) + (regex != NULL) + (choices != NULL);

	memset(&err, 0, sizeof(err));
	if (kinds > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at most one of response_format, grammar, regex and choices may be given")));
	if (response_format != NULL)
	{
		char	   *s = JsonbToCString(NULL, &response_format->root, VARSIZE(response_format));

		st = opus_response_format_to_gbnf(s, strlen(s), &out, &err);
		pfree(s);
		if (st != OPUS_OK)
			raise_status(st, err.msg);
	}
	else if (grammar != NULL)
	{
		size_t		len = VARSIZE_ANY_EXHDR(grammar);

		check_gbnf(VARDATA_ANY(grammar), len, NULL);
		return text_to_cstring(grammar);
	}
	else if (regex != NULL)
	{
		st = opus_regex_to_gbnf(VARDATA_ANY(regex), VARSIZE_ANY_EXHDR(regex), &out, &err);
		if (st != OPUS_OK)
			raise_status(st, err.msg);
	}
	else if (choices != NULL)
	{
		Datum	   *elems;
		bool	   *nulls;
		int			n,
					i;
		const char **s;
		size_t	   *lens;

		if (ARR_NDIM(choices) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("choices must be a one-dimensional array")));
		deconstruct_array(choices, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
		s = palloc0(sizeof(char *) * (n + 1));
		lens = palloc0(sizeof(size_t) * (n + 1));
		for (i = 0; i < n; i++)
		{
			if (nulls[i])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("choices must not contain nulls")));
			s[i] = VARDATA_ANY(DatumGetPointer(elems[i]));
			lens[i] = VARSIZE_ANY_EXHDR(DatumGetPointer(elems[i]));
		}
		st = opus_choices_to_gbnf(s, lens, (size_t) n, &out, &err);
		if (st != OPUS_OK)
			raise_status(st, err.msg);
	}
	if (out != NULL)
	{
		/* our grammar, checked by the compiler the engine will use */
		char	   *g = take_grammar(out);

		check_gbnf(g, strlen(g), "constraint");
		return g;
	}
	return NULL;
}

/*
 * opus_constraint_grammar(response_format jsonb, grammar text, regex text,
 * choices text[]) returns text: the GBNF grammar a request with these
 * arguments is held to, NULL when unconstrained.  Not strict: NULL
 * arguments are the ones not given.
 */
Datum
opus_constraint_grammar(PG_FUNCTION_ARGS)
{
	char	   *g = OpusConstraintGrammar(PG_ARGISNULL(0) ? NULL : PG_GETARG_JSONB_P(0),
										  PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1),
										  PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2),
										  PG_ARGISNULL(3) ? NULL : PG_GETARG_ARRAYTYPE_P(3));

	if (g == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(g));
}
