/*
 * jinja_eval.c - renders a parsed template (jinja.h): values, scopes,
 * filters, tests, methods, and the JSON the context arrives in and tojson
 * writes.
 *
 * Semantics are jinja2's under Hugging Face's environment, as Python would
 * compute them: str() of a value for output (None, True, 1.5, ['a'] in
 * Python's spelling), code-point string indexing and slicing, Python's
 * int / float arithmetic (floor division and modulo rounding toward minus
 * infinity), a for loop's own scope (assignments in a loop body do not
 * leave it; namespace() is the way out), dict attribute access that finds
 * the dict's methods first (d.items) and keys second.  The sandbox is
 * immutable: list.append, dict.update and the like are errors.
 *
 * Bounds: every statement, expression and loop iteration costs a step;
 * values live in the render's arena (limits->max_memory); the output is
 * checked against limits->max_output as it grows; macro calls nest at most
 * limits->max_depth deep.  Errors longjmp back to opus_jinja_render.
 */
#include "jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------------- state */

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

static void ev_fail(struct ev *e, enum opus_status code, const char *fmt,...)
			__attribute__((format(printf, 3, 4), noreturn));

static void
ev_fail(struct ev *e, enum opus_status code, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	e->code = code;
	longjmp(e->jb, 1);
}

#define FAIL(e, ...) ev_fail((e), OPUS_ERR_TEMPLATE, __VA_ARGS__)

static void *
ealloc(struct ev *e, size_t n)
{
	void	   *p = ja_alloc(e->ar, n);

	if (!p)
		FAIL(e, "template used more than its memory limit (%zu bytes)", e->ar->limit);
	return p;
}

static void
step(struct ev *e)
{
	if (++e->steps > e->max_steps)
		FAIL(e, "template ran more than its step limit (%llu steps)",
			 (unsigned long long) e->max_steps);
}

/* ---------------------------------------------------------- builders */

static void
sb_put(struct ev *e, struct sb *b, const char *s, size_t n)
{
	if (n == 0)
		return;
	if (b == e->main_out && (n > e->max_output || b->n > e->max_output - n))
		FAIL(e, "template output over its limit (%zu bytes)", e->max_output);
	if (b->n + n + 1 > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 256;
		char	   *np;

		while (cap < b->n + n + 1)
		{
			if (cap > ((size_t) 1 << 40))
				FAIL(e, "string too long");
			cap *= 2;
		}
		np = ealloc(e, cap);
		if (b->n)
			memcpy(np, b->p, b->n);
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void
sb_puts(struct ev *e, struct sb *b, const char *s)
{
	sb_put(e, b, s, strlen(s));
}

static void
sb_putc(struct ev *e, struct sb *b, char c)
{
	sb_put(e, b, &c, 1);
}

/* ------------------------------------------------------------ values */

static jval
mk_undef(void)
{
	jval		v = {0};

	v.k = J_UNDEF;
	return v;
}

static jval
mk_none(void)
{
	jval		v = {0};

	v.k = J_NONE;
	return v;
}

static jval
mk_bool(bool b)
{
	jval		v = {0};

	v.k = J_BOOL;
	v.u.b = b;
	return v;
}

static jval
mk_int(int64_t i)
{
	jval		v = {0};

	v.k = J_INT;
	v.u.i = i;
	return v;
}

static jval
mk_float(double f)
{
	jval		v = {0};

	v.k = J_FLOAT;
	v.u.f = f;
	return v;
}

static jval
mk_strn(struct ev *e, const char *s, size_t n)
{
	jval		v = {0};
	struct jstr *js = ealloc(e, sizeof(*js) + n + 1);

	js->n = n;
	if (n)
		memcpy(js->p, s, n);
	js->p[n] = '\0';
	v.k = J_STR;
	v.u.s = js;
	return v;
}

static jval
mk_str(struct ev *e, const char *s)
{
	return mk_strn(e, s, strlen(s));
}

static jval
sb_val(struct ev *e, struct sb *b)
{
	return mk_strn(e, b->p ? b->p : "", b->n);
}

static struct jlist *
new_list(struct ev *e, size_t cap)
{
	struct jlist *l = ealloc(e, sizeof(*l));

	if (cap)
	{
		if (cap > e->ar->limit / sizeof(jval))
			FAIL(e, "list too long");
		l->v = ealloc(e, cap * sizeof(jval));
	}
	l->cap = cap;
	return l;
}

static jval
list_val(struct jlist *l)
{
	jval		v = {0};

	v.k = J_LIST;
	v.u.l = l;
	return v;
}

static void
list_push(struct ev *e, struct jlist *l, jval x)
{
	if (l->n == l->cap)
	{
		size_t		cap = l->cap ? l->cap * 2 : 4;
		jval	   *nv;

		if (cap > e->ar->limit / sizeof(jval))
			FAIL(e, "list too long");
		nv = ealloc(e, cap * sizeof(jval));
		if (l->n)
			memcpy(nv, l->v, l->n * sizeof(jval));
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = x;
}

static struct jdict *
new_dict(struct ev *e)
{
	return ealloc(e, sizeof(struct jdict));
}

static jval
dict_val(struct jdict *d, int kind)
{
	jval		v = {0};

	v.k = (uint8_t) kind;
	v.u.d = d;
	return v;
}

static bool val_eq(const jval *a, const jval *b);

static jval *
dict_find(const struct jdict *d, const jval *key)
{
	for (size_t i = 0; i < d->n; i++)
		if (val_eq(&d->k[i], key))
			return &d->v[i];
	return NULL;
}

static jval *
dict_find_str(const struct jdict *d, const char *key, size_t n)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i].k == J_STR && d->k[i].u.s->n == n && memcmp(d->k[i].u.s->p, key, n) == 0)
			return &d->v[i];
	return NULL;
}

static void
dict_set(struct ev *e, struct jdict *d, jval key, jval val)
{
	jval	   *slot = dict_find(d, &key);

	if (slot)
	{
		*slot = val;
		return;
	}
	if (d->n == d->cap)
	{
		size_t		cap = d->cap ? d->cap * 2 : 8;
		jval	   *nk,
				   *nv;

		if (cap > e->ar->limit / sizeof(jval))
			FAIL(e, "dict too large");
		nk = ealloc(e, cap * sizeof(jval));
		nv = ealloc(e, cap * sizeof(jval));
		if (d->n)
		{
			memcpy(nk, d->k, d->n * sizeof(jval));
			memcpy(nv, d->v, d->n * sizeof(jval));
		}
		d->k = nk;
		d->v = nv;
		d->cap = cap;
	}
	d->k[d->n] = key;
	d->v[d->n] = val;
	d->n++;
}

static const char *
kind_name(const jval *v)
{
	switch (v->k)
	{
		case J_UNDEF:
			return "undefined";
		case J_NONE:
			return "NoneType";
		case J_BOOL:
			return "bool";
		case J_INT:
			return "int";
		case J_FLOAT:
			return "float";
		case J_STR:
			return "str";
		case J_LIST:
			return v->u.l->tuple ? "tuple" : "list";
		case J_DICT:
			return "dict";
		case J_NS:
			return "Namespace";
		default:
			return "function";
	}
}

static bool
truthy(const jval *v)
{
	switch (v->k)
	{
		case J_UNDEF:
		case J_NONE:
			return false;
		case J_BOOL:
			return v->u.b;
		case J_INT:
			return v->u.i != 0;
		case J_FLOAT:
			return v->u.f != 0.0;
		case J_STR:
			return v->u.s->n > 0;
		case J_LIST:
			return v->u.l->n > 0;
		case J_DICT:
			return v->u.d->n > 0;
		default:
			return true;
	}
}

static bool
is_num(const jval *v)
{
	return v->k == J_INT || v->k == J_FLOAT || v->k == J_BOOL;
}

static double
num_f(const jval *v)
{
	return v->k == J_FLOAT ? v->u.f : v->k == J_BOOL ? (double) v->u.b : (double) v->u.i;
}

static int64_t
num_i(const jval *v)
{
	return v->k == J_BOOL ? (int64_t) v->u.b : v->u.i;
}

static bool
val_eq(const jval *a, const jval *b)
{
	if (is_num(a) && is_num(b))
	{
		if (a->k == J_FLOAT || b->k == J_FLOAT)
			return num_f(a) == num_f(b);
		return num_i(a) == num_i(b);
	}
	if (a->k != b->k)
	{
		/* a namespace is no dict; lists equal tuples never in Python */
		return false;
	}
	switch (a->k)
	{
		case J_UNDEF:
		case J_NONE:
			return true;
		case J_STR:
			return a->u.s->n == b->u.s->n && memcmp(a->u.s->p, b->u.s->p, a->u.s->n) == 0;
		case J_LIST:
			if (a->u.l->n != b->u.l->n || a->u.l->tuple != b->u.l->tuple)
				return false;
			for (size_t i = 0; i < a->u.l->n; i++)
				if (!val_eq(&a->u.l->v[i], &b->u.l->v[i]))
					return false;
			return true;
		case J_DICT:
			if (a->u.d->n != b->u.d->n)
				return false;
			for (size_t i = 0; i < a->u.d->n; i++)
			{
				jval	   *o = dict_find(b->u.d, &a->u.d->k[i]);

				if (!o || !val_eq(&a->u.d->v[i], o))
					return false;
			}
			return true;
		default:
			return a->u.d == b->u.d;
	}
}

/* -1 / 0 / 1; errors for unorderable types as Python does */
static int
val_cmp(struct ev *e, const jval *a, const jval *b)
{
	if (is_num(a) && is_num(b))
	{
		if (a->k == J_FLOAT || b->k == J_FLOAT)
		{
			double		x = num_f(a),
						y = num_f(b);

			return x < y ? -1 : x > y ? 1 : 0;
		}
		return num_i(a) < num_i(b) ? -1 : num_i(a) > num_i(b) ? 1 : 0;
	}
	if (a->k == J_STR && b->k == J_STR)
	{
		size_t		n = a->u.s->n < b->u.s->n ? a->u.s->n : b->u.s->n;
		int			c = memcmp(a->u.s->p, b->u.s->p, n);

		if (c)
			return c < 0 ? -1 : 1;
		return a->u.s->n < b->u.s->n ? -1 : a->u.s->n > b->u.s->n ? 1 : 0;
	}
	if (a->k == J_LIST && b->k == J_LIST)
	{
		for (size_t i = 0; i < a->u.l->n && i < b->u.l->n; i++)
		{
			if (!val_eq(&a->u.l->v[i], &b->u.l->v[i]))
				return val_cmp(e, &a->u.l->v[i], &b->u.l->v[i]);
		}
		return a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n ? 1 : 0;
	}
	FAIL(e, "'<' not supported between instances of '%s' and '%s'", kind_name(a), kind_name(b));
}

/* ------------------------------------------------------------- UTF-8 */

