/*
 * test_grammar.c - the GBNF parser and automaton (src/engine/text/grammar.h):
 * per construct a grammar with strings it must accept and strings it must
 * reject; errors with their codes and positions; byte-by-byte feeding
 * (split UTF-8); masks over a small vocabulary against brute force; the
 * cached masks (frame classes) against the plain walk of the whole state,
 * bit for bit, along random paths of JSON Schema grammars and others, from
 * several threads at once, and past the class cache's capacity; the
 * scheduler's masks during the forward pass (runtime/masker.h: a helper
 * thread, the rest over a thread pool) against the same walk.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "unit.h"
#include "base/threadpool.h"
#include "runtime/masker.h"
#include "text/grammar.h"
#include "text/json_schema.h"

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

/* ---- cached masks (frame classes) against the plain walk ---- */

#define CV_MAX 1400

struct cvocab
{
	char	   *tok[CV_MAX];
	const uint8_t *bytes[CV_MAX];
	uint32_t	lens[CV_MAX];
	int32_t		n;
	opus_grammar_vocab *v;
};

static void
cv_add(struct cvocab *cv, const char *t, size_t len)
{
	if (cv->n >= CV_MAX)
		return;
	cv->tok[cv->n] = malloc(len + 1);
	memcpy(cv->tok[cv->n], t, len);
	cv->tok[cv->n][len] = '\0';
	cv->bytes[cv->n] = (const uint8_t *) cv->tok[cv->n];
	cv->lens[cv->n] = (uint32_t) len;
	cv->n++;
}

/*
 * A JSON-ish vocabulary: every printable ASCII character, every pair over a
 * JSON alphabet, and longer pieces that cross the ends of strings, values
 * and objects (where a stack's frame is popped), some UTF-8 split.
 */
static void
cv_build(struct cvocab *cv)
{
	static const char alpha[] = "{}[]\",: \n0123456789aeflnrstu@.-\\";
	static const char *more[] = {
		"\": \"", "\", \"", "\"}", "\"]", " \"", "{\"", "[\"", "\":", "\",", "},", "}]", "],",
		"true", "false", "null", "\n  ", "  ", "    ", "\"name", "\"age", "\":\"", ".com",
		"example", "alice", "bob", "12", "123", "1.5", "-1", "e+", "\xc3\xa9", "\xc3", "\xa9",
		"\xe2\x82\xac", "\xe2\x82", "\xac", "\"},{\"", "\"}]", "}}", "]]", "\":[", "\":{",
		"\": [", "\": {", ", ", ",\n", "\\\"", "\\n", "\\u00", "\"\n", "\" ", "\"}\n",
		"role", "engineer", "\"engineer\"", "manager\"", "er\",", "ab", "ba", "abab", "bab",
		"x", "xy", "\"x\"", "10}", "99,", "0]", "7\"", "\t", " \t",
	};

	memset(cv, 0, sizeof(*cv));
	for (int c = 32; c < 127; c++)
	{
		char		b = (char) c;

		cv_add(cv, &b, 1);
	}
	for (size_t i = 0; alpha[i]; i++)
		for (size_t j = 0; alpha[j]; j++)
		{
			char		p[2] = {alpha[i], alpha[j]};

			cv_add(cv, p, 2);
		}
	for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++)
		cv_add(cv, more[i], strlen(more[i]));
	cv_add(cv, "\"", 1);		/* a token with the same bytes as another */
	cv->v = opus_grammar_vocab_new(cv->n, cv->bytes, cv->lens, NULL);
}

static void
cv_free(struct cvocab *cv)
{
	for (int32_t i = 0; i < cv->n; i++)
		free(cv->tok[i]);
	opus_grammar_vocab_free(cv->v);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint32_t
rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t) (rng_state >> 11);
}

