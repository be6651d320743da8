/*
 * test_kv_q8.c - the Q8_0 KV cache (opus_ctx_params.kv_type = OPUS_KV_Q8_0).
 *
 * Without a model, the attention kernels on synthetic caches:
 *  - opus_fwd_attend_q8_0_ref against a float64 attention over the same
 *    (dequantized) keys and values: the only differences are the query's
 *    own Q8_0 rounding and float sums, so max |diff| <= TOL_DEQ * max|V|;
 *  - ... and against float64 attention over the original, unquantized K and
 *    V (what an exact cache would give): max |diff| <= TOL_EXACT * max|V|;
 *  - the AVX2 kernel gives the same bits as the plain one (1-3 heads, head
 *    sizes 32/64/128, block sizes 1/5/16/40, 1..100 positions);
 *  - the result does not depend on the block size (bit-identical);
 *  - a model whose head size is not a multiple of 32 refuses a Q8_0 cache
 *    with a clear error.
 * With $OPUS_MODEL (the default SmolLM2 Q4_1):
 *  - the pool holds ~1.88x the tokens of an F16 pool of the same bytes;
 *  - llama_batch_order with a Q8_0 cache is a clear error;
 *  - determinism as with F16: bit-identical logits for 1 and 2 threads, one
 *    chunk / uneven chunks / token by token, block sizes 5/16/40, alone or
 *    batched with two other sequences (prefill and decode), and a forked
 *    (block-sharing) sequence equals a fresh one;
 *  - close to the F16 cache: same top-1 token at >= 90% of the positions of
 *    a pseudo-random 40-token sequence, and greedy "The capital of France
 *    is" still says Paris.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/forward_int.h"
#include "format/gguf.h"
#include "model/model.h"
#include "quant/qtype.h"
#include "text/tokenizer.h"
#include "unit.h"
#include "unit_forward.h"

#define TOL_DEQ 0.01
#define TOL_EXACT 0.015

/* ---- kernels on synthetic caches ---- */

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;

static double
rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (double) (rng_state >> 11) / (double) (1ULL << 53) * 2.0 - 1.0;
}

/* One layer, one KV head per block: K at 0, V at head_bytes. */
struct cache
{
	int			hd;
	int			bs;
	int			n;				/* positions */
	size_t		head_bytes;
	size_t		block_bytes;
	int			n_blocks;
	uint8_t    *mem;
	int32_t    *blocks;			/* the block table (a permutation) */
};

/* Store row x (hd floats) as position p's K (v false) or V in Q8_0. */
static void
cache_put(struct cache *c, int p, bool v, const float *x, float *deq)
{
	uint8_t    *head = c->mem + (size_t) c->blocks[p / c->bs] * c->block_bytes +
		(v ? c->head_bytes : 0);
	int			slot = p % c->bs;

	for (int b = 0; b < c->hd / 32; b++)
	{
		uint8_t		blk[34];
		uint16_t	dh;

		opus_act_q8_0_ref(x + 32 * b, blk, 32);
		memcpy(head + (size_t) slot * c->hd + 32 * b, blk + 2, 32);
		memcpy(head + (size_t) c->bs * c->hd + ((size_t) b * c->bs + slot) * 2, blk, 2);
		memcpy(&dh, blk, 2);
		for (int i = 0; i < 32; i++)
			deq[32 * b + i] = opus_fp16_to_fp32(dh) * (float) ((int8_t *) blk)[2 + i];
	}
}

/*
 * Fill a cache of n positions with K, V (values in [-kscale, kscale] and
 * [-1, 1]); the original and the dequantized rows go to kx/vx, kd/vd.
 */
