/*
 * json_schema_read.c - the JSON reader of the JSON Schema converter: JSON
 * text to a tree of struct jv (json_schema_int.h), with bounded depth and
 * size, all nodes in one arena freed at the end.  Untrusted input: errors
 * are returned, never asserted.
 */
#include "text/json_schema_int.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct arena_block
{
	struct arena_block *next;
	size_t		used,
				cap;
	_Alignas(16) char data[];
};


static void *
arena_alloc(struct jparse *p, size_t size)
{
	struct arena_block *b = p->arena;

	size = (size + 15) & ~(size_t) 15;
	if (size > OPUS_JSON_SCHEMA_MAX_BYTES * 8 || p->total + size > (size_t) OPUS_JSON_SCHEMA_MAX_BYTES * 16)
	{
		if (p->st == OPUS_OK)
			p->st = opus_error_set(p->err, OPUS_ERR_CAPACITY, "schema too large to convert");
		return NULL;
	}
	if (b == NULL || b->used + size > b->cap)
	{
		size_t		cap = size > 65536 ? size : 65536;

		b = malloc(sizeof(*b) + cap);
		if (b == NULL)
		{
			if (p->st == OPUS_OK)
				p->st = opus_error_set(p->err, OPUS_ERR_NOMEM, "out of memory reading a schema");
			return NULL;
		}
		b->next = p->arena;
		b->used = 0;
		b->cap = cap;
		p->arena = b;
		p->total += cap;
	}
	b->used += size;
	return b->data + b->used - size;
}

void
js_arena_free(struct jparse *p)
{
	while (p->arena)
	{
		struct arena_block *b = p->arena;

		p->arena = b->next;
		free(b);
	}
}

static struct jv *
jfail(struct jparse *p, const char *what)
{
	if (p->st == OPUS_OK)
		p->st = opus_error_set(p->err, OPUS_ERR_INVALID_ARG, "invalid JSON at offset %zu: %s",
							   p->pos, what);
	return NULL;
}

static void
jws(struct jparse *p)
{
	while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
							 p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
		p->pos++;
}

