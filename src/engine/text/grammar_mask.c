/*
 * grammar_mask.c - the allowed-token masks of automaton states (grammar.h)
 * over a model vocabulary; the automaton itself is grammar.c, the compiled
 * form and the shared stack sets are in grammar_int.h.
 *
 * The vocabulary's bytes form a trie; a walk of the trie carries the
 * automaton state along and prunes a subtree as soon as its prefix is
 * rejected.  States met during the walk are interned and the transitions
 * (state, byte) -> state memoised, i.e. a small DFA is built lazily, so a
 * walk in a self-looping part of a grammar (inside a string) is one hash
 * look-up per trie node.  The masks of whole states are cached per grammar
 * and vocabulary (a state repeats often: every position inside a string of
 * a JSON object at the same depth).  Below that, the tokens each stack's
 * top entries (its frame) accept whatever lies below them are cached per
 * frame ("Frame classes", XGrammar's context-independent tokens): a state
 * met for the first time costs one OR per stack and a walk of the few
 * tokens that reach below the frame, instead of a walk of the whole trie.
 *
 * Locking: the mask and frame-class caches hang off the grammar and are
 * read and written under its mask_mu; everything else here is on the
 * caller's state, vocabulary (immutable) or local scratch, so masks of
 * different states may be computed at once from any threads.
 */
#include "text/grammar_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Vocabulary trie
 * ------------------------------------------------------------------------ */

struct tnode
{
	uint32_t	first_child;	/* 0: none (the root is node 0) */
	uint32_t	next_sibling;	/* 0: none */
	uint32_t	parent;			/* the root's is 0 */
	int32_t		token;			/* first token ending here, -1 none */
	uint8_t		byte;
};

struct opus_grammar_vocab
{
	uint64_t	uid;			/* unique per process: the mask cache key */
	int32_t		n_vocab;
	struct tnode *nodes;
	uint32_t	n_nodes;
	int32_t    *same_next;		/* next token with the same bytes, -1 */
	uint32_t	max_depth;
};

struct sort_item
{
	const uint8_t *b;
	uint32_t	len;
	int32_t		id;
};

