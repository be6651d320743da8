/* quantize.c - placeholder; replaced by the real implementation. */
#include <stdio.h>

#include "cli.h"

int
opus_cli_quantize(int argc, char **argv)
{
	fprintf(stderr, "opus_engine %s: not implemented yet\n", argv[0]);
	return 1;
}
