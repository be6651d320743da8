/*
 * test_genmodel.c - `opus_engine genmodel` (cli_genmodel.c) and the GGUF
 * writer's streaming path it uses.
 *
 *  - the tiny shape in every weight type: the engine loads it with the
 *    shape's hyperparameters, tensors have the requested type (norms F32),
 *    a weight matrix dequantizes (engine kernels) to mean ~0 and standard
 *    deviation ~1/sqrt(row length), and a forward pass gives finite,
 *    varied logits (and, for MoE shapes, tokens routed to more than top-k
 *    experts);
 *  - the named shapes scaled down (--shrink, --layers) and the Llama 3
 *    vocabulary at full size: hyperparameters, MoE routing keys, rope
 *    scaling tensor, tied embeddings, tokenizer special ids and an
 *    encode/decode round trip, the chat template family, a forward pass;
 *  - determinism: same seed, same bytes for 1 and 2 threads; another seed,
 *    other weights; fewer layers keep the same first layers;
 *  - usage errors exit 2, runtime errors exit 1 and leave no file;
 *  - streaming writer: the same bytes as the in-memory writer when data
 *    comes in odd-sized pieces mixed with tensors added with data; too much
 *    or too little data, additions after the start and freeing mid-stream
 *    are errors that leave no file;
 *  - when python3 has the gguf package: test/tools/genmodel_check.py reads
 *    the files with gguf.GGUFReader and checks them independently;
 *  - when llama-cpp-python is installed: llama.cpp loads the files of every
 *    shape, its logits after a few tokens match the engine's (correlation
 *    > 0.999, within 0.15 where their deviation is about 1, the engine's
 *    top token within 0.15 of llama.cpp's) and it tokenizes a text into the
 *    same ids.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text/chat.h"
#include "cli/cli.h"
#include "format/gguf.h"
#include "model/model.h"
#include "quant/qtype.h"
#include "text/tokenizer.h"
#include "unit.h"

static char dir[64];

static char *
path_in(const char *name)
{
	static char buf[64][160];
	static int	k;

	k = (k + 1) % 64;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

/* Run genmodel with a NULL-terminated argument list (after "genmodel"). */
static int
gen(const char *first,...)
{
	char	   *argv[40];
	int			argc = 0;
	va_list		ap;
	const char *a;

	argv[argc++] = (char *) "genmodel";
	va_start(ap, first);
	for (a = first; a != NULL && argc < 39; a = va_arg(ap, const char *))
		argv[argc++] = (char *) a;
	va_end(ap);
	argv[argc] = NULL;
	return opus_cli_genmodel(argc, argv);
}

static bool
file_exists(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0;
}

static uint8_t *
read_all(const char *p, size_t *n)
{
	FILE	   *f = fopen(p, "rb");
	uint8_t    *buf = NULL;
	long		len;

	*n = 0;
	if (f == NULL)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
	{
		buf = malloc((size_t) len + 1);
		if (buf && fread(buf, 1, (size_t) len, f) == (size_t) len)
			*n = (size_t) len;
		else
		{
			free(buf);
			buf = NULL;
		}
	}
	fclose(f);
	return buf;
}

static bool
same_file(const char *a, const char *b)
{
	size_t		na,
				nb;
	uint8_t    *pa = read_all(a, &na);
	uint8_t    *pb = read_all(b, &nb);
	bool		same = pa && pb && na == nb && memcmp(pa, pb, na) == 0;

	free(pa);
	free(pb);
	return same;
}

/* Bytes of one tensor's data in a file (malloc'd copy), or NULL. */
static uint8_t *
tensor_bytes(const char *path, const char *name, size_t *n)
{
	struct opus_gguf *g = NULL;
	const struct opus_gguf_tensor *t;
	uint8_t    *out = NULL;

	*n = 0;
	if (opus_gguf_open(path, &g, NULL) != OPUS_OK)
		return NULL;
	t = opus_gguf_find_tensor(g, name);
	if (t && (out = malloc(t->nbytes)) != NULL)
	{
		memcpy(out, t->data, t->nbytes);
		*n = t->nbytes;
	}
	opus_gguf_close(g);
	return out;
}

/*
 * Forward n tokens through a fresh context; checks finite logits with a
 * spread (not all equal) in every row.  Returns false on any failure.
 */
