/*
 * model_bert.c - the BERT-family encoders, as llama.cpp names their tensors
 * and metadata: sentence embeddings for all-MiniLM, bge-small, e5-small and
 * the like (general.architecture = bert) and nomic-embed-text (nomic-bert).
 *
 * The graph is llama.cpp's build_bert:
 *   x = LayerNorm(tok_embd[t] + token_types[0] + position_embd[p])
 *                                             (nomic-bert: no position_embd)
 *   per layer:
 *     q, k, v = x Wq + bq, x Wk + bk, x Wv + bv
 *                                             (attn_qkv: one fused matrix,
 *                                             its three row ranges; every
 *                                             bias optional)
 *     nomic-bert: q, k = RoPE(q), RoPE(k)     (NeoX halves, position p)
 *     a = softmax(q k^T / sqrt(head_dim)) v   per head, over the tokens of
 *                                             the same input only (no mask
 *                                             by position: bidirectional)
 *     x = LayerNorm(a Wo + bo + x)            (attn_output_norm)
 *     bert:       x = LayerNorm(GELU(x Wup + bup) Wdown + bdown + x)
 *     nomic-bert: x = LayerNorm((SiLU(x Wgate) * x Wup) Wdown + x)
 *                                             (layer_output_norm)
 *   pooled over the input's tokens (mean, first, last), L2-normalised on
 *   request.
 * LayerNorm as ggml_norm (sums in double), GELU as ggml's CPU table (the
 * tanh approximation over F16 inputs, cpu/forward_compat.c), SiLU as the
 * decoder's SwiGLU kernel, RoPE as the decoder's (model/forward.c),
 * products of F32 and F16 weights in the order of llama.cpp's batched CPU
 * matmul (cpu/gemm_float.h, activations in the weight's type), the others
 * with the weight type's vec_dot (activations converted to its
 * vec_dot_type; Q8_0 / Q8_1 ones by the decoder's quantizers, which round
 * as ggml's CPU backend does).
 *
 * Work is split by rows (matrix products, norms) or by (input, head) pairs
 * (attention); every value is computed by a fixed sequence of operations on
 * its own input's data, so an embedding does not depend on the other inputs
 * of the call, the packing into forward passes or the thread count.
 */
#include "model/model_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/forward_int.h"
#include "cpu/gemm_float.h"

struct opus_bert_layer
{
	struct opus_wmat wq,
				wk,
				wv,
				wo,
				w_up,
				w_down;
	struct opus_wmat w_gate;	/* nomic-bert: [n_ff][n_embd], else zeroed */
	float	   *bq,				/* biases: NULL when the file has none */
			   *bk,
			   *bv,
			   *bo,
			   *b_up,
			   *b_down;
	float	   *ln1_w,			/* attn_output_norm */
			   *ln1_b,
			   *ln2_w,			/* layer_output_norm */
			   *ln2_b;
};

struct opus_bert
{
	float	   *pos_embd;		/* [n_ctx_train][n_embd]; nomic-bert: NULL */
	float	   *rope_cos;		/* nomic-bert: [n_ctx_train][rope_dim / 2], else NULL */
	float	   *rope_sin;
	float	   *type0;			/* token_types row 0 [n_embd] (zeros if absent) */
	float	   *norm_w;			/* token_embd_norm */
	float	   *norm_b;
	struct opus_bert_layer *layers;
	float	   *owned;
};

/* ---- load ---- */

enum opus_status
opus_bert_read_hparams(const struct opus_gguf *g, struct opus_hparams *hp,
					   struct opus_error *err)
{
	char		key[128];
	enum opus_status st;
	int64_t		pool;
	bool		causal = false;

