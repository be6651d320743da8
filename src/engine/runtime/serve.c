/*
 * serve.c - the engine side of the supervisor protocol (src/protocol.h),
 * run by `opus_engine serve --fd N` (cli/cmd_serve.c) through opus_serve.
 *
 * The opus_pg supervisor starts this program with one end of a socketpair
 * as file descriptor N.  The conversation: read HELLO, load the model named
 * there, create the run state and the scheduler, answer READY (or FATAL and
 * exit 1), then loop:
 *
 *   - poll the socket (timeout 0 while requests are active, else block);
 *   - read whatever is available and handle every complete frame:
 *     SUBMIT (tokenize / detokenize answered at once; generate and chat
 *     tokenized and queued in the scheduler), CANCEL, PING;
 *   - run one scheduler step, which emits TEXT / DONE through the callback;
 *   - queue a PROGRESS frame for every live generation whose phase, prompt
 *     position, generated count or KV blocks changed in that step;
 *   - flush the output buffer, plus a STATS frame when the request counts
 *     moved or, while busy, every SERVE_STATS_INTERVAL_MS (an embedding
 *     model counts its opus_encode calls as steps and the tokens they
 *     encoded as prefill tokens); with it, for a
 *     Mixture-of-Experts model, an EXPERTS frame (the context's per-layer,
 *     per-expert routed-token counters) when those moved.
 *
 * KV cache: `--kv-fd M` names a shared-memory file (memfd) the supervisor
 * created and sized from opus.kv_cache_size; the engine maps it and places
 * the KV block pool there.  Without it, or if it cannot be mapped, the pool
 * is engine-private memory (said once on stderr).  Block size and the
 * per-step token budget come in HELLO.
 *
 * EOF on the socket means the supervisor is gone or wants us gone: exit 0.
 * The supervisor is not trusted: a frame that does not parse, a frame type
 * the engine does not accept or a duplicate request id is a protocol error,
 * reported on stderr (the server log), and the engine exits with status 3.
 * A well-formed request that cannot be served (prompt too long, bad token
 * id, unknown chat role ...) only fails that request, with a DONE frame.
 *
 * Writes are blocking (the supervisor never blocks on us, so this cannot
 * deadlock); reads are non-blocking after poll().
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "text/chat.h"
#include "model/model.h"
#include "protocol.h"
#include "quant/qtype.h"
#include "runtime/scheduler.h"
#include "runtime/serve.h"
#include "base/buf.h"
#include "base/status.h"
#include "text/tokenizer.h"

_Static_assert(OPUS_PROTO_ERR_TEMPLATE == OPUS_ERR_TEMPLATE &&
			   OPUS_PROTO_ERR__COUNT == OPUS_ERR__COUNT &&
			   OPUS_PROTO_ERR_CONTEXT == OPUS_ERR_CONTEXT &&
			   OPUS_PROTO_ERR_CANCELLED == OPUS_ERR_CANCELLED,
			   "protocol.h status codes must match status.h");
_Static_assert((int) OPUS_PROTO_FINISH_ERROR == (int) OPUS_FINISH_ERROR &&
			   (int) OPUS_PROTO_FINISH_LENGTH == (int) OPUS_FINISH_LENGTH,
			   "protocol.h finish reasons must match scheduler.h");
_Static_assert((int) OPUS_PROTO_KV_F16 == (int) OPUS_KV_F16 &&
			   (int) OPUS_PROTO_KV_Q8_0 == (int) OPUS_KV_Q8_0,
			   "HELLO kv_cache_type values must equal enum opus_kv_type");
_Static_assert(OPUS_PROTO_MAX_WEIGHT == OPUS_SCHED_MAX_WEIGHT,
			   "the wire format's fair-share weight bound matches the scheduler's");
_Static_assert(OPUS_PROTO_MAX_STOP <= OPUS_MAX_STOP &&
			   OPUS_PROTO_MAX_STOP_LEN <= OPUS_MAX_STOP_LEN,
			   "protocol stop limits must fit the scheduler's");

#define SERVE_EXIT_PROTOCOL 3
#define SERVE_STATS_INTERVAL_MS 250.0

struct serve
{
	int			fd;
	int			kv_fd;			/* shared-memory KV arena, or -1 */
	void	   *kv_map;			/* its mapping, or NULL */
	size_t		kv_map_len;
	struct opus_model *model;
	struct opus_ctx *ctx;
	struct opus_sched *sched;
	const struct opus_tokenizer *tok;
	struct opus_chat_renderer *chat;	/* the model's template (chat.h) */
	struct opus_buf in;		/* received, not yet parsed */
	struct opus_buf out;		/* frames to send */
	bool		out_failed;		/* a write failed: the peer is gone */
	/* live generation ids (to reject duplicates) */
	uint64_t   *live;
	struct opus_proto_progress *live_prog;	/* last PROGRESS sent, per live id */
	int			n_live;
	int			cap_live;
	struct opus_proto_stats last_stats;
	bool		stats_sent;
	double		stats_sent_at;	/* now_ms() of the last STATS frame */
	uint64_t   *experts_sent;	/* counters of the last EXPERTS frame, or NULL */
	/* an encoder (embedding) model runs here instead of ctx and sched */
	struct opus_encoder *enc;
	int32_t		enc_ctx;		/* tokens per input */
	int32_t		n_embd;
	struct pending_embed *emb;	/* EMBED requests read, not yet encoded */
	int			n_emb;
	int			cap_emb;
	int64_t		enc_calls;		/* opus_encode calls that succeeded (STATS steps) */
	int64_t		enc_tokens;		/* input tokens they encoded (STATS tokens_prefill) */
};

struct pending_embed
{
	uint64_t	id;
	int32_t    *toks;
	int32_t		n;
	bool		normalize;
	double		t0;
};

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

/*
 * Append a frame (header + payload of plen bytes written by the caller into
 * the returned pointer) to the output buffer.  Returns NULL when out of
 * memory (the frame is dropped and out_failed set: we exit soon).
 */
static uint8_t *
frame_begin(struct serve *s, uint16_t type, uint64_t id, size_t plen)
{
	uint8_t    *p;

	if (plen > OPUS_PROTO_MAX_PAYLOAD ||
		!opus_buf_reserve(&s->out, OPUS_PROTO_HEADER_SIZE + plen))
	{
		fprintf(stderr, "opus_engine serve: cannot queue a frame of %zu bytes\n", plen);
		s->out_failed = true;
		return NULL;
	}
	p = (uint8_t *) s->out.p + s->out.n;
	opus_proto_encode_header(p, (uint32_t) plen, type, id);
	s->out.n += OPUS_PROTO_HEADER_SIZE + plen;
	return p + OPUS_PROTO_HEADER_SIZE;
}

