/* cli_run.c - placeholder; replaced by the real implementation. */
#include <stdio.h>

#include "cli.h"

int
opus_cli_run(int argc, char **argv)
{
	fprintf(stderr, "opus_engine %s: not implemented yet\n", argv[0]);
	return 1;
}

int
opus_cli_bench(int argc, char **argv)
{
	fprintf(stderr, "opus_engine %s: not implemented yet\n", argv[0]);
	return 1;
}

int
opus_cli_logits(int argc, char **argv)
{
	fprintf(stderr, "opus_engine %s: not implemented yet\n", argv[0]);
	return 1;
}
