/*
 * fuzz_jsonschema.c - libFuzzer target for the JSON Schema converter
 * (json_schema.c): arbitrary bytes as a schema and as an OpenAI
 * response_format object.
 *
 * Checks beyond ASan/UBSan: a success gives a NUL-terminated grammar that
 * starts with the root rule and stays within OPUS_GBNF_MAX_BYTES (or, for a
 * response_format of type text, no grammar); a failure gives no grammar, a
 * non-empty message and one of the statuses json_schema.h documents
 * (invalid argument, unsupported, capacity, out of memory).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/json_schema.h"
#include "text/regex_gbnf.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(enum opus_status st, char *out, const struct opus_error *err, int may_be_empty)
{
	if (st == OPUS_OK)
	{
		if (out == NULL)
		{
			if (!may_be_empty)
				abort();
			return;
		}
		if (strncmp(out, "root ::= ", 9) != 0 || strlen(out) > OPUS_GBNF_MAX_BYTES)
			abort();
		free(out);
		return;
	}
	if (out != NULL || err->msg[0] == '\0')
		abort();
	if (st != OPUS_ERR_INVALID_ARG && st != OPUS_ERR_UNSUPPORTED && st != OPUS_ERR_CAPACITY &&
		st != OPUS_ERR_NOMEM)
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *out = (char *) 1;
	struct opus_error err = {0};
	enum opus_status st;

	st = opus_json_schema_to_gbnf((const char *) data, size, &out, &err);
	check(st, out, &err, 0);
	out = (char *) 1;
	memset(&err, 0, sizeof(err));
	st = opus_response_format_to_gbnf((const char *) data, size, &out, &err);
	check(st, out, &err, 1);
	return 0;
}
