/*
 * args.c - the opus_engine subcommands' argument parser (args.h).
 */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool
opus_cli_parse_int(const char *s, long lo, long hi, int *out)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end != '\0' || v < lo || v > hi)
		return false;
	*out = (int) v;
	return true;
}

bool
opus_cli_parse_i64(const char *s, long lo, long hi, int64_t *out)
{
	char	   *end;
	long long	v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end != '\0' || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

bool
opus_cli_parse_float(const char *s, float *out)
{
	char	   *end;
	float		v;

	errno = 0;
	v = strtof(s, &end);
	if (errno || end == s || *end != '\0' || !isfinite(v))
		return false;
	*out = v;
	return true;
}

bool
opus_cli_parse_u64(const char *s, uint64_t *out)
{
	char	   *end;
	unsigned long long v;

	if (*s == '-')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end != '\0')
		return false;
	*out = v;
	return true;
}

static const struct opus_cli_opt *
find_opt(const struct opus_cli_opt *opts, const char *a)
{
	for (; opts->name; opts++)
		if (strcmp(a, opts->name) == 0 || (opts->alias && strcmp(a, opts->alias) == 0))
			return opts;
	return NULL;
}

static int
usage_error(const struct opus_cli_spec *sp, enum opus_cli_err e, const char *a,
			const char *v)
{
	if (sp->on_error)
		return sp->on_error(e, a, v);
	if (e == OPUS_CLI_ERR_UNKNOWN)
		fprintf(stderr, "opus_engine %s: unknown option \"%s\"\n", sp->cmd, a);
	else
		fprintf(stderr, "opus_engine %s: bad or missing value for %s\n", sp->cmd, a);
	sp->usage();
	return 2;
}

int
opus_cli_parse_spec(const struct opus_cli_spec *sp, int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
	{
		const char *a = argv[i];
		const char *v = (i + 1 < argc) ? argv[i + 1] : NULL;
		const struct opus_cli_opt *o = find_opt(sp->opts, a);
		bool		ok = true;

		if (strcmp(a, "--help") == 0 || (!sp->no_short_help && strcmp(a, "-h") == 0))
		{
			sp->usage();
			return 0;
		}
		if (!o && sp->positional)
		{
			if (!sp->positional(a, sp->ctx))
				return usage_error(sp, OPUS_CLI_ERR_UNKNOWN, a, NULL);
			continue;
		}
		if (o && (o->kind == OPUS_CLI_FLAG || o->kind == OPUS_CLI_STOP))
		{
			*(bool *) o->out = true;
			if (o->kind == OPUS_CLI_STOP)
				return -1;
			continue;
		}
		if (!v)
			return usage_error(sp, OPUS_CLI_ERR_MISSING, a, NULL);
		if (!o)
			return usage_error(sp, OPUS_CLI_ERR_UNKNOWN, a, v);
		switch (o->kind)
		{
			case OPUS_CLI_STR:
				*(const char **) o->out = v;
				break;
			case OPUS_CLI_INT:
				ok = opus_cli_parse_int(v, o->lo, o->hi, (int *) o->out);
				break;
			case OPUS_CLI_FLOAT:
				ok = opus_cli_parse_float(v, (float *) o->out);
				break;
			case OPUS_CLI_U64:
				ok = opus_cli_parse_u64(v, (uint64_t *) o->out);
				break;
			case OPUS_CLI_I64:
				ok = opus_cli_parse_i64(v, o->lo, o->hi, (int64_t *) o->out);
				break;
			case OPUS_CLI_FN:
				ok = o->parse(v);
				break;
			case OPUS_CLI_FLAG:
			case OPUS_CLI_STOP:
				break;
		}
		if (!ok)
			return usage_error(sp, OPUS_CLI_ERR_BAD, a, v);
		i++;
	}
	return -1;
}

int
opus_cli_parse(const char *cmd, int argc, char **argv,
			   const struct opus_cli_opt *opts, void (*usage) (void))
{
	struct opus_cli_spec sp = {.cmd = cmd,.opts = opts,.usage = usage};

	return opus_cli_parse_spec(&sp, argc, argv);
}