static bool
forward_ok(struct opus_model *m, const char *what)
{
	const struct opus_hparams *hp = opus_model_hparams(m);
	struct opus_ctx_params p = {
		.n_threads = 2,.block_size = 16,.n_blocks = 16,
		.max_batch_tokens = 16,.n_ctx = 128,
	};
	struct opus_ctx *c = NULL;
	struct opus_error err = {0};
	struct opus_seq s;
	enum
	{
		N = 6
	};
	int32_t		toks[N];
	float	   *logits = malloc(sizeof(float) * N * (size_t) hp->n_vocab);
	struct opus_batch_item it;
	bool		ok = true;
	uint32_t	x = 12345;

	if (logits == NULL || opus_ctx_create(m, &p, &c, &err) != OPUS_OK)
	{
		CHECK(false, "%s: context: %s", what, err.msg);
		free(logits);
		return false;
	}
	for (int i = 0; i < N; i++)
	{
		x = x * 1664525u + 1013904223u;
		toks[i] = (int32_t) ((x >> 8) % (uint32_t) hp->n_vocab);
	}
	opus_seq_init(&s);
	it = (struct opus_batch_item)
	{
		.seq = &s,.tokens = toks,.n_tokens = N,.logits = logits,.logits_all = true,
	};
	if (opus_forward(c, &it, 1, &err) != OPUS_OK)
	{
		CHECK(false, "%s: forward: %s", what, err.msg);
		ok = false;
	}
	for (int r = 0; ok && r < N; r++)
	{
		const float *l = logits + (size_t) r * hp->n_vocab;
		double		sum = 0,
					sq = 0;
		bool		finite = true;

		for (int i = 0; i < hp->n_vocab; i++)
		{
			finite &= isfinite(l[i]) != 0;
			sum += l[i];
			sq += (double) l[i] * l[i];
		}
		if (!finite)
		{
			CHECK(false, "%s: row %d has non-finite logits", what, r);
			ok = false;
			break;
		}
		sum /= hp->n_vocab;
		if (!(sq / hp->n_vocab - sum * sum > 0.01))
		{
			CHECK(false, "%s: row %d logits have no spread (var %g)", what, r,
				  sq / hp->n_vocab - sum * sum);
			ok = false;
		}
	}
	CHECK(ok, "%s: forward pass gives finite, varied logits", what);
	if (hp->n_expert > 0)
	{
		int32_t		nl,
					ne;
		const uint64_t *load = opus_ctx_expert_load(c, &nl, &ne);
		int			used = 0;

		for (int e = 0; load && e < ne; e++)
			used += load[e] > 0;
		CHECK(used > hp->n_expert_used, "%s: %d tokens routed to %d experts of layer 0",
			  what, N, used);
	}
	opus_seq_release(c, &s);
	opus_ctx_free(c);
	free(logits);
	return ok;
}

/* Mean and deviation of a weight matrix, dequantized by the engine. */
static void
matrix_stats(const char *path, const char *name, double *mean, double *sd,
			 enum opus_qtype *type)
{
	struct opus_gguf *g = NULL;
	const struct opus_gguf_tensor *t;
	const struct opus_qtype_info *qi;
	size_t		row;
	float	   *buf;
	double		s = 0,
				sq = 0;
	int64_t		n = 0;

	*mean = *sd = NAN;
	if (opus_gguf_open(path, &g, NULL) != OPUS_OK)
		return;
	t = opus_gguf_find_tensor(g, name);
	if (t == NULL)
	{
		opus_gguf_close(g);
		return;
	}
	*type = t->type;
	qi = opus_qtype_info(t->type);
	opus_qtype_row_size(t->type, t->ne[0], &row);
	buf = malloc(sizeof(float) * (size_t) t->ne[0]);
	for (int64_t r = 0; buf && r < t->ne[1] * t->ne[2]; r++)
	{
		qi->to_float_ref((const uint8_t *) t->data + (size_t) r * row, buf, t->ne[0]);
		for (int64_t i = 0; i < t->ne[0]; i++)
		{
			s += buf[i];
			sq += (double) buf[i] * buf[i];
			n++;
		}
	}
	free(buf);
	opus_gguf_close(g);
	if (n > 0)
	{
		*mean = s / (double) n;
		*sd = sqrt(sq / (double) n - *mean * *mean);
	}
}

/* ---- every type, tiny shape ---- */