static int
cmp_items(const void *a, const void *b)
{
	const struct sort_item *x = a,
			   *y = b;
	uint32_t	n = x->len < y->len ? x->len : y->len;
	int			c = memcmp(x->b, y->b, n);

	if (c)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static atomic_ullong vocab_uids;

opus_grammar_vocab *
opus_grammar_vocab_new(int32_t n_vocab, const uint8_t *const *bytes,
					   const uint32_t *lens, struct opus_error *err)
{
	opus_grammar_vocab *v = calloc(1, sizeof(*v));
	struct sort_item *items = NULL;
	int32_t		n = 0;
	size_t		cap_nodes = 1024;
	uint32_t   *path = NULL;	/* node at each depth of the previous item */
	uint32_t	path_len = 0;
	const uint8_t *prev_b = NULL;
	uint32_t	prev_len = 0;

	if (!v || n_vocab < 0)
		goto nomem;
	v->n_vocab = n_vocab;
	v->uid = atomic_fetch_add(&vocab_uids, 1) + 1;
	items = malloc(((size_t) n_vocab + 1) * sizeof(*items));
	v->same_next = malloc(((size_t) n_vocab + 1) * sizeof(int32_t));
	v->nodes = malloc(cap_nodes * sizeof(struct tnode));
	if (!items || !v->same_next || !v->nodes)
		goto nomem;
	for (int32_t t = 0; t < n_vocab; t++)
	{
		v->same_next[t] = -1;
		if (lens[t] > 0 && bytes[t])
		{
			items[n].b = bytes[t];
			items[n].len = lens[t];
			items[n].id = t;
			n++;
			if (lens[t] > v->max_depth)
				v->max_depth = lens[t];
		}
	}
	qsort(items, (size_t) n, sizeof(*items), cmp_items);
	path = malloc(((size_t) v->max_depth + 1) * sizeof(uint32_t));
	if (!path)
		goto nomem;
	v->nodes[0] = (struct tnode)
	{
		0, 0, 0, -1, 0
	};
	v->n_nodes = 1;
	path[0] = 0;
	for (int32_t i = 0; i < n; i++)
	{
		const struct sort_item *it = &items[i];
		uint32_t	common = 0;
		uint32_t	last_child;

		/* the longest common prefix with the previous item */
		if (prev_b)
		{
			uint32_t	m = prev_len < it->len ? prev_len : it->len;

			while (common < m && prev_b[common] == it->b[common])
				common++;
		}
		if (common > path_len)
			common = path_len;
		if (prev_b && common == it->len && common == prev_len)
		{
			/* same bytes as the previous token */
			struct tnode *nd = &v->nodes[path[common]];
			int32_t		t = nd->token;

			while (v->same_next[t] >= 0)
				t = v->same_next[t];
			v->same_next[t] = it->id;
			continue;
		}
		for (uint32_t d = common; d < it->len; d++)
		{
			uint32_t	parent = path[d];

			if (v->n_nodes == cap_nodes)
			{
				struct tnode *nn;

				cap_nodes *= 2;
				nn = realloc(v->nodes, cap_nodes * sizeof(struct tnode));
				if (!nn)
					goto nomem;
				v->nodes = nn;
			}
			v->nodes[v->n_nodes] = (struct tnode)
			{
				0, 0, parent, -1, it->b[d]
			};
			/* sorted input: the new child is the last of the parent's */
			last_child = v->nodes[parent].first_child;
			if (!last_child)
				v->nodes[parent].first_child = v->n_nodes;
			else
			{
				while (v->nodes[last_child].next_sibling)
					last_child = v->nodes[last_child].next_sibling;
				v->nodes[last_child].next_sibling = v->n_nodes;
			}
			path[d + 1] = v->n_nodes;
			v->n_nodes++;
		}
		path_len = it->len;
		v->nodes[path[it->len]].token = it->id;
		prev_b = it->b;
		prev_len = it->len;
	}
	free(items);
	free(path);
	return v;

nomem:
	free(items);
	free(path);
	opus_grammar_vocab_free(v);
	opus_error_set(err, OPUS_ERR_NOMEM, "out of memory building the grammar vocabulary");
	return NULL;
}

void
opus_grammar_vocab_free(opus_grammar_vocab *v)
{
	if (!v)
		return;
	free(v->nodes);
	free(v->same_next);
	free(v);
}

int32_t
opus_grammar_vocab_size(const opus_grammar_vocab *v)
{
	return v->n_vocab;
}

/* ------------------------------------------------------------------------
 * Masks: the trie walk over a lazily built DFA
 * ------------------------------------------------------------------------ */

/*
 * An interned state: a canonical stack set (stacks sorted) and the partial
 * code point.  ids index dfa->states; DEAD (0) is the rejecting state.
 */
struct dstate
{
	uint32_t	off;			/* into dfa->keys */
	uint32_t	len;
	uint64_t	hash;
	bool		has_empty;		/* an empty stack, no partial code point */
};

struct dfa
{
	const opus_grammar *g;
	uint32_t   *keys;			/* per state: partial, remain, plen, n, then stacks as len,items */
	size_t		n_keys,
				cap_keys;
	struct dstate *states;
	uint32_t	n_states,
				cap_states;
	uint32_t   *stab;			/* state intern table: id + 1 */
	uint32_t	stab_cap;
	uint64_t   *ttab;			/* transitions: key (id << 8 | byte) + 1 */
	uint32_t   *tval;
	uint32_t	ttab_cap,
				n_trans;
	struct sset a,
				b;
	struct work w;
	uint32_t   *order;
	uint32_t	order_cap;
	bool		overflow;
};

#define DFA_DEAD 0
#define DFA_MAX_STATES 65536

static int
cmp_stack_ptrs(const void *x, const void *y, void *arg)
{
	const struct sset *s = arg;
	uint32_t	i = *(const uint32_t *) x,
				j = *(const uint32_t *) y;
	uint32_t	li = s->off[i + 1] - s->off[i],
				lj = s->off[j + 1] - s->off[j];
	uint32_t	m = li < lj ? li : lj;

	for (uint32_t k = 0; k < m; k++)
	{
		uint32_t	a = s->data[s->off[i] + k],
					b = s->data[s->off[j] + k];

		if (a != b)
			return a < b ? -1 : 1;
	}
	return li < lj ? -1 : li > lj;
}

/* Serialize (canonical) into dfa->keys at its end; returns length. */
static bool
dfa_key(struct dfa *d, const struct sset *s, uint32_t partial, uint8_t remain,
		uint8_t plen, uint32_t *order, size_t *len_out)
{
	size_t		need = 4 + s->n + s->n_data;
	size_t		at;

	if (d->n_keys + need > d->cap_keys)
	{
		size_t		nc = d->cap_keys ? d->cap_keys * 2 : 4096;
		uint32_t   *nk;

		while (nc < d->n_keys + need)
			nc *= 2;
		nk = realloc(d->keys, nc * sizeof(uint32_t));
		if (!nk)
			return false;
		d->keys = nk;
		d->cap_keys = nc;
	}
	for (uint32_t i = 0; i < s->n; i++)
		order[i] = i;
	qsort_r(order, s->n, sizeof(uint32_t), cmp_stack_ptrs, (void *) s);
	at = d->n_keys;
	d->keys[at++] = partial;
	d->keys[at++] = remain;
	d->keys[at++] = plen;
	d->keys[at++] = s->n;
	for (uint32_t i = 0; i < s->n; i++)
	{
		uint32_t	k = order[i];
		uint32_t	l = s->off[k + 1] - s->off[k];

		d->keys[at++] = l;
		if (l)
			memcpy(d->keys + at, s->data + s->off[k], l * sizeof(uint32_t));
		at += l;
	}
	*len_out = at - d->n_keys;
	return true;
}

/* Intern the key just written at d->keys + d->n_keys (length len). */
static uint32_t
dfa_intern(struct dfa *d, size_t len)
{
	const uint32_t *key = d->keys + d->n_keys;
	uint64_t	h = hash_bytes(0xcbf29ce484222325ULL, key, len * sizeof(uint32_t));
	uint32_t	k;

	if ((d->n_states + 1) * 2 > d->stab_cap)
	{
		uint32_t	nc = d->stab_cap ? d->stab_cap * 2 : 256;
		uint32_t   *nt = calloc(nc, sizeof(uint32_t));

		if (!nt)
			return UINT32_MAX;
		for (uint32_t i = 1; i < d->n_states; i++)
		{
			uint32_t	j = (uint32_t) d->states[i].hash & (nc - 1);

			while (nt[j])
				j = (j + 1) & (nc - 1);
			nt[j] = i + 1;
		}
		free(d->stab);
		d->stab = nt;
		d->stab_cap = nc;
	}
	k = (uint32_t) h & (d->stab_cap - 1);
	while (d->stab[k])
	{
		const struct dstate *ds = &d->states[d->stab[k] - 1];

		if (ds->hash == h && ds->len == len &&
			memcmp(d->keys + ds->off, key, len * sizeof(uint32_t)) == 0)
			return d->stab[k] - 1;
		k = (k + 1) & (d->stab_cap - 1);
	}
	if (d->n_states >= DFA_MAX_STATES)
		return UINT32_MAX;
	if (d->n_states == d->cap_states)
	{
		uint32_t	nc = d->cap_states ? d->cap_states * 2 : 64;
		struct dstate *ns = realloc(d->states, nc * sizeof(*ns));

		if (!ns)
			return UINT32_MAX;
		d->states = ns;
		d->cap_states = nc;
	}
	d->states[d->n_states] = (struct dstate)
	{
		(uint32_t) d->n_keys, (uint32_t) len, h, false
	};
	/* key: partial, remain, plen, n, then each stack as len, items */
	if (len >= 4 && key[1] == 0)
	{
		size_t		at = 4;

		for (uint32_t i = 0; i < key[3] && at < len; i++)
		{
			if (key[at] == 0)
			{
				d->states[d->n_states].has_empty = true;
				break;
			}
			at += 1 + key[at];
		}
	}
	d->n_keys += len;
	d->stab[k] = d->n_states + 1;
	return d->n_states++;
}

/* Load state id into d->a, returning partial bits. */
static void
dfa_load(struct dfa *d, uint32_t id, uint32_t *partial, uint8_t *remain, uint8_t *plen)
{
	const uint32_t *k = d->keys + d->states[id].off;
	uint32_t	n;

	*partial = k[0];
	*remain = (uint8_t) k[1];
	*plen = (uint8_t) k[2];
	n = k[3];
	k += 4;
	gram_sset_clear(&d->a);
	for (uint32_t i = 0; i < n; i++)
	{
		gram_sset_add(&d->a, k + 1, k[0]);
		k += 1 + k[0];
	}
}

static uint32_t *order_scratch(struct dfa *d, uint32_t n);

static uint32_t
dfa_add(struct dfa *d, const struct sset *s, uint32_t partial, uint8_t remain, uint8_t plen)
{
	size_t		len;
	uint32_t   *order = order_scratch(d, s->n);

	if (!order || !dfa_key(d, s, partial, remain, plen, order, &len))
		return UINT32_MAX;
	return dfa_intern(d, len);
}

static uint32_t *
order_scratch(struct dfa *d, uint32_t n)
{
	if (n + 1 > d->order_cap)
	{
		uint32_t	nc = d->order_cap ? d->order_cap : 64;
		uint32_t   *no;

		while (nc < n + 1)
			nc *= 2;
		no = realloc(d->order, nc * sizeof(uint32_t));
		if (!no)
			return NULL;
		d->order = no;
		d->order_cap = nc;
	}
	return d->order;
}

/* The successor of state id by byte b (DFA_DEAD when rejected). */
static uint32_t
dfa_step(struct dfa *d, uint32_t id, uint8_t b)
{
	uint64_t	key = ((uint64_t) id << 8 | b) + 1;
	uint32_t	k;
	uint32_t	partial,
				cp = 0,
				res;
	uint8_t		remain,
				plen;
	int			r;

	if (d->ttab_cap && (d->n_trans + 1) * 2 <= d->ttab_cap)
	{
	}
	else
	{
		uint32_t	nc = d->ttab_cap ? d->ttab_cap * 2 : 4096;
		uint64_t   *nt = calloc(nc, sizeof(uint64_t));
		uint32_t   *nv = malloc(nc * sizeof(uint32_t));

		if (!nt || !nv)
		{
			free(nt);
			free(nv);
			d->overflow = true;
			return DFA_DEAD;
		}
		for (uint32_t i = 0; i < d->ttab_cap; i++)
			if (d->ttab[i])
			{
				uint32_t	j = (uint32_t) ((d->ttab[i] * 0x9E3779B97F4A7C15ULL) >> 40) & (nc - 1);

				while (nt[j])
					j = (j + 1) & (nc - 1);
				nt[j] = d->ttab[i];
				nv[j] = d->tval[i];
			}
		free(d->ttab);
		free(d->tval);
		d->ttab = nt;
		d->tval = nv;
		d->ttab_cap = nc;
	}
	k = (uint32_t) ((key * 0x9E3779B97F4A7C15ULL) >> 40) & (d->ttab_cap - 1);
	while (d->ttab[k])
	{
		if (d->ttab[k] == key)
			return d->tval[k];
		k = (k + 1) & (d->ttab_cap - 1);
	}

	/* compute */
	dfa_load(d, id, &partial, &remain, &plen);
	r = gram_utf8_step(&partial, &remain, &plen, b, &cp);
	res = DFA_DEAD;
	if (r == 0)
	{
		if (gram_partial_ok(d->g, &d->a, partial, remain, plen))
			res = dfa_add(d, &d->a, partial, remain, plen);
	}
	else if (r == 1)
	{
		gram_advance_cp(d->g, &d->w, &d->a, cp, &d->b);
		if (!d->b.overflow && d->b.n > 0)
			res = dfa_add(d, &d->b, 0, 0, 0);
		else if (d->b.overflow)
			d->overflow = true;
	}
	if (res == UINT32_MAX)
	{
		d->overflow = true;
		res = DFA_DEAD;
	}
	/* the table may not have moved: dfa_add does not touch it */
	d->ttab[k] = key;
	d->tval[k] = res;
	d->n_trans++;
	return res;
}

static void
dfa_destroy(struct dfa *d)
{
	free(d->keys);
	free(d->states);
	free(d->stab);
	free(d->ttab);
	free(d->tval);
	free(d->order);
	gram_sset_destroy(&d->a);
	gram_sset_destroy(&d->b);
	gram_work_destroy(&d->w);
}

static int32_t
walk(struct dfa *d, const opus_grammar_vocab *v, uint32_t node, uint32_t id,
	 uint32_t *mask)
{
	int32_t		n = 0;

	for (uint32_t c = v->nodes[node].first_child; c; c = v->nodes[c].next_sibling)
	{
		uint32_t	nid = dfa_step(d, id, v->nodes[c].byte);

		if (nid == DFA_DEAD)
			continue;
		for (int32_t t = v->nodes[c].token; t >= 0; t = v->same_next[t])
		{
			mask[t >> 5] |= 1u << (t & 31);
			n++;
		}
		if (v->nodes[c].first_child)
			n += walk(d, v, c, nid, mask);
	}
	return n;
}

static int32_t
mask_compute(const opus_grammar_state *s, const opus_grammar_vocab *v,
			 uint32_t *mask)
{
	struct dfa	d = {0};
	uint32_t	root;
	int32_t		n = 0;
	struct sset dead = {0};

	d.g = s->g;
	gram_sset_clear(&dead);
	/* state 0: dead (an empty set that is never stepped) */
	if (dfa_add(&d, &dead, UINT32_MAX, 0, 0) != DFA_DEAD)
		goto out;
	root = dfa_add(&d, &s->st, s->partial, s->remain, s->partial_len);
	if (root == UINT32_MAX)
		goto out;
	n = walk(&d, v, 0, root, mask);
out:
	gram_sset_destroy(&dead);
	dfa_destroy(&d);
	return n;
}

/* ------------------------------------------------------------------------
 * Frame classes: the tokens a stack's top accepts whatever lies below it
 * ------------------------------------------------------------------------ */

/*
 * The mask of a state is the union of its stacks' masks (stacks advance
 * independently).  A stack's mask depends mostly on its top entries: take
 * its frame, the top CLASS_FRAME entries (the whole stack if shorter), and
 * walk the vocabulary trie from the frame alone.  A token is then
 *   - accepted: some path consumes all its bytes inside the frame, so the
 *     full stack accepts it too, whatever lies below;
 *   - rejected: every path dies inside the frame without ever emptying it;
 *   - dependent: a path empties the frame with bytes left over (the frame
 *     was popped: the entries below decide).  Recorded as trie nodes whose
 *     whole subtree is dependent.  For a whole stack, emptying it means the
 *     string ended: the bytes left over are rejected, nothing is dependent.
 * This split (XGrammar's context-independent tokens) is a function of the
 * frame alone, so it is computed once per frame and vocabulary and cached
 * with the grammar (CLASS_CACHE_MAX frames, CLASS_CACHE_BYTES of bitmaps);
 * a mask is then one OR of a
 * bitmap per stack plus a walk of the dependent subtrees from the full
 * stack.  Frames repeat far more than whole states do: the frame of a
 * position inside a JSON string is the same in every object of an array,
 * at any depth, while the stack below differs.  The result is the same
 * mask as the walk from the whole state (mask_compute), bit for bit
 * (test/unit/test_grammar.c compares them), so output never depends on
 * what the cache holds.
 */
struct class_walk
{
	struct dfa *d;
	const opus_grammar_vocab *v;
	uint32_t   *accept;
	uint32_t   *dep;
	uint32_t	n_dep,
				cap_dep;
	bool		whole;
	bool		nomem;
};

/* past: a prefix of the node's bytes emptied the frame. */
static void
class_walk(struct class_walk *cw, uint32_t node, uint32_t id, bool past)
{
	const opus_grammar_vocab *v = cw->v;

	for (uint32_t c = v->nodes[node].first_child; c && !cw->nomem; c = v->nodes[c].next_sibling)
	{
		uint32_t	nid = dfa_step(cw->d, id, v->nodes[c].byte);

		if (nid != DFA_DEAD)
		{
			for (int32_t t = v->nodes[c].token; t >= 0; t = v->same_next[t])
				cw->accept[t >> 5] |= 1u << (t & 31);
			if (v->nodes[c].first_child)
				class_walk(cw, c, nid, past || cw->d->states[nid].has_empty);
		}
		else if (past && !cw->whole)
		{
			if (cw->n_dep == cw->cap_dep)
			{
				uint32_t	nc = cw->cap_dep ? cw->cap_dep * 2 : 64;
				uint32_t   *nd = realloc(cw->dep, nc * sizeof(uint32_t));

				if (!nd)
				{
					cw->nomem = true;
					return;
				}
				cw->dep = nd;
				cw->cap_dep = nc;
			}
			cw->dep[cw->n_dep++] = c;
		}
	}
}

/*
 * Compute the class of frame key (see class_lookup) into e (accept and dep
 * malloc'd).  False when out of memory or past the DFA's limits.
 */
static bool
class_compute(const opus_grammar *g, const opus_grammar_vocab *v,
			  const uint32_t *key, struct class_entry *e)
{
	struct dfa	d = {0};
	struct sset one = {0};
	struct class_walk cw = {0};
	size_t		words = ((size_t) v->n_vocab + 31) / 32;
	uint32_t	root;
	bool		ok = false;

	d.g = g;
	cw.d = &d;
	cw.v = v;
	cw.whole = key[0] != 0;
	cw.accept = calloc(words ? words : 1, sizeof(uint32_t));
	gram_sset_clear(&one);
	if (!cw.accept || dfa_add(&d, &one, UINT32_MAX, 0, 0) != DFA_DEAD)
		goto out;
	gram_sset_clear(&one);
	gram_sset_add(&one, key + 2, key[1]);
	if (one.overflow || (root = dfa_add(&d, &one, 0, 0, 0)) == UINT32_MAX)
		goto out;
	class_walk(&cw, 0, root, false);
	ok = !cw.nomem && !d.overflow;
out:
	gram_sset_destroy(&one);
	dfa_destroy(&d);
	if (!ok)
	{
		free(cw.accept);
		free(cw.dep);
		return false;
	}
	e->accept = cw.accept;
	e->dep = cw.dep;
	e->n_dep = cw.n_dep;
	return true;
}

static uint64_t
class_hash(uint64_t vocab_uid, const uint32_t *key)
{
	return hash_bytes(0x84222325cbf29ce4ULL ^ vocab_uid, key,
					  (2 + (size_t) key[1]) * sizeof(uint32_t));
}

/* The cached class of key, or -1; under g->mask_mu. */
static int
class_find(const opus_grammar *g, uint64_t vocab_uid, uint64_t h, const uint32_t *key)
{
	uint32_t	k;

	if (!g->class_tab)
		return -1;
	for (k = (uint32_t) h & (CLASS_TAB_SIZE - 1); g->class_tab[k];
		 k = (k + 1) & (CLASS_TAB_SIZE - 1))
	{
		const struct class_entry *e = &g->classes[g->class_tab[k] - 1];

		if (e->hash == h && e->vocab_uid == vocab_uid && e->key[0] == key[0] &&
			e->key[1] == key[1] &&
			memcmp(e->key + 2, key + 2, key[1] * sizeof(uint32_t)) == 0)
			return g->class_tab[k] - 1;
	}
	return -1;
}

/*
 * Insert e (its key, hash, vocab_uid set) under g->mask_mu, dropping every
 * class first when the cache is full; returns its index, or -1 (out of
 * memory: e is left to the caller).
 */
static int
class_insert(opus_grammar *g, struct class_entry *e, size_t words)
{
	uint32_t	k;

	if (!g->classes)
	{
		g->classes = calloc(CLASS_CACHE_MAX, sizeof(struct class_entry));
		g->class_tab = calloc(CLASS_TAB_SIZE, sizeof(int32_t));
		if (!g->classes || !g->class_tab)
		{
			free(g->classes);
			free(g->class_tab);
			g->classes = NULL;
			g->class_tab = NULL;
			return -1;
		}
	}
	if (g->n_classes == CLASS_CACHE_MAX ||
		((size_t) g->n_classes + 1) * words * sizeof(uint32_t) > CLASS_CACHE_BYTES)
	{
		for (int i = 0; i < g->n_classes; i++)
		{
			free(g->classes[i].accept);
			free(g->classes[i].dep);
		}
		g->n_classes = 0;
		memset(g->class_tab, 0, CLASS_TAB_SIZE * sizeof(int32_t));
	}
	for (k = (uint32_t) e->hash & (CLASS_TAB_SIZE - 1); g->class_tab[k];
		 k = (k + 1) & (CLASS_TAB_SIZE - 1))
		;
	g->classes[g->n_classes] = *e;
	g->class_tab[k] = g->n_classes + 1;
	return g->n_classes++;
}

/*
 * OR the accepted tokens of frame key into mask and copy its dependent trie
 * nodes to *deps (grown as needed); returns their number, -1 on failure.
 * key: [0] whole stack?, [1] length, [2..] the positions, top last.
 * Entries are only read and freed under g->mask_mu; computing one is done
 * outside it (two threads may compute the same class: one copy is kept).
 */
static int64_t
class_apply(opus_grammar *g, const opus_grammar_vocab *v, const uint32_t *key,
			uint32_t *mask, uint32_t **deps, size_t *cap_deps)
{
	size_t		words = ((size_t) v->n_vocab + 31) / 32;
	uint64_t	h = class_hash(v->uid, key);
	struct class_entry e = {0};
	int			i;
	int64_t		n;

	pthread_mutex_lock(&g->mask_mu);
	i = class_find(g, v->uid, h, key);
	pthread_mutex_unlock(&g->mask_mu);
	if (i < 0)
	{
		if (!class_compute(g, v, key, &e))
			return -1;
		e.vocab_uid = v->uid;
		e.hash = h;
		memcpy(e.key, key, (2 + (size_t) key[1]) * sizeof(uint32_t));
	}
	pthread_mutex_lock(&g->mask_mu);
	i = class_find(g, v->uid, h, key);
	if (i < 0 && e.accept)
	{
		i = class_insert(g, &e, words);
		if (i >= 0)
			e.accept = e.dep = NULL;	/* the cache owns them */
	}
	if (i < 0)
	{
		/* evicted meanwhile or no memory: use the computed one once */
		pthread_mutex_unlock(&g->mask_mu);
		if (!e.accept && !class_compute(g, v, key, &e))
			return -1;
		pthread_mutex_lock(&g->mask_mu);
	}
	{
		const struct class_entry *c = i >= 0 ? &g->classes[i] : &e;

		for (size_t w = 0; w < words; w++)
			mask[w] |= c->accept[w];
		n = c->n_dep;
		if ((size_t) n > *cap_deps)
		{
			uint32_t   *nd = realloc(*deps, (size_t) n * sizeof(uint32_t));

			if (!nd)
				n = -1;
			else
			{
				*deps = nd;
				*cap_deps = (size_t) n;
			}
		}
		if (n > 0)
			memcpy(*deps, c->dep, (size_t) n * sizeof(uint32_t));
	}
	pthread_mutex_unlock(&g->mask_mu);
	free(e.accept);
	free(e.dep);
	return n;
}

/*
 * The mask of s by frame classes (see above) into mask (zeroed by the
 * caller); the number of allowed tokens, or -1 when this way does not
 * apply (a code point split across tokens is pending) or fails (mask is
 * then zeroed again; the caller walks the whole state instead).
 */
static int32_t
mask_classes(const opus_grammar_state *s, const opus_grammar_vocab *v,
			 uint32_t *mask)
{
	opus_grammar *g = (opus_grammar *) s->g;
	size_t		words = ((size_t) v->n_vocab + 31) / 32;
	struct dfa	d = {0};
	bool		d_ready = false;
	struct sset one = {0};
	uint32_t   *deps = NULL;
	size_t		cap_deps = 0;
	uint8_t    *path = NULL;
	int32_t		n = -1;

	if (s->remain || s->failed)
		return -1;
	path = malloc((size_t) v->max_depth + 1);
	if (!path)
		return -1;
	d.g = g;
	for (uint32_t i = 0; i < s->st.n; i++)
	{
		const uint32_t *st = s->st.data + s->st.off[i];
		uint32_t	len = s->st.off[i + 1] - s->st.off[i];
		uint32_t	fl = len < CLASS_FRAME ? len : CLASS_FRAME;
		uint32_t	key[CLASS_FRAME + 2];
		int64_t		n_dep;
		uint32_t	root;

		if (len == 0)
			continue;			/* accepting: the caller adds the end tokens */
		key[0] = len <= CLASS_FRAME;
		key[1] = fl;
		memcpy(key + 2, st + len - fl, fl * sizeof(uint32_t));
		n_dep = class_apply(g, v, key, mask, &deps, &cap_deps);
		if (n_dep < 0)
			goto out;
		if (n_dep == 0)
			continue;

		/* the dependent subtrees, walked from the whole stack */
		if (!d_ready)
		{
			gram_sset_clear(&one);
			if (dfa_add(&d, &one, UINT32_MAX, 0, 0) != DFA_DEAD)
				goto out;
			d_ready = true;
		}
		gram_sset_clear(&one);
		gram_sset_add(&one, st, len);
		if (one.overflow || (root = dfa_add(&d, &one, 0, 0, 0)) == UINT32_MAX)
			goto out;
		for (int64_t k = 0; k < n_dep; k++)
		{
			uint32_t	c = deps[k];
			uint32_t	depth = 0;
			uint32_t	id = root;

			for (uint32_t x = c; x != 0; x = v->nodes[x].parent)
				path[depth++] = v->nodes[x].byte;
			while (depth > 0 && id != DFA_DEAD)
				id = dfa_step(&d, id, path[--depth]);
			if (id == DFA_DEAD)
				continue;
			for (int32_t t = v->nodes[c].token; t >= 0; t = v->same_next[t])
				mask[t >> 5] |= 1u << (t & 31);
			if (v->nodes[c].first_child)
				(void) walk(&d, v, c, id, mask);
		}
		if (d.overflow)
			goto out;
	}
	n = 0;
	for (size_t w = 0; w < words; w++)
		n += __builtin_popcount(mask[w]);
out:
	if (n < 0)
		memset(mask, 0, words * sizeof(uint32_t));
	free(path);
	free(deps);
	gram_sset_destroy(&one);
	dfa_destroy(&d);
	return n;
}

int32_t
opus_grammar_mask_walk(const opus_grammar_state *s, const opus_grammar_vocab *v,
					   uint32_t *mask)
{
	memset(mask, 0, (((size_t) v->n_vocab + 31) / 32) * sizeof(uint32_t));
	if (s->failed)
		return 0;
	return mask_compute(s, v, mask);
}

int32_t
opus_grammar_mask(const opus_grammar_state *s, const opus_grammar_vocab *v,
				  uint32_t *mask)
{
	opus_grammar *g = (opus_grammar *) s->g;
	size_t		words = ((size_t) v->n_vocab + 31) / 32;
	uint32_t   *key;
	size_t		key_len;
	uint64_t	h;
	int32_t		n;
	struct dfa	kd = {0};
	uint32_t   *order;

	memset(mask, 0, words * sizeof(uint32_t));
	if (s->failed)
		return 0;

	/* the canonical key of this state */
	order = order_scratch(&kd, s->st.n);
	if (!order || !dfa_key(&kd, &s->st, s->partial, s->remain, s->partial_len,
						   order, &key_len))
	{
		dfa_destroy(&kd);
		return mask_compute(s, v, mask);
	}
	key = kd.keys;
	h = hash_bytes(0xcbf29ce484222325ULL, key, key_len * sizeof(uint32_t));

	pthread_mutex_lock(&g->mask_mu);
	for (int i = 0; i < g->n_masks; i++)
	{
		struct mask_entry *m = &g->masks[i];

		if (m->vocab_uid == v->uid && m->hash == h && m->key_len == key_len &&
			memcmp(m->key, key, key_len * sizeof(uint32_t)) == 0)
		{
			memcpy(mask, m->mask, words * sizeof(uint32_t));
			m->last_use = ++g->mask_tick;
			n = m->n_allowed;
			pthread_mutex_unlock(&g->mask_mu);
			dfa_destroy(&kd);
			return n;
		}
	}
	pthread_mutex_unlock(&g->mask_mu);

	n = mask_classes(s, v, mask);
	if (n < 0)
		n = mask_compute(s, v, mask);

	/* remember it */
	{
		struct mask_entry e = {v->uid, h, NULL, key_len, NULL, n, 0};

		e.key = malloc(key_len * sizeof(uint32_t));
		e.mask = malloc(words * sizeof(uint32_t));
		if (e.key && e.mask)
		{
			memcpy(e.key, key, key_len * sizeof(uint32_t));
			memcpy(e.mask, mask, words * sizeof(uint32_t));
			pthread_mutex_lock(&g->mask_mu);
			if (!g->masks)
				g->masks = calloc(MASK_CACHE_MAX, sizeof(struct mask_entry));
			if (g->masks)
			{
				int			victim = g->n_masks;

				if (g->n_masks == MASK_CACHE_MAX)
				{
					victim = 0;
					for (int i = 1; i < g->n_masks; i++)
						if (g->masks[i].last_use < g->masks[victim].last_use)
							victim = i;
					free(g->masks[victim].key);
					free(g->masks[victim].mask);
				}
				else
					g->n_masks++;
				e.last_use = ++g->mask_tick;
				g->masks[victim] = e;
				e.key = NULL;
				e.mask = NULL;
			}
			pthread_mutex_unlock(&g->mask_mu);
		}
		free(e.key);
		free(e.mask);
	}
	dfa_destroy(&kd);
	return n;
}
