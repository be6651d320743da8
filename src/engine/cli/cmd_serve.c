/*
 * cmd_serve.c - `opus_engine serve --fd N [--kv-fd M]`: the engine the
 * opus_pg supervisor starts (runtime/serve.h).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "runtime/serve.h"

static void
help(void)
{
	printf("usage: opus_engine serve --fd N [--kv-fd M]\n"
		   "Serves the opus_pg supervisor over the connected socket N (src/protocol.h),\n"
		   "with the KV cache in the shared-memory file M when given.\n");
}

static int
on_error(enum opus_cli_err e, const char *opt, const char *value)
{
	fprintf(stderr, "usage: opus_engine serve --fd N\n");
	return 2;
}

/* a descriptor number, -1 when absent or not one */
static int
fd_number(const char *s)
{
	char	   *end;
	long		v;

	if (!s)
		return -1;
	v = strtol(s, &end, 10);
	return (*end != '\0' || v < 0 || v > 65535) ? -1 : (int) v;
}

int
opus_cli_serve(int argc, char **argv)
{
	const char *fd_s = NULL,
			   *kv_fd_s = NULL;
	int			fd,
				rc;
	const struct opus_cli_opt opts[] = {
		{"--fd", NULL, OPUS_CLI_STR, &fd_s, 0, 0, NULL},
		{"--kv-fd", NULL, OPUS_CLI_STR, &kv_fd_s, 0, 0, NULL},
		OPUS_CLI_END
	};
	const struct opus_cli_spec spec = {
		.cmd = "serve",.opts = opts,.usage = help,.on_error = on_error,
		.no_short_help = true
	};

	if ((rc = opus_cli_parse_spec(&spec, argc, argv)) >= 0)
		return rc;
	fd = fd_number(fd_s);
	if (fd < 0 || fcntl(fd, F_GETFD) < 0)
	{
		fprintf(stderr, "usage: opus_engine serve --fd N (N an open socket)\n");
		return 2;
	}
	return opus_serve(fd, fd_number(kv_fd_s));
}
