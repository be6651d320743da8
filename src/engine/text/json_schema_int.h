/*
 * json_schema_int.h - what the JSON Schema converter's files share: the
 * JSON tree the reader builds (struct jv, struct jparse), the converter's
 * state (struct conv: rules written so far, $ref names, the schema path)
 * and the functions one file calls in another.  Only json_schema.c,
 * json_schema_read.c and json_schema_emit.c include it.
 */
#ifndef OPUS_JSON_SCHEMA_INT_H
#define OPUS_JSON_SCHEMA_INT_H

#include <stddef.h>

#include "base/status.h"
#include "text/json_schema.h"
#include "text/regex_gbnf.h"

/* ------------------------------------------------------------------ */
/* the JSON tree (json_schema_read.c) */


enum jtype
{
	J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ
};

struct jv
{
	enum jtype	t;
	int			b;
	double		num;
	const char *raw;			/* J_NUM: the number's text in the input */
	size_t		rawlen;
	char	   *str;			/* J_STR: decoded UTF-8 (NUL-terminated) */
	size_t		slen;
	size_t		n;				/* J_ARR, J_OBJ: members */
	struct jv **items;
	char	  **keys;			/* J_OBJ */
	size_t	   *klens;
};

struct arena_block;			/* json_schema_read.c */

struct jparse
{
	const char *s;
	size_t		n,
				pos;
	int			depth;
	struct arena_block *arena;
	size_t		total;
	struct opus_error *err;
	enum opus_status st;
};

struct jv  *js_json_parse(struct jparse *p, const char *s, size_t n, struct opus_error *err);
void		js_arena_free(struct jparse *p);
struct jv  *js_get(const struct jv *o, const char *key);

/* ------------------------------------------------------------------ */
/* the converter's state and its GBNF output (json_schema_emit.c) */

struct rule
{
	char	   *name;
	char	   *body;			/* NULL while reserved */
};

struct refname
{
	const struct jv *target;
	char	   *name;
};

struct conv
{
	struct jparse *jp;
	const struct jv *root;
	struct rule *rules;
	size_t		nrules,
				caprules;
	struct refname *refs;
	size_t		nrefs,
				caprefs;
	int			depth;
	char		path[512];		/* "$.properties.a" */
	size_t		pathlen;
	struct opus_error *err;
	enum opus_status st;
};

struct bounds
{
	int			has_lo,
				has_hi;
	long long	lo,
				hi;
};

int			js_fail(struct conv *c, enum opus_status code, const char *fmt, const char *arg);
size_t		js_path_push(struct conv *c, const char *seg, const char *key, size_t klen);
void		js_path_pop(struct conv *c, size_t old);
struct rule *js_rule_find(struct conv *c, const char *name);
long		js_rule_reserve(struct conv *c, const char *hint);
int			js_rule_set(struct conv *c, long idx, struct opus_gbnf_buf *b);
const char *js_prim(struct conv *c, const char *name);
void		js_put_literal(struct opus_gbnf_buf *b, const struct jv *v);
int			js_read_bounds(struct conv *c, const struct jv *s, int integer, struct bounds *bd);
void		js_number_range(struct conv *c, struct opus_gbnf_buf *b, const struct bounds *bd, int integer);

#endif
