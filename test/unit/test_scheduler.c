/*
 * test_scheduler.c - the generation scheduler over the real default model
 * ($OPUS_MODEL; the model tests are skipped without it): batching does not
 * change a request's output (greedy and seeded), preemption on a tiny KV
 * pool, cancellation, stop strings (also across token boundaries),
 * max_tokens, priorities (and their aging), submit-time rejections, and the
 * prefix cache: hits change no output (greedy and seeded, alone, rerun,
 * staggered), are counted in tokens, and survive LRU eviction; cache
 * scopes (and eviction fair across them), fair share between tenants and
 * the aging ceiling.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "model/model_int.h"
#include "runtime/scheduler.h"
#include "unit.h"
#include "text/grammar.h"

#define MAX_REQ 48
#define TEXT_CAP 8192

struct got
{
	uint64_t	id;
	char		text[TEXT_CAP];
	int			n_text;
	int			n_text_events;
	int			n_text_tokens;
	int			n_done;
	int			events_after_done;
	bool		bad_utf8;
	struct opus_event done;
};

struct collector
{
	struct got	g[MAX_REQ];
	int			n;
	uint64_t	done_order[MAX_REQ];
	int			n_done;
	int			n_events;
};

static struct opus_model *model;
static const struct opus_tokenizer *tok;

static bool
valid_utf8(const unsigned char *b, int n)
{
	int			i = 0;

	while (i < n)
	{
		int			len;
		unsigned	c = b[i];

		if (c < 0x80)
			len = 1;
		else if (c >= 0xc2 && c <= 0xdf)
			len = 2;
		else if (c >= 0xe0 && c <= 0xef)
			len = 3;
		else if (c >= 0xf0 && c <= 0xf4)
			len = 4;
		else
			return false;
		if (i + len > n)
			return false;
		for (int k = 1; k < len; k++)
			if ((b[i + k] & 0xc0) != 0x80)
				return false;
		i += len;
	}
	return true;
}

static struct got *
got_for(struct collector *c, uint64_t id)
{
	for (int i = 0; i < c->n; i++)
		if (c->g[i].id == id)
			return &c->g[i];
	if (c->n == MAX_REQ)
		return NULL;
	memset(&c->g[c->n], 0, sizeof(c->g[0]));
	c->g[c->n].id = id;
	return &c->g[c->n++];
}

static void
on_event(void *user, const struct opus_event *ev)
{
	struct collector *c = user;
	struct got *g = got_for(c, ev->id);

	c->n_events++;
	if (!g)
		return;
	if (g->n_done > 0)
		g->events_after_done++;
	if (ev->kind == OPUS_EV_TEXT)
	{
		if (!valid_utf8((const unsigned char *) ev->text, ev->text_len))
			g->bad_utf8 = true;
		if (g->n_text + ev->text_len < TEXT_CAP)
		{
			memcpy(g->text + g->n_text, ev->text, (size_t) ev->text_len);
			g->n_text += ev->text_len;
			g->text[g->n_text] = '\0';
		}
		g->n_text_events++;
		g->n_text_tokens += ev->n_tokens;
	}
	else if (ev->kind == OPUS_EV_DONE)
	{
		g->n_done++;
		g->done = *ev;
		if (c->n_done < MAX_REQ)
			c->done_order[c->n_done++] = ev->id;
	}
}

static int
encode(const char *text, int32_t *out, int cap)
{
	int64_t		n = 0;
	struct opus_error err = {0};

	if (opus_tokenizer_encode(tok, text, strlen(text), true, false, out, cap,
							  &n, &err) != OPUS_OK)
	{
		CHECK(false, "encode: %s", err.msg);
		return 0;
	}
	return (int) n;
}

static struct opus_ctx *
make_ctx(int block_size, int64_t n_blocks, int max_batch, int n_ctx)
{
	struct opus_ctx_params cp = {0};
	struct opus_ctx *c = NULL;
	struct opus_error err = {0};

	cp.n_threads = 1;
	cp.block_size = block_size;
	cp.n_blocks = n_blocks;
	cp.max_batch_tokens = max_batch;
	cp.n_ctx = n_ctx;
	if (opus_ctx_create(model, &cp, &c, &err) != OPUS_OK)
		CHECK(false, "ctx_create: %s", err.msg);
	return c;
}

static struct opus_gen_params
gen(int max_tokens, float temp, uint64_t seed, int priority)
{
	struct opus_gen_params p;

	memset(&p, 0, sizeof(p));
	opus_sampling_defaults(&p.sampling);
	p.sampling.temperature = temp;
	p.sampling.seed = seed;
	p.max_tokens = max_tokens;
	p.priority = priority;
	return p;
}

/* Step until nothing is active (or a step limit); returns steps taken. */
static int
run_all(struct opus_sched *s, int limit)
{
	int			n = 0;
	struct opus_error err = {0};

	while (opus_sched_n_active(s) > 0 && n < limit)
	{
		if (opus_sched_step(s, &err) != OPUS_OK)
		{
			CHECK(false, "step: %s", err.msg);
			break;
		}
		n++;
	}
	CHECK(opus_sched_n_active(s) == 0, "scheduler idle after %d steps", n);
	return n;
}

static void
check_clean(const struct collector *c, const char *what)
{
	for (int i = 0; i < c->n; i++)
	{
		CHECK(c->g[i].n_done == 1, "%s: request %llu got %d DONE", what,
			  (unsigned long long) c->g[i].id, c->g[i].n_done);
		CHECK(c->g[i].events_after_done == 0, "%s: events after DONE", what);
		CHECK(!c->g[i].bad_utf8, "%s: TEXT event with invalid UTF-8", what);
	}
}

/* ---- the workload used by several tests ---- */

struct job
{
	const char *prompt;
	int			max_tokens;
	float		temp;
	uint64_t	seed;
	int			priority;
};

static const struct job jobs[4] = {
	{"The capital of France is", 14, 0.0f, 0, 1},
	{"Once upon a time, in a small village at the foot of a great mountain, there lived an old clockmaker who", 12, 0.0f, 0, 0},
	{"def fibonacci(n):", 16, 0.8f, 1234, 2},
	{"List three colours:", 10, 0.0f, 0, 0},
};

struct result
{
	char		text[TEXT_CAP];
	enum opus_finish finish;
	int			n_completion;
};

/* Submit jobs[idx[0..n)] to a fresh scheduler over c and run to the end. */
static void
run_jobs(struct opus_ctx *c, const int *idx, int n, struct result *res,
		 struct opus_sched_stats *stats_out)
{
	struct collector *col = calloc(1, sizeof(*col));
	struct opus_sched *s = NULL;
	struct opus_error err = {0};

	CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create: %s", err.msg);
	if (!s)
	{
		free(col);
		return;
	}
	for (int i = 0; i < n; i++)
	{
		const struct job *j = &jobs[idx[i]];
		int32_t		toks[256];
		int			nt = encode(j->prompt, toks, 256);
		struct opus_gen_params p = gen(j->max_tokens, j->temp, j->seed, j->priority);
		enum opus_status st;

		p.ignore_eos = true;
		st = opus_sched_submit(s, (uint64_t) idx[i] + 100, toks, nt, &p, &err);
		CHECK(st == OPUS_OK, "submit job %d: %s", idx[i], err.msg);
	}
	run_all(s, 2000);
	check_clean(col, "run_jobs");
	for (int i = 0; i < n; i++)
	{
		struct got *g = got_for(col, (uint64_t) idx[i] + 100);

		memcpy(res[idx[i]].text, g->text, sizeof(g->text));
		res[idx[i]].finish = g->done.finish;
		res[idx[i]].n_completion = g->done.n_completion;
	}
	if (stats_out)
		opus_sched_get_stats(s, stats_out);
	opus_sched_free(s);
	free(col);
}

/*
 * A reference greedy loop straight over opus_forward: the whole prompt in
 * one call, then one token at a time; the text is the concatenated pieces.
 */
static void
reference_greedy(const char *prompt, int n_gen, char *text)
{
	struct opus_ctx *c = make_ctx(16, 64, 256, 512);
	int32_t		toks[512];
	int			nt = encode(prompt, toks, 256);
	int32_t		n_vocab = opus_model_hparams(model)->n_vocab;
	float	   *logits = malloc(sizeof(float) * (size_t) n_vocab);
	struct opus_seq seq;
	struct opus_error err = {0};
	int			len = 0;
	struct opus_batch_item it;

	text[0] = '\0';
	if (!c)
		return;
	opus_seq_init(&seq);
	memset(&it, 0, sizeof(it));
	it.seq = &seq;
	it.tokens = toks;
	it.n_tokens = nt;
	it.logits = logits;
	for (int g = 0; g < n_gen; g++)
	{
		int32_t		best = 0;

		CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "reference forward: %s", err.msg);
		for (int32_t v = 1; v < n_vocab; v++)
			if (logits[v] > logits[best])
				best = v;
		toks[nt] = best;
		len += opus_tokenizer_piece(tok, best, false, text + len, TEXT_CAP - len - 1);
		it.tokens = &toks[nt];
		it.n_tokens = 1;
		nt++;
	}
	text[len] = '\0';
	opus_seq_release(c, &seq);
	opus_ctx_free(c);
	free(logits);
}

/* ---- tests ---- */

static struct result alone[4];

