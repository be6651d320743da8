/*
 * unit.h - a minimal test harness for engine unit tests.
 *
 * CHECK(cond, fmt, ...) records a pass or a failure (with file:line and the
 * message); UNIT_DONE() prints "N passed, N failed" and returns the exit code.
 * Tests that need the default model read its path from $OPUS_MODEL and skip
 * (counted as neither) when it is absent.
 */
#ifndef OPUS_UNIT_H
#define OPUS_UNIT_H

#include <stdio.h>
#include <stdlib.h>

static int	unit_passed;
static int	unit_failed;

#define CHECK(cond, ...) \
	do { \
		if (cond) \
			unit_passed++; \
		else \
		{ \
			unit_failed++; \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__); \
			fputc('\n', stderr); \
		} \
	} while (0)

#define UNIT_DONE() \
	(printf("%d passed, %d failed\n", unit_passed, unit_failed), \
	 (unit_failed == 0 && unit_passed > 0) ? 0 : 1)

static inline const char *
unit_model_path(void)
{
	const char *p = getenv("OPUS_MODEL");

	return (p && *p) ? p : NULL;
}

#endif							/* OPUS_UNIT_H */