static size_t
u8_len(unsigned char c)
{
	return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

static size_t
cp_count(const char *s, size_t n)
{
	size_t		c = 0;

	for (size_t i = 0; i < n; i++)
		if (((unsigned char) s[i] & 0xC0) != 0x80)
			c++;
	return c;
}

/* byte offset of code point idx (0..count) */
static size_t
cp_offset(const char *s, size_t n, size_t idx)
{
	size_t		i = 0;

	while (idx > 0 && i < n)
	{
		i++;
		while (i < n && ((unsigned char) s[i] & 0xC0) == 0x80)
			i++;
		idx--;
	}
	return i;
}

static uint32_t
u8_decode(const char *s, size_t n, size_t *adv)
{
	unsigned char c = (unsigned char) s[0];
	size_t		l = u8_len(c);
	uint32_t	cp;

	if (l > n)
		l = 1;
	*adv = l;
	if (l == 1)
		return c;
	cp = c & (l == 2 ? 0x1F : l == 3 ? 0x0F : 0x07);
	for (size_t i = 1; i < l; i++)
		cp = (cp << 6) | ((unsigned char) s[i] & 0x3F);
	return cp;
}

/* ------------------------------------------------- str(), repr(), json */

static void
fmt_float(char *buf, size_t cap, double f)
{
	char		tmp[40];
	int			prec,
				exp10;
	char		digits[24];
	int			nd = 0;
	char	   *mant,
			   *ep;
	bool		neg;

	if (isnan(f))
	{
		snprintf(buf, cap, "nan");
		return;
	}
	if (isinf(f))
	{
		snprintf(buf, cap, f < 0 ? "-inf" : "inf");
		return;
	}
	if (f == 0)
	{
		snprintf(buf, cap, signbit(f) ? "-0.0" : "0.0");
		return;
	}
	for (prec = 1; prec <= 17; prec++)
	{
		snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
		if (strtod(tmp, NULL) == f)
			break;
	}
	/* tmp: [-]d[.ddd]e[+-]xx */
	neg = tmp[0] == '-';
	mant = tmp + (neg ? 1 : 0);
	ep = strchr(mant, 'e');
	exp10 = atoi(ep + 1);
	for (char *c = mant; c < ep; c++)
		if (*c != '.')
			digits[nd++] = *c;
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = '\0';
	{
		char		o[64];
		size_t		k = 0;

		if (neg)
			o[k++] = '-';
		if (exp10 >= -4 && exp10 < 16)
		{
			if (exp10 < 0)
			{
				o[k++] = '0';
				o[k++] = '.';
				for (int i = 0; i < -exp10 - 1; i++)
					o[k++] = '0';
				for (int i = 0; i < nd; i++)
					o[k++] = digits[i];
			}
			else
			{
				for (int i = 0; i <= exp10; i++)
					o[k++] = i < nd ? digits[i] : '0';
				o[k++] = '.';
				if (nd > exp10 + 1)
					for (int i = exp10 + 1; i < nd; i++)
						o[k++] = digits[i];
				else
					o[k++] = '0';
			}
			o[k] = '\0';
		}
		else
		{
			o[k++] = digits[0];
			if (nd > 1)
			{
				o[k++] = '.';
				for (int i = 1; i < nd; i++)
					o[k++] = digits[i];
			}
			snprintf(o + k, sizeof(o) - k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
		}
		snprintf(buf, cap, "%s", o);
	}
}

static void put_repr(struct ev *e, struct sb *b, const jval *v, int depth);

/* str(v) appended to b */
static void
put_str(struct ev *e, struct sb *b, const jval *v, int depth)
{
	char		buf[64];

	switch (v->k)
	{
		case J_UNDEF:
			return;
		case J_NONE:
			sb_puts(e, b, "None");
			return;
		case J_BOOL:
			sb_puts(e, b, v->u.b ? "True" : "False");
			return;
		case J_INT:
			snprintf(buf, sizeof(buf), "%lld", (long long) v->u.i);
			sb_puts(e, b, buf);
			return;
		case J_FLOAT:
			fmt_float(buf, sizeof(buf), v->u.f);
			sb_puts(e, b, buf);
			return;
		case J_STR:
			sb_put(e, b, v->u.s->p, v->u.s->n);
			return;
		default:
			put_repr(e, b, v, depth);
	}
}

static void
put_repr(struct ev *e, struct sb *b, const jval *v, int depth)
{
	if (depth > e->max_depth)
		FAIL(e, "value nested too deeply to print");
	step(e);
	switch (v->k)
	{
		case J_STR:
			{
				const char *s = v->u.s->p;
				size_t		n = v->u.s->n;
				char		q = (memchr(s, '\'', n) && !memchr(s, '"', n)) ? '"' : '\'';

				sb_putc(e, b, q);
				for (size_t i = 0; i < n;)
				{
					size_t		adv;
					uint32_t	cp = u8_decode(s + i, n - i, &adv);
					char		esc[16];

					if (cp == (uint32_t) q || cp == '\\')
					{
						sb_putc(e, b, '\\');
						sb_putc(e, b, (char) cp);
					}
					else if (cp == '\n')
						sb_puts(e, b, "\\n");
					else if (cp == '\r')
						sb_puts(e, b, "\\r");
					else if (cp == '\t')
						sb_puts(e, b, "\\t");
					else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD)
					{
						snprintf(esc, sizeof(esc), "\\x%02x", cp);
						sb_puts(e, b, esc);
					}
					else if (cp == 0x2028 || cp == 0x2029)
					{
						snprintf(esc, sizeof(esc), "\\u%04x", cp);
						sb_puts(e, b, esc);
					}
					else
						sb_put(e, b, s + i, adv);
					i += adv;
				}
				sb_putc(e, b, q);
				return;
			}
		case J_LIST:
			sb_putc(e, b, v->u.l->tuple ? '(' : '[');
			for (size_t i = 0; i < v->u.l->n; i++)
			{
				if (i)
					sb_puts(e, b, ", ");
				put_repr(e, b, &v->u.l->v[i], depth + 1);
			}
			if (v->u.l->tuple && v->u.l->n == 1)
				sb_putc(e, b, ',');
			sb_putc(e, b, v->u.l->tuple ? ')' : ']');
			return;
		case J_DICT:
		case J_NS:
			sb_puts(e, b, v->k == J_NS ? "<Namespace {" : "{");
			for (size_t i = 0; i < v->u.d->n; i++)
			{
				if (i)
					sb_puts(e, b, ", ");
				put_repr(e, b, &v->u.d->k[i], depth + 1);
				sb_puts(e, b, ": ");
				put_repr(e, b, &v->u.d->v[i], depth + 1);
			}
			sb_puts(e, b, v->k == J_NS ? "}>" : "}");
			return;
		case J_FUNC:
			sb_puts(e, b, "<function ");
			sb_puts(e, b, v->u.fn->name ? v->u.fn->name : "?");
			sb_puts(e, b, ">");
			return;
		case J_UNDEF:
			sb_puts(e, b, "Undefined");
			return;
		default:
			put_str(e, b, v, depth);
	}
}

static struct jstr *
to_str(struct ev *e, const jval *v)
{
	struct sb	b = {0};

	if (v->k == J_STR)
		return v->u.s;
	put_str(e, &b, v, 0);
	return sb_val(e, &b).u.s;
}

static void
json_quote_sb(struct ev *e, struct sb *b, const char *s, size_t n)
{
	size_t		start = 0;

	sb_putc(e, b, '"');
	for (size_t i = 0; i < n; i++)
	{
		unsigned char c = (unsigned char) s[i];
		const char *esc = NULL;
		char		u[8];

		if (c == '"')
			esc = "\\\"";
		else if (c == '\\')
			esc = "\\\\";
		else if (c == '\n')
			esc = "\\n";
		else if (c == '\r')
			esc = "\\r";
		else if (c == '\t')
			esc = "\\t";
		else if (c == '\b')
			esc = "\\b";
		else if (c == '\f')
			esc = "\\f";
		else if (c < 0x20)
		{
			snprintf(u, sizeof(u), "\\u%04x", c);
			esc = u;
		}
		if (esc)
		{
			sb_put(e, b, s + start, i - start);
			sb_puts(e, b, esc);
			start = i + 1;
		}
	}
	sb_put(e, b, s + start, n - start);
	sb_putc(e, b, '"');
}

struct json_opts
{
	int			indent;			/* -1: none */
	const char *item_sep;
	const char *key_sep;
	bool		sort_keys;
};

static void
json_dump(struct ev *e, struct sb *b, const jval *v, const struct json_opts *o, int level)
{
	char		buf[64];

	if (level > e->max_depth)
		FAIL(e, "value nested too deeply for tojson");
	step(e);
	switch (v->k)
	{
		case J_NONE:
			sb_puts(e, b, "null");
			return;
		case J_BOOL:
			sb_puts(e, b, v->u.b ? "true" : "false");
			return;
		case J_INT:
			snprintf(buf, sizeof(buf), "%lld", (long long) v->u.i);
			sb_puts(e, b, buf);
			return;
		case J_FLOAT:
			if (isnan(v->u.f))
				sb_puts(e, b, "NaN");
			else if (isinf(v->u.f))
				sb_puts(e, b, v->u.f < 0 ? "-Infinity" : "Infinity");
			else
			{
				fmt_float(buf, sizeof(buf), v->u.f);
				sb_puts(e, b, buf);
			}
			return;
		case J_STR:
			json_quote_sb(e, b, v->u.s->p, v->u.s->n);
			return;
		case J_LIST:
		case J_DICT:
			{
				bool		is_list = v->k == J_LIST;
				size_t		n = is_list ? v->u.l->n : v->u.d->n;
				size_t	   *order = NULL;

				if (n == 0)
				{
					sb_puts(e, b, is_list ? "[]" : "{}");
					return;
				}
				if (!is_list)
				{
					order = ealloc(e, n * sizeof(size_t));
					for (size_t i = 0; i < n; i++)
						order[i] = i;
					if (o->sort_keys)
					{
						/* insertion sort: small dicts */
						for (size_t i = 1; i < n; i++)
							for (size_t j = i; j > 0 &&
								 val_cmp(e, &v->u.d->k[order[j - 1]], &v->u.d->k[order[j]]) > 0; j--)
							{
								size_t		t = order[j];

								order[j] = order[j - 1];
								order[j - 1] = t;
							}
					}
				}
				sb_putc(e, b, is_list ? '[' : '{');
				for (size_t i = 0; i < n; i++)
				{
					if (i)
						sb_puts(e, b, o->item_sep);
					if (o->indent >= 0)
					{
						sb_putc(e, b, '\n');
						for (int k = 0; k < o->indent * (level + 1); k++)
							sb_putc(e, b, ' ');
					}
					if (is_list)
						json_dump(e, b, &v->u.l->v[i], o, level + 1);
					else
					{
						const jval *k = &v->u.d->k[order[i]];

						if (k->k == J_STR)
							json_quote_sb(e, b, k->u.s->p, k->u.s->n);
						else if (k->k == J_INT || k->k == J_FLOAT || k->k == J_BOOL || k->k == J_NONE)
						{
							sb_putc(e, b, '"');
							json_dump(e, b, k, o, level + 1);
							sb_putc(e, b, '"');
						}
						else
							FAIL(e, "keys must be str, int, float, bool or None, not %s", kind_name(k));
						sb_puts(e, b, o->key_sep);
						json_dump(e, b, &v->u.d->v[order[i]], o, level + 1);
					}
				}
				if (o->indent >= 0)
				{
					sb_putc(e, b, '\n');
					for (int k = 0; k < o->indent * level; k++)
						sb_putc(e, b, ' ');
				}
				sb_putc(e, b, is_list ? ']' : '}');
				return;
			}
		default:
			FAIL(e, "Object of type %s is not JSON serializable", kind_name(v));
	}
}

size_t
opus_jinja_json_quote(const char *s, size_t n, char *buf, size_t cap)
{
	size_t		k = 0;

#define PUTC(ch) do { if (k + 1 < cap) buf[k] = (ch); k++; } while (0)
	PUTC('"');
	for (size_t i = 0; i < n; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == '"' || c == '\\')
		{
			PUTC('\\');
			PUTC((char) c);
		}
		else if (c == '\n')
		{
			PUTC('\\');
			PUTC('n');
		}
		else if (c == '\r')
		{
			PUTC('\\');
			PUTC('r');
		}
		else if (c == '\t')
		{
			PUTC('\\');
			PUTC('t');
		}
		else if (c < 0x20)
		{
			char		u[8];

			snprintf(u, sizeof(u), "\\u%04x", c);
			for (int j = 0; u[j]; j++)
				PUTC(u[j]);
		}
		else
			PUTC((char) c);
	}
	PUTC('"');
#undef PUTC
	if (cap)
		buf[k < cap ? k : cap - 1] = '\0';
	return k;
}

/* ------------------------------------------------------- JSON parsing */

static int
hexdig(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

struct jp
{
	struct jarena *ar;
	const char *s;
	size_t		n,
				i;
	int			depth,
				max_depth;
};

static void
jp_ws(struct jp *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
						   p->s[p->i] == '\r'))
		p->i++;
}

static bool jp_value(struct jp *p, jval *out);

