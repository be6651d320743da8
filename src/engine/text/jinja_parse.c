/*
 * jinja_parse.c - parser of the Jinja subset (jinja.h), and the arena
 * everything lives in; the lexer is jinja_lex.c (jinja_lex.h).
 *
 * The parser is recursive descent in jinja2's operator precedence (lowest
 * first): conditional expression, or, and, not, comparisons (==, !=, <, <=,
 * >, >=, in, not in), + -, ~, * / // %, **, unary - +, then postfix
 * (.attr, [item], [a:b:c], call) and filters / tests ("|f", "is t").
 * Recursion is bounded by limits->max_depth; any error unwinds with
 * longjmp to opus_jinja_parse (the arena is freed as a whole).
 */
#include "text/jinja_int.h"
#include "text/jinja_lex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ arena */

struct jblock
{
	struct jblock *next;
	size_t		size,
				used;
	_Alignas(16) unsigned char mem[];
};

void *
ja_alloc(struct jarena *a, size_t n)
{
	struct jblock *b = a->head;

	n = (n + 15) & ~(size_t) 15;
	if (n == 0)
		n = 16;
	if (n > a->limit || a->used > a->limit - n)
		return NULL;
	if (b == NULL || b->size - b->used < n)
	{
		size_t		sz = n > 65536 ? n : 65536;

		b = malloc(sizeof(*b) + sz);
		if (b == NULL)
			return NULL;
		b->size = sz;
		b->used = 0;
		b->next = a->head;
		a->head = b;
	}
	{
		void	   *p = b->mem + b->used;

		b->used += n;
		a->used += n;
		memset(p, 0, n);
		return p;
	}
}

void
ja_free(struct jarena *a)
{
	struct jblock *b = a->head;

	while (b)
	{
		struct jblock *nx = b->next;

		free(b);
		b = nx;
	}
	a->head = NULL;
	a->used = 0;
}

void
opus_jinja_limits_default(struct opus_jinja_limits *l)
{
	if (l->max_output == 0)
		l->max_output = 8u << 20;
	if (l->max_memory == 0)
		l->max_memory = 64u << 20;
	if (l->max_steps == 0)
		l->max_steps = 10000000;
	if (l->max_depth <= 0)
		l->max_depth = 128;
}

/* ----------------------------------------------------------------- parser */

static struct tok *
cur(struct parser *p)
{
	return &p->toks[p->ti];
}

static struct tok *
next_tok(struct parser *p)
{
	struct tok *t = &p->toks[p->ti];

	if (t->type != T_EOF)
		p->ti++;
	return t;
}

static bool
is_op(struct parser *p, const char *op)
{
	struct tok *t = cur(p);

	return t->type == T_OP && strcmp(t->s, op) == 0;
}

static bool
is_name(struct parser *p, const char *name)
{
	struct tok *t = cur(p);

	return t->type == T_NAME && strcmp(t->s, name) == 0;
}

static bool
skip_op(struct parser *p, const char *op)
{
	if (is_op(p, op))
	{
		p->ti++;
		return true;
	}
	return false;
}

static bool
skip_name(struct parser *p, const char *name)
{
	if (is_name(p, name))
	{
		p->ti++;
		return true;
	}
	return false;
}

static const char *
tok_desc(struct tok *t)
{
	switch (t->type)
	{
		case T_EOF:
			return "end of template";
		case T_DATA:
			return "text";
		case T_VAR_BEGIN:
			return "'{{'";
		case T_VAR_END:
			return "'}}'";
		case T_BLOCK_BEGIN:
			return "'{%'";
		case T_BLOCK_END:
			return "'%}'";
		case T_NAME:
		case T_OP:
			return t->s;
		case T_STRING:
			return "a string";
		default:
			return "a number";
	}
}

static void
expect_op(struct parser *p, const char *op)
{
	if (!skip_op(p, op))
		jp_fail(p, OPUS_ERR_TEMPLATE, cur(p)->line, "expected '%s', got %s", op, tok_desc(cur(p)));
}

static void
expect_type(struct parser *p, int type, const char *what)
{
	if (cur(p)->type != type)
		jp_fail(p, OPUS_ERR_TEMPLATE, cur(p)->line, "expected %s, got %s", what, tok_desc(cur(p)));
	p->ti++;
}

