/*
 * json_schema.h - JSON Schema (and OpenAI's response_format) to a GBNF
 * grammar in llama.cpp's dialect, the text the grammar compiler
 * (grammar.h) takes.
 *
 * What is supported is the table of docs/structured-output.md: object
 * (properties, required, additionalProperties), array (items, minItems,
 * maxItems), string (enum, const, minLength, maxLength, pattern, format date
 * / time / date-time / uuid / email), number and integer (minimum, maximum;
 * exclusive bounds on integers), boolean, null, anyOf / oneOf, $ref into the
 * same document ($defs, definitions, "#") with recursion, type arrays and
 * nullable.  Annotations (title, description, examples, default, $schema,
 * $id, $comment, deprecated, readOnly, writeOnly) are ignored.  Any other
 * keyword is OPUS_ERR_UNSUPPORTED naming it and its JSON path
 * ("unsupported JSON Schema keyword \"not\" at $.properties.a"); a schema
 * that is not well-formed is OPUS_ERR_INVALID_ARG.
 *
 * The grammar generates a subset of the instances the schema accepts, in a
 * canonical form: object members in the order of "properties" (those listed
 * in "required" may not be left out), a property-less object accepts any
 * members, an object with "properties" and no "additionalProperties" accepts
 * no others (as OpenAI's strict mode and llama.cpp do); whitespace is at most
 * one space or a newline and indentation between tokens.
 *
 * Limits (OPUS_ERR_CAPACITY, SQLSTATE 54000, past them): the schema text
 * OPUS_JSON_SCHEMA_MAX_BYTES, JSON nesting and schema nesting
 * OPUS_JSON_SCHEMA_MAX_DEPTH, grammar rules OPUS_JSON_SCHEMA_MAX_RULES, the
 * grammar's text OPUS_GBNF_MAX_BYTES, counts (minLength, maxItems, ...)
 * OPUS_GBNF_MAX_REPEAT, bounds of numbers 10^15.  Compile time and memory
 * are linear in the schema's size within them.
 *
 * Pure C (no engine state): the PostgreSQL backend links it to refuse a bad
 * schema before the request is queued.
 */
#ifndef OPUS_JSON_SCHEMA_H
#define OPUS_JSON_SCHEMA_H

#include <stddef.h>

#include "base/status.h"

#define OPUS_JSON_SCHEMA_MAX_BYTES	(1024 * 1024)
#define OPUS_JSON_SCHEMA_MAX_DEPTH	64
#define OPUS_JSON_SCHEMA_MAX_RULES	4096

/*
 * The grammar of the JSON values that schema[0..len) (JSON text) accepts.
 * On OPUS_OK *out is a malloc'd NUL-terminated grammar whose start rule is
 * "root" (free() it); otherwise *out is NULL and err says why.
 */
enum opus_status opus_json_schema_to_gbnf(const char *schema, size_t len, char **out,
										  struct opus_error *err);

/*
 * OpenAI's response_format object: {"type":"text"} (no constraint: OPUS_OK
 * with *out NULL), {"type":"json_object"} (any JSON object) or
 * {"type":"json_schema","json_schema":{"name":...,"schema":{...},
 * "strict":...,"description":...}}.  Otherwise as opus_json_schema_to_gbnf.
 */
enum opus_status opus_response_format_to_gbnf(const char *rf, size_t len, char **out,
											  struct opus_error *err);

#endif							/* OPUS_JSON_SCHEMA_H */