static bool
cache_make(struct cache *c, int hd, int bs, int n, const float *kx, const float *vx,
		   float *kd, float *vd)
{
	memset(c, 0, sizeof(*c));
	c->hd = hd;
	c->bs = bs;
	c->n = n;
	c->head_bytes = (size_t) bs * hd + (size_t) (hd / 32) * bs * 2;
	c->block_bytes = 2 * c->head_bytes;
	c->n_blocks = (n + bs - 1) / bs;
	c->mem = calloc((size_t) c->n_blocks, c->block_bytes);
	c->blocks = malloc(sizeof(int32_t) * (size_t) c->n_blocks);
	if (!c->mem || !c->blocks)
		return false;
	for (int i = 0; i < c->n_blocks; i++)
		c->blocks[i] = c->n_blocks - 1 - i;
	for (int p = 0; p < n; p++)
	{
		cache_put(c, p, false, kx + (size_t) p * hd, kd + (size_t) p * hd);
		cache_put(c, p, true, vx + (size_t) p * hd, vd + (size_t) p * hd);
	}
	return true;
}

static void
cache_free(struct cache *c)
{
	free(c->mem);
	free(c->blocks);
}

static void
run_kernel(opus_attend_fn fn, const struct cache *c, const float *q, int n_h, float *out,
		   float *scores)
{
	struct opus_attn_args a = {
		.q = q,.out = out,.n_h = n_h,.hd = c->hd,.n_kv = c->n,
		.scale = 1.0f / sqrtf((float) c->hd),.bs = c->bs,.kv_mem = c->mem,
		.block_bytes = c->block_bytes,.blocks = c->blocks,.k_off = 0,
		.v_off = c->head_bytes,.scores = scores,
	};

	fn(&a);
}

/* float64 attention of one head over n rows of k and v */
static void
attend_exact(const float *q, const float *k, const float *v, int n, int hd, double *out)
{
	double	   *s = malloc(sizeof(double) * (size_t) n);
	double		max = -INFINITY,
				sum = 0.0;

	for (int p = 0; p < n; p++)
	{
		double		d = 0.0;

		for (int i = 0; i < hd; i++)
			d += (double) q[i] * k[(size_t) p * hd + i];
		s[p] = d / sqrt((double) hd);
		max = s[p] > max ? s[p] : max;
	}
	for (int p = 0; p < n; p++)
	{
		s[p] = exp(s[p] - max);
		sum += s[p];
	}
	for (int i = 0; i < hd; i++)
	{
		double		o = 0.0;

		for (int p = 0; p < n; p++)
			o += s[p] / sum * v[(size_t) p * hd + i];
		out[i] = o;
	}
	free(s);
}

static bool
have_avx2(void)
{
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		__builtin_cpu_supports("f16c");
}

