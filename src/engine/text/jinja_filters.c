/*
 * jinja_filters.c - the filters (x|trim, x|tojson ...) and tests (x is
 * defined ...) of the Jinja interpreter (jinja.h), with jinja2 3.1's
 * semantics and Hugging Face's tojson (json.dumps(ensure_ascii=False)).
 * The parser refuses names not listed here (jinja_known_filter / _test).
 */
#include "text/jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	return jj_in_names(test_names, name);
}

bool
jj_run_test(struct ev *e, const char *t, const jval *v, const struct args *a)
{
	const jval *x = jj_arg(a, 0, NULL);

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
		return jj_is_num(v);
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
		return jj_val_eq(v, x);
	}
	if (strcmp(t, "ne") == 0 || strcmp(t, "!=") == 0)
	{
		NEED_ARG();
		return !jj_val_eq(v, x);
	}
	if (strcmp(t, "lt") == 0 || strcmp(t, "<") == 0)
	{
		NEED_ARG();
		return jj_val_cmp(e, v, x) < 0;
	}
	if (strcmp(t, "le") == 0 || strcmp(t, "<=") == 0)
	{
		NEED_ARG();
		return jj_val_cmp(e, v, x) <= 0;
	}
	if (strcmp(t, "gt") == 0 || strcmp(t, ">") == 0)
	{
		NEED_ARG();
		return jj_val_cmp(e, v, x) > 0;
	}
	if (strcmp(t, "ge") == 0 || strcmp(t, ">=") == 0)
	{
		NEED_ARG();
		return jj_val_cmp(e, v, x) >= 0;
	}
	if (strcmp(t, "in") == 0)
	{
		NEED_ARG();
		return jj_contains(e, x, v);
	}
	if (strcmp(t, "odd") == 0 || strcmp(t, "even") == 0 || strcmp(t, "divisibleby") == 0)
	{
		int64_t		d = t[0] == 'd' ? jj_arg_int(e, a, 0, NULL, 1, t) : 2;
		int64_t		r;

		if (v->k != J_INT && v->k != J_BOOL)
			FAIL(e, "test '%s' needs an integer", t);
		if (d == 0)
			FAIL(e, "integer division or modulo by zero");
		r = jj_num_i(v) % d;
		return t[0] == 'o' ? r != 0 : r == 0;
	}
	if (strcmp(t, "lower") == 0 || strcmp(t, "upper") == 0)
	{
		struct jstr *s = jj_to_str(e, v);
		struct args none = {0};
		jval		sv = {0};

		sv.k = J_STR;
		sv.u.s = s;
		return jj_truthy((jval[]) {jj_call_method(e, &sv, t[0] == 'l' ? "islower" : "isupper", &none)});
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
	return jj_in_names(filter_names, name);
}


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
		jval		key = jj_mk_strn(e, path->p + i, end - i);
		bool		digits = end > i;

		for (size_t k = i; k < end; k++)
			if (path->p[k] < '0' || path->p[k] > '9')
				digits = false;
		if (digits)
			key = jj_mk_int(atoll(key.u.s->p));
		if (cur.k == J_UNDEF)
			return cur;
		cur = jj_get_item(e, &cur, &key);
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
		jval		la = jj_str_case(e, a->u.s, 1),
					lb = jj_str_case(e, b->u.s, 1);

		return jj_val_cmp(e, &la, &lb);
	}
	return jj_val_cmp(e, a, b);
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

			jj_step(e);
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
jval
jj_html_escape(struct ev *e, const jval *v)
{
	struct jstr *s;
	struct sb	b = {0};
	jval		r;

	if (v->k == J_STR && v->u.s->safe)
		return *v;
	s = jj_to_str(e, v);
	for (size_t i = 0; i < s->n; i++)
	{
		char		c = s->p[i];

		if (c == '&')
			jj_sb_puts(e, &b, "&amp;");
		else if (c == '<')
			jj_sb_puts(e, &b, "&lt;");
		else if (c == '>')
			jj_sb_puts(e, &b, "&gt;");
		else if (c == '"')
			jj_sb_puts(e, &b, "&#34;");
		else if (c == '\'')
			jj_sb_puts(e, &b, "&#39;");
		else
			jj_sb_putc(e, &b, c);
	}
	r = jj_sb_val(e, &b);
	r.u.s->safe = true;
	return r;
}

