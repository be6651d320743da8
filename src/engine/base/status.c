/*
 * status.c - the engine's error record helpers.
 */
#include "base/status.h"

#include <stdio.h>

enum opus_status
opus_error_set(struct opus_error *err, enum opus_status code, const char *fmt,...)
{
	if (err)
	{
		va_list		ap;

		err->code = code;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return code;
}

const char *
opus_status_name(enum opus_status code)
{
	static const char *const names[OPUS_ERR__COUNT] = {
		"ok", "internal", "io", "format", "unsupported", "nomem",
		"invalid_arg", "not_found", "context", "capacity", "cancelled",
		"protocol", "device", "tokenize", "template",
	};

	if ((int) code < 0 || code >= OPUS_ERR__COUNT)
		return "unknown";
	return names[code];
}
