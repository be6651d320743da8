/*
 * cli_genmodel.c - `opus_engine genmodel`: write a GGUF model with random
 * weights and the shapes of a real model, without a network or Python (the
 * GPU check generates its models with this on the GPU machine).
 *
 *   opus_engine genmodel --shape NAME --type TYPE --out FILE [--seed S]
 *                        [--layers N] [--shrink K] [overrides] [--threads N]
 *                        [--no-rope-freqs] [--dry-run] [--list]
 *
 * Shapes (llama architecture; Mixtral is llama + experts, as llama.cpp
 * writes it: ffn_gate_inp + stacked ffn_{gate,up,down}_exps):
 *   tiny          n_embd 256, 2 layers, 4 heads / 2 KV, n_ff 512, vocab 320
 *   tiny-moe      tiny with 4 experts, top-2 (n_ff 256 per expert)
 *   smollm2-135m  576, 30 layers, 9 / 3, n_ff 1536, vocab 49152, tied
 *                 embeddings, rope base 100000, ChatML (the default model)
 *   llama3-8b     4096, 32 layers, 32 / 8, n_ff 14336, vocab 128256, rope
 *                 base 500000 with Llama 3.1's rope_freqs.weight (factor 8),
 *                 Llama 3 tokenizer layout and chat template
 *   mixtral-moe   Mixtral 8x7B: 4096, 4 layers (32 in the real model), 32 / 8,
 *                 8 experts top-2 of n_ff 14336, vocab 32000, rope base 1e6
 *
 * Weights: 2-D matrices in TYPE, with llama.cpp's quantizer fallbacks (see
 * quantize.c): K-quants on rows not a multiple of 256 become Q5_0 / Q5_1 /
 * Q8_0, the MoE router stays F32; norms are F32 near 1.  Values are
 * zero-mean with standard deviation 1/sqrt(row length).  Quantized types
 * are written as random valid blocks (uniform random quants; finite, normal
 * fp16 scales from a per-tensor table of 32 levels between 0.8 and 1.2
 * times the scale that gives that deviation; the types whose levels are
 * not centred get an offset - Q4_1/Q5_1 m, K-quant dmin - that centres
 * them, the others a random sign on the block scale; Q8_0 never holds -128)
 * rather than by quantizing floats, so a multi-gigabyte model is limited by
 * the disk, not the CPU (about 0.25 CPU seconds per GB).
 *
 * Every row's values come from its own generator seeded by (seed, tensor
 * name, row), so the file is the same bytes for any thread count, and a
 * model with fewer layers holds the same first layers.  Rows are generated
 * in chunks of about 32 MiB by a thread pool while the previous chunk is
 * written (the GGUF writer's streaming path): memory stays at a few chunks.
 *
 * Tokenizer: a gpt2-style byte-level BPE vocabulary of the shape's size,
 * the same for every seed: the shape family's special tokens, the 256 byte
 * tokens, then merged tokens built from letters (words and " word" pieces)
 * with one merge each, so any text tokenizes (pre-tokenizer "smollm" with
 * ChatML, "llama-bpe" with Llama 3's specials at 128000.. and its template,
 * and for the Mixtral shapes <unk> <s> </s> [INST] [/INST] with a Mistral
 * template; the real Mixtral has a SentencePiece vocabulary).  llama.cpp
 * loads these files and computes the same logits (test_genmodel).
 *
 * --no-rope-freqs leaves llama3-8b's rope scaling tensor out (then it is
 * Llama 3.0's RoPE).
 *
 * This file holds the shapes, the tensor list and metadata, the chunked
 * generation and the command line; the row generators are in
 * genmodel_rows.c and the vocabulary in genmodel_vocab.c (genmodel.h).
 *
 * Exit status: 0 ok, 1 error, 2 usage.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "format/gguf.h"
#include "format/quantize.h"
#include "model/moe.h"
#include "quant/qtype.h"
#include "quant/quant_blocks.h"
#include "base/threadpool.h"
#include "cli/genmodel.h"

#define CHUNK_BYTES ((size_t) 32 << 20)

struct shape
{
	const char *name;
	const char *desc;
	int64_t		n_embd;
	int64_t		n_layer;
	int64_t		n_head;
	int64_t		n_head_kv;
	int64_t		n_ff;
	int64_t		n_vocab;
	int64_t		n_ctx;
	int64_t		n_expert;
	int64_t		n_expert_used;
	float		rope_base;
	float		norm_eps;
	bool		tied;			/* no output.weight */
	bool		rope_freqs;		/* Llama 3.1 rope scaling tensor */
	enum tok_flavor tok;
};

