/*
 * json_schema_emit.c - the GBNF side of the JSON Schema converter: the
 * rule table (rules reserved and named after their schema path, then
 * filled), the fixed primitive rules (value, string, number, space, date
 * and time formats...), JSON literals for enum / const, and the integer
 * and number ranges of minimum / maximum.  The schema walker that calls
 * them is json_schema.c.
 */
#include "text/json_schema_int.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
js_fail(struct conv *c, enum opus_status code, const char *fmt, const char *arg)
{
	if (c->st == OPUS_OK)
	{
		char		msg[200];

		snprintf(msg, sizeof(msg), fmt, arg);
		c->st = opus_error_set(c->err, code, "%s at %s", msg, c->path);
	}
	return -1;
}

size_t
js_path_push(struct conv *c, const char *seg, const char *key, size_t klen)
{
	size_t		old = c->pathlen;
	int			n;

	if (key != NULL)
		n = snprintf(c->path + old, sizeof(c->path) - old, "%s%.*s", seg,
					 (int) (klen > 60 ? 60 : klen), key);
	else
		n = snprintf(c->path + old, sizeof(c->path) - old, "%s", seg);
	if (n < 0 || old + (size_t) n >= sizeof(c->path))
	{
		c->path[sizeof(c->path) - 4] = '\0';
		strcat(c->path, "...");
		c->pathlen = strlen(c->path);
	}
	else
		c->pathlen = old + (size_t) n;
	return old;
}

void
js_path_pop(struct conv *c, size_t old)
{
	c->pathlen = old;
	c->path[old] = '\0';
}

struct rule *
js_rule_find(struct conv *c, const char *name)
{
	size_t		i;

	for (i = 0; i < c->nrules; i++)
		if (strcmp(c->rules[i].name, name) == 0)
			return &c->rules[i];
	return NULL;
}

/*
 * Reserve a rule named after hint (made unique with a number) and return
 * its index, or -1.
 */