static void
test_kernels(void)
{
	static const int hds[] = {32, 64, 128};
	static const int bss[] = {1, 5, 16, 40};
	static const int ns[] = {1, 7, 8, 9, 33, 100};
	double		worst_deq = 0.0,
				worst_exact = 0.0;
	int			n_cases = 0,
				avx2_same = 0,
				bs_same = 0,
				bs_cases = 0;
	bool		avx2 = have_avx2();

	if (!avx2)
		printf("no AVX2: the AVX2 Q8_0 kernel is not compared\n");
	for (size_t ih = 0; ih < sizeof(hds) / sizeof(hds[0]); ih++)
	{
		for (size_t in = 0; in < sizeof(ns) / sizeof(ns[0]); in++)
		{
			int			hd = hds[ih],
						n = ns[in];
			float	   *kx = malloc(sizeof(float) * (size_t) n * hd);
			float	   *vx = malloc(sizeof(float) * (size_t) n * hd);
			float	   *kd = malloc(sizeof(float) * (size_t) n * hd);
			float	   *vd = malloc(sizeof(float) * (size_t) n * hd);
			float		q[3 * 128];
			float		first[3 * 128],
						out[3 * 128],
						out2[3 * 128];
			float	   *scores = malloc(sizeof(float) * 3 * (size_t) ((n + 15) / 16 * 16));
			double		exact[128];
			float		vmax = 0.0f;

			if (!kx || !vx || !kd || !vd || !scores)
			{
				CHECK(false, "alloc");
				return;
			}
			for (int i = 0; i < n * hd; i++)
			{
				kx[i] = (float) (rnd() * 1.5);
				vx[i] = (float) rnd();
				vmax = fabsf(vx[i]) > vmax ? fabsf(vx[i]) : vmax;
			}
			for (int i = 0; i < 3 * hd; i++)
				q[i] = (float) (rnd() * 2.0);
			for (size_t ib = 0; ib < sizeof(bss) / sizeof(bss[0]); ib++)
			{
				struct cache c;

				if (!cache_make(&c, hd, bss[ib], n, kx, vx, kd, vd))
				{
					CHECK(false, "cache alloc");
					cache_free(&c);
					continue;
				}
				for (int n_h = 1; n_h <= 3; n_h++)
				{
					run_kernel(opus_fwd_attend_q8_0_ref, &c, q, n_h, out, scores);
					n_cases++;
					if (avx2)
					{
						run_kernel(opus_fwd_attend_q8_0_avx2, &c, q, n_h, out2, scores);
						if (memcmp(out, out2, sizeof(float) * (size_t) n_h * hd) == 0)
							avx2_same++;
						else
							fprintf(stderr, "avx2 differs: hd %d n %d bs %d heads %d\n",
									hd, n, bss[ib], n_h);
					}
					if (n_h == 3)
					{
						/* block size invariance, against the first block size */
						if (ib == 0)
							memcpy(first, out, sizeof(float) * 3 * (size_t) hd);
						else
						{
							bs_cases++;
							bs_same += memcmp(first, out, sizeof(float) * 3 * (size_t) hd) == 0;
						}
						for (int h = 0; h < 3; h++)
						{
							attend_exact(q + h * hd, kd, vd, n, hd, exact);
							for (int i = 0; i < hd; i++)
								worst_deq = fmax(worst_deq, fabs(out[h * hd + i] - exact[i]) / vmax);
							attend_exact(q + h * hd, kx, vx, n, hd, exact);
							for (int i = 0; i < hd; i++)
								worst_exact = fmax(worst_exact, fabs(out[h * hd + i] - exact[i]) / vmax);
						}
					}
				}
				cache_free(&c);
			}
			free(kx);
			free(vx);
			free(kd);
			free(vd);
			free(scores);
		}
	}
	printf("q8_0 attention: worst |diff| / max|V|: %.5f vs dequantized K/V, %.5f vs exact K/V (%d cases)\n",
		   worst_deq, worst_exact, n_cases);
	CHECK(worst_deq <= TOL_DEQ, "vs float64 over the dequantized cache: %g > %g", worst_deq, TOL_DEQ);
	CHECK(worst_exact <= TOL_EXACT, "vs float64 over the exact K/V: %g > %g", worst_exact, TOL_EXACT);
	if (avx2)
		CHECK(avx2_same == n_cases, "AVX2 kernel bit-identical to the plain one in %d of %d cases",
			  avx2_same, n_cases);
	CHECK(bs_cases > 0 && bs_same == bs_cases, "block size changes no bit (%d of %d)",
		  bs_same, bs_cases);
}

/* ---- a synthetic model with head size 48: Q8_0 refused ---- */

