/*
 * test_grammar.c - the GBNF parser and automaton (src/engine/text/grammar.h):
 * per construct a grammar with strings it must accept and strings it must
 * reject; errors with their codes and positions; byte-by-byte feeding
 * (split UTF-8); masks over a small vocabulary against brute force.
 */
#include <string.h>

#include "unit.h"
#include "text/grammar.h"

struct gcase
{
	const char *grammar;
	const char *accept[8];
	const char *reject[8];
};

static const struct gcase cases[] = {
	{"root ::= \"abc\"", {"abc"}, {"", "ab", "abcd", "abd"}},
	{"root ::= \"a\" | \"b\" | \"cd\"", {"a", "b", "cd"}, {"", "c", "ab", "d"}},
	{"root ::= [a-c]", {"a", "b", "c"}, {"d", "", "ab", "A"}},
	{"root ::= [^a-c]", {"d", "Z", "\xc3\xa9", "\xe2\x82\xac"}, {"a", "c", "", "dd"}},
	{"root ::= [a-cx0-9]+", {"a", "x", "09ax", "cccc"}, {"", "d", "a-"}},
	{"root ::= .", {"a", "\xf0\x9f\x98\x80", "\n"}, {"", "ab"}},
	{"root ::= \"a\"*  \"b\"", {"b", "ab", "aaaab"}, {"", "a", "ba"}},
	{"root ::= \"a\"+", {"a", "aaa"}, {"", "b", "ab"}},
	{"root ::= \"a\"? \"b\"", {"b", "ab"}, {"aab", "a", ""}},
	{"root ::= \"a\"{3}", {"aaa"}, {"aa", "aaaa", ""}},
	{"root ::= \"a\"{2,4}", {"aa", "aaa", "aaaa"}, {"a", "aaaaa"}},
	{"root ::= \"a\"{2,}", {"aa", "aaaaaaa"}, {"a", ""}},
	{"root ::= \"a\"{0,2} \"b\"", {"b", "ab", "aab"}, {"aaab"}},
	{"root ::= (\"ab\" | \"c\")* \"d\"", {"d", "abd", "cabcd"}, {"ad", "abc"}},
	{"root ::= x x\nx ::= [0-9]", {"12", "00"}, {"1", "123", "a1"}},
	{"# a comment\nroot ::= x # trailing\n  # another\nx ::= \"y\"\n", {"y"}, {"x", ""}},
	{"root ::= \"\\n\\t\\\\\\\"\\x41\\u00e9\\U0001F600\"", {"\n\t\\\"A\xc3\xa9\xf0\x9f\x98\x80"}, {"n"}},
	{"root ::= [\\]\\-\\\\]", {"]", "-", "\\"}, {"a"}},
	{"root ::= \"\xc3\xa9t\xc3\xa9\"", {"\xc3\xa9t\xc3\xa9"}, {"ete"}},
	{"root ::= obj\nobj ::= \"{\" (pair (\",\" pair)*)? \"}\"\npair ::= str \":\" val\n"
		"val ::= str | obj | [0-9]+\nstr ::= \"\\\"\" [^\"]* \"\\\"\"",
		{"{}", "{\"a\":1}", "{\"a\":{\"b\":\"c\"},\"d\":22}"},
		{"{", "{\"a\"}", "{\"a\":}", "{,}", "{\"a\":1,}"}},
	{"root ::= (\n  \"a\"\n  | \"b\"\n)", {"a", "b"}, {"ab"}},
	{"root ::= \"a\" |\n  \"b\"", {"a", "b"}, {""}},
	{"root ::= \"x\" end\nend ::= \"\" | \"y\"", {"x", "xy"}, {"y", "xyy"}},
	{"root ::= \"(\" root \")\" | \"z\"", {"z", "(z)", "(((z)))"}, {"(z", "()", "z)"}},
	{"root::=\"a\"\r\nb ::= \"c\"\r\n", {"a"}, {"c"}},
	/* overlong and out-of-range UTF-8 never match */
	{"root ::= \"\\\"\" | [\\x80-\\U0010FFFF]", {"\"", "\xc2\x80", "\xf4\x8f\xbf\xbf"},
		{"\xc0\xa2", "\xe0\x80\xa2", "\xf0\x80\x80\xa2", "\xf4\x90\x80\x80", "\xe0", "\x80"}},
};

