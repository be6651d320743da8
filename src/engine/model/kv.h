/*
 * kv.h - the KV cache block pool, the prefix cache over it, and sequences'
 * block tables (kv.c, whose header describes the block layouts and the
 * prefix cache).  It depends on the model's public header only (the
 * hyperparameters and context parameters that size the pool, struct
 * opus_seq); a context's pool is reached through opus_ctx_kv.
 *
 * Included by kv.c, model_int.h (a context holds a pool), the scheduler
 * (prefix-cache lookups) and tests.  Used by one thread at a time: the
 * context's caller.
 */
#ifndef OPUS_KV_H
#define OPUS_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* Per-block bookkeeping of the prefix cache. */
struct opus_kv_meta
{
	uint64_t	hash;			/* chain hash (valid while cached) */
	uint64_t	parent;			/* the previous block's chain hash */
	uint64_t	released;		/* kv->clock when it last became evictable */
	int32_t		hnext;			/* next block in the hash bucket, -1 = end */
	int32_t		lru_prev;		/* its scope's evictable list links, -1 = end */
	int32_t		lru_next;
	int32_t		scope;			/* index into kv->scopes (valid while cached) */
	bool		cached;			/* in the hash table */
};

/* Bound on a scope's eviction weight (larger ones are clamped to it). */
#define OPUS_KV_MAX_SCOPE_WEIGHT (1u << 20)

/*
 * A prefix-cache scope that has blocks in the table (kv.c's header gives
 * the eviction rule).  A slot with n_cached 0 is unused.
 */
struct opus_kv_scope
{
	uint64_t	key;			/* the scope's chain root (opus_kv_hash_scope) */
	uint32_t	weight;			/* its share's weight, 1..OPUS_KV_MAX_SCOPE_WEIGHT */
	int64_t		n_cached;		/* its blocks in the table */
	int64_t		n_evictable;	/* of those, unreferenced */
	int32_t		lru_head;		/* its unreferenced cached blocks, least recent first */
	int32_t		lru_tail;
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
	struct opus_kv_scope *scopes;	/* [n_blocks] slots, [0, n_scopes) ever used */
	int32_t		n_scopes;
	uint64_t	clock;			/* release counter (meta.released) */
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
 * Take a block (refcount 1): from the free stack, else by evicting an
 * unreferenced cached block (of the scope holding the most cached blocks
 * per unit of weight, its least recently released one: kv.c's header); -1
 * if neither exists.
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
 * Publish the full, referenced block id under (hash, parent, tokens) for
 * the scope whose chain root is scope (its share of the cache is counted by
 * that key), and set that scope's weight (0 counts as 1): its share of the
 * cache under eviction is proportional to it.  False (nothing changes) if
 * that key is cached already or id is cached.
 */
bool		opus_kv_cache_insert(struct opus_kv *kv, int32_t id, uint64_t hash,
								 uint64_t parent, const int32_t *tokens,
								 uint64_t scope, uint32_t weight);
/* Cached blocks of the scope with chain root scope (0 if it has none). */
int64_t		opus_kv_scope_cached(const struct opus_kv *kv, uint64_t scope);
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

/* The block pool of context c (model.c). */
struct opus_kv *opus_ctx_kv(struct opus_ctx *c);

/* References to block id (0: free, or cached and evictable). */
static inline int32_t
opus_kv_refcount(const struct opus_kv *kv, int32_t id)
{
	return kv->refcount[id];
}

/* Blocks in the prefix cache's table. */
static inline int64_t
opus_kv_n_cached(const struct opus_kv *kv)
{
	return kv->n_cached;
}

#endif							/* OPUS_KV_H */
