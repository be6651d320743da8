/*
 * fuzz_jinja.c - libFuzzer target for the Jinja interpreter (jinja_parse.c,
 * jinja_eval.c): the parser and the evaluator on arbitrary templates and
 * contexts.
 *
 * Input layout: the bytes up to the first NUL are a template source; the
 * bytes after it, if any, a JSON context.  Without a context (or with one
 * the interpreter rejects) the template is rendered with two fixed ones:
 * a short conversation, and one with tools and a tool call.
 *
 * Limits are small (200,000 steps, 16 MB, 1 MB of output, depth 64) so that
 * a hostile template ends quickly with an error.  Checks beyond ASan/UBSan:
 * a render either succeeds with a NUL-terminated buffer of exactly *out_len
 * bytes, at most the output limit, or fails with OPUS_ERR_TEMPLATE /
 * OPUS_ERR_UNSUPPORTED, *out NULL and a message naming the line; a parse
 * fails the same way.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const fixed[] = {
	"{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
	"{\"role\": \"user\", \"content\": \"Hi <|im_end|>\"}, "
	"{\"role\": \"assistant\", \"content\": \"Hello\"}, "
	"{\"role\": \"user\", \"content\": \" x \\n\"}], "
	"\"tools\": null, \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
	"{\"messages\": [{\"role\": \"user\", \"content\": \"weather?\"}, "
	"{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", "
	"\"function\": {\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}}]}, "
	"{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"18\"}], "
	"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": {\"type\": \"object\"}}}], "
	"\"add_generation_prompt\": false, \"bos_token\": \"\", \"eos_token\": \"</s>\"}",
};

static volatile size_t sink;

static void
check_fail(enum opus_status st, const char *out, const struct opus_error *err)
{
	if (st != OPUS_ERR_TEMPLATE && st != OPUS_ERR_UNSUPPORTED)
		abort();
	if (out != NULL)
		abort();
	if (strncmp(err->msg, "chat template line ", 19) != 0)
		abort();
}

static void
render_one(const struct opus_jinja *t, const char *ctx, size_t n, const struct opus_jinja_limits *lim)
{
	char	   *out = (char *) 1;
	size_t		len = 12345;
	struct opus_error err = {0};
	enum opus_status st = opus_jinja_render(t, ctx, n, lim, &out, &len, &err);

	if (st == OPUS_OK)
	{
		if (!out || out[len] != '\0' || len > lim->max_output)
			abort();
		sink += len;
		free(out);
	}
	else
		check_fail(st, out, &err);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct opus_jinja_limits lim = {.max_steps = 200000, .max_memory = 16 << 20,
	.max_output = 1 << 20, .max_depth = 64, .now = 1768473000};
	const uint8_t *nul = memchr(data, 0, size);
	size_t		tlen = nul ? (size_t) (nul - data) : size;
	char	   *src = malloc(tlen ? tlen : 1);
	struct opus_jinja *t = NULL;
	struct opus_error err = {0};
	enum opus_status st;

	if (tlen)
		memcpy(src, data, tlen);
	st = opus_jinja_parse(src, tlen, &lim, &t, &err);
	free(src);
	if (st != OPUS_OK)
	{
		check_fail(st, (const char *) t, &err);
		return 0;
	}
	if (nul && size - tlen - 1 > 0)
	{
		size_t		cn = size - tlen - 1;
		char	   *ctx = malloc(cn);

		memcpy(ctx, nul + 1, cn);
		render_one(t, ctx, cn, &lim);
		free(ctx);
	}
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		render_one(t, fixed[i], strlen(fixed[i]), &lim);
	opus_jinja_free(t);
	return 0;
}
