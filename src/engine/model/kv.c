/*
 * kv.c - the KV cache block pool, the prefix cache over it, and sequences'
 * block tables.
 *
 * The pool is n_blocks fixed-size blocks; a block holds, for block_size
 * consecutive positions of one sequence, the K and V vectors of every
 * layer, laid out [layer][K|V][kv_head] and then, inside one head's K or V
 * (head_bytes), by element type (opus_ctx_params.kv_type):
 *
 *   F16   K transposed, [head_dim][slot] halves, so attention computes 8 or
 *         16 positions' scores with vector FMAs; V [slot][head_dim] halves.
 *   Q8_0  K and V alike: quants [slot][head_dim] int8, then the scales
 *         [head_dim / 32][slot] F16: the 32 values of slot s at dims
 *         32b..32b+31 are quants * scale[b][s] (ggml's Q8_0 block, with
 *         the quants and scales of a head in two arrays so that vector
 *         code loads 32 quants or 8 slots' scales at once).  head_dim must
 *         be a multiple of 32.
 *
 * Blocks carry reference counts so several sequences can share full blocks
 * read-only; opus_forward copies a shared block before writing into it.
 * Neither the element type nor the layout changes anything below: the
 * prefix cache and sharing work on whole blocks.
 *
 * Prefix cache.  A full block can be published under its chain hash:
 * hash(parent block's chain hash, the block's token ids), where the first
 * block's parent is a root derived from the model identity and the block
 * size.  Because a block's K and V depend only on the tokens at and before
 * its positions (and the forward pass is deterministic per row), any
 * sequence whose first k blocks' tokens match can attach those blocks
 * instead of computing them.  The table keeps each cached block's parent
 * hash and tokens and compares them on lookup, so only a 64-bit collision of
 * a parent's chain hash could give a wrong match.
 *
 * A cached block whose last reference goes away is not freed: it joins an
 * LRU list of evictable blocks (still findable).  opus_kv_alloc takes from
 * the free stack first and evicts a cached block only when the stack is
 * empty.  n_free counts both, so "free" means "allocatable".  Sequences
 * release their blocks last-first, so a prefix's tail is evicted before its
 * head (a head is worth more: every longer prefix goes through it).
 *
 * Fair eviction across scopes.  Every cached block belongs to the scope it
 * was published under (the chain root of its request: one per role, or per
 * widened scope), and each scope keeps its own LRU list and a weight (the
 * fair-share weight of the role whose request published into it last).
 * The victim is the least recently released block of the scope that holds
 * the most cached blocks (referenced or not) per unit of weight among those
 * with an evictable one; a tie goes to the scope whose candidate was
 * released first, so with one scope this is plain LRU.  A scope that floods
 * the cache with new prompts therefore evicts its own blocks once it holds
 * more than its weight's part, and takes another scope's only while that
 * one holds at least as much per unit of weight: every scope keeps its
 * cached blocks up to a share of what is cached proportional to its weight
 * (weighted max-min fairness; equal weights, equal shares).  The one
 * exception is a pool whose only evictable blocks are another scope's (the
 * flooder's are all in use by its running sequences): the pool is
 * work-conserving, so they go rather than the running sequence being
 * preempted.  The victim search scans the scope
 * slots ever used (at most the number of scopes that had blocks cached at
 * once), which is small next to a step's forward pass.
 *
 * Everything here is used by the context's single caller thread.
 */
#include "model/kv.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *
opus_kv_type_name(enum opus_kv_type t)
{
	switch (t)
	{
		case OPUS_KV_F16:
			return "f16";
		case OPUS_KV_Q8_0:
			return "q8_0";
		default:
			return NULL;
	}
}

bool
opus_kv_type_parse(const char *s, enum opus_kv_type *out)
{
	if (!s)
		return false;
	if (strcasecmp(s, "f16") == 0)
		*out = OPUS_KV_F16;
	else if (strcasecmp(s, "q8_0") == 0)
		*out = OPUS_KV_Q8_0;
	else
		return false;
	return true;
}

