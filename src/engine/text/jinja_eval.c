/*
 * jinja_eval.c - renders a parsed template (jinja.h): scopes, expressions,
 * macro calls, statements and the entry point.
 *
 * Semantics are jinja2's under Hugging Face's environment, as Python would
 * compute them: Python's int / float arithmetic (floor division and modulo
 * rounding toward minus infinity, overflow an error), a for loop's own scope
 * (assignments in a loop body do not leave it; namespace() is the way out),
 * `and` / `or` returning an operand, Markup + str escaping the str.
 *
 * Bounds: every statement, expression and loop iteration costs a step;
 * values live in the render's arena (limits->max_memory); the output is
 * checked against limits->max_output as it grows; macro calls nest at most
 * limits->max_depth deep.  Errors longjmp back to opus_jinja_render.
 */
#include "text/jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- scopes */

static jval *
frame_lookup(struct frame *f, const char *name, size_t n)
{
	for (; f; f = f->parent)
	{
		jval	   *v = jj_dict_find_str(&f->vars, name, n);

		if (v)
			return v;
	}
	return NULL;
}

static void
frame_set(struct ev *e, struct frame *f, const char *name, jval v)
{
	jval	   *slot = jj_dict_find_str(&f->vars, name, strlen(name));

	if (slot)
		*slot = v;
	else
		jj_dict_set(e, &f->vars, jj_mk_str(e, name), v);
}

static struct frame *
new_frame(struct ev *e, struct frame *parent)
{
	struct frame *f = jj_ealloc(e, sizeof(*f));

	f->parent = parent;
	return f;
}


/* -------------------------------------------------------- expressions */

static jval eval(struct ev *e, const struct jnode *n, struct frame *f);
static int	exec_body(struct ev *e, const struct jnode *body, struct frame *f);

static void
eval_args(struct ev *e, const struct jnode *n, struct frame *f, struct args *a, const jval *first)
{
	int			off = first ? 1 : 0;

	a->npos = n->nv + off;
	a->pos = jj_ealloc(e, sizeof(jval) * (size_t) (a->npos + 1));
	if (first)
		a->pos[0] = *first;
	for (int i = 0; i < n->nv; i++)
		a->pos[i + off] = eval(e, n->v[i], f);
	a->nk = n->nk;
	a->kn = n->kn;
	a->kv = jj_ealloc(e, sizeof(jval) * (size_t) (n->nk + 1));
	for (int i = 0; i < n->nk; i++)
		a->kv[i] = eval(e, n->kv[i], f);
}