static const struct shape shapes[] = {
	{"tiny", "test model", 256, 2, 4, 2, 512, 320, 2048, 0, 0,
	10000.0f, 1e-5f, false, false, TOK_CHATML},
	/* a forward pass that costs next to nothing (set-based and protocol tests) */
	{"micro", "test model, smallest", 64, 1, 4, 2, 128, 320, 2048, 0, 0,
	10000.0f, 1e-5f, false, false, TOK_CHATML},
	{"tiny-moe", "test MoE model", 256, 2, 4, 2, 256, 320, 2048, 4, 2,
	10000.0f, 1e-5f, false, false, TOK_MISTRAL},
	{"smollm2-135m", "SmolLM2 135M shapes", 576, 30, 9, 3, 1536, 49152, 8192, 0, 0,
	100000.0f, 1e-5f, true, false, TOK_CHATML},
	{"llama3-8b", "Llama 3.1 8B shapes", 4096, 32, 32, 8, 14336, 128256, 131072, 0, 0,
	500000.0f, 1e-5f, false, true, TOK_LLAMA3},
	{"mixtral-moe", "Mixtral 8x7B shapes", 4096, 4, 32, 8, 14336, 32000, 32768, 8, 2,
	1000000.0f, 1e-5f, false, false, TOK_MISTRAL},
};

#define N_SHAPES (sizeof(shapes) / sizeof(shapes[0]))

static void
usage(FILE *f)
{
	fprintf(f,
			"usage: opus_engine genmodel --shape NAME --type TYPE --out FILE [options]\n"
			"\n"
			"Write a GGUF model with random weights and real model shapes.\n"
			"\n"
			"  --shape NAME      tiny, micro, tiny-moe, smollm2-135m, llama3-8b, mixtral-moe\n"
			"  --type TYPE       weight type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1\n"
			"                    q4_k q5_k q6_k (norms are f32; K-quants fall back to\n"
			"                    q5_0/q5_1/q8_0 on rows not a multiple of 256)\n"
			"  --out FILE        output path (written as FILE.tmp, then renamed)\n"
			"  --seed S          weight seed (default 1); same seed, same bytes\n"
			"  --layers N        number of layers (default: the shape's)\n"
			"  --shrink K        divide n_embd, n_ff and the vocabulary by K (head\n"
			"                    counts kept, so the head size shrinks): quick tests\n"
			"  --embd N --ff N --vocab N --heads N --kv-heads N --experts N\n"
			"  --experts-used N --ctx N   override one hyperparameter\n"
			"  --threads N       generator threads (default: all CPUs)\n"
			"  --no-rope-freqs   leave out llama3-8b's rope scaling tensor (rope_freqs.weight)\n"
			"  --dry-run         print the bytes of tensor data to stdout and exit\n"
			"  --list            list the shapes\n"
			"\n"
			"examples:\n"
			"  opus_engine genmodel --shape llama3-8b --type q4_k --out /tmp/l3.gguf\n"
			"  opus_engine genmodel --shape mixtral-moe --type q8_0 --out /tmp/mx.gguf\n"
			"  opus_engine genmodel --shape smollm2-135m --type q4_1 --out /tmp/s.gguf\n");
}

/* ---- metadata ---- */

static enum opus_status
add_f32(struct opus_gguf_writer *w, const char *key, float v, struct opus_error *err)
{
	return opus_gguf_writer_add_raw(w, key, OPUS_GGUF_FLOAT32, &v, 4, err);
}

static enum opus_status
add_bool(struct opus_gguf_writer *w, const char *key, bool v, struct opus_error *err)
{
	uint8_t		b = v ? 1 : 0;

	return opus_gguf_writer_add_raw(w, key, OPUS_GGUF_BOOL, &b, 1, err);
}

/* ---- tensors ---- */

