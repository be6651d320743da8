/*
 * chat_jinja.c - the engine's chat renderer: the model's Jinja template
 * through the interpreter (jinja.h), with the pattern families of chat.c as
 * the fallback (chat.h says when).
 *
 * The context handed to the template is Hugging Face's: messages (role,
 * content, and the message's other members: tool_calls, tool_call_id, ...),
 * tools (or null), add_generation_prompt, bos_token, eos_token.
 * Thread safety: a renderer is read-only after create; apply() may run on
 * several threads at once.
 */
#include "text/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "text/jinja.h"
#include "text/tokenizer.h"

struct opus_chat_renderer
{
	struct opus_jinja *jinja;	/* NULL: fallback */
	enum opus_chat_template fallback;
	char		why[OPUS_ERROR_MSG_LEN];
	char	   *bos,
			   *eos;
	bool		strip_bos;
	time_t		now;			/* strftime_now's clock; 0 = the current time */
};

enum opus_status
opus_chat_renderer_create(const char *tmpl, size_t len, const char *bos, const char *eos,
						  bool strip_bos, struct opus_chat_renderer **out,
						  struct opus_error *err)
{
	struct opus_chat_renderer *r = calloc(1, sizeof(*r));
	struct opus_error perr = {0};

	*out = NULL;
	if (!r || !(r->bos = strdup(bos ? bos : "")) || !(r->eos = strdup(eos ? eos : "")))
	{
		opus_chat_renderer_free(r);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory loading the chat template");
	}
	r->strip_bos = strip_bos;
	if (tmpl == NULL)
		snprintf(r->why, sizeof(r->why), "the model has no chat template");
	else
	{
		enum opus_status st = opus_jinja_parse(tmpl, len, NULL, &r->jinja, &perr);

		if (st == OPUS_ERR_NOMEM)
		{
			opus_chat_renderer_free(r);
			return opus_error_set(err, st, "%s", perr.msg);
		}
		if (st != OPUS_OK)
			snprintf(r->why, sizeof(r->why), "%s", perr.msg);
	}
	r->fallback = tmpl ? opus_chat_detect(tmpl, len) : OPUS_CHAT_CHATML;
	/* a template we cannot recognise falls back to ChatML, as llama.cpp does */
	if (r->fallback == OPUS_CHAT_UNKNOWN)
		r->fallback = OPUS_CHAT_CHATML;
	*out = r;
	return OPUS_OK;
}

/* the text of token id (special tokens rendered), "" for none */
static void
token_text(const struct opus_tokenizer *tok, int32_t id, char *buf, int cap)
{
	int			n = id >= 0 ? opus_tokenizer_piece(tok, id, true, buf, cap - 1) : 0;

	buf[n > 0 && n < cap ? n : 0] = '\0';
}

enum opus_status
opus_chat_renderer_for_tokenizer(const char *tmpl, size_t len, const struct opus_tokenizer *tok,
								 struct opus_chat_renderer **out, struct opus_error *err)
{
	char		bos[128],
				eos[128];

	token_text(tok, opus_tokenizer_bos(tok), bos, sizeof(bos));
	token_text(tok, opus_tokenizer_eos(tok), eos, sizeof(eos));
	return opus_chat_renderer_create(tmpl, len, bos, eos, opus_tokenizer_adds_bos(tok), out, err);
}

void
opus_chat_renderer_free(struct opus_chat_renderer *r)
{
	if (!r)
		return;
	opus_jinja_free(r->jinja);
	free(r->bos);
	free(r->eos);
	free(r);
}

void
opus_chat_renderer_set_clock(struct opus_chat_renderer *r, time_t now)
{
	r->now = now;
}

const char *
opus_chat_renderer_name(const struct opus_chat_renderer *r)
{
	return r->jinja ? "jinja" : opus_chat_name(r->fallback);
}

const char *
opus_chat_renderer_why(const struct opus_chat_renderer *r)
{
	return r->why;
}

static void
puts_(struct opus_buf *b, const char *s)
{
	(void) opus_buf_put(b, s, strlen(s));
}

