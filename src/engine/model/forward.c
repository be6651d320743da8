/*
 * forward.c - the batched forward pass of the llama-family transformer over
 * the block-based KV cache.
 *
 * One opus_forward() call takes N tokens from several sequences and runs the
 * whole network in a single parallel region of the context's thread pool;
 * the steps below are separated by barriers ("|") and read top to bottom in
 * forward_worker():
 *
 *   embed | for each layer:
 *     rmsnorm + quantize rows (a)     | Q,K,V = Wq,Wk,Wv x (+bias)         |
 *     RoPE, store K,V (F16/Q8_0) (b)  | attention, quantize its output (c) |
 *     x += Wo att                     |
 *     rmsnorm + quantize rows (a)     | gate, up, silu(gate)*up, quantize  |
 *     x += Wdown h                    |
 *   final rmsnorm, logits = Wout x for the tokens that want logits only.
 *
 * A Mixture-of-Experts layer replaces the feed-forward steps (moe.c):
 *     rmsnorm, quantize rows for the router and the experts | router logits |
 *     route + group by expert (one thread) | experts' gate, up, SiLU |
 *     quantize hidden rows | experts' down | x += weighted sum
 * and qwen3moe / olmoe normalize q and k (per head / whole row) before RoPE.
 *
 *   (a) tokens split across threads, or for up to SMALL_N tokens done by
 *       every thread into its own buffers, which saves the barrier;
 *   (b) when no sequence has two tokens in the batch (decode), each
 *       attention unit ropes and stores its own token's K/V instead;
 *   (c) each attention unit quantizes its heads' output when heads are whole
 *       quantization blocks, else a separate token-split step.
 * Matmuls split output rows (and tokens) into units claimed from an atomic
 * counter; attention splits (token, KV group) pairs the same way.
 *
 * Determinism: every output element is computed by exactly one thread with a
 * fixed sequence of operations (one dot product over the whole row, then the
 * bias / residual add), attention for a (token, head) likewise, and neither
 * the work split nor the fused-or-separate choices above change what one
 * element's computation is.  So logits do not depend on the thread count,
 * on which other sequences share the batch, or on how a prompt is chunked.
 *
 * Matrix multiplication: activations are quantized once per step to the
 * weight's vec_dot type; the work unit is a tile of ROW_TILE weight rows by
 * TOK_TILE tokens, so a tile of weights stays in L1 while it meets many
 * tokens (prefill), and the tiled kernels of matmul_avx2.c share each
 * unpacked weight block among 8 tokens; decode still splits a matrix into
 * many row chunks.
 */
#include "model/model_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/forward_int.h"

#define ROW_TILE 16				/* weight rows per work unit (prefill) */
#define ROW_TILE_DECODE 32		/* weight rows per work unit (few tokens) */
#define ROW_TILE_MAX 32			/* largest row count of a unit (the tile buffer size) */
#define TOK_TILE 64				/* tokens per work unit */
#define MAX_SLOTS 4				/* activation buffers: up to 3 distinct vec_dot types of a
								 * matmul group's input, and SLOT_FUSED */
#define SLOT_FUSED 3			/* quantized by the step that produces it (attention, FFN) */
#define FFN_TILE 32				/* rows per unit of the fused gate/up/SiLU step */
#define SMALL_N 8				/* up to this many tokens, every thread normalizes them all */

_Static_assert(ROW_TILE <= ROW_TILE_MAX && ROW_TILE_DECODE <= ROW_TILE_MAX &&
			   FFN_TILE <= ROW_TILE_MAX, "tile buffer too small");
_Static_assert(TOK_TILE % 8 == 0, "token tiles must hold whole groups of 8");

/*
 * Quantized activation rows for the matmul kernels, one buffer per slot:
 * xq[slot] is [rows][xq_stride] bytes in the slot's vec_dot type, xs[slot]
 * the block scales as floats, transposed per group of 8 rows
 * ([rows / 8][xs_stride], see opus_mm_rows_fn).
 */
struct act
{
	uint8_t    *xq[MAX_SLOTS];
	float	   *xs[MAX_SLOTS];
};

struct opus_fwd_state
{
	int			n_batch;		/* max tokens per call (max_batch_tokens) */
	int			n_threads;

	/* per token of the current call */
	int32_t    *tok;			/* [n_batch] token id */
	int32_t    *pos;			/* [n_batch] position in its sequence */
	int32_t    *item;			/* [n_batch] index of its batch item */

	float	   *x;				/* [n_batch][n_embd] residual stream */
	float	   *xn;				/* [n_batch][max(n_embd, n_ff)] normed / activated matmul input */
	float	   *q;				/* [n_batch][n_head * head_dim] */
	float	   *k;				/* [n_batch][n_head_kv * head_dim] */
	float	   *v;				/* [n_batch][n_head_kv * head_dim] */
	float	   *att;			/* [n_batch][n_head * head_dim] attention output */
	float	   *gate;			/* [n_batch][n_ff] */
	float	   *up;				/* [n_batch][n_ff] */
	float	   *moe_logits;		/* [n_batch][n_expert] router logits (MoE) */
	float	   *moe_shl;		/* [n_batch] shared-expert gate logits (qwen2moe) */
	struct opus_moe_scratch *moe;	/* expert dispatch buffers (MoE), else NULL */
	struct act *shared;			/* [n_batch] rows of quantized activations */
	struct act *priv;			/* [n_threads]: SMALL_N rows each, one per thread */
	float	   *priv_xn;		/* [n_threads][SMALL_N][n_embd] */
	size_t		xq_stride;		/* bytes of the widest quantized input row */
	size_t		xs_stride;		/* floats per group of 8 tokens: 2 * 8 * blocks of the widest row */
	float	   *rope_cos;		/* [n_batch][rope_dim / 2] */
	float	   *rope_sin;		/* [n_batch][rope_dim / 2] */
	float	   *rope_cos_swa;	/* gemma3 local layers (rope_freq_base_swa), else NULL */
	float	   *rope_sin_swa;
	float	   *tmp;			/* gemma3: [n_batch][n_embd] Wo / Wdown output before its post norm */
	float	   *scores;			/* [n_threads][scores_stride] attention weights */
	size_t		scores_stride;	/* ATTN_MAX_HEADS * (n_ctx rounded up to 16) */

	/* tokens whose logits are computed */
	int			n_out;
	int32_t    *out_tok;		/* [n_batch] batch token index */
	float	  **out_rows;		/* [n_batch] destination rows (n_vocab floats) */

	/* work counters, a ring of three (see claim()) */
	struct opus_pool_counter ctr[3];

	/* current call */
	struct opus_ctx *c;
	struct opus_batch_item *items;
	int			n_tok;
	bool		single;			/* no sequence has two tokens in the batch */

	/* kernels */
	bool		tiled;			/* AVX2 tile kernels available */
	opus_mm_rows_fn tile_q4_1[8];	/* [C-1] */
	opus_mm_rows_fn tile_q8_0[8];
	opus_mm_rows_fn tile_q4_0[8];
	opus_mm_rows_fn tile_q5_0[8];
	opus_attend_fn attend;
	opus_swiglu_fn swiglu;		/* SwiGLU (llama.cpp's arithmetic) */
	opus_act_quant_fn act_q8_0;	/* activation quantizers (llama.cpp's CPU ones) */
	opus_act_quant_fn act_q8_1;
	opus_to_f16_fn to_f16;
};

/* ---- plain kernels ---- */

static void
to_f16_ref(uint16_t *dst, const float *src, int n)
{
	for (int i = 0; i < n; i++)
		dst[i] = opus_fp32_to_fp16(src[i]);
}

