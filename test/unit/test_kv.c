/*
 * test_kv.c - the KV block pool and its prefix cache, without a model:
 * allocation and reference counts, chain hashing, publishing and lookup
 * (with token verification), LRU eviction only when the free stack is
 * empty, eviction fair across cache scopes (a scope flooding the cache
 * evicts its own blocks, not another's below an equal share), sequences
 * releasing last block first, attaching cached blocks,
 * caller-provided pool memory, and the sizes of Q8_0 blocks.
 */
#include <stdint.h>
#include <string.h>

#include "model/model_int.h"
#include "unit.h"

static struct opus_hparams hp = {
	.n_layer = 2,
	.n_head_kv = 1,
	.head_dim = 8,
};

static bool
make_kv(struct opus_ctx *c, int block_size, int64_t n_blocks)
{
	struct opus_error err = {0};

	memset(c, 0, sizeof(*c));
	c->params.block_size = block_size;
	c->params.n_blocks = n_blocks;
	if (opus_kv_init(&c->kv, &hp, &c->params, &err) != OPUS_OK)
	{
		CHECK(false, "kv init: %s", err.msg);
		return false;
	}
	return true;
}

static void
test_alloc(void)
{
	struct opus_ctx c;
	int32_t		ids[4];
	bool		seen[4] = {false};

	if (!make_kv(&c, 4, 4))
		return;
	CHECK(c.kv.n_free == 4 && c.kv.n_stack == 4, "4 free");
	for (int i = 0; i < 4; i++)
	{
		ids[i] = opus_kv_alloc(&c.kv);
		CHECK(ids[i] >= 0 && ids[i] < 4 && !seen[ids[i]], "alloc %d gives a new id", i);
		if (ids[i] >= 0 && ids[i] < 4)
			seen[ids[i]] = true;
		CHECK(c.kv.refcount[ids[i]] == 1, "refcount 1");
	}
	CHECK(opus_kv_alloc(&c.kv) == -1 && c.kv.n_free == 0, "empty pool: -1");
	opus_kv_retain(&c.kv, ids[0]);
	opus_kv_unref(&c.kv, ids[0]);
	CHECK(c.kv.n_free == 0 && c.kv.refcount[ids[0]] == 1, "retain + unref keeps it");
	opus_kv_unref(&c.kv, ids[0]);
	CHECK(c.kv.n_free == 1, "unref frees");
	CHECK(opus_kv_alloc(&c.kv) == ids[0], "the freed block comes back");
	for (int i = 0; i < 4; i++)
		opus_kv_unref(&c.kv, ids[i]);
	CHECK(c.kv.n_free == 4 && c.kv.n_cached == 0 && c.kv.evictions == 0, "all back");
	opus_kv_destroy(&c.kv);
}

static void
test_hash(void)
{
	int32_t		a[4] = {1, 2, 3, 4};
	int32_t		b[4] = {1, 2, 4, 3};
	int32_t		z[4] = {0, 0, 0, 0};
	uint64_t	r1 = opus_kv_hash_root(42, 16);
	uint64_t	h = opus_kv_hash_block(r1, a, 4);

	CHECK(h == opus_kv_hash_block(r1, a, 4), "hash is a function");
	CHECK(h != opus_kv_hash_block(r1, b, 4), "order matters");
	CHECK(h != opus_kv_hash_block(r1 ^ 1, a, 4), "parent matters");
	CHECK(opus_kv_hash_block(r1, a, 3) != opus_kv_hash_block(r1, a, 4), "length matters");
	CHECK(opus_kv_hash_block(0, z, 4) != 0, "zero input does not hash to zero");
	CHECK(r1 != opus_kv_hash_root(43, 16), "model identity matters");
	CHECK(r1 != opus_kv_hash_root(42, 32), "block size matters");
	/* a chain: same tokens under different parents give different hashes */
	CHECK(opus_kv_hash_block(h, a, 4) != h, "chain moves on");
	{
		/* no collisions among 20000 single-token variations */
		enum
		{
			N = 20000
		};
		static uint64_t hs[N];
		int			dup = 0;

		for (int i = 0; i < N; i++)
		{
			int32_t		t[4] = {i, 7, 7, 7};

			hs[i] = opus_kv_hash_block(r1, t, 4);
			for (int j = 0; j < i && j < 200; j++)
				dup += hs[j] == hs[i];
		}
		CHECK(dup == 0, "%d collisions", dup);
	}
}

