/*
 * grammar_parse.c - GBNF text to the compiled form (grammar_int.h): the
 * parser (rules, alternatives, sequences, character classes, repetitions
 * rewritten into generated rules), the checks on the result (undefined or
 * unproductive rules, left recursion), opus_grammar_compile / _free, and
 * the process-wide cache of compiled grammars (opus_grammar_get /
 * _release).  The automaton and the token masks are in grammar.c.
 */
#include "text/grammar_int.h"
#include "text/unicode.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t
opus_grammar_hash(const char *text, size_t len)
{
	return hash_bytes(0xcbf29ce484222325ULL, text, len);
}

enum opus_status
opus_grammar_status(enum opus_grammar_errcode code)
{
	switch (code)
	{
		case OPUS_GRAMMAR_OK:
			return OPUS_OK;
		case OPUS_GRAMMAR_ERR_TOO_LARGE:
			return OPUS_ERR_CAPACITY;
		case OPUS_GRAMMAR_ERR_NOMEM:
			return OPUS_ERR_NOMEM;
		default:
			return OPUS_ERR_INVALID_ARG;
	}
}

/* ------------------------------------------------------------------------
 * Parser
 * ------------------------------------------------------------------------ */

struct evec
{
	struct el  *v;
	uint32_t	n;
	uint32_t	cap;
};

struct sym
{
	char	   *name;
	size_t		len;
	uint32_t	id;
};

struct parser
{
	const char *text;
	size_t		len;
	struct evec *rules;			/* by rule id; n == 0: not defined */
	size_t	   *first_use;		/* offset of the first reference, by id */
	bool	   *defined;
	uint32_t	n_rules;
	uint32_t	cap_rules;
	struct sym *syms;			/* named rules, linear (names are few) */
	uint32_t	n_syms;
	uint32_t	cap_syms;
	uint32_t   *sym_of_rule;	/* index into syms or UINT32_MAX */
	size_t		total_el;
	int			depth;
	struct opus_grammar_error *err;
	bool		failed;
};

#define MAX_NESTING 200

static void
perr(struct parser *p, enum opus_grammar_errcode code, size_t at,
	 const char *fmt,...)
	__attribute__((format(printf, 4, 5)));

static void
perr(struct parser *p, enum opus_grammar_errcode code, size_t at,
	 const char *fmt,...)
{
	va_list		ap;
	int			line = 1,
				col = 1;
	char		buf[192];

	if (p->failed)
		return;
	p->failed = true;
	if (!p->err)
		return;
	if (at > p->len)
		at = p->len;
	for (size_t i = 0; i < at; i++)
	{
		if (p->text[i] == '\n')
		{
			line++;
			col = 1;
		}
		else
			col++;
	}
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	p->err->code = code;
	if (code == OPUS_GRAMMAR_ERR_SYNTAX || code == OPUS_GRAMMAR_ERR_UNDEFINED)
	{
		p->err->line = line;
		p->err->col = col;
		snprintf(p->err->msg, sizeof(p->err->msg),
				 "grammar line %d, column %d: %s", line, col, buf);
	}
	else
	{
		p->err->line = 0;
		p->err->col = 0;
		snprintf(p->err->msg, sizeof(p->err->msg), "grammar: %s", buf);
	}
}

static bool
evec_push(struct parser *p, struct evec *v, uint32_t type, uint32_t value)
{
	if (p->failed)
		return false;
	if (p->total_el >= OPUS_GRAMMAR_MAX_ELEMS)
	{
		perr(p, OPUS_GRAMMAR_ERR_TOO_LARGE, 0,
			 "grammar too large (more than %d elements)", OPUS_GRAMMAR_MAX_ELEMS);
		return false;
	}
	if (v->n == v->cap)
	{
		uint32_t	nc = v->cap ? v->cap * 2 : 16;
		struct el  *nv = realloc(v->v, nc * sizeof(*nv));

		if (!nv)
		{
			perr(p, OPUS_GRAMMAR_ERR_NOMEM, 0, "out of memory");
			return false;
		}
		v->v = nv;
		v->cap = nc;
	}
	v->v[v->n].type = type;
	v->v[v->n].value = value;
	v->n++;
	p->total_el++;
	return true;
}