/* y = x / rms(x) * w */
static void
rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
	double		ss = 0.0;
	float		scale;

	/* float squares summed in double, as ggml does */
	for (int i = 0; i < n; i++)
		ss += (double) (x[i] * x[i]);
	scale = 1.0f / sqrtf((float) (ss / n) + eps);
	for (int i = 0; i < n; i++)
		y[i] = (x[i] * scale) * w[i];
}

/* ---- per-thread worker context ---- */

struct wctx
{
	struct opus_fwd_state *fs;
	int			ith;
	int			nth;
	int			phase;			/* barriers passed so far */
};

/*
 * End a step: wait for every thread.  Thread 0 then resets the counter the
 * step after next will use; nobody touches it any more (its last user
 * finished two barriers ago) and the next barrier publishes the reset.
 */
static void
step_barrier(struct wctx *w)
{
	opus_pool_barrier(w->fs->c->pool);
	w->phase++;
	if (w->ith == 0)
		atomic_store_explicit(&w->fs->ctr[(w->phase + 1) % 3].next, 0,
							  memory_order_relaxed);
}

/* Claim the next work unit of the current step. */
static inline int
claim(struct wctx *w)
{
	return atomic_fetch_add_explicit(&w->fs->ctr[w->phase % 3].next, 1,
									 memory_order_relaxed);
}

/* ---- matrix multiplication ---- */

struct mm_job
{
	const struct opus_wmat *w;
	int			slot;			/* which xq buffer holds the input */
	float	   *dst;			/* dst[t * ld + row], or */
	int64_t		ld;
	float	  **dst_rows;		/* dst_rows[t][row] when not NULL */
	const float *bias;			/* [n_out] or NULL */
	bool		accumulate;		/* dst += W x instead of dst = W x */
	opus_vec_dot_fn dot;		/* tokens dot_from..dot_until-1: this dot product */
	int			dot_from;		/* instead of W->qi->vec_dot (llama_dots) */
	int			dot_until;
};

/* Give each job a slot by its vec_dot type; returns the slots' types. */
static int
assign_slots(struct mm_job *jobs, int n_jobs, enum opus_qtype *types)
{
	int			n_types = 0;

	for (int j = 0; j < n_jobs; j++)
	{
		enum opus_qtype vt = jobs[j].w->qi->vec_dot_type;
		int			s;

		for (s = 0; s < n_types; s++)
			if (types[s] == vt)
				break;
		if (s == n_types)
			types[n_types++] = vt;
		jobs[j].slot = s;
	}
	return n_types;
}

/*
 * Quantize elements [off, off + len) of row t (src points at the row, n
 * elements in all) into slot `slot` of act, type `type`.  off and len must
 * be multiples of the type's block size.  For the Q8_0/Q8_1 activations of
 * the tiled kernels also store the block scales as floats.
 */
static void
quantize_part(struct opus_fwd_state *fs, struct act *act, int slot,
			  enum opus_qtype type, const float *src, int64_t n, int64_t off,
			  int64_t len, int t)
{
	const struct opus_qtype_info *qi = opus_qtype_info(type);
	uint8_t    *dst = act->xq[slot] + (size_t) t * fs->xq_stride +
		(size_t) (off / qi->block_size) * qi->type_size;
	float	   *xs = act->xs[slot] + (size_t) (t / 8) * fs->xs_stride + t % 8;
	int64_t		nb = n / 32;

	if (type == OPUS_TYPE_Q8_1)
		fs->act_q8_1(src + off, dst, len);
	else if (type == OPUS_TYPE_Q8_0)
		fs->act_q8_0(src + off, dst, len);
	else
		qi->from_float(src + off, dst, len);
	if (!fs->tiled)
		return;
	if (type == OPUS_TYPE_Q8_1)
	{
		for (int64_t b = off / 32; b < (off + len) / 32; b++)
		{
			uint16_t	h[2];

			memcpy(h, dst + (b - off / 32) * 36, sizeof(h));
			xs[b * 8] = opus_fp16_to_fp32(h[0]);
			xs[(nb + b) * 8] = opus_fp16_to_fp32(h[1]);
		}
	}
	else if (type == OPUS_TYPE_Q8_0)
	{
		for (int64_t b = off / 32; b < (off + len) / 32; b++)
		{
			uint16_t	h;

			memcpy(&h, dst + (b - off / 32) * 34, sizeof(h));
			xs[b * 8] = opus_fp16_to_fp32(h);
		}
	}
}

/* Quantize a whole row t (n floats) into slots 0..n_types-1. */
static void
quantize_row(struct opus_fwd_state *fs, struct act *act, const float *src,
			 int64_t n, int t, const enum opus_qtype *types, int n_types)
{
	for (int s = 0; s < n_types; s++)
		quantize_part(fs, act, s, types[s], src, n, 0, n, t);
}

/* The tile kernels for a weight type ([C-1]), or NULL. */
static opus_mm_rows_fn *
tiles_for(struct opus_fwd_state *fs, enum opus_qtype t)
{
	if (!fs->tiled)
		return NULL;
	if (t == OPUS_TYPE_Q4_1)
		return fs->tile_q4_1;
	if (t == OPUS_TYPE_Q8_0)
		return fs->tile_q8_0;
	if (t == OPUS_TYPE_Q4_0)
		return fs->tile_q4_0;
	if (t == OPUS_TYPE_Q5_0)
		return fs->tile_q5_0;
	return NULL;
}

/* Store one result: bias, then overwrite or accumulate. */
static inline void
mm_store(const struct mm_job *job, float *d, int64_t r, float val)
{
	if (job->bias)
		val += job->bias[r];
	if (job->accumulate)
		d[r] += val;
	else
		d[r] = val;
}

/*
 * Store a tile kernel's results, out[i * 8 + c] for row r0 + i (i < n) and
 * token t + c (c < cc), exactly as mm_store would, the job's flags read once
 * per token rather than per element.
 */
static void
mm_scatter(const struct opus_fwd_state *fs, const struct mm_job *job, const float *out,
		   int64_t r0, int64_t n, int t, int cc)
{
	const float *bias = job->bias ? job->bias + r0 : NULL;

	if (fs->tiled)
	{
		float	   *dst[8];

		for (int c = 0; c < cc; c++)
			dst[c] = (job->dst_rows ? job->dst_rows[t + c] : job->dst + (t + c) * job->ld) + r0;
		opus_mm_scatter_avx2(out, n, cc, dst, bias, job->accumulate);
		return;
	}
	for (int c = 0; c < cc; c++)
	{
		float	   *restrict d = (job->dst_rows ? job->dst_rows[t + c] : job->dst + (t + c) * job->ld) + r0;
		const float *o = out + c;

		if (job->accumulate && bias)
			for (int64_t i = 0; i < n; i++)
				d[i] += o[i * 8] + bias[i];
		else if (job->accumulate)
			for (int64_t i = 0; i < n; i++)
				d[i] += o[i * 8];
		else if (bias)
			for (int64_t i = 0; i < n; i++)
				d[i] = o[i * 8] + bias[i];
		else
			for (int64_t i = 0; i < n; i++)
				d[i] = o[i * 8];
	}
}

/* The dot product token t of a job takes (llama_dots may set another for some). */
static inline opus_vec_dot_fn
mm_dot(const struct mm_job *job, int t)
{
	return job->dot && t >= job->dot_from && t < job->dot_until ? job->dot : job->w->qi->vec_dot;
}