/* Same bits and counts from the cached mask and the plain walk? */
static bool
masks_agree(const opus_grammar_state *s, const struct cvocab *cv, uint32_t *m1, uint32_t *m2,
			const char *what, int walk, int step)
{
	int32_t		words = (cv->n + 31) / 32;
	int32_t		c1 = opus_grammar_mask(s, cv->v, m1);
	int32_t		c2 = opus_grammar_mask_walk(s, cv->v, m2);

	for (int32_t w = 0; w < words; w++)
		if (m1[w] != m2[w])
		{
			int32_t		t = w * 32 + __builtin_ctz(m1[w] ^ m2[w]);

			CHECK(false, "%s walk %d step %d: token %d ('%s') cached %d, walked %d",
				  what, walk, step, t, cv->tok[t], (int) (m1[w] >> (t & 31) & 1),
				  (int) (m2[w] >> (t & 31) & 1));
			return false;
		}
	CHECK(c1 == c2, "%s walk %d step %d: count %d, walked %d", what, walk, step, c1, c2);
	return c1 == c2;
}

/*
 * Random paths through g (tokens drawn among the allowed ones), comparing
 * the masks at every step; some of the texts fed so far are saved in
 * *saved (up to n_save, malloc'd) for the threaded check.
 */
static void
random_paths(const opus_grammar *g, const struct cvocab *cv, const char *what, int walks,
			 int max_steps, char **saved, int n_save, int *n_saved)
{
	uint32_t	m1[CV_MAX / 32 + 1],
				m2[CV_MAX / 32 + 1];

	for (int w = 0; w < walks; w++)
	{
		opus_grammar_state *s = opus_grammar_state_new(g);
		char		text[4096];
		size_t		tl = 0;

		for (int step = 0; step < max_steps; step++)
		{
			int32_t		allowed[CV_MAX];
			int32_t		n = 0;

			if (!masks_agree(s, cv, m1, m2, what, w, step))
				break;
			if (saved && *n_saved < n_save && rng() % 3 == 0)
			{
				saved[*n_saved] = malloc(tl + 1);
				memcpy(saved[*n_saved], text, tl);
				saved[(*n_saved)++][tl] = '\0';
			}
			for (int32_t t = 0; t < cv->n; t++)
				if (m2[t >> 5] >> (t & 31) & 1)
					allowed[n++] = t;
			if (n == 0)
				break;
			{
				int32_t		t = allowed[rng() % (uint32_t) n];

				CHECK(opus_grammar_accept_bytes(s, cv->bytes[t], cv->lens[t]),
					  "%s walk %d step %d: allowed token '%s' refused", what, w, step, cv->tok[t]);
				if (tl + cv->lens[t] < sizeof(text))
				{
					memcpy(text + tl, cv->bytes[t], cv->lens[t]);
					tl += cv->lens[t];
				}
				else
					break;
			}
		}
		opus_grammar_state_free(s);
	}
}

struct thread_arg
{
	const struct cvocab *cv;
	opus_grammar_state **states;
	int			n,
				start;
	uint32_t   *out;			/* [n][words] */
};

static void *
thread_masks(void *p)
{
	struct thread_arg *a = p;
	int32_t		words = (a->cv->n + 31) / 32;

	for (int k = 0; k < a->n; k++)
	{
		int			i = (a->start + k) % a->n;

		opus_grammar_mask(a->states[i], a->cv->v, a->out + (size_t) i * words);
	}
	return NULL;
}

/*
 * The masker (the scheduler's path) on the saved texts, each replayed on a
 * freshly compiled copy of gbnf (cold caches, filled concurrently by the
 * helper and the pool), against ref (the plain walk).  mode 0: finish right
 * after start (helper and pool race for the masks); 1: finish after the
 * caller spun a while (the helper takes most or all); 2: overlap off (all
 * over the pool).  Masks start as garbage, so an unwritten one shows.
 */
