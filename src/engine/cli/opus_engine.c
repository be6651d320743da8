/*
 * opus_engine.c - main() of the engine binary: dispatches to a subcommand
 * (see src/engine/cli/cli.h).  The supervisor runs `opus_engine serve`; people
 * and benchmarks use `run`, `bench`, `quantize`.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void
usage(FILE *f)
{
	fprintf(f,
			"usage: opus_engine COMMAND [options]\n"
			"\n"
			"commands:\n"
			"  run       --model FILE --prompt TEXT [-n N] [--temp T] [--seed S] [--chat] [--threads N]\n"
			"  bench     --model FILE [--prompt-tokens N] [--gen-tokens N] [--threads N]\n"
			"  embed     --model FILE [--threads N] (--input FILE | TEXT...) (encoder models)\n"
			"  quantize  IN.gguf OUT.gguf TYPE\n"
			"  genmodel  --shape NAME --type TYPE --out FILE [--seed S] [--layers N]\n"
			"            (random weights, real shapes: tiny micro tiny-moe smollm2-135m llama3-8b mixtral-moe)\n"
			"  logits    --model FILE ... (test and golden tooling)\n"
			"  serve     --fd N (started by the opus_pg supervisor)\n"
			"\n"
			"run 'opus_engine COMMAND --help' for a command's options\n");
}

int
main(int argc, char **argv)
{
	static const struct
	{
		const char *name;
		int			(*fn) (int, char **);
	}			cmds[] = {
		{"run", opus_cli_run},
		{"bench", opus_cli_bench},
		{"embed", opus_cli_embed},
		{"quantize", opus_cli_quantize},
		{"logits", opus_cli_logits},
		{"serve", opus_cli_serve},
		{"genmodel", opus_cli_genmodel},
	};

	if (argc < 2)
	{
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
	{
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
	{
		if (strcmp(argv[1], cmds[i].name) == 0)
			return cmds[i].fn(argc - 1, argv + 1);
	}
	fprintf(stderr, "opus_engine: unknown command \"%s\"\n", argv[1]);
	usage(stderr);
	return 2;
}