	hp->is_encoder = true;
	hp->rope_freq_base = 10000.0f;	/* bert: unused */
	if (hp->arch == OPUS_ARCH_NOMIC_BERT)
	{
		snprintf(key, sizeof(key), "%s.rope.freq_base", hp->arch_name);
		st = opus_gguf_get_f32(g, key, &hp->rope_freq_base, err);
		if (st != OPUS_OK && st != OPUS_ERR_NOT_FOUND)
			return st;
		if (st == OPUS_ERR_NOT_FOUND)
			hp->rope_freq_base = 10000.0f;
		if (!(hp->rope_freq_base > 0.0f) || !isfinite(hp->rope_freq_base))
			return opus_error_set(err, OPUS_ERR_FORMAT, "rope base must be positive");
	}
	snprintf(key, sizeof(key), "%s.attention.layer_norm_epsilon", hp->arch_name);
	st = opus_gguf_get_f32(g, key, &hp->norm_eps, err);
	if (st == OPUS_ERR_NOT_FOUND)
		return opus_error_set(err, OPUS_ERR_FORMAT, "missing model metadata key \"%s\"", key);
	if (st != OPUS_OK)
		return st;
	if (!(hp->norm_eps > 0.0f) || !isfinite(hp->norm_eps))
		return opus_error_set(err, OPUS_ERR_FORMAT, "layer norm epsilon must be positive");
	snprintf(key, sizeof(key), "%s.attention.causal", hp->arch_name);
	st = opus_gguf_get_bool(g, key, &causal, err);
	if (st != OPUS_OK && st != OPUS_ERR_NOT_FOUND)
		return st;
	if (st == OPUS_OK && causal)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "a causal %s encoder is not supported", hp->arch_name);
	/* llama.cpp's converter always writes the pooling; absent: mean */
	snprintf(key, sizeof(key), "%s.pooling_type", hp->arch_name);
	st = opus_gguf_get_i64(g, key, &pool, err);
	if (st == OPUS_ERR_NOT_FOUND)
		pool = OPUS_POOLING_MEAN;
	else if (st != OPUS_OK)
		return st;
	if (pool != OPUS_POOLING_MEAN && pool != OPUS_POOLING_CLS && pool != OPUS_POOLING_LAST)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "pooling type %lld is not supported (mean, cls and last are)",
							  (long long) pool);
	hp->pooling = (int32_t) pool;
	if (hp->n_head_kv != hp->n_head)
		return opus_error_set(err, OPUS_ERR_FORMAT, "a %s encoder has as many kv heads as heads",
							  hp->arch_name);
	if ((int64_t) hp->n_head * hp->head_dim != hp->n_embd)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "head count times head size must be the embedding length");
	return OPUS_OK;
}

/* A 2-D tensor [rows][n] (rows >= min_rows) into f32; the first `take` rows. */
static enum opus_status
load_rows(const struct opus_gguf *g, const char *name, int64_t n, int64_t min_rows,
		  int64_t take, float *dst, struct opus_error *err)
{
	const struct opus_gguf_tensor *t = opus_gguf_find_tensor(g, name);
	const struct opus_qtype_info *qi;
	size_t		row;

	if (!t)
		return opus_error_set(err, OPUS_ERR_FORMAT, "missing tensor \"%s\"", name);
	if (t->ne[0] != n || t->ne[1] < min_rows || t->ne[2] != 1 || t->ne[3] != 1)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "tensor \"%s\" has shape [%lld, %lld], expected [%lld, >= %lld]",
							  name, (long long) t->ne[0], (long long) t->ne[1],
							  (long long) n, (long long) min_rows);
	qi = opus_qtype_info(t->type);
	if (!qi || !qi->supported || !qi->to_float ||
		!opus_qtype_row_size(t->type, n, &row) || row * (size_t) t->ne[1] != t->nbytes)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "unsupported tensor type %s for tensor \"%s\"",
							  qi ? qi->name : "unknown", name);
	for (int64_t r = 0; r < take; r++)
	{
		qi->to_float((const uint8_t *) t->data + (size_t) r * row, dst + r * n, n);
		for (int64_t i = 0; i < n; i++)
			if (!isfinite(dst[r * n + i]))
				return opus_error_set(err, OPUS_ERR_FORMAT,
									  "tensor \"%s\" holds a non-finite value", name);
	}
	return OPUS_OK;
}

/*
 * Row range [r0, r0 + n_out) of a fused matrix as a matrix of its own (the
 * rows of attn_qkv): the same bytes, so the same products.
 */
static struct opus_wmat
row_range(const struct opus_wmat *w, int64_t r0, int64_t n_out)
{
	struct opus_wmat v = *w;

	v.data = w->data + (size_t) r0 * w->row_bytes;
	v.n_out = n_out;
	return v;
}

/* An optional bias vector of n into *fp's next n floats; NULL when absent. */
static enum opus_status
load_bias(const struct opus_gguf *g, const char *name, int64_t n, float **dst,
		  float **fp, struct opus_error *err)
{
	bool		found;
	enum opus_status st = opus_load_vector(g, name, n, false, *fp, &found, err);

	if (st != OPUS_OK)
		return st;
	*dst = found ? *fp : NULL;
	if (found)
		*fp += n;
	return OPUS_OK;
}