static void
masker_check(const char *gbnf, const struct cvocab *cv, char **saved, int n_saved,
			 const uint32_t *ref, int mode, int threads)
{
	opus_grammar *g = opus_grammar_compile(gbnf, strlen(gbnf), NULL);
	int32_t		words = (cv->n + 31) / 32;
	uint32_t   *out = malloc((size_t) n_saved * words * sizeof(uint32_t));
	opus_grammar_state *st[256];
	const opus_grammar_state *cst[256];
	uint32_t   *mp[256];
	struct opus_masker *mk = NULL;
	struct opus_pool *pool = NULL;
	int			by_helper;

	CHECK(g && out, "masker check %d: setup", mode);
	CHECK(opus_masker_create(&mk, NULL) == OPUS_OK, "masker created");
	CHECK(opus_pool_create(threads, &pool, NULL) == OPUS_OK, "pool created");
	if (!g || !out || !mk || !pool)
		goto done;
	memset(out, 0xA5, (size_t) n_saved * words * sizeof(uint32_t));
	for (int k = 0; k < n_saved; k++)
	{
		st[k] = opus_grammar_state_new(g);
		opus_grammar_accept_bytes(st[k], (const uint8_t *) saved[k], strlen(saved[k]));
		cst[k] = st[k];
		mp[k] = out + (size_t) k * words;
	}
	opus_masker_start(mk, cv->v, cst, mp, n_saved, mode != 2);
	if (mode == 1)
	{
		struct timespec t0,
					t1;

		/* the caller's "forward pass": 50 ms of its own work */
		clock_gettime(CLOCK_MONOTONIC, &t0);
		do
			clock_gettime(CLOCK_MONOTONIC, &t1);
		while ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 50);
	}
	by_helper = opus_masker_finish(mk, pool);
	CHECK(memcmp(out, ref, (size_t) n_saved * words * sizeof(uint32_t)) == 0,
		  "masker mode %d, %d threads: masks differ from the walk", mode, threads);
	CHECK(by_helper >= 0 && by_helper <= n_saved && (mode != 2 || by_helper == 0),
		  "masker mode %d: the helper computed %d of %d", mode, by_helper, n_saved);
	/* the same masker and states again: a second job, now warm */
	memset(out, 0xA5, (size_t) n_saved * words * sizeof(uint32_t));
	opus_masker_start(mk, cv->v, cst, mp, n_saved, true);
	opus_masker_finish(mk, pool);
	CHECK(memcmp(out, ref, (size_t) n_saved * words * sizeof(uint32_t)) == 0,
		  "masker mode %d, second job: masks differ from the walk", mode);
	for (int k = 0; k < n_saved; k++)
		opus_grammar_state_free(st[k]);
done:
	opus_masker_free(mk);
	opus_pool_free(pool);
	free(out);
	opus_grammar_free(g);
}

