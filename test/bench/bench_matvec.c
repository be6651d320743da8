/*
 * bench_matvec.c - decode-shaped matrix-vector products streamed from
 * memory: for each weight type, a matrix of about 256 MB (n_in 4096, far
 * bigger than the caches) times one activation row, on 1 and 2 threads
 * (rows split in halves), ours (the type's row kernel, opus_vec_dot_rows)
 * against llama.cpp's ggml vec_dot (the libggml-cpu.so of llama-cpp-python)
 * row by row, and a read-bandwidth probe (a sum over 512 MB) as the roof.
 * Prints GB/s of weights read, the median of REPS runs, and the load
 * average.  PROBE_ONLY=1: only the read bandwidth, as "read_bw_T GB/s"
 * lines (bench_types.sh's roof).  Also checks that both agree on the result (same layouts).
 *
 * Note: llama.cpp itself multiplies Q4_0 / Q4_K (and IQ4_NL) matrices in a
 * repacked layout with its own gemv kernels, which its type traits do not
 * expose: for those types the ggml column is its plain vec_dot, the
 * end-to-end numbers (bench_types.sh) are the real comparison.
 *
 * Not a pass/fail test.  Built and run by bench_matvec.sh.
 */
#include <dlfcn.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/qtype.h"

#define N_IN 4096
#define PROBE_BYTES (512u << 20)
#define MAX_THREADS 2

typedef void (*ggml_vec_dot_fn) (int n, float *s, size_t bs, const void *x,
								 size_t bx, const void *y, size_t by, int nrc);
struct ggml_traits_cpu
{
	void		(*from_float) (const float *, void *, int64_t);
	ggml_vec_dot_fn vec_dot;
	int			vec_dot_type;
	int64_t		nrows;
};

/* NTOK=8: tokens per weight read (prefill-shaped; GB/s then counts weights x tokens) */
static int	n_tok = 1;

static double
now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

struct job
{
	int			kind;			/* 0 probe, 1 ours, 2 ggml, 3 ours row by row */
	const struct opus_qtype_info *q;
	const struct ggml_traits_cpu *g;
	const uint8_t *w;
	size_t		row_bytes;
	int64_t		r0,
				r1;
	const void *x;
	float	   *out;
	double		sum;
	double		cpu;			/* CPU seconds of the thread's work */
	pthread_barrier_t *bar;
};

/* CPU_TIME=1: time runs by the threads' CPU time (the slowest thread's), not the wall clock */
static bool cpu_time;

