/*
 * chat_literal.c - a chat prompt whose user text stays text.
 *
 * Chat message contents, tool definitions and a message's other members
 * (tool_calls, tool_call_id, ...) are data: special-token text in them
 * ("<|im_end|>") must not close the turn and open one the user forged.  The
 * rendered prompt is tokenized with special tokens parsed (the template's
 * markup needs them) except in the byte spans found here, which are
 * tokenized as plain text (opus_tokenizer_encode_spans).
 *
 * How the spans are found, only when some user text has control-token text
 * (opus_tokenizer_find_control) and the session has not opted out
 * (opus.allow_special_tokens):
 *
 *   - contents: the messages are rendered a second time with a marker in
 *     place of each content (CONTENT_MARK i); walking the marked rendering
 *     beside the real one gives where each content (as it is, or trimmed as
 *     templates' `| trim` does) lies;
 *   - tools and members (JSON, which templates print through tojson, or
 *     member by member): in the JSON text, each occurrence of a control
 *     token's text (as JSON writes it inside a string) is replaced by a
 *     marker JSON_MARK_OPEN k JSON_MARK_CLOSE (two Unicode noncharacters
 *     around a number: tojson, trim, slicing whole strings and case changes
 *     leave them alone); in the real rendering the occurrence appears there
 *     as it is (a span) or JSON-escaped (then it is not the token's text).
 *
 * Anything else (a template that changes the text around a marker, cuts one
 * in two, or renders differently because of it) leaves the renderings
 * unmatched: an error (OPUS_ERR_TEMPLATE), never a prompt with forged
 * tokens.
 */
#include "text/chat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "text/jinja.h"
#include "text/tokenizer.h"

#define CONTENT_MARK "\x1fopus-content-"
#define JSON_MARK_OPEN "\xef\xb7\x90"	/* U+FDD0 */
#define JSON_MARK_CLOSE "\xef\xb7\x91"	/* U+FDD1 */
#define JSON_MARK_LEN 3

/* One control-token occurrence taken out of tools / members JSON. */
struct piece
{
	const char *raw;			/* the token's text */
	size_t		raw_len;
	char	   *esc;			/* as a JSON string writes it (malloc'd) */
	size_t		esc_len;
};

struct pieces
{
	struct piece *v;
	int			n,
				cap;
};

struct spans
{
	struct opus_text_span *v;
	int			n,
				cap;
};

static bool
spans_push(struct spans *sp, size_t off, size_t len)
{
	if (sp->n == sp->cap)
	{
		int			cap = sp->cap ? sp->cap * 2 : 16;
		struct opus_text_span *v = realloc(sp->v, (size_t) cap * sizeof(*v));

		if (!v)
			return false;
		sp->v = v;
		sp->cap = cap;
	}
	sp->v[sp->n].off = off;
	sp->v[sp->n].len = len;
	sp->n++;
	return true;
}

static bool
is_jinja_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Has the JSON text control-token text (as JSON writes it)? */
static bool
json_has_control(const struct opus_tokenizer *tok, const char *json, size_t len)
{
	int32_t		n = opus_tokenizer_n_special(tok);

	for (int32_t i = 0; i < n; i++)
	{
		size_t		tl;
		const char *tt = opus_tokenizer_control_text(tok, i, &tl);
		size_t		need;
		char	   *q;
		bool		found;

		if (!tt || tl > len)
			continue;
		if (memmem(json, len, tt, tl))
			return true;
		/* its escaped form, when JSON escapes some of its bytes */
		need = opus_jinja_json_quote(tt, tl, NULL, 0);
		if (need == tl + 2)
			continue;
		q = malloc(need + 1);
		if (!q)
			return true;		/* marking will fail with out-of-memory */
		opus_jinja_json_quote(tt, tl, q, need + 1);
		found = memmem(json, len, q + 1, need - 2) != NULL;
		free(q);
		if (found)
			return true;
	}
	return false;
}

/*
 * JSON text with each occurrence of control-token text (JSON-escaped, as it
 * appears inside a string) replaced by a marker numbered in pc; the
 * longest token wins where several start at one place.  *out malloc'd,
 * NUL-terminated.  False for out-of-memory.
 */
static bool
mark_json(const struct opus_tokenizer *tok, const char *json, size_t len,
		  struct pieces *pc, char **out)
{
	int32_t		n = opus_tokenizer_n_special(tok);
	char	  **esc = calloc((size_t) (n > 0 ? n : 1), sizeof(char *));
	size_t	   *esc_len = calloc((size_t) (n > 0 ? n : 1), sizeof(size_t));
	struct opus_buf b = {0};
	bool		ok = esc && esc_len;