/* A new rule id (named: sym index, or generated). */
static uint32_t
new_rule(struct parser *p, uint32_t sym)
{
	if (p->n_rules == p->cap_rules)
	{
		uint32_t	nc = p->cap_rules ? p->cap_rules * 2 : 32;
		struct evec *nr;
		size_t	   *nf;
		bool	   *nd;
		uint32_t   *ns;

		if (nc > OPUS_GRAMMAR_MAX_ELEMS)
		{
			perr(p, OPUS_GRAMMAR_ERR_TOO_LARGE, 0,
				 "grammar too large (too many rules)");
			return 0;
		}
		nr = realloc(p->rules, nc * sizeof(*nr));
		if (nr)
			p->rules = nr;
		nf = realloc(p->first_use, nc * sizeof(*nf));
		if (nf)
			p->first_use = nf;
		nd = realloc(p->defined, nc * sizeof(*nd));
		if (nd)
			p->defined = nd;
		ns = realloc(p->sym_of_rule, nc * sizeof(*ns));
		if (ns)
			p->sym_of_rule = ns;
		if (!nr || !nf || !nd || !ns)
		{
			perr(p, OPUS_GRAMMAR_ERR_NOMEM, 0, "out of memory");
			return 0;
		}
		p->cap_rules = nc;
	}
	memset(&p->rules[p->n_rules], 0, sizeof(struct evec));
	p->first_use[p->n_rules] = SIZE_MAX;
	p->defined[p->n_rules] = false;
	p->sym_of_rule[p->n_rules] = sym;
	return p->n_rules++;
}

static uint32_t
symbol_id(struct parser *p, const char *name, size_t len)
{
	for (uint32_t i = 0; i < p->n_syms; i++)
		if (p->syms[i].len == len && memcmp(p->syms[i].name, name, len) == 0)
			return p->syms[i].id;
	if (p->n_syms == p->cap_syms)
	{
		uint32_t	nc = p->cap_syms ? p->cap_syms * 2 : 16;
		struct sym *ns = realloc(p->syms, nc * sizeof(*ns));

		if (!ns)
		{
			perr(p, OPUS_GRAMMAR_ERR_NOMEM, 0, "out of memory");
			return 0;
		}
		p->syms = ns;
		p->cap_syms = nc;
	}
	p->syms[p->n_syms].name = malloc(len + 1);
	if (!p->syms[p->n_syms].name)
	{
		perr(p, OPUS_GRAMMAR_ERR_NOMEM, 0, "out of memory");
		return 0;
	}
	memcpy(p->syms[p->n_syms].name, name, len);
	p->syms[p->n_syms].name[len] = 0;
	p->syms[p->n_syms].len = len;
	p->syms[p->n_syms].id = new_rule(p, p->n_syms);
	if (p->failed)
		return 0;
	return p->syms[p->n_syms++].id;
}

static const char *
rule_name(struct parser *p, uint32_t id)
{
	uint32_t	s = p->sym_of_rule[id];

	return s == UINT32_MAX ? "(generated)" : p->syms[s].name;
}

static inline bool
is_word_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || c == '-' || c == '_';
}

static inline int
peek(struct parser *p, size_t pos)
{
	return pos < p->len ? (unsigned char) p->text[pos] : -1;
}

static size_t
parse_space(struct parser *p, size_t pos, bool newline_ok)
{
	for (;;)
	{
		int			c = peek(p, pos);

		if (c == ' ' || c == '\t' || c == '#' ||
			(newline_ok && (c == '\r' || c == '\n')))
		{
			if (c == '#')
			{
				while (pos < p->len && p->text[pos] != '\r' && p->text[pos] != '\n')
					pos++;
			}
			else
				pos++;
		}
		else
			return pos;
	}
}

static size_t
parse_name(struct parser *p, size_t pos)
{
	size_t		end = pos;

	while (end < p->len && is_word_char(p->text[end]))
		end++;
	if (end == pos)
		perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "expecting a rule name");
	return end;
}

