/*
 * cmd_serve.c - `opus_engine serve --fd N [--kv-fd M]`: the engine the
 * opus_pg supervisor starts (runtime/serve.h).
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "runtime/serve.h"

int
opus_cli_serve(int argc, char **argv)
{
	int			fd = -1;
	int			kv_fd = -1;

	for (int i = 1; i < argc; i++)
	{
		if ((strcmp(argv[i], "--fd") == 0 || strcmp(argv[i], "--kv-fd") == 0) &&
			i + 1 < argc)
		{
			char	   *end;
			bool		is_kv = argv[i][2] == 'k';
			long		v = strtol(argv[++i], &end, 10);

			if (*end != '\0' || v < 0 || v > 65535)
				v = -1;
			if (is_kv)
				kv_fd = (int) v;
			else
				fd = (int) v;
		}
		else if (strcmp(argv[i], "--help") == 0)
		{
			printf("usage: opus_engine serve --fd N [--kv-fd M]\n"
				   "Serves the opus_pg supervisor over the connected socket N (src/protocol.h),\n"
				   "with the KV cache in the shared-memory file M when given.\n");
			return 0;
		}
		else
		{
			fprintf(stderr, "usage: opus_engine serve --fd N\n");
			return 2;
		}
	}
	if (fd < 0 || fcntl(fd, F_GETFD) < 0)
	{
		fprintf(stderr, "usage: opus_engine serve --fd N (N an open socket)\n");
		return 2;
	}
	return opus_serve(fd, kv_fd);
}
