/*
 * test_tokenizer.c - the tokenizer against llama.cpp goldens, plus the
 * streaming UTF-8 assembler and error paths.
 *
 * Goldens (test/golden/tokenizer/, made by gen_tokenizer_golden.py) hold,
 * per corpus string, llama.cpp's token ids for the four combinations of
 * add_special/parse_special and its detokenized bytes; every id must match
 * exactly.  The default model's vocabulary is also checked with its
 * pre-tokenizer replaced (llama-bpe, qwen2, gpt-2, default): the test builds
 * that variant GGUF itself with the GGUF writer, as the generator did.  The
 * SentencePiece golden uses the small committed spm-vocab.gguf, the
 * WordPiece one the committed wpm-vocab.gguf (cut from all-MiniLM-L6-v2's
 * vocabulary by gen_wpm_golden.py); minilm.golden needs the model itself
 * (make model-minilm; OPUS_MINILM names it, skipped when absent).
 *
 * Run from the repository root; OPUS_MODEL names the default model (the
 * model-based parts are skipped without it).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "format/gguf.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "unit.h"

#define GOLDEN_DIR "test/golden/tokenizer/"

static int	n_reported;

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Decode a hex field ("-" is empty) into a malloc'd buffer. */
static char *
unhex(const char *s, size_t *len)
{
	size_t		n = strlen(s);
	char	   *out = malloc(n / 2 + 1);

	*len = 0;
	if (strcmp(s, "-") == 0)
		return out;
	for (size_t i = 0; i + 1 < n; i += 2)
		out[(*len)++] = (char) (hexval(s[i]) * 16 + hexval(s[i + 1]));
	return out;
}

/* Parse "1 2 3" ("-" is empty) into ids; returns the count. */
static int64_t
parse_ids(const char *s, int32_t *ids, int64_t cap)
{
	int64_t		n = 0;
	char	   *end;

	if (strcmp(s, "-") == 0)
		return 0;
	while (*s && n < cap)
	{
		ids[n++] = (int32_t) strtol(s, &end, 10);
		if (end == s)
			break;
		s = end;
		while (*s == ' ')
			s++;
	}
	return n;
}

static void
show_ids(const char *label, const int32_t *ids, int64_t n)
{
	fprintf(stderr, "  %s:", label);
	for (int64_t i = 0; i < n && i < 60; i++)
		fprintf(stderr, " %d", ids[i]);
	fprintf(stderr, "%s\n", n > 60 ? " ..." : "");
}