static bool
write_model(const char *path, int64_t E, int n_head)
{
	struct opus_gguf_writer *w = opus_gguf_writer_new(32);
	struct opus_error err = {0};
	const int64_t FF = 64,
				V = 8;
	bool		ok = w != NULL;
	void	   *buf = calloc(1, 1 << 20);

	ok = ok && buf;
	ok = ok && opus_gguf_writer_add_str(w, "general.architecture", "llama", &err) == OPUS_OK;
	ok = ok && opus_gguf_writer_add_u32(w, "llama.embedding_length", (uint32_t) E, &err) == OPUS_OK;
	ok = ok && opus_gguf_writer_add_u32(w, "llama.block_count", 1, &err) == OPUS_OK;
	ok = ok && opus_gguf_writer_add_u32(w, "llama.attention.head_count", (uint32_t) n_head, &err) == OPUS_OK;
	ok = ok && opus_gguf_writer_add_u32(w, "llama.feed_forward_length", FF, &err) == OPUS_OK;
	ok = ok && opus_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", &err) == OPUS_OK;
	{
		/* V one-letter tokens: u32 element type, u64 count, (u64 len, bytes) each */
		uint8_t		arr[12 + 9 * 8];
		size_t		o = 0;
		uint32_t	et = OPUS_GGUF_STRING;
		uint64_t	cnt = V,
					one = 1;

		memcpy(arr + o, &et, 4);
		o += 4;
		memcpy(arr + o, &cnt, 8);
		o += 8;
		for (int i = 0; i < V; i++)
		{
			memcpy(arr + o, &one, 8);
			arr[o + 8] = (uint8_t) ('a' + i);
			o += 9;
		}
		ok = ok && opus_gguf_writer_add_raw(w, "tokenizer.ggml.tokens", OPUS_GGUF_ARRAY,
											arr, o, &err) == OPUS_OK;
	}
	{
		int64_t		ne[2] = {E, V};

		ok = ok && opus_gguf_writer_add_tensor(w, "token_embd.weight", 2, ne, OPUS_TYPE_F32,
											   buf, (size_t) (E * V * 4), &err) == OPUS_OK;
	}
	{
		int64_t		ne[1] = {E};
		const char *names[] = {"output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"};

		for (int i = 0; i < 3; i++)
			ok = ok && opus_gguf_writer_add_tensor(w, names[i], 1, ne, OPUS_TYPE_F32,
												   buf, (size_t) E * 4, &err) == OPUS_OK;
	}
	{
		const char *names[] = {"blk.0.attn_q.weight", "blk.0.attn_k.weight",
			"blk.0.attn_v.weight", "blk.0.attn_output.weight", "blk.0.ffn_gate.weight",
		"blk.0.ffn_up.weight", "blk.0.ffn_down.weight"};

		for (int i = 0; i < 7; i++)
		{
			int64_t		ne[2] = {i == 6 ? FF : E, i >= 4 && i < 6 ? FF : E};

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
test_head_size(void)
{
	char		path[64];
	struct opus_model *m = NULL;
	struct opus_ctx *c = NULL;
	struct opus_error err = {0};
	struct opus_ctx_params p = {
		.n_threads = 1,.block_size = 16,.n_blocks = 4,.max_batch_tokens = 8,
		.n_ctx = 64,.kv_type = OPUS_KV_Q8_0,
	};
	enum opus_status st;

	snprintf(path, sizeof(path), "/tmp/opus_test_kv_q8_%d.gguf", (int) getpid());
	/* 4 heads of 48 */
	CHECK(write_model(path, 192, 4), "write model");
	st = opus_model_load(path, NULL, &m, &err);
	CHECK(st == OPUS_OK && opus_model_hparams(m)->head_dim == 48, "load head size 48: %s", err.msg);
	if (st == OPUS_OK)
	{
		st = opus_ctx_create(m, &p, &c, &err);
		CHECK(st == OPUS_ERR_UNSUPPORTED && c == NULL && strstr(err.msg, "multiple of 32") &&
			  strstr(err.msg, "48"), "q8_0 with head size 48 refused: %s", err.msg);
		p.kv_type = OPUS_KV_F16;
		st = opus_ctx_create(m, &p, &c, &err);
		CHECK(st == OPUS_OK, "f16 with head size 48 fine: %s", err.msg);
		opus_ctx_free(c);
		c = NULL;
		p.kv_type = (enum opus_kv_type) 7;
		st = opus_ctx_create(m, &p, &c, &err);
		CHECK(st == OPUS_ERR_INVALID_ARG && c == NULL, "unknown kv type refused: %s", err.msg);
		opus_model_free(m);
	}
	unlink(path);

	/* names */
	{
		enum opus_kv_type t = OPUS_KV_F16;

		CHECK(opus_kv_type_parse("q8_0", &t) && t == OPUS_KV_Q8_0, "parse q8_0");
		CHECK(opus_kv_type_parse("F16", &t) && t == OPUS_KV_F16, "parse F16");
		CHECK(!opus_kv_type_parse("q4_0", &t) && !opus_kv_type_parse("", &t), "parse rejects");
		CHECK(strcmp(opus_kv_type_name(OPUS_KV_Q8_0), "q8_0") == 0 &&
			  strcmp(opus_kv_type_name(OPUS_KV_F16), "f16") == 0 &&
			  opus_kv_type_name(OPUS_KV__COUNT) == NULL, "names");
	}
}

/* ---- with the model ---- */

static struct opus_model *model;
static int	n_vocab;

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
make_ctx(int threads, int bs, int64_t n_blocks, int max_batch, enum opus_kv_type type)
{
	struct opus_ctx_params p = {
		.n_threads = threads,.block_size = bs,.n_blocks = n_blocks,
		.max_batch_tokens = max_batch,.n_ctx = 256,.kv_type = type,
	};
	struct opus_ctx *c = NULL;
	struct opus_error err = {0};

	if (opus_ctx_create(model, &p, &c, &err) != OPUS_OK)
		fprintf(stderr, "ctx create: %s\n", err.msg);
	return c;
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

static void
test_sizes_and_modes(void)
{
	struct opus_ctx_params p = {
		.n_threads = 1,.block_size = 16,.n_blocks = 100,.max_batch_tokens = 8,
		.n_ctx = 256,
	};
	size_t		f16,
				q8;
	struct opus_ctx *c = NULL;
	struct opus_error err = {0};

	f16 = opus_ctx_kv_bytes(model, &p);
	p.kv_type = OPUS_KV_Q8_0;
	q8 = opus_ctx_kv_bytes(model, &p);
	printf("kv bytes for 100 blocks of 16: f16 %zu, q8_0 %zu (%.3fx the tokens)\n",
		   f16, q8, (double) f16 / q8);
	CHECK(q8 > 0 && (double) f16 / q8 > 1.85 && (double) f16 / q8 < 1.9,
		  "q8_0 blocks are 1/1.88 of f16's: %zu vs %zu", q8, f16);
	p.llama_batch_order = true;
	CHECK(opus_ctx_create(model, &p, &c, &err) == OPUS_ERR_UNSUPPORTED && c == NULL &&
		  strstr(err.msg, "f16"), "llama_batch_order with q8_0 refused: %s", err.msg);
}

static void
test_determinism(void)
{
	enum
	{
		N = 40
	};
	int32_t		toks[N];
	size_t		sz = sizeof(float) * N * n_vocab;
	float	   *a = malloc(sz),
			   *b = malloc(sz),
			   *f = malloc(sz);
	struct opus_ctx *c1 = make_ctx(1, 16, 64, 64, OPUS_KV_Q8_0);
	struct opus_ctx *c2 = make_ctx(2, 16, 64, 64, OPUS_KV_Q8_0);
	struct opus_ctx *cf = make_ctx(2, 16, 64, 64, OPUS_KV_F16);
	int			one[] = {N};
	int			uneven[] = {7, 1, 13, 3};
	int			single[] = {1};
	int			agree = 0;
	double		max_diff = 0.0,
				ss = 0.0;

	CHECK(a && b && f && c1 && c2 && cf, "setup");
	if (!a || !b || !f || !c1 || !c2 || !cf)
		goto out;
	make_tokens(toks, N, 1);
	CHECK(unit_run_chunked(c1, toks, N, one, 1, a, n_vocab), "q8_0 forward, 1 thread");
	CHECK(unit_run_chunked(c2, toks, N, one, 1, b, n_vocab), "q8_0 forward, 2 threads");
	CHECK(memcmp(a, b, sz) == 0, "q8_0: 1 and 2 threads bit-identical");
	CHECK(unit_run_chunked(c2, toks, N, uneven, 4, b, n_vocab), "q8_0 uneven chunks");
	CHECK(memcmp(a, b, sz) == 0, "q8_0: uneven chunks bit-identical");
	CHECK(unit_run_chunked(c1, toks, N, single, 1, b, n_vocab), "q8_0 token by token");
	CHECK(memcmp(a, b, sz) == 0, "q8_0: token by token bit-identical");
	for (int bs = 5; bs <= 40; bs += 35)
	{
		struct opus_ctx *cb = make_ctx(2, bs, 64, 64, OPUS_KV_Q8_0);

		CHECK(cb && unit_run_chunked(cb, toks, N, uneven, 4, b, n_vocab), "q8_0 block size %d", bs);
		CHECK(memcmp(a, b, sz) == 0, "q8_0: block size %d bit-identical", bs);
		opus_ctx_free(cb);
	}

	/* against the F16 cache */
	CHECK(unit_run_chunked(cf, toks, N, one, 1, f, n_vocab), "f16 forward");
	for (int t = 0; t < N; t++)
	{
		const float *x = a + (size_t) t * n_vocab,
				   *y = f + (size_t) t * n_vocab;

		agree += argmax(x, n_vocab) == argmax(y, n_vocab);
		for (int i = 0; i < n_vocab; i++)
		{
			double		d = fabs((double) x[i] - y[i]);

			max_diff = d > max_diff ? d : max_diff;
			ss += d * d;
		}
	}
	printf("q8_0 vs f16 kv, %d random tokens: top-1 agrees at %d, max |logit diff| %.3f, rms %.4f\n",
		   N, agree, max_diff, sqrt(ss / ((double) N * n_vocab)));
	CHECK(agree >= N * 9 / 10, "q8_0 top-1 agrees with f16 at %d of %d positions", agree, N);
	CHECK(memcmp(a, f, sz) != 0, "q8_0 really is another cache than f16");
out:
	opus_ctx_free(c1);
	opus_ctx_free(c2);
	opus_ctx_free(cf);
	free(a);
	free(b);
	free(f);
}

/* A alone vs A batched with B and C (prefill, then decode steps), Q8_0 cache. */
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
	size_t		sz = sizeof(float) * (NA + STEPS) * n_vocab;
	float	   *alone = malloc(sz);
	float	   *batched = malloc(sz);
	float	   *scratch = malloc(sizeof(float) * NC * n_vocab);
	struct opus_ctx *c = make_ctx(2, 16, 64, 128, OPUS_KV_Q8_0);
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
	opus_seq_init(&sa);
	{
		struct opus_batch_item it = {.seq = &sa,.tokens = ta,.n_tokens = NA,
		.logits = alone,.logits_all = true};

		ok = opus_forward(c, &it, 1, &err) == OPUS_OK;
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
	CHECK(memcmp(alone, batched, sizeof(float) * NA * n_vocab) == 0,
		  "q8_0: prefill logits alone == batched (bit-identical)");
	CHECK(memcmp(alone + (size_t) NA * n_vocab, batched + (size_t) NA * n_vocab,
				 sizeof(float) * STEPS * n_vocab) == 0,
		  "q8_0: decode logits alone == batched (bit-identical)");
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

/* A forked sequence shares the Q8_0 blocks; its next logits equal a fresh run's. */
static void
test_fork(void)
{
	struct opus_ctx *c = make_ctx(2, 16, 8, 64, OPUS_KV_Q8_0);
	struct opus_error err = {0};
	struct opus_seq a,
				b,
				f;
	int32_t		toks[22];
	float	   *lb = malloc(sizeof(float) * n_vocab);
	float	   *lf = malloc(sizeof(float) * n_vocab);

	CHECK(c && lb && lf, "setup");
	if (!c || !lb || !lf)
		goto out;
	make_tokens(toks, 22, 11);
	opus_seq_init(&a);
	opus_seq_init(&b);
	opus_seq_init(&f);
	{
		struct opus_batch_item it = {.seq = &a,.tokens = toks,.n_tokens = 20};

		CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "prefill 20");
	}
	CHECK(opus_seq_fork(c, &a, &b, &err) == OPUS_OK && opus_ctx_free_blocks(c) == 6,
		  "fork shares the blocks");
	{
		struct opus_batch_item it[2] = {
			{.seq = &a,.tokens = toks + 20,.n_tokens = 1},
			{.seq = &b,.tokens = toks + 21,.n_tokens = 1,.logits = lb},
		};

		CHECK(opus_forward(c, it, 2, &err) == OPUS_OK && opus_ctx_free_blocks(c) == 5,
			  "the shared partial block is copied once");
	}
	{
		int32_t		fb[21];
		struct opus_batch_item it = {.seq = &f,.tokens = fb,.n_tokens = 21,.logits = lf};

		memcpy(fb, toks, 20 * sizeof(int32_t));
		fb[20] = toks[21];
		CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "fresh");
	}
	CHECK(memcmp(lb, lf, sizeof(float) * n_vocab) == 0, "q8_0: forked == fresh (bit-identical)");
	opus_seq_release(c, &a);
	opus_seq_release(c, &b);
	opus_seq_release(c, &f);
	CHECK(opus_ctx_free_blocks(c) == 8, "released");
out:
	opus_ctx_free(c);
	free(lb);
	free(lf);
}

static void
test_paris(void)
{
	const struct opus_tokenizer *tok = opus_model_tokenizer(model);
	const char *prompt = "The capital of France is";
	int32_t		toks[64];
	int64_t		n = 0;
	struct opus_error err = {0};
	struct opus_ctx *c = make_ctx(2, 16, 16, 64, OPUS_KV_Q8_0);
	float	   *lg = malloc(sizeof(float) * n_vocab);
	char		text[512] = "";
	size_t		len = 0;
	struct opus_seq s;

	CHECK(c && lg, "setup");
	if (!c || !lg)
		goto out;
	CHECK(opus_tokenizer_encode(tok, prompt, strlen(prompt), true, false, toks, 64, &n, &err) == OPUS_OK,
		  "tokenize");
	opus_seq_init(&s);
	{
		struct opus_batch_item it = {.seq = &s,.tokens = toks,.n_tokens = (int32_t) n,.logits = lg};

		CHECK(opus_forward(c, &it, 1, &err) == OPUS_OK, "prefill");
	}
	for (int i = 0; i < 8; i++)
	{
		int32_t		t = argmax(lg, n_vocab);
		char		piece[64];
		int			k = opus_tokenizer_piece(tok, t, false, piece, sizeof(piece));
		struct opus_batch_item it = {.seq = &s,.tokens = &t,.n_tokens = 1,.logits = lg};

		if (k > 0 && len + (size_t) k < sizeof(text))
		{
			memcpy(text + len, piece, (size_t) k);
			len += (size_t) k;
			text[len] = '\0';
		}
		if (opus_forward(c, &it, 1, &err) != OPUS_OK)
			break;
	}
	printf("q8_0 kv greedy: \"%s%s\"\n", prompt, text);
	CHECK(strstr(text, "Paris") != NULL, "q8_0 kv: the capital of France is Paris: \"%s\"", text);
	opus_seq_release(c, &s);
out:
	opus_ctx_free(c);
	free(lg);
}

int
main(void)
{
	const char *path = unit_model_path();

	test_kernels();
	test_head_size();
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
	test_sizes_and_modes();
	test_determinism();
	test_batch_invariance();
	test_fork();
	test_paris();
	opus_model_free(model);
	return UNIT_DONE();
}