static double
thread_cpu(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void
probe(struct job *j)
{
	const __m256i *p = (const __m256i *) (j->w + j->r0);
	size_t		n = (size_t) (j->r1 - j->r0) / 32;
	__m256i		a0 = _mm256_setzero_si256(),
				a1 = a0,
				a2 = a0,
				a3 = a0;

	for (size_t i = 0; i + 4 <= n; i += 4)
	{
		a0 = _mm256_add_epi64(a0, _mm256_load_si256(p + i));
		a1 = _mm256_add_epi64(a1, _mm256_load_si256(p + i + 1));
		a2 = _mm256_add_epi64(a2, _mm256_load_si256(p + i + 2));
		a3 = _mm256_add_epi64(a3, _mm256_load_si256(p + i + 3));
	}
	a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
	j->sum = (double) _mm256_extract_epi64(a0, 0);
}

static void *
worker(void *arg)
{
	struct job *j = arg;

	double		c0;

	pthread_barrier_wait(j->bar);
	c0 = thread_cpu();
	if (j->kind == 0)
		probe(j);
	else if (j->kind == 1 && n_tok > 1)
	{
		/* NTOK tokens (the same row repeated), the tile form, in pieces of 32 rows */
		static _Thread_local float o[32 * 8];

		for (int64_t r = j->r0; r < j->r1; r += 32)
			opus_vec_dot_tile(j->q->vec_dot, N_IN, (int) (j->r1 - r < 32 ? j->r1 - r : 32),
							  j->w + r * j->row_bytes, j->row_bytes, n_tok, j->x, 0, o, 32);
	}
	else if (j->kind == 1)
		opus_vec_dot_rows(j->q->vec_dot, N_IN, (int) (j->r1 - j->r0),
						  j->w + j->r0 * j->row_bytes, j->row_bytes, j->x, j->out + j->r0);
	else if (j->kind == 3 && n_tok > 1)
	{
		static _Thread_local float o[32];

		for (int64_t r = j->r0; r < j->r1; r += 32)
			for (int t = 0; t < n_tok; t++)
				opus_vec_dot_rows(j->q->vec_dot, N_IN, (int) (j->r1 - r < 32 ? j->r1 - r : 32),
								  j->w + r * j->row_bytes, j->row_bytes, j->x, o);
	}
	else if (j->kind == 3)
		for (int64_t r = j->r0; r < j->r1; r++)
			j->out[r] = j->q->vec_dot(N_IN, j->w + r * j->row_bytes, j->x);
	else
		for (int64_t r = j->r0; r < j->r1; r++)
			j->g->vec_dot(N_IN, &j->out[r], 0, j->w + r * j->row_bytes, 0, j->x, 0, 1);
	j->cpu = thread_cpu() - c0;
	pthread_barrier_wait(j->bar);
	return NULL;
}

/* seconds of one run of `kind` on nt threads over rows (or bytes) [0, total) */
static double
run(int kind, int nt, const struct opus_qtype_info *q, const struct ggml_traits_cpu *g,
	const uint8_t *w, size_t row_bytes, int64_t total, const void *x, float *out)
{
	pthread_t	th[MAX_THREADS];
	struct job	jobs[MAX_THREADS];
	pthread_barrier_t bar;
	double		t0,
				t1;

	pthread_barrier_init(&bar, NULL, nt + 1);
	for (int i = 0; i < nt; i++)
	{
		int64_t		step = kind == 0 ? total / nt / 128 * 128 : total / nt;

		jobs[i] = (struct job)
		{
			kind, q, g, w, row_bytes, step * i, i == nt - 1 ? total : step * (i + 1), x, out, 0, 0, &bar
		};
		pthread_create(&th[i], NULL, worker, &jobs[i]);
	}
	pthread_barrier_wait(&bar);
	t0 = now();
	pthread_barrier_wait(&bar);
	t1 = now();
	for (int i = 0; i < nt; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&bar);
	if (cpu_time)
	{
		double		c = 0;

		for (int i = 0; i < nt; i++)
			c = jobs[i].cpu > c ? jobs[i].cpu : c;
		return c;
	}
	return t1 - t0;
}

static int
cmp_d(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return x < y ? -1 : x > y;
}

static double
median(double *v, int n)
{
	qsort(v, n, sizeof(double), cmp_d);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int
main(int argc, char **argv)
{
	static const enum opus_qtype types[] = {
		OPUS_TYPE_Q4_0, OPUS_TYPE_Q4_1, OPUS_TYPE_Q5_0, OPUS_TYPE_Q5_1, OPUS_TYPE_Q8_0,
		OPUS_TYPE_Q4_K, OPUS_TYPE_Q5_K, OPUS_TYPE_Q6_K, OPUS_TYPE_F16, OPUS_TYPE_BF16};
	int			reps = argc > 2 ? atoi(argv[2]) : 5;
	const char *only = getenv("TYPES");
	/* MAT_MB=1: a matrix that stays in the caches (kernel speed, not memory) */
	size_t		mat_bytes = (size_t) (getenv("MAT_MB") ? atoi(getenv("MAT_MB")) : 256) << 20;
	const struct ggml_traits_cpu *(*get_traits) (int) = NULL;
	uint8_t    *probe_buf;
	float	   *xf,
			   *out,
			   *out_g;
	double		roof[MAX_THREADS + 1],
				la[3] = {0};
	FILE	   *f;

	if (argc < 2 || reps < 1 || reps > 99)
	{
		fprintf(stderr, "usage: bench_matvec PATH/libggml-cpu.so|none [REPS]\n");
		return 2;
	}
	if (strcmp(argv[1], "none") != 0)
	{
		void	   *lib = dlopen(argv[1], RTLD_NOW);
		void		(*cpu_init) (void);

		if (lib == NULL)
		{
			fprintf(stderr, "bench_matvec: %s\n", dlerror());
			return 1;
		}
		get_traits = (const struct ggml_traits_cpu *(*) (int)) dlsym(lib, "ggml_get_type_traits_cpu");
		cpu_init = (void (*) (void)) dlsym(lib, "ggml_cpu_init");
		if (get_traits == NULL || cpu_init == NULL)
		{
			fprintf(stderr, "bench_matvec: ggml symbols not found\n");
			return 1;
		}
		cpu_init();
	}
	opus_qtype_init_cpu(false);
	cpu_time = getenv("CPU_TIME") != NULL;
	if (getenv("NTOK"))
		n_tok = atoi(getenv("NTOK")) < 1 ? 1 : atoi(getenv("NTOK")) > 8 ? 8 : atoi(getenv("NTOK"));

	/* read-bandwidth probe */
	probe_buf = aligned_alloc(64, PROBE_BYTES);
	memset(probe_buf, 1, PROBE_BYTES);
	for (int nt = 1; nt <= MAX_THREADS; nt++)
	{
		double		s[99];

		for (int i = 0; i < reps; i++)
			s[i] = PROBE_BYTES / run(0, nt, NULL, NULL, probe_buf, 0, PROBE_BYTES, NULL, NULL) / 1e9;
		roof[nt] = median(s, reps);
	}
	free(probe_buf);

	if (getenv("PROBE_ONLY"))
	{
		/* for bench_types.sh: just the roof */
		printf("read_bw_1 %.2f\nread_bw_2 %.2f\n", roof[1], roof[2]);
		return 0;
	}
	xf = malloc(sizeof(float) * N_IN);
	srand(1);
	for (int i = 0; i < N_IN; i++)
		xf[i] = (float) rand() / RAND_MAX - 0.5f;

	f = fopen("/proc/loadavg", "r");
	if (f)
	{
		if (fscanf(f, "%lf %lf %lf", &la[0], &la[1], &la[2]) != 3)
			la[0] = la[1] = la[2] = 0;
		fclose(f);
	}
	printf("kernels: %s; matrix %d columns, ~%u MB of weights; %d token(s); median of %d; %s; load average %.2f %.2f %.2f\n",
		   opus_qtype_cpu_variant(), N_IN, (unsigned) (mat_bytes >> 20), n_tok, reps,
		   cpu_time ? "CPU time" : "wall time", la[0], la[1], la[2]);
	printf("read bandwidth (probe): 1 thread %.1f GB/s, 2 threads %.1f GB/s\n", roof[1], roof[2]);
	printf("%-5s %3s %9s %9s %9s %7s %9s %9s %12s\n", "type", "thr", "ours GB/s", "1-row",
		   "ggml GB/s", "ratio", "ours/roof", "ggml/roof", "max |diff|");
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
	{
		const struct opus_qtype_info *q = opus_qtype_info(types[t]);
		const struct opus_qtype_info *a = opus_qtype_info(q->vec_dot_type);
		const struct ggml_traits_cpu *g = get_traits ? get_traits((int) types[t]) : NULL;
		size_t		rs,
					as;
		int64_t		rows;
		uint8_t    *w;
		void	   *xa;
		float	   *tmp;
		double		maxd = 0;

		if (only && !strstr(only, q->name))
			continue;
		opus_qtype_row_size(types[t], N_IN, &rs);
		opus_qtype_row_size(q->vec_dot_type, N_IN, &as);
		rows = mat_bytes / rs / 64 * 64;
		w = aligned_alloc(64, rs * rows);
		xa = aligned_alloc(64, (as + 63) / 64 * 64);
		out = malloc(sizeof(float) * rows);
		out_g = malloc(sizeof(float) * rows);
		tmp = malloc(sizeof(float) * N_IN);
		/* 64 real rows, repeated (the bytes stream from memory all the same) */
		for (int r = 0; r < 64; r++)
		{
			for (int i = 0; i < N_IN; i++)
				tmp[i] = (float) rand() / RAND_MAX - 0.5f;
			q->from_float_ref(tmp, w + r * rs, N_IN);
		}
		for (int64_t r = 64; r < rows; r++)
			memcpy(w + r * rs, w + (r % 64) * rs, rs);
		a->from_float(xf, xa, N_IN);
		for (int nt = 1; nt <= MAX_THREADS; nt++)
		{
			double		so[99],
						sg[99],
						s1[99],
						m1,
						mo,
						mg = 0;

			for (int i = 0; i < reps; i++)
			{
				/* alternate the order so load drifts fall on both */
				s1[i] = run(3, nt, q, g, w, rs, rows, xa, out);
				if (i % 2 == 0)
				{
					so[i] = run(1, nt, q, g, w, rs, rows, xa, out);
					sg[i] = g ? run(2, nt, q, g, w, rs, rows, xa, out_g) : 1;
				}
				else
				{
					sg[i] = g ? run(2, nt, q, g, w, rs, rows, xa, out_g) : 1;
					so[i] = run(1, nt, q, g, w, rs, rows, xa, out);
				}
			}
			mo = rs * rows * n_tok / median(so, reps) / 1e9;
			m1 = rs * rows * n_tok / median(s1, reps) / 1e9;
			if (g)
			{
				mg = rs * rows / median(sg, reps) / 1e9;
				for (int64_t r = 0; r < 64; r++)
				{
					double		d = fabs((double) out[r] - out_g[r]) / (fabs(out_g[r]) + 1e-3);

					if (d > maxd)
						maxd = d;
				}
			}
			printf("%-5s %3d %9.1f %9.1f %9.1f %7.2f %8.0f%% %8.0f%% %12.2g\n", q->name, nt, mo, m1, mg,
				   g ? mg > 0 ? mo / mg : 0 : 0, 100 * mo / roof[nt], 100 * mg / roof[nt], maxd);
			fflush(stdout);
		}
		free(w);
		free(xa);
		free(out);
		free(out_g);
		free(tmp);
	}
	free(xf);
	return 0;
}