static void
test_alone_vs_together(void)
{
	struct result together[4];
	struct opus_sched_stats st;
	int			all[4] = {0, 1, 2, 3};
	char		ref[TEXT_CAP];

	/* each alone, on a roomy context */
	for (int i = 0; i < 4; i++)
	{
		struct opus_ctx *c = make_ctx(16, 64, 64, 512);

		run_jobs(c, &i, 1, alone, NULL);
		CHECK(alone[i].finish == OPUS_FINISH_LENGTH &&
			  alone[i].n_completion == jobs[i].max_tokens,
			  "job %d alone: finish %d, %d tokens", i, alone[i].finish,
			  alone[i].n_completion);
		CHECK(strlen(alone[i].text) > 0, "job %d produced text", i);
		opus_ctx_free(c);
	}
	printf("alone[0]: '%s'\nalone[2]: '%s'\n", alone[0].text, alone[2].text);

	/* greedy through the scheduler equals a plain forward loop */
	reference_greedy(jobs[0].prompt, jobs[0].max_tokens, ref);
	CHECK(strcmp(ref, alone[0].text) == 0, "scheduler greedy '%s' vs reference '%s'",
		  alone[0].text, ref);
	reference_greedy(jobs[1].prompt, jobs[1].max_tokens, ref);
	CHECK(strcmp(ref, alone[1].text) == 0, "scheduler greedy '%s' vs reference '%s'",
		  alone[1].text, ref);

	/*
	 * all four together; a 16-token budget splits the long prompt across
	 * steps while the others decode
	 */
	{
		struct opus_ctx *c = make_ctx(16, 64, 16, 512);

		memset(together, 0, sizeof(together));
		run_jobs(c, all, 4, together, &st);
		for (int i = 0; i < 4; i++)
		{
			CHECK(strcmp(alone[i].text, together[i].text) == 0,
				  "job %d together: '%s' vs alone '%s'", i, together[i].text,
				  alone[i].text);
			CHECK(together[i].finish == alone[i].finish &&
				  together[i].n_completion == alone[i].n_completion,
				  "job %d together: finish/count differ", i);
		}
		CHECK(st.preemptions == 0, "no preemption on a roomy pool");
		CHECK(st.kv_blocks_used == 0, "all blocks back (%lld used)",
			  (long long) st.kv_blocks_used);
		CHECK(st.tokens_decode > 0 && st.tokens_prefill > 0, "stats count tokens");
		opus_ctx_free(c);
	}
}

static void
test_preemption(void)
{
	/*
	 * Blocks of 4 positions, 12 blocks (48 positions): each job alone fits
	 * (the longest needs 24 + 12 - 1 positions = 9 blocks), all four
	 * together do not.
	 */
	struct opus_ctx *c = make_ctx(4, 12, 16, 512);
	struct result res[4];
	struct opus_sched_stats st;
	int			all[4] = {3, 2, 1, 0};

	memset(res, 0, sizeof(res));
	if (!c)
		return;
	run_jobs(c, all, 4, res, &st);
	for (int i = 0; i < 4; i++)
	{
		CHECK(strcmp(alone[i].text, res[i].text) == 0,
			  "job %d under preemption: '%s' vs alone '%s'", i, res[i].text,
			  alone[i].text);
		CHECK(res[i].n_completion == alone[i].n_completion &&
			  res[i].finish == alone[i].finish, "job %d under preemption: counts", i);
	}
	printf("preemptions on a 12-block pool: %lld\n", (long long) st.preemptions);
	CHECK(st.preemptions > 0, "the tiny pool forced preemption");
	CHECK(opus_ctx_free_blocks(c) == 12, "every block back after preemption");
	opus_ctx_free(c);
}

static void
test_cancel(void)
{
	struct opus_ctx *c = make_ctx(16, 32, 64, 512);
	struct collector *col = calloc(1, sizeof(*col));
	struct opus_sched *s = NULL;
	struct opus_error err = {0};
	int32_t		toks[64];
	int			nt;
	struct opus_gen_params p = gen(40, 0.0f, 0, 0);

	if (!c)
		return;
	nt = encode("Write a long story about a dragon.", toks, 64);
	p.ignore_eos = true;
	CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
	CHECK(opus_sched_submit(s, 1, toks, nt, &p, &err) == OPUS_OK, "submit 1");
	CHECK(opus_sched_submit(s, 2, toks, nt, &p, &err) == OPUS_OK, "submit 2");
	for (int i = 0; i < 3; i++)
		CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
	CHECK(opus_ctx_free_blocks(c) < 32, "running requests hold blocks");
	/* one running and one still queued */
	p.priority = 3;
	CHECK(opus_sched_submit(s, 3, toks, nt, &p, &err) == OPUS_OK, "submit 3");
	CHECK(opus_sched_cancel(s, 1), "cancel 1");
	CHECK(opus_sched_cancel(s, 3), "cancel 3 (queued)");
	CHECK(!opus_sched_cancel(s, 99), "cancel unknown id is false");
	CHECK(got_for(col, 1)->n_done == 0, "DONE waits for the step boundary");
	CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
	CHECK(got_for(col, 1)->n_done == 1 &&
		  got_for(col, 1)->done.finish == OPUS_FINISH_CANCELLED,
		  "cancelled running request: DONE CANCELLED");
	CHECK(got_for(col, 3)->n_done == 1 &&
		  got_for(col, 3)->done.finish == OPUS_FINISH_CANCELLED &&
		  got_for(col, 3)->done.n_completion == 0,
		  "cancelled queued request: DONE CANCELLED");
	CHECK(got_for(col, 2)->n_done == 0, "the other goes on");
	CHECK(opus_sched_n_active(s) == 1, "one active after cancelling two");
	CHECK(!opus_sched_cancel(s, 1), "a finished id is unknown");
	CHECK(opus_sched_cancel(s, 2), "cancel 2");
	CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
	CHECK(opus_ctx_free_blocks(c) == 32, "all blocks free after cancelling (%lld)",
		  (long long) opus_ctx_free_blocks(c));
	CHECK(opus_sched_n_active(s) == 0, "nothing active");
	check_clean(col, "cancel");
	/* the id can be used again */
	CHECK(opus_sched_submit(s, 1, toks, nt, &p, &err) == OPUS_OK, "resubmit id 1");
	CHECK(opus_sched_cancel(s, 1), "cancel again");
	run_all(s, 10);
	CHECK(got_for(col, 1)->n_done == 2, "second life of id 1 ended too");
	opus_sched_free(s);
	opus_ctx_free(c);
	free(col);
}

/* Run job 0 (greedy, ignore_eos) with the given stops; returns its got. */
static void
run_with_stops(const char *const *stops, int n_stop, int max_tokens,
			   struct got *out)
{
	struct opus_ctx *c = make_ctx(16, 64, 64, 512);
	struct collector *col = calloc(1, sizeof(*col));
	struct opus_sched *s = NULL;
	struct opus_error err = {0};
	int32_t		toks[64];
	int			nt;
	struct opus_gen_params p = gen(max_tokens, 0.0f, 0, 0);

	if (!c)
		return;
	nt = encode(jobs[0].prompt, toks, 64);
	p.ignore_eos = true;
	p.n_stop = n_stop;
	for (int i = 0; i < n_stop; i++)
		p.stop[i] = stops[i];
	CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
	CHECK(opus_sched_submit(s, 7, toks, nt, &p, &err) == OPUS_OK, "submit: %s", err.msg);
	run_all(s, 200);
	check_clean(col, "stops");
	*out = *got_for(col, 7);
	opus_sched_free(s);
	CHECK(opus_ctx_free_blocks(c) == 64, "blocks back after a stop");
	opus_ctx_free(c);
	free(col);
}

static void
test_stops(void)
{
	/* the pieces of job 0's greedy continuation, to find token boundaries */
	struct opus_ctx *c = make_ctx(16, 64, 64, 512);
	int32_t		toks[128];
	int			nt = encode(jobs[0].prompt, toks, 64);
	int			n0 = nt;
	int32_t		n_vocab = opus_model_hparams(model)->n_vocab;
	float	   *logits = malloc(sizeof(float) * (size_t) n_vocab);
	int			bound[64];		/* text offset where each piece ends */
	char		full[TEXT_CAP];
	int			len = 0;
	struct opus_seq seq;
	struct opus_batch_item it = {0};
	struct opus_error err = {0};
	struct got *g = malloc(sizeof(*g));
	char		stop_split[16];
	int			split_at = -1;
	const int	n_gen = jobs[0].max_tokens;

	if (!c)
		return;
	opus_seq_init(&seq);
	it.seq = &seq;
	it.tokens = toks;
	it.n_tokens = nt;
	it.logits = logits;
	for (int i = 0; i < n_gen; i++)
	{
		int32_t		best = 0;

		CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "forward");
		for (int32_t v = 1; v < n_vocab; v++)
			if (logits[v] > logits[best])
				best = v;
		toks[nt] = best;
		len += opus_tokenizer_piece(tok, best, false, full + len, 64);
		bound[i] = len;
		it.tokens = &toks[nt++];
		it.n_tokens = 1;
	}
	full[len] = '\0';
	opus_seq_release(c, &seq);
	opus_ctx_free(c);
	free(logits);
	CHECK(strcmp(full, alone[0].text) == 0, "reference text matches the scheduler's");
	(void) n0;

	/* a stop string that spans a token boundary (2 bytes each side) */
	for (int i = 1; i < n_gen - 1 && split_at < 0; i++)
	{
		int			b = bound[i];

		if (b - bound[i - 1] >= 2 && bound[i + 1] - b >= 2 && b >= 2)
			split_at = b;
	}
	CHECK(split_at > 0, "found a token boundary with 2 bytes either side in '%s'", full);
	if (split_at > 0)
	{
		const char *stops[1] = {stop_split};
		const char *first;
		int			expect;

		memcpy(stop_split, full + split_at - 2, 4);
		stop_split[4] = '\0';
		first = strstr(full, stop_split);
		expect = (int) (first - full);
		run_with_stops(stops, 1, n_gen, g);
		CHECK(g->done.finish == OPUS_FINISH_STOP, "split stop: finish STOP (%d)",
			  g->done.finish);
		CHECK(g->n_text == expect && memcmp(g->text, full, (size_t) expect) == 0,
			  "split stop '%s': got '%s', want the first %d bytes of '%s'",
			  stop_split, g->text, expect, full);
		CHECK(strstr(g->text, stop_split) == NULL, "stop string not emitted");
		CHECK(g->done.n_completion < n_gen, "stopped early (%d)", g->done.n_completion);
	}

	/* earliest of several stops wins, whatever their order */
	if (len > 12)
	{
		char		late[8],
					early[8];
		const char *stops[2] = {late, early};
		int			expect;

		memcpy(late, full + len - 4, 3);
		late[3] = '\0';
		memcpy(early, full + 5, 3);
		early[3] = '\0';
		expect = (int) (strstr(full, early) - full);
		if (strstr(full, late) - full < expect)
			expect = (int) (strstr(full, late) - full);
		run_with_stops(stops, 2, n_gen, g);
		CHECK(g->done.finish == OPUS_FINISH_STOP && g->n_text == expect &&
			  memcmp(g->text, full, (size_t) expect) == 0,
			  "two stops: got '%s' (%d bytes), want %d bytes", g->text, g->n_text,
			  expect);
	}

	/* a stop that only starts to match is held back, then released in full */
	if (len > 6)
	{
		char		almost[16];
		const char *stops[1] = {almost};

		memcpy(almost, full + len - 3, 3);
		memcpy(almost + 3, "\x01zz", 4);
		run_with_stops(stops, 1, n_gen, g);
		CHECK(g->done.finish == OPUS_FINISH_LENGTH && strcmp(g->text, full) == 0,
			  "partial stop match: got '%s', want '%s'", g->text, full);
	}

	/* a stop at the very first byte: no text at all */
	{
		char		head[4];
		const char *stops[1] = {head};

		memcpy(head, full, 2);
		head[2] = '\0';
		run_with_stops(stops, 1, n_gen, g);
		CHECK(g->done.finish == OPUS_FINISH_STOP && g->n_text == 0 &&
			  g->n_text_events == 0, "stop at byte 0: nothing emitted ('%s')",
			  g->text);
	}

	/* max_tokens: LENGTH with exactly max_tokens completion tokens */
	run_with_stops(NULL, 0, 5, g);
	CHECK(g->done.finish == OPUS_FINISH_LENGTH && g->done.n_completion == 5,
		  "max_tokens 5: finish %d, %d tokens", g->done.finish, g->done.n_completion);
	CHECK(g->n_text_tokens <= 5 && g->n_text_tokens >= 4,
		  "TEXT events cover the tokens (%d)", g->n_text_tokens);
	CHECK(len >= g->n_text && memcmp(g->text, full, (size_t) g->n_text) == 0 &&
		  g->n_text == bound[4], "max_tokens 5 text is the first 5 pieces");
	CHECK(g->done.n_prompt == n0 && g->done.total_ms >= g->done.ttft_ms &&
		  g->done.ttft_ms >= g->done.queue_ms && g->done.queue_ms >= 0.0,
		  "DONE counts and times (%d, %.2f, %.2f, %.2f)", g->done.n_prompt,
		  g->done.queue_ms, g->done.ttft_ms, g->done.total_ms);
	run_with_stops(NULL, 0, 1, g);
	CHECK(g->done.finish == OPUS_FINISH_LENGTH && g->done.n_completion == 1,
		  "max_tokens 1");
	free(g);
}

