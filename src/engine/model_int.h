/*
 * model_int.h - internal: the structs behind struct opus_model and struct
 * opus_ctx, shared by model.c (load), kv.c (block pool) and forward.c.
 * Not for use outside those files; the public API is model.h.
 */
#ifndef OPUS_MODEL_INT_H
#define OPUS_MODEL_INT_H

#include "model.h"
#include "threadpool.h"

/* A weight matrix: n_out rows of n_in elements, row-major, in the mapping. */
struct opus_wmat
{
	const char *name;
	const uint8_t *data;
	enum opus_qtype type;
	const struct opus_qtype_info *qi;
	int64_t		n_in;
	int64_t		n_out;
	size_t		row_bytes;
};

struct opus_layer
{
	float	   *attn_norm;		/* [n_embd] */
	struct opus_wmat wq;		/* [n_head * head_dim][n_embd] */
	struct opus_wmat wk;		/* [n_head_kv * head_dim][n_embd] */
	struct opus_wmat wv;		/* [n_head_kv * head_dim][n_embd] */
	struct opus_wmat wo;		/* [n_embd][n_head * head_dim] */
	float	   *bq;				/* qwen2: [n_head * head_dim], else NULL */
	float	   *bk;				/* qwen2: [n_head_kv * head_dim] */
	float	   *bv;				/* qwen2: [n_head_kv * head_dim] */
	float	   *ffn_norm;		/* [n_embd] */
	struct opus_wmat w_gate;	/* [n_ff][n_embd] */
	struct opus_wmat w_up;		/* [n_ff][n_embd] */
	struct opus_wmat w_down;	/* [n_embd][n_ff] */
};

struct opus_model
{
	struct opus_hparams hp;
	struct opus_gguf *gguf;
	struct opus_tokenizer *tok;
	uint64_t	identity;

	struct opus_wmat tok_embd;	/* [n_vocab][n_embd] */
	struct opus_wmat output;	/* [n_vocab][n_embd]; = tok_embd if tied */
	float	   *output_norm;	/* [n_embd] */
	float	   *rope_freqs;		/* [rope_dim / 2] divisors, or NULL */
	struct opus_layer *layers;	/* [n_layer] */

	float	   *owned;			/* one allocation for every f32 vector above */
};

/* ---- KV block pool (kv.c) ---- */

struct opus_kv
{
	int			block_size;		/* token positions per block */
	int64_t		n_blocks;
	size_t		block_bytes;	/* K and V of all layers for block_size positions */
	size_t		layer_bytes;	/* per layer inside a block: K then V */
	size_t		kv_half_bytes;	/* K (or V) of one layer: n_head_kv * block_size * head_dim F16 */
	uint8_t    *mem;			/* n_blocks * block_bytes */
	bool		mem_owned;
	int32_t    *refcount;		/* [n_blocks] */
	int32_t    *free_list;		/* stack of free block ids */
	int64_t		n_free;
};

enum opus_status opus_kv_init(struct opus_kv *kv, const struct opus_hparams *hp,
							  const struct opus_ctx_params *p,
							  struct opus_error *err);
void		opus_kv_destroy(struct opus_kv *kv);
size_t		opus_kv_block_bytes(const struct opus_hparams *hp, int block_size);
/* Take a free block (refcount 1), or -1 if none. */
int32_t		opus_kv_alloc(struct opus_kv *kv);
/* Add a reference to a block in use. */
void		opus_kv_retain(struct opus_kv *kv, int32_t id);
/* Drop a reference; the block returns to the free list at zero. */
void		opus_kv_unref(struct opus_kv *kv, int32_t id);

/*
 * K (or V) of a layer inside a block: n_head_kv * block_size * head_dim F16,
 * laid out [kv_head][slot][head_dim].
 */
static inline uint16_t *
opus_kv_k(const struct opus_kv *kv, int32_t block, int layer)
{
	return (uint16_t *) (kv->mem + (size_t) block * kv->block_bytes +
						 (size_t) layer * kv->layer_bytes);
}

static inline uint16_t *
opus_kv_v(const struct opus_kv *kv, int32_t block, int layer)
{
	return (uint16_t *) (kv->mem + (size_t) block * kv->block_bytes +
						 (size_t) layer * kv->layer_bytes + kv->kv_half_bytes);
}

/* ---- run state ---- */

struct opus_ctx
{
	struct opus_model *model;
	struct opus_ctx_params params;
	struct opus_kv kv;
	struct opus_pool *pool;
	struct opus_fwd_state *fs;	/* scratch of the forward pass (forward.c) */
};

enum opus_status opus_fwd_state_create(struct opus_ctx *c, struct opus_error *err);
void		opus_fwd_state_free(struct opus_fwd_state *fs);

#endif							/* OPUS_MODEL_INT_H */