static void
test_cache(void)
{
	struct opus_ctx c;
	int32_t		t1[4] = {10, 11, 12, 13};
	int32_t		t2[4] = {10, 11, 12, 14};
	uint64_t	root = opus_kv_hash_root(7, 4);
	uint64_t	h1 = opus_kv_hash_block(root, t1, 4);
	uint64_t	h2 = opus_kv_hash_block(root, t2, 4);
	int32_t		a,
				b,
				x;

	if (!make_kv(&c, 4, 4))
		return;
	a = opus_kv_alloc(&c.kv);
	b = opus_kv_alloc(&c.kv);
	CHECK(opus_kv_cache_find(&c.kv, h1, root, t1) == -1, "empty cache: miss");
	CHECK(opus_kv_cache_insert(&c.kv, a, h1, root, t1, root, 1), "publish a");
	CHECK(c.kv.n_cached == 1, "one cached");
	CHECK(opus_kv_cache_find(&c.kv, h1, root, t1) == a, "find a");
	CHECK(opus_kv_cache_find(&c.kv, h1, root, t2) == -1, "same hash, other tokens: miss");
	CHECK(opus_kv_cache_find(&c.kv, h1, root + 1, t1) == -1, "other parent: miss");
	CHECK(!opus_kv_cache_insert(&c.kv, b, h1, root, t1, root, 1), "a key is published once");
	CHECK(!opus_kv_cache_insert(&c.kv, a, h2, root, t2, root, 1), "a block is published once");
	CHECK(opus_kv_cache_insert(&c.kv, b, h2, root, t2, root, 1), "publish b");

	/* unreferenced cached blocks stay findable and count as free */
	opus_kv_unref(&c.kv, a);
	CHECK(c.kv.n_free == 3 && c.kv.n_evictable == 1 && c.kv.n_stack == 2,
		  "a evictable: free %lld, evictable %lld", (long long) c.kv.n_free,
		  (long long) c.kv.n_evictable);
	CHECK(opus_kv_cache_find(&c.kv, h1, root, t1) == a, "a still cached");
	opus_kv_retain(&c.kv, a);
	CHECK(c.kv.n_free == 2 && c.kv.n_evictable == 0 && c.kv.refcount[a] == 1,
		  "a hit takes it out of the evictable list");
	opus_kv_unref(&c.kv, a);
	opus_kv_unref(&c.kv, b);
	CHECK(c.kv.n_free == 4 && c.kv.n_evictable == 2, "both evictable");

	/* the stack goes first: cached blocks survive while it lasts */
	x = opus_kv_alloc(&c.kv);
	CHECK(x != a && x != b && c.kv.n_cached == 2 && c.kv.evictions == 0,
		  "allocation from the stack keeps the cache");
	(void) opus_kv_alloc(&c.kv);
	CHECK(c.kv.n_stack == 0 && c.kv.n_free == 2, "stack empty");
	/* then the least recently released: a (released before b) */
	x = opus_kv_alloc(&c.kv);
	CHECK(x == a && c.kv.evictions == 1 && c.kv.n_cached == 1,
		  "evicts the LRU block (%d)", (int) x);
	CHECK(opus_kv_cache_find(&c.kv, h1, root, t1) == -1, "evicted block is gone");
	CHECK(opus_kv_cache_find(&c.kv, h2, root, t2) == b, "the other stays");
	CHECK(c.kv.refcount[a] == 1, "evicted block handed out with refcount 1");
	x = opus_kv_alloc(&c.kv);
	CHECK(x == b && c.kv.n_cached == 0 && c.kv.n_free == 0, "then b");
	CHECK(opus_kv_alloc(&c.kv) == -1, "nothing left");
	opus_kv_destroy(&c.kv);
}

