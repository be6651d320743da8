/*
 * json_schema.c - JSON Schema to GBNF (json_schema.h says what is covered):
 * the schema walker and the entry points.  The JSON reader is in
 * json_schema_read.c, the rule table, primitive rules and ranges in
 * json_schema_emit.c; json_schema_int.h is what they share.
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
#include "text/json_schema_int.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	const struct jv *v = js_get(s, key);

	if (v == NULL)
		return 0;
	if (v->t != J_NUM || v->num < 0 || v->num != floor(v->num))
		return js_fail(c, OPUS_ERR_INVALID_ARG, "\"%s\" must be a non-negative integer", key);
	if (v->num > OPUS_GBNF_MAX_REPEAT)
		return js_fail(c, OPUS_ERR_CAPACITY, "\"%s\" above 1000 is not supported", key);
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
		js_fail(c, OPUS_ERR_UNSUPPORTED, "$ref \"%s\" outside this document is not supported", ref);
		return NULL;
	}
	if (n == 1)
		return cur;
	if (ref[1] != '/')
	{
		js_fail(c, OPUS_ERR_UNSUPPORTED, "$ref \"%s\" is not a JSON pointer", ref);
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
			cur = js_get(cur, seg);
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
		js_fail(c, OPUS_ERR_INVALID_ARG, "$ref \"%s\" does not resolve", ref);
	return cur;
}

static const char *
gen_ref(struct conv *c, const struct jv *s)
{
	const struct jv *r = js_get(s, "$ref");
	const struct jv *t;
	size_t		i;
	const char *hint;
	long		idx;
	const char *name;

	for (i = 0; i < s->n; i++)
		if (!in_list(annotations, s->keys[i], s->klens[i]) &&
			!(s->klens[i] == 4 && memcmp(s->keys[i], "$ref", 4) == 0))
		{
			js_fail(c, OPUS_ERR_UNSUPPORTED, "keyword \"%s\" beside $ref is not supported", s->keys[i]);
			return NULL;
		}
	if (r->t != J_STR)
	{
		js_fail(c, OPUS_ERR_INVALID_ARG, "$ref must be a string%s", "");
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
			js_fail(c, OPUS_ERR_NOMEM, "out of memory%s", "");
			return NULL;
		}
		c->refs = q;
		c->caprefs = cap;
	}
	/* the ref's own rule, reserved first so that recursion finds it */
	idx = js_rule_reserve(c, hint);
	if (idx < 0)
		return NULL;
	c->refs[c->nrefs].target = t;
	c->refs[c->nrefs].name = c->rules[idx].name;
	c->nrefs++;
	{
		size_t		old = c->pathlen;
		struct opus_gbnf_buf b = {0};

		c->pathlen = 0;
		js_path_push(c, r->str[1] ? "$" : "$", r->str + 1, r->slen - 1);
		name = gen_rule(c, t, c->rules[idx].name);
		c->pathlen = old;
		c->path[old] = '\0';
		if (name == NULL)
			return NULL;
		/* reread: js_rule_reserve may have moved the table */
		opus_gbnf_buf_puts(&b, name);
		if (js_rule_set(c, idx, &b) < 0)
			return NULL;
	}
	return c->rules[idx].name;
}