static void
send_bytes_frame(struct serve *s, uint16_t type, uint64_t id,
				 const void *data, size_t len)
{
	/* Split long payloads: TEXT and TOKENS may be sent in pieces. */
	const uint8_t *d = data;

	while (len > 0)
	{
		size_t		n = len > OPUS_PROTO_MAX_PAYLOAD ? OPUS_PROTO_MAX_PAYLOAD : len;
		uint8_t    *p;

		if (type == OPUS_MSG_TOKENS)
			n -= n % 4;
		p = frame_begin(s, type, id, n);
		if (!p)
			return;
		memcpy(p, d, n);
		d += n;
		len -= n;
	}
}

static void
send_done(struct serve *s, uint64_t id, const struct opus_proto_done *d)
{
	uint8_t		tmp[OPUS_PROTO_DONE_FIXED + OPUS_PROTO_MSG_LEN];
	struct opus_proto_writer w;
	uint8_t    *p;

	opus_proto_writer_init(&w, tmp, sizeof(tmp));
	opus_proto_encode_done(&w, d);
	p = frame_begin(s, OPUS_MSG_DONE, id, w.len);
	if (p)
		memcpy(p, tmp, w.len);
}

/* A DONE frame for a request that failed before reaching the scheduler. */
static void
send_error_done(struct serve *s, uint64_t id, const struct opus_error *err)
{
	struct opus_proto_done d;

	memset(&d, 0, sizeof(d));
	d.finish = OPUS_PROTO_FINISH_ERROR;
	d.code = (err->code > OPUS_OK && err->code < OPUS_ERR__COUNT) ?
		(uint32_t) err->code : OPUS_PROTO_ERR_INTERNAL;
	snprintf(d.message, sizeof(d.message), "%s", err->msg);
	send_done(s, id, &d);
}

/* Write the whole output buffer (blocking).  False when the peer is gone. */
static bool
flush_out(struct serve *s)
{
	size_t		off = 0;

	while (off < s->out.n)
	{
		ssize_t		n = send(s->fd, s->out.p + off, s->out.n - off, MSG_NOSIGNAL);

		if (n < 0)
		{
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
			{
				struct pollfd pfd = {.fd = s->fd,.events = POLLOUT};

				(void) poll(&pfd, 1, 1000);
				continue;
			}
			s->out_failed = true;
			break;
		}
		off += (size_t) n;
	}
	s->out.n = 0;
	return !s->out_failed;
}

/* ---- live request ids ---- */

static int
live_find(const struct serve *s, uint64_t id)
{
	for (int i = 0; i < s->n_live; i++)
	{
		if (s->live[i] == id)
			return i;
	}
	return -1;
}

static bool
live_add(struct serve *s, uint64_t id)
{
	if (s->n_live == s->cap_live)
	{
		int			cap = s->cap_live ? s->cap_live * 2 : 64;
		uint64_t   *p = realloc(s->live, (size_t) cap * sizeof(*p));
		struct opus_proto_progress *q;

		if (!p)
			return false;
		s->live = p;
		q = realloc(s->live_prog, (size_t) cap * sizeof(*q));
		if (!q)
			return false;
		s->live_prog = q;
		s->cap_live = cap;
	}
	memset(&s->live_prog[s->n_live], 0, sizeof(s->live_prog[0]));
	s->live[s->n_live++] = id;
	return true;
}

static void
live_remove(struct serve *s, uint64_t id)
{
	int			i = live_find(s, id);

	if (i >= 0)
	{
		s->n_live--;
		s->live[i] = s->live[s->n_live];
		s->live_prog[i] = s->live_prog[s->n_live];
	}
}

/*
 * Queue a PROGRESS frame for each live generation whose state changed
 * since the last one sent (phase 0 in live_prog = nothing sent yet).
 */
static void
send_progress(struct serve *s)
{
	for (int i = 0; i < s->n_live; i++)
	{
		struct opus_sched_req_info info;
		struct opus_proto_progress m;
		struct opus_proto_writer w;
		uint8_t    *p;

		if (!opus_sched_get_request(s->sched, s->live[i], &info))
			continue;
		memset(&m, 0, sizeof(m));
		m.phase = !info.running ? OPUS_PROTO_PHASE_QUEUED :
			info.generating ? OPUS_PROTO_PHASE_DECODE : OPUS_PROTO_PHASE_PREFILL;
		m.priority = info.priority > 0 ? info.priority : 0;
		m.n_prompt = info.n_prompt > 0 ? info.n_prompt : 0;
		m.n_prompt_done = info.n_prompt_done < 0 ? 0 :
			info.n_prompt_done > m.n_prompt ? m.n_prompt : info.n_prompt_done;
		m.n_generated = info.n_generated > 0 ? info.n_generated : 0;
		m.kv_blocks = info.kv_blocks > 0 ? info.kv_blocks : 0;
		if (memcmp(&m, &s->live_prog[i], sizeof(m)) == 0)
			continue;
		s->live_prog[i] = m;
		p = frame_begin(s, OPUS_MSG_PROGRESS, s->live[i], OPUS_PROTO_PROGRESS_SIZE);
		if (!p)
			return;
		opus_proto_writer_init(&w, p, OPUS_PROTO_PROGRESS_SIZE);
		opus_proto_encode_progress(&w, &m);
	}
}

/* ---- scheduler events ---- */