static const char *
expect_name(struct parser *p)
{
	struct tok *t = cur(p);

	if (t->type != T_NAME)
		jp_fail(p, OPUS_ERR_TEMPLATE, t->line, "expected a name, got %s", tok_desc(t));
	p->ti++;
	return t->s;
}

static struct jnode *
node(struct parser *p, int type, int line)
{
	struct jnode *n = jp_alloc0(p, sizeof(*n));

	n->t = (uint8_t) type;
	n->line = line;
	return n;
}

/* growable child arrays */
struct nvec
{
	struct jnode **v;
	const char **names;
	int			n,
				cap;
};

static void
nvec_push(struct parser *p, struct nvec *v, struct jnode *x, const char *name)
{
	if (v->n == v->cap)
	{
		int			cap = v->cap ? v->cap * 2 : 4;
		struct jnode **nv = jp_alloc0(p, sizeof(*nv) * (size_t) cap);
		const char **nn = jp_alloc0(p, sizeof(*nn) * (size_t) cap);

		if (v->n)
		{
			memcpy(nv, v->v, sizeof(*nv) * (size_t) v->n);
			memcpy(nn, v->names, sizeof(*nn) * (size_t) v->n);
		}
		v->v = nv;
		v->names = nn;
		v->cap = cap;
	}
	v->v[v->n] = x;
	v->names[v->n] = name;
	v->n++;
}

static void
enter(struct parser *p)
{
	if (++p->depth > p->max_depth)
		jp_fail(p, OPUS_ERR_TEMPLATE, cur(p)->line, "template nested too deeply (over %d levels)",
			 p->max_depth);
}

static struct jnode *parse_expr(struct parser *p, bool with_cond);
static struct jnode *parse_or(struct parser *p);
static struct jnode *parse_unary(struct parser *p, bool with_filter);
static struct jnode *parse_primary(struct parser *p);
static struct jnode *parse_postfix(struct parser *p, struct jnode *n);

/* expr ["," expr ...] as a tuple when there is a comma */
static struct jnode *
parse_tuple(struct parser *p, bool with_cond)
{
	int			line = cur(p)->line;
	struct jnode *first = parse_expr(p, with_cond);
	struct nvec v = {0};
	struct jnode *t;

	if (!is_op(p, ","))
		return first;
	nvec_push(p, &v, first, NULL);
	while (skip_op(p, ","))
	{
		if (cur(p)->type == T_VAR_END || cur(p)->type == T_BLOCK_END || is_name(p, "if"))
			break;
		nvec_push(p, &v, parse_expr(p, with_cond), NULL);
	}
	t = node(p, E_TUPLE, line);
	t->v = v.v;
	t->nv = v.n;
	return t;
}

/* (args, kw=value) after the '(' was consumed; fills n->v/nv and kn/kv/nk */
static void
parse_args(struct parser *p, struct jnode *n)
{
	struct nvec pos = {0},
				kw = {0};

	while (!skip_op(p, ")"))
	{
		if (pos.n + kw.n > 0)
		{
			expect_op(p, ",");
			if (skip_op(p, ")"))
				break;
		}
		if (is_op(p, "*") || is_op(p, "**"))
			jp_fail(p, OPUS_ERR_UNSUPPORTED, cur(p)->line, "*args and **kwargs are not supported");
		if (cur(p)->type == T_NAME && p->toks[p->ti + 1].type == T_OP &&
			strcmp(p->toks[p->ti + 1].s, "=") == 0)
		{
			const char *name = cur(p)->s;

			p->ti += 2;
			nvec_push(p, &kw, parse_expr(p, true), name);
		}
		else
		{
			if (kw.n)
				jp_fail(p, OPUS_ERR_TEMPLATE, cur(p)->line, "positional argument after a keyword argument");
			nvec_push(p, &pos, parse_expr(p, true), NULL);
		}
	}
	n->v = pos.v;
	n->nv = pos.n;
	n->kn = kw.names;
	n->kv = kw.v;
	n->nk = kw.n;
}