static size_t
parse_int(struct parser *p, size_t pos, uint32_t *out)
{
	size_t		end = pos;
	uint64_t	v = 0;

	while (end < p->len && p->text[end] >= '0' && p->text[end] <= '9')
	{
		v = v * 10 + (uint64_t) (p->text[end] - '0');
		if (v > OPUS_GRAMMAR_MAX_REPEAT)
		{
			perr(p, OPUS_GRAMMAR_ERR_TOO_LARGE, pos,
				 "repetition count above %d", OPUS_GRAMMAR_MAX_REPEAT);
			return end;
		}
		end++;
	}
	if (end == pos)
		perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "expecting an integer");
	*out = (uint32_t) v;
	return end;
}

/* One UTF-8 code point of the grammar text. */
static size_t
decode_utf8(struct parser *p, size_t pos, uint32_t *cp)
{
	unsigned char c = (unsigned char) p->text[pos];
	int			n;
	uint32_t	v;

	if (c < 0x80)
	{
		*cp = c;
		return pos + 1;
	}
	if ((c & 0xE0) == 0xC0)
	{
		n = 1;
		v = c & 0x1F;
	}
	else if ((c & 0xF0) == 0xE0)
	{
		n = 2;
		v = c & 0x0F;
	}
	else if ((c & 0xF8) == 0xF0)
	{
		n = 3;
		v = c & 0x07;
	}
	else
	{
		perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "invalid UTF-8");
		return pos + 1;
	}
	for (int i = 1; i <= n; i++)
	{
		int			d = peek(p, pos + i);

		if (d < 0 || (d & 0xC0) != 0x80)
		{
			perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "invalid UTF-8");
			return pos + 1;
		}
		v = (v << 6) | (uint32_t) (d & 0x3F);
	}
	*cp = v;
	return pos + 1 + n;
}

/* One character of a literal or class, with escapes. */
static size_t
parse_char(struct parser *p, size_t pos, uint32_t *cp)
{
	if (pos >= p->len)
	{
		perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "unexpected end of input");
		return pos;
	}
	if (p->text[pos] == '\\')
	{
		int			c = peek(p, pos + 1);
		int			nhex = 0;

		switch (c)
		{
			case 'x':
				nhex = 2;
				break;
			case 'u':
				nhex = 4;
				break;
			case 'U':
				nhex = 8;
				break;
			case 't':
				*cp = '\t';
				return pos + 2;
			case 'r':
				*cp = '\r';
				return pos + 2;
			case 'n':
				*cp = '\n';
				return pos + 2;
			case '\\':
			case '"':
			case '[':
			case ']':
			case '-':
			case '^':
			case '.':
			case '/':
			case '(':
			case ')':
			case '*':
			case '+':
			case '?':
			case '{':
			case '}':
			case '|':
				*cp = (uint32_t) c;
				return pos + 2;
			default:
				perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "unknown escape");
				return pos + 1;
		}
		{
			uint32_t	v = 0;

			for (int i = 0; i < nhex; i++)
			{
				int			h = opus_hex_digit(peek(p, pos + 2 + i));

				if (h < 0)
				{
					perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "expecting %d hex digits", nhex);
					return pos + 1;
				}
				v = (v << 4) | (uint32_t) h;
			}
			if (v > 0x10FFFF)
			{
				perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "code point above U+10FFFF");
				return pos + 1;
			}
			*cp = v;
			return pos + 2 + (size_t) nhex;
		}
	}
	return decode_utf8(p, pos, cp);
}

static size_t parse_alternates(struct parser *p, size_t pos, uint32_t rule_id,
							   bool nested);

