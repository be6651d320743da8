/*
 * fuzz_regex.c - libFuzzer target for the regular-expression and choices
 * converters (regex_gbnf.c).
 *
 * Input: the whole input as a regex (whole output, and inside a JSON string
 * as a schema's pattern), and the same bytes split at NULs as a choices list.
 * Checks beyond ASan/UBSan: a success gives a NUL-terminated grammar (an
 * expression in parentheses for the pattern form); a failure gives no
 * grammar, a non-empty message and one of the documented statuses; a
 * regex error names an offset.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/regex_gbnf.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_fail(enum opus_status st, const struct opus_error *err, int offset)
{
	if (err->msg[0] == '\0')
		abort();
	if (st != OPUS_ERR_INVALID_ARG && st != OPUS_ERR_UNSUPPORTED && st != OPUS_ERR_CAPACITY &&
		st != OPUS_ERR_NOMEM)
		abort();
	if (offset && st != OPUS_ERR_CAPACITY && st != OPUS_ERR_NOMEM &&
		strstr(err->msg, " at offset ") == NULL && strstr(err->msg, "NUL") == NULL)
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *out = (char *) 1;
	struct opus_error err = {0};
	enum opus_status st;
	struct opus_gbnf_buf b = {0};
	const char *parts[64];
	size_t		lens[64],
				n = 0,
				start = 0,
				i;
	int			as,
				ae;

	st = opus_regex_to_gbnf((const char *) data, size, &out, &err);
	if (st == OPUS_OK)
	{
		if (out == NULL || strncmp(out, "root ::= (", 10) != 0)
			abort();
		free(out);
	}
	else
	{
		if (out != NULL)
			abort();
		check_fail(st, &err, 1);
	}

	memset(&err, 0, sizeof(err));
	st = opus_regex_gbnf_expr(&b, (const char *) data, size, OPUS_REGEX_JSON_STRING, "pattern",
							  &as, &ae, &err);
	if (st == OPUS_OK && (b.s == NULL || b.s[0] != '(' || b.s[b.len - 1] != ')'))
		abort();
	if (st != OPUS_OK)
		check_fail(st, &err, 1);
	opus_gbnf_buf_free(&b);

	for (i = 0; i <= size && n < 64; i++)
		if (i == size || data[i] == '\0')
		{
			parts[n] = (const char *) data + start;
			lens[n++] = i - start;
			start = i + 1;
		}
	out = (char *) 1;
	memset(&err, 0, sizeof(err));
	st = opus_choices_to_gbnf(parts, lens, n, &out, &err);
	if (st == OPUS_OK)
	{
		if (out == NULL || strncmp(out, "root ::= \"", 10) != 0)
			abort();
		free(out);
	}
	else
	{
		if (out != NULL)
			abort();
		check_fail(st, &err, 0);
	}
	return 0;
}