enum opus_status
opus_bert_load(struct opus_model *m, struct opus_error *err)
{
	const struct opus_hparams *hp = &m->hp;
	const struct opus_gguf *g = m->gguf;
	bool		nomic = hp->arch == OPUS_ARCH_NOMIC_BERT;
	struct opus_bert *b;
	int64_t		E = hp->n_embd,
				F = hp->n_ff,
				half = hp->rope_dim / 2,
				n_floats;
	float	   *fp;
	char		name[96];
	enum opus_status st;
	bool		found;

	b = calloc(1, sizeof(*b));
	if (!b)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory loading model");
	m->bert = b;
	/* positions (or RoPE tables), type row, embedding norm, 10 vectors per layer */
	n_floats = (nomic ? 2 * (int64_t) hp->n_ctx_train * half : (int64_t) hp->n_ctx_train * E) +
		3 * E + (int64_t) hp->n_layer * (9 * E + F);
	b->owned = calloc((size_t) n_floats, sizeof(float));
	b->layers = calloc(hp->n_layer, sizeof(*b->layers));
	if (!b->owned || !b->layers)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory loading model");
	fp = b->owned;
	if (nomic)
	{
		b->rope_cos = fp;
		fp += (int64_t) hp->n_ctx_train * half;
		b->rope_sin = fp;
		fp += (int64_t) hp->n_ctx_train * half;
		for (int p = 0; p < hp->n_ctx_train; p++)
			opus_rope_table(m, p, hp->rope_freq_base, hp->rope_freq_scale,
							b->rope_cos + p * half, b->rope_sin + p * half);
	}
	else
	{
		b->pos_embd = fp;
		fp += (int64_t) hp->n_ctx_train * E;
		if ((st = load_rows(g, "position_embd.weight", E, hp->n_ctx_train, hp->n_ctx_train,
							b->pos_embd, err)))
			return st;
	}
	b->type0 = fp;
	fp += E;
	b->norm_w = fp;
	fp += E;
	b->norm_b = fp;
	fp += E;
	/* token types are optional (llama.cpp adds row 0 when present) */
	if ((opus_gguf_find_tensor(g, "token_types.weight") &&
		 (st = load_rows(g, "token_types.weight", E, 1, 1, b->type0, err))) ||
		(st = opus_load_vector(g, "token_embd_norm.weight", E, true, b->norm_w, &found, err)) ||
		(st = opus_load_vector(g, "token_embd_norm.bias", E, true, b->norm_b, &found, err)))
		return st;

	for (int il = 0; il < hp->n_layer; il++)
	{
		struct opus_bert_layer *L = &b->layers[il];
		float	  **norms[] = {&L->ln1_w, &L->ln1_b, &L->ln2_w, &L->ln2_b};
		const char *nname[] = {"attn_output_norm.weight", "attn_output_norm.bias",
		"layer_output_norm.weight", "layer_output_norm.bias"};
		struct opus_wmat qkv;

#define TN(suffix) (snprintf(name, sizeof(name), "blk.%d.%s", il, suffix), name)
		if ((st = opus_find_matrix(g, TN("attn_qkv.weight"), E, 3 * E, false, &qkv, err)))
			return st;
		if (qkv.data)
		{
			float	   *bqkv = NULL;

			L->wq = row_range(&qkv, 0, E);
			L->wk = row_range(&qkv, E, E);
			L->wv = row_range(&qkv, 2 * E, E);
			if ((st = load_bias(g, TN("attn_qkv.bias"), 3 * E, &bqkv, &fp, err)))
				return st;
			if (bqkv)
			{
				L->bq = bqkv;
				L->bk = bqkv + E;
				L->bv = bqkv + 2 * E;
			}
		}
		else if ((st = opus_find_matrix(g, TN("attn_q.weight"), E, E, true, &L->wq, err)) ||
				 (st = opus_find_matrix(g, TN("attn_k.weight"), E, E, true, &L->wk, err)) ||
				 (st = opus_find_matrix(g, TN("attn_v.weight"), E, E, true, &L->wv, err)) ||
				 (st = load_bias(g, TN("attn_q.bias"), E, &L->bq, &fp, err)) ||
				 (st = load_bias(g, TN("attn_k.bias"), E, &L->bk, &fp, err)) ||
				 (st = load_bias(g, TN("attn_v.bias"), E, &L->bv, &fp, err)))
			return st;
		if ((st = opus_find_matrix(g, TN("attn_output.weight"), E, E, true, &L->wo, err)) ||
			(st = opus_find_matrix(g, TN("ffn_up.weight"), E, F, true, &L->w_up, err)) ||
			(nomic && (st = opus_find_matrix(g, TN("ffn_gate.weight"), E, F, true, &L->w_gate, err))) ||
			(st = opus_find_matrix(g, TN("ffn_down.weight"), F, E, true, &L->w_down, err)) ||
			(st = load_bias(g, TN("attn_output.bias"), E, &L->bo, &fp, err)) ||
			(st = load_bias(g, TN("ffn_up.bias"), F, &L->b_up, &fp, err)) ||
			(st = load_bias(g, TN("ffn_down.bias"), E, &L->b_down, &fp, err)))
			return st;
		for (int i = 0; i < 4; i++)
		{
			*norms[i] = fp;
			fp += E;
			if ((st = opus_load_vector(g, TN(nname[i]), E, true, *norms[i], &found, err)))
				return st;
		}
#undef TN
	}
	return OPUS_OK;
}