static void
test_eos(void)
{
	/* a chat turn ends with <|im_end|>: finish STOP before max_tokens */
	struct opus_ctx *c = make_ctx(16, 64, 64, 512);
	struct collector *col = calloc(1, sizeof(*col));
	struct opus_sched *s = NULL;
	struct opus_error err = {0};
	int32_t		toks[128];
	int64_t		nt = 0;
	const char *chat = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n";
	struct opus_gen_params p = gen(60, 0.0f, 0, 0);

	if (!c)
		return;
	CHECK(opus_tokenizer_encode(tok, chat, strlen(chat), false, true, toks, 128,
								&nt, &err) == OPUS_OK, "encode chat");
	CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
	CHECK(opus_sched_submit(s, 5, toks, (int32_t) nt, &p, &err) == OPUS_OK, "submit");
	run_all(s, 100);
	printf("chat reply: '%s' (%d tokens)\n", got_for(col, 5)->text,
		   got_for(col, 5)->done.n_completion);
	CHECK(got_for(col, 5)->done.finish == OPUS_FINISH_STOP &&
		  got_for(col, 5)->done.n_completion < 60,
		  "end-of-generation token stops (finish %d)", got_for(col, 5)->done.finish);
	CHECK(strstr(got_for(col, 5)->text, "<|im_end|>") == NULL, "EOG not rendered");
	check_clean(col, "eos");
	opus_sched_free(s);
	opus_ctx_free(c);
	free(col);
}

static void
test_priority(void)
{
	/* a pool that holds one request at a time: order is the queue order */
	struct opus_ctx *c = make_ctx(16, 1, 64, 64);
	struct collector *col = calloc(1, sizeof(*col));
	struct opus_sched *s = NULL;
	struct opus_error err = {0};
	int32_t		toks[64];
	int			nt;

	if (!c)
		return;
	nt = encode("Hello there, my friend, how", toks, 64);
	CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
	opus_sched_set_aging(s, 0.0);	/* strict classes, however slow the run */
	for (int i = 0; i < 4; i++)
	{
		/* ids 10 (prio 1), 11 (prio 1), 12 (prio 0), 13 (prio 0) */
		struct opus_gen_params p = gen(4, 0.0f, 0, i < 2 ? 1 : 0);

		p.ignore_eos = true;
		CHECK(opus_sched_submit(s, 10 + (uint64_t) i, toks, nt, &p, &err) == OPUS_OK,
			  "submit %d: %s", i, err.msg);
	}
	run_all(s, 200);
	CHECK(col->n_done == 4 && col->done_order[0] == 12 && col->done_order[1] == 13 &&
		  col->done_order[2] == 10 && col->done_order[3] == 11,
		  "priority then FIFO: %llu %llu %llu %llu",
		  (unsigned long long) col->done_order[0], (unsigned long long) col->done_order[1],
		  (unsigned long long) col->done_order[2], (unsigned long long) col->done_order[3]);
	check_clean(col, "priority");
	opus_sched_free(s);
	free(col);

	/*
	 * A priority-0 request arriving while a background one holds the only
	 * block preempts it; the background one then finishes with the same
	 * (seeded, sampled) text it produces alone.
	 */
	{
		struct opus_gen_params bg = gen(8, 0.9f, 77, 2);
		struct opus_gen_params fg = gen(4, 0.0f, 0, 0);
		char		bg_alone[TEXT_CAP];
		struct opus_sched_stats st;

		bg.ignore_eos = true;
		fg.ignore_eos = true;
		for (int round = 0; round < 2; round++)
		{
			col = calloc(1, sizeof(*col));
			CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
			opus_sched_set_aging(s, 0.0);
			CHECK(opus_sched_submit(s, 20, toks, nt, &bg, &err) == OPUS_OK, "submit bg");
			if (round == 1)
			{
				for (int i = 0; i < 3; i++)
					CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
				CHECK(got_for(col, 20)->n_text > 0, "background started");
				CHECK(opus_sched_submit(s, 21, toks, nt, &fg, &err) == OPUS_OK,
					  "submit fg");
			}
			run_all(s, 200);
			check_clean(col, "priority preemption");
			if (round == 0)
				strcpy(bg_alone, got_for(col, 20)->text);
			else
			{
				opus_sched_get_stats(s, &st);
				CHECK(col->n_done == 2 && col->done_order[0] == 21 &&
					  col->done_order[1] == 20, "the urgent request went first");
				CHECK(st.preemptions >= 1, "background request preempted");
				CHECK(strcmp(got_for(col, 20)->text, bg_alone) == 0,
					  "preempted background text '%s' vs alone '%s'",
					  got_for(col, 20)->text, bg_alone);
				CHECK(got_for(col, 20)->done.n_completion == 8, "background count");
			}
			opus_sched_free(s);
			free(col);
		}
	}
	CHECK(opus_ctx_free_blocks(c) == 1, "block back");
	opus_ctx_free(c);
}

static void
test_rejections(void)
{
	/* n_ctx 64, pool of 3 blocks of 16 = 48 positions */
	struct opus_ctx *c = make_ctx(16, 3, 64, 64);
	struct collector *col = calloc(1, sizeof(*col));
	struct opus_sched *s = NULL;
	struct opus_error err = {0};
	int32_t		toks[64];
	int			nt;
	struct opus_gen_params p = gen(8, 0.0f, 0, 0);
	struct opus_gen_params q;
	char		longstop[OPUS_MAX_STOP_LEN + 2];

	if (!c)
		return;
	nt = encode("Hello", toks, 64);
	CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");

	CHECK(opus_sched_submit(s, 1, toks, 0, &p, &err) == OPUS_ERR_INVALID_ARG,
		  "empty prompt");
	q = p;
	q.max_tokens = 64;
	err.msg[0] = '\0';
	CHECK(opus_sched_submit(s, 1, toks, nt, &q, &err) == OPUS_ERR_CONTEXT &&
		  err.code == OPUS_ERR_CONTEXT && strstr(err.msg, "64"),
		  "prompt + max_tokens over n_ctx: %s", err.msg);
	q.max_tokens = 60 - nt;		/* fits n_ctx, not the 48-position pool */
	CHECK(opus_sched_submit(s, 1, toks, nt, &q, &err) == OPUS_ERR_CAPACITY,
		  "more blocks than the pool: %s", err.msg);
	q = p;
	q.max_tokens = 0;
	CHECK(opus_sched_submit(s, 1, toks, nt, &q, &err) == OPUS_ERR_INVALID_ARG &&
		  strstr(err.msg, "max_tokens"), "max_tokens 0: %s", err.msg);
	q = p;
	q.sampling.top_p = 0.0f;
	CHECK(opus_sched_submit(s, 1, toks, nt, &q, &err) == OPUS_ERR_INVALID_ARG &&
		  strstr(err.msg, "top_p"), "top_p 0: %s", err.msg);
	q = p;
	q.sampling.temperature = NAN;
	CHECK(opus_sched_submit(s, 1, toks, nt, &q, &err) == OPUS_ERR_INVALID_ARG &&
		  strstr(err.msg, "temperature"), "temperature NaN: %s", err.msg);
	q = p;
	q.n_stop = OPUS_MAX_STOP + 1;
	for (int i = 0; i < OPUS_MAX_STOP; i++)
		q.stop[i] = "x";
	CHECK(opus_sched_submit(s, 1, toks, nt, &q, &err) == OPUS_ERR_INVALID_ARG,
		  "too many stops: %s", err.msg);
	q = p;
	q.n_stop = 1;
	q.stop[0] = "";
	CHECK(opus_sched_submit(s, 1, toks, nt, &q, &err) == OPUS_ERR_INVALID_ARG,
		  "empty stop: %s", err.msg);
	memset(longstop, 'a', OPUS_MAX_STOP_LEN + 1);
	longstop[OPUS_MAX_STOP_LEN + 1] = '\0';
	q.stop[0] = longstop;
	CHECK(opus_sched_submit(s, 1, toks, nt, &q, &err) == OPUS_ERR_INVALID_ARG,
		  "stop over %d bytes: %s", OPUS_MAX_STOP_LEN, err.msg);
	longstop[OPUS_MAX_STOP_LEN] = '\0';
	CHECK(opus_sched_submit(s, 1, toks, nt, &q, &err) == OPUS_OK,
		  "stop of exactly %d bytes is fine: %s", OPUS_MAX_STOP_LEN, err.msg);
	CHECK(opus_sched_submit(s, 1, toks, nt, &p, &err) == OPUS_ERR_INVALID_ARG &&
		  strstr(err.msg, "id"), "duplicate id: %s", err.msg);
	{
		int32_t		bad[2] = {toks[0], opus_model_hparams(model)->n_vocab};

		CHECK(opus_sched_submit(s, 2, bad, 2, &p, &err) == OPUS_ERR_TOKENIZE,
			  "token out of range: %s", err.msg);
	}
	/* exactly n_ctx passes the context check (and fails on the pool) */
	q = p;
	q.max_tokens = 64 - nt;
	CHECK(opus_sched_submit(s, 3, toks, nt, &q, &err) == OPUS_ERR_CAPACITY,
		  "prompt + max_tokens == n_ctx is not a context error: %s", err.msg);
	CHECK(col->n_events == 0, "rejections emit no events");
	CHECK(opus_sched_n_active(s) == 1, "only the valid request is queued");
	run_all(s, 50);
	check_clean(col, "rejections");
	opus_sched_free(s);
	opus_ctx_free(c);
	free(col);
}