static void
on_event(void *user, const struct opus_event *ev)
{
	struct serve *s = user;

	if (ev->kind == OPUS_EV_TEXT)
	{
		if (ev->text_len > 0)
		{
			/* NUL bytes cannot travel in TEXT; the model may emit them. */
			if (memchr(ev->text, 0, (size_t) ev->text_len) != NULL)
			{
				char	   *copy = malloc((size_t) ev->text_len);

				if (!copy)
				{
					s->out_failed = true;
					return;
				}
				for (int i = 0; i < ev->text_len; i++)
					copy[i] = ev->text[i] ? ev->text[i] : '?';
				send_bytes_frame(s, OPUS_MSG_TEXT, ev->id, copy, (size_t) ev->text_len);
				free(copy);
			}
			else
				send_bytes_frame(s, OPUS_MSG_TEXT, ev->id, ev->text, (size_t) ev->text_len);
		}
	}
	else if (ev->kind == OPUS_EV_DONE)
	{
		struct opus_proto_done d;

		memset(&d, 0, sizeof(d));
		d.finish = (uint8_t) ev->finish;
		if (d.finish == OPUS_PROTO_FINISH_NONE || d.finish >= OPUS_PROTO_FINISH__COUNT)
			d.finish = OPUS_PROTO_FINISH_ERROR;
		if (d.finish == OPUS_PROTO_FINISH_ERROR)
		{
			d.code = (ev->error.code > OPUS_OK && ev->error.code < OPUS_ERR__COUNT) ?
				(uint32_t) ev->error.code : OPUS_PROTO_ERR_INTERNAL;
			snprintf(d.message, sizeof(d.message), "%s", ev->error.msg);
		}
		d.n_prompt = ev->n_prompt > 0 ? ev->n_prompt : 0;
		d.n_completion = ev->n_completion > 0 ? ev->n_completion : 0;
		d.n_cached = ev->n_cached > 0 ? ev->n_cached : 0;
		if (d.n_cached > d.n_prompt)
			d.n_cached = d.n_prompt;
		d.queue_ms = ev->queue_ms >= 0 ? ev->queue_ms : 0;
		d.ttft_ms = ev->ttft_ms >= 0 ? ev->ttft_ms : 0;
		d.total_ms = ev->total_ms >= 0 ? ev->total_ms : 0;
		send_done(s, ev->id, &d);
		live_remove(s, ev->id);
	}
}

/* ---- request handling ---- */

/*
 * Tokenize text into a malloc'd array.  Returns OPUS_OK and sets *out and *n.
 */
static enum opus_status
tokenize_spans(struct serve *s, const char *text, size_t len, bool parse_special,
			   const struct opus_text_span *literal, int n_literal,
			   int32_t **out, int64_t *n, struct opus_error *err)
{
	int64_t		cap = (int64_t) len + 8;
	int32_t    *toks = NULL;
	enum opus_status st;

	for (int attempt = 0; attempt < 2; attempt++)
	{
		int32_t    *p = realloc(toks, (size_t) cap * sizeof(int32_t));

		if (!p)
		{
			free(toks);
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory tokenizing the prompt");
		}
		toks = p;
		st = opus_tokenizer_encode_spans(s->tok, text, len, true, parse_special,
										 literal, n_literal, toks, cap, n, err);
		if (st == OPUS_OK)
		{
			*out = toks;
			return OPUS_OK;
		}
		if (st != OPUS_ERR_CAPACITY || *n <= cap)
			break;
		cap = *n;
	}
	free(toks);
	return st;
}

static enum opus_status
tokenize(struct serve *s, const char *text, size_t len, bool parse_special,
		 int32_t **out, int64_t *n, struct opus_error *err)
{
	return tokenize_spans(s, text, len, parse_special, NULL, 0, out, n, err);
}

/*
 * Render chat messages with the model's template into a malloc'd string;
 * *literal / *n_literal (malloc'd, may be NULL / 0): the spans of user text
 * to tokenize as plain text (text/chat_literal.c).  An OPUS_ROLE_TOOLS item
 * (validated: at most one) is not a message but the template's `tools`; an
 * OPUS_ROLE_MEMBERS item (validated: after a message) the members of the
 * message before it.
 */
static enum opus_status
render_chat(struct serve *s, const struct opus_proto_submit *m,
			char **text, size_t *text_len,
			struct opus_text_span **literal, int *n_literal,
			struct opus_error *err)
{
	static const char *const roles[OPUS_ROLE__COUNT] = {"system", "user", "assistant", "tool", NULL, NULL};
	struct opus_chat_msg *msgs;
	const char *tools = NULL;
	size_t		tools_len = 0;
	int			n_msgs = 0;
	char	   *store;
	uint32_t	pos = 0;
	enum opus_status st;

	*literal = NULL;
	*n_literal = 0;
	msgs = calloc(m->n_items, sizeof(*msgs));
	/* contents + one NUL each */
	store = malloc((size_t) m->data_len + m->n_items);
	if (!msgs || !store)
	{
		free(msgs);
		free(store);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory rendering chat messages");
	}
	{
		char	   *w = store;

		for (uint32_t i = 0; i < m->n_items; i++)
		{
			uint8_t		role;
			struct opus_proto_str c;

			opus_proto_next_chat_message(m, &pos, &role, &c);
			memcpy(w, c.ptr, c.len);
			w[c.len] = '\0';
			if (role == OPUS_ROLE_TOOLS)
			{
				tools = w;
				tools_len = c.len;
			}
			else if (role == OPUS_ROLE_MEMBERS)
			{
				if (n_msgs > 0)
					msgs[n_msgs - 1].members = w;
			}
			else
			{
				msgs[n_msgs].role = roles[role];
				msgs[n_msgs].content = w;
				n_msgs++;
			}
			w += c.len + 1;
		}
	}
	st = opus_chat_render_literal(s->chat, s->tok, msgs, n_msgs, tools, tools_len,
								  m->params.allow_special_tokens != 0, true,
								  text, text_len, literal, n_literal, err);
	free(msgs);
	free(store);
	return st;
}

static void
handle_tokenize(struct serve *s, uint64_t id, const struct opus_proto_submit *m)
{
	struct opus_error err = {0};
	struct opus_proto_done d;
	double		t0 = now_ms();
	int32_t    *toks = NULL;
	int64_t		n = 0;

	if (tokenize(s, (const char *) m->data, m->data_len, false, &toks, &n, &err) != OPUS_OK)
	{
		send_error_done(s, id, &err);
		return;
	}
	if (n > 0)
	{
		uint8_t    *bytes = malloc((size_t) n * 4);

		if (!bytes)
		{
			free(toks);
			opus_error_set(&err, OPUS_ERR_NOMEM, "out of memory");
			send_error_done(s, id, &err);
			return;
		}
		for (int64_t i = 0; i < n; i++)
			opus_proto_put_u32(bytes + 4 * i, (uint32_t) toks[i]);
		send_bytes_frame(s, OPUS_MSG_TOKENS, id, bytes, (size_t) n * 4);
		free(bytes);
	}
	free(toks);
	memset(&d, 0, sizeof(d));
	d.finish = OPUS_PROTO_FINISH_STOP;
	d.n_prompt = (int32_t) (n > INT32_MAX ? INT32_MAX : n);
	d.total_ms = now_ms() - t0;
	send_done(s, id, &d);
}