void
opus_bert_free(struct opus_bert *b)
{
	if (!b)
		return;
	free(b->layers);
	free(b->owned);
	free(b);
}

/* ---- run state ---- */

enum phase
{
	PH_EMBED,					/* rows: embeddings + LayerNorm into x */
	PH_QUANT,					/* rows: src -> act (vec_dot_type) */
	PH_MATMUL,					/* chunks of output rows of jobs[] */
	PH_ATTEND,					/* (input, head) pairs */
	PH_ADDNORM,					/* rows: x = LayerNorm(y + x) */
	PH_SWIGLU,					/* rows: h = SiLU(g) * h */
	PH_POOL,					/* inputs */
};

#define MM_CHUNK 16				/* output rows a thread claims */
#define MM_TOKENS 48			/* tokens of a chunk computed at once */
#define ATT_QB 64				/* attention: query rows scored at once */
#define MAX_JOBS 3

struct mm_job
{
	const struct opus_wmat *w;
	const float *bias;
	float	   *dst;			/* [T][w->n_out] */
	bool		gelu;
};

struct opus_encoder
{
	const struct opus_model *m;
	const struct opus_bert *b;
	struct opus_pool *pool;
	int			max_tokens;
	/* scratch, [max_tokens][...] */
	float	   *x,
			   *q,
			   *k,
			   *v,
			   *att,
			   *y,
			   *h,
			   *g;				/* nomic-bert: the gate's output [max_tokens][n_ff], else NULL */
	uint8_t    *act;			/* activations in a vec_dot_type */
	float	   *scores;			/* [n_threads][att_scratch]: attend_one's */
	size_t		att_scratch;	/* floats: ATT_QB * n_ctx_train + head_dim * n_ctx_train */
	opus_swiglu_fn swiglu;		/* the decoder's SwiGLU kernel (llama.cpp's arithmetic) */
	opus_act_quant_fn act_q8_0;	/* Q8_0 / Q8_1 activations as ggml's CPU quantizes them */
	opus_act_quant_fn act_q8_1;
	opus_gemm_fn gemm_f32;		/* F32 / F16 weights: llama.cpp's batched order */
	opus_gemm_fn gemm_f16;
	opus_gelu_fn gelu;			/* ggml's CPU gelu (its F16 table) */

	/* the current pass */
	enum phase	phase;
	struct opus_pool_counter ctr;
	const struct opus_embed_item *items;
	int			n_items;
	const int32_t *start;		/* first token row of each item */
	int			T;				/* token rows */
	int			layer;
	const float *src;			/* PH_QUANT */
	int64_t		src_n;
	enum opus_qtype act_type;
	size_t		act_row;
	const uint8_t *actp;		/* the activations a matmul reads: act, or src when F32 */
	struct mm_job jobs[MAX_JOBS];
	int			n_jobs;
	const float *ln_w,
			   *ln_b;
	bool		normalize;
};

static void
layer_norm(float *y, const float *x, const float *w, const float *b, int n, float eps)
{
	double		sum = 0.0,
				sum2 = 0.0;
	float		mean,
				scale;

	for (int i = 0; i < n; i++)
		sum += (double) x[i];
	mean = (float) (sum / n);
	for (int i = 0; i < n; i++)
	{
		float		d = x[i] - mean;

		y[i] = d;
		sum2 += (double) (d * d);
	}
	scale = 1.0f / sqrtf((float) (sum2 / n) + eps);
	for (int i = 0; i < n; i++)
		y[i] = y[i] * scale * w[i] + b[i];
}

static inline int
claim(struct opus_encoder *e)
{
	return atomic_fetch_add_explicit(&e->ctr.next, 1, memory_order_relaxed);
}

/* Row t's item and position (items are packed in order). */
static int
row_pos(const struct opus_encoder *e, int t, int *item)
{
	int			lo = 0,
				hi = e->n_items - 1;

	while (lo < hi)
	{
		int			mid = (lo + hi + 1) / 2;

		if (e->start[mid] <= t)
			lo = mid;
		else
			hi = mid - 1;
	}
	*item = lo;
	return t - e->start[lo];
}

/*
 * Attention of one (input, head) pair, as llama.cpp's graph computes it
 * without flash attention: scores S = K Q^T (per query row, over the
 * input's keys), softmax(S * scale) per row, out = P V, both products in
 * llama.cpp's batched order (e->gemm_f32).  Queries go ATT_QB at a time;
 * scratch holds ATT_QB * n_ctx_train scores and the head's V transposed,
 * [head_dim][n].
 */