/* ---- prefix cache ---- */

static const char *const long_prefix =
	"You are a careful assistant. Read the following product review and answer "
	"in one short sentence whether the customer was happy, and why. Do not add "
	"anything else, do not repeat the review, and keep the answer polite. Review: ";

struct one
{
	char		text[TEXT_CAP];
	struct opus_event done;
};

/*
 * Submit each prompt (greedy, or seeded at temp > 0) to a fresh scheduler
 * over c, n at once, or one after another when `stagger` steps apart; run
 * to the end.
 */
static void
run_prompts(struct opus_ctx *c, const char *const *prompts, int n, int max_tokens,
			float temp, int stagger, struct one *out, struct opus_sched_stats *st)
{
	struct collector *col = calloc(1, sizeof(*col));
	struct opus_sched *s = NULL;
	struct opus_error err = {0};

	CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create: %s", err.msg);
	if (!s)
	{
		free(col);
		return;
	}
	for (int i = 0; i < n; i++)
	{
		int32_t		toks[512];
		int			nt = encode(prompts[i], toks, 512);
		/* the seed follows the prompt, not its position in the list */
		struct opus_gen_params p = gen(max_tokens, temp, 4242 + strlen(prompts[i]), 0);

		p.ignore_eos = true;
		CHECK(opus_sched_submit(s, 500 + (uint64_t) i, toks, nt, &p, &err) == OPUS_OK,
			  "submit %d: %s", i, err.msg);
		for (int k = 0; k < stagger; k++)
			CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
	}
	run_all(s, 4000);
	check_clean(col, "prefix");
	for (int i = 0; i < n; i++)
	{
		struct got *g = got_for(col, 500 + (uint64_t) i);

		memcpy(out[i].text, g->text, sizeof(g->text));
		out[i].done = g->done;
	}
	if (st)
		opus_sched_get_stats(s, st);
	opus_sched_free(s);
	free(col);
}

static void
test_prefix_cache(void)
{
	static char p0[1024],
				p1[1024],
				p2[1024];
	const char *prompts[3] = {p0, p1, p2};
	static struct one fresh[3],
				again[3],
				both[3];
	struct opus_sched_stats st;
	int32_t		toks[512];
	int			n0;

	snprintf(p0, sizeof(p0), "%s%s", long_prefix, "The blender broke after two days and support never answered.");
	snprintf(p1, sizeof(p1), "%s%s", long_prefix, "Lovely soft scarf, the colour is exactly as pictured.");
	snprintf(p2, sizeof(p2), "%s%s", long_prefix, "Arrived late but works well.");
	n0 = encode(p0, toks, 512);

	for (int temp = 0; temp < 2; temp++)
	{
		float		t = temp ? 0.9f : 0.0f;

		/* each prompt on its own fresh pool: no hits possible */
		for (int i = 0; i < 3; i++)
		{
			struct opus_ctx *c = make_ctx(16, 64, 64, 512);

			if (!c)
				return;
			run_prompts(c, &prompts[i], 1, 12, t, 0, &fresh[i], &st);
			CHECK(fresh[i].done.n_cached == 0 && st.prefix_hit_tokens == 0,
				  "fresh pool: no hit (%d)", fresh[i].done.n_cached);
			CHECK(st.prefix_query_tokens == fresh[i].done.n_prompt, "queries counted");
			opus_ctx_free(c);
		}

		/*
		 * One pool: p0 runs, then p0 again (all full blocks but the last
		 * token's hit), then p1 (the shared instruction hits).
		 */
		{
			struct opus_ctx *c = make_ctx(16, 64, 64, 512);
			int			expect0 = (n0 - 1) / 16 * 16;

			if (!c)
				return;
			run_prompts(c, &prompts[0], 1, 12, t, 0, &again[0], &st);
			CHECK(again[0].done.n_cached == 0, "first run misses");
			CHECK(c->kv.n_cached > 0 && c->kv.n_evictable == c->kv.n_cached &&
				  opus_ctx_free_blocks(c) == 64,
				  "blocks stay cached, unreferenced and allocatable (%lld cached)",
				  (long long) c->kv.n_cached);
			run_prompts(c, &prompts[0], 1, 12, t, 0, &again[1], &st);
			CHECK(again[1].done.n_cached == expect0,
				  "rerun: %d prompt tokens cached, want %d of %d", again[1].done.n_cached,
				  expect0, n0);
			CHECK(st.prefix_hit_tokens == expect0 && st.prefix_query_tokens == n0,
				  "stats: %lld hit of %lld", (long long) st.prefix_hit_tokens,
				  (long long) st.prefix_query_tokens);
			CHECK(strcmp(again[1].text, fresh[0].text) == 0,
				  "temp %.1f: cached rerun '%s' vs fresh '%s'", t, again[1].text, fresh[0].text);
			CHECK(strcmp(again[0].text, fresh[0].text) == 0, "first run equals fresh");
			run_prompts(c, &prompts[1], 1, 12, t, 0, &again[2], &st);
			CHECK(again[2].done.n_cached >= 32 && again[2].done.n_cached % 16 == 0 &&
				  again[2].done.n_cached < again[2].done.n_prompt,
				  "shared instruction hits (%d of %d)", again[2].done.n_cached,
				  again[2].done.n_prompt);
			CHECK(strcmp(again[2].text, fresh[1].text) == 0,
				  "temp %.1f: prefix-hit '%s' vs fresh '%s'", t, again[2].text, fresh[1].text);
			opus_ctx_free(c);
		}

		/*
		 * Staggered on one pool: p1 and p2 join while p0 is decoding and
		 * share its live blocks (reference counts above 1).
		 */
		{
			struct opus_ctx *c = make_ctx(16, 64, 64, 512);

			if (!c)
				return;
			run_prompts(c, prompts, 3, 12, t, 3, both, &st);
			for (int i = 0; i < 3; i++)
				CHECK(strcmp(both[i].text, fresh[i].text) == 0,
					  "temp %.1f staggered %d: '%s' vs fresh '%s'", t, i, both[i].text,
					  fresh[i].text);
			CHECK(both[0].done.n_cached == 0 && both[1].done.n_cached >= 32 &&
				  both[2].done.n_cached >= 32, "later ones hit (%d %d %d)",
				  both[0].done.n_cached, both[1].done.n_cached, both[2].done.n_cached);
			CHECK(st.kv_blocks_used == 0, "nothing held at the end");
			opus_ctx_free(c);
		}
	}
}

/*
 * A pool too small to keep everything: cached blocks are evicted to make
 * room, outputs do not change, nothing leaks.
 */
static void
test_prefix_eviction(void)
{
	static char p[6][512];
	const char *prompts[6];
	static struct one ref[6],
				got[6];
	const char *tails[6] = {"Great.", "Awful.", "Fine, I guess.", "Never again.",
	"Five stars!", "It is a blender."};
	struct opus_ctx *c = make_ctx(16, 64, 64, 512);
	struct opus_ctx *small = make_ctx(16, 10, 64, 512);

	if (!c || !small)
		return;
	for (int i = 0; i < 6; i++)
	{
		/* distinct instructions so that the cache fills with unrelated blocks */
		snprintf(p[i], sizeof(p[i]), "[%d] %s%s", i, long_prefix, tails[i]);
		prompts[i] = p[i];
	}
	run_prompts(c, prompts, 6, 8, 0.0f, 0, ref, NULL);
	for (int i = 0; i < 6; i++)
	{
		run_prompts(small, &prompts[i], 1, 8, 0.0f, 0, &got[i], NULL);
		CHECK(strcmp(got[i].text, ref[i].text) == 0, "small pool %d: '%s' vs '%s'",
			  i, got[i].text, ref[i].text);
	}
	printf("evictions on a 10-block pool: %lld, cached %lld\n",
		   (long long) small->kv.evictions, (long long) small->kv.n_cached);
	CHECK(small->kv.evictions > 0, "the small pool evicted cached blocks");
	CHECK(opus_ctx_free_blocks(small) == 10 && small->kv.n_cached <= 10,
		  "every block allocatable at the end");
	/* the last prompt is still cached: a rerun hits */
	run_prompts(small, &prompts[5], 1, 8, 0.0f, 0, &got[5], NULL);
	CHECK(got[5].done.n_cached > 0 && strcmp(got[5].text, ref[5].text) == 0,
		  "most recent prefix survives eviction (%d cached)", got[5].done.n_cached);
	opus_ctx_free(small);
	opus_ctx_free(c);
}