static struct jnode *
parse_filter(struct parser *p, struct jnode *arg)
{
	/* after '|' */
	int			line = cur(p)->line;
	const char *name = expect_name(p);
	struct jnode *n;

	if (!jinja_known_filter(name))
		jp_fail(p, OPUS_ERR_UNSUPPORTED, line, "unsupported filter '%s'", name);
	n = node(p, E_FILTER, line);
	n->a = arg;
	n->s = name;
	if (skip_op(p, "("))
		parse_args(p, n);
	return n;
}

static struct jnode *
parse_test(struct parser *p, struct jnode *arg)
{
	/* after 'is' */
	int			line = cur(p)->line;
	bool		neg = skip_name(p, "not");
	const char *name;
	struct jnode *n;
	struct tok *t;

	if (cur(p)->type == T_OP && (strcmp(cur(p)->s, "==") == 0 || strcmp(cur(p)->s, "!=") == 0 ||
								 strcmp(cur(p)->s, "<") == 0 || strcmp(cur(p)->s, ">") == 0 ||
								 strcmp(cur(p)->s, "<=") == 0 || strcmp(cur(p)->s, ">=") == 0))
		name = next_tok(p)->s;
	else
		name = expect_name(p);
	if (!jinja_known_test(name))
		jp_fail(p, OPUS_ERR_UNSUPPORTED, line, "unsupported test '%s'", name);
	n = node(p, E_TEST, line);
	n->a = arg;
	n->s = name;
	n->op = neg;
	t = cur(p);
	if (skip_op(p, "("))
		parse_args(p, n);
	else if ((t->type == T_NAME && strcmp(t->s, "else") != 0 && strcmp(t->s, "or") != 0 &&
			  strcmp(t->s, "and") != 0 && strcmp(t->s, "if") != 0 && strcmp(t->s, "is") != 0 &&
			  strcmp(t->s, "in") != 0 && strcmp(t->s, "not") != 0) ||
			 t->type == T_STRING || t->type == T_INT || t->type == T_FLOAT ||
			 (t->type == T_OP && (strcmp(t->s, "[") == 0 || strcmp(t->s, "{") == 0)))
	{
		struct jnode *a = parse_postfix(p, parse_primary(p));

		n->v = jp_alloc0(p, sizeof(*n->v));
		n->v[0] = a;
		n->nv = 1;
	}
	return n;
}

static struct jnode *
parse_postfix(struct parser *p, struct jnode *n)
{
	for (;;)
	{
		int			line = cur(p)->line;

		if (skip_op(p, "."))
		{
			struct tok *t = cur(p);
			struct jnode *m;

			if (t->type == T_INT)
			{
				p->ti++;
				m = node(p, E_ITEM, line);
				m->a = n;
				m->b = node(p, E_LIT, line);
				m->b->lit.k = J_INT;
				m->b->lit.u.i = t->i;
			}
			else
			{
				m = node(p, E_ATTR, line);
				m->a = n;
				m->s = expect_name(p);
			}
			n = m;
		}
		else if (skip_op(p, "["))
		{
			struct jnode *parts[3] = {NULL, NULL, NULL};
			int			k = 0;
			bool		slice = false;
			struct jnode *m;

			enter(p);
			for (;;)
			{
				if (is_op(p, ":"))
				{
					p->ti++;
					slice = true;
					if (++k > 2)
						jp_fail(p, OPUS_ERR_TEMPLATE, line, "bad slice");
					continue;
				}
				if (is_op(p, "]"))
					break;
				if (parts[k])
					jp_fail(p, OPUS_ERR_TEMPLATE, line, "expected ']' or ':'");
				parts[k] = slice ? parse_expr(p, true) : parse_tuple(p, true);
			}
			p->depth--;
			expect_op(p, "]");
			if (slice)
			{
				m = node(p, E_SLICE, line);
				m->b = parts[0];
				m->c = parts[1];
				m->d = parts[2];
			}
			else
			{
				if (!parts[0])
					jp_fail(p, OPUS_ERR_TEMPLATE, line, "empty subscript");
				m = node(p, E_ITEM, line);
				m->b = parts[0];
			}
			m->a = n;
			n = m;
		}
		else if (skip_op(p, "("))
		{
			struct jnode *m = node(p, E_CALL, line);

			enter(p);
			m->a = n;
			parse_args(p, m);
			p->depth--;
			n = m;
		}
		else
			return n;
	}
}

