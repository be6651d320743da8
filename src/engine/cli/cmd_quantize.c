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

#include "cli/args.h"
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

struct positional
{
	const char *v[3];
	int			n;
};

static bool
take_positional(const char *arg, void *ctx)
{
	struct positional *p = ctx;

	if (p->n == 3 || (arg[0] == '-' && arg[1] != '\0'))
		return false;
	p->v[p->n++] = arg;
	return true;
}

static int
on_error(enum opus_cli_err e, const char *opt, const char *value)
{
	if (e == OPUS_CLI_ERR_BAD)
		fprintf(stderr, "opus_engine quantize: --threads must be 1..%d\n", OPUS_QUANTIZE_MAX_THREADS);
	else
		usage();
	return 2;
}

int
opus_cli_quantize(int argc, char **argv)
{
	struct positional p = {{NULL}, 0};
	const char **pos = p.v;
	int			n_threads = 0;
	int			type_id;
	int			rc;
	struct opus_error err = {0};
	struct opus_quantize_stats stats;
	enum opus_status st;
	const struct opus_cli_opt opts[] = {
		{"--threads", "-t", OPUS_CLI_INT, &n_threads, 1, OPUS_QUANTIZE_MAX_THREADS, NULL},
		OPUS_CLI_END
	};
	const struct opus_cli_spec spec = {
		.cmd = "quantize",.opts = opts,.usage = usage,
		.positional = take_positional,.ctx = &p,.on_error = on_error
	};

	if ((rc = opus_cli_parse_spec(&spec, argc, argv)) >= 0)
		return rc;
	if (p.n != 3)
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