/*
 * Aging: a batch-class request waiting behind interactive ones is promoted
 * one class per aging period (300 ms here) and goes ahead of later
 * interactive arrivals, without preempting anyone.
 */
static void
test_aging(void)
{
	struct opus_ctx *c = make_ctx(16, 1, 64, 64);
	struct collector *col = calloc(1, sizeof(*col));
	struct opus_sched *s = NULL;
	struct opus_error err = {0};
	int32_t		toks[64];
	int			nt;
	struct opus_gen_params fg = gen(3, 0.0f, 0, 0);
	struct opus_gen_params bg = gen(3, 0.0f, 0, 1);
	struct timespec ts = {0, 400 * 1000 * 1000};

	if (!c)
		return;
	nt = encode("Hello there, my friend, how", toks, 64);
	fg.ignore_eos = bg.ignore_eos = true;
	CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
	opus_sched_set_aging(s, 300.0);
	CHECK(opus_sched_submit(s, 30, toks, nt, &fg, &err) == OPUS_OK, "submit fg 30");
	CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
	CHECK(opus_sched_submit(s, 31, toks, nt, &bg, &err) == OPUS_OK, "submit bg 31");
	nanosleep(&ts, NULL);
	CHECK(opus_sched_submit(s, 32, toks, nt, &fg, &err) == OPUS_OK, "submit fg 32");
	run_all(s, 200);
	CHECK(col->n_done == 3 && col->done_order[0] == 30 && col->done_order[1] == 31 &&
		  col->done_order[2] == 32,
		  "aged batch request before a later interactive one: %llu %llu %llu",
		  (unsigned long long) col->done_order[0], (unsigned long long) col->done_order[1],
		  (unsigned long long) col->done_order[2]);
	opus_sched_free(s);
	free(col);
	/* without aging the interactive one goes first */
	col = calloc(1, sizeof(*col));
	CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
	opus_sched_set_aging(s, 0.0);
	CHECK(opus_sched_submit(s, 30, toks, nt, &fg, &err) == OPUS_OK, "submit fg 30");
	CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
	CHECK(opus_sched_submit(s, 31, toks, nt, &bg, &err) == OPUS_OK, "submit bg 31");
	nanosleep(&ts, NULL);
	CHECK(opus_sched_submit(s, 32, toks, nt, &fg, &err) == OPUS_OK, "submit fg 32");
	run_all(s, 200);
	CHECK(col->n_done == 3 && col->done_order[1] == 32 && col->done_order[2] == 31,
		  "interactive first without aging");
	opus_sched_free(s);
	free(col);
	opus_ctx_free(c);
}

/* Submit prompt as id with p, run to the end, return its DONE record. */
static struct opus_event
run_one(struct opus_sched *s, struct collector *col, uint64_t id, const char *prompt,
		struct opus_gen_params *p)
{
	int32_t		toks[512];
	int			nt = encode(prompt, toks, 512);
	struct opus_error err = {0};
	struct got *g;

	CHECK(opus_sched_submit(s, id, toks, nt, p, &err) == OPUS_OK, "submit %llu: %s",
		  (unsigned long long) id, err.msg);
	run_all(s, 400);
	g = got_for(col, id);
	return g ? g->done : (struct opus_event) {0};
}

/*
 * Prefix-cache scopes: a prompt cached under one scope is a miss under
 * another (and the output does not change); scope 0 is shared by all who
 * use it.
 */
static void
test_cache_scope(void)
{
	struct opus_ctx *c = make_ctx(16, 64, 64, 512);
	struct collector *col = calloc(1, sizeof(*col));
	struct opus_sched *s = NULL;
	struct opus_error err = {0};
	static char prompt[1024];
	struct opus_gen_params p = gen(4, 0.0f, 0, 0);
	struct opus_event d[5];

	if (!c)
		return;
	snprintf(prompt, sizeof(prompt), "%s%s", long_prefix, "Arrived late but works well.");
	CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
	p.ignore_eos = true;
	p.cache_scope = 0x1111;
	d[0] = run_one(s, col, 1, prompt, &p);
	d[1] = run_one(s, col, 2, prompt, &p);
	p.cache_scope = 0x2222;
	d[2] = run_one(s, col, 3, prompt, &p);
	p.cache_scope = 0;
	d[3] = run_one(s, col, 4, prompt, &p);
	d[4] = run_one(s, col, 5, prompt, &p);
	CHECK(d[0].n_cached == 0 && d[1].n_cached >= 32, "same scope hits (%d %d)",
		  d[0].n_cached, d[1].n_cached);
	CHECK(d[2].n_cached == 0, "another scope misses (%d)", d[2].n_cached);
	CHECK(d[3].n_cached == 0 && d[4].n_cached >= 32, "the server scope is a scope too (%d %d)",
		  d[3].n_cached, d[4].n_cached);
	for (int i = 1; i < 5; i++)
		CHECK(strcmp(got_for(col, (uint64_t) i + 1)->text, got_for(col, 1)->text) == 0,
			  "scope %d: same output", i);
	opus_sched_free(s);
	free(col);
	opus_ctx_free(c);
}

/*
 * Fair eviction across scopes through the scheduler: on a 16-block pool,
 * scope A runs a prompt, then scope B runs six unrelated prompts (more than
 * the pool holds), then A reruns its prompt: its prefix is still cached
 * (B evicted its own blocks) and the output is unchanged.  The control run
 * floods from A's own scope: then A's prompt is evicted (least recently
 * used within a scope), so the pool is really too small for everything.
 */
static void
test_scope_eviction(void)
{
	static char pa[1024],
				pb[6][1024];
	struct opus_event first,
				again;
	char		first_text[TEXT_CAP];

	snprintf(pa, sizeof(pa), "%s%s", long_prefix, "Arrived late but works well.");
	for (int i = 0; i < 6; i++)
		snprintf(pb[i], sizeof(pb[i]), "Note %d of a different kind: %s%s", i, long_prefix,
				 "It is a blender.");
	for (int control = 0; control < 2; control++)
	{
		struct opus_ctx *c = make_ctx(16, 16, 64, 512);
		struct collector *col = calloc(1, sizeof(*col));
		struct opus_sched *s = NULL;
		struct opus_error err = {0};
		struct opus_gen_params p = gen(4, 0.0f, 0, 0);
		uint64_t	flood = control ? 0xA : 0xB;

		if (!c || !col)
			return;
		CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
		p.ignore_eos = true;
		p.cache_scope = 0xA;
		first = run_one(s, col, 1, pa, &p);
		if (got_for(col, 1))
			snprintf(first_text, sizeof(first_text), "%s", got_for(col, 1)->text);
		p.cache_scope = flood;
		for (int i = 0; i < 6; i++)
			(void) run_one(s, col, 10 + i, pb[i], &p);
		CHECK(c->kv.evictions > 0, "the flood evicted (%lld evictions)",
			  (long long) c->kv.evictions);
		p.cache_scope = 0xA;
		again = run_one(s, col, 2, pa, &p);
		if (!control)
		{
			CHECK(first.n_cached == 0 && again.n_cached >= 48,
				  "A's prefix survives B's flood (%d of %d prompt tokens cached)",
				  again.n_cached, again.n_prompt);
			CHECK(got_for(col, 2) && strcmp(got_for(col, 2)->text, first_text) == 0,
				  "same output from the cache");
		}
		else
			CHECK(again.n_cached == 0,
				  "control: A's own flood evicts its prompt (%d cached)", again.n_cached);
		opus_sched_free(s);
		free(col);
		opus_ctx_free(c);
	}
}

/*
 * Bounded credit: tenant 2 keeps a backlog of unrelated prompts while
 * tenant 1 runs one request at a time (a one-session client), so tenant 1
 * is live but never backlogged and tenant 2 gets the batch places it cannot
 * use.  Without a bound (credit 0) tenant 2's counter lead over tenant 1,
 * seen at each of tenant 1's arrivals, grows round after round; with the
 * default bound it is at most OPUS_SCHED_FAIR_CREDIT at every arrival (and
 * tenant 1, still behind, still goes first).
 */
/*
 * Tenant 2's backlog: n requests 200.. with prompts from fmt (the item
 * number and a number derived from it), cut to len tokens when len > 0.
 */
static void
submit_backlog(struct opus_sched *s, const struct opus_gen_params *pb, int n, const char *fmt, int len)
{
	struct opus_error err = {0};

	for (int i = 0; i < n; i++)
	{
		char		prompt[128];
		int32_t		tb[64];
		int			nb;

		snprintf(prompt, sizeof(prompt), fmt, i, 7 * i + 3);
		nb = encode(prompt, tb, 64);
		if (len > 0)
		{
			CHECK(nb >= len, "tenant 2's prompt %d has %d tokens (%d)", i, len, nb);
			nb = len;
		}
		CHECK(opus_sched_submit(s, 200 + (uint64_t) i, tb, nb, pb, &err) == OPUS_OK,
			  "submit B %d", i);
	}
}

/* Steps until request id has ended, at most 200 steps. */
static void
step_until_done(struct opus_sched *s, struct collector *col, uint64_t id)
{
	struct opus_error err = {0};

	for (int steps = 0; steps < 200 && !(got_for(col, id) && got_for(col, id)->n_done > 0); steps++)
		CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
}