/* x{min,max} on out[last_sym_start..]; max < 0: unbounded. */
static void
handle_repetition(struct parser *p, size_t at, uint32_t out_id,
				  uint32_t last_sym_start, uint32_t min, int64_t max)
{
	struct evec *out = &p->rules[out_id];
	struct evec prev = {0};
	uint32_t	n_prev;
	uint32_t	last_rec = 0;
	int64_t		n_opt;

	if (last_sym_start == out->n)
	{
		perr(p, OPUS_GRAMMAR_ERR_SYNTAX, at, "repetition without a preceding item");
		return;
	}
	if (max >= 0 && (int64_t) min > max)
	{
		perr(p, OPUS_GRAMMAR_ERR_SYNTAX, at, "repetition minimum above its maximum");
		return;
	}
	n_prev = out->n - last_sym_start;
	prev.v = malloc(n_prev * sizeof(struct el));
	if (!prev.v)
	{
		perr(p, OPUS_GRAMMAR_ERR_NOMEM, at, "out of memory");
		return;
	}
	memcpy(prev.v, out->v + last_sym_start, n_prev * sizeof(struct el));
	prev.n = prev.cap = n_prev;

	if (min == 0)
	{
		p->total_el -= n_prev;
		out->n = last_sym_start;
	}
	else
		for (uint32_t i = 1; i < min && !p->failed; i++)
			for (uint32_t j = 0; j < n_prev; j++)
				evec_push(p, &p->rules[out_id], prev.v[j].type, prev.v[j].value);

	n_opt = max < 0 ? 1 : max - (int64_t) min;
	for (int64_t i = 0; i < n_opt && !p->failed; i++)
	{
		uint32_t	id = new_rule(p, UINT32_MAX);
		struct evec *r;

		if (p->failed)
			break;
		r = &p->rules[id];
		(void) out;
		for (uint32_t j = 0; j < n_prev; j++)
			evec_push(p, r, prev.v[j].type, prev.v[j].value);
		if (i > 0 || max < 0)
			evec_push(p, r, EL_RULE_REF, max < 0 ? id : last_rec);
		evec_push(p, r, EL_ALT, 0);
		evec_push(p, r, EL_END, 0);
		p->defined[id] = true;
		last_rec = id;
	}
	if (n_opt > 0 && !p->failed)
		evec_push(p, &p->rules[out_id], EL_RULE_REF, last_rec);
	free(prev.v);
}

