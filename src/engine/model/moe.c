/*
 * moe.c - mixture-of-experts routing and batched expert dispatch (see moe.h
 * for the contract and the order of the steps).
 *
 * Layout of one routed step (all in the scratch, sized at creation):
 *
 *   xq[slot][t]        token t's input row quantized to gate/up vec_dot types
 *   sel[t][k], wt[t][k] token t's k-th choice and its weight; k = n_used is
 *                      the shared expert when there is one
 *   offset[e]..offset[e+1]  the sorted positions of expert e's pairs
 *   pair_tok[p], pair_exp[p] token and expert of sorted position p
 *   pos_of[t][k]       sorted position of (t, k)
 *   h[p]               SiLU(gate) * up of pair p ([n_ff] floats)
 *   hq[p]              h[p] quantized for the down weights
 *   y[p]               down output of pair p ([n_embd] floats)
 *
 * Work units (claimed from an atomic counter): active experts in ascending
 * id, then row tiles of MOE_ROW_TILE rows, then token tiles of MOE_TOK_TILE
 * pairs; a unit reads its rows once and applies each to every pair of its
 * token tile, so in a step an expert's weights are streamed once per token
 * tile.
 */
#include "model/moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MOE_ROW_TILE 16			/* weight rows per unit */
#define MOE_TOK_TILE 64			/* pairs per unit */

struct opus_moe_scratch
{
	int			max_tok;
	int			max_k;			/* choices per token incl. the shared expert */
	int			max_buckets;	/* experts incl. the shared one */
	int64_t		n_embd;
	int			n_slots;

	uint8_t    *xq[OPUS_MOE_MAX_SLOTS];	/* [max_tok][xq_stride] */
	size_t		xq_stride;

	/* routing of the current step */
	int			n_tok;
	int			k_tot;			/* n_used + has_shared */
	int32_t    *sel;			/* [max_tok][max_k] */
	float	   *wt;				/* [max_tok][max_k] */
	int32_t    *count;			/* [max_buckets] */
	int32_t    *offset;			/* [max_buckets + 1] */
	int32_t    *cursor;			/* [max_buckets] counting-sort fill positions */
	int32_t    *pair_tok;		/* [max_tok * max_k] */
	int32_t    *pair_exp;		/* [max_tok * max_k] */
	int32_t    *pos_of;			/* [max_tok][max_k] */
	int32_t    *active;			/* [max_buckets] expert ids with pairs */
	int			n_active;
	int64_t    *gu_start;		/* [max_buckets + 1] gate/up units before active[a] */
	int64_t    *dn_start;		/* [max_buckets + 1] down units before active[a] */

	float	   *h;				/* [max_tok * max_k][h_stride] */
	size_t		h_stride;		/* floats */
	uint8_t    *hq;				/* [max_tok * max_k][hq_stride] */
	size_t		hq_stride;
	float	   *y;				/* [max_tok * max_k][n_embd] */

	struct opus_moe_step_stats stats;
};

/* ---- descriptors ---- */

enum opus_status
opus_moe_mat_set(struct opus_moe_mat *dst, const void *data, size_t data_size,
				 enum opus_qtype type, int64_t n_in, int64_t n_out,
				 struct opus_error *err)
{
	const struct opus_qtype_info *qi = opus_qtype_info(type);
	size_t		row = 0;
	unsigned long long total;

	if (!qi || !qi->supported)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "expert weight type %u is not supported", (unsigned) type);
	if (n_in <= 0 || n_out <= 0 || !opus_qtype_row_size(type, n_in, &row))
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "expert matrix %lld x %lld is not whole %s blocks",
							  (long long) n_out, (long long) n_in, qi->name);
	if (opus_mul_overflow_u64(row, (unsigned long long) n_out, &total) ||
		total > data_size)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "expert matrix %lld x %lld %s does not fit its tensor",
							  (long long) n_out, (long long) n_in, qi->name);
	dst->data = data;
	dst->type = type;
	dst->qi = qi;
	dst->n_in = n_in;
	dst->n_out = n_out;
	dst->row_bytes = row;
	return OPUS_OK;
}

enum opus_status
opus_moe_mats_stacked(struct opus_moe_mat *dst, int32_t n_expert,
					  const void *data, size_t data_size,
					  enum opus_qtype type, int64_t n_in, int64_t n_out,
					  struct opus_error *err)
{
	enum opus_status st;
	size_t		per;

