/*
 * bench_jinja.c - render time of the Jinja interpreter on the template
 * corpus (test/golden/jinja): each template given on the command line is
 * parsed and rendered with every context of contexts.jsonl, REPS times
 * (parse included, as jinja2's compile is in bench_jinja.sh's Python
 * column).  Prints one line: renders, seconds, microseconds per render.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/jinja.h"

static char *
slurp(const char *path, size_t *n)
{
	FILE	   *f = fopen(path, "rb");
	char	   *b;
	long		l;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	l = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t) l + 1);
	*n = fread(b, 1, (size_t) l, f);
	b[*n] = '\0';
	fclose(f);
	return b;
}

int
main(int argc, char **argv)
{
	size_t		cn;
	char	   *ctx = slurp("test/golden/jinja/contexts.jsonl", &cn);
	char	   *lines[256];
	size_t		ll[256];
	int			nc = 0,
				reps,
				renders = 0,
				failed = 0;
	struct opus_jinja_limits lim = {.now = 1768473000};
	double		total = 0;

	if (!ctx || argc < 3)
	{
		fprintf(stderr, "usage: bench_jinja REPS TEMPLATE... (from the repo root)\n");
		return 2;
	}
	reps = atoi(argv[1]);
	for (char *p = ctx; *p && nc < 256;)
	{
		char	   *e = strchr(p, '\n');

		lines[nc] = p;
		ll[nc++] = e ? (size_t) (e - p) : strlen(p);
		if (!e)
			break;
		p = e + 1;
	}
	for (int a = 2; a < argc; a++)
	{
		size_t		tl;
		char	   *src = slurp(argv[a], &tl);
		struct timespec t0,
					t1;

		if (!src)
			continue;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (int r = 0; r < reps; r++)
		{
			struct opus_jinja *t;
			struct opus_error err;

			if (opus_jinja_parse(src, tl, &lim, &t, &err) != OPUS_OK)
			{
				failed++;
				break;
			}
			for (int i = 0; i < nc; i++)
			{
				char	   *o = NULL;
				size_t		n;

				opus_jinja_render(t, lines[i], ll[i], &lim, &o, &n, &err);
				free(o);
				renders++;
			}
			opus_jinja_free(t);
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		total += (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9;
		free(src);
	}
	printf("%d %.6f %.2f %d\n", renders, total, renders ? total / renders * 1e6 : 0.0, failed);
	free(ctx);
	return 0;
}
