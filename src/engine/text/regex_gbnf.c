/*
 * regex_gbnf.c - a regular expression (the subset regex_gbnf.h lists) as a
 * GBNF expression, label choices as a grammar of alternatives, and the text
 * builder both converters use.
 *
 * Untrusted input: the expression comes from a SQL argument or a JSON
 * Schema.  It is read once, left to right, by a recursive-descent parser
 * whose depth is bounded (OPUS_REGEX_MAX_DEPTH); every output goes through
 * struct opus_gbnf_buf, capped at OPUS_GBNF_MAX_BYTES.  Code points are
 * decoded from UTF-8; invalid UTF-8 is an error, never a guess.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/regex_gbnf.h"
#include "text/unicode.h"

/* ------------------------------------------------------------------ */
/* the builder */

void
opus_gbnf_buf_put(struct opus_gbnf_buf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (n > OPUS_GBNF_MAX_BYTES || b->len + n > OPUS_GBNF_MAX_BYTES)
	{
		b->failed = OPUS_ERR_CAPACITY;
		return;
	}
	if (b->len + n + 1 > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 256;
		char	   *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->s, cap);
		if (p == NULL)
		{
			b->failed = OPUS_ERR_NOMEM;
			return;
		}
		b->s = p;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

void
opus_gbnf_buf_puts(struct opus_gbnf_buf *b, const char *s)
{
	opus_gbnf_buf_put(b, s, strlen(s));
}

void
opus_gbnf_buf_printf(struct opus_gbnf_buf *b, const char *fmt,...)
{
	char		tmp[512];
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= sizeof(tmp))
	{
		if (!b->failed)
			b->failed = OPUS_ERR_INTERNAL;
		return;
	}
	opus_gbnf_buf_put(b, tmp, (size_t) n);
}

void
opus_gbnf_buf_literal(struct opus_gbnf_buf *b, const char *s, size_t n)
{
	size_t		i;

	opus_gbnf_buf_put(b, "\"", 1);
	for (i = 0; i < n; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == '"' || c == '\\')
		{
			char		e[2] = {'\\', (char) c};

			opus_gbnf_buf_put(b, e, 2);
		}
		else if (c < 0x20 || c == 0x7f)
			opus_gbnf_buf_printf(b, "\\x%02X", c);
		else
			opus_gbnf_buf_put(b, (const char *) &s[i], 1);
	}
	opus_gbnf_buf_put(b, "\"", 1);
}

void
opus_gbnf_buf_free(struct opus_gbnf_buf *b)
{
	free(b->s);
	memset(b, 0, sizeof(*b));
}

/*
 * Decode one UTF-8 code point at s[*i] (n bytes in all); advance *i.
 * Returns the code point, or -1 for invalid UTF-8 (overlong, surrogate,
 * truncated, above U+10FFFF).
 */