struct ecase
{
	const char *grammar;
	enum opus_grammar_errcode code;
	int			line,
				col;
};

static const struct ecase errors[] = {
	{"", OPUS_GRAMMAR_ERR_UNDEFINED, 0, 0},
	{"rot ::= \"a\"", OPUS_GRAMMAR_ERR_UNDEFINED, 0, 0},
	{"root ::= x", OPUS_GRAMMAR_ERR_UNDEFINED, 1, 10},
	{"root ::= \"a\"\n\nfoo ::= bar baz\nbar ::= \"b\"", OPUS_GRAMMAR_ERR_UNDEFINED, 3, 13},
	{"root ::= \"abc", OPUS_GRAMMAR_ERR_SYNTAX, 1, 14},
	{"root ::= [abc", OPUS_GRAMMAR_ERR_SYNTAX, 1, 14},
	{"root := \"a\"", OPUS_GRAMMAR_ERR_SYNTAX, 1, 6},
	{"root ::= \"a\"\n  x ::= \"b\" \"c\" ]", OPUS_GRAMMAR_ERR_SYNTAX, 2, 17},
	{"root ::= * \"a\"", OPUS_GRAMMAR_ERR_SYNTAX, 1, 10},
	{"root ::= (\"a\"", OPUS_GRAMMAR_ERR_SYNTAX, 1, 14},
	{"root ::= \"a\" )", OPUS_GRAMMAR_ERR_SYNTAX, 1, 14},
	{"root ::= \"\\q\"", OPUS_GRAMMAR_ERR_SYNTAX, 1, 11},
	{"root ::= \"\\x4\"", OPUS_GRAMMAR_ERR_SYNTAX, 1, 11},
	{"root ::= [z-a]", OPUS_GRAMMAR_ERR_SYNTAX, 1, 12},
	{"root ::= []", OPUS_GRAMMAR_ERR_SYNTAX, 1, 11},
	{"root ::= \"a\"{3,2}", OPUS_GRAMMAR_ERR_SYNTAX, 1, 13},
	{"root ::= \"a\"{2", OPUS_GRAMMAR_ERR_SYNTAX, 1, 15},
	{"root ::= \"a\"\nroot ::= \"b\"", OPUS_GRAMMAR_ERR_SYNTAX, 2, 1},
	{"root ::= \"a\"{20000}", OPUS_GRAMMAR_ERR_TOO_LARGE, 0, 0},
	{"root ::= root \"a\" | \"b\"", OPUS_GRAMMAR_ERR_LEFT_RECURSION, 0, 0},
	{"root ::= x\nx ::= y \"a\"\ny ::= \"\" | x", OPUS_GRAMMAR_ERR_LEFT_RECURSION, 0, 0},
	{"root ::= e root \"a\" | \"b\"\ne ::= \"\"", OPUS_GRAMMAR_ERR_LEFT_RECURSION, 0, 0},
	{"root ::= \"a\" root", OPUS_GRAMMAR_ERR_EMPTY, 0, 0},
	{"root ::= \"\"", OPUS_GRAMMAR_ERR_EMPTY, 0, 0},
	{"root ::= x*\nx ::= \"\"", OPUS_GRAMMAR_ERR_LEFT_RECURSION, 0, 0},
	{"root ::= x\nx ::= \"\" | \"\"", OPUS_GRAMMAR_ERR_EMPTY, 0, 0},
	{"root ::= [\\x00-\\x01]{1,2} nothing\nnothing ::= \"a\" nothing", OPUS_GRAMMAR_ERR_EMPTY, 0, 0},
	{"root ::= \"\xff\"", OPUS_GRAMMAR_ERR_SYNTAX, 1, 11},
};

