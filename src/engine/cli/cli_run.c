/*
 * cli_run.c - the `run`, `bench` and `logits` subcommands of opus_engine.
 *
 *   run     --model FILE --prompt TEXT [-n N] [--temp T] [--seed S]
 *           [--top-k K] [--top-p P] [--chat] [--threads N]
 *           [--grammar-file FILE]  (GBNF: only tokens the grammar allows)
 *           Prints the completion (only) to stdout as it is generated;
 *           timing goes to stderr.  Greedy unless --temp > 0.  The prompt is
 *           tokenized with BOS as the model says and special-token text
 *           recognised (llama.cpp's llama-cli does the same); --chat wraps it
 *           as one user message in the model's chat template.
 *   bench   --model FILE [--prompt-tokens 512] [--gen-tokens 128]
 *           [--threads N] [--reps R] [--sessions 1,4,16,32]
 *           Prefill of a prompt of pseudo-random tokens in batches of up to
 *           512, then greedy decode, R times; prints the medians as
 *             prefill tokens=512 tok_s=... cpu_ms_per_tok=...
 *             decode tokens=128 tok_s=... cpu_ms_per_tok=...
 *           With --sessions, for each listed N instead: N sequences, each
 *           prefilled (untimed) with its own pseudo-random prompt, then
 *           gen-tokens decode steps that run all N sequences in one batch,
 *           each token picked by its own greedy sampler; prints medians as
 *             sessions=N tok_s=... step_ms=... cpu_ms_per_tok=... x1=...
 *           (tok_s counts all sessions' tokens; x1 is tok_s over N = 1's,
 *           when 1 is listed first).
 *   logits  --model FILE (--tokens "1 2 3" | --prompt TEXT) [--top K]
 *           [--all] [--threads N] [--dump FILE]
 *           Runs the tokens as one sequence and prints, for the last (or
 *           every) position, the top-K token ids with their logits:
 *             tokens 1 2 3
 *             pos 2 token 3 top 791:15.123456 12:14.000000 ...
 *           --prompt is tokenized with add_special=true, parse_special=false.
 *           --dump writes the printed positions' full logits as raw
 *           little-endian float32 rows of n_vocab.
 * All three take --kv-type f16|q8_0 (default f16): the KV cache's element
 * type (opus_ctx_params.kv_type).
 * All three take --device cpu|auto|cuda:N (default cpu): the backend the
 * context runs on (a CUDA name fails unless this build and machine have it).
 * Exit codes: 0 ok, 1 runtime error, 2 usage error.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "text/chat.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "model/model.h"
#include "runtime/constrain.h"
#include "runtime/sampler.h"
#include "text/grammar.h"
#include "text/tokenizer.h"

/* --device of the running command (zero: the CPU) */
static struct opus_device cli_device;

#define PREFILL_CHUNK 512

/* --kv-type of the running command (zero: F16) */
static enum opus_kv_type cli_kv_type;

/* ---- argument helpers ---- */

/* --kv-type NAME (message on stderr when unknown). */
static bool
parse_kv_type(const char *s)
{
	if (s && opus_kv_type_parse(s, &cli_kv_type))
		return true;
	fprintf(stderr, "opus_engine: --kv-type must be f16 or q8_0\n");
	return false;
}

/* --device NAME, checked against this build and machine (message on stderr). */
static bool
parse_device(const char *s)
{
	struct opus_error err = {0};

	if (!s)
		return false;
	if (opus_device_parse(s, &cli_device, &err) != OPUS_OK)
	{
		fprintf(stderr, "opus_engine: %s\n", err.msg);
		return false;
	}
	return true;
}

static int
default_threads(void)
{
	long		n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 1)
		return 1;
	return n > 16 ? 16 : (int) n;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds used by the whole process (all threads). */
static double
cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int
runtime_error(const char *cmd, const struct opus_error *err)
{
	fprintf(stderr, "opus_engine %s: %s (%s)\n", cmd, err->msg,
			opus_status_name(err->code));
	return 1;
}

/* Load a model and make a context for one sequence of up to n_ctx positions. */
static int
open_model(const char *cmd, const char *path, int n_threads, int n_ctx,
		   int max_batch, struct opus_model **m, struct opus_ctx **c)
{
	struct opus_error err = {0};
	struct opus_ctx_params cp = {0};

	*m = NULL;
	*c = NULL;
	if (opus_model_load(path, NULL, m, &err) != OPUS_OK)
		return runtime_error(cmd, &err);
	cp.n_threads = n_threads;
	cp.device = cli_device;
	cp.block_size = 16;
	cp.n_ctx = n_ctx;
	cp.n_blocks = (n_ctx + cp.block_size - 1) / cp.block_size;
	cp.max_batch_tokens = max_batch < 1 ? 1 : max_batch;
	cp.kv_type = cli_kv_type;
	if (opus_ctx_create(*m, &cp, c, &err) != OPUS_OK)
	{
		opus_model_free(*m);
		*m = NULL;
		return runtime_error(cmd, &err);
	}
	return 0;
}