static void
test_types(void)
{
	static const char *const types[] = {
		"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"
	};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
	{
		char		name[32];
		const char *out;
		struct opus_model *m = NULL;
		struct opus_error err = {0};
		int			want = opus_qtype_from_name(types[i]);

		snprintf(name, sizeof(name), "tiny-%s.gguf", types[i]);
		out = path_in(name);
		CHECK(gen("--shape", "tiny", "--type", types[i], "--out", out, "--threads", "2",
				  NULL) == 0, "genmodel tiny %s", types[i]);
		if (opus_model_load(out, NULL, &m, &err) != OPUS_OK)
		{
			CHECK(false, "load tiny %s: %s", types[i], err.msg);
			continue;
		}
		{
			const struct opus_hparams *hp = opus_model_hparams(m);

			CHECK(hp->arch == OPUS_ARCH_LLAMA && hp->n_embd == 256 && hp->n_layer == 2 &&
				  hp->n_head == 4 && hp->n_head_kv == 2 && hp->n_ff == 512 &&
				  hp->n_vocab == 320 && hp->head_dim == 64 && hp->n_expert == 0 &&
				  !hp->tied_embeddings,
				  "tiny %s hyperparameters (n_embd %d, layers %d, heads %d/%d, n_ff %d, vocab %d)",
				  types[i], hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->n_ff,
				  hp->n_vocab);
			CHECK((int) hp->main_type == want, "tiny %s: main type %d", types[i],
				  (int) hp->main_type);
		}
		forward_ok(m, name);
		opus_model_free(m);

		{
			struct opus_gguf *g = NULL;

			if (opus_gguf_open(out, &g, &err) == OPUS_OK)
			{
				const char *const mats[] = {"token_embd.weight", "output.weight",
					"blk.1.attn_q.weight", "blk.1.attn_k.weight", "blk.0.ffn_down.weight"};
				const char *const vecs[] = {"output_norm.weight", "blk.0.attn_norm.weight",
				"blk.1.ffn_norm.weight"};

				for (size_t k = 0; k < 5; k++)
				{
					const struct opus_gguf_tensor *t = opus_gguf_find_tensor(g, mats[k]);

					CHECK(t && (int) t->type == want, "tiny %s: %s type", types[i], mats[k]);
				}
				for (size_t k = 0; k < 3; k++)
				{
					const struct opus_gguf_tensor *t = opus_gguf_find_tensor(g, vecs[k]);
					float		v = 0;

					if (t)
						memcpy(&v, (const uint8_t *) t->data + 4 * 7, 4);
					CHECK(t && t->type == OPUS_TYPE_F32 && v >= 0.95f && v <= 1.05f,
						  "tiny %s: %s F32 near 1", types[i], vecs[k]);
				}
				opus_gguf_close(g);
			}
			else
				CHECK(false, "reopen %s: %s", out, err.msg);
		}
		{
			double		mean,
						sd;
			enum opus_qtype t = OPUS_TYPE_F32;
			const double sigma = 1.0 / sqrt(512.0);

			matrix_stats(out, "blk.0.ffn_down.weight", &mean, &sd, &t);
			CHECK(fabs(mean) < 0.05 * sigma && sd > 0.9 * sigma && sd < 1.1 * sigma,
				  "tiny %s: ffn_down mean %g sd %g, expected 0 and %g", types[i], mean, sd,
				  sigma);
		}
	}
}

/* ---- named shapes, scaled down ---- */

struct expect
{
	const char *shape;
	const char *type;
	const char *shrink;
	const char *layers;
	int			n_embd,
				n_layer,
				n_head,
				n_head_kv,
				n_ff,
				n_vocab,
				n_expert,
				n_used;
	float		rope_base;
	bool		rope_freqs,
				tied;
	int32_t		bos,
				eos;
	enum opus_chat_template chat;
};

