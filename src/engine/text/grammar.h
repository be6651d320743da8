/*
 * grammar.h - GBNF grammars (llama.cpp's dialect) compiled to a byte-level
 * pushdown automaton, and the allowed-token mask of an automaton state over
 * a model vocabulary.
 *
 * Dialect (as llama.cpp's grammars/README.md):
 *   rule     ::= name "::=" alternatives          (the start rule is "root")
 *   alts     ::= seq ("|" seq)*                   (a seq may be empty)
 *   item     ::= "literal" | [class] | [^class] | . | name | "(" alts ")"
 *                followed by *, +, ?, {m}, {m,}, {m,n}
 *   literals and classes take \n \r \t \\ \" \] \[ \- \xHH \uHHHH \UHHHHHHHH;
 *   classes take ranges a-z; "#" starts a comment to the end of the line;
 *   rule names are [a-zA-Z0-9-]+; a rule ends at the newline that is not
 *   inside a group (continuation lines start inside an open group or after
 *   an alternative bar, or with nothing but the next item).
 * Matching is over Unicode code points, fed as UTF-8 bytes (a code point may
 * arrive split across calls / tokens); invalid UTF-8 is rejected.
 *
 * Checks at compile time: syntax (line:col), undefined rules, missing root,
 * left recursion, a grammar that accepts no string or only the empty string,
 * and size limits (OPUS_GRAMMAR_MAX_TEXT bytes of text, OPUS_GRAMMAR_MAX_ELEMS
 * compiled elements, OPUS_GRAMMAR_MAX_REPEAT for {m,n}); past a limit the code
 * is OPUS_GRAMMAR_ERR_TOO_LARGE (status OPUS_ERR_CAPACITY: SQLSTATE 54000),
 * every other error OPUS_ERR_INVALID_ARG (22023).
 * At run time a state holds at most OPUS_GRAMMAR_MAX_STACKS stacks (an
 * ambiguous grammar past that: accept_bytes fails, state marked failed).
 *
 * Thread safety: a compiled grammar and a vocabulary are immutable once
 * built and may be shared by any number of threads; a state belongs to one
 * thread at a time.  opus_grammar_mask is read-only on its state.
 */
#ifndef OPUS_GRAMMAR_H
#define OPUS_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define OPUS_GRAMMAR_MAX_TEXT	(1 << 20)	/* bytes of GBNF text */
#define OPUS_GRAMMAR_MAX_ELEMS	(1 << 20)	/* compiled elements */
#define OPUS_GRAMMAR_MAX_REPEAT	10000		/* m and n of {m,n} */
#define OPUS_GRAMMAR_MAX_STACKS	4096		/* stacks in one state */

enum opus_grammar_errcode
{
	OPUS_GRAMMAR_OK = 0,
	OPUS_GRAMMAR_ERR_SYNTAX,	/* malformed text; line:col set */
	OPUS_GRAMMAR_ERR_UNDEFINED, /* a rule used but not defined, or no root */
	OPUS_GRAMMAR_ERR_LEFT_RECURSION,
	OPUS_GRAMMAR_ERR_EMPTY,		/* accepts no string, or only "" */
	OPUS_GRAMMAR_ERR_TOO_LARGE, /* past a documented limit */
	OPUS_GRAMMAR_ERR_NOMEM
};

struct opus_grammar_error
{
	enum opus_grammar_errcode code;
	int			line;			/* 1-based; 0 when not about a position */
	int			col;			/* 1-based, in bytes */
	char		msg[OPUS_ERROR_MSG_LEN];	/* "line 3, column 7: ..." */
};

/* The engine status of a grammar error (INVALID_ARG, CAPACITY, NOMEM). */
enum opus_status opus_grammar_status(enum opus_grammar_errcode code);

typedef struct opus_grammar opus_grammar;
typedef struct opus_grammar_state opus_grammar_state;
typedef struct opus_grammar_vocab opus_grammar_vocab;

/*
 * Parse, check and compile.  NULL on error with *err filled (err may be
 * NULL).  text need not be NUL-terminated.  The start rule is "root".
 */
opus_grammar *opus_grammar_compile(const char *text, size_t len,
								   struct opus_grammar_error *err);
void		opus_grammar_free(opus_grammar *g);
/* 64-bit hash of the text a grammar was compiled from (cache key). */
uint64_t	opus_grammar_hash(const char *text, size_t len);
/* Number of compiled elements (for size reports). */
size_t		opus_grammar_size(const opus_grammar *g);

/*
 * A process-wide cache of compiled grammars by text hash (and text, compared
 * in full): returns a reference the caller releases with
 * opus_grammar_release.  Thread-safe.  Bounded (least recently used out).
 */
opus_grammar *opus_grammar_get(const char *text, size_t len,
							   struct opus_grammar_error *err);
void		opus_grammar_release(opus_grammar *g);

/* Automaton state: at the start of "root". */
opus_grammar_state *opus_grammar_state_new(const opus_grammar *g);
opus_grammar_state *opus_grammar_state_clone(const opus_grammar_state *s);
void		opus_grammar_state_free(opus_grammar_state *s);

/*
 * Feed n bytes.  false (and the state unchanged) when they cannot continue
 * any string of the grammar.
 */
bool		opus_grammar_accept_bytes(opus_grammar_state *s,
									  const uint8_t *bytes, size_t n);
/* The bytes fed so far form a whole string of the grammar. */
bool		opus_grammar_is_accepting(const opus_grammar_state *s);
/* No further byte can be accepted (accepting or not). */
bool		opus_grammar_is_finished(const opus_grammar_state *s);

/* Convenience: does the whole of text match the grammar? */
bool		opus_grammar_matches(const opus_grammar *g, const char *text,
								 size_t len);

/*
 * Vocabulary: token id -> bytes (the token's text as the detokenizer emits
 * it; a token with no bytes or a control token is never allowed by a mask).
 * Built once per model; a trie over the token bytes.
 */
opus_grammar_vocab *opus_grammar_vocab_new(int32_t n_vocab,
										   const uint8_t *const *bytes,
										   const uint32_t *lens,
										   struct opus_error *err);
void		opus_grammar_vocab_free(opus_grammar_vocab *v);
int32_t		opus_grammar_vocab_size(const opus_grammar_vocab *v);

/*
 * The allowed-token mask of state s: bit t of mask (n_vocab bits, as
 * uint32_t words, word t/32 bit t%32) set when token t's bytes are a valid
 * continuation.  End-of-generation tokens are not in the vocabulary's trie:
 * the caller allows them when opus_grammar_is_accepting(s).  Returns the
 * number of allowed tokens.  Read-only on s and v: many masks may be
 * computed at once from different threads.
 */
int32_t		opus_grammar_mask(const opus_grammar_state *s,
							  const opus_grammar_vocab *v, uint32_t *mask);

/*
 * The same mask by the plain walk of the trie from the whole state, with
 * no cache (the reference the unit tests hold opus_grammar_mask to).
 */
int32_t		opus_grammar_mask_walk(const opus_grammar_state *s,
								   const opus_grammar_vocab *v, uint32_t *mask);

#endif							/* OPUS_GRAMMAR_H */