/* One unit: rows r0..r1 of job's matrix for tokens t0..t1 (t0 a multiple of 8). */
static void
mm_unit(struct opus_fwd_state *fs, const struct mm_job *job, const struct act *act,
		int64_t r0, int64_t r1, int t0, int t1)
{
	const struct opus_wmat *W = job->w;
	opus_mm_rows_fn *tiles = tiles_for(fs, W->type);

	if (tiles)
	{
		/* groups of 8 tokens against all the unit's rows */
		int			nb = (int) (W->n_in / 32);
		float		out[ROW_TILE_MAX * 8];

		for (int t = t0; t < t1; t += 8)
		{
			int			cc = t1 - t < 8 ? t1 - t : 8;

			tiles[cc - 1] (nb, (int) (r1 - r0), W->data + (size_t) r0 * W->row_bytes,
						   W->row_bytes, act->xq[job->slot] + (size_t) t * fs->xq_stride,
						   fs->xq_stride, act->xs[job->slot] + (size_t) (t / 8) * fs->xs_stride,
						   out);
			mm_scatter(fs, job, out, r0, r1 - r0, t, cc);
		}
		return;
	}
	/*
	 * Runs of up to 8 tokens that take the same dot product, against
	 * ROW_TILE_MAX rows at a time: the tile kernels share each unpacked
	 * weight block among the run's tokens; the same bits as dot one by one.
	 */
	for (int t = t0; t < t1;)
	{
		opus_vec_dot_fn dot = mm_dot(job, t);
		int			t2 = t + 1;

		while (t2 < t1 && t2 - t < 8 && mm_dot(job, t2) == dot)
			t2++;
		for (int64_t r = r0; r < r1; r += ROW_TILE_MAX)
		{
			int			nr = (int) (r1 - r < ROW_TILE_MAX ? r1 - r : ROW_TILE_MAX);
			float		o[8 * ROW_TILE_MAX];

			opus_vec_dot_tile(dot, W->n_in, nr, W->data + (size_t) r * W->row_bytes, W->row_bytes,
							  t2 - t, act->xq[job->slot] + (size_t) t * fs->xq_stride,
							  fs->xq_stride, o, ROW_TILE_MAX);
			for (int u = t; u < t2; u++)
			{
				float	   *d = job->dst_rows ? job->dst_rows[u] : job->dst + u * job->ld;

				for (int i = 0; i < nr; i++)
					mm_store(job, d, r + i, o[(u - t) * ROW_TILE_MAX + i]);
			}
		}
		t = t2;
	}
}

/*
 * With llama_batch_order, a matmul over n tokens takes llama.cpp's dot
 * product order for that many activation rows where it differs from the
 * one-token order (K-quant weights, opus_vec_dot_llama_batch).  n: the
 * rows of llama.cpp's matmul (in its last layer's feed-forward only the
 * tokens that give logits), n_all: the tokens we compute.  Token t is
 * taken as llama.cpp's row t, exact unless some but not all of 4 or more
 * tokens give logits and a repacked Q4_K matrix is in the last layer.
 */
static void
llama_dots(const struct opus_fwd_state *fs, struct mm_job *jobs, int n_jobs, int n, int n_all)
{
	if (!fs->c->params.llama_batch_order)
		return;
	for (int j = 0; j < n_jobs; j++)
	{
		jobs[j].dot = opus_vec_dot_llama_batch(jobs[j].w->type, jobs[j].w->n_out, n,
											   &jobs[j].dot_from, &jobs[j].dot_until);
		/* up to llama.cpp's last row: up to our last token */
		if (jobs[j].dot_until == n)
			jobs[j].dot_until = n_all;
	}
}

/*
 * dst rows of every job for n_tok tokens (inputs already quantized in act).
 * Units are (row tile, token tile) pairs, row tile major, claimed by threads.
 */
static void
matmul(struct wctx *w, struct mm_job *jobs, int n_jobs, int n_tok,
	   const struct act *act)
{
	int			row_tile = n_tok < 4 ? ROW_TILE_DECODE : ROW_TILE;
	int			n_tt = (n_tok + TOK_TILE - 1) / TOK_TILE;
	int64_t		tiles_before[8];
	int64_t		n_units = 0;

	for (int j = 0; j < n_jobs; j++)
	{
		tiles_before[j] = n_units;
		n_units += (jobs[j].w->n_out + row_tile - 1) / row_tile * n_tt;
	}
	for (;;)
	{
		int64_t		u = claim(w);
		int			j = n_jobs - 1;
		int64_t		r0;
		int			t0;

		if (u >= n_units)
			break;
		while (tiles_before[j] > u)
			j--;
		u -= tiles_before[j];
		r0 = (u / n_tt) * row_tile;
		t0 = (int) (u % n_tt) * TOK_TILE;
		mm_unit(w->fs, &jobs[j], act,
				r0, r0 + row_tile < jobs[j].w->n_out ? r0 + row_tile : jobs[j].w->n_out,
				t0, t0 + TOK_TILE < n_tok ? t0 + TOK_TILE : n_tok);
	}
}

/*
 * Fused feed-forward step: a unit computes rows r0..r1 (FFN_TILE of them) of
 * both gate and up for a token tile, then h = silu(gate) * up for those rows
 * and quantizes them (whole blocks) into SLOT_FUSED for the down matrix.
 */
static void
ffn_fused(struct wctx *w, struct mm_job *ffn, int n_tok, const struct act *in,
		  enum opus_qtype down_type)
{
	struct opus_fwd_state *fs = w->fs;
	int64_t		F = ffn[0].w->n_out;
	int			n_tt = (n_tok + TOK_TILE - 1) / TOK_TILE;
	int64_t		n_units = (F + FFN_TILE - 1) / FFN_TILE * n_tt;
	size_t		xn_ld = (size_t) (fs->c->model->hp.n_embd > F ? fs->c->model->hp.n_embd : F);

	for (;;)
	{
		int64_t		u = claim(w);
		int64_t		r0,
					r1;
		int			t0,
					t1;

		if (u >= n_units)
			break;
		r0 = (u / n_tt) * FFN_TILE;
		r1 = r0 + FFN_TILE < F ? r0 + FFN_TILE : F;
		t0 = (int) (u % n_tt) * TOK_TILE;
		t1 = t0 + TOK_TILE < n_tok ? t0 + TOK_TILE : n_tok;
		mm_unit(fs, &ffn[0], in, r0, r1, t0, t1);
		mm_unit(fs, &ffn[1], in, r0, r1, t0, t1);
		for (int t = t0; t < t1; t++)
		{
			const float *g = fs->gate + (size_t) t * F;
			const float *up = fs->up + (size_t) t * F;
			float	   *hb = fs->xn + (size_t) t * xn_ld;

			fs->swiglu(hb, g, up, r0, r1, F);
			quantize_part(fs, fs->shared, SLOT_FUSED, down_type, hb, F, r0, r1 - r0, t);
		}
	}
}

/* ---- RoPE ---- */

/*
 * cos/sin of every rotated pair for every token: theta_i = pos * base^(-2i/d)
 * (computed as a running product, as llama.cpp does), divided by the llama3
 * frequency factor and multiplied by the linear scale.
 */
void
opus_rope_table(const struct opus_model *m, int pos, float base, float freq_scale,
		   float *cs, float *sn)
{
	const struct opus_hparams *hp = &m->hp;
	int			half = hp->rope_dim / 2;
	float		theta_scale = powf(base, -2.0f / hp->rope_dim);
	float		theta = (float) pos;

	for (int i = 0; i < half; i++)
	{
		float		th = theta;

		if (m->rope_freqs)
			th /= m->rope_freqs[i];
		th *= freq_scale;
		cs[i] = cosf(th);
		sn[i] = sinf(th);
		theta *= theta_scale;
	}
}

/* Token t's tables; gemma3's local layers have their own base and no scaling. */
static void
rope_tables(struct opus_fwd_state *fs, const struct opus_model *m, int t)
{
	const struct opus_hparams *hp = &m->hp;
	size_t		off = (size_t) t * (hp->rope_dim / 2);

	opus_rope_table(m, fs->pos[t], hp->rope_freq_base, hp->rope_freq_scale,
			   fs->rope_cos + off, fs->rope_sin + off);
	if (fs->rope_cos_swa)
		opus_rope_table(m, fs->pos[t], hp->rope_freq_base_swa, 1.0f,
				   fs->rope_cos_swa + off, fs->rope_sin_swa + off);
}

