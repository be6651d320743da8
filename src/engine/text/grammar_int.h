/*
 * grammar_int.h - what the grammar compiler's files share: the compiled
 * form of a grammar (struct opus_grammar, its element array) and the
 * entries of its mask cache.  Only grammar_parse.c (which builds it) and
 * grammar.c (the automaton and the masks that run over it) include it.
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
	/* frame classes (grammar.c, "Frame classes"), also under mask_mu */
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