static void
handle_detokenize(struct serve *s, uint64_t id, const struct opus_proto_submit *m)
{
	struct opus_error err = {0};
	struct opus_proto_done d;
	double		t0 = now_ms();
	int32_t    *toks;
	char	   *text = NULL;
	size_t		len = 0;
	int32_t		n_vocab = opus_tokenizer_n_vocab(s->tok);

	toks = malloc((size_t) m->n_items * 4 + 4);
	if (!toks)
	{
		opus_error_set(&err, OPUS_ERR_NOMEM, "out of memory");
		send_error_done(s, id, &err);
		return;
	}
	for (uint32_t i = 0; i < m->n_items; i++)
	{
		toks[i] = opus_proto_token_at(m, i);
		if (toks[i] < 0 || toks[i] >= n_vocab)
		{
			opus_error_set(&err, OPUS_ERR_TOKENIZE,
						   "token id %" PRId32 " is out of range for a vocabulary of %" PRId32 " tokens",
						   toks[i], n_vocab);
			free(toks);
			send_error_done(s, id, &err);
			return;
		}
	}
	if (opus_tokenizer_decode(s->tok, toks, m->n_items, false, &text, &len, &err) != OPUS_OK)
	{
		free(toks);
		send_error_done(s, id, &err);
		return;
	}
	free(toks);
	if (len > 0)
	{
		for (size_t i = 0; i < len; i++)
		{
			if (text[i] == '\0')
				text[i] = '?';
		}
		send_bytes_frame(s, OPUS_MSG_TEXT, id, text, len);
	}
	free(text);
	memset(&d, 0, sizeof(d));
	d.finish = OPUS_PROTO_FINISH_STOP;
	d.n_completion = (int32_t) m->n_items;
	d.total_ms = now_ms() - t0;
	send_done(s, id, &d);
}

/*
 * EMBED: tokenize now, queue; every queued input is encoded in one
 * opus_encode call per normalize setting (flush_embeds) once the input
 * buffer is drained.
 */
static void
handle_embed(struct serve *s, uint64_t id, const struct opus_proto_submit *m)
{
	struct opus_error err = {0};
	double		t0 = now_ms();
	int32_t    *toks = NULL;
	int64_t		n = 0;
	enum opus_status st;

	if (!s->enc)
	{
		opus_error_set(&err, OPUS_ERR_UNSUPPORTED,
					   "the model is a text generation model, not an embedding model");
		send_error_done(s, id, &err);
		return;
	}
	st = tokenize(s, (const char *) m->data, m->data_len, false, &toks, &n, &err);
	if (st == OPUS_OK && n == 0)
		st = opus_error_set(&err, OPUS_ERR_INVALID_ARG, "input is empty");
	if (st == OPUS_OK && n > s->enc_ctx)
	{
		if (m->n_items & OPUS_PROTO_EMBED_TRUNCATE)
		{
			/* keep the first enc_ctx - 1 tokens and the last ([SEP]) */
			toks[s->enc_ctx - 1] = toks[n - 1];
			n = s->enc_ctx;
		}
		else
			st = opus_error_set(&err, OPUS_ERR_CONTEXT,
								"input has %lld tokens, the model takes at most %d",
								(long long) n, s->enc_ctx);
	}
	if (st == OPUS_OK && s->n_emb == s->cap_emb)
	{
		int			cap = s->cap_emb ? 2 * s->cap_emb : 16;
		struct pending_embed *p = realloc(s->emb, sizeof(*p) * (size_t) cap);

		if (!p)
			st = opus_error_set(&err, OPUS_ERR_NOMEM, "out of memory queueing an embedding");
		else
		{
			s->emb = p;
			s->cap_emb = cap;
		}
	}
	if (st != OPUS_OK)
	{
		free(toks);
		send_error_done(s, id, &err);
		return;
	}
	s->emb[s->n_emb++] = (struct pending_embed) {
		id, toks, (int32_t) n, (m->n_items & OPUS_PROTO_EMBED_NORMALIZE) != 0, t0
	};
}

/* Encode every queued EMBED request and answer each (EMBEDDING, DONE). */
static void
flush_embeds(struct serve *s)
{
	struct opus_embed_item *items;
	int		   *which;
	float	   *vecs;
	uint8_t    *bytes;
	size_t		E = (size_t) s->n_embd;

	if (s->n_emb == 0)
		return;
	items = malloc(sizeof(*items) * (size_t) s->n_emb);
	which = malloc(sizeof(int) * (size_t) s->n_emb);
	vecs = malloc(sizeof(float) * E * (size_t) s->n_emb);
	bytes = malloc(4 * E);
	for (int pass = 0; pass < 2; pass++)
	{
		bool		normalize = pass == 0;
		struct opus_error err = {0};
		enum opus_status st = OPUS_OK;
		int			n = 0;

		for (int i = 0; i < s->n_emb; i++)
		{
			if (s->emb[i].normalize != normalize)
				continue;
			if (items && which && vecs)
				items[n] = (struct opus_embed_item) {
					s->emb[i].toks, s->emb[i].n, vecs + E * (size_t) n
				};
			if (which)
				which[n] = i;
			n++;
		}
		if (n == 0)
			continue;
		if (!items || !which || !vecs || !bytes)
			st = opus_error_set(&err, OPUS_ERR_NOMEM, "out of memory encoding embeddings");
		else
			st = opus_encode(s->enc, items, n, normalize, &err);
		if (st == OPUS_OK)
		{
			s->enc_calls++;
			for (int k = 0; k < n; k++)
				s->enc_tokens += items[k].n_tokens;
		}
		for (int k = 0; k < n; k++)
		{
			struct pending_embed *pe;
			struct opus_proto_done d;

			if (!which)
			{
				/* no index: answer the whole queue with the error */
				for (int i = 0; i < s->n_emb; i++)
					if (s->emb[i].normalize == normalize)
						send_error_done(s, s->emb[i].id, &err);
				break;
			}
			pe = &s->emb[which[k]];
			if (st != OPUS_OK)
			{
				send_error_done(s, pe->id, &err);
				continue;
			}
			for (size_t j = 0; j < E; j++)
			{
				uint32_t	u;

				memcpy(&u, &vecs[E * (size_t) k + j], sizeof(u));
				opus_proto_put_u32(bytes + 4 * j, u);
			}
			send_bytes_frame(s, OPUS_MSG_EMBEDDING, pe->id, bytes, 4 * E);
			memset(&d, 0, sizeof(d));
			d.finish = OPUS_PROTO_FINISH_STOP;
			d.n_prompt = pe->n;
			d.total_ms = now_ms() - pe->t0;
			send_done(s, pe->id, &d);
		}
	}
	for (int i = 0; i < s->n_emb; i++)
		free(s->emb[i].toks);
	s->n_emb = 0;
	free(items);
	free(which);
	free(vecs);
	free(bytes);
}