	if (n_expert <= 0 || n_expert > OPUS_MOE_MAX_EXPERTS)
		return opus_error_set(err, OPUS_ERR_FORMAT, "bad expert count %d", n_expert);
	/* the first expert checks the row size; the whole stack must fit */
	st = opus_moe_mat_set(&dst[0], data, data_size, type, n_in, n_out, err);
	if (st != OPUS_OK)
		return st;
	per = dst[0].row_bytes * (size_t) n_out;
	if (per != 0 && (size_t) n_expert > data_size / per)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "stacked expert tensor is smaller than %d experts", n_expert);
	for (int32_t e = 1; e < n_expert; e++)
	{
		dst[e] = dst[0];
		dst[e].data = (const uint8_t *) data + (size_t) e * per;
	}
	return OPUS_OK;
}

/* Bytes of an activation row of n elements in t, or 0 if not whole blocks. */
static size_t
act_bytes(enum opus_qtype t, int64_t n)
{
	size_t		sz = 0;

	if (!opus_qtype_row_size(t, n, &sz))
		return 0;
	return sz;
}

static enum opus_status
check_mat(const struct opus_moe_mat *m, const char *what, int e,
		  int64_t n_in, int64_t n_out, struct opus_error *err)
{
	const struct opus_qtype_info *vq;

	if (!m->data || !m->qi || !m->qi->supported)
		return opus_error_set(err, OPUS_ERR_FORMAT, "expert %d: %s weights missing", e, what);
	if (m->n_in != n_in || m->n_out != n_out)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "expert %d: %s is %lld x %lld, expected %lld x %lld",
							  e, what, (long long) m->n_out, (long long) m->n_in,
							  (long long) n_out, (long long) n_in);
	vq = opus_qtype_info(m->qi->vec_dot_type);
	if (!vq || !vq->from_float || act_bytes(m->qi->vec_dot_type, n_in) == 0)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "expert %d: %s rows of %lld cannot be multiplied as %s",
							  e, what, (long long) n_in, m->qi->name);
	return OPUS_OK;
}

/* Slot of vec_dot type t in ex->in_types, adding it; -1 if over the limit. */
static int
slot_for(struct opus_moe_experts *ex, enum opus_qtype t)
{
	for (int s = 0; s < ex->n_in_types; s++)
		if (ex->in_types[s] == t)
			return s;
	if (ex->n_in_types == OPUS_MOE_MAX_SLOTS)
		return -1;
	ex->in_types[ex->n_in_types] = t;
	return ex->n_in_types++;
}

