/*
 * params.h - the request parameters: one table, compiled by both sides.
 *
 * Each row defines one parameter of a request, once: its name (the SQL
 * argument's name and the C struct fields' name), its kind (which gives the
 * SQL and C types), its bounds with open or closed ends, its default, what a
 * NULL argument means, and the words the documentation adds.  Everything else
 * comes from here:
 *
 *   - the SQL functions' argument checks and their error messages
 *     (src/pg/args.c; "temperature must be between 0 and 100"),
 *   - the wire format's check of a SUBMIT frame (opus_proto_check_params),
 *   - the engine's guard at its public API (opus_sched_submit for the
 *     request fields, opus_sampling_validate for the sampler's),
 *   - the README's option table (`make params-readme`; test/unit/test_params.c
 *     checks it, and the SQL DEFAULTs in sql/install/, against this table).
 *
 * Adding a parameter: a row in the right list below, a field of that name in
 * struct opus_proto_params (and opus_gen_params or opus_sampling_params), its
 * place in the SUBMIT codec, its SQL argument, and its use.
 *
 * Plain C (no PostgreSQL, no engine headers), like protocol.h.
 *
 * Columns: X(name, kind, lo, lo_end, hi, hi_end, dflt, null_means, zero, doc)
 *   kind       OPUS_PARAM_INT    SQL integer,          C int32_t
 *              OPUS_PARAM_FLOAT  SQL double precision, C float
 *              OPUS_PARAM_SEED   SQL bigint,           C uint64_t (any value)
 *              OPUS_PARAM_TEXTS  SQL text[],  at most OPUS_PARAM_MAX_STOP
 *                                strings of lo .. hi bytes each
 *              OPUS_PARAM_NAME   SQL text, a name (no bounds; checked where
 *                                it is looked up)
 *              OPUS_PARAM_BOOL   SQL boolean
 *              OPUS_PARAM_JSON   SQL jsonb (checked where it is used; no
 *                                bounds)
 *              OPUS_PARAM_TEXT   SQL text (checked where it is used; no
 *                                bounds)
 *              OPUS_PARAM_CHOICES SQL text[] (checked where it is used; not
 *                                the stop strings' count and length bounds)
 *   lo, hi     the bounds; lo_end / hi_end: OPUS_PARAM_CLOSED (the bound is
 *              allowed), OPUS_PARAM_OPEN (it is not), OPUS_PARAM_NONE
 *              (no bound on that side)
 *   dflt       the value when none is given: the SQL DEFAULT, or, where the
 *              SQL DEFAULT is NULL (null_means != NULL), the C-level default
 *   null_means NULL: the SQL DEFAULT is dflt; else the SQL DEFAULT is NULL and
 *              this says what NULL stands for ("" = nothing more to say)
 *   zero       what the value 0 means (or NULL)
 *   doc        more words for the README's range column (or NULL)
 */
#ifndef OPUS_PARAMS_H
#define OPUS_PARAMS_H

#include <stdbool.h>
#include <stddef.h>

/* Bounds referred to by name elsewhere (buffer sizes, other settings). */
#define OPUS_PARAM_MAX_TOKENS	1048576 /* max_tokens upper bound (2^20) */
#define OPUS_PARAM_DEFAULT_MAX_TOKENS 128	/* opus.default_max_tokens' default */
#define OPUS_PARAM_MAX_STOP		16	/* stop strings per request */
#define OPUS_PARAM_MAX_STOP_LEN 256 /* bytes per stop string */
#define OPUS_PARAM_MAX_PRIORITY 1000	/* priority classes 0 (first) .. this */

/* Generation arguments the scheduler checks (struct opus_gen_params). */
#define OPUS_PARAMS_REQUEST(X) \
	X(max_tokens, OPUS_PARAM_INT, 1, OPUS_PARAM_CLOSED, OPUS_PARAM_MAX_TOKENS, OPUS_PARAM_CLOSED, \
	  OPUS_PARAM_DEFAULT_MAX_TOKENS, "`opus.default_max_tokens`", NULL, NULL)