static size_t
parse_sequence(struct parser *p, size_t pos, uint32_t rule_id, bool nested)
{
	uint32_t	last_sym_start = p->rules[rule_id].n;

	while (!p->failed && pos < p->len)
	{
		char		c = p->text[pos];
		struct evec *out = &p->rules[rule_id];

		if (c == '"')
		{
			pos++;
			last_sym_start = out->n;
			while (!p->failed && peek(p, pos) != '"')
			{
				uint32_t	cp = 0;

				if (pos >= p->len)
				{
					perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "unterminated literal");
					break;
				}
				pos = parse_char(p, pos, &cp);
				evec_push(p, &p->rules[rule_id], EL_CHAR, cp);
			}
			pos = parse_space(p, pos + 1, nested);
		}
		else if (c == '[')
		{
			uint32_t	start_type = EL_CHAR;

			pos++;
			last_sym_start = out->n;
			if (peek(p, pos) == '^')
			{
				pos++;
				start_type = EL_CHAR_NOT;
			}
			while (!p->failed && peek(p, pos) != ']')
			{
				uint32_t	cp = 0;
				uint32_t	type;

				if (pos >= p->len)
				{
					perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "unterminated character class");
					break;
				}
				type = last_sym_start < p->rules[rule_id].n ? EL_CHAR_ALT : start_type;
				pos = parse_char(p, pos, &cp);
				evec_push(p, &p->rules[rule_id], type, cp);
				if (peek(p, pos) == '-' && peek(p, pos + 1) != ']' && pos + 1 < p->len)
				{
					uint32_t	hi = 0;
					size_t		at = pos;

					pos = parse_char(p, pos + 1, &hi);
					if (!p->failed && hi < cp)
						perr(p, OPUS_GRAMMAR_ERR_SYNTAX, at, "range out of order");
					evec_push(p, &p->rules[rule_id], EL_CHAR_RNG_UPPER, hi);
				}
			}
			if (!p->failed && last_sym_start == p->rules[rule_id].n)
			{
				/* [] matches nothing; [^] anything */
				if (start_type == EL_CHAR_NOT)
					evec_push(p, &p->rules[rule_id], EL_CHAR_ANY, 0);
				else
				{
					perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "empty character class");
					break;
				}
			}
			pos = parse_space(p, pos + 1, nested);
		}
		else if (is_word_char(c))
		{
			size_t		end = parse_name(p, pos);
			uint32_t	ref = symbol_id(p, p->text + pos, end - pos);

			if (p->failed)
				break;
			if (p->first_use[ref] == SIZE_MAX)
				p->first_use[ref] = pos;
			last_sym_start = p->rules[rule_id].n;
			evec_push(p, &p->rules[rule_id], EL_RULE_REF, ref);
			pos = parse_space(p, end, nested);
		}
		else if (c == '(')
		{
			uint32_t	sub;

			if (++p->depth > MAX_NESTING)
			{
				perr(p, OPUS_GRAMMAR_ERR_TOO_LARGE, pos,
					 "groups nested deeper than %d", MAX_NESTING);
				break;
			}
			pos = parse_space(p, pos + 1, true);
			sub = new_rule(p, UINT32_MAX);
			if (p->failed)
				break;
			pos = parse_alternates(p, pos, sub, true);
			p->depth--;
			if (p->failed)
				break;
			last_sym_start = p->rules[rule_id].n;
			evec_push(p, &p->rules[rule_id], EL_RULE_REF, sub);
			if (peek(p, pos) != ')')
			{
				perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "expecting ')'");
				break;
			}
			pos = parse_space(p, pos + 1, nested);
		}
		else if (c == '.')
		{
			last_sym_start = out->n;
			evec_push(p, out, EL_CHAR_ANY, 0);
			pos = parse_space(p, pos + 1, nested);
		}
		else if (c == '*' || c == '+' || c == '?')
		{
			handle_repetition(p, pos, rule_id, last_sym_start,
							  c == '+' ? 1 : 0, c == '?' ? 1 : -1);
			pos = parse_space(p, pos + 1, nested);
		}
		else if (c == '{')
		{
			uint32_t	min = 0,
						maxv = 0;
			int64_t		max;
			size_t		at = pos;

			pos = parse_space(p, pos + 1, false);
			pos = parse_int(p, pos, &min);
			pos = parse_space(p, pos, false);
			max = min;
			if (peek(p, pos) == ',')
			{
				pos = parse_space(p, pos + 1, false);
				if (peek(p, pos) == '}')
					max = -1;
				else
				{
					pos = parse_int(p, pos, &maxv);
					max = maxv;
					pos = parse_space(p, pos, false);
				}
			}
			if (p->failed)
				break;
			if (peek(p, pos) != '}')
			{
				perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "expecting '}'");
				break;
			}
			handle_repetition(p, at, rule_id, last_sym_start, min, max);
			pos = parse_space(p, pos + 1, nested);
		}
		else
			break;
	}
	return pos;
}

static size_t
parse_alternates(struct parser *p, size_t pos, uint32_t rule_id, bool nested)
{
	pos = parse_sequence(p, pos, rule_id, nested);
	while (!p->failed && peek(p, pos) == '|')
	{
		evec_push(p, &p->rules[rule_id], EL_ALT, 0);
		pos = parse_space(p, pos + 1, true);
		pos = parse_sequence(p, pos, rule_id, nested);
	}
	evec_push(p, &p->rules[rule_id], EL_END, 0);
	p->defined[rule_id] = true;
	return pos;
}

static size_t
parse_rule(struct parser *p, size_t pos)
{
	size_t		end = parse_name(p, pos);
	uint32_t	id;

	if (p->failed)
		return end;
	id = symbol_id(p, p->text + pos, end - pos);
	if (p->failed)
		return end;
	if (p->defined[id])
	{
		perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "rule '%s' defined twice",
			 rule_name(p, id));
		return end;
	}
	pos = parse_space(p, end, false);
	if (!(peek(p, pos) == ':' && peek(p, pos + 1) == ':' && peek(p, pos + 2) == '='))
	{
		perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "expecting '::='");
		return pos;
	}
	pos = parse_space(p, pos + 3, true);
	pos = parse_alternates(p, pos, id, false);
	if (p->failed)
		return pos;
	if (peek(p, pos) == '\r')
		pos += peek(p, pos + 1) == '\n' ? 2 : 1;
	else if (peek(p, pos) == '\n')
		pos++;
	else if (pos < p->len)
	{
		perr(p, OPUS_GRAMMAR_ERR_SYNTAX, pos, "expecting newline or end of input");
		return pos;
	}
	return parse_space(p, pos, true);
}