enum opus_status
opus_moe_experts_finish(struct opus_moe_experts *ex, struct opus_error *err)
{
	int			n_all;
	enum opus_status st;

	ex->gate_slot = NULL;
	ex->up_slot = NULL;
	if (ex->n_expert <= 0 || ex->n_expert > OPUS_MOE_MAX_EXPERTS)
		return opus_error_set(err, OPUS_ERR_FORMAT, "bad expert count %d", ex->n_expert);
	if (ex->n_used <= 0 || ex->n_used > ex->n_expert || ex->n_used > OPUS_MOE_MAX_USED)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "bad experts-per-token count %d (of %d)", ex->n_used, ex->n_expert);
	if (ex->n_embd <= 0)
		return opus_error_set(err, OPUS_ERR_FORMAT, "bad embedding width");
	if (ex->gating != OPUS_MOE_GATING_SOFTMAX && ex->gating != OPUS_MOE_GATING_SIGMOID)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED, "unknown expert gating function");
	if (!isfinite(ex->weight_scale) || ex->weight_scale == 0.0f)
		return opus_error_set(err, OPUS_ERR_FORMAT, "bad expert weight scale");
	if (!ex->gate || !ex->up || !ex->down)
		return opus_error_set(err, OPUS_ERR_FORMAT, "expert weights missing");

	n_all = ex->n_expert + (ex->has_shared ? 1 : 0);
	ex->gate_slot = malloc((size_t) n_all);
	ex->up_slot = malloc((size_t) n_all);
	if (!ex->gate_slot || !ex->up_slot)
	{
		opus_moe_experts_release(ex);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for expert tables");
	}
	ex->n_in_types = 0;
	ex->max_ff = 0;
	ex->max_hq_bytes = 0;
	ex->max_xq_bytes = 0;
	ex->expert_bytes = 0;
	for (int e = 0; e < n_all; e++)
	{
		int64_t		ff = ex->gate[e].n_out;
		int			gs,
					us;
		size_t		bytes;

		if ((st = check_mat(&ex->gate[e], "gate", e, ex->n_embd, ff, err)) != OPUS_OK ||
			(st = check_mat(&ex->up[e], "up", e, ex->n_embd, ff, err)) != OPUS_OK ||
			(st = check_mat(&ex->down[e], "down", e, ff, ex->n_embd, err)) != OPUS_OK)
		{
			opus_moe_experts_release(ex);
			return st;
		}
		gs = slot_for(ex, ex->gate[e].qi->vec_dot_type);
		us = slot_for(ex, ex->up[e].qi->vec_dot_type);
		if (gs < 0 || us < 0)
		{
			opus_moe_experts_release(ex);
			return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
								  "expert weights of more than %d activation types",
								  OPUS_MOE_MAX_SLOTS);
		}
		ex->gate_slot[e] = (uint8_t) gs;
		ex->up_slot[e] = (uint8_t) us;
		if (ff > ex->max_ff)
			ex->max_ff = ff;
		if (act_bytes(ex->down[e].qi->vec_dot_type, ff) > ex->max_hq_bytes)
			ex->max_hq_bytes = act_bytes(ex->down[e].qi->vec_dot_type, ff);
		bytes = (ex->gate[e].row_bytes + ex->up[e].row_bytes) * (size_t) ff +
			ex->down[e].row_bytes * (size_t) ex->n_embd;
		if (e < ex->n_expert && bytes > ex->expert_bytes)
			ex->expert_bytes = bytes;
	}
	for (int s = 0; s < ex->n_in_types; s++)
		if (act_bytes(ex->in_types[s], ex->n_embd) > ex->max_xq_bytes)
			ex->max_xq_bytes = act_bytes(ex->in_types[s], ex->n_embd);
	return OPUS_OK;
}

void
opus_moe_experts_release(struct opus_moe_experts *ex)
{
	free(ex->gate_slot);
	free(ex->up_slot);
	ex->gate_slot = NULL;
	ex->up_slot = NULL;
}

/* ---- scratch ---- */

static void *
alloc64(size_t n, bool *ok)
{
	void	   *p = aligned_alloc(64, (n + 63) / 64 * 64 + 64);

	if (!p)
		*ok = false;
	return p;
}

enum opus_status
opus_moe_scratch_create(const struct opus_moe_experts *const *layers,
						int n_layers, int max_tok,
						struct opus_moe_scratch **out, struct opus_error *err)
{
	struct opus_moe_scratch *s;
	size_t		max_pairs;
	int64_t		max_ff = 1;
	size_t		xq = 0,
				hq = 0;
	bool		ok = true;

