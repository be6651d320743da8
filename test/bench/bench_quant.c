/*
 * bench_quant.c - dot-product kernel throughput, ours against llama.cpp's
 * ggml (the libggml-cpu.so that llama-cpp-python ships), same machine, same
 * run, same data.  Prints one row per weight type: GB/s of weight rows
 * consumed by vec_dot for a 2048 x 1536 matrix, the ratio, and both results
 * for row 0 (they must agree closely: same block layouts, same semantics).
 *
 * Not a pass/fail test.  Built and run by bench_quant.sh.  Note that
 * llama-cpp-python is usually compiled for the build machine (-march=native,
 * possibly AVX-512/VNNI) while our kernels are AVX2.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "quant/qtype.h"

/* ggml's CPU type traits (ggml-cpu.h) */
typedef void (*ggml_vec_dot_fn) (int n, float *s, size_t bs, const void *x,
								 size_t bx, const void *y, size_t by, int nrc);
struct ggml_traits_cpu
{
	void		(*from_float) (const float *, void *, int64_t);
	ggml_vec_dot_fn vec_dot;
	int			vec_dot_type;
	int64_t		nrows;
};

static double
now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int
main(int argc, char **argv)
{
	static const enum opus_qtype types[] = {
		OPUS_TYPE_F32, OPUS_TYPE_F16, OPUS_TYPE_BF16, OPUS_TYPE_Q8_0, OPUS_TYPE_Q4_0,
		OPUS_TYPE_Q4_1, OPUS_TYPE_Q5_0, OPUS_TYPE_Q5_1, OPUS_TYPE_Q4_K, OPUS_TYPE_Q5_K,
	OPUS_TYPE_Q6_K};
	const int	n = 1536,
				rows = 2048;
	void	   *lib;
	const struct ggml_traits_cpu *(*get_traits) (int);
	void		(*cpu_init) (void);
	float	   *x;

	if (argc != 2)
	{
		fprintf(stderr, "usage: bench_quant PATH/libggml-cpu.so\n");
		return 2;
	}
	lib = dlopen(argv[1], RTLD_NOW);
	if (lib == NULL)
	{
		fprintf(stderr, "bench_quant: %s\n", dlerror());
		return 1;
	}
	get_traits = (const struct ggml_traits_cpu *(*) (int)) dlsym(lib, "ggml_get_type_traits_cpu");
	cpu_init = (void (*) (void)) dlsym(lib, "ggml_cpu_init");
	if (get_traits == NULL || cpu_init == NULL)
	{
		fprintf(stderr, "bench_quant: ggml symbols not found\n");
		return 1;
	}
	cpu_init();
	opus_qtype_init_cpu(false);

	x = malloc(sizeof(float) * (size_t) n * rows);
	srand(1);
	for (long i = 0; i < (long) n * rows; i++)
		x[i] = (float) rand() / RAND_MAX - 0.5f;

	printf("kernels: %s; matrix %d x %d\n", opus_qtype_cpu_variant(), rows, n);
	printf("%-5s %10s %12s %7s %14s %14s\n", "type", "ours GB/s", "ggml GB/s", "ratio",
		   "ours row0", "ggml row0");
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
	{
		const struct opus_qtype_info *q = opus_qtype_info(types[t]);
		const struct opus_qtype_info *a = opus_qtype_info(q->vec_dot_type);
		const struct ggml_traits_cpu *g = get_traits((int) types[t]);
		size_t		rs,
					as;
		char	   *w,
				   *xa;
		double		best_ours = 1e9,
					best_ggml = 1e9;
		volatile float sink = 0;
		float		r_ours,
					r_ggml;

		opus_qtype_row_size(types[t], n, &rs);
		opus_qtype_row_size(q->vec_dot_type, n, &as);
		w = malloc(rs * rows);
		xa = malloc(as);
		for (int r = 0; r < rows; r++)
			q->from_float_ref(x + (long) r * n, w + r * rs, n);
		a->from_float(x, xa, n);
		for (int rep = 0; rep < 8; rep++)
		{
			double		t0 = now();

			for (int r = 0; r < rows; r++)
				sink += q->vec_dot(n, w + r * rs, xa);
			if (now() - t0 < best_ours)
				best_ours = now() - t0;
			t0 = now();
			for (int r = 0; r < rows; r++)
			{
				float		v;

				g->vec_dot(n, &v, 0, w + r * rs, 0, xa, 0, 1);
				sink += v;
			}
			if (now() - t0 < best_ggml)
				best_ggml = now() - t0;
		}
		r_ours = q->vec_dot(n, w, xa);
		g->vec_dot(n, &r_ggml, 0, w, 0, xa, 0, 1);
		printf("%-5s %10.2f %12.2f %7.2f %14.6f %14.6f\n", q->name,
			   rs * rows / best_ours / 1e9, rs * rows / best_ggml / 1e9,
			   best_ggml / best_ours, r_ours, r_ggml);
		free(w);
		free(xa);
	}
	free(x);
	return 0;
}
