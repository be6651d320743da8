/*
 * test_forward.c - the forward pass and the KV block pool.
 *
 * Without a model: unsupported architecture / tensor type and malformed
 * shapes are clear errors (synthetic GGUF files written with the engine's
 * GGUF writer).  With $OPUS_MODEL (the default SmolLM2 Q4_1):
 *  - logits are bit-identical for 1 and 2 threads;
 *  - a sequence run alone and batched with two others of different lengths
 *    gives bit-identical logits, for prefill and for decode steps;
 *  - a prompt prefilled in one chunk, in uneven chunks and token by token,
 *    and with KV blocks of 5, 16 or 40 positions, gives bit-identical logits
 *    (every output element is one dot product over the whole row whatever
 *    the batch, so the tolerance is zero);
 *  - KV block accounting: blocks used per block_size positions, returned on
 *    release and truncate, capacity and context errors leave the sequence
 *    unchanged, a shared block is copied before it is written;
 *  - greedy continuation of "The capital of France is" contains "Paris".
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "model/model.h"
#include "text/tokenizer.h"
#include "unit.h"
#include "unit_forward.h"

static struct opus_model *model;
static int	n_vocab;

/* prompt tokens: a fixed pseudo-random sequence */
static void
make_tokens(int32_t *t, int n, uint32_t seed)
{
	for (int i = 0; i < n; i++)
	{
		seed = seed * 1664525u + 1013904223u;
		t[i] = (int32_t) ((seed >> 8) % (uint32_t) n_vocab);
	}
}

static struct opus_ctx *
make_ctx(int threads, int64_t n_blocks, int max_batch, int n_ctx)
{
	struct opus_ctx_params p = {
		.n_threads = threads,.block_size = 16,.n_blocks = n_blocks,
		.max_batch_tokens = max_batch,.n_ctx = n_ctx,
	};
	struct opus_ctx *c = NULL;
	struct opus_error err = {0};

	if (opus_ctx_create(model, &p, &c, &err) != OPUS_OK)
		fprintf(stderr, "ctx create: %s\n", err.msg);
	return c;
}

static void
test_threads_and_chunks(void)
{
	enum
	{
		N = 40
	};
	int32_t		toks[N];
	float	   *a = malloc(sizeof(float) * N * n_vocab);
	float	   *b = malloc(sizeof(float) * N * n_vocab);
	float	   *d = malloc(sizeof(float) * N * n_vocab);
	struct opus_ctx *c1 = make_ctx(1, 64, 64, 256);
	struct opus_ctx *c2 = make_ctx(2, 64, 64, 256);
	int			one[] = {N};
	int			uneven[] = {7, 1, 13, 3};
	int			single[] = {1};

	CHECK(c1 && c2 && a && b && d, "setup");
	if (!c1 || !c2 || !a || !b || !d)
		goto out;
	make_tokens(toks, N, 1);
	CHECK(unit_run_chunked(c1, toks, N, one, 1, a, n_vocab), "forward 1 thread");
	CHECK(unit_run_chunked(c2, toks, N, one, 1, b, n_vocab), "forward 2 threads");
	CHECK(memcmp(a, b, sizeof(float) * N * n_vocab) == 0,
		  "1 and 2 threads give bit-identical logits");
	for (int i = 0; i < N * n_vocab; i++)
	{
		if (!isfinite(a[i]))
		{
			CHECK(false, "logit %d not finite", i);
			break;
		}
	}
	CHECK(unit_run_chunked(c2, toks, N, uneven, 4, d, n_vocab), "forward uneven chunks");
	CHECK(memcmp(a, d, sizeof(float) * N * n_vocab) == 0,
		  "uneven chunks give bit-identical logits");
	CHECK(unit_run_chunked(c2, toks, N, single, 1, d, n_vocab), "forward token by token");
	CHECK(memcmp(a, d, sizeof(float) * N * n_vocab) == 0,
		  "token by token gives bit-identical logits");
	/* other block sizes: the cache layout must not change any result */
	for (int bsz = 1; bsz <= 40; bsz += 39)
	{
		struct opus_ctx_params p = {
			.n_threads = 2,.block_size = bsz == 1 ? 5 : bsz,.n_blocks = 64,
			.max_batch_tokens = 64,.n_ctx = 256,
		};
		struct opus_ctx *cb = NULL;
		struct opus_error err = {0};

		CHECK(opus_ctx_create(model, &p, &cb, &err) == OPUS_OK, "ctx block size %d", p.block_size);
		CHECK(cb && unit_run_chunked(cb, toks, N, uneven, 4, d, n_vocab), "forward, block size %d", p.block_size);
		CHECK(memcmp(a, d, sizeof(float) * N * n_vocab) == 0,
			  "block size %d gives bit-identical logits", p.block_size);
		opus_ctx_free(cb);
	}
	/* the two-thread context again: state left by earlier calls must not matter */
	CHECK(unit_run_chunked(c2, toks, N, one, 1, d, n_vocab), "forward again");
	CHECK(memcmp(a, d, sizeof(float) * N * n_vocab) == 0, "repeatable");
out:
	opus_ctx_free(c1);
	opus_ctx_free(c2);
	free(a);
	free(b);
	free(d);
}