long
js_rule_reserve(struct conv *c, const char *hint)
{
	char		base[80],
				name[96];
	size_t		i,
				o = 0;
	int			k = 0;

	for (i = 0; hint[i] && o < 63; i++)
	{
		char		ch = hint[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')))
			ch = '-';
		base[o++] = ch;
	}
	if (o == 0)
		base[o++] = 'r';
	base[o] = '\0';
	snprintf(name, sizeof(name), "%s", base);
	while (js_rule_find(c, name) != NULL)
		snprintf(name, sizeof(name), "%s-%d", base, ++k);
	if (c->nrules >= OPUS_JSON_SCHEMA_MAX_RULES)
	{
		js_fail(c, OPUS_ERR_CAPACITY, "schema needs more than %s grammar rules", "4096");
		return -1;
	}
	if (c->nrules == c->caprules)
	{
		size_t		cap = c->caprules ? c->caprules * 2 : 64;
		struct rule *r = realloc(c->rules, cap * sizeof(*r));

		if (r == NULL)
		{
			js_fail(c, OPUS_ERR_NOMEM, "out of memory%s", "");
			return -1;
		}
		c->rules = r;
		c->caprules = cap;
	}
	c->rules[c->nrules].name = strdup(name);
	c->rules[c->nrules].body = NULL;
	if (c->rules[c->nrules].name == NULL)
	{
		js_fail(c, OPUS_ERR_NOMEM, "out of memory%s", "");
		return -1;
	}
	return (long) c->nrules++;
}

/* Take b's text as rule idx's body. */
int
js_rule_set(struct conv *c, long idx, struct opus_gbnf_buf *b)
{
	if (b->failed)
	{
		js_fail(c, (enum opus_status) b->failed, "grammar larger than %s bytes", "1048576");
		opus_gbnf_buf_free(b);
		return -1;
	}
	c->rules[idx].body = b->s ? b->s : strdup("");
	memset(b, 0, sizeof(*b));
	return c->rules[idx].body ? 0 : js_fail(c, OPUS_ERR_NOMEM, "out of memory%s", "");
}

/* A fixed rule, added once.  Returns its name. */
const char *
js_prim(struct conv *c, const char *name)
{
	static const struct
	{
		const char *name;
		const char *body;
		const char *deps;
	}			prims[] =
	{
		{"space", "| \" \" | \"\\n\" [ \\t]{0,20}", ""},
		{"boolean", "(\"true\" | \"false\") space", "space"},
		{"null", "\"null\" space", "space"},
		{"integral-part", "[0] | [1-9] [0-9]{0,15}", ""},
		{"decimal-part", "[0-9]{1,16}", ""},
		{"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space",
		"integral-part decimal-part space"},
		{"integer", "(\"-\"? integral-part) space", "integral-part space"},
		{"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})", ""},
		{"string", "\"\\\"\" char* \"\\\"\" space", "char space"},
		{"value", "object | array | string | number | boolean | null",
		"object array string number boolean null"},
		{"object", "\"{\" space (string \":\" space value (\",\" space string \":\" space value)*)? \"}\" space",
		"string space value"},
		{"array", "\"[\" space (value (\",\" space value)*)? \"]\" space", "space value"},
		{"date", "[1-9] [0-9]{3} \"-\" (( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) "
			"| ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) "
		"| \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ))", ""},
		{"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
		"(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])", ""},
		{"uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}", ""},
		{"email", "[A-Za-z0-9._%+-]+ \"@\" [A-Za-z0-9-]+ (\".\" [A-Za-z0-9-]+)+", ""},
		{"date-string", "\"\\\"\" date \"\\\"\" space", "date space"},
		{"time-string", "\"\\\"\" time \"\\\"\" space", "time space"},
		{"date-time-string", "\"\\\"\" date \"T\" time \"\\\"\" space", "date time space"},
		{"uuid-string", "\"\\\"\" uuid \"\\\"\" space", "uuid space"},
		{"email-string", "\"\\\"\" email \"\\\"\" space", "email space"},
	};
	size_t		i;

	for (i = 0; i < sizeof(prims) / sizeof(prims[0]); i++)
	{
		char		deps[128],
				   *tok,
				   *save = NULL;
		long		idx;
		struct opus_gbnf_buf b = {0};

		if (strcmp(prims[i].name, name) != 0)
			continue;
		if (js_rule_find(c, name) != NULL)
			return prims[i].name;
		idx = js_rule_reserve(c, name);
		if (idx < 0)
			return NULL;
		opus_gbnf_buf_puts(&b, prims[i].body);
		if (js_rule_set(c, idx, &b) < 0)
			return NULL;
		snprintf(deps, sizeof(deps), "%s", prims[i].deps);
		for (tok = strtok_r(deps, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
			if (js_prim(c, tok) == NULL)
				return NULL;
		return prims[i].name;
	}
	js_fail(c, OPUS_ERR_INTERNAL, "no primitive rule %s", name);
	return NULL;
}

/* Append v as compact JSON text to b. */
static void
json_write(struct opus_gbnf_buf *b, const struct jv *v);

static void
json_write_str(struct opus_gbnf_buf *b, const char *s, size_t n)
{
	size_t		i;

	opus_gbnf_buf_put(b, "\"", 1);
	for (i = 0; i < n; i++)
	{
		unsigned char ch = (unsigned char) s[i];

		if (ch == '"' || ch == '\\')
		{
			char		e[2] = {'\\', (char) ch};

			opus_gbnf_buf_put(b, e, 2);
		}
		else if (ch == '\n')
			opus_gbnf_buf_puts(b, "\\n");
		else if (ch == '\r')
			opus_gbnf_buf_puts(b, "\\r");
		else if (ch == '\t')
			opus_gbnf_buf_puts(b, "\\t");
		else if (ch == '\b')
			opus_gbnf_buf_puts(b, "\\b");
		else if (ch == '\f')
			opus_gbnf_buf_puts(b, "\\f");
		else if (ch < 0x20)
			opus_gbnf_buf_printf(b, "\\u%04x", ch);
		else
			opus_gbnf_buf_put(b, &s[i], 1);
	}
	opus_gbnf_buf_put(b, "\"", 1);
}

static void
json_write(struct opus_gbnf_buf *b, const struct jv *v)
{
	size_t		i;

	switch (v->t)
	{
		case J_NULL:
			opus_gbnf_buf_puts(b, "null");
			break;
		case J_BOOL:
			opus_gbnf_buf_puts(b, v->b ? "true" : "false");
			break;
		case J_NUM:
			opus_gbnf_buf_put(b, v->raw, v->rawlen);
			break;
		case J_STR:
			json_write_str(b, v->str, v->slen);
			break;
		case J_ARR:
		case J_OBJ:
			opus_gbnf_buf_puts(b, v->t == J_ARR ? "[" : "{");
			for (i = 0; i < v->n; i++)
			{
				if (i)
					opus_gbnf_buf_puts(b, ",");
				if (v->t == J_OBJ)
				{
					json_write_str(b, v->keys[i], v->klens[i]);
					opus_gbnf_buf_puts(b, ":");
				}
				json_write(b, v->items[i]);
			}
			opus_gbnf_buf_puts(b, v->t == J_ARR ? "]" : "}");
			break;
	}
}

/* Append the GBNF literal of v's JSON text. */
void
js_put_literal(struct opus_gbnf_buf *b, const struct jv *v)
{
	struct opus_gbnf_buf t = {0};

	json_write(&t, v);
	if (t.failed)
		b->failed = t.failed;
	else
		opus_gbnf_buf_literal(b, t.s, t.len);
	opus_gbnf_buf_free(&t);
}

/* ---- integer ranges ---- */

#define NUM_LIMIT 1000000000000000LL	/* 10^15: bounds beyond are unsupported */

/* Digits of a .. b, both n digits long (strings), as a GBNF expression. */
static void
digits_range(struct opus_gbnf_buf *b, const char *lo, const char *hi, int n)
{
	int			i,
				all0 = 1,
				all9 = 1,
				dlo,
				dhi,
				first = 1;
	char		nines[24],
				zeros[24];

	if (n == 0)
		return;
	if (strncmp(lo, hi, (size_t) n) == 0)
	{
		opus_gbnf_buf_literal(b, lo, (size_t) n);
		return;
	}
	if (lo[0] == hi[0])
	{
		opus_gbnf_buf_literal(b, lo, 1);
		opus_gbnf_buf_puts(b, " ");
		digits_range(b, lo + 1, hi + 1, n - 1);
		return;
	}
	for (i = 1; i < n; i++)
	{
		if (lo[i] != '0')
			all0 = 0;
		if (hi[i] != '9')
			all9 = 0;
		nines[i - 1] = '9';
		zeros[i - 1] = '0';
	}
	nines[n - 1] = zeros[n - 1] = '\0';
	dlo = lo[0] - '0';
	dhi = hi[0] - '0';
	opus_gbnf_buf_puts(b, "(");
	if (!all0)
	{
		opus_gbnf_buf_literal(b, lo, 1);
		opus_gbnf_buf_puts(b, " ");
		digits_range(b, lo + 1, nines, n - 1);
		dlo++;
		first = 0;
	}
	if (!all9)
		dhi--;
	if (dlo <= dhi)
	{
		if (!first)
			opus_gbnf_buf_puts(b, " | ");
		if (dlo == dhi)
			opus_gbnf_buf_printf(b, "[%d]", dlo);
		else
			opus_gbnf_buf_printf(b, "[%d-%d]", dlo, dhi);
		if (n > 1)
			opus_gbnf_buf_printf(b, " [0-9]{%d}", n - 1);
		first = 0;
	}
	if (!all9)
	{
		if (!first)
			opus_gbnf_buf_puts(b, " | ");
		opus_gbnf_buf_literal(b, hi, 1);
		opus_gbnf_buf_puts(b, " ");
		digits_range(b, zeros, hi + 1, n - 1);
	}
	opus_gbnf_buf_puts(b, ")");
}

/* Non-negative integers in [lo, hi] (hi < 0: unbounded), no leading zeros. */
static void
uint_range(struct opus_gbnf_buf *b, long long lo, long long hi)
{
	char		slo[24],
				shi[24];
	int			nlo,
				nhi,
				len,
				first = 1;

	nlo = snprintf(slo, sizeof(slo), "%lld", lo);
	nhi = hi < 0 ? 16 : snprintf(shi, sizeof(shi), "%lld", hi);
	opus_gbnf_buf_puts(b, "(");
	for (len = nlo; len <= nhi && len <= 16; len++)
	{
		long long	a = 0,
					z = 9;
		char		sa[24],
					sz[24];
		int			k;

		if (len > 1)
		{
			a = 1;
			for (k = 1; k < len; k++)
			{
				a *= 10;
				z = z * 10 + 9;
			}
		}
		if (a < lo)
			a = lo;
		if (hi >= 0 && z > hi)
			z = hi;
		if (a > z)
			continue;
		if (hi < 0 && len > nlo)
		{
			/* every number of len digits and more: one rule */
			if (!first)
				opus_gbnf_buf_puts(b, " | ");
			opus_gbnf_buf_printf(b, "[1-9] [0-9]{%d,15}", len - 1);
			first = 0;
			break;
		}
		snprintf(sa, sizeof(sa), "%lld", a);
		snprintf(sz, sizeof(sz), "%lld", z);
		if (!first)
			opus_gbnf_buf_puts(b, " | ");
		digits_range(b, sa, sz, len);
		first = 0;
	}
	opus_gbnf_buf_puts(b, ")");
}

/* Read minimum / maximum (and exclusive ones when integer) into bd. */
int
js_read_bounds(struct conv *c, const struct jv *s, int integer, struct bounds *bd)
{
	static const char *const names[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
	int			i;

	memset(bd, 0, sizeof(*bd));
	for (i = 0; i < 4; i++)
	{
		const struct jv *v = js_get(s, names[i]);
		double		x;
		long long	k;

		if (v == NULL)
			continue;
		if (v->t == J_BOOL)
			return js_fail(c, OPUS_ERR_UNSUPPORTED, "boolean \"%s\" (draft 4) is not supported", names[i]);
		if (v->t != J_NUM)
			return js_fail(c, OPUS_ERR_INVALID_ARG, "\"%s\" must be a number", names[i]);
		x = v->num;
		if (!(fabs(x) < (double) NUM_LIMIT))
			return js_fail(c, OPUS_ERR_UNSUPPORTED, "\"%s\" beyond 10^15 is not supported", names[i]);
		if (!integer && (x != floor(x) || i >= 2))
			return js_fail(c, OPUS_ERR_UNSUPPORTED,
						 "\"%s\" on a number is supported only as an integer minimum or maximum",
						 names[i]);
		if (i == 0)
			k = (long long) ceil(x);
		else if (i == 1)
			k = (long long) floor(x);
		else if (i == 2)
			k = (long long) floor(x) + 1;
		else
			k = (long long) ceil(x) - 1;
		if (i % 2 == 0)
		{
			if (!bd->has_lo || k > bd->lo)
				bd->lo = k;
			bd->has_lo = 1;
		}
		else
		{
			if (!bd->has_hi || k < bd->hi)
				bd->hi = k;
			bd->has_hi = 1;
		}
	}
	if (bd->has_lo && bd->has_hi && bd->lo > bd->hi)
		return js_fail(c, OPUS_ERR_INVALID_ARG, "no %s lies between minimum and maximum",
					 integer ? "integer" : "number");
	return 0;
}

/* An integer or a number within bd, written to b (ends with "space"). */
void
js_number_range(struct conv *c, struct opus_gbnf_buf *b, const struct bounds *bd, int integer)
{
	const char *frac = " (\".\" decimal-part)?";
	int			first = 1;

	js_prim(c, "space");
	if (!integer)
		js_prim(c, "decimal-part");
	opus_gbnf_buf_puts(b, "(");
	/* negative values: "-" then a magnitude in [mlo, mhi] */
	if (!bd->has_lo || bd->lo < 0)
	{
		long long	mlo = (bd->has_hi && bd->hi < 0) ? -bd->hi : (integer ? 1 : 0);
		long long	mhi = bd->has_lo ? -bd->lo : -1;

		opus_gbnf_buf_puts(b, "\"-\" ");
		if (integer)
			uint_range(b, mlo, mhi);
		else if (mhi < 0)
		{
			uint_range(b, mlo, -1);
			opus_gbnf_buf_puts(b, frac);
		}
		else
		{
			opus_gbnf_buf_puts(b, "(");
			if (mlo <= mhi - 1)
			{
				uint_range(b, mlo, mhi - 1);
				opus_gbnf_buf_puts(b, frac);
				opus_gbnf_buf_puts(b, " | ");
			}
			opus_gbnf_buf_printf(b, "\"%lld\" (\".\" \"0\"{1,16})?)", mhi);
		}
		first = 0;
	}
	if (!bd->has_hi || bd->hi >= 0)
	{
		long long	lo = (bd->has_lo && bd->lo > 0) ? bd->lo : 0;
		long long	hi = bd->has_hi ? bd->hi : -1;

		if (!first)
			opus_gbnf_buf_puts(b, " | ");
		if (integer)
			uint_range(b, lo, hi);
		else if (hi < 0)
		{
			uint_range(b, lo, -1);
			opus_gbnf_buf_puts(b, frac);
		}
		else
		{
			opus_gbnf_buf_puts(b, "(");
			if (lo <= hi - 1)
			{
				uint_range(b, lo, hi - 1);
				opus_gbnf_buf_puts(b, frac);
				opus_gbnf_buf_puts(b, " | ");
			}
			opus_gbnf_buf_printf(b, "\"%lld\" (\".\" \"0\"{1,16})?)", hi);
		}
	}
	opus_gbnf_buf_puts(b, ") space");
}