static void
test_class_masks(void)
{
	static const char *schemas[] = {
		"{\"type\": \"object\", \"properties\": {\"team\": {\"type\": \"string\", \"maxLength\": 8},"
		" \"people\": {\"type\": \"array\", \"minItems\": 3, \"items\": {\"type\": \"object\", \"properties\":"
		" {\"name\": {\"type\": \"string\", \"maxLength\": 6}, \"age\": {\"type\": \"integer\", \"minimum\": 0,"
		" \"maximum\": 120}, \"email\": {\"type\": \"string\", \"format\": \"email\"}, \"role\": {\"enum\":"
		" [\"engineer\", \"manager\"]}}, \"required\": [\"name\", \"age\", \"email\", \"role\"],"
		" \"additionalProperties\": false}}}, \"required\": [\"team\", \"people\"], \"additionalProperties\": false}",
		"{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, \"kids\":"
		" {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/n\"}}}, \"required\": [\"v\"]}}, \"$ref\": \"#/$defs/n\"}",
		"{\"type\": \"array\", \"items\": {\"anyOf\": [{\"type\": \"number\"}, {\"type\": \"string\"},"
		" {\"type\": \"boolean\"}, {\"type\": \"null\"}]}}",
		"{\"type\": \"object\"}",
	};
	static const char *grammars[] = {
		"root ::= v\nv ::= \"[\" (v (\",\" \" \"? v)*)? \"]\" | [0-9]+ | \"\\\"\" [a-z\\u00e9\\u20ac]* \"\\\"\"",
		"root ::= (\"ab\" | \"a\" \"b\"* \"x\")+ \"!\"?",
	};
	struct cvocab cv;
	char	   *saved[256];
	int			n_saved = 0;

	cv_build(&cv);
	CHECK(cv.v != NULL, "class vocabulary");
	if (!cv.v)
		return;
	for (size_t i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++)
	{
		char	   *gbnf = NULL;
		struct opus_error err = {0};
		opus_grammar *g;
		char		what[32];

		snprintf(what, sizeof(what), "schema %zu", i);
		CHECK(opus_json_schema_to_gbnf(schemas[i], strlen(schemas[i]), &gbnf, &err) == OPUS_OK,
			  "%s converts: %s", what, err.msg);
		if (!gbnf)
			continue;
		g = opus_grammar_compile(gbnf, strlen(gbnf), NULL);
		CHECK(g != NULL, "%s compiles", what);
		if (g)
		{
			random_paths(g, &cv, what, 6, 120, i == 0 ? saved : NULL, 256, &n_saved);
			/* the same paths again, every class cached now */
			rng_state = 0x9E3779B97F4A7C15ULL + i;
			random_paths(g, &cv, what, 2, 120, NULL, 0, NULL);
		}

		/* several threads at once on a cold copy: the same masks as alone */
		if (i == 0 && g && n_saved > 0)
		{
			opus_grammar *g2 = opus_grammar_compile(gbnf, strlen(gbnf), NULL);
			opus_grammar_state *st[256];
			int32_t		words = (cv.n + 31) / 32;
			uint32_t   *ref = calloc((size_t) n_saved * words, sizeof(uint32_t));
			uint32_t   *out[4];
			pthread_t	th[4];
			struct thread_arg ta[4];

			for (int k = 0; k < n_saved; k++)
			{
				/* the saved texts, fed to a fresh copy of the grammar */
				st[k] = opus_grammar_state_new(g2);
				CHECK(opus_grammar_accept_bytes(st[k], (const uint8_t *) saved[k], strlen(saved[k])),
					  "saved text %d replays", k);
				opus_grammar_mask_walk(st[k], cv.v, ref + (size_t) k * words);
			}
			for (int t = 0; t < 4; t++)
			{
				out[t] = calloc((size_t) n_saved * words, sizeof(uint32_t));
				ta[t] = (struct thread_arg)
				{
					&cv, st, n_saved, t * n_saved / 4, out[t]
				};
				pthread_create(&th[t], NULL, thread_masks, &ta[t]);
			}
			for (int t = 0; t < 4; t++)
			{
				pthread_join(th[t], NULL);
				CHECK(memcmp(out[t], ref, (size_t) n_saved * words * sizeof(uint32_t)) == 0,
					  "thread %d: masks differ from the walk", t);
				free(out[t]);
			}
			for (int k = 0; k < n_saved; k++)
				opus_grammar_state_free(st[k]);
			/* the scheduler's path: a helper during other work, then a pool */
			for (int mode = 0; mode < 3; mode++)
				masker_check(gbnf, &cv, saved, n_saved, ref, mode, mode == 0 ? 3 : 2);
			masker_check(gbnf, &cv, saved, n_saved, ref, 0, 1);
			free(ref);
			opus_grammar_free(g2);
		}
		opus_grammar_free(g);
		free(gbnf);
	}
	for (size_t i = 0; i < sizeof(grammars) / sizeof(grammars[0]); i++)
	{
		opus_grammar *g = opus_grammar_compile(grammars[i], strlen(grammars[i]), NULL);
		char		what[32];

		snprintf(what, sizeof(what), "grammar %zu", i);
		CHECK(g != NULL, "%s compiles", what);
		if (g)
			random_paths(g, &cv, what, 8, 60, NULL, 0, NULL);
		opus_grammar_free(g);
	}

	/* more frames than the class cache holds (one per position: 3000) */
	{
		const char *gt = "root ::= (\"ab\"){1500} \"!\"";
		opus_grammar *g = opus_grammar_compile(gt, strlen(gt), NULL);

		CHECK(g != NULL, "long grammar compiles");
		if (g)
			random_paths(g, &cv, "long", 1, 3200, NULL, 0, NULL);
		opus_grammar_free(g);
	}
	for (int k = 0; k < n_saved; k++)
		free(saved[k]);
	cv_free(&cv);
}

int
main(void)
{
	test_cases();
	test_errors();
	test_state();
	test_masks();
	test_class_masks();
	return UNIT_DONE();
}
