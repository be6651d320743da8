/*
 * test_json_schema.c - the constraint converters: JSON Schema and
 * response_format (json_schema.c), regular expressions and choices
 * (regex_gbnf.c) to GBNF.
 *
 * The grammars' meaning (which strings they accept) is checked against the
 * PyPI jsonschema package by test/golden/json_schema/check.py over a corpus
 * of schemas; it runs this binary as the converter:
 *
 *   test_json_schema --convert schema|rf|regex < input
 *
 * prints the grammar, or "ERROR <status>: <message>" and exits 1;
 *
 *   test_json_schema --match GRAMMAR_FILE < lines
 *
 * compiles the grammar with the engine's compiler (grammar.h) and prints,
 * for each input line (a JSON text without raw newlines), 1 when the
 * automaton accepts the whole line and 0 when not; "ERROR <message>" and
 * exit 1 when the grammar does not compile.
 * Without arguments: the unit checks below (shapes of the output, every
 * error path, limits).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include "text/grammar.h"
#include "text/json_schema.h"
#include "text/regex_gbnf.h"

static int
convert_main(const char *kind)
{
	size_t		cap = 1 << 16,
				n = 0,
				r;
	char	   *buf = malloc(cap);
	char	   *out = NULL;
	struct opus_error err = {0};
	enum opus_status st;

	if (buf == NULL)
		return 2;
	while ((r = fread(buf + n, 1, cap - n, stdin)) > 0)
	{
		n += r;
		if (n == cap)
		{
			char	   *p = realloc(buf, cap * 2);

			if (p == NULL)
				return 2;
			buf = p;
			cap *= 2;
		}
	}
	if (strcmp(kind, "regex") == 0)
		st = opus_regex_to_gbnf(buf, n, &out, &err);
	else if (strcmp(kind, "rf") == 0)
		st = opus_response_format_to_gbnf(buf, n, &out, &err);
	else
		st = opus_json_schema_to_gbnf(buf, n, &out, &err);
	free(buf);
	if (st != OPUS_OK)
	{
		printf("ERROR %s: %s\n", opus_status_name(st), err.msg);
		return 1;
	}
	if (out != NULL)
		fputs(out, stdout);
	free(out);
	return 0;
}

static int
match_main(const char *path)
{
	FILE	   *f = fopen(path, "rb");
	char	   *g,
			   *line = NULL;
	long		n;
	size_t		cap = 0;
	ssize_t		len;
	struct opus_grammar_error gerr = {0};
	opus_grammar *gr;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
		return 2;
	g = malloc((size_t) n + 1);
	if (g == NULL || fread(g, 1, (size_t) n, f) != (size_t) n)
		return 2;
	fclose(f);
	gr = opus_grammar_compile(g, (size_t) n, &gerr);
	free(g);
	if (gr == NULL)
	{
		printf("ERROR %s\n", gerr.msg);
		return 1;
	}
	while ((len = getline(&line, &cap, stdin)) >= 0)
	{
		if (len > 0 && line[len - 1] == '\n')
			len--;
		printf("%d\n", opus_grammar_matches(gr, line, (size_t) len) ? 1 : 0);
	}
	free(line);
	opus_grammar_free(gr);
	return 0;
}

/* Convert s; expect status want and (when not NULL) words in the grammar or message. */
static void
schema_case(const char *s, enum opus_status want, const char *words)
{
	char	   *out = (char *) 1;
	struct opus_error err = {0};
	enum opus_status st = opus_json_schema_to_gbnf(s, strlen(s), &out, &err);

	CHECK(st == want, "%s: status %s, want %s (%s)", s, opus_status_name(st),
		  opus_status_name(want), err.msg);
	if (st == OPUS_OK)
	{
		CHECK(out != NULL && strncmp(out, "root ::= ", 9) == 0, "%s: grammar starts with root", s);
		if (words)
			CHECK(out && strstr(out, words) != NULL, "%s: grammar lacks %s:\n%s", s, words, out);
		free(out);
	}
	else
	{
		CHECK(out == NULL, "%s: out is NULL on error", s);
		if (words)
			CHECK(strstr(err.msg, words) != NULL, "%s: message \"%s\" lacks \"%s\"", s, err.msg, words);
	}
}

