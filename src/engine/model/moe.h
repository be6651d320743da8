/*
 * moe.h - mixture-of-experts feed-forward: routing and the batched expert
 * dispatch, independent of the model struct.
 *
 * A MoE layer replaces the dense feed-forward with n_expert small SwiGLU
 * networks (gate, up: [n_ff][n_embd]; down: [n_embd][n_ff]) and a router.
 * For a batch of N tokens the caller supplies the router logits (N x
 * n_expert, computed with the ordinary matmul from ffn_gate_inp) and the
 * normed input rows; this module
 *
 *   1. routes: per token the gating function (softmax or sigmoid over all
 *      experts), the top n_used experts (ties to the lower index), their
 *      weights (optionally renormalised to sum 1, optionally scaled);
 *   2. groups the N * n_used (token, choice) pairs by expert with a counting
 *      sort (tokens ascending inside a group);
 *   3. runs every active expert once over its whole group: gate and up rows
 *      times the group's activation rows (each token row quantized once to
 *      the weights' vec_dot type), SiLU(gate) * up, quantize, down rows;
 *      threads share out (expert, row tile, token tile) units;
 *   4. combines: out[t] (+)= sum over the token's choices, in choice order
 *      (k = 0 first), of weight * expert output, then the shared expert.
 *
 * An optional shared expert (qwen2moe) sits at index n_expert: every token
 * uses it, with weight sigmoid(shared logit) when gated, else 1.
 *
 * Determinism: each output element of an expert is one vec_dot over a whole
 * row, whatever the grouping, the tiling or the thread; the combine adds in
 * a fixed order.  So a token's result depends only on its own input, never on
 * the batch composition or the thread count, and the batched dispatch equals
 * the per-token reference (opus_moe_forward_ref) bit for bit.
 *
 * Weights are read once per step per active expert (per token tile of
 * MOE_TOK_TILE tokens: an expert with more tokens than that in one step is
 * streamed once per tile); the scratch records the bytes each step reads.
 *
 * Threading: the step functions below are called inside one parallel region
 * of a thread pool, separated by barriers, in this order:
 *   opus_moe_quantize_input (any thread, per token) | opus_moe_route (one
 *   thread) -> barrier -> opus_moe_gate_up (claimed units) -> barrier ->
 *   opus_moe_quantize_hidden (pairs split) -> barrier -> opus_moe_down
 *   (claimed units) -> barrier -> opus_moe_combine (tokens split).
 * opus_moe_forward runs that whole sequence in its own region.
 */
#ifndef OPUS_MOE_H
#define OPUS_MOE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/qtype.h"
#include "base/status.h"
#include "base/threadpool.h"

#define OPUS_MOE_MAX_USED 16	/* top-k limit */
#define OPUS_MOE_MAX_EXPERTS 1024
#define OPUS_MOE_MAX_SLOTS 3	/* distinct vec_dot types among gate/up */

enum opus_moe_gating
{
	OPUS_MOE_GATING_SOFTMAX = 0,	/* softmax over all experts, then top-k */
	OPUS_MOE_GATING_SIGMOID = 1		/* sigmoid of each logit, then top-k */
};

/* One expert's projection: n_out rows of n_in elements of one type. */
struct opus_moe_mat
{
	const uint8_t *data;		/* first row */
	enum opus_qtype type;
	const struct opus_qtype_info *qi;
	int64_t		n_in;
	int64_t		n_out;
	size_t		row_bytes;
};

/* The experts of one layer: read-only after opus_moe_experts_finish. */
struct opus_moe_experts
{
	int32_t		n_expert;		/* routed experts */
	int32_t		n_used;			/* experts per token (top-k) */
	int64_t		n_embd;
	enum opus_moe_gating gating;
	bool		norm_weights;	/* divide the k weights by their sum */
	float		weight_scale;	/* multiply the weights by this (1: none) */
	bool		has_shared;		/* a shared expert at index n_expert */
	bool		shared_gated;	/* its weight is sigmoid(shared logit), else 1 */
	/* [n_expert + has_shared] each; may point into one caller allocation */
	struct opus_moe_mat *gate;
	struct opus_moe_mat *up;
	struct opus_moe_mat *down;

	/* filled by opus_moe_experts_finish */
	int			n_in_types;		/* distinct vec_dot types of gate/up */
	enum opus_qtype in_types[OPUS_MOE_MAX_SLOTS];
	uint8_t    *gate_slot;		/* [n_expert + has_shared] */
	uint8_t    *up_slot;
	int64_t		max_ff;			/* widest expert */
	size_t		max_hq_bytes;	/* widest quantized hidden row */
	size_t		max_xq_bytes;	/* widest quantized input row */
	size_t		expert_bytes;	/* gate + up + down bytes of one routed expert (max) */
};

/*
 * Point dst[0..n_expert-1] at the experts of a stacked 3-D tensor
 * ([n_in, n_out, n_expert] in GGUF order: expert e's matrix starts at
 * data + e * n_out * row_bytes).  data_size: bytes available at data.
 */
