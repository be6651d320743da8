/*
 * test_params.c - the request parameter table (src/params.h): its range
 * checks and wording, and that what is written elsewhere agrees with it:
 * the README's option table (between the opus-params markers), the SQL
 * DEFAULTs of the generation functions in sql/install/NN_*.sql, and the
 * options of batch jobs (sql/install/30_jobs.sql).
 *
 *   build/unit/test_params            the checks (run from the source root)
 *   build/unit/test_params --readme   print the README option table
 *                                     (`make params-readme` splices it in)
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"
#include "protocol.h"
#include "unit.h"

#define README_BEGIN "<!-- opus-params:begin -->\n"
#define README_END "<!-- opus-params:end -->"

static const char *
sql_type(enum opus_param_kind k)
{
	switch (k)
	{
		case OPUS_PARAM_INT:
			return "integer";
		case OPUS_PARAM_FLOAT:
			return "double precision";
		case OPUS_PARAM_SEED:
			return "bigint";
		case OPUS_PARAM_TEXTS:
			return "text[]";
		case OPUS_PARAM_NAME:
			return "text";
		case OPUS_PARAM_BOOL:
			return "boolean";
		case OPUS_PARAM_JSON:
			return "jsonb";
		case OPUS_PARAM_TEXT:
			return "text";
		case OPUS_PARAM_CHOICES:
			return "text[]";
	}
	return "?";
}

static const char *
readme_type(enum opus_param_kind k)
{
	return k == OPUS_PARAM_FLOAT ? "float8" : sql_type(k);
}

/* Kinds whose README range column is their doc (checked where used). */
static bool
no_bounds(enum opus_param_kind k)
{
	return k == OPUS_PARAM_NAME || k == OPUS_PARAM_BOOL || k == OPUS_PARAM_JSON ||
		k == OPUS_PARAM_TEXT || k == OPUS_PARAM_CHOICES;
}

/* The README's option table, from the parameter table. */
static void
readme_table(char *out, size_t size)
{
	size_t		n = 0;

#define APPEND(...) (n += (size_t) snprintf(out + n, n < size ? size - n : 0, __VA_ARGS__))
	APPEND("| option | type | default | range |\n|---|---|---|---|\n");
	for (int i = 0; i < OPUS_P__COUNT; i++)
	{
		const struct opus_param *p = &opus_params[i];
		char		lo[32];
		char		hi[32];
		char		dflt[32];

		if (!p->sql)
			continue;
		opus_param_format(lo, sizeof(lo), p->lo);
		opus_param_format(hi, sizeof(hi), p->hi);
		APPEND("| `%s` | %s | ", p->name, readme_type(p->kind));
		if (p->null_means)
			APPEND(p->null_means[0] ? "NULL = %s" : "NULL%s", p->null_means);
		else
		{
			if (p->kind == OPUS_PARAM_FLOAT)
				snprintf(dflt, sizeof(dflt), "%.1f", p->dflt);
			else
				opus_param_format(dflt, sizeof(dflt), p->dflt);
			APPEND("%s", dflt);
			if (p->zero && p->dflt == 0)
				APPEND(" (%s)", p->zero);
		}
		APPEND(" | ");
		if (no_bounds(p->kind))
			APPEND("%s", p->doc ? p->doc : "any");
		else if (p->kind == OPUS_PARAM_TEXTS)
			APPEND("up to %d strings of %s .. %s bytes", OPUS_PARAM_MAX_STOP, lo, hi);
		else if (p->lo_end == OPUS_PARAM_CLOSED && p->hi_end == OPUS_PARAM_CLOSED)
			APPEND("%s .. %s", lo, hi);
		else if (p->lo_end != OPUS_PARAM_NONE && p->hi_end != OPUS_PARAM_NONE)
			APPEND("%s%s, %s%s", p->lo_end == OPUS_PARAM_OPEN ? "(" : "[", lo, hi,
				   p->hi_end == OPUS_PARAM_OPEN ? ")" : "]");
		else if (p->lo_end != OPUS_PARAM_NONE)
			APPEND("%s %s", p->lo_end == OPUS_PARAM_OPEN ? ">" : ">=", lo);
		else if (p->hi_end != OPUS_PARAM_NONE)
			APPEND("%s %s", p->hi_end == OPUS_PARAM_OPEN ? "<" : "<=", hi);
		else
			APPEND("any");
		if (p->zero && p->dflt != 0)
			APPEND("; 0 = %s", p->zero);
		if (p->doc && !no_bounds(p->kind))
			APPEND("; %s", p->doc);
		APPEND(" |\n");
	}
#undef APPEND
}