	for (int32_t i = 0; ok && i < n; i++)
	{
		size_t		tl;
		const char *tt = opus_tokenizer_control_text(tok, i, &tl);
		size_t		need;

		if (!tt)
			continue;
		need = opus_jinja_json_quote(tt, tl, NULL, 0);
		if (!(esc[i] = malloc(need + 1)))
			ok = false;
		else
		{
			opus_jinja_json_quote(tt, tl, esc[i], need + 1);
			memmove(esc[i], esc[i] + 1, need - 2);
			esc[i][need - 2] = '\0';
			esc_len[i] = need - 2;
		}
	}
	for (size_t p = 0; ok && p < len;)
	{
		int32_t		best = -1;

		for (int32_t i = 0; i < n; i++)
			if (esc[i] && esc_len[i] > 0 && esc_len[i] <= len - p &&
				memcmp(json + p, esc[i], esc_len[i]) == 0 &&
				(best < 0 || esc_len[i] > esc_len[best]))
				best = i;
		if (best < 0)
		{
			(void) opus_buf_put(&b, json + p, 1);
			p++;
			continue;
		}
		if (pc->n == pc->cap)
		{
			int			cap = pc->cap ? pc->cap * 2 : 8;
			struct piece *v = realloc(pc->v, (size_t) cap * sizeof(*v));

			if (!v)
			{
				ok = false;
				break;
			}
			pc->v = v;
			pc->cap = cap;
		}
		{
			struct piece *k = &pc->v[pc->n];
			char		num[32];

			k->raw = opus_tokenizer_control_text(tok, best, &k->raw_len);
			k->esc = strdup(esc[best]);
			k->esc_len = esc_len[best];
			if (!k->esc)
			{
				ok = false;
				break;
			}
			snprintf(num, sizeof(num), "%d", pc->n);
			pc->n++;
			(void) opus_buf_put(&b, JSON_MARK_OPEN, JSON_MARK_LEN);
			(void) opus_buf_put(&b, num, strlen(num));
			(void) opus_buf_put(&b, JSON_MARK_CLOSE, JSON_MARK_LEN);
		}
		p += esc_len[best];
	}
	if (ok)
		(void) opus_buf_put(&b, "", 1);
	for (int32_t i = 0; esc && i < n; i++)
		free(esc[i]);
	free(esc);
	free(esc_len);
	if (!ok || b.oom)
	{
		free(b.p);
		return false;
	}
	*out = b.p;
	return true;
}

/*
 * Walk the marked rendering (rm) beside the real one (r), taking content i
 * (trimmed when trim) for each content marker and piece k for each JSON
 * marker; true when that yields r exactly, with the user text's spans in sp.
 */
static bool
match_marked(const char *r, size_t rlen, const char *rm, size_t rmlen,
			 const struct opus_chat_msg *msgs, int n, const struct pieces *pc,
			 bool trim, struct spans *sp, bool *oom)
{
	size_t		p = 0,
				q = 0,
				ml = strlen(CONTENT_MARK);

	sp->n = 0;
	while (p < rmlen)
	{
		if (rmlen - p > ml && memcmp(rm + p, CONTENT_MARK, ml) == 0)
		{
			char	   *end;
			unsigned long i = strtoul(rm + p + ml, &end, 10);
			const char *c;
			size_t		cl;

			if (end == rm + p + ml || (size_t) (end - rm) >= rmlen || *end != '\x1f' || i >= (unsigned long) n)
				return false;
			c = msgs[i].content;
			cl = strlen(c);
			if (trim)
			{
				while (cl > 0 && is_jinja_space(*c))
					c++, cl--;
				while (cl > 0 && is_jinja_space(c[cl - 1]))
					cl--;
			}
			if (rlen - q < cl || memcmp(r + q, c, cl) != 0)
				return false;
			if (cl > 0 && !spans_push(sp, q, cl))
			{
				*oom = true;
				return false;
			}
			q += cl;
			p = (size_t) (end - rm) + 1;
			continue;
		}
		if (rmlen - p > JSON_MARK_LEN && memcmp(rm + p, JSON_MARK_OPEN, JSON_MARK_LEN) == 0)
		{
			char	   *end;
			unsigned long k = strtoul(rm + p + JSON_MARK_LEN, &end, 10);
			const struct piece *c;

			if (end == rm + p + JSON_MARK_LEN || (size_t) (rm + rmlen - end) < JSON_MARK_LEN ||
				memcmp(end, JSON_MARK_CLOSE, JSON_MARK_LEN) != 0 || pc == NULL ||
				k >= (unsigned long) pc->n)
				return false;
			c = &pc->v[k];
			if (rlen - q >= c->raw_len && memcmp(r + q, c->raw, c->raw_len) == 0)
			{
				if (!spans_push(sp, q, c->raw_len))
				{
					*oom = true;
					return false;
				}
				q += c->raw_len;
			}
			else if (rlen - q >= c->esc_len && memcmp(r + q, c->esc, c->esc_len) == 0)
				q += c->esc_len;	/* escaped by tojson: not the token's text */
			else
				return false;
			p = (size_t) (end - rm) + JSON_MARK_LEN;
			continue;
		}
		if (q >= rlen || r[q] != rm[p])
			return false;
		p++, q++;
	}
	return q == rlen;
}