	*out = NULL;
	if (n_layers <= 0 || max_tok <= 0 || max_tok > (1 << 20))
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "bad moe scratch size");
	s = calloc(1, sizeof(*s));
	if (!s)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for moe scratch");
	s->max_tok = max_tok;
	s->n_embd = layers[0]->n_embd;
	for (int l = 0; l < n_layers; l++)
	{
		const struct opus_moe_experts *ex = layers[l];
		int			k = ex->n_used + (ex->has_shared ? 1 : 0);

		if (ex->n_embd != s->n_embd || !ex->gate_slot)
		{
			opus_moe_scratch_free(s);
			return opus_error_set(err, OPUS_ERR_INVALID_ARG, "moe layers disagree");
		}
		if (k > s->max_k)
			s->max_k = k;
		if (ex->n_expert + 1 > s->max_buckets)
			s->max_buckets = ex->n_expert + 1;
		if (ex->n_in_types > s->n_slots)
			s->n_slots = ex->n_in_types;
		if (ex->max_ff > max_ff)
			max_ff = ex->max_ff;
		if (ex->max_xq_bytes > xq)
			xq = ex->max_xq_bytes;
		if (ex->max_hq_bytes > hq)
			hq = ex->max_hq_bytes;
	}
	max_pairs = (size_t) max_tok * s->max_k;
	s->xq_stride = (xq + 63) / 64 * 64;
	s->h_stride = ((size_t) max_ff + 15) / 16 * 16;
	s->hq_stride = (hq + 63) / 64 * 64;
	/* the big buffers: refuse sizes that overflow or are absurd (> 64 GiB) */
	if (s->h_stride > ((size_t) 1 << 36) / sizeof(float) / max_pairs ||
		s->hq_stride > ((size_t) 1 << 36) / max_pairs ||
		(size_t) s->n_embd > ((size_t) 1 << 36) / sizeof(float) / max_pairs ||
		s->xq_stride > ((size_t) 1 << 36) / (size_t) max_tok)
	{
		opus_moe_scratch_free(s);
		return opus_error_set(err, OPUS_ERR_NOMEM, "moe buffers too large");
	}
	for (int i = 0; i < s->n_slots; i++)
		s->xq[i] = alloc64((size_t) max_tok * s->xq_stride, &ok);
	s->sel = alloc64(max_pairs * sizeof(int32_t), &ok);
	s->wt = alloc64(max_pairs * sizeof(float), &ok);
	s->count = alloc64((size_t) s->max_buckets * sizeof(int32_t), &ok);
	s->offset = alloc64(((size_t) s->max_buckets + 1) * sizeof(int32_t), &ok);
	s->cursor = alloc64((size_t) s->max_buckets * sizeof(int32_t), &ok);
	s->pair_tok = alloc64(max_pairs * sizeof(int32_t), &ok);
	s->pair_exp = alloc64(max_pairs * sizeof(int32_t), &ok);
	s->pos_of = alloc64(max_pairs * sizeof(int32_t), &ok);
	s->active = alloc64((size_t) s->max_buckets * sizeof(int32_t), &ok);
	s->gu_start = alloc64(((size_t) s->max_buckets + 1) * sizeof(int64_t), &ok);
	s->dn_start = alloc64(((size_t) s->max_buckets + 1) * sizeof(int64_t), &ok);
	s->h = alloc64(max_pairs * s->h_stride * sizeof(float), &ok);
	s->hq = alloc64(max_pairs * s->hq_stride, &ok);
	s->y = alloc64(max_pairs * (size_t) s->n_embd * sizeof(float), &ok);
	if (!ok)
	{
		opus_moe_scratch_free(s);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for moe buffers");
	}
	*out = s;
	return OPUS_OK;
}

void
opus_moe_scratch_free(struct opus_moe_scratch *s)
{
	if (!s)
		return;
	for (int i = 0; i < OPUS_MOE_MAX_SLOTS; i++)
		free(s->xq[i]);
	free(s->sel);
	free(s->wt);
	free(s->count);
	free(s->offset);
	free(s->cursor);
	free(s->pair_tok);
	free(s->pair_exp);
	free(s->pos_of);
	free(s->active);
	free(s->gu_start);
	free(s->dn_start);
	free(s->h);
	free(s->hq);
	free(s->y);
	free(s);
}

const struct opus_moe_step_stats *
opus_moe_last_stats(const struct opus_moe_scratch *s)
{
	return &s->stats;
}

const int32_t *
opus_moe_choices(const struct opus_moe_scratch *s, int t)
{
	return s->sel + (size_t) t * s->max_k;
}

const float *
opus_moe_weights(const struct opus_moe_scratch *s, int t)
{
	return s->wt + (size_t) t * s->max_k;
}

/* ---- routing ---- */

/* probs[e] from the router logits: softmax over all experts, or sigmoid. */
static void
gate_probs(const struct opus_moe_experts *ex, const float *logits, float *probs)
{
	int			E = ex->n_expert;

	if (ex->gating == OPUS_MOE_GATING_SIGMOID)
	{
		for (int e = 0; e < E; e++)
			probs[e] = 1.0f / (1.0f + expf(-logits[e]));
		return;
	}
	{
		float		max = -INFINITY;
		double		sum = 0.0;
		float		inv;

		for (int e = 0; e < E; e++)
			if (logits[e] > max)
				max = logits[e];
		for (int e = 0; e < E; e++)
		{
			probs[e] = expf(logits[e] - max);
			sum += probs[e];
		}
		inv = (float) (1.0 / sum);
		for (int e = 0; e < E; e++)
			probs[e] *= inv;
	}
}

