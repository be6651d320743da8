/*
 * jinja_lex.h - internal to the template parser: the tokens and the parse
 * state shared by the lexer (jinja_lex.c) and the parser (jinja_parse.c).
 */
#ifndef OPUS_JINJA_LEX_H
#define OPUS_JINJA_LEX_H

#include <setjmp.h>
#include <stdarg.h>

#include "text/jinja_int.h"

enum tok_type
{
	T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
	T_NAME, T_STRING, T_INT, T_FLOAT, T_OP
};

struct tok
{
	uint8_t		type;
	int			line;
	const char *s;				/* T_DATA, T_NAME, T_STRING (arena, NUL-terminated), T_OP */
	size_t		n;
	int64_t		i;
	double		f;
};

struct parser
{
	struct jarena *ar;
	jmp_buf		jb;
	enum opus_status code;
	char		msg[200];
	int			line;
	/* lexer */
	const char *src;
	size_t		len,
				pos;
	size_t		lpos;			/* line_at's cache: line of offset lpos */
	int			lline;
	struct tok *toks;
	size_t		ntok,
				captok;
	/* parser */
	size_t		ti;
	int			depth,
				max_depth;
	int			loop_depth;
};

/* Record the error (code, line, message) and longjmp to opus_jinja_parse. */
void		jp_fail(struct parser *p, enum opus_status code, int line, const char *fmt,...)
			__attribute__((format(printf, 4, 5), noreturn));
/* n zeroed bytes in the template's arena; fails the parse over the limit. */
void	   *jp_alloc0(struct parser *p, size_t n);
/* Tokenize p->src[0 .. p->len) into p->toks. */
void		jp_lex(struct parser *p);

#endif							/* OPUS_JINJA_LEX_H */
