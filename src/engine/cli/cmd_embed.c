/*
 * cmd_embed.c - `opus_engine embed`: sentence embeddings from an encoder
 * model (model/model_bert.c), for people and for test/bench/bench_embed.sh.
 *
 *   opus_engine embed --model FILE [--threads N] [--batch-tokens N]
 *                     [--no-normalize] [--truncate] [--quiet]
 *                     (--input FILE | TEXT...)
 *
 * --input reads one text per line.  Each vector is printed as one line of
 * space-separated floats (%.9g) unless --quiet; the last line on stderr
 * says how many texts and tokens were encoded in how long (tokenizing and
 * encoding, not loading).  A text longer than the model's context is an
 * error unless --truncate (keep the first n_ctx - 1 tokens and the last).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "model/model.h"

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
usage(void)
{
	fprintf(stderr,
			"usage: opus_engine embed --model FILE [--threads N] [--batch-tokens N]\n"
			"                         [--no-normalize] [--truncate] [--quiet]\n"
			"                         (--input FILE | TEXT...)\n");
}

/* the TEXT arguments */
struct text_list
{
	char	  **texts;
	int			n,
				cap;
	bool		oom;
};

static bool
take_text(const char *a, void *ctx)
{
	struct text_list *tl = ctx;

	if (a[0] == '-' && a[1] == '-')
		return false;
	if (tl->n == tl->cap)
	{
		char	  **t;

		tl->cap = tl->cap ? tl->cap * 2 : 16;
		t = realloc(tl->texts, sizeof(char *) * tl->cap);
		if (!t)
		{
			tl->oom = true;
			return false;
		}
		tl->texts = t;
	}
	tl->texts[tl->n++] = strdup(a);
	return true;
}

static int
on_error(enum opus_cli_err e, const char *opt, const char *value)
{
	usage();
	return 2;
}

