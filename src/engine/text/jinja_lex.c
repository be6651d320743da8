/*
 * jinja_lex.c - lexer of the Jinja subset (jinja.h): the template source to
 * tokens (jinja_lex.h) for the parser (jinja_parse.c).
 *
 * The lexer follows jinja2's with trim_blocks and lstrip_blocks on, as
 * Hugging Face configures it: newlines in the source are normalised to \n
 * and one trailing newline is dropped (keep_trailing_newline=False); "{%-"
 * / "-%}" (and the same for {{ }} and {# #}) strip all whitespace on that
 * side; a block or comment tag alone on its line loses the spaces and tabs
 * before it (unless "{%+") and the newline after it (unless "+%}").
 *
 * Errors unwind with jp_fail (longjmp to opus_jinja_parse).
 */
#include "text/jinja_int.h"
#include "text/jinja_lex.h"
#include "text/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
jp_fail(struct parser *p, enum opus_status code, int line, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(p->msg, sizeof(p->msg), fmt, ap);
	va_end(ap);
	p->code = code;
	p->line = line;
	longjmp(p->jb, 1);
}

void *
jp_alloc0(struct parser *p, size_t n)
{
	void	   *r = ja_alloc(p->ar, n);

	if (r == NULL)
		jp_fail(p, OPUS_ERR_TEMPLATE, p->line, "template too large (over the memory limit)");
	return r;
}

static char *
pstrndup(struct parser *p, const char *s, size_t n)
{
	char	   *r = jp_alloc0(p, n + 1);

	memcpy(r, s, n);
	return r;
}

static struct tok *
push_tok(struct parser *p, int type, int line)
{
	struct tok *t;

	if (p->ntok == p->captok)
	{
		size_t		cap = p->captok ? p->captok * 2 : 256;
		struct tok *nt = jp_alloc0(p, cap * sizeof(*nt));

		if (p->ntok)
			memcpy(nt, p->toks, p->ntok * sizeof(*nt));
		p->toks = nt;
		p->captok = cap;
	}
	t = &p->toks[p->ntok++];
	memset(t, 0, sizeof(*t));
	t->type = type;
	t->line = line;
	return t;
}

static bool
is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool
is_name_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool
is_name_char(char c)
{
	return is_name_start(c) || (c >= '0' && c <= '9');
}

/* Line of a source offset (offsets asked for mostly grow: cached). */
static int
line_at(struct parser *p, size_t pos)
{
	if (pos < p->lpos)
	{
		p->lpos = 0;
		p->lline = 1;
	}
	for (; p->lpos < pos && p->lpos < p->len; p->lpos++)
		if (p->src[p->lpos] == '\n')
			p->lline++;
	return p->lline;
}

