/*
 * jinja_value.c - the values of the Jinja interpreter (jinja.h): the error
 * and allocation core every evaluator file uses, builders, lists and dicts,
 * Python's equality and ordering, code-point helpers, str() and repr() in
 * Python's spelling, and JSON: tojson's json.dumps and the parser the
 * render context arrives through.
 *
 * Memory: everything lives in the render's arena (jinja_int.h); errors
 * longjmp to opus_jinja_render (jinja_eval.c).
 */
#include "text/jinja_int.h"
#include "text/unicode.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void
jj_ev_fail(struct ev *e, enum opus_status code, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	e->code = code;
	longjmp(e->jb, 1);
}


void *
jj_ealloc(struct ev *e, size_t n)
{
	void	   *p = ja_alloc(e->ar, n);

	if (!p)
		FAIL(e, "template used more than its memory limit (%zu bytes)", e->ar->limit);
	return p;
}

void
jj_step(struct ev *e)
{
	if (++e->steps > e->max_steps)
		FAIL(e, "template ran more than its step limit (%llu steps)",
			 (unsigned long long) e->max_steps);
}

/* ---------------------------------------------------------- builders */

void
jj_sb_put(struct ev *e, struct sb *b, const char *s, size_t n)
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
		np = jj_ealloc(e, cap);
		if (b->n)
			memcpy(np, b->p, b->n);
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

void
jj_sb_puts(struct ev *e, struct sb *b, const char *s)
{
	jj_sb_put(e, b, s, strlen(s));
}

void
jj_sb_putc(struct ev *e, struct sb *b, char c)
{
	jj_sb_put(e, b, &c, 1);
}

/* ------------------------------------------------------------ values */

jval
jj_mk_undef(void)
{
	jval		v = {0};

	v.k = J_UNDEF;
	return v;
}

jval
jj_mk_none(void)
{
	jval		v = {0};

	v.k = J_NONE;
	return v;
}

jval
jj_mk_bool(bool b)
{
	jval		v = {0};

	v.k = J_BOOL;
	v.u.b = b;
	return v;
}

jval
jj_mk_int(int64_t i)
{
	jval		v = {0};

	v.k = J_INT;
	v.u.i = i;
	return v;
}

jval
jj_mk_float(double f)
{
	jval		v = {0};

	v.k = J_FLOAT;
	v.u.f = f;
	return v;
}

jval
jj_mk_strn(struct ev *e, const char *s, size_t n)
{
	jval		v = {0};
	struct jstr *js = jj_ealloc(e, sizeof(*js) + n + 1);

	js->n = n;
	if (n)
		memcpy(js->p, s, n);
	js->p[n] = '\0';
	v.k = J_STR;
	v.u.s = js;
	return v;
}

jval
jj_mk_str(struct ev *e, const char *s)
{
	return jj_mk_strn(e, s, strlen(s));
}

jval
jj_sb_val(struct ev *e, struct sb *b)
{
	return jj_mk_strn(e, b->p ? b->p : "", b->n);
}

struct jlist *
jj_new_list(struct ev *e, size_t cap)
{
	struct jlist *l = jj_ealloc(e, sizeof(*l));

	if (cap)
	{
		if (cap > e->ar->limit / sizeof(jval))
			FAIL(e, "list too long");
		l->v = jj_ealloc(e, cap * sizeof(jval));
	}
	l->cap = cap;
	return l;
}

jval
jj_list_val(struct jlist *l)
{
	jval		v = {0};

	v.k = J_LIST;
	v.u.l = l;
	return v;
}

