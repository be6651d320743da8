/*
 * kv_accuracy.c - what the Q8_0 KV cache costs in accuracy against the F16
 * one, on the golden prompts (test/golden/logits: greedy.txt for the
 * prompts and llama.cpp's greedy continuations, tf_default.txt for
 * llama.cpp's teacher-forced top-1/top-2 at every position).
 *
 * For every prompt, prompt + llama.cpp's continuation is run in one batch
 * (teacher forcing, all logits) with an F16 and with a Q8_0 KV cache, and
 * each model continues the prompt greedily for max_new tokens.  Printed:
 *   - top-1 agreement with llama.cpp at all positions and at those where
 *     llama.cpp's top1 - top2 margin is >= 0.5, for each cache;
 *   - Q8_0 against F16: top-1 agreement, mean and max |logit diff| over
 *     every vocabulary entry of every position, and mean |diff| at F16's
 *     top-1 token;
 *   - greedy continuations: prompts whose whole continuation equals F16's
 *     (and llama.cpp's), and the mean length of the common prefix.
 * A third column, the F16 cache with llama_batch_order (llama.cpp's own
 * summation order, bit-identical to it on this model), shows how much
 * mere float reordering moves these figures: the noise floor.
 * A script that prints, not a pass/fail test (test_kv_q8 holds the
 * bounds).  Usage: kv_accuracy [MODEL [GOLDEN_DIR [THREADS]]], from the
 * repository root; defaults models/SmolLM2-135M-Instruct.Q4_1.gguf,
 * test/golden/logits, 2.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#define MAX_PROMPTS 256
#define MAX_IDS 4096
#define MARGIN 0.5f

struct prompt
{
	int32_t    *ids;			/* prompt then llama.cpp's continuation */
	int			n_prompt;
	int			n_cont;
	int32_t    *tf_top1;		/* llama.cpp, per position, or NULL */
	float	   *tf_margin;
};

static int
parse_ids(const char *s, int32_t **out)
{
	char	   *end;
	long		n = strtol(s, &end, 10);

	if (end == s || n < 0 || n > MAX_IDS)
		return -1;
	*out = calloc((size_t) n + 1, sizeof(int32_t));
	if (!*out)
		return -1;
	for (long i = 0; i < n; i++)
	{
		s = end;
		(*out)[i] = (int32_t) strtol(s, &end, 10);
		if (end == s)
			return -1;
	}
	return (int) n;
}

/* greedy.txt: P / prompt / cont lines; returns the prompt count, -1 on error */
static int
read_greedy(const char *dir, struct prompt *p, int *max_new)
{
	char		path[1024];
	char	   *line = NULL;
	size_t		cap = 0;
	int			n = 0,
				cur = -1;
	int32_t    *pr = NULL;
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/greedy.txt", dir);
	if (!(f = fopen(path, "r")))
		return -1;
	while (getline(&line, &cap, f) > 0)
	{
		if (strncmp(line, "max_new ", 8) == 0)
			*max_new = atoi(line + 8);
		else if (strncmp(line, "P ", 2) == 0)
		{
			cur = atoi(line + 2);
			if (cur != n || n >= MAX_PROMPTS)
				return -1;
			n++;
		}
		else if (cur >= 0 && strncmp(line, "prompt ", 7) == 0)
			p[cur].n_prompt = parse_ids(line + 7, &pr);
		else if (cur >= 0 && strncmp(line, "cont ", 5) == 0)
		{
			int32_t    *c = NULL;
			int			nc = parse_ids(line + 5, &c);

			if (nc < 0 || p[cur].n_prompt <= 0)
				return -1;
			p[cur].n_cont = nc;
			p[cur].ids = malloc(sizeof(int32_t) * (size_t) (p[cur].n_prompt + nc));
			if (!p[cur].ids)
				return -1;
			memcpy(p[cur].ids, pr, sizeof(int32_t) * (size_t) p[cur].n_prompt);
			memcpy(p[cur].ids + p[cur].n_prompt, c, sizeof(int32_t) * (size_t) nc);
			free(pr);
			free(c);
			pr = NULL;
		}
	}
	free(line);
	fclose(f);
	return n;
}

