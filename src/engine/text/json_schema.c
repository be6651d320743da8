/*
 * json_schema.c - JSON Schema to GBNF (json_schema.h says what is covered).
 *
 * Two passes: a small JSON reader builds a tree (bounded depth, all nodes
 * in one arena freed at the end), then a converter walks the schema and
 * writes one grammar rule per schema node, named after its path
 * ("root-address-city").  $ref targets get a rule reserved before they are
 * converted, so a recursive reference is just a rule that names itself
 * through a token-consuming path.
 *
 * Untrusted input: every size is checked (json_schema.h lists the limits);
 * errors are returned, never asserted.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/json_schema.h"
#include "text/regex_gbnf.h"

/* ------------------------------------------------------------------ */
/* the JSON tree */

enum jtype
{
	J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ
};

struct jv
{
	enum jtype	t;
	int			b;
	double		num;
	const char *raw;			/* J_NUM: the number's text in the input */
	size_t		rawlen;
	char	   *str;			/* J_STR: decoded UTF-8 (NUL-terminated) */
	size_t		slen;
	size_t		n;				/* J_ARR, J_OBJ: members */
	struct jv **items;
	char	  **keys;			/* J_OBJ */
	size_t	   *klens;
};

struct arena_block
{
	struct arena_block *next;
	size_t		used,
				cap;
	_Alignas(16) char data[];
};

struct jparse
{
	const char *s;
	size_t		n,
				pos;
	int			depth;
	struct arena_block *arena;
	size_t		total;
	struct opus_error *err;
	enum opus_status st;
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

static void
arena_free(struct jparse *p)
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

static struct jv *
json_parse(struct jparse *p, const char *s, size_t n, struct opus_error *err)
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
static struct jv *
jget(const struct jv *o, const char *key)
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

/* ------------------------------------------------------------------ */
/* the converter */

struct rule
{
	char	   *name;
	char	   *body;			/* NULL while reserved */
};

struct refname
{
	const struct jv *target;
	char	   *name;
};

struct conv
{
	struct jparse *jp;
	const struct jv *root;
	struct rule *rules;
	size_t		nrules,
				caprules;
	struct refname *refs;
	size_t		nrefs,
				caprefs;
	int			depth;
	char		path[512];		/* "$.properties.a" */
	size_t		pathlen;
	struct opus_error *err;
	enum opus_status st;
};

static int
cfail(struct conv *c, enum opus_status code, const char *fmt, const char *arg)
{
	if (c->st == OPUS_OK)
	{
		char		msg[200];

		snprintf(msg, sizeof(msg), fmt, arg);
		c->st = opus_error_set(c->err, code, "%s at %s", msg, c->path);
	}
	return -1;
}

static size_t
path_push(struct conv *c, const char *seg, const char *key, size_t klen)
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

static void
path_pop(struct conv *c, size_t old)
{
	c->pathlen = old;
	c->path[old] = '\0';
}

static struct rule *
rule_find(struct conv *c, const char *name)
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
static long
rule_reserve(struct conv *c, const char *hint)
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
	while (rule_find(c, name) != NULL)
		snprintf(name, sizeof(name), "%s-%d", base, ++k);
	if (c->nrules >= OPUS_JSON_SCHEMA_MAX_RULES)
	{
		cfail(c, OPUS_ERR_CAPACITY, "schema needs more than %s grammar rules", "4096");
		return -1;
	}
	if (c->nrules == c->caprules)
	{
		size_t		cap = c->caprules ? c->caprules * 2 : 64;
		struct rule *r = realloc(c->rules, cap * sizeof(*r));

		if (r == NULL)
		{
			cfail(c, OPUS_ERR_NOMEM, "out of memory%s", "");
			return -1;
		}
		c->rules = r;
		c->caprules = cap;
	}
	c->rules[c->nrules].name = strdup(name);
	c->rules[c->nrules].body = NULL;
	if (c->rules[c->nrules].name == NULL)
	{
		cfail(c, OPUS_ERR_NOMEM, "out of memory%s", "");
		return -1;
	}
	return (long) c->nrules++;
}

/* Take b's text as rule idx's body. */
static int
rule_set(struct conv *c, long idx, struct opus_gbnf_buf *b)
{
	if (b->failed)
	{
		cfail(c, (enum opus_status) b->failed, "grammar larger than %s bytes", "1048576");
		opus_gbnf_buf_free(b);
		return -1;
	}
	c->rules[idx].body = b->s ? b->s : strdup("");
	memset(b, 0, sizeof(*b));
	return c->rules[idx].body ? 0 : cfail(c, OPUS_ERR_NOMEM, "out of memory%s", "");
}