static char *
read_file(const char *path)
{
	FILE	   *f = fopen(path, "rb");
	char	   *buf;
	long		len;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t) len + 1);
	if (buf && fread(buf, 1, (size_t) len, f) != (size_t) len)
	{
		free(buf);
		buf = NULL;
	}
	if (buf)
		buf[len] = '\0';
	fclose(f);
	return buf;
}

static void
check_wording(void)
{
	/* the messages expected/errors.out and security_limits.out show */
	static const struct
	{
		enum opus_param_id id;
		const char *range;
	}			want[] = {
		{OPUS_P_max_tokens, "between 1 and 1048576"},
		{OPUS_P_temperature, "between 0 and 100"},
		{OPUS_P_top_p, "greater than 0 and at most 1"},
		{OPUS_P_top_k, "0 (off) or positive"},
		{OPUS_P_min_p, "between 0 and 1"},
		{OPUS_P_presence_penalty, "between -2 and 2"},
		{OPUS_P_frequency_penalty, "between -2 and 2"},
		{OPUS_P_repetition_penalty, "greater than 0 and at most 10"},
		{OPUS_P_stop, "between 1 and 256"},
		{OPUS_P_priority, "between 0 and 1000"},
	};
	char		buf[OPUS_PARAM_RANGE_LEN];

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
	{
		opus_param_range(want[i].id, buf, sizeof(buf));
		CHECK(strcmp(buf, want[i].range) == 0, "%s: range \"%s\", want \"%s\"",
			  opus_params[want[i].id].name, buf, want[i].range);
	}
	CHECK(strcmp(opus_params[OPUS_P_max_tokens].name, "max_tokens") == 0 &&
		  strcmp(opus_params[OPUS_P_priority].name, "priority") == 0, "names");
	opus_param_format(buf, sizeof(buf), 0.25);
	CHECK(strcmp(buf, "0.25") == 0, "format 0.25: %s", buf);
	opus_param_format(buf, sizeof(buf), -2);
	CHECK(strcmp(buf, "-2") == 0, "format -2: %s", buf);
}

static void
check_bounds(void)
{
	for (int i = 0; i < OPUS_P__COUNT; i++)
	{
		const struct opus_param *p = &opus_params[i];
		bool		bounded = p->lo_end != OPUS_PARAM_NONE || p->hi_end != OPUS_PARAM_NONE;
		double		step = p->kind == OPUS_PARAM_FLOAT ? 1e-6 : 1;

		CHECK(opus_param_ok(i, p->dflt) || p->kind == OPUS_PARAM_TEXTS,
			  "%s: default %g out of range", p->name, p->dflt);
		if (p->lo_end != OPUS_PARAM_NONE)
		{
			CHECK(opus_param_ok(i, p->lo) == (p->lo_end == OPUS_PARAM_CLOSED),
				  "%s: lower bound", p->name);
			CHECK(!opus_param_ok(i, p->lo - step), "%s: below the lower bound", p->name);
			CHECK(opus_param_ok(i, p->lo + step), "%s: above the lower bound", p->name);
		}
		if (p->hi_end != OPUS_PARAM_NONE)
		{
			CHECK(opus_param_ok(i, p->hi) == (p->hi_end == OPUS_PARAM_CLOSED),
				  "%s: upper bound", p->name);
			CHECK(!opus_param_ok(i, p->hi + step), "%s: above the upper bound", p->name);
			CHECK(opus_param_ok(i, p->hi - step), "%s: below the upper bound", p->name);
		}
		CHECK(opus_param_ok(i, NAN) == !bounded, "%s: NaN", p->name);
		CHECK(opus_param_ok(i, INFINITY) == !bounded, "%s: inf", p->name);
		CHECK(p->kind != OPUS_PARAM_INT ||
			  (p->lo >= -2147483648.0 && (p->hi_end == OPUS_PARAM_NONE || p->hi <= 2147483647.0)),
			  "%s: int32 bounds", p->name);
	}
	CHECK(!opus_param_ok(OPUS_P__COUNT, 0), "id out of range");
	/* the wire check is the table */
	{
		struct opus_proto_params pp = {.max_tokens = 1, .temperature = 1, .top_p = 1,
		.repetition_penalty = 1};

		CHECK(opus_proto_check_params(&pp) == NULL, "proto: valid params rejected");
		pp.top_p = 0;
		CHECK(opus_proto_check_params(&pp) && strcmp(opus_proto_check_params(&pp), "top_p") == 0,
			  "proto: top_p 0 accepted");
		pp.top_p = 1;
		pp.priority = OPUS_PARAM_MAX_PRIORITY + 1;
		CHECK(opus_proto_check_params(&pp) && strcmp(opus_proto_check_params(&pp), "priority") == 0,
			  "proto: priority over the bound accepted");
	}
}