static void
parser_free(struct parser *p)
{
	for (uint32_t i = 0; i < p->n_rules; i++)
		free(p->rules[i].v);
	for (uint32_t i = 0; i < p->n_syms; i++)
		free(p->syms[i].name);
	free(p->rules);
	free(p->first_use);
	free(p->defined);
	free(p->sym_of_rule);
	free(p->syms);
}

/* ------------------------------------------------------------------------
 * Checks on the compiled grammar
 * ------------------------------------------------------------------------ */

/*
 * Fixed points over the rules: nullable (derives ""), productive (derives
 * some string), nonempty (derives some non-empty string).
 */
static void
rule_props(const opus_grammar *g, bool *nullable, bool *productive, bool *nonempty)
{
	bool		changed = true;

	memset(nullable, 0, g->n_rules);
	memset(productive, 0, g->n_rules);
	memset(nonempty, 0, g->n_rules);
	while (changed)
	{
		changed = false;
		for (uint32_t r = 0; r < g->n_rules; r++)
		{
			uint32_t	pos = g->rule_start[r];

			for (;;)
			{
				bool		all_null = true,
							all_prod = true,
							some_ne = false;

				for (; !is_end(&g->el[pos]); pos++)
				{
					const struct el *e = &g->el[pos];

					if (e->type == EL_RULE_REF)
					{
						all_null &= nullable[e->value];
						all_prod &= productive[e->value];
						some_ne |= nonempty[e->value];
					}
					else if (e->type != EL_CHAR_ALT && e->type != EL_CHAR_RNG_UPPER)
					{
						all_null = false;
						some_ne = true;
					}
				}
				if (all_null && !nullable[r])
					nullable[r] = changed = true;
				if (all_prod && !productive[r])
					productive[r] = changed = true;
				if (all_prod && some_ne && !nonempty[r])
					nonempty[r] = changed = true;
				if (g->el[pos].type == EL_END)
					break;
				pos++;
			}
		}
	}
}

/*
 * Left recursion: a rule reachable from itself through rule references that
 * start an alternative or follow only nullable rules.  Iterative DFS with
 * colours (0 new, 1 on the path, 2 done).
 */
static int64_t
find_left_recursion(const opus_grammar *g, const bool *nullable)
{
	uint8_t    *colour = calloc(g->n_rules, 1);
	uint32_t   *stack_rule = malloc(g->n_rules * sizeof(uint32_t));
	uint32_t   *stack_pos = malloc(g->n_rules * sizeof(uint32_t));
	int64_t		found = -1;

	if (!colour || !stack_rule || !stack_pos)
	{
		free(colour);
		free(stack_rule);
		free(stack_pos);
		return -2;
	}
	for (uint32_t s = 0; s < g->n_rules && found < 0; s++)
	{
		int64_t		sp = 0;

		if (colour[s])
			continue;
		colour[s] = 1;
		stack_rule[0] = s;
		stack_pos[0] = g->rule_start[s];
		while (sp >= 0 && found < 0)
		{
			uint32_t	r = stack_rule[sp];
			uint32_t	pos = stack_pos[sp];
			bool		pushed = false;

			/* next left-edge reference of r from pos */
			while (!pushed)
			{
				const struct el *e = &g->el[pos];

				if (e->type == EL_END)
					break;
				if (e->type == EL_ALT)
				{
					pos++;
					continue;
				}
				if (e->type == EL_RULE_REF)
				{
					uint32_t	t = e->value;

					/* resume after this ref: next element if t nullable,
					 * else the next alternative */
					uint32_t	next = pos + 1;

					if (!nullable[t])
						while (!is_end(&g->el[next]))
							next++;
					stack_pos[sp] = next;
					if (colour[t] == 1)
					{
						found = t;
						break;
					}
					if (colour[t] == 0)
					{
						colour[t] = 1;
						sp++;
						stack_rule[sp] = t;
						stack_pos[sp] = g->rule_start[t];
						pushed = true;
					}
					pos = next;
					continue;
				}
				/* a character: the rest of this alternative is not left */
				while (!is_end(&g->el[pos]))
					pos++;
			}
			if (found >= 0 || pushed)
				continue;
			colour[r] = 2;
			sp--;
		}
	}
	free(colour);
	free(stack_rule);
	free(stack_pos);
	return found;
}