struct model_spec
{
	struct shape sh;
	enum opus_qtype type;
	struct tensor_spec *t;
	size_t		n;
	size_t		cap;
};

static enum opus_status
add_spec(struct model_spec *m, const char *name, int n_dims, int64_t ne0, int64_t ne1,
		 int64_t ne2, enum opus_qtype type, enum tkind kind, float sigma,
		 struct opus_error *err)
{
	struct tensor_spec *t;

	if (m->n == m->cap)
	{
		size_t		ncap = m->cap ? m->cap * 2 : 64;
		struct tensor_spec *p = realloc(m->t, ncap * sizeof(*p));

		if (p == NULL)
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
		m->t = p;
		m->cap = ncap;
	}
	t = &m->t[m->n];
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->n_dims = n_dims;
	t->ne[0] = ne0;
	t->ne[1] = ne1;
	t->ne[2] = ne2;
	t->type = type;
	t->kind = kind;
	t->sigma = sigma;
	t->n_rows = ne1 * ne2;
	if (kind == KIND_MATRIX)
		fill_scale_table(t);
	if (!opus_qtype_row_size(type, ne0, &t->row_bytes))
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "tensor \"%s\": row of %lld does not fit type %s", name,
							  (long long) ne0, opus_qtype_info(type)->name);
	m->n++;
	return OPUS_OK;
}

#define MAT(name, n_in, n_out) \
	add_spec(m, name, 2, n_in, n_out, 1, opus_quantize_row_type(n_in, m->type), KIND_MATRIX, \
			 1.0f / sqrtf((float) (n_in)), err)

/* Every tensor of the model, in llama.cpp's order. */
static enum opus_status
build_specs(struct model_spec *m, struct opus_error *err)
{
	const struct shape *sh = &m->sh;
	int64_t		head_dim = sh->n_embd / sh->n_head;
	int64_t		q_dim = sh->n_embd;
	int64_t		kv_dim = head_dim * sh->n_head_kv;
	enum opus_status st;
	char		name[64];

#define TRY(x) do { if ((st = (x)) != OPUS_OK) return st; } while (0)
	TRY(MAT("token_embd.weight", sh->n_embd, sh->n_vocab));
	if (sh->rope_freqs)
		TRY(add_spec(m, "rope_freqs.weight", 1, head_dim / 2, 1, 1, OPUS_TYPE_F32,
					 KIND_ROPE_FREQS, sh->rope_base, err));
	TRY(add_spec(m, "output_norm.weight", 1, sh->n_embd, 1, 1, OPUS_TYPE_F32,
				 KIND_NORM, 0.0f, err));
	if (!sh->tied)
		TRY(MAT("output.weight", sh->n_embd, sh->n_vocab));
	for (int64_t il = 0; il < sh->n_layer; il++)
	{
#define TN(suffix) (snprintf(name, sizeof(name), "blk.%lld.%s", (long long) il, suffix), name)
		TRY(add_spec(m, TN("attn_norm.weight"), 1, sh->n_embd, 1, 1, OPUS_TYPE_F32,
					 KIND_NORM, 0.0f, err));
		TRY(MAT(TN("attn_q.weight"), sh->n_embd, q_dim));
		TRY(MAT(TN("attn_k.weight"), sh->n_embd, kv_dim));
		TRY(MAT(TN("attn_v.weight"), sh->n_embd, kv_dim));
		TRY(MAT(TN("attn_output.weight"), q_dim, sh->n_embd));
		TRY(add_spec(m, TN("ffn_norm.weight"), 1, sh->n_embd, 1, 1, OPUS_TYPE_F32,
					 KIND_NORM, 0.0f, err));
		if (sh->n_expert == 0)
		{
			TRY(MAT(TN("ffn_gate.weight"), sh->n_embd, sh->n_ff));
			TRY(MAT(TN("ffn_up.weight"), sh->n_embd, sh->n_ff));
			TRY(MAT(TN("ffn_down.weight"), sh->n_ff, sh->n_embd));
		}
		else
		{
			TRY(add_spec(m, TN("ffn_gate_inp.weight"), 2, sh->n_embd, sh->n_expert, 1,
						 OPUS_TYPE_F32, KIND_MATRIX, 1.0f / sqrtf((float) sh->n_embd), err));
			TRY(add_spec(m, TN("ffn_gate_exps.weight"), 3, sh->n_embd, sh->n_ff, sh->n_expert,
						 opus_quantize_row_type(sh->n_embd, m->type), KIND_MATRIX,
						 1.0f / sqrtf((float) sh->n_embd), err));
			TRY(add_spec(m, TN("ffn_down_exps.weight"), 3, sh->n_ff, sh->n_embd, sh->n_expert,
						 opus_quantize_row_type(sh->n_ff, m->type), KIND_MATRIX,
						 1.0f / sqrtf((float) sh->n_ff), err));
			TRY(add_spec(m, TN("ffn_up_exps.weight"), 3, sh->n_embd, sh->n_ff, sh->n_expert,
						 opus_quantize_row_type(sh->n_embd, m->type), KIND_MATRIX,
						 1.0f / sqrtf((float) sh->n_embd), err));
		}
#undef TN
	}
#undef TRY
	return OPUS_OK;
}