static bool
jp_string(struct jp *p, jval *out)
{
	size_t		start = ++p->i,
				n = 0;
	struct jstr *js;

	while (p->i < p->n && p->s[p->i] != '"')
	{
		if ((unsigned char) p->s[p->i] < 0x20)
			return false;
		if (p->s[p->i] == '\\')
			p->i++;
		p->i++;
	}
	if (p->i >= p->n)
		return false;
	js = ja_alloc(p->ar, sizeof(*js) + (p->i - start) + 4);
	if (!js)
		return false;
	for (size_t i = start; i < p->i; i++)
	{
		char		c = p->s[i];

		if (c != '\\')
		{
			js->p[n++] = c;
			continue;
		}
		c = p->s[++i];
		switch (c)
		{
			case 'n':
				js->p[n++] = '\n';
				break;
			case 't':
				js->p[n++] = '\t';
				break;
			case 'r':
				js->p[n++] = '\r';
				break;
			case 'b':
				js->p[n++] = '\b';
				break;
			case 'f':
				js->p[n++] = '\f';
				break;
			case '/':
			case '\\':
			case '"':
				js->p[n++] = c;
				break;
			case 'u':
				{
					uint32_t	cp = 0;

					for (int k = 0; k < 4; k++)
					{
						int			h = i + 1 + (size_t) k < p->i ? hexdig(p->s[i + 1 + k]) : -1;

						if (h < 0)
							return false;
						cp = cp * 16 + (uint32_t) h;
					}
					i += 4;
					if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < p->i + 0 + 1 &&
						p->s[i + 1] == '\\' && p->s[i + 2] == 'u')
					{
						uint32_t	lo = 0;

						for (int k = 0; k < 4; k++)
						{
							int			h = hexdig(p->s[i + 3 + k]);

							if (h < 0)
								return false;
							lo = lo * 16 + (uint32_t) h;
						}
						if (lo >= 0xDC00 && lo <= 0xDFFF)
						{
							cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
							i += 6;
						}
					}
					if (cp >= 0xD800 && cp <= 0xDFFF)
						cp = 0xFFFD;
					if (cp < 0x80)
						js->p[n++] = (char) cp;
					else if (cp < 0x800)
					{
						js->p[n++] = (char) (0xC0 | (cp >> 6));
						js->p[n++] = (char) (0x80 | (cp & 0x3F));
					}
					else if (cp < 0x10000)
					{
						js->p[n++] = (char) (0xE0 | (cp >> 12));
						js->p[n++] = (char) (0x80 | ((cp >> 6) & 0x3F));
						js->p[n++] = (char) (0x80 | (cp & 0x3F));
					}
					else
					{
						js->p[n++] = (char) (0xF0 | (cp >> 18));
						js->p[n++] = (char) (0x80 | ((cp >> 12) & 0x3F));
						js->p[n++] = (char) (0x80 | ((cp >> 6) & 0x3F));
						js->p[n++] = (char) (0x80 | (cp & 0x3F));
					}
					break;
				}
			default:
				return false;
		}
	}
	js->n = n;
	js->p[n] = '\0';
	p->i++;
	out->k = J_STR;
	out->u.s = js;
	return true;
}

static bool
jp_value(struct jp *p, jval *out)
{
	jp_ws(p);
	if (p->i >= p->n)
		return false;
	memset(out, 0, sizeof(*out));
	switch (p->s[p->i])
	{
		case '"':
			return jp_string(p, out);
		case '[':
		case '{':
			{
				bool		is_list = p->s[p->i] == '[';
				struct jlist *l = NULL;
				struct jdict *d = NULL;

				if (++p->depth > p->max_depth)
					return false;
				p->i++;
				if (is_list)
					l = ja_alloc(p->ar, sizeof(*l));
				else
					d = ja_alloc(p->ar, sizeof(*d));
				if (!l && !d)
					return false;
				jp_ws(p);
				if (p->i < p->n && p->s[p->i] == (is_list ? ']' : '}'))
					p->i++;
				else
					for (;;)
					{
						jval		k,
									v;

						if (!is_list)
						{
							jp_ws(p);
							if (p->i >= p->n || p->s[p->i] != '"' || !jp_string(p, &k))
								return false;
							jp_ws(p);
							if (p->i >= p->n || p->s[p->i] != ':')
								return false;
							p->i++;
						}
						if (!jp_value(p, &v))
							return false;
						/* grow */
						{
							size_t		n = is_list ? l->n : d->n;
							size_t		cap = is_list ? l->cap : d->cap;

							if (n == cap)
							{
								size_t		nc = cap ? cap * 2 : 4;
								jval	   *nv = ja_alloc(p->ar, nc * sizeof(jval));
								jval	   *nk = is_list ? NULL : ja_alloc(p->ar, nc * sizeof(jval));

								if (!nv || (!is_list && !nk))
									return false;
								if (n)
								{
									memcpy(nv, is_list ? l->v : d->v, n * sizeof(jval));
									if (!is_list)
										memcpy(nk, d->k, n * sizeof(jval));
								}
								if (is_list)
								{
									l->v = nv;
									l->cap = nc;
								}
								else
								{
									d->v = nv;
									d->k = nk;
									d->cap = nc;
								}
							}
							if (is_list)
								l->v[l->n++] = v;
							else
							{
								/* a repeated key: the last wins, as in Python */
								jval	   *old = dict_find(d, &k);

								if (old)
									*old = v;
								else
								{
									d->k[d->n] = k;
									d->v[d->n++] = v;
								}
							}
						}
						jp_ws(p);
						if (p->i < p->n && p->s[p->i] == ',')
						{
							p->i++;
							continue;
						}
						if (p->i < p->n && p->s[p->i] == (is_list ? ']' : '}'))
						{
							p->i++;
							break;
						}
						return false;
					}
				p->depth--;
				if (is_list)
				{
					out->k = J_LIST;
					out->u.l = l;
				}
				else
				{
					out->k = J_DICT;
					out->u.d = d;
				}
				return true;
			}
		case 't':
			if (p->n - p->i >= 4 && memcmp(p->s + p->i, "true", 4) == 0)
			{
				p->i += 4;
				out->k = J_BOOL;
				out->u.b = true;
				return true;
			}
			return false;
		case 'f':
			if (p->n - p->i >= 5 && memcmp(p->s + p->i, "false", 5) == 0)
			{
				p->i += 5;
				out->k = J_BOOL;
				return true;
			}
			return false;
		case 'n':
			if (p->n - p->i >= 4 && memcmp(p->s + p->i, "null", 4) == 0)
			{
				p->i += 4;
				out->k = J_NONE;
				return true;
			}
			return false;
		default:
			{
				char		buf[64];
				size_t		k = 0;
				bool		flt = false;

				while (p->i < p->n && k + 1 < sizeof(buf) &&
					   strchr("0123456789+-.eE", p->s[p->i]) && p->s[p->i] != '\0')
				{
					if (strchr(".eE", p->s[p->i]))
						flt = true;
					buf[k++] = p->s[p->i++];
				}
				buf[k] = '\0';
				if (k == 0)
					return false;
				{
					char	   *end;

					if (!flt)
					{
						long long	v;

						errno = 0;
						v = strtoll(buf, &end, 10);
						if (*end == '\0' && errno == 0)
						{
							out->k = J_INT;
							out->u.i = v;
							return true;
						}
					}
					out->k = J_FLOAT;
					out->u.f = strtod(buf, &end);
					return *end == '\0';
				}
			}
	}
}

bool
jinja_json_parse(struct jarena *ar, const char *s, size_t n, jval *out, int max_depth)
{
	struct jp	p = {ar, s, n, 0, 0, max_depth};

	if (!jp_value(&p, out))
		return false;
	jp_ws(&p);
	return p.i == p.n;
}

/* ------------------------------------------------------------- scopes */

static jval *
frame_lookup(struct frame *f, const char *name, size_t n)
{
	for (; f; f = f->parent)
	{
		jval	   *v = dict_find_str(&f->vars, name, n);

		if (v)
			return v;
	}
	return NULL;
}

static void
frame_set(struct ev *e, struct frame *f, const char *name, jval v)
{
	jval	   *slot = dict_find_str(&f->vars, name, strlen(name));

	if (slot)
		*slot = v;
	else
		dict_set(e, &f->vars, mk_str(e, name), v);
}

static struct frame *
new_frame(struct ev *e, struct frame *parent)
{
	struct frame *f = ealloc(e, sizeof(*f));

	f->parent = parent;
	return f;
}

static jval
mk_func(struct ev *e, int kind, const char *name)
{
	jval		v = {0};

	v.k = J_FUNC;
	v.u.fn = ealloc(e, sizeof(struct jfunc));
	v.u.fn->kind = kind;
	v.u.fn->name = name;
	return v;
}

static const char *const global_fns[] = {
	"range", "namespace", "raise_exception", "strftime_now", "dict", NULL
};

/* ------------------------------------------------- attributes, items */

static const char *const str_methods[] = {
	"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper",
	"lower", "title", "capitalize", "replace", "find", "rfind", "count", "format", "join",
	"splitlines", "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", NULL
};
static const char *const dict_methods[] = {
	"get", "items", "keys", "values",
	/* mutators: the immutable sandbox refuses them */
	"pop", "update", "setdefault", "popitem", "clear", "copy", NULL
};
static const char *const list_methods[] = {
	"index", "count",
	"append", "pop", "extend", "insert", "remove", "clear", "sort", "reverse", "copy", NULL
};

static bool
in_names(const char *const *names, const char *s)
{
	for (int i = 0; names[i]; i++)
		if (strcmp(names[i], s) == 0)
			return true;
	return false;
}

static jval
bound(struct ev *e, const jval *self, const char *name)
{
	jval		f = mk_func(e, FN_METHOD, name);

	f.u.fn->self = *self;
	return f;
}

static jval
get_attr(struct ev *e, const jval *obj, const char *name)
{
	switch (obj->k)
	{
		case J_UNDEF:
			FAIL(e, "'%s' is undefined (attribute of an undefined value)", name);
		case J_DICT:
			if (in_names(dict_methods, name))
				return bound(e, obj, name);
			/* FALLTHROUGH */
		case J_NS:
			{
				jval	   *v = dict_find_str(obj->u.d, name, strlen(name));

				return v ? *v : mk_undef();
			}
		case J_STR:
			if (in_names(str_methods, name))
				return bound(e, obj, name);
			return mk_undef();
		case J_LIST:
			if (in_names(list_methods, name))
				return bound(e, obj, name);
			return mk_undef();
		default:
			return mk_undef();
	}
}

static int64_t
norm_index(int64_t i, size_t n, bool *ok)
{
	if (i < 0)
		i += (int64_t) n;
	*ok = i >= 0 && (uint64_t) i < n;
	return i;
}

static jval
get_item(struct ev *e, const jval *obj, const jval *key)
{
	bool		ok;

	switch (obj->k)
	{
		case J_UNDEF:
			FAIL(e, "item of an undefined value");
		case J_DICT:
		case J_NS:
			{
				jval	   *v = dict_find(obj->u.d, key);

				if (v)
					return *v;
				if (key->k == J_STR && obj->k == J_DICT)
					return get_attr(e, obj, key->u.s->p);
				return mk_undef();
			}
		case J_LIST:
			if (key->k == J_INT || key->k == J_BOOL)
			{
				int64_t		i = norm_index(num_i(key), obj->u.l->n, &ok);

				return ok ? obj->u.l->v[i] : mk_undef();
			}
			if (key->k == J_STR)
				return get_attr(e, obj, key->u.s->p);
			return mk_undef();
		case J_STR:
			if (key->k == J_INT || key->k == J_BOOL)
			{
				size_t		n = cp_count(obj->u.s->p, obj->u.s->n);
				int64_t		i = norm_index(num_i(key), n, &ok);
				size_t		a,
							b;

				if (!ok)
					return mk_undef();
				a = cp_offset(obj->u.s->p, obj->u.s->n, (size_t) i);
				b = a + u8_len((unsigned char) obj->u.s->p[a]);
				if (b > obj->u.s->n)
					b = obj->u.s->n;
				return mk_strn(e, obj->u.s->p + a, b - a);
			}
			if (key->k == J_STR)
				return get_attr(e, obj, key->u.s->p);
			return mk_undef();
		default:
			return mk_undef();
	}
}

static int64_t
slice_arg(struct ev *e, const jval *v, int64_t dflt)
{
	if (v == NULL || v->k == J_NONE || v->k == J_UNDEF)
		return dflt;
	if (v->k != J_INT && v->k != J_BOOL)
		FAIL(e, "slice indices must be integers or None");
	return num_i(v);
}

