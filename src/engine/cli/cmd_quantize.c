/*
 * cmd_quantize.c - `opus_engine quantize [--threads N] IN.gguf OUT.gguf
 * TYPE`: rewrite a GGUF model with its weight matrices in another tensor
 * type (format/quantize.h).
 *
 * Exit status: 0 ok, 1 error (message from the engine), 2 usage.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "format/quantize.h"

static void
usage(void)
{
	fprintf(stderr,
			"usage: opus_engine quantize [--threads N] IN.gguf OUT.gguf TYPE\n"
			"\n"
			"  TYPE is one of F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K\n"
			"  (K-quants fall back to Q5_0/Q5_1/Q8_0 for rows not a multiple of 256)\n");
}

int
opus_cli_quantize(int argc, char **argv)
{
	const char *pos[3];
	int			npos = 0;
	int			n_threads = 0;
	int			type_id;
	struct opus_error err = {0};
	struct opus_quantize_stats stats;
	enum opus_status st;

	for (int i = 1; i < argc; i++)
	{
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
		{
			usage();
			return 0;
		}
		if (strcmp(argv[i], "--threads") == 0 || strcmp(argv[i], "-t") == 0)
		{
			char	   *end;
			long		v;

			if (i + 1 >= argc)
			{
				usage();
				return 2;
			}
			v = strtol(argv[++i], &end, 10);
			if (*end != '\0' || v < 1 || v > OPUS_QUANTIZE_MAX_THREADS)
			{
				fprintf(stderr, "opus_engine quantize: --threads must be 1..%d\n", OPUS_QUANTIZE_MAX_THREADS);
				return 2;
			}
			n_threads = (int) v;
			continue;
		}
		if (npos == 3 || (argv[i][0] == '-' && argv[i][1] != '\0'))
		{
			usage();
			return 2;
		}
		pos[npos++] = argv[i];
	}
	if (npos != 3)
	{
		usage();
		return 2;
	}
	type_id = opus_qtype_from_name(pos[2]);
	if (!opus_quantize_target(type_id, NULL))
	{
		fprintf(stderr, "opus_engine quantize: unsupported type \"%s\"\n", pos[2]);
		usage();
		return 2;
	}
	if (n_threads == 0)
	{
		long		ncpu = sysconf(_SC_NPROCESSORS_ONLN);

		n_threads = ncpu < 1 ? 1 : (ncpu > 16 ? 16 : (int) ncpu);
	}

	opus_qtype_init_cpu(false);
	st = opus_quantize_file(pos[0], pos[1], (enum opus_qtype) type_id, n_threads,
							&stats, &err);
	if (st != OPUS_OK)
	{
		fprintf(stderr, "opus_engine quantize: %s: %s\n", opus_status_name(st), err.msg);
		return 1;
	}
	fprintf(stderr,
			"opus_engine quantize: wrote %s (%s): %lld tensors converted (%lld by fallback), %lld copied, %.1f MiB -> %.1f MiB\n",
			pos[1], opus_qtype_info((uint32_t) type_id)->name,
			(long long) stats.n_converted, (long long) stats.n_fallback,
			(long long) stats.n_copied, stats.in_bytes / 1048576.0,
			stats.out_bytes / 1048576.0);
	return 0;
}