/*
 * Rotate n_heads heads of vec in place.  llama: adjacent pairs (2i, 2i+1)
 * (the converter permuted Wq/Wk for that); qwen2: NeoX halves (i, i + d/2).
 */
void
opus_rope_apply(float *vec, int n_heads, int head_dim, int rope_dim, bool neox,
		   const float *cs, const float *sn)
{
	int			half = rope_dim / 2;

	for (int h = 0; h < n_heads; h++)
	{
		float	   *x = vec + (size_t) h * head_dim;

		for (int i = 0; i < half; i++)
		{
			int			i0 = neox ? i : 2 * i;
			int			i1 = neox ? i + half : 2 * i + 1;
			float		x0 = x[i0];
			float		x1 = x[i1];

			/*
			 * fused the way ggml's compiled rope is (checked bit for bit
			 * against llama.cpp): x0 c - (x1 s), x0 s + (x1 c)
			 */
			x[i0] = fmaf(x0, cs[i], -(x1 * sn[i]));
			x[i1] = fmaf(x0, sn[i], x1 * cs[i]);
		}
	}
}

/* ---- attention ---- */

/* Heads per attention work unit (heads of one KV group, at most 3). */
#define ATTN_MAX_HEADS 3

/*
 * Quantize n (a multiple of 32) floats of src to Q8_0 as activations are
 * (fs->act_q8_0): quants to qs, the group scales to ds[0], ds[ds_stride],
 * ... (the KV cache keeps them apart from the quants, see kv.c).
 */
static void
store_q8_0(const struct opus_fwd_state *fs, const float *src, int n, int8_t *qs,
		   uint8_t *ds, size_t ds_stride)
{
	uint8_t		blk[34];

	for (int b = 0; b < n / 32; b++)
	{
		fs->act_q8_0(src + 32 * b, blk, 32);
		memcpy(qs + 32 * b, blk + 2, 32);
		memcpy(ds + (size_t) b * ds_stride, blk, 2);
	}
}

/* RoPE k (and q) of token t already done; store KV head g of token t into the cache. */
static void
store_kv(struct opus_fwd_state *fs, int layer, int t, int g)
{
	const struct opus_hparams *hp = &fs->c->model->hp;
	const struct opus_kv *kv = &fs->c->kv;
	int			hd = hp->head_dim;
	int			bs = kv->block_size;
	int			p = fs->pos[t];
	int32_t		blk = fs->items[fs->item[t]].seq->blocks[p / bs];
	int			slot = p % bs;
	const float *kt = fs->k + (size_t) t * hp->n_head_kv * hd + (size_t) g * hd;
	const float *vt = fs->v + (size_t) t * hp->n_head_kv * hd + (size_t) g * hd;
	uint8_t    *kb = opus_kv_head(kv, blk, layer, false, g);
	uint8_t    *vb = opus_kv_head(kv, blk, layer, true, g);

	if (kv->type == OPUS_KV_Q8_0)
	{
		/* quants [slot][dim], then scales [group][slot] (F16) */
		size_t		scales = (size_t) bs * hd;

		store_q8_0(fs, kt, hd, (int8_t *) kb + (size_t) slot * hd,
				   kb + scales + (size_t) slot * 2, (size_t) bs * 2);
		store_q8_0(fs, vt, hd, (int8_t *) vb + (size_t) slot * hd,
				   vb + scales + (size_t) slot * 2, (size_t) bs * 2);
		return;
	}
	/* F16: K transposed [dim][slot]; V [slot][dim] */
	for (int d = 0; d < hd; d++)
	{
		uint16_t	h = opus_fp32_to_fp16(kt[d]);

		memcpy(kb + ((size_t) d * bs + slot) * 2, &h, 2);
	}
	fs->to_f16((uint16_t *) (vb + (size_t) slot * hd * 2), vt, hd);
}

/*
 * Attention for heads h0..h0+n_h-1 (one KV group) of batch token t.  The
 * batch's own K/V were stored before this step, so earlier tokens of the
 * same batch are visible and later ones are masked by the position bound.
 */
static void
attend(struct opus_fwd_state *fs, int layer, int t, int h0, int n_h, float *scores)
{
	const struct opus_hparams *hp = &fs->c->model->hp;
	const struct opus_kv *kv = &fs->c->kv;
	int			hd = hp->head_dim;
	int			kvh = h0 / (hp->n_head / hp->n_head_kv);
	struct opus_attn_args a = {
		.q = fs->q + (size_t) t * hp->n_head * hd + (size_t) h0 * hd,
		.out = fs->att + (size_t) t * hp->n_head * hd + (size_t) h0 * hd,
		.n_h = n_h,
		.hd = hd,
		.n_kv = fs->pos[t] + 1,
		.kv0 = fs->c->model->layers[layer].swa && fs->pos[t] + 1 > hp->n_swa ?
		fs->pos[t] + 1 - hp->n_swa : 0,
		.scale = hp->attn_scale > 0.0f ? hp->attn_scale : 1.0f / sqrtf((float) hd),
		.bs = kv->block_size,
		.kv_mem = kv->mem,
		.block_bytes = kv->block_bytes,
		.blocks = fs->items[fs->item[t]].seq->blocks,
		.k_off = (size_t) layer * kv->layer_bytes + (size_t) kvh * kv->head_bytes,
		.v_off = (size_t) layer * kv->layer_bytes + kv->kv_half_bytes +
		(size_t) kvh * kv->head_bytes,
		.scores = scores,
		.gemm = fs->c->params.llama_batch_order &&
		fs->items[fs->item[t]].n_tokens > 1 && hd % 16 == 0,
	};

	fs->attend(&a);
}

/* ---- the worker: the whole forward pass, one thread's share ---- */

/*
 * Normalize (and quantize for the slots' types) the N rows of x into act:
 * split across threads into the shared buffers, or, for a few tokens, all
 * of them by every thread into its private buffers, which saves a barrier.
 * Returns the buffers the next matmul reads.
 */
static const struct act *
norm_quantize(struct wctx *w, const float *norm_w, const enum opus_qtype *types,
			  int n_types)
{
	struct opus_fwd_state *fs = w->fs;
	const struct opus_hparams *hp = &fs->c->model->hp;
	int			E = hp->n_embd;
	int			N = fs->n_tok;

	if (N <= SMALL_N && w->nth > 1)
	{
		struct act *act = &fs->priv[w->ith];
		float	   *xn = fs->priv_xn + (size_t) w->ith * SMALL_N * E;

		for (int t = 0; t < N; t++)
		{
			rmsnorm(xn + (size_t) t * E, fs->x + (size_t) t * E, norm_w, E, hp->norm_eps);
			quantize_row(fs, act, xn + (size_t) t * E, E, t, types, n_types);
		}
		return act;
	}
	for (int t = w->ith; t < N; t += w->nth)
	{
		float	   *xn = fs->xn + (size_t) t * E;

		rmsnorm(xn, fs->x + (size_t) t * E, norm_w, E, hp->norm_eps);
		quantize_row(fs, fs->shared, xn, E, t, types, n_types);
	}
	step_barrier(w);
	return fs->shared;
}

/*
 * qwen3moe: RMS-normalize each head of q and k of token t with the
 * per-head weights; olmoe: the whole q row and the whole k row.
 */