static struct jnode *
parse_filter_expr(struct parser *p, struct jnode *n)
{
	for (;;)
	{
		if (skip_op(p, "|"))
			n = parse_filter(p, n);
		else if (skip_name(p, "is"))
			n = parse_test(p, n);
		else if (is_op(p, "("))
			n = parse_postfix(p, n);
		else
			return n;
	}
}

static struct jnode *
parse_primary(struct parser *p)
{
	struct tok *t = cur(p);
	struct jnode *n;

	enter(p);
	switch (t->type)
	{
		case T_NAME:
			p->ti++;
			n = node(p, E_LIT, t->line);
			if (strcmp(t->s, "true") == 0 || strcmp(t->s, "True") == 0 ||
				strcmp(t->s, "false") == 0 || strcmp(t->s, "False") == 0)
			{
				n->lit.k = J_BOOL;
				n->lit.u.b = t->s[0] == 't' || t->s[0] == 'T';
			}
			else if (strcmp(t->s, "none") == 0 || strcmp(t->s, "None") == 0)
				n->lit.k = J_NONE;
			else
			{
				n->t = E_NAME;
				n->s = t->s;
			}
			break;
		case T_STRING:
			{
				/* adjacent literals concatenate */
				size_t		total = 0,
							k = p->ti;
				char	   *s;

				while (p->toks[k].type == T_STRING)
					total += p->toks[k++].n;
				s = jp_alloc0(p, total + 1);
				total = 0;
				while (cur(p)->type == T_STRING)
				{
					memcpy(s + total, cur(p)->s, cur(p)->n);
					total += cur(p)->n;
					p->ti++;
				}
				n = node(p, E_LIT, t->line);
				n->lit.k = J_STR;
				n->lit.u.s = jp_alloc0(p, sizeof(struct jstr) + total + 1);
				n->lit.u.s->n = total;
				memcpy(n->lit.u.s->p, s, total);
				break;
			}
		case T_INT:
			p->ti++;
			n = node(p, E_LIT, t->line);
			n->lit.k = J_INT;
			n->lit.u.i = t->i;
			break;
		case T_FLOAT:
			p->ti++;
			n = node(p, E_LIT, t->line);
			n->lit.k = J_FLOAT;
			n->lit.u.f = t->f;
			break;
		case T_OP:
			if (skip_op(p, "("))
			{
				if (skip_op(p, ")"))
				{
					n = node(p, E_TUPLE, t->line);
					break;
				}
				n = parse_expr(p, true);
				if (is_op(p, ","))
				{
					struct nvec v = {0};

					nvec_push(p, &v, n, NULL);
					while (skip_op(p, ","))
					{
						if (is_op(p, ")"))
							break;
						nvec_push(p, &v, parse_expr(p, true), NULL);
					}
					n = node(p, E_TUPLE, t->line);
					n->v = v.v;
					n->nv = v.n;
				}
				expect_op(p, ")");
				break;
			}
			if (skip_op(p, "["))
			{
				struct nvec v = {0};

				while (!skip_op(p, "]"))
				{
					if (v.n)
					{
						expect_op(p, ",");
						if (skip_op(p, "]"))
							break;
					}
					nvec_push(p, &v, parse_expr(p, true), NULL);
				}
				n = node(p, E_LIST, t->line);
				n->v = v.v;
				n->nv = v.n;
				break;
			}
			if (skip_op(p, "{"))
			{
				struct nvec v = {0};

				while (!skip_op(p, "}"))
				{
					if (v.n)
					{
						expect_op(p, ",");
						if (skip_op(p, "}"))
							break;
					}
					nvec_push(p, &v, parse_expr(p, true), NULL);
					expect_op(p, ":");
					nvec_push(p, &v, parse_expr(p, true), NULL);
				}
				n = node(p, E_DICT, t->line);
				n->v = v.v;
				n->nv = v.n;
				break;
			}
			/* FALLTHROUGH */
		default:
			jp_fail(p, OPUS_ERR_TEMPLATE, t->line, "unexpected %s", tok_desc(t));
	}
	p->depth--;
	return n;
}