void
jj_list_push(struct ev *e, struct jlist *l, jval x)
{
	if (l->n == l->cap)
	{
		size_t		cap = l->cap ? l->cap * 2 : 4;
		jval	   *nv;

		if (cap > e->ar->limit / sizeof(jval))
			FAIL(e, "list too long");
		nv = jj_ealloc(e, cap * sizeof(jval));
		if (l->n)
			memcpy(nv, l->v, l->n * sizeof(jval));
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = x;
}

struct jdict *
jj_new_dict(struct ev *e)
{
	return jj_ealloc(e, sizeof(struct jdict));
}

jval
jj_dict_val(struct jdict *d, int kind)
{
	jval		v = {0};

	v.k = (uint8_t) kind;
	v.u.d = d;
	return v;
}


jval *
jj_dict_find(const struct jdict *d, const jval *key)
{
	for (size_t i = 0; i < d->n; i++)
		if (jj_val_eq(&d->k[i], key))
			return &d->v[i];
	return NULL;
}

jval *
jj_dict_find_str(const struct jdict *d, const char *key, size_t n)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i].k == J_STR && d->k[i].u.s->n == n && memcmp(d->k[i].u.s->p, key, n) == 0)
			return &d->v[i];
	return NULL;
}

void
jj_dict_set(struct ev *e, struct jdict *d, jval key, jval val)
{
	jval	   *slot = jj_dict_find(d, &key);

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
		nk = jj_ealloc(e, cap * sizeof(jval));
		nv = jj_ealloc(e, cap * sizeof(jval));
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

const char *
jj_kind_name(const jval *v)
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

bool
jj_truthy(const jval *v)
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

bool
jj_is_num(const jval *v)
{
	return v->k == J_INT || v->k == J_FLOAT || v->k == J_BOOL;
}

double
jj_num_f(const jval *v)
{
	return v->k == J_FLOAT ? v->u.f : v->k == J_BOOL ? (double) v->u.b : (double) v->u.i;
}

int64_t
jj_num_i(const jval *v)
{
	return v->k == J_BOOL ? (int64_t) v->u.b : v->u.i;
}

bool
jj_val_eq(const jval *a, const jval *b)
{
	if (jj_is_num(a) && jj_is_num(b))
	{
		if (a->k == J_FLOAT || b->k == J_FLOAT)
			return jj_num_f(a) == jj_num_f(b);
		return jj_num_i(a) == jj_num_i(b);
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
				if (!jj_val_eq(&a->u.l->v[i], &b->u.l->v[i]))
					return false;
			return true;
		case J_DICT:
			if (a->u.d->n != b->u.d->n)
				return false;
			for (size_t i = 0; i < a->u.d->n; i++)
			{
				jval	   *o = jj_dict_find(b->u.d, &a->u.d->k[i]);

				if (!o || !jj_val_eq(&a->u.d->v[i], o))
					return false;
			}
			return true;
		default:
			return a->u.d == b->u.d;
	}
}

/* -1 / 0 / 1; errors for unorderable types as Python does */
int
jj_val_cmp(struct ev *e, const jval *a, const jval *b)
{
	if (jj_is_num(a) && jj_is_num(b))
	{
		if (a->k == J_FLOAT || b->k == J_FLOAT)
		{
			double		x = jj_num_f(a),
						y = jj_num_f(b);

			return x < y ? -1 : x > y ? 1 : 0;
		}
		return jj_num_i(a) < jj_num_i(b) ? -1 : jj_num_i(a) > jj_num_i(b) ? 1 : 0;
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
			if (!jj_val_eq(&a->u.l->v[i], &b->u.l->v[i]))
				return jj_val_cmp(e, &a->u.l->v[i], &b->u.l->v[i]);
		}
		return a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n ? 1 : 0;
	}
	FAIL(e, "'<' not supported between instances of '%s' and '%s'", jj_kind_name(a), jj_kind_name(b));
}

/* ------------------------------------------------------------- UTF-8 */