static void
qk_norm(struct opus_fwd_state *fs, const struct opus_layer *L, int t)
{
	const struct opus_hparams *hp = &fs->c->model->hp;
	int			hd = hp->head_dim;
	float	   *q = fs->q + (size_t) t * hp->n_head * hd;
	float	   *k = fs->k + (size_t) t * hp->n_head_kv * hd;

	if (hp->arch == OPUS_ARCH_OLMOE)
	{
		rmsnorm(q, q, L->attn_q_norm, hp->n_head * hd, hp->norm_eps);
		rmsnorm(k, k, L->attn_k_norm, hp->n_head_kv * hd, hp->norm_eps);
		return;
	}
	for (int h = 0; h < hp->n_head; h++)
		rmsnorm(q + (size_t) h * hd, q + (size_t) h * hd, L->attn_q_norm, hd, hp->norm_eps);
	for (int h = 0; h < hp->n_head_kv; h++)
		rmsnorm(k + (size_t) h * hd, k + (size_t) h * hd, L->attn_k_norm, hd, hp->norm_eps);
}

/*
 * The feed-forward of a MoE layer (x += experts(rmsnorm(x))): the router
 * (and shared-expert gate) as an ordinary matmul, then moe.c's steps.  The
 * expert load of layer il is counted into the context; thread 0 adds the
 * step's weight traffic to the context's statistics.
 *
 * For a few tokens (decode) with a small router whose type the matmul runs
 * by plain vec_dot (no tiled kernel, so the logits are the same values),
 * thread 0 normalizes every token privately, computes the router logits and
 * routes while the others quantize the expert inputs: two barriers fewer.
 */
static void
moe_layer(struct wctx *w, const struct opus_layer *L, int il)
{
	struct opus_fwd_state *fs = w->fs;
	struct opus_ctx *c = fs->c;
	const struct opus_hparams *hp = &c->model->hp;
	int			E = hp->n_embd;
	int			N = fs->n_tok;
	struct mm_job rj[2] = {
		{.w = &L->router,.dst = fs->moe_logits,.ld = hp->n_expert},
		{.w = &L->shexp_gate,.dst = fs->moe_shl,.ld = 1},
	};
	int			n_jobs = L->shexp_gate.data ? 2 : 1;
	enum opus_qtype types[MAX_SLOTS];
	int			n_types = assign_slots(rj, n_jobs, types);
	bool		fused = N <= SMALL_N &&
		(int64_t) N * hp->n_expert * E <= ((int64_t) 1 << 20) &&
		!tiles_for(fs, L->router.type) && !(n_jobs == 2 && tiles_for(fs, L->shexp_gate.type));

	for (int t = w->ith; t < N; t += w->nth)
	{
		float	   *xn = fs->xn + (size_t) t * (E > hp->n_ff ? E : hp->n_ff);

		rmsnorm(xn, fs->x + (size_t) t * E, L->ffn_norm, E, hp->norm_eps);
		if (!fused)
			quantize_row(fs, fs->shared, xn, E, t, types, n_types);
		opus_moe_quantize_input(fs->moe, &L->moe, xn, t);
	}
	if (fused && w->ith == 0)
	{
		/* the router for every token by this thread, as mm_unit would */
		struct act *act = &fs->priv[0];
		float	   *xn = fs->priv_xn;

		for (int t = 0; t < N; t++)
		{
			rmsnorm(xn, fs->x + (size_t) t * E, L->ffn_norm, E, hp->norm_eps);
			quantize_row(fs, act, xn, E, t, types, n_types);
			for (int j = 0; j < n_jobs; j++)
				mm_unit(fs, &rj[j], act, 0, rj[j].w->n_out, t, t + 1);
		}
	}
	if (!fused)
	{
		step_barrier(w);
		matmul(w, rj, n_jobs, N, fs->shared);
		step_barrier(w);
	}
	if (w->ith == 0)
	{
		const struct opus_moe_step_stats *st;

		opus_moe_route(fs->moe, &L->moe, fs->moe_logits, (size_t) hp->n_expert,
					   fs->moe_shl, N, c->expert_load + (size_t) il * hp->n_expert);
		st = opus_moe_last_stats(fs->moe);
		c->moe_io.bytes_last += (uint64_t) st->weight_bytes;
		c->moe_io.bytes_total += (uint64_t) st->weight_bytes;
		c->moe_io.active_last += st->n_active;
		if (st->max_reads > c->moe_io.max_reads_last)
			c->moe_io.max_reads_last = st->max_reads;
	}
	step_barrier(w);
	opus_moe_gate_up(fs->moe, &L->moe, &fs->ctr[w->phase % 3].next);
	step_barrier(w);
	opus_moe_quantize_hidden(fs->moe, &L->moe, w->ith, w->nth);
	step_barrier(w);
	opus_moe_down(fs->moe, &L->moe, &fs->ctr[w->phase % 3].next);
	step_barrier(w);
	opus_moe_combine(fs->moe, &L->moe, fs->x, (size_t) E, true, w->ith, w->nth);
	step_barrier(w);
}

/* gemma3: x += rmsnorm(tmp) * norm_w, every token (tmp holds Wo's or Wdown's output). */
static void
post_norm_add(struct wctx *w, const float *norm_w)
{
	struct opus_fwd_state *fs = w->fs;
	const struct opus_hparams *hp = &fs->c->model->hp;
	int			E = hp->n_embd;

	for (int t = w->ith; t < fs->n_tok; t += w->nth)
	{
		float	   *y = fs->tmp + (size_t) t * E;
		float	   *x = fs->x + (size_t) t * E;

		rmsnorm(y, y, norm_w, E, hp->norm_eps);
		for (int i = 0; i < E; i++)
			x[i] = y[i] + x[i];
	}
	step_barrier(w);
}

