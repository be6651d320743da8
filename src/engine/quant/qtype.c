/*
 * qtype.c - the tensor type table (sizes for every GGUF type id) and the
 * run-time choice between reference and AVX2 kernels.
 *
 * Kernel implementations live in quant_ref.c (plain C) and quant_avx2.c
 * (AVX2+FMA+F16C); this file only wires them into the table.
 */
#include "quant/qtype.h"

#include <ctype.h>
#include <cpuid.h>
#include <pthread.h>
#include <string.h>

#include "quant/quant_kernels.h"
#include "base/status.h"

#define T(id, nm, bs, ts) [id] = {.name = nm, .block_size = bs, .type_size = ts}

static struct opus_qtype_info qtypes[OPUS_TYPE__COUNT] = {
	T(OPUS_TYPE_F32, "F32", 1, 4),
	T(OPUS_TYPE_F16, "F16", 1, 2),
	T(OPUS_TYPE_Q4_0, "Q4_0", 32, 18),
	T(OPUS_TYPE_Q4_1, "Q4_1", 32, 20),
	T(OPUS_TYPE_Q5_0, "Q5_0", 32, 22),
	T(OPUS_TYPE_Q5_1, "Q5_1", 32, 24),
	T(OPUS_TYPE_Q8_0, "Q8_0", 32, 34),
	T(OPUS_TYPE_Q8_1, "Q8_1", 32, 36),
	T(OPUS_TYPE_Q2_K, "Q2_K", 256, 84),
	T(OPUS_TYPE_Q3_K, "Q3_K", 256, 110),
	T(OPUS_TYPE_Q4_K, "Q4_K", 256, 144),
	T(OPUS_TYPE_Q5_K, "Q5_K", 256, 176),
	T(OPUS_TYPE_Q6_K, "Q6_K", 256, 210),
	T(OPUS_TYPE_Q8_K, "Q8_K", 256, 292),
	T(OPUS_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66),
	T(OPUS_TYPE_IQ2_XS, "IQ2_XS", 256, 74),
	T(OPUS_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98),
	T(OPUS_TYPE_IQ1_S, "IQ1_S", 256, 50),
	T(OPUS_TYPE_IQ4_NL, "IQ4_NL", 32, 18),
	T(OPUS_TYPE_IQ3_S, "IQ3_S", 256, 110),
	T(OPUS_TYPE_IQ2_S, "IQ2_S", 256, 82),
	T(OPUS_TYPE_IQ4_XS, "IQ4_XS", 256, 136),
	T(OPUS_TYPE_I8, "I8", 1, 1),
	T(OPUS_TYPE_I16, "I16", 1, 2),
	T(OPUS_TYPE_I32, "I32", 1, 4),
	T(OPUS_TYPE_I64, "I64", 1, 8),
	T(OPUS_TYPE_F64, "F64", 1, 8),
	T(OPUS_TYPE_IQ1_M, "IQ1_M", 256, 56),
	T(OPUS_TYPE_BF16, "BF16", 1, 2),
	T(OPUS_TYPE_TQ1_0, "TQ1_0", 256, 54),
	T(OPUS_TYPE_TQ2_0, "TQ2_0", 256, 66),
	T(OPUS_TYPE_MXFP4, "MXFP4", 32, 17),
};

#undef T

const struct opus_qtype_info *
opus_qtype_info(uint32_t type)
{
	if (type >= OPUS_TYPE__COUNT || qtypes[type].name == NULL)
		return NULL;
	return &qtypes[type];
}

int
opus_qtype_from_name(const char *name)
{
	for (int i = 0; i < OPUS_TYPE__COUNT; i++)
	{
		if (qtypes[i].name && strcasecmp(qtypes[i].name, name) == 0)
			return i;
	}
	return -1;
}

bool
opus_qtype_row_size(enum opus_qtype t, int64_t n, size_t *out)
{
	const struct opus_qtype_info *q = opus_qtype_info(t);
	unsigned long long sz;

	if (q == NULL || n < 0 || n % q->block_size != 0)
		return false;
	if (opus_mul_overflow_u64((unsigned long long) (n / q->block_size),
							  (unsigned long long) q->type_size, &sz))
		return false;
	if (sz > (unsigned long long) SIZE_MAX)
		return false;
	*out = (size_t) sz;
	return true;
}