static void
check_readme(const char *root)
{
	char		path[4096];
	char		want[8192];
	char	   *readme;
	char	   *b;
	char	   *e;

	snprintf(path, sizeof(path), "%s/README.md", root);
	readme = read_file(path);
	CHECK(readme != NULL, "cannot read %s", path);
	if (!readme)
		return;
	readme_table(want, sizeof(want));
	b = strstr(readme, README_BEGIN);
	e = b ? strstr(b, README_END) : NULL;
	CHECK(b && e, "README.md has no %s ... %s block", "<!-- opus-params:begin -->", README_END);
	if (b && e)
	{
		b += strlen(README_BEGIN);
		*e = '\0';
		CHECK(strcmp(b, want) == 0,
			  "README.md's option table differs from src/params.h (run `make params-readme`):\n"
			  "--- README.md\n%s--- src/params.h\n%s", b, want);
	}
	free(readme);
}

/*
 * Every "NAME TYPE DEFAULT VALUE" argument line in sql/install/NN_*.sql whose
 * NAME is an SQL parameter: TYPE from its kind, VALUE NULL when null_means
 * says what NULL is, else the table's default.
 */
static void
check_sql(const char *root)
{
	char		dir[4096];
	DIR		   *d;
	struct dirent *de;
	int			seen[OPUS_P__COUNT] = {0};
	int			want[OPUS_P__COUNT];

	/*
	 * Not every generation function has these: OPUS_PARAMS_CHAT the six
	 * chat ones (opus_chat, opus_chat_completion, their two streaming
	 * forms, opus_submit_chat, opus_chat_many; each function taking
	 * messages is checked below); OPUS_PARAMS_CONSTRAINT the four
	 * synchronous ones, the four streaming ones, the two asynchronous ones
	 * (opus_submit, opus_submit_chat) and the three set-based ones
	 * (opus_generate_many, opus_chat_many, opus_generate_keyed), and
	 * opus_constraint_grammar itself: 14.
	 */
	for (int i = 0; i < OPUS_P__COUNT; i++)
		want[i] = 8;
#define WANT_CHAT(name, ...) want[OPUS_P_##name] = 6;
#define WANT_CONSTRAINT(name, ...) want[OPUS_P_##name] = 14;
	OPUS_PARAMS_CHAT(WANT_CHAT)
	OPUS_PARAMS_CONSTRAINT(WANT_CONSTRAINT)
#undef WANT_CHAT
#undef WANT_CONSTRAINT

	snprintf(dir, sizeof(dir), "%s/sql/install", root);
	d = opendir(dir);
	CHECK(d != NULL, "cannot open %s", dir);
	if (!d)
		return;
	while ((de = readdir(d)) != NULL)
	{
		char		path[8192];
		char	   *text;
		char	   *line;
		char	   *save = NULL;
		size_t		nl = strlen(de->d_name);
		int			lineno = 0;
		char		fn[128] = "";	/* the CREATE FUNCTION being read */
		int			fn_line = 0;	/* its argument line (1 = the first) */
		bool		chat_fn = false;	/* its first argument is messages */
		bool		has[OPUS_P__COUNT] = {0};

		if (nl < 5 || strcmp(de->d_name + nl - 4, ".sql") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		text = read_file(path);
		CHECK(text != NULL, "cannot read %s", path);
		if (!text)
			continue;
		for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		{
			char	   *s = line;
			char	   *def;

			lineno++;
			while (*s == ' ' || *s == '\t')
				s++;

			/*
			 * Every function whose first argument is chat messages has
			 * every OPUS_PARAMS_CHAT argument.
			 */
			if (strncmp(s, "CREATE FUNCTION ", 16) == 0)
			{
				snprintf(fn, sizeof(fn), "%.*s", (int) strcspn(s + 16, "("), s + 16);
				fn_line = 0;
				chat_fn = false;
				memset(has, 0, sizeof(has));
				continue;
			}
			if (fn[0] && strncmp(s, "RETURNS", 7) == 0)
			{
#define CHECK_CHAT_ARG(name, ...) \
				CHECK(!chat_fn || has[OPUS_P_##name], "%s: %s takes chat messages but has no %s argument", \
					  de->d_name, fn, #name);
				OPUS_PARAMS_CHAT(CHECK_CHAT_ARG)
#undef CHECK_CHAT_ARG
				fn[0] = '\0';
			}
			if (fn[0] && ++fn_line == 1)
				chat_fn = strncmp(s, "messages jsonb", 14) == 0 ||
					strncmp(s, "conversations jsonb[]", 21) == 0;
			if (fn[0])
				for (int i = 0; i < OPUS_P__COUNT; i++)
				{
					size_t		len = strlen(opus_params[i].name);

					if (opus_params[i].sql && strncmp(s, opus_params[i].name, len) == 0 && s[len] == ' ')
						has[i] = true;
				}
			def = strstr(s, " DEFAULT ");
			if (!def)
				continue;
			for (int i = 0; i < OPUS_P__COUNT; i++)
			{
				const struct opus_param *p = &opus_params[i];
				size_t		len = strlen(p->name);
				const char *type;
				char		value[64];
				size_t		vn;

				if (!p->sql || strncmp(s, p->name, len) != 0 || s[len] != ' ')
					continue;
				type = s + len + 1;
				CHECK((size_t) (def - type) == strlen(sql_type(p->kind)) &&
					  strncmp(type, sql_type(p->kind), strlen(sql_type(p->kind))) == 0,
					  "%s: %s is not %s: %s", de->d_name, p->name, sql_type(p->kind), line);
				def += strlen(" DEFAULT ");
				vn = strcspn(def, ",) ");
				snprintf(value, sizeof(value), "%.*s", (int) vn, def);
				if (p->null_means)
					CHECK(strcmp(value, "NULL") == 0, "%s: %s DEFAULT %s, want NULL",
						  de->d_name, p->name, value);
				else
				{
					char	   *end;
					double		v = strtod(value, &end);

					CHECK(*end == '\0' && v == p->dflt, "%s: %s DEFAULT %s, want %g",
						  de->d_name, p->name, value, p->dflt);
				}
				seen[i]++;
			}
		}
		free(text);
	}
	closedir(d);
	for (int i = 0; i < OPUS_P__COUNT; i++)
	{
		if (opus_params[i].sql)
			CHECK(seen[i] >= want[i], "%s: %d SQL DEFAULTs found, want %d",
				  opus_params[i].name, seen[i], want[i]);
	}
}

/*
 * Jobs' options (sql/install/30_jobs.sql) are the generation arguments by
 * name: every row of the request, sampling, stop, routing and constraint
 * groups is a key opus_job_check_options accepts and an argument
 * opus_job_submit passes to both opus_submit_chat and opus_submit.
 */
static void
check_jobs(const char *root)
{
	char		path[4096];
	char	   *text;
	char	   *check;
	char	   *submit;
	char	   *end;
	bool		job[OPUS_P__COUNT] = {false};

#define JOB_OPTION(name, ...) job[OPUS_P_##name] = true;
	OPUS_PARAMS_REQUEST(JOB_OPTION)
	OPUS_PARAMS_SAMPLING(JOB_OPTION)
	OPUS_PARAMS_TEXTS(JOB_OPTION)
	OPUS_PARAMS_ROUTING(JOB_OPTION)
	OPUS_PARAMS_CONSTRAINT(JOB_OPTION)
#undef JOB_OPTION

	snprintf(path, sizeof(path), "%s/sql/install/30_jobs.sql", root);
	text = read_file(path);
	CHECK(text != NULL, "cannot read %s", path);
	if (!text)
		return;
	check = strstr(text, "CREATE FUNCTION @extschema@.opus_job_check_options(");
	submit = strstr(text, "CREATE FUNCTION @extschema@.opus_job_submit(");
	CHECK(check && submit, "30_jobs.sql: opus_job_check_options or opus_job_submit missing");
	if (!check || !submit)
	{
		free(text);
		return;
	}
	for (int i = 0; i < OPUS_P__COUNT; i++)
	{
		char		key[128];
		int			n = 0;

		if (!job[i])
			continue;
		/* the key in the list of known options (up to its RAISE) */
		end = strstr(check, "RAISE EXCEPTION 'unknown job option");
		snprintf(key, sizeof(key), "'%s'", opus_params[i].name);
		{
			char	   *k = strstr(check, key);

			CHECK(k && end && k < end, "30_jobs.sql: job option %s is not accepted",
				  opus_params[i].name);
		}
		/* the argument, in both calls of opus_job_submit */
		snprintf(key, sizeof(key), " %s => ", opus_params[i].name);
		end = strstr(submit, "$$;");
		for (char *k = strstr(submit, key); k && end && k < end; k = strstr(k + 1, key))
			n++;
		CHECK(n == 2, "30_jobs.sql: opus_job_submit passes %s %d times, want 2 (chat and not)",
			  opus_params[i].name, n);
	}
	free(text);
}

int
main(int argc, char **argv)
{
	const char *root = getenv("OPUS_SRCDIR");

	if (argc > 1 && strcmp(argv[1], "--readme") == 0)
	{
		char		buf[8192];

		readme_table(buf, sizeof(buf));
		fputs(buf, stdout);
		return 0;
	}
	if (!root || !*root)
		root = ".";
	check_wording();
	check_bounds();
	check_readme(root);
	check_sql(root);
	check_jobs(root);
	return UNIT_DONE();
}