static void
put_json_str(struct opus_buf *b, const char *s)
{
	size_t		n = strlen(s);
	size_t		need = opus_jinja_json_quote(s, n, NULL, 0);
	char	   *tmp = malloc(need + 1);

	if (!tmp)
	{
		b->oom = true;
		return;
	}
	opus_jinja_json_quote(s, n, tmp, need + 1);
	(void) opus_buf_put(b, tmp, need);
	free(tmp);
}

enum opus_status
opus_chat_renderer_apply(const struct opus_chat_renderer *r, const struct opus_chat_msg *msgs,
						 int n_msgs, const char *tools_json, size_t tools_len,
						 bool add_generation_prompt, char **out, size_t *out_len,
						 struct opus_error *err)
{
	struct opus_buf	ctx = {0};
	enum opus_status st;
	struct opus_error jerr = {0};
	struct opus_jinja_limits lim = {0};

	*out = NULL;
	if (!r->jinja)
		return opus_chat_render(r->fallback, msgs, n_msgs, add_generation_prompt, out, out_len, err);
	if (n_msgs <= 0)
		return opus_error_set(err, OPUS_ERR_TEMPLATE, "no messages to render");
	puts_(&ctx, "{\"messages\": [");
	for (int i = 0; i < n_msgs; i++)
	{
		if (i)
			puts_(&ctx, ", ");
		puts_(&ctx, "{\"role\": ");
		put_json_str(&ctx, msgs[i].role);
		puts_(&ctx, ", \"content\": ");
		put_json_str(&ctx, msgs[i].content);
		if (msgs[i].members)
		{
			/* {"a": 1, ...} -> , "a": 1, ... (a repeated key: the last wins) */
			const char *m = msgs[i].members;
			size_t		ml = strlen(m);
			size_t		b = 0,
						e = ml;

			if (!opus_jinja_json_is_object(m, ml))
			{
				free(ctx.p);
				return opus_error_set(err, OPUS_ERR_INVALID_ARG,
									  "the members of chat message %d are not a JSON object", i);
			}
			while (m[b] != '{')
				b++;
			while (m[e - 1] != '}')
				e--;
			b++;
			e--;
			while (b < e && (m[b] == ' ' || m[b] == '\t' || m[b] == '\n' || m[b] == '\r'))
				b++;
			if (b < e)
			{
				puts_(&ctx, ", ");
				(void) opus_buf_put(&ctx, m + b, e - b);
			}
		}
		puts_(&ctx, "}");
	}
	puts_(&ctx, "], \"tools\": ");
	if (tools_json && tools_len)
		(void) opus_buf_put(&ctx, tools_json, tools_len);
	else
		puts_(&ctx, "null");
	puts_(&ctx, add_generation_prompt ? ", \"add_generation_prompt\": true" :
		  ", \"add_generation_prompt\": false");
	puts_(&ctx, ", \"bos_token\": ");
	put_json_str(&ctx, r->bos);
	puts_(&ctx, ", \"eos_token\": ");
	put_json_str(&ctx, r->eos);
	puts_(&ctx, "}");
	if (ctx.oom)
	{
		free(ctx.p);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory rendering chat messages");
	}
	lim.now = r->now;
	st = opus_jinja_render(r->jinja, ctx.p, ctx.n, &lim, out, out_len, &jerr);
	free(ctx.p);
	if (st == OPUS_ERR_UNSUPPORTED)
	{
		/* something the interpreter lacks, met at run time: the pattern family */
		return opus_chat_render(r->fallback, msgs, n_msgs, add_generation_prompt, out, out_len, err);
	}
	if (st != OPUS_OK)
		return opus_error_set(err, st, "%s", jerr.msg);
	if (r->strip_bos && r->bos[0] && strncmp(*out, r->bos, strlen(r->bos)) == 0)
	{
		size_t		bl = strlen(r->bos);

		memmove(*out, *out + bl, *out_len - bl + 1);
		*out_len -= bl;
	}
	return OPUS_OK;
}
