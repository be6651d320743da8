/*
 * sched_text.c - the scheduler's output side: DONE and TEXT events, the
 * generated text (UTF-8 stream, hold buffer, stop strings searched in it,
 * held back while they could still match), finishing a request, and
 * accepting a sampled token (grammar, stop checks, max_tokens).  The
 * header comment of scheduler.c describes the whole loop.
 */
#include "runtime/sched_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- events ---- */

void
sched_emit_done(struct opus_sched *s, struct sched_req *r, enum opus_finish finish,
		  const struct opus_error *error)
{
	struct opus_event ev;
	double		t = now_ms();

	memset(&ev, 0, sizeof(ev));
	ev.kind = OPUS_EV_DONE;
	ev.id = r->id;
	ev.finish = finish;
	ev.n_prompt = r->n_prompt;
	ev.n_completion = r->n_tokens - r->n_prompt;
	ev.n_cached = r->n_cached;
	ev.queue_ms = (r->ever_admitted ? r->t_admit : t) - r->t_submit;
	ev.ttft_ms = r->have_token ? r->t_first - r->t_submit : 0.0;
	ev.total_ms = t - r->t_submit;
	if (error)
		ev.error = *error;
	r->finished = true;
	s->cb(s->user, &ev);
}

/* Emit the first n bytes of the held text (if any) and drop them. */
static void
emit_text(struct opus_sched *s, struct sched_req *r, int32_t n)
{
	struct opus_event ev;

	if (n <= 0)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.kind = OPUS_EV_TEXT;
	ev.id = r->id;
	ev.text = r->text;
	ev.text_len = n;
	ev.n_tokens = r->n_text_tokens;
	r->n_text_tokens = 0;
	s->cb(s->user, &ev);
	memmove(r->text, r->text + n, (size_t) (r->n_text - n));
	r->n_text -= n;
}

/* ---- text ---- */

static bool
text_reserve(struct sched_req *r, int64_t extra)
{
	int64_t		need = (int64_t) r->n_text + extra;
	int64_t		cap;
	char	   *t;

	if (need <= r->cap_text)
		return true;
	if (need > INT32_MAX / 2)
		return false;
	cap = r->cap_text > 0 ? r->cap_text : 64;
	while (cap < need)
		cap *= 2;
	t = realloc(r->text, (size_t) cap);
	if (!t)
		return false;
	r->text = t;
	r->cap_text = (int32_t) cap;
	return true;
}

/*
 * Length of the valid UTF-8 sequence at b[0..n), or -(length of its maximal
 * valid prefix, at least 1) if it is invalid or cut short.
 */
static int
utf8_seq(const uint8_t *b, int n)
{
	uint8_t		c = b[0];
	int			len;
	uint8_t		lo = 0x80,
				hi = 0xbf;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
	{
		len = 3;
		if (c == 0xe0)
			lo = 0xa0;			/* no overlongs */
		else if (c == 0xed)
			hi = 0x9f;			/* no surrogates */
	}
	else if (c >= 0xf0 && c <= 0xf4)
	{
		len = 4;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;			/* <= U+10FFFF */
	}
	else
		return -1;
	for (int k = 1; k < len; k++)
	{
		if (k >= n || b[k] < lo || b[k] > hi)
			return -k;
		lo = 0x80;
		hi = 0xbf;
	}
	return len;
}

/* Append bytes to the held text, each invalid UTF-8 subpart as U+FFFD. */
static bool
text_append(struct sched_req *r, const char *src, int n)
{
	const uint8_t *b = (const uint8_t *) src;
	int			i = 0;

	/* worst case: every byte becomes 3 */
	if (!text_reserve(r, (int64_t) n * 3))
		return false;
	while (i < n)
	{
		int			l = utf8_seq(b + i, n - i);

		if (l > 0)
		{
			memcpy(r->text + r->n_text, b + i, (size_t) l);
			r->n_text += l;
			i += l;
		}
		else
		{
			memcpy(r->text + r->n_text, "\xef\xbf\xbd", 3);
			r->n_text += 3;
			i += -l;
		}
	}
	return true;
}

/*
 * Stop strings over the held text.  Returns the offset of the earliest
 * match, or -1 with *emit_len set to how much can go out now: all but the
 * longest tail that is a proper prefix of some stop string, cut back to a
 * character boundary.  Since such tails are always held, a match can never
 * start in text already emitted.
 */
