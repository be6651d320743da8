/*
 * jinja_methods.c - attribute, item and slice access of the Jinja
 * interpreter (jinja.h), and the Python methods and global functions
 * templates call: str.strip / split / startswith / format ..., dict.get /
 * items ..., range, namespace, raise_exception, strftime_now.
 *
 * Attribute access is jinja2's sandboxed getattr: a dict's methods first
 * (d.items), then its keys; x[key] tries the key first.  The sandbox is
 * immutable: list.append, dict.update and the like are errors when called.
 */
#include "text/jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const jj_global_fns[] = {
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

bool
jj_in_names(const char *const *names, const char *s)
{
	for (int i = 0; names[i]; i++)
		if (strcmp(names[i], s) == 0)
			return true;
	return false;
}

static jval
bound(struct ev *e, const jval *self, const char *name)
{
	jval		f = jj_mk_func(e, FN_METHOD, name);

	f.u.fn->self = *self;
	return f;
}

jval
jj_get_attr(struct ev *e, const jval *obj, const char *name)
{
	switch (obj->k)
	{
		case J_UNDEF:
			FAIL(e, "'%s' is undefined (attribute of an undefined value)", name);
		case J_DICT:
			if (jj_in_names(dict_methods, name))
				return bound(e, obj, name);
			/* FALLTHROUGH */
		case J_NS:
			{
				jval	   *v = jj_dict_find_str(obj->u.d, name, strlen(name));

				return v ? *v : jj_mk_undef();
			}
		case J_STR:
			if (jj_in_names(str_methods, name))
				return bound(e, obj, name);
			return jj_mk_undef();
		case J_LIST:
			if (jj_in_names(list_methods, name))
				return bound(e, obj, name);
			return jj_mk_undef();
		default:
			return jj_mk_undef();
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

jval
jj_get_item(struct ev *e, const jval *obj, const jval *key)
{
	bool		ok;

	switch (obj->k)
	{
		case J_UNDEF:
			FAIL(e, "item of an undefined value");
		case J_DICT:
		case J_NS:
			{
				jval	   *v = jj_dict_find(obj->u.d, key);

				if (v)
					return *v;
				if (key->k == J_STR && obj->k == J_DICT)
					return jj_get_attr(e, obj, key->u.s->p);
				return jj_mk_undef();
			}
		case J_LIST:
			if (key->k == J_INT || key->k == J_BOOL)
			{
				int64_t		i = norm_index(jj_num_i(key), obj->u.l->n, &ok);

				return ok ? obj->u.l->v[i] : jj_mk_undef();
			}
			if (key->k == J_STR)
				return jj_get_attr(e, obj, key->u.s->p);
			return jj_mk_undef();
		case J_STR:
			if (key->k == J_INT || key->k == J_BOOL)
			{
				size_t		n = jj_cp_count(obj->u.s->p, obj->u.s->n);
				int64_t		i = norm_index(jj_num_i(key), n, &ok);
				size_t		a,
							b;

				if (!ok)
					return jj_mk_undef();
				a = jj_cp_offset(obj->u.s->p, obj->u.s->n, (size_t) i);
				b = a + jj_u8_len((unsigned char) obj->u.s->p[a]);
				if (b > obj->u.s->n)
					b = obj->u.s->n;
				return jj_mk_strn(e, obj->u.s->p + a, b - a);
			}
			if (key->k == J_STR)
				return jj_get_attr(e, obj, key->u.s->p);
			return jj_mk_undef();
		default:
			return jj_mk_undef();
	}
}

static int64_t
slice_arg(struct ev *e, const jval *v, int64_t dflt)
{
	if (v == NULL || v->k == J_NONE || v->k == J_UNDEF)
		return dflt;
	if (v->k != J_INT && v->k != J_BOOL)
		FAIL(e, "slice indices must be integers or None");
	return jj_num_i(v);
}

jval
jj_do_slice(struct ev *e, const jval *obj, const jval *lo, const jval *hi, const jval *st)
{
	int64_t		jj_step = slice_arg(e, st, 1);
	int64_t		n,
				a,
				b;
	bool		is_str = obj->k == J_STR;
	size_t	   *offs = NULL;

	if (jj_step == 0)
		FAIL(e, "slice step cannot be zero");
	if (obj->k == J_LIST)
		n = (int64_t) obj->u.l->n;
	else if (is_str)
		n = (int64_t) jj_cp_count(obj->u.s->p, obj->u.s->n);
	else if (obj->k == J_UNDEF)
		FAIL(e, "slice of an undefined value");
	else
		FAIL(e, "'%s' object is not subscriptable", jj_kind_name(obj));
	if (jj_step > 0)
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
		offs = jj_ealloc(e, ((size_t) n + 1) * sizeof(size_t));
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
		if (jj_step == 1)
			return jj_mk_strn(e, obj->u.s->p + offs[a], a < b ? offs[b] - offs[a] : 0);
		{
			struct sb	s = {0};

			for (int64_t i = a; jj_step > 0 ? i < b : i > b; i += jj_step)
				jj_sb_put(e, &s, obj->u.s->p + offs[i], offs[i + 1] - offs[i]);
			return jj_sb_val(e, &s);
		}
	}
	{
		struct jlist *l = jj_new_list(e, 0);

		for (int64_t i = a; jj_step > 0 ? i < b : i > b; i += jj_step)
			jj_list_push(e, l, obj->u.l->v[i]);
		l->tuple = obj->u.l->tuple;
		return jj_list_val(l);
	}
}

/* list of the items `for` iterates over */
struct jlist *
jj_iter_list(struct ev *e, const jval *v)
{
	struct jlist *l;

	switch (v->k)
	{
		case J_UNDEF:
			return jj_new_list(e, 0);
		case J_LIST:
			return v->u.l;
		case J_DICT:
			l = jj_new_list(e, v->u.d->n);
			for (size_t i = 0; i < v->u.d->n; i++)
				jj_list_push(e, l, v->u.d->k[i]);
			return l;
		case J_STR:
			l = jj_new_list(e, 0);
			for (size_t i = 0; i < v->u.s->n;)
			{
				size_t		k = jj_u8_len((unsigned char) v->u.s->p[i]);

				if (i + k > v->u.s->n)
					k = v->u.s->n - i;
				jj_list_push(e, l, jj_mk_strn(e, v->u.s->p + i, k));
				i += k;
			}
			return l;
		default:
			FAIL(e, "'%s' object is not iterable", jj_kind_name(v));
	}
}

bool
jj_contains(struct ev *e, const jval *hay, const jval *needle)
{
	switch (hay->k)
	{
		case J_STR:
			if (needle->k != J_STR)
				FAIL(e, "'in <string>' requires string as left operand, not %s", jj_kind_name(needle));
			return needle->u.s->n == 0 ||
				memmem(hay->u.s->p, hay->u.s->n, needle->u.s->p, needle->u.s->n) != NULL;
		case J_LIST:
			for (size_t i = 0; i < hay->u.l->n; i++)
				if (jj_val_eq(&hay->u.l->v[i], needle))
					return true;
			return false;
		case J_DICT:
		case J_NS:
			return jj_dict_find(hay->u.d, needle) != NULL;
		case J_UNDEF:
			return false;
		default:
			FAIL(e, "argument of type '%s' is not iterable", jj_kind_name(hay));
	}
}

/* ------------------------------------------------------ string helpers */

bool
jj_py_space(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* strip: which 1 left, 2 right, 3 both; chars NULL = whitespace */
jval
jj_str_strip(struct ev *e, const struct jstr *s, const struct jstr *chars, int which)
{
	size_t		a = 0,
				b = s->n;

#define STRIPPABLE(c) (chars ? memchr(chars->p, (c), chars->n) != NULL : jj_py_space((unsigned char) (c)))
	if (which & 1)
		while (a < b && STRIPPABLE(s->p[a]))
			a++;
	if (which & 2)
		while (b > a && STRIPPABLE(s->p[b - 1]))
			b--;
#undef STRIPPABLE
	return jj_mk_strn(e, s->p + a, b - a);
}

jval
jj_str_case(struct ev *e, const struct jstr *s, int mode)
{
	jval		r = jj_mk_strn(e, s->p, s->n);
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

jval
jj_str_replace(struct ev *e, const struct jstr *s, const struct jstr *old, const struct jstr *nw,
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
				jj_sb_put(e, &b, nw->p, nw->n);
				k++;
			}
			if (i >= s->n)
				break;
			{
				size_t		l = jj_u8_len((unsigned char) s->p[i]);

				if (i + l > s->n)
					l = s->n - i;
				jj_sb_put(e, &b, s->p + i, l);
				i += l;
			}
			jj_step(e);
		}
		return jj_sb_val(e, &b);
	}
	while (i < s->n)
	{
		const char *hit = count == 0 ? NULL : memmem(s->p + i, s->n - i, old->p, old->n);

		if (!hit)
			break;
		jj_sb_put(e, &b, s->p + i, (size_t) (hit - (s->p + i)));
		jj_sb_put(e, &b, nw->p, nw->n);
		i = (size_t) (hit - s->p) + old->n;
		if (count > 0)
			count--;
		jj_step(e);
	}
	jj_sb_put(e, &b, s->p + i, s->n - i);
	return jj_sb_val(e, &b);
}

