/*
 * replay_main.c - a main() for the fuzz targets without libFuzzer.
 *
 * `make fuzz-regress` links each test/fuzz/fuzz_*.c target with this file
 * (gcc, AddressSanitizer + UBSan) and replays every file named on the
 * command line, recursing into directories: the committed seed corpora
 * (test/fuzz/corpus/<target>/) and the inputs of past findings
 * (test/fuzz/regressions/<target>/).  Each input is copied into an
 * exact-size heap buffer, as libFuzzer does, so an overread is caught.
 * LLVMFuzzerInitialize is called first when the target defines it.  Prints
 * "N inputs" and exits non-zero on an unreadable path; a finding aborts
 * through the sanitizers (or the target's own checks).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int			LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static long n_inputs;
static int	failed;

static int
cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

static void
replay_file(const char *path, off_t size)
{
	FILE	   *f = fopen(path, "rb");
	uint8_t    *buf = malloc(size > 0 ? (size_t) size : 1);

	if (!f || !buf || (size > 0 && fread(buf, 1, (size_t) size, f) != (size_t) size))
	{
		fprintf(stderr, "replay: cannot read %s\n", path);
		failed = 1;
	}
	else
	{
		if (getenv("REPLAY_VERBOSE"))
			fprintf(stderr, "replay: %s (%lld bytes)\n", path, (long long) size);
		LLVMFuzzerTestOneInput(buf, (size_t) size);
		n_inputs++;
	}
	if (f)
		fclose(f);
	free(buf);
}

static void
replay(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
	{
		fprintf(stderr, "replay: cannot stat %s\n", path);
		failed = 1;
		return;
	}
	if (S_ISDIR(st.st_mode))
	{
		DIR		   *d = opendir(path);
		struct dirent *e;
		char	  **names = NULL;
		size_t		n = 0,
					cap = 0;

		if (!d)
		{
			fprintf(stderr, "replay: cannot open %s\n", path);
			failed = 1;
			return;
		}
		while ((e = readdir(d)) != NULL)
		{
			if (e->d_name[0] == '.')
				continue;		/* ., .., and hidden files such as .gitkeep */
			if (n == cap)
			{
				cap = cap ? cap * 2 : 64;
				names = realloc(names, cap * sizeof(*names));
				if (!names)
					abort();
			}
			names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
			if (!names[n])
				abort();
			sprintf(names[n], "%s/%s", path, e->d_name);
			n++;
		}
		closedir(d);
		if (n > 0)
			qsort(names, n, sizeof(*names), cmp_names);
		for (size_t i = 0; i < n; i++)
		{
			replay(names[i]);
			free(names[i]);
		}
		free(names);
	}
	else if (S_ISREG(st.st_mode))
		replay_file(path, st.st_size);
}

int
main(int argc, char **argv)
{
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++)
		replay(argv[i]);
	printf("%s: %ld inputs replayed%s\n", argv[0], n_inputs,
		   failed ? ", some paths unreadable" : "");
	return failed;
}