static uint64_t
fnv1a64(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
	{
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/* Split a line into TAB-separated fields in place. */
static int
split_tabs(char *line, char **f, int max)
{
	int			n = 0;

	f[n++] = line;
	for (char *p = line; *p && n < max; p++)
	{
		if (*p == '\t')
		{
			*p = '\0';
			f[n++] = p + 1;
		}
	}
	return n;
}

static void
check_case(const struct opus_tokenizer *tok, const char *gname, char **f)
{
	size_t		in_len;
	char	   *in = unhex(f[1], &in_len);
	int64_t		cap = (int64_t) in_len * 2 + 16;
	int32_t    *want = malloc((size_t) cap * sizeof(int32_t));
	int32_t    *got = malloc((size_t) cap * sizeof(int32_t));
	int32_t    *ids11 = malloc((size_t) cap * sizeof(int32_t));
	int32_t    *ids00 = malloc((size_t) cap * sizeof(int32_t));
	int64_t		n11 = 0,
				n00 = 0;

	for (int combo = 0; combo < 4; combo++)
	{
		bool		add = combo >= 2,
					parse = combo & 1;
		int64_t		nw = parse_ids(f[2 + combo], want, cap);
		int64_t		ng = 0;
		struct opus_error err = {0};
		enum opus_status st = opus_tokenizer_encode(tok, in, in_len, add, parse,
													got, cap, &ng, &err);
		bool		ok = st == OPUS_OK && ng == nw &&
			memcmp(got, want, (size_t) nw * sizeof(int32_t)) == 0;

		CHECK(ok, "%s: encode(add=%d, parse=%d) of %s differs (status %d %s)",
			  gname, add, parse, f[1], st, err.msg);
		if (!ok && n_reported++ < 12)
		{
			fprintf(stderr, "  input: \"%.*s\"\n", (int) in_len, in);
			show_ids("want", want, nw);
			show_ids("got ", got, ng);
		}
		if (combo == 0)
		{
			memcpy(ids00, want, (size_t) nw * sizeof(int32_t));
			n00 = nw;
		}
		if (combo == 3)
		{
			memcpy(ids11, want, (size_t) nw * sizeof(int32_t));
			n11 = nw;
		}
	}

	/* detokenization of the golden ids */
	for (int k = 0; k < 2; k++)
	{
		const char *field = f[6 + k];
		size_t		wl;
		char	   *wb = strcmp(field, "=") == 0 ? NULL : unhex(field, &wl);
		const char *w = wb ? wb : in;
		char	   *text = NULL;
		size_t		tl = 0;
		struct opus_error err = {0};
		enum opus_status st;

		if (!wb)
			wl = in_len;
		st = opus_tokenizer_decode(tok, k ? ids11 : ids00, k ? n11 : n00,
								   k == 1, &text, &tl, &err);
		CHECK(st == OPUS_OK && tl == wl && memcmp(text, w, wl) == 0,
			  "%s: decode(render_special=%d) of %s differs: got \"%.*s\"",
			  gname, k, f[1], (int) tl, text ? text : "");
		free(text);
		free(wb);
	}
	free(in);
	free(want);
	free(got);
	free(ids11);
	free(ids00);
}

/* Compare a tokenizer with one golden file; returns the number of cases. */
static int
run_golden(const struct opus_tokenizer *tok, const char *path)
{
	FILE	   *fp = fopen(path, "r");
	char	   *line = NULL;
	size_t		lcap = 0;
	ssize_t		ll;
	int			n_cases = 0;
	const char *gname = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	int32_t		nv = opus_tokenizer_n_vocab(tok);

	CHECK(fp != NULL, "cannot open %s (run from the repository root)", path);
	if (!fp)
		return 0;
	n_reported = 0;
	while ((ll = getline(&line, &lcap, fp)) > 0)
	{
		char	   *f[16];
		int			nf;

		if (line[ll - 1] == '\n')
			line[--ll] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		nf = split_tabs(line, f, 16);
		if (strcmp(f[0], "meta") == 0 && nf == 6)
		{
			CHECK(atoi(f[1]) == nv, "%s: n_vocab %d, want %s", gname, nv, f[1]);
			CHECK(atoi(f[2]) == opus_tokenizer_bos(tok), "%s: bos %d, want %s",
				  gname, opus_tokenizer_bos(tok), f[2]);
			CHECK(atoi(f[3]) == opus_tokenizer_eos(tok), "%s: eos %d, want %s",
				  gname, opus_tokenizer_eos(tok), f[3]);
			CHECK(atoi(f[4]) == opus_tokenizer_eot(tok), "%s: eot %d, want %s",
				  gname, opus_tokenizer_eot(tok), f[4]);
			CHECK(atoi(f[5]) == (int) opus_tokenizer_adds_bos(tok),
				  "%s: add_bos %d, want %s", gname,
				  (int) opus_tokenizer_adds_bos(tok), f[5]);
		}
		else if (strcmp(f[0], "eog") == 0 && nf == 2)
		{
			int32_t    *ids = malloc((size_t) nv * sizeof(int32_t));
			int64_t		n = parse_ids(f[1], ids, nv);
			int64_t		mine = 0;
			bool		all = true;

			for (int32_t i = 0; i < nv; i++)
				mine += opus_tokenizer_is_eog(tok, i);
			for (int64_t i = 0; i < n; i++)
				all &= opus_tokenizer_is_eog(tok, ids[i]);
			CHECK(all && mine == n, "%s: end-of-generation set differs (%lld vs %lld)",
				  gname, (long long) mine, (long long) n);
			free(ids);
		}
		else if (strcmp(f[0], "piece") == 0 && nf == 4)
		{
			int32_t		id = atoi(f[1]);

			for (int k = 0; k < 2; k++)
			{
				size_t		wl;
				char	   *w = unhex(f[2 + k], &wl);
				char		buf[512];
				int			n = opus_tokenizer_piece(tok, id, k == 0, buf, sizeof(buf));

				CHECK(n == (int) wl && memcmp(buf, w, wl) == 0,
					  "%s: piece(%d, special=%d) differs", gname, id, k == 0);
				free(w);
			}
		}
		else if (strcmp(f[0], "piecehash") == 0 && nf == 3)
		{
			for (int k = 0; k < 2; k++)
			{
				uint64_t	h = 0xcbf29ce484222325ull;
				char		want[32];

				for (int32_t id = 0; id < nv; id++)
				{
					char		buf[1024];
					int			n = opus_tokenizer_piece(tok, id, k == 0, buf, sizeof(buf));
					uint32_t	len = (uint32_t) n;
					uint8_t		le[4] = {len & 0xff, (len >> 8) & 0xff,
					(len >> 16) & 0xff, len >> 24};

					h = fnv1a64(h, le, 4);
					h = fnv1a64(h, buf, (size_t) (n < 1024 ? n : 1024));
				}
				snprintf(want, sizeof(want), "%016llx", (unsigned long long) h);
				CHECK(strcmp(want, f[1 + k]) == 0,
					  "%s: pieces of all tokens (special=%d) hash %s, want %s",
					  gname, k == 0, want, f[1 + k]);
			}
		}
		else if (strcmp(f[0], "case") == 0 && nf == 8)
		{
			check_case(tok, gname, f);
			n_cases++;
		}
		else
			CHECK(0, "%s: malformed line starting %.20s", gname, f[0]);
	}
	free(line);
	fclose(fp);
	CHECK(n_cases >= 300, "%s: only %d cases", gname, n_cases);
	printf("%s: %d cases\n", gname, n_cases);
	return n_cases;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t
rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t) (rng_state >> 16);
}

/* A random string of text-like fragments, sometimes with invalid bytes. */
static size_t
random_text(char *buf, size_t cap, bool allow_invalid)
{
	static const char *frags[] = {
		"a", "the", "The", " ", "  ", "\t", "\n", "\r\n", "1", "42", "2024",
		".", ",", "!", "?", "'s", "'", "\"", "(", ")", "{", "}", "<", ">",
		"caf\xc3\xa9", "\xc3\x9c", "\xe4\xb8\xad", "\xe6\x96\x87", "\xf0\x9f\x98\x80",
		"\xe2\x80\x94", "e\xcc\x81", "\xc2\xa0", "\xe3\x80\x80", "\xd9\x85\xd8\xb1",
		"<|im_end|>", "<|im_start|>", "_", "-", "x", "Q", "zz",
	};
	size_t		n = 0;
	int			parts = 1 + (int) (rng() % 24);

	for (int i = 0; i < parts; i++)
	{
		const char *f;
		size_t		fl;
		char		b;

		if (allow_invalid && rng() % 10 == 0)
		{
			b = (char) (0x80 + rng() % 128);
			f = &b;
			fl = 1;
		}
		else
		{
			f = frags[rng() % (sizeof(frags) / sizeof(frags[0]))];
			fl = strlen(f);
		}
		if (n + fl >= cap)
			break;
		memcpy(buf + n, f, fl);
		n += fl;
	}
	return n;
}

/*
 * Properties that need no oracle: byte-level BPE decodes back to the input
 * with every invalid byte replaced by U+FFFD (llama.cpp's decoder); a
 * SentencePiece vocabulary with byte fallback decodes valid UTF-8 back to
 * the exact input bytes (an invalid lead byte can swallow the U+2581 that
 * stands for a following space, in llama.cpp too, so SPM gets valid text).  Control-token text is not parsed, so it round-trips too.
 * (Text with SentencePiece user-defined tokens does not: llama.cpp prefixes
 * the text after one with a space, so the random text has none.)
 */
static void
test_roundtrip(const struct opus_tokenizer *t, bool spm, int iters)
{
	char		in[512];
	int32_t		ids[2048];
	int			bad = 0;

	for (int it = 0; it < iters; it++)
	{
		size_t		n = random_text(in, sizeof(in), !spm);
		int64_t		nt = 0;
		char	   *out = NULL;
		size_t		ol = 0;
		char		want[2048];
		size_t		wl = 0;
		bool		ok;

		if (spm)
		{
			memcpy(want, in, n);
			wl = n;
		}
		else
		{
			for (size_t off = 0; off < n;)
				wl += (size_t) opus_utf8_encode(opus_utf8_decode((const uint8_t *) in, n, &off),
												want + wl);
		}
		ok = opus_tokenizer_encode(t, in, n, false, false, ids, 2048, &nt, NULL) == OPUS_OK &&
			opus_tokenizer_decode(t, ids, nt, false, &out, &ol, NULL) == OPUS_OK &&
			ol == wl && memcmp(out, want, wl) == 0;
		if (!ok && bad++ < 5)
			fprintf(stderr, "  round trip failed for \"%.*s\" -> \"%.*s\"\n",
					(int) n, in, (int) ol, out ? out : "");
		free(out);
	}
	CHECK(bad == 0, "%d of %d random strings did not round-trip (%s)", bad, iters,
		  spm ? "spm" : "bpe");
}

/* GGUF encoding of a string array (element type, count, then strings). */
static size_t
str_array(uint8_t *buf, const char *const *items, int n)
{
	uint32_t	et = OPUS_GGUF_STRING;
	uint64_t	cnt = (uint64_t) n;
	size_t		off = 0;

	memcpy(buf + off, &et, 4);
	off += 4;
	memcpy(buf + off, &cnt, 8);
	off += 8;
	for (int i = 0; i < n; i++)
	{
		uint64_t	l = strlen(items[i]);

		memcpy(buf + off, &l, 8);
		off += 8;
		memcpy(buf + off, items[i], l);
		off += l;
	}
	return off;
}

/* Build a tiny vocabulary GGUF and try to load it; returns the status. */
static enum opus_status
load_synthetic(const char *model, const char *pre, const char *const *tokens,
			   int n_tokens, int n_scores, bool with_merges, char *msg)
{
	struct opus_gguf_writer *w = opus_gguf_writer_new(OPUS_GGUF_DEFAULT_ALIGNMENT);
	uint8_t		buf[4096];
	size_t		len;
	char		path[] = "/tmp/opus_tok_synth_XXXXXX";
	int			fd = mkstemp(path);
	struct opus_gguf *g = NULL;
	struct opus_tokenizer *t = NULL;
	struct opus_error err = {0};
	enum opus_status st;

	close(fd);
	opus_gguf_writer_add_str(w, "tokenizer.ggml.model", model, NULL);
	if (pre)
		opus_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre, NULL);
	len = str_array(buf, tokens, n_tokens);
	opus_gguf_writer_add_raw(w, "tokenizer.ggml.tokens", OPUS_GGUF_ARRAY, buf, len, NULL);
	if (n_scores >= 0)
	{
		uint32_t	et = OPUS_GGUF_FLOAT32;
		uint64_t	cnt = (uint64_t) n_scores;

		memcpy(buf, &et, 4);
		memcpy(buf + 4, &cnt, 8);
		for (int i = 0; i < n_scores; i++)
		{
			float		v = (float) -i;

			memcpy(buf + 12 + 4 * i, &v, 4);
		}
		opus_gguf_writer_add_raw(w, "tokenizer.ggml.scores", OPUS_GGUF_ARRAY, buf,
								 12 + 4 * (size_t) n_scores, NULL);
	}
	if (with_merges)
	{
		static const char *const merges[] = {"a b", "ab c"};

		len = str_array(buf, merges, 2);
		opus_gguf_writer_add_raw(w, "tokenizer.ggml.merges", OPUS_GGUF_ARRAY, buf, len, NULL);
	}
	opus_gguf_writer_write(w, path, NULL);
	opus_gguf_writer_free(w);
	st = opus_gguf_open(path, &g, &err);
	if (st == OPUS_OK)
	{
		st = opus_tokenizer_load(g, &t, &err);
		opus_gguf_close(g);
	}
	unlink(path);
	if (st == OPUS_OK)
	{
		/* "abc" merges to one token with the BPE vocabulary */
		int32_t		ids[8];
		int64_t		n = 0;

		opus_tokenizer_encode(t, "abc", 3, false, false, ids, 8, &n, NULL);
		snprintf(msg, 64, "%lld:%d", (long long) n, n > 0 ? ids[0] : -1);
		opus_tokenizer_free(t);
	}
	else
		snprintf(msg, 64, "%.60s", err.msg);
	return st;
}