/* A sequence of three cached full blocks releases them last-first. */
static void
test_seq_release_order(void)
{
	struct opus_ctx c;
	struct opus_seq s;
	struct opus_error err = {0};
	int32_t		toks[12];
	uint64_t	root = opus_kv_hash_root(1, 4);
	uint64_t	h[3];
	int32_t		id[3];

	if (!make_kv(&c, 4, 6))
		return;
	for (int i = 0; i < 12; i++)
		toks[i] = 100 + i;
	opus_seq_init(&s);
	for (int i = 0; i < 3; i++)
	{
		id[i] = opus_kv_alloc(&c.kv);
		h[i] = opus_kv_hash_block(i ? h[i - 1] : root, toks + 4 * i, 4);
		CHECK(opus_kv_cache_insert(&c.kv, id[i], h[i], i ? h[i - 1] : root, toks + 4 * i,
								   root, 1),
			  "publish %d", i);
		CHECK(opus_seq_append_block(&c, &s, id[i], &err) == OPUS_OK, "append %d: %s", i, err.msg);
		opus_kv_unref(&c.kv, id[i]);	/* the sequence holds the only reference */
	}
	CHECK(s.n_pos == 12 && s.n_blocks == 3, "attached 3 blocks");
	CHECK(c.kv.n_free == 3, "3 held");
	/* a partial sequence cannot take a whole block */
	{
		struct opus_seq p = {0};

		p.n_pos = 2;
		CHECK(opus_seq_append_block(&c, &p, id[0], &err) == OPUS_ERR_INVALID_ARG,
			  "append to a partial sequence fails");
		CHECK(opus_seq_append_block(&c, &s, 99, &err) == OPUS_ERR_INVALID_ARG,
			  "append of a bad id fails");
	}
	opus_seq_release(&c, &s);
	CHECK(c.kv.n_free == 6 && c.kv.n_evictable == 3, "all evictable");
	CHECK(c.kv.scopes[c.kv.meta[id[0]].scope].lru_head == id[2] &&
		  c.kv.scopes[c.kv.meta[id[0]].scope].lru_tail == id[0], "tail block is least recent");
	/* drain the stack, then evictions go tail first, head last */
	for (int i = 0; i < 3; i++)
		(void) opus_kv_alloc(&c.kv);
	CHECK(opus_kv_alloc(&c.kv) == id[2], "third block evicted first");
	CHECK(opus_kv_cache_find(&c.kv, h[0], root, toks) == id[0], "head still cached");
	opus_kv_destroy(&c.kv);
}

/*
 * Publish one new block of scope root (tokens [tag, tag+1, ...]) with a
 * reference, then drop it: the block stays cached and evictable.  Returns
 * its id, or -1 if the pool had nothing to give.
 */
static int32_t
publish_released_w(struct opus_ctx *c, uint64_t root, int32_t tag, uint32_t weight)
{
	int32_t		t[4] = {tag, tag + 1, tag + 2, tag + 3};
	int32_t		id = opus_kv_alloc(&c->kv);

	if (id < 0)
		return -1;
	CHECK(opus_kv_cache_insert(&c->kv, id, opus_kv_hash_block(root, t, 4), root, t, root, weight),
		  "publish tag %d", (int) tag);
	opus_kv_unref(&c->kv, id);
	return id;
}

/* The same with weight 1. */
static int32_t
publish_released(struct opus_ctx *c, uint64_t root, int32_t tag)
{
	return publish_released_w(c, root, tag, 1);
}

/*
 * Fair eviction across scopes.  A 12-block pool:
 *  - scope A caches 4 blocks, then scope B publishes 40 blocks one after
 *    another: B evicts its own blocks (it holds more), A keeps all 4 (plain
 *    LRU would have evicted A's, the least recently released, first);
 *  - a third scope C with 2 blocks is untouched by B's flood too;
 *  - a scope over its share loses blocks only down to about an equal share:
 *    A with 10 cached blocks against B's flood keeps 5 of 12 (the allocating
 *    scope's new block is not yet counted when the victim is chosen);
 *  - with one scope it is plain LRU (test_cache, test_seq_release_order);
 *  - referenced blocks are never evicted, and when only another scope's
 *    blocks are evictable they go (the pool does not refuse an allocation
 *    while something is evictable).
 */
