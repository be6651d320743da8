/*
 * fuzz_modeldecl.c - libFuzzer target for the opus.models parser
 * (src/model_decl.c, OpusParseModels), the value a superuser writes with
 * ALTER SYSTEM SET opus.models and the supervisor reads at each reload.
 *
 * The input, up to its first NUL, is the setting's value (an exact-size
 * heap copy, so a read past the end is an ASan finding).  It is parsed
 * twice: with a full error buffer and with a 7-byte one (truncation).
 *
 * Checks beyond ASan/UBSan: a refusal leaves n_out 0 and a non-empty,
 * NUL-terminated sentence (cut, not overrun, in the small buffer), and both
 * parses agree; an acceptance gives at most OPUS_MAX_MODELS - 1
 * declarations, each with a valid, unique name other than "default", a
 * non-empty path, NUL-terminated fields, options within their documented
 * ranges, and a fallback that is "default" or another declared model with
 * a max_ttft objective.
 *
 * Build and run: `make fuzz` (test/fuzz/README); replay without libFuzzer:
 * `make fuzz-regress`.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model_decl.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) do { if (!(c)) abort(); } while (0)

static int
terminated(const char *s, size_t cap)
{
	return memchr(s, '\0', cap) != NULL;
}

static void
check_decls(const OpusModelDecl *d, int n)
{
	int			i,
				j;

	CHECK(n >= 0 && n <= OPUS_MAX_MODELS - 1);
	for (i = 0; i < n; i++)
	{
		CHECK(terminated(d[i].name, sizeof(d[i].name)));
		CHECK(terminated(d[i].setting, sizeof(d[i].setting)));
		CHECK(terminated(d[i].device, sizeof(d[i].device)));
		CHECK(terminated(d[i].role, sizeof(d[i].role)));
		CHECK(terminated(d[i].fallback, sizeof(d[i].fallback)));
		CHECK(terminated(d[i].query_prefix, sizeof(d[i].query_prefix)));
		CHECK(terminated(d[i].document_prefix, sizeof(d[i].document_prefix)));
		CHECK(opus_model_name_valid(d[i].name, strlen(d[i].name)));
		CHECK(strcmp(d[i].name, "default") != 0);
		CHECK(d[i].setting[0] != '\0');
		CHECK(d[i].threads >= 0 && d[i].threads <= 1024);
		CHECK(d[i].kv_cache_size_mb >= 0);
		CHECK(d[i].kv_cache_type >= -1);
		CHECK(d[i].max_batch_tokens == 0 ||
			  (d[i].max_batch_tokens >= 16 && d[i].max_batch_tokens <= 65536));
		CHECK(d[i].max_ttft_ms >= 0 && d[i].max_ttft_ms <= 3600000);
		for (j = 0; j < i; j++)
			CHECK(strcmp(d[i].name, d[j].name) != 0);
		if (d[i].fallback[0] != '\0')
		{
			int			found = strcmp(d[i].fallback, "default") == 0;

			CHECK(strcmp(d[i].fallback, d[i].name) != 0);
			CHECK(d[i].max_ttft_ms > 0);
			for (j = 0; j < n; j++)
				found |= strcmp(d[j].name, d[i].fallback) == 0;
			CHECK(found);
		}
		else
			CHECK(d[i].max_ttft_ms == 0);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t		len = strnlen((const char *) data, size);
	char	   *value = malloc(len + 1);
	OpusModelDecl *decl = malloc(sizeof(OpusModelDecl) * (OPUS_MAX_MODELS - 1));
	OpusModelDecl *decl2 = malloc(sizeof(OpusModelDecl) * (OPUS_MAX_MODELS - 1));
	char		err[256];
	char		small[7];
	int			n = -1,
				n2 = -1;
	bool		ok,
				ok2;

	CHECK(value && decl && decl2);
	memcpy(value, data, len);
	value[len] = '\0';
	memset(err, 'x', sizeof(err));
	memset(small, 'x', sizeof(small));

	ok = OpusParseModels(value, decl, &n, err, sizeof(err));
	ok2 = OpusParseModels(value, decl2, &n2, small, sizeof(small));
	CHECK(ok == ok2);
	if (ok)
	{
		check_decls(decl, n);
		CHECK(n2 == n);
		CHECK(memcmp(decl, decl2, sizeof(OpusModelDecl) * n) == 0 || n == 0);
	}
	else
	{
		CHECK(n == 0 && n2 == 0);
		CHECK(terminated(err, sizeof(err)) && err[0] != '\0');
		CHECK(terminated(small, sizeof(small)) && small[0] != '\0');
	}
	free(value);
	free(decl);
	free(decl2);
	return 0;
}