/* tf_default.txt: "P i n N" then "pos top1 logit1 top2 logit2" lines */
static bool
read_tf(const char *dir, struct prompt *p, int n_prompts)
{
	char		path[1024];
	char	   *line = NULL;
	size_t		cap = 0;
	int			cur = -1;
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/tf_default.txt", dir);
	if (!(f = fopen(path, "r")))
		return false;
	while (getline(&line, &cap, f) > 0)
	{
		int			pos,
					t1,
					t2,
					n;
		float		l1,
					l2;

		if (strncmp(line, "P ", 2) == 0)
		{
			if (sscanf(line + 2, "%d n %d", &cur, &n) != 2 || cur < 0 || cur >= n_prompts ||
				n != p[cur].n_prompt + p[cur].n_cont)
				return false;
			p[cur].tf_top1 = calloc((size_t) n, sizeof(int32_t));
			p[cur].tf_margin = calloc((size_t) n, sizeof(float));
			if (!p[cur].tf_top1 || !p[cur].tf_margin)
				return false;
		}
		else if (cur >= 0 && line[0] >= '0' && line[0] <= '9' &&
				 sscanf(line, "%d %d %f %d %f", &pos, &t1, &l1, &t2, &l2) == 5 &&
				 pos >= 0 && pos < p[cur].n_prompt + p[cur].n_cont)
		{
			p[cur].tf_top1[pos] = t1;
			p[cur].tf_margin[pos] = l1 - l2;
		}
	}
	free(line);
	fclose(f);
	return true;
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

static struct opus_ctx *
make_ctx(struct opus_model *m, enum opus_kv_type type, bool llama_order, int threads, int n)
{
	struct opus_ctx_params cp = {
		.n_threads = threads,.block_size = 16,.n_ctx = n,
		.n_blocks = (n + 15) / 16 + 1,.max_batch_tokens = n,.kv_type = type,
		.llama_batch_order = llama_order,
	};
	struct opus_ctx *c = NULL;
	struct opus_error err = {0};

	if (opus_ctx_create(m, &cp, &c, &err) != OPUS_OK)
		fprintf(stderr, "context: %s\n", err.msg);
	return c;
}

/* Teacher-forced logits of ids[0..n) into out[n][n_vocab]. */
static bool
forced(struct opus_ctx *c, const int32_t *ids, int n, float *out)
{
	struct opus_seq s;
	struct opus_error err = {0};
	struct opus_batch_item it = {.tokens = ids,.n_tokens = n,.logits = out,.logits_all = true};
	bool		ok;

	opus_seq_init(&s);
	it.seq = &s;
	ok = opus_forward(c, &it, 1, &err) == OPUS_OK;
	if (!ok)
		fprintf(stderr, "forward: %s\n", err.msg);
	opus_seq_release(c, &s);
	return ok;
}

/* Greedy continuation of ids[0..n_prompt) for n_new tokens into cont. */
static bool
greedy(struct opus_ctx *c, const int32_t *ids, int n_prompt, int n_new, int n_vocab,
	   float *lg, int32_t *cont)
{
	struct opus_seq s;
	struct opus_error err = {0};
	struct opus_batch_item it = {.tokens = ids,.n_tokens = n_prompt,.logits = lg};
	bool		ok;

	opus_seq_init(&s);
	it.seq = &s;
	ok = opus_forward(c, &it, 1, &err) == OPUS_OK;
	for (int i = 0; ok && i < n_new; i++)
	{
		cont[i] = argmax(lg, n_vocab);
		if (i + 1 < n_new)
		{
			it = (struct opus_batch_item)
			{
				.seq = &s,.tokens = &cont[i],.n_tokens = 1,.logits = lg
			};
			ok = opus_forward(c, &it, 1, &err) == OPUS_OK;
		}
	}
	if (!ok)
		fprintf(stderr, "forward: %s\n", err.msg);
	opus_seq_release(c, &s);
	return ok;
}

static int
common_prefix(const int32_t *a, const int32_t *b, int n)
{
	int			i = 0;

	while (i < n && a[i] == b[i])
		i++;
	return i;
}

#define N_CFG 3

static const char *const cfg_name[N_CFG] = {"f16 kv", "q8_0 kv", "f16, llama order"};

int
main(int argc, char **argv)
{
	const char *model_path = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
	const char *dir = argc > 2 ? argv[2] : "test/golden/logits";
	int			threads = argc > 3 ? atoi(argv[3]) : 2;
	static struct prompt p[MAX_PROMPTS];
	struct opus_model *m = NULL;
	struct opus_error err = {0};
	struct opus_ctx *c[N_CFG];
	float	   *lg[N_CFG];
	int32_t    *gen[N_CFG];
	int			n_prompts,
				max_new = 32,
				max_len = 0,
				n_vocab;
	long		pos_all = 0,
				pos_clear = 0,
				agree_all[N_CFG] = {0},
				agree_clear[N_CFG] = {0},
				agree_f16[N_CFG] = {0},
				greedy_f16[N_CFG] = {0},
				greedy_llama[N_CFG] = {0},
				prefix_sum[N_CFG] = {0},
				n_full = 0;
	double		diff_sum[N_CFG] = {0},
				diff_max[N_CFG] = {0},
				top_diff_sum[N_CFG] = {0};

	if (threads < 1)
		threads = 2;
	n_prompts = read_greedy(dir, p, &max_new);
	if (n_prompts <= 0 || !read_tf(dir, p, n_prompts))
	{
		fprintf(stderr, "kv_accuracy: cannot read the goldens in %s\n", dir);
		return 1;
	}
	if (opus_model_load(model_path, NULL, &m, &err) != OPUS_OK)
	{
		fprintf(stderr, "kv_accuracy: %s\n", err.msg);
		return 1;
	}
	n_vocab = opus_model_hparams(m)->n_vocab;
	for (int i = 0; i < n_prompts; i++)
	{
		int			len = p[i].n_prompt + p[i].n_cont;

		max_len = len > max_len ? len : max_len;
		if (p[i].n_prompt + max_new > max_len)
			max_len = p[i].n_prompt + max_new;
	}
	for (int k = 0; k < N_CFG; k++)
	{
		c[k] = make_ctx(m, k == 1 ? OPUS_KV_Q8_0 : OPUS_KV_F16, k == 2, threads, max_len);
		lg[k] = malloc(sizeof(float) * (size_t) max_len * n_vocab);
		gen[k] = malloc(sizeof(int32_t) * (size_t) max_new);
		if (!c[k] || !lg[k] || !gen[k])
			return 1;
	}

	for (int i = 0; i < n_prompts; i++)
	{
		int			n = p[i].n_prompt + p[i].n_cont;

		n_full += p[i].n_cont >= max_new;
		for (int k = 0; k < N_CFG; k++)
			if (!forced(c[k], p[i].ids, n, lg[k]))
				return 1;
		for (int t = 0; t < n; t++)
		{
			const float *a = lg[0] + (size_t) t * n_vocab;
			int32_t		ta = argmax(a, n_vocab);
			bool		clear = p[i].tf_margin[t] >= MARGIN;

			pos_all++;
			pos_clear += clear;
			for (int k = 0; k < N_CFG; k++)
			{
				const float *b = lg[k] + (size_t) t * n_vocab;
				int32_t		tb = argmax(b, n_vocab);

				agree_all[k] += tb == p[i].tf_top1[t];
				agree_clear[k] += clear && tb == p[i].tf_top1[t];
				agree_f16[k] += ta == tb;
				top_diff_sum[k] += fabs((double) a[ta] - b[ta]);
				for (int v = 0; k > 0 && v < n_vocab; v++)
				{
					double		d = fabs((double) a[v] - b[v]);

					diff_sum[k] += d;
					diff_max[k] = d > diff_max[k] ? d : diff_max[k];
				}
			}
		}
		for (int k = 0; k < N_CFG; k++)
		{
			int			q;

			if (!greedy(c[k], p[i].ids, p[i].n_prompt, max_new, n_vocab, lg[k], gen[k]))
				return 1;
			q = common_prefix(gen[0], gen[k], max_new);
			prefix_sum[k] += q;
			greedy_f16[k] += q == max_new;
			greedy_llama[k] += p[i].n_cont >= max_new &&
				common_prefix(gen[k], p[i].ids + p[i].n_prompt, max_new) == max_new;
		}
	}

	printf("model %s, %d golden prompts, %ld teacher-forced positions (%ld with llama.cpp margin >= %.1f), %d threads\n",
		   opus_model_hparams(m)->name, n_prompts, pos_all, pos_clear, MARGIN, threads);
	printf("%-48s", "");
	for (int k = 0; k < N_CFG; k++)
		printf(" %17s", cfg_name[k]);
	printf("\n%-48s", "teacher-forced top-1 == llama.cpp, all pos.");
	for (int k = 0; k < N_CFG; k++)
		printf(" %16.2f%%", 100.0 * agree_all[k] / pos_all);
	printf("\n%-48s", "teacher-forced top-1 == llama.cpp, margin>=0.5");
	for (int k = 0; k < N_CFG; k++)
		printf(" %16.2f%%", 100.0 * agree_clear[k] / pos_clear);
	printf("\n%-48s", "teacher-forced top-1 == f16 kv");
	for (int k = 0; k < N_CFG; k++)
		printf(" %16.2f%%", 100.0 * agree_f16[k] / pos_all);
	printf("\n%-48s", "mean |logit diff| vs f16 kv, all vocab");
	for (int k = 0; k < N_CFG; k++)
		printf(" %17.4f", diff_sum[k] / ((double) pos_all * n_vocab));
	printf("\n%-48s", "mean |logit diff| vs f16 kv at its top-1");
	for (int k = 0; k < N_CFG; k++)
		printf(" %17.4f", top_diff_sum[k] / pos_all);
	printf("\n%-48s", "max |logit diff| vs f16 kv");
	for (int k = 0; k < N_CFG; k++)
		printf(" %17.4f", diff_max[k]);
	printf("\n%-48s", "greedy 32 tokens == llama.cpp's (prompts)");
	for (int k = 0; k < N_CFG; k++)
		printf(" %14ld/%-2ld", greedy_llama[k], n_full);
	printf("\n%-48s", "greedy 32 tokens == f16 kv's (prompts)");
	for (int k = 0; k < N_CFG; k++)
		printf(" %14ld/%-2d", greedy_f16[k], n_prompts);
	printf("\n%-48s", "greedy: mean tokens equal to f16 kv's");
	for (int k = 0; k < N_CFG; k++)
		printf(" %17.1f", (double) prefix_sum[k] / n_prompts);
	printf("\n");
	for (int k = 0; k < N_CFG; k++)
	{
		opus_ctx_free(c[k]);
		free(lg[k]);
		free(gen[k]);
	}
	opus_model_free(m);
	for (int i = 0; i < n_prompts; i++)
	{
		free(p[i].ids);
		free(p[i].tf_top1);
		free(p[i].tf_margin);
	}
	return 0;
}