static void
pieces_free(struct pieces *pc)
{
	for (int i = 0; i < pc->n; i++)
		free(pc->v[i].esc);
	free(pc->v);
}

enum opus_status
opus_chat_render_literal(const struct opus_chat_renderer *r, const struct opus_tokenizer *tok,
						 const struct opus_chat_msg *msgs, int n_msgs,
						 const char *tools, size_t tools_len,
						 bool allow_special, bool add_generation_prompt,
						 char **text, size_t *text_len,
						 struct opus_text_span **literal, int *n_literal,
						 struct opus_error *err)
{
	struct opus_chat_msg *marked = NULL;
	char	   *marks = NULL;
	char	   *rm = NULL;
	size_t		rm_len = 0;
	char	   *mtools = NULL;
	int32_t		control = -1;
	bool		in_contents = false;
	bool		in_json = false;
	struct pieces pc = {0};
	struct spans sp = {0};
	bool		oom = false;
	enum opus_status st;

	*literal = NULL;
	*n_literal = 0;
	st = opus_chat_renderer_apply(r, msgs, n_msgs, tools, tools_len, add_generation_prompt,
								  text, text_len, err);
	if (st != OPUS_OK || allow_special)
		return st;
	for (int i = 0; i < n_msgs && control < 0; i++)
		control = opus_tokenizer_find_control(tok, msgs[i].content, strlen(msgs[i].content));
	in_contents = control >= 0;
	if (tools && tools_len)
		in_json = json_has_control(tok, tools, tools_len);
	for (int i = 0; i < n_msgs && !in_json; i++)
		if (msgs[i].members)
			in_json = json_has_control(tok, msgs[i].members, strlen(msgs[i].members));
	if (!in_contents && !in_json)
		return OPUS_OK;

	/* some user text has special-token text: find where it lies */
	marked = calloc((size_t) n_msgs, sizeof(*marked));
	marks = malloc((size_t) n_msgs * 40);
	if (!marked || !marks)
		goto nomem;
	for (int i = 0; i < n_msgs; i++)
	{
		marked[i] = msgs[i];
		marked[i].members = NULL;	/* ours from here on */
		if (in_contents)
		{
			snprintf(marks + (size_t) i * 40, 40, CONTENT_MARK "%d\x1f", i);
			marked[i].content = marks + (size_t) i * 40;
		}
		if (in_json && msgs[i].members)
		{
			char	   *mm;

			if (!mark_json(tok, msgs[i].members, strlen(msgs[i].members), &pc, &mm))
				goto nomem;
			marked[i].members = mm;
		}
		else
			marked[i].members = msgs[i].members ? strdup(msgs[i].members) : NULL;
		if (msgs[i].members && !marked[i].members)
			goto nomem;
	}
	if (in_json && tools && tools_len && !mark_json(tok, tools, tools_len, &pc, &mtools))
		goto nomem;
	st = opus_chat_renderer_apply(r, marked, n_msgs, mtools ? mtools : tools,
								  mtools ? strlen(mtools) : tools_len, add_generation_prompt,
								  &rm, &rm_len, err);
	if (st != OPUS_OK)
		goto fail;
	if (!match_marked(*text, *text_len, rm, rm_len, msgs, n_msgs, &pc, false, &sp, &oom) &&
		(oom || !in_contents ||
		 !match_marked(*text, *text_len, rm, rm_len, msgs, n_msgs, &pc, true, &sp, &oom)))
	{
		if (oom)
			goto nomem;
		if (in_contents)
		{
			char		piece[64];
			int			pl = opus_tokenizer_piece(tok, control, true, piece, (int) sizeof(piece) - 1);

			piece[pl < 0 ? 0 : (pl > (int) sizeof(piece) - 1 ? (int) sizeof(piece) - 1 : pl)] = '\0';
			st = opus_error_set(err, OPUS_ERR_TEMPLATE,
								"a message content contains the special-token text \"%s\", and the chat template changes message contents, so it cannot be kept as plain text",
								piece);
		}
		else
			st = opus_error_set(err, OPUS_ERR_TEMPLATE,
								"the tool definitions or a message's tool calls contain special-token text, and the chat template changes them, so it cannot be kept as plain text");
		goto fail;
	}
	*literal = sp.v;
	*n_literal = sp.n;
	sp.v = NULL;
	goto out;
nomem:
	st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory rendering chat messages");
fail:
	free(*text);
	*text = NULL;
	*text_len = 0;
out:
	free(sp.v);
	free(rm);
	free(mtools);
	if (marked)
		for (int i = 0; i < n_msgs; i++)
			free((char *) marked[i].members);
	free(marked);
	free(marks);
	pieces_free(&pc);
	return st;
}