/* The k chosen probabilities into weights: renormalise and scale. */
static void
finish_weights(const struct opus_moe_experts *ex, float *w)
{
	if (ex->norm_weights)
	{
		float		sum = 0.0f;

		for (int k = 0; k < ex->n_used; k++)
			sum += w[k];
		for (int k = 0; k < ex->n_used; k++)
			w[k] /= sum;
	}
	if (ex->weight_scale != 1.0f)
		for (int k = 0; k < ex->n_used; k++)
			w[k] *= ex->weight_scale;
}

/* Weight of the shared expert for a token. */
static float
shared_weight(const struct opus_moe_experts *ex, const float *shared_logits, int t)
{
	if (!ex->shared_gated || !shared_logits)
		return 1.0f;
	return 1.0f / (1.0f + expf(-shared_logits[t]));
}

static inline float
silu_mul(float g, float u)
{
	return g / (1.0f + expf(-g)) * u;
}

/* Top n_used of probs by repeated selection (ties: lower id; NaN never wins). */
static void
top_k(const struct opus_moe_experts *ex, const float *probs, int32_t *sel, float *w)
{
	uint8_t		taken[OPUS_MOE_MAX_EXPERTS];

	memset(taken, 0, (size_t) ex->n_expert);
	for (int k = 0; k < ex->n_used; k++)
	{
		int			best = -1;

		for (int e = 0; e < ex->n_expert; e++)
		{
			if (taken[e])
				continue;
			if (best < 0 || probs[e] > probs[best] ||
				(isnan(probs[best]) && !isnan(probs[e])))
				best = e;
		}
		taken[best] = 1;
		sel[k] = best;
		w[k] = probs[best];
	}
}

void
opus_moe_route(struct opus_moe_scratch *s, const struct opus_moe_experts *ex,
			   const float *logits, size_t ld_logits,
			   const float *shared_logits, int n_tok, uint64_t *load)
{
	int			E = ex->n_expert;
	int			K = ex->n_used;
	int			kt = K + (ex->has_shared ? 1 : 0);
	int			mk = s->max_k;
	int			n_buckets = E + (ex->has_shared ? 1 : 0);
	float		probs[OPUS_MOE_MAX_EXPERTS];
	struct opus_moe_step_stats *st = &s->stats;

	s->n_tok = n_tok;
	s->k_tot = kt;

	/* choices and weights per token */
	memset(s->count, 0, sizeof(int32_t) * (size_t) n_buckets);
	for (int t = 0; t < n_tok; t++)
	{
		int32_t    *sel = s->sel + (size_t) t * mk;
		float	   *w = s->wt + (size_t) t * mk;

		gate_probs(ex, logits + (size_t) t * ld_logits, probs);
		top_k(ex, probs, sel, w);
		finish_weights(ex, w);
		if (ex->has_shared)
		{
			sel[K] = E;
			w[K] = shared_weight(ex, shared_logits, t);
		}
		for (int k = 0; k < kt; k++)
			s->count[sel[k]]++;
	}

	/* counting sort: positions by expert, tokens ascending inside a group */
	s->offset[0] = 0;
	for (int e = 0; e < n_buckets; e++)
		s->offset[e + 1] = s->offset[e] + s->count[e];
	for (int e = 0; e < n_buckets; e++)
		s->cursor[e] = s->offset[e];
	for (int t = 0; t < n_tok; t++)
		for (int k = 0; k < kt; k++)
		{
			int			e = s->sel[(size_t) t * mk + k];
			int32_t		p = s->cursor[e]++;

			s->pair_tok[p] = t;
			s->pair_exp[p] = e;
			s->pos_of[(size_t) t * mk + k] = p;
		}

	/* active experts and the work units */
	s->n_active = 0;
	st->n_tok = n_tok;
	st->n_active = 0;
	st->n_pairs = (int64_t) n_tok * kt;
	st->weight_bytes = 0;
	st->max_reads = 0;
	for (int e = 0; e < n_buckets; e++)
		if (s->count[e] > 0)
			s->active[s->n_active++] = e;
	s->gu_start[0] = 0;
	s->dn_start[0] = 0;
	for (int a = 0; a < s->n_active; a++)
	{
		int			e = s->active[a];
		int64_t		n_tt = (s->count[e] + MOE_TOK_TILE - 1) / MOE_TOK_TILE;
		int64_t		ff = ex->gate[e].n_out;
		size_t		bytes = (ex->gate[e].row_bytes + ex->up[e].row_bytes) * (size_t) ff +
			ex->down[e].row_bytes * (size_t) ex->n_embd;

		s->gu_start[a + 1] = s->gu_start[a] + (ff + MOE_ROW_TILE - 1) / MOE_ROW_TILE * n_tt;
		s->dn_start[a + 1] = s->dn_start[a] +
			(ex->n_embd + MOE_ROW_TILE - 1) / MOE_ROW_TILE * n_tt;
		st->weight_bytes += (int64_t) bytes * n_tt;
		if (n_tt > st->max_reads)
			st->max_reads = (int32_t) n_tt;
		if (e < E)
		{
			st->n_active++;
			if (load)
				load[e] += (uint64_t) s->count[e];
		}
	}
}