static struct jnode *
parse_unary(struct parser *p, bool with_filter)
{
	int			line = cur(p)->line;
	struct jnode *n;

	enter(p);
	if (skip_op(p, "-"))
	{
		n = node(p, E_NEG, line);
		n->a = parse_unary(p, false);
	}
	else if (skip_op(p, "+"))
	{
		n = node(p, E_POS, line);
		n->a = parse_unary(p, false);
	}
	else
		n = parse_primary(p);
	n = parse_postfix(p, n);
	if (with_filter)
		n = parse_filter_expr(p, n);
	p->depth--;
	return n;
}

static struct jnode *
binop(struct parser *p, int type, int op, struct jnode *a, struct jnode *b, int line)
{
	struct jnode *n = node(p, type, line);

	n->op = (uint8_t) op;
	n->a = a;
	n->b = b;
	return n;
}

static struct jnode *
parse_pow(struct parser *p)
{
	struct jnode *n = parse_unary(p, true);

	while (is_op(p, "**"))
	{
		int			line = next_tok(p)->line;

		n = binop(p, E_BIN, OP_POW, n, parse_unary(p, true), line);
	}
	return n;
}

static struct jnode *
parse_math2(struct parser *p)
{
	struct jnode *n = parse_pow(p);

	for (;;)
	{
		int			op = is_op(p, "*") ? OP_MUL : is_op(p, "/") ? OP_DIV :
			is_op(p, "//") ? OP_FLOORDIV : is_op(p, "%") ? OP_MOD : 0;
		int			line;

		if (!op)
			return n;
		line = next_tok(p)->line;
		n = binop(p, E_BIN, op, n, parse_pow(p), line);
	}
}

static struct jnode *
parse_concat(struct parser *p)
{
	struct jnode *n = parse_math2(p);

	while (is_op(p, "~"))
	{
		int			line = next_tok(p)->line;

		n = binop(p, E_BIN, OP_CONCAT, n, parse_math2(p), line);
	}
	return n;
}

static struct jnode *
parse_math1(struct parser *p)
{
	struct jnode *n = parse_concat(p);

	for (;;)
	{
		int			op = is_op(p, "+") ? OP_ADD : is_op(p, "-") ? OP_SUB : 0;
		int			line;

		if (!op)
			return n;
		line = next_tok(p)->line;
		n = binop(p, E_BIN, op, n, parse_concat(p), line);
	}
}

static struct jnode *
parse_compare(struct parser *p)
{
	struct jnode *n = parse_math1(p);
	struct jnode *result = NULL;

	for (;;)
	{
		int			line = cur(p)->line;
		int			op = 0;
		struct jnode *rhs,
				   *cmp;

		if (is_op(p, "=="))
			op = OP_EQ;
		else if (is_op(p, "!="))
			op = OP_NE;
		else if (is_op(p, "<"))
			op = OP_LT;
		else if (is_op(p, "<="))
			op = OP_LE;
		else if (is_op(p, ">"))
			op = OP_GT;
		else if (is_op(p, ">="))
			op = OP_GE;
		else if (is_name(p, "in"))
			op = OP_IN;
		else if (is_name(p, "not") && p->toks[p->ti + 1].type == T_NAME &&
				 strcmp(p->toks[p->ti + 1].s, "in") == 0)
		{
			op = OP_NOTIN;
			p->ti++;
		}
		if (!op)
			break;
		p->ti++;
		rhs = parse_math1(p);
		cmp = binop(p, E_CMP, op, n, rhs, line);
		/* a < b < c is a < b and b < c */
		result = result ? binop(p, E_AND, 0, result, cmp, line) : cmp;
		n = rhs;
	}
	return result ? result : n;
}

static struct jnode *
parse_not(struct parser *p)
{
	int			line = cur(p)->line;

	if (is_name(p, "not") && !(p->toks[p->ti + 1].type == T_NAME &&
								strcmp(p->toks[p->ti + 1].s, "in") == 0))
	{
		struct jnode *n;

		p->ti++;
		enter(p);
		n = node(p, E_NOT, line);
		n->a = parse_not(p);
		p->depth--;
		return n;
	}
	return parse_compare(p);
}

static struct jnode *
parse_and(struct parser *p)
{
	struct jnode *n = parse_not(p);

	while (is_name(p, "and"))
	{
		int			line = next_tok(p)->line;

		n = binop(p, E_AND, 0, n, parse_not(p), line);
	}
	return n;
}