static const char *cpu_variant = "ref";

/*
 * True if the CPU and the OS support AVX2, FMA and F16C.  Uses cpuid
 * directly (clang's __builtin_cpu_supports does not know "f16c"), and checks
 * with xgetbv that the OS saves the YMM registers.
 */
static bool
cpu_has_avx2_fma_f16c(void)
{
	unsigned int a,
				b,
				c,
				d;
	unsigned int xlo,
				xhi;

	if (!__get_cpuid(1, &a, &b, &c, &d))
		return false;
	if (!(c & bit_OSXSAVE) || !(c & bit_AVX) || !(c & bit_FMA) || !(c & bit_F16C))
		return false;
	__asm__ volatile ("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
	if ((xlo & 0x6) != 0x6)
		return false;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return false;
	return (b & bit_AVX2) != 0;
}
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

/* several-rows and tile kernels by the vec_dot they compute */
#define MAX_ROWS_KERNELS 32
static struct
{
	opus_vec_dot_fn dot;
	opus_vec_dot_rows_fn rows;
	opus_vec_dot_tile_fn tile;
}			rows_kernels[MAX_ROWS_KERNELS];
static int	n_rows_kernels;

static int
rows_entry(opus_vec_dot_fn dot)
{
	for (int k = 0; k < n_rows_kernels; k++)
		if (rows_kernels[k].dot == dot)
			return k;
	if (n_rows_kernels == MAX_ROWS_KERNELS)
		return -1;
	rows_kernels[n_rows_kernels].dot = dot;
	rows_kernels[n_rows_kernels].rows = NULL;
	rows_kernels[n_rows_kernels].tile = NULL;
	return n_rows_kernels++;
}

void
opus_quant_register_rows(opus_vec_dot_fn dot, opus_vec_dot_rows_fn rows)
{
	int			k = rows_entry(dot);

	if (k >= 0)
		rows_kernels[k].rows = rows;
}

void
opus_quant_register_tile(opus_vec_dot_fn dot, opus_vec_dot_tile_fn tile)
{
	int			k = rows_entry(dot);

	if (k >= 0)
		rows_kernels[k].tile = tile;
}

static int
rows_find(opus_vec_dot_fn dot)
{
	for (int k = 0; k < n_rows_kernels; k++)
		if (rows_kernels[k].dot == dot)
			return k;
	return -1;
}

void
opus_vec_dot_rows(opus_vec_dot_fn dot, int64_t n, int n_rows, const void *w,
				  size_t w_stride, const void *x, float *out)
{
	int			k = rows_find(dot);

	if (k >= 0 && rows_kernels[k].rows)
		rows_kernels[k].rows(n, n_rows, w, w_stride, x, out);
	else
		for (int r = 0; r < n_rows; r++)
			out[r] = dot(n, (const uint8_t *) w + (size_t) r * w_stride, x);
}

void
opus_vec_dot_tile(opus_vec_dot_fn dot, int64_t n, int n_rows, const void *w,
				  size_t w_stride, int n_tok, const void *x, size_t x_stride,
				  float *out, int ld)
{
	int			k = rows_find(dot);

	if (k >= 0 && rows_kernels[k].tile && n_tok > 1)
		rows_kernels[k].tile(n, n_rows, w, w_stride, n_tok, x, x_stride, out, ld);
	else
		for (int t = 0; t < n_tok; t++)
			opus_vec_dot_rows(dot, n, n_rows, w, w_stride, (const uint8_t *) x + (size_t) t * x_stride,
							  out + (size_t) t * ld);
}

void
opus_qtype_init_cpu(bool force_ref)
{
	bool		use_avx2;

	pthread_mutex_lock(&init_lock);
	use_avx2 = !force_ref && cpu_has_avx2_fma_f16c();
	opus_quant_register_ref(qtypes);
	n_rows_kernels = 0;
	if (use_avx2)
		opus_quant_register_avx2(qtypes);
	cpu_variant = use_avx2 ? "avx2" : "ref";
	pthread_mutex_unlock(&init_lock);
}

const char *
opus_qtype_cpu_variant(void)
{
	return cpu_variant;
}