static void
test_load_errors(void)
{
	static const char *const bpe[] = {"a", "b", "c", "ab", "abc"};
	static const char *const dup[] = {"a", "b", "a"};
	char		msg[64];

	CHECK(load_synthetic("gpt2", "gpt-2", bpe, 5, -1, true, msg) == OPUS_OK &&
		  strcmp(msg, "1:4") == 0, "tiny BPE vocabulary: %s", msg);
	CHECK(load_synthetic("gpt2", NULL, bpe, 5, -1, true, msg) == OPUS_OK,
		  "missing pre-tokenizer is not the default one: %s", msg);
	CHECK(load_synthetic("t5", NULL, bpe, 5, -1, true, msg) == OPUS_ERR_UNSUPPORTED,
		  "tokenizer model t5 accepted");
	CHECK(load_synthetic("bert", NULL, bpe, 5, -1, true, msg) == OPUS_ERR_FORMAT,
		  "WordPiece vocabulary without [UNK] accepted");
	CHECK(load_synthetic("gpt2", "no-such-pre", bpe, 5, -1, true, msg) == OPUS_ERR_UNSUPPORTED,
		  "unknown pre-tokenizer accepted");
	CHECK(load_synthetic("gpt2", "gpt-2", bpe, 5, -1, false, msg) == OPUS_ERR_FORMAT,
		  "BPE without merges accepted");
	CHECK(load_synthetic("gpt2", "gpt-2", dup, 3, -1, true, msg) == OPUS_ERR_FORMAT,
		  "duplicate tokens accepted");
	CHECK(load_synthetic("llama", NULL, bpe, 5, 3, false, msg) == OPUS_ERR_FORMAT,
		  "short scores array accepted");
	CHECK(load_synthetic("llama", NULL, bpe, 5, 5, false, msg) == OPUS_OK,
		  "tiny SPM vocabulary: %s", msg);
}