/* A alone vs A batched with B and C; prefill then three decode steps. */
static void
test_batch_invariance(void)
{
	enum
	{
		NA = 23, NB = 5, NC = 37, STEPS = 3
	};
	int32_t		ta[NA],
				tb[NB],
				tc[NC];
	float	   *alone = malloc(sizeof(float) * (NA + STEPS) * n_vocab);
	float	   *batched = malloc(sizeof(float) * (NA + STEPS) * n_vocab);
	float	   *scratch = malloc(sizeof(float) * NC * n_vocab);
	struct opus_ctx *c = make_ctx(2, 64, 128, 256);
	struct opus_error err = {0};
	struct opus_seq sa,
				sb,
				sc;
	bool		ok = true;

	CHECK(c && alone && batched && scratch, "setup");
	if (!c || !alone || !batched || !scratch)
		goto out;
	make_tokens(ta, NA, 2);
	make_tokens(tb, NB, 3);
	make_tokens(tc, NC, 4);

	/* alone */
	opus_seq_init(&sa);
	{
		struct opus_batch_item it = {.seq = &sa,.tokens = ta,.n_tokens = NA,
		.logits = alone,.logits_all = true};

		ok = ok && opus_forward(c, &it, 1, &err) == OPUS_OK;
	}
	for (int s = 0; s < STEPS && ok; s++)
	{
		int32_t		t = (int32_t) (100 + s);
		struct opus_batch_item it = {.seq = &sa,.tokens = &t,.n_tokens = 1,
		.logits = alone + (size_t) (NA + s) * n_vocab};

		ok = opus_forward(c, &it, 1, &err) == OPUS_OK;
	}
	CHECK(ok, "alone: %s", err.msg);
	opus_seq_release(c, &sa);

	/* batched: B first, A in the middle, C last; then joint decode steps */
	opus_seq_init(&sa);
	opus_seq_init(&sb);
	opus_seq_init(&sc);
	{
		struct opus_batch_item it[3] = {
			{.seq = &sb,.tokens = tb,.n_tokens = NB,.logits = scratch},
			{.seq = &sa,.tokens = ta,.n_tokens = NA,.logits = batched,.logits_all = true},
			{.seq = &sc,.tokens = tc,.n_tokens = NC,.logits = scratch,.logits_all = true},
		};

		ok = opus_forward(c, it, 3, &err) == OPUS_OK;
	}
	for (int s = 0; s < STEPS && ok; s++)
	{
		int32_t		t = (int32_t) (100 + s);
		int32_t		u = 7,
					v[2] = {9, 10};
		struct opus_batch_item it[3] = {
			{.seq = &sc,.tokens = v,.n_tokens = 2,.logits = scratch},
			{.seq = &sb,.tokens = &u,.n_tokens = 1,.logits = scratch},
			{.seq = &sa,.tokens = &t,.n_tokens = 1,.logits = batched + (size_t) (NA + s) * n_vocab},
		};

		ok = opus_forward(c, it, 3, &err) == OPUS_OK;
	}
	CHECK(ok, "batched: %s", err.msg);
	CHECK(sa.n_pos == NA + STEPS && sb.n_pos == NB + STEPS && sc.n_pos == NC + 2 * STEPS,
		  "positions advanced");
	CHECK(memcmp(alone, batched, sizeof(float) * NA * n_vocab) == 0,
		  "prefill logits alone == batched (bit-identical)");
	CHECK(memcmp(alone + (size_t) NA * n_vocab, batched + (size_t) NA * n_vocab,
				 sizeof(float) * STEPS * n_vocab) == 0,
		  "decode logits alone == batched (bit-identical)");
	opus_seq_release(c, &sa);
	opus_seq_release(c, &sb);
	opus_seq_release(c, &sc);
	CHECK(opus_ctx_free_blocks(c) == 64, "all blocks back after release");
out:
	opus_ctx_free(c);
	free(alone);
	free(batched);
	free(scratch);
}