static struct jnode *
parse_or(struct parser *p)
{
	struct jnode *n = parse_and(p);

	while (is_name(p, "or"))
	{
		int			line = next_tok(p)->line;

		n = binop(p, E_OR, 0, n, parse_and(p), line);
	}
	return n;
}

static struct jnode *
parse_expr(struct parser *p, bool with_cond)
{
	struct jnode *n;

	enter(p);
	n = parse_or(p);
	while (with_cond && is_name(p, "if"))
	{
		struct jnode *c = node(p, E_COND, cur(p)->line);

		p->ti++;
		c->b = n;
		c->a = parse_or(p);
		if (skip_name(p, "else"))
			c->c = parse_expr(p, true);
		n = c;
	}
	p->depth--;
	return n;
}

/* ------------------------------------------------------------- statements */

static struct jnode *parse_body(struct parser *p, const char *const *stops, const char **stopped);

static void
end_block(struct parser *p)
{
	expect_type(p, T_BLOCK_END, "'%}'");
}

/* After the statement name: the matching end tag "{% endX %}". */
static void
expect_end(struct parser *p, const char *stopped, const char *want, int line)
{
	if (stopped == NULL || strcmp(stopped, want) != 0)
		jp_fail(p, OPUS_ERR_TEMPLATE, line, "missing {%% %s %%}", want);
	p->ti++;					/* the end name */
	end_block(p);
}

/* a filter chain for {% filter %} / {% set x | f %}: applied to "__block__" */
static struct jnode *
parse_filter_chain(struct parser *p, int line)
{
	struct jnode *n = node(p, E_NAME, line);

	n->s = "__block__";
	do
		n = parse_filter(p, n);
	while (skip_op(p, "|"));
	return n;
}

static struct jnode *
parse_if(struct parser *p, int line)
{
	static const char *const stops[] = {"elif", "else", "endif", NULL};
	struct nvec v = {0};
	struct jnode *n = node(p, S_IF, line);
	const char *stopped;

	for (;;)
	{
		nvec_push(p, &v, parse_tuple(p, false), NULL);
		end_block(p);
		nvec_push(p, &v, parse_body(p, stops, &stopped), NULL);
		if (stopped && strcmp(stopped, "elif") == 0)
		{
			p->ti++;
			continue;
		}
		if (stopped && strcmp(stopped, "else") == 0)
		{
			static const char *const stops2[] = {"endif", NULL};

			p->ti++;
			end_block(p);
			n->c = parse_body(p, stops2, &stopped);
		}
		expect_end(p, stopped, "endif", line);
		break;
	}
	n->v = v.v;
	n->nv = v.n;
	return n;
}

static struct jnode *
parse_for(struct parser *p, int line)
{
	static const char *const stops[] = {"else", "endfor", NULL};
	struct nvec targets = {0};
	struct jnode *n = node(p, S_FOR, line);
	const char *stopped;
	bool		paren = skip_op(p, "(");

	do
	{
		if (paren && is_op(p, ")"))
			break;
		nvec_push(p, &targets, NULL, expect_name(p));
	}
	while (skip_op(p, ","));
	if (paren)
		expect_op(p, ")");
	if (!skip_name(p, "in"))
		jp_fail(p, OPUS_ERR_TEMPLATE, cur(p)->line, "expected 'in' in a for loop");
	n->kn = targets.names;
	n->nk = targets.n;
	n->a = parse_tuple(p, false);
	if (skip_name(p, "if"))
		n->b = parse_expr(p, true);
	if (is_name(p, "recursive"))
		jp_fail(p, OPUS_ERR_UNSUPPORTED, line, "recursive for loops are not supported");
	end_block(p);
	p->loop_depth++;
	n->c = parse_body(p, stops, &stopped);
	p->loop_depth--;
	if (stopped && strcmp(stopped, "else") == 0)
	{
		static const char *const stops2[] = {"endfor", NULL};

		p->ti++;
		end_block(p);
		n->d = parse_body(p, stops2, &stopped);
	}
	expect_end(p, stopped, "endfor", line);
	return n;
}

