/*
 * status.h - engine status codes and the error record every fallible engine
 * call fills in.
 *
 * Contract: a fallible engine function returns an enum opus_status (OPUS_OK
 * on success) and, on failure, fills the caller's struct opus_error (when not
 * NULL) with the same code and a lower-case message without a final period.
 * The PostgreSQL side maps these codes to SQLSTATEs in exactly one place
 * (src/pg/errors.c); the numeric values travel over the wire (src/protocol.h)
 * and must therefore never be renumbered, only appended to.
 */
#ifndef OPUS_STATUS_H
#define OPUS_STATUS_H

#include <stdarg.h>

enum opus_status
{
	OPUS_OK = 0,
	OPUS_ERR_INTERNAL = 1,		/* a bug: should not happen */
	OPUS_ERR_IO = 2,			/* open/read/mmap/write failed */
	OPUS_ERR_FORMAT = 3,		/* malformed input file (GGUF etc.) */
	OPUS_ERR_UNSUPPORTED = 4,	/* valid but not supported: arch, qtype, template */
	OPUS_ERR_NOMEM = 5,			/* allocation failed or over a configured budget */
	OPUS_ERR_INVALID_ARG = 6,	/* caller passed an out-of-range parameter */
	OPUS_ERR_NOT_FOUND = 7,		/* key / tensor / request not found */
	OPUS_ERR_CONTEXT = 8,		/* prompt (+ max_tokens) exceeds the context */
	OPUS_ERR_CAPACITY = 9,		/* can never fit in the KV cache */
	OPUS_ERR_CANCELLED = 10,	/* request was cancelled */
	OPUS_ERR_PROTOCOL = 11,		/* malformed frame on the supervisor socket */
	OPUS_ERR_DEVICE = 12,		/* device (CUDA) failure */
	OPUS_ERR_TOKENIZE = 13,		/* text cannot be tokenized / bad token id */
	OPUS_ERR_TEMPLATE = 14,		/* chat template / messages problem */
	OPUS_ERR__COUNT
};

#define OPUS_ERROR_MSG_LEN 256

struct opus_error
{
	enum opus_status code;
	char		msg[OPUS_ERROR_MSG_LEN];
};

/* Fill err (if not NULL) and return code; printf-style message. */
enum opus_status opus_error_set(struct opus_error *err, enum opus_status code,
								const char *fmt,...)
			__attribute__((format(printf, 3, 4)));

/* Short stable name of a status code ("format", "unsupported", ...). */
const char *opus_status_name(enum opus_status code);

/* Overflow-checked size arithmetic: return 0 on success, 1 on overflow. */
static inline int
opus_mul_overflow_u64(unsigned long long a, unsigned long long b, unsigned long long *out)
{
	return __builtin_mul_overflow(a, b, out);
}
static inline int
opus_add_overflow_u64(unsigned long long a, unsigned long long b, unsigned long long *out)
{
	return __builtin_add_overflow(a, b, out);
}

#endif							/* OPUS_STATUS_H */