static void
test_kv_accounting(void)
{
	struct opus_ctx *c = make_ctx(2, 4, 64, 256);
	struct opus_error err = {0};
	struct opus_seq s,
				s2;
	int32_t		toks[64];
	float	   *lg = malloc(sizeof(float) * n_vocab);
	float	   *lg2 = malloc(sizeof(float) * n_vocab);
	struct opus_batch_item it;

	CHECK(c && lg && lg2, "setup");
	if (!c || !lg || !lg2)
		goto out;
	make_tokens(toks, 64, 5);
	opus_seq_init(&s);
	CHECK(opus_ctx_free_blocks(c) == 4, "4 free blocks");

	it = (struct opus_batch_item)
	{
		.seq = &s,.tokens = toks,.n_tokens = 17
	};
	CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "17 tokens: %s", err.msg);
	CHECK(s.n_pos == 17 && s.n_blocks == 2, "17 positions in 2 blocks");
	CHECK(opus_ctx_free_blocks(c) == 2, "2 blocks left");

	/* 48 more would need 3 more blocks: capacity error, nothing changes */
	it = (struct opus_batch_item)
	{
		.seq = &s,.tokens = toks,.n_tokens = 48
	};
	CHECK(opus_forward(c, &it, 1, &err) == OPUS_ERR_CAPACITY, "capacity error");
	CHECK(s.n_pos == 17 && s.n_blocks == 2 && opus_ctx_free_blocks(c) == 2,
		  "sequence unchanged after capacity error");

	/* bad token id, empty batch */
	{
		int32_t		bad = n_vocab;

		it = (struct opus_batch_item)
		{
			.seq = &s,.tokens = &bad,.n_tokens = 1
		};
		CHECK(opus_forward(c, &it, 1, &err) == OPUS_ERR_TOKENIZE, "bad token id rejected");
		CHECK(s.n_pos == 17, "unchanged after bad token");
		CHECK(opus_forward(c, NULL, 0, &err) == OPUS_OK, "empty batch is fine");
	}

	/* truncate to 10: one block returns; then continue to 32 */
	opus_seq_truncate(c, &s, 10);
	CHECK(s.n_pos == 10 && s.n_blocks == 1 && opus_ctx_free_blocks(c) == 3,
		  "truncate frees the second block");
	it = (struct opus_batch_item)
	{
		.seq = &s,.tokens = toks + 10,.n_tokens = 22,.logits = lg
	};
	CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "continue after truncate");
	CHECK(s.n_pos == 32 && s.n_blocks == 2, "32 positions in 2 blocks");

	/* the same 32 tokens from scratch give the same last logits */
	opus_seq_init(&s2);
	it = (struct opus_batch_item)
	{
		.seq = &s2,.tokens = toks,.n_tokens = 32,.logits = lg2
	};
	CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "from scratch");
	CHECK(memcmp(lg, lg2, sizeof(float) * n_vocab) == 0,
		  "truncate + recompute == from scratch");
	opus_seq_release(c, &s2);
	CHECK(opus_ctx_free_blocks(c) == 2, "release returns blocks");

	opus_seq_truncate(c, &s, 0);
	CHECK(s.n_pos == 0 && s.n_blocks == 0 && opus_ctx_free_blocks(c) == 4,
		  "truncate to 0 frees all");
	opus_seq_release(c, &s);
	CHECK(opus_ctx_free_blocks(c) == 4, "all blocks free at the end");
out:
	opus_ctx_free(c);
	free(lg);
	free(lg2);
}

/* Run one token on seq, logits to lg. */
static bool
step(struct opus_ctx *c, struct opus_seq *s, int32_t t, float *lg)
{
	struct opus_error err = {0};
	struct opus_batch_item it = {.seq = s,.tokens = &t,.n_tokens = 1,.logits = lg};

	if (opus_forward(c, &it, 1, &err) != OPUS_OK)
	{
		fprintf(stderr, "forward: %s\n", err.msg);
		return false;
	}
	return true;
}

/*
 * Shared blocks: a forked sequence shares the parent's blocks; appending to
 * either copies the shared partial block first, so neither sees the other's
 * tokens.  Also the context limit and duplicate sequences in a batch.
 */