static void
forward_worker(void *arg, int ith, int nth)
{
	struct opus_fwd_state *fs = arg;
	const struct opus_model *m = fs->c->model;
	const struct opus_hparams *hp = &m->hp;
	struct wctx w = {.fs = fs,.ith = ith,.nth = nth,.phase = 0};
	int			N = fs->n_tok;
	int			E = hp->n_embd;
	int			F = hp->n_ff;
	int			hd = hp->head_dim;
	int			q_dim = hp->n_head * hd;
	int			kv_dim = hp->n_head_kv * hd;
	int			half = hp->rope_dim / 2;
	bool		neox = (hp->arch != OPUS_ARCH_LLAMA);
	float	   *scores = fs->scores + (size_t) ith * fs->scores_stride;
	int			n_rep = hp->n_head / hp->n_head_kv;
	/*
	 * each attention unit ropes and stores its own token's K/V (decode
	 * batches), which saves a barrier per layer: a unit is then a whole KV
	 * group, its heads attended ATTN_MAX_HEADS at a time
	 */
	bool		fuse_kv = fs->single && !m->layers[0].attn_q_norm;
	/* units per KV group: one when fused, else one per ATTN_MAX_HEADS heads */
	int			n_sub = fuse_kv ? 1 : (n_rep + ATTN_MAX_HEADS - 1) / ATTN_MAX_HEADS;
	enum opus_qtype types[MAX_SLOTS];
	int			n_types;

	/* embeddings and RoPE tables */
	for (int t = ith; t < N; t += nth)
	{
		float	   *xt = fs->x + (size_t) t * E;

		m->tok_embd.qi->to_float(m->tok_embd.data + (size_t) fs->tok[t] * m->tok_embd.row_bytes,
								 xt, E);
		if (hp->embd_scale > 0.0f)
			for (int i = 0; i < E; i++)
				xt[i] = xt[i] * hp->embd_scale;
		rope_tables(fs, m, t);
	}
	step_barrier(&w);

	for (int il = 0; il < hp->n_layer; il++)
	{
		const struct opus_layer *L = &m->layers[il];
		struct mm_job qkv[3] = {
			{.w = &L->wq,.dst = fs->q,.ld = q_dim,.bias = L->bq},
			{.w = &L->wk,.dst = fs->k,.ld = kv_dim,.bias = L->bk},
			{.w = &L->wv,.dst = fs->v,.ld = kv_dim,.bias = L->bv},
		};
		/* gemma3: Wo and Wdown write tmp, normalized and added to x after */
		struct mm_job wo = {.w = &L->wo,.dst = L->attn_post_norm ? fs->tmp : fs->x,.ld = E,
		.accumulate = !L->attn_post_norm};
		struct mm_job ffn[2] = {
			{.w = &L->w_gate,.dst = fs->gate,.ld = F},
			{.w = &L->w_up,.dst = fs->up,.ld = F},
		};
		struct mm_job down = {.w = &L->w_down,.dst = L->ffn_post_norm ? fs->tmp : fs->x,.ld = E,
		.accumulate = !L->ffn_post_norm};
		const float *rcos = L->swa ? fs->rope_cos_swa : fs->rope_cos;
		const float *rsin = L->swa ? fs->rope_sin_swa : fs->rope_sin;
		enum opus_qtype wo_type = L->wo.qi->vec_dot_type;
		/* (a MoE layer has no dense feed-forward: its types are unused) */
		enum opus_qtype down_type = L->is_moe ? OPUS_TYPE_F32 : L->w_down.qi->vec_dot_type;
		/* attention units quantize their own heads (whole blocks) for Wo */
		bool		fuse_att_q = hd % opus_qtype_info(wo_type)->block_size == 0;
		/* gate/up units apply SiLU and quantize their rows for Wdown */
		bool		fuse_ffn = FFN_TILE % opus_qtype_info(down_type)->block_size == 0;
		const struct act *in;

		/*
		 * llama.cpp's last layer keeps only the output tokens after
		 * attention, so its feed-forward matmuls have n_out rows
		 */
		llama_dots(fs, qkv, 3, N, N);
		llama_dots(fs, &wo, 1, N, N);
		llama_dots(fs, ffn, 2, il == hp->n_layer - 1 ? fs->n_out : N, N);
		llama_dots(fs, &down, 1, il == hp->n_layer - 1 ? fs->n_out : N, N);

		/* Q, K, V = Wq,Wk,Wv rmsnorm(x) (+ bias) */
		n_types = assign_slots(qkv, 3, types);
		in = norm_quantize(&w, L->attn_norm, types, n_types);
		matmul(&w, qkv, 3, N, in);
		step_barrier(&w);

		/* RoPE on q and k; k and v into the cache */
		if (!fuse_kv)
		{
			for (int t = ith; t < N; t += nth)
			{
				if (L->attn_q_norm)
					qk_norm(fs, L, t);
				opus_rope_apply(fs->q + (size_t) t * q_dim, hp->n_head, hd, hp->rope_dim, neox,
						   rcos + (size_t) t * half, rsin + (size_t) t * half);
				opus_rope_apply(fs->k + (size_t) t * kv_dim, hp->n_head_kv, hd, hp->rope_dim, neox,
						   rcos + (size_t) t * half, rsin + (size_t) t * half);
				for (int g = 0; g < hp->n_head_kv; g++)
					store_kv(fs, il, t, g);
			}
			step_barrier(&w);
		}

		/* attention: (token, KV group[, up to 3 of the group's heads]) units */
		for (;;)
		{
			int			u = claim(&w);
			int			t = u / (hp->n_head_kv * n_sub);
			int			g = u / n_sub % hp->n_head_kv;
			int			j0 = u % n_sub * ATTN_MAX_HEADS;	/* first head within the group */
			int			j1 = fuse_kv ? n_rep : j0 + 1;

			if (u >= N * hp->n_head_kv * n_sub)
				break;
			if (fuse_kv)
			{
				/* the whole group is this unit's: rope its q heads and k, store k, v */
				opus_rope_apply(fs->q + (size_t) t * q_dim + (size_t) g * n_rep * hd, n_rep, hd,
						   hp->rope_dim, neox,
						   rcos + (size_t) t * half, rsin + (size_t) t * half);
				opus_rope_apply(fs->k + (size_t) t * kv_dim + (size_t) g * hd, 1, hd,
						   hp->rope_dim, neox,
						   rcos + (size_t) t * half, rsin + (size_t) t * half);
				store_kv(fs, il, t, g);
			}
			for (int j = j0; j < j1; j += ATTN_MAX_HEADS)
			{
				int			h0 = g * n_rep + j;
				int			n_h = n_rep - j < ATTN_MAX_HEADS ? n_rep - j : ATTN_MAX_HEADS;

				attend(fs, il, t, h0, n_h, scores);
				if (fuse_att_q)
					quantize_part(fs, fs->shared, SLOT_FUSED, wo_type, fs->att + (size_t) t * q_dim,
								  q_dim, (int64_t) h0 * hd, (int64_t) n_h * hd, t);
			}
		}
		step_barrier(&w);

		/* x += Wo att */
		if (fuse_att_q)
			wo.slot = SLOT_FUSED;
		else
		{
			n_types = assign_slots(&wo, 1, types);
			for (int t = ith; t < N; t += nth)
				quantize_row(fs, fs->shared, fs->att + (size_t) t * q_dim, q_dim, t, types, n_types);
			step_barrier(&w);
		}
		matmul(&w, &wo, 1, N, fs->shared);
		step_barrier(&w);
		if (L->attn_post_norm)
			post_norm_add(&w, L->attn_post_norm);

		if (L->is_moe)
		{
			moe_layer(&w, L, il);
			continue;
		}

		/* h = silu(Wgate rmsnorm(x)) * Wup rmsnorm(x) */
		n_types = assign_slots(ffn, 2, types);
		in = norm_quantize(&w, L->ffn_norm, types, n_types);
		if (fuse_ffn)
		{
			ffn_fused(&w, ffn, N, in, down_type);
			down.slot = SLOT_FUSED;
		}
		else
		{
			matmul(&w, ffn, 2, N, in);
			step_barrier(&w);
			n_types = assign_slots(&down, 1, types);
			for (int t = ith; t < N; t += nth)
			{
				const float *g = fs->gate + (size_t) t * F;
				const float *u = fs->up + (size_t) t * F;
				float	   *hb = fs->xn + (size_t) t * (E > F ? E : F);

				fs->swiglu(hb, g, u, 0, F, F);
				quantize_row(fs, fs->shared, hb, F, t, types, n_types);
			}
		}
		step_barrier(&w);

		/* x += Wdown h */
		matmul(&w, &down, 1, N, fs->shared);
		step_barrier(&w);
		if (L->ffn_post_norm)
			post_norm_add(&w, L->ffn_post_norm);
	}

	/* logits for the requested tokens only */
	if (fs->n_out > 0)
	{
		struct mm_job out = {.w = &m->output,.dst_rows = fs->out_rows};

		llama_dots(fs, &out, 1, fs->n_out, fs->n_out);
		n_types = assign_slots(&out, 1, types);
		for (int k = ith; k < fs->n_out; k += nth)
		{
			float	   *xn = fs->xn + (size_t) k * (E > F ? E : F);

			rmsnorm(xn, fs->x + (size_t) fs->out_tok[k] * E, m->output_norm, E, hp->norm_eps);
			quantize_row(fs, fs->shared, xn, E, k, types, n_types);
		}
		step_barrier(&w);
		matmul(&w, &out, 1, fs->n_out, fs->shared);
	}
}

/* ---- state ---- */

static size_t
max_size(size_t a, size_t b)
{
	return a > b ? a : b;
}

/* Bytes of a quantized activation row of n elements for w's vec_dot type. */
static size_t
act_row_bytes(const struct opus_wmat *w)
{
	size_t		sz = 0;

	if (!opus_qtype_row_size(w->qi->vec_dot_type, w->n_in, &sz))
		return SIZE_MAX;
	return sz;
}

