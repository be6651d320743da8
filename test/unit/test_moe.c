/*
 * test_moe.c - the batched MoE dispatch (moe.c) against its naive per-token
 * reference, and the routing and grouping on its own.
 *
 * Tolerance: none.  The batched dispatch and the reference use the same
 * kernels and the same per-element operations, so their outputs must be
 * equal bit for bit (memcmp), for every weight type, batch size and thread
 * count tried.  The routing is also checked against an independent
 * computation here (softmax in double, top-k by sorting) within 1e-6.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/moe.h"
#include "quant/qtype.h"
#include "base/threadpool.h"
#include "unit.h"

/* ---- deterministic random numbers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint32_t
rng_u32(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t) (rng_state >> 16);
}

/* uniform in [-a, a) */
static float
rng_f(float a)
{
	return ((float) (rng_u32() & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f) * a;
}

/* ---- a synthetic layer ---- */

struct layer
{
	struct opus_moe_experts ex;
	struct opus_moe_mat mats[3][OPUS_MOE_MAX_EXPERTS + 1];
	uint8_t    *blobs[3][OPUS_MOE_MAX_EXPERTS + 1];	/* per-expert data (or [0] stacked) */
};

/* A random n_out x n_in matrix quantized to type t (rows of whole blocks). */
static uint8_t *
random_matrix(enum opus_qtype t, int64_t n_in, int64_t n_out, size_t *size)
{
	const struct opus_qtype_info *qi = opus_qtype_info(t);
	size_t		row = 0;
	float	   *f = malloc(sizeof(float) * (size_t) n_in);
	uint8_t    *d;

	opus_qtype_row_size(t, n_in, &row);
	d = malloc(row * (size_t) n_out);
	for (int64_t r = 0; r < n_out; r++)
	{
		for (int64_t i = 0; i < n_in; i++)
			f[i] = rng_f(0.1f);
		qi->from_float_ref(f, d + (size_t) r * row, n_in);
	}
	free(f);
	*size = row * (size_t) n_out;
	return d;
}

/*
 * Build a layer: n_expert experts of n_ff, width n_embd; stacked (one blob
 * per projection) or per-expert blobs; types[e % n_types] per expert when
 * per-expert.  shared: add a shared expert of n_ff_sh.
 */
static void free_layer(struct layer *L);

static struct layer *
make_layer(int n_expert, int n_used, int64_t n_embd, int64_t n_ff,
		   const enum opus_qtype *types, int n_types, bool stacked,
		   bool shared, int64_t n_ff_sh)
{
	struct layer *L = calloc(1, sizeof(*L));
	struct opus_error err;
	int			n_all = n_expert + (shared ? 1 : 0);

	L->ex.n_expert = n_expert;
	L->ex.n_used = n_used;
	L->ex.n_embd = n_embd;
	L->ex.gating = OPUS_MOE_GATING_SOFTMAX;
	L->ex.norm_weights = false;
	L->ex.weight_scale = 1.0f;
	L->ex.has_shared = shared;
	L->ex.shared_gated = shared;
	L->ex.gate = L->mats[0];
	L->ex.up = L->mats[1];
	L->ex.down = L->mats[2];
	for (int m = 0; m < 3; m++)
	{
		int64_t		n_in = m == 2 ? n_ff : n_embd;
		int64_t		n_out = m == 2 ? n_embd : n_ff;

		if (stacked)
		{
			size_t		sz;

			L->blobs[m][0] = random_matrix(types[0], n_in, n_out * n_expert, &sz);
			if (opus_moe_mats_stacked(L->mats[m], n_expert, L->blobs[m][0], sz, types[0],
									  n_in, n_out, &err) != OPUS_OK)
				fprintf(stderr, "stacked: %s\n", err.msg);
		}
		else
		{
			for (int e = 0; e < n_expert; e++)
			{
				size_t		sz;
				enum opus_qtype t = types[(e + m) % n_types];

				L->blobs[m][e + 1] = random_matrix(t, n_in, n_out, &sz);
				opus_moe_mat_set(&L->mats[m][e], L->blobs[m][e + 1], sz, t, n_in, n_out, &err);
			}
		}
		if (shared)
		{
			size_t		sz;
			int64_t		si = m == 2 ? n_ff_sh : n_embd;
			int64_t		so = m == 2 ? n_embd : n_ff_sh;

			L->blobs[m][n_all] = random_matrix(types[0], si, so, &sz);
			opus_moe_mat_set(&L->mats[m][n_expert], L->blobs[m][n_all], sz, types[0], si, so, &err);
		}
	}
	if (opus_moe_experts_finish(&L->ex, &err) != OPUS_OK)
	{
		fprintf(stderr, "finish: %s\n", err.msg);
		free_layer(L);
		return NULL;
	}
	return L;
}

static void
free_layer(struct layer *L)
{
	if (!L)
		return;
	opus_moe_experts_release(&L->ex);
	for (int m = 0; m < 3; m++)
		for (int e = 0; e <= OPUS_MOE_MAX_EXPERTS; e++)
			free(L->blobs[m][e]);
	free(L);
}

/* ---- batched vs reference ---- */

/*
 * Run N random tokens through L batched (n_threads) and by the reference;
 * returns true when the outputs are bit-identical.  Also checks the load
 * counters sum to N * n_used.
 */
static bool
batched_equals_ref(struct layer *L, int N, int n_threads, const char *what,
				   float logit_spread)
{
	const struct opus_moe_experts *ex = &L->ex;
	const struct opus_moe_experts *exs[1] = {ex};
	int64_t		E = ex->n_embd;
	float	   *x = malloc(sizeof(float) * (size_t) (N * E));
	float	   *logits = malloc(sizeof(float) * (size_t) (N * ex->n_expert));
	float	   *shl = malloc(sizeof(float) * (size_t) N);
	float	   *out_b = malloc(sizeof(float) * (size_t) (N * E));
	float	   *out_r = malloc(sizeof(float) * (size_t) (N * E));
	uint64_t	load[OPUS_MOE_MAX_EXPERTS] = {0};
	uint64_t	load_sum = 0;
	struct opus_moe_scratch *s = NULL;
	struct opus_pool *pool = NULL;
	struct opus_error err;
	bool		same;

	for (int64_t i = 0; i < N * E; i++)
	{
		x[i] = rng_f(1.0f);
		/* accumulate into a non-zero residual, as the forward pass does */
		out_b[i] = out_r[i] = rng_f(0.5f);
	}
	for (int64_t i = 0; i < (int64_t) N * ex->n_expert; i++)
		logits[i] = rng_f(logit_spread);
	for (int t = 0; t < N; t++)
		shl[t] = rng_f(2.0f);

	CHECK(opus_moe_scratch_create(exs, 1, N, &s, &err) == OPUS_OK, "%s: scratch: %s", what, err.msg);
	CHECK(opus_pool_create(n_threads, &pool, &err) == OPUS_OK, "pool");
	opus_moe_forward(pool, s, ex, x, E, logits, ex->n_expert, shl, N, out_b, E, true, load);
	CHECK(opus_moe_forward_ref(ex, x, E, logits, ex->n_expert, shl, N, out_r, E, true, &err) == OPUS_OK,
		  "%s: ref", what);
	same = memcmp(out_b, out_r, sizeof(float) * (size_t) (N * E)) == 0;
	if (!same)
	{
		double		maxd = 0;

		for (int64_t i = 0; i < N * E; i++)
			if (fabs(out_b[i] - out_r[i]) > maxd)
				maxd = fabs(out_b[i] - out_r[i]);
		fprintf(stderr, "%s: max abs diff %g\n", what, maxd);
	}
	CHECK(same, "%s: batched (N=%d, %d threads) == reference bit for bit", what, N, n_threads);
	for (int e = 0; e < ex->n_expert; e++)
		load_sum += load[e];
	CHECK(load_sum == (uint64_t) N * ex->n_used, "%s: load counters sum %llu", what,
		  (unsigned long long) load_sum);
	/* finite output */
	{
		bool		finite = true;

		for (int64_t i = 0; i < N * E; i++)
			finite = finite && isfinite(out_b[i]);
		CHECK(finite, "%s: finite output", what);
	}
	opus_pool_free(pool);
	opus_moe_scratch_free(s);
	free(x);
	free(logits);
	free(shl);
	free(out_b);
	free(out_r);
	return same;
}

static void
test_types(void)
{
	static const enum opus_qtype types[] = {
		OPUS_TYPE_F32, OPUS_TYPE_F16, OPUS_TYPE_BF16, OPUS_TYPE_Q8_0, OPUS_TYPE_Q4_0,
		OPUS_TYPE_Q4_1, OPUS_TYPE_Q5_0, OPUS_TYPE_Q5_1, OPUS_TYPE_Q4_K, OPUS_TYPE_Q5_K,
		OPUS_TYPE_Q6_K
	};
	static const int sizes[] = {1, 3, 16, 70};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
	{
		struct layer *L = make_layer(8, 2, 256, 512, &types[i], 1, true, false, 0);
		char		what[64];

		CHECK(L != NULL, "layer of %s", opus_qtype_info(types[i])->name);
		if (!L)
			continue;
		for (size_t j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++)
		{
			snprintf(what, sizeof(what), "%s stacked", opus_qtype_info(types[i])->name);
			batched_equals_ref(L, sizes[j], 1 + (int) (j % 3), what, 2.0f);
		}
		free_layer(L);
	}
}

/* qwen2moe-like: shared expert (gated, wider), norm off; per-expert mixed types. */
static void
test_shared_and_mixed(void)
{
	static const enum opus_qtype q8[] = {OPUS_TYPE_Q8_0};
	static const enum opus_qtype mixed[] = {OPUS_TYPE_Q4_K, OPUS_TYPE_Q8_0, OPUS_TYPE_F16,
	OPUS_TYPE_Q6_K};
	struct layer *L;

	L = make_layer(8, 4, 256, 256, q8, 1, true, true, 512);
	CHECK(L != NULL, "shared layer");
	if (L)
	{
		batched_equals_ref(L, 1, 1, "shared gated", 2.0f);
		batched_equals_ref(L, 20, 2, "shared gated", 2.0f);
		L->ex.shared_gated = false;
		batched_equals_ref(L, 9, 3, "shared ungated", 2.0f);
		free_layer(L);
	}

	/* per-expert tensors of different types: three activation slots */
	L = make_layer(6, 3, 256, 256, mixed, 4, false, false, 0);
	CHECK(L != NULL, "mixed layer");
	if (L)
	{
		CHECK(L->ex.n_in_types == 3, "3 input types (Q8_K, Q8_0, F16), got %d", L->ex.n_in_types);
		batched_equals_ref(L, 1, 1, "mixed per-expert", 2.0f);
		batched_equals_ref(L, 33, 3, "mixed per-expert", 2.0f);
		free_layer(L);
	}
}

/* gating variants: norm, scale, sigmoid */
static void
test_gating_variants(void)
{
	static const enum opus_qtype t[] = {OPUS_TYPE_Q4_K};
	struct layer *L = make_layer(16, 4, 256, 256, t, 1, true, false, 0);

	CHECK(L != NULL, "gating layer");
	if (!L)
		return;
	L->ex.norm_weights = true;
	batched_equals_ref(L, 12, 2, "norm", 3.0f);
	L->ex.weight_scale = 2.5f;
	batched_equals_ref(L, 12, 2, "norm+scale", 3.0f);
	L->ex.gating = OPUS_MOE_GATING_SIGMOID;
	batched_equals_ref(L, 12, 2, "sigmoid", 3.0f);
	free_layer(L);
}

/* ---- routing against an independent computation ---- */

static void
test_routing(void)
{
	static const enum opus_qtype t[] = {OPUS_TYPE_F32};
	struct layer *L = make_layer(8, 2, 256, 256, t, 1, true, false, 0);
	const struct opus_moe_experts *exs[1];
	struct opus_moe_scratch *s = NULL;
	struct opus_error err;
	int			N = 40;
	float		logits[40 * 8];
	bool		ok_sel = true,
				ok_w = true;

	if (!L)
	{
		CHECK(false, "routing layer");
		return;
	}
	exs[0] = &L->ex;
	for (int norm = 0; norm < 2; norm++)
	{
		L->ex.norm_weights = norm;
		for (int i = 0; i < N * 8; i++)
			logits[i] = rng_f(3.0f);
		CHECK(opus_moe_scratch_create(exs, 1, N, &s, &err) == OPUS_OK, "scratch");
		opus_moe_route(s, &L->ex, logits, 8, NULL, N, NULL);
		for (int tk = 0; tk < N; tk++)
		{
			const float *l = logits + tk * 8;
			double		p[8],
						mx = -1e30,
						sum = 0;
			int			b0 = 0,
						b1;
			double		w0,
						w1;

			for (int e = 0; e < 8; e++)
				mx = l[e] > mx ? l[e] : mx;
			for (int e = 0; e < 8; e++)
				sum += (p[e] = exp(l[e] - mx));
			for (int e = 0; e < 8; e++)
				p[e] /= sum;
			for (int e = 1; e < 8; e++)
				if (p[e] > p[b0])
					b0 = e;
			b1 = b0 == 0 ? 1 : 0;
			for (int e = 0; e < 8; e++)
				if (e != b0 && p[e] > p[b1])
					b1 = e;
			w0 = p[b0];
			w1 = p[b1];
			if (norm)
			{
				double		ws = w0 + w1;

				w0 /= ws;
				w1 /= ws;
			}
			ok_sel = ok_sel && opus_moe_choices(s, tk)[0] == b0 && opus_moe_choices(s, tk)[1] == b1;
			ok_w = ok_w && fabs(opus_moe_weights(s, tk)[0] - w0) < 1e-6 &&
				fabs(opus_moe_weights(s, tk)[1] - w1) < 1e-6;
		}
		CHECK(ok_sel, "top-2 choices in order (norm %d)", norm);
		CHECK(ok_w, "weights = softmax probabilities%s within 1e-6", norm ? " renormalised" : "");
		opus_moe_scratch_free(s);
		s = NULL;
	}
	free_layer(L);
}

/* ---- grouping edge cases ---- */

static void
test_grouping(void)
{
	static const enum opus_qtype t[] = {OPUS_TYPE_Q8_0};
	struct layer *L = make_layer(8, 2, 256, 256, t, 1, true, false, 0);
	const struct opus_moe_experts *exs[1];
	struct opus_moe_scratch *s = NULL;
	struct opus_error err;
	enum
	{
		N = 100
	};
	static float logits[N * 8];
	uint64_t	load[8] = {0};
	const struct opus_moe_step_stats *st;

	if (!L)
	{
		CHECK(false, "grouping layer");
		return;
	}
	exs[0] = &L->ex;
	CHECK(opus_moe_scratch_create(exs, 1, N, &s, &err) == OPUS_OK, "scratch");

	/* every token to experts 5 and 2: six experts idle, groups of 100 */
	for (int i = 0; i < N * 8; i++)
		logits[i] = rng_f(1.0f);
	for (int tk = 0; tk < N; tk++)
	{
		logits[tk * 8 + 5] = 20.0f;
		logits[tk * 8 + 2] = 10.0f;
	}
	opus_moe_route(s, &L->ex, logits, 8, NULL, N, load);
	st = opus_moe_last_stats(s);
	CHECK(st->n_active == 2, "two active experts, got %d", st->n_active);
	CHECK(load[5] == N && load[2] == N && load[0] == 0 && load[7] == 0,
		  "load counts all tokens on 5 and 2");
	CHECK(opus_moe_choices(s, 0)[0] == 5 && opus_moe_choices(s, 0)[1] == 2, "choice order 5, 2");
	CHECK(st->max_reads == 2, "100 tokens in one expert: weights streamed twice (64-token tiles), got %d",
		  st->max_reads);
	CHECK(st->weight_bytes == (int64_t) (2 * 2 * L->ex.expert_bytes), "bytes read %lld",
		  (long long) st->weight_bytes);
	opus_moe_scratch_free(s);
	s = NULL;

	/* and the same through the full dispatch, against the reference */
	{
		struct opus_pool *pool = NULL;
		float	   *x = malloc(sizeof(float) * N * 256);
		float	   *ob = calloc(N * 256, sizeof(float));
		float	   *orf = calloc(N * 256, sizeof(float));

		for (int i = 0; i < N * 256; i++)
			x[i] = rng_f(1.0f);
		opus_moe_scratch_create(exs, 1, N, &s, &err);
		opus_pool_create(2, &pool, &err);
		opus_moe_forward(pool, s, &L->ex, x, 256, logits, 8, NULL, N, ob, 256, false, NULL);
		opus_moe_forward_ref(&L->ex, x, 256, logits, 8, NULL, N, orf, 256, false, &err);
		CHECK(memcmp(ob, orf, sizeof(float) * N * 256) == 0, "all-to-two-experts batch == reference");

		/* a token's output does not depend on the batch: token 37 alone */
		memset(ob + 37 * 256, 0, sizeof(float) * 256);
		opus_moe_forward(pool, s, &L->ex, x + 37 * 256, 256, logits + 37 * 8, 8, NULL, 1,
						 ob + 37 * 256, 256, false, NULL);
		CHECK(memcmp(ob + 37 * 256, orf + 37 * 256, sizeof(float) * 256) == 0,
			  "token 37 alone == token 37 in a batch of 100");
		st = opus_moe_last_stats(s);
		CHECK(st->n_active == 2 && st->max_reads == 1 && st->n_pairs == 2, "N=1 stats");
		opus_pool_free(pool);
		opus_moe_scratch_free(s);
		free(x);
		free(ob);
		free(orf);
	}

	/* N = 1 with distinct experts; 16 tokens spread: each expert read once */
	{
		uint64_t	ld[8] = {0};
		uint64_t	sum = 0;

		opus_moe_scratch_create(exs, 1, 16, &s, &err);
		for (int i = 0; i < 16 * 8; i++)
			logits[i] = rng_f(2.0f);
		opus_moe_route(s, &L->ex, logits, 8, NULL, 16, ld);
		st = opus_moe_last_stats(s);
		for (int e = 0; e < 8; e++)
			sum += ld[e];
		CHECK(sum == 32 && st->n_pairs == 32, "16 tokens x top-2 = 32 pairs");
		CHECK(st->max_reads == 1, "batch of 16: no expert read more than once");
		CHECK(st->weight_bytes == (int64_t) st->n_active * (int64_t) L->ex.expert_bytes,
			  "bytes = active experts x expert bytes");
		opus_moe_scratch_free(s);
	}
	free_layer(L);
}

/* ---- bad descriptors ---- */

static void
test_errors(void)
{
	static uint8_t blob[4096];
	struct opus_moe_mat m[4];
	struct opus_error err;
	struct opus_moe_experts ex;

	CHECK(opus_moe_mats_stacked(m, 4, blob, sizeof(blob), OPUS_TYPE_F32, 32, 9, &err) != OPUS_OK,
		  "stack larger than its tensor (4 x 9 x 32 f32 > 4096 bytes) is refused");
	CHECK(opus_moe_mats_stacked(m, 4, blob, sizeof(blob), OPUS_TYPE_F32, 32, 8, &err) == OPUS_OK,
		  "4 x 8 x 32 f32 fits 4096 bytes exactly");
	CHECK(opus_moe_mats_stacked(m, 4, blob, sizeof(blob), OPUS_TYPE_F32, 32, 2, &err) == OPUS_OK,
		  "4 experts of 2 x 32 f32 fit 4096 bytes");
	CHECK(opus_moe_mat_set(m, blob, sizeof(blob), OPUS_TYPE_Q4_K, 100, 1, &err) != OPUS_OK,
		  "Q4_K rows of 100 are refused");
	CHECK(opus_moe_mat_set(m, blob, sizeof(blob), (enum opus_qtype) 4, 32, 1, &err) != OPUS_OK,
		  "removed type id refused");

	memset(&ex, 0, sizeof(ex));
	ex.n_expert = 4;
	ex.n_used = 5;
	ex.n_embd = 32;
	ex.weight_scale = 1.0f;
	ex.gate = ex.up = ex.down = m;
	CHECK(opus_moe_experts_finish(&ex, &err) == OPUS_ERR_FORMAT, "top-5 of 4 refused");
	ex.n_used = 2;
	opus_moe_mats_stacked(m, 4, blob, sizeof(blob), OPUS_TYPE_F32, 32, 2, &err);
	CHECK(opus_moe_experts_finish(&ex, &err) == OPUS_ERR_FORMAT,
		  "down of 2 x 32 where 32 x 2 expected refused: %s", err.msg);
	opus_moe_experts_release(&ex);
}

int
main(void)
{
	opus_qtype_init_cpu(false);
	test_types();
	test_shared_and_mixed();
	test_gating_variants();
	test_routing();
	test_grouping();
	test_errors();
	/* the reference kernels too */
	opus_qtype_init_cpu(true);
	{
		static const enum opus_qtype t[] = {OPUS_TYPE_Q4_K};
		struct layer *L = make_layer(8, 2, 256, 256, t, 1, true, false, 0);

		if (L)
			batched_equals_ref(L, 10, 2, "Q4_K ref kernels", 2.0f);
		free_layer(L);
	}
	return UNIT_DONE();
}