static int32_t
utf8_next(const char *s, size_t n, size_t *i)
{
	const unsigned char *u = (const unsigned char *) s;
	size_t		k = *i;
	int32_t		cp;
	int			more,
				j;

	if (u[k] < 0x80)
	{
		*i = k + 1;
		return u[k];
	}
	if ((u[k] & 0xE0) == 0xC0)
	{
		cp = u[k] & 0x1F;
		more = 1;
	}
	else if ((u[k] & 0xF0) == 0xE0)
	{
		cp = u[k] & 0x0F;
		more = 2;
	}
	else if ((u[k] & 0xF8) == 0xF0)
	{
		cp = u[k] & 0x07;
		more = 3;
	}
	else
		return -1;
	if (k + (size_t) more >= n)
		return -1;
	for (j = 1; j <= more; j++)
	{
		if ((u[k + j] & 0xC0) != 0x80)
			return -1;
		cp = (cp << 6) | (u[k + j] & 0x3F);
	}
	if ((more == 1 && cp < 0x80) || (more == 2 && cp < 0x800) || (more == 3 && cp < 0x10000) ||
		cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return -1;
	*i = k + (size_t) more + 1;
	return cp;
}

static void
put_utf8(struct opus_gbnf_buf *b, int32_t cp)
{
	char		t[4];
	size_t		n;

	if (cp < 0x80)
	{
		t[0] = (char) cp;
		n = 1;
	}
	else if (cp < 0x800)
	{
		t[0] = (char) (0xC0 | (cp >> 6));
		t[1] = (char) (0x80 | (cp & 0x3F));
		n = 2;
	}
	else if (cp < 0x10000)
	{
		t[0] = (char) (0xE0 | (cp >> 12));
		t[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
		t[2] = (char) (0x80 | (cp & 0x3F));
		n = 3;
	}
	else
	{
		t[0] = (char) (0xF0 | (cp >> 18));
		t[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
		t[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
		t[3] = (char) (0x80 | (cp & 0x3F));
		n = 4;
	}
	opus_gbnf_buf_put(b, t, n);
}

/* ------------------------------------------------------------------ */
/* character sets: sorted, disjoint inclusive ranges of code points */

#define SET_MAX 128

struct cset
{
	int			n;
	int32_t		lo[SET_MAX];
	int32_t		hi[SET_MAX];
	int			overflow;
};

static void
cset_add(struct cset *s, int32_t lo, int32_t hi)
{
	int			i,
				j;

	/* insert keeping order, merging overlaps and neighbours */
	for (i = 0; i < s->n && s->hi[i] + 1 < lo; i++)
		;
	j = i;
	while (j < s->n && s->lo[j] <= hi + 1)
	{
		if (s->lo[j] < lo)
			lo = s->lo[j];
		if (s->hi[j] > hi)
			hi = s->hi[j];
		j++;
	}
	if (j == i)
	{
		if (s->n == SET_MAX)
		{
			s->overflow = 1;
			return;
		}
		memmove(&s->lo[i + 1], &s->lo[i], sizeof(int32_t) * (size_t) (s->n - i));
		memmove(&s->hi[i + 1], &s->hi[i], sizeof(int32_t) * (size_t) (s->n - i));
		s->n++;
	}
	else if (j > i + 1)
	{
		memmove(&s->lo[i + 1], &s->lo[j], sizeof(int32_t) * (size_t) (s->n - j));
		memmove(&s->hi[i + 1], &s->hi[j], sizeof(int32_t) * (size_t) (s->n - j));
		s->n -= j - i - 1;
	}
	s->lo[i] = lo;
	s->hi[i] = hi;
}

/* The complement over the Unicode scalar values (surrogates left out). */
static void
cset_negate(struct cset *s)
{
	struct cset r = {0};
	int32_t		next = 0;
	int			i;

	cset_add(s, 0xD800, 0xDFFF);
	for (i = 0; i < s->n; i++)
	{
		if (s->lo[i] > next)
			cset_add(&r, next, s->lo[i] - 1);
		next = s->hi[i] + 1;
	}
	if (next <= 0x10FFFF)
		cset_add(&r, next, 0x10FFFF);
	r.overflow |= s->overflow;
	*s = r;
}

/* Remove [lo, hi] from s. */
static void
cset_remove(struct cset *s, int32_t lo, int32_t hi)
{
	struct cset r = {0};
	int			i;

	for (i = 0; i < s->n; i++)
	{
		if (s->hi[i] < lo || s->lo[i] > hi)
			cset_add(&r, s->lo[i], s->hi[i]);
		else
		{
			if (s->lo[i] < lo)
				cset_add(&r, s->lo[i], lo - 1);
			if (s->hi[i] > hi)
				cset_add(&r, hi + 1, s->hi[i]);
		}
	}
	r.overflow |= s->overflow;
	*s = r;
}

static void
put_class_char(struct opus_gbnf_buf *b, int32_t c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
	{
		char		t = (char) c;

		opus_gbnf_buf_put(b, &t, 1);
	}
	else if (c < 0x80)
		opus_gbnf_buf_printf(b, "\\x%02X", (unsigned) c);
	else
		put_utf8(b, c);
}

/* Write s as a GBNF class; an empty set cannot match: "[^\x00-\U0010FFFF]" is
 * avoided, callers check for it. */
static void
put_cset(struct opus_gbnf_buf *b, const struct cset *s)
{
	int			i;

	opus_gbnf_buf_put(b, "[", 1);
	for (i = 0; i < s->n; i++)
	{
		put_class_char(b, s->lo[i]);
		if (s->hi[i] != s->lo[i])
		{
			opus_gbnf_buf_put(b, "-", 1);
			put_class_char(b, s->hi[i]);
		}
	}
	opus_gbnf_buf_put(b, "]", 1);
}

/* ------------------------------------------------------------------ */
/* the regex parser */

struct rx
{
	const char *re;
	size_t		len;
	size_t		pos;
	int			flags;
	int			depth;
	const char *what;
	struct opus_gbnf_buf *out;
	struct opus_error *err;
	enum opus_status st;
};

static int
rx_fail(struct rx *r, enum opus_status code, size_t at, const char *msg)
{
	if (r->st == OPUS_OK)
	{
		r->st = code;
		opus_error_set(r->err, code, "%s: %s at offset %zu", r->what, msg, at);
	}
	return -1;
}

/* Write one code point as a literal of the output (JSON-escaped in JSON mode). */
static void
rx_put_literal_cp(struct rx *r, int32_t cp)
{
	struct opus_gbnf_buf *b = r->out;

	if ((r->flags & OPUS_REGEX_JSON_STRING) && (cp == '"' || cp == '\\' || cp < 0x20))
	{
		char		esc[16];

		switch (cp)
		{
			case '"':
				strcpy(esc, "\\\"");
				break;
			case '\\':
				strcpy(esc, "\\\\");
				break;
			case '\n':
				strcpy(esc, "\\n");
				break;
			case '\r':
				strcpy(esc, "\\r");
				break;
			case '\t':
				strcpy(esc, "\\t");
				break;
			case '\b':
				strcpy(esc, "\\b");
				break;
			case '\f':
				strcpy(esc, "\\f");
				break;
			default:
				snprintf(esc, sizeof(esc), "\\u%04x", (unsigned) cp & 0xffu);
				break;
		}
		opus_gbnf_buf_literal(b, esc, strlen(esc));
		return;
	}
	if (cp < 0x80)
	{
		char		c = (char) cp;

		opus_gbnf_buf_literal(b, &c, 1);
	}
	else
	{
		opus_gbnf_buf_put(b, "\"", 1);
		put_utf8(b, cp);
		opus_gbnf_buf_put(b, "\"", 1);
	}
}

static void
add_class_escape(struct cset *s, char e)
{
	switch (e)
	{
		case 'd':
			cset_add(s, '0', '9');
			break;
		case 'w':
			cset_add(s, '0', '9');
			cset_add(s, 'A', 'Z');
			cset_add(s, '_', '_');
			cset_add(s, 'a', 'z');
			break;
		case 's':
			cset_add(s, '\t', '\r');
			cset_add(s, ' ', ' ');
			break;
	}
}

/*
 * Read an escape after the backslash at r->pos - 1.  Returns a code point
 * (>= 0), or -2 with *cls set to one of d w s D W S for a class escape, or
 * -1 on error.
 */
static int32_t
rx_escape(struct rx *r, char *cls, int in_class)
{
	size_t		at = r->pos - 1;
	char		c;

	if (r->pos >= r->len)
		return rx_fail(r, OPUS_ERR_INVALID_ARG, at, "trailing backslash");
	c = r->re[r->pos++];
	switch (c)
	{
		case 'n':
			return '\n';
		case 'r':
			return '\r';
		case 't':
			return '\t';
		case 'f':
			return '\f';
		case 'v':
			return '\v';
		case '0':
			return 0;
		case 'd':
		case 'w':
		case 's':
		case 'D':
		case 'W':
		case 'S':
			*cls = c;
			return -2;
		case 'x':
		case 'u':
			{
				int			nd = c == 'x' ? 2 : 4,
							k;
				int32_t		v = 0;

				for (k = 0; k < nd; k++)
				{
					int			h = r->pos < r->len ? opus_hex_digit(r->re[r->pos]) : -1;

					if (h < 0)
						return rx_fail(r, OPUS_ERR_INVALID_ARG, at, "bad hexadecimal escape");
					v = v * 16 + h;
					r->pos++;
				}
				if (v >= 0xD800 && v <= 0xDFFF)
					return rx_fail(r, OPUS_ERR_UNSUPPORTED, at, "surrogate code point escape");
				return v;
			}
		case 'b':
			if (in_class)
				return '\b';
			/* fall through */
		default:
			if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
			{
				char		msg[64];

				snprintf(msg, sizeof(msg), "unsupported escape \\%c", c);
				return rx_fail(r, OPUS_ERR_UNSUPPORTED, at, msg);
			}
			if ((unsigned char) c >= 0x80)
				return rx_fail(r, OPUS_ERR_INVALID_ARG, at, "escaped non-ASCII character");
			return (unsigned char) c;
	}
}

/* Restrict a set to what may stand unescaped inside a JSON string. */
static void
json_restrict(struct rx *r, struct cset *s)
{
	if (r->flags & OPUS_REGEX_JSON_STRING)
	{
		cset_remove(s, 0, 0x1F);
		cset_remove(s, '"', '"');
		cset_remove(s, '\\', '\\');
	}
}

static int
rx_emit_set(struct rx *r, struct cset *s, size_t at)
{
	json_restrict(r, s);
	if (s->overflow)
		return rx_fail(r, OPUS_ERR_CAPACITY, at, "character class too complex");
	if (s->n == 0)
		return rx_fail(r, OPUS_ERR_UNSUPPORTED, at, "character class that matches nothing");
	put_cset(r->out, s);
	return 0;
}

static int
rx_class(struct rx *r)
{
	size_t		at = r->pos - 1;
	struct cset s = {0};
	int			negate = 0,
				first = 1;

	if (r->pos < r->len && r->re[r->pos] == '^')
	{
		negate = 1;
		r->pos++;
	}
	for (;;)
	{
		int32_t		lo,
					hi;
		char		cls = 0;

		if (r->pos >= r->len)
			return rx_fail(r, OPUS_ERR_INVALID_ARG, at, "unterminated character class");
		if (r->re[r->pos] == ']' && !first)
		{
			r->pos++;
			break;
		}
		first = 0;
		if (r->re[r->pos] == '[' && r->pos + 1 < r->len && r->re[r->pos + 1] == ':')
			return rx_fail(r, OPUS_ERR_UNSUPPORTED, r->pos, "POSIX character class");
		if (r->re[r->pos] == '\\')
		{
			r->pos++;
			lo = rx_escape(r, &cls, 1);
			if (lo == -1)
				return -1;
		}
		else
		{
			lo = utf8_next(r->re, r->len, &r->pos);
			if (lo < 0)
				return rx_fail(r, OPUS_ERR_INVALID_ARG, r->pos, "invalid UTF-8");
		}
		if (lo == -2)
		{
			struct cset t = {0};

			add_class_escape(&t, (char) (cls | 0x20));
			if (cls >= 'A' && cls <= 'Z')
				cset_negate(&t);
			for (int i = 0; i < t.n; i++)
				cset_add(&s, t.lo[i], t.hi[i]);
			continue;
		}
		hi = lo;
		if (r->pos + 1 < r->len && r->re[r->pos] == '-' && r->re[r->pos + 1] != ']')
		{
			size_t		rat = r->pos;

			r->pos++;
			if (r->re[r->pos] == '\\')
			{
				r->pos++;
				hi = rx_escape(r, &cls, 1);
				if (hi == -1)
					return -1;
				if (hi == -2)
					return rx_fail(r, OPUS_ERR_INVALID_ARG, rat, "bad character range");
			}
			else
			{
				hi = utf8_next(r->re, r->len, &r->pos);
				if (hi < 0)
					return rx_fail(r, OPUS_ERR_INVALID_ARG, r->pos, "invalid UTF-8");
			}
			if (hi < lo)
				return rx_fail(r, OPUS_ERR_INVALID_ARG, rat, "bad character range");
		}
		cset_add(&s, lo, hi);
	}
	if (negate)
		cset_negate(&s);
	return rx_emit_set(r, &s, at);
}

static int	rx_alt(struct rx *r);

/* Parse "{m}", "{m,}", "{,n}" or "{m,n}" at r->pos; 0 if it is not one (a literal brace). */
static int
rx_braces(struct rx *r, long *m, long *n)
{
	size_t		p = r->pos + 1;
	long		a = -1,
				c = -1;

	while (p < r->len && r->re[p] >= '0' && r->re[p] <= '9')
	{
		a = (a < 0 ? 0 : a) * 10 + (r->re[p] - '0');
		if (a > 100000000)
			a = 100000000;
		p++;
	}
	if (p < r->len && r->re[p] == '}')
	{
		if (a < 0)
			return 0;
		*m = *n = a;
		r->pos = p + 1;
		return 1;
	}
	if (p >= r->len || r->re[p] != ',')
		return 0;
	p++;
	while (p < r->len && r->re[p] >= '0' && r->re[p] <= '9')
	{
		c = (c < 0 ? 0 : c) * 10 + (r->re[p] - '0');
		if (c > 100000000)
			c = 100000000;
		p++;
	}
	if (p >= r->len || r->re[p] != '}')
		return 0;
	*m = a < 0 ? 0 : a;
	*n = c;						/* -1: unbounded */
	r->pos = p + 1;
	return 1;
}

static int
rx_is_quant(struct rx *r)
{
	long		m,
				n;
	size_t		save = r->pos;
	int			q;

	if (r->pos >= r->len)
		return 0;
	if (r->re[r->pos] == '*' || r->re[r->pos] == '+' || r->re[r->pos] == '?')
		return 1;
	if (r->re[r->pos] != '{')
		return 0;
	q = rx_braces(r, &m, &n);
	r->pos = save;
	return q;
}

/* Read and write the quantifier at r->pos, if any. */
static int
rx_quant(struct rx *r)
{
	size_t		at = r->pos;
	long		m,
				n;

	if (!rx_is_quant(r))
		return 0;
	if (r->re[r->pos] == '{')
	{
		rx_braces(r, &m, &n);
		if (n >= 0 && n < m)
			return rx_fail(r, OPUS_ERR_INVALID_ARG, at, "repetition {m,n} with n < m");
		if (m > OPUS_GBNF_MAX_REPEAT || n > OPUS_GBNF_MAX_REPEAT)
			return rx_fail(r, OPUS_ERR_CAPACITY, at, "repetition count above 1000");
		if (n < 0)
			opus_gbnf_buf_printf(r->out, "{%ld,}", m);
		else if (m == n)
			opus_gbnf_buf_printf(r->out, "{%ld}", m);
		else
			opus_gbnf_buf_printf(r->out, "{%ld,%ld}", m, n);
	}
	else
	{
		char		q = r->re[r->pos++];

		opus_gbnf_buf_put(r->out, &q, 1);
	}
	if (r->pos < r->len && r->re[r->pos] == '?')
		r->pos++;				/* lazy: same language */
	else if (r->pos < r->len && r->re[r->pos] == '+')
		return rx_fail(r, OPUS_ERR_UNSUPPORTED, r->pos, "possessive quantifier");
	if (rx_is_quant(r))
		return rx_fail(r, OPUS_ERR_INVALID_ARG, r->pos, "multiple repeat");
	return 0;
}

/* One atom and its quantifier; returns 0, or -1 on error. */
static int
rx_atom(struct rx *r)
{
	size_t		at = r->pos;
	char		c = r->re[r->pos];

	if (c == '*' || c == '+' || c == '?' || (c == '{' && rx_is_quant(r)))
		return rx_fail(r, OPUS_ERR_INVALID_ARG, at, "nothing to repeat");
	if (c == '(')
	{
		r->pos++;
		if (r->pos < r->len && r->re[r->pos] == '?')
		{
			if (r->pos + 1 < r->len && r->re[r->pos + 1] == ':')
				r->pos += 2;
			else if (r->pos + 2 < r->len && r->re[r->pos + 1] == 'P' && r->re[r->pos + 2] == '<')
				return rx_fail(r, OPUS_ERR_UNSUPPORTED, at, "named group");
			else if (r->pos + 2 < r->len && r->re[r->pos + 1] == '<' &&
					 r->re[r->pos + 2] != '=' && r->re[r->pos + 2] != '!')
				return rx_fail(r, OPUS_ERR_UNSUPPORTED, at, "named group");
			else if (r->pos + 1 < r->len && (r->re[r->pos + 1] == '=' || r->re[r->pos + 1] == '!' ||
											 r->re[r->pos + 1] == '<'))
				return rx_fail(r, OPUS_ERR_UNSUPPORTED, at, "lookaround");
			else
				return rx_fail(r, OPUS_ERR_UNSUPPORTED, at, "group flags");
		}
		if (++r->depth > OPUS_REGEX_MAX_DEPTH)
			return rx_fail(r, OPUS_ERR_CAPACITY, at, "groups nested more than 32 deep");
		opus_gbnf_buf_put(r->out, "(", 1);
		if (rx_alt(r) < 0)
			return -1;
		if (r->pos >= r->len || r->re[r->pos] != ')')
			return rx_fail(r, OPUS_ERR_INVALID_ARG, at, "missing )");
		r->pos++;
		r->depth--;
		opus_gbnf_buf_put(r->out, ")", 1);
	}
	else if (c == '[')
	{
		r->pos++;
		if (rx_class(r) < 0)
			return -1;
	}
	else if (c == '.')
	{
		struct cset s = {0};

		r->pos++;
		cset_add(&s, '\n', '\n');
		cset_negate(&s);
		if (rx_emit_set(r, &s, at) < 0)
			return -1;
	}
	else if (c == '^' || c == '$')
		return rx_fail(r, OPUS_ERR_UNSUPPORTED, at, "anchor inside the expression");
	else if (c == ')')
		return rx_fail(r, OPUS_ERR_INVALID_ARG, at, "unbalanced )");
	else
	{
		int32_t		cp;

		if (c == '\\')
		{
			char		cls = 0;

			r->pos++;
			cp = rx_escape(r, &cls, 0);
			if (cp == -1)
				return -1;
			if (cp == -2)
			{
				struct cset s = {0};

				add_class_escape(&s, (char) (cls | 0x20));
				if (cls >= 'A' && cls <= 'Z')
					cset_negate(&s);
				if (rx_emit_set(r, &s, at) < 0)
					return -1;
				return rx_quant(r);
			}
		}
		else
		{
			cp = utf8_next(r->re, r->len, &r->pos);
			if (cp < 0)
				return rx_fail(r, OPUS_ERR_INVALID_ARG, at, "invalid UTF-8");
		}
		if ((r->flags & OPUS_REGEX_JSON_STRING) && rx_is_quant(r))
		{
			/* an escaped character is several bytes: group it */
			opus_gbnf_buf_put(r->out, "(", 1);
			rx_put_literal_cp(r, cp);
			opus_gbnf_buf_put(r->out, ")", 1);
		}
		else
			rx_put_literal_cp(r, cp);
	}
	return rx_quant(r);
}

/* A sequence of atoms up to | or ) or the end. */
static int
rx_concat(struct rx *r)
{
	int			first = 1;

	while (r->pos < r->len && r->re[r->pos] != '|' && r->re[r->pos] != ')')
	{
		if (r->re[r->pos] == '$' && r->depth == 0 && r->pos + 1 == r->len)
			break;				/* the final anchor, handled by the caller */
		if (!first)
			opus_gbnf_buf_put(r->out, " ", 1);
		first = 0;
		if (rx_atom(r) < 0)
			return -1;
	}
	return 0;
}

static int
rx_alt(struct rx *r)
{
	if (rx_concat(r) < 0)
		return -1;
	while (r->pos < r->len && r->re[r->pos] == '|')
	{
		r->pos++;
		opus_gbnf_buf_put(r->out, " | ", 3);
		if (rx_concat(r) < 0)
			return -1;
	}
	return 0;
}

enum opus_status
opus_regex_gbnf_expr(struct opus_gbnf_buf *b, const char *re, size_t len, int flags,
					 const char *what, int *anchored_start, int *anchored_end,
					 struct opus_error *err)
{
	struct rx	r = {0};
	size_t		end = len;

	r.re = re;
	r.len = len;
	r.flags = flags;
	r.what = what;
	r.out = b;
	r.err = err;
	if (len > OPUS_REGEX_MAX_BYTES)
		return opus_error_set(err, OPUS_ERR_CAPACITY, "%s: longer than %d bytes", what,
							  OPUS_REGEX_MAX_BYTES);
	if (memchr(re, '\0', len) != NULL)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "%s: contains a NUL byte", what);
	if (anchored_start)
		*anchored_start = 0;
	if (anchored_end)
		*anchored_end = 0;
	if (len > 0 && re[0] == '^')
	{
		r.pos = 1;
		if (anchored_start)
			*anchored_start = 1;
	}
	if (end > r.pos && re[end - 1] == '$' && (end < 2 || re[end - 2] != '\\'))
	{
		if (anchored_end)
			*anchored_end = 1;
	}
	opus_gbnf_buf_put(b, "(", 1);
	if (rx_alt(&r) < 0)
		return r.st;
	if (r.pos < r.len && r.re[r.pos] == ')')
	{
		rx_fail(&r, OPUS_ERR_INVALID_ARG, r.pos, "unbalanced )");
		return r.st;
	}
	if (r.pos < r.len && r.re[r.pos] == '$')
		r.pos++;
	if (r.pos != r.len)
	{
		rx_fail(&r, OPUS_ERR_INVALID_ARG, r.pos, "unexpected character");
		return r.st;
	}
	opus_gbnf_buf_put(b, ")", 1);
	if (b->failed)
		return opus_error_set(err, (enum opus_status) b->failed, "%s: grammar larger than %d bytes",
							  what, OPUS_GBNF_MAX_BYTES);
	return OPUS_OK;
}

enum opus_status
opus_regex_to_gbnf(const char *re, size_t len, char **out, struct opus_error *err)
{
	struct opus_gbnf_buf b = {0};
	enum opus_status st;

	*out = NULL;
	opus_gbnf_buf_puts(&b, "root ::= ");
	st = opus_regex_gbnf_expr(&b, re, len, 0, "regex", NULL, NULL, err);
	if (st != OPUS_OK)
	{
		opus_gbnf_buf_free(&b);
		return st;
	}
	opus_gbnf_buf_puts(&b, "\n");
	if (b.failed)
	{
		st = opus_error_set(err, (enum opus_status) b.failed, "regex: grammar larger than %d bytes",
							OPUS_GBNF_MAX_BYTES);
		opus_gbnf_buf_free(&b);
		return st;
	}
	*out = b.s;
	return OPUS_OK;
}

static int
valid_utf8(const char *s, size_t n)
{
	size_t		i = 0;

	while (i < n)
	{
		if (s[i] == '\0' || utf8_next(s, n, &i) < 0)
			return 0;
	}
	return 1;
}

enum opus_status
opus_choices_to_gbnf(const char *const *s, const size_t *lens, size_t n, char **out,
					 struct opus_error *err)
{
	struct opus_gbnf_buf b = {0};
	size_t		i,
				j;

	*out = NULL;
	if (n == 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "choices must not be empty");
	if (n > OPUS_CHOICES_MAX)
		return opus_error_set(err, OPUS_ERR_CAPACITY, "more than %d choices", OPUS_CHOICES_MAX);
	for (i = 0; i < n; i++)
	{
		if (s[i] == NULL || lens[i] == 0)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "choice %zu is empty: it tokenizes to nothing", i + 1);
		if (!valid_utf8(s[i], lens[i]))
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "choice %zu is not valid UTF-8 text", i + 1);
	}
	/* duplicates: n is bounded (4096), so the quadratic check is bounded too */
	for (i = 0; i < n; i++)
		for (j = i + 1; j < n; j++)
			if (lens[i] == lens[j] && memcmp(s[i], s[j], lens[i]) == 0)
				return opus_error_set(err, OPUS_ERR_INVALID_ARG,
									  "choices %zu and %zu are the same string", i + 1, j + 1);
	opus_gbnf_buf_puts(&b, "root ::= ");
	for (i = 0; i < n; i++)
	{
		if (i > 0)
			opus_gbnf_buf_puts(&b, " | ");
		opus_gbnf_buf_literal(&b, s[i], lens[i]);
	}
	opus_gbnf_buf_puts(&b, "\n");
	if (b.failed)
	{
		enum opus_status st = opus_error_set(err, (enum opus_status) b.failed,
											 "choices: grammar larger than %d bytes",
											 OPUS_GBNF_MAX_BYTES);

		opus_gbnf_buf_free(&b);
		return st;
	}
	*out = b.s;
	return OPUS_OK;
}
