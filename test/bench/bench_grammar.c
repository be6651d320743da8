/*
 * bench_grammar.c - constrained against unconstrained decode in the engine
 * itself (the scheduler, no server): opus_pg's side of
 * test/bench/bench_grammar.sh.
 *
 *   bench_grammar --gbnf SCHEMA.json
 *       print the GBNF grammar the JSON Schema becomes (the same text goes
 *       to llama.cpp) and, on stderr, the time to convert and compile it.
 *
 *   bench_grammar --compile DIR SCHEMA.json...
 *       for each schema: its size, the GBNF's, and the medians of 5 runs of
 *       the conversion to GBNF and of the compile (opus_grammar_compile,
 *       no cache), one line each; the GBNF is written to DIR/N.gbnf (N the
 *       schema's place on the command line, from 1) for llama.cpp's side.
 *
 *   bench_grammar MODEL SCHEMA.json [-t THREADS] [-g GEN] [-r ROUNDS] [-b 1,16]
 *       for each batch size N: N requests (distinct prompts, greedy, GEN
 *       tokens at most) run to the end, once unconstrained (ignore_eos, so
 *       they run GEN tokens) and once under the schema's grammar, the order
 *       alternating by round.  Decode tokens/s counts the steps that
 *       prefill nothing (a decode step: forward, masks, sampling), so
 *       prompt work and the lengths of the outputs do not weigh in.
 *       Prints per N the median of ROUNDS rounds of each, the ratio, and
 *       the first constrained round alone (cold: the grammar's mask cache
 *       empty) next to the median (warm).  The constrained runs go twice:
 *       with the masks computed during the forward pass (the default,
 *       runtime/masker.h) and after it over the thread pool
 *       (opus_sched_set_mask_overlap off); the share of masks the helper
 *       computed during the pass is printed too, and the step time spent
 *       on masks after the pass (microseconds per step, both ways).
 *
 * Every constrained output is checked against the grammar (the bench stops
 * if one is not a valid prefix or, finished, not a whole string).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"
#include "runtime/constrain.h"
#include "runtime/scheduler.h"
#include "text/grammar.h"
#include "text/json_schema.h"

#define MAX_N 64

static char *outs[MAX_N];
static size_t out_len[MAX_N];
static int	finish[MAX_N];
static int	n_done;
static char *json_sample;		/* a constrained output, for mask_replay */