/* Copy the model's metadata with tokenizer.ggml.pre replaced, to a temp file. */
static bool
write_variant(const struct opus_gguf *g, const char *pre, char *path)
{
	struct opus_gguf_writer *w = opus_gguf_writer_new(OPUS_GGUF_DEFAULT_ALIGNMENT);
	struct opus_error err = {0};
	bool		ok = w != NULL;
	int			fd;

	for (int64_t i = 0; ok && i < opus_gguf_n_kv(g); i++)
	{
		const char *key = opus_gguf_kv_key(g, i);
		const void *data;
		size_t		size;

		if (strcmp(key, "tokenizer.ggml.pre") == 0)
			continue;
		opus_gguf_kv_raw(g, i, &data, &size);
		ok = opus_gguf_writer_add_raw(w, key, opus_gguf_kv_type(g, i), data,
									  size, &err) == OPUS_OK;
	}
	ok = ok && opus_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre, &err) == OPUS_OK;
	strcpy(path, "/tmp/opus_tok_variant_XXXXXX");
	fd = mkstemp(path);
	if (fd >= 0)
		close(fd);
	ok = ok && fd >= 0 && opus_gguf_writer_write(w, path, &err) == OPUS_OK;
	CHECK(ok, "writing variant %s: %s", pre, err.msg);
	opus_gguf_writer_free(w);
	return ok;
}