static void
test_shared_block_cow(void)
{
	struct opus_ctx *c = make_ctx(1, 8, 64, 40);
	struct opus_error err = {0};
	struct opus_seq a,
				b,
				f;
	int32_t		toks[24];
	float	   *la = malloc(sizeof(float) * n_vocab);
	float	   *lb = malloc(sizeof(float) * n_vocab);
	float	   *lf = malloc(sizeof(float) * n_vocab);

	CHECK(c && la && lb && lf, "setup");
	if (!c || !la || !lb || !lf)
		goto out;
	make_tokens(toks, 24, 11);
	opus_seq_init(&a);
	opus_seq_init(&b);
	opus_seq_init(&f);
	{
		struct opus_batch_item it = {.seq = &a,.tokens = toks,.n_tokens = 20};

		CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "prefill 20");
	}
	CHECK(opus_ctx_free_blocks(c) == 6, "2 blocks used");
	CHECK(opus_seq_fork(c, &a, &b, &err) == OPUS_OK, "fork");
	CHECK(b.n_pos == 20 && b.n_blocks == 2 && opus_ctx_free_blocks(c) == 6,
		  "fork shares blocks");
	/* a continues with 300, 301; b with 400, 401 */
	CHECK(step(c, &a, 300, la) && opus_ctx_free_blocks(c) == 5, "a copies the shared block");
	CHECK(step(c, &b, 400, lb) && opus_ctx_free_blocks(c) == 5, "b writes its own block in place");
	CHECK(step(c, &a, 301, la) && step(c, &b, 401, lb), "second steps");
	/* fresh sequences for comparison */
	{
		int32_t		fa[22],
					fb[22];
		struct opus_batch_item it = {.seq = &f,.tokens = fa,.n_tokens = 22,.logits = lf};

		memcpy(fa, toks, 20 * sizeof(int32_t));
		memcpy(fb, toks, 20 * sizeof(int32_t));
		fa[20] = 300, fa[21] = 301;
		fb[20] = 400, fb[21] = 401;
		CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "fresh a");
		CHECK(memcmp(la, lf, sizeof(float) * n_vocab) == 0, "forked a == fresh a");
		opus_seq_release(c, &f);
		it.tokens = fb;
		CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "fresh b");
		CHECK(memcmp(lb, lf, sizeof(float) * n_vocab) == 0, "forked b == fresh b");
		opus_seq_release(c, &f);
	}
	opus_seq_release(c, &b);
	CHECK(opus_ctx_free_blocks(c) == 6, "b's own block freed, shared one kept");
	/* context limit */
	{
		int32_t		many[19];
		struct opus_batch_item it = {.seq = &a,.tokens = many,.n_tokens = 19};

		make_tokens(many, 19, 12);
		CHECK(opus_forward(c, &it, 1, &err) == OPUS_ERR_CONTEXT, "over n_ctx is a context error");
		CHECK(a.n_pos == 22, "unchanged after context error");
	}
	/* one sequence twice in a batch is refused */
	{
		struct opus_batch_item it[2] = {
			{.seq = &a,.tokens = toks,.n_tokens = 1},
			{.seq = &a,.tokens = toks,.n_tokens = 1},
		};

		CHECK(opus_forward(c, it, 2, &err) == OPUS_ERR_INVALID_ARG, "duplicate sequence refused");
	}
	opus_seq_release(c, &a);
	CHECK(opus_ctx_free_blocks(c) == 8, "released");
out:
	opus_ctx_free(c);
	free(la);
	free(lb);
	free(lf);
}

/*
 * The plain reference kernels (opus_qtype_init_cpu(true)) against the
 * AVX2 ones.  They sum in different orders, and with 8-bit activation
 * quantization in every layer tiny differences grow to the size of the
 * quantization noise itself (both paths are about 0.1-0.5 rms away from
 * an exact float64 evaluation of the same weights; checked with numpy).
 * So the tolerance is: rms difference per position <= 1.0, and the same
 * top token wherever the fast path's top-1/top-2 margin is >= 1.0.
 */