/* Tokenize text into a malloc'd array. */
static enum opus_status
tokenize(const struct opus_tokenizer *tok, const char *text, bool parse_special,
		 int32_t **out, int64_t *n, struct opus_error *err)
{
	size_t		len = strlen(text);
	int64_t		cap = (int64_t) len + 16;
	int32_t    *buf = malloc(cap * sizeof(int32_t));
	enum opus_status st;

	if (!buf)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	st = opus_tokenizer_encode(tok, text, len, true, parse_special, buf, cap, n, err);
	if (st == OPUS_ERR_CAPACITY)
	{
		int32_t    *nb = realloc(buf, (*n + 1) * sizeof(int32_t));

		if (!nb)
		{
			free(buf);
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
		}
		buf = nb;
		st = opus_tokenizer_encode(tok, text, len, true, parse_special, buf, *n + 1, n, err);
	}
	if (st != OPUS_OK)
	{
		free(buf);
		return st;
	}
	*out = buf;
	return OPUS_OK;
}

/*
 * Run n tokens through seq in chunks of at most max_batch; logits of the
 * last token to `logits` (n_vocab floats) when not NULL.
 */
static enum opus_status
prefill(struct opus_ctx *c, struct opus_seq *seq, const int32_t *toks, int64_t n,
		int max_batch, float *logits, struct opus_error *err)
{
	for (int64_t i = 0; i < n; i += max_batch)
	{
		int64_t		k = n - i < max_batch ? n - i : max_batch;
		struct opus_batch_item it = {
			.seq = seq,.tokens = toks + i,.n_tokens = (int32_t) k,
			.logits = (i + k == n) ? logits : NULL,
		};
		enum opus_status st = opus_forward(c, &it, 1, err);

		if (st != OPUS_OK)
			return st;
	}
	return OPUS_OK;
}