static void
handle_generate(struct serve *s, uint64_t id, const struct opus_proto_submit *m)
{
	struct opus_error err = {0};
	struct opus_gen_params gp;
	char		stops[OPUS_PROTO_MAX_STOP][OPUS_PROTO_MAX_STOP_LEN + 1];
	int32_t    *toks = NULL;
	int64_t		n = 0;
	enum opus_status st;

	if (s->enc)
	{
		opus_error_set(&err, OPUS_ERR_UNSUPPORTED,
					   "the model is an embedding model: it does not generate text");
		send_error_done(s, id, &err);
		return;
	}
	if (m->kind == OPUS_KIND_CHAT)
	{
		char	   *text = NULL;
		size_t		text_len = 0;
		struct opus_text_span *literal = NULL;
		int			n_literal = 0;

		st = render_chat(s, m, &text, &text_len, &literal, &n_literal, &err);
		if (st == OPUS_OK)
			st = tokenize_spans(s, text, text_len, true, literal, n_literal,
								&toks, &n, &err);
		free(literal);
		free(text);
	}
	else
		st = tokenize(s, (const char *) m->data, m->data_len, false, &toks, &n, &err);
	if (st == OPUS_OK && n == 0)
		st = opus_error_set(&err, OPUS_ERR_INVALID_ARG, "prompt is empty");
	if (st == OPUS_OK && n > INT32_MAX)
		st = opus_error_set(&err, OPUS_ERR_CONTEXT, "prompt is too long");
	if (st != OPUS_OK)
	{
		free(toks);
		send_error_done(s, id, &err);
		return;
	}

	memset(&gp, 0, sizeof(gp));
	opus_sampling_defaults(&gp.sampling);
	gp.sampling.temperature = m->params.temperature;
	gp.sampling.top_p = m->params.top_p;
	gp.sampling.min_p = m->params.min_p;
	gp.sampling.top_k = m->params.top_k;
	gp.sampling.presence_penalty = m->params.presence_penalty;
	gp.sampling.frequency_penalty = m->params.frequency_penalty;
	gp.sampling.repetition_penalty = m->params.repetition_penalty;
	gp.sampling.seed = m->params.seed;
	gp.max_tokens = m->params.max_tokens;
	gp.priority = m->params.priority;
	gp.min_priority = m->tenant.min_priority;
	gp.cache_scope = m->tenant.cache_scope;
	gp.tenant = m->tenant.tenant;
	gp.weight = m->tenant.weight;
	gp.n_stop = m->n_stop;
	for (int i = 0; i < m->n_stop; i++)
	{
		memcpy(stops[i], m->stop[i].ptr, m->stop[i].len);
		stops[i][m->stop[i].len] = '\0';
		gp.stop[i] = stops[i];
	}
	gp.ignore_eos = false;
	if (m->grammar.len > 0)
	{
		/* compiled (or found in the cache) inside the submit */
		gp.grammar = m->grammar.ptr;
		gp.grammar_len = m->grammar.len;
	}

	st = opus_sched_submit(s->sched, id, toks, (int32_t) n, &gp, &err);
	free(toks);
	if (st != OPUS_OK)
	{
		send_error_done(s, id, &err);
		return;
	}
	if (!live_add(s, id))
	{
		(void) opus_sched_cancel(s->sched, id);
		fprintf(stderr, "opus_engine serve: out of memory tracking requests\n");
	}
}

/*
 * Handle one complete frame.  Returns false on a protocol error (the caller
 * exits), after printing why.
 */
static bool
handle_frame(struct serve *s, const struct opus_proto_header *h, const uint8_t *payload)
{
	const char *why = "unexpected frame type";

	switch (h->type)
	{
		case OPUS_MSG_SUBMIT:
			{
				struct opus_proto_submit m;

				if (!opus_proto_parse_submit(payload, h->length, &m, &why))
					break;
				if (h->id == 0 || live_find(s, h->id) >= 0)
				{
					why = "SUBMIT with a zero or duplicate request id";
					break;
				}
				if (m.kind == OPUS_KIND_TOKENIZE)
					handle_tokenize(s, h->id, &m);
				else if (m.kind == OPUS_KIND_DETOKENIZE)
					handle_detokenize(s, h->id, &m);
				else if (m.kind == OPUS_KIND_EMBED)
					handle_embed(s, h->id, &m);
				else
					handle_generate(s, h->id, &m);
				return true;
			}
		case OPUS_MSG_CANCEL:
			if (!opus_proto_parse_empty(h->length, &why))
				break;
			/* Unknown ids are fine: the request may have just finished. */
			if (s->sched)
				(void) opus_sched_cancel(s->sched, h->id);
			return true;
		case OPUS_MSG_PING:
			if (!opus_proto_parse_empty(h->length, &why))
				break;
			(void) frame_begin(s, OPUS_MSG_PONG, h->id, 0);
			return true;
		default:
			break;
	}
	fprintf(stderr, "opus_engine serve: protocol error: %s (frame type %u, %u bytes)\n",
			why, (unsigned) h->type, (unsigned) h->length);
	return false;
}

/*
 * Parse and handle every complete frame in the input buffer.  Returns false
 * on a protocol error.
 */
static bool
drain_input(struct serve *s)
{
	size_t		off = 0;
	bool		ok = true;

	for (;;)
	{
		struct opus_proto_header h;
		const char *why = NULL;
		enum opus_proto_result r;

		r = opus_proto_parse_header((const uint8_t *) s->in.p + off, s->in.n - off, &h, &why);
		if (r == OPUS_PROTO_NEED_MORE)
			break;
		if (r == OPUS_PROTO_BAD)
		{
			fprintf(stderr, "opus_engine serve: protocol error: %s\n", why);
			ok = false;
			break;
		}
		if (s->in.n - off < OPUS_PROTO_HEADER_SIZE + (size_t) h.length)
			break;
		if (!handle_frame(s, &h, (const uint8_t *) s->in.p + off + OPUS_PROTO_HEADER_SIZE))
		{
			ok = false;
			break;
		}
		off += OPUS_PROTO_HEADER_SIZE + h.length;
	}
	if (off > 0)
		opus_buf_consume(&s->in, off);
	return ok;
}

