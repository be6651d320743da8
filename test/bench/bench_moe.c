/*
 * bench_moe.c - decode throughput of a model at given batch sizes, and for a
 * MoE model the bytes of expert weights each step reads (see bench_moe.sh).
 *
 * usage: bench_moe MODEL [-t THREADS] [-p PROMPT] [-g STEPS] [-r REPS] [-b B1,B2,...]
 *
 * For each batch size B: B sequences are prefilled with PROMPT pseudo-random
 * tokens each (one call), then REPS rounds of STEPS decode steps each append
 * one token to every sequence (logits for each), after one warm-up step.
 * Prints one line per B: tokens/s of the median and of the best round, and
 * the expert weight bytes read per step with the most times any expert was
 * read in one layer (MoE), or the feed-forward weight bytes per step (dense:
 * every weight read once).  The median resists a shared machine's noise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/gguf.h"
#include "model/model.h"

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Bytes of the dense feed-forward weights (blk.N.ffn_{gate,up,down}.weight). */
static uint64_t
dense_ffn_bytes(const char *path)
{
	struct opus_gguf *g = NULL;
	struct opus_error err;
	uint64_t	sum = 0;

	if (opus_gguf_open(path, &g, &err) != OPUS_OK)
		return 0;
	for (int64_t i = 0; i < opus_gguf_n_tensors(g); i++)
	{
		const struct opus_gguf_tensor *t = opus_gguf_tensor_at(g, i);
		const char *dot = strchr(t->name + 4, '.');

		if (strncmp(t->name, "blk.", 4) == 0 && dot &&
			(strcmp(dot, ".ffn_gate.weight") == 0 || strcmp(dot, ".ffn_up.weight") == 0 ||
			 strcmp(dot, ".ffn_down.weight") == 0))
			sum += t->nbytes;
	}
	opus_gguf_close(g);
	return sum;
}