static void
test_shapes(void)
{
	static const struct expect ex[] = {
		{"smollm2-135m", "q8_0", "4", "1", 144, 1, 9, 3, 384, 12288, 0, 0, 100000.0f,
		false, true, 1, 2, OPUS_CHAT_CHATML},
		{"llama3-8b", "q4_k", "16", "2", 256, 2, 32, 8, 896, 8016, 0, 0, 500000.0f,
		true, false, 8016 - 256, 8016 - 256 + 9, OPUS_CHAT_LLAMA3},
		{"mixtral-moe", "q4_k", "16", "1", 256, 1, 32, 8, 896, 2000, 8, 2, 1000000.0f,
		false, false, 1, 2, OPUS_CHAT__COUNT},
		{"tiny-moe", "q6_k", "1", "2", 256, 2, 4, 2, 256, 320, 4, 2, 10000.0f,
		false, false, 1, 2, OPUS_CHAT__COUNT},
		{"micro", "q8_0", "1", "1", 64, 1, 4, 2, 128, 320, 0, 0, 10000.0f,
		false, false, 1, 2, OPUS_CHAT_CHATML},
	};

	for (size_t i = 0; i < sizeof(ex) / sizeof(ex[0]); i++)
	{
		const struct expect *e = &ex[i];
		char		name[64];
		const char *out;
		struct opus_model *m = NULL;
		struct opus_error err = {0};

		snprintf(name, sizeof(name), "%s.gguf", e->shape);
		out = path_in(name);
		CHECK(gen("--shape", e->shape, "--type", e->type, "--out", out, "--shrink", e->shrink,
				  "--layers", e->layers, "--seed", "3", NULL) == 0, "genmodel %s", e->shape);
		if (opus_model_load(out, NULL, &m, &err) != OPUS_OK)
		{
			CHECK(false, "load %s: %s", e->shape, err.msg);
			continue;
		}
		{
			const struct opus_hparams *hp = opus_model_hparams(m);
			const struct opus_tokenizer *tok = opus_model_tokenizer(m);
			size_t		tl = 0;
			const char *tmpl = opus_model_chat_template(m, &tl);
			enum opus_chat_template ct = opus_chat_detect(tmpl, tl);
			static const char text[] = "Hello world, the 42 quick brown foxes!";
			int32_t		ids[128];
			int64_t		n_ids = 0;
			char	   *back = NULL;
			size_t		back_len = 0;

			CHECK(hp->n_embd == e->n_embd && hp->n_layer == e->n_layer &&
				  hp->n_head == e->n_head && hp->n_head_kv == e->n_head_kv &&
				  hp->n_ff == e->n_ff && hp->n_vocab == e->n_vocab &&
				  hp->n_expert == e->n_expert && hp->n_expert_used == e->n_used,
				  "%s hyperparameters: n_embd %d, layers %d, heads %d/%d, n_ff %d, vocab %d, "
				  "experts %d/%d", e->shape, hp->n_embd, hp->n_layer, hp->n_head,
				  hp->n_head_kv, hp->n_ff, hp->n_vocab, hp->n_expert, hp->n_expert_used);
			CHECK(hp->rope_freq_base == e->rope_base && hp->has_rope_freqs == e->rope_freqs &&
				  hp->tied_embeddings == e->tied,
				  "%s rope base %g, rope_freqs %d, tied %d", e->shape, hp->rope_freq_base,
				  hp->has_rope_freqs, hp->tied_embeddings);
			CHECK(opus_tokenizer_n_vocab(tok) == e->n_vocab && opus_tokenizer_bos(tok) == e->bos &&
				  opus_tokenizer_eos(tok) == e->eos,
				  "%s tokenizer: %d tokens, bos %d, eos %d", e->shape,
				  opus_tokenizer_n_vocab(tok), opus_tokenizer_bos(tok), opus_tokenizer_eos(tok));
			CHECK(opus_tokenizer_encode(tok, text, strlen(text), false, false, ids, 128, &n_ids,
										&err) == OPUS_OK && n_ids > 0 && n_ids < (int64_t) strlen(text),
				  "%s: encode (%lld tokens for %zu bytes): %s", e->shape, (long long) n_ids,
				  strlen(text), err.msg);
			CHECK(opus_tokenizer_decode(tok, ids, n_ids, false, &back, &back_len, &err) == OPUS_OK &&
				  back_len == strlen(text) && memcmp(back, text, back_len) == 0,
				  "%s: decode round trip", e->shape);
			free(back);
			if (e->chat != OPUS_CHAT__COUNT)
				CHECK(ct == e->chat, "%s chat template detected as %s", e->shape,
					  opus_chat_name(ct));
			else
				CHECK(tmpl != NULL && ct != OPUS_CHAT_UNKNOWN && ct != OPUS_CHAT_CHATML &&
					  ct != OPUS_CHAT_LLAMA3, "%s chat template: an [INST] family (%s)",
					  e->shape, opus_chat_name(ct));
		}
		forward_ok(m, e->shape);
		opus_model_free(m);
	}

	/* --no-rope-freqs: Llama 3 without its rope scaling tensor */
	{
		const char *out = path_in("llama3-norope.gguf");
		struct opus_model *m = NULL;
		struct opus_error err = {0};

		CHECK(gen("--shape", "llama3-8b", "--type", "q8_0", "--out", out, "--shrink", "16",
				  "--layers", "1", "--no-rope-freqs", NULL) == 0, "genmodel --no-rope-freqs");
		CHECK(opus_model_load(out, NULL, &m, &err) == OPUS_OK &&
			  !opus_model_hparams(m)->has_rope_freqs &&
			  opus_model_hparams(m)->rope_freq_base == 500000.0f,
			  "--no-rope-freqs: loads without rope_freqs: %s", err.msg);
		opus_model_free(m);
	}

	/* Llama 3's full vocabulary (128256, specials from 128000) on tiny widths */
	{
		const char *out = path_in("llama3-vocab.gguf");
		struct opus_model *m = NULL;
		struct opus_error err = {0};

		CHECK(gen("--shape", "llama3-8b", "--type", "q8_0", "--out", out, "--embd", "64",
				  "--heads", "2", "--kv-heads", "1", "--ff", "128", "--layers", "1", NULL) == 0,
			  "genmodel llama3-8b full vocabulary");
		if (opus_model_load(out, NULL, &m, &err) == OPUS_OK)
		{
			const struct opus_tokenizer *tok = opus_model_tokenizer(m);
			int32_t		ids[8];
			int64_t		n_ids = 0;

			CHECK(opus_model_hparams(m)->n_vocab == 128256 &&
				  opus_tokenizer_n_vocab(tok) == 128256 && opus_tokenizer_bos(tok) == 128000 &&
				  opus_tokenizer_eos(tok) == 128009 && opus_tokenizer_is_eog(tok, 128009),
				  "llama3 vocabulary: 128256 tokens, bos 128000, eos 128009");
			CHECK(opus_tokenizer_encode(tok, "<|start_header_id|>", 19, true, true, ids, 8,
										&n_ids, &err) == OPUS_OK && n_ids == 2 &&
				  ids[0] == 128000 && ids[1] == 128006,
				  "llama3: BOS added and <|start_header_id|> is one special token");
			forward_ok(m, "llama3 full vocabulary");
			opus_model_free(m);
		}
		else
			CHECK(false, "load llama3 full vocabulary: %s", err.msg);
	}
}