/*
 * Read what is available.  Returns 1 if bytes were read, 0 if nothing was
 * available, -1 on EOF or error.
 */
static int
read_some(struct serve *s)
{
	ssize_t		n;

	if (!opus_buf_reserve(&s->in, 65536))
		return -1;
	n = recv(s->fd, s->in.p + s->in.n, s->in.cap - s->in.n, MSG_DONTWAIT);
	if (n > 0)
	{
		s->in.n += (size_t) n;
		return 1;
	}
	if (n == 0)
		return -1;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	return -1;
}

/* Read exactly one frame, blocking (used for HELLO).  Payload in s->in. */
static bool
read_frame_blocking(struct serve *s, struct opus_proto_header *h)
{
	for (;;)
	{
		const char *why = NULL;
		enum opus_proto_result r = opus_proto_parse_header((const uint8_t *) s->in.p, s->in.n, h, &why);
		struct pollfd pfd = {.fd = s->fd,.events = POLLIN};

		if (r == OPUS_PROTO_BAD)
		{
			fprintf(stderr, "opus_engine serve: protocol error: %s\n", why);
			return false;
		}
		if (r == OPUS_PROTO_OK && s->in.n >= OPUS_PROTO_HEADER_SIZE + (size_t) h->length)
			return true;
		if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
			return false;
		if (read_some(s) < 0)
			return false;
	}
}

/*
 * Queue an EXPERTS frame if the model has experts and their load counters
 * changed since the last one (sent along with STATS, so at its cadence).
 */
static void
send_experts_if_changed(struct serve *s)
{
	int32_t		n_layer = 0;
	int32_t		n_expert = 0;
	const uint64_t *counts = s->ctx ? opus_ctx_expert_load(s->ctx, &n_layer, &n_expert) : NULL;
	size_t		n;
	uint8_t    *p;
	struct opus_proto_writer w;

	if (!counts || n_layer < 1 || n_expert < 1 ||
		n_layer > OPUS_PROTO_MAX_EXPERT_LAYERS || n_expert > OPUS_PROTO_MAX_EXPERTS ||
		(size_t) n_layer * (size_t) n_expert > OPUS_PROTO_MAX_EXPERT_COUNTS)
		return;
	n = (size_t) n_layer * (size_t) n_expert;
	if (!s->experts_sent)
	{
		s->experts_sent = calloc(n, sizeof(uint64_t));
		if (!s->experts_sent)
			return;
	}
	else if (memcmp(s->experts_sent, counts, n * sizeof(uint64_t)) == 0)
		return;
	memcpy(s->experts_sent, counts, n * sizeof(uint64_t));
	p = frame_begin(s, OPUS_MSG_EXPERTS, 0, OPUS_PROTO_EXPERTS_SIZE(n));
	if (!p)
		return;
	opus_proto_writer_init(&w, p, OPUS_PROTO_EXPERTS_SIZE(n));
	opus_proto_encode_experts(&w, n_layer, n_expert, counts);
}

static void
send_stats_if_changed(struct serve *s)
{
	struct opus_sched_stats st;
	struct opus_proto_stats m;
	uint8_t    *p;
	struct opus_proto_writer w;

	memset(&st, 0, sizeof(st));
	if (s->sched)
		opus_sched_get_stats(s->sched, &st);
	memset(&m, 0, sizeof(m));
	m.n_active = s->sched ? opus_sched_n_active(s->sched) : 0;
	m.n_queued = st.n_queued;
	m.n_running = st.n_running;
	m.batch_size = st.batch_size;
	m.steps = st.steps;
	m.tokens_prefill = st.tokens_prefill;
	m.tokens_decode = st.tokens_decode;
	m.kv_blocks_total = st.kv_blocks_total;
	m.kv_blocks_used = st.kv_blocks_used;
	m.kv_blocks_cached = st.kv_blocks_cached;
	m.preemptions = st.preemptions;
	m.prefix_hit_tokens = st.prefix_hit_tokens;
	m.prefix_query_tokens = st.prefix_query_tokens;
	if (s->enc)
	{
		/* an embedding model: its encode calls and the tokens they took */
		m.steps = s->enc_calls;
		m.tokens_prefill = s->enc_tokens;
	}
	/*
	 * A change in the request counts sends a frame at once; while busy the
	 * other counters are refreshed every SERVE_STATS_INTERVAL_MS; on going
	 * idle any change is sent (a max_tokens => 1 request starts and ends in
	 * one step: the counts are the same as before it, the counters not).
	 */
	if (s->stats_sent && m.n_active == s->last_stats.n_active &&
		m.n_queued == s->last_stats.n_queued &&
		m.n_running == s->last_stats.n_running &&
		(memcmp(&m, &s->last_stats, sizeof(m)) == 0 ||
		 (m.n_active != 0 && now_ms() - s->stats_sent_at < SERVE_STATS_INTERVAL_MS)))
		return;
	s->last_stats = m;
	s->stats_sent = true;
	s->stats_sent_at = now_ms();
	p = frame_begin(s, OPUS_MSG_STATS, 0, OPUS_PROTO_STATS_SIZE);
	if (!p)
		return;
	opus_proto_writer_init(&w, p, OPUS_PROTO_STATS_SIZE);
	opus_proto_encode_stats(&w, &m);
	send_experts_if_changed(s);
}

static void
send_fatal(struct serve *s, const struct opus_error *err)
{
	uint8_t		tmp[8 + OPUS_PROTO_MSG_LEN];
	struct opus_proto_writer w;
	uint8_t    *p;
	uint32_t	code = (err->code > OPUS_OK && err->code < OPUS_ERR__COUNT) ?
		(uint32_t) err->code : OPUS_PROTO_ERR_INTERNAL;

	fprintf(stderr, "opus_engine serve: %s\n", err->msg);
	opus_proto_writer_init(&w, tmp, sizeof(tmp));
	opus_proto_encode_fatal(&w, code, err->msg);
	p = frame_begin(s, OPUS_MSG_FATAL, 0, w.len);
	if (p)
		memcpy(p, tmp, w.len);
	(void) flush_out(s);
}

/*
 * Map the supervisor's KV arena (if any) and point cp at it when it holds
 * the pool; otherwise the context allocates private memory.
 */