size_t
opus_kv_head_bytes(const struct opus_hparams *hp, int block_size, enum opus_kv_type type)
{
	size_t		n = (size_t) block_size * (size_t) hp->head_dim;

	if (type == OPUS_KV_Q8_0)
		return n + (size_t) block_size * (size_t) (hp->head_dim / 32) * sizeof(uint16_t);
	return n * sizeof(uint16_t);
}

size_t
opus_kv_block_bytes(const struct opus_hparams *hp, int block_size, enum opus_kv_type type)
{
	size_t		half = (size_t) hp->n_head_kv * opus_kv_head_bytes(hp, block_size, type);
	size_t		layer = 2 * half;

	/* keep every block 64-byte aligned */
	return ((size_t) hp->n_layer * layer + 63) / 64 * 64;
}

enum opus_status
opus_kv_init(struct opus_kv *kv, const struct opus_hparams *hp,
			 const struct opus_ctx_params *p, struct opus_error *err)
{
	unsigned long long total;
	uint64_t	nb = 1;

	memset(kv, 0, sizeof(*kv));
	if (p->block_size < 1 || p->block_size > 4096 || p->n_blocks < 1 ||
		p->n_blocks > INT32_MAX)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "kv block size %d or block count %lld out of range",
							  p->block_size, (long long) p->n_blocks);
	if (opus_kv_type_name(p->kv_type) == NULL)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "unknown kv cache type %d",
							  (int) p->kv_type);
	if (p->kv_type == OPUS_KV_Q8_0 && (hp->head_dim % 32 != 0 || hp->head_dim < 32))
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "a q8_0 kv cache needs a head size that is a multiple of 32, and this model's is %d",
							  (int) hp->head_dim);
	if (p->kv_type != OPUS_KV_F16 && p->llama_batch_order)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "llama.cpp batch order needs an f16 kv cache");
	if (p->kv_type != OPUS_KV_F16 && p->device.kind != OPUS_DEVICE_CPU)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "a %s kv cache runs on the cpu only; use opus.kv_cache_type f16 on a gpu",
							  opus_kv_type_name(p->kv_type));
	kv->type = p->kv_type;
	kv->block_size = p->block_size;
	kv->n_blocks = p->n_blocks;
	kv->head_bytes = opus_kv_head_bytes(hp, p->block_size, p->kv_type);
	kv->kv_half_bytes = (size_t) hp->n_head_kv * kv->head_bytes;
	kv->layer_bytes = 2 * kv->kv_half_bytes;
	kv->block_bytes = opus_kv_block_bytes(hp, p->block_size, p->kv_type);
	if (opus_mul_overflow_u64(kv->block_bytes, (unsigned long long) p->n_blocks, &total) ||
		total > SIZE_MAX / 2)
		return opus_error_set(err, OPUS_ERR_NOMEM, "kv cache size overflows");
	if (p->device.kind != OPUS_DEVICE_CPU)
	{
		/* the backend keeps the blocks in device memory */
		kv->mem = NULL;
		kv->mem_owned = false;
	}
	else if (p->kv_memory)
	{
		if (p->kv_memory_size < total)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "kv memory of %zu bytes is smaller than the %llu the pool needs",
								  p->kv_memory_size, total);
		if (((uintptr_t) p->kv_memory) % 64 != 0)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "kv memory is not 64-byte aligned");
		kv->mem = p->kv_memory;
		kv->mem_owned = false;
	}
	else
	{
		kv->mem = aligned_alloc(64, (size_t) total);
		if (!kv->mem)
			return opus_error_set(err, OPUS_ERR_NOMEM,
								  "out of memory for a kv cache of %llu bytes", total);
		kv->mem_owned = true;
	}
	while (nb < (uint64_t) p->n_blocks)
		nb <<= 1;
	kv->bucket_mask = nb - 1;
	kv->refcount = calloc((size_t) p->n_blocks, sizeof(int32_t));
	kv->free_list = malloc((size_t) p->n_blocks * sizeof(int32_t));
	kv->meta = calloc((size_t) p->n_blocks, sizeof(*kv->meta));
	kv->block_tokens = malloc((size_t) p->n_blocks * (size_t) p->block_size * sizeof(int32_t));
	kv->buckets = malloc((size_t) nb * sizeof(int32_t));
	kv->scopes = calloc((size_t) p->n_blocks, sizeof(*kv->scopes));
	if (!kv->refcount || !kv->free_list || !kv->meta || !kv->block_tokens || !kv->buckets ||
		!kv->scopes)
	{
		opus_kv_destroy(kv);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for kv block tables");
	}
	for (uint64_t i = 0; i < nb; i++)
		kv->buckets[i] = -1;
	/* stack: block 0 on top */
	for (int64_t i = 0; i < p->n_blocks; i++)
	{
		kv->free_list[i] = (int32_t) (p->n_blocks - 1 - i);
		kv->meta[i].hnext = kv->meta[i].lru_prev = kv->meta[i].lru_next = -1;
		kv->meta[i].scope = -1;
	}
	kv->n_stack = p->n_blocks;
	kv->n_free = p->n_blocks;
	return OPUS_OK;
}