/* ---- the batched expert steps ---- */

void
opus_moe_quantize_input(struct opus_moe_scratch *s, const struct opus_moe_experts *ex,
						const float *x, int t)
{
	for (int i = 0; i < ex->n_in_types; i++)
		opus_qtype_info(ex->in_types[i])->from_float(x, s->xq[i] + (size_t) t * s->xq_stride,
													 ex->n_embd);
}

/*
 * Map unit u to (active index, row range, pair range); false when u is past
 * the last unit.  start[] holds the units before each active expert.
 */
static bool
unit_of(const struct opus_moe_scratch *s, const int64_t *start, int64_t u,
		int64_t n_rows, const struct opus_moe_experts *ex, bool gate_up,
		int *e_out, int64_t *r0, int64_t *r1, int32_t *p0, int32_t *p1)
{
	int			lo = 0,
				hi = s->n_active;
	int			e;
	int64_t		n_tt,
				rt,
				tt,
				rows;

	if (u >= start[s->n_active])
		return false;
	/* the last a with start[a] <= u */
	while (hi - lo > 1)
	{
		int			mid = (lo + hi) / 2;

		if (start[mid] <= u)
			lo = mid;
		else
			hi = mid;
	}
	e = s->active[lo];
	u -= start[lo];
	n_tt = (s->count[e] + MOE_TOK_TILE - 1) / MOE_TOK_TILE;
	rt = u / n_tt;
	tt = u % n_tt;
	rows = gate_up ? ex->gate[e].n_out : n_rows;
	*e_out = e;
	*r0 = rt * MOE_ROW_TILE;
	*r1 = *r0 + MOE_ROW_TILE < rows ? *r0 + MOE_ROW_TILE : rows;
	*p0 = s->offset[e] + (int32_t) (tt * MOE_TOK_TILE);
	*p1 = *p0 + MOE_TOK_TILE < s->offset[e + 1] ? *p0 + MOE_TOK_TILE : s->offset[e + 1];
	return true;
}

void
opus_moe_gate_up(struct opus_moe_scratch *s, const struct opus_moe_experts *ex,
				 atomic_int *next)
{
	for (;;)
	{
		int64_t		u = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
		int			e;
		int64_t		r0,
					r1;
		int32_t		p0,
					p1;
		const struct opus_moe_mat *G,
				   *U;
		const uint8_t *xg,
				   *xu;

		if (!unit_of(s, s->gu_start, u, 0, ex, true, &e, &r0, &r1, &p0, &p1))
			break;
		G = &ex->gate[e];
		U = &ex->up[e];
		xg = s->xq[ex->gate_slot[e]];
		xu = s->xq[ex->up_slot[e]];
		for (int64_t r = r0; r < r1; r++)
		{
			const uint8_t *gw = G->data + (size_t) r * G->row_bytes;
			const uint8_t *uw = U->data + (size_t) r * U->row_bytes;

			for (int32_t p = p0; p < p1; p++)
			{
				size_t		xo = (size_t) s->pair_tok[p] * s->xq_stride;
				float		g = G->qi->vec_dot(G->n_in, gw, xg + xo);
				float		v = U->qi->vec_dot(U->n_in, uw, xu + xo);

				s->h[(size_t) p * s->h_stride + r] = silu_mul(g, v);
			}
		}
	}
}

void
opus_moe_quantize_hidden(struct opus_moe_scratch *s, const struct opus_moe_experts *ex,
						 int ith, int nth)
{
	int64_t		n_pairs = (int64_t) s->n_tok * s->k_tot;

	for (int64_t p = ith; p < n_pairs; p += nth)
	{
		const struct opus_moe_mat *D = &ex->down[s->pair_exp[p]];

		opus_qtype_info(D->qi->vec_dot_type)->from_float(s->h + (size_t) p * s->h_stride,
														 s->hq + (size_t) p * s->hq_stride,
														 D->n_in);
	}
}