static void
test_fair_credit(void)
{
	int32_t		ta[64];
	int			na = encode("Hello there, my friend", ta, 64);
	double		max_gap[2] = {0.0, 0.0};

	for (int bounded = 0; bounded < 2; bounded++)
	{
		struct opus_ctx *c = make_ctx(16, 8, 64, 128);
		struct collector *col = calloc(1, sizeof(*col));
		struct opus_sched *s = NULL;
		struct opus_error err = {0};
		struct opus_gen_params pa = gen(8, 0.0f, 0, 0);
		struct opus_gen_params pb = gen(32, 0.0f, 0, 0);

		if (!c || !col)
			return;
		CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
		opus_sched_set_fair_credit(s, bounded ? OPUS_SCHED_FAIR_CREDIT : 0.0);
		/* no timing-dependent rule: the counters depend on the steps alone */
		opus_sched_set_aging(s, 0.0);
		opus_sched_set_starvation(s, 0.0);
		pa.ignore_eos = pb.ignore_eos = true;
		pa.tenant = 1;
		pb.tenant = 2;
		submit_backlog(s, &pb, 14, "Item %d of the list: write a line about the number %d.", 0);
		for (int round = 0; round < 16; round++)
		{
			uint64_t	id = 100 + (uint64_t) round;
			struct opus_sched_req_info ia,
						ib;
			bool		found = false;

			CHECK(opus_sched_submit(s, id, ta, na, &pa, &err) == OPUS_OK, "submit A %d", round);
			for (int i = 0; i < 14 && !found; i++)
				found = opus_sched_get_request(s, 200 + (uint64_t) i, &ib) && !ib.running;
			if (found && opus_sched_get_request(s, id, &ia) &&
				ib.tenant_service - ia.tenant_service > max_gap[bounded])
				max_gap[bounded] = ib.tenant_service - ia.tenant_service;
			step_until_done(s, col, id);
		}
		for (int i = 0; i < 14; i++)
			(void) opus_sched_cancel(s, 200 + (uint64_t) i);
		run_all(s, 400);
		opus_sched_free(s);
		free(col);
		opus_ctx_free(c);
	}
	printf("fair credit: tenant 2's largest lead at tenant 1's arrivals: %.0f unbounded, %.0f bounded\n",
		   max_gap[0], max_gap[1]);
	CHECK(max_gap[0] > OPUS_SCHED_FAIR_CREDIT + OPUS_SCHED_FAIR_MARGIN,
		  "without a bound the lead grows (%.0f)", max_gap[0]);
	CHECK(max_gap[1] <= OPUS_SCHED_FAIR_CREDIT + 1e-9 && max_gap[1] > OPUS_SCHED_FAIR_MARGIN,
		  "with the bound it stays at most %.0f (%.0f)", OPUS_SCHED_FAIR_CREDIT, max_gap[1]);
}

/* Tokens tenant 2's requests 200.. 200+n-1 have generated so far. */
static int64_t
generated_by(const struct opus_sched *s, struct collector *col, int n)
{
	int64_t		sum = 0;

	for (int i = 0; i < n; i++)
	{
		uint64_t	id = 200 + (uint64_t) i;
		struct opus_sched_req_info info;
		struct got *g = got_for(col, id);

		if (g && g->n_done > 0)
			sum += g->done.n_completion;
		else if (opus_sched_get_request(s, id, &info))
			sum += info.n_generated;
	}
	return sum;
}

/*
 * A one-session tenant in a closed loop: tenant 2 keeps a backlog of
 * requests while tenant 1 runs one request at a time and sends the next
 * one a step after the last ends (its client's round trip), on a pool of
 * four blocks where every request needs two (a 20-token prompt, 8 tokens
 * generated): two run at a time, so tenant 1 can get half the tokens.
 * Over eight rounds (after two that teach the scheduler tenant 1's think
 * time) it must get at least 40% of them (the 1-session-vs-many
 * target), with the anticipatory hold (default) and without it (then it
 * takes its place back by preemption).  Before either, tenant 2's queued
 * requests took tenant 1's room in the round trip's step, and tenant 1,
 * behind by less than the fair-share margin, waited for one of them to end:
 * a quarter.  Once tenant 1 stops, tenant 2 gets the held room back when
 * the hold lapses: two of its requests run (work-conserving).
 */
static void
test_fair_closed_loop(void)
{
	int32_t		ta[64];
	int			na = encode("Tenant one asks: please count from one to ten, slowly, and then stop and say goodbye.",
							ta, 64);

	/* 20-token prompts: with 8 generated, two blocks of 16 from admission to the end */
	CHECK(na >= 20, "tenant 1's prompt has 20 tokens (%d)", na);
	na = 20;
	for (int hold = 1; hold >= 0; hold--)
	{
		struct opus_ctx *c = make_ctx(16, 4, 64, 64);
		struct collector *col = calloc(1, sizeof(*col));
		struct opus_sched *s = NULL;
		struct opus_error err = {0};
		struct opus_gen_params pa = gen(8, 0.0f, 0, 0);
		struct opus_gen_params pb = gen(8, 0.0f, 0, 0);
		struct opus_sched_stats st0,
					st1;
		int64_t		b0 = 0,
					b1;
		int			rounds = 0,
					waits = 0;
		double		share;

		if (!c || !col)
			return;
		CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
		if (!hold)
			opus_sched_set_hold(s, 0.0);
		opus_sched_set_aging(s, 0.0);
		opus_sched_set_starvation(s, 0.0);
		pa.ignore_eos = pb.ignore_eos = true;
		pa.tenant = 1;
		pb.tenant = 2;
		submit_backlog(s, &pb, 30,
					   "Item %d of the list: write one line about the number %d, please, and thank you.", 20);
		for (int round = 0; round < 10; round++)
		{
			uint64_t	id = 100 + (uint64_t) round;

			if (round == 2)
			{
				opus_sched_get_stats(s, &st0);
				b0 = generated_by(s, col, 30);
			}
			rounds += round >= 2;
			CHECK(opus_sched_submit(s, id, ta, na, &pa, &err) == OPUS_OK, "submit A %d", round);
			step_until_done(s, col, id);
			/* the client's round trip: one step without tenant 1 */
			CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
		}
		opus_sched_get_stats(s, &st1);
		b1 = generated_by(s, col, 30);
		share = (double) (8 * rounds) / (double) (8 * rounds + (b1 - b0));
		printf("closed loop, hold %s: tenant 1's share %.3f (%d tokens, tenant 2 %lld), %lld fair preemptions\n",
			   hold ? "on" : "off", share, 8 * rounds, (long long) (b1 - b0),
			   (long long) (st1.fair_preemptions - st0.fair_preemptions));
		CHECK(share >= 0.40, "hold %s: one session gets at least 40%% in a closed loop (%.3f)",
			  hold ? "on" : "off", share);
		/*
		 * Work-conserving: with tenant 1 gone, the hold lapses (it lasts at
		 * most a few steps' time) and two of tenant 2's requests share a step.
		 */
		for (;;)
		{
			struct timespec ts = {0, 250 * 1000 * 1000};

			CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
			opus_sched_get_stats(s, &st1);
			if (st1.batch_size == 2 || ++waits == 40)
				break;
			nanosleep(&ts, NULL);
		}
		CHECK(st1.batch_size == 2, "hold %s: tenant 1 gone, two of tenant 2's requests run (%d after %d waits)",
			  hold ? "on" : "off", st1.batch_size, waits);
		for (int i = 0; i < 30; i++)
			(void) opus_sched_cancel(s, 200 + (uint64_t) i);
		run_all(s, 400);
		opus_sched_free(s);
		free(col);
		opus_ctx_free(c);
	}
}

/*
 * Fair share: with room for two sequences, tenant 1 queues six requests,
 * then tenant 2 one.  The least-served tenant goes first, so tenant 2's
 * request is admitted at the first free place, not after tenant 1's
 * backlog; with one tenant it is first come, first served.  A ceiling
 * (min_priority) stops aging.
 */
static void
test_fair_share(void)
{
	struct opus_ctx *c = make_ctx(16, 2, 64, 64);
	int32_t		toks[64];
	int			nt;
	struct opus_error err = {0};

	if (!c)
		return;
	nt = encode("Hello there, my friend", toks, 64);
	for (int fair = 0; fair < 2; fair++)
	{
		struct collector *col = calloc(1, sizeof(*col));
		struct opus_sched *s = NULL;
		struct opus_gen_params p = gen(8, 0.0f, 0, 0);
		int			pos = -1;

		p.ignore_eos = true;
		CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
		p.tenant = 1;
		for (int i = 0; i < 6; i++)
			CHECK(opus_sched_submit(s, 100 + (uint64_t) i, toks, nt, &p, &err) == OPUS_OK,
				  "submit");
		CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
		p.tenant = fair ? 2 : 1;
		CHECK(opus_sched_submit(s, 200, toks, nt, &p, &err) == OPUS_OK, "submit 200");
		run_all(s, 400);
		for (int i = 0; i < col->n_done; i++)
			if (col->done_order[i] == 200)
				pos = i;
		if (fair)
			CHECK(pos >= 0 && pos <= 3, "the other tenant's request finishes early (%d of 7)",
				  pos + 1);
		else
			CHECK(pos == 6, "one tenant: first come, first served (%d of 7)", pos + 1);
		opus_sched_free(s);
		free(col);
	}
	opus_ctx_free(c);

	/* aging stops at min_priority: a batch request with ceiling 2 never passes class 0 */
	c = make_ctx(16, 1, 64, 64);
	if (!c)
		return;
	{
		struct collector *col = calloc(1, sizeof(*col));
		struct opus_sched *s = NULL;
		struct opus_gen_params fg = gen(3, 0.0f, 0, 0);
		struct opus_gen_params bg = gen(3, 0.0f, 0, 3);
		struct timespec ts = {0, 400 * 1000 * 1000};

		fg.ignore_eos = bg.ignore_eos = true;
		bg.min_priority = 2;
		CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
		opus_sched_set_aging(s, 50.0);
		CHECK(opus_sched_submit(s, 30, toks, nt, &fg, &err) == OPUS_OK, "submit fg 30");
		CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
		CHECK(opus_sched_submit(s, 31, toks, nt, &bg, &err) == OPUS_OK, "submit bg 31");
		nanosleep(&ts, NULL);
		CHECK(opus_sched_submit(s, 32, toks, nt, &fg, &err) == OPUS_OK, "submit fg 32");
		run_all(s, 200);
		CHECK(col->n_done == 3 && col->done_order[1] == 32 && col->done_order[2] == 31,
			  "aging stops at the ceiling: %llu %llu %llu",
			  (unsigned long long) col->done_order[0], (unsigned long long) col->done_order[1],
			  (unsigned long long) col->done_order[2]);
		bg.min_priority = 4;
		CHECK(opus_sched_submit(s, 33, toks, nt, &bg, &err) == OPUS_ERR_INVALID_ARG,
			  "min_priority above priority rejected");
		bg.min_priority = 0;
		bg.weight = OPUS_SCHED_MAX_WEIGHT + 1;
		CHECK(opus_sched_submit(s, 34, toks, nt, &bg, &err) == OPUS_ERR_INVALID_ARG,
			  "weight out of range rejected");
		opus_sched_free(s);
		free(col);
	}
	opus_ctx_free(c);
}