static struct opus_tokenizer *
load_tok(const char *path, struct opus_gguf **gout)
{
	struct opus_gguf *g = NULL;
	struct opus_tokenizer *t = NULL;
	struct opus_error err = {0};

	CHECK(opus_gguf_open(path, &g, &err) == OPUS_OK, "open %s: %s", path, err.msg);
	if (!g)
		return NULL;
	CHECK(opus_tokenizer_load(g, &t, &err) == OPUS_OK, "tokenizer %s: %s", path, err.msg);
	if (gout)
		*gout = g;
	else
		opus_gguf_close(g);
	return t;
}

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void
test_speed(const struct opus_tokenizer *t)
{
	/* a prompt of mixed prose and code, roughly 2,000 tokens */
	static const char *parts[] = {
		"The quick brown fox jumps over the lazy dog. ",
		"def f(x):\n    return x * 2  # doubles\n",
		"Numbers like 1234567 and 3.14159 appear too. ",
		"<|im_start|>user\nCan you help me?<|im_end|>\n",
		"Unicode: caf\xc3\xa9, \xe4\xb8\xad\xe6\x96\x87, \xf0\x9f\x98\x80. ",
	};
	char	   *text = malloc(20000);
	size_t		len = 0;
	int32_t    *ids = malloc(8192 * sizeof(int32_t));
	int64_t		n = 0;
	double		best = 1e9;

	for (int i = 0; len < 5800; i++)
	{
		size_t		pl = strlen(parts[i % 5]);

		memcpy(text + len, parts[i % 5], pl);
		len += pl;
	}
	for (int rep = 0; rep < 5; rep++)
	{
		double		t0 = now_ms();

		opus_tokenizer_encode(t, text, len, true, true, ids, 8192, &n, NULL);
		t0 = now_ms() - t0;
		if (t0 < best)
			best = t0;
	}
	printf("encode: %lld tokens from %zu bytes in %.3f ms (this build)\n",
		   (long long) n, len, best);
	CHECK(n >= 1800 && n <= 3000, "speed prompt has %lld tokens", (long long) n);
	/* 5 ms is the budget for the -O2 build; sanitizers cost up to ~10x */
	CHECK(best < 50.0, "encoding took %.3f ms", best);
	free(text);
	free(ids);
}