void
opus_moe_down(struct opus_moe_scratch *s, const struct opus_moe_experts *ex,
			  atomic_int *next)
{
	for (;;)
	{
		int64_t		u = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
		int			e;
		int64_t		r0,
					r1;
		int32_t		p0,
					p1;
		const struct opus_moe_mat *D;

		if (!unit_of(s, s->dn_start, u, ex->n_embd, ex, false, &e, &r0, &r1, &p0, &p1))
			break;
		D = &ex->down[e];
		for (int64_t r = r0; r < r1; r++)
		{
			const uint8_t *dw = D->data + (size_t) r * D->row_bytes;

			for (int32_t p = p0; p < p1; p++)
				s->y[(size_t) p * s->n_embd + r] =
					D->qi->vec_dot(D->n_in, dw, s->hq + (size_t) p * s->hq_stride);
		}
	}
}

/* acc[i] = sum over k in order of w[k] * yk[i]; shared by batch and reference. */
static void
combine_row(float *out, bool accumulate, int64_t n, int kt,
			const float *const *yk, const float *w)
{
	for (int64_t i = 0; i < n; i++)
	{
		float		acc = 0.0f;

		for (int k = 0; k < kt; k++)
			acc += w[k] * yk[k][i];
		if (accumulate)
			out[i] += acc;
		else
			out[i] = acc;
	}
}

void
opus_moe_combine(struct opus_moe_scratch *s, const struct opus_moe_experts *ex,
				 float *out, size_t ld_out, bool accumulate, int ith, int nth)
{
	const float *yk[OPUS_MOE_MAX_USED + 1];

	for (int t = ith; t < s->n_tok; t += nth)
	{
		for (int k = 0; k < s->k_tot; k++)
			yk[k] = s->y + (size_t) s->pos_of[(size_t) t * s->max_k + k] * s->n_embd;
		combine_row(out + (size_t) t * ld_out, accumulate, ex->n_embd, s->k_tot, yk,
					s->wt + (size_t) t * s->max_k);
	}
}

/* ---- the whole layer in one region ---- */

struct moe_run
{
	struct opus_pool *pool;
	struct opus_moe_scratch *s;
	const struct opus_moe_experts *ex;
	const float *x;
	size_t		ld_x;
	const float *logits;
	size_t		ld_logits;
	const float *shared_logits;
	int			n_tok;
	float	   *out;
	size_t		ld_out;
	bool		accumulate;
	uint64_t   *load;
	struct opus_pool_counter ctr[2];
};

static void
moe_worker(void *arg, int ith, int nth)
{
	struct moe_run *r = arg;

	for (int t = ith; t < r->n_tok; t += nth)
		opus_moe_quantize_input(r->s, r->ex, r->x + (size_t) t * r->ld_x, t);
	if (ith == 0)
		opus_moe_route(r->s, r->ex, r->logits, r->ld_logits, r->shared_logits,
					   r->n_tok, r->load);
	opus_pool_barrier(r->pool);
	opus_moe_gate_up(r->s, r->ex, &r->ctr[0].next);
	opus_pool_barrier(r->pool);
	opus_moe_quantize_hidden(r->s, r->ex, ith, nth);
	opus_pool_barrier(r->pool);
	opus_moe_down(r->s, r->ex, &r->ctr[1].next);
	opus_pool_barrier(r->pool);
	opus_moe_combine(r->s, r->ex, r->out, r->ld_out, r->accumulate, ith, nth);
}

void
opus_moe_forward(struct opus_pool *pool, struct opus_moe_scratch *s,
				 const struct opus_moe_experts *ex,
				 const float *x, size_t ld_x,
				 const float *logits, size_t ld_logits,
				 const float *shared_logits, int n_tok,
				 float *out, size_t ld_out, bool accumulate, uint64_t *load)
{
	struct moe_run r = {
		.pool = pool,.s = s,.ex = ex,.x = x,.ld_x = ld_x,.logits = logits,
		.ld_logits = ld_logits,.shared_logits = shared_logits,.n_tok = n_tok,
		.out = out,.ld_out = ld_out,.accumulate = accumulate,.load = load
	};

	if (n_tok <= 0)
		return;
	atomic_store(&r.ctr[0].next, 0);
	atomic_store(&r.ctr[1].next, 0);
	opus_pool_run(pool, moe_worker, &r);
}