static void
map_kv_arena(struct serve *s, struct opus_ctx_params *cp)
{
	struct stat st;
	size_t		need = opus_ctx_kv_bytes(s->model, cp);
	void	   *p;

	if (s->kv_fd < 0)
	{
		fprintf(stderr, "opus_engine serve: no shared KV arena; using private memory\n");
		return;
	}
	if (fstat(s->kv_fd, &st) != 0 || st.st_size <= 0 || (uint64_t) st.st_size < need)
	{
		fprintf(stderr, "opus_engine serve: KV arena (fd %d) is missing or smaller than %zu bytes; using private memory\n",
				s->kv_fd, need);
		return;
	}
	p = mmap(NULL, (size_t) st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, s->kv_fd, 0);
	if (p == MAP_FAILED)
	{
		fprintf(stderr, "opus_engine serve: cannot map the KV arena: %s; using private memory\n",
				strerror(errno));
		return;
	}
	s->kv_map = p;
	s->kv_map_len = (size_t) st.st_size;
	cp->kv_memory = p;
	cp->kv_memory_size = (size_t) st.st_size;
}

/* READY's model fields. */
static void
fill_ready(struct opus_proto_ready *ready, const struct opus_hparams *hp,
		   const struct opus_tokenizer *tok,
		   int32_t n_ctx, int64_t kv_tokens, const char *chat_template)
{
	const struct opus_qtype_info *qi;

	memset(ready, 0, sizeof(*ready));
	ready->magic = OPUS_PROTO_MAGIC;
	ready->version = OPUS_PROTO_VERSION;
	ready->n_params = hp->n_params;
	ready->n_ctx = n_ctx;
	ready->n_ctx_train = hp->n_ctx_train;
	ready->n_vocab = hp->n_vocab;
	ready->n_layer = hp->n_layer;
	ready->n_embd = hp->n_embd;
	ready->n_head = hp->n_head;
	ready->n_head_kv = hp->n_head_kv;
	ready->pid = (int32_t) getpid();
	ready->kv_tokens = kv_tokens;
	ready->vocab_hash = opus_tokenizer_vocab_hash(tok);
	snprintf(ready->name, sizeof(ready->name), "%s", hp->name);
	snprintf(ready->arch, sizeof(ready->arch), "%s", hp->arch_name);
	qi = opus_qtype_info((uint32_t) hp->main_type);
	snprintf(ready->tensor_type, sizeof(ready->tensor_type), "%s", qi ? qi->name : "unknown");
	snprintf(ready->chat_template, sizeof(ready->chat_template), "%s", chat_template);
}

/*
 * An encoder model: no KV cache, no scheduler, no chat template; EMBED
 * requests go through opus_encode (on the CPU).
 */
static enum opus_status
serve_start_encoder(struct serve *s, const struct opus_proto_hello *hello,
					struct opus_proto_ready *ready, const struct opus_hparams *hp,
					struct opus_error *err)
{
	enum opus_status st;

	st = opus_encoder_create(s->model, hello->n_threads, hello->max_batch_tokens,
							 &s->enc, err);
	if (st != OPUS_OK)
		return st;
	s->enc_ctx = hp->n_ctx_train;
	s->n_embd = hp->n_embd;
	if (s->enc_ctx < 1 || s->n_embd < 1)
		return opus_error_set(err, OPUS_ERR_FORMAT, "the embedding model has no context or width");
	fprintf(stderr, "opus_engine serve: embedding model, %d dimensions, %d tokens per input, on the cpu\n",
			s->n_embd, s->enc_ctx);
	fill_ready(ready, hp, s->tok, s->enc_ctx, 0, "none");
	return OPUS_OK;
}

/* Load the model and build the run state as HELLO asks. */
static enum opus_status
serve_start(struct serve *s, const struct opus_proto_hello *hello,
			struct opus_proto_ready *ready, struct opus_error *err)
{
	struct opus_load_params lp = {0};
	struct opus_ctx_params cp;
	const struct opus_hparams *hp;
	const char *tmpl;
	size_t		tmpl_len = 0;
	size_t		b1,
				b2,
				per_block;
	enum opus_status st;

	struct opus_device device;
	char		desc[160];

	/* "auto" resolves here; a CUDA device this build or machine lacks fails */
	st = opus_device_parse(hello->device, &device, err);
	if (st != OPUS_OK)
		return st;
	st = opus_model_load(hello->model_path, &lp, &s->model, err);
	if (st != OPUS_OK)
		return st;
	hp = opus_model_hparams(s->model);
	s->tok = opus_model_tokenizer(s->model);
	if (hp->is_encoder)
		return serve_start_encoder(s, hello, ready, hp, err);

	memset(&cp, 0, sizeof(cp));
	cp.device = device;
	cp.n_threads = hello->n_threads;
	cp.block_size = hello->kv_block_size;
	cp.max_batch_tokens = hello->max_batch_tokens;
	/* the element type sets the bytes per block, so it comes before the sizing */
	cp.kv_type = (enum opus_kv_type) hello->kv_cache_type;
	cp.n_ctx = hello->n_ctx > 0 && hello->n_ctx < hp->n_ctx_train ? hello->n_ctx : hp->n_ctx_train;
	if (cp.n_ctx <= 0)
		cp.n_ctx = 2048;
	cp.n_blocks = 1;
	b1 = opus_ctx_kv_bytes(s->model, &cp);
	cp.n_blocks = 2;
	b2 = opus_ctx_kv_bytes(s->model, &cp);
	per_block = b2 > b1 ? b2 - b1 : b1;
	if (per_block == 0)
		return opus_error_set(err, OPUS_ERR_INTERNAL, "KV block size is zero");
	cp.n_blocks = (int64_t) ((size_t) hello->kv_cache_bytes / per_block);
	if (cp.n_blocks < 2)
		return opus_error_set(err, OPUS_ERR_NOMEM,
							  "opus.kv_cache_size (%" PRId64 " bytes) is too small: one KV block of %d tokens needs %zu bytes",
							  hello->kv_cache_bytes, cp.block_size, per_block);
	fprintf(stderr, "opus_engine serve: kv cache %s, %" PRId64 " blocks of %d tokens (%" PRId64 " tokens)\n",
			opus_kv_type_name(cp.kv_type), cp.n_blocks, cp.block_size,
			cp.n_blocks * cp.block_size);
	/* a device backend keeps the KV pool in device memory */
	if (device.kind == OPUS_DEVICE_CPU)
		map_kv_arena(s, &cp);
	st = opus_ctx_create(s->model, &cp, &s->ctx, err);
	if (st != OPUS_OK && device.kind != OPUS_DEVICE_CPU && strcmp(hello->device, "auto") == 0)
	{
		/* "auto" means the best device that can run this model: the CPU then */
		fprintf(stderr, "opus_engine serve: %s; opus.device = auto falls back to the cpu\n",
				err ? err->msg : "the gpu cannot run this model");
		memset(&cp.device, 0, sizeof(cp.device));
		map_kv_arena(s, &cp);
		st = opus_ctx_create(s->model, &cp, &s->ctx, err);
	}
	if (st != OPUS_OK)
		return st;
	fprintf(stderr, "opus_engine serve: running on %s\n",
			opus_ctx_describe(s->ctx, desc, sizeof(desc)));
	st = opus_sched_create(s->ctx, on_event, s, &s->sched, err);
	if (st == OPUS_OK)
	{
		opus_sched_set_step_target(s->sched, (double) hello->step_target_ms);
		opus_sched_set_starvation(s->sched, (double) hello->starve_ms);
	}
	if (st != OPUS_OK)
		return st;