static struct jnode *
parse_set(struct parser *p, int line)
{
	struct nvec targets = {0};
	struct jnode *n;
	const char *attr = NULL;

	do
	{
		nvec_push(p, &targets, NULL, expect_name(p));
		if (targets.n == 1 && skip_op(p, "."))
			attr = expect_name(p);
	}
	while (!attr && skip_op(p, ","));
	if (skip_op(p, "="))
	{
		n = node(p, S_SET, line);
		n->a = parse_tuple(p, true);
		end_block(p);
	}
	else
	{
		static const char *const stops[] = {"endset", NULL};
		const char *stopped;

		if (attr || targets.n != 1)
			jp_fail(p, OPUS_ERR_TEMPLATE, line, "a block set needs one plain name");
		n = node(p, S_SETBLOCK, line);
		if (skip_op(p, "|"))
			n->b = parse_filter_chain(p, line);
		end_block(p);
		n->c = parse_body(p, stops, &stopped);
		expect_end(p, stopped, "endset", line);
	}
	n->kn = targets.names;
	n->nk = targets.n;
	n->s = attr;
	return n;
}

static struct jnode *
parse_macro(struct parser *p, int line)
{
	static const char *const stops[] = {"endmacro", NULL};
	struct jnode *n = node(p, S_MACRO, line);
	struct nvec params = {0};
	const char *stopped;
	int			saved_loop = p->loop_depth;

	n->s = expect_name(p);
	expect_op(p, "(");
	while (!skip_op(p, ")"))
	{
		const char *name;
		struct jnode *def = NULL;

		if (params.n)
		{
			expect_op(p, ",");
			if (skip_op(p, ")"))
				break;
		}
		name = expect_name(p);
		if (skip_op(p, "="))
			def = parse_expr(p, true);
		nvec_push(p, &params, def, name);
	}
	end_block(p);
	p->loop_depth = 0;
	n->c = parse_body(p, stops, &stopped);
	p->loop_depth = saved_loop;
	expect_end(p, stopped, "endmacro", line);
	n->kn = params.names;
	n->kv = params.v;
	n->nk = params.n;
	return n;
}

static struct jnode *
parse_statement(struct parser *p)
{
	struct tok *t = cur(p);
	int			line = t->line;
	const char *kw;
	struct jnode *n;

	if (t->type != T_NAME)
		jp_fail(p, OPUS_ERR_TEMPLATE, line, "expected a statement name, got %s", tok_desc(t));
	kw = t->s;
	p->ti++;
	if (strcmp(kw, "if") == 0)
		return parse_if(p, line);
	if (strcmp(kw, "for") == 0)
		return parse_for(p, line);
	if (strcmp(kw, "set") == 0)
		return parse_set(p, line);
	if (strcmp(kw, "macro") == 0)
		return parse_macro(p, line);
	if (strcmp(kw, "break") == 0 || strcmp(kw, "continue") == 0)
	{
		if (p->loop_depth == 0)
			jp_fail(p, OPUS_ERR_TEMPLATE, line, "'%s' outside a loop", kw);
		end_block(p);
		return node(p, kw[0] == 'b' ? S_BREAK : S_CONTINUE, line);
	}
	if (strcmp(kw, "filter") == 0)
	{
		static const char *const stops[] = {"endfilter", NULL};
		const char *stopped;

		n = node(p, S_FILTERBLOCK, line);
		n->b = parse_filter_chain(p, line);
		end_block(p);
		n->c = parse_body(p, stops, &stopped);
		expect_end(p, stopped, "endfilter", line);
		return n;
	}
	if (strcmp(kw, "generation") == 0)
	{
		/* Hugging Face's AssistantTracker marks: no output of their own */
		static const char *const stops[] = {"endgeneration", NULL};
		const char *stopped;

		end_block(p);
		n = parse_body(p, stops, &stopped);
		expect_end(p, stopped, "endgeneration", line);
		return n;
	}
	if (strcmp(kw, "call") == 0)
	{
		static const char *const stops[] = {"endcall", NULL};
		const char *stopped;

		if (is_op(p, "("))
			jp_fail(p, OPUS_ERR_UNSUPPORTED, line, "call blocks with parameters are not supported");
		n = node(p, S_CALLBLOCK, line);
		n->a = parse_expr(p, true);
		if (n->a->t != E_CALL)
			jp_fail(p, OPUS_ERR_TEMPLATE, line, "a call block needs a macro call");
		end_block(p);
		n->c = parse_body(p, stops, &stopped);
		expect_end(p, stopped, "endcall", line);
		return n;
	}
	if (strncmp(kw, "end", 3) == 0 || strcmp(kw, "elif") == 0 || strcmp(kw, "else") == 0)
		jp_fail(p, OPUS_ERR_TEMPLATE, line, "unexpected '%s'", kw);
	jp_fail(p, OPUS_ERR_UNSUPPORTED, line, "unsupported statement '%s'", kw);
}