static void
on_event(void *user, const struct opus_event *ev)
{
	int			i = (int) ev->id - 1;

	(void) user;
	if (i < 0 || i >= MAX_N)
		return;
	if (ev->kind == OPUS_EV_TEXT && ev->text_len > 0)
	{
		outs[i] = realloc(outs[i], out_len[i] + ev->text_len + 1);
		memcpy(outs[i] + out_len[i], ev->text, ev->text_len);
		out_len[i] += ev->text_len;
		outs[i][out_len[i]] = '\0';
	}
	if (ev->kind == OPUS_EV_DONE)
	{
		finish[i] = (int) ev->finish;
		n_done++;
	}
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static char *
read_all(const char *path, size_t *len)
{
	FILE	   *f = fopen(path, "rb");
	char	   *buf = NULL;
	long		n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
	{
		buf = malloc((size_t) n + 1);
		if (buf && fread(buf, 1, (size_t) n, f) != (size_t) n)
		{
			free(buf);
			buf = NULL;
		}
		if (buf)
		{
			buf[n] = '\0';
			*len = (size_t) n;
		}
	}
	fclose(f);
	return buf;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return x < y ? -1 : x > y;
}

static double
median(double *v, int n)
{
	qsort(v, n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * One run of n requests; returns decode tokens/s over the steps that
 * prefilled nothing, and the mean generated tokens per request in *mean_gen.
 */
static double
run(struct opus_model *m, int threads, int n, int gen, const char *gbnf,
	bool overlap, double *mean_gen, double *helper_share, double *wait_us)
{
	const struct opus_tokenizer *tok = opus_model_tokenizer(m);
	struct opus_ctx_params cp = {0};
	struct opus_ctx *c = NULL;
	struct opus_sched *s = NULL;
	struct opus_error err = {0};
	struct opus_sched_stats st;
	double		t_decode = 0;
	int64_t		tok_decode = 0;
	int64_t		total = 0;

	cp.n_threads = threads;
	cp.block_size = 16;
	cp.n_blocks = 182;			/* 64MB of SmolLM2-135M KV */
	cp.max_batch_tokens = 512;
	cp.n_ctx = 2048;
	if (opus_ctx_create(m, &cp, &c, &err) != OPUS_OK ||
		opus_sched_create(c, on_event, NULL, &s, &err) != OPUS_OK)
	{
		fprintf(stderr, "create: %s\n", err.msg);
		exit(1);
	}
	opus_sched_set_mask_overlap(s, overlap);
	n_done = 0;
	for (int i = 0; i < n; i++)
	{
		char		prompt[160];
		int32_t		toks[128];
		int64_t		nt = 0;
		struct opus_gen_params p;

		free(outs[i]);
		outs[i] = NULL;
		out_len[i] = 0;
		snprintf(prompt, sizeof(prompt),
				 "List the people of team %d as JSON, with their names, ages and email addresses:", i + 1);
		if (opus_tokenizer_encode(tok, prompt, strlen(prompt), true, false, toks, 128,
								  &nt, &err) != OPUS_OK)
			exit(1);
		memset(&p, 0, sizeof(p));
		opus_sampling_defaults(&p.sampling);
		p.sampling.temperature = 0.0f;
		p.max_tokens = gen;
		p.ignore_eos = gbnf == NULL;
		p.grammar = gbnf;
		p.grammar_len = gbnf ? strlen(gbnf) : 0;
		if (opus_sched_submit(s, (uint64_t) i + 1, toks, (int32_t) nt, &p, &err) != OPUS_OK)
		{
			fprintf(stderr, "submit: %s\n", err.msg);
			exit(1);
		}
	}
	while (opus_sched_n_active(s) > 0)
	{
		struct opus_sched_stats a,
					b;
		double		t0;

		opus_sched_get_stats(s, &a);
		t0 = now_s();
		if (opus_sched_step(s, &err) != OPUS_OK)
		{
			fprintf(stderr, "step: %s\n", err.msg);
			exit(1);
		}
		opus_sched_get_stats(s, &b);
		if (b.tokens_prefill == a.tokens_prefill && b.tokens_decode > a.tokens_decode)
		{
			t_decode += now_s() - t0;
			tok_decode += b.tokens_decode - a.tokens_decode;
		}
	}
	opus_sched_get_stats(s, &st);
	if (helper_share)
		*helper_share = st.masks > 0 ? (double) st.masks_overlapped / (double) st.masks : 0;
	if (wait_us)
		*wait_us = st.steps > 0 ? st.masks_wait_ms * 1e3 / (double) st.steps : 0;
	opus_sched_free(s);
	opus_ctx_free(c);
	for (int i = 0; i < n; i++)
	{
		int32_t		nt = 0;

		if (finish[i] == OPUS_FINISH_ERROR)
		{
			fprintf(stderr, "request %d failed\n", i + 1);
			exit(1);
		}
		if (gbnf)
		{
			opus_grammar *g = opus_grammar_compile(gbnf, strlen(gbnf), NULL);
			opus_grammar_state *gs = opus_grammar_state_new(g);
			bool		ok = out_len[i] == 0 ||
				opus_grammar_accept_bytes(gs, (const uint8_t *) outs[i], out_len[i]);

			if (!ok || (finish[i] == OPUS_FINISH_STOP && !opus_grammar_is_accepting(gs)))
			{
				fprintf(stderr, "request %d: output does not match the grammar: %s\n",
						i + 1, outs[i] ? outs[i] : "");
				exit(1);
			}
			opus_grammar_state_free(gs);
			opus_grammar_free(g);
		}
		(void) nt;
	}
	if (gbnf && outs[0])
	{
		free(json_sample);
		json_sample = strdup(outs[0]);
	}
	total = st.tokens_decode + n; /* the first token of each comes from a prefill step */
	*mean_gen = (double) total / n;
	return tok_decode > 0 ? (double) tok_decode / t_decode : 0;
}

/*
 * The mask work alone along a text the grammar accepts: the text is
 * tokenized, and for each token the mask of the state before it is
 * computed (timed) and the token accepted.  Twice on a freshly compiled
 * grammar: cold (its mask cache empty) and warm.  Microseconds per token
 * into us[0], us[1]; the tokens into *n_tok.
 */
static void
mask_replay(struct opus_model *m, const char *gbnf, const char *text, double *us, int *n_tok)
{
	const struct opus_tokenizer *tok = opus_model_tokenizer(m);
	struct opus_constrain *c = NULL;
	struct opus_error err = {0};
	opus_grammar *g = opus_grammar_compile(gbnf, strlen(gbnf), NULL);
	int64_t		nt = 0;
	int32_t    *toks = malloc(sizeof(int32_t) * (strlen(text) + 8));
	uint32_t   *mask;

	if (!g || !toks || opus_constrain_create(tok, &c, &err) != OPUS_OK ||
		opus_tokenizer_encode(tok, text, strlen(text), false, false, toks,
							  (int64_t) strlen(text) + 8, &nt, &err) != OPUS_OK)
	{
		fprintf(stderr, "replay: %s\n", err.msg);
		exit(1);
	}
	mask = malloc(sizeof(uint32_t) * (size_t) opus_constrain_mask_words(c));
	for (int pass = 0; pass < 2; pass++)
	{
		opus_grammar_state *gs = opus_grammar_state_new(g);
		double		t = 0;

		for (int64_t i = 0; i < nt; i++)
		{
			double		t0 = now_s();

			opus_grammar_mask(gs, c->vocab, mask);
			t += now_s() - t0;
			if (!(mask[toks[i] >> 5] >> (toks[i] & 31) & 1) ||
				!opus_constrain_accept(c, gs, toks[i]))
			{
				fprintf(stderr, "replay: token %lld (%d) not allowed\n", (long long) i, toks[i]);
				exit(1);
			}
		}
		us[pass] = nt ? t * 1e6 / (double) nt : 0;
		opus_grammar_state_free(gs);
	}
	*n_tok = (int) nt;
	free(mask);
	free(toks);
	opus_constrain_free(c);
	opus_grammar_free(g);
}

/* --compile: one line per schema (see the header). */
static int
compile_times(const char *dir, int n, char **files)
{
	for (int i = 0; i < n; i++)
	{
		size_t		len = 0;
		char	   *schema = read_all(files[i], &len);
		double		conv[5],
					comp[5];
		size_t		gbnf_len = 0,
					elems = 0;
		char		path[4096];
		FILE	   *f;

		if (!schema)
		{
			fprintf(stderr, "cannot read %s\n", files[i]);
			return 1;
		}
		for (int r = 0; r < 5; r++)
		{
			char	   *gbnf = NULL;
			struct opus_error err = {0};
			struct opus_grammar_error gerr;
			opus_grammar *g;
			double		t0 = now_s(),
						t1,
						t2;

			if (opus_json_schema_to_gbnf(schema, len, &gbnf, &err) != OPUS_OK)
			{
				fprintf(stderr, "%s: %s\n", files[i], err.msg);
				return 1;
			}
			t1 = now_s();
			g = opus_grammar_compile(gbnf, strlen(gbnf), &gerr);
			t2 = now_s();
			if (!g)
			{
				fprintf(stderr, "%s: compile: %s\n", files[i], gerr.msg);
				return 1;
			}
			conv[r] = (t1 - t0) * 1e3;
			comp[r] = (t2 - t1) * 1e3;
			gbnf_len = strlen(gbnf);
			elems = opus_grammar_size(g);
			if (r == 0)
			{
				snprintf(path, sizeof(path), "%s/%d.gbnf", dir, i + 1);
				f = fopen(path, "w");
				if (!f || fwrite(gbnf, 1, gbnf_len, f) != gbnf_len || fclose(f) != 0)
				{
					fprintf(stderr, "cannot write %s\n", path);
					return 1;
				}
			}
			opus_grammar_free(g);
			free(gbnf);
		}
		printf("%d %zu %zu %zu %.3f %.3f\n", i + 1, len, gbnf_len, elems,
			   median(conv, 5), median(comp, 5));
		free(schema);
	}
	return 0;
}

int
main(int argc, char **argv)
{
	struct opus_model *m = NULL;
	struct opus_error err = {0};
	int			threads = 2;
	int			gen = 96;
	int			rounds = 3;
	const char *levels = "1,16";
	char	   *schema;
	size_t		schema_len = 0;
	char	   *gbnf = NULL;
	double		t0,
				t1,
				t2;
	opus_grammar *g;
	struct opus_grammar_error gerr;

	if (argc >= 3 && strcmp(argv[1], "--compile") == 0)
		return compile_times(argv[2], argc - 3, argv + 3);
	if (argc == 3 && strcmp(argv[1], "--gbnf") == 0)
	{
		schema = read_all(argv[2], &schema_len);
		if (!schema)
		{
			fprintf(stderr, "cannot read %s\n", argv[2]);
			return 1;
		}
		t0 = now_s();
		if (opus_json_schema_to_gbnf(schema, schema_len, &gbnf, &err) != OPUS_OK)
		{
			fprintf(stderr, "%s: %s\n", argv[2], err.msg);
			return 1;
		}
		t1 = now_s();
		g = opus_grammar_compile(gbnf, strlen(gbnf), &gerr);
		t2 = now_s();
		if (!g)
		{
			fprintf(stderr, "compile: %s\n", gerr.msg);
			return 1;
		}
		fputs(gbnf, stdout);
		fprintf(stderr, "schema %s: %zu bytes -> %zu bytes of GBNF in %.3f ms, compiled (%zu elements) in %.3f ms\n",
				argv[2], schema_len, strlen(gbnf), (t1 - t0) * 1e3, opus_grammar_size(g),
				(t2 - t1) * 1e3);
		opus_grammar_free(g);
		free(gbnf);
		free(schema);
		return 0;
	}
	if (argc < 3)
	{
		fprintf(stderr, "usage: bench_grammar --gbnf SCHEMA.json\n"
				"       bench_grammar MODEL SCHEMA.json [-t THREADS] [-g GEN] [-r ROUNDS] [-b 1,16]\n");
		return 2;
	}
	for (int i = 3; i + 1 < argc; i += 2)
	{
		if (strcmp(argv[i], "-t") == 0)
			threads = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "-g") == 0)
			gen = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "-r") == 0)
			rounds = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "-b") == 0)
			levels = argv[i + 1];
	}
	if (rounds < 1 || rounds > 64)
		rounds = 3;
	schema = read_all(argv[2], &schema_len);
	if (!schema || opus_json_schema_to_gbnf(schema, schema_len, &gbnf, &err) != OPUS_OK)
	{
		fprintf(stderr, "%s: %s\n", argv[2], schema ? err.msg : "cannot read");
		return 1;
	}
	if (opus_model_load(argv[1], NULL, &m, &err) != OPUS_OK)
	{
		fprintf(stderr, "load: %s\n", err.msg);
		return 1;
	}
	printf("%-6s %12s %12s %8s %12s %10s %10s %12s %8s %10s %10s\n", "batch", "free tok/s", "json tok/s",
		   "ratio", "json cold", "free gen", "json gen", "json after", "helper", "wait us", "after us");
	for (const char *lp = levels; *lp;)
	{
		int			n = atoi(lp);
		double		fr[64],
					co[64],
					sq[64],
					hs[64],
					wo[64],
					wa[64];
		double		cold = 0,
					gen_free = 0,
					gen_json = 0;

		if (n < 1 || n > MAX_N)
		{
			fprintf(stderr, "batch sizes are 1..%d\n", MAX_N);
			return 2;
		}
		for (int r = 0; r < rounds; r++)
		{
			/* the three in a rotating order: each goes first once in 3 rounds */
			for (int k = 0; k < 3; k++)
			{
				int			which = (r + k) % 3;

				if (which == 0)
					fr[r] = run(m, threads, n, gen, NULL, true, &gen_free, NULL, NULL);
				else if (which == 1)
				{
					co[r] = run(m, threads, n, gen, gbnf, true, &gen_json, &hs[r], &wo[r]);
					if (r == 0)
						cold = co[0];
				}
				else
					sq[r] = run(m, threads, n, gen, gbnf, false, &gen_json, NULL, &wa[r]);
			}
		}
		{
			double		mf = median(fr, rounds),
						mc = median(co, rounds),
						ms = median(sq, rounds),
						mh = median(hs, rounds),
						mwo = median(wo, rounds),
						mwa = median(wa, rounds);

			printf("%-6d %12.1f %12.1f %7.0f%% %12.1f %10.1f %10.1f %12.1f %7.0f%% %10.1f %10.1f\n", n, mf, mc,
				   mf > 0 ? 100.0 * mc / mf : 0, cold, gen_free, gen_json, ms, 100.0 * mh, mwo, mwa);
		}
		fflush(stdout);
		while (*lp && *lp != ',')
			lp++;
		if (*lp == ',')
			lp++;
	}
	/* the last constrained run's first output, replayed for the mask work */
	if (json_sample)
	{
		double		us[2];
		int			n_tok = 0;

		mask_replay(m, gbnf, json_sample, us, &n_tok);
		printf("masks %.1f %.1f %d\n", us[0], us[1], n_tok);
	}
	for (int i = 0; i < MAX_N; i++)
		free(outs[i]);
	free(json_sample);
	opus_model_free(m);
	free(gbnf);
	free(schema);
	return 0;
}
