/*
 * fuzz_chat.c - libFuzzer target for the chat-template renderer (chat.c).
 *
 * Input layout: byte 0 picks the template (values below OPUS_CHAT__COUNT
 * name one directly, others detect it from the first segment) and byte 1
 * the flags (bit 0: add_generation_prompt).  The rest is split at NUL bytes
 * into segments.  In detect mode the first segment is a template source,
 * handed (as an exact-size heap copy, not NUL-terminated) to
 * opus_chat_detect() and, NUL-terminated, to opus_chat_from_name(); an
 * UNKNOWN result falls back to ChatML as the engine does (serve.c).  Each
 * further segment is a message: its first byte picks the role (system,
 * user, assistant, or the segment's own text as a bogus role), the rest is
 * the content.
 *
 * Checks beyond ASan/UBSan: a render either fails with OPUS_ERR_TEMPLATE /
 * OPUS_ERR_UNSUPPORTED and leaves *out NULL, or succeeds with a
 * NUL-terminated buffer of exactly *out_len bytes; every message's content
 * (trimmed, for the templates that trim) occurs in the output; and
 * opus_chat_name() / opus_chat_from_name() round-trip.
 *
 * Build and run: `make fuzz` (test/fuzz/README); replay without libFuzzer:
 * `make fuzz-regress`.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"

#define MAX_MSGS 64

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const roles[] = {"system", "user", "assistant"};

static volatile uint64_t sink;

/* memmem for the content check (contents never hold NUL here). */
static int
contains(const char *hay, size_t hn, const char *needle, size_t nn)
{
	if (nn == 0)
		return 1;
	if (nn > hn)
		return 0;
	for (size_t i = 0; i + nn <= hn; i++)
		if (hay[i] == needle[0] && memcmp(hay + i, needle, nn) == 0)
			return 1;
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum opus_chat_template t;
	bool		gen;
	struct opus_chat_msg msgs[MAX_MSGS];
	char	   *copies[MAX_MSGS + 1];
	int			n_copies = 0;
	int			n = 0;
	size_t		off;
	char	   *out = NULL;
	size_t		out_len = 12345;
	struct opus_error err = {0};
	enum opus_status st;

	if (size < 2)
		return 0;
	gen = data[1] & 1;
	off = 2;

	/* name table round trip */
	for (int i = 1; i < OPUS_CHAT__COUNT; i++)
		if ((int) opus_chat_from_name(opus_chat_name((enum opus_chat_template) i)) != i)
			abort();

	if (data[0] < OPUS_CHAT__COUNT)
		t = (enum opus_chat_template) data[0];
	else
	{
		const uint8_t *end = memchr(data + off, 0, size - off);
		size_t		len = end ? (size_t) (end - (data + off)) : size - off;
		char	   *src = malloc(len ? len : 1);
		char	   *z = malloc(len + 1);

		if (!src || !z)
			abort();
		memcpy(src, data + off, len);
		memcpy(z, data + off, len);
		z[len] = '\0';
		t = opus_chat_detect(src, len);
		if ((int) t < 0 || t >= OPUS_CHAT__COUNT)
			abort();
		sink += opus_chat_from_name(z);
		sink += strlen(opus_chat_name(t));
		free(src);
		free(z);
		if (t == OPUS_CHAT_UNKNOWN)
			t = OPUS_CHAT_CHATML;
		off += len + (end ? 1 : 0);
	}

	while (off < size && n < MAX_MSGS)
	{
		const uint8_t *end = memchr(data + off, 0, size - off);
		size_t		len = end ? (size_t) (end - (data + off)) : size - off;
		char	   *seg = malloc(len + 1);
		uint8_t		sel;

		if (!seg)
			abort();
		memcpy(seg, data + off, len);
		seg[len] = '\0';
		copies[n_copies++] = seg;
		sel = len > 0 ? (uint8_t) seg[0] : 0;
		if (sel % 8 < 3 || len == 0)
			msgs[n].role = roles[sel % 8 % 3];
		else
			msgs[n].role = seg + 1; /* whatever text follows: a bogus role */
		msgs[n].content = len > 0 ? seg + 1 : seg;
		msgs[n].members = NULL;
		n++;
		off += len + (end ? 1 : 0);
	}

	st = opus_chat_render(t, msgs, n, gen, &out, &out_len, &err);
	if (st == OPUS_OK)
	{
		if (out == NULL || out[out_len] != '\0' || strlen(out) != out_len)
			abort();
		/* gemma drops a system message no user turn follows */
		for (int i = 0; t != OPUS_CHAT_GEMMA && i < n; i++)
		{
			const char *c = msgs[i].content;
			size_t		a = 0,
						b = strlen(c);

			/* some templates trim: look for the trimmed content */
			while (a < b && strchr(" \t\n\v\f\r", c[a]))
				a++;
			while (b > a && strchr(" \t\n\v\f\r", c[b - 1]))
				b--;
			if (!contains(out, out_len, c + a, b - a))
				abort();
		}
		sink += out_len ? (uint8_t) out[out_len - 1] : 0;
		free(out);
	}
	else
	{
		if (out != NULL || out_len != 0)
			abort();
		if (st != OPUS_ERR_TEMPLATE && st != OPUS_ERR_UNSUPPORTED && st != OPUS_ERR_NOMEM)
			abort();
	}
	for (int i = 0; i < n_copies; i++)
		free(copies[i]);
	return 0;
}