static void
attend_one(struct opus_encoder *e, int it, int head, float *scratch)
{
	const struct opus_hparams *hp = &e->m->hp;
	int			E = hp->n_embd,
				hd = hp->head_dim,
				n = e->items[it].n_tokens,
				t0 = e->start[it];
	float		scale = 1.0f / sqrtf((float) hd);
	const struct opus_bert *b = e->b;
	float	   *vt = scratch + (size_t) ATT_QB * hp->n_ctx_train;
	const float *k = e->k + (size_t) t0 * E + head * hd;

	/* nomic-bert: this (input, head) pair owns these q and k slices: rope them */
	if (b->rope_cos)
	{
		int			half = hp->rope_dim / 2;

		for (int i = 0; i < n; i++)
		{
			opus_rope_apply(e->q + (size_t) (t0 + i) * E + head * hd, 1, hd, hp->rope_dim, true,
							b->rope_cos + (size_t) i * half, b->rope_sin + (size_t) i * half);
			opus_rope_apply(e->k + (size_t) (t0 + i) * E + head * hd, 1, hd, hp->rope_dim, true,
							b->rope_cos + (size_t) i * half, b->rope_sin + (size_t) i * half);
		}
	}
	for (int j = 0; j < n; j++)
	{
		const float *vj = e->v + (size_t) (t0 + j) * E + head * hd;

		for (int d = 0; d < hd; d++)
			vt[(size_t) d * n + j] = vj[d];
	}
	for (int i0 = 0; i0 < n; i0 += ATT_QB)
	{
		int			ni = n - i0 < ATT_QB ? n - i0 : ATT_QB;

		e->gemm_f32(hd, n, k, sizeof(float) * E, ni, e->q + (size_t) (t0 + i0) * E + head * hd,
					sizeof(float) * E, scratch, n);
		for (int i = 0; i < ni; i++)
		{
			float	   *s = scratch + (size_t) i * n;
			float		mx = -INFINITY;
			double		sum = 0.0;
			float		inv;

			for (int j = 0; j < n; j++)
			{
				s[j] = s[j] * scale;
				if (s[j] > mx)
					mx = s[j];
			}
			for (int j = 0; j < n; j++)
			{
				s[j] = expf(s[j] - mx);
				sum += (double) s[j];
			}
			inv = (float) (1.0 / sum);
			for (int j = 0; j < n; j++)
				s[j] = s[j] * inv;
		}
		e->gemm_f32(n, hd, vt, sizeof(float) * n, ni, scratch, sizeof(float) * n,
					e->att + (size_t) (t0 + i0) * E + head * hd, E);
	}
}

static void
pool_one(struct opus_encoder *e, int it)
{
	const struct opus_hparams *hp = &e->m->hp;
	int			E = hp->n_embd,
				n = e->items[it].n_tokens;
	const float *x = e->x + (size_t) e->start[it] * E;
	float	   *out = e->items[it].out;

	if (hp->pooling == OPUS_POOLING_MEAN)
	{
		float		w = 1.0f / (float) n;

		for (int i = 0; i < E; i++)
		{
			float		s = 0.0f;

			for (int t = 0; t < n; t++)
				s += x[(size_t) t * E + i] * w;
			out[i] = s;
		}
	}
	else
		memcpy(out, x + (hp->pooling == OPUS_POOLING_LAST ? (size_t) (n - 1) * E : 0),
			   sizeof(float) * E);
	if (e->normalize)
	{
		double		sum = 0.0;
		float		f;

		for (int i = 0; i < E; i++)
			sum += (double) out[i] * out[i];
		f = sum > 0.0 ? (float) (1.0 / sqrt(sum)) : 0.0f;
		for (int i = 0; i < E; i++)
			out[i] *= f;
	}
}