/* Sampling arguments the sampler checks (struct opus_sampling_params). */
#define OPUS_PARAMS_SAMPLING(X) \
	X(temperature, OPUS_PARAM_FLOAT, 0, OPUS_PARAM_CLOSED, 100, OPUS_PARAM_CLOSED, \
	  1.0, NULL, "greedy", NULL) \
	X(top_p, OPUS_PARAM_FLOAT, 0, OPUS_PARAM_OPEN, 1, OPUS_PARAM_CLOSED, \
	  1.0, NULL, NULL, NULL) \
	X(top_k, OPUS_PARAM_INT, 0, OPUS_PARAM_CLOSED, 0, OPUS_PARAM_NONE, \
	  0, NULL, "off", NULL) \
	X(min_p, OPUS_PARAM_FLOAT, 0, OPUS_PARAM_CLOSED, 1, OPUS_PARAM_CLOSED, \
	  0.0, NULL, NULL, NULL) \
	X(presence_penalty, OPUS_PARAM_FLOAT, -2, OPUS_PARAM_CLOSED, 2, OPUS_PARAM_CLOSED, \
	  0.0, NULL, NULL, NULL) \
	X(frequency_penalty, OPUS_PARAM_FLOAT, -2, OPUS_PARAM_CLOSED, 2, OPUS_PARAM_CLOSED, \
	  0.0, NULL, NULL, NULL) \
	X(repetition_penalty, OPUS_PARAM_FLOAT, 0, OPUS_PARAM_OPEN, 10, OPUS_PARAM_CLOSED, \
	  1.0, NULL, NULL, NULL) \
	X(seed, OPUS_PARAM_SEED, 0, OPUS_PARAM_NONE, 0, OPUS_PARAM_NONE, \
	  0, "random", NULL, "same seed, same output")

/* Stop strings (the scheduler checks them, one by one). */
#define OPUS_PARAMS_TEXTS(X) \
	X(stop, OPUS_PARAM_TEXTS, 1, OPUS_PARAM_CLOSED, OPUS_PARAM_MAX_STOP_LEN, OPUS_PARAM_CLOSED, \
	  0, "", NULL, "generation ends before the first one")

/*
 * Which model serves the request (docs/models.md): not part of the SUBMIT
 * frame; the backend resolves the name (src/pg/models.c) and the supervisor
 * routes the request.  The last arguments of the SQL signatures.
 */
#define OPUS_PARAMS_ROUTING(X) \
	X(model, OPUS_PARAM_NAME, 0, OPUS_PARAM_NONE, 0, OPUS_PARAM_NONE, \
	  0, "the default model (`opus.model`)", NULL, "a model declared in `opus.models`, or `default`") \
	X(fallback, OPUS_PARAM_BOOL, 0, OPUS_PARAM_NONE, 0, OPUS_PARAM_NONE, \
	  0, "only batch-class sessions", NULL, "true: may go to the model's fallback while it is overloaded")

/*
 * Chat only (every function that takes messages; test_params checks): the
 * tool definitions handed to the model's chat template as `tools`
 * (docs/tools.md).  Carried in the SUBMIT frame as a chat item of role
 * OPUS_ROLE_TOOLS.
 */
#define OPUS_PARAM_MAX_TOOLS_LEN (1024 * 1024)	/* bytes of tools JSON */
#define OPUS_PARAMS_CHAT(X) \
	X(tools, OPUS_PARAM_JSON, 0, OPUS_PARAM_NONE, 0, OPUS_PARAM_NONE, \
	  0, "no tools", NULL, "a JSON array of OpenAI-style tool definitions (`{\"type\": \"function\", \"function\": {\"name\": ...}}`); chat functions only")

/*
 * The output constraint (docs/structured-output.md): at most one of the
 * four, turned into one GBNF grammar by the backend (src/pg/structured.c,
 * OpusConstraintGrammar) and carried in the SUBMIT frame's grammar block.
 */
#define OPUS_PARAMS_CONSTRAINT(X) \
	X(response_format, OPUS_PARAM_JSON, 0, OPUS_PARAM_NONE, 0, OPUS_PARAM_NONE, \
	  0, "no constraint", NULL, "`{\"type\": \"json_object\"}` or `{\"type\": \"json_schema\", \"json_schema\": {\"schema\": ...}}`: the output is JSON (valid under the schema); at most one of the four constraints") \
	X(grammar, OPUS_PARAM_TEXT, 0, OPUS_PARAM_NONE, 0, OPUS_PARAM_NONE, \
	  0, "no constraint", NULL, "a GBNF grammar (llama.cpp dialect, start rule `root`) the output matches") \
	X(regex, OPUS_PARAM_TEXT, 0, OPUS_PARAM_NONE, 0, OPUS_PARAM_NONE, \
	  0, "no constraint", NULL, "a regular expression the whole output matches") \
	X(choices, OPUS_PARAM_CHOICES, 0, OPUS_PARAM_NONE, 0, OPUS_PARAM_NONE, \
	  0, "no constraint", NULL, "the output is exactly one of these strings (up to 4096)")