static void
test_api(const struct opus_tokenizer *t)
{
	int32_t		ids[4];
	int64_t		n = -1;
	struct opus_error err = {0};
	char	   *text = NULL;
	size_t		len;
	int32_t		bad[2] = {1, 1 << 30};
	char		buf[4];

	/* capacity: the count needed is reported */
	CHECK(opus_tokenizer_encode(t, "Hello world, how are you?", 25, false, false,
								ids, 2, &n, &err) == OPUS_ERR_CAPACITY,
		  "small buffer is not OPUS_ERR_CAPACITY");
	CHECK(n > 2, "needed count not reported (%lld)", (long long) n);
	CHECK(opus_tokenizer_encode(t, "", 0, false, false, ids, 4, &n, &err) == OPUS_OK &&
		  n == 0, "empty text gives %lld tokens", (long long) n);
	CHECK(opus_tokenizer_decode(t, bad, 2, false, &text, &len, &err) == OPUS_ERR_TOKENIZE,
		  "invalid id accepted by decode");
	free(text);
	CHECK(opus_tokenizer_piece(t, -1, true, buf, 4) == -1, "piece(-1) accepted");
	CHECK(opus_tokenizer_piece(t, opus_tokenizer_n_vocab(t), true, buf, 4) == -1,
		  "piece(n_vocab) accepted");
	CHECK(!opus_tokenizer_is_eog(t, -5) && !opus_tokenizer_is_eog(t, 1 << 30),
		  "is_eog accepts an invalid id");
	if (opus_tokenizer_eos(t) >= 0)
		CHECK(opus_tokenizer_is_eog(t, opus_tokenizer_eos(t)), "eos is not eog");
}