jval
jj_apply_filter(struct ev *e, const char *f, const jval *v, const struct args *a)
{
	jj_step(e);
	if (strcmp(f, "safe") == 0)
	{
		jval		r = {0};

		r.k = J_STR;
		r.u.s = jj_to_str(e, v);
		if (!r.u.s->safe)
		{
			r = jj_mk_strn(e, r.u.s->p, r.u.s->n);
			r.u.s->safe = true;
		}
		return r;
	}
	if (strcmp(f, "string") == 0)
	{
		jval		r = {0};

		r.k = J_STR;
		r.u.s = jj_to_str(e, v);
		return r;
	}
	if (strcmp(f, "trim") == 0)
	{
		const struct jstr *chars = jj_arg_str(e, a, 0, "chars", f);

		return jj_str_strip(e, jj_to_str(e, v), chars, 3);
	}
	if (strcmp(f, "upper") == 0)
		return jj_str_case(e, jj_to_str(e, v), 0);
	if (strcmp(f, "lower") == 0)
		return jj_str_case(e, jj_to_str(e, v), 1);
	if (strcmp(f, "title") == 0)
		return jj_str_case(e, jj_to_str(e, v), 2);
	if (strcmp(f, "capitalize") == 0)
		return jj_str_case(e, jj_to_str(e, v), 3);
	if (strcmp(f, "length") == 0 || strcmp(f, "count") == 0)
	{
		switch (v->k)
		{
			case J_UNDEF:
				return jj_mk_int(0);
			case J_STR:
				return jj_mk_int((int64_t) jj_cp_count(v->u.s->p, v->u.s->n));
			case J_LIST:
				return jj_mk_int((int64_t) v->u.l->n);
			case J_DICT:
			case J_NS:
				return jj_mk_int((int64_t) v->u.d->n);
			default:
				FAIL(e, "object of type '%s' has no len()", jj_kind_name(v));
		}
	}
	if (strcmp(f, "default") == 0 || strcmp(f, "d") == 0)
	{
		const jval *dv = jj_arg(a, 0, "default_value");
		bool		boolean = jj_arg_bool(a, 1, "boolean", false);

		if (v->k == J_UNDEF || (boolean && !jj_truthy(v)))
			return dv ? *dv : jj_mk_str(e, "");
		return *v;
	}
	if (strcmp(f, "tojson") == 0)
	{
		struct json_opts o = {-1, ", ", ": ", jj_arg_bool(a, -1, "sort_keys", false)};
		const jval *ind = jj_arg(a, 0, "indent");
		const jval *seps = jj_arg(a, -1, "separators");
		struct sb	b = {0};

		if (ind && ind->k != J_NONE)
		{
			if (ind->k != J_INT || ind->u.i < 0 || ind->u.i > 64)
				jj_ev_fail(e, OPUS_ERR_UNSUPPORTED, "tojson indent must be a small integer");
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
		if (jj_arg(a, -1, "ensure_ascii") && jj_truthy(jj_arg(a, -1, "ensure_ascii")))
			jj_ev_fail(e, OPUS_ERR_UNSUPPORTED, "tojson(ensure_ascii=true) is not supported");
		jj_json_dump(e, &b, v, &o, 0);
		return jj_sb_val(e, &b);
	}
	if (strcmp(f, "join") == 0)
	{
		const struct jstr *sep = jj_arg_str(e, a, 0, "d", f);
		const jval *attr = jj_arg(a, 1, "attribute");
		struct jlist *l = jj_iter_list(e, v);
		struct sb	b = {0};

		for (size_t i = 0; i < l->n; i++)
		{
			jval		x = l->v[i];

			if (i && sep)
				jj_sb_put(e, &b, sep->p, sep->n);
			if (attr && attr->k == J_STR)
				x = attr_path(e, &x, attr->u.s);
			jj_put_str(e, &b, &x, 0);
		}
		return jj_sb_val(e, &b);
	}
	if (strcmp(f, "replace") == 0)
	{
		const struct jstr *o = jj_arg_str(e, a, 0, "old", f),
				   *n = jj_arg_str(e, a, 1, "new", f);

		if (!o || !n)
			FAIL(e, "replace needs two string arguments");
		return jj_str_replace(e, jj_to_str(e, v), o, n, jj_arg_int(e, a, 2, "count", -1, f));
	}
	if (strcmp(f, "items") == 0)
	{
		struct args none = {0};

		if (v->k == J_UNDEF)
			return jj_list_val(jj_new_list(e, 0));
		if (v->k != J_DICT)
			FAIL(e, "can only get item pairs from a mapping");
		return jj_call_method(e, v, "items", &none);
	}
	if (strcmp(f, "dictsort") == 0)
	{
		bool		cs = jj_arg_bool(a, 0, "case_sensitive", false);
		const struct jstr *by = jj_arg_str(e, a, 1, "by", f);
		bool		rev = jj_arg_bool(a, 2, "reverse", false);
		bool		by_value = by && strcmp(by->p, "value") == 0;
		struct args none = {0};
		jval		items;
		jval	   *keys;
		struct jlist *l;

		if (v->k != J_DICT)
			FAIL(e, "dictsort needs a mapping");
		items = jj_call_method(e, v, "items", &none);
		l = items.u.l;
		keys = jj_ealloc(e, (l->n + 1) * sizeof(jval));
		for (size_t i = 0; i < l->n; i++)
			keys[i] = l->v[i].u.l->v[by_value ? 1 : 0];
		stable_sort(e, l->v, keys, l->n, cs, rev);
		return items;
	}
	if (strcmp(f, "list") == 0)
	{
		struct jlist *src = jj_iter_list(e, v),
				   *l = jj_new_list(e, src->n);

		for (size_t i = 0; i < src->n; i++)
			jj_list_push(e, l, src->v[i]);
		return jj_list_val(l);
	}
	if (strcmp(f, "first") == 0 || strcmp(f, "last") == 0)
	{
		struct jlist *l = jj_iter_list(e, v);

		if (l->n == 0)
			return jj_mk_undef();
		return f[0] == 'f' ? l->v[0] : l->v[l->n - 1];
	}
	if (strcmp(f, "reverse") == 0)
	{
		if (v->k == J_STR)
		{
			jval		m1 = jj_mk_int(-1);

			return jj_do_slice(e, v, NULL, NULL, &m1);
		}
		{
			struct jlist *src = jj_iter_list(e, v),
					   *l = jj_new_list(e, src->n);

			for (size_t i = src->n; i > 0; i--)
				jj_list_push(e, l, src->v[i - 1]);
			return jj_list_val(l);
		}
	}
	if (strcmp(f, "sort") == 0 || strcmp(f, "unique") == 0 || strcmp(f, "min") == 0 ||
		strcmp(f, "max") == 0)
	{
		bool		is_sort = f[0] == 's';
		bool		rev = is_sort ? jj_arg_bool(a, 0, "reverse", false) : false;
		bool		cs = jj_arg_bool(a, is_sort ? 1 : 0, "case_sensitive", false);
		const jval *attr = jj_arg(a, is_sort ? 2 : 1, "attribute");
		struct jlist *src = jj_iter_list(e, v),
				   *l = jj_new_list(e, src->n);
		jval	   *keys = jj_ealloc(e, (src->n + 1) * sizeof(jval));

		for (size_t i = 0; i < src->n; i++)
		{
			jval		k = src->v[i];

			if (attr && attr->k == J_STR)
				k = attr_path(e, &k, attr->u.s);
			if (!cs && k.k == J_STR)
				k = jj_str_case(e, k.u.s, 1);
			if (f[0] == 'u')
			{
				bool		seen = false;

				for (size_t j = 0; j < l->n && !seen; j++)
					seen = jj_val_eq(&keys[j], &k);
				if (seen)
					continue;
			}
			keys[l->n] = k;
			jj_list_push(e, l, src->v[i]);
		}
		if (f[0] == 'u')
			return jj_list_val(l);
		stable_sort(e, l->v, keys, l->n, true, rev);
		if (is_sort)
			return jj_list_val(l);
		if (l->n == 0)
			return jj_mk_undef();
		return strcmp(f, "min") == 0 ? l->v[0] : l->v[l->n - 1];
	}
	if (strcmp(f, "sum") == 0)
	{
		struct jlist *l = jj_iter_list(e, v);
		const jval *attr = jj_arg(a, 0, "attribute");
		const jval *start = jj_arg(a, 1, "start");
		int64_t		si = start && start->k == J_INT ? start->u.i : 0;
		double		sf = start && start->k == J_FLOAT ? start->u.f : 0;
		bool		flt = start && start->k == J_FLOAT;

		for (size_t i = 0; i < l->n; i++)
		{
			jval		x = l->v[i];

			if (attr && attr->k == J_STR)
				x = attr_path(e, &x, attr->u.s);
			if (!jj_is_num(&x))
				FAIL(e, "unsupported operand type(s) for +: 'int' and '%s'", jj_kind_name(&x));
			if (x.k == J_FLOAT)
				flt = true;
			sf += jj_num_f(&x);
			if (__builtin_add_overflow(si, jj_num_i(&x), &si))
				FAIL(e, "integer overflow");
		}
		return flt ? jj_mk_float(sf) : jj_mk_int(si);
	}
	if (strcmp(f, "select") == 0 || strcmp(f, "reject") == 0 ||
		strcmp(f, "selectattr") == 0 || strcmp(f, "rejectattr") == 0)
	{
		bool		by_attr = strstr(f, "attr") != NULL;
		bool		keep_true = f[0] == 's';
		int			ti = by_attr ? 1 : 0;
		const struct jstr *attr = by_attr ? jj_arg_str(e, a, 0, NULL, f) : NULL;
		const jval *tn = jj_arg(a, ti, NULL);
		struct jlist *src = jj_truthy(v) ? jj_iter_list(e, v) : jj_new_list(e, 0),
				   *l = jj_new_list(e, 0);
		struct args ta = {0};

		if (by_attr && !attr)
			FAIL(e, "%s needs an attribute name", f);
		if (tn && tn->k != J_STR)
			FAIL(e, "%s: the test name must be a string", f);
		if (tn && !jinja_known_test(tn->u.s->p))
			jj_ev_fail(e, OPUS_ERR_UNSUPPORTED, "unsupported test '%s'", tn->u.s->p);
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
			r = tn ? jj_run_test(e, tn->u.s->p, &x, &ta) : jj_truthy(&x);
			if (r == keep_true)
				jj_list_push(e, l, src->v[i]);
		}
		return jj_list_val(l);
	}
	if (strcmp(f, "map") == 0)
	{
		const jval *attr = jj_arg(a, -1, "attribute");
		const jval *dflt = jj_arg(a, -1, "default");
		struct jlist *src = jj_truthy(v) ? jj_iter_list(e, v) : jj_new_list(e, 0),
				   *l = jj_new_list(e, src->n);
		const jval *fname = jj_arg(a, 0, NULL);
		struct args fa = {0};

		if (!attr && (!fname || fname->k != J_STR))
			FAIL(e, "map needs a filter name or attribute=");
		if (!attr)
		{
			if (!jinja_known_filter(fname->u.s->p))
				jj_ev_fail(e, OPUS_ERR_UNSUPPORTED, "unsupported filter '%s'", fname->u.s->p);
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
				x = jj_apply_filter(e, fname->u.s->p, &src->v[i], &fa);
			jj_list_push(e, l, x);
		}
		return jj_list_val(l);
	}
	if (strcmp(f, "int") == 0 || strcmp(f, "float") == 0)
	{
		const jval *dv = jj_arg(a, 0, "default");
		bool		want_int = f[0] == 'i';

		if (v->k == J_INT || v->k == J_BOOL)
			return want_int ? jj_mk_int(jj_num_i(v)) : jj_mk_float(jj_num_f(v));
		if (v->k == J_FLOAT)
		{
			if (!want_int)
				return *v;
			if (!(v->u.f > -9.2e18 && v->u.f < 9.2e18))
				FAIL(e, "float too large for int");
			return jj_mk_int((int64_t) v->u.f);
		}
		if (v->k == J_STR)
		{
			char	   *end;
			const char *p = v->u.s->p;

			errno = 0;
			if (want_int)
			{
				long long	r = strtoll(p, &end, 10);

				while (*end && jj_py_space((unsigned char) *end))
					end++;
				if (end != p && *end == '\0' && errno == 0)
					return jj_mk_int(r);
				{
					double		d = strtod(p, &end);

					while (*end && jj_py_space((unsigned char) *end))
						end++;
					if (end != p && *end == '\0' && d > -9.2e18 && d < 9.2e18)
						return jj_mk_int((int64_t) d);
				}
			}
			else
			{
				double		d = strtod(p, &end);

				while (*end && jj_py_space((unsigned char) *end))
					end++;
				if (end != p && *end == '\0')
					return jj_mk_float(d);
			}
		}
		if (dv)
			return *dv;
		return want_int ? jj_mk_int(0) : jj_mk_float(0.0);
	}
	if (strcmp(f, "abs") == 0)
	{
		if (v->k == J_INT)
		{
			if (v->u.i == INT64_MIN)
				FAIL(e, "integer overflow");
			return jj_mk_int(v->u.i < 0 ? -v->u.i : v->u.i);
		}
		if (v->k == J_FLOAT)
			return jj_mk_float(fabs(v->u.f));
		if (v->k == J_BOOL)
			return jj_mk_int(v->u.b);
		FAIL(e, "bad operand type for abs(): '%s'", jj_kind_name(v));
	}
	if (strcmp(f, "round") == 0)
	{
		int64_t		prec = jj_arg_int(e, a, 0, "precision", 0, f);
		const struct jstr *method = jj_arg_str(e, a, 1, "method", f);
		double		x,
					m;

		if (!jj_is_num(v))
			FAIL(e, "round needs a number");
		if (prec < 0 || prec > 15)
			jj_ev_fail(e, OPUS_ERR_UNSUPPORTED, "round precision out of range");
		x = jj_num_f(v);
		m = pow(10.0, (double) prec);
		if (method && strcmp(method->p, "floor") == 0)
			return jj_mk_float(floor(x * m) / m);
		if (method && strcmp(method->p, "ceil") == 0)
			return jj_mk_float(ceil(x * m) / m);
		return jj_mk_float(rint(x * m) / m);
	}
	if (strcmp(f, "indent") == 0)
	{
		const jval *w = jj_arg(a, 0, "width");
		bool		first = jj_arg_bool(a, 1, "first", false);
		bool		blank = jj_arg_bool(a, 2, "blank", false);
		struct jstr *s = jj_to_str(e, v);
		struct sb	pad = {0},
					b = {0};
		bool		line_start = true;

		if (!w)
			jj_sb_puts(e, &pad, "    ");
		else if (w->k == J_STR)
			jj_sb_put(e, &pad, w->u.s->p, w->u.s->n);
		else
		{
			int64_t		n = jj_arg_int(e, a, 0, "width", 4, f);

			if (n < 0 || n > 1000)
				FAIL(e, "indent width out of range");
			for (int64_t i = 0; i < n; i++)
				jj_sb_putc(e, &pad, ' ');
		}
		for (size_t i = 0; i < s->n; i++)
		{
			if (line_start && (i > 0 || first))
			{
				bool		is_blank = s->p[i] == '\n';

				if (!is_blank || blank)
					jj_sb_put(e, &b, pad.p, pad.n);
			}
			jj_sb_putc(e, &b, s->p[i]);
			line_start = s->p[i] == '\n';
		}
		if (s->n == 0 && first && blank)
			jj_sb_put(e, &b, pad.p, pad.n);
		return jj_sb_val(e, &b);
	}
	if (strcmp(f, "escape") == 0 || strcmp(f, "e") == 0)
		return jj_html_escape(e, v);
	if (strcmp(f, "wordcount") == 0)
	{
		struct jstr *s = jj_to_str(e, v);
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
		return jj_mk_int(n);
	}
	jj_ev_fail(e, OPUS_ERR_UNSUPPORTED, "unsupported filter '%s'", f);
}