static void
worker(void *arg, int ith, int nth)
{
	struct opus_encoder *e = arg;
	const struct opus_hparams *hp = &e->m->hp;
	const struct opus_bert *b = e->b;
	int			E = hp->n_embd;
	int			u;

	(void) nth;
	switch (e->phase)
	{
		case PH_EMBED:
			while ((u = claim(e)) < e->T)
			{
				int			it,
							p = row_pos(e, u, &it);
				float	   *x = e->x + (size_t) u * E;
				float	   *row = e->y + (size_t) u * E;
				const struct opus_wmat *te = &e->m->tok_embd;

				te->qi->to_float(te->data + (size_t) e->items[it].tokens[p] * te->row_bytes,
								 row, E);
				if (b->pos_embd)
					for (int i = 0; i < E; i++)
						row[i] = b->pos_embd[(size_t) p * E + i] + (row[i] + b->type0[i]);
				else
					for (int i = 0; i < E; i++)
						row[i] = row[i] + b->type0[i];
				layer_norm(x, row, b->norm_w, b->norm_b, E, hp->norm_eps);
			}
			break;
		case PH_QUANT:
			{
				const struct opus_qtype_info *vqi = opus_qtype_info(e->act_type);
				opus_act_quant_fn q = e->act_type == OPUS_TYPE_Q8_0 ? e->act_q8_0 :
					e->act_type == OPUS_TYPE_Q8_1 ? e->act_q8_1 : NULL;

				while ((u = claim(e)) < e->T)
				{
					if (q)
						q(e->src + (size_t) u * e->src_n, e->act + (size_t) u * e->act_row, e->src_n);
					else
						vqi->from_float(e->src + (size_t) u * e->src_n,
										e->act + (size_t) u * e->act_row, e->src_n);
				}
			}
			break;
		case PH_MATMUL:
			for (;;)
			{
				int			c = claim(e),
							j = 0;
				const struct mm_job *job;
				int64_t		r0,
							nr;

				while (j < e->n_jobs && c >= (e->jobs[j].w->n_out + MM_CHUNK - 1) / MM_CHUNK)
				{
					c -= (int) ((e->jobs[j].w->n_out + MM_CHUNK - 1) / MM_CHUNK);
					j++;
				}
				if (j == e->n_jobs)
					break;
				job = &e->jobs[j];
				r0 = (int64_t) c * MM_CHUNK;
				nr = job->w->n_out - r0 < MM_CHUNK ? job->w->n_out - r0 : MM_CHUNK;
				/* blocks of MM_TOKENS tokens: bias and GELU while the block is in L1 */
				for (int t0 = 0; t0 < e->T; t0 += MM_TOKENS)
				{
					int			nt = e->T - t0 < MM_TOKENS ? e->T - t0 : MM_TOKENS;
					const uint8_t *wr = job->w->data + (size_t) r0 * job->w->row_bytes;
					const uint8_t *xt = e->actp + (size_t) t0 * e->act_row;
					float	   *dt = job->dst + (size_t) t0 * job->w->n_out + r0;

					if (job->w->type == OPUS_TYPE_F32 || job->w->type == OPUS_TYPE_F16)
						(job->w->type == OPUS_TYPE_F32 ? e->gemm_f32 : e->gemm_f16)
							(job->w->n_in, (int) nr, wr, job->w->row_bytes, nt, xt, e->act_row,
							 dt, job->w->n_out);
					else
						opus_vec_dot_tile(job->w->qi->vec_dot, job->w->n_in, (int) nr, wr,
										  job->w->row_bytes, nt, xt, e->act_row, dt,
										  (int) job->w->n_out);
					for (int t = 0; t < nt; t++)
					{
						float	   *d = dt + (size_t) t * job->w->n_out;

						if (job->bias)
							for (int64_t r = 0; r < nr; r++)
								d[r] = d[r] + job->bias[r0 + r];
						if (job->gelu)
							e->gelu(d, nr);
					}
				}
			}
			break;
		case PH_ATTEND:
			while ((u = claim(e)) < e->n_items * hp->n_head)
				attend_one(e, u / hp->n_head, u % hp->n_head,
						   e->scores + (size_t) ith * e->att_scratch);
			break;
		case PH_ADDNORM:
			while ((u = claim(e)) < e->T)
			{
				float	   *x = e->x + (size_t) u * E;
				float	   *y = e->y + (size_t) u * E;

				for (int i = 0; i < E; i++)
					y[i] = y[i] + x[i];
				layer_norm(x, y, e->ln_w, e->ln_b, E, hp->norm_eps);
			}
			break;
		case PH_SWIGLU:
			while ((u = claim(e)) < e->T)
			{
				float	   *h = e->h + (size_t) u * hp->n_ff;

				e->swiglu(h, e->g + (size_t) u * hp->n_ff, h, 0, hp->n_ff, hp->n_ff);
			}
			break;
		case PH_POOL:
			while ((u = claim(e)) < e->n_items)
				pool_one(e, u);
			break;
	}
}

static void
run(struct opus_encoder *e, enum phase ph)
{
	e->phase = ph;
	atomic_store_explicit(&e->ctr.next, 0, memory_order_relaxed);
	opus_pool_run(e->pool, worker, e);
}

/*
 * Convert src ([T][n] f32) to w's activation type into e->act (F32: read
 * src itself); e->actp points to the result.
 */
