/*
 * test_chat.c - chat template detection and rendering against llama.cpp.
 *
 * test/golden/chat/chat.golden (made by gen_chat_golden.py with llama.cpp's
 * llama_chat_apply_template) lists template sources with the family
 * llama.cpp detects, conversations, and llama.cpp's rendering of each
 * conversation with and without the generation prompt.  Detection must give
 * the same family and rendering the same bytes.  Run from the repository
 * root.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "unit.h"

#define GOLDEN "test/golden/chat/chat.golden"
#define MAX_TMPL 64
#define MAX_CONV 32
#define MAX_MSGS 16

static int
hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 0;
}

/* Decode n hex digits ("-" is empty) into a malloc'd NUL-terminated string. */
static char *
unhex(const char *s, size_t n, size_t *len)
{
	char	   *out = malloc(n / 2 + 1);

	*len = 0;
	if (!(n == 1 && s[0] == '-'))
		for (size_t i = 0; i + 1 < n; i += 2)
			out[(*len)++] = (char) (hexval(s[i]) * 16 + hexval(s[i + 1]));
	out[*len] = '\0';
	return out;
}

struct conv
{
	int			n;
	struct opus_chat_msg m[MAX_MSGS];
};

static void
parse_msgs(char *fields, struct conv *c)
{
	char	   *save = NULL;

	c->n = 0;
	for (char *tok = strtok_r(fields, " ", &save); tok && c->n < MAX_MSGS;
		 tok = strtok_r(NULL, " ", &save))
	{
		char	   *eq = strchr(tok, '=');
		size_t		len;

		if (!eq)
			continue;
		*eq = '\0';
		c->m[c->n].role = strdup(tok);
		c->m[c->n].content = unhex(eq + 1, strlen(eq + 1), &len);
		c->n++;
	}
}

static void
test_golden(void)
{
	FILE	   *fp = fopen(GOLDEN, "r");
	char	   *line = NULL;
	size_t		cap = 0;
	ssize_t		ll;
	enum opus_chat_template fam[MAX_TMPL] = {0};
	struct conv conv[MAX_CONV] = {0};
	int			n_out = 0,
				n_tmpl = 0;

	CHECK(fp != NULL, "cannot open %s (run from the repository root)", GOLDEN);
	if (!fp)
		return;
	while ((ll = getline(&line, &cap, fp)) > 0)
	{
		char	   *f[6] = {0};
		int			nf = 0;

		if (line[ll - 1] == '\n')
			line[--ll] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		f[nf++] = line;
		for (char *p = line; *p && nf < 6; p++)
			if (*p == '\t')
			{
				*p = '\0';
				f[nf++] = p + 1;
			}

		if (strcmp(f[0], "msgs") == 0 && nf >= 3)
		{
			int			id = atoi(f[1]);

			if (id >= 0 && id < MAX_CONV)
				parse_msgs(f[2], &conv[id]);
		}
		else if (strcmp(f[0], "tmpl") == 0 && nf >= 4)
		{
			int			id = atoi(f[1]);
			size_t		len;
			char	   *src = unhex(f[3], strlen(f[3]), &len);
			enum opus_chat_template want = strcmp(f[2], "unknown") == 0 ?
			OPUS_CHAT_UNKNOWN : opus_chat_from_name(f[2]);
			enum opus_chat_template got = opus_chat_detect(src, len);

			CHECK(strcmp(f[2], "unknown") == 0 || want != OPUS_CHAT_UNKNOWN,
				  "family name %s not known", f[2]);
			CHECK(got == want, "template %d (%s): detected %s, want %s", id,
				  nf > 4 ? f[4] : "", opus_chat_name(got), f[2]);
			if (id >= 0 && id < MAX_TMPL)
				fam[id] = want;
			n_tmpl++;
			free(src);
		}
		else if (strcmp(f[0], "out") == 0 && nf >= 5)
		{
			int			ti = atoi(f[1]),
						mi = atoi(f[2]);
			bool		gen = atoi(f[3]) != 0;
			size_t		wl,
						gl = 0;
			char	   *want = unhex(f[4], strlen(f[4]), &wl);
			char	   *got = NULL;
			struct opus_error err = {0};
			enum opus_status st;

			if (ti < 0 || ti >= MAX_TMPL || mi < 0 || mi >= MAX_CONV)
			{
				CHECK(0, "bad out line");
				free(want);
				continue;
			}
			st = opus_chat_render(fam[ti], conv[mi].m, conv[mi].n, gen, &got, &gl, &err);
			CHECK(st == OPUS_OK && gl == wl && memcmp(got, want, wl) == 0 &&
				  got[gl] == '\0',
				  "render %s conversation %d gen=%d: status %d (%s)\n  got:  \"%s\"\n  want: \"%s\"",
				  opus_chat_name(fam[ti]), mi, gen, st, err.msg, got ? got : "", want);
			free(got);
			free(want);
			n_out++;
		}
		else
			CHECK(0, "malformed golden line: %.20s", f[0]);
	}
	free(line);
	fclose(fp);
	for (int i = 0; i < MAX_CONV; i++)
		for (int k = 0; k < conv[i].n; k++)
		{
			free((char *) conv[i].m[k].role);
			free((char *) conv[i].m[k].content);
		}
	printf("chat.golden: %d templates, %d renderings\n", n_tmpl, n_out);
	CHECK(n_tmpl >= 20 && n_out >= 200, "golden too small (%d, %d)", n_tmpl, n_out);
}