static int
jhex4(struct jparse *p, uint32_t *v)
{
	int			k;

	*v = 0;
	if (p->pos + 4 > p->n)
		return -1;
	for (k = 0; k < 4; k++)
	{
		char		c = p->s[p->pos + k];
		int			h = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 :
			(c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;

		if (h < 0)
			return -1;
		*v = *v * 16 + (uint32_t) h;
	}
	p->pos += 4;
	return 0;
}

/* Read a string at p->pos (on the quote); decoded into the arena. */
static char *
jstring(struct jparse *p, size_t *len)
{
	size_t		start = ++p->pos,
				k = start,
				o = 0;
	char	   *out;

	/* the decoded text is never longer than the source */
	while (k < p->n && p->s[k] != '"')
		k += (p->s[k] == '\\') ? 2 : 1;
	if (k >= p->n)
		return (char *) jfail(p, "unterminated string");
	out = arena_alloc(p, k - start + 1);
	if (out == NULL)
		return NULL;
	while (p->s[p->pos] != '"')
	{
		unsigned char c = (unsigned char) p->s[p->pos];

		if (c < 0x20)
			return (char *) jfail(p, "control character in a string");
		if (c != '\\')
		{
			out[o++] = (char) c;
			p->pos++;
			continue;
		}
		p->pos++;
		c = (unsigned char) p->s[p->pos++];
		switch (c)
		{
			case '"':
			case '\\':
			case '/':
				out[o++] = (char) c;
				break;
			case 'b':
				out[o++] = '\b';
				break;
			case 'f':
				out[o++] = '\f';
				break;
			case 'n':
				out[o++] = '\n';
				break;
			case 'r':
				out[o++] = '\r';
				break;
			case 't':
				out[o++] = '\t';
				break;
			case 'u':
				{
					uint32_t	cp,
								lo;

					if (jhex4(p, &cp) < 0)
						return (char *) jfail(p, "bad \\u escape");
					if (cp >= 0xD800 && cp <= 0xDBFF)
					{
						if (p->pos + 2 > p->n || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
							return (char *) jfail(p, "lone surrogate");
						p->pos += 2;
						if (jhex4(p, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
							return (char *) jfail(p, "lone surrogate");
						cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					}
					else if (cp >= 0xDC00 && cp <= 0xDFFF)
						return (char *) jfail(p, "lone surrogate");
					if (cp == 0)
						return (char *) jfail(p, "\\u0000 is not supported");
					/* 6 source bytes (12 for a pair) give at most 4 */
					if (cp < 0x80)
						out[o++] = (char) cp;
					else if (cp < 0x800)
					{
						out[o++] = (char) (0xC0 | (cp >> 6));
						out[o++] = (char) (0x80 | (cp & 0x3F));
					}
					else if (cp < 0x10000)
					{
						out[o++] = (char) (0xE0 | (cp >> 12));
						out[o++] = (char) (0x80 | ((cp >> 6) & 0x3F));
						out[o++] = (char) (0x80 | (cp & 0x3F));
					}
					else
					{
						out[o++] = (char) (0xF0 | (cp >> 18));
						out[o++] = (char) (0x80 | ((cp >> 12) & 0x3F));
						out[o++] = (char) (0x80 | ((cp >> 6) & 0x3F));
						out[o++] = (char) (0x80 | (cp & 0x3F));
					}
					break;
				}
			default:
				return (char *) jfail(p, "bad escape");
		}
	}
	p->pos++;
	out[o] = '\0';
	*len = o;
	return out;
}

static struct jv *jvalue(struct jparse *p);

/* Grow a pointer array kept in the arena (doubling; old copies are dropped). */
static int
jgrow(struct jparse *p, void **arr, size_t *cap, size_t n, size_t elem)
{
	void	   *q;

	if (n < *cap)
		return 0;
	*cap = *cap ? *cap * 2 : 8;
	q = arena_alloc(p, *cap * elem);
	if (q == NULL)
		return -1;
	if (n)
		memcpy(q, *arr, n * elem);
	*arr = q;
	return 0;
}

static struct jv *
jvalue(struct jparse *p)
{
	struct jv  *v;

	jws(p);
	if (p->pos >= p->n)
		return jfail(p, "unexpected end");
	v = arena_alloc(p, sizeof(*v));
	if (v == NULL)
		return NULL;
	memset(v, 0, sizeof(*v));
	switch (p->s[p->pos])
	{
		case '{':
		case '[':
			{
				int			obj = p->s[p->pos] == '{';
				size_t		cap = 0,
							kcap = 0,
							lcap = 0;

				if (++p->depth > OPUS_JSON_SCHEMA_MAX_DEPTH)
				{
					if (p->st == OPUS_OK)
						p->st = opus_error_set(p->err, OPUS_ERR_CAPACITY,
											   "schema nested more than %d levels deep",
											   OPUS_JSON_SCHEMA_MAX_DEPTH);
					return NULL;
				}
				v->t = obj ? J_OBJ : J_ARR;
				p->pos++;
				jws(p);
				if (p->pos < p->n && p->s[p->pos] == (obj ? '}' : ']'))
				{
					p->pos++;
					p->depth--;
					return v;
				}
				for (;;)
				{
					struct jv  *item;

					if (obj)
					{
						char	   *k;
						size_t		kl;

						jws(p);
						if (p->pos >= p->n || p->s[p->pos] != '"')
							return jfail(p, "expected a member name");
						k = jstring(p, &kl);
						if (k == NULL)
							return NULL;
						jws(p);
						if (p->pos >= p->n || p->s[p->pos] != ':')
							return jfail(p, "expected ':'");
						p->pos++;
						if (jgrow(p, (void **) &v->keys, &kcap, v->n, sizeof(char *)) < 0 ||
							jgrow(p, (void **) &v->klens, &lcap, v->n, sizeof(size_t)) < 0)
							return NULL;
						v->keys[v->n] = k;
						v->klens[v->n] = kl;
					}
					item = jvalue(p);
					if (item == NULL)
						return NULL;
					if (jgrow(p, (void **) &v->items, &cap, v->n, sizeof(struct jv *)) < 0)
						return NULL;
					v->items[v->n++] = item;
					jws(p);
					if (p->pos < p->n && p->s[p->pos] == ',')
					{
						p->pos++;
						continue;
					}
					if (p->pos < p->n && p->s[p->pos] == (obj ? '}' : ']'))
					{
						p->pos++;
						break;
					}
					return jfail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
				}
				p->depth--;
				return v;
			}
		case '"':
			v->t = J_STR;
			v->str = jstring(p, &v->slen);
			return v->str ? v : NULL;
		case 't':
		case 'f':
		case 'n':
			{
				const char *w = p->s[p->pos] == 't' ? "true" : p->s[p->pos] == 'f' ? "false" : "null";
				size_t		wl = strlen(w);

				if (p->n - p->pos < wl || memcmp(p->s + p->pos, w, wl) != 0)
					return jfail(p, "unexpected word");
				p->pos += wl;
				v->t = w[0] == 'n' ? J_NULL : J_BOOL;
				v->b = w[0] == 't';
				return v;
			}
		default:
			{
				size_t		start = p->pos;
				char		tmp[64];

				if (p->s[p->pos] == '-')
					p->pos++;
				if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9')
					return jfail(p, "unexpected character");
				if (p->s[p->pos] == '0')
					p->pos++;
				else
					while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
						p->pos++;
				if (p->pos < p->n && p->s[p->pos] == '.')
				{
					p->pos++;
					if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9')
						return jfail(p, "bad number");
					while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
						p->pos++;
				}
				if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
				{
					p->pos++;
					if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
						p->pos++;
					if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9')
						return jfail(p, "bad number");
					while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
						p->pos++;
				}
				v->t = J_NUM;
				v->raw = p->s + start;
				v->rawlen = p->pos - start;
				if (v->rawlen >= sizeof(tmp))
					return jfail(p, "number too long");
				memcpy(tmp, v->raw, v->rawlen);
				tmp[v->rawlen] = '\0';
				v->num = strtod(tmp, NULL);
				return v;
			}
	}
}

struct jv *
js_json_parse(struct jparse *p, const char *s, size_t n, struct opus_error *err)
{
	struct jv  *v;

	memset(p, 0, sizeof(*p));
	p->s = s;
	p->n = n;
	p->err = err;
	if (n > OPUS_JSON_SCHEMA_MAX_BYTES)
	{
		p->st = opus_error_set(err, OPUS_ERR_CAPACITY, "schema longer than %d bytes",
							   OPUS_JSON_SCHEMA_MAX_BYTES);
		return NULL;
	}
	v = jvalue(p);
	if (v == NULL)
		return NULL;
	jws(p);
	if (p->pos != p->n)
		return jfail(p, "text after the value");
	return v;
}

/* The member named key (the last one, as jsonb keeps), or NULL. */
struct jv *
js_get(const struct jv *o, const char *key)
{
	size_t		i,
				kl = strlen(key);

	if (o == NULL || o->t != J_OBJ)
		return NULL;
	for (i = o->n; i-- > 0;)
		if (o->klens[i] == kl && memcmp(o->keys[i], key, kl) == 0)
			return o->items[i];
	return NULL;
}