	tmpl = opus_model_chat_template(s->model, &tmpl_len);
	st = opus_chat_renderer_for_tokenizer(tmpl, tmpl_len, s->tok, &s->chat, err);
	if (st != OPUS_OK)
		return st;
	if (strcmp(opus_chat_renderer_name(s->chat), "jinja") == 0)
		fprintf(stderr, "opus_engine serve: chat template: the model's own (jinja)\n");
	else
		fprintf(stderr, "opus_engine serve: chat template: %s pattern fallback (%s)\n",
				opus_chat_renderer_name(s->chat), opus_chat_renderer_why(s->chat));

	fill_ready(ready, hp, s->tok, cp.n_ctx, cp.n_blocks * cp.block_size,
			   opus_chat_renderer_name(s->chat));
	return OPUS_OK;
}

static void
serve_free(struct serve *s)
{
	if (s->sched)
		opus_sched_free(s->sched);
	if (s->enc)
		opus_encoder_free(s->enc);
	for (int i = 0; i < s->n_emb; i++)
		free(s->emb[i].toks);
	free(s->emb);
	if (s->ctx)
		opus_ctx_free(s->ctx);
	if (s->kv_map)
		(void) munmap(s->kv_map, s->kv_map_len);
	opus_chat_renderer_free(s->chat);
	if (s->model)
		opus_model_free(s->model);
	free(s->in.p);
	free(s->out.p);
	free(s->live);
	free(s->live_prog);
	free(s->experts_sent);
}

static int
serve_loop(struct serve *s)
{
	struct opus_error err = {0};

	for (;;)
	{
		bool		active = s->sched && opus_sched_n_active(s->sched) > 0;
		struct pollfd pfd = {.fd = s->fd,.events = POLLIN};
		int			pr = poll(&pfd, 1, active ? 0 : -1);

		if (pr < 0 && errno != EINTR)
		{
			fprintf(stderr, "opus_engine serve: poll failed: %s\n", strerror(errno));
			return 1;
		}
		if (pr > 0)
		{
			int			r;

			while ((r = read_some(s)) > 0)
			{
				if (!drain_input(s))
				{
					(void) flush_out(s);
					return SERVE_EXIT_PROTOCOL;
				}
				/* Bound the buffer: stop reading once a frame is pending in full. */
				if (s->in.n > OPUS_PROTO_HEADER_SIZE + (size_t) OPUS_PROTO_MAX_PAYLOAD)
					break;
			}
			if (r < 0)
			{
				/* EOF: the supervisor closed its end.  A clean exit. */
				return s->in.n == 0 ? 0 : SERVE_EXIT_PROTOCOL;
			}
		}
		flush_embeds(s);
		if (s->sched && opus_sched_n_active(s->sched) > 0)
		{
			if (opus_sched_step(s->sched, &err) != OPUS_OK)
			{
				fprintf(stderr, "opus_engine serve: scheduler failed: %s\n", err.msg);
				(void) flush_out(s);
				return 1;
			}
		}
		send_progress(s);
		send_stats_if_changed(s);
		if (s->out.n > 0 && !flush_out(s))
			return 0;			/* peer gone */
		if (s->out_failed)
			return 1;
	}
}

int
opus_serve(int fd, int kv_fd)
{
	struct serve s;
	struct opus_proto_header h;
	struct opus_proto_hello hello;
	struct opus_proto_ready ready;
	struct opus_error err = {0};
	const char *why = NULL;
	int			rc;

	signal(SIGPIPE, SIG_IGN);

	memset(&s, 0, sizeof(s));
	s.fd = fd;
	s.kv_fd = kv_fd >= 0 && fcntl(kv_fd, F_GETFD) >= 0 ? kv_fd : -1;
	if (!read_frame_blocking(&s, &h))
	{
		serve_free(&s);
		return SERVE_EXIT_PROTOCOL;
	}
	if (h.type != OPUS_MSG_HELLO ||
		!opus_proto_parse_hello((const uint8_t *) s.in.p + OPUS_PROTO_HEADER_SIZE, h.length, &hello, &why))
	{
		char		mismatch[OPUS_PROTO_MSG_LEN];

		if (h.type == OPUS_MSG_HELLO && strcmp(why, OPUS_PROTO_VERSION_MISMATCH) == 0)
		{
			opus_proto_version_mismatch(mismatch, sizeof(mismatch), "opus_pg.so",
										hello.version, "this opus_engine");
			why = mismatch;
		}
		opus_error_set(&err, OPUS_ERR_PROTOCOL, "bad HELLO from the supervisor: %s",
					   h.type != OPUS_MSG_HELLO ? "first frame is not HELLO" : why);
		send_fatal(&s, &err);
		serve_free(&s);
		return SERVE_EXIT_PROTOCOL;
	}
	opus_buf_consume(&s.in, OPUS_PROTO_HEADER_SIZE + h.length);

	if (serve_start(&s, &hello, &ready, &err) != OPUS_OK)
	{
		send_fatal(&s, &err);
		serve_free(&s);
		return 1;
	}
	{
		uint8_t    *p = frame_begin(&s, OPUS_MSG_READY, 0, OPUS_PROTO_READY_SIZE);
		struct opus_proto_writer w;

		if (p)
		{
			opus_proto_writer_init(&w, p, OPUS_PROTO_READY_SIZE);
			opus_proto_encode_ready(&w, &ready);
		}
	}
	if (!flush_out(&s))
	{
		serve_free(&s);
		return 0;
	}
	/* Anything that arrived right after HELLO. */
	if (s.in.n > 0 && !drain_input(&s))
	{
		serve_free(&s);
		return SERVE_EXIT_PROTOCOL;
	}
	rc = serve_loop(&s);
	serve_free(&s);
	return rc;
}