static enum opus_status
add_metadata(struct opus_gguf_writer *w, const struct model_spec *m, uint64_t seed,
			 const struct vocab *v, struct opus_error *err)
{
	const struct shape *sh = &m->sh;
	enum opus_status st;
	char		name[160];
	uint32_t	ftype = 0;

	(void) opus_quantize_target((int) m->type, &ftype);
	snprintf(name, sizeof(name), "opus genmodel %s %s seed %llu (random weights)",
			 sh->name, opus_qtype_info(m->type)->name, (unsigned long long) seed);
#define TRY(x) do { if ((st = (x)) != OPUS_OK) return st; } while (0)
#define U32(key, val) TRY(opus_gguf_writer_add_u32(w, key, (uint32_t) (val), err))
	TRY(opus_gguf_writer_add_str(w, "general.architecture", "llama", err));
	TRY(opus_gguf_writer_add_str(w, "general.type", "model", err));
	TRY(opus_gguf_writer_add_str(w, "general.name", name, err));
	U32("llama.block_count", sh->n_layer);
	U32("llama.context_length", sh->n_ctx);
	U32("llama.embedding_length", sh->n_embd);
	U32("llama.feed_forward_length", sh->n_ff);
	U32("llama.attention.head_count", sh->n_head);
	U32("llama.attention.head_count_kv", sh->n_head_kv);
	TRY(add_f32(w, "llama.rope.freq_base", sh->rope_base, err));
	TRY(add_f32(w, "llama.attention.layer_norm_rms_epsilon", sh->norm_eps, err));
	if (sh->n_expert > 0)
	{
		U32("llama.expert_count", sh->n_expert);
		U32("llama.expert_used_count", sh->n_expert_used);
	}
	U32("general.file_type", ftype);
	U32("llama.vocab_size", sh->n_vocab);
	U32("llama.rope.dimension_count", sh->n_embd / sh->n_head);
	TRY(opus_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", err));
	TRY(opus_gguf_writer_add_str(w, "tokenizer.ggml.pre", v->pre, err));
	TRY(opus_gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", v->tokens.s, v->tokens.n, err));
	TRY(opus_gguf_writer_add_i32_array(w, "tokenizer.ggml.token_type", v->types, v->tokens.n, err));
	TRY(opus_gguf_writer_add_str_array(w, "tokenizer.ggml.merges", v->merges.s, v->merges.n, err));
	U32("tokenizer.ggml.bos_token_id", v->bos);
	U32("tokenizer.ggml.eos_token_id", v->eos);
	if (v->unk >= 0)
		U32("tokenizer.ggml.unknown_token_id", v->unk);
	if (v->pad >= 0)
		U32("tokenizer.ggml.padding_token_id", v->pad);
	TRY(add_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos, err));
	TRY(add_bool(w, "tokenizer.ggml.add_space_prefix", false, err));
	TRY(opus_gguf_writer_add_str(w, "tokenizer.chat_template", v->chat_template, err));
	if (opus_qtype_info(m->type)->block_size > 1)
		U32("general.quantization_version", 2);
#undef U32
#undef TRY
	return OPUS_OK;
}

/* ---- generation: a thread pool fills a chunk while the previous is written ---- */

struct gen_job
{
	const struct tensor_spec *t;
	int64_t		row0;
	int64_t		n_rows;
	uint64_t	seed;
	uint8_t    *buf;
	atomic_int	failed;			/* a thread could not allocate its scratch row */
	struct opus_pool_counter next;
};

#define ROWS_PER_CLAIM 16

static void
gen_chunk(void *arg, int ith, int nth)
{
	struct gen_job *j = arg;
	float	   *scratch = NULL;

	(void) ith;
	(void) nth;
	if (j->t->type == OPUS_TYPE_F16 || j->t->type == OPUS_TYPE_BF16)
	{
		scratch = malloc(sizeof(float) * (size_t) j->t->ne[0]);
		if (scratch == NULL)
		{
			atomic_store(&j->failed, 1);
			return;
		}
	}
	for (;;)
	{
		int64_t		r0 = (int64_t) atomic_fetch_add(&j->next.next, 1) * ROWS_PER_CLAIM;

		if (r0 >= j->n_rows)
			break;
		for (int64_t r = r0; r < r0 + ROWS_PER_CLAIM && r < j->n_rows; r++)
			gen_row(j->t, j->row0 + r, j->seed, j->buf + (size_t) r * j->t->row_bytes,
					scratch);
	}
	free(scratch);
}

struct write_job
{
	struct opus_gguf_writer *w;
	const uint8_t *buf;
	size_t		n;
	enum opus_status st;
	struct opus_error err;
};

static void *
write_chunk(void *arg)
{
	struct write_job *j = arg;

	j->st = opus_gguf_writer_stream_data(j->w, j->buf, j->n, &j->err);
	return NULL;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static enum opus_status
generate(const struct model_spec *m, const char *out, uint64_t seed, int n_threads,
		 struct opus_gguf_writer *w, struct opus_error *err)
{
	struct opus_pool *pool = NULL;
	uint8_t    *buf[2] = {NULL, NULL};
	size_t		max_chunk = 0;
	struct write_job wj = {0};
	pthread_t	writer;
	bool		writing = false;
	int			cur = 0;
	enum opus_status st;

	for (size_t i = 0; i < m->n; i++)
	{
		size_t		c = m->t[i].row_bytes * (size_t) m->t[i].n_rows;
		size_t		rows = CHUNK_BYTES / m->t[i].row_bytes;

		if (rows < 1)
			rows = 1;
		if (c > rows * m->t[i].row_bytes)
			c = rows * m->t[i].row_bytes;
		if (c > max_chunk)
			max_chunk = c;
	}
	buf[0] = malloc(max_chunk);
	buf[1] = malloc(max_chunk);
	if (buf[0] == NULL || buf[1] == NULL)
	{
		st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for %zu-byte chunks", max_chunk);
		goto done;
	}
	if ((st = opus_pool_create(n_threads, &pool, err)) != OPUS_OK)
		goto done;
	if ((st = opus_gguf_writer_stream_begin(w, out, err)) != OPUS_OK)
		goto done;

	for (size_t i = 0; i < m->n; i++)
	{
		const struct tensor_spec *t = &m->t[i];
		int64_t		rows_per = (int64_t) (CHUNK_BYTES / t->row_bytes);

		if (rows_per < 1)
			rows_per = 1;
		for (int64_t r0 = 0; r0 < t->n_rows; r0 += rows_per)
		{
			struct gen_job gj = {0};
			int64_t		nr = t->n_rows - r0 < rows_per ? t->n_rows - r0 : rows_per;

			gj.t = t;
			gj.row0 = r0;
			gj.n_rows = nr;
			gj.seed = seed;
			gj.buf = buf[cur];
			atomic_init(&gj.next.next, 0);
			atomic_init(&gj.failed, 0);
			opus_pool_run(pool, gen_chunk, &gj);
			if (atomic_load(&gj.failed))
			{
				st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory generating \"%s\"",
									t->name);
				goto done;
			}
			/* the previous chunk must be written before its buffer is reused */
			if (writing)
			{
				pthread_join(writer, NULL);
				writing = false;
				if (wj.st != OPUS_OK)
				{
					*err = wj.err;
					st = wj.st;
					goto done;
				}
			}
			wj = (struct write_job)
			{
				.w = w,.buf = buf[cur],.n = (size_t) nr * t->row_bytes,
			};
			if (pthread_create(&writer, NULL, write_chunk, &wj) == 0)
				writing = true;
			else
				write_chunk(&wj);
			if (!writing && wj.st != OPUS_OK)
			{
				*err = wj.err;
				st = wj.st;
				goto done;
			}
			cur ^= 1;
		}
	}
	if (writing)
	{
		pthread_join(writer, NULL);
		writing = false;
		if (wj.st != OPUS_OK)
		{
			*err = wj.err;
			st = wj.st;
			goto done;
		}
	}
	st = opus_gguf_writer_stream_finish(w, err);
done:
	if (writing)
		pthread_join(writer, NULL);
	if (pool)
		opus_pool_free(pool);
	free(buf[0]);
	free(buf[1]);
	return st;
}

/* ---- command line ---- */

static enum opus_status
check_shape(const struct shape *sh, enum opus_qtype type, struct opus_error *err)
{
	int64_t		head_dim;

	if (sh->n_embd % sh->n_head != 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "n_embd %lld is not a multiple of the head count %lld",
							  (long long) sh->n_embd, (long long) sh->n_head);
	head_dim = sh->n_embd / sh->n_head;
	if (head_dim % 2 != 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "head size %lld is odd",
							  (long long) head_dim);
	if (sh->n_head % sh->n_head_kv != 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "head count %lld is not a multiple of the KV head count %lld",
							  (long long) sh->n_head, (long long) sh->n_head_kv);
	if (sh->n_expert > 0 && (sh->n_expert_used < 1 || sh->n_expert_used > sh->n_expert ||
							 sh->n_expert_used > OPUS_MOE_MAX_USED))
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "experts used %lld out of range 1..%lld",
							  (long long) sh->n_expert_used, (long long) sh->n_expert);
	/* F16 is the last fallback: rows must hold whole F16 elements at least */
	(void) type;
	return OPUS_OK;
}