static bool
feed_split(const opus_grammar *g, const char *s)
{
	/* one byte at a time, through clones */
	opus_grammar_state *st = opus_grammar_state_new(g);
	bool		ok = true;

	for (size_t i = 0; s[i] && ok; i++)
	{
		opus_grammar_state *c = opus_grammar_state_clone(st);

		ok = opus_grammar_accept_bytes(c, (const uint8_t *) s + i, 1);
		opus_grammar_state_free(st);
		st = c;
	}
	ok = ok && opus_grammar_is_accepting(st);
	opus_grammar_state_free(st);
	return ok;
}

static void
test_cases(void)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		const struct gcase *c = &cases[i];
		struct opus_grammar_error err;
		opus_grammar *g = opus_grammar_compile(c->grammar, strlen(c->grammar), &err);

		CHECK(g != NULL, "case %zu compiles: %s", i, err.msg);
		if (!g)
			continue;
		for (int j = 0; j < 8 && c->accept[j]; j++)
		{
			CHECK(opus_grammar_matches(g, c->accept[j], strlen(c->accept[j])),
				  "case %zu accepts '%s'", i, c->accept[j]);
			CHECK(feed_split(g, c->accept[j]), "case %zu accepts '%s' byte by byte",
				  i, c->accept[j]);
		}
		for (int j = 0; j < 8 && c->reject[j]; j++)
		{
			CHECK(!opus_grammar_matches(g, c->reject[j], strlen(c->reject[j])),
				  "case %zu rejects '%s'", i, c->reject[j]);
			CHECK(!feed_split(g, c->reject[j]), "case %zu rejects '%s' byte by byte",
				  i, c->reject[j]);
		}
		opus_grammar_free(g);
	}
}

static void
test_errors(void)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
	{
		const struct ecase *e = &errors[i];
		struct opus_grammar_error err;
		opus_grammar *g = opus_grammar_compile(e->grammar, strlen(e->grammar), &err);

		CHECK(g == NULL, "error case %zu fails", i);
		opus_grammar_free(g);
		CHECK(err.code == e->code, "error case %zu: code %d want %d (%s)", i,
			  err.code, e->code, err.msg);
		if (e->line)
			CHECK(err.line == e->line && err.col == e->col,
				  "error case %zu: at %d:%d want %d:%d (%s)", i, err.line, err.col,
				  e->line, e->col, err.msg);
		CHECK(err.msg[0] != 0, "error case %zu has a message", i);
	}
	{
		struct opus_grammar_error err;

		CHECK(opus_grammar_status(OPUS_GRAMMAR_ERR_TOO_LARGE) == OPUS_ERR_CAPACITY, "too large -> capacity");
		CHECK(opus_grammar_status(OPUS_GRAMMAR_ERR_SYNTAX) == OPUS_ERR_INVALID_ARG, "syntax -> invalid arg");
		/* past the element limit: 110 chars x 10000 optional copies */
		char		big[200];
		opus_grammar *g;

		memset(big, 0, sizeof(big));
		strcpy(big, "root ::= \"");
		memset(big + strlen(big), 'x', 110);
		strcat(big, "\"{0,10000}");
		g = opus_grammar_compile(big, strlen(big), &err);
		CHECK(g == NULL && err.code == OPUS_GRAMMAR_ERR_TOO_LARGE, "element limit (%s)", err.msg);
		opus_grammar_free(g);
		/* the length argument is respected (no NUL needed) */
		g = opus_grammar_compile("root ::= \"a\"XYZ", 12, &err);
		CHECK(g && opus_grammar_matches(g, "a", 1), "length respected (%s)", err.msg);
		opus_grammar_free(g);
	}
}