static jval
do_slice(struct ev *e, const jval *obj, const jval *lo, const jval *hi, const jval *st)
{
	int64_t		step = slice_arg(e, st, 1);
	int64_t		n,
				a,
				b;
	bool		is_str = obj->k == J_STR;
	size_t	   *offs = NULL;

	if (step == 0)
		FAIL(e, "slice step cannot be zero");
	if (obj->k == J_LIST)
		n = (int64_t) obj->u.l->n;
	else if (is_str)
		n = (int64_t) cp_count(obj->u.s->p, obj->u.s->n);
	else if (obj->k == J_UNDEF)
		FAIL(e, "slice of an undefined value");
	else
		FAIL(e, "'%s' object is not subscriptable", kind_name(obj));
	if (step > 0)
	{
		a = slice_arg(e, lo, 0);
		b = slice_arg(e, hi, n);
		if (a < 0)
			a = a + n < 0 ? 0 : a + n;
		if (a > n)
			a = n;
		if (b < 0)
			b = b + n < 0 ? 0 : b + n;
		if (b > n)
			b = n;
	}
	else
	{
		a = slice_arg(e, lo, n - 1);
		b = slice_arg(e, hi, -n - 1);
		if (a < 0)
			a = a + n < 0 ? -1 : a + n;
		if (a >= n)
			a = n - 1;
		if (b < 0)
			b = b + n < 0 ? -1 : b + n;
		if (b >= n)
			b = n - 1;
	}
	if (is_str)
	{
		/* code point offsets */
		offs = ealloc(e, ((size_t) n + 1) * sizeof(size_t));
		for (size_t i = 0, k = 0; k <= (size_t) n; k++)
		{
			offs[k] = i;
			if (i < obj->u.s->n)
			{
				i++;
				while (i < obj->u.s->n && ((unsigned char) obj->u.s->p[i] & 0xC0) == 0x80)
					i++;
			}
		}
		if (step == 1)
			return mk_strn(e, obj->u.s->p + offs[a], a < b ? offs[b] - offs[a] : 0);
		{
			struct sb	s = {0};

			for (int64_t i = a; step > 0 ? i < b : i > b; i += step)
				sb_put(e, &s, obj->u.s->p + offs[i], offs[i + 1] - offs[i]);
			return sb_val(e, &s);
		}
	}
	{
		struct jlist *l = new_list(e, 0);

		for (int64_t i = a; step > 0 ? i < b : i > b; i += step)
			list_push(e, l, obj->u.l->v[i]);
		l->tuple = obj->u.l->tuple;
		return list_val(l);
	}
}

/* list of the items `for` iterates over */
static struct jlist *
iter_list(struct ev *e, const jval *v)
{
	struct jlist *l;

	switch (v->k)
	{
		case J_UNDEF:
			return new_list(e, 0);
		case J_LIST:
			return v->u.l;
		case J_DICT:
			l = new_list(e, v->u.d->n);
			for (size_t i = 0; i < v->u.d->n; i++)
				list_push(e, l, v->u.d->k[i]);
			return l;
		case J_STR:
			l = new_list(e, 0);
			for (size_t i = 0; i < v->u.s->n;)
			{
				size_t		k = u8_len((unsigned char) v->u.s->p[i]);

				if (i + k > v->u.s->n)
					k = v->u.s->n - i;
				list_push(e, l, mk_strn(e, v->u.s->p + i, k));
				i += k;
			}
			return l;
		default:
			FAIL(e, "'%s' object is not iterable", kind_name(v));
	}
}

static bool
contains(struct ev *e, const jval *hay, const jval *needle)
{
	switch (hay->k)
	{
		case J_STR:
			if (needle->k != J_STR)
				FAIL(e, "'in <string>' requires string as left operand, not %s", kind_name(needle));
			return needle->u.s->n == 0 ||
				memmem(hay->u.s->p, hay->u.s->n, needle->u.s->p, needle->u.s->n) != NULL;
		case J_LIST:
			for (size_t i = 0; i < hay->u.l->n; i++)
				if (val_eq(&hay->u.l->v[i], needle))
					return true;
			return false;
		case J_DICT:
		case J_NS:
			return dict_find(hay->u.d, needle) != NULL;
		case J_UNDEF:
			return false;
		default:
			FAIL(e, "argument of type '%s' is not iterable", kind_name(hay));
	}
}

/* ------------------------------------------------------ string helpers */

