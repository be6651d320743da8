/*
 * model_int.h - internal: the structs behind struct opus_model and struct
 * opus_ctx, shared by model.c (load), kv.c (block pool) and forward.c.
 * Not for use outside those files; the public API is model.h.
 */
#ifndef OPUS_MODEL_INT_H
#define OPUS_MODEL_INT_H

#include "model/backend.h"
#include "model/model.h"
#include "model/moe.h"
#include "base/threadpool.h"

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
	float	   *attn_q_norm;	/* qwen3moe: [head_dim] per head; olmoe: [n_head * head_dim]; else NULL */
	float	   *attn_k_norm;	/* qwen3moe: [head_dim] per head; olmoe: [n_head_kv * head_dim] */
	float	   *ffn_norm;		/* [n_embd] */
	float	   *attn_post_norm;	/* gemma3: [n_embd] on Wo's output, else NULL */
	float	   *ffn_post_norm;	/* gemma3: [n_embd] on Wdown's output, else NULL */
	bool		swa;			/* gemma3 local layer: sliding window, rope_freq_base_swa */
	/* dense feed-forward (zeroed in a MoE layer) */
	struct opus_wmat w_gate;	/* [n_ff][n_embd] */
	struct opus_wmat w_up;		/* [n_ff][n_embd] */
	struct opus_wmat w_down;	/* [n_embd][n_ff] */
	/* Mixture of Experts (model_moe.c, moe.c) */
	bool		is_moe;
	struct opus_wmat router;	/* ffn_gate_inp: [n_expert][n_embd] */
	struct opus_wmat shexp_gate;	/* qwen2moe ffn_gate_inp_shexp: [1][n_embd], else zeroed */
	struct opus_moe_experts moe;
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
	struct opus_bert *bert;		/* encoder weights (model_bert.c), else NULL */
};

/* model.c's tensor lookups, shared with the other loaders */
enum opus_status opus_find_matrix(const struct opus_gguf *g, const char *name,
								  int64_t n_in, int64_t n_out, bool required,
								  struct opus_wmat *w, struct opus_error *err);
enum opus_status opus_load_vector(const struct opus_gguf *g, const char *name,
								  int64_t n, bool required, float *dst,
								  bool *found, struct opus_error *err);

/* model_bert.c: the encoder's hyperparameters and weights */
enum opus_status opus_bert_read_hparams(const struct opus_gguf *g,
										struct opus_hparams *hp,
										struct opus_error *err);
enum opus_status opus_bert_load(struct opus_model *m, struct opus_error *err);
void		opus_bert_free(struct opus_bert *b);

/* ---- KV block pool and prefix cache (kv.c) ---- */

/* Per-block bookkeeping of the prefix cache. */
struct opus_kv_meta
{
	uint64_t	hash;			/* chain hash (valid while cached) */
	uint64_t	parent;			/* the previous block's chain hash */
	int32_t		hnext;			/* next block in the hash bucket, -1 = end */
	int32_t		lru_prev;		/* evictable list links, -1 = end */
	int32_t		lru_next;
	bool		cached;			/* in the hash table */
};

struct opus_kv
{
	int			block_size;		/* token positions per block */
	int64_t		n_blocks;
	enum opus_kv_type type;		/* element type (kv.c describes both layouts) */
	size_t		block_bytes;	/* K and V of all layers for block_size positions */
	size_t		layer_bytes;	/* per layer inside a block: K then V */
	size_t		kv_half_bytes;	/* K (or V) of one layer: n_head_kv * head_bytes */
	size_t		head_bytes;		/* K (or V) of one KV head of one layer */
	uint8_t    *mem;			/* n_blocks * block_bytes */
	bool		mem_owned;
	int32_t    *refcount;		/* [n_blocks] */
	int32_t    *free_list;		/* stack of free, uncached block ids */
	int64_t		n_stack;		/* entries on free_list */
	int64_t		n_free;			/* blocks opus_kv_alloc can hand out: the stack
								 * plus unreferenced cached blocks */
	/* prefix cache: full blocks by chain hash */
	struct opus_kv_meta *meta;	/* [n_blocks] */
	int32_t    *block_tokens;	/* [n_blocks][block_size] tokens of cached blocks */
	int32_t    *buckets;		/* [bucket_mask + 1] first block, -1 = none */
	uint64_t	bucket_mask;
	int32_t		lru_head;		/* unreferenced cached blocks, least recent first */
	int32_t		lru_tail;
	int64_t		n_cached;		/* blocks in the hash table */
	int64_t		n_evictable;	/* of those, unreferenced */
	int64_t		evictions;
};