static jval
str_split(struct ev *e, const struct jstr *s, const struct jstr *sep, int64_t maxsplit, bool right)
{
	struct jlist *l = jj_new_list(e, 0);

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
			struct jlist *r = jj_new_list(e, 0);
			size_t		end = n;

			while (end > 0 && jj_py_space((unsigned char) s->p[end - 1]))
				end--;
			while (end > 0)
			{
				size_t		st = end;

				if (maxsplit >= 0 && (int64_t) r->n == maxsplit)
				{
					jj_list_push(e, r, jj_mk_strn(e, s->p, end));
					break;
				}
				while (st > 0 && !jj_py_space((unsigned char) s->p[st - 1]))
					st--;
				jj_list_push(e, r, jj_mk_strn(e, s->p + st, end - st));
				end = st;
				while (end > 0 && jj_py_space((unsigned char) s->p[end - 1]))
					end--;
			}
			for (size_t k = r->n; k > 0; k--)
				jj_list_push(e, l, r->v[k - 1]);
			return jj_list_val(l);
		}
		while (i < n)
		{
			size_t		st;

			while (i < n && jj_py_space((unsigned char) s->p[i]))
				i++;
			if (i >= n)
				break;
			if (maxsplit >= 0 && (int64_t) l->n == maxsplit)
			{
				size_t		end = n;

				while (end > i && jj_py_space((unsigned char) s->p[end - 1]))
					end--;
				jj_list_push(e, l, jj_mk_strn(e, s->p + i, end - i));
				break;
			}
			st = i;
			while (i < n && !jj_py_space((unsigned char) s->p[i]))
				i++;
			jj_list_push(e, l, jj_mk_strn(e, s->p + st, i - st));
		}
		return jj_list_val(l);
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
				jj_list_push(e, l, jj_mk_strn(e, s->p + start, cuts[c] - start));
				start = cuts[c] + sep->n;
			}
			jj_list_push(e, l, jj_mk_strn(e, s->p + start, s->n - start));
		}
		return jj_list_val(l);
	}
	{
		size_t		i = 0;

		for (;;)
		{
			const char *hit = (maxsplit >= 0 && (int64_t) l->n >= maxsplit) ? NULL :
				memmem(s->p + i, s->n - i, sep->p, sep->n);

			jj_step(e);
			if (!hit)
			{
				jj_list_push(e, l, jj_mk_strn(e, s->p + i, s->n - i));
				break;
			}
			jj_list_push(e, l, jj_mk_strn(e, s->p + i, (size_t) (hit - (s->p + i))));
			i = (size_t) (hit - s->p) + sep->n;
		}
	}
	return jj_list_val(l);
}