static jval
arith(struct ev *e, int op, const jval *a, const jval *b)
{
	if (op == OP_CONCAT)
	{
		struct sb	s = {0};

		jj_put_str(e, &s, a, 0);
		jj_put_str(e, &s, b, 0);
		return jj_sb_val(e, &s);
	}
	if (op == OP_ADD && a->k == J_STR && b->k == J_STR)
	{
		/* Markup + str escapes the str (and str + Markup): the result is Markup */
		bool		safe = a->u.s->safe || b->u.s->safe;
		jval		x = safe ? jj_html_escape(e, a) : *a,
					y = safe ? jj_html_escape(e, b) : *b;
		struct sb	s = {0};
		jval		r;

		jj_sb_put(e, &s, x.u.s->p, x.u.s->n);
		jj_sb_put(e, &s, y.u.s->p, y.u.s->n);
		r = jj_sb_val(e, &s);
		r.u.s->safe = safe;
		return r;
	}
	if (op == OP_ADD && a->k == J_LIST && b->k == J_LIST)
	{
		struct jlist *l = jj_new_list(e, a->u.l->n + b->u.l->n);

		for (size_t i = 0; i < a->u.l->n; i++)
			jj_list_push(e, l, a->u.l->v[i]);
		for (size_t i = 0; i < b->u.l->n; i++)
			jj_list_push(e, l, b->u.l->v[i]);
		l->tuple = a->u.l->tuple;
		return jj_list_val(l);
	}
	if (op == OP_MUL && ((a->k == J_STR || a->k == J_LIST) && (b->k == J_INT || b->k == J_BOOL)))
	{
		int64_t		times = jj_num_i(b);
		size_t		unit = a->k == J_STR ? a->u.s->n : a->u.l->n;

		if (times <= 0 || unit == 0)
			return a->k == J_STR ? jj_mk_str(e, "") : jj_list_val(jj_new_list(e, 0));
		if ((uint64_t) times > e->ar->limit / unit)
			FAIL(e, "repeated sequence over the memory limit");
		if (a->k == J_STR)
		{
			struct sb	s = {0};

			for (int64_t i = 0; i < times; i++)
				jj_sb_put(e, &s, a->u.s->p, a->u.s->n);
			return jj_sb_val(e, &s);
		}
		{
			struct jlist *l = jj_new_list(e, 0);

			for (int64_t i = 0; i < times; i++)
				for (size_t k = 0; k < a->u.l->n; k++)
					jj_list_push(e, l, a->u.l->v[k]);
			return jj_list_val(l);
		}
	}
	if (op == OP_MUL && (b->k == J_STR || b->k == J_LIST) && (a->k == J_INT || a->k == J_BOOL))
		return arith(e, op, b, a);
	if (!jj_is_num(a) || !jj_is_num(b))
	{
		static const char *const sym[] = {"", "+", "-", "*", "/", "//", "%", "**"};

		if (op == OP_MOD && a->k == J_STR)
			jj_ev_fail(e, OPUS_ERR_UNSUPPORTED, "string %% formatting is not supported");
		FAIL(e, "unsupported operand type(s) for %s: '%s' and '%s'",
			 op <= OP_POW ? sym[op] : "?", jj_kind_name(a), jj_kind_name(b));
	}
	if (a->k != J_FLOAT && b->k != J_FLOAT && op != OP_DIV)
	{
		int64_t		x = jj_num_i(a),
					y = jj_num_i(b),
					r = 0;

		switch (op)
		{
			case OP_ADD:
				if (__builtin_add_overflow(x, y, &r))
					FAIL(e, "integer overflow");
				return jj_mk_int(r);
			case OP_SUB:
				if (__builtin_sub_overflow(x, y, &r))
					FAIL(e, "integer overflow");
				return jj_mk_int(r);
			case OP_MUL:
				if (__builtin_mul_overflow(x, y, &r))
					FAIL(e, "integer overflow");
				return jj_mk_int(r);
			case OP_FLOORDIV:
			case OP_MOD:
				if (y == 0)
					FAIL(e, "integer division or modulo by zero");
				if (x == INT64_MIN && y == -1)
					FAIL(e, "integer overflow");
				{
					int64_t		q = x / y,
								m = x % y;

					if (m != 0 && ((m < 0) != (y < 0)))
					{
						q--;
						m += y;
					}
					return jj_mk_int(op == OP_MOD ? m : q);
				}
			case OP_POW:
				if (y < 0)
					return jj_mk_float(pow((double) x, (double) y));
				r = 1;
				for (int64_t i = 0; i < y; i++)
				{
					if (__builtin_mul_overflow(r, x, &r))
						FAIL(e, "integer overflow");
					if (r == 0 || r == 1)
						break;
					jj_step(e);
				}
				return jj_mk_int(r);
		}
	}
	{
		double		x = jj_num_f(a),
					y = jj_num_f(b);

		switch (op)
		{
			case OP_ADD:
				return jj_mk_float(x + y);
			case OP_SUB:
				return jj_mk_float(x - y);
			case OP_MUL:
				return jj_mk_float(x * y);
			case OP_DIV:
				if (y == 0)
					FAIL(e, "division by zero");
				return jj_mk_float(x / y);
			case OP_FLOORDIV:
				if (y == 0)
					FAIL(e, "float floor division by zero");
				return jj_mk_float(floor(x / y));
			case OP_MOD:
				if (y == 0)
					FAIL(e, "float modulo");
				{
					double		m = fmod(x, y);

					if (m != 0 && ((m < 0) != (y < 0)))
						m += y;
					return jj_mk_float(m);
				}
			default:
				return jj_mk_float(pow(x, y));
		}
	}
}

static jval
lookup_name(struct ev *e, const char *name, struct frame *f)
{
	jval	   *v = frame_lookup(f, name, strlen(name));

	if (v)
		return *v;
	if (jj_in_names(jj_global_fns, name))
		return jj_mk_func(e, FN_GLOBAL, name);
	return jj_mk_undef();
}

