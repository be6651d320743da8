/*
 * structured.h - output constraints in the backend (structured.c).
 */
#ifndef OPUS_PG_STRUCTURED_H
#define OPUS_PG_STRUCTURED_H

#include "utils/array.h"
#include "utils/jsonb.h"

/*
 * The GBNF text of a request's constraint (palloc'd), or NULL when none.
 * Any argument may be NULL; at most one may be given.  Raises 22023 /
 * 0A000 / 54000 (docs/structured-output.md).
 */
extern char *OpusConstraintGrammar(Jsonb *response_format, text *grammar, text *regex,
								   ArrayType *choices);

#endif							/* OPUS_PG_STRUCTURED_H */
