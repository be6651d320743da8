/*
 * grammar.c - the pushdown automaton over a compiled grammar (grammar.h,
 * grammar_int.h; the GBNF parser and the grammar cache are in
 * grammar_parse.c, the allowed-token masks over a vocabulary trie in
 * grammar_mask.c).
 *
 * A state is a set of stacks of element positions; the top of each stack is
 * a character element (rule references are expanded eagerly into one stack
 * per alternative), and an empty stack means the input so far is a whole
 * string.  A code point advances each stack whose top matches it.  Bytes
 * come in as UTF-8; a code point split over calls waits in the state's
 * partial decoder (and a partial code point is checked against the classes
 * as a range of possible code points, so masks prune it early).
 */
#include "text/grammar_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Stack sets
 * ------------------------------------------------------------------------ */

void
gram_sset_clear(struct sset *s)
{
	s->n_data = 0;
	s->n = 0;
	if (s->off)
		s->off[0] = 0;
	if (s->tab)
		memset(s->tab, 0, s->tab_cap * sizeof(uint32_t));
	s->overflow = false;
	if (!s->data)
	{
		/* never NULL, so that data + off is defined for empty stacks */
		s->data = malloc(256 * sizeof(uint32_t));
		s->cap_data = s->data ? 256 : 0;
		s->overflow = s->data == NULL;
	}
}

void
gram_sset_destroy(struct sset *s)
{
	free(s->data);
	free(s->off);
	free(s->tab);
	memset(s, 0, sizeof(*s));
}