/* ------------------------------------------------------------ calling */


/* argument i, or keyword name, or NULL */
const jval *
jj_arg(const struct args *a, int i, const char *name)
{
	if (i >= 0 && i < a->npos)
		return &a->pos[i];
	if (name)
		for (int k = 0; k < a->nk; k++)
			if (strcmp(a->kn[k], name) == 0)
				return &a->kv[k];
	return NULL;
}

const struct jstr *
jj_arg_str(struct ev *e, const struct args *a, int i, const char *name, const char *what)
{
	const jval *v = jj_arg(a, i, name);

	if (!v || v->k == J_NONE)
		return NULL;
	if (v->k != J_STR)
		FAIL(e, "%s expects a string argument, not %s", what, jj_kind_name(v));
	return v->u.s;
}

int64_t
jj_arg_int(struct ev *e, const struct args *a, int i, const char *name, int64_t dflt, const char *what)
{
	const jval *v = jj_arg(a, i, name);

	if (!v || v->k == J_NONE)
		return dflt;
	if (v->k != J_INT && v->k != J_BOOL)
		FAIL(e, "%s expects an integer argument, not %s", what, jj_kind_name(v));
	return jj_num_i(v);
}

bool
jj_arg_bool(const struct args *a, int i, const char *name, bool dflt)
{
	const jval *v = jj_arg(a, i, name);

	return v ? jj_truthy(v) : dflt;
}


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
			 suffix ? "endswith" : "startswith", jj_kind_name(p));
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
			jj_sb_putc(e, &b, '{');
			i++;
		}
		else if (c == '}' && i + 1 < f->n && f->p[i + 1] == '}')
		{
			jj_sb_putc(e, &b, '}');
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
				jj_ev_fail(e, OPUS_ERR_UNSUPPORTED, "format specifications are not supported");
			if (fl == 0)
				v = jj_arg(a, auto_idx++, NULL);
			else if (name[0] >= '0' && name[0] <= '9')
				v = jj_arg(a, atoi(name), NULL);
			else
				v = jj_arg(a, -1, name);
			if (!v)
				FAIL(e, "format: missing argument '%s'", name);
			jj_put_str(e, &b, v, 0);
			i += fl + 1;
		}
		else
			jj_sb_putc(e, &b, c);
	}
	return jj_sb_val(e, &b);
}