static int32_t
argmax(const float *x, int n)
{
	int32_t		best = 0;

	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

/* ---- run ---- */

/* Whole file into a malloc'd buffer (NUL-terminated); 0 on success. */
static int
read_file(const char *path, char **out, size_t *len)
{
	FILE	   *f = fopen(path, "rb");
	char	   *buf = NULL;
	size_t		n = 0,
				cap = 0;

	if (!f)
		return -1;
	for (;;)
	{
		size_t		k;

		if (cap - n < 4096)
		{
			char	   *nb = realloc(buf, cap + 65536);

			if (!nb)
			{
				free(buf);
				fclose(f);
				return -1;
			}
			buf = nb;
			cap += 65536;
		}
		k = fread(buf + n, 1, cap - n - 1, f);
		n += k;
		if (k == 0)
			break;
	}
	fclose(f);
	buf[n] = 0;
	*out = buf;
	*len = n;
	return 0;
}

static void
run_usage(void)
{
	fprintf(stderr,
			"usage: opus_engine run --model FILE --prompt TEXT [-n N] [--temp T] [--seed S]\n"
			"                       [--top-k K] [--top-p P] [--chat] [--threads N]\n"
			"                       [--kv-type f16|q8_0] [--grammar-file FILE]\n");
}

int
opus_cli_run(int argc, char **argv)
{
	const char *model_path = NULL;
	const char *prompt = NULL;
	int			n_gen = 128;
	int			n_threads = default_threads();
	bool		chat = false;
	struct opus_sampling_params sp;
	struct opus_error err = {0};
	struct opus_model *m = NULL;
	struct opus_ctx *c = NULL;
	struct opus_sampler *smp = NULL;
	struct opus_seq seq;
	const struct opus_tokenizer *tok;
	int32_t    *toks = NULL;
	int64_t		n_prompt = 0;
	float	   *logits = NULL;
	char	   *rendered = NULL;
	int			rc = 1;
	int			n_ctx;
	int			n_done = 0;
	double		t0,
				t1,
				t2;
	struct opus_utf8_stream us = {0};
	char		piece[256],
				outb[256 + 8];
	const char *grammar_file = NULL;
	char	   *grammar_text = NULL;
	size_t		grammar_len = 0;
	opus_grammar *gram = NULL;
	opus_grammar_state *gstate = NULL;
	struct opus_constrain *cons = NULL;
	uint32_t   *gmask = NULL;

	opus_sampling_defaults(&sp);
	sp.temperature = 0.0f;
	sp.seed = 0;
	{
		const struct opus_cli_opt opts[] = {
			{"--chat", NULL, OPUS_CLI_FLAG, &chat, 0, 0, NULL},
			{"--model", "-m", OPUS_CLI_STR, &model_path, 0, 0, NULL},
			{"--prompt", "-p", OPUS_CLI_STR, &prompt, 0, 0, NULL},
			{"--n-predict", "-n", OPUS_CLI_INT, &n_gen, 0, 1 << 20, NULL},
			{"--temp", NULL, OPUS_CLI_FLOAT, &sp.temperature, 0, 0, NULL},
			{"--top-k", NULL, OPUS_CLI_INT, &sp.top_k, 0, 1 << 30, NULL},
			{"--top-p", NULL, OPUS_CLI_FLOAT, &sp.top_p, 0, 0, NULL},
			{"--seed", NULL, OPUS_CLI_U64, &sp.seed, 0, 0, NULL},
			{"--kv-type", NULL, OPUS_CLI_FN, NULL, 0, 0, parse_kv_type},
			{"--threads", "-t", OPUS_CLI_INT, &n_threads, 1, 256, NULL},
			{"--device", NULL, OPUS_CLI_FN, NULL, 0, 0, parse_device},
			{"--grammar-file", NULL, OPUS_CLI_STR, &grammar_file, 0, 0, NULL},
			OPUS_CLI_END
		};
		int			code = opus_cli_parse("run", argc, argv, opts, run_usage);

		if (code >= 0)
			return code;
	}
	if (!model_path || !prompt)
	{
		run_usage();
		return 2;
	}
	if (opus_sampling_validate(&sp, &err) != OPUS_OK)
	{
		fprintf(stderr, "opus_engine run: %s\n", err.msg);
		run_usage();
		return 2;
	}

	if (grammar_file)
	{
		struct opus_grammar_error gerr;

		if (read_file(grammar_file, &grammar_text, &grammar_len) != 0)
		{
			fprintf(stderr, "opus_engine run: cannot read %s\n", grammar_file);
			return 2;
		}
		gram = opus_grammar_compile(grammar_text, grammar_len, &gerr);
		if (!gram)
		{
			fprintf(stderr, "opus_engine run: %s: %s\n", grammar_file, gerr.msg);
			free(grammar_text);
			return 2;
		}
	}

	/* load once to tokenize, then size the context to the request */
	if (open_model("run", model_path, n_threads, 1, 1, &m, &c))
	{
		opus_grammar_free(gram);
		free(grammar_text);
		return 1;
	}
	tok = opus_model_tokenizer(m);
	if (gram)
	{
		if (opus_constrain_create(tok, &cons, &err) != OPUS_OK)
			goto error;
		gstate = opus_grammar_state_new(gram);
		gmask = malloc(sizeof(uint32_t) * (size_t) opus_constrain_mask_words(cons));
		if (!gstate || !gmask)
		{
			fprintf(stderr, "opus_engine run: out of memory\n");
			goto done;
		}
	}
	if (chat)
	{
		size_t		tlen;
		const char *tmpl = opus_model_chat_template(m, &tlen);
		struct opus_chat_msg msg = {.role = "user",.content = prompt};
		struct opus_chat_renderer *cr;
		size_t		rlen;
		enum opus_status cst;

		if (opus_chat_renderer_for_tokenizer(tmpl, tlen, tok, &cr, &err) != OPUS_OK)
			goto error;
		if (strcmp(opus_chat_renderer_name(cr), "jinja") != 0)
			fprintf(stderr, "opus_engine run: chat template: %s pattern fallback (%s)\n",
					opus_chat_renderer_name(cr), opus_chat_renderer_why(cr));
		cst = opus_chat_renderer_apply(cr, &msg, 1, NULL, 0, true, &rendered, &rlen, &err);
		opus_chat_renderer_free(cr);
		if (cst != OPUS_OK)
			goto error;
	}
	if (tokenize(tok, rendered ? rendered : prompt, true, &toks, &n_prompt, &err) != OPUS_OK)
		goto error;
	if (n_prompt == 0)
	{
		fprintf(stderr, "opus_engine run: the prompt has no tokens\n");
		goto done;
	}
	if (n_prompt + n_gen > opus_model_hparams(m)->n_ctx_train)
	{
		fprintf(stderr, "opus_engine run: prompt (%lld tokens) plus %d exceeds the model's context %d\n",
				(long long) n_prompt, n_gen, opus_model_hparams(m)->n_ctx_train);
		goto done;
	}
	n_ctx = (int) n_prompt + n_gen;
	opus_ctx_free(c);
	c = NULL;
	{
		struct opus_ctx_params cp = {
			.n_threads = n_threads,.block_size = 16,.device = cli_device,.n_ctx = n_ctx,
			.n_blocks = (n_ctx + 15) / 16,
			.max_batch_tokens = n_prompt < PREFILL_CHUNK ? (int) n_prompt : PREFILL_CHUNK,
			.kv_type = cli_kv_type,
		};

		if (opus_ctx_create(m, &cp, &c, &err) != OPUS_OK)
			goto error;
	}
	logits = malloc(sizeof(float) * opus_model_hparams(m)->n_vocab);
	toks = realloc(toks, sizeof(int32_t) * (n_prompt + n_gen + 1));
	if (!logits || !toks)
	{
		fprintf(stderr, "opus_engine run: out of memory\n");
		goto done;
	}
	if (opus_sampler_create(&sp, opus_model_hparams(m)->n_vocab, &smp, &err) != OPUS_OK)
		goto error;

	opus_seq_init(&seq);
	t0 = now_s();
	if (prefill(c, &seq, toks, n_prompt, PREFILL_CHUNK, logits, &err) != OPUS_OK)
		goto error_seq;
	t1 = now_s();
	while (n_done < n_gen)
	{
		int32_t		next;
		int			n;
		struct opus_batch_item it = {.seq = &seq,.tokens = &next,.n_tokens = 1,.logits = logits};

		if (gstate)
		{
			opus_grammar_mask(gstate, cons->vocab, gmask);
			if (opus_constrain_apply(cons, gstate, gmask, logits) == 0)
			{
				opus_error_set(&err, OPUS_ERR_INVALID_ARG,
							   "the grammar allows no token after %d generated tokens", n_done);
				goto error_seq;
			}
		}
		next = opus_sampler_sample(smp, logits, toks, n_prompt + n_done);
		if (gstate && !opus_constrain_accept(cons, gstate, next))
		{
			opus_error_set(&err, OPUS_ERR_INTERNAL, "sampled token %d is not allowed by the grammar", next);
			goto error_seq;
		}
		if (opus_tokenizer_is_eog(tok, next))
			break;
		toks[n_prompt + n_done++] = next;
		n = opus_tokenizer_piece(tok, next, false, piece, sizeof(piece));
		if (n > (int) sizeof(piece))
			n = sizeof(piece);
		if (n > 0)
		{
			n = opus_utf8_stream_feed(&us, piece, n, outb);
			fwrite(outb, 1, n, stdout);
			fflush(stdout);
		}
		if (n_done == n_gen)
			break;
		if (opus_forward(c, &it, 1, &err) != OPUS_OK)
			goto error_seq;
	}
	{
		int			n = opus_utf8_stream_flush(&us, outb);

		fwrite(outb, 1, n, stdout);
	}
	fputc('\n', stdout);
	t2 = now_s();
	fprintf(stderr, "prompt: %lld tokens in %.3f s (%.1f tok/s); generated: %d tokens in %.3f s (%.1f tok/s)\n",
			(long long) n_prompt, t1 - t0, n_prompt / (t1 - t0),
			n_done, t2 - t1, n_done > 0 ? n_done / (t2 - t1) : 0.0);
	rc = 0;
	opus_seq_release(c, &seq);
	goto done;

error_seq:
	opus_seq_release(c, &seq);
error:
	runtime_error("run", &err);
done:
	opus_sampler_free(smp);
	opus_grammar_state_free(gstate);
	opus_grammar_free(gram);
	opus_constrain_free(cons);
	free(gmask);
	free(grammar_text);
	free(logits);
	free(toks);
	free(rendered);
	opus_ctx_free(c);
	opus_model_free(m);
	return rc;
}

/* ---- bench ---- */

/* --sessions N,N,...: digits and commas (bench_sessions reads the counts). */
static const char *sessions_arg;

static bool
parse_sessions(const char *v)
{
	sessions_arg = v;
	return v[strspn(v, "0123456789,")] == '\0' && v[0] != '\0';
}

static void
bench_usage(void)
{
	fprintf(stderr,
			"usage: opus_engine bench --model FILE [--prompt-tokens N] [--gen-tokens N]\n"
			"                         [--threads N] [--reps R] [--sessions N,N,...]\n");
	fprintf(stderr, "                         [--kv-type f16|q8_0]\n");
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/* Fill toks[0..n) with pseudo-random token ids from seed (same every run). */
static void
bench_prompt(int32_t *toks, int n, int n_vocab, uint64_t seed)
{
	uint64_t	x = 0x9e3779b97f4a7c15ULL ^ (seed * 0xbf58476d1ce4e5b9ULL);

	for (int i = 0; i < n; i++)
	{
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		toks[i] = (int32_t) (x % (uint64_t) n_vocab);
	}
}

/*
 * bench --sessions: n_sess sequences decoding together, one batched
 * opus_forward per step (as the scheduler runs them), each sequence's token
 * picked by its own greedy sampler.  Returns 0, or 1 after printing an error.
 */
static int
bench_sessions(const char *model_path, const char *levels, int n_pp, int n_tg,
			   int reps, int n_threads)
{
	struct opus_model *m = NULL;
	struct opus_error err = {0};
	int			rc = 1;
	double		base = 0.0;

	if (opus_model_load(model_path, NULL, &m, &err) != OPUS_OK)
		return runtime_error("bench", &err);
	for (const char *lp = levels; *lp;)
	{
		int			n = atoi(lp);
		int			n_vocab = opus_model_hparams(m)->n_vocab;
		struct opus_ctx_params cp = {0};
		struct opus_ctx *c = NULL;
		struct opus_seq *seqs = NULL;
		struct opus_sampler **smp = NULL;
		struct opus_batch_item *items = NULL;
		int32_t    *toks = NULL;
		int32_t    *next = NULL;
		float	   *logits = NULL;
		double	   *rate = NULL,
				   *cpu = NULL;
		struct opus_sampling_params sp;
		bool		ok = false;

		if (n < 1 || n > 4096)
		{
			fprintf(stderr, "opus_engine bench: bad --sessions entry\n");
			goto out;
		}
		opus_sampling_defaults(&sp);
		sp.temperature = 0.0f;
		cp.n_threads = n_threads;
		cp.device = cli_device;
		cp.kv_type = cli_kv_type;
		cp.block_size = 16;
		cp.n_ctx = n_pp + n_tg + 1;
		cp.n_blocks = n * ((cp.n_ctx + 15) / 16 + 1);
		cp.max_batch_tokens = n * (n_pp > PREFILL_CHUNK ? PREFILL_CHUNK : n_pp);
		if (cp.max_batch_tokens < n)
			cp.max_batch_tokens = n;
		if (cp.max_batch_tokens > 4096)
			cp.max_batch_tokens = 4096;
		if (opus_ctx_create(m, &cp, &c, &err) != OPUS_OK)
		{
			runtime_error("bench", &err);
			goto out;
		}
		seqs = calloc(n, sizeof(*seqs));
		smp = calloc(n, sizeof(*smp));
		items = calloc(n, sizeof(*items));
		toks = malloc(sizeof(int32_t) * (size_t) n * (n_pp + n_tg + 1));
		next = malloc(sizeof(int32_t) * n);
		logits = malloc(sizeof(float) * (size_t) n * n_vocab);
		rate = calloc(reps, sizeof(double));
		cpu = calloc(reps, sizeof(double));
		if (!seqs || !smp || !items || !toks || !next || !logits || !rate || !cpu)
		{
			fprintf(stderr, "opus_engine bench: out of memory\n");
			goto out;
		}
		for (int i = 0; i < n; i++)
		{
			opus_seq_init(&seqs[i]);
			if (opus_sampler_create(&sp, n_vocab, &smp[i], &err) != OPUS_OK)
			{
				runtime_error("bench", &err);
				goto out;
			}
		}
		for (int r = 0; r < reps; r++)
		{
			double		t0,
						c0;
			int			n_hist = n_pp;

			/* prefill: the prompts in as few batches as fit (untimed) */
			for (int i = 0; i < n; i++)
			{
				int32_t    *tk = toks + (size_t) i * (n_pp + n_tg + 1);

				bench_prompt(tk, n_pp, n_vocab, (uint64_t) i + 1);
				items[i] = (struct opus_batch_item)
				{
					.seq = &seqs[i],.tokens = tk,.n_tokens = n_pp,
						.logits = logits + (size_t) i * n_vocab,
				};
			}
			for (int i0 = 0; i0 < n;)
			{
				int			k = cp.max_batch_tokens / n_pp;

				if (k < 1)
					k = 1;
				if (k > n - i0)
					k = n - i0;
				if (n_pp > cp.max_batch_tokens)
				{
					fprintf(stderr, "opus_engine bench: prompt longer than a batch\n");
					goto out;
				}
				if (opus_forward(c, items + i0, k, &err) != OPUS_OK)
				{
					runtime_error("bench", &err);
					goto out;
				}
				i0 += k;
			}
			c0 = cpu_s();
			t0 = now_s();
			for (int s = 0; s < n_tg; s++)
			{
				for (int i = 0; i < n; i++)
				{
					int32_t    *tk = toks + (size_t) i * (n_pp + n_tg + 1);

					next[i] = opus_sampler_sample(smp[i], logits + (size_t) i * n_vocab,
												  tk, n_hist);
					tk[n_hist] = next[i];
					items[i].tokens = &next[i];
					items[i].n_tokens = 1;
				}
				n_hist++;
				if (opus_forward(c, items, n, &err) != OPUS_OK)
				{
					runtime_error("bench", &err);
					goto out;
				}
			}
			rate[r] = (double) n * n_tg / (now_s() - t0);
			cpu[r] = (cpu_s() - c0) * 1000.0 / ((double) n * n_tg);
			for (int i = 0; i < n; i++)
				opus_seq_release(c, &seqs[i]);
		}
		qsort(rate, reps, sizeof(double), cmp_double);
		qsort(cpu, reps, sizeof(double), cmp_double);
		if (base == 0.0)
			base = rate[reps / 2] / n;
		printf("sessions=%d tok_s=%.1f step_ms=%.2f cpu_ms_per_tok=%.3f x1=%.2f\n",
			   n, rate[reps / 2], n * 1000.0 / rate[reps / 2], cpu[reps / 2],
			   rate[reps / 2] / base);
		fflush(stdout);
		ok = true;
out:
		for (int i = 0; seqs && i < n; i++)
		{
			if (c)
				opus_seq_release(c, &seqs[i]);
			if (smp)
				opus_sampler_free(smp[i]);
		}
		free(seqs);
		free(smp);
		free(items);
		free(toks);
		free(next);
		free(logits);
		free(rate);
		free(cpu);
		opus_ctx_free(c);
		if (!ok)
			goto done;
		while (*lp && *lp != ',')
			lp++;
		if (*lp == ',')
			lp++;
	}
	rc = 0;
done:
	opus_model_free(m);
	return rc;
}

int
opus_cli_bench(int argc, char **argv)
{
	const char *model_path = NULL;
	int			n_pp = 512,
				n_tg = 128,
				reps = 3;
	int			n_threads = default_threads();
	struct opus_model *m = NULL;
	struct opus_ctx *c = NULL;
	struct opus_error err = {0};
	struct opus_seq seq;
	int32_t    *toks = NULL;
	float	   *logits = NULL;
	double	   *pp_rate = NULL,
			   *tg_rate = NULL,
			   *pp_cpu = NULL,
			   *tg_cpu = NULL;
	int			n_vocab;
	int			rc = 1;
	const char *sessions = NULL;

	{
		const struct opus_cli_opt opts[] = {
			{"--model", "-m", OPUS_CLI_STR, &model_path, 0, 0, NULL},
			{"--prompt-tokens", NULL, OPUS_CLI_INT, &n_pp, 1, 1 << 20, NULL},
			{"--gen-tokens", NULL, OPUS_CLI_INT, &n_tg, 0, 1 << 20, NULL},
			{"--reps", NULL, OPUS_CLI_INT, &reps, 1, 1000, NULL},
			{"--kv-type", NULL, OPUS_CLI_FN, NULL, 0, 0, parse_kv_type},
			{"--threads", "-t", OPUS_CLI_INT, &n_threads, 1, 256, NULL},
			{"--device", NULL, OPUS_CLI_FN, NULL, 0, 0, parse_device},
			{"--sessions", NULL, OPUS_CLI_FN, NULL, 0, 0, parse_sessions},
			OPUS_CLI_END
		};
		int			code = opus_cli_parse("bench", argc, argv, opts, bench_usage);

		if (code >= 0)
			return code;
		sessions = sessions_arg;
	}
	if (!model_path)
	{
		bench_usage();
		return 2;
	}
	if (sessions)
		return bench_sessions(model_path, sessions, n_pp, n_tg, reps, n_threads);
	if (open_model("bench", model_path, n_threads, n_pp + n_tg,
				   n_pp < PREFILL_CHUNK ? n_pp : PREFILL_CHUNK, &m, &c))
		return 1;
	n_vocab = opus_model_hparams(m)->n_vocab;
	toks = malloc(sizeof(int32_t) * n_pp);
	logits = malloc(sizeof(float) * n_vocab);
	pp_rate = calloc(reps, sizeof(double));
	tg_rate = calloc(reps, sizeof(double));
	pp_cpu = calloc(reps, sizeof(double));
	tg_cpu = calloc(reps, sizeof(double));
	if (!toks || !logits || !pp_rate || !tg_rate || !pp_cpu || !tg_cpu)
	{
		fprintf(stderr, "opus_engine bench: out of memory\n");
		goto done;
	}
	/* fixed pseudo-random prompt (same every run) */
	{
		uint64_t	x = 0x9e3779b97f4a7c15ULL;

		for (int i = 0; i < n_pp; i++)
		{
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			toks[i] = (int32_t) (x % (uint64_t) n_vocab);
		}
	}
	opus_seq_init(&seq);
	/* warm-up: fault the weights in */
	if (prefill(c, &seq, toks, n_pp < 16 ? n_pp : 16, PREFILL_CHUNK, logits, &err) != OPUS_OK)
		goto error;
	opus_seq_release(c, &seq);

	for (int r = 0; r < reps; r++)
	{
		double		t0,
					t1,
					t2,
					c0,
					c1,
					c2;
		int32_t		next;

		c0 = cpu_s();
		t0 = now_s();
		if (prefill(c, &seq, toks, n_pp, PREFILL_CHUNK, logits, &err) != OPUS_OK)
			goto error;
		t1 = now_s();
		c1 = cpu_s();
		next = argmax(logits, n_vocab);
		for (int i = 0; i < n_tg; i++)
		{
			struct opus_batch_item it = {.seq = &seq,.tokens = &next,.n_tokens = 1,.logits = logits};

			if (opus_forward(c, &it, 1, &err) != OPUS_OK)
				goto error;
			next = argmax(logits, n_vocab);
		}
		t2 = now_s();
		c2 = cpu_s();
		pp_rate[r] = n_pp / (t1 - t0);
		tg_rate[r] = n_tg > 0 ? n_tg / (t2 - t1) : 0.0;
		pp_cpu[r] = (c1 - c0) * 1000.0 / n_pp;
		tg_cpu[r] = n_tg > 0 ? (c2 - c1) * 1000.0 / n_tg : 0.0;
		opus_seq_release(c, &seq);
	}
	qsort(pp_rate, reps, sizeof(double), cmp_double);
	qsort(tg_rate, reps, sizeof(double), cmp_double);
	qsort(pp_cpu, reps, sizeof(double), cmp_double);
	qsort(tg_cpu, reps, sizeof(double), cmp_double);
	printf("model %s type %s threads %d reps %d\n", opus_model_hparams(m)->name,
		   opus_qtype_info(opus_model_hparams(m)->main_type)->name, n_threads, reps);
	printf("prefill tokens=%d tok_s=%.2f cpu_ms_per_tok=%.3f\n", n_pp, pp_rate[reps / 2], pp_cpu[reps / 2]);
	printf("decode tokens=%d tok_s=%.2f cpu_ms_per_tok=%.3f\n", n_tg, tg_rate[reps / 2], tg_cpu[reps / 2]);
	rc = 0;
	goto done;

error:
	opus_seq_release(c, &seq);
	runtime_error("bench", &err);
done:
	free(toks);
	free(logits);
	free(pp_rate);
	free(tg_rate);
	free(pp_cpu);
	free(tg_cpu);
	opus_ctx_free(c);
	opus_model_free(m);
	return rc;
}

/* ---- logits ---- */

static void
logits_usage(void)
{
	fprintf(stderr,
			"usage: opus_engine logits --model FILE (--tokens \"ID ID ...\" | --prompt TEXT)\n"
			"                          [--top K] [--all] [--threads N] [--dump FILE]\n"
			"                          [--kv-type f16|q8_0]\n");
}

/* Parse a list of non-negative ids separated by spaces or commas. */
static bool
parse_token_list(const char *s, int32_t **out, int64_t *n)
{
	int64_t		cap = 16,
				k = 0;
	int32_t    *v = malloc(cap * sizeof(int32_t));

	if (!v)
		return false;
	while (*s)
	{
		char	   *end;
		long		x;

		while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n')
			s++;
		if (!*s)
			break;
		errno = 0;
		x = strtol(s, &end, 10);
		if (errno || end == s || x < 0 || x > INT32_MAX)
		{
			free(v);
			return false;
		}
		if (k == cap)
		{
			int32_t    *nv = realloc(v, 2 * cap * sizeof(int32_t));

			if (!nv)
			{
				free(v);
				return false;
			}
			v = nv;
			cap *= 2;
		}
		v[k++] = (int32_t) x;
		s = end;
	}
	*out = v;
	*n = k;
	return true;
}

/* Print the top k of row (ties: lower id first). */
static void
print_top(int64_t pos, int32_t token, const float *row, int n_vocab, int k)
{
	int32_t    *best = malloc(sizeof(int32_t) * k);
	int			nb = 0;

	if (!best)
		return;
	for (int i = 0; i < n_vocab; i++)
	{
		int			j;

		if (nb == k && !(row[i] > row[best[k - 1]]))
			continue;
		j = nb < k ? nb++ : k - 1;
		while (j > 0 && row[i] > row[best[j - 1]])
		{
			best[j] = best[j - 1];
			j--;
		}
		best[j] = i;
	}
	printf("pos %lld token %d top", (long long) pos, token);
	for (int i = 0; i < nb; i++)
		printf(" %d:%.6f", best[i], row[best[i]]);
	printf("\n");
	free(best);
}

int
opus_cli_logits(int argc, char **argv)
{
	const char *model_path = NULL;
	const char *tok_str = NULL;
	const char *prompt = NULL;
	const char *dump = NULL;
	int			top = 10;
	bool		all = false;
	int			n_threads = default_threads();
	struct opus_model *m = NULL;
	struct opus_ctx *c = NULL;
	struct opus_error err = {0};
	struct opus_seq seq;
	int32_t    *toks = NULL;
	int64_t		n = 0;
	float	   *logits = NULL;
	int			n_vocab;
	int			rc = 1;

	{
		const struct opus_cli_opt opts[] = {
			{"--all", NULL, OPUS_CLI_FLAG, &all, 0, 0, NULL},
			{"--model", "-m", OPUS_CLI_STR, &model_path, 0, 0, NULL},
			{"--tokens", NULL, OPUS_CLI_STR, &tok_str, 0, 0, NULL},
			{"--prompt", "-p", OPUS_CLI_STR, &prompt, 0, 0, NULL},
			{"--top", NULL, OPUS_CLI_INT, &top, 1, 1 << 20, NULL},
			{"--kv-type", NULL, OPUS_CLI_FN, NULL, 0, 0, parse_kv_type},
			{"--threads", "-t", OPUS_CLI_INT, &n_threads, 1, 256, NULL},
			{"--device", NULL, OPUS_CLI_FN, NULL, 0, 0, parse_device},
			{"--dump", NULL, OPUS_CLI_STR, &dump, 0, 0, NULL},
			OPUS_CLI_END
		};
		int			code = opus_cli_parse("logits", argc, argv, opts, logits_usage);

		if (code >= 0)
			return code;
	}
	if (!model_path || (!tok_str == !prompt))
	{
		logits_usage();
		return 2;
	}
	if (tok_str && (!parse_token_list(tok_str, &toks, &n) || n == 0))
	{
		fprintf(stderr, "opus_engine logits: bad --tokens list\n");
		free(toks);
		logits_usage();
		return 2;
	}
	if (open_model("logits", model_path, n_threads, 1, 1, &m, &c))
	{
		free(toks);
		return 1;
	}
	n_vocab = opus_model_hparams(m)->n_vocab;
	if (prompt)
	{
		if (tokenize(opus_model_tokenizer(m), prompt, false, &toks, &n, &err) != OPUS_OK)
			goto error;
		if (n == 0)
		{
			fprintf(stderr, "opus_engine logits: the prompt has no tokens\n");
			goto done;
		}
	}
	if (n > (1 << 20))
	{
		fprintf(stderr, "opus_engine logits: too many tokens\n");
		goto done;
	}
	opus_ctx_free(c);
	c = NULL;
	{
		struct opus_ctx_params cp = {
			.n_threads = n_threads,.block_size = 16,.device = cli_device,.n_ctx = (int) n,
			.n_blocks = (n + 15) / 16,
			.max_batch_tokens = n < PREFILL_CHUNK ? (int) n : PREFILL_CHUNK,
			.kv_type = cli_kv_type,
		};

		if (opus_ctx_create(m, &cp, &c, &err) != OPUS_OK)
			goto error;
	}
	logits = malloc(sizeof(float) * (size_t) n_vocab * (all ? PREFILL_CHUNK : 1));
	if (!logits)
	{
		fprintf(stderr, "opus_engine logits: out of memory\n");
		goto done;
	}

	printf("tokens");
	for (int64_t i = 0; i < n; i++)
		printf(" %d", toks[i]);
	printf("\n");

	{
		FILE	   *df = NULL;

		if (dump && !(df = fopen(dump, "wb")))
		{
			fprintf(stderr, "opus_engine logits: cannot open %s: %s\n", dump, strerror(errno));
			goto done;
		}
		opus_seq_init(&seq);
		for (int64_t i = 0; i < n; i += PREFILL_CHUNK)
		{
			int64_t		k = n - i < PREFILL_CHUNK ? n - i : PREFILL_CHUNK;
			bool		last = (i + k == n);
			struct opus_batch_item it = {
				.seq = &seq,.tokens = toks + i,.n_tokens = (int32_t) k,
				.logits = (all || last) ? logits : NULL,.logits_all = all,
			};

			if (opus_forward(c, &it, 1, &err) != OPUS_OK)
			{
				if (df)
					fclose(df);
				opus_seq_release(c, &seq);
				goto error;
			}
			for (int64_t j = all ? 0 : k - 1; j < k && (all || last); j++)
			{
				const float *row = logits + (all ? (size_t) j * n_vocab : 0);

				print_top(i + j, toks[i + j], row, n_vocab, top < n_vocab ? top : n_vocab);
				if (df)
					fwrite(row, sizeof(float), n_vocab, df);
			}
		}
		opus_seq_release(c, &seq);
		if (df && fclose(df) != 0)
		{
			fprintf(stderr, "opus_engine logits: writing %s failed\n", dump);
			goto done;
		}
	}
	rc = 0;
	goto done;

error:
	runtime_error("logits", &err);
done:
	free(toks);
	free(logits);
	opus_ctx_free(c);
	opus_model_free(m);
	return rc;
}