static uint64_t
stack_hash(const uint32_t *st, uint32_t len)
{
	uint64_t	h = 0x9E3779B97F4A7C15ULL ^ len;

	for (uint32_t i = 0; i < len; i++)
	{
		h ^= st[i];
		h *= 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	return h;
}

static bool
sset_reserve(struct sset *s, uint32_t len)
{
	if (s->n_data + len > s->cap_data)
	{
		size_t		nc = s->cap_data ? s->cap_data * 2 : 256;
		uint32_t   *nd;

		while (nc < s->n_data + len)
			nc *= 2;
		nd = realloc(s->data, nc * sizeof(uint32_t));
		if (!nd)
			return false;
		s->data = nd;
		s->cap_data = nc;
	}
	if (s->n + 2 > s->cap)
	{
		uint32_t	nc = s->cap ? s->cap * 2 : 16;
		uint32_t   *no = realloc(s->off, nc * sizeof(uint32_t));

		if (!no)
			return false;
		if (s->cap == 0)
			no[0] = 0;
		s->off = no;
		s->cap = nc;
	}
	if ((s->n + 1) * 2 > s->tab_cap)
	{
		uint32_t	nc = s->tab_cap ? s->tab_cap * 2 : 32;
		uint32_t   *nt = calloc(nc, sizeof(uint32_t));

		if (!nt)
			return false;
		for (uint32_t i = 0; i < s->n; i++)
		{
			uint64_t	h = stack_hash(s->data + s->off[i], s->off[i + 1] - s->off[i]);
			uint32_t	k = (uint32_t) h & (nc - 1);

			while (nt[k])
				k = (k + 1) & (nc - 1);
			nt[k] = i + 1;
		}
		free(s->tab);
		s->tab = nt;
		s->tab_cap = nc;
	}
	return true;
}

void
gram_sset_add(struct sset *s, const uint32_t *st, uint32_t len)
{
	uint64_t	h;
	uint32_t	k;

	if (s->overflow)
		return;
	if (s->n >= OPUS_GRAMMAR_MAX_STACKS || !sset_reserve(s, len))
	{
		s->overflow = true;
		return;
	}
	h = stack_hash(st, len);
	k = (uint32_t) h & (s->tab_cap - 1);
	while (s->tab[k])
	{
		uint32_t	i = s->tab[k] - 1;

		if (s->off[i + 1] - s->off[i] == len &&
			(len == 0 || memcmp(s->data + s->off[i], st, len * sizeof(uint32_t)) == 0))
			return;
		k = (k + 1) & (s->tab_cap - 1);
	}
	s->tab[k] = s->n + 1;
	if (len)
		memcpy(s->data + s->n_data, st, len * sizeof(uint32_t));
	s->n_data += len;
	s->n++;
	s->off[s->n] = (uint32_t) s->n_data;
}


void
gram_work_destroy(struct work *w)
{
	free(w->data);
	free(w->lens);
	free(w->tmp);
	memset(w, 0, sizeof(*w));
}

/* Push prefix[0..plen) + up to two extra positions (UINT32_MAX: none). */
static bool
work_push(struct work *w, const uint32_t *prefix, uint32_t plen, uint32_t a, uint32_t b)
{
	uint32_t	len = plen + (a != UINT32_MAX) + (b != UINT32_MAX);

	if (w->n_data + len > w->cap_data)
	{
		size_t		nc = w->cap_data ? w->cap_data * 2 : 256;
		uint32_t   *nd;

		while (nc < w->n_data + len)
			nc *= 2;
		nd = realloc(w->data, nc * sizeof(uint32_t));
		if (!nd)
			return false;
		w->data = nd;
		w->cap_data = nc;
	}
	if (w->n == w->cap)
	{
		size_t		nc = w->cap ? w->cap * 2 : 64;
		uint32_t   *nl = realloc(w->lens, nc * sizeof(uint32_t));

		if (!nl)
			return false;
		w->lens = nl;
		w->cap = nc;
	}
	if (plen)
		memmove(w->data + w->n_data, prefix, plen * sizeof(uint32_t));
	w->n_data += plen;
	if (a != UINT32_MAX)
		w->data[w->n_data++] = a;
	if (b != UINT32_MAX)
		w->data[w->n_data++] = b;
	w->lens[w->n++] = len;
	return true;
}

#define EXPAND_BUDGET 200000

/*
 * Expand the stack st into out: rule references on top are replaced by
 * each alternative of the rule until every stack's top is a character (or
 * the stack is empty).
 */
static void
expand(const opus_grammar *g, struct work *w, const uint32_t *st, uint32_t len,
	   struct sset *out)
{
	long		budget = EXPAND_BUDGET;

	w->n = 0;
	w->n_data = 0;
	if (!work_push(w, st, len, UINT32_MAX, UINT32_MAX))
	{
		out->overflow = true;
		return;
	}
	while (w->n > 0 && !out->overflow)
	{
		uint32_t	l = w->lens[--w->n];
		uint32_t   *cur;
		uint32_t	pos;
		const struct el *e;

		w->n_data -= l;
		if (l > w->cap_tmp)
		{
			uint32_t   *nt = realloc(w->tmp, l * sizeof(uint32_t));

			if (!nt)
			{
				out->overflow = true;
				return;
			}
			w->tmp = nt;
			w->cap_tmp = l;
		}
		cur = w->tmp;
		if (l)
			memcpy(cur, w->data + w->n_data, l * sizeof(uint32_t));
		if (--budget < 0)
		{
			out->overflow = true;
			return;
		}
		if (l == 0)
		{
			gram_sset_add(out, cur, 0);
			continue;
		}
		pos = cur[l - 1];
		e = &g->el[pos];
		if (e->type != EL_RULE_REF)
		{
			gram_sset_add(out, cur, l);
			continue;
		}
		{
			uint32_t	a = g->rule_start[e->value];
			uint32_t	after = is_end(&g->el[pos + 1]) ? UINT32_MAX : pos + 1;

			for (;;)
			{
				if (!work_push(w, cur, l - 1, after,
							   is_end(&g->el[a]) ? UINT32_MAX : a))
				{
					out->overflow = true;
					return;
				}
				while (!is_end(&g->el[a]))
					a++;
				if (g->el[a].type == EL_END)
					break;
				a++;
			}
		}
	}
}

/* Does the class at pos match cp?  *next: the element after the class. */
static bool
match_char(const opus_grammar *g, uint32_t pos, uint32_t cp, uint32_t *next)
{
	const struct el *e = &g->el[pos];
	bool		positive = e->type != EL_CHAR_NOT;
	bool		found = false;

	if (e->type == EL_CHAR_ANY)
	{
		*next = pos + 1;
		return true;
	}
	do
	{
		if (g->el[pos + 1].type == EL_CHAR_RNG_UPPER)
		{
			found |= g->el[pos].value <= cp && cp <= g->el[pos + 1].value;
			pos += 2;
		}
		else
		{
			found |= g->el[pos].value == cp;
			pos += 1;
		}
	} while (g->el[pos].type == EL_CHAR_ALT);
	*next = pos;
	return found == positive;
}

/* Could a code point in [lo, hi] match the class at pos? */
static bool
match_char_range(const opus_grammar *g, uint32_t pos, uint32_t lo, uint32_t hi)
{
	const struct el *e = &g->el[pos];

	if (e->type == EL_CHAR_ANY || e->type == EL_CHAR_NOT)
		return true;			/* loose for negated classes */
	do
	{
		uint32_t	a = g->el[pos].value,
					b = a;

		if (g->el[pos + 1].type == EL_CHAR_RNG_UPPER)
		{
			b = g->el[pos + 1].value;
			pos += 2;
		}
		else
			pos += 1;
		if (a <= hi && lo <= b)
			return true;
	} while (g->el[pos].type == EL_CHAR_ALT);
	return false;
}

/* ------------------------------------------------------------------------
 * States
 * ------------------------------------------------------------------------ */


static bool
sset_copy(struct sset *dst, const struct sset *src)
{
	gram_sset_clear(dst);
	for (uint32_t i = 0; i < src->n; i++)
		gram_sset_add(dst, src->data + src->off[i], src->off[i + 1] - src->off[i]);
	return !dst->overflow;
}

opus_grammar_state *
opus_grammar_state_new(const opus_grammar *g)
{
	opus_grammar_state *s = calloc(1, sizeof(*s));
	uint32_t	a;

	if (!s)
		return NULL;
	s->g = g;
	gram_sset_clear(&s->st);
	/* one stack per alternative of root, expanded */
	a = g->rule_start[g->root];
	for (;;)
	{
		if (is_end(&g->el[a]))
			expand(g, &s->w, NULL, 0, &s->st);
		else
			expand(g, &s->w, &a, 1, &s->st);
		while (!is_end(&g->el[a]))
			a++;
		if (g->el[a].type == EL_END)
			break;
		a++;
	}
	if (s->st.overflow)
		s->failed = true;
	return s;
}

opus_grammar_state *
opus_grammar_state_clone(const opus_grammar_state *src)
{
	opus_grammar_state *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->g = src->g;
	s->partial = src->partial;
	s->remain = src->remain;
	s->partial_len = src->partial_len;
	s->failed = src->failed;
	if (!sset_copy(&s->st, &src->st))
		s->failed = true;
	return s;
}

void
opus_grammar_state_free(opus_grammar_state *s)
{
	if (!s)
		return;
	gram_sset_destroy(&s->st);
	gram_sset_destroy(&s->next);
	gram_work_destroy(&s->w);
	free(s);
}

/* Advance set in by code point cp into out (cleared first). */
void
gram_advance_cp(const opus_grammar *g, struct work *w, const struct sset *in,
		   uint32_t cp, struct sset *out)
{
	gram_sset_clear(out);
	for (uint32_t i = 0; i < in->n && !out->overflow; i++)
	{
		const uint32_t *st = in->data + in->off[i];
		uint32_t	len = in->off[i + 1] - in->off[i];
		uint32_t	next;

		if (len == 0)
			continue;
		if (!match_char(g, st[len - 1], cp, &next))
			continue;
		if (is_end(&g->el[next]))
			expand(g, w, st, len - 1, out);
		else
		{
			/* replace the top with next: expand needs a contiguous stack */
			uint32_t	save = st[len - 1];

			((uint32_t *) st)[len - 1] = next;
			expand(g, w, st, len, out);
			((uint32_t *) st)[len - 1] = save;
		}
	}
}

/* Some stack may match a code point that begins with the partial bytes. */
bool
gram_partial_ok(const opus_grammar *g, const struct sset *in, uint32_t partial,
		   uint8_t remain, uint8_t plen)
{
	uint32_t	lo = partial << (6 * remain),
				hi = ((partial + 1) << (6 * remain)) - 1;
	uint32_t	total = (uint32_t) plen + remain;
	uint32_t	min = total == 2 ? 0x80 : total == 3 ? 0x800 : 0x10000;

	/* no overlong forms, nothing past U+10FFFF */
	if (lo < min)
		lo = min;
	if (hi > 0x10FFFF)
		hi = 0x10FFFF;
	if (lo > hi)
		return false;

	for (uint32_t i = 0; i < in->n; i++)
	{
		uint32_t	len = in->off[i + 1] - in->off[i];

		if (len > 0 && match_char_range(g, in->data[in->off[i] + len - 1], lo, hi))
			return true;
	}
	return false;
}

/*
 * The UTF-8 decoder step: returns 1 with *cp set when a code point is
 * complete, 0 when more bytes are needed, -1 on invalid UTF-8.
 */
int
gram_utf8_step(uint32_t *partial, uint8_t *remain, uint8_t *plen, uint8_t b, uint32_t *cp)
{
	if (*remain == 0)
	{
		if (b < 0x80)
		{
			*cp = b;
			return 1;
		}
		if ((b & 0xE0) == 0xC0 && b >= 0xC2)
		{
			*partial = b & 0x1F;
			*remain = 1;
		}
		else if ((b & 0xF0) == 0xE0)
		{
			*partial = b & 0x0F;
			*remain = 2;
		}
		else if ((b & 0xF8) == 0xF0 && b <= 0xF4)
		{
			*partial = b & 0x07;
			*remain = 3;
		}
		else
			return -1;
		*plen = 1;
		return 0;
	}
	if ((b & 0xC0) != 0x80)
		return -1;
	*partial = (*partial << 6) | (b & 0x3F);
	(*plen)++;
	if (--*remain == 0)
	{
		uint32_t	min = *plen == 2 ? 0x80 : *plen == 3 ? 0x800 : 0x10000;

		*cp = *partial;
		*partial = 0;
		*plen = 0;
		if (*cp > 0x10FFFF || *cp < min)
			return -1;			/* past Unicode, or an overlong form */
		return 1;
	}
	return 0;
}

bool
opus_grammar_accept_bytes(opus_grammar_state *s, const uint8_t *bytes, size_t n)
{
	struct sset saved = {0};
	uint32_t	partial = s->partial;
	uint8_t		remain = s->remain,
				plen = s->partial_len;
	bool		ok = true;
	bool		moved = false;

	if (s->failed)
		return false;
	for (size_t i = 0; i < n && ok; i++)
	{
		uint32_t	cp = 0;
		int			r = gram_utf8_step(&partial, &remain, &plen, bytes[i], &cp);

		if (r < 0)
			ok = false;
		else if (r == 0)
			ok = gram_partial_ok(s->g, &s->st, partial, remain, plen);
		else
		{
			struct sset tmp;

			if (!moved)
			{
				/* keep the original for a rollback */
				if (!sset_copy(&saved, &s->st))
				{
					ok = false;
					break;
				}
				moved = true;
			}
			gram_advance_cp(s->g, &s->w, &s->st, cp, &s->next);
			if (s->next.overflow || s->next.n == 0)
				ok = false;
			else
			{
				tmp = s->st;
				s->st = s->next;
				s->next = tmp;
			}
		}
	}
	if (ok)
	{
		s->partial = partial;
		s->remain = remain;
		s->partial_len = plen;
	}
	else if (moved)
	{
		struct sset tmp = s->st;

		s->st = saved;
		saved = tmp;
	}
	gram_sset_destroy(&saved);
	return ok;
}

bool
opus_grammar_is_accepting(const opus_grammar_state *s)
{
	if (s->failed || s->remain)
		return false;
	for (uint32_t i = 0; i < s->st.n; i++)
		if (s->st.off[i + 1] == s->st.off[i])
			return true;
	return false;
}

bool
opus_grammar_is_finished(const opus_grammar_state *s)
{
	if (s->failed)
		return true;
	if (s->remain)
		return false;
	for (uint32_t i = 0; i < s->st.n; i++)
		if (s->st.off[i + 1] != s->st.off[i])
			return false;
	return true;
}

bool
opus_grammar_matches(const opus_grammar *g, const char *text, size_t len)
{
	opus_grammar_state *s = opus_grammar_state_new(g);
	bool		ok;

	if (!s)
		return false;
	ok = opus_grammar_accept_bytes(s, (const uint8_t *) text, len) &&
		opus_grammar_is_accepting(s);
	opus_grammar_state_free(s);
	return ok;
}