static jval
eval(struct ev *e, const struct jnode *n, struct frame *f)
{
	jj_step(e);
	e->line = n->line;
	switch (n->t)
	{
		case E_LIT:
			return n->lit;
		case E_NAME:
			return lookup_name(e, n->s, f);
		case E_LIST:
		case E_TUPLE:
			{
				struct jlist *l = jj_new_list(e, (size_t) n->nv);

				for (int i = 0; i < n->nv; i++)
					jj_list_push(e, l, eval(e, n->v[i], f));
				l->tuple = n->t == E_TUPLE;
				return jj_list_val(l);
			}
		case E_DICT:
			{
				struct jdict *d = jj_new_dict(e);

				for (int i = 0; i + 1 < n->nv; i += 2)
				{
					jval		k = eval(e, n->v[i], f);

					if (k.k == J_LIST && !k.u.l->tuple)
						FAIL(e, "unhashable type: 'list'");
					if (k.k == J_DICT || k.k == J_NS)
						FAIL(e, "unhashable type: 'dict'");
					jj_dict_set(e, d, k, eval(e, n->v[i + 1], f));
				}
				return jj_dict_val(d, J_DICT);
			}
		case E_ATTR:
			{
				jval		o = eval(e, n->a, f);

				e->line = n->line;
				return jj_get_attr(e, &o, n->s);
			}
		case E_ITEM:
			{
				jval		o = eval(e, n->a, f),
							k = eval(e, n->b, f);

				e->line = n->line;
				return jj_get_item(e, &o, &k);
			}
		case E_SLICE:
			{
				jval		o = eval(e, n->a, f);
				jval		b = n->b ? eval(e, n->b, f) : jj_mk_none(),
							c = n->c ? eval(e, n->c, f) : jj_mk_none(),
							d = n->d ? eval(e, n->d, f) : jj_mk_none();

				e->line = n->line;
				return jj_do_slice(e, &o, &b, &c, &d);
			}
		case E_CALL:
			{
				jval		fn = eval(e, n->a, f);
				struct args a = {0};

				eval_args(e, n, f, &a, NULL);
				e->line = n->line;
				return jj_call_value(e, &fn, &a, NULL, NULL);
			}
		case E_FILTER:
			{
				jval		v = eval(e, n->a, f);
				struct args a = {0};

				eval_args(e, n, f, &a, NULL);
				e->line = n->line;
				return jj_apply_filter(e, n->s, &v, &a);
			}
		case E_TEST:
			{
				jval		v = eval(e, n->a, f);
				struct args a = {0};
				bool		r;

				eval_args(e, n, f, &a, NULL);
				e->line = n->line;
				r = jj_run_test(e, n->s, &v, &a);
				return jj_mk_bool(n->op ? !r : r);
			}
		case E_NEG:
		case E_POS:
			{
				jval		v = eval(e, n->a, f);

				if (v.k == J_INT || v.k == J_BOOL)
				{
					if (n->t == E_POS)
						return jj_mk_int(jj_num_i(&v));
					if (jj_num_i(&v) == INT64_MIN)
						FAIL(e, "integer overflow");
					return jj_mk_int(-jj_num_i(&v));
				}
				if (v.k == J_FLOAT)
					return jj_mk_float(n->t == E_NEG ? -v.u.f : v.u.f);
				FAIL(e, "bad operand type for unary %c: '%s'", n->t == E_NEG ? '-' : '+', jj_kind_name(&v));
			}
		case E_NOT:
			{
				jval		v = eval(e, n->a, f);

				return jj_mk_bool(!jj_truthy(&v));
			}
		case E_AND:
			{
				jval		a = eval(e, n->a, f);

				return jj_truthy(&a) ? eval(e, n->b, f) : a;
			}
		case E_OR:
			{
				jval		a = eval(e, n->a, f);

				return jj_truthy(&a) ? a : eval(e, n->b, f);
			}
		case E_COND:
			{
				jval		c = eval(e, n->a, f);

				if (jj_truthy(&c))
					return eval(e, n->b, f);
				return n->c ? eval(e, n->c, f) : jj_mk_undef();
			}
		case E_BIN:
			{
				jval		a = eval(e, n->a, f),
							b = eval(e, n->b, f);

				e->line = n->line;
				return arith(e, n->op, &a, &b);
			}
		case E_CMP:
			{
				jval		a = eval(e, n->a, f),
							b = eval(e, n->b, f);

				e->line = n->line;
				switch (n->op)
				{
					case OP_EQ:
						return jj_mk_bool(jj_val_eq(&a, &b));
					case OP_NE:
						return jj_mk_bool(!jj_val_eq(&a, &b));
					case OP_LT:
						return jj_mk_bool(jj_val_cmp(e, &a, &b) < 0);
					case OP_LE:
						return jj_mk_bool(jj_val_cmp(e, &a, &b) <= 0);
					case OP_GT:
						return jj_mk_bool(jj_val_cmp(e, &a, &b) > 0);
					case OP_GE:
						return jj_mk_bool(jj_val_cmp(e, &a, &b) >= 0);
					case OP_IN:
						return jj_mk_bool(jj_contains(e, &b, &a));
					default:
						return jj_mk_bool(!jj_contains(e, &b, &a));
				}
			}
		default:
			FAIL(e, "internal error: bad expression node %d", n->t);
	}
}