/* Append code point cp as UTF-8. */
static size_t
put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80)
	{
		o[0] = (char) cp;
		return 1;
	}
	if (cp < 0x800)
	{
		o[0] = (char) (0xC0 | (cp >> 6));
		o[1] = (char) (0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000)
	{
		o[0] = (char) (0xE0 | (cp >> 12));
		o[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
		o[2] = (char) (0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (char) (0xF0 | (cp >> 18));
	o[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
	o[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
	o[3] = (char) (0x80 | (cp & 0x3F));
	return 4;
}

/* A string literal at p->pos (quote char there); Python escapes. */
static void
lex_string(struct parser *p, int line)
{
	char		q = p->src[p->pos];
	size_t		start = ++p->pos;
	size_t		end;
	char	   *o;
	size_t		n = 0;
	struct tok *t;

	while (p->pos < p->len && p->src[p->pos] != q)
	{
		if (p->src[p->pos] == '\\')
			p->pos++;
		p->pos++;
	}
	if (p->pos >= p->len)
		jp_fail(p, OPUS_ERR_TEMPLATE, line, "unterminated string literal");
	end = p->pos++;
	o = jp_alloc0(p, (end - start) * 4 + 1);
	for (size_t i = start; i < end; i++)
	{
		char		c = p->src[i];

		if (c != '\\' || i + 1 >= end)
		{
			o[n++] = c;
			continue;
		}
		c = p->src[++i];
		switch (c)
		{
			case 'n':
				o[n++] = '\n';
				break;
			case 't':
				o[n++] = '\t';
				break;
			case 'r':
				o[n++] = '\r';
				break;
			case 'b':
				o[n++] = '\b';
				break;
			case 'f':
				o[n++] = '\f';
				break;
			case 'v':
				o[n++] = '\v';
				break;
			case 'a':
				o[n++] = '\a';
				break;
			case '0':
				o[n++] = '\0';
				break;
			case '\\':
			case '\'':
			case '"':
				o[n++] = c;
				break;
			case '\n':
				break;
			case 'x':
			case 'u':
			case 'U':
				{
					int			nd = c == 'x' ? 2 : c == 'u' ? 4 : 8;
					uint32_t	cp = 0;
					int			k;

					for (k = 0; k < nd && i + 1 + k < end && opus_hex_digit(p->src[i + 1 + k]) >= 0; k++)
						cp = cp * 16 + (uint32_t) opus_hex_digit(p->src[i + 1 + k]);
					if (k != nd || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
						jp_fail(p, OPUS_ERR_TEMPLATE, line, "bad \\%c escape in a string literal", c);
					n += put_utf8(o + n, cp);
					i += (size_t) nd;
					break;
				}
			default:
				o[n++] = '\\';
				o[n++] = c;
				break;
		}
	}
	o[n] = '\0';
	t = push_tok(p, T_STRING, line);
	t->s = o;
	t->n = n;
}

static void
lex_number(struct parser *p, int line)
{
	char		buf[64];
	size_t		n = 0;
	bool		is_float = false;
	struct tok *t;

	while (p->pos < p->len)
	{
		char		c = p->src[p->pos];

		if (c >= '0' && c <= '9')
			;
		else if (c == '_')
		{
			p->pos++;
			continue;
		}
		else if (c == '.' && !is_float && p->pos + 1 < p->len &&
				 p->src[p->pos + 1] >= '0' && p->src[p->pos + 1] <= '9')
			is_float = true;
		else if ((c == 'e' || c == 'E') && n > 0)
		{
			is_float = true;
			if (n + 2 >= sizeof(buf))
				break;
			buf[n++] = c;
			p->pos++;
			if (p->pos < p->len && (p->src[p->pos] == '+' || p->src[p->pos] == '-'))
				buf[n++] = p->src[p->pos++];
			continue;
		}
		else
			break;
		if (n + 1 >= sizeof(buf))
			jp_fail(p, OPUS_ERR_TEMPLATE, line, "number literal too long");
		buf[n++] = c;
		p->pos++;
	}
	buf[n] = '\0';
	if (is_float)
	{
		t = push_tok(p, T_FLOAT, line);
		t->f = strtod(buf, NULL);
	}
	else
	{
		char	   *e;
		unsigned long long v = strtoull(buf, &e, 10);

		if (v > INT64_MAX)
			jp_fail(p, OPUS_ERR_UNSUPPORTED, line, "integer literal too large");
		t = push_tok(p, T_INT, line);
		t->i = (int64_t) v;
	}
}

static const char *const ops[] = {
	"**", "//", "==", "!=", "<=", ">=",
	"+", "-", "*", "/", "%", "~", "<", ">", "=", ".", ",", ":", "|",
	"(", ")", "[", "]", "{", "}", NULL
};

/*
 * Tokens of one tag, from p->pos up to and including its end delimiter.
 * var: "}}", else "%}".  Returns the strip mode of the end: '-', '+' or 0.
 */
static char
lex_tag(struct parser *p, bool var, int line)
{
	int			nest = 0;
	const char *end = var ? "}}" : "%}";

	for (;;)
	{
		char		c;

		while (p->pos < p->len && is_ws(p->src[p->pos]))
			p->pos++;
		if (p->pos >= p->len)
			jp_fail(p, OPUS_ERR_TEMPLATE, line, "unexpected end of template inside a tag");
		c = p->src[p->pos];
		line = line_at(p, p->pos);
		if (nest == 0)
		{
			if ((c == '-' || c == '+') && p->pos + 2 < p->len + 0 &&
				memcmp(p->src + p->pos + 1, end, 2) == 0 && (c == '-' || !var))
			{
				p->pos += 3;
				push_tok(p, var ? T_VAR_END : T_BLOCK_END, line);
				return c;
			}
			if (p->pos + 1 < p->len && memcmp(p->src + p->pos, end, 2) == 0)
			{
				p->pos += 2;
				push_tok(p, var ? T_VAR_END : T_BLOCK_END, line);
				return 0;
			}
		}
		if (is_name_start(c))
		{
			size_t		s = p->pos;
			struct tok *t;

			while (p->pos < p->len && is_name_char(p->src[p->pos]))
				p->pos++;
			t = push_tok(p, T_NAME, line);
			t->s = pstrndup(p, p->src + s, p->pos - s);
			t->n = p->pos - s;
			continue;
		}
		if (c >= '0' && c <= '9')
		{
			lex_number(p, line);
			continue;
		}
		if (c == '\'' || c == '"')
		{
			lex_string(p, line);
			continue;
		}
		{
			int			k;

			for (k = 0; ops[k]; k++)
			{
				size_t		ol = strlen(ops[k]);

				if (p->pos + ol <= p->len && memcmp(p->src + p->pos, ops[k], ol) == 0)
					break;
			}
			if (!ops[k])
				jp_fail(p, OPUS_ERR_TEMPLATE, line, "unexpected character '%c'", c);
			if (c == '(' || c == '[' || c == '{')
				nest++;
			else if ((c == ')' || c == ']' || c == '}') && nest > 0)
				nest--;
			{
				struct tok *t = push_tok(p, T_OP, line);

				t->s = ops[k];
				t->n = strlen(ops[k]);
			}
			p->pos += strlen(ops[k]);
		}
	}
}

static void
emit_data(struct parser *p, const char *s, size_t n, int line)
{
	struct tok *t;

	if (n == 0)
		return;
	t = push_tok(p, T_DATA, line);
	t->s = pstrndup(p, s, n);
	t->n = n;
}

/* Find "{%[-+]? *endraw *[-+]?%}" from pos; returns its start or len. */
static size_t
find_endraw(struct parser *p, size_t from, size_t *after, char *rstrip_mode, char *lmode)
{
	for (size_t i = from; i + 1 < p->len; i++)
	{
		size_t		j;

		if (p->src[i] != '{' || p->src[i + 1] != '%')
			continue;
		j = i + 2;
		*lmode = 0;
		if (j < p->len && (p->src[j] == '-' || p->src[j] == '+'))
			*lmode = p->src[j++];
		while (j < p->len && is_ws(p->src[j]))
			j++;
		if (j + 6 > p->len || memcmp(p->src + j, "endraw", 6) != 0)
			continue;
		j += 6;
		while (j < p->len && is_ws(p->src[j]))
			j++;
		*rstrip_mode = 0;
		if (j < p->len && (p->src[j] == '-' || p->src[j] == '+'))
			*rstrip_mode = p->src[j++];
		if (j + 2 <= p->len && p->src[j] == '%' && p->src[j + 1] == '}')
		{
			*after = j + 2;
			return i;
		}
	}
	return p->len;
}

void
jp_lex(struct parser *p)
{
	bool		line_starting = true;

	while (p->pos < p->len)
	{
		size_t		tag = p->pos;
		size_t		dstart = p->pos,
					dend;
		char		kind = 0,
					mod = 0;
		int			line;

		/* the next tag start */
		while (tag + 1 < p->len)
		{
			if (p->src[tag] == '{' && (p->src[tag + 1] == '{' || p->src[tag + 1] == '%' ||
									   p->src[tag + 1] == '#'))
				break;
			tag++;
		}
		if (tag + 1 >= p->len)
		{
			emit_data(p, p->src + dstart, p->len - dstart, line_at(p, dstart));
			break;
		}
		kind = p->src[tag + 1];
		if (tag + 2 < p->len && (p->src[tag + 2] == '-' || p->src[tag + 2] == '+'))
			mod = p->src[tag + 2];
		dend = tag;
		if (mod == '-')
		{
			while (dend > dstart && is_ws(p->src[dend - 1]))
				dend--;
		}
		else if (kind != '{' && mod != '+')
		{
			/* lstrip_blocks */
			size_t		l = dend;

			while (l > dstart && p->src[l - 1] != '\n')
				l--;
			if (l > dstart || line_starting)
			{
				size_t		k;

				for (k = l; k < dend && (p->src[k] == ' ' || p->src[k] == '\t'); k++)
					;
				if (k == dend)
					dend = l;
			}
		}
		line = line_at(p, tag);
		emit_data(p, p->src + dstart, dend - dstart, line_at(p, dstart));
		p->pos = tag + 2 + (mod ? 1 : 0);
		if (kind == '#')
		{
			size_t		e = p->pos;
			char		emod = 0;

			while (e + 1 < p->len && !(p->src[e] == '#' && p->src[e + 1] == '}'))
				e++;
			if (e + 1 >= p->len)
				jp_fail(p, OPUS_ERR_TEMPLATE, line, "unterminated comment");
			if (e > p->pos && p->src[e - 1] == '-')
				emod = '-';
			else if (e > p->pos && p->src[e - 1] == '+')
				emod = '+';
			p->pos = e + 2;
			if (emod == '-')
				while (p->pos < p->len && is_ws(p->src[p->pos]))
					p->pos++;
			else if (emod != '+' && p->pos < p->len && p->src[p->pos] == '\n')
				p->pos++;
			line_starting = p->pos > 0 && p->src[p->pos - 1] == '\n';
			continue;
		}
		{
			size_t		first = p->ntok;
			char		emod;

			push_tok(p, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, line);
			emod = lex_tag(p, kind == '{', line);
			if (emod == '-')
				while (p->pos < p->len && is_ws(p->src[p->pos]))
					p->pos++;
			else if (kind == '%' && emod != '+' && p->pos < p->len && p->src[p->pos] == '\n')
				p->pos++;
			line_starting = p->pos > 0 && p->src[p->pos - 1] == '\n';
			/* {% raw %}: everything up to {% endraw %} is data */
			if (kind == '%' && p->ntok == first + 3 && p->toks[first + 1].type == T_NAME &&
				strcmp(p->toks[first + 1].s, "raw") == 0)
			{
				size_t		after,
							rs,
							re;
				char		rmode = 0,
							lmode = 0;

				p->ntok = first;
				rs = p->pos;
				re = find_endraw(p, rs, &after, &rmode, &lmode);
				if (re == p->len)
					jp_fail(p, OPUS_ERR_TEMPLATE, line, "missing {%% endraw %%}");
				{
					size_t		de = re;

					if (lmode == '-')
						while (de > rs && is_ws(p->src[de - 1]))
							de--;
					emit_data(p, p->src + rs, de - rs, line);
				}
				p->pos = after;
				if (rmode == '-')
					while (p->pos < p->len && is_ws(p->src[p->pos]))
						p->pos++;
				else if (rmode != '+' && p->pos < p->len && p->src[p->pos] == '\n')
					p->pos++;
				line_starting = p->pos > 0 && p->src[p->pos - 1] == '\n';
			}
		}
	}
	push_tok(p, T_EOF, line_at(p, p->len));
}