static void
quantize(struct opus_encoder *e, const float *src, const struct opus_wmat *w)
{
	e->src = src;
	e->src_n = w->n_in;
	e->act_type = w->qi->vec_dot_type;
	(void) opus_qtype_row_size(e->act_type, w->n_in, &e->act_row);
	if (e->act_type == OPUS_TYPE_F32)
	{
		e->actp = (const uint8_t *) src;
		return;
	}
	e->actp = e->act;
	run(e, PH_QUANT);
}

static void
matmul(struct opus_encoder *e, int n_jobs)
{
	e->n_jobs = n_jobs;
	run(e, PH_MATMUL);
}

/* One forward pass over items whose tokens fit max_tokens. */
static void
encode_pass(struct opus_encoder *e, const struct opus_embed_item *items, int n_items,
			int32_t *start)
{
	const struct opus_hparams *hp = &e->m->hp;
	int			T = 0;

	for (int i = 0; i < n_items; i++)
	{
		start[i] = T;
		T += items[i].n_tokens;
	}
	e->items = items;
	e->n_items = n_items;
	e->start = start;
	e->T = T;
	run(e, PH_EMBED);
	for (int il = 0; il < hp->n_layer; il++)
	{
		const struct opus_bert_layer *L = &e->b->layers[il];

		/* the three projections share one activation type when their weights do */
		quantize(e, e->x, &L->wq);
		e->jobs[0] = (struct mm_job) {&L->wq, L->bq, e->q, false};
		if (L->wk.qi->vec_dot_type == L->wq.qi->vec_dot_type &&
			L->wv.qi->vec_dot_type == L->wq.qi->vec_dot_type)
		{
			e->jobs[1] = (struct mm_job) {&L->wk, L->bk, e->k, false};
			e->jobs[2] = (struct mm_job) {&L->wv, L->bv, e->v, false};
			matmul(e, 3);
		}
		else
		{
			matmul(e, 1);
			quantize(e, e->x, &L->wk);
			e->jobs[0] = (struct mm_job) {&L->wk, L->bk, e->k, false};
			matmul(e, 1);
			quantize(e, e->x, &L->wv);
			e->jobs[0] = (struct mm_job) {&L->wv, L->bv, e->v, false};
			matmul(e, 1);
		}
		run(e, PH_ATTEND);
		quantize(e, e->att, &L->wo);
		e->jobs[0] = (struct mm_job) {&L->wo, L->bo, e->y, false};
		matmul(e, 1);
		e->ln_w = L->ln1_w;
		e->ln_b = L->ln1_b;
		run(e, PH_ADDNORM);
		quantize(e, e->x, &L->w_up);
		if (!L->w_gate.data)
		{
			e->jobs[0] = (struct mm_job) {&L->w_up, L->b_up, e->h, true};
			matmul(e, 1);
		}
		else
		{
			/* nomic-bert: h = SiLU(x Wgate) * (x Wup) */
			e->jobs[0] = (struct mm_job) {&L->w_up, L->b_up, e->h, false};
			if (L->w_gate.qi->vec_dot_type == L->w_up.qi->vec_dot_type)
			{
				e->jobs[1] = (struct mm_job) {&L->w_gate, NULL, e->g, false};
				matmul(e, 2);
			}
			else
			{
				matmul(e, 1);
				quantize(e, e->x, &L->w_gate);
				e->jobs[0] = (struct mm_job) {&L->w_gate, NULL, e->g, false};
				matmul(e, 1);
			}
			run(e, PH_SWIGLU);
		}
		quantize(e, e->h, &L->w_down);
		e->jobs[0] = (struct mm_job) {&L->w_down, L->b_down, e->y, false};
		matmul(e, 1);
		e->ln_w = L->ln2_w;
		e->ln_b = L->ln2_b;
		run(e, PH_ADDNORM);
	}
	run(e, PH_POOL);
}

static size_t
max_act_row(const struct opus_bert *b, int n_layer)
{
	size_t		mx = 0;

	for (int il = 0; il < n_layer; il++)
	{
		const struct opus_bert_layer *L = &b->layers[il];
		const struct opus_wmat *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_up, &L->w_down,
		&L->w_gate};

		for (int i = 0; i < 7; i++)
		{
			size_t		r = 0;

			if (ws[i]->data && opus_qtype_row_size(ws[i]->qi->vec_dot_type, ws[i]->n_in, &r) && r > mx)
				mx = r;
		}
	}
	return mx;
}

enum opus_status
opus_encoder_create(const struct opus_model *m, int n_threads, int max_batch_tokens,
					struct opus_encoder **out, struct opus_error *err)
{
	const struct opus_hparams *hp = &m->hp;
	struct opus_encoder *e;
	enum opus_status st;
	size_t		T,
				E = (size_t) hp->n_embd;