void
opus_kv_destroy(struct opus_kv *kv)
{
	if (kv->mem_owned)
		free(kv->mem);
	free(kv->refcount);
	free(kv->free_list);
	free(kv->meta);
	free(kv->block_tokens);
	free(kv->buckets);
	free(kv->scopes);
	memset(kv, 0, sizeof(*kv));
}

/* ---- scopes and their evictable lists ---- */

/*
 * The slot of the scope keyed key, taking an unused one (n_cached 0) if it
 * has none; -1 only if every slot is taken, which cannot happen (a slot in
 * use has a cached block, and there are n_blocks slots).
 */
static int32_t
scope_slot(struct opus_kv *kv, uint64_t key)
{
	int32_t		unused = -1;

	for (int32_t i = 0; i < kv->n_scopes; i++)
	{
		if (kv->scopes[i].n_cached == 0)
		{
			if (unused < 0)
				unused = i;
		}
		else if (kv->scopes[i].key == key)
			return i;
	}
	if (unused < 0)
	{
		if (kv->n_scopes >= kv->n_blocks)
			return -1;
		unused = kv->n_scopes++;
	}
	kv->scopes[unused].key = key;
	kv->scopes[unused].weight = 1;
	kv->scopes[unused].n_evictable = 0;
	kv->scopes[unused].lru_head = kv->scopes[unused].lru_tail = -1;
	return unused;
}

int64_t
opus_kv_scope_cached(const struct opus_kv *kv, uint64_t scope)
{
	for (int32_t i = 0; i < kv->n_scopes; i++)
		if (kv->scopes[i].n_cached > 0 && kv->scopes[i].key == scope)
			return kv->scopes[i].n_cached;
	return 0;
}

static void
lru_remove(struct opus_kv *kv, int32_t id)
{
	struct opus_kv_meta *m = &kv->meta[id];
	struct opus_kv_scope *sc = &kv->scopes[m->scope];

	if (m->lru_prev >= 0)
		kv->meta[m->lru_prev].lru_next = m->lru_next;
	else
		sc->lru_head = m->lru_next;
	if (m->lru_next >= 0)
		kv->meta[m->lru_next].lru_prev = m->lru_prev;
	else
		sc->lru_tail = m->lru_prev;
	m->lru_prev = m->lru_next = -1;
	sc->n_evictable--;
	kv->n_evictable--;
}

static void
lru_append(struct opus_kv *kv, int32_t id)
{
	struct opus_kv_meta *m = &kv->meta[id];
	struct opus_kv_scope *sc = &kv->scopes[m->scope];

	m->released = ++kv->clock;
	m->lru_next = -1;
	m->lru_prev = sc->lru_tail;
	if (sc->lru_tail >= 0)
		kv->meta[sc->lru_tail].lru_next = id;
	else
		sc->lru_head = id;
	sc->lru_tail = id;
	sc->n_evictable++;
	kv->n_evictable++;
}

/*
 * The block to evict: the least recently released evictable block of the
 * scope with the most cached blocks per unit of weight among those that
 * have one (ties: the earliest released candidate); -1 if nothing is
 * evictable.  The ratios are compared cross-multiplied, exactly (counts
 * below 2^40, weights at most 2^20).
 */