static int32_t
find_stop(const struct sched_req *r, int32_t *emit_len)
{
	int32_t		first = -1;
	int32_t		hold = 0;
	int32_t		emit;

	*emit_len = r->n_text;
	if (r->n_text == 0 || r->n_stop == 0)
		return -1;
	for (int i = 0; i < r->n_stop; i++)
	{
		const char *m = memmem(r->text, (size_t) r->n_text, r->stop[i],
							   (size_t) r->stop_len[i]);

		if (m && (first < 0 || m - r->text < first))
			first = (int32_t) (m - r->text);
	}
	if (first >= 0)
		return first;
	for (int i = 0; i < r->n_stop; i++)
	{
		int32_t		k = r->stop_len[i] - 1;

		if (k > r->n_text)
			k = r->n_text;
		for (; k > hold; k--)
		{
			if (memcmp(r->text + r->n_text - k, r->stop[i], (size_t) k) == 0)
			{
				hold = k;
				break;
			}
		}
	}
	emit = r->n_text - hold;
	while (emit > 0 && emit < r->n_text && ((uint8_t) r->text[emit] & 0xc0) == 0x80)
		emit--;
	*emit_len = emit;
	return -1;
}

/* The piece of tok into s->piece (grown as needed); its length. */
static int
token_piece(struct opus_sched *s, int32_t tok)
{
	int			n = opus_tokenizer_piece(s->tok, tok, false, s->piece, s->cap_piece);

	if (n > s->cap_piece)
	{
		char	   *p = realloc(s->piece, (size_t) n);
		char	   *o = realloc(s->utf8_out, (size_t) n + 8);

		if (p)
			s->piece = p;
		if (o)
			s->utf8_out = o;
		if (!p || !o)
			return 0;
		s->cap_piece = n;
		n = opus_tokenizer_piece(s->tok, tok, false, s->piece, s->cap_piece);
	}
	return n < 0 ? 0 : n;
}

/* ---- finishing ---- */

void
sched_release_seq(struct opus_sched *s, struct sched_req *r)
{
	opus_seq_release(s->ctx, &r->seq);
	r->n_published = 0;
}

/* Flush held text (up to a stop string in it) and emit DONE. */
static void
finish_req(struct opus_sched *s, struct sched_req *r, enum opus_finish finish)
{
	int			n = opus_utf8_stream_flush(&r->utf8, s->utf8_out);
	int32_t		emit = 0;
	int32_t		stop;

	sched_hold_for(s, r);
	sched_release_seq(s, r);
	if (n > 0)
		(void) text_append(r, s->utf8_out, n);
	stop = find_stop(r, &emit);
	if (stop >= 0)
	{
		emit = stop;
		finish = OPUS_FINISH_STOP;
	}
	else
		emit = r->n_text;
	emit_text(s, r, emit);
	sched_emit_done(s, r, finish, NULL);
}

void
sched_fail_req(struct opus_sched *s, struct sched_req *r, const struct opus_error *e)
{
	sched_release_seq(s, r);
	sched_emit_done(s, r, OPUS_FINISH_ERROR, e);
}

/*
 * A new token for r: record it, run the stop checks, emit what text can go
 * out.  Finishes the request when a stop condition holds.
 */
void
sched_accept_token(struct opus_sched *s, struct sched_req *r, int32_t tok)
{
	int32_t		n_gen;
	int32_t		emit = 0;

	r->tokens[r->n_tokens++] = tok;
	n_gen = r->n_tokens - r->n_prompt;
	if (!r->have_token)
	{
		r->have_token = true;
		r->t_first = now_ms();
	}
	if (!r->ignore_eos && opus_tokenizer_is_eog(s->tok, tok))
	{
		finish_req(s, r, OPUS_FINISH_STOP);
		return;
	}
	r->n_text_tokens++;
	{
		int			n = token_piece(s, tok);

		if (n > 0)
		{
			int			m = opus_utf8_stream_feed(&r->utf8, s->piece, n, s->utf8_out);

			if (!text_append(r, s->utf8_out, m))
			{
				struct opus_error e;

				opus_error_set(&e, OPUS_ERR_NOMEM, "out of memory for generated text");
				sched_fail_req(s, r, &e);
				return;
			}
		}
	}
	{
		int32_t		stop = find_stop(r, &emit);

		if (stop >= 0)
		{
			sched_release_seq(s, r);
			emit_text(s, r, stop);
			sched_emit_done(s, r, OPUS_FINISH_STOP, NULL);
			return;
		}
	}
	if (n_gen >= r->max_tokens || r->n_tokens >= s->n_ctx)
	{
		finish_req(s, r, OPUS_FINISH_LENGTH);
		return;
	}
	emit_text(s, r, emit);
}