/*
 * Weights: tenants of weight 3 and 1 each queue 12 requests of a 96-token
 * prompt (each its own, so no prefix is shared) and 4 generated tokens
 * before the first step, on a pool of 15 blocks: two requests at a time,
 * and none grows past the 7 blocks it is admitted with, so the pool never
 * runs out mid-request and only fair share decides who runs.  While both
 * are backlogged the first gets about three times the service: of the
 * requests finished by the time its backlog is done, its share is 0.75
 * (0.62 to 0.88 allowed: the fair-share margin, 64 virtual tokens, lets
 * either tenant run half a request ahead).  No clock is involved.
 */
#define FAIR_N 12
#define FAIR_PROMPT 96

static void
test_fair_weights(void)
{
	static const char *words = "one two three four five six seven eight nine ten eleven twelve "
		"thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty twenty-one "
		"twenty-two twenty-three twenty-four twenty-five twenty-six twenty-seven";
	struct opus_ctx *c = make_ctx(16, 15, 64, 256);
	struct collector *col;
	struct opus_sched *s = NULL;
	struct opus_error err = {0};
	int			last1 = -1;
	int			before = 0;
	char		seq[2 * FAIR_N + 1] = {0};
	double		share;
	struct opus_sched_stats st;

	if (!c)
		return;
	col = calloc(1, sizeof(*col));
	CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
	for (int i = 0; s && i < 2 * FAIR_N; i++)
	{
		struct opus_gen_params p = gen(4, 0.0f, 0, 0);
		char		buf[1024];
		int32_t		toks[256];
		int			nt;

		snprintf(buf, sizeof(buf), "Request %d. Count from %d: %s %s %s", i, i * 7, words, words, words);
		nt = encode(buf, toks, 256);
		CHECK(nt >= FAIR_PROMPT, "prompt %d has %d tokens", i, nt);
		p.ignore_eos = true;
		p.tenant = i % 2 ? 2 : 1;
		p.weight = i % 2 ? 1 : 3;
		p.cache_scope = p.tenant;
		CHECK(opus_sched_submit(s, 300 + (uint64_t) i, toks, FAIR_PROMPT, &p, &err) == OPUS_OK,
			  "submit %d", i);
	}
	if (s)
		run_all(s, 8000);
	CHECK(col->n_done == 2 * FAIR_N, "weights: all %d finished (%d)", 2 * FAIR_N, col->n_done);
	for (int i = 0; i < col->n_done && i < 2 * FAIR_N; i++)
	{
		bool		w1 = (col->done_order[i] - 300) % 2 == 1;

		seq[i] = w1 ? 'b' : 'a';
		if (!w1)
			last1 = i;
	}
	for (int i = 0; i < last1; i++)
		before += seq[i] == 'b';
	share = (double) FAIR_N / (FAIR_N + before);
	opus_sched_get_stats(s, &st);
	printf("weights 3:1: finish order %s (a: weight 3), share %.3f, preemptions %lld\n", seq, share,
		   (long long) st.preemptions);
	CHECK(share >= 0.62 && share <= 0.88,
		  "weights 3:1: the weight-3 tenant's share %.3f (target 0.75)", share);
	opus_sched_free(s);
	free(col);
	opus_ctx_free(c);
}

/* n tokens of a repetitive text (n <= 240) into toks. */
static int
filler(int32_t *toks, int n)
{
	static const char *text =
		"one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
		"fifteen sixteen seventeen eighteen nineteen twenty one two three four five six seven "
		"eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen "
		"nineteen twenty one two three four five six seven eight nine ten eleven twelve "
		"thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty one two three "
		"four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen";
	int32_t		all[2048];
	char		buf[4096];
	int			m;

	snprintf(buf, sizeof(buf), "%s %s %s %s", text, text, text, text);
	m = encode(buf, all, 2048);

	CHECK(m >= n, "filler has %d tokens, %d wanted", m, n);
	if (m < n)
		n = m;
	memcpy(toks, all, sizeof(int32_t) * (size_t) n);
	return n;
}

static bool
is_running(struct opus_sched *s, uint64_t id)
{
	struct opus_sched_req_info in;

	return opus_sched_get_request(s, id, &in) && in.running;
}

/*
 * No head-of-line blocking: with a request running, a queued one that does
 * not fit the free blocks is passed over by a small one behind it; with a
 * starvation limit it has exceeded, it is not.
 */
static void
test_no_hol(void)
{
	struct opus_ctx *c = make_ctx(16, 8, 128, 256);
	int32_t		toks[256];
	struct opus_gen_params pr = gen(60, 0.0f, 0, 0);
	struct opus_gen_params pl = gen(4, 0.0f, 0, 0);
	struct opus_gen_params ps = gen(2, 0.0f, 0, 0);
	struct timespec ts = {0, 5 * 1000 * 1000};

	if (!c)
		return;
	pr.ignore_eos = pl.ignore_eos = ps.ignore_eos = true;
	for (int starve = 0; starve < 2; starve++)
	{
		struct collector *col = calloc(1, sizeof(*col));
		struct opus_sched *s = NULL;
		struct opus_error err = {0};
		int			n;

		CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
		opus_sched_set_starvation(s, starve ? 1.0 : 0.0);
		n = filler(toks, 20);
		CHECK(opus_sched_submit(s, 1, toks, n, &pr, &err) == OPUS_OK, "submit running: %s", err.msg);
		CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
		CHECK(is_running(s, 1), "first request running");
		/* 100 prompt tokens: 7 blocks, 6 are free; different text, no prefix hits */
		n = filler(toks, 110);
		CHECK(opus_sched_submit(s, 2, toks + 10, 100, &pl, &err) == OPUS_OK, "submit large: %s", err.msg);
		nanosleep(&ts, NULL);
		n = encode("Hi", toks, 16);
		CHECK(opus_sched_submit(s, 3, toks, n, &ps, &err) == OPUS_OK, "submit small: %s", err.msg);
		CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
		CHECK(!is_running(s, 2), "the large request does not fit yet");
		if (starve)
			CHECK(!is_running(s, 3), "past the starvation limit the small one waits for the large one");
		else
			CHECK(is_running(s, 3), "the small request is admitted past the large one");
		run_all(s, 500);
		check_clean(col, "no_hol");
		CHECK(col->n_done == 3, "all three finished");
		if (!starve)
			CHECK(col->done_order[0] == 3, "the small request finished first (%llu)",
				  (unsigned long long) col->done_order[0]);
		opus_sched_free(s);
		free(col);
	}
	CHECK(opus_ctx_free_blocks(c) == 8, "every block back");
	opus_ctx_free(c);
}

/*
 * A long prompt behind a generating request is prefilled in chunks bounded
 * by the step time target, and in one piece without it.  With a target
 * that not even one block fits, the steps alternate: one with no prompt
 * token (the running request's token alone), one with a block, so the
 * prompt still finishes, in about twice as many steps as it has blocks.
 */
static void
test_step_target(void)
{
	int32_t		toks[256];
	struct opus_gen_params pr = gen(40, 0.0f, 0, 0);
	struct opus_gen_params pl = gen(2, 0.0f, 0, 0);

	pr.ignore_eos = pl.ignore_eos = true;
	for (int target = 0; target < 2; target++)
	{
		/* a fresh pool each time: no prefix-cache hits from the last round */
		struct opus_ctx *c = make_ctx(16, 64, 256, 512);
		struct collector *col;
		struct opus_sched *s = NULL;
		struct opus_error err = {0};
		struct opus_sched_req_info in;
		int			n;
		int			max_chunk = 0;
		int			done_before = 0;
		int			n_steps = 0;
		int			n_empty = 0;	/* steps that gave the long prompt nothing */

		if (!c)
			return;
		col = calloc(1, sizeof(*col));
		CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
		opus_sched_set_step_target(s, target ? 0.001 : 0.0);
		n = filler(toks, 48);
		/* 48-token prefill: the cost per token is measured */
		CHECK(opus_sched_submit(s, 1, toks, n, &pr, &err) == OPUS_OK, "submit running");
		CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
		n = filler(toks, 200);
		CHECK(opus_sched_submit(s, 2, toks + 40, 160, &pl, &err) == OPUS_OK, "submit long");
		while (opus_sched_get_request(s, 2, &in) && in.n_prompt_done < in.n_prompt && n_steps < 100)
		{
			CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
			n_steps++;
			if (!opus_sched_get_request(s, 2, &in))
				break;
			if (in.n_prompt_done - done_before > max_chunk)
				max_chunk = in.n_prompt_done - done_before;
			n_empty += in.running && in.n_prompt_done == done_before;
			done_before = in.n_prompt_done;
		}
		if (target)
		{
			CHECK(max_chunk <= 16, "prefill chunks within the target: %d", max_chunk);
			CHECK(n_empty >= 8, "steps with no prompt token (the running token alone): %d of %d",
				  n_empty, n_steps);
			CHECK(n_steps <= 2 * 160 / 16 + 2, "the long prompt still advances every other step: %d steps",
				  n_steps);
		}
		else
			CHECK(max_chunk >= 150, "one prefill chunk without a target: %d", max_chunk);
		run_all(s, 500);
		check_clean(col, "step_target");
		opus_sched_free(s);
		free(col);
		opus_ctx_free(c);
	}
}