/*
 * Statements up to EOF or to a "{% name" with name in stops (NULL-ended);
 * then *stopped is that name and p->ti points at it, else *stopped = NULL.
 */
static struct jnode *
parse_body(struct parser *p, const char *const *stops, const char **stopped)
{
	struct nvec v = {0};
	struct jnode *body = node(p, S_BODY, cur(p)->line);

	enter(p);
	*stopped = NULL;
	for (;;)
	{
		struct tok *t = cur(p);

		if (t->type == T_EOF)
			break;
		if (t->type == T_DATA)
		{
			struct jnode *n = node(p, S_TEXT, t->line);

			n->s = t->s;
			n->sn = t->n;
			nvec_push(p, &v, n, NULL);
			p->ti++;
			continue;
		}
		if (t->type == T_VAR_BEGIN)
		{
			struct jnode *n = node(p, S_OUT, t->line);

			p->ti++;
			n->a = parse_tuple(p, true);
			expect_type(p, T_VAR_END, "'}}'");
			nvec_push(p, &v, n, NULL);
			continue;
		}
		if (t->type == T_BLOCK_BEGIN)
		{
			struct tok *name = &p->toks[p->ti + 1];

			if (stops && name->type == T_NAME)
			{
				for (int k = 0; stops[k]; k++)
					if (strcmp(stops[k], name->s) == 0)
					{
						p->ti++;
						*stopped = stops[k];
						goto done;
					}
			}
			p->ti++;
			nvec_push(p, &v, parse_statement(p), NULL);
			continue;
		}
		jp_fail(p, OPUS_ERR_TEMPLATE, t->line, "unexpected %s", tok_desc(t));
	}
done:
	p->depth--;
	body->v = v.v;
	body->nv = v.n;
	return body;
}

/* The source with newlines normalised and one trailing newline dropped. */
static void
normalize(struct parser *p, const char *src, size_t len)
{
	char	   *norm = jp_alloc0(p, len + 1);
	size_t		n = 0;

	for (size_t i = 0; i < len; i++)
	{
		if (src[i] == '\r')
		{
			norm[n++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		}
		else
			norm[n++] = src[i];
	}
	if (n > 0 && norm[n - 1] == '\n')
		n--;
	p->src = norm;
	p->len = n;
}

enum opus_status
opus_jinja_parse(const char *src, size_t len, const struct opus_jinja_limits *limits,
				 struct opus_jinja **out, struct opus_error *err)
{
	struct opus_jinja_limits lim = {0};
	struct opus_jinja *t;
	struct parser *p;
	const char *stopped;

	*out = NULL;
	if (limits)
		lim = *limits;
	opus_jinja_limits_default(&lim);
	t = calloc(1, sizeof(*t));
	p = calloc(1, sizeof(*p));
	if (!t || !p)
	{
		free(t);
		free(p);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory parsing a template");
	}
	t->ar.limit = lim.max_memory;
	p->ar = &t->ar;
	p->max_depth = lim.max_depth;
	p->line = 1;
	p->lline = 1;
	if (setjmp(p->jb))
	{
		enum opus_status code = p->code;

		opus_error_set(err, code, "chat template line %d: %s", p->line, p->msg);
		ja_free(&t->ar);
		free(t);
		free(p);
		return code;
	}
	normalize(p, src, len);
	jp_lex(p);
	t->root = parse_body(p, NULL, &stopped);
	free(p);
	*out = t;
	return OPUS_OK;
}

void
opus_jinja_free(struct opus_jinja *t)
{
	if (!t)
		return;
	ja_free(&t->ar);
	free(t);
}
