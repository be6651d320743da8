/*
 * grammar_int.h - what the grammar compiler's files share: the compiled
 * form of a grammar (struct opus_grammar, its element array) and the
 * entries of its mask cache, and the automaton's stack sets and states.
 * Only grammar_parse.c (which builds the compiled form), grammar.c (the
 * automaton) and grammar_mask.c (the masks that run over it) include it.
 *
 * Compiled form (the design of llama.cpp's llama-grammar, written anew):
 * every rule is a run of elements in one array g->el; a rule is its
 * alternatives, each a sequence of elements ended by ALT (another follows)
 * or END (the last).  A character class is a CHAR / CHAR_NOT element
 * followed by CHAR_ALT (more chars) and CHAR_RNG_UPPER (the upper end of
 * the range started by the element before it).  Repetitions are rewritten
 * into generated rules: x* -> r ::= x r | "", x{m,n} -> m copies of x
 * then n-m nested optional rules.
 */
#ifndef OPUS_GRAMMAR_INT_H
#define OPUS_GRAMMAR_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/grammar.h"

enum el_type
{
	EL_END = 0,
	EL_ALT,
	EL_RULE_REF,
	EL_CHAR,
	EL_CHAR_NOT,
	EL_CHAR_RNG_UPPER,
	EL_CHAR_ALT,
	EL_CHAR_ANY
};

struct el
{
	uint32_t	type;
	uint32_t	value;
};

struct opus_grammar
{
	struct el  *el;
	uint32_t	n_el;
	uint32_t   *rule_start;
	uint32_t	n_rules;
	uint32_t	root;
	/* cache bookkeeping (opus_grammar_get) */
	uint64_t	hash;
	char	   *text;
	size_t		text_len;
	int			refs;			/* under cache_mu */
	uint64_t	last_use;
	/* mask cache (opus_grammar_mask) */
	pthread_mutex_t mask_mu;
	struct mask_entry *masks;
	int			n_masks;
	uint64_t	mask_tick;
	/* frame classes (grammar_mask.c, "Frame classes"), also under mask_mu */
	struct class_entry *classes;	/* [CLASS_CACHE_MAX] */
	int			n_classes;
	int32_t    *class_tab;		/* open addressing: index + 1; 0 empty */
};

#define MASK_CACHE_MAX 64

/*
 * The top CLASS_FRAME entries of a stack are its frame; the tokens a frame
 * accepts whatever lies below it are computed once per frame and vocabulary
 * and kept, at most CLASS_CACHE_MAX frames and CLASS_CACHE_BYTES of their
 * bitmaps (a bit per token each) per grammar: then all are dropped and the
 * cache fills again.  With the grammar cache's 32 grammars, at most 256 MB.
 */
#define CLASS_FRAME 4
#define CLASS_CACHE_MAX 1024
#define CLASS_CACHE_BYTES (8u << 20)
#define CLASS_TAB_SIZE (4 * CLASS_CACHE_MAX)

struct class_entry
{
	uint64_t	vocab_uid;
	uint64_t	hash;
	uint32_t	key[CLASS_FRAME + 2];	/* whole?, length, positions */
	uint32_t   *accept;			/* n_vocab bits: accepted within the frame */
	uint32_t   *dep;			/* trie nodes whose subtrees need the stack below */
	uint32_t	n_dep;
};

struct mask_entry
{
	uint64_t	vocab_uid;
	uint64_t	hash;
	uint32_t   *key;			/* canonical state content */
	size_t		key_len;
	uint32_t   *mask;
	int32_t		n_allowed;
	uint64_t	last_use;
};

/*
 * A set of stacks, flat: stack i is data[off[i] .. off[i+1]), top last.
 * Built through gram_sset_add, which keeps them unique (hash table of indexes).
 * Canonical form (sset_sort): stacks sorted, for hashing and interning.
 */
struct sset
{
	uint32_t   *data;
	size_t		n_data,
				cap_data;
	uint32_t   *off;			/* n + 1 entries */
	uint32_t	n,
				cap;
	uint32_t   *tab;			/* indexes + 1; 0 empty */
	uint32_t	tab_cap;		/* power of two */
	bool		overflow;		/* more than OPUS_GRAMMAR_MAX_STACKS or NOMEM */
};

/* Work list for expansion: a LIFO of stacks, flat. */
struct work
{
	uint32_t   *data;
	size_t		n_data,
				cap_data;
	uint32_t   *lens;
	size_t		n,
				cap;
	uint32_t   *tmp;
	size_t		cap_tmp;
};

struct opus_grammar_state
{
	const opus_grammar *g;
	struct sset st;
	uint32_t	partial;		/* bits of the code point so far */
	uint8_t		remain;			/* continuation bytes still expected */
	uint8_t		partial_len;	/* bytes seen of the current code point */
	bool		failed;
	/* scratch */
	struct sset next;
	struct work w;
};

/*
 * The automaton's pieces the masks (grammar_mask.c) run over; defined in
 * grammar.c.
 */
void		gram_sset_clear(struct sset *s);
void		gram_sset_destroy(struct sset *s);
void		gram_sset_add(struct sset *s, const uint32_t *st, uint32_t len);
void		gram_work_destroy(struct work *w);
/* Advance set in by code point cp into out (cleared first). */
void		gram_advance_cp(const opus_grammar *g, struct work *w,
							const struct sset *in, uint32_t cp, struct sset *out);
/* Some stack of in may match a code point that begins with the partial bytes. */
bool		gram_partial_ok(const opus_grammar *g, const struct sset *in,
							uint32_t partial, uint8_t remain, uint8_t plen);
/*
 * The UTF-8 decoder step: 1 with *cp set when a code point is complete, 0
 * when more bytes are needed, -1 on invalid UTF-8.
 */
int			gram_utf8_step(uint32_t *partial, uint8_t *remain, uint8_t *plen,
						   uint8_t b, uint32_t *cp);

static inline bool
is_end(const struct el *e)
{
	return e->type == EL_END || e->type == EL_ALT;
}

static inline bool
is_char(const struct el *e)
{
	return e->type == EL_CHAR || e->type == EL_CHAR_NOT ||
		e->type == EL_CHAR_ALT || e->type == EL_CHAR_RNG_UPPER ||
		e->type == EL_CHAR_ANY;
}

static inline uint64_t
hash_bytes(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
	{
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

#endif
