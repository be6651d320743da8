/*
 * opus_engine.c - main() of the engine binary (placeholder until the CLI lands).
 */
#include <stdio.h>

#include "status.h"

int
main(int argc, char **argv)
{
	fprintf(stderr, "usage: opus_engine run|bench|quantize|serve ...\n");
	return 2;
}