static bool
py_space(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* strip: which 1 left, 2 right, 3 both; chars NULL = whitespace */
static jval
str_strip(struct ev *e, const struct jstr *s, const struct jstr *chars, int which)
{
	size_t		a = 0,
				b = s->n;

#define STRIPPABLE(c) (chars ? memchr(chars->p, (c), chars->n) != NULL : py_space((unsigned char) (c)))
	if (which & 1)
		while (a < b && STRIPPABLE(s->p[a]))
			a++;
	if (which & 2)
		while (b > a && STRIPPABLE(s->p[b - 1]))
			b--;
#undef STRIPPABLE
	return mk_strn(e, s->p + a, b - a);
}

static jval
str_case(struct ev *e, const struct jstr *s, int mode)
{
	jval		r = mk_strn(e, s->p, s->n);
	char	   *p = r.u.s->p;
	bool		word_start = true;

	for (size_t i = 0; i < s->n; i++)
	{
		char		c = p[i];
		bool		alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');

		if (mode == 0 && c >= 'a' && c <= 'z')	/* upper */
			p[i] = (char) (c - 32);
		else if (mode == 1 && c >= 'A' && c <= 'Z') /* lower */
			p[i] = (char) (c + 32);
		else if (mode == 2 || mode == 3)	/* title, capitalize */
		{
			bool		up = mode == 2 ? word_start : i == 0;

			if (up && c >= 'a' && c <= 'z')
				p[i] = (char) (c - 32);
			else if (!up && c >= 'A' && c <= 'Z')
				p[i] = (char) (c + 32);
		}
		if (mode == 2)
			word_start = !alpha && !(c >= '0' && c <= '9') && !((unsigned char) c >= 0x80);
	}
	return r;
}

static jval
str_replace(struct ev *e, const struct jstr *s, const struct jstr *old, const struct jstr *nw,
			int64_t count)
{
	struct sb	b = {0};
	size_t		i = 0;

	if (old->n == 0)
	{
		/* Python inserts between every character */
		size_t		k = 0;

		for (;;)
		{
			if (count < 0 || (int64_t) k < count)
			{
				sb_put(e, &b, nw->p, nw->n);
				k++;
			}
			if (i >= s->n)
				break;
			{
				size_t		l = u8_len((unsigned char) s->p[i]);

				if (i + l > s->n)
					l = s->n - i;
				sb_put(e, &b, s->p + i, l);
				i += l;
			}
			step(e);
		}
		return sb_val(e, &b);
	}
	while (i < s->n)
	{
		const char *hit = count == 0 ? NULL : memmem(s->p + i, s->n - i, old->p, old->n);

		if (!hit)
			break;
		sb_put(e, &b, s->p + i, (size_t) (hit - (s->p + i)));
		sb_put(e, &b, nw->p, nw->n);
		i = (size_t) (hit - s->p) + old->n;
		if (count > 0)
			count--;
		step(e);
	}
	sb_put(e, &b, s->p + i, s->n - i);
	return sb_val(e, &b);
}

static jval
str_split(struct ev *e, const struct jstr *s, const struct jstr *sep, int64_t maxsplit, bool right)
{
	struct jlist *l = new_list(e, 0);

	if (sep && sep->n == 0)
		FAIL(e, "empty separator");
	if (!sep)
	{
		/* runs of whitespace, ends ignored */
		size_t		i = 0,
					n = s->n;

		if (right)
		{
			/* rsplit(None, k): only k from the right; build reversed then flip */
			struct jlist *r = new_list(e, 0);
			size_t		end = n;

			while (end > 0 && py_space((unsigned char) s->p[end - 1]))
				end--;
			while (end > 0)
			{
				size_t		st = end;

				if (maxsplit >= 0 && (int64_t) r->n == maxsplit)
				{
					list_push(e, r, mk_strn(e, s->p, end));
					break;
				}
				while (st > 0 && !py_space((unsigned char) s->p[st - 1]))
					st--;
				list_push(e, r, mk_strn(e, s->p + st, end - st));
				end = st;
				while (end > 0 && py_space((unsigned char) s->p[end - 1]))
					end--;
			}
			for (size_t k = r->n; k > 0; k--)
				list_push(e, l, r->v[k - 1]);
			return list_val(l);
		}
		while (i < n)
		{
			size_t		st;

			while (i < n && py_space((unsigned char) s->p[i]))
				i++;
			if (i >= n)
				break;
			if (maxsplit >= 0 && (int64_t) l->n == maxsplit)
			{
				size_t		end = n;

				while (end > i && py_space((unsigned char) s->p[end - 1]))
					end--;
				list_push(e, l, mk_strn(e, s->p + i, end - i));
				break;
			}
			st = i;
			while (i < n && !py_space((unsigned char) s->p[i]))
				i++;
			list_push(e, l, mk_strn(e, s->p + st, i - st));
		}
		return list_val(l);
	}
	if (right && maxsplit >= 0)
	{
		/* from the right: find the cut points, then emit left to right */
		size_t		cuts[64];
		int			nc = 0;
		size_t		end = s->n;

		if (maxsplit > 64)
			maxsplit = 64;
		while (nc < maxsplit && end >= sep->n)
		{
			size_t		k = end - sep->n;
			bool		found = false;

			for (;; k--)
			{
				if (memcmp(s->p + k, sep->p, sep->n) == 0)
				{
					found = true;
					break;
				}
				if (k == 0)
					break;
			}
			if (!found)
				break;
			cuts[nc++] = k;
			end = k;
		}
		{
			size_t		start = 0;

			for (int c = nc - 1; c >= 0; c--)
			{
				list_push(e, l, mk_strn(e, s->p + start, cuts[c] - start));
				start = cuts[c] + sep->n;
			}
			list_push(e, l, mk_strn(e, s->p + start, s->n - start));
		}
		return list_val(l);
	}
	{
		size_t		i = 0;

		for (;;)
		{
			const char *hit = (maxsplit >= 0 && (int64_t) l->n >= maxsplit) ? NULL :
				memmem(s->p + i, s->n - i, sep->p, sep->n);

			step(e);
			if (!hit)
			{
				list_push(e, l, mk_strn(e, s->p + i, s->n - i));
				break;
			}
			list_push(e, l, mk_strn(e, s->p + i, (size_t) (hit - (s->p + i))));
			i = (size_t) (hit - s->p) + sep->n;
		}
	}
	return list_val(l);
}

/* ------------------------------------------------------------ calling */

struct args
{
	jval	   *pos;
	int			npos;
	const char **kn;
	jval	   *kv;
	int			nk;
};

/* argument i, or keyword name, or NULL */
static const jval *
arg(const struct args *a, int i, const char *name)
{
	if (i >= 0 && i < a->npos)
		return &a->pos[i];
	if (name)
		for (int k = 0; k < a->nk; k++)
			if (strcmp(a->kn[k], name) == 0)
				return &a->kv[k];
	return NULL;
}

static const struct jstr *
arg_str(struct ev *e, const struct args *a, int i, const char *name, const char *what)
{
	const jval *v = arg(a, i, name);

	if (!v || v->k == J_NONE)
		return NULL;
	if (v->k != J_STR)
		FAIL(e, "%s expects a string argument, not %s", what, kind_name(v));
	return v->u.s;
}

static int64_t
arg_int(struct ev *e, const struct args *a, int i, const char *name, int64_t dflt, const char *what)
{
	const jval *v = arg(a, i, name);

	if (!v || v->k == J_NONE)
		return dflt;
	if (v->k != J_INT && v->k != J_BOOL)
		FAIL(e, "%s expects an integer argument, not %s", what, kind_name(v));
	return num_i(v);
}

static bool
arg_bool(const struct args *a, int i, const char *name, bool dflt)
{
	const jval *v = arg(a, i, name);

	return v ? truthy(v) : dflt;
}

static jval call_value(struct ev *e, const jval *fn, const struct args *a, const struct jnode *caller,
					   struct frame *caller_frame);

static bool
prefix_match(struct ev *e, const struct jstr *s, const jval *p, bool suffix)
{
	if (p->k == J_LIST && p->u.l->tuple)
	{
		for (size_t i = 0; i < p->u.l->n; i++)
			if (prefix_match(e, s, &p->u.l->v[i], suffix))
				return true;
		return false;
	}
	if (p->k != J_STR)
		FAIL(e, "%s first arg must be str or a tuple of str, not %s",
			 suffix ? "endswith" : "startswith", kind_name(p));
	if (p->u.s->n > s->n)
		return false;
	return memcmp(suffix ? s->p + s->n - p->u.s->n : s->p, p->u.s->p, p->u.s->n) == 0;
}

static jval
str_format(struct ev *e, const struct jstr *f, const struct args *a)
{
	struct sb	b = {0};
	int			auto_idx = 0;

	for (size_t i = 0; i < f->n; i++)
	{
		char		c = f->p[i];

		if (c == '{' && i + 1 < f->n && f->p[i + 1] == '{')
		{
			sb_putc(e, &b, '{');
			i++;
		}
		else if (c == '}' && i + 1 < f->n && f->p[i + 1] == '}')
		{
			sb_putc(e, &b, '}');
			i++;
		}
		else if (c == '{')
		{
			const char *end = memchr(f->p + i, '}', f->n - i);
			size_t		fl;
			const jval *v;
			char		name[64];

			if (!end)
				FAIL(e, "single '{' encountered in format string");
			fl = (size_t) (end - (f->p + i + 1));
			if (fl >= sizeof(name))
				FAIL(e, "format field too long");
			memcpy(name, f->p + i + 1, fl);
			name[fl] = '\0';
			if (strpbrk(name, ":![."))
				ev_fail(e, OPUS_ERR_UNSUPPORTED, "format specifications are not supported");
			if (fl == 0)
				v = arg(a, auto_idx++, NULL);
			else if (name[0] >= '0' && name[0] <= '9')
				v = arg(a, atoi(name), NULL);
			else
				v = arg(a, -1, name);
			if (!v)
				FAIL(e, "format: missing argument '%s'", name);
			put_str(e, &b, v, 0);
			i += fl + 1;
		}
		else
			sb_putc(e, &b, c);
	}
	return sb_val(e, &b);
}

static jval
call_method(struct ev *e, const jval *self, const char *m, const struct args *a)
{
	if (self->k == J_STR)
	{
		const struct jstr *s = self->u.s;

		if (strcmp(m, "strip") == 0 || strcmp(m, "lstrip") == 0 || strcmp(m, "rstrip") == 0)
			return str_strip(e, s, arg_str(e, a, 0, "chars", m), m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
		if (strcmp(m, "split") == 0 || strcmp(m, "rsplit") == 0)
			return str_split(e, s, arg_str(e, a, 0, "sep", m), arg_int(e, a, 1, "maxsplit", -1, m),
							 m[0] == 'r');
		if (strcmp(m, "startswith") == 0 || strcmp(m, "endswith") == 0)
		{
			const jval *p = arg(a, 0, NULL);

			if (!p)
				FAIL(e, "%s takes at least 1 argument", m);
			return mk_bool(prefix_match(e, s, p, m[0] == 'e'));
		}
		if (strcmp(m, "upper") == 0)
			return str_case(e, s, 0);
		if (strcmp(m, "lower") == 0)
			return str_case(e, s, 1);
		if (strcmp(m, "title") == 0)
			return str_case(e, s, 2);
		if (strcmp(m, "capitalize") == 0)
			return str_case(e, s, 3);
		if (strcmp(m, "replace") == 0)
		{
			const struct jstr *o = arg_str(e, a, 0, NULL, m),
					   *n = arg_str(e, a, 1, NULL, m);

			if (!o || !n)
				FAIL(e, "replace takes 2 string arguments");
			return str_replace(e, s, o, n, arg_int(e, a, 2, "count", -1, m));
		}
		if (strcmp(m, "find") == 0 || strcmp(m, "rfind") == 0 || strcmp(m, "count") == 0)
		{
			const struct jstr *x = arg_str(e, a, 0, NULL, m);
			int64_t		res = -1,
						cnt = 0;

			if (!x)
				FAIL(e, "%s takes a string argument", m);
			for (size_t i = 0; i + x->n <= s->n; i++)
				if (memcmp(s->p + i, x->p, x->n) == 0)
				{
					if (res < 0 || m[0] == 'r')
						res = (int64_t) cp_count(s->p, i);
					cnt++;
					if (m[0] == 'f')
						break;
					if (m[0] == 'c' && x->n)
						i += x->n - 1;
				}
			return mk_int(m[0] == 'c' ? cnt : res);
		}
		if (strcmp(m, "format") == 0)
			return str_format(e, s, a);
		if (strcmp(m, "join") == 0)
		{
			const jval *it = arg(a, 0, NULL);
			struct jlist *l;
			struct sb	b = {0};

			if (!it)
				FAIL(e, "join takes 1 argument");
			l = iter_list(e, it);
			for (size_t i = 0; i < l->n; i++)
			{
				if (l->v[i].k != J_STR)
					FAIL(e, "sequence item %zu: expected str instance, %s found", i, kind_name(&l->v[i]));
				if (i)
					sb_put(e, &b, s->p, s->n);
				sb_put(e, &b, l->v[i].u.s->p, l->v[i].u.s->n);
			}
			return sb_val(e, &b);
		}
		if (strcmp(m, "splitlines") == 0)
		{
			struct jlist *l = new_list(e, 0);
			size_t		st = 0;

			for (size_t i = 0; i < s->n; i++)
				if (s->p[i] == '\n' || s->p[i] == '\r')
				{
					list_push(e, l, mk_strn(e, s->p + st, i - st));
					if (s->p[i] == '\r' && i + 1 < s->n && s->p[i + 1] == '\n')
						i++;
					st = i + 1;
				}
			if (st < s->n)
				list_push(e, l, mk_strn(e, s->p + st, s->n - st));
			return list_val(l);
		}
		if (strncmp(m, "is", 2) == 0)
		{
			bool		ok = s->n > 0,
						any_cased = false;

			for (size_t i = 0; i < s->n; i++)
			{
				unsigned char c = (unsigned char) s->p[i];
				bool		dig = c >= '0' && c <= '9',
							lo = c >= 'a' && c <= 'z',
							up = c >= 'A' && c <= 'Z';

				any_cased |= lo || up;
				if ((strcmp(m, "isdigit") == 0 && !dig) ||
					(strcmp(m, "isalpha") == 0 && !(lo || up)) ||
					(strcmp(m, "isalnum") == 0 && !(lo || up || dig)) ||
					(strcmp(m, "isspace") == 0 && !py_space(c)) ||
					(strcmp(m, "isupper") == 0 && lo) ||
					(strcmp(m, "islower") == 0 && up))
					ok = false;
			}
			if (strcmp(m, "isupper") == 0 || strcmp(m, "islower") == 0)
				ok = any_cased && ok;
			return mk_bool(ok);
		}
	}
	else if (self->k == J_DICT)
	{
		const struct jdict *d = self->u.d;

		if (strcmp(m, "get") == 0)
		{
			const jval *k = arg(a, 0, NULL),
					   *dflt = arg(a, 1, "default");
			jval	   *v;

			if (!k)
				FAIL(e, "get expected at least 1 argument");
			v = dict_find(d, k);
			return v ? *v : dflt ? *dflt : mk_none();
		}
		if (strcmp(m, "keys") == 0 || strcmp(m, "values") == 0 || strcmp(m, "items") == 0)
		{
			struct jlist *l = new_list(e, d->n);

			for (size_t i = 0; i < d->n; i++)
			{
				if (m[0] == 'k')
					list_push(e, l, d->k[i]);
				else if (m[0] == 'v')
					list_push(e, l, d->v[i]);
				else
				{
					struct jlist *t = new_list(e, 2);

					t->tuple = true;
					list_push(e, t, d->k[i]);
					list_push(e, t, d->v[i]);
					list_push(e, l, list_val(t));
				}
			}
			return list_val(l);
		}
		if (strcmp(m, "copy") == 0)
		{
			struct jdict *c = new_dict(e);

			for (size_t i = 0; i < d->n; i++)
				dict_set(e, c, d->k[i], d->v[i]);
			return dict_val(c, J_DICT);
		}
	}
	else if (self->k == J_LIST)
	{
		const struct jlist *l = self->u.l;
		const jval *x = arg(a, 0, NULL);

		if (strcmp(m, "index") == 0 || strcmp(m, "count") == 0)
		{
			int64_t		cnt = 0;

			if (!x)
				FAIL(e, "%s takes exactly one argument", m);
			for (size_t i = 0; i < l->n; i++)
				if (val_eq(&l->v[i], x))
				{
					if (m[0] == 'i')
						return mk_int((int64_t) i);
					cnt++;
				}
			if (m[0] == 'i')
				FAIL(e, "value is not in list");
			return mk_int(cnt);
		}
		if (strcmp(m, "copy") == 0)
		{
			struct jlist *c = new_list(e, l->n);

			for (size_t i = 0; i < l->n; i++)
				list_push(e, c, l->v[i]);
			return list_val(c);
		}
	}
	FAIL(e, "access to attribute '%s' of '%s' object is unsafe", m, kind_name(self));
}

/* ---------------------------------------------------------- globals */

static jval
call_global(struct ev *e, const char *name, const struct args *a)
{
	if (strcmp(name, "range") == 0)
	{
		int64_t		start = 0,
					stop,
					stp = 1;
		struct jlist *l;

		if (a->npos == 1)
			stop = arg_int(e, a, 0, NULL, 0, name);
		else if (a->npos >= 2)
		{
			start = arg_int(e, a, 0, NULL, 0, name);
			stop = arg_int(e, a, 1, NULL, 0, name);
			stp = arg_int(e, a, 2, NULL, 1, name);
		}
		else
			FAIL(e, "range expected at least 1 argument");
		if (stp == 0)
			FAIL(e, "range() arg 3 must not be zero");
		l = new_list(e, 0);
		for (int64_t i = start; stp > 0 ? i < stop : i > stop; i += stp)
		{
			step(e);
			list_push(e, l, mk_int(i));
		}
		return list_val(l);
	}
	if (strcmp(name, "namespace") == 0 || strcmp(name, "dict") == 0)
	{
		struct jdict *d = new_dict(e);

		for (int i = 0; i < a->npos; i++)
		{
			if (a->pos[i].k != J_DICT)
				FAIL(e, "%s() takes keyword arguments or a dict", name);
			for (size_t k = 0; k < a->pos[i].u.d->n; k++)
				dict_set(e, d, a->pos[i].u.d->k[k], a->pos[i].u.d->v[k]);
		}
		for (int k = 0; k < a->nk; k++)
			dict_set(e, d, mk_str(e, a->kn[k]), a->kv[k]);
		return dict_val(d, name[0] == 'n' ? J_NS : J_DICT);
	}
	if (strcmp(name, "raise_exception") == 0)
	{
		const jval *m = arg(a, 0, "message");
		struct jstr *s = m ? to_str(e, m) : NULL;

		FAIL(e, "raise_exception: %s", s ? s->p : "");
	}
	if (strcmp(name, "strftime_now") == 0)
	{
		const struct jstr *f = arg_str(e, a, 0, "format", name);
		struct tm	tm;
		char		buf[512];
		size_t		n;

		if (!f)
			FAIL(e, "strftime_now expects a format string");
		if (f->n > 200)
			FAIL(e, "strftime_now format too long");
		gmtime_r(&e->now, &tm);
		n = strftime(buf, sizeof(buf), f->p, &tm);
		return mk_strn(e, buf, n);
	}
	FAIL(e, "'%s' is not callable", name);
}

/* ----------------------------------------------------- tests, filters */

static const char *const test_names[] = {
	"defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number",
	"string", "mapping", "iterable", "sequence", "callable", "sameas", "equalto", "eq", "==",
	"ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "odd", "even",
	"divisibleby", "lower", "upper", NULL
};

bool
jinja_known_test(const char *name)
{
	return in_names(test_names, name);
}

static bool
run_test(struct ev *e, const char *t, const jval *v, const struct args *a)
{
	const jval *x = arg(a, 0, NULL);

#define NEED_ARG() do { if (!x) FAIL(e, "test '%s' needs an argument", t); } while (0)
	if (strcmp(t, "defined") == 0)
		return v->k != J_UNDEF;
	if (strcmp(t, "undefined") == 0)
		return v->k == J_UNDEF;
	if (strcmp(t, "none") == 0)
		return v->k == J_NONE;
	if (strcmp(t, "boolean") == 0)
		return v->k == J_BOOL;
	if (strcmp(t, "false") == 0)
		return v->k == J_BOOL && !v->u.b;
	if (strcmp(t, "true") == 0)
		return v->k == J_BOOL && v->u.b;
	if (strcmp(t, "integer") == 0)
		return v->k == J_INT;
	if (strcmp(t, "float") == 0)
		return v->k == J_FLOAT;
	if (strcmp(t, "number") == 0)
		return is_num(v);
	if (strcmp(t, "string") == 0)
		return v->k == J_STR;
	if (strcmp(t, "mapping") == 0)
		return v->k == J_DICT;
	if (strcmp(t, "iterable") == 0)
		return v->k == J_STR || v->k == J_LIST || v->k == J_DICT || v->k == J_UNDEF;
	if (strcmp(t, "sequence") == 0)
		return v->k == J_STR || v->k == J_LIST || v->k == J_DICT || v->k == J_UNDEF;
	if (strcmp(t, "callable") == 0)
		return v->k == J_FUNC;
	if (strcmp(t, "sameas") == 0)
	{
		NEED_ARG();
		if (v->k != x->k)
			return false;
		if (v->k == J_NONE || v->k == J_UNDEF)
			return true;
		if (v->k == J_BOOL)
			return v->u.b == x->u.b;
		if (v->k == J_INT)
			return v->u.i == x->u.i && v->u.i >= -5 && v->u.i <= 256;
		return v->k >= J_STR && memcmp(&v->u, &x->u, sizeof(v->u)) == 0;
	}
	if (strcmp(t, "equalto") == 0 || strcmp(t, "eq") == 0 || strcmp(t, "==") == 0)
	{
		NEED_ARG();
		return val_eq(v, x);
	}
	if (strcmp(t, "ne") == 0 || strcmp(t, "!=") == 0)
	{
		NEED_ARG();
		return !val_eq(v, x);
	}
	if (strcmp(t, "lt") == 0 || strcmp(t, "<") == 0)
	{
		NEED_ARG();
		return val_cmp(e, v, x) < 0;
	}
	if (strcmp(t, "le") == 0 || strcmp(t, "<=") == 0)
	{
		NEED_ARG();
		return val_cmp(e, v, x) <= 0;
	}
	if (strcmp(t, "gt") == 0 || strcmp(t, ">") == 0)
	{
		NEED_ARG();
		return val_cmp(e, v, x) > 0;
	}
	if (strcmp(t, "ge") == 0 || strcmp(t, ">=") == 0)
	{
		NEED_ARG();
		return val_cmp(e, v, x) >= 0;
	}
	if (strcmp(t, "in") == 0)
	{
		NEED_ARG();
		return contains(e, x, v);
	}
	if (strcmp(t, "odd") == 0 || strcmp(t, "even") == 0 || strcmp(t, "divisibleby") == 0)
	{
		int64_t		d = t[0] == 'd' ? arg_int(e, a, 0, NULL, 1, t) : 2;
		int64_t		r;

		if (v->k != J_INT && v->k != J_BOOL)
			FAIL(e, "test '%s' needs an integer", t);
		if (d == 0)
			FAIL(e, "integer division or modulo by zero");
		r = num_i(v) % d;
		return t[0] == 'o' ? r != 0 : r == 0;
	}
	if (strcmp(t, "lower") == 0 || strcmp(t, "upper") == 0)
	{
		struct jstr *s = to_str(e, v);
		struct args none = {0};
		jval		sv = {0};

		sv.k = J_STR;
		sv.u.s = s;
		return truthy((jval[]) {call_method(e, &sv, t[0] == 'l' ? "islower" : "isupper", &none)});
	}
#undef NEED_ARG
	FAIL(e, "unknown test '%s'", t);
}

static const char *const filter_names[] = {
	"abs", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
	"indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min",
	"reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr",
	"sort", "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount", NULL
};

bool
jinja_known_filter(const char *name)
{
	return in_names(filter_names, name);
}

static jval apply_filter(struct ev *e, const char *f, const jval *v, const struct args *a);

/* value.attribute with dotted paths ("a.b") and integer parts, as jinja2's make_attrgetter */
static jval
attr_path(struct ev *e, const jval *v, const struct jstr *path)
{
	jval		cur = *v;
	size_t		i = 0;

	while (i <= path->n)
	{
		const char *dot = memchr(path->p + i, '.', path->n - i);
		size_t		end = dot ? (size_t) (dot - path->p) : path->n;
		jval		key = mk_strn(e, path->p + i, end - i);
		bool		digits = end > i;

		for (size_t k = i; k < end; k++)
			if (path->p[k] < '0' || path->p[k] > '9')
				digits = false;
		if (digits)
			key = mk_int(atoll(key.u.s->p));
		if (cur.k == J_UNDEF)
			return cur;
		cur = get_item(e, &cur, &key);
		if (!dot)
			break;
		i = end + 1;
	}
	return cur;
}

/* shared by sort, dictsort, unique, min, max */
static int
sort_key_cmp(struct ev *e, const jval *a, const jval *b, bool case_sensitive)
{
	if (!case_sensitive && a->k == J_STR && b->k == J_STR)
	{
		jval		la = str_case(e, a->u.s, 1),
					lb = str_case(e, b->u.s, 1);

		return val_cmp(e, &la, &lb);
	}
	return val_cmp(e, a, b);
}

static void
stable_sort(struct ev *e, jval *items, jval *keys, size_t n, bool case_sensitive, bool reverse)
{
	/* insertion sort: stable, fine for the sizes templates sort */
	for (size_t i = 1; i < n; i++)
	{
		for (size_t j = i; j > 0; j--)
		{
			int			c = sort_key_cmp(e, &keys[j - 1], &keys[j], case_sensitive);

			step(e);
			if (reverse ? c >= 0 : c <= 0)
				break;
			{
				jval		t = items[j];

				items[j] = items[j - 1];
				items[j - 1] = t;
				t = keys[j];
				keys[j] = keys[j - 1];
				keys[j - 1] = t;
			}
		}
	}
}

/* markupsafe.escape(): a Markup string unchanged, anything else str()'d and escaped */
static jval
html_escape(struct ev *e, const jval *v)
{
	struct jstr *s;
	struct sb	b = {0};
	jval		r;

	if (v->k == J_STR && v->u.s->safe)
		return *v;
	s = to_str(e, v);
	for (size_t i = 0; i < s->n; i++)
	{
		char		c = s->p[i];

		if (c == '&')
			sb_puts(e, &b, "&amp;");
		else if (c == '<')
			sb_puts(e, &b, "&lt;");
		else if (c == '>')
			sb_puts(e, &b, "&gt;");
		else if (c == '"')
			sb_puts(e, &b, "&#34;");
		else if (c == '\'')
			sb_puts(e, &b, "&#39;");
		else
			sb_putc(e, &b, c);
	}
	r = sb_val(e, &b);
	r.u.s->safe = true;
	return r;
}

static jval
apply_filter(struct ev *e, const char *f, const jval *v, const struct args *a)
{
	step(e);
	if (strcmp(f, "safe") == 0)
	{
		jval		r = {0};

		r.k = J_STR;
		r.u.s = to_str(e, v);
		if (!r.u.s->safe)
		{
			r = mk_strn(e, r.u.s->p, r.u.s->n);
			r.u.s->safe = true;
		}
		return r;
	}
	if (strcmp(f, "string") == 0)
	{
		jval		r = {0};

		r.k = J_STR;
		r.u.s = to_str(e, v);
		return r;
	}
	if (strcmp(f, "trim") == 0)
	{
		const struct jstr *chars = arg_str(e, a, 0, "chars", f);

		return str_strip(e, to_str(e, v), chars, 3);
	}
	if (strcmp(f, "upper") == 0)
		return str_case(e, to_str(e, v), 0);
	if (strcmp(f, "lower") == 0)
		return str_case(e, to_str(e, v), 1);
	if (strcmp(f, "title") == 0)
		return str_case(e, to_str(e, v), 2);
	if (strcmp(f, "capitalize") == 0)
		return str_case(e, to_str(e, v), 3);
	if (strcmp(f, "length") == 0 || strcmp(f, "count") == 0)
	{
		switch (v->k)
		{
			case J_UNDEF:
				return mk_int(0);
			case J_STR:
				return mk_int((int64_t) cp_count(v->u.s->p, v->u.s->n));
			case J_LIST:
				return mk_int((int64_t) v->u.l->n);
			case J_DICT:
			case J_NS:
				return mk_int((int64_t) v->u.d->n);
			default:
				FAIL(e, "object of type '%s' has no len()", kind_name(v));
		}
	}
	if (strcmp(f, "default") == 0 || strcmp(f, "d") == 0)
	{
		const jval *dv = arg(a, 0, "default_value");
		bool		boolean = arg_bool(a, 1, "boolean", false);

		if (v->k == J_UNDEF || (boolean && !truthy(v)))
			return dv ? *dv : mk_str(e, "");
		return *v;
	}
	if (strcmp(f, "tojson") == 0)
	{
		struct json_opts o = {-1, ", ", ": ", arg_bool(a, -1, "sort_keys", false)};
		const jval *ind = arg(a, 0, "indent");
		const jval *seps = arg(a, -1, "separators");
		struct sb	b = {0};

		if (ind && ind->k != J_NONE)
		{
			if (ind->k != J_INT || ind->u.i < 0 || ind->u.i > 64)
				ev_fail(e, OPUS_ERR_UNSUPPORTED, "tojson indent must be a small integer");
			o.indent = (int) ind->u.i;
			o.item_sep = ",";
		}
		if (seps && seps->k != J_NONE)
		{
			if (seps->k != J_LIST || seps->u.l->n != 2 || seps->u.l->v[0].k != J_STR ||
				seps->u.l->v[1].k != J_STR)
				FAIL(e, "tojson separators must be a pair of strings");
			o.item_sep = seps->u.l->v[0].u.s->p;
			o.key_sep = seps->u.l->v[1].u.s->p;
		}
		if (arg(a, -1, "ensure_ascii") && truthy(arg(a, -1, "ensure_ascii")))
			ev_fail(e, OPUS_ERR_UNSUPPORTED, "tojson(ensure_ascii=true) is not supported");
		json_dump(e, &b, v, &o, 0);
		return sb_val(e, &b);
	}
	if (strcmp(f, "join") == 0)
	{
		const struct jstr *sep = arg_str(e, a, 0, "d", f);
		const jval *attr = arg(a, 1, "attribute");
		struct jlist *l = iter_list(e, v);
		struct sb	b = {0};

		for (size_t i = 0; i < l->n; i++)
		{
			jval		x = l->v[i];

			if (i && sep)
				sb_put(e, &b, sep->p, sep->n);
			if (attr && attr->k == J_STR)
				x = attr_path(e, &x, attr->u.s);
			put_str(e, &b, &x, 0);
		}
		return sb_val(e, &b);
	}
	if (strcmp(f, "replace") == 0)
	{
		const struct jstr *o = arg_str(e, a, 0, "old", f),
				   *n = arg_str(e, a, 1, "new", f);

		if (!o || !n)
			FAIL(e, "replace needs two string arguments");
		return str_replace(e, to_str(e, v), o, n, arg_int(e, a, 2, "count", -1, f));
	}
	if (strcmp(f, "items") == 0)
	{
		struct args none = {0};

		if (v->k == J_UNDEF)
			return list_val(new_list(e, 0));
		if (v->k != J_DICT)
			FAIL(e, "can only get item pairs from a mapping");
		return call_method(e, v, "items", &none);
	}
	if (strcmp(f, "dictsort") == 0)
	{
		bool		cs = arg_bool(a, 0, "case_sensitive", false);
		const struct jstr *by = arg_str(e, a, 1, "by", f);
		bool		rev = arg_bool(a, 2, "reverse", false);
		bool		by_value = by && strcmp(by->p, "value") == 0;
		struct args none = {0};
		jval		items;
		jval	   *keys;
		struct jlist *l;

		if (v->k != J_DICT)
			FAIL(e, "dictsort needs a mapping");
		items = call_method(e, v, "items", &none);
		l = items.u.l;
		keys = ealloc(e, (l->n + 1) * sizeof(jval));
		for (size_t i = 0; i < l->n; i++)
			keys[i] = l->v[i].u.l->v[by_value ? 1 : 0];
		stable_sort(e, l->v, keys, l->n, cs, rev);
		return items;
	}
	if (strcmp(f, "list") == 0)
	{
		struct jlist *src = iter_list(e, v),
				   *l = new_list(e, src->n);

		for (size_t i = 0; i < src->n; i++)
			list_push(e, l, src->v[i]);
		return list_val(l);
	}
	if (strcmp(f, "first") == 0 || strcmp(f, "last") == 0)
	{
		struct jlist *l = iter_list(e, v);

		if (l->n == 0)
			return mk_undef();
		return f[0] == 'f' ? l->v[0] : l->v[l->n - 1];
	}
	if (strcmp(f, "reverse") == 0)
	{
		if (v->k == J_STR)
		{
			jval		m1 = mk_int(-1);

			return do_slice(e, v, NULL, NULL, &m1);
		}
		{
			struct jlist *src = iter_list(e, v),
					   *l = new_list(e, src->n);

			for (size_t i = src->n; i > 0; i--)
				list_push(e, l, src->v[i - 1]);
			return list_val(l);
		}
	}
	if (strcmp(f, "sort") == 0 || strcmp(f, "unique") == 0 || strcmp(f, "min") == 0 ||
		strcmp(f, "max") == 0)
	{
		bool		is_sort = f[0] == 's';
		bool		rev = is_sort ? arg_bool(a, 0, "reverse", false) : false;
		bool		cs = arg_bool(a, is_sort ? 1 : 0, "case_sensitive", false);
		const jval *attr = arg(a, is_sort ? 2 : 1, "attribute");
		struct jlist *src = iter_list(e, v),
				   *l = new_list(e, src->n);
		jval	   *keys = ealloc(e, (src->n + 1) * sizeof(jval));

		for (size_t i = 0; i < src->n; i++)
		{
			jval		k = src->v[i];

			if (attr && attr->k == J_STR)
				k = attr_path(e, &k, attr->u.s);
			if (!cs && k.k == J_STR)
				k = str_case(e, k.u.s, 1);
			if (f[0] == 'u')
			{
				bool		seen = false;

				for (size_t j = 0; j < l->n && !seen; j++)
					seen = val_eq(&keys[j], &k);
				if (seen)
					continue;
			}
			keys[l->n] = k;
			list_push(e, l, src->v[i]);
		}
		if (f[0] == 'u')
			return list_val(l);
		stable_sort(e, l->v, keys, l->n, true, rev);
		if (is_sort)
			return list_val(l);
		if (l->n == 0)
			return mk_undef();
		return strcmp(f, "min") == 0 ? l->v[0] : l->v[l->n - 1];
	}
	if (strcmp(f, "sum") == 0)
	{
		struct jlist *l = iter_list(e, v);
		const jval *attr = arg(a, 0, "attribute");
		const jval *start = arg(a, 1, "start");
		int64_t		si = start && start->k == J_INT ? start->u.i : 0;
		double		sf = start && start->k == J_FLOAT ? start->u.f : 0;
		bool		flt = start && start->k == J_FLOAT;

		for (size_t i = 0; i < l->n; i++)
		{
			jval		x = l->v[i];

			if (attr && attr->k == J_STR)
				x = attr_path(e, &x, attr->u.s);
			if (!is_num(&x))
				FAIL(e, "unsupported operand type(s) for +: 'int' and '%s'", kind_name(&x));
			if (x.k == J_FLOAT)
				flt = true;
			sf += num_f(&x);
			if (__builtin_add_overflow(si, num_i(&x), &si))
				FAIL(e, "integer overflow");
		}
		return flt ? mk_float(sf) : mk_int(si);
	}
	if (strcmp(f, "select") == 0 || strcmp(f, "reject") == 0 ||
		strcmp(f, "selectattr") == 0 || strcmp(f, "rejectattr") == 0)
	{
		bool		by_attr = strstr(f, "attr") != NULL;
		bool		keep_true = f[0] == 's';
		int			ti = by_attr ? 1 : 0;
		const struct jstr *attr = by_attr ? arg_str(e, a, 0, NULL, f) : NULL;
		const jval *tn = arg(a, ti, NULL);
		struct jlist *src = truthy(v) ? iter_list(e, v) : new_list(e, 0),
				   *l = new_list(e, 0);
		struct args ta = {0};

		if (by_attr && !attr)
			FAIL(e, "%s needs an attribute name", f);
		if (tn && tn->k != J_STR)
			FAIL(e, "%s: the test name must be a string", f);
		if (tn && !jinja_known_test(tn->u.s->p))
			ev_fail(e, OPUS_ERR_UNSUPPORTED, "unsupported test '%s'", tn->u.s->p);
		if (a->npos > ti + 1)
		{
			ta.pos = a->pos + ti + 1;
			ta.npos = a->npos - ti - 1;
		}
		for (size_t i = 0; i < src->n; i++)
		{
			jval		x = src->v[i];
			bool		r;

			if (attr)
				x = attr_path(e, &x, attr);
			r = tn ? run_test(e, tn->u.s->p, &x, &ta) : truthy(&x);
			if (r == keep_true)
				list_push(e, l, src->v[i]);
		}
		return list_val(l);
	}
	if (strcmp(f, "map") == 0)
	{
		const jval *attr = arg(a, -1, "attribute");
		const jval *dflt = arg(a, -1, "default");
		struct jlist *src = truthy(v) ? iter_list(e, v) : new_list(e, 0),
				   *l = new_list(e, src->n);
		const jval *fname = arg(a, 0, NULL);
		struct args fa = {0};

		if (!attr && (!fname || fname->k != J_STR))
			FAIL(e, "map needs a filter name or attribute=");
		if (!attr)
		{
			if (!jinja_known_filter(fname->u.s->p))
				ev_fail(e, OPUS_ERR_UNSUPPORTED, "unsupported filter '%s'", fname->u.s->p);
			fa.pos = a->pos + 1;
			fa.npos = a->npos - 1;
			fa.kn = a->kn;
			fa.kv = a->kv;
			fa.nk = a->nk;
		}
		for (size_t i = 0; i < src->n; i++)
		{
			jval		x;

			if (attr)
			{
				if (attr->k != J_STR)
					FAIL(e, "map attribute must be a string");
				x = attr_path(e, &src->v[i], attr->u.s);
				if (x.k == J_UNDEF && dflt)
					x = *dflt;
			}
			else
				x = apply_filter(e, fname->u.s->p, &src->v[i], &fa);
			list_push(e, l, x);
		}
		return list_val(l);
	}
	if (strcmp(f, "int") == 0 || strcmp(f, "float") == 0)
	{
		const jval *dv = arg(a, 0, "default");
		bool		want_int = f[0] == 'i';

		if (v->k == J_INT || v->k == J_BOOL)
			return want_int ? mk_int(num_i(v)) : mk_float(num_f(v));
		if (v->k == J_FLOAT)
		{
			if (!want_int)
				return *v;
			if (!(v->u.f > -9.2e18 && v->u.f < 9.2e18))
				FAIL(e, "float too large for int");
			return mk_int((int64_t) v->u.f);
		}
		if (v->k == J_STR)
		{
			char	   *end;
			const char *p = v->u.s->p;

			errno = 0;
			if (want_int)
			{
				long long	r = strtoll(p, &end, 10);

				while (*end && py_space((unsigned char) *end))
					end++;
				if (end != p && *end == '\0' && errno == 0)
					return mk_int(r);
				{
					double		d = strtod(p, &end);

					while (*end && py_space((unsigned char) *end))
						end++;
					if (end != p && *end == '\0' && d > -9.2e18 && d < 9.2e18)
						return mk_int((int64_t) d);
				}
			}
			else
			{
				double		d = strtod(p, &end);

				while (*end && py_space((unsigned char) *end))
					end++;
				if (end != p && *end == '\0')
					return mk_float(d);
			}
		}
		if (dv)
			return *dv;
		return want_int ? mk_int(0) : mk_float(0.0);
	}
	if (strcmp(f, "abs") == 0)
	{
		if (v->k == J_INT)
		{
			if (v->u.i == INT64_MIN)
				FAIL(e, "integer overflow");
			return mk_int(v->u.i < 0 ? -v->u.i : v->u.i);
		}
		if (v->k == J_FLOAT)
			return mk_float(fabs(v->u.f));
		if (v->k == J_BOOL)
			return mk_int(v->u.b);
		FAIL(e, "bad operand type for abs(): '%s'", kind_name(v));
	}
	if (strcmp(f, "round") == 0)
	{
		int64_t		prec = arg_int(e, a, 0, "precision", 0, f);
		const struct jstr *method = arg_str(e, a, 1, "method", f);
		double		x,
					m;

		if (!is_num(v))
			FAIL(e, "round needs a number");
		if (prec < 0 || prec > 15)
			ev_fail(e, OPUS_ERR_UNSUPPORTED, "round precision out of range");
		x = num_f(v);
		m = pow(10.0, (double) prec);
		if (method && strcmp(method->p, "floor") == 0)
			return mk_float(floor(x * m) / m);
		if (method && strcmp(method->p, "ceil") == 0)
			return mk_float(ceil(x * m) / m);
		return mk_float(rint(x * m) / m);
	}
	if (strcmp(f, "indent") == 0)
	{
		const jval *w = arg(a, 0, "width");
		bool		first = arg_bool(a, 1, "first", false);
		bool		blank = arg_bool(a, 2, "blank", false);
		struct jstr *s = to_str(e, v);
		struct sb	pad = {0},
					b = {0};
		bool		line_start = true;

		if (!w)
			sb_puts(e, &pad, "    ");
		else if (w->k == J_STR)
			sb_put(e, &pad, w->u.s->p, w->u.s->n);
		else
		{
			int64_t		n = arg_int(e, a, 0, "width", 4, f);

			if (n < 0 || n > 1000)
				FAIL(e, "indent width out of range");
			for (int64_t i = 0; i < n; i++)
				sb_putc(e, &pad, ' ');
		}
		for (size_t i = 0; i < s->n; i++)
		{
			if (line_start && (i > 0 || first))
			{
				bool		is_blank = s->p[i] == '\n';

				if (!is_blank || blank)
					sb_put(e, &b, pad.p, pad.n);
			}
			sb_putc(e, &b, s->p[i]);
			line_start = s->p[i] == '\n';
		}
		if (s->n == 0 && first && blank)
			sb_put(e, &b, pad.p, pad.n);
		return sb_val(e, &b);
	}
	if (strcmp(f, "escape") == 0 || strcmp(f, "e") == 0)
		return html_escape(e, v);
	if (strcmp(f, "wordcount") == 0)
	{
		struct jstr *s = to_str(e, v);
		int64_t		n = 0;
		bool		in_word = false;

		for (size_t i = 0; i < s->n; i++)
		{
			unsigned char c = (unsigned char) s->p[i];
			bool		w = c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
				(c >= 'A' && c <= 'Z') || c == '_';

			if (w && !in_word)
				n++;
			in_word = w;
		}
		return mk_int(n);
	}
	ev_fail(e, OPUS_ERR_UNSUPPORTED, "unsupported filter '%s'", f);
}

/* -------------------------------------------------------- expressions */

static jval eval(struct ev *e, const struct jnode *n, struct frame *f);
static int	exec_body(struct ev *e, const struct jnode *body, struct frame *f);

static void
eval_args(struct ev *e, const struct jnode *n, struct frame *f, struct args *a, const jval *first)
{
	int			off = first ? 1 : 0;

	a->npos = n->nv + off;
	a->pos = ealloc(e, sizeof(jval) * (size_t) (a->npos + 1));
	if (first)
		a->pos[0] = *first;
	for (int i = 0; i < n->nv; i++)
		a->pos[i + off] = eval(e, n->v[i], f);
	a->nk = n->nk;
	a->kn = n->kn;
	a->kv = ealloc(e, sizeof(jval) * (size_t) (n->nk + 1));
	for (int i = 0; i < n->nk; i++)
		a->kv[i] = eval(e, n->kv[i], f);
}

static jval
arith(struct ev *e, int op, const jval *a, const jval *b)
{
	if (op == OP_CONCAT)
	{
		struct sb	s = {0};

		put_str(e, &s, a, 0);
		put_str(e, &s, b, 0);
		return sb_val(e, &s);
	}
	if (op == OP_ADD && a->k == J_STR && b->k == J_STR)
	{
		/* Markup + str escapes the str (and str + Markup): the result is Markup */
		bool		safe = a->u.s->safe || b->u.s->safe;
		jval		x = safe ? html_escape(e, a) : *a,
					y = safe ? html_escape(e, b) : *b;
		struct sb	s = {0};
		jval		r;

		sb_put(e, &s, x.u.s->p, x.u.s->n);
		sb_put(e, &s, y.u.s->p, y.u.s->n);
		r = sb_val(e, &s);
		r.u.s->safe = safe;
		return r;
	}
	if (op == OP_ADD && a->k == J_LIST && b->k == J_LIST)
	{
		struct jlist *l = new_list(e, a->u.l->n + b->u.l->n);

		for (size_t i = 0; i < a->u.l->n; i++)
			list_push(e, l, a->u.l->v[i]);
		for (size_t i = 0; i < b->u.l->n; i++)
			list_push(e, l, b->u.l->v[i]);
		l->tuple = a->u.l->tuple;
		return list_val(l);
	}
	if (op == OP_MUL && ((a->k == J_STR || a->k == J_LIST) && (b->k == J_INT || b->k == J_BOOL)))
	{
		int64_t		times = num_i(b);
		size_t		unit = a->k == J_STR ? a->u.s->n : a->u.l->n;

		if (times <= 0 || unit == 0)
			return a->k == J_STR ? mk_str(e, "") : list_val(new_list(e, 0));
		if ((uint64_t) times > e->ar->limit / unit)
			FAIL(e, "repeated sequence over the memory limit");
		if (a->k == J_STR)
		{
			struct sb	s = {0};

			for (int64_t i = 0; i < times; i++)
				sb_put(e, &s, a->u.s->p, a->u.s->n);
			return sb_val(e, &s);
		}
		{
			struct jlist *l = new_list(e, 0);

			for (int64_t i = 0; i < times; i++)
				for (size_t k = 0; k < a->u.l->n; k++)
					list_push(e, l, a->u.l->v[k]);
			return list_val(l);
		}
	}
	if (op == OP_MUL && (b->k == J_STR || b->k == J_LIST) && (a->k == J_INT || a->k == J_BOOL))
		return arith(e, op, b, a);
	if (!is_num(a) || !is_num(b))
	{
		static const char *const sym[] = {"", "+", "-", "*", "/", "//", "%", "**"};

		if (op == OP_MOD && a->k == J_STR)
			ev_fail(e, OPUS_ERR_UNSUPPORTED, "string %% formatting is not supported");
		FAIL(e, "unsupported operand type(s) for %s: '%s' and '%s'",
			 op <= OP_POW ? sym[op] : "?", kind_name(a), kind_name(b));
	}
	if (a->k != J_FLOAT && b->k != J_FLOAT && op != OP_DIV)
	{
		int64_t		x = num_i(a),
					y = num_i(b),
					r = 0;

		switch (op)
		{
			case OP_ADD:
				if (__builtin_add_overflow(x, y, &r))
					FAIL(e, "integer overflow");
				return mk_int(r);
			case OP_SUB:
				if (__builtin_sub_overflow(x, y, &r))
					FAIL(e, "integer overflow");
				return mk_int(r);
			case OP_MUL:
				if (__builtin_mul_overflow(x, y, &r))
					FAIL(e, "integer overflow");
				return mk_int(r);
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
					return mk_int(op == OP_MOD ? m : q);
				}
			case OP_POW:
				if (y < 0)
					return mk_float(pow((double) x, (double) y));
				r = 1;
				for (int64_t i = 0; i < y; i++)
				{
					if (__builtin_mul_overflow(r, x, &r))
						FAIL(e, "integer overflow");
					if (r == 0 || r == 1)
						break;
					step(e);
				}
				return mk_int(r);
		}
	}
	{
		double		x = num_f(a),
					y = num_f(b);

		switch (op)
		{
			case OP_ADD:
				return mk_float(x + y);
			case OP_SUB:
				return mk_float(x - y);
			case OP_MUL:
				return mk_float(x * y);
			case OP_DIV:
				if (y == 0)
					FAIL(e, "division by zero");
				return mk_float(x / y);
			case OP_FLOORDIV:
				if (y == 0)
					FAIL(e, "float floor division by zero");
				return mk_float(floor(x / y));
			case OP_MOD:
				if (y == 0)
					FAIL(e, "float modulo");
				{
					double		m = fmod(x, y);

					if (m != 0 && ((m < 0) != (y < 0)))
						m += y;
					return mk_float(m);
				}
			default:
				return mk_float(pow(x, y));
		}
	}
}

static jval
lookup_name(struct ev *e, const char *name, struct frame *f)
{
	jval	   *v = frame_lookup(f, name, strlen(name));

	if (v)
		return *v;
	if (in_names(global_fns, name))
		return mk_func(e, FN_GLOBAL, name);
	return mk_undef();
}

static jval
eval(struct ev *e, const struct jnode *n, struct frame *f)
{
	step(e);
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
				struct jlist *l = new_list(e, (size_t) n->nv);

				for (int i = 0; i < n->nv; i++)
					list_push(e, l, eval(e, n->v[i], f));
				l->tuple = n->t == E_TUPLE;
				return list_val(l);
			}
		case E_DICT:
			{
				struct jdict *d = new_dict(e);

				for (int i = 0; i + 1 < n->nv; i += 2)
				{
					jval		k = eval(e, n->v[i], f);

					if (k.k == J_LIST && !k.u.l->tuple)
						FAIL(e, "unhashable type: 'list'");
					if (k.k == J_DICT || k.k == J_NS)
						FAIL(e, "unhashable type: 'dict'");
					dict_set(e, d, k, eval(e, n->v[i + 1], f));
				}
				return dict_val(d, J_DICT);
			}
		case E_ATTR:
			{
				jval		o = eval(e, n->a, f);

				e->line = n->line;
				return get_attr(e, &o, n->s);
			}
		case E_ITEM:
			{
				jval		o = eval(e, n->a, f),
							k = eval(e, n->b, f);

				e->line = n->line;
				return get_item(e, &o, &k);
			}
		case E_SLICE:
			{
				jval		o = eval(e, n->a, f);
				jval		b = n->b ? eval(e, n->b, f) : mk_none(),
							c = n->c ? eval(e, n->c, f) : mk_none(),
							d = n->d ? eval(e, n->d, f) : mk_none();

				e->line = n->line;
				return do_slice(e, &o, &b, &c, &d);
			}
		case E_CALL:
			{
				jval		fn = eval(e, n->a, f);
				struct args a = {0};

				eval_args(e, n, f, &a, NULL);
				e->line = n->line;
				return call_value(e, &fn, &a, NULL, NULL);
			}
		case E_FILTER:
			{
				jval		v = eval(e, n->a, f);
				struct args a = {0};

				eval_args(e, n, f, &a, NULL);
				e->line = n->line;
				return apply_filter(e, n->s, &v, &a);
			}
		case E_TEST:
			{
				jval		v = eval(e, n->a, f);
				struct args a = {0};
				bool		r;

				eval_args(e, n, f, &a, NULL);
				e->line = n->line;
				r = run_test(e, n->s, &v, &a);
				return mk_bool(n->op ? !r : r);
			}
		case E_NEG:
		case E_POS:
			{
				jval		v = eval(e, n->a, f);

				if (v.k == J_INT || v.k == J_BOOL)
				{
					if (n->t == E_POS)
						return mk_int(num_i(&v));
					if (num_i(&v) == INT64_MIN)
						FAIL(e, "integer overflow");
					return mk_int(-num_i(&v));
				}
				if (v.k == J_FLOAT)
					return mk_float(n->t == E_NEG ? -v.u.f : v.u.f);
				FAIL(e, "bad operand type for unary %c: '%s'", n->t == E_NEG ? '-' : '+', kind_name(&v));
			}
		case E_NOT:
			{
				jval		v = eval(e, n->a, f);

				return mk_bool(!truthy(&v));
			}
		case E_AND:
			{
				jval		a = eval(e, n->a, f);

				return truthy(&a) ? eval(e, n->b, f) : a;
			}
		case E_OR:
			{
				jval		a = eval(e, n->a, f);

				return truthy(&a) ? a : eval(e, n->b, f);
			}
		case E_COND:
			{
				jval		c = eval(e, n->a, f);

				if (truthy(&c))
					return eval(e, n->b, f);
				return n->c ? eval(e, n->c, f) : mk_undef();
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
						return mk_bool(val_eq(&a, &b));
					case OP_NE:
						return mk_bool(!val_eq(&a, &b));
					case OP_LT:
						return mk_bool(val_cmp(e, &a, &b) < 0);
					case OP_LE:
						return mk_bool(val_cmp(e, &a, &b) <= 0);
					case OP_GT:
						return mk_bool(val_cmp(e, &a, &b) > 0);
					case OP_GE:
						return mk_bool(val_cmp(e, &a, &b) >= 0);
					case OP_IN:
						return mk_bool(contains(e, &b, &a));
					default:
						return mk_bool(!contains(e, &b, &a));
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
	return sb_val(e, &b);
}

static jval
call_value(struct ev *e, const jval *fn, const struct args *a, const struct jnode *caller,
		   struct frame *caller_frame)
{
	const struct jfunc *fu;

	if (fn->k != J_FUNC)
		FAIL(e, "'%s' object is not callable", kind_name(fn));
	fu = fn->u.fn;
	switch (fu->kind)
	{
		case FN_GLOBAL:
			return call_global(e, fu->name, a);
		case FN_METHOD:
			if (strcmp(fu->name, "cycle") == 0 && fu->self.k == J_INT)
			{
				if (a->npos == 0)
					FAIL(e, "no items for cycling given");
				return a->pos[fu->self.u.i % a->npos];
			}
			return call_method(e, &fu->self, fu->name, a);
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
					const jval *v = arg(a, i, m->kn[i]);

					frame_set(e, fr, m->kn[i], v ? *v : m->kv[i] ? eval(e, m->kv[i], fr) : mk_undef());
				}
				if (caller)
				{
					jval		c = mk_func(e, FN_CALLER, "caller");

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
		struct jlist *l = iter_list(e, v);

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
	src = iter_list(e, &itv);
	items = src;
	if (n->b)
	{
		items = new_list(e, 0);
		for (size_t i = 0; i < src->n; i++)
		{
			jval		c;

			assign_targets(e, lf, n->kn, n->nk, &src->v[i]);
			c = eval(e, n->b, lf);
			if (truthy(&c))
				list_push(e, items, src->v[i]);
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

		loop = new_dict(e);
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			dict_set(e, loop, mk_str(e, keys[k]), mk_none());
		cyc = mk_func(e, FN_METHOD, "cycle");
		frame_set(e, lf, "loop", dict_val(loop, J_NS));
	}
	for (size_t i = 0; i < items->n; i++)
	{
		int64_t		len = (int64_t) items->n;
		int			fl;

		step(e);
		cyc.u.fn->self = mk_int((int64_t) i);
		loop->v[0] = mk_int((int64_t) i + 1);
		loop->v[1] = mk_int((int64_t) i);
		loop->v[2] = mk_int(len - (int64_t) i);
		loop->v[3] = mk_int(len - (int64_t) i - 1);
		loop->v[4] = mk_bool(i == 0);
		loop->v[5] = mk_bool(i + 1 == items->n);
		loop->v[6] = mk_int(len);
		loop->v[7] = mk_int(1);
		loop->v[8] = mk_int(0);
		loop->v[9] = i > 0 ? items->v[i - 1] : mk_undef();
		loop->v[10] = i + 1 < items->n ? items->v[i + 1] : mk_undef();
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
	step(e);
	e->line = n->line;
	switch (n->t)
	{
		case S_TEXT:
			sb_put(e, e->out, n->s, n->sn);
			return FLOW_NEXT;
		case S_OUT:
			{
				jval		v = eval(e, n->a, f);

				put_str(e, e->out, &v, 0);
				return FLOW_NEXT;
			}
		case S_BODY:
			return exec_body(e, n, f);
		case S_IF:
			for (int i = 0; i + 1 < n->nv; i += 2)
			{
				jval		c = eval(e, n->v[i], f);

				if (truthy(&c))
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
					dict_set(e, ns->u.d, mk_str(e, n->s), v);
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

				put_str(e, e->out, &v, 0);
				return FLOW_NEXT;
			}
		case S_MACRO:
			{
				jval		m = mk_func(e, FN_MACRO, n->s);

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
				r = call_value(e, &fn, &a, n->c, f);
				put_str(e, e->out, &r, 0);
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