static void
usage_stdout(void)
{
	usage(stdout);
}

static int
on_error(enum opus_cli_err e, const char *opt, const char *value)
{
	if (e == OPUS_CLI_ERR_BAD)
	{
		fprintf(stderr, "genmodel: bad value \"%s\" for %s\n", value, opt);
		return 2;
	}
	if (e == OPUS_CLI_ERR_MISSING)
		fprintf(stderr, "genmodel: %s needs a value\n", opt);
	else
		fprintf(stderr, "genmodel: unknown option \"%s\"\n", opt);
	usage(stderr);
	return 2;
}

int
opus_cli_genmodel(int argc, char **argv)
{
	const char *shape_name = NULL,
			   *type_name = NULL,
			   *out = NULL;
	int64_t		seed = 1,
				threads = 0,
				shrink = 1;
	int64_t		ov_layers = 0,
				ov_embd = 0,
				ov_ff = 0,
				ov_vocab = 0,
				ov_heads = 0,
				ov_kv = 0,
				ov_exp = -1,
				ov_used = 0,
				ov_ctx = 0;
	bool		dry = false,
				no_rope_freqs = false;
	struct model_spec m = {0};
	struct vocab v = {0};
	struct opus_gguf_writer *w = NULL;
	struct opus_error err = {0};
	enum opus_status st;
	int			qt;
	double		t0;
	unsigned long long total = 0,
				n_params = 0;
	int			rc = 1;
	bool		list = false;
	const long	big = 1L << 24;
	const struct opus_cli_opt opts[] = {
		{"--list", NULL, OPUS_CLI_STOP, &list, 0, 0, NULL},
		{"--dry-run", NULL, OPUS_CLI_FLAG, &dry, 0, 0, NULL},
		{"--no-rope-freqs", NULL, OPUS_CLI_FLAG, &no_rope_freqs, 0, 0, NULL},
		{"--shape", NULL, OPUS_CLI_STR, &shape_name, 0, 0, NULL},
		{"--type", NULL, OPUS_CLI_STR, &type_name, 0, 0, NULL},
		{"--out", NULL, OPUS_CLI_STR, &out, 0, 0, NULL},
		{"--seed", NULL, OPUS_CLI_I64, &seed, 0, INT64_MAX, NULL},
		{"--threads", NULL, OPUS_CLI_I64, &threads, 1, OPUS_MAX_THREADS, NULL},
		{"--shrink", NULL, OPUS_CLI_I64, &shrink, 1, big, NULL},
		{"--layers", NULL, OPUS_CLI_I64, &ov_layers, 1, big, NULL},
		{"--embd", NULL, OPUS_CLI_I64, &ov_embd, 1, big, NULL},
		{"--ff", NULL, OPUS_CLI_I64, &ov_ff, 1, big, NULL},
		{"--vocab", NULL, OPUS_CLI_I64, &ov_vocab, 1, big, NULL},
		{"--heads", NULL, OPUS_CLI_I64, &ov_heads, 1, big, NULL},
		{"--kv-heads", NULL, OPUS_CLI_I64, &ov_kv, 1, big, NULL},
		{"--experts", NULL, OPUS_CLI_I64, &ov_exp, 0, OPUS_MOE_MAX_EXPERTS, NULL},
		{"--experts-used", NULL, OPUS_CLI_I64, &ov_used, 1, OPUS_MOE_MAX_USED, NULL},
		{"--ctx", NULL, OPUS_CLI_I64, &ov_ctx, 1, big, NULL},
		OPUS_CLI_END
	};
	const struct opus_cli_spec spec = {
		.cmd = "genmodel",.opts = opts,.usage = usage_stdout,.on_error = on_error
	};

	if ((rc = opus_cli_parse_spec(&spec, argc, argv)) >= 0)
		return rc;
	rc = 1;
	if (list)
	{
		for (size_t s = 0; s < N_SHAPES; s++)
			printf("%-13s %-22s n_embd %lld, %lld layers, %lld/%lld heads, n_ff %lld, "
				   "vocab %lld%s\n", shapes[s].name, shapes[s].desc,
				   (long long) shapes[s].n_embd, (long long) shapes[s].n_layer,
				   (long long) shapes[s].n_head, (long long) shapes[s].n_head_kv,
				   (long long) shapes[s].n_ff, (long long) shapes[s].n_vocab,
				   shapes[s].n_expert ? ", experts" : "");
		return 0;
	}
	if (shape_name == NULL || type_name == NULL || (out == NULL && !dry))
	{
		fprintf(stderr, "genmodel: --shape, --type and --out are required\n");
		usage(stderr);
		return 2;
	}
	for (size_t s = 0; s < N_SHAPES; s++)
		if (strcmp(shapes[s].name, shape_name) == 0)
			m.sh = shapes[s];
	if (m.sh.name == NULL)
	{
		fprintf(stderr, "genmodel: unknown shape \"%s\" (opus_engine genmodel --list)\n",
				shape_name);
		return 2;
	}
	qt = opus_qtype_from_name(type_name);
	m.type = (enum opus_qtype) qt;
	if (qt < 0 || !opus_quantize_target(qt, NULL))
	{
		fprintf(stderr, "genmodel: unsupported type \"%s\"\n", type_name);
		return 2;
	}
	if (shrink > 1)
	{
		if (m.sh.n_embd % shrink || m.sh.n_ff % shrink)
		{
			fprintf(stderr, "genmodel: --shrink %lld does not divide n_embd %lld and n_ff %lld\n",
					(long long) shrink, (long long) m.sh.n_embd, (long long) m.sh.n_ff);
			return 2;
		}
		m.sh.n_embd /= shrink;
		m.sh.n_ff /= shrink;
		m.sh.n_vocab /= shrink;
	}
	if (ov_layers)
		m.sh.n_layer = ov_layers;
	if (ov_embd)
		m.sh.n_embd = ov_embd;
	if (ov_ff)
		m.sh.n_ff = ov_ff;
	if (ov_vocab)
		m.sh.n_vocab = ov_vocab;
	if (ov_heads)
		m.sh.n_head = ov_heads;
	if (ov_kv)
		m.sh.n_head_kv = ov_kv;
	if (ov_exp >= 0)
	{
		m.sh.n_expert = ov_exp;
		if (ov_exp > 0 && m.sh.n_expert_used == 0)
			m.sh.n_expert_used = ov_exp < 2 ? ov_exp : 2;
	}
	if (ov_used)
		m.sh.n_expert_used = ov_used;
	if (ov_ctx)
		m.sh.n_ctx = ov_ctx;
	if (no_rope_freqs)
		m.sh.rope_freqs = false;
	if (threads == 0)
	{
		long		n = sysconf(_SC_NPROCESSORS_ONLN);

		threads = n < 1 ? 1 : n > OPUS_MAX_THREADS ? OPUS_MAX_THREADS : n;
	}

	opus_qtype_init_cpu(false);
	t0 = now_s();
	if ((st = check_shape(&m.sh, m.type, &err)) != OPUS_OK ||
		(st = build_specs(&m, &err)) != OPUS_OK ||
		(st = build_vocab(m.sh.tok, m.sh.n_vocab, &v, &err)) != OPUS_OK)
		goto fail;
	w = opus_gguf_writer_new(0);
	if (w == NULL)
	{
		st = opus_error_set(&err, OPUS_ERR_NOMEM, "out of memory");
		goto fail;
	}
	if ((st = add_metadata(w, &m, (uint64_t) seed, &v, &err)) != OPUS_OK)
		goto fail;
	for (size_t i = 0; i < m.n; i++)
	{
		const struct tensor_spec *t = &m.t[i];
		int64_t		ne[3] = {t->ne[0], t->ne[1], t->ne[2]};

		if ((st = opus_gguf_writer_add_tensor_info(w, t->name, t->n_dims, ne, t->type,
												   &err)) != OPUS_OK)
			goto fail;
		total += (unsigned long long) ((t->row_bytes * (size_t) t->n_rows + 31) & ~(size_t) 31);
		n_params += (unsigned long long) (t->ne[0] * t->n_rows);
	}
	fprintf(stderr, "genmodel: %s (%s), %s: n_embd %lld, %lld layers, %lld/%lld heads, "
			"n_ff %lld, vocab %lld%s; %zu tensors, %.3f B params, %.2f GiB of tensor data\n",
			m.sh.name, m.sh.desc, opus_qtype_info(m.type)->name, (long long) m.sh.n_embd,
			(long long) m.sh.n_layer, (long long) m.sh.n_head, (long long) m.sh.n_head_kv,
			(long long) m.sh.n_ff, (long long) m.sh.n_vocab,
			m.sh.n_expert ? ", MoE" : "", m.n, (double) n_params * 1e-9,
			(double) total / (1024.0 * 1024.0 * 1024.0));
	if (dry)
	{
		printf("%llu\n", total);
		rc = 0;
		goto out;
	}
	/* fail at once, not after gigabytes, when the file cannot fit */
	{
		char		d[4096];
		const char *slash = strrchr(out, '/');
		struct statvfs vfs;
		unsigned long long need = total + 65536 + 128 * (unsigned long long) m.n;

		/* the header: mostly the vocabulary */
		for (size_t i = 0; i < v.tokens.n; i++)
			need += 12 + strlen(v.tokens.s[i]);
		for (size_t i = 0; i < v.merges.n; i++)
			need += 8 + strlen(v.merges.s[i]);

		if (slash == NULL)
			snprintf(d, sizeof(d), ".");
		else
			snprintf(d, sizeof(d), "%.*s", (int) (slash == out ? 1 : slash - out), out);
		if (statvfs(d, &vfs) == 0 &&
			(unsigned long long) vfs.f_bavail * vfs.f_frsize < need)
		{
			st = opus_error_set(&err, OPUS_ERR_IO,
								"\"%s\" needs %.2f GiB but only %.2f GiB are free there",
								out, (double) need / 1073741824.0,
								(double) vfs.f_bavail * vfs.f_frsize / 1073741824.0);
			goto fail;
		}
	}
	if ((st = generate(&m, out, (uint64_t) seed, (int) threads, w, &err)) != OPUS_OK)
		goto fail;
	fprintf(stderr, "genmodel: wrote %s in %.2f s (%lld threads)\n", out, now_s() - t0,
			(long long) threads);
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "genmodel: %s\n", err.msg);
	rc = 1;
out:
	opus_gguf_writer_free(w);
	vocab_free(&v);
	free(m.t);
	return rc;
}