void
opus_grammar_free(opus_grammar *g)
{
	if (!g)
		return;
	free(g->el);
	free(g->rule_start);
	free(g->text);
	for (int i = 0; i < g->n_masks; i++)
	{
		free(g->masks[i].key);
		free(g->masks[i].mask);
	}
	free(g->masks);
	for (int i = 0; i < g->n_classes; i++)
	{
		free(g->classes[i].accept);
		free(g->classes[i].dep);
	}
	free(g->classes);
	free(g->class_tab);
	pthread_mutex_destroy(&g->mask_mu);
	free(g);
}

size_t
opus_grammar_size(const opus_grammar *g)
{
	return g->n_el;
}

opus_grammar *
opus_grammar_compile(const char *text, size_t len, struct opus_grammar_error *err)
{
	struct parser p = {0};
	struct opus_grammar_error dummy;
	opus_grammar *g = NULL;
	size_t		pos;
	bool	   *props = NULL;
	uint32_t	root = UINT32_MAX;

	if (!err)
		err = &dummy;
	memset(err, 0, sizeof(*err));
	p.text = text;
	p.len = len;
	p.err = err;
	if (len > OPUS_GRAMMAR_MAX_TEXT)
	{
		perr(&p, OPUS_GRAMMAR_ERR_TOO_LARGE, 0,
			 "grammar text longer than %d bytes", OPUS_GRAMMAR_MAX_TEXT);
		return NULL;
	}
	if (text == NULL && len > 0)
	{
		perr(&p, OPUS_GRAMMAR_ERR_SYNTAX, 0, "no text");
		return NULL;
	}
	pos = parse_space(&p, 0, true);
	while (!p.failed && pos < len)
		pos = parse_rule(&p, pos);
	if (p.failed)
		goto out;

	/* undefined references, root */
	for (uint32_t r = 0; r < p.n_rules; r++)
		if (!p.defined[r])
		{
			perr(&p, OPUS_GRAMMAR_ERR_UNDEFINED, p.first_use[r] == SIZE_MAX ? 0 : p.first_use[r],
				 "undefined rule '%s'", rule_name(&p, r));
			goto out;
		}
	for (uint32_t i = 0; i < p.n_syms; i++)
		if (p.syms[i].len == 4 && memcmp(p.syms[i].name, "root", 4) == 0)
			root = p.syms[i].id;
	if (root == UINT32_MAX)
	{
		perr(&p, OPUS_GRAMMAR_ERR_UNDEFINED, 0, "no 'root' rule");
		p.err->line = 0;
		p.err->col = 0;
		goto out;
	}

	/* flatten */
	g = calloc(1, sizeof(*g));
	if (!g)
	{
		perr(&p, OPUS_GRAMMAR_ERR_NOMEM, 0, "out of memory");
		goto out;
	}
	pthread_mutex_init(&g->mask_mu, NULL);
	g->n_rules = p.n_rules;
	g->root = root;
	g->n_el = (uint32_t) p.total_el;
	g->el = malloc((p.total_el + 1) * sizeof(struct el));
	g->rule_start = malloc(p.n_rules * sizeof(uint32_t));
	props = malloc(3 * (size_t) p.n_rules + 1);
	if (!g->el || !g->rule_start || !props)
	{
		perr(&p, OPUS_GRAMMAR_ERR_NOMEM, 0, "out of memory");
		goto fail;
	}
	{
		uint32_t	at = 0;

		for (uint32_t r = 0; r < p.n_rules; r++)
		{
			g->rule_start[r] = at;
			memcpy(g->el + at, p.rules[r].v, p.rules[r].n * sizeof(struct el));
			at += p.rules[r].n;
		}
		g->n_el = at;
	}
	{
		bool	   *nullable = props,
				   *productive = props + p.n_rules,
				   *nonempty = props + 2 * p.n_rules;
		int64_t		lr;

		rule_props(g, nullable, productive, nonempty);
		lr = find_left_recursion(g, nullable);
		if (lr == -2)
		{
			perr(&p, OPUS_GRAMMAR_ERR_NOMEM, 0, "out of memory");
			goto fail;
		}
		if (lr >= 0)
		{
			perr(&p, OPUS_GRAMMAR_ERR_LEFT_RECURSION, 0,
				 "left recursion in rule '%s'", rule_name(&p, (uint32_t) lr));
			goto fail;
		}
		if (!productive[root])
		{
			perr(&p, OPUS_GRAMMAR_ERR_EMPTY, 0, "the grammar accepts no string");
			goto fail;
		}
		if (!nonempty[root])
		{
			perr(&p, OPUS_GRAMMAR_ERR_EMPTY, 0, "the grammar accepts only the empty string");
			goto fail;
		}
	}
	free(props);
	parser_free(&p);
	return g;

fail:
	free(props);
	opus_grammar_free(g);
	g = NULL;
out:
	parser_free(&p);
	return NULL;
}