/* Feed bytes one at a time or in odd chunks; output must equal the input. */
static void
test_utf8_stream(void)
{
	static const char *inputs[] = {
		"plain ascii",
		"caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80!",
		"\xff bad \xc3( \xed\xa0\x80 \xf0\x9f\x98",	/* invalid + truncated tail */
		"\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac",
	};

	for (size_t k = 0; k < sizeof(inputs) / sizeof(inputs[0]); k++)
	{
		const char *in = inputs[k];
		int			n = (int) strlen(in);

		for (int chunk = 1; chunk <= 5; chunk++)
		{
			struct opus_utf8_stream s = {0};
			char		out[256];
			int			w = 0;
			bool		boundary_ok = true;

			for (int i = 0; i < n; i += chunk)
			{
				int			c = i + chunk <= n ? chunk : n - i;
				int			got = opus_utf8_stream_feed(&s, in + i, c, out + w);

				/* never emit a lead byte whose sequence is incomplete */
				if (got > 0 && (uint8_t) out[w + got - 1] >= 0xc2 &&
					(uint8_t) out[w + got - 1] <= 0xf4 && i + c < n &&
					((uint8_t) in[i + c] & 0xc0) == 0x80)
					boundary_ok = false;
				w += got;
			}
			w += opus_utf8_stream_flush(&s, out + w);
			CHECK(w == n && memcmp(out, in, (size_t) n) == 0,
				  "utf8 stream changed input %zu (chunk %d)", k, chunk);
			CHECK(boundary_ok, "utf8 stream split a character (input %zu, chunk %d)",
				  k, chunk);
		}
	}

	/* a 4-byte character fed byte by byte comes out only when complete */
	{
		struct opus_utf8_stream s = {0};
		char		out[16];
		const char *e = "\xf0\x9f\x98\x80";

		CHECK(opus_utf8_stream_feed(&s, e, 1, out) == 0, "emitted a partial char");
		CHECK(opus_utf8_stream_feed(&s, e + 1, 1, out) == 0, "emitted a partial char");
		CHECK(opus_utf8_stream_feed(&s, e + 2, 1, out) == 0, "emitted a partial char");
		CHECK(opus_utf8_stream_feed(&s, e + 3, 1, out) == 4 && memcmp(out, e, 4) == 0,
			  "complete char not emitted");
		CHECK(opus_utf8_stream_flush(&s, out) == 0, "stream not empty");
	}
}

/* WordPiece edge cases on the small vocabulary (ids from wpm-vocab.gguf). */
static void
test_wpm_edges(const struct opus_tokenizer *t)
{
	static const struct
	{
		const char *in;
		int			n;			/* tokens with add_special */
	}			cases[] = {
		{"", 2},				/* [CLS] [SEP] */
		{" \t\n ", 2},		/* whitespace only */
		{"\x01\x7f\xef\xbb\xbf", 2},	/* controls, BOM: dropped */
		{"\xff\xfe", 2},		/* invalid UTF-8: dropped */
		{"!!!", 5},				/* each punctuation mark a word */
		{"\xe4\xb8\xad\xe6\x96\x87", 4},	/* CJK: one word each */
	};
	int32_t		ids[64];
	int64_t		n;
	struct opus_error err = {0};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		CHECK(opus_tokenizer_encode(t, cases[i].in, strlen(cases[i].in), true, false,
									ids, 64, &n, &err) == OPUS_OK, "wpm encode: %s", err.msg);
		CHECK(n == cases[i].n, "wpm case %zu: %lld tokens, want %d", i, (long long) n,
			  cases[i].n);
		CHECK(n >= 2 && ids[0] == opus_tokenizer_bos(t), "wpm case %zu: no [CLS] first", i);
	}
	/* a word with a character outside the vocabulary is one [UNK] */
	CHECK(opus_tokenizer_encode(t, "abc\xe2\x98\x83" "def", 9, false, false, ids, 64, &n,
								&err) == OPUS_OK && n == 1, "wpm: unknown char word: %lld", (long long) n);
	/* a very long word: no limit, no crash */
	{
		size_t		L = 100000;
		char	   *w = malloc(L);
		int32_t    *big = malloc(L * sizeof(int32_t));

		memset(w, 'a', L);
		CHECK(opus_tokenizer_encode(t, w, L, false, false, big, (int64_t) L, &n, &err) == OPUS_OK,
			  "wpm long word: %s", err.msg);
		CHECK(n >= 1, "wpm long word: %lld tokens", (long long) n);
		free(w);
		free(big);
	}
}

