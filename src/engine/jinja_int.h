/*
 * jinja_int.h - what jinja_parse.c and jinja_eval.c share: the arena, the
 * value representation and the syntax tree.  Only those two files include it.
 *
 * Memory: everything a parse or a render allocates comes from one arena
 * (struct jarena) freed as a whole, so an error can unwind with longjmp
 * without leaking; the arena refuses to grow past its limit.
 */
#ifndef OPUS_JINJA_INT_H
#define OPUS_JINJA_INT_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

struct jblock;

struct jarena
{
	struct jblock *head;
	size_t		used;			/* bytes handed out, all blocks */
	size_t		limit;
};

void	   *ja_alloc(struct jarena *a, size_t n);	/* 16-aligned, zeroed; NULL past limit */
void		ja_free(struct jarena *a);

enum jkind
{
	J_UNDEF = 0,
	J_NONE,
	J_BOOL,
	J_INT,
	J_FLOAT,
	J_STR,
	J_LIST,						/* also tuples (flag in jlist) */
	J_DICT,
	J_NS,						/* namespace(): a dict whose attributes can be set */
	J_FUNC						/* macro, global function or bound method */
};

struct jstr
{
	size_t		n;
	bool		safe;			/* markupsafe.Markup (|safe, |escape): see arith() */
	char		p[];			/* n bytes + NUL */
};

struct jlist;
struct jdict;
struct jfunc;

typedef struct jval
{
	uint8_t		k;
	union
	{
		bool		b;
		int64_t		i;
		double		f;
		struct jstr *s;
		struct jlist *l;
		struct jdict *d;
		struct jfunc *fn;
	}			u;
} jval;

struct jlist
{
	size_t		n,
				cap;
	bool		tuple;
	jval	   *v;
};

struct jdict
{
	size_t		n,
				cap;
	jval	   *k;
	jval	   *v;
};

/* ------------------------------------------------------------ the tree */

enum jnode_type
{
	/* expressions */
	E_LIT, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL,
	E_FILTER, E_TEST, E_NEG, E_POS, E_NOT, E_AND, E_OR, E_BIN, E_CMP, E_COND,
	/* statements */
	S_BODY, S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_BREAK,
	S_CONTINUE, S_FILTERBLOCK, S_CALLBLOCK
};

enum jop
{
	OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
	OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN
};

/*
 * One node type for everything; which fields mean what:
 *   E_LIT lit; E_NAME s; E_LIST/E_TUPLE v[]; E_DICT v[] = k0,v0,k1,v1...
 *   E_ATTR a.s; E_ITEM a[b]; E_SLICE a[b:c:d] (b,c,d may be NULL)
 *   E_CALL a(v[], kn[]=kv[]); E_FILTER a|s(v[], kn=kv); E_TEST a is s(v[]),
 *     op = 1 for "is not"; E_NEG/E_POS/E_NOT a; E_AND/E_OR a b; E_BIN/E_CMP
 *     op a b; E_COND b if a else c (c may be NULL)
 *   S_BODY v[]; S_TEXT s (sn bytes); S_OUT a;
 *   S_IF v[] = cond0, body0, cond1, body1 ..., c = else body (or NULL)
 *   S_FOR kn[] targets, a iterable, b filter (or NULL), c body, d else body
 *   S_SET kn[] targets (one: a name; several: unpacking), s attribute of a
 *     namespace target (kn[0].s) or NULL, a value
 *   S_SETBLOCK kn[0] target, c body, b filter chain applied (E_FILTER on an
 *     E_NAME "__block__") or NULL
 *   S_MACRO s name, kn[] params, kv[] defaults (NULL: none), c body
 *   S_FILTERBLOCK b filter chain as above, c body
 *   S_CALLBLOCK a the call, c the caller body
 */
struct jnode
{
	uint8_t		t;
	uint8_t		op;
	int			line;
	jval		lit;
	const char *s;
	size_t		sn;
	struct jnode *a,
			   *b,
			   *c,
			   *d;
	struct jnode **v;
	int			nv;
	const char **kn;
	struct jnode **kv;
	int			nk;
};

struct opus_jinja
{
	struct jarena ar;
	struct jnode *root;
};

/* filters and tests the evaluator knows: the parser refuses others */
bool		jinja_known_filter(const char *name);
bool		jinja_known_test(const char *name);

/* JSON text -> value (arena); returns false on malformed JSON */
bool		jinja_json_parse(struct jarena *ar, const char *s, size_t n, jval *out,
							 int max_depth);

#endif							/* OPUS_JINJA_INT_H */