enum opus_status
opus_fwd_state_create(struct opus_ctx *c, struct opus_error *err)
{
	const struct opus_model *m = c->model;
	const struct opus_hparams *hp = &m->hp;
	struct opus_fwd_state *fs;
	size_t		B = (size_t) c->params.max_batch_tokens;
	size_t		E = hp->n_embd,
				F = hp->n_ff;
	size_t		q_dim = (size_t) hp->n_head * hp->head_dim;
	size_t		kv_dim = (size_t) hp->n_head_kv * hp->head_dim;
	size_t		stride = 0;
	bool		ok = true;

	fs = aligned_alloc(64, (sizeof(*fs) + 63) / 64 * 64);
	if (!fs)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for forward state");
	memset(fs, 0, sizeof(*fs));
	c->fs = fs;
	fs->c = c;
	fs->n_batch = (int) B;
	fs->n_threads = c->params.n_threads;

	stride = act_row_bytes(&m->output);
	for (int il = 0; il < hp->n_layer; il++)
	{
		const struct opus_layer *L = &m->layers[il];
		const struct opus_wmat *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo,
		&L->w_gate, &L->w_up, &L->w_down, &L->router, &L->shexp_gate};

		for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
			if (ws[i]->data)
				stride = max_size(stride, act_row_bytes(ws[i]));
	}
	if (stride == SIZE_MAX || stride > ((size_t) 1 << 30) / B)
		return opus_error_set(err, OPUS_ERR_NOMEM, "activation buffers too large");
	fs->xq_stride = (stride + 63) / 64 * 64;
	fs->xs_stride = 2 * 8 * (max_size(max_size(E, F), q_dim) / 32 + 1);

#define ALLOC(ptr, n) \
	do { \
		(ptr) = aligned_alloc(64, ((n) * sizeof(*(ptr)) + 63) / 64 * 64); \
		ok = ok && (ptr) != NULL; \
	} while (0)
	ALLOC(fs->tok, B);
	ALLOC(fs->pos, B);
	ALLOC(fs->item, B);
	ALLOC(fs->x, B * E);
	ALLOC(fs->xn, B * max_size(E, F));
	ALLOC(fs->q, B * q_dim);
	ALLOC(fs->k, B * kv_dim);
	ALLOC(fs->v, B * kv_dim);
	ALLOC(fs->att, B * q_dim);
	ALLOC(fs->gate, B * F);
	ALLOC(fs->up, B * F);
	ALLOC(fs->shared, 1);
	ALLOC(fs->priv, (size_t) fs->n_threads);
	ALLOC(fs->priv_xn, (size_t) fs->n_threads * SMALL_N * E);
	if (!ok)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for forward buffers");
	memset(fs->shared, 0, sizeof(struct act));
	memset(fs->priv, 0, sizeof(struct act) * fs->n_threads);
	for (int s = 0; s < MAX_SLOTS; s++)
	{
		size_t		groups = (B + 7) / 8;

		ALLOC(fs->shared->xq[s], B * fs->xq_stride);
		ALLOC(fs->shared->xs[s], groups * fs->xs_stride);
		if (fs->shared->xs[s])
			memset(fs->shared->xs[s], 0, groups * fs->xs_stride * sizeof(float));
		for (int i = 0; i < fs->n_threads; i++)
		{
			ALLOC(fs->priv[i].xq[s], SMALL_N * fs->xq_stride);
			ALLOC(fs->priv[i].xs[s], (SMALL_N + 7) / 8 * fs->xs_stride);
			if (fs->priv[i].xs[s])
				memset(fs->priv[i].xs[s], 0, (SMALL_N + 7) / 8 * fs->xs_stride * sizeof(float));
		}
	}
	ALLOC(fs->rope_cos, B * (hp->rope_dim / 2 + 1));
	ALLOC(fs->rope_sin, B * (hp->rope_dim / 2 + 1));
	if (hp->n_swa > 0)
	{
		ALLOC(fs->rope_cos_swa, B * (hp->rope_dim / 2 + 1));
		ALLOC(fs->rope_sin_swa, B * (hp->rope_dim / 2 + 1));
	}
	if (m->layers[0].attn_post_norm)
		ALLOC(fs->tmp, B * E);
	fs->scores_stride = 3 * (((size_t) c->params.n_ctx + 15) / 16 * 16);
	ALLOC(fs->scores, (size_t) c->params.n_threads * fs->scores_stride);
	ALLOC(fs->out_tok, B);
	ALLOC(fs->out_rows, B);
	if (hp->n_expert > 0)
	{
		ALLOC(fs->moe_logits, B * (size_t) hp->n_expert);
		ALLOC(fs->moe_shl, B);
	}
#undef ALLOC
	if (!ok)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for forward buffers");
	if (hp->n_expert > 0)
	{
		const struct opus_moe_experts **layers = malloc(sizeof(*layers) * (size_t) hp->n_layer);
		enum opus_status st;

		if (!layers)
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for forward buffers");
		for (int il = 0; il < hp->n_layer; il++)
			layers[il] = &m->layers[il].moe;
		st = opus_moe_scratch_create(layers, hp->n_layer, (int) B, &fs->moe, err);
		free(layers);
		if (st != OPUS_OK)
			return st;
	}

	if (strcmp(opus_qtype_cpu_variant(), "avx2") == 0)
	{
		/* the AVX2 attention kernels handle heads of 16k (Q8_0 KV: 32k) elements, up to 256 */
		if (c->kv.type == OPUS_KV_Q8_0)
			fs->attend = hp->head_dim % 32 == 0 && hp->head_dim <= 256 ?
				opus_fwd_attend_q8_0_avx2 : opus_fwd_attend_q8_0_ref;
		else if (hp->head_dim % 16 == 0 && hp->head_dim <= 256)
			fs->attend = opus_fwd_attend_avx2;
		else
			fs->attend = opus_fwd_attend_ref;
		fs->to_f16 = opus_fwd_to_f16_avx2;
		fs->swiglu = opus_fwd_swiglu_avx2;
		fs->act_q8_0 = opus_act_q8_0_avx2;
		fs->act_q8_1 = opus_act_q8_1_avx2;
		fs->tiled = true;
		for (int k = 0; k < 8; k++)
		{
			fs->tile_q4_1[k] = opus_mm_rows_avx2(OPUS_TYPE_Q4_1, k + 1, true);
			fs->tile_q8_0[k] = opus_mm_rows_avx2(OPUS_TYPE_Q8_0, k + 1, true);
			fs->tile_q4_0[k] = opus_mm_rows_avx2(OPUS_TYPE_Q4_0, k + 1, true);
			fs->tile_q5_0[k] = opus_mm_rows_avx2(OPUS_TYPE_Q5_0, k + 1, true);
		}
	}
	else
	{
		fs->attend = c->kv.type == OPUS_KV_Q8_0 ? opus_fwd_attend_q8_0_ref : opus_fwd_attend_ref;
		fs->to_f16 = to_f16_ref;
		fs->swiglu = opus_fwd_swiglu_ref;
		fs->act_q8_0 = opus_act_q8_0_ref;
		fs->act_q8_1 = opus_act_q8_1_ref;
	}
	if (hp->arch == OPUS_ARCH_GEMMA3)	/* the feed-forward's activation: GELU */
		fs->swiglu = fs->swiglu == opus_fwd_swiglu_avx2 ? opus_fwd_geglu_avx2 : opus_fwd_geglu_ref;
	return OPUS_OK;
}