static void
test_reference_kernels(void)
{
	enum
	{
		N = 24
	};
	int32_t		toks[N];
	float	   *fast = malloc(sizeof(float) * N * n_vocab);
	float	   *ref = malloc(sizeof(float) * N * n_vocab);
	struct opus_ctx *c;
	int			one[] = {N};
	double		worst_rms = 0.0;
	int			top_diff = 0;

	if (strcmp(opus_qtype_cpu_variant(), "avx2") != 0)
	{
		printf("no AVX2: reference-vs-AVX2 comparison skipped\n");
		free(fast);
		free(ref);
		return;
	}
	CHECK(fast && ref, "alloc");
	if (!fast || !ref)
		goto out;
	make_tokens(toks, N, 21);
	c = make_ctx(2, 16, 32, 256);
	CHECK(c && unit_run_chunked(c, toks, N, one, 1, fast, n_vocab), "fast kernels");
	opus_ctx_free(c);
	opus_qtype_init_cpu(true);
	c = make_ctx(2, 16, 32, 256);
	CHECK(c && unit_run_chunked(c, toks, N, one, 1, ref, n_vocab), "reference kernels");
	opus_ctx_free(c);
	opus_qtype_init_cpu(false);
	for (int t = 0; t < N; t++)
	{
		const float *a = fast + (size_t) t * n_vocab,
				   *b = ref + (size_t) t * n_vocab;
		int			t1 = 0,
					t2 = -1,
					tb = 0;
		double		ss = 0.0;

		for (int i = 0; i < n_vocab; i++)
		{
			ss += (double) (a[i] - b[i]) * (a[i] - b[i]);
			if (a[i] > a[t1])
			{
				t2 = t1;
				t1 = i;
			}
			else if (i != t1 && (t2 < 0 || a[i] > a[t2]))
				t2 = i;
			if (b[i] > b[tb])
				tb = i;
		}
		if (sqrt(ss / n_vocab) > worst_rms)
			worst_rms = sqrt(ss / n_vocab);
		if (t2 >= 0 && a[t1] - a[t2] >= 1.0f && t1 != tb)
			top_diff++;
	}
	CHECK(worst_rms <= 1.0, "reference vs AVX2: worst rms difference %g", worst_rms);
	CHECK(top_diff == 0, "reference vs AVX2: top token differs at %d clear positions", top_diff);
out:
	free(fast);
	free(ref);
}

static void
test_paris(void)
{
	const struct opus_tokenizer *tok = opus_model_tokenizer(model);
	const char *prompt = "The capital of France is";
	int32_t		toks[64];
	int64_t		n = 0;
	struct opus_error err = {0};
	struct opus_ctx *c = make_ctx(2, 16, 64, 256);
	float	   *lg = malloc(sizeof(float) * n_vocab);
	char		text[512] = "";
	size_t		tl = 0;
	struct opus_seq s;

	CHECK(c && lg, "setup");
	if (!c || !lg)
		goto out;
	CHECK(opus_tokenizer_encode(tok, prompt, strlen(prompt), true, false,
								toks, 64, &n, &err) == OPUS_OK, "tokenize");
	opus_seq_init(&s);
	for (int step = 0; step < 8; step++)
	{
		struct opus_batch_item it = {.seq = &s,.tokens = step == 0 ? toks : &toks[n - 1],
		.n_tokens = step == 0 ? (int32_t) n : 1,.logits = lg};
		int32_t		best = 0;
		int			k;

		if (opus_forward(c, &it, 1, &err) != OPUS_OK)
		{
			CHECK(false, "forward: %s", err.msg);
			break;
		}
		for (int i = 1; i < n_vocab; i++)
			if (lg[i] > lg[best])
				best = i;
		toks[n++] = best;
		k = opus_tokenizer_piece(tok, best, false, text + tl, (int) (sizeof(text) - tl - 1));
		if (k > 0 && tl + k < sizeof(text) - 1)
			tl += k;
		text[tl] = '\0';
	}
	CHECK(strstr(text, "Paris") != NULL, "greedy continuation \"%s\" mentions Paris", text);
	opus_seq_release(c, &s);
out:
	opus_ctx_free(c);
	free(lg);
}

/* ---- synthetic files: errors without a model ---- */

