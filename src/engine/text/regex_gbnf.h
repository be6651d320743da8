/*
 * regex_gbnf.h - regular expressions and label choices as GBNF grammars
 * (llama.cpp's dialect), and the small text builder the JSON Schema
 * converter (json_schema.h) shares.
 *
 * The regular-expression subset (docs/structured-output.md):
 *   literals, escapes \n \r \t \f \v \0 \xHH \uHHHH and \<punctuation>,
 *   classes [...] / [^...] with ranges and \d \w \s \D \W \S inside or out,
 *   . (any character but a newline), groups ( ) and (?: ), alternation |,
 *   quantifiers * + ? {m} {m,} {m,n} (a trailing lazy ? is accepted: it does
 *   not change the language), ^ at the start and $ at the end.
 * The whole output must match (anchors are implicit).  Anything else
 * (backreferences, lookaround, \b, named groups, flags, anchors in the
 * middle) is OPUS_ERR_UNSUPPORTED naming the construct and its offset; a
 * malformed expression is OPUS_ERR_INVALID_ARG with the offset; a repetition
 * count above OPUS_GBNF_MAX_REPEAT or an expression longer than
 * OPUS_REGEX_MAX_BYTES is OPUS_ERR_CAPACITY.
 *
 * Pure C, no engine state: the PostgreSQL backend links these files too, so
 * that a bad constraint is refused before the request is queued.
 */
#ifndef OPUS_REGEX_GBNF_H
#define OPUS_REGEX_GBNF_H

#include <stddef.h>

#include "base/status.h"

#define OPUS_REGEX_MAX_BYTES	4096	/* a regex / pattern, in bytes */
#define OPUS_REGEX_MAX_DEPTH	32	/* nested groups */
#define OPUS_GBNF_MAX_REPEAT	1000	/* m and n of {m,n}, minLength, maxItems ... */
#define OPUS_GBNF_MAX_BYTES		(1024 * 1024)	/* a generated grammar */
#define OPUS_CHOICES_MAX		4096	/* strings in a choices list */

/* A growing NUL-terminated text; failed = allocation failed or over the cap. */
struct opus_gbnf_buf
{
	char	   *s;
	size_t		len;
	size_t		cap;
	int			failed;			/* 0, OPUS_ERR_NOMEM or OPUS_ERR_CAPACITY */
};

void		opus_gbnf_buf_put(struct opus_gbnf_buf *b, const char *s, size_t n);
void		opus_gbnf_buf_puts(struct opus_gbnf_buf *b, const char *s);
void		opus_gbnf_buf_printf(struct opus_gbnf_buf *b, const char *fmt,...)
			__attribute__((format(printf, 2, 3)));
/* Append s[0..n) as a GBNF string literal "..." (valid UTF-8 passes as is). */
void		opus_gbnf_buf_literal(struct opus_gbnf_buf *b, const char *s, size_t n);
void		opus_gbnf_buf_free(struct opus_gbnf_buf *b);

/* Flags of opus_regex_gbnf_expr. */
#define OPUS_REGEX_JSON_STRING	1	/* the text is inside a JSON string:
									 * literal " \ and controls are written
									 * escaped; classes and . leave them out */

/*
 * Append to b one GBNF expression (parenthesised) for re[0..len) under
 * flags.  With OPUS_REGEX_JSON_STRING, *anchored_start / *anchored_end (when
 * not NULL) say whether the expression began with ^ / ended with $ (JSON
 * Schema's pattern matches anywhere unless anchored); otherwise anchors are
 * implicit.  Returns OPUS_OK or fills err; messages begin with what (e.g.
 * "regex" or "pattern at $.properties.x") and name the offset.
 */
enum opus_status opus_regex_gbnf_expr(struct opus_gbnf_buf *b, const char *re, size_t len,
									  int flags, const char *what,
									  int *anchored_start, int *anchored_end,
									  struct opus_error *err);

/*
 * The grammar "root ::= <regex>" for a whole output matching re[0..len).
 * On OPUS_OK *out is a malloc'd NUL-terminated grammar (free() it).
 */
enum opus_status opus_regex_to_gbnf(const char *re, size_t len, char **out,
									struct opus_error *err);

/*
 * The grammar of an output that is exactly one of the n strings s[i] (lens[i]
 * bytes each).  Errors (OPUS_ERR_INVALID_ARG): no strings, an empty string
 * (it tokenizes to nothing), a duplicate, a string that is not UTF-8 or holds
 * a NUL; more than OPUS_CHOICES_MAX strings or a grammar over
 * OPUS_GBNF_MAX_BYTES is OPUS_ERR_CAPACITY.
 */
enum opus_status opus_choices_to_gbnf(const char *const *s, const size_t *lens, size_t n,
									  char **out, struct opus_error *err);

#endif							/* OPUS_REGEX_GBNF_H */