/* Render body into a fresh buffer (macro bodies, set blocks, filter blocks). */
static jval
capture(struct ev *e, const struct jnode *body, struct frame *f)
{
	struct sb  *saved = e->out;
	struct sb	b = {0};

	e->out = &b;
	exec_body(e, body, f);
	e->out = saved;
	return jj_sb_val(e, &b);
}

jval
jj_call_value(struct ev *e, const jval *fn, const struct args *a, const struct jnode *caller,
		   struct frame *caller_frame)
{
	const struct jfunc *fu;

	if (fn->k != J_FUNC)
		FAIL(e, "'%s' object is not callable", jj_kind_name(fn));
	fu = fn->u.fn;
	switch (fu->kind)
	{
		case FN_GLOBAL:
			return jj_call_global(e, fu->name, a);
		case FN_METHOD:
			if (strcmp(fu->name, "cycle") == 0 && fu->self.k == J_INT)
			{
				if (a->npos == 0)
					FAIL(e, "no items for cycling given");
				return a->pos[fu->self.u.i % a->npos];
			}
			return jj_call_method(e, &fu->self, fu->name, a);
		case FN_CALLER:
			{
				struct frame *fr = new_frame(e, fu->closure);

				return capture(e, fu->node, fr);
			}
		case FN_MACRO:
			{
				const struct jnode *m = fu->node;
				struct frame *fr = new_frame(e, fu->closure);
				jval		r;

				if (a->npos > m->nk)
					FAIL(e, "macro '%s' takes not more than %d argument(s)", m->s, m->nk);
				for (int k = 0; k < a->nk; k++)
				{
					bool		known = false;

					for (int i = 0; i < m->nk; i++)
						known |= strcmp(m->kn[i], a->kn[k]) == 0;
					if (!known)
						FAIL(e, "macro '%s' takes no keyword argument '%s'", m->s, a->kn[k]);
				}
				if (++e->depth > e->max_depth)
					FAIL(e, "macro calls nested too deeply (over %d)", e->max_depth);
				for (int i = 0; i < m->nk; i++)
				{
					const jval *v = jj_arg(a, i, m->kn[i]);

					frame_set(e, fr, m->kn[i], v ? *v : m->kv[i] ? eval(e, m->kv[i], fr) : jj_mk_undef());
				}
				if (caller)
				{
					jval		c = jj_mk_func(e, FN_CALLER, "caller");

					c.u.fn->node = caller;
					c.u.fn->closure = caller_frame;
					frame_set(e, fr, "caller", c);
				}
				r = capture(e, m->c, fr);
				e->depth--;
				return r;
			}
	}
	FAIL(e, "internal error: bad function");
}

/* ---------------------------------------------------------- statements */

enum
{
	FLOW_NEXT = 0, FLOW_BREAK, FLOW_CONTINUE
};

static void
assign_targets(struct ev *e, struct frame *f, const char **names, int n, const jval *v)
{
	if (n == 1)
	{
		frame_set(e, f, names[0], *v);
		return;
	}
	{
		struct jlist *l = jj_iter_list(e, v);

		if ((int) l->n != n)
			FAIL(e, "cannot unpack %zu values into %d names", l->n, n);
		for (int i = 0; i < n; i++)
			frame_set(e, f, names[i], l->v[i]);
	}
}