static void
regex_case(const char *re, enum opus_status want, const char *words)
{
	char	   *out = (char *) 1;
	struct opus_error err = {0};
	enum opus_status st = opus_regex_to_gbnf(re, strlen(re), &out, &err);

	CHECK(st == want, "regex %s: status %s, want %s (%s)", re, opus_status_name(st),
		  opus_status_name(want), err.msg);
	if (st == OPUS_OK)
	{
		if (words)
			CHECK(out && strstr(out, words) != NULL, "regex %s: grammar lacks %s:\n%s", re, words, out);
		free(out);
	}
	else
	{
		CHECK(out == NULL, "regex %s: out is NULL on error", re);
		if (words)
			CHECK(strstr(err.msg, words) != NULL, "regex %s: message \"%s\" lacks \"%s\"", re, err.msg, words);
	}
}

static void
rf_case(const char *rf, enum opus_status want, int want_grammar, const char *words)
{
	char	   *out = (char *) 1;
	struct opus_error err = {0};
	enum opus_status st = opus_response_format_to_gbnf(rf, strlen(rf), &out, &err);

	CHECK(st == want, "rf %s: status %s, want %s (%s)", rf, opus_status_name(st),
		  opus_status_name(want), err.msg);
	CHECK((out != NULL) == want_grammar, "rf %s: grammar %s", rf, want_grammar ? "expected" : "unexpected");
	if (st != OPUS_OK && words)
		CHECK(strstr(err.msg, words) != NULL, "rf %s: message \"%s\" lacks \"%s\"", rf, err.msg, words);
	free(out);
}

static void
choices_case(int n, const char *const *s, enum opus_status want, const char *words)
{
	size_t		lens[8];
	char	   *out = (char *) 1;
	struct opus_error err = {0};
	enum opus_status st;

	for (int i = 0; i < n; i++)
		lens[i] = strlen(s[i]);
	st = opus_choices_to_gbnf(s, lens, (size_t) n, &out, &err);
	CHECK(st == want, "choices: status %s, want %s (%s)", opus_status_name(st), opus_status_name(want), err.msg);
	if (st == OPUS_OK && words)
		CHECK(out && strcmp(out, words) == 0, "choices: grammar %s, want %s", out, words);
	if (st != OPUS_OK && words)
		CHECK(strstr(err.msg, words) != NULL, "choices: message \"%s\" lacks \"%s\"", err.msg, words);
	if (st == OPUS_OK)
		free(out);
}

static void
test_limits(void)
{
	/* a schema nested past the limit, and an object with many properties */
	char	   *s = malloc(2 << 20);
	size_t		o = 0;
	int			i;

	for (i = 0; i < 70; i++)
		o += (size_t) sprintf(s + o, "{\"type\":\"array\",\"items\":");
	o += (size_t) sprintf(s + o, "{}");
	for (i = 0; i < 70; i++)
		s[o++] = '}';
	s[o] = '\0';
	schema_case(s, OPUS_ERR_CAPACITY, "nested more than 64");

	o = (size_t) sprintf(s, "{\"type\":\"object\",\"properties\":{");
	for (i = 0; i < 3000; i++)
		o += (size_t) sprintf(s + o, "%s\"p%d\":{\"type\":\"integer\"}", i ? "," : "", i);
	o += (size_t) sprintf(s + o, "}}");
	schema_case(s, OPUS_ERR_CAPACITY, "grammar rules");

	memset(s, ' ', OPUS_JSON_SCHEMA_MAX_BYTES + 1);
	{
		char	   *out;
		struct opus_error err = {0};

		CHECK(opus_json_schema_to_gbnf(s, OPUS_JSON_SCHEMA_MAX_BYTES + 1, &out, &err) == OPUS_ERR_CAPACITY,
			  "schema over the byte limit");
		CHECK(opus_regex_to_gbnf(s, OPUS_REGEX_MAX_BYTES + 1, &out, &err) == OPUS_ERR_CAPACITY,
			  "regex over the byte limit");
	}
	/* 30 nested groups are fine, 40 are not */
	o = 0;
	for (i = 0; i < 40; i++)
		s[o++] = '(';
	s[o++] = 'a';
	for (i = 0; i < 40; i++)
		s[o++] = ')';
	s[o] = '\0';
	regex_case(s, OPUS_ERR_CAPACITY, "nested");
	free(s);
}