int
main(int argc, char **argv)
{
	const char *path = NULL;
	int			threads = 2,
				n_prompt = 32,
				n_steps = 16,
				n_reps = 5;
	int			batches[16] = {1, 16},
				n_batches = 2;
	struct opus_model *m = NULL;
	struct opus_error err;
	const struct opus_hparams *hp;
	uint64_t	ffn_bytes;

	for (int i = 1; i < argc; i++)
	{
		if (strcmp(argv[i], "-t") == 0 && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (strcmp(argv[i], "-p") == 0 && i + 1 < argc)
			n_prompt = atoi(argv[++i]);
		else if (strcmp(argv[i], "-g") == 0 && i + 1 < argc)
			n_steps = atoi(argv[++i]);
		else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
			n_reps = atoi(argv[++i]);
		else if (strcmp(argv[i], "-b") == 0 && i + 1 < argc)
		{
			char	   *p = argv[++i];

			n_batches = 0;
			while (*p && n_batches < 16)
			{
				batches[n_batches++] = (int) strtol(p, &p, 10);
				if (*p == ',')
					p++;
			}
		}
		else if (argv[i][0] != '-' && !path)
			path = argv[i];
		else
		{
			fprintf(stderr, "usage: bench_moe MODEL [-t THREADS] [-p PROMPT] [-g STEPS] [-r REPS] [-b B1,B2]\n");
			return 2;
		}
	}
	if (!path || threads < 1 || n_prompt < 1 || n_steps < 1 || n_reps < 1 || n_reps > 64)
	{
		fprintf(stderr, "usage: bench_moe MODEL [-t THREADS] [-p PROMPT] [-g STEPS] [-r REPS] [-b B1,B2]\n");
		return 2;
	}
	if (opus_model_load(path, NULL, &m, &err) != OPUS_OK)
	{
		fprintf(stderr, "bench_moe: %s\n", err.msg);
		return 1;
	}
	hp = opus_model_hparams(m);
	ffn_bytes = hp->n_expert > 0 ? 0 : dense_ffn_bytes(path);

	for (int bi = 0; bi < n_batches; bi++)
	{
		int			B = batches[bi];
		int			n_ctx = n_prompt + n_reps * n_steps + 2;
		struct opus_ctx_params cp = {
			.n_threads = threads,.block_size = 16,
			.n_blocks = (int64_t) B * (n_ctx / 16 + 2),
			.max_batch_tokens = B * n_prompt,.n_ctx = n_ctx,
		};
		struct opus_ctx *c = NULL;
		struct opus_seq *seqs = calloc((size_t) B, sizeof(*seqs));
		struct opus_batch_item *items = calloc((size_t) B, sizeof(*items));
		int32_t    *toks = malloc(sizeof(int32_t) * (size_t) B * n_prompt);
		float	   *logits = malloc(sizeof(float) * (size_t) B * hp->n_vocab);
		uint64_t	seed = 12345;
		double		t0 = 0,
					dts[64];
		uint64_t	bytes = 0;
		int32_t		max_reads = 0;
		int64_t		active = 0;

		if (B < 1 || opus_ctx_create(m, &cp, &c, &err) != OPUS_OK)
		{
			fprintf(stderr, "bench_moe: context for batch %d: %s\n", B, err.msg);
			return 1;
		}
		for (int i = 0; i < B * n_prompt; i++)
		{
			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			toks[i] = (int32_t) ((seed >> 33) % (uint64_t) (hp->n_vocab - 1000)) + 500;
		}
		for (int s = 0; s < B; s++)
		{
			opus_seq_init(&seqs[s]);
			items[s] = (struct opus_batch_item) {
				.seq = &seqs[s],.tokens = toks + (size_t) s * n_prompt,
				.n_tokens = n_prompt,.logits = logits + (size_t) s * hp->n_vocab
			};
		}
		if (opus_forward(c, items, B, &err) != OPUS_OK)
		{
			fprintf(stderr, "bench_moe: prefill: %s\n", err.msg);
			return 1;
		}
		for (int step = -1; step < n_reps * n_steps; step++)
		{
			struct opus_moe_io_stats io;

			if (step >= 0 && step % n_steps == 0)
			{
				if (step > 0)
					dts[step / n_steps - 1] = now() - t0;
				t0 = now();
			}
			for (int s = 0; s < B; s++)
			{
				items[s].tokens = toks + (size_t) s * n_prompt + (step + 1) % n_prompt;
				items[s].n_tokens = 1;
			}
			if (opus_forward(c, items, B, &err) != OPUS_OK)
			{
				fprintf(stderr, "bench_moe: decode: %s\n", err.msg);
				return 1;
			}
			opus_ctx_moe_io_stats(c, &io);
			if (step >= 0)
			{
				bytes += io.bytes_last;
				active += io.active_last;
				if (io.max_reads_last > max_reads)
					max_reads = io.max_reads_last;
			}
		}
		dts[n_reps - 1] = now() - t0;
		/* sort the rounds' times: median and best */
		for (int i = 1; i < n_reps; i++)
			for (int j = i; j > 0 && dts[j] < dts[j - 1]; j--)
			{
				double		tmp = dts[j];

				dts[j] = dts[j - 1];
				dts[j - 1] = tmp;
			}
		if (hp->n_expert > 0)
			printf("%-16s batch %3d  %7.1f tok/s (best %7.1f)  %7.2f ms/step  expert bytes/step %7.2f MiB  "
				   "active experts/layer %.2f of %d  max reads of one expert %d\n",
				   hp->name, B, B * n_steps / dts[n_reps / 2], B * n_steps / dts[0],
				   dts[n_reps / 2] * 1e3 / n_steps,
				   bytes / (double) (n_reps * n_steps) / 1048576.0,
				   active / (double) (n_reps * n_steps) / hp->n_layer, hp->n_expert, max_reads);
		else
			printf("%-16s batch %3d  %7.1f tok/s (best %7.1f)  %7.2f ms/step  ffn bytes/step    %7.2f MiB  (dense)\n",
				   hp->name, B, B * n_steps / dts[n_reps / 2], B * n_steps / dts[0],
				   dts[n_reps / 2] * 1e3 / n_steps, ffn_bytes / 1048576.0);
		fflush(stdout);
		for (int s = 0; s < B; s++)
			opus_seq_release(c, &seqs[s]);
		opus_ctx_free(c);
		free(seqs);
		free(items);
		free(toks);
		free(logits);
	}
	opus_model_free(m);
	return 0;
}