size_t
jj_u8_len(unsigned char c)
{
	return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

size_t
jj_cp_count(const char *s, size_t n)
{
	size_t		c = 0;

	for (size_t i = 0; i < n; i++)
		if (((unsigned char) s[i] & 0xC0) != 0x80)
			c++;
	return c;
}

/* byte offset of code point idx (0..count) */
size_t
jj_cp_offset(const char *s, size_t n, size_t idx)
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
	size_t		l = jj_u8_len(c);
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
void
jj_put_str(struct ev *e, struct sb *b, const jval *v, int depth)
{
	char		buf[64];

	switch (v->k)
	{
		case J_UNDEF:
			return;
		case J_NONE:
			jj_sb_puts(e, b, "None");
			return;
		case J_BOOL:
			jj_sb_puts(e, b, v->u.b ? "True" : "False");
			return;
		case J_INT:
			snprintf(buf, sizeof(buf), "%lld", (long long) v->u.i);
			jj_sb_puts(e, b, buf);
			return;
		case J_FLOAT:
			fmt_float(buf, sizeof(buf), v->u.f);
			jj_sb_puts(e, b, buf);
			return;
		case J_STR:
			jj_sb_put(e, b, v->u.s->p, v->u.s->n);
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
	jj_step(e);
	switch (v->k)
	{
		case J_STR:
			{
				const char *s = v->u.s->p;
				size_t		n = v->u.s->n;
				char		q = (memchr(s, '\'', n) && !memchr(s, '"', n)) ? '"' : '\'';

				jj_sb_putc(e, b, q);
				for (size_t i = 0; i < n;)
				{
					size_t		adv;
					uint32_t	cp = u8_decode(s + i, n - i, &adv);
					char		esc[16];

					if (cp == (uint32_t) q || cp == '\\')
					{
						jj_sb_putc(e, b, '\\');
						jj_sb_putc(e, b, (char) cp);
					}
					else if (cp == '\n')
						jj_sb_puts(e, b, "\\n");
					else if (cp == '\r')
						jj_sb_puts(e, b, "\\r");
					else if (cp == '\t')
						jj_sb_puts(e, b, "\\t");
					else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD)
					{
						snprintf(esc, sizeof(esc), "\\x%02x", cp);
						jj_sb_puts(e, b, esc);
					}
					else if (cp == 0x2028 || cp == 0x2029)
					{
						snprintf(esc, sizeof(esc), "\\u%04x", cp);
						jj_sb_puts(e, b, esc);
					}
					else
						jj_sb_put(e, b, s + i, adv);
					i += adv;
				}
				jj_sb_putc(e, b, q);
				return;
			}
		case J_LIST:
			jj_sb_putc(e, b, v->u.l->tuple ? '(' : '[');
			for (size_t i = 0; i < v->u.l->n; i++)
			{
				if (i)
					jj_sb_puts(e, b, ", ");
				put_repr(e, b, &v->u.l->v[i], depth + 1);
			}
			if (v->u.l->tuple && v->u.l->n == 1)
				jj_sb_putc(e, b, ',');
			jj_sb_putc(e, b, v->u.l->tuple ? ')' : ']');
			return;
		case J_DICT:
		case J_NS:
			jj_sb_puts(e, b, v->k == J_NS ? "<Namespace {" : "{");
			for (size_t i = 0; i < v->u.d->n; i++)
			{
				if (i)
					jj_sb_puts(e, b, ", ");
				put_repr(e, b, &v->u.d->k[i], depth + 1);
				jj_sb_puts(e, b, ": ");
				put_repr(e, b, &v->u.d->v[i], depth + 1);
			}
			jj_sb_puts(e, b, v->k == J_NS ? "}>" : "}");
			return;
		case J_FUNC:
			jj_sb_puts(e, b, "<function ");
			jj_sb_puts(e, b, v->u.fn->name ? v->u.fn->name : "?");
			jj_sb_puts(e, b, ">");
			return;
		case J_UNDEF:
			jj_sb_puts(e, b, "Undefined");
			return;
		default:
			jj_put_str(e, b, v, depth);
	}
}

struct jstr *
jj_to_str(struct ev *e, const jval *v)
{
	struct sb	b = {0};

	if (v->k == J_STR)
		return v->u.s;
	jj_put_str(e, &b, v, 0);
	return jj_sb_val(e, &b).u.s;
}

static void
json_quote_sb(struct ev *e, struct sb *b, const char *s, size_t n)
{
	size_t		start = 0;

	jj_sb_putc(e, b, '"');
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
			jj_sb_put(e, b, s + start, i - start);
			jj_sb_puts(e, b, esc);
			start = i + 1;
		}
	}
	jj_sb_put(e, b, s + start, n - start);
	jj_sb_putc(e, b, '"');
}