/*
 * A short prompt arriving while a long one is prefilled (nothing decoding
 * yet): the long one alone goes in chunks of the target's worth (one
 * block with a tiny target) rather than max_batch_tokens, so the short one
 * waits for a small step; the step that prefills the short one carries at
 * most the target's worth of the long one, not the rest of
 * max_batch_tokens, so the short request's first token is not held up by
 * a full chunk; without a target the long one takes the rest.
 */
static void
test_step_target_short(void)
{
	int32_t		toks[256];
	int32_t		rev[48];
	struct opus_gen_params pm = gen(1, 0.0f, 0, 0);
	struct opus_gen_params pl = gen(2, 0.0f, 0, 0);
	struct opus_gen_params ps = gen(2, 0.0f, 0, 0);

	pm.ignore_eos = pl.ignore_eos = ps.ignore_eos = true;
	for (int target = 0; target < 2; target++)
	{
		struct opus_ctx *c = make_ctx(16, 64, 64, 512);
		struct collector *col;
		struct opus_sched *s = NULL;
		struct opus_error err = {0};
		struct opus_sched_req_info in;
		int			n;
		int			before;

		if (!c)
			return;
		col = calloc(1, sizeof(*col));
		CHECK(opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
		opus_sched_set_step_target(s, target ? 0.001 : 0.0);
		n = filler(toks, 200);
		CHECK(n == 200, "filler tokens: %d", n);
		/* a 48-token prefill (the first 48 reversed: no prefix shared with
		 * the long prompt): the cost per token is measured */
		for (int i = 0; i < 48; i++)
			rev[i] = toks[47 - i];
		CHECK(opus_sched_submit(s, 1, rev, 48, &pm, &err) == OPUS_OK, "submit measure");
		run_all(s, 50);
		CHECK(opus_sched_submit(s, 2, toks, 200, &pl, &err) == OPUS_OK, "submit long");
		CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
		if (target)
			CHECK(opus_sched_get_request(s, 2, &in) && in.n_prompt_done == 16,
				  "alone, the long prompt's first chunk is the target's (a block): %d",
				  in.n_prompt_done);
		else
			CHECK(opus_sched_get_request(s, 2, &in) && in.n_prompt_done == 64,
				  "the long prompt's first chunk is max_batch_tokens: %d", in.n_prompt_done);
		before = in.n_prompt_done;
		CHECK(opus_sched_submit(s, 3, toks + 100, 8, &ps, &err) == OPUS_OK, "submit short");
		CHECK(opus_sched_step(s, &err) == OPUS_OK, "step");
		CHECK(opus_sched_get_request(s, 3, &in) && in.n_prompt_done == 8, "the short prompt is prefilled");
		CHECK(opus_sched_get_request(s, 2, &in), "the long one is there");
		if (target)
			CHECK(in.n_prompt_done - before <= 16,
				  "behind a short prefill the long one gets the target's worth: %d",
				  in.n_prompt_done - before);
		else
			CHECK(in.n_prompt_done - before == 56,
				  "without a target the long one gets the rest: %d", in.n_prompt_done - before);
		run_all(s, 500);
		check_clean(col, "step_target_short");
		opus_sched_free(s);
		free(col);
		opus_ctx_free(c);
	}
}

/*
 * Grammar-constrained requests: every output matches its grammar and ends
 * with STOP; the same outputs alone and in a batch (masks computed over the
 * thread pool), greedy and seeded sampling; a malformed grammar fails the
 * submit; a state with no allowed token ends the request with an error.
 */
static const char *const gram_json =
	"root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws str ws \",\" ws \"\\\"age\\\"\" ws \":\" ws num ws \"}\"\n"
	"str ::= \"\\\"\" [a-zA-Z ]{1,12} \"\\\"\"\nnum ::= [0-9]{1,3}\nws ::= [ ]?\n";
static const char *const gram_yesno = "root ::= (\"yes\" | \"no\") \".\"?";

static void
run_grammar_jobs(int n_threads, const int *idx, int n, char (*texts)[TEXT_CAP],
				 enum opus_finish *fin)
{
	static const struct
	{
		const char *prompt;
		const char *grammar;
		float		temp;
		uint64_t	seed;
	}			gj[4] = {
		{"Give me a JSON person:", NULL, 0.0f, 0},
		{"Is the sky blue? Answer:", NULL, 0.0f, 0},
		{"A JSON record of a pet:", NULL, 0.9f, 7},
		{"Is fire cold?", NULL, 1.0f, 11},
	};
	struct opus_ctx_params cp = {0};
	struct opus_ctx *c = NULL;
	struct collector *col = calloc(1, sizeof(*col));
	struct opus_sched *s = NULL;
	struct opus_error err = {0};

	cp.n_threads = n_threads;
	cp.block_size = 16;
	cp.n_blocks = 256;
	cp.max_batch_tokens = 256;
	cp.n_ctx = 512;
	CHECK(opus_ctx_create(model, &cp, &c, &err) == OPUS_OK, "ctx: %s", err.msg);
	CHECK(c && opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create: %s", err.msg);
	if (!s)
		goto out;
	for (int i = 0; i < n; i++)
	{
		int			k = idx[i];
		int32_t		toks[256];
		int			nt = encode(gj[k].prompt, toks, 256);
		struct opus_gen_params p = gen(48, gj[k].temp, gj[k].seed, 0);
		const char *gt = (k % 2 == 0) ? gram_json : gram_yesno;

		p.grammar = gt;
		p.grammar_len = strlen(gt);
		CHECK(opus_sched_submit(s, (uint64_t) k + 1, toks, nt, &p, &err) == OPUS_OK,
			  "grammar submit %d: %s", k, err.msg);
	}
	run_all(s, 2000);
	for (int i = 0; i < n; i++)
	{
		struct got *g = got_for(col, (uint64_t) idx[i] + 1);

		memcpy(texts[idx[i]], g->text, TEXT_CAP);
		fin[idx[i]] = g->done.finish;
	}
	opus_sched_free(s);
out:
	opus_ctx_free(c);
	free(col);
}

static void
test_grammar(void)
{
	char		alone_t[4][TEXT_CAP],
				together_t[4][TEXT_CAP];
	enum opus_finish alone_f[4],
				together_f[4];
	int			all[4] = {0, 1, 2, 3};

	for (int i = 0; i < 4; i++)
		run_grammar_jobs(1, &all[i], 1, alone_t, alone_f);
	run_grammar_jobs(2, all, 4, together_t, together_f);
	for (int i = 0; i < 4; i++)
	{
		const char *gt = (i % 2 == 0) ? gram_json : gram_yesno;
		opus_grammar *g = opus_grammar_compile(gt, strlen(gt), NULL);

		CHECK(alone_f[i] == OPUS_FINISH_STOP, "grammar job %d stops (finish %d, '%s')",
			  i, alone_f[i], alone_t[i]);
		CHECK(g && opus_grammar_matches(g, alone_t[i], strlen(alone_t[i])),
			  "grammar job %d output matches: '%s'", i, alone_t[i]);
		CHECK(strcmp(alone_t[i], together_t[i]) == 0 && alone_f[i] == together_f[i],
			  "grammar job %d alone '%s' == together '%s'", i, alone_t[i], together_t[i]);
		opus_grammar_free(g);
	}

	/* errors */
	{
		struct opus_ctx *c = make_ctx(16, 64, 64, 256);
		struct collector *col = calloc(1, sizeof(*col));
		struct opus_sched *s = NULL;
		struct opus_error err = {0};
		int32_t		toks[64];
		int			nt = encode("Say something:", toks, 64);
		struct opus_gen_params p = gen(16, 0.0f, 0, 0);
		struct opus_event d;

		CHECK(c && opus_sched_create(c, on_event, col, &s, &err) == OPUS_OK, "create");
		if (s)
		{
			p.grammar = "root ::= foo";
			p.grammar_len = strlen(p.grammar);
			CHECK(opus_sched_submit(s, 1, toks, nt, &p, &err) == OPUS_ERR_INVALID_ARG &&
				  strstr(err.msg, "undefined rule 'foo'"), "bad grammar: %s", err.msg);
			/* every letter leads to a class that matches nothing */
			p.grammar = "root ::= [a-zA-Z ,.!] [^\\x00-\\U0010FFFF] | \"\\x01\\x02\"";
			p.grammar_len = strlen(p.grammar);
			d = run_one(s, col, 2, "Say something:", &p);
			CHECK(d.finish == OPUS_FINISH_ERROR && strstr(d.error.msg, "allows no token"),
				  "dead end: finish %d (%s)", d.finish, d.error.msg);
			opus_sched_free(s);
		}
		opus_ctx_free(c);
		free(col);
	}
}

int
main(void)
{
	const char *path = unit_model_path();
	struct opus_sched *s = NULL;
	struct opus_error err = {0};

	setvbuf(stdout, NULL, _IONBF, 0);
	CHECK(opus_sched_create(NULL, on_event, NULL, &s, &err) == OPUS_ERR_INVALID_ARG &&
		  s == NULL, "create without a context fails");
	if (!path)
	{
		printf("OPUS_MODEL not set: skipping model tests\n");
		return UNIT_DONE();
	}
	if (opus_model_load(path, NULL, &model, &err) != OPUS_OK)
	{
		CHECK(false, "load %s: %s", path, err.msg);
		return UNIT_DONE();
	}
	tok = opus_model_tokenizer(model);
	test_rejections();
	test_alone_vs_together();
	test_preemption();
	test_cancel();
	test_stops();
	test_eos();
	test_priority();
	test_prefix_cache();
	test_prefix_eviction();
	test_aging();
	test_cache_scope();
	test_scope_eviction();
	test_fair_share();
	test_fair_weights();
	test_fair_credit();
	test_fair_closed_loop();
	test_no_hol();
	test_step_target();
	test_step_target_short();
	test_grammar();
	opus_model_free(model);
	return UNIT_DONE();
}