enum opus_status opus_kv_init(struct opus_kv *kv, const struct opus_hparams *hp,
							  const struct opus_ctx_params *p,
							  struct opus_error *err);
void		opus_kv_destroy(struct opus_kv *kv);
size_t		opus_kv_block_bytes(const struct opus_hparams *hp, int block_size,
									enum opus_kv_type type);
/* Bytes of one KV head's K (or V) of one layer in a block of block_size. */
size_t		opus_kv_head_bytes(const struct opus_hparams *hp, int block_size,
							   enum opus_kv_type type);
/*
 * Take a block (refcount 1): from the free stack, else by evicting the least
 * recently released cached block; -1 if neither exists.
 */
int32_t		opus_kv_alloc(struct opus_kv *kv);
/* Add a reference (an unreferenced cached block stops being evictable). */
void		opus_kv_retain(struct opus_kv *kv, int32_t id);
/*
 * Drop a reference.  At zero a cached block becomes evictable (most
 * recently used end); any other block returns to the free stack.
 */
void		opus_kv_unref(struct opus_kv *kv, int32_t id);

/* Chain hash of a full block: parent's chain hash and the block's tokens. */
uint64_t	opus_kv_hash_block(uint64_t parent, const int32_t *tokens, int n);
/* The parent hash of a sequence's first block, for a model identity. */
uint64_t	opus_kv_hash_root(uint64_t model_identity, int block_size);
/*
 * The root of a prefix-cache scope: chains under different scopes never
 * share a block (scope 0 is the root itself, the server-wide scope).
 */
uint64_t	opus_kv_hash_scope(uint64_t root, uint64_t scope);
/* The cached block with this hash, parent and tokens, or -1. */
int32_t		opus_kv_cache_find(const struct opus_kv *kv, uint64_t hash,
							   uint64_t parent, const int32_t *tokens);
/*
 * Publish the full, referenced block id under (hash, parent, tokens).  False
 * (nothing changes) if that key is cached already or id is cached.
 */
bool		opus_kv_cache_insert(struct opus_kv *kv, int32_t id, uint64_t hash,
								 uint64_t parent, const int32_t *tokens);
/*
 * Append the full block id to seq (whose positions must fill whole blocks)
 * with a new reference: seq->n_pos grows by block_size.
 */
enum opus_status opus_seq_append_block(struct opus_ctx *c, struct opus_seq *seq,
									   int32_t id, struct opus_error *err);

/*
 * K (v false) or V (v true) of KV head `head` of a layer inside a block:
 * head_bytes bytes (the layouts inside a head are in kv.c's header).
 */
static inline uint8_t *
opus_kv_head(const struct opus_kv *kv, int32_t block, int layer, bool v, int head)
{
	return kv->mem + (size_t) block * kv->block_bytes + (size_t) layer * kv->layer_bytes +
		(v ? kv->kv_half_bytes : 0) + (size_t) head * kv->head_bytes;
}

/* ---- run state ---- */

struct opus_ctx
{
	struct opus_model *model;
	struct opus_ctx_params params;
	struct opus_kv kv;
	const struct opus_backend_ops *ops;	/* the backend (backend.h) */
	void	   *be;				/* a device backend's run state, else NULL */
	struct opus_pool *pool;		/* CPU backend: threads */
	struct opus_fwd_state *fs;	/* CPU backend: scratch of the forward pass (forward.c) */
	uint64_t   *expert_load;	/* [n_layer][n_expert] tokens routed (MoE), else NULL */
	struct opus_moe_io_stats moe_io;	/* updated by the forward pass */
};

enum opus_status opus_fwd_state_create(struct opus_ctx *c, struct opus_error *err);
void		opus_fwd_state_free(struct opus_fwd_state *fs);

#endif							/* OPUS_MODEL_INT_H */
