/*
 * jinja_int.h - what the interpreter's files (jinja_*.c) share: the arena,
 * the value representation, the syntax tree and the render state.  Only
 * those files include it.
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

#include "text/jinja.h"

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

/* ----------------------------------------------------------- the evaluator */
/*
 * What jinja_value.c, jinja_methods.c, jinja_filters.c and jinja_eval.c
 * share.  Their jj_ functions take the render state first and report
 * errors with jj_ev_fail / FAIL (a longjmp to opus_jinja_render).
 */

/* a growable byte buffer in the arena */
struct sb
{
	char	   *p;
	size_t		n,
				cap;
};

struct frame
{
	struct frame *parent;
	struct jdict vars;
};

enum fn_kind
{
	FN_MACRO, FN_GLOBAL, FN_METHOD, FN_CALLER
};

struct jfunc
{
	int			kind;
	const char *name;
	const struct jnode *node;	/* FN_MACRO: S_MACRO; FN_CALLER: body */
	struct frame *closure;
	jval		self;			/* FN_METHOD */
	const struct jnode *caller; /* FN_MACRO called from a call block */
	struct frame *caller_frame;
};

/* one render */
struct ev
{
	struct jarena *ar;
	jmp_buf		jb;
	enum opus_status code;
	char		msg[220];
	int			line;
	struct sb  *out;
	struct sb  *main_out;
	size_t		max_output;
	uint64_t	steps,
				max_steps;
	int			depth,
				max_depth;
	time_t		now;
	struct frame *root;
};

/* the arguments of a call, filter or test */
struct args
{
	jval	   *pos;
	int			npos;
	const char **kn;
	jval	   *kv;
	int			nk;
};

#define FAIL(e, ...) jj_ev_fail((e), OPUS_ERR_TEMPLATE, __VA_ARGS__)

/* jinja_value.c */
struct json_opts
{
	int			indent;			/* -1: none */
	const char *item_sep;
	const char *key_sep;
	bool		sort_keys;
};

void jj_ev_fail(struct ev *e, enum opus_status code, const char *fmt,...)
			__attribute__((format(printf, 3, 4), noreturn));
void * jj_ealloc(struct ev *e, size_t n);
void jj_step(struct ev *e);
void jj_sb_put(struct ev *e, struct sb *b, const char *s, size_t n);
void jj_sb_puts(struct ev *e, struct sb *b, const char *s);
void jj_sb_putc(struct ev *e, struct sb *b, char c);
jval jj_mk_undef(void);
jval jj_mk_none(void);
jval jj_mk_bool(bool b);
jval jj_mk_int(int64_t i);
jval jj_mk_float(double f);
jval jj_mk_strn(struct ev *e, const char *s, size_t n);
jval jj_mk_str(struct ev *e, const char *s);
jval jj_sb_val(struct ev *e, struct sb *b);
struct jlist * jj_new_list(struct ev *e, size_t cap);
jval jj_list_val(struct jlist *l);
void jj_list_push(struct ev *e, struct jlist *l, jval x);
struct jdict * jj_new_dict(struct ev *e);
jval jj_dict_val(struct jdict *d, int kind);
jval * jj_dict_find(const struct jdict *d, const jval *key);
jval * jj_dict_find_str(const struct jdict *d, const char *key, size_t n);
void jj_dict_set(struct ev *e, struct jdict *d, jval key, jval val);
const char * jj_kind_name(const jval *v);
bool jj_truthy(const jval *v);
bool jj_is_num(const jval *v);
double jj_num_f(const jval *v);
int64_t jj_num_i(const jval *v);
bool jj_val_eq(const jval *a, const jval *b);
int jj_val_cmp(struct ev *e, const jval *a, const jval *b);
size_t jj_u8_len(unsigned char c);
size_t jj_cp_count(const char *s, size_t n);
size_t jj_cp_offset(const char *s, size_t n, size_t idx);
void jj_put_str(struct ev *e, struct sb *b, const jval *v, int depth);
struct jstr * jj_to_str(struct ev *e, const jval *v);
void jj_json_dump(struct ev *e, struct sb *b, const jval *v, const struct json_opts *o, int level);
jval jj_mk_func(struct ev *e, int kind, const char *name);

/* jinja_methods.c */
extern const char *const jj_global_fns[];
bool jj_in_names(const char *const *names, const char *s);
jval jj_get_attr(struct ev *e, const jval *obj, const char *name);
jval jj_get_item(struct ev *e, const jval *obj, const jval *key);
jval jj_do_slice(struct ev *e, const jval *obj, const jval *lo, const jval *hi, const jval *st);
struct jlist * jj_iter_list(struct ev *e, const jval *v);
bool jj_contains(struct ev *e, const jval *hay, const jval *needle);
bool jj_py_space(unsigned char c);
jval jj_str_strip(struct ev *e, const struct jstr *s, const struct jstr *chars, int which);
jval jj_str_case(struct ev *e, const struct jstr *s, int mode);
jval jj_str_replace(struct ev *e, const struct jstr *s, const struct jstr *old, const struct jstr *nw, int64_t count);
const jval * jj_arg(const struct args *a, int i, const char *name);
const struct jstr * jj_arg_str(struct ev *e, const struct args *a, int i, const char *name, const char *what);
int64_t jj_arg_int(struct ev *e, const struct args *a, int i, const char *name, int64_t dflt, const char *what);
bool jj_arg_bool(const struct args *a, int i, const char *name, bool dflt);
jval jj_call_method(struct ev *e, const jval *self, const char *m, const struct args *a);
jval jj_call_global(struct ev *e, const char *name, const struct args *a);

/* jinja_filters.c */
bool jj_run_test(struct ev *e, const char *t, const jval *v, const struct args *a);
jval jj_html_escape(struct ev *e, const jval *v);
jval jj_apply_filter(struct ev *e, const char *f, const jval *v, const struct args *a);

/* jinja_eval.c */
jval jj_call_value(struct ev *e, const jval *fn, const struct args *a, const struct jnode *caller, struct frame *caller_frame);

#endif							/* OPUS_JINJA_INT_H */