/* The string type (format, pattern, length) into b. */
static int
gen_string(struct conv *c, const struct jv *s, struct opus_gbnf_buf *b)
{
	const struct jv *fmt = js_get(s, "format");
	const struct jv *pat = js_get(s, "pattern");
	long		minl = 0,
				maxl = -1;

	if (get_count(c, s, "minLength", &minl) < 0 || get_count(c, s, "maxLength", &maxl) < 0)
		return -1;
	if (maxl >= 0 && minl > maxl)
		return js_fail(c, OPUS_ERR_INVALID_ARG, "minLength is above maxLength%s", "");
	if (fmt != NULL)
	{
		static const char *const fmts[] = {"date", "time", "date-time", "uuid", "email", NULL};
		char		name[32];

		if (fmt->t != J_STR)
			return js_fail(c, OPUS_ERR_INVALID_ARG, "\"format\" must be a string%s", "");
		if (!in_list(fmts, fmt->str, fmt->slen))
			return js_fail(c, OPUS_ERR_UNSUPPORTED, "format \"%s\" is not supported", fmt->str);
		if (pat || js_get(s, "minLength") || js_get(s, "maxLength"))
			return js_fail(c, OPUS_ERR_UNSUPPORTED,
						 "format beside pattern, minLength or maxLength is not supported%s", "");
		snprintf(name, sizeof(name), "%s-string", fmt->str);
		if (js_prim(c, name) == NULL)
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
			return js_fail(c, OPUS_ERR_INVALID_ARG, "\"pattern\" must be a string%s", "");
		if (js_get(s, "minLength") || js_get(s, "maxLength"))
			return js_fail(c, OPUS_ERR_UNSUPPORTED,
						 "pattern beside minLength or maxLength is not supported%s", "");
		if (js_prim(c, "char") == NULL || js_prim(c, "space") == NULL)
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
	if (js_prim(c, "char") == NULL || js_prim(c, "space") == NULL)
		return -1;
	if (minl == 0 && maxl < 0)
	{
		if (js_prim(c, "string") == NULL)
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
	const struct jv *items = js_get(s, "items");
	long		mn = 0,
				mx = -1;
	const char *item;
	char		h[96];

	if (get_count(c, s, "minItems", &mn) < 0 || get_count(c, s, "maxItems", &mx) < 0)
		return -1;
	if (mx >= 0 && mn > mx)
		return js_fail(c, OPUS_ERR_INVALID_ARG, "minItems is above maxItems%s", "");
	if (items != NULL && items->t == J_ARR)
		return js_fail(c, OPUS_ERR_UNSUPPORTED, "\"items\" as an array (tuples) is not supported%s", "");
	if (js_prim(c, "space") == NULL)
		return -1;
	if (items == NULL)
		item = js_prim(c, "value");
	else
	{
		size_t		old = js_path_push(c, ".items", NULL, 0);

		snprintf(h, sizeof(h), "%s-item", hint);
		item = gen_rule(c, items, h);
		js_path_pop(c, old);
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
	long		idx = js_rule_reserve(c, hint);

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
	if (js_rule_set(c, idx, &b) < 0)
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

	if (js_prim(c, "char") == NULL || js_prim(c, "space") == NULL || js_prim(c, "string") == NULL)
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
	idx = js_rule_reserve(c, h);
	if (idx < 0 || js_rule_set(c, idx, &b) < 0)
		return NULL;
	return c->rules[idx].name;
}

static int
gen_object(struct conv *c, const struct jv *s, const char *hint, struct opus_gbnf_buf *b)
{
	const struct jv *props = js_get(s, "properties");
	const struct jv *req = js_get(s, "required");
	const struct jv *addl = js_get(s, "additionalProperties");
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
		return js_fail(c, OPUS_ERR_INVALID_ARG, "\"properties\" must be an object%s", "");
	if (req != NULL && req->t != J_ARR)
		return js_fail(c, OPUS_ERR_INVALID_ARG, "\"required\" must be an array%s", "");
	if (js_prim(c, "space") == NULL)
		return -1;
	/* extra members: any (no properties, or true), a schema, or none */
	if (addl == NULL ? np == 0 : (addl->t == J_BOOL && addl->b))
		extra = "any";
	else if (addl != NULL && addl->t == J_OBJ)
		extra = "schema";
	else if (addl != NULL && addl->t != J_BOOL)
		return js_fail(c, OPUS_ERR_INVALID_ARG, "\"additionalProperties\" must be a boolean or a schema%s", "");
	if (np == 0 && (req == NULL || req->n == 0) && extra && strcmp(extra, "any") == 0)
	{
		if (js_prim(c, "object") == NULL)
			return -1;
		opus_gbnf_buf_puts(b, "object");
		return 0;
	}
	kv = calloc(np + 1, sizeof(*kv));
	isreq = calloc(np + 1, 1);
	if (kv == NULL || isreq == NULL)
	{
		js_fail(c, OPUS_ERR_NOMEM, "out of memory%s", "");
		goto done;
	}
	for (j = 0; req && j < req->n; j++)
	{
		int			found = 0;

		if (req->items[j]->t != J_STR)
		{
			js_fail(c, OPUS_ERR_INVALID_ARG, "\"required\" must list strings%s", "");
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
			js_fail(c, OPUS_ERR_UNSUPPORTED, "required property \"%s\" not in \"properties\" is not supported",
				  req->items[j]->str);
			goto done;
		}
	}
	/* one rule per member: "key" : value */
	for (i = 0; i < np; i++)
	{
		size_t		old = js_path_push(c, ".properties.", props->keys[i], props->klens[i]);
		const char *val;
		long		idx;
		struct opus_gbnf_buf kb = {0};
		struct jv	key = {0};

		snprintf(h, sizeof(h), "%s-%.40s", hint, props->keys[i]);
		val = gen_rule(c, props->items[i], h);
		js_path_pop(c, old);
		if (val == NULL)
			goto done;
		key.t = J_STR;
		key.str = props->keys[i];
		key.slen = props->klens[i];
		js_put_literal(&kb, &key);
		opus_gbnf_buf_printf(&kb, " space \":\" space %s", val);
		snprintf(h, sizeof(h), "%s-%.40s-kv", hint, props->keys[i]);
		idx = js_rule_reserve(c, h);
		if (idx < 0 || js_rule_set(c, idx, &kb) < 0)
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
			val = js_prim(c, "value");
		else
		{
			size_t		old = js_path_push(c, ".additionalProperties", NULL, 0);

			snprintf(h, sizeof(h), "%s-additional", hint);
			val = gen_rule(c, addl, h);
			js_path_pop(c, old);
		}
		if (val == NULL)
			goto done;
		if (np == 0)
			key = js_prim(c, "string");
		else
		{
			snprintf(h, sizeof(h), "%s", hint);
			key = gen_not_keys(c, props, h);
		}
		if (key == NULL)
			goto done;
		opus_gbnf_buf_printf(&kb, "%s \":\" space %s", key, val);
		snprintf(h, sizeof(h), "%s-additional-kv", hint);
		idx = js_rule_reserve(c, h);
		if (idx < 0 || js_rule_set(c, idx, &kb) < 0)
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
			ti = js_rule_reserve(c, h);
			if (ti < 0 || js_rule_set(c, ti, &tb) < 0)
				goto done;
			snprintf(h, sizeof(h), "%s-first", hint);
			fi = js_rule_reserve(c, h);
			if (fi < 0 || js_rule_set(c, fi, &fb) < 0)
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

		if (js_read_bounds(c, s, integer, &bd) < 0)
			return -1;
		if (!bd.has_lo && !bd.has_hi)
		{
			if (js_prim(c, type) == NULL)
				return -1;
			opus_gbnf_buf_puts(b, type);
			return 0;
		}
		js_number_range(c, b, &bd, integer);
		return c->st == OPUS_OK ? 0 : -1;
	}
	if (strcmp(type, "boolean") == 0 || strcmp(type, "null") == 0)
	{
		if (js_prim(c, type) == NULL)
			return -1;
		opus_gbnf_buf_puts(b, type);
		return 0;
	}
	if (strcmp(type, "object") == 0)
		return gen_object(c, s, hint, b);
	if (strcmp(type, "array") == 0)
		return gen_array(c, s, hint, b);
	return js_fail(c, OPUS_ERR_INVALID_ARG, "unknown type \"%s\"", type);
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
			return js_fail(c, OPUS_ERR_UNSUPPORTED, "the schema false (nothing matches) is not supported%s", "");
		if (js_prim(c, "value") == NULL)
			return -1;
		opus_gbnf_buf_puts(b, "value");
		return 0;
	}
	if (s->t != J_OBJ)
		return js_fail(c, OPUS_ERR_INVALID_ARG, "a schema must be an object or a boolean%s", "");
	for (i = 0; i < s->n; i++)
		if (!in_list(keywords, s->keys[i], s->klens[i]) && !in_list(annotations, s->keys[i], s->klens[i]))
		{
			char		k2[80];

			snprintf(k2, sizeof(k2), "%.*s", (int) (s->klens[i] > 60 ? 60 : s->klens[i]), s->keys[i]);
			return js_fail(c, OPUS_ERR_UNSUPPORTED, "unsupported JSON Schema keyword \"%s\"", k2);
		}
	if (js_get(s, "$ref"))
	{
		const char *name = gen_ref(c, s);

		if (name == NULL)
			return -1;
		opus_gbnf_buf_puts(b, name);
		return 0;
	}
	if ((v = js_get(s, "enum")) != NULL || (v = js_get(s, "const")) != NULL)
	{
		int			is_enum = js_get(s, "enum") != NULL;

		if (is_enum && js_get(s, "const"))
			return js_fail(c, OPUS_ERR_UNSUPPORTED, "enum beside const is not supported%s", "");
		if (is_enum && (v->t != J_ARR || v->n == 0))
			return js_fail(c, OPUS_ERR_INVALID_ARG, "\"enum\" must be a non-empty array%s", "");
		if (js_prim(c, "space") == NULL)
			return -1;
		opus_gbnf_buf_puts(b, "(");
		for (i = 0; i < (is_enum ? v->n : 1); i++)
		{
			if (i)
				opus_gbnf_buf_puts(b, " | ");
			js_put_literal(b, is_enum ? v->items[i] : v);
		}
		opus_gbnf_buf_puts(b, ") space");
		return 0;
	}
	if ((v = js_get(s, "anyOf")) != NULL || (v = js_get(s, "oneOf")) != NULL)
	{
		const char *kw = js_get(s, "anyOf") ? "anyOf" : "oneOf";

		if (js_get(s, "anyOf") && js_get(s, "oneOf"))
			return js_fail(c, OPUS_ERR_UNSUPPORTED, "anyOf beside oneOf is not supported%s", "");
		for (i = 0; i < s->n; i++)
			if (!in_list(annotations, s->keys[i], s->klens[i]) &&
				!(s->klens[i] == 5 && memcmp(s->keys[i], kw, 5) == 0))
				return js_fail(c, OPUS_ERR_UNSUPPORTED, "keyword \"%s\" beside anyOf/oneOf is not supported",
							 s->keys[i]);
		if (v->t != J_ARR || v->n == 0)
			return js_fail(c, OPUS_ERR_INVALID_ARG, "\"%s\" must be a non-empty array", kw);
		opus_gbnf_buf_puts(b, "(");
		for (i = 0; i < v->n; i++)
		{
			char		seg[32],
						h[96];
			size_t		old;
			const char *name;

			snprintf(seg, sizeof(seg), ".%s[%zu]", kw, i);
			old = js_path_push(c, seg, NULL, 0);
			snprintf(h, sizeof(h), "%s-%zu", hint, i);
			name = gen_rule(c, v->items[i], h);
			js_path_pop(c, old);
			if (name == NULL)
				return -1;
			if (i)
				opus_gbnf_buf_puts(b, " | ");
			opus_gbnf_buf_puts(b, name);
		}
		opus_gbnf_buf_puts(b, ")");
		return 0;
	}
	v = js_get(s, "type");
	if (v != NULL && v->t == J_STR)
		types[ntypes++] = v->str;
	else if (v != NULL && v->t == J_ARR)
	{
		if (v->n == 0 || v->n > 7)
			return js_fail(c, OPUS_ERR_INVALID_ARG, "\"type\" must list 1 to 7 types%s", "");
		for (i = 0; i < v->n; i++)
		{
			if (v->items[i]->t != J_STR)
				return js_fail(c, OPUS_ERR_INVALID_ARG, "\"type\" must list strings%s", "");
			types[ntypes++] = v->items[i]->str;
		}
	}
	else if (v != NULL)
		return js_fail(c, OPUS_ERR_INVALID_ARG, "\"type\" must be a string or an array%s", "");
	else if (js_get(s, "properties") || js_get(s, "additionalProperties") || js_get(s, "required"))
		types[ntypes++] = "object";
	else if (js_get(s, "items") || js_get(s, "minItems") || js_get(s, "maxItems"))
		types[ntypes++] = "array";
	else if (js_get(s, "minLength") || js_get(s, "maxLength") || js_get(s, "pattern") || js_get(s, "format"))
		types[ntypes++] = "string";
	else if (js_get(s, "minimum") || js_get(s, "maximum") || js_get(s, "exclusiveMinimum") ||
			 js_get(s, "exclusiveMaximum"))
		types[ntypes++] = "number";
	if (ntypes == 0)
	{
		if (js_prim(c, "value") == NULL)
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
				return js_fail(c, OPUS_ERR_INVALID_ARG, "type \"%s\" listed twice", types[k]);
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
		js_fail(c, OPUS_ERR_CAPACITY, "schema nested more than %s levels deep", "64");
		return NULL;
	}
	if (s->t == J_OBJ && js_get(s, "$ref"))
	{
		if (gen_body(c, s, hint, &b) < 0)
		{
			opus_gbnf_buf_free(&b);
			return NULL;
		}
		c->depth--;
		/* b holds just the target's name */
		name = b.s ? js_rule_find(c, b.s)->name : NULL;
		opus_gbnf_buf_free(&b);
		return name;
	}
	idx = js_rule_reserve(c, hint);
	if (idx < 0 || gen_body(c, s, hint, &b) < 0 || js_rule_set(c, idx, &b) < 0)
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
	root = js_rule_reserve(&c, "root");
	if (root >= 0)
	{
		name = any_object ? js_prim(&c, "object") : gen_rule(&c, s, "root-value");
		if (name != NULL)
		{
			opus_gbnf_buf_puts(&g, name);
			js_rule_set(&c, root, &g);
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
			js_fail(&c, (enum opus_status) g.failed, "grammar larger than %s bytes", "1048576");
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
	s = js_json_parse(&jp, schema, len, err);
	st = s ? convert(&jp, s, 0, out, err) : jp.st;
	js_arena_free(&jp);
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
	v = js_json_parse(&jp, rf, len, err);
	if (v == NULL)
	{
		js_arena_free(&jp);
		return jp.st;
	}
	t = js_get(v, "type");
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
		js = js_get(v, "json_schema");
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
		if (st == OPUS_OK && (js == NULL || js->t != J_OBJ || js_get(js, "schema") == NULL))
			st = opus_error_set(err, OPUS_ERR_INVALID_ARG,
								"response_format of type \"json_schema\" needs json_schema.schema");
		if (st == OPUS_OK)
			st = convert(&jp, js_get(js, "schema"), 0, out, err);
	}
	else
		st = opus_error_set(err, OPUS_ERR_INVALID_ARG,
							"response_format type must be text, json_object or json_schema, not \"%.60s\"",
							t->str);
	js_arena_free(&jp);
	return st;
}