/* A fixed rule, added once.  Returns its name. */
static const char *
prim(struct conv *c, const char *name)
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
		if (rule_find(c, name) != NULL)
			return prims[i].name;
		idx = rule_reserve(c, name);
		if (idx < 0)
			return NULL;
		opus_gbnf_buf_puts(&b, prims[i].body);
		if (rule_set(c, idx, &b) < 0)
			return NULL;
		snprintf(deps, sizeof(deps), "%s", prims[i].deps);
		for (tok = strtok_r(deps, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
			if (prim(c, tok) == NULL)
				return NULL;
		return prims[i].name;
	}
	cfail(c, OPUS_ERR_INTERNAL, "no primitive rule %s", name);
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
static void
put_json_literal(struct opus_gbnf_buf *b, const struct jv *v)
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

struct bounds
{
	int			has_lo,
				has_hi;
	long long	lo,
				hi;
};

/* Read minimum / maximum (and exclusive ones when integer) into bd. */
static int
read_bounds(struct conv *c, const struct jv *s, int integer, struct bounds *bd)
{
	static const char *const names[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
	int			i;

	memset(bd, 0, sizeof(*bd));
	for (i = 0; i < 4; i++)
	{
		const struct jv *v = jget(s, names[i]);
		double		x;
		long long	k;

		if (v == NULL)
			continue;
		if (v->t == J_BOOL)
			return cfail(c, OPUS_ERR_UNSUPPORTED, "boolean \"%s\" (draft 4) is not supported", names[i]);
		if (v->t != J_NUM)
			return cfail(c, OPUS_ERR_INVALID_ARG, "\"%s\" must be a number", names[i]);
		x = v->num;
		if (!(fabs(x) < (double) NUM_LIMIT))
			return cfail(c, OPUS_ERR_UNSUPPORTED, "\"%s\" beyond 10^15 is not supported", names[i]);
		if (!integer && (x != floor(x) || i >= 2))
			return cfail(c, OPUS_ERR_UNSUPPORTED,
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
		return cfail(c, OPUS_ERR_INVALID_ARG, "no %s lies between minimum and maximum",
					 integer ? "integer" : "number");
	return 0;
}

/* An integer or a number within bd, written to b (ends with "space"). */
static void
number_range(struct conv *c, struct opus_gbnf_buf *b, const struct bounds *bd, int integer)
{
	const char *frac = " (\".\" decimal-part)?";
	int			first = 1;

	prim(c, "space");
	if (!integer)
		prim(c, "decimal-part");
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

/* ---- schema nodes ---- */

static const char *const annotations[] = {
	"title", "description", "examples", "default", "$schema", "$id", "$comment",
	"deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL
};

static const char *const keywords[] = {
	"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
	"enum", "const", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
	"exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "$ref", NULL
};

static int
in_list(const char *const *list, const char *k, size_t kl)
{
	for (; *list; list++)
		if (strlen(*list) == kl && memcmp(*list, k, kl) == 0)
			return 1;
	return 0;
}

static const char *gen_rule(struct conv *c, const struct jv *s, const char *hint);

static int
get_count(struct conv *c, const struct jv *s, const char *key, long *out)
{
	const struct jv *v = jget(s, key);

	if (v == NULL)
		return 0;
	if (v->t != J_NUM || v->num < 0 || v->num != floor(v->num))
		return cfail(c, OPUS_ERR_INVALID_ARG, "\"%s\" must be a non-negative integer", key);
	if (v->num > OPUS_GBNF_MAX_REPEAT)
		return cfail(c, OPUS_ERR_CAPACITY, "\"%s\" above 1000 is not supported", key);
	*out = (long) v->num;
	return 1;
}

/* Resolve a local JSON pointer "#/a/b~1c" within the document. */
static const struct jv *
resolve_ref(struct conv *c, const char *ref, size_t n)
{
	const struct jv *cur = c->root;
	size_t		i = 1;

	if (n == 0 || ref[0] != '#')
	{
		cfail(c, OPUS_ERR_UNSUPPORTED, "$ref \"%s\" outside this document is not supported", ref);
		return NULL;
	}
	if (n == 1)
		return cur;
	if (ref[1] != '/')
	{
		cfail(c, OPUS_ERR_UNSUPPORTED, "$ref \"%s\" is not a JSON pointer", ref);
		return NULL;
	}
	while (i < n && cur != NULL)
	{
		char		seg[256];
		size_t		o = 0,
					k;

		i++;					/* the '/' */
		while (i < n && ref[i] != '/' && o < sizeof(seg) - 1)
		{
			if (ref[i] == '~' && i + 1 < n && (ref[i + 1] == '0' || ref[i + 1] == '1'))
			{
				seg[o++] = ref[i + 1] == '0' ? '~' : '/';
				i += 2;
			}
			else
				seg[o++] = ref[i++];
		}
		seg[o] = '\0';
		if (cur->t == J_OBJ)
			cur = jget(cur, seg);
		else if (cur->t == J_ARR)
		{
			char	   *end;
			unsigned long idx = strtoul(seg, &end, 10);

			cur = (*end == '\0' && o > 0 && idx < cur->n) ? cur->items[idx] : NULL;
		}
		else
			cur = NULL;
		(void) k;
	}
	if (cur == NULL)
		cfail(c, OPUS_ERR_INVALID_ARG, "$ref \"%s\" does not resolve", ref);
	return cur;
}

static const char *
gen_ref(struct conv *c, const struct jv *s)
{
	const struct jv *r = jget(s, "$ref");
	const struct jv *t;
	size_t		i;
	const char *hint;
	long		idx;
	const char *name;

	for (i = 0; i < s->n; i++)
		if (!in_list(annotations, s->keys[i], s->klens[i]) &&
			!(s->klens[i] == 4 && memcmp(s->keys[i], "$ref", 4) == 0))
		{
			cfail(c, OPUS_ERR_UNSUPPORTED, "keyword \"%s\" beside $ref is not supported", s->keys[i]);
			return NULL;
		}
	if (r->t != J_STR)
	{
		cfail(c, OPUS_ERR_INVALID_ARG, "$ref must be a string%s", "");
		return NULL;
	}
	t = resolve_ref(c, r->str, r->slen);
	if (t == NULL)
		return NULL;
	for (i = 0; i < c->nrefs; i++)
		if (c->refs[i].target == t)
			return c->refs[i].name;
	hint = strrchr(r->str, '/');
	hint = (hint && hint[1]) ? hint + 1 : "ref";
	if (t == c->root)
		hint = "root-ref";
	if (c->nrefs == c->caprefs)
	{
		size_t		cap = c->caprefs ? c->caprefs * 2 : 16;
		struct refname *q = realloc(c->refs, cap * sizeof(*q));

		if (q == NULL)
		{
			cfail(c, OPUS_ERR_NOMEM, "out of memory%s", "");
			return NULL;
		}
		c->refs = q;
		c->caprefs = cap;
	}
	/* the ref's own rule, reserved first so that recursion finds it */
	idx = rule_reserve(c, hint);
	if (idx < 0)
		return NULL;
	c->refs[c->nrefs].target = t;
	c->refs[c->nrefs].name = c->rules[idx].name;
	c->nrefs++;
	{
		size_t		old = c->pathlen;
		struct opus_gbnf_buf b = {0};

		c->pathlen = 0;
		path_push(c, r->str[1] ? "$" : "$", r->str + 1, r->slen - 1);
		name = gen_rule(c, t, c->rules[idx].name);
		c->pathlen = old;
		c->path[old] = '\0';
		if (name == NULL)
			return NULL;
		/* reread: rule_reserve may have moved the table */
		opus_gbnf_buf_puts(&b, name);
		if (rule_set(c, idx, &b) < 0)
			return NULL;
	}
	return c->rules[idx].name;
}

/* The string type (format, pattern, length) into b. */
static int
gen_string(struct conv *c, const struct jv *s, struct opus_gbnf_buf *b)
{
	const struct jv *fmt = jget(s, "format");
	const struct jv *pat = jget(s, "pattern");
	long		minl = 0,
				maxl = -1;

	if (get_count(c, s, "minLength", &minl) < 0 || get_count(c, s, "maxLength", &maxl) < 0)
		return -1;
	if (maxl >= 0 && minl > maxl)
		return cfail(c, OPUS_ERR_INVALID_ARG, "minLength is above maxLength%s", "");
	if (fmt != NULL)
	{
		static const char *const fmts[] = {"date", "time", "date-time", "uuid", "email", NULL};
		char		name[32];

		if (fmt->t != J_STR)
			return cfail(c, OPUS_ERR_INVALID_ARG, "\"format\" must be a string%s", "");
		if (!in_list(fmts, fmt->str, fmt->slen))
			return cfail(c, OPUS_ERR_UNSUPPORTED, "format \"%s\" is not supported", fmt->str);
		if (pat || jget(s, "minLength") || jget(s, "maxLength"))
			return cfail(c, OPUS_ERR_UNSUPPORTED,
						 "format beside pattern, minLength or maxLength is not supported%s", "");
		snprintf(name, sizeof(name), "%s-string", fmt->str);
		if (prim(c, name) == NULL)
			return -1;
		opus_gbnf_buf_puts(b, name);
		return 0;
	}
	if (pat != NULL)
	{
		int			as,
					ae;
		char		what[sizeof(c->path) + 16];
		enum opus_status st;

		if (pat->t != J_STR)
			return cfail(c, OPUS_ERR_INVALID_ARG, "\"pattern\" must be a string%s", "");
		if (jget(s, "minLength") || jget(s, "maxLength"))
			return cfail(c, OPUS_ERR_UNSUPPORTED,
						 "pattern beside minLength or maxLength is not supported%s", "");
		if (prim(c, "char") == NULL || prim(c, "space") == NULL)
			return -1;
		snprintf(what, sizeof(what), "pattern at %s", c->path);
		opus_gbnf_buf_puts(b, "\"\\\"\" ");
		{
			struct opus_gbnf_buf e = {0};

			st = opus_regex_gbnf_expr(&e, pat->str, pat->slen, OPUS_REGEX_JSON_STRING, what,
									  &as, &ae, c->err);
			if (st != OPUS_OK)
			{
				opus_gbnf_buf_free(&e);
				c->st = st;
				return -1;
			}
			if (!as)
				opus_gbnf_buf_puts(b, "char* ");
			opus_gbnf_buf_put(b, e.s, e.len);
			if (!ae)
				opus_gbnf_buf_puts(b, " char*");
			if (e.failed)
				b->failed = e.failed;
			opus_gbnf_buf_free(&e);
		}
		opus_gbnf_buf_puts(b, " \"\\\"\" space");
		return 0;
	}
	if (prim(c, "char") == NULL || prim(c, "space") == NULL)
		return -1;
	if (minl == 0 && maxl < 0)
	{
		if (prim(c, "string") == NULL)
			return -1;
		opus_gbnf_buf_puts(b, "string");
		return 0;
	}
	opus_gbnf_buf_puts(b, "\"\\\"\" char");
	if (maxl < 0)
		opus_gbnf_buf_printf(b, "{%ld,}", minl);
	else if (minl == maxl)
		opus_gbnf_buf_printf(b, "{%ld}", minl);
	else
		opus_gbnf_buf_printf(b, "{%ld,%ld}", minl, maxl);
	opus_gbnf_buf_puts(b, " \"\\\"\" space");
	return 0;
}

static int
gen_array(struct conv *c, const struct jv *s, const char *hint, struct opus_gbnf_buf *b)
{
	const struct jv *items = jget(s, "items");
	long		mn = 0,
				mx = -1;
	const char *item;
	char		h[96];

	if (get_count(c, s, "minItems", &mn) < 0 || get_count(c, s, "maxItems", &mx) < 0)
		return -1;
	if (mx >= 0 && mn > mx)
		return cfail(c, OPUS_ERR_INVALID_ARG, "minItems is above maxItems%s", "");
	if (items != NULL && items->t == J_ARR)
		return cfail(c, OPUS_ERR_UNSUPPORTED, "\"items\" as an array (tuples) is not supported%s", "");
	if (prim(c, "space") == NULL)
		return -1;
	if (items == NULL)
		item = prim(c, "value");
	else
	{
		size_t		old = path_push(c, ".items", NULL, 0);

		snprintf(h, sizeof(h), "%s-item", hint);
		item = gen_rule(c, items, h);
		path_pop(c, old);
	}
	if (item == NULL)
		return -1;
	opus_gbnf_buf_puts(b, "\"[\" space ");
	if (mx == 0)
	{
		opus_gbnf_buf_puts(b, "\"]\" space");
		return 0;
	}
	opus_gbnf_buf_printf(b, "(%s (\",\" space %s)", item, item);
	if (mx < 0)
		opus_gbnf_buf_printf(b, "{%ld,}", mn > 0 ? mn - 1 : 0);
	else
		opus_gbnf_buf_printf(b, "{%ld,%ld}", mn > 0 ? mn - 1 : 0, mx - 1);
	opus_gbnf_buf_puts(b, mn == 0 ? ")? " : ") ");
	opus_gbnf_buf_puts(b, "\"]\" space");
	return 0;
}

/*
 * The rule of a JSON string (with "space") that is none of the keys
 * props->keys[] (so that an extra member never repeats a declared one),
 * built as a trie: at each depth the next character either follows a key
 * or leaves all of them.  Keys with characters JSON escapes, non-ASCII
 * ones or keys over 64 bytes are not excluded (docs/structured-output.md).
 */
static const char *
gen_not_keys_at(struct conv *c, const struct jv *props, const char *prefix, size_t d, const char *hint)
{
	struct opus_gbnf_buf b = {0};
	char		seen[128] = {0};
	size_t		i;
	int			is_end = 0;
	long		idx = rule_reserve(c, hint);

	if (idx < 0)
		return NULL;
	for (i = 0; i < props->n; i++)
	{
		const char *k = props->keys[i];

		if (props->klens[i] < d || memcmp(k, prefix, d) != 0)
			continue;
		if (props->klens[i] == d)
			is_end = 1;
	}
	if (!is_end)
		opus_gbnf_buf_puts(&b, "| ");
	for (i = 0; i < props->n; i++)
	{
		const char *k = props->keys[i];
		unsigned char ch;
		const char *child;
		char		h[96];

		if (props->klens[i] <= d || memcmp(k, prefix, d) != 0)
			continue;
		ch = (unsigned char) k[d];
		if (seen[ch])
			continue;
		seen[ch] = 1;
		snprintf(h, sizeof(h), "%.70s-%d", hint, (int) ch);
		child = gen_not_keys_at(c, props, k, d + 1, h);
		if (child == NULL)
		{
			opus_gbnf_buf_free(&b);
			return NULL;
		}
		opus_gbnf_buf_literal(&b, (const char *) &k[d], 1);
		opus_gbnf_buf_printf(&b, " %s | ", child);
	}
	opus_gbnf_buf_puts(&b, "[^");
	for (i = 0; i < 128; i++)
		if (seen[i])
			opus_gbnf_buf_printf(&b, "\\x%02X", (unsigned) i);
	opus_gbnf_buf_puts(&b, "\"\\\\\\x7F\\x00-\\x1F] char* | [\\\\] ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) char*");
	if (rule_set(c, idx, &b) < 0)
		return NULL;
	return c->rules[idx].name;
}

static const char *
gen_not_keys(struct conv *c, const struct jv *props, const char *hint)
{
	struct opus_gbnf_buf b = {0};
	const char *body;
	size_t		i,
				j;
	long		idx;
	char		h[96];

	if (prim(c, "char") == NULL || prim(c, "space") == NULL || prim(c, "string") == NULL)
		return NULL;
	for (i = 0; i < props->n; i++)
	{
		if (props->klens[i] > 64)
			return "string";
		for (j = 0; j < props->klens[i]; j++)
		{
			unsigned char ch = (unsigned char) props->keys[i][j];

			if (ch < 0x20 || ch >= 0x7F || ch == '"' || ch == '\\')
				return "string";
		}
	}
	snprintf(h, sizeof(h), "%.60s-other-key-chars", hint);
	body = gen_not_keys_at(c, props, "", 0, h);
	if (body == NULL)
		return NULL;
	opus_gbnf_buf_printf(&b, "\"\\\"\" %s \"\\\"\" space", body);
	snprintf(h, sizeof(h), "%.60s-other-key", hint);
	idx = rule_reserve(c, h);
	if (idx < 0 || rule_set(c, idx, &b) < 0)
		return NULL;
	return c->rules[idx].name;
}

static int
gen_object(struct conv *c, const struct jv *s, const char *hint, struct opus_gbnf_buf *b)
{
	const struct jv *props = jget(s, "properties");
	const struct jv *req = jget(s, "required");
	const struct jv *addl = jget(s, "additionalProperties");
	const char *extra = NULL;
	size_t		np = props ? props->n : 0,
				i,
				j;
	const char **kv = NULL;
	char	   *isreq = NULL;
	char		h[128];
	int			ok = -1;
	struct opus_gbnf_buf tb = {0},
				fb = {0};

	if (props != NULL && props->t != J_OBJ)
		return cfail(c, OPUS_ERR_INVALID_ARG, "\"properties\" must be an object%s", "");
	if (req != NULL && req->t != J_ARR)
		return cfail(c, OPUS_ERR_INVALID_ARG, "\"required\" must be an array%s", "");
	if (prim(c, "space") == NULL)
		return -1;
	/* extra members: any (no properties, or true), a schema, or none */
	if (addl == NULL ? np == 0 : (addl->t == J_BOOL && addl->b))
		extra = "any";
	else if (addl != NULL && addl->t == J_OBJ)
		extra = "schema";
	else if (addl != NULL && addl->t != J_BOOL)
		return cfail(c, OPUS_ERR_INVALID_ARG, "\"additionalProperties\" must be a boolean or a schema%s", "");
	if (np == 0 && (req == NULL || req->n == 0) && extra && strcmp(extra, "any") == 0)
	{
		if (prim(c, "object") == NULL)
			return -1;
		opus_gbnf_buf_puts(b, "object");
		return 0;
	}
	kv = calloc(np + 1, sizeof(*kv));
	isreq = calloc(np + 1, 1);
	if (kv == NULL || isreq == NULL)
	{
		cfail(c, OPUS_ERR_NOMEM, "out of memory%s", "");
		goto done;
	}
	for (j = 0; req && j < req->n; j++)
	{
		int			found = 0;

		if (req->items[j]->t != J_STR)
		{
			cfail(c, OPUS_ERR_INVALID_ARG, "\"required\" must list strings%s", "");
			goto done;
		}
		for (i = 0; i < np; i++)
			if (props->klens[i] == req->items[j]->slen &&
				memcmp(props->keys[i], req->items[j]->str, props->klens[i]) == 0)
			{
				isreq[i] = 1;
				found = 1;
			}
		if (!found)
		{
			cfail(c, OPUS_ERR_UNSUPPORTED, "required property \"%s\" not in \"properties\" is not supported",
				  req->items[j]->str);
			goto done;
		}
	}
	/* one rule per member: "key" : value */
	for (i = 0; i < np; i++)
	{
		size_t		old = path_push(c, ".properties.", props->keys[i], props->klens[i]);
		const char *val;
		long		idx;
		struct opus_gbnf_buf kb = {0};
		struct jv	key = {0};

		snprintf(h, sizeof(h), "%s-%.40s", hint, props->keys[i]);
		val = gen_rule(c, props->items[i], h);
		path_pop(c, old);
		if (val == NULL)
			goto done;
		key.t = J_STR;
		key.str = props->keys[i];
		key.slen = props->klens[i];
		put_json_literal(&kb, &key);
		opus_gbnf_buf_printf(&kb, " space \":\" space %s", val);
		snprintf(h, sizeof(h), "%s-%.40s-kv", hint, props->keys[i]);
		idx = rule_reserve(c, h);
		if (idx < 0 || rule_set(c, idx, &kb) < 0)
		{
			opus_gbnf_buf_free(&kb);
			goto done;
		}
		kv[i] = c->rules[idx].name;
	}
	if (extra != NULL)
	{
		const char *val,
				   *key;
		long		idx;
		struct opus_gbnf_buf kb = {0};

		if (strcmp(extra, "any") == 0)
			val = prim(c, "value");
		else
		{
			size_t		old = path_push(c, ".additionalProperties", NULL, 0);

			snprintf(h, sizeof(h), "%s-additional", hint);
			val = gen_rule(c, addl, h);
			path_pop(c, old);
		}
		if (val == NULL)
			goto done;
		if (np == 0)
			key = prim(c, "string");
		else
		{
			snprintf(h, sizeof(h), "%s", hint);
			key = gen_not_keys(c, props, h);
		}
		if (key == NULL)
			goto done;
		opus_gbnf_buf_printf(&kb, "%s \":\" space %s", key, val);
		snprintf(h, sizeof(h), "%s-additional-kv", hint);
		idx = rule_reserve(c, h);
		if (idx < 0 || rule_set(c, idx, &kb) < 0)
		{
			opus_gbnf_buf_free(&kb);
			goto done;
		}
		kv[np] = c->rules[idx].name;
	}

	/*
	 * T(i): members i.. each after a comma; F(i): members i.., the first
	 * without one.  Built from the end, one rule each; an empty one has no
	 * rule (NULL), since an empty rule body does not read back.
	 */
	{
		const char *tn = NULL,
				   *fn = NULL;

		for (i = np + 1; i-- > 0;)
		{
			long		ti,
						fi;

			if (i == np)
			{
				if (!kv[np])
					continue;
				opus_gbnf_buf_printf(&tb, "(\",\" space %s)*", kv[np]);
				opus_gbnf_buf_printf(&fb, "(%s (\",\" space %s)*)?", kv[np], kv[np]);
			}
			else if (isreq[i])
			{
				opus_gbnf_buf_printf(&tb, "\",\" space %s%s%s", kv[i], tn ? " " : "", tn ? tn : "");
				opus_gbnf_buf_printf(&fb, "%s%s%s", kv[i], tn ? " " : "", tn ? tn : "");
			}
			else
			{
				opus_gbnf_buf_printf(&tb, "(\",\" space %s)?%s%s", kv[i], tn ? " " : "", tn ? tn : "");
				if (fn)
					opus_gbnf_buf_printf(&fb, "%s%s%s | %s", kv[i], tn ? " " : "", tn ? tn : "", fn);
				else
					opus_gbnf_buf_printf(&fb, "(%s%s%s)?", kv[i], tn ? " " : "", tn ? tn : "");
			}
			snprintf(h, sizeof(h), "%s-rest", hint);
			ti = rule_reserve(c, h);
			if (ti < 0 || rule_set(c, ti, &tb) < 0)
				goto done;
			snprintf(h, sizeof(h), "%s-first", hint);
			fi = rule_reserve(c, h);
			if (fi < 0 || rule_set(c, fi, &fb) < 0)
				goto done;
			tn = c->rules[ti].name;
			fn = c->rules[fi].name;
		}
		if (fn)
			opus_gbnf_buf_printf(b, "\"{\" space %s \"}\" space", fn);
		else
			opus_gbnf_buf_puts(b, "\"{\" space \"}\" space");
	}
	ok = 0;
done:
	opus_gbnf_buf_free(&tb);
	opus_gbnf_buf_free(&fb);
	free(kv);
	free(isreq);
	return ok;
}

/* One type's expression into b. */
static int
gen_type(struct conv *c, const struct jv *s, const char *type, const char *hint,
		 struct opus_gbnf_buf *b)
{
	if (strcmp(type, "string") == 0)
		return gen_string(c, s, b);
	if (strcmp(type, "integer") == 0 || strcmp(type, "number") == 0)
	{
		struct bounds bd;
		int			integer = type[0] == 'i';

		if (read_bounds(c, s, integer, &bd) < 0)
			return -1;
		if (!bd.has_lo && !bd.has_hi)
		{
			if (prim(c, type) == NULL)
				return -1;
			opus_gbnf_buf_puts(b, type);
			return 0;
		}
		number_range(c, b, &bd, integer);
		return c->st == OPUS_OK ? 0 : -1;
	}
	if (strcmp(type, "boolean") == 0 || strcmp(type, "null") == 0)
	{
		if (prim(c, type) == NULL)
			return -1;
		opus_gbnf_buf_puts(b, type);
		return 0;
	}
	if (strcmp(type, "object") == 0)
		return gen_object(c, s, hint, b);
	if (strcmp(type, "array") == 0)
		return gen_array(c, s, hint, b);
	return cfail(c, OPUS_ERR_INVALID_ARG, "unknown type \"%s\"", type);
}

/* The expression of schema s into b (no rule of its own). */
static int
gen_body(struct conv *c, const struct jv *s, const char *hint, struct opus_gbnf_buf *b)
{
	const struct jv *v;
	size_t		i;
	const char *types[8];
	int			ntypes = 0,
				k;

	if (s->t == J_BOOL)
	{
		if (!s->b)
			return cfail(c, OPUS_ERR_UNSUPPORTED, "the schema false (nothing matches) is not supported%s", "");
		if (prim(c, "value") == NULL)
			return -1;
		opus_gbnf_buf_puts(b, "value");
		return 0;
	}
	if (s->t != J_OBJ)
		return cfail(c, OPUS_ERR_INVALID_ARG, "a schema must be an object or a boolean%s", "");
	for (i = 0; i < s->n; i++)
		if (!in_list(keywords, s->keys[i], s->klens[i]) && !in_list(annotations, s->keys[i], s->klens[i]))
		{
			char		k2[80];

			snprintf(k2, sizeof(k2), "%.*s", (int) (s->klens[i] > 60 ? 60 : s->klens[i]), s->keys[i]);
			return cfail(c, OPUS_ERR_UNSUPPORTED, "unsupported JSON Schema keyword \"%s\"", k2);
		}
	if (jget(s, "$ref"))
	{
		const char *name = gen_ref(c, s);

		if (name == NULL)
			return -1;
		opus_gbnf_buf_puts(b, name);
		return 0;
	}
	if ((v = jget(s, "enum")) != NULL || (v = jget(s, "const")) != NULL)
	{
		int			is_enum = jget(s, "enum") != NULL;

		if (is_enum && jget(s, "const"))
			return cfail(c, OPUS_ERR_UNSUPPORTED, "enum beside const is not supported%s", "");
		if (is_enum && (v->t != J_ARR || v->n == 0))
			return cfail(c, OPUS_ERR_INVALID_ARG, "\"enum\" must be a non-empty array%s", "");
		if (prim(c, "space") == NULL)
			return -1;
		opus_gbnf_buf_puts(b, "(");
		for (i = 0; i < (is_enum ? v->n : 1); i++)
		{
			if (i)
				opus_gbnf_buf_puts(b, " | ");
			put_json_literal(b, is_enum ? v->items[i] : v);
		}
		opus_gbnf_buf_puts(b, ") space");
		return 0;
	}
	if ((v = jget(s, "anyOf")) != NULL || (v = jget(s, "oneOf")) != NULL)
	{
		const char *kw = jget(s, "anyOf") ? "anyOf" : "oneOf";

		if (jget(s, "anyOf") && jget(s, "oneOf"))
			return cfail(c, OPUS_ERR_UNSUPPORTED, "anyOf beside oneOf is not supported%s", "");
		for (i = 0; i < s->n; i++)
			if (!in_list(annotations, s->keys[i], s->klens[i]) &&
				!(s->klens[i] == 5 && memcmp(s->keys[i], kw, 5) == 0))
				return cfail(c, OPUS_ERR_UNSUPPORTED, "keyword \"%s\" beside anyOf/oneOf is not supported",
							 s->keys[i]);
		if (v->t != J_ARR || v->n == 0)
			return cfail(c, OPUS_ERR_INVALID_ARG, "\"%s\" must be a non-empty array", kw);
		opus_gbnf_buf_puts(b, "(");
		for (i = 0; i < v->n; i++)
		{
			char		seg[32],
						h[96];
			size_t		old;
			const char *name;

			snprintf(seg, sizeof(seg), ".%s[%zu]", kw, i);
			old = path_push(c, seg, NULL, 0);
			snprintf(h, sizeof(h), "%s-%zu", hint, i);
			name = gen_rule(c, v->items[i], h);
			path_pop(c, old);
			if (name == NULL)
				return -1;
			if (i)
				opus_gbnf_buf_puts(b, " | ");
			opus_gbnf_buf_puts(b, name);
		}
		opus_gbnf_buf_puts(b, ")");
		return 0;
	}
	v = jget(s, "type");
	if (v != NULL && v->t == J_STR)
		types[ntypes++] = v->str;
	else if (v != NULL && v->t == J_ARR)
	{
		if (v->n == 0 || v->n > 7)
			return cfail(c, OPUS_ERR_INVALID_ARG, "\"type\" must list 1 to 7 types%s", "");
		for (i = 0; i < v->n; i++)
		{
			if (v->items[i]->t != J_STR)
				return cfail(c, OPUS_ERR_INVALID_ARG, "\"type\" must list strings%s", "");
			types[ntypes++] = v->items[i]->str;
		}
	}
	else if (v != NULL)
		return cfail(c, OPUS_ERR_INVALID_ARG, "\"type\" must be a string or an array%s", "");
	else if (jget(s, "properties") || jget(s, "additionalProperties") || jget(s, "required"))
		types[ntypes++] = "object";
	else if (jget(s, "items") || jget(s, "minItems") || jget(s, "maxItems"))
		types[ntypes++] = "array";
	else if (jget(s, "minLength") || jget(s, "maxLength") || jget(s, "pattern") || jget(s, "format"))
		types[ntypes++] = "string";
	else if (jget(s, "minimum") || jget(s, "maximum") || jget(s, "exclusiveMinimum") ||
			 jget(s, "exclusiveMaximum"))
		types[ntypes++] = "number";
	if (ntypes == 0)
	{
		if (prim(c, "value") == NULL)
			return -1;
		opus_gbnf_buf_puts(b, "value");
		return 0;
	}
	if (ntypes > 1)
		opus_gbnf_buf_puts(b, "(");
	for (k = 0; k < ntypes; k++)
	{
		for (int m = 0; m < k; m++)
			if (strcmp(types[m], types[k]) == 0)
				return cfail(c, OPUS_ERR_INVALID_ARG, "type \"%s\" listed twice", types[k]);
		if (k)
			opus_gbnf_buf_puts(b, " | ");
		if (gen_type(c, s, types[k], hint, b) < 0)
			return -1;
	}
	if (ntypes > 1)
		opus_gbnf_buf_puts(b, ")");
	return 0;
}

/* A rule for schema s named after hint; returns its name (or a $ref's). */
static const char *
gen_rule(struct conv *c, const struct jv *s, const char *hint)
{
	struct opus_gbnf_buf b = {0};
	long		idx;
	const char *name;

	if (++c->depth > OPUS_JSON_SCHEMA_MAX_DEPTH)
	{
		cfail(c, OPUS_ERR_CAPACITY, "schema nested more than %s levels deep", "64");
		return NULL;
	}
	if (s->t == J_OBJ && jget(s, "$ref"))
	{
		if (gen_body(c, s, hint, &b) < 0)
		{
			opus_gbnf_buf_free(&b);
			return NULL;
		}
		c->depth--;
		/* b holds just the target's name */
		name = b.s ? rule_find(c, b.s)->name : NULL;
		opus_gbnf_buf_free(&b);
		return name;
	}
	idx = rule_reserve(c, hint);
	if (idx < 0 || gen_body(c, s, hint, &b) < 0 || rule_set(c, idx, &b) < 0)
	{
		opus_gbnf_buf_free(&b);
		return NULL;
	}
	c->depth--;
	return c->rules[idx].name;
}

static void
conv_free(struct conv *c)
{
	size_t		i;

	for (i = 0; i < c->nrules; i++)
	{
		free(c->rules[i].name);
		free(c->rules[i].body);
	}
	free(c->rules);
	free(c->refs);
}

/* Convert the schema tree s (root of its document) to a grammar. */
static enum opus_status
convert(struct jparse *jp, const struct jv *s, int any_object, char **out, struct opus_error *err)
{
	struct conv c = {0};
	struct opus_gbnf_buf g = {0};
	long		root;
	const char *name;
	size_t		i;

	c.jp = jp;
	c.root = s;
	c.err = err;
	strcpy(c.path, "$");
	c.pathlen = 1;
	root = rule_reserve(&c, "root");
	if (root >= 0)
	{
		name = any_object ? prim(&c, "object") : gen_rule(&c, s, "root-value");
		if (name != NULL)
		{
			opus_gbnf_buf_puts(&g, name);
			rule_set(&c, root, &g);
		}
	}
	if (c.st == OPUS_OK)
	{
		for (i = 0; i < c.nrules; i++)
		{
			opus_gbnf_buf_puts(&g, c.rules[i].name);
			opus_gbnf_buf_puts(&g, " ::= ");
			opus_gbnf_buf_puts(&g, c.rules[i].body ? c.rules[i].body : "");
			opus_gbnf_buf_puts(&g, "\n");
		}
		if (g.failed)
			cfail(&c, (enum opus_status) g.failed, "grammar larger than %s bytes", "1048576");
	}
	conv_free(&c);
	if (c.st != OPUS_OK)
	{
		opus_gbnf_buf_free(&g);
		*out = NULL;
		return c.st;
	}
	*out = g.s;
	return OPUS_OK;
}

enum opus_status
opus_json_schema_to_gbnf(const char *schema, size_t len, char **out, struct opus_error *err)
{
	struct jparse jp;
	struct jv  *s;
	enum opus_status st;

	*out = NULL;
	s = json_parse(&jp, schema, len, err);
	st = s ? convert(&jp, s, 0, out, err) : jp.st;
	arena_free(&jp);
	return st;
}

enum opus_status
opus_response_format_to_gbnf(const char *rf, size_t len, char **out, struct opus_error *err)
{
	struct jparse jp;
	struct jv  *v,
			   *t,
			   *js = NULL;
	enum opus_status st = OPUS_OK;
	size_t		i;

	*out = NULL;
	v = json_parse(&jp, rf, len, err);
	if (v == NULL)
	{
		arena_free(&jp);
		return jp.st;
	}
	t = jget(v, "type");
	if (v->t != J_OBJ || t == NULL || t->t != J_STR)
		st = opus_error_set(err, OPUS_ERR_INVALID_ARG,
							"response_format must be an object with a \"type\"");
	else if (strcmp(t->str, "text") == 0 || strcmp(t->str, "json_object") == 0)
	{
		for (i = 0; i < v->n; i++)
			if (strcmp(v->keys[i], "type") != 0)
				st = opus_error_set(err, OPUS_ERR_INVALID_ARG,
									"response_format of type \"%s\" takes no \"%.60s\"", t->str, v->keys[i]);
		if (st == OPUS_OK && t->str[0] == 'j')
			st = convert(&jp, v, 1, out, err);
	}
	else if (strcmp(t->str, "json_schema") == 0)
	{
		js = jget(v, "json_schema");
		for (i = 0; i < v->n && st == OPUS_OK; i++)
			if (strcmp(v->keys[i], "type") != 0 && strcmp(v->keys[i], "json_schema") != 0)
				st = opus_error_set(err, OPUS_ERR_INVALID_ARG,
									"response_format takes no \"%.60s\"", v->keys[i]);
		for (i = 0; js && js->t == J_OBJ && i < js->n && st == OPUS_OK; i++)
		{
			const char *k = js->keys[i];
			const struct jv *m = js->items[i];

			if (strcmp(k, "schema") == 0)
				continue;
			if ((strcmp(k, "name") == 0 || strcmp(k, "description") == 0) && m->t == J_STR)
				continue;
			if (strcmp(k, "strict") == 0 && (m->t == J_BOOL || m->t == J_NULL))
				continue;
			st = opus_error_set(err, OPUS_ERR_INVALID_ARG, "response_format.json_schema: bad member \"%.60s\"", k);
		}
		if (st == OPUS_OK && (js == NULL || js->t != J_OBJ || jget(js, "schema") == NULL))
			st = opus_error_set(err, OPUS_ERR_INVALID_ARG,
								"response_format of type \"json_schema\" needs json_schema.schema");
		if (st == OPUS_OK)
			st = convert(&jp, jget(js, "schema"), 0, out, err);
	}
	else
		st = opus_error_set(err, OPUS_ERR_INVALID_ARG,
							"response_format type must be text, json_object or json_schema, not \"%.60s\"",
							t->str);
	arena_free(&jp);
	return st;
}
