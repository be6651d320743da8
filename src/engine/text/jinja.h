/*
 * jinja.h - a Jinja2 interpreter for the subset chat templates use.
 *
 * A model's tokenizer.chat_template is a Jinja program; Hugging Face renders
 * it with jinja2's ImmutableSandboxedEnvironment(trim_blocks=True,
 * lstrip_blocks=True) plus the loopcontrols extension, a tojson filter that
 * is json.dumps(ensure_ascii=False) and the globals raise_exception and
 * strftime_now.  This interpreter follows that environment byte for byte for
 * what it supports (docs/chat_templates.md lists it; test/golden/jinja holds
 * goldens rendered by the jinja2 package).
 *
 * Untrusted input: the template comes from a model file.  Parsing and
 * rendering never crash on any input; they are bounded by struct
 * opus_jinja_limits (nesting depth, evaluation steps, memory, output size)
 * and see nothing but the context they are given (no files, no environment,
 * no Python objects).  Errors name the template line.
 *
 * Errors: OPUS_ERR_UNSUPPORTED for a well-formed construct the interpreter
 * does not implement (an unknown filter, test, statement), found at parse
 * time where it can be, so that a caller can fall back to something else;
 * OPUS_ERR_TEMPLATE for a malformed template, a failed render (including the
 * template's own raise_exception) or a limit reached; OPUS_ERR_NOMEM when
 * the allocator fails.
 */
#ifndef OPUS_JINJA_H
#define OPUS_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/status.h"

struct opus_jinja;

struct opus_jinja_limits
{
	size_t		max_output;		/* bytes of rendered text (default 8 MiB) */
	size_t		max_memory;		/* bytes of values and scratch (default 64 MiB) */
	uint64_t	max_steps;		/* statements + expressions + iterations (default 10M) */
	int			max_depth;		/* nesting of the source and of macro calls (default 128) */
	time_t		now;			/* strftime_now's clock (UTC); 0: the current time */
};

/* The limits above with their defaults filled in where 0. */
void		opus_jinja_limits_default(struct opus_jinja_limits *l);

/*
 * Parse a template (src need not be NUL-terminated).  On success *out is a
 * compiled template to free with opus_jinja_free().  max_depth bounds the
 * source's nesting (NULL limits: the defaults).
 */
enum opus_status opus_jinja_parse(const char *src, size_t len,
								  const struct opus_jinja_limits *limits,
								  struct opus_jinja **out,
								  struct opus_error *err);
void		opus_jinja_free(struct opus_jinja *t);

/*
 * Render with a context given as a JSON object (its members are the
 * template's variables: messages, tools, add_generation_prompt, bos_token,
 * ...).  *out is malloc'd, NUL-terminated, *out_len bytes; on failure *out
 * is NULL.  A template may be rendered any number of times, from several
 * threads at once (rendering does not modify it).
 */
enum opus_status opus_jinja_render(const struct opus_jinja *t,
								   const char *context_json, size_t json_len,
								   const struct opus_jinja_limits *limits,
								   char **out, size_t *out_len,
								   struct opus_error *err);

/*
 * Is s[0..n) one JSON object, as the context reader takes it (within the
 * default memory and depth limits)?  For callers splicing JSON of their own
 * into a context.
 */
bool		opus_jinja_json_is_object(const char *s, size_t n);

/* Append s to a JSON string literal (quotes included) into buf; for callers
 * building a context.  Returns the bytes needed (like snprintf). */
size_t		opus_jinja_json_quote(const char *s, size_t n, char *buf, size_t cap);

#endif							/* OPUS_JINJA_H */