static int32_t
eviction_victim(const struct opus_kv *kv)
{
	const struct opus_kv_scope *best = NULL;

	for (int32_t i = 0; i < kv->n_scopes; i++)
	{
		const struct opus_kv_scope *sc = &kv->scopes[i];

		if (sc->n_evictable == 0)
			continue;
		int64_t		mine,
					theirs;

		if (!best)
		{
			best = sc;
			continue;
		}
		mine = sc->n_cached * (int64_t) best->weight;
		theirs = best->n_cached * (int64_t) sc->weight;
		if (mine > theirs ||
			(mine == theirs &&
			 kv->meta[sc->lru_head].released < kv->meta[best->lru_head].released))
			best = sc;
	}
	return best ? best->lru_head : -1;
}

/* ---- the hash table ---- */

static void
table_remove(struct opus_kv *kv, int32_t id)
{
	int32_t    *link = &kv->buckets[kv->meta[id].hash & kv->bucket_mask];

	while (*link >= 0 && *link != id)
		link = &kv->meta[*link].hnext;
	if (*link == id)
		*link = kv->meta[id].hnext;
	kv->meta[id].hnext = -1;
	kv->meta[id].cached = false;
	kv->scopes[kv->meta[id].scope].n_cached--;
	kv->meta[id].scope = -1;
	kv->n_cached--;
}

int32_t
opus_kv_cache_find(const struct opus_kv *kv, uint64_t hash, uint64_t parent,
				   const int32_t *tokens)
{
	for (int32_t id = kv->buckets[hash & kv->bucket_mask]; id >= 0; id = kv->meta[id].hnext)
	{
		const struct opus_kv_meta *m = &kv->meta[id];

		if (m->hash == hash && m->parent == parent &&
			memcmp(kv->block_tokens + (size_t) id * kv->block_size, tokens,
				   (size_t) kv->block_size * sizeof(int32_t)) == 0)
			return id;
	}
	return -1;
}

bool
opus_kv_cache_insert(struct opus_kv *kv, int32_t id, uint64_t hash,
					 uint64_t parent, const int32_t *tokens, uint64_t scope,
					 uint32_t weight)
{
	struct opus_kv_meta *m = &kv->meta[id];
	int32_t    *head;
	int32_t		slot;

	if (m->cached || kv->refcount[id] <= 0 ||
		opus_kv_cache_find(kv, hash, parent, tokens) >= 0)
		return false;
	slot = scope_slot(kv, scope);
	if (slot < 0)
		return false;
	m->scope = slot;
	kv->scopes[slot].n_cached++;
	kv->scopes[slot].weight = weight < 1 ? 1 : weight > OPUS_KV_MAX_SCOPE_WEIGHT ?
		OPUS_KV_MAX_SCOPE_WEIGHT : weight;
	m->hash = hash;
	m->parent = parent;
	memcpy(kv->block_tokens + (size_t) id * kv->block_size, tokens,
		   (size_t) kv->block_size * sizeof(int32_t));
	head = &kv->buckets[hash & kv->bucket_mask];
	m->hnext = *head;
	*head = id;
	m->cached = true;
	kv->n_cached++;
	return true;
}

/* ---- hashing ---- */

static inline uint64_t
mix64(uint64_t h)
{
	/* the splitmix64 / murmur3 finaliser */
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	h ^= h >> 31;
	return h;
}

uint64_t
opus_kv_hash_block(uint64_t parent, const int32_t *tokens, int n)
{
	uint64_t	h = mix64(parent ^ 0x9e3779b97f4a7c15ULL);

	for (int i = 0; i < n; i++)
		h = mix64(h + (uint64_t) (uint32_t) tokens[i] * 0xff51afd7ed558ccdULL + (uint64_t) i);
	return mix64(h ^ (uint64_t) n);
}

uint64_t
opus_kv_hash_root(uint64_t model_identity, int block_size)
{
	return mix64(model_identity ^ mix64((uint64_t) block_size + 0x6f707573ULL));
}

uint64_t
opus_kv_hash_scope(uint64_t root, uint64_t scope)
{
	return scope == 0 ? root : mix64(root ^ mix64(scope + 0x73636f7065ULL));
}