/* ---- determinism ---- */

static void
test_determinism(void)
{
	const char *a = path_in("det-a.gguf"),
			   *b = path_in("det-b.gguf"),
			   *c = path_in("det-c.gguf"),
			   *d = path_in("det-d.gguf");
	size_t		na,
				nc,
				nd;
	uint8_t    *ta,
			   *tc,
			   *td;

	CHECK(gen("--shape", "tiny-moe", "--type", "q4_k", "--out", a, "--seed", "7",
			  "--threads", "1", NULL) == 0, "det a");
	CHECK(gen("--shape", "tiny-moe", "--type", "q4_k", "--out", b, "--seed", "7",
			  "--threads", "3", NULL) == 0, "det b");
	CHECK(gen("--shape", "tiny-moe", "--type", "q4_k", "--out", c, "--seed", "8", NULL) == 0,
		  "det c");
	CHECK(gen("--shape", "tiny-moe", "--type", "q4_k", "--out", d, "--seed", "7",
			  "--layers", "1", NULL) == 0, "det d");
	CHECK(same_file(a, b), "same seed, 1 and 3 threads: identical bytes");
	CHECK(!same_file(a, c), "another seed: another file");
	ta = tensor_bytes(a, "blk.0.ffn_up_exps.weight", &na);
	tc = tensor_bytes(c, "blk.0.ffn_up_exps.weight", &nc);
	td = tensor_bytes(d, "blk.0.ffn_up_exps.weight", &nd);
	CHECK(ta && tc && na == nc && memcmp(ta, tc, na) != 0, "another seed: other weights");
	CHECK(ta && td && na == nd && memcmp(ta, td, na) == 0,
		  "--layers 1 keeps layer 0's weights");
	free(ta);
	free(tc);
	free(td);
}

/* ---- command-line errors ---- */

static void
test_errors(void)
{
	const char *out = path_in("err.gguf");
	char		tmp[200];

	CHECK(gen(NULL) == 2, "no arguments: usage");
	CHECK(gen("--shape", "tiny", "--type", "q4_k", NULL) == 2, "no --out: usage");
	CHECK(gen("--shape", "nope", "--type", "q4_k", "--out", out, NULL) == 2, "unknown shape");
	CHECK(gen("--shape", "tiny", "--type", "q2_k", "--out", out, NULL) == 2,
		  "unsupported type");
	CHECK(gen("--shape", "tiny", "--type", "q4_k", "--out", out, "--layers", "0", NULL) == 2,
		  "--layers 0");
	CHECK(gen("--shape", "tiny", "--type", "q4_k", "--out", out, "--shrink", "7", NULL) == 2,
		  "--shrink that does not divide");
	CHECK(gen("--shape", "tiny", "--type", "q4_k", "--out", out, "--bogus", "1", NULL) == 2,
		  "unknown option");
	CHECK(gen("--shape", "tiny", "--type", "q4_k", "--out", out, "--heads", "3", NULL) == 1,
		  "heads not dividing n_embd");
	CHECK(gen("--shape", "tiny", "--type", "q4_k", "--out", out, "--vocab", "100", NULL) == 1,
		  "vocabulary too small");
	CHECK(!file_exists(out), "no file after errors");
	CHECK(gen("--shape", "tiny", "--type", "q4_k", "--out", "/nonexistent-dir/x.gguf",
			  NULL) == 1, "unwritable path: runtime error");
	CHECK(gen("--shape", "tiny", "--type", "q4_k", "--dry-run", NULL) == 0, "dry run");
	snprintf(tmp, sizeof(tmp), "%s.tmp", out);
	CHECK(!file_exists(tmp), "no temporary file left");
}