static jval
apply_chain(struct ev *e, const struct jnode *chain, jval v, struct frame *f)
{
	struct frame *tmp = new_frame(e, f);

	frame_set(e, tmp, "__block__", v);
	return eval(e, chain, tmp);
}

static int
exec_for(struct ev *e, const struct jnode *n, struct frame *f)
{
	jval		itv = eval(e, n->a, f);
	struct jlist *src,
			   *items;
	struct frame *lf = new_frame(e, f);
	struct jdict *loop;
	jval		cyc;

	e->line = n->line;
	if (itv.k == J_NONE)
		FAIL(e, "'NoneType' object is not iterable");
	src = jj_iter_list(e, &itv);
	items = src;
	if (n->b)
	{
		items = jj_new_list(e, 0);
		for (size_t i = 0; i < src->n; i++)
		{
			jval		c;

			assign_targets(e, lf, n->kn, n->nk, &src->v[i]);
			c = eval(e, n->b, lf);
			if (jj_truthy(&c))
				jj_list_push(e, items, src->v[i]);
		}
	}
	if (items->n == 0)
	{
		if (n->d)
			return exec_body(e, n->d, f);
		return FLOW_NEXT;
	}
	{
		/* one loop object per loop, its values updated per iteration */
		static const char *const keys[] = {"index", "index0", "revindex", "revindex0", "first",
		"last", "length", "depth", "depth0", "previtem", "nextitem", "cycle"};

		loop = jj_new_dict(e);
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			jj_dict_set(e, loop, jj_mk_str(e, keys[k]), jj_mk_none());
		cyc = jj_mk_func(e, FN_METHOD, "cycle");
		frame_set(e, lf, "loop", jj_dict_val(loop, J_NS));
	}
	for (size_t i = 0; i < items->n; i++)
	{
		int64_t		len = (int64_t) items->n;
		int			fl;

		jj_step(e);
		cyc.u.fn->self = jj_mk_int((int64_t) i);
		loop->v[0] = jj_mk_int((int64_t) i + 1);
		loop->v[1] = jj_mk_int((int64_t) i);
		loop->v[2] = jj_mk_int(len - (int64_t) i);
		loop->v[3] = jj_mk_int(len - (int64_t) i - 1);
		loop->v[4] = jj_mk_bool(i == 0);
		loop->v[5] = jj_mk_bool(i + 1 == items->n);
		loop->v[6] = jj_mk_int(len);
		loop->v[7] = jj_mk_int(1);
		loop->v[8] = jj_mk_int(0);
		loop->v[9] = i > 0 ? items->v[i - 1] : jj_mk_undef();
		loop->v[10] = i + 1 < items->n ? items->v[i + 1] : jj_mk_undef();
		loop->v[11] = cyc;
		assign_targets(e, lf, n->kn, n->nk, &items->v[i]);
		fl = exec_body(e, n->c, lf);
		if (fl == FLOW_BREAK)
			break;
	}
	return FLOW_NEXT;
}