/* ------------------------------------------------------------------------
 * Cache of compiled grammars
 * ------------------------------------------------------------------------ */

#define GRAMMAR_CACHE_MAX 32

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static opus_grammar *cache[GRAMMAR_CACHE_MAX];
static uint64_t cache_tick;

opus_grammar *
opus_grammar_get(const char *text, size_t len, struct opus_grammar_error *err)
{
	uint64_t	h = opus_grammar_hash(text, len);
	opus_grammar *g;
	int			victim = -1;

	pthread_mutex_lock(&cache_mu);
	for (int i = 0; i < GRAMMAR_CACHE_MAX; i++)
	{
		g = cache[i];
		if (g && g->hash == h && g->text_len == len &&
			(len == 0 || memcmp(g->text, text, len) == 0))
		{
			g->refs++;
			g->last_use = ++cache_tick;
			pthread_mutex_unlock(&cache_mu);
			if (err)
				memset(err, 0, sizeof(*err));
			return g;
		}
	}
	pthread_mutex_unlock(&cache_mu);

	g = opus_grammar_compile(text, len, err);
	if (!g)
		return NULL;
	g->hash = h;
	g->text = malloc(len + 1);
	if (!g->text)
	{
		opus_grammar_free(g);
		if (err)
		{
			err->code = OPUS_GRAMMAR_ERR_NOMEM;
			snprintf(err->msg, sizeof(err->msg), "out of memory");
		}
		return NULL;
	}
	if (len)
		memcpy(g->text, text, len);
	g->text_len = len;
	g->refs = 2;				/* the caller's and the cache's */

	pthread_mutex_lock(&cache_mu);
	g->last_use = ++cache_tick;
	for (int i = 0; i < GRAMMAR_CACHE_MAX; i++)
	{
		if (!cache[i])
		{
			victim = i;
			break;
		}
		if (victim < 0 || cache[i]->last_use < cache[victim]->last_use)
			victim = i;
	}
	if (cache[victim])
	{
		opus_grammar *old = cache[victim];

		if (--old->refs == 0)
			opus_grammar_free(old);
	}
	cache[victim] = g;
	pthread_mutex_unlock(&cache_mu);
	return g;
}

void
opus_grammar_release(opus_grammar *g)
{
	bool		last;

	if (!g)
		return;
	pthread_mutex_lock(&cache_mu);
	last = --g->refs <= 0;
	pthread_mutex_unlock(&cache_mu);
	if (last)
		opus_grammar_free(g);
}