int
main(void)
{
	const char *model = unit_model_path();

	setvbuf(stdout, NULL, _IONBF, 0);
	test_utf8_stream();
	test_load_errors();

	/* SentencePiece: a small committed vocabulary */
	{
		struct opus_tokenizer *t = load_tok(GOLDEN_DIR "spm-vocab.gguf", NULL);

		if (t)
		{
			run_golden(t, GOLDEN_DIR "spm.golden");
			test_api(t);
			test_roundtrip(t, true, 3000);
			opus_tokenizer_free(t);
		}
	}

	/* The vocabulary's identity: the same file gives the same hash, another differs. */
	{
		struct opus_tokenizer *a = load_tok(GOLDEN_DIR "spm-vocab.gguf", NULL);
		struct opus_tokenizer *b = load_tok(GOLDEN_DIR "spm-vocab.gguf", NULL);
		struct opus_tokenizer *c = load_tok(GOLDEN_DIR "wpm-vocab.gguf", NULL);

		if (a && b && c)
		{
			CHECK(opus_tokenizer_vocab_hash(a) == opus_tokenizer_vocab_hash(b),
				  "one vocabulary, two hashes");
			CHECK(opus_tokenizer_vocab_hash(a) != opus_tokenizer_vocab_hash(c),
				  "two vocabularies, one hash");
		}
		opus_tokenizer_free(a);
		opus_tokenizer_free(b);
		opus_tokenizer_free(c);
	}

	/* WordPiece: a small committed vocabulary, and the real one if present */
	{
		struct opus_tokenizer *t = load_tok(GOLDEN_DIR "wpm-vocab.gguf", NULL);
		const char *mini = getenv("OPUS_MINILM");

		if (t)
		{
			run_golden(t, GOLDEN_DIR "wpm.golden");
			test_api(t);
			test_wpm_edges(t);
			opus_tokenizer_free(t);
		}
		if (!mini || !*mini)
			mini = "models/all-MiniLM-L6-v2.gguf";
		if (access(mini, R_OK) == 0 && (t = load_tok(mini, NULL)) != NULL)
		{
			run_golden(t, GOLDEN_DIR "minilm.golden");
			test_speed(t);
			opus_tokenizer_free(t);
		}
		else
			printf("skipping minilm.golden: %s absent (make model-minilm)\n", mini);
	}

	if (!model || access(model, R_OK) != 0)
	{
		printf("skipping model tests: OPUS_MODEL not set or unreadable\n");
		return UNIT_DONE();
	}

	{
		struct opus_gguf *g = NULL;
		struct opus_tokenizer *t = load_tok(model, &g);
		static const char *pres[] = {"llama-bpe", "qwen2", "gpt-2", "default"};

		if (!t)
			return UNIT_DONE();
		run_golden(t, GOLDEN_DIR "smollm.golden");
		test_api(t);
		test_roundtrip(t, false, 3000);
		test_speed(t);
		opus_tokenizer_free(t);

		for (size_t i = 0; i < sizeof(pres) / sizeof(pres[0]); i++)
		{
			char		path[64];
			char		golden[128];
			struct opus_tokenizer *v;

			if (!write_variant(g, pres[i], path))
				continue;
			v = load_tok(path, NULL);
			unlink(path);
			if (!v)
				continue;
			snprintf(golden, sizeof(golden), GOLDEN_DIR "smollm-as-%s.golden", pres[i]);
			run_golden(v, golden);
			opus_tokenizer_free(v);
		}
		opus_gguf_close(g);
	}
	return UNIT_DONE();
}