static int
exec_node(struct ev *e, const struct jnode *n, struct frame *f)
{
	jj_step(e);
	e->line = n->line;
	switch (n->t)
	{
		case S_TEXT:
			jj_sb_put(e, e->out, n->s, n->sn);
			return FLOW_NEXT;
		case S_OUT:
			{
				jval		v = eval(e, n->a, f);

				jj_put_str(e, e->out, &v, 0);
				return FLOW_NEXT;
			}
		case S_BODY:
			return exec_body(e, n, f);
		case S_IF:
			for (int i = 0; i + 1 < n->nv; i += 2)
			{
				jval		c = eval(e, n->v[i], f);

				if (jj_truthy(&c))
					return exec_body(e, n->v[i + 1], f);
			}
			if (n->c)
				return exec_body(e, n->c, f);
			return FLOW_NEXT;
		case S_FOR:
			return exec_for(e, n, f);
		case S_SET:
			{
				jval		v = eval(e, n->a, f);

				e->line = n->line;
				if (n->s)
				{
					jval	   *ns = frame_lookup(f, n->kn[0], strlen(n->kn[0]));

					if (!ns || ns->k != J_NS)
						FAIL(e, "cannot assign attribute on non-namespace object");
					jj_dict_set(e, ns->u.d, jj_mk_str(e, n->s), v);
				}
				else
					assign_targets(e, f, n->kn, n->nk, &v);
				return FLOW_NEXT;
			}
		case S_SETBLOCK:
			{
				jval		v = capture(e, n->c, f);

				if (n->b)
					v = apply_chain(e, n->b, v, f);
				frame_set(e, f, n->kn[0], v);
				return FLOW_NEXT;
			}
		case S_FILTERBLOCK:
			{
				jval		v = apply_chain(e, n->b, capture(e, n->c, f), f);

				jj_put_str(e, e->out, &v, 0);
				return FLOW_NEXT;
			}
		case S_MACRO:
			{
				jval		m = jj_mk_func(e, FN_MACRO, n->s);

				m.u.fn->node = n;
				m.u.fn->closure = f;
				frame_set(e, f, n->s, m);
				return FLOW_NEXT;
			}
		case S_CALLBLOCK:
			{
				const struct jnode *c = n->a;
				jval		fn = eval(e, c->a, f);
				struct args a = {0};
				jval		r;

				eval_args(e, c, f, &a, NULL);
				if (fn.k != J_FUNC || fn.u.fn->kind != FN_MACRO)
					FAIL(e, "a call block needs a macro");
				r = jj_call_value(e, &fn, &a, n->c, f);
				jj_put_str(e, e->out, &r, 0);
				return FLOW_NEXT;
			}
		case S_BREAK:
			return FLOW_BREAK;
		case S_CONTINUE:
			return FLOW_CONTINUE;
		default:
			FAIL(e, "internal error: bad statement node %d", n->t);
	}
}

static int
exec_body(struct ev *e, const struct jnode *body, struct frame *f)
{
	if (++e->depth > e->max_depth * 4)
		FAIL(e, "template nested too deeply while rendering");
	for (int i = 0; i < body->nv; i++)
	{
		int			fl = exec_node(e, body->v[i], f);

		if (fl != FLOW_NEXT)
		{
			e->depth--;
			return fl;
		}
	}
	e->depth--;
	return FLOW_NEXT;
}

/* --------------------------------------------------------------- entry */

enum opus_status
opus_jinja_render(const struct opus_jinja *t, const char *context_json, size_t json_len,
				  const struct opus_jinja_limits *limits, char **out, size_t *out_len,
				  struct opus_error *err)
{
	struct opus_jinja_limits lim = {0};
	struct jarena ar = {0};
	struct ev  *e;
	struct sb	main_out = {0};
	jval		ctx;

	*out = NULL;
	if (out_len)
		*out_len = 0;
	if (limits)
		lim = *limits;
	opus_jinja_limits_default(&lim);
	ar.limit = lim.max_memory;
	e = calloc(1, sizeof(*e));
	if (!e)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory rendering a template");
	e->ar = &ar;
	e->max_output = lim.max_output;
	e->max_steps = lim.max_steps;
	e->max_depth = lim.max_depth;
	e->now = lim.now ? lim.now : time(NULL);
	e->main_out = &main_out;
	e->out = &main_out;
	if (setjmp(e->jb))
	{
		enum opus_status code = e->code;

		opus_error_set(err, code, "chat template line %d: %s", e->line, e->msg);
		ja_free(&ar);
		free(e);
		return code;
	}
	if (!jinja_json_parse(&ar, context_json, json_len, &ctx, lim.max_depth) || ctx.k != J_DICT)
	{
		e->line = 0;
		FAIL(e, "the context is not a JSON object");
	}
	e->root = new_frame(e, NULL);
	e->root->vars = *ctx.u.d;
	exec_body(e, t->root, e->root);
	*out = malloc(main_out.n + 1);
	if (!*out)
	{
		ja_free(&ar);
		free(e);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory rendering a template");
	}
	if (main_out.n)
		memcpy(*out, main_out.p, main_out.n);
	(*out)[main_out.n] = '\0';
	if (out_len)
		*out_len = main_out.n;
	ja_free(&ar);
	free(e);
	return OPUS_OK;
}