/* ---- allocation ---- */

int32_t
opus_kv_alloc(struct opus_kv *kv)
{
	int32_t		id;

	if (kv->n_stack > 0)
		id = kv->free_list[--kv->n_stack];
	else if ((id = eviction_victim(kv)) >= 0)
	{
		lru_remove(kv, id);
		table_remove(kv, id);
		kv->evictions++;
	}
	else
		return -1;
	kv->n_free--;
	kv->refcount[id] = 1;
	return id;
}

void
opus_kv_retain(struct opus_kv *kv, int32_t id)
{
	if (kv->refcount[id] == 0)
	{
		/* only a cached block can be found while unreferenced */
		lru_remove(kv, id);
		kv->n_free--;
	}
	kv->refcount[id]++;
}

void
opus_kv_unref(struct opus_kv *kv, int32_t id)
{
	if (--kv->refcount[id] > 0)
		return;
	if (kv->meta[id].cached)
		lru_append(kv, id);
	else
		kv->free_list[kv->n_stack++] = id;
	kv->n_free++;
}

/* ---- sequences ---- */

void
opus_seq_init(struct opus_seq *s)
{
	memset(s, 0, sizeof(*s));
}

void
opus_seq_release(struct opus_ctx *c, struct opus_seq *s)
{
	/* last block first: the tail of a cached prefix is evicted first */
	for (int32_t i = s->n_blocks - 1; i >= 0; i--)
		opus_kv_unref(opus_ctx_kv(c), s->blocks[i]);
	free(s->blocks);
	memset(s, 0, sizeof(*s));
}

void
opus_seq_truncate(struct opus_ctx *c, struct opus_seq *s, int32_t n_pos)
{
	struct opus_kv *kv = opus_ctx_kv(c);
	int32_t		keep;

	if (n_pos < 0)
		n_pos = 0;
	if (n_pos >= s->n_pos)
		return;
	keep = (n_pos + kv->block_size - 1) / kv->block_size;
	while (s->n_blocks > keep)
		opus_kv_unref(kv, s->blocks[--s->n_blocks]);
	s->n_pos = n_pos;
}

enum opus_status
opus_seq_fork(struct opus_ctx *c, const struct opus_seq *src,
			  struct opus_seq *dst, struct opus_error *err)
{
	int32_t    *blocks = NULL;

	if (dst->n_blocks != 0 || dst->n_pos != 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "the fork target sequence is not empty");
	if (src->n_blocks > 0)
	{
		blocks = malloc((size_t) src->n_blocks * sizeof(int32_t));
		if (!blocks)
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for a block table");
		memcpy(blocks, src->blocks, (size_t) src->n_blocks * sizeof(int32_t));
		for (int32_t i = 0; i < src->n_blocks; i++)
			opus_kv_retain(opus_ctx_kv(c), blocks[i]);
	}
	free(dst->blocks);
	dst->blocks = blocks;
	dst->n_blocks = src->n_blocks;
	dst->n_blocks_cap = src->n_blocks;
	dst->n_pos = src->n_pos;
	return OPUS_OK;
}

enum opus_status
opus_seq_append_block(struct opus_ctx *c, struct opus_seq *seq, int32_t id,
					  struct opus_error *err)
{
	struct opus_kv *kv = opus_ctx_kv(c);

	if (id < 0 || id >= kv->n_blocks)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "kv block %d out of range", (int) id);
	if (seq->n_pos != seq->n_blocks * kv->block_size)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "a block can only be appended to a sequence of whole blocks");
	if (seq->n_blocks == seq->n_blocks_cap)
	{
		int32_t		cap = seq->n_blocks_cap > 0 ? seq->n_blocks_cap * 2 : 8;
		int32_t    *b = realloc(seq->blocks, (size_t) cap * sizeof(int32_t));

		if (!b)
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for a block table");
		seq->blocks = b;
		seq->n_blocks_cap = cap;
	}
	opus_kv_retain(kv, id);
	seq->blocks[seq->n_blocks++] = id;
	seq->n_pos += kv->block_size;
	return OPUS_OK;
}