static void
test_state(void)
{
	const char *gt = "root ::= \"ab\" | \"ac\"";
	opus_grammar *g = opus_grammar_compile(gt, strlen(gt), NULL);
	opus_grammar_state *s = opus_grammar_state_new(g);

	CHECK(!opus_grammar_is_accepting(s), "start not accepting");
	CHECK(opus_grammar_accept_bytes(s, (const uint8_t *) "a", 1), "a");
	CHECK(!opus_grammar_accept_bytes(s, (const uint8_t *) "d", 1), "d rejected");
	CHECK(opus_grammar_accept_bytes(s, (const uint8_t *) "c", 1), "state unchanged by a rejection");
	CHECK(opus_grammar_is_accepting(s) && opus_grammar_is_finished(s), "ac accepting, finished");
	opus_grammar_state_free(s);
	opus_grammar_free(g);

	/* cache */
	{
		struct opus_grammar_error err;
		opus_grammar *a = opus_grammar_get(gt, strlen(gt), &err);
		opus_grammar *b = opus_grammar_get(gt, strlen(gt), &err);

		CHECK(a && a == b, "cache hit returns the same grammar");
		opus_grammar_release(a);
		opus_grammar_release(b);
		CHECK(opus_grammar_get("root ::= x", 10, &err) == NULL &&
			  err.code == OPUS_GRAMMAR_ERR_UNDEFINED, "cache passes errors");
	}
}

/* Masks over a small vocabulary against feeding each token. */
static void
test_masks(void)
{
	static const char *vocab[] = {
		"{", "}", "\"", "a", "ab", "abc", ":", ",", "1", "12", "{\"", "\":",
		"\xc3", "\xa9", "\xc3\xa9", " ", "x", "\"}", "", "\":1", "}}", "b",
		"\xe2\x82", "\xac", "\xe0", "\xf0", "\xc0",
	};
	int32_t		n = (int32_t) (sizeof(vocab) / sizeof(vocab[0]));
	const uint8_t *bytes[64];
	uint32_t	lens[64];
	const char *gt = "root ::= \"{\" (str \":\" num (\",\" str \":\" num)*)? \"}\"\n"
		"str ::= \"\\\"\" [a-b\xc3\xa9\xe2\x82\xac]* \"\\\"\"\nnum ::= [0-9]+";
	const char *path[] = {"{", "\"", "a", "\xc3", "\xa9", "\xe2\x82", "\xac", "\":", "12", ",\"b\":1", "}"};
	opus_grammar *g = opus_grammar_compile(gt, strlen(gt), NULL);
	opus_grammar_vocab *v;
	opus_grammar_state *s;

	CHECK(g != NULL, "mask grammar compiles");
	if (!g)
		return;
	for (int32_t i = 0; i < n; i++)
	{
		bytes[i] = (const uint8_t *) vocab[i];
		lens[i] = (uint32_t) strlen(vocab[i]);
	}
	v = opus_grammar_vocab_new(n, bytes, lens, NULL);
	s = opus_grammar_state_new(g);
	for (size_t step = 0; step <= sizeof(path) / sizeof(path[0]); step++)
	{
		for (int rep = 0; rep < 2; rep++)	/* the second from the cache */
		{
			uint32_t	mask[2];
			int32_t		cnt = opus_grammar_mask(s, v, mask);
			int32_t		want = 0;

			for (int32_t t = 0; t < n; t++)
			{
				opus_grammar_state *c = opus_grammar_state_clone(s);
				bool		ok = lens[t] > 0 && opus_grammar_accept_bytes(c, bytes[t], lens[t]);
				bool		got = (mask[t >> 5] >> (t & 31)) & 1;

				want += ok;
				CHECK(ok == got, "step %zu token %d ('%s'): mask %d, feeding %d",
					  step, t, vocab[t], got, ok);
				opus_grammar_state_free(c);
			}
			CHECK(cnt == want, "step %zu count %d want %d", step, cnt, want);
		}
		if (step < sizeof(path) / sizeof(path[0]))
			CHECK(opus_grammar_accept_bytes(s, (const uint8_t *) path[step], strlen(path[step])),
				  "path step %zu", step);
	}
	CHECK(opus_grammar_is_accepting(s), "path accepted");
	opus_grammar_state_free(s);
	opus_grammar_vocab_free(v);
	opus_grammar_free(g);
}

int
main(void)
{
	test_cases();
	test_errors();
	test_state();
	test_masks();
	return UNIT_DONE();
}