/* ---- the naive reference ---- */

struct ref_choice
{
	int32_t		e;
	float		p;
};

static int
ref_choice_cmp(const void *a, const void *b)
{
	const struct ref_choice *x = a;
	const struct ref_choice *y = b;
	bool		xn = isnan(x->p),
				yn = isnan(y->p);

	if (xn != yn)
		return xn ? 1 : -1;
	if (!xn && x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return x->e < y->e ? -1 : (x->e > y->e);
}

/* One expert on one row: y = down(SiLU(gate x) * up x). */
static void
ref_expert(const struct opus_moe_mat *G, const struct opus_moe_mat *U,
		   const struct opus_moe_mat *D, const float *x, uint8_t *xg, uint8_t *xu,
		   float *h, uint8_t *hq, float *y)
{
	opus_qtype_info(G->qi->vec_dot_type)->from_float(x, xg, G->n_in);
	opus_qtype_info(U->qi->vec_dot_type)->from_float(x, xu, U->n_in);
	for (int64_t r = 0; r < G->n_out; r++)
		h[r] = silu_mul(G->qi->vec_dot(G->n_in, G->data + (size_t) r * G->row_bytes, xg),
						U->qi->vec_dot(U->n_in, U->data + (size_t) r * U->row_bytes, xu));
	opus_qtype_info(D->qi->vec_dot_type)->from_float(h, hq, D->n_in);
	for (int64_t r = 0; r < D->n_out; r++)
		y[r] = D->qi->vec_dot(D->n_in, D->data + (size_t) r * D->row_bytes, hq);
}

enum opus_status
opus_moe_forward_ref(const struct opus_moe_experts *ex,
					 const float *x, size_t ld_x,
					 const float *logits, size_t ld_logits,
					 const float *shared_logits, int n_tok,
					 float *out, size_t ld_out, bool accumulate,
					 struct opus_error *err)
{
	int			E = ex->n_expert;
	int			K = ex->n_used;
	int			kt = K + (ex->has_shared ? 1 : 0);
	size_t		xb = ex->max_xq_bytes + 64;
	float	   *probs = malloc(sizeof(float) * (size_t) E);
	struct ref_choice *ch = malloc(sizeof(*ch) * (size_t) E);
	uint8_t    *xg = malloc(xb);
	uint8_t    *xu = malloc(xb);
	float	   *h = malloc(sizeof(float) * (size_t) ex->max_ff);
	uint8_t    *hq = malloc(ex->max_hq_bytes + 64);
	float	   *y = malloc(sizeof(float) * (size_t) kt * (size_t) ex->n_embd);
	enum opus_status st = OPUS_OK;

	if (!probs || !ch || !xg || !xu || !h || !hq || !y)
	{
		st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for the moe reference");
		goto done;
	}
	for (int t = 0; t < n_tok; t++)
	{
		const float *xt = x + (size_t) t * ld_x;
		float		w[OPUS_MOE_MAX_USED + 1];
		const float *yk[OPUS_MOE_MAX_USED + 1];

		gate_probs(ex, logits + (size_t) t * ld_logits, probs);
		for (int e = 0; e < E; e++)
		{
			ch[e].e = e;
			ch[e].p = probs[e];
		}
		qsort(ch, (size_t) E, sizeof(*ch), ref_choice_cmp);
		for (int k = 0; k < K; k++)
			w[k] = ch[k].p;
		finish_weights(ex, w);
		for (int k = 0; k < kt; k++)
		{
			int			e = k < K ? ch[k].e : E;

			yk[k] = y + (size_t) k * ex->n_embd;
			ref_expert(&ex->gate[e], &ex->up[e], &ex->down[e], xt, xg, xu, h, hq,
					   y + (size_t) k * ex->n_embd);
		}
		if (ex->has_shared)
			w[K] = shared_weight(ex, shared_logits, t);
		combine_row(out + (size_t) t * ld_out, accumulate, ex->n_embd, kt, yk, w);
	}
done:
	free(probs);
	free(ch);
	free(xg);
	free(xu);
	free(h);
	free(hq);
	free(y);
	return st;
}