int
opus_cli_embed(int argc, char **argv)
{
	const char *model = NULL,
			   *input = NULL;
	int			threads = 1,
				batch_tokens = 1024,	/* tokens per forward pass: 4096 ran at half the
										 * rate of 1024 on MiniLM (activations out of cache) */
				n_texts = 0,
				cap = 0,
				rc = 1;
	bool		normalize = true,
				truncate = false,
				quiet = false;
	char	  **texts = NULL;
	struct opus_model *m = NULL;
	struct opus_encoder *enc = NULL;
	struct opus_error err = {0};
	struct opus_embed_item *items = NULL;
	int32_t    *toks = NULL;
	float	   *vecs = NULL;
	int64_t		n_tok_total = 0;
	int			E,
				n_ctx;
	double		t0,
				t1;
	const char *threads_s = NULL,
			   *batch_s = NULL;
	bool		no_normalize = false;
	struct text_list tl = {NULL, 0, 0, false};
	const struct opus_cli_opt opts[] = {
		{"--model", NULL, OPUS_CLI_STR, &model, 0, 0, NULL},
		{"--input", NULL, OPUS_CLI_STR, &input, 0, 0, NULL},
		{"--threads", NULL, OPUS_CLI_STR, &threads_s, 0, 0, NULL},
		{"--batch-tokens", NULL, OPUS_CLI_STR, &batch_s, 0, 0, NULL},
		{"--no-normalize", NULL, OPUS_CLI_FLAG, &no_normalize, 0, 0, NULL},
		{"--truncate", NULL, OPUS_CLI_FLAG, &truncate, 0, 0, NULL},
		{"--quiet", NULL, OPUS_CLI_FLAG, &quiet, 0, 0, NULL},
		OPUS_CLI_END
	};
	const struct opus_cli_spec spec = {
		.cmd = "embed",.opts = opts,.usage = usage,.positional = take_text,
		.ctx = &tl,.on_error = on_error,.no_short_help = true
	};

	if ((rc = opus_cli_parse_spec(&spec, argc, argv)) >= 0)
	{
		texts = tl.texts;
		n_texts = tl.n;
		rc = tl.oom ? 1 : rc;
		goto out;
	}
	rc = 1;
	texts = tl.texts;
	n_texts = tl.n;
	cap = tl.cap;
	if (threads_s)
		threads = atoi(threads_s);
	if (batch_s)
		batch_tokens = atoi(batch_s);
	normalize = !no_normalize;
	if (!model || (!input && n_texts == 0) || (input && n_texts > 0))
	{
		usage();
		return 2;
	}
	if (input)
	{
		FILE	   *f = fopen(input, "r");
		char	   *line = NULL;
		size_t		lcap = 0;
		ssize_t		n;

		if (!f)
		{
			fprintf(stderr, "opus_engine embed: cannot open %s\n", input);
			return 1;
		}
		while ((n = getline(&line, &lcap, f)) >= 0)
		{
			if (n > 0 && line[n - 1] == '\n')
				line[--n] = '\0';
			if (n_texts == cap)
			{
				cap = cap ? cap * 2 : 256;
				texts = realloc(texts, sizeof(char *) * cap);
				if (!texts)
					return 1;
			}
			texts[n_texts++] = strdup(line);
		}
		free(line);
		fclose(f);
	}
	if (opus_model_load(model, NULL, &m, &err) != OPUS_OK ||
		opus_encoder_create(m, threads, batch_tokens, &enc, &err) != OPUS_OK)
	{
		fprintf(stderr, "opus_engine embed: %s\n", err.msg);
		goto out;
	}
	E = opus_model_hparams(m)->n_embd;
	n_ctx = opus_model_hparams(m)->n_ctx_train;
	items = calloc(n_texts > 0 ? n_texts : 1, sizeof(*items));
	toks = malloc(sizeof(int32_t) * (size_t) n_ctx * (n_texts > 0 ? n_texts : 1));
	vecs = malloc(sizeof(float) * (size_t) E * (n_texts > 0 ? n_texts : 1));
	if (!items || !toks || !vecs)
	{
		fprintf(stderr, "opus_engine embed: out of memory\n");
		goto out;
	}
	t0 = now_s();
	for (int i = 0; i < n_texts; i++)
	{
		int32_t    *t = toks + (size_t) i * n_ctx;
		int64_t		n = 0;
		enum opus_status st;

		st = opus_tokenizer_encode(opus_model_tokenizer(m), texts[i], strlen(texts[i]),
								   true, false, t, n_ctx, &n, &err);
		if (st == OPUS_ERR_CAPACITY && truncate)
		{
			int32_t    *all = malloc(sizeof(int32_t) * (size_t) n);
			int64_t		n2 = 0;

			if (!all || opus_tokenizer_encode(opus_model_tokenizer(m), texts[i],
											  strlen(texts[i]), true, false, all, n,
											  &n2, &err) != OPUS_OK)
			{
				free(all);
				fprintf(stderr, "opus_engine embed: text %d: %s\n", i + 1, err.msg);
				goto out;
			}
			memcpy(t, all, sizeof(int32_t) * (size_t) (n_ctx - 1));
			t[n_ctx - 1] = all[n2 - 1];
			free(all);
			n = n_ctx;
			st = OPUS_OK;
		}
		if (st == OPUS_ERR_CAPACITY)
		{
			fprintf(stderr, "opus_engine embed: text %d has %lld tokens, the model takes %d (--truncate)\n",
					i + 1, (long long) n, n_ctx);
			goto out;
		}
		if (st != OPUS_OK)
		{
			fprintf(stderr, "opus_engine embed: text %d: %s\n", i + 1, err.msg);
			goto out;
		}
		items[i] = (struct opus_embed_item) {t, (int32_t) n, vecs + (size_t) i * E};
		n_tok_total += n;
	}
	if (opus_encode(enc, items, n_texts, normalize, &err) != OPUS_OK)
	{
		fprintf(stderr, "opus_engine embed: %s\n", err.msg);
		goto out;
	}
	t1 = now_s();
	if (!quiet)
	{
		for (int i = 0; i < n_texts; i++)
		{
			for (int d = 0; d < E; d++)
				printf(d ? " %.9g" : "%.9g", vecs[(size_t) i * E + d]);
			putchar('\n');
		}
	}
	fprintf(stderr, "embed: %d texts, %lld tokens, %.3f s, %.1f embeddings/s, %.0f tokens/s, %d threads\n",
			n_texts, (long long) n_tok_total, t1 - t0, n_texts / (t1 - t0),
			n_tok_total / (t1 - t0), threads);
	rc = 0;
out:
	opus_encoder_free(enc);
	opus_model_free(m);
	for (int i = 0; i < n_texts; i++)
		free(texts[i]);
	free(texts);
	free(items);
	free(toks);
	free(vecs);
	return rc;
}