/* Request fields that are not SQL arguments: they come from the session. */
#define OPUS_PARAMS_SESSION(X) \
	X(priority, OPUS_PARAM_INT, 0, OPUS_PARAM_CLOSED, OPUS_PARAM_MAX_PRIORITY, OPUS_PARAM_CLOSED, \
	  0, NULL, "first", "the session's `opus.priority`")

/*
 * Session flags carried in the SUBMIT frame (not SQL arguments, not checked
 * against bounds: 0 or 1).  allow_special_tokens: chat message contents may
 * give special tokens (docs/overload.md: chat content is data); from the
 * superuser setting opus.allow_special_tokens (GRANT SET ON PARAMETER).
 */
#define OPUS_PARAMS_FLAGS(X) \
	X(allow_special_tokens, OPUS_PARAM_BOOL, 0, OPUS_PARAM_NONE, 0, OPUS_PARAM_NONE, \
	  0, NULL, NULL, "the session's `opus.allow_special_tokens` (superuser; unsafe)")

/* All of them, the SQL arguments in the order of the SQL signatures. */
#define OPUS_PARAMS(X) \
	OPUS_PARAMS_REQUEST(X) OPUS_PARAMS_SAMPLING(X) OPUS_PARAMS_TEXTS(X) OPUS_PARAMS_ROUTING(X) \
	OPUS_PARAMS_CHAT(X) OPUS_PARAMS_CONSTRAINT(X) OPUS_PARAMS_SESSION(X) OPUS_PARAMS_FLAGS(X)

enum opus_param_kind
{
	OPUS_PARAM_INT,
	OPUS_PARAM_FLOAT,
	OPUS_PARAM_SEED,
	OPUS_PARAM_TEXTS,
	OPUS_PARAM_NAME,
	OPUS_PARAM_BOOL,
	OPUS_PARAM_JSON,
	OPUS_PARAM_TEXT,
	OPUS_PARAM_CHOICES
};

enum opus_param_end
{
	OPUS_PARAM_NONE,			/* unbounded on this side */
	OPUS_PARAM_CLOSED,			/* the bound itself is allowed */
	OPUS_PARAM_OPEN				/* the bound itself is not */
};

/* OPUS_P_max_tokens, OPUS_P_temperature, ...: indexes into opus_params[]. */
enum opus_param_id
{
#define OPUS_PARAM_ID(name, ...) OPUS_P_##name,
	OPUS_PARAMS(OPUS_PARAM_ID)
#undef OPUS_PARAM_ID
	OPUS_P__COUNT
};

struct opus_param
{
	const char *name;
	enum opus_param_kind kind;
	double		lo;
	enum opus_param_end lo_end;
	double		hi;
	enum opus_param_end hi_end;
	double		dflt;
	const char *null_means;		/* NULL: the SQL DEFAULT is dflt */
	const char *zero;
	const char *doc;
	bool		sql;			/* an argument of the SQL functions */
};

extern const struct opus_param opus_params[OPUS_P__COUNT];

/* The C-level default of parameter `name`. */
#define OPUS_PARAM_DEFAULT(name) (opus_params[OPUS_P_##name].dflt)

/* Is v inside the parameter's bounds?  NaN and infinities never are. */
bool		opus_param_ok(enum opus_param_id id, double v);

/*
 * The allowed range as the error messages say it, after "<name> must be ":
 * "between 0 and 100", "greater than 0 and at most 1", "0 (off) or
 * positive".  For OPUS_PARAM_TEXTS, the length of one string.  Written to
 * buf (OPUS_PARAM_RANGE_LEN bytes are enough); returns buf.
 */
#define OPUS_PARAM_RANGE_LEN 96
const char *opus_param_range(enum opus_param_id id, char *buf, size_t size);

/* A bound or default as the messages and the README print it (%g, but
 * whole numbers in full: 1048576, not 1.04858e+06). */
void		opus_param_format(char *buf, size_t size, double v);

/*
 * Checking a struct whose fields have the parameters' names, by X-macro:
 *
 *     enum opus_param_id bad = OPUS_P__COUNT;
 *     double      bad_value = 0;
 *
 *     OPUS_PARAMS_SAMPLING(OPUS_PARAM_CHECK_FIELD)
 *
 * with `p` the struct pointer: leaves in bad (and bad_value) the first
 * field out of range, OPUS_P__COUNT if none.
 */
#define OPUS_PARAM_CHECK_FIELD(name, ...) \
	if (bad == OPUS_P__COUNT && !opus_param_ok(OPUS_P_##name, (double) p->name)) \
	{ \
		bad = OPUS_P_##name; \
		bad_value = (double) p->name; \
	}

#endif							/* OPUS_PARAMS_H */