static void
test_fair_eviction(void)
{
	struct opus_ctx c;
	uint64_t	ra = opus_kv_hash_scope(opus_kv_hash_root(5, 4), 0xA),
				rb = opus_kv_hash_scope(opus_kv_hash_root(5, 4), 0xB),
				rc = opus_kv_hash_scope(opus_kv_hash_root(5, 4), 0xC);
	int32_t		held[12];
	int			lost = 0;

	if (!make_kv(&c, 4, 12))
		return;
	for (int i = 0; i < 4; i++)
		(void) publish_released(&c, ra, 1000 + 10 * i);
	for (int i = 0; i < 2; i++)
		(void) publish_released(&c, rc, 3000 + 10 * i);
	CHECK(opus_kv_scope_cached(&c.kv, ra) == 4 && opus_kv_scope_cached(&c.kv, rc) == 2,
		  "A holds 4, C 2");
	for (int i = 0; i < 40; i++)
	{
		CHECK(publish_released(&c, rb, 2000 + 10 * i) >= 0, "B's block %d allocated", i);
		if (opus_kv_scope_cached(&c.kv, ra) < 4 || opus_kv_scope_cached(&c.kv, rc) < 2)
			lost++;
	}
	CHECK(lost == 0 && opus_kv_scope_cached(&c.kv, ra) == 4 &&
		  opus_kv_scope_cached(&c.kv, rc) == 2,
		  "B's flood evicted none of A's or C's blocks (A %lld, C %lld)",
		  (long long) opus_kv_scope_cached(&c.kv, ra),
		  (long long) opus_kv_scope_cached(&c.kv, rc));
	CHECK(opus_kv_scope_cached(&c.kv, rb) == 6 && c.kv.evictions == 34,
		  "B keeps the rest, 6 blocks, by evicting its own (%lld, %lld evictions)",
		  (long long) opus_kv_scope_cached(&c.kv, rb), (long long) c.kv.evictions);
	for (int i = 0; i < 4; i++)
	{
		int32_t		t[4] = {1000 + 10 * i, 1001 + 10 * i, 1002 + 10 * i, 1003 + 10 * i};

		CHECK(opus_kv_cache_find(&c.kv, opus_kv_hash_block(ra, t, 4), ra, t) >= 0,
			  "A's block %d still found", i);
	}
	/* B's latest block is cached: LRU within B */
	{
		int32_t		t[4] = {2390, 2391, 2392, 2393};

		CHECK(opus_kv_cache_find(&c.kv, opus_kv_hash_block(rb, t, 4), rb, t) >= 0,
			  "B's most recent block survives");
	}
	opus_kv_destroy(&c.kv);

	/* A over its share: evicted down to 5 of 12, then B evicts its own */
	if (!make_kv(&c, 4, 12))
		return;
	for (int i = 0; i < 10; i++)
		(void) publish_released(&c, ra, 1000 + 10 * i);
	for (int i = 0; i < 30; i++)
		(void) publish_released(&c, rb, 2000 + 10 * i);
	CHECK(opus_kv_scope_cached(&c.kv, ra) == 5 && opus_kv_scope_cached(&c.kv, rb) == 7,
		  "A 10 -> %lld, B %lld", (long long) opus_kv_scope_cached(&c.kv, ra),
		  (long long) opus_kv_scope_cached(&c.kv, rb));
	{
		/* A lost its least recently released blocks: its first ones */
		int32_t		t0[4] = {1000, 1001, 1002, 1003};
		int32_t		t9[4] = {1090, 1091, 1092, 1093};

		CHECK(opus_kv_cache_find(&c.kv, opus_kv_hash_block(ra, t0, 4), ra, t0) < 0 &&
			  opus_kv_cache_find(&c.kv, opus_kv_hash_block(ra, t9, 4), ra, t9) >= 0,
			  "LRU within A");
	}
	opus_kv_destroy(&c.kv);

	/*
	 * B's blocks all in use: A's idle ones are taken (work-conserving), and
	 * a referenced block is never taken.
	 */
	if (!make_kv(&c, 4, 12))
		return;
	for (int i = 0; i < 3; i++)
		(void) publish_released(&c, ra, 1000 + 10 * i);
	for (int i = 0; i < 9; i++)
	{
		int32_t		t[4] = {2000 + 10 * i, 0, 0, 0};

		held[i] = opus_kv_alloc(&c.kv);
		CHECK(held[i] >= 0 && opus_kv_cache_insert(&c.kv, held[i], opus_kv_hash_block(rb, t, 4),
												   rb, t, rb, 1), "B holds block %d", i);
	}
	CHECK(c.kv.n_free == 3 && opus_kv_scope_cached(&c.kv, rb) == 9, "B: 9 in use");
	held[9] = opus_kv_alloc(&c.kv);
	CHECK(held[9] >= 0 && opus_kv_scope_cached(&c.kv, ra) == 2,
		  "nothing of B's evictable: A's block goes");
	held[10] = opus_kv_alloc(&c.kv);
	held[11] = opus_kv_alloc(&c.kv);
	CHECK(held[11] >= 0 && opus_kv_scope_cached(&c.kv, ra) == 0 && opus_kv_alloc(&c.kv) == -1,
		  "then nothing left: -1");
	for (int i = 0; i < 12; i++)
		opus_kv_unref(&c.kv, held[i]);
	CHECK(c.kv.n_free == 12 && c.kv.n_evictable == 9 && c.kv.n_cached == 9, "all back");
	opus_kv_destroy(&c.kv);
}

/*
 * Cache shares follow the scopes' weights.  A 12-block pool; scope A
 * (weight 3) caches 10 blocks, then scope B (weight 1) publishes 30 blocks
 * one after another: A is evicted only while it holds more than 3 blocks
 * per B's one, and keeps 8 (with equal shares it keeps 5, as in
 * test_fair_eviction; the allocating scope's new block is not yet counted
 * when the victim is chosen, and a tie goes to the older candidate, A's).
 * The other way round, A (weight 1) with 10 blocks against B's flood at
 * weight 3 keeps 2.  Two scopes at weight 2 each split as at weight 1.
 */