void
jj_json_dump(struct ev *e, struct sb *b, const jval *v, const struct json_opts *o, int level)
{
	char		buf[64];

	if (level > e->max_depth)
		FAIL(e, "value nested too deeply for tojson");
	jj_step(e);
	switch (v->k)
	{
		case J_NONE:
			jj_sb_puts(e, b, "null");
			return;
		case J_BOOL:
			jj_sb_puts(e, b, v->u.b ? "true" : "false");
			return;
		case J_INT:
			snprintf(buf, sizeof(buf), "%lld", (long long) v->u.i);
			jj_sb_puts(e, b, buf);
			return;
		case J_FLOAT:
			if (isnan(v->u.f))
				jj_sb_puts(e, b, "NaN");
			else if (isinf(v->u.f))
				jj_sb_puts(e, b, v->u.f < 0 ? "-Infinity" : "Infinity");
			else
			{
				fmt_float(buf, sizeof(buf), v->u.f);
				jj_sb_puts(e, b, buf);
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
					jj_sb_puts(e, b, is_list ? "[]" : "{}");
					return;
				}
				if (!is_list)
				{
					order = jj_ealloc(e, n * sizeof(size_t));
					for (size_t i = 0; i < n; i++)
						order[i] = i;
					if (o->sort_keys)
					{
						/* insertion sort: small dicts */
						for (size_t i = 1; i < n; i++)
							for (size_t j = i; j > 0 &&
								 jj_val_cmp(e, &v->u.d->k[order[j - 1]], &v->u.d->k[order[j]]) > 0; j--)
							{
								size_t		t = order[j];

								order[j] = order[j - 1];
								order[j - 1] = t;
							}
					}
				}
				jj_sb_putc(e, b, is_list ? '[' : '{');
				for (size_t i = 0; i < n; i++)
				{
					if (i)
						jj_sb_puts(e, b, o->item_sep);
					if (o->indent >= 0)
					{
						jj_sb_putc(e, b, '\n');
						for (int k = 0; k < o->indent * (level + 1); k++)
							jj_sb_putc(e, b, ' ');
					}
					if (is_list)
						jj_json_dump(e, b, &v->u.l->v[i], o, level + 1);
					else
					{
						const jval *k = &v->u.d->k[order[i]];

						if (k->k == J_STR)
							json_quote_sb(e, b, k->u.s->p, k->u.s->n);
						else if (k->k == J_INT || k->k == J_FLOAT || k->k == J_BOOL || k->k == J_NONE)
						{
							jj_sb_putc(e, b, '"');
							jj_json_dump(e, b, k, o, level + 1);
							jj_sb_putc(e, b, '"');
						}
						else
							FAIL(e, "keys must be str, int, float, bool or None, not %s", jj_kind_name(k));
						jj_sb_puts(e, b, o->key_sep);
						jj_json_dump(e, b, &v->u.d->v[order[i]], o, level + 1);
					}
				}
				if (o->indent >= 0)
				{
					jj_sb_putc(e, b, '\n');
					for (int k = 0; k < o->indent * level; k++)
						jj_sb_putc(e, b, ' ');
				}
				jj_sb_putc(e, b, is_list ? ']' : '}');
				return;
			}
		default:
			FAIL(e, "Object of type %s is not JSON serializable", jj_kind_name(v));
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
						int			h = i + 1 + (size_t) k < p->i ? opus_hex_digit(p->s[i + 1 + k]) : -1;

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
							int			h = opus_hex_digit(p->s[i + 3 + k]);

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
								jval	   *old = jj_dict_find(d, &k);

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

bool
opus_jinja_json_is_object(const char *s, size_t n)
{
	struct opus_jinja_limits lim = {0};
	struct jarena ar = {0};
	jval		v;
	bool		ok;

	opus_jinja_limits_default(&lim);
	ar.limit = lim.max_memory;
	ok = jinja_json_parse(&ar, s, n, &v, lim.max_depth) && v.k == J_DICT;
	ja_free(&ar);
	return ok;
}

jval
jj_mk_func(struct ev *e, int kind, const char *name)
{
	jval		v = {0};

	v.k = J_FUNC;
	v.u.fn = jj_ealloc(e, sizeof(struct jfunc));
	v.u.fn->kind = kind;
	v.u.fn->name = name;
	return v;
}