int
main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--convert") == 0)
		return convert_main(argv[2]);
	if (argc == 3 && strcmp(argv[1], "--match") == 0)
		return match_main(argv[2]);

	/* shapes */
	schema_case("{\"type\":\"string\"}", OPUS_OK, "root-value ::= string");
	schema_case("{\"type\":\"integer\",\"minimum\":1,\"maximum\":12}", OPUS_OK, "[1-9]");
	schema_case("{\"enum\":[\"a\",\"b\"]}", OPUS_OK, "(\"\\\"a\\\"\" | \"\\\"b\\\"\") space");
	schema_case("{\"type\":\"string\",\"format\":\"uuid\"}", OPUS_OK, "uuid-string");
	schema_case("{\"$defs\":{\"n\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},"
				"\"$ref\":\"#/$defs/n\"}", OPUS_OK, "n-1 ::= \"[\" space (n (");
	schema_case("true", OPUS_OK, "root-value ::= value");
	/* errors */
	schema_case("{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}", OPUS_ERR_UNSUPPORTED,
				"unsupported JSON Schema keyword \"not\" at $.properties.a");
	schema_case("{\"items\":{\"if\":{}}}", OPUS_ERR_UNSUPPORTED, "\"if\" at $.items");
	schema_case("{\"anyOf\":[{\"type\":\"string\"},{\"uniqueItems\":true}]}", OPUS_ERR_UNSUPPORTED,
				"\"uniqueItems\" at $.anyOf[1]");
	schema_case("false", OPUS_ERR_UNSUPPORTED, "schema false");
	schema_case("{\"type\":", OPUS_ERR_INVALID_ARG, "invalid JSON at offset 8");
	schema_case("{\"type\":\"string\"} x", OPUS_ERR_INVALID_ARG, "text after the value");
	schema_case("[1]", OPUS_ERR_INVALID_ARG, "must be an object");
	schema_case("{\"type\":\"integer\",\"minimum\":3,\"maximum\":2}", OPUS_ERR_INVALID_ARG, "between");
	schema_case("{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", OPUS_ERR_INVALID_ARG, "minLength");
	schema_case("{\"type\":\"string\",\"maxLength\":5000}", OPUS_ERR_CAPACITY, "above 1000");
	schema_case("{\"type\":\"integer\",\"minimum\":1e20}", OPUS_ERR_UNSUPPORTED, "10^15");
	schema_case("{\"required\":[\"x\"],\"properties\":{}}", OPUS_ERR_UNSUPPORTED, "required property \"x\"");
	schema_case("{\"$ref\":\"#/nope\"}", OPUS_ERR_INVALID_ARG, "does not resolve");
	schema_case("{\"$ref\":\"#/$defs/a\",\"type\":\"string\",\"$defs\":{\"a\":{}}}", OPUS_ERR_UNSUPPORTED,
				"beside $ref");
	schema_case("{\"type\":\"string\",\"pattern\":\"a\\\\1\"}", OPUS_ERR_UNSUPPORTED,
				"pattern at $: unsupported escape \\1 at offset 1");

	/* response_format */
	rf_case("{\"type\":\"text\"}", OPUS_OK, 0, NULL);
	rf_case("{\"type\":\"json_object\"}", OPUS_OK, 1, NULL);
	rf_case("{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,"
			"\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}", OPUS_OK, 1, NULL);
	rf_case("{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}", OPUS_ERR_INVALID_ARG, 0,
			"needs json_schema.schema");
	rf_case("{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"properties\":"
			"{\"a\":{\"oneOf\":[{},{\"minProperties\":1}]}}}}}", OPUS_ERR_UNSUPPORTED, 0,
			"\"minProperties\" at $.properties.a.oneOf[1]");
	rf_case("{\"type\":\"xml\"}", OPUS_ERR_INVALID_ARG, 0, "text, json_object or json_schema");
	rf_case("{\"type\":\"text\",\"x\":1}", OPUS_ERR_INVALID_ARG, 0, "takes no");
	rf_case("[]", OPUS_ERR_INVALID_ARG, 0, "must be an object");

	/* regex */
	regex_case("[a-z]+@[a-z]+\\.(com|org)", OPUS_OK, "root ::= ([a-z]+ \"@\" [a-z]+ \".\" (\"c\" \"o\" \"m\" | \"o\" \"r\" \"g\"))");
	regex_case("^\\d{3}-\\d{4}$", OPUS_OK, "[0-9]{3}");
	regex_case("a{2,}b{,3}", OPUS_OK, "{0,3}");
	regex_case("x{a}", OPUS_OK, "\"{\"");
	regex_case("[^\\n]", OPUS_OK, NULL);
	regex_case("(?:ab)*?c", OPUS_OK, NULL);
	regex_case("a(b", OPUS_ERR_INVALID_ARG, "missing ) at offset 1");
	regex_case("ab)", OPUS_ERR_INVALID_ARG, "unbalanced ) at offset 2");
	regex_case("*a", OPUS_ERR_INVALID_ARG, "nothing to repeat at offset 0");
	regex_case("a**", OPUS_ERR_INVALID_ARG, "multiple repeat at offset 2");
	regex_case("[abc", OPUS_ERR_INVALID_ARG, "unterminated character class at offset 0");
	regex_case("[z-a]", OPUS_ERR_INVALID_ARG, "bad character range at offset 2");
	regex_case("a{3,2}", OPUS_ERR_INVALID_ARG, "n < m");
	regex_case("a{5000}", OPUS_ERR_CAPACITY, "above 1000");
	regex_case("(a)\\1", OPUS_ERR_UNSUPPORTED, "unsupported escape \\1 at offset 3");
	regex_case("a(?=b)", OPUS_ERR_UNSUPPORTED, "lookaround at offset 1");
	regex_case("(?P<x>a)", OPUS_ERR_UNSUPPORTED, "named group at offset 0");
	regex_case("(?i)a", OPUS_ERR_UNSUPPORTED, "group flags");
	regex_case("a^b", OPUS_ERR_UNSUPPORTED, "anchor inside the expression at offset 1");
	regex_case("\\bword", OPUS_ERR_UNSUPPORTED, "\\b");
	regex_case("a\\", OPUS_ERR_INVALID_ARG, "trailing backslash");
	regex_case("\xff", OPUS_ERR_INVALID_ARG, "invalid UTF-8");
	regex_case("\\x4g", OPUS_ERR_INVALID_ARG, "bad hexadecimal");

	/* choices */
	{
		const char *const ok[] = {"yes", "no", "say \"x\""};
		const char *const dup[] = {"a", "b", "a"};
		const char *const empty[] = {"a", ""};

		choices_case(3, ok, OPUS_OK, "root ::= \"yes\" | \"no\" | \"say \\\"x\\\"\"\n");
		choices_case(0, ok, OPUS_ERR_INVALID_ARG, "must not be empty");
		choices_case(3, dup, OPUS_ERR_INVALID_ARG, "choices 1 and 3 are the same");
		choices_case(2, empty, OPUS_ERR_INVALID_ARG, "tokenizes to nothing");
	}
	test_limits();
	return UNIT_DONE();
}