static void
test_errors(void)
{
	struct opus_chat_msg ok[1] = {{"user", "hi", NULL}};
	struct opus_chat_msg bad_role[2] = {{"user", "hi", NULL}, {"tool", "x", NULL}};
	struct opus_chat_msg null_content[1] = {{"user", NULL, NULL}};
	char	   *out = (char *) 1;
	size_t		len = 7;
	struct opus_error err = {0};

	CHECK(opus_chat_render(OPUS_CHAT_UNKNOWN, ok, 1, true, &out, &len, &err) ==
		  OPUS_ERR_UNSUPPORTED && out == NULL,
		  "unknown template not OPUS_ERR_UNSUPPORTED");
	CHECK(opus_chat_render(OPUS_CHAT__COUNT, ok, 1, true, &out, &len, &err) ==
		  OPUS_ERR_UNSUPPORTED, "out-of-range template accepted");
	CHECK(opus_chat_render(OPUS_CHAT_CHATML, ok, 0, true, &out, &len, &err) ==
		  OPUS_ERR_TEMPLATE, "empty message list accepted");
	CHECK(opus_chat_render(OPUS_CHAT_CHATML, bad_role, 2, true, &out, &len, &err) ==
		  OPUS_ERR_TEMPLATE && strstr(err.msg, "tool") != NULL,
		  "role \"tool\" accepted (%s)", err.msg);
	CHECK(opus_chat_render(OPUS_CHAT_LLAMA3, null_content, 1, true, &out, &len, &err) ==
		  OPUS_ERR_TEMPLATE, "NULL content accepted");

	CHECK(opus_chat_detect(NULL, 0) == OPUS_CHAT_UNKNOWN, "NULL template detected");
	CHECK(opus_chat_detect("", 0) == OPUS_CHAT_UNKNOWN, "empty template detected");
	/* the length is honoured: the marker lies beyond len */
	CHECK(opus_chat_detect("xx<|im_start|>", 2) == OPUS_CHAT_UNKNOWN,
		  "detect read past len");
	CHECK(opus_chat_from_name("no-such") == OPUS_CHAT_UNKNOWN, "bogus name known");
	CHECK(opus_chat_from_name(NULL) == OPUS_CHAT_UNKNOWN, "NULL name known");
	for (int t = 1; t < OPUS_CHAT__COUNT; t++)
		CHECK((int) opus_chat_from_name(opus_chat_name((enum opus_chat_template) t)) == t,
			  "name of template %d does not round-trip", t);
	CHECK(strcmp(opus_chat_name((enum opus_chat_template) 999), "unknown") == 0,
		  "bad enum has a name");

	/* the documented fallback renders ChatML */
	{
		char	   *s = NULL;

		CHECK(opus_chat_render(OPUS_CHAT_CHATML, ok, 1, true, &s, &len, &err) == OPUS_OK &&
			  strcmp(s, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n") == 0 &&
			  len == strlen(s), "chatml fallback rendering");
		free(s);
	}
}

int
main(void)
{
	test_golden();
	test_errors();
	return UNIT_DONE();
}