	*out = NULL;
	if (!hp->is_encoder || !m->bert)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "\"%s\" is not an embedding model", hp->name);
	if (n_threads < 1 || n_threads > OPUS_MAX_THREADS)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "thread count %d out of range 1..%d", n_threads, OPUS_MAX_THREADS);
	if (max_batch_tokens < hp->n_ctx_train)
		max_batch_tokens = hp->n_ctx_train;
	if (max_batch_tokens > (1 << 20))
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "max batch tokens %d out of range", max_batch_tokens);
	e = calloc(1, sizeof(*e));
	if (!e)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory creating an encoder");
	e->m = m;
	e->b = m->bert;
	e->max_tokens = max_batch_tokens;
	T = (size_t) max_batch_tokens;
	e->x = malloc(T * E * sizeof(float));
	e->q = malloc(T * E * sizeof(float));
	e->k = malloc(T * E * sizeof(float));
	e->v = malloc(T * E * sizeof(float));
	e->att = malloc(T * E * sizeof(float));
	e->y = malloc(T * E * sizeof(float));
	e->h = malloc(T * (size_t) hp->n_ff * sizeof(float));
	if (e->b->layers[0].w_gate.data)
	{
		e->g = malloc(T * (size_t) hp->n_ff * sizeof(float));
		if (!e->g)
		{
			opus_encoder_free(e);
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory creating an encoder");
		}
	}
	if (strcmp(opus_qtype_cpu_variant(), "avx2") == 0)
	{
		e->swiglu = opus_fwd_swiglu_avx2;
		e->act_q8_0 = opus_act_q8_0_avx2;
		e->act_q8_1 = opus_act_q8_1_avx2;
		e->gemm_f32 = opus_gemm_f32_avx2;
		e->gemm_f16 = opus_gemm_f16_avx2;
		e->gelu = opus_fwd_gelu_avx2;
	}
	else
	{
		e->swiglu = opus_fwd_swiglu_ref;
		e->act_q8_0 = opus_act_q8_0_ref;
		e->act_q8_1 = opus_act_q8_1_ref;
		e->gemm_f32 = opus_gemm_f32_ref;
		e->gemm_f16 = opus_gemm_f16_ref;
		e->gelu = opus_fwd_gelu_ref;
	}
	e->act = malloc(T * max_act_row(e->b, hp->n_layer));
	e->att_scratch = (size_t) (ATT_QB + hp->head_dim) * (size_t) hp->n_ctx_train;
	e->scores = malloc((size_t) n_threads * e->att_scratch * sizeof(float));
	if (!e->x || !e->q || !e->k || !e->v || !e->att || !e->y || !e->h || !e->act || !e->scores)
	{
		opus_encoder_free(e);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory creating an encoder");
	}
	if ((st = opus_pool_create(n_threads, &e->pool, err)) != OPUS_OK)
	{
		opus_encoder_free(e);
		return st;
	}
	*out = e;
	return OPUS_OK;
}

void
opus_encoder_free(struct opus_encoder *e)
{
	if (!e)
		return;
	if (e->pool)
		opus_pool_free(e->pool);
	free(e->x);
	free(e->q);
	free(e->k);
	free(e->v);
	free(e->att);
	free(e->y);
	free(e->h);
	free(e->g);
	free(e->act);
	free(e->scores);
	free(e);
}

enum opus_status
opus_encode(struct opus_encoder *e, const struct opus_embed_item *items, int n_items,
			bool normalize, struct opus_error *err)
{
	const struct opus_hparams *hp = &e->m->hp;
	int32_t    *start;
	int			i0 = 0;

	if (n_items < 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "negative input count");
	for (int i = 0; i < n_items; i++)
	{
		if (items[i].n_tokens < 1 || items[i].n_tokens > hp->n_ctx_train)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "input %d has %d tokens, the model takes 1 to %d",
								  i, items[i].n_tokens, hp->n_ctx_train);
		if (!items[i].tokens || !items[i].out)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG, "input %d has no tokens or output", i);
		for (int j = 0; j < items[i].n_tokens; j++)
			if (items[i].tokens[j] < 0 || items[i].tokens[j] >= hp->n_vocab)
				return opus_error_set(err, OPUS_ERR_INVALID_ARG,
									  "input %d: token id %d out of the vocabulary",
									  i, items[i].tokens[j]);
	}
	start = malloc(sizeof(int32_t) * (size_t) (n_items > 0 ? n_items : 1));
	if (!start)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory encoding");
	e->normalize = normalize;
	while (i0 < n_items)
	{
		int			i1 = i0,
					T = 0;

		while (i1 < n_items && T + items[i1].n_tokens <= e->max_tokens)
			T += items[i1++].n_tokens;
		encode_pass(e, items + i0, i1 - i0, start);
		i0 = i1;
	}
	free(start);
	return OPUS_OK;
}