static void
test_weighted_eviction(void)
{
	struct opus_ctx c;
	uint64_t	ra = opus_kv_hash_scope(opus_kv_hash_root(5, 4), 0xA),
				rb = opus_kv_hash_scope(opus_kv_hash_root(5, 4), 0xB);
	static const struct
	{
		uint32_t	wa,
					wb;
		int64_t		a,
					b;
	}			cases[] = {{3, 1, 8, 4}, {1, 3, 2, 10}, {2, 2, 5, 7}};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
	{
		if (!make_kv(&c, 4, 12))
			return;
		for (int i = 0; i < 10; i++)
			(void) publish_released_w(&c, ra, 1000 + 10 * i, cases[k].wa);
		for (int i = 0; i < 30; i++)
			CHECK(publish_released_w(&c, rb, 2000 + 10 * i, cases[k].wb) >= 0,
				  "weights %u:%u: B's block %d allocated", cases[k].wa, cases[k].wb, i);
		CHECK(opus_kv_scope_cached(&c.kv, ra) == cases[k].a &&
			  opus_kv_scope_cached(&c.kv, rb) == cases[k].b,
			  "weights %u:%u: A 10 -> %lld (want %lld), B %lld (want %lld)",
			  cases[k].wa, cases[k].wb,
			  (long long) opus_kv_scope_cached(&c.kv, ra), (long long) cases[k].a,
			  (long long) opus_kv_scope_cached(&c.kv, rb), (long long) cases[k].b);
		opus_kv_destroy(&c.kv);
	}
}

static void
test_memory(void)
{
	struct opus_ctx_params p = {0};
	struct opus_kv kv;
	struct opus_error err = {0};
	size_t		bb = opus_kv_block_bytes(&hp, 4, OPUS_KV_F16);
	static _Alignas(64) uint8_t mem[1 << 16];

	p.block_size = 4;
	p.n_blocks = 8;
	p.kv_memory = mem;
	p.kv_memory_size = bb * 8 - 1;
	CHECK(opus_kv_init(&kv, &hp, &p, &err) == OPUS_ERR_INVALID_ARG, "too small: %s", err.msg);
	p.kv_memory = mem + 8;
	p.kv_memory_size = bb * 8;
	CHECK(opus_kv_init(&kv, &hp, &p, &err) == OPUS_ERR_INVALID_ARG, "unaligned: %s", err.msg);
	p.kv_memory = mem;
	CHECK(bb * 8 <= sizeof(mem), "test buffer big enough");
	CHECK(opus_kv_init(&kv, &hp, &p, &err) == OPUS_OK && kv.mem == mem && !kv.mem_owned,
		  "caller memory used: %s", err.msg);
	opus_kv_destroy(&kv);
	CHECK(mem[0] == 0, "destroy does not free caller memory");	/* ASan would catch a free */
	p.block_size = 0;
	CHECK(opus_kv_init(&kv, &hp, &p, &err) == OPUS_ERR_INVALID_ARG, "block size 0 rejected");
	/* a Q8_0 pool needs heads of 32k values; this one's are 8 */
	p.block_size = 4;
	p.kv_type = OPUS_KV_Q8_0;
	CHECK(opus_kv_init(&kv, &hp, &p, &err) == OPUS_ERR_UNSUPPORTED, "q8_0 with head size 8 rejected");
}

/* Q8_0 blocks: 32 int8 quants and one F16 scale per 32 values of a head. */
static void
test_q8_0_sizes(void)
{
	struct opus_hparams h = {.n_layer = 3,.n_head_kv = 2,.head_dim = 64};

	CHECK(opus_kv_head_bytes(&h, 16, OPUS_KV_F16) == 16 * 64 * 2, "f16 head bytes");
	CHECK(opus_kv_head_bytes(&h, 16, OPUS_KV_Q8_0) == 16 * 64 + 16 * 2 * 2, "q8_0 head bytes");
	CHECK(opus_kv_block_bytes(&h, 16, OPUS_KV_Q8_0) == (3 * 2 * 2 * (16 * 64 + 64) + 63) / 64 * 64,
		  "q8_0 block bytes: layers x K,V x heads, 64-byte aligned");
	CHECK(opus_kv_block_bytes(&h, 5, OPUS_KV_Q8_0) % 64 == 0, "odd block size stays aligned");
}

int
main(void)
{
	test_alloc();
	test_hash();
	test_cache();
	test_seq_release_order();
	test_fair_eviction();
	test_weighted_eviction();
	test_memory();
	test_q8_0_sizes();
	return UNIT_DONE();
}