enum opus_status opus_moe_mats_stacked(struct opus_moe_mat *dst, int32_t n_expert,
									   const void *data, size_t data_size,
									   enum opus_qtype type, int64_t n_in,
									   int64_t n_out, struct opus_error *err);

/* Fill one matrix descriptor (per-expert tensors); same checks. */
enum opus_status opus_moe_mat_set(struct opus_moe_mat *dst, const void *data,
								  size_t data_size, enum opus_qtype type,
								  int64_t n_in, int64_t n_out,
								  struct opus_error *err);

/*
 * Check the shapes and types (gate/up [n_ff][n_embd], down [n_embd][n_ff],
 * kernels available, rows whole blocks) and fill the derived fields.
 * Allocates gate_slot/up_slot; release with opus_moe_experts_release.
 */
enum opus_status opus_moe_experts_finish(struct opus_moe_experts *ex,
										 struct opus_error *err);
void		opus_moe_experts_release(struct opus_moe_experts *ex);

/* ---- per-step statistics ---- */

struct opus_moe_step_stats
{
	int32_t		n_tok;
	int32_t		n_active;		/* routed experts with at least one token */
	int64_t		n_pairs;		/* (token, expert) pairs, shared expert included */
	int64_t		weight_bytes;	/* expert weight bytes the step reads */
	int32_t		max_reads;		/* most times one expert's weights are read (1 = once) */
};

/* ---- scratch: one per context, sized once ---- */

struct opus_moe_scratch;

/*
 * Scratch for up to max_tok tokens through any of the n layers given (their
 * n_embd must agree).  Sized once: nothing is allocated per step.
 */
enum opus_status opus_moe_scratch_create(const struct opus_moe_experts *const *layers,
										 int n_layers, int max_tok,
										 struct opus_moe_scratch **out,
										 struct opus_error *err);
void		opus_moe_scratch_free(struct opus_moe_scratch *s);

/* The statistics of the last routed step. */
const struct opus_moe_step_stats *opus_moe_last_stats(const struct opus_moe_scratch *s);

/* The routing of the last step: expert ids and weights of token t ([n_used]). */
const int32_t *opus_moe_choices(const struct opus_moe_scratch *s, int t);
const float *opus_moe_weights(const struct opus_moe_scratch *s, int t);

/* ---- the steps (see the header comment for the order) ---- */

/* Quantize token t's input row (n_embd floats) for the gate/up weights. */
void		opus_moe_quantize_input(struct opus_moe_scratch *s,
									const struct opus_moe_experts *ex,
									const float *x, int t);

/*
 * Route n_tok tokens (n_tok <= max_tok): logits[t * ld_logits + e];
 * shared_logits[t] when the shared expert is gated (else ignored, may be
 * NULL).  Groups the pairs and lays out the work units.  If load is not
 * NULL, load[e] += tokens routed to expert e (n_expert counters).
 * One thread only.
 */
void		opus_moe_route(struct opus_moe_scratch *s,
						   const struct opus_moe_experts *ex,
						   const float *logits, size_t ld_logits,
						   const float *shared_logits, int n_tok,
						   uint64_t *load);

/* Gate and up rows for every pair, h = SiLU(gate) * up; claims units from *next. */
void		opus_moe_gate_up(struct opus_moe_scratch *s,
							 const struct opus_moe_experts *ex,
							 atomic_int *next);

/* Quantize every pair's hidden row for its down weights; pairs split by ith/nth. */
void		opus_moe_quantize_hidden(struct opus_moe_scratch *s,
									 const struct opus_moe_experts *ex,
									 int ith, int nth);

/* Down rows for every pair; claims units from *next. */
void		opus_moe_down(struct opus_moe_scratch *s,
						  const struct opus_moe_experts *ex, atomic_int *next);

/*
 * out[t * ld_out + i] = (or += when accumulate) the weighted sum of token
 * t's expert outputs, choices in order, then the shared expert; tokens split
 * by ith/nth.
 */
void		opus_moe_combine(struct opus_moe_scratch *s,
							 const struct opus_moe_experts *ex,
							 float *out, size_t ld_out, bool accumulate,
							 int ith, int nth);

/*
 * The whole layer in one region of pool: x[t * ld_x] are the normed input
 * rows, the rest as above.  For tests and benchmarks; the forward pass calls
 * the steps inside its own region.
 */
void		opus_moe_forward(struct opus_pool *pool, struct opus_moe_scratch *s,
							 const struct opus_moe_experts *ex,
							 const float *x, size_t ld_x,
							 const float *logits, size_t ld_logits,
							 const float *shared_logits, int n_tok,
							 float *out, size_t ld_out, bool accumulate,
							 uint64_t *load);

/*
 * The naive reference: token by token, choice by choice, each expert applied
 * to one row (its own routing code, a full sort).  Same kernels, so the
 * batched dispatch must equal it bit for bit.
 */
enum opus_status opus_moe_forward_ref(const struct opus_moe_experts *ex,
									  const float *x, size_t ld_x,
									  const float *logits, size_t ld_logits,
									  const float *shared_logits, int n_tok,
									  float *out, size_t ld_out, bool accumulate,
									  struct opus_error *err);

#endif							/* OPUS_MOE_H */