/* ---- the streaming writer ---- */

static struct opus_gguf_writer *
stream_writer(bool deferred, float *a, float *b, float *c)
{
	struct opus_gguf_writer *w = opus_gguf_writer_new(64);
	int64_t		ne_a[2] = {32, 3},
				ne_b[1] = {5},
				ne_c[2] = {64, 2};
	struct opus_error err = {0};
	bool		ok;

	ok = opus_gguf_writer_add_u32(w, "x.count", 3, &err) == OPUS_OK &&
		opus_gguf_writer_add_str(w, "x.name", "stream", &err) == OPUS_OK;
	if (deferred)
		ok = ok && opus_gguf_writer_add_tensor_info(w, "a", 2, ne_a, OPUS_TYPE_F32, &err) == OPUS_OK &&
			opus_gguf_writer_add_tensor(w, "b", 1, ne_b, OPUS_TYPE_F32, b, 20, &err) == OPUS_OK &&
			opus_gguf_writer_add_tensor(w, "b2", 1, ne_b, OPUS_TYPE_F32, b, 20, &err) == OPUS_OK &&
			opus_gguf_writer_add_tensor_info(w, "c", 2, ne_c, OPUS_TYPE_F32, &err) == OPUS_OK;
	else
		ok = ok && opus_gguf_writer_add_tensor(w, "a", 2, ne_a, OPUS_TYPE_F32, a, 384, &err) == OPUS_OK &&
			opus_gguf_writer_add_tensor(w, "b", 1, ne_b, OPUS_TYPE_F32, b, 20, &err) == OPUS_OK &&
			opus_gguf_writer_add_tensor(w, "b2", 1, ne_b, OPUS_TYPE_F32, b, 20, &err) == OPUS_OK &&
			opus_gguf_writer_add_tensor(w, "c", 2, ne_c, OPUS_TYPE_F32, c, 512, &err) == OPUS_OK;
	CHECK(ok, "stream writer setup: %s", err.msg);
	return w;
}

/* Stream a then c in pieces of `piece` bytes. */
static enum opus_status
stream_pieces(struct opus_gguf_writer *w, const uint8_t *data, size_t n, size_t piece,
			  struct opus_error *err)
{
	enum opus_status st = OPUS_OK;

	for (size_t off = 0; off < n && st == OPUS_OK; off += piece)
		st = opus_gguf_writer_stream_data(w, data + off, n - off < piece ? n - off : piece, err);
	return st;
}