void
opus_fwd_state_free(struct opus_fwd_state *fs)
{
	if (!fs)
		return;
	free(fs->tok);
	free(fs->pos);
	free(fs->item);
	free(fs->x);
	free(fs->xn);
	free(fs->q);
	free(fs->k);
	free(fs->v);
	free(fs->att);
	free(fs->gate);
	free(fs->up);
	for (int s = 0; s < MAX_SLOTS; s++)
	{
		if (fs->shared)
		{
			free(fs->shared->xq[s]);
			free(fs->shared->xs[s]);
		}
		for (int i = 0; fs->priv && i < fs->n_threads; i++)
		{
			free(fs->priv[i].xq[s]);
			free(fs->priv[i].xs[s]);
		}
	}
	free(fs->shared);
	free(fs->priv);
	free(fs->priv_xn);
	free(fs->rope_cos);
	free(fs->rope_sin);
	free(fs->rope_cos_swa);
	free(fs->rope_sin_swa);
	free(fs->tmp);
	free(fs->scores);
	free(fs->out_tok);
	free(fs->out_rows);
	free(fs->moe_logits);
	free(fs->moe_shl);
	opus_moe_scratch_free(fs->moe);
	free(fs);
}

/* ---- entry point ---- */

/* Blocks seq needs to hold n_pos positions. */
static int64_t
blocks_for(const struct opus_kv *kv, int64_t n_pos)
{
	return (n_pos + kv->block_size - 1) / kv->block_size;
}

/* Whether appending to seq must first copy its last, shared, partial block. */
static bool
needs_cow(const struct opus_kv *kv, const struct opus_seq *s)
{
	return s->n_pos % kv->block_size != 0 &&
		kv->refcount[s->blocks[s->n_pos / kv->block_size]] > 1;
}

enum opus_status
opus_forward(struct opus_ctx *c, struct opus_batch_item *items, int n_items,
			 struct opus_error *err)
{
	struct opus_kv *kv = &c->kv;
	const struct opus_hparams *hp = &c->model->hp;
	int64_t		n_tok = 0;
	int64_t		need = 0;
	enum opus_status st = OPUS_OK;

	if (n_items < 0 || (n_items > 0 && !items))
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "bad batch");

	/* validate everything before touching any sequence */
	for (int i = 0; i < n_items; i++)
	{
		struct opus_batch_item *it = &items[i];
		struct opus_seq *s = it->seq;

		if (!s || it->n_tokens < 0 || (it->n_tokens > 0 && !it->tokens))
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "batch item %d is malformed", i);
		if (it->n_tokens == 0)
			continue;
		n_tok += it->n_tokens;
		if (n_tok > c->params.max_batch_tokens)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "batch has more than %d tokens", c->params.max_batch_tokens);
		if (s->n_pos < 0 || s->n_blocks != blocks_for(kv, s->n_pos))
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "sequence of batch item %d is inconsistent", i);
		if ((int64_t) s->n_pos + it->n_tokens > c->params.n_ctx)
			return opus_error_set(err, OPUS_ERR_CONTEXT,
								  "sequence would reach %lld positions, over the context size %d",
								  (long long) s->n_pos + it->n_tokens, c->params.n_ctx);
		for (int j = 0; j < it->n_tokens; j++)
		{
			if (it->tokens[j] < 0 || it->tokens[j] >= hp->n_vocab)
				return opus_error_set(err, OPUS_ERR_TOKENIZE,
									  "token id %d out of range 0..%d",
									  it->tokens[j], hp->n_vocab - 1);
		}
		for (int j = 0; j < i; j++)
		{
			if (items[j].seq == s && items[j].n_tokens > 0)
				return opus_error_set(err, OPUS_ERR_INVALID_ARG,
									  "a sequence appears twice in one batch");
		}
		need += blocks_for(kv, s->n_pos + it->n_tokens) - s->n_blocks;
		if (needs_cow(kv, s))
			need++;
	}
	if (need > kv->n_free)
		return opus_error_set(err, OPUS_ERR_CAPACITY,
							  "kv cache full: %lld blocks needed, %lld free",
							  (long long) need, (long long) kv->n_free);
	if (n_tok == 0)
		return OPUS_OK;

	/* grow block tables (failure leaves every sequence as it was) */
	for (int i = 0; i < n_items; i++)
	{
		struct opus_seq *s = items[i].seq;
		int64_t		nb = blocks_for(kv, (int64_t) s->n_pos + items[i].n_tokens);

		if (items[i].n_tokens > 0 && nb > s->n_blocks_cap)
		{
			int64_t		cap = s->n_blocks_cap > 0 ? s->n_blocks_cap : 4;
			int32_t    *nbk;

			while (cap < nb)
				cap *= 2;
			nbk = realloc(s->blocks, (size_t) cap * sizeof(int32_t));
			if (!nbk)
				return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for a block table");
			s->blocks = nbk;
			s->n_blocks_cap = (int32_t) cap;
		}
	}

	/* allocate blocks (cannot fail now), copying a shared partial block */
	for (int i = 0; i < n_items; i++)
	{
		struct opus_seq *s = items[i].seq;
		int64_t		nb = blocks_for(kv, (int64_t) s->n_pos + items[i].n_tokens);

		if (items[i].n_tokens == 0)
			continue;
		if (needs_cow(kv, s))
		{
			int32_t		old = s->blocks[s->n_pos / kv->block_size];
			int32_t		fresh = opus_kv_alloc(kv);

			if (st == OPUS_OK)
				st = c->ops->copy_block(c, fresh, old, err);
			opus_kv_unref(kv, old);
			s->blocks[s->n_pos / kv->block_size] = fresh;
		}
		while (s->n_blocks < nb)
			s->blocks[s->n_blocks++] = opus_kv_alloc(kv);
	}

	/* the backend's pass (a failed one gives back the blocks just taken) */
	if (st == OPUS_OK)
		st = c->ops->forward(c, items, n_items, err);
	if (st != OPUS_OK)
	{
		for (int i = 0; i < n_items; i++)
		{
			struct opus_seq *s = items[i].seq;

			while (s->n_blocks > blocks_for(kv, s->n_pos))
				opus_kv_unref(kv, s->blocks[--s->n_blocks]);
		}
		return st;
	}
	for (int i = 0; i < n_items; i++)
		items[i].seq->n_pos += items[i].n_tokens;
	return OPUS_OK;
}

/*
 * The CPU backend's forward pass (backend.h): lay the batch out for the
 * workers and run them on the context's thread pool.
 */
enum opus_status
opus_cpu_forward(struct opus_ctx *c, struct opus_batch_item *items, int n_items,
				 struct opus_error *err)
{
	struct opus_fwd_state *fs = c->fs;
	const struct opus_hparams *hp = &c->model->hp;
	int64_t		n_tok = 0;
	int			t;

	for (int i = 0; i < n_items; i++)
		n_tok += items[i].n_tokens;

	/* lay out the batch's tokens and the logits wanted */
	t = 0;
	fs->n_out = 0;
	for (int i = 0; i < n_items; i++)
	{
		struct opus_batch_item *it = &items[i];

		for (int j = 0; j < it->n_tokens; j++, t++)
		{
			fs->tok[t] = it->tokens[j];
			fs->pos[t] = it->seq->n_pos + j;
			fs->item[t] = i;
			if (it->logits && (it->logits_all || j == it->n_tokens - 1))
			{
				fs->out_tok[fs->n_out] = t;
				fs->out_rows[fs->n_out] = it->logits +
					(it->logits_all ? (size_t) j * hp->n_vocab : 0);
				fs->n_out++;
			}
		}
	}
	fs->items = items;
	fs->n_tok = (int) n_tok;
	fs->single = true;
	for (int i = 0; i < n_items; i++)
		if (items[i].n_tokens > 1)
			fs->single = false;
	for (int k = 0; k < 3; k++)
		atomic_store(&fs->ctr[k].next, 0);
	if (fs->moe)
	{
		c->moe_io.steps++;
		c->moe_io.bytes_last = 0;
		c->moe_io.max_reads_last = 0;
		c->moe_io.active_last = 0;
	}

	opus_pool_run(c->pool, forward_worker, fs);
	return OPUS_OK;
}