jval
jj_call_method(struct ev *e, const jval *self, const char *m, const struct args *a)
{
	if (self->k == J_STR)
	{
		const struct jstr *s = self->u.s;

		if (strcmp(m, "strip") == 0 || strcmp(m, "lstrip") == 0 || strcmp(m, "rstrip") == 0)
			return jj_str_strip(e, s, jj_arg_str(e, a, 0, "chars", m), m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
		if (strcmp(m, "split") == 0 || strcmp(m, "rsplit") == 0)
			return str_split(e, s, jj_arg_str(e, a, 0, "sep", m), jj_arg_int(e, a, 1, "maxsplit", -1, m),
							 m[0] == 'r');
		if (strcmp(m, "startswith") == 0 || strcmp(m, "endswith") == 0)
		{
			const jval *p = jj_arg(a, 0, NULL);

			if (!p)
				FAIL(e, "%s takes at least 1 argument", m);
			return jj_mk_bool(prefix_match(e, s, p, m[0] == 'e'));
		}
		if (strcmp(m, "upper") == 0)
			return jj_str_case(e, s, 0);
		if (strcmp(m, "lower") == 0)
			return jj_str_case(e, s, 1);
		if (strcmp(m, "title") == 0)
			return jj_str_case(e, s, 2);
		if (strcmp(m, "capitalize") == 0)
			return jj_str_case(e, s, 3);
		if (strcmp(m, "replace") == 0)
		{
			const struct jstr *o = jj_arg_str(e, a, 0, NULL, m),
					   *n = jj_arg_str(e, a, 1, NULL, m);

			if (!o || !n)
				FAIL(e, "replace takes 2 string arguments");
			return jj_str_replace(e, s, o, n, jj_arg_int(e, a, 2, "count", -1, m));
		}
		if (strcmp(m, "find") == 0 || strcmp(m, "rfind") == 0 || strcmp(m, "count") == 0)
		{
			const struct jstr *x = jj_arg_str(e, a, 0, NULL, m);
			int64_t		res = -1,
						cnt = 0;

			if (!x)
				FAIL(e, "%s takes a string argument", m);
			for (size_t i = 0; i + x->n <= s->n; i++)
				if (memcmp(s->p + i, x->p, x->n) == 0)
				{
					if (res < 0 || m[0] == 'r')
						res = (int64_t) jj_cp_count(s->p, i);
					cnt++;
					if (m[0] == 'f')
						break;
					if (m[0] == 'c' && x->n)
						i += x->n - 1;
				}
			return jj_mk_int(m[0] == 'c' ? cnt : res);
		}
		if (strcmp(m, "format") == 0)
			return str_format(e, s, a);
		if (strcmp(m, "join") == 0)
		{
			const jval *it = jj_arg(a, 0, NULL);
			struct jlist *l;
			struct sb	b = {0};

			if (!it)
				FAIL(e, "join takes 1 argument");
			l = jj_iter_list(e, it);
			for (size_t i = 0; i < l->n; i++)
			{
				if (l->v[i].k != J_STR)
					FAIL(e, "sequence item %zu: expected str instance, %s found", i, jj_kind_name(&l->v[i]));
				if (i)
					jj_sb_put(e, &b, s->p, s->n);
				jj_sb_put(e, &b, l->v[i].u.s->p, l->v[i].u.s->n);
			}
			return jj_sb_val(e, &b);
		}
		if (strcmp(m, "splitlines") == 0)
		{
			struct jlist *l = jj_new_list(e, 0);
			size_t		st = 0;

			for (size_t i = 0; i < s->n; i++)
				if (s->p[i] == '\n' || s->p[i] == '\r')
				{
					jj_list_push(e, l, jj_mk_strn(e, s->p + st, i - st));
					if (s->p[i] == '\r' && i + 1 < s->n && s->p[i + 1] == '\n')
						i++;
					st = i + 1;
				}
			if (st < s->n)
				jj_list_push(e, l, jj_mk_strn(e, s->p + st, s->n - st));
			return jj_list_val(l);
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
					(strcmp(m, "isspace") == 0 && !jj_py_space(c)) ||
					(strcmp(m, "isupper") == 0 && lo) ||
					(strcmp(m, "islower") == 0 && up))
					ok = false;
			}
			if (strcmp(m, "isupper") == 0 || strcmp(m, "islower") == 0)
				ok = any_cased && ok;
			return jj_mk_bool(ok);
		}
	}
	else if (self->k == J_DICT)
	{
		const struct jdict *d = self->u.d;

		if (strcmp(m, "get") == 0)
		{
			const jval *k = jj_arg(a, 0, NULL),
					   *dflt = jj_arg(a, 1, "default");
			jval	   *v;

			if (!k)
				FAIL(e, "get expected at least 1 argument");
			v = jj_dict_find(d, k);
			return v ? *v : dflt ? *dflt : jj_mk_none();
		}
		if (strcmp(m, "keys") == 0 || strcmp(m, "values") == 0 || strcmp(m, "items") == 0)
		{
			struct jlist *l = jj_new_list(e, d->n);

			for (size_t i = 0; i < d->n; i++)
			{
				if (m[0] == 'k')
					jj_list_push(e, l, d->k[i]);
				else if (m[0] == 'v')
					jj_list_push(e, l, d->v[i]);
				else
				{
					struct jlist *t = jj_new_list(e, 2);

					t->tuple = true;
					jj_list_push(e, t, d->k[i]);
					jj_list_push(e, t, d->v[i]);
					jj_list_push(e, l, jj_list_val(t));
				}
			}
			return jj_list_val(l);
		}
		if (strcmp(m, "copy") == 0)
		{
			struct jdict *c = jj_new_dict(e);

			for (size_t i = 0; i < d->n; i++)
				jj_dict_set(e, c, d->k[i], d->v[i]);
			return jj_dict_val(c, J_DICT);
		}
	}
	else if (self->k == J_LIST)
	{
		const struct jlist *l = self->u.l;
		const jval *x = jj_arg(a, 0, NULL);

		if (strcmp(m, "index") == 0 || strcmp(m, "count") == 0)
		{
			int64_t		cnt = 0;

			if (!x)
				FAIL(e, "%s takes exactly one argument", m);
			for (size_t i = 0; i < l->n; i++)
				if (jj_val_eq(&l->v[i], x))
				{
					if (m[0] == 'i')
						return jj_mk_int((int64_t) i);
					cnt++;
				}
			if (m[0] == 'i')
				FAIL(e, "value is not in list");
			return jj_mk_int(cnt);
		}
		if (strcmp(m, "copy") == 0)
		{
			struct jlist *c = jj_new_list(e, l->n);

			for (size_t i = 0; i < l->n; i++)
				jj_list_push(e, c, l->v[i]);
			return jj_list_val(c);
		}
	}
	FAIL(e, "access to attribute '%s' of '%s' object is unsafe", m, jj_kind_name(self));
}