static void
test_stream_writer(void)
{
	float		a[96],
				b[5],
				c[128];
	uint8_t		ac[384 + 512];
	const char *ref = path_in("ref.gguf"),
			   *str = path_in("str.gguf"),
			   *bad = path_in("bad.gguf");
	char		badtmp[200];
	struct opus_gguf_writer *w;
	struct opus_error err = {0};
	int64_t		ne[1] = {4};
	float		four[4] = {0};

	for (int i = 0; i < 96; i++)
		a[i] = (float) i * 0.5f;
	for (int i = 0; i < 5; i++)
		b[i] = (float) -i;
	for (int i = 0; i < 128; i++)
		c[i] = (float) i * 0.25f + 1.0f;
	memcpy(ac, a, 384);
	memcpy(ac + 384, c, 512);
	snprintf(badtmp, sizeof(badtmp), "%s.tmp", bad);

	w = stream_writer(false, a, b, c);
	CHECK(opus_gguf_writer_write(w, ref, &err) == OPUS_OK, "reference write: %s", err.msg);
	opus_gguf_writer_free(w);

	w = stream_writer(true, a, b, c);
	CHECK(opus_gguf_writer_write(w, bad, &err) == OPUS_ERR_INVALID_ARG,
		  "in-memory write refuses declared-only tensors");
	CHECK(opus_gguf_writer_stream_data(w, ac, 4, &err) == OPUS_ERR_INVALID_ARG,
		  "data before the stream began");
	CHECK(opus_gguf_writer_stream_begin(w, str, &err) == OPUS_OK, "stream begin: %s", err.msg);
	CHECK(opus_gguf_writer_add_u32(w, "x.late", 1, &err) == OPUS_ERR_INVALID_ARG,
		  "no keys after the start");
	CHECK(opus_gguf_writer_add_tensor(w, "late", 1, ne, OPUS_TYPE_F32, four, 16, &err) ==
		  OPUS_ERR_INVALID_ARG, "no tensors after the start");
	CHECK(stream_pieces(w, ac, sizeof(ac), 7, &err) == OPUS_OK, "stream data: %s", err.msg);
	CHECK(opus_gguf_writer_stream_data(w, ac, 1, &err) == OPUS_ERR_INVALID_ARG,
		  "a byte beyond the last tensor");
	CHECK(opus_gguf_writer_stream_finish(w, &err) == OPUS_OK, "stream finish: %s", err.msg);
	opus_gguf_writer_free(w);
	CHECK(same_file(ref, str), "streamed file equals the in-memory writer's");

	/* too little data: finish fails, nothing left behind */
	w = stream_writer(true, a, b, c);
	CHECK(opus_gguf_writer_stream_begin(w, bad, &err) == OPUS_OK, "begin 2");
	CHECK(stream_pieces(w, ac, 384 + 100, 50, &err) == OPUS_OK, "partial data");
	CHECK(opus_gguf_writer_stream_finish(w, &err) == OPUS_ERR_INVALID_ARG &&
		  strstr(err.msg, "\"c\"") != NULL, "finish with missing data names the tensor: %s",
		  err.msg);
	opus_gguf_writer_free(w);
	CHECK(!file_exists(bad) && !file_exists(badtmp), "no file after a short stream");

	/* freed mid-stream: the temporary file is removed */
	w = stream_writer(true, a, b, c);
	CHECK(opus_gguf_writer_stream_begin(w, bad, &err) == OPUS_OK, "begin 3");
	CHECK(file_exists(badtmp), "temporary file while streaming");
	opus_gguf_writer_free(w);
	CHECK(!file_exists(bad) && !file_exists(badtmp), "no file after freeing mid-stream");
}

/* ---- independent check with the python gguf package ---- */

static void
test_python(void)
{
	char		cmd[4096];
	int			rc;
	const char *script = "test/tools/genmodel_check.py";

	if (!file_exists(script) ||
		system("python3 -c 'import gguf, numpy' >/dev/null 2>&1") != 0)
	{
		printf("skip: python3 with gguf (or %s from the repository root) not available\n",
			   script);
		return;
	}
	snprintf(cmd, sizeof(cmd), "python3 %s %s %s %s %s %s %s %s %s %s", script,
			 path_in("tiny-q4_k.gguf"), path_in("tiny-q5_k.gguf"), path_in("tiny-q6_k.gguf"),
			 path_in("tiny-q4_0.gguf"), path_in("tiny-q5_1.gguf"), path_in("tiny-bf16.gguf"),
			 path_in("tiny-moe.gguf"), path_in("llama3-8b.gguf"), path_in("smollm2-135m.gguf"));
	rc = system(cmd);
	CHECK(rc == 0, "gguf.GGUFReader check of the generated files (exit %d)", rc);
}

/* Read a whole binary file of n_elem-byte elements; *n = count. */
static void *
read_elems(const char *p, size_t elem, size_t *n)
{
	size_t		bytes;
	void	   *d = read_all(p, &bytes);

	*n = d ? bytes / elem : 0;
	return d;
}