static bool
write_model(const char *path, const char *arch, enum opus_qtype embd_type,
			int64_t q_rows)
{
	struct opus_gguf_writer *w = opus_gguf_writer_new(32);
	struct opus_error err = {0};
	char		key[64];
	const int64_t E = 256,
				FF = 256,
				V = 8;
	bool		ok = w != NULL;
	size_t		sz;
	void	   *buf = calloc(1, 1 << 20);

	ok = ok && buf;
#define KEY(s) (snprintf(key, sizeof(key), "%s.%s", arch, s), key)
	ok = ok && opus_gguf_writer_add_str(w, "general.architecture", arch, &err) == OPUS_OK;
	ok = ok && opus_gguf_writer_add_u32(w, KEY("embedding_length"), E, &err) == OPUS_OK;
	ok = ok && opus_gguf_writer_add_u32(w, KEY("block_count"), 1, &err) == OPUS_OK;
	ok = ok && opus_gguf_writer_add_u32(w, KEY("attention.head_count"), 4, &err) == OPUS_OK;
	ok = ok && opus_gguf_writer_add_u32(w, KEY("feed_forward_length"), FF, &err) == OPUS_OK;
#undef KEY
	{
		int64_t		ne[2] = {E, V};

		ok = ok && opus_qtype_row_size(embd_type, E, &sz);
		ok = ok && opus_gguf_writer_add_tensor(w, "token_embd.weight", 2, ne, embd_type,
											   buf, sz * V, &err) == OPUS_OK;
	}
	{
		int64_t		ne[1] = {E};

		ok = ok && opus_gguf_writer_add_tensor(w, "output_norm.weight", 1, ne, OPUS_TYPE_F32,
											   buf, E * 4, &err) == OPUS_OK;
		ok = ok && opus_gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", 1, ne, OPUS_TYPE_F32,
											   buf, E * 4, &err) == OPUS_OK;
		ok = ok && opus_gguf_writer_add_tensor(w, "blk.0.ffn_norm.weight", 1, ne, OPUS_TYPE_F32,
											   buf, E * 4, &err) == OPUS_OK;
	}
	{
		const char *names[] = {"blk.0.attn_q.weight", "blk.0.attn_k.weight",
			"blk.0.attn_v.weight", "blk.0.attn_output.weight", "blk.0.ffn_gate.weight",
		"blk.0.ffn_up.weight", "blk.0.ffn_down.weight"};

		for (int i = 0; i < 7; i++)
		{
			int64_t		ne[2] = {E, i == 0 ? q_rows : E};

			ok = ok && opus_gguf_writer_add_tensor(w, names[i], 2, ne, OPUS_TYPE_F32,
												   buf, (size_t) ne[0] * ne[1] * 4, &err) == OPUS_OK;
		}
	}
	ok = ok && opus_gguf_writer_write(w, path, &err) == OPUS_OK;
	if (!ok)
		fprintf(stderr, "write_model: %s\n", err.msg);
	opus_gguf_writer_free(w);
	free(buf);
	return ok;
}

static void
test_load_errors(void)
{
	char		path[64];
	struct opus_model *m = NULL;
	struct opus_error err = {0};
	enum opus_status st;

	snprintf(path, sizeof(path), "/tmp/opus_test_forward_%d.gguf", (int) getpid());

	CHECK(write_model(path, "mamba", OPUS_TYPE_F32, 256), "write mamba");
	st = opus_model_load(path, NULL, &m, &err);
	CHECK(st == OPUS_ERR_UNSUPPORTED && strstr(err.msg, "mamba") && m == NULL,
		  "unsupported architecture named: %s", err.msg);

	CHECK(write_model(path, "llama", OPUS_TYPE_IQ2_XXS, 256), "write iq2_xxs");
	st = opus_model_load(path, NULL, &m, &err);
	CHECK(st == OPUS_ERR_UNSUPPORTED && strstr(err.msg, "IQ2_XXS") &&
		  strstr(err.msg, "token_embd.weight") && m == NULL,
		  "unsupported type names type and tensor: %s", err.msg);

	CHECK(write_model(path, "llama", OPUS_TYPE_F32, 128), "write bad shape");
	st = opus_model_load(path, NULL, &m, &err);
	CHECK(st == OPUS_ERR_FORMAT && strstr(err.msg, "attn_q") && m == NULL,
		  "wrong shape is a format error: %s", err.msg);

	st = opus_model_load("/nonexistent/model.gguf", NULL, &m, &err);
	CHECK(st != OPUS_OK && m == NULL, "missing file is an error");
	unlink(path);
}

int
main(void)
{
	const char *path = unit_model_path();

	test_load_errors();
	if (!path)
	{
		printf("OPUS_MODEL not set: skipping model tests\n");
		return UNIT_DONE();
	}
	{
		struct opus_error err = {0};

		if (opus_model_load(path, NULL, &model, &err) != OPUS_OK)
		{
			CHECK(false, "load %s: %s", path, err.msg);
			return UNIT_DONE();
		}
	}
	n_vocab = opus_model_hparams(model)->n_vocab;
	CHECK(n_vocab > 0 && opus_model_hparams(model)->n_layer > 0, "hparams");
	test_threads_and_chunks();
	test_batch_invariance();
	test_kv_accounting();
	test_shared_block_cow();
	test_reference_kernels();
	test_paris();
	opus_model_free(model);
	return UNIT_DONE();
}
