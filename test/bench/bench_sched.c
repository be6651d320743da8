/*
 * bench_sched.c - the scheduler alone, no server: N requests submitted at
 * once (distinct prompts, greedy, ignore_eos, G tokens each) run to the
 * end; prints aggregate generated tokens per second, steps, mean batch
 * size and the mean step time for each N.  Shows how far continuous
 * batching scales in the engine itself, apart from PostgreSQL.
 *
 * usage: bench_sched MODEL [threads=2] [gen=64] [levels=1,4,16,32]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"
#include "runtime/scheduler.h"

static int	n_done;

static void
on_event(void *user, const struct opus_event *ev)
{
	if (ev->kind == OPUS_EV_DONE)
		n_done++;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int
main(int argc, char **argv)
{
	struct opus_model *m = NULL;
	struct opus_error err = {0};
	int			threads = argc > 2 ? atoi(argv[2]) : 2;
	int			gen = argc > 3 ? atoi(argv[3]) : 64;
	const char *levels = argc > 4 ? argv[4] : "1,4,16,32";
	const struct opus_tokenizer *tok;

	if (argc < 2)
	{
		fprintf(stderr, "usage: bench_sched MODEL [threads] [gen] [levels]\n");
		return 2;
	}
	if (opus_model_load(argv[1], NULL, &m, &err) != OPUS_OK)
	{
		fprintf(stderr, "load: %s\n", err.msg);
		return 1;
	}
	tok = opus_model_tokenizer(m);
	for (const char *lp = levels; *lp;)
	{
		int			n = atoi(lp);
		struct opus_ctx_params cp = {0};
		struct opus_ctx *c = NULL;
		struct opus_sched *s = NULL;
		struct opus_sched_stats st;
		double		t0,
					t1;

		cp.n_threads = threads;
		cp.block_size = 16;
		cp.n_blocks = 182;		/* 64MB of SmolLM2-135M KV */
		cp.max_batch_tokens = 512;
		cp.n_ctx = 2048;
		if (opus_ctx_create(m, &cp, &c, &err) != OPUS_OK ||
			opus_sched_create(c, on_event, NULL, &s, &err) != OPUS_OK)
		{
			fprintf(stderr, "create: %s\n", err.msg);
			return 1;
		}
		n_done = 0;
		for (int i = 0; i < n; i++)
		{
			char		prompt[128];
			int32_t		toks[128];
			int64_t		nt = 0;
			struct opus_gen_params p;

			snprintf(prompt, sizeof(prompt), "Write a short story about the number %d:", i + 1);
			if (opus_tokenizer_encode(tok, prompt, strlen(prompt), true, false, toks, 128,
									  &nt, &err) != OPUS_OK)
				return 1;
			memset(&p, 0, sizeof(p));
			opus_sampling_defaults(&p.sampling);
			p.sampling.temperature = 0.0f;
			p.max_tokens = gen;
			p.ignore_eos = true;
			if (opus_sched_submit(s, (uint64_t) i + 1, toks, (int32_t) nt, &p, &err) != OPUS_OK)
			{
				fprintf(stderr, "submit: %s\n", err.msg);
				return 1;
			}
		}
		t0 = now_s();
		while (opus_sched_n_active(s) > 0)
			if (opus_sched_step(s, &err) != OPUS_OK)
			{
				fprintf(stderr, "step: %s\n", err.msg);
				return 1;
			}
		t1 = now_s();
		opus_sched_get_stats(s, &st);
		printf("sessions=%d tok_s=%.1f steps=%lld mean_batch=%.1f step_ms=%.1f preemptions=%lld\n",
			   n, (double) st.tokens_decode / (t1 - t0), (long long) st.steps,
			   (double) st.tokens_decode / (double) st.steps, (t1 - t0) * 1e3 / (double) st.steps,
			   (long long) st.preemptions);
		fflush(stdout);
		opus_sched_free(s);
		opus_ctx_free(c);
		while (*lp && *lp != ',')
			lp++;
		if (*lp == ',')
			lp++;
	}
	opus_model_free(m);
	return 0;
}