static void
test_llama_cpp(void)
{
	static const char *const files[] = {
		"tiny-q8_0.gguf", "tiny-f16.gguf", "tiny-moe.gguf", "llama3-8b.gguf", "mixtral-moe.gguf",
		"smollm2-135m.gguf", "llama3-vocab.gguf"
	};
	static const int32_t ids[] = {5, 17, 100, 250, 31, 7, 64, 200};
	static const char text[] = "Hello world, the quick brown fox jumps over 42 lazy dogs!";
	const char *script = "test/tools/genmodel_check.py";
	char		cmd[2048];
	int			rc;

	if (!file_exists(script) ||
		system("python3 -c 'import llama_cpp, numpy' >/dev/null 2>&1") != 0)
	{
		printf("skip: llama-cpp-python not available\n");
		return;
	}
	{
		size_t		len = (size_t) snprintf(cmd, sizeof(cmd),
										"python3 %s --llama-cpp '5 17 100 250 31 7 64 200' '%s'",
										script, text);

		for (size_t f = 0; f < sizeof(files) / sizeof(files[0]) && len < sizeof(cmd); f++)
			len += (size_t) snprintf(cmd + len, sizeof(cmd) - len, " %s", path_in(files[f]));
		rc = system(cmd);
		CHECK(rc == 0, "llama.cpp on the generated files (exit %d)", rc);
	}
	for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++)
	{
		const char *model = path_in(files[f]);
		char		lpath[200],
					tpath[200];
		float	   *ref;
		int32_t    *ref_tok;
		size_t		n_ref,
					n_ref_tok;
		struct opus_model *m = NULL;
		struct opus_error err = {0};

		snprintf(lpath, sizeof(lpath), "%s.logits", model);
		snprintf(tpath, sizeof(tpath), "%s.tokens", model);
		ref = read_elems(lpath, sizeof(float), &n_ref);
		ref_tok = read_elems(tpath, sizeof(int32_t), &n_ref_tok);
		if (rc == 0 && ref && ref_tok && opus_model_load(model, NULL, &m, &err) == OPUS_OK)
		{
			const struct opus_hparams *hp = opus_model_hparams(m);
			struct opus_ctx_params p = {
				.n_threads = 2,.block_size = 16,.n_blocks = 8,
				.max_batch_tokens = 16,.n_ctx = 64,
			};
			struct opus_ctx *c = NULL;
			float	   *ours = malloc(sizeof(float) * (size_t) hp->n_vocab);
			int32_t		toks[128];
			int64_t		n_toks = 0;

			CHECK(n_ref == (size_t) hp->n_vocab, "%s: llama.cpp gives %zu logits", files[f], n_ref);
			if (ours && n_ref == (size_t) hp->n_vocab &&
				opus_ctx_create(m, &p, &c, &err) == OPUS_OK)
			{
				struct opus_seq s;
				struct opus_batch_item it;
				double		maxd = 0,
							sxy = 0,
							sxx = 0,
							syy = 0,
							mx = 0,
							my = 0,
							corr;
				int			am_ref = 0,
							am_ours = 0;

				opus_seq_init(&s);
				it = (struct opus_batch_item)
				{
					.seq = &s,.tokens = ids,.n_tokens = 8,.logits = ours,
				};
				CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "%s: forward: %s", files[f],
					  err.msg);
				for (int i = 0; i < hp->n_vocab; i++)
				{
					mx += ours[i];
					my += ref[i];
				}
				mx /= hp->n_vocab;
				my /= hp->n_vocab;
				for (int i = 0; i < hp->n_vocab; i++)
				{
					double		d = fabs((double) ours[i] - ref[i]);

					maxd = d > maxd || isnan(d) ? d : maxd;
					sxy += (ours[i] - mx) * (ref[i] - my);
					sxx += (ours[i] - mx) * (ours[i] - mx);
					syy += (ref[i] - my) * (ref[i] - my);
					am_ref = ref[i] > ref[am_ref] ? i : am_ref;
					am_ours = ours[i] > ours[am_ours] ? i : am_ours;
				}
				corr = sxy / sqrt(sxx * syy);

				/*
				 * 8-bit activation roundings that flip between implementations
				 * make quantized logits differ by a few hundredths (see
				 * test/golden/logits/README); a layout error would not
				 * correlate at all
				 */
				CHECK(maxd < 0.15 && corr > 0.999 && ref[am_ours] >= ref[am_ref] - 0.15,
					  "%s: logits match llama.cpp's (max diff %g, correlation %.6f, argmax %d vs %d)",
					  files[f], maxd, corr, am_ours, am_ref);
				printf("%-18s vs llama.cpp: max diff %.3g, correlation %.7f\n", files[f], maxd,
					   corr);
				opus_seq_release(c, &s);
				opus_ctx_free(c);
			}
			CHECK(opus_tokenizer_encode(opus_model_tokenizer(m), text, strlen(text), true, false,
										toks, 128, &n_toks, &err) == OPUS_OK &&
				  (size_t) n_toks == n_ref_tok &&
				  memcmp(toks, ref_tok, sizeof(int32_t) * n_ref_tok) == 0,
				  "%s: tokenization matches llama.cpp's (%lld vs %zu tokens)", files[f],
				  (long long) n_toks, n_ref_tok);
			free(ours);
		}
		else if (rc == 0)
			CHECK(false, "%s: reference files or load: %s", files[f], err.msg);
		opus_model_free(m);
		free(ref);
		free(ref_tok);
	}
}

int
main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/opus_genmodel_XXXXXX");
	if (mkdtemp(dir) == NULL)
	{
		perror("mkdtemp");
		return 1;
	}
	test_stream_writer();
	test_errors();
	test_types();
	test_shapes();
	test_determinism();
	test_python();
	test_llama_cpp();

	{
		char		cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", dir);
	}
	return UNIT_DONE();
}