/* ---------------------------------------------------------- globals */

jval
jj_call_global(struct ev *e, const char *name, const struct args *a)
{
	if (strcmp(name, "range") == 0)
	{
		int64_t		start = 0,
					stop,
					stp = 1;
		struct jlist *l;

		if (a->npos == 1)
			stop = jj_arg_int(e, a, 0, NULL, 0, name);
		else if (a->npos >= 2)
		{
			start = jj_arg_int(e, a, 0, NULL, 0, name);
			stop = jj_arg_int(e, a, 1, NULL, 0, name);
			stp = jj_arg_int(e, a, 2, NULL, 1, name);
		}
		else
			FAIL(e, "range expected at least 1 argument");
		if (stp == 0)
			FAIL(e, "range() arg 3 must not be zero");
		l = jj_new_list(e, 0);
		for (int64_t i = start; stp > 0 ? i < stop : i > stop; i += stp)
		{
			jj_step(e);
			jj_list_push(e, l, jj_mk_int(i));
		}
		return jj_list_val(l);
	}
	if (strcmp(name, "namespace") == 0 || strcmp(name, "dict") == 0)
	{
		struct jdict *d = jj_new_dict(e);

		for (int i = 0; i < a->npos; i++)
		{
			if (a->pos[i].k != J_DICT)
				FAIL(e, "%s() takes keyword arguments or a dict", name);
			for (size_t k = 0; k < a->pos[i].u.d->n; k++)
				jj_dict_set(e, d, a->pos[i].u.d->k[k], a->pos[i].u.d->v[k]);
		}
		for (int k = 0; k < a->nk; k++)
			jj_dict_set(e, d, jj_mk_str(e, a->kn[k]), a->kv[k]);
		return jj_dict_val(d, name[0] == 'n' ? J_NS : J_DICT);
	}
	if (strcmp(name, "raise_exception") == 0)
	{
		const jval *m = jj_arg(a, 0, "message");
		struct jstr *s = m ? jj_to_str(e, m) : NULL;

		FAIL(e, "raise_exception: %s", s ? s->p : "");
	}
	if (strcmp(name, "strftime_now") == 0)
	{
		const struct jstr *f = jj_arg_str(e, a, 0, "format", name);
		struct tm	tm;
		char		buf[512];
		size_t		n;

		if (!f)
			FAIL(e, "strftime_now expects a format string");
		if (f->n > 200)
			FAIL(e, "strftime_now format too long");
		gmtime_r(&e->now, &tm);
		n = strftime(buf, sizeof(buf), f->p, &tm);
		return jj_mk_strn(e, buf, n);
	}
	FAIL(e, "'%s' is not callable", name);
}

