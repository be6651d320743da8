/*
 * test_quant.c - the tensor type kernels (quant_ref.c, quant_avx2.c) and the
 * half / bfloat16 conversions.
 *
 * For every supported type, on fixed-seed random rows of several lengths:
 *  (a) quantize -> dequantize error: RMSE relative to the RMS of the input
 *      stays under the per-type bound in `cases` below;
 *  (b) the AVX2 kernels against the reference: from_float and to_float
 *      bit-identical, vec_dot within 1e-5 of sum|w*x| (skipped, and counted
 *      as not run, on a CPU without AVX2/FMA/F16C);
 *  (c) vec_dot_ref against a double-precision dot of the dequantized rows
 *      (for the Q8_1 pairs the oracle uses the block's stored s, as ggml);
 *  (d) fp16/bf16: exhaustive round trip over all 65536 bit patterns, nearest
 *      and ties-to-even rounding checked against the neighbours for random
 *      floats, and spot checks (inf, NaN, subnormals, overflow);
 *  (e) the K-quant multi-token orders (opus_vec_dot_llama_batch): which
 *      type and token count gets which; AVX2 and reference bit-identical,
 *      both within the vec_dot tolerance;
 *  (f) the Q4_0 and Q5_0 tile kernels bit-identical to their vec_dot;
 *  (g) opus_vec_dot_rows bit-identical to the dot product row by row;
 * plus known-answer blocks that pin the bit layouts (nibble order, fifth
 * bits, 6-bit K scales, Q6_K packing) and the table/registration contract.
 */
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "cpu/forward_int.h"
#include "quant/qtype.h"
#include "quant/quant_blocks.h"
#include "unit.h"

/* ---- deterministic random data ---- */

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static uint32_t
rng_u32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t) (rng >> 32);
}

static double
rng_unit(void)
{
	return ((double) rng_u32() + 0.5) / 4294967296.0;
}

static float
rng_normal(void)
{
	return (float) (sqrt(-2.0 * log(rng_unit())) * cos(6.283185307179586 * rng_unit()));
}

enum data_kind
{
	DATA_NORMAL,				/* N(0, 1) */
	DATA_OUTLIERS,				/* N(0, 0.02) with rare 10x outliers, like weights */
	DATA_POSITIVE,				/* uniform in [0.5, 1.5): exercises min > 0 */
	DATA_CONSTANT,				/* all equal */
	DATA_ZERO,
	DATA__COUNT
};

static void
fill(float *x, int64_t n, enum data_kind kind)
{
	for (int64_t i = 0; i < n; i++)
	{
		switch (kind)
		{
			case DATA_NORMAL:
				x[i] = rng_normal();
				break;
			case DATA_OUTLIERS:
				x[i] = 0.02f * rng_normal() * ((rng_u32() % 64) == 0 ? 10.0f : 1.0f);
				break;
			case DATA_POSITIVE:
				x[i] = (float) (0.5 + rng_unit());
				break;
			case DATA_CONSTANT:
				x[i] = 0.75f;
				break;
			default:
				x[i] = 0.0f;
				break;
		}
	}
}

/* ---- per-type expectations ---- */

struct type_case
{
	enum opus_qtype type;
	double		max_rel_rmse;	/* (a): bound on RMSE / RMS for normal data */
};

/*
 * Bounds for (a), about 1.25x what the reference quantizers reach on N(0,1)
 * rows (the K-quants' weighted scale search puts Q4_K well below Q4_0/Q4_1).
 */
static const struct type_case cases[] = {
	{OPUS_TYPE_F32, 0.0},
	{OPUS_TYPE_F16, 0.00026},
	{OPUS_TYPE_BF16, 0.0022},
	{OPUS_TYPE_Q8_0, 0.0068},
	{OPUS_TYPE_Q4_0, 0.11},
	{OPUS_TYPE_Q4_1, 0.10},
	{OPUS_TYPE_Q5_0, 0.052},
	{OPUS_TYPE_Q5_1, 0.049},
	{OPUS_TYPE_Q4_K, 0.09},
	{OPUS_TYPE_Q5_K, 0.046},
	{OPUS_TYPE_Q6_K, 0.023},
};

#define N_CASES (sizeof(cases) / sizeof(cases[0]))
#define MAX_N 4099

static const int64_t lens_float[] = {1, 7, 33, 576, 1000, 4099};
static const int64_t lens_32[] = {32, 64, 576, 1536, 4096};
static const int64_t lens_256[] = {256, 512, 1536, 4096};

static size_t
row_bytes(enum opus_qtype t, int64_t n)
{
	size_t		sz = 0;

	if (!opus_qtype_row_size(t, n, &sz))
		return 0;
	return sz;
}

/* dequantized activation row for the oracle, plus the Q8_1 s correction */
static double
oracle_dot(const struct opus_qtype_info *wi, const struct opus_qtype_info *xi,
		   const void *wq, const void *xq, int64_t n, double *abs_sum)
{
	static float wd[MAX_N],
				xd[MAX_N];
	double		dot = 0.0,
				as = 0.0;

	wi->to_float_ref(wq, wd, n);
	xi->to_float_ref(xq, xd, n);
	for (int64_t i = 0; i < n; i++)
	{
		dot += (double) wd[i] * (double) xd[i];
		as += fabs((double) wd[i] * (double) xd[i]);
	}
	if (wi->vec_dot_type == OPUS_TYPE_Q8_1)
	{
		/*
		 * ggml's Q4_1/Q5_1 dot uses s (d*sum(q) rounded to f16) for the min
		 * term: replace the exact m*d*sum(q) by m*s per block.
		 */
		const opus_block_q8_1 *xb = xq;

		for (int64_t b = 0; b < n / OPUS_QK32; b++)
		{
			const uint16_t *mp = (const uint16_t *) ((const uint8_t *) wq + b * wi->type_size) + 1;
			double		m = opus_fp16_to_fp32(*mp);
			int			sum = 0;

			for (int j = 0; j < OPUS_QK32; j++)
				sum += xb[b].qs[j];
			dot += m * ((double) opus_fp16_to_fp32(xb[b].s) -
						(double) ((float) sum * opus_fp16_to_fp32(xb[b].d)));
		}
	}
	*abs_sum = as;
	return dot;
}

/* ---- (a) + (c): reference quality and reference dot product ---- */

static void
test_reference(void)
{
	static float x[MAX_N],
				y[MAX_N],
				act[MAX_N];
	static uint8_t wq[MAX_N * 4],
				xq[MAX_N * 4];

	for (size_t c = 0; c < N_CASES; c++)
	{
		const struct opus_qtype_info *wi = opus_qtype_info(cases[c].type);
		const struct opus_qtype_info *xi = opus_qtype_info(wi->vec_dot_type);
		const int64_t *lens = wi->block_size == 1 ? lens_float :
			wi->block_size == 32 ? lens_32 : lens_256;
		int			nlens = wi->block_size == 1 ? 6 : wi->block_size == 32 ? 5 : 4;
		double		worst_rmse = 0.0,
					worst_dot = 0.0;

		CHECK(wi->supported && wi->to_float_ref && wi->from_float_ref && wi->vec_dot_ref,
			  "%s: reference kernels registered", wi->name);
		CHECK(xi != NULL && xi->from_float_ref && xi->to_float_ref,
			  "%s: activation type %d has kernels", wi->name, wi->vec_dot_type);
		if (!wi->vec_dot_ref || !xi || !xi->from_float_ref)
			continue;

		for (int li = 0; li < nlens; li++)
		{
			int64_t		n = lens[li];

			for (int kind = 0; kind < DATA__COUNT; kind++)
			{
				double		err = 0.0,
							rms = 0.0,
							dot,
							oracle,
							abs_sum;

				fill(x, n, (enum data_kind) kind);
				fill(act, n, DATA_NORMAL);
				memset(wq, 0xAB, sizeof(wq));
				wi->from_float_ref(x, wq, n);
				wi->to_float_ref(wq, y, n);
				for (int64_t i = 0; i < n; i++)
				{
					err += ((double) x[i] - y[i]) * ((double) x[i] - y[i]);
					rms += (double) x[i] * x[i];
				}
				if (kind == DATA_NORMAL && n >= 256)
				{
					double		rel = sqrt(err / rms);

					if (rel > worst_rmse)
						worst_rmse = rel;
					CHECK(rel <= cases[c].max_rel_rmse,
						  "%s n=%lld: quantize/dequantize rel RMSE %.5f > %.5f",
						  wi->name, (long long) n, rel, cases[c].max_rel_rmse);
				}
				if (kind == DATA_ZERO)
				{
					int			nonzero = 0;

					for (int64_t i = 0; i < n; i++)
						nonzero += y[i] != 0.0f;
					CHECK(nonzero == 0, "%s n=%lld: zeros round-trip to zeros",
						  wi->name, (long long) n);
				}
				if (kind == DATA_CONSTANT && wi->block_size == 32)
				{
					/* a constant row is representable up to the f16 scale */
					double		maxe = 0.0;

					for (int64_t i = 0; i < n; i++)
						maxe = fmax(maxe, fabs((double) y[i] - x[i]));
					CHECK(maxe <= 0.75 * 2e-3, "%s n=%lld: constant row error %g",
						  wi->name, (long long) n, maxe);
				}

				xi->from_float_ref(act, xq, n);
				dot = wi->vec_dot_ref(n, wq, xq);
				oracle = oracle_dot(wi, xi, wq, xq, n, &abs_sum);
				if (fabs(dot - oracle) / (abs_sum + 1e-30) > worst_dot)
					worst_dot = fabs(dot - oracle) / (abs_sum + 1e-30);
				CHECK(fabs(dot - oracle) <= 1e-5 * abs_sum + 1e-30,
					  "%s n=%lld kind %d: vec_dot_ref %.9g vs double %.9g (sum|wx| %g)",
					  wi->name, (long long) n, kind, dot, oracle, abs_sum);
			}
		}
		printf("  %-5s rel RMSE (N(0,1), worst) %.5f  bound %.5f   |vec_dot_ref - double| / sum|wx| <= %.2e\n",
			   wi->name, worst_rmse, cases[c].max_rel_rmse, worst_dot);
	}
}

/* the K-quants' weighted scale search must beat the plain min/max blocks */
static double
rel_rmse(enum opus_qtype t, const float *x, int64_t n)
{
	static uint8_t q[MAX_N * 4];
	static float y[MAX_N];
	const struct opus_qtype_info *qi = opus_qtype_info(t);
	double		err = 0.0,
				rms = 0.0;

	qi->from_float_ref(x, q, n);
	qi->to_float_ref(q, y, n);
	for (int64_t i = 0; i < n; i++)
	{
		err += ((double) x[i] - y[i]) * ((double) x[i] - y[i]);
		rms += (double) x[i] * x[i];
	}
	return sqrt(err / rms);
}

static void
test_kquant_search(void)
{
	static float x[4096];
	double		q41,
				q4k,
				q51,
				q5k;

	fill(x, 4096, DATA_OUTLIERS);
	q41 = rel_rmse(OPUS_TYPE_Q4_1, x, 4096);
	q4k = rel_rmse(OPUS_TYPE_Q4_K, x, 4096);
	q51 = rel_rmse(OPUS_TYPE_Q5_1, x, 4096);
	q5k = rel_rmse(OPUS_TYPE_Q5_K, x, 4096);
	CHECK(q4k < q41 && q5k < q51,
		  "K-quant search beats min/max blocks on weight-like data: Q4_K %.4f < Q4_1 %.4f, Q5_K %.4f < Q5_1 %.4f",
		  q4k, q41, q5k, q51);
	printf("  weight-like data rel RMSE: Q4_1 %.4f Q4_K %.4f Q5_1 %.4f Q5_K %.4f\n", q41, q4k, q51, q5k);
}

/* ---- (b): AVX2 against reference ---- */

static void
test_avx2(void)
{
	static float x[MAX_N],
				act[MAX_N],
				y_ref[MAX_N],
				y_fast[MAX_N];
	static uint8_t wq[MAX_N * 4],
				xq_ref[MAX_N * 4],
				xq_fast[MAX_N * 4];
	int			n_fast_dot = 0;

	opus_qtype_init_cpu(false);
	if (strcmp(opus_qtype_cpu_variant(), "avx2") != 0)
	{
		printf("  SKIP: AVX2/FMA/F16C not available; AVX2 checks not run\n");
		return;
	}

	for (size_t c = 0; c < N_CASES; c++)
	{
		const struct opus_qtype_info *wi = opus_qtype_info(cases[c].type);
		const struct opus_qtype_info *xi = opus_qtype_info(wi->vec_dot_type);
		const int64_t *lens = wi->block_size == 1 ? lens_float :
			wi->block_size == 32 ? lens_32 : lens_256;
		int			nlens = wi->block_size == 1 ? 6 : wi->block_size == 32 ? 5 : 4;
		double		worst = 0.0;

		n_fast_dot += wi->vec_dot != wi->vec_dot_ref;
		for (int li = 0; li < nlens; li++)
		{
			int64_t		n = lens[li];
			size_t		wb = row_bytes(cases[c].type, n),
						xb = row_bytes(wi->vec_dot_type, n);

			for (int kind = 0; kind < DATA__COUNT; kind++)
			{
				double		abs_sum = 0.0,
							d_ref,
							d_fast;

				fill(x, n, (enum data_kind) kind);
				fill(act, n, kind == DATA_ZERO ? DATA_ZERO : DATA_NORMAL);

				/* weight quantization: bit-identical */
				memset(wq, 0, wb);
				memset(xq_fast, 0, wb);
				wi->from_float_ref(x, wq, n);
				wi->from_float(x, xq_fast, n);
				CHECK(memcmp(wq, xq_fast, wb) == 0, "%s n=%lld kind %d: from_float differs from ref",
					  wi->name, (long long) n, kind);

				/* dequantization: bit-identical */
				wi->to_float_ref(wq, y_ref, n);
				wi->to_float(wq, y_fast, n);
				CHECK(memcmp(y_ref, y_fast, (size_t) n * sizeof(float)) == 0,
					  "%s n=%lld kind %d: to_float differs from ref", wi->name, (long long) n, kind);

				/* activation quantization: bit-identical */
				memset(xq_ref, 0, xb);
				memset(xq_fast, 0, xb);
				xi->from_float_ref(act, xq_ref, n);
				xi->from_float(act, xq_fast, n);
				CHECK(memcmp(xq_ref, xq_fast, xb) == 0, "%s n=%lld kind %d: %s from_float differs from ref",
					  wi->name, (long long) n, kind, xi->name);

				/* dot product: within 1e-5 of sum |w*x| */
				xi->to_float_ref(xq_ref, act, n);
				for (int64_t i = 0; i < n; i++)
					abs_sum += fabs((double) y_ref[i] * act[i]);
				d_ref = wi->vec_dot_ref(n, wq, xq_ref);
				d_fast = wi->vec_dot(n, wq, xq_ref);
				if (fabs(d_fast - d_ref) / (abs_sum + 1e-30) > worst)
					worst = fabs(d_fast - d_ref) / (abs_sum + 1e-30);
				CHECK(fabs(d_fast - d_ref) <= 1e-5 * abs_sum + 1e-30,
					  "%s n=%lld kind %d: vec_dot avx2 %.9g vs ref %.9g (sum|wx| %g)",
					  wi->name, (long long) n, kind, d_fast, d_ref, abs_sum);
			}
		}
		printf("  %-5s avx2 vec_dot: |fast - ref| / sum|wx| <= %.2e%s\n", wi->name, worst,
			   wi->vec_dot != wi->vec_dot_ref ? "" : " (no AVX2 variant)");
	}
	CHECK(n_fast_dot == (int) N_CASES, "every weight type has an AVX2 vec_dot (%d of %d)",
		  n_fast_dot, (int) N_CASES);

	/* rounding ties: x*id lands exactly on k + 0.5 (d = 1 when amax = 127) */
	{
		static const float ties[8] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 126.5f, -126.5f, 3.5f};
		const struct opus_qtype_info *q80 = opus_qtype_info(OPUS_TYPE_Q8_0);
		const struct opus_qtype_info *q81 = opus_qtype_info(OPUS_TYPE_Q8_1);
		const struct opus_qtype_info *q8k = opus_qtype_info(OPUS_TYPE_Q8_K);
		opus_block_q8_0 a,
					b;
		opus_block_q8_1 c1,
					c2;
		opus_block_q8_K k1,
					k2;

		for (int i = 0; i < 256; i++)
			x[i] = ties[i % 8] * (i % 16 < 8 ? 1.0f : -1.0f);
		q80->from_float_ref(x, &a, 32);
		q80->from_float(x, &b, 32);
		CHECK(memcmp(&a, &b, sizeof(a)) == 0 && a.qs[1] == 3 && a.qs[2] == -3 &&
			  a.qs[3] == 1 && a.qs[5] == 127,
			  "Q8_0 ties round away from zero in both variants (%d %d %d %d)",
			  b.qs[1], b.qs[2], b.qs[3], b.qs[5]);
		q81->from_float_ref(x, &c1, 32);
		q81->from_float(x, &c2, 32);
		CHECK(memcmp(&c1, &c2, sizeof(c1)) == 0, "Q8_1 ties identical");
		x[4] = INFINITY;		/* d = inf, id = 0: inf * 0 is NaN, stored as 0 */
		q80->from_float_ref(x, &a, 32);
		q80->from_float(x, &b, 32);
		CHECK(memcmp(&a, &b, sizeof(a)) == 0 && a.qs[4] == 0 && a.qs[1] == 0,
			  "Q8_0 of a block holding inf: identical, NaN products stored as 0");
		x[4] = -0.5f;
		x[0] = -127.0f;
		q8k->from_float_ref(x, &k1, 256);
		q8k->from_float(x, &k2, 256);
		CHECK(memcmp(&k1, &k2, sizeof(k1)) == 0 && k1.qs[1] == 2 && k1.qs[7] == 4,
			  "Q8_K ties to even identical (%d %d)", k2.qs[1], k2.qs[7]);
	}
	opus_qtype_init_cpu(true);
	CHECK(strcmp(opus_qtype_cpu_variant(), "ref") == 0 &&
		  opus_qtype_info(OPUS_TYPE_Q4_1)->vec_dot == opus_qtype_info(OPUS_TYPE_Q4_1)->vec_dot_ref,
		  "force_ref puts the reference kernels back");
	opus_qtype_init_cpu(false);
}

/*
 * ---- (e): llama.cpp's multi-token order for K-quants ----
 * opus_vec_dot_llama_batch's AVX2 and reference kernels compute the same
 * integer sums and the same float operations, so they must agree bit for
 * bit; both are within the vec_dot tolerance of vec_dot_ref.  Types whose
 * order does not depend on the token count, and Q4_K matrices with a
 * multiple of 8 rows (llama.cpp repacks those), get NULL.
 */
static void
test_llama_batch_order(void)
{
	static const enum opus_qtype ktypes[] = {OPUS_TYPE_Q4_K, OPUS_TYPE_Q4_K, OPUS_TYPE_Q5_K,
	OPUS_TYPE_Q6_K};
	static const int64_t krows[] = {577, 576, 576, 576};	/* Q4_K: tiled, then repacked */
	static float x[MAX_N],
				act[MAX_N];
	static uint8_t wq[MAX_N * 4],
				xq[MAX_N * 4];

	opus_qtype_init_cpu(true);
	{
		int			f[11],
					u[11];
		bool		ok = opus_vec_dot_llama_batch(OPUS_TYPE_Q4_0, 8, 16, &f[0], &u[0]) == NULL &&
			f[0] == 0 && u[0] == 0 &&
			opus_vec_dot_llama_batch(OPUS_TYPE_Q4_1, 8, 16, &f[1], &u[1]) == NULL &&
			opus_vec_dot_llama_batch(OPUS_TYPE_Q8_0, 8, 16, &f[2], &u[2]) == NULL &&
			opus_vec_dot_llama_batch(OPUS_TYPE_F16, 8, 16, &f[3], &u[3]) == NULL &&
			opus_vec_dot_llama_batch(OPUS_TYPE_Q5_K, 8, 16, &f[4], &u[4]) != NULL &&
			f[4] == 0 && u[4] == 16 &&
			opus_vec_dot_llama_batch(OPUS_TYPE_Q5_K, 8, 7, &f[5], &u[5]) != NULL && u[5] == 0 &&
			opus_vec_dot_llama_batch(OPUS_TYPE_Q6_K, 8, 8, &f[6], &u[6]) != NULL &&
			f[6] == 0 && u[6] == 8 &&
			opus_vec_dot_llama_batch(OPUS_TYPE_Q4_K, 576, 11, &f[7], &u[7]) != NULL &&
			f[7] == 8 && u[7] == 11 &&
			opus_vec_dot_llama_batch(OPUS_TYPE_Q4_K, 576, 3, &f[8], &u[8]) != NULL &&
			f[8] == 0 && u[8] == 3 &&
			opus_vec_dot_llama_batch(OPUS_TYPE_Q4_K, 577, 11, &f[9], &u[9]) != NULL &&
			f[9] == 0 && u[9] == 11 &&
			opus_vec_dot_llama_batch(OPUS_TYPE_Q4_K, 577, 7, &f[10], &u[10]) != NULL && u[10] == 0;

		CHECK(ok, "multi-token orders: Q5_K/Q6_K/odd-row Q4_K for >= 8 tokens, repacked Q4_K's "
			  "one-token order for the n %% 4 last tokens, none for other types");
	}
	for (size_t k = 0; k < sizeof(ktypes) / sizeof(ktypes[0]); k++)
	{
		const struct opus_qtype_info *wi = opus_qtype_info(ktypes[k]);
		const struct opus_qtype_info *xi = opus_qtype_info(wi->vec_dot_type);
		double		worst = 0.0;
		int			n_same = 0,
					n_cases = 0;

		for (int li = 0; li < 4; li++)
		{
			int64_t		n = lens_256[li];

			for (int kind = 0; kind < DATA__COUNT; kind++)
			{
				opus_vec_dot_fn ref,
							fast;
				float		d_ref,
							d_fast,
							d_vec;
				double		abs_sum = 0.0;
				static float y[MAX_N];

				fill(x, n, (enum data_kind) kind);
				fill(act, n, kind == DATA_ZERO ? DATA_ZERO : DATA_NORMAL);
				wi->from_float_ref(x, wq, n);
				xi->from_float_ref(act, xq, n);
				wi->to_float_ref(wq, y, n);
				xi->to_float_ref(xq, act, n);
				for (int64_t i = 0; i < n; i++)
					abs_sum += fabs((double) y[i] * act[i]);
				int			f,
							u;

				opus_qtype_init_cpu(true);
				ref = opus_vec_dot_llama_batch(ktypes[k], krows[k], 17, &f, &u);
				d_ref = ref(n, wq, xq);
				d_vec = wi->vec_dot_ref(n, wq, xq);
				opus_qtype_init_cpu(false);
				fast = opus_vec_dot_llama_batch(ktypes[k], krows[k], 17, &f, &u);
				d_fast = fast(n, wq, xq);
				CHECK(memcmp(&d_ref, &d_fast, sizeof(float)) == 0,
					  "%s n=%lld kind %d: multi-token order avx2 %.9g vs ref %.9g (bit-identical)",
					  wi->name, (long long) n, kind, d_fast, d_ref);
				CHECK(fabs(d_ref - d_vec) <= 1e-5 * abs_sum + 1e-30,
					  "%s n=%lld kind %d: multi-token order %.9g vs vec_dot_ref %.9g (sum|wx| %g)",
					  wi->name, (long long) n, kind, d_ref, d_vec, abs_sum);
				if (fabs(d_ref - d_vec) / (abs_sum + 1e-30) > worst)
					worst = fabs(d_ref - d_vec) / (abs_sum + 1e-30);
				n_same += d_ref == wi->vec_dot(n, wq, xq);
				n_cases++;
			}
		}
		printf("  %-5s multi-token order (%lld rows): avx2 == ref; |it - vec_dot_ref| / sum|wx| "
			   "<= %.2e; equal to vec_dot in %d of %d cases\n", wi->name, (long long) krows[k],
			   worst, n_same, n_cases);
	}
	opus_qtype_init_cpu(false);
}

/*
 * ---- (f): the Q4_0 tile kernels (matmul_avx2.c) ----
 * They sum in llama.cpp's Q4_0 order like vec_dot does, eight rows at once:
 * every output must equal vec_dot's bit for bit, for every token count C,
 * AVX2 and AVX-VNNI, with a row count that is not a multiple of 8.
 */
static void
test_q4_0_tiles(void)
{
	enum
	{
		NB = 18, ROWS = 13
	};
	static opus_block_q4_0 w[ROWS * NB];
	static opus_block_q8_0 xq[8 * NB];
	static float x[ROWS * NB * 32],
				xs[NB * 8],
				out[ROWS * 8];
	const struct opus_qtype_info *wi = opus_qtype_info(OPUS_TYPE_Q4_0);
	const struct opus_qtype_info *xi = opus_qtype_info(OPUS_TYPE_Q8_0);
	int			n_bad = 0,
				n_run = 0;

	opus_qtype_init_cpu(false);
	if (strcmp(opus_qtype_cpu_variant(), "avx2") != 0)
	{
		printf("  SKIP: no AVX2; Q4_0 tile kernels not run\n");
		return;
	}
	fill(x, ROWS * NB * 32, DATA_NORMAL);
	wi->from_float(x, w, ROWS * NB * 32);
	fill(x, 8 * NB * 32, DATA_NORMAL);
	for (int c = 0; c < 8; c++)
	{
		xi->from_float(x + c * NB * 32, xq + c * NB, NB * 32);
		for (int b = 0; b < NB; b++)
			xs[b * 8 + c] = opus_fp16_to_fp32(xq[c * NB + b].d);
	}
	for (int vnni = 0; vnni < 2; vnni++)
		for (int C = 1; C <= 8; C++)
		{
			opus_mm_rows_fn fn = opus_mm_rows_avx2(OPUS_TYPE_Q4_0, C, vnni != 0);

			CHECK(fn != NULL, "Q4_0 tile kernel for C=%d vnni=%d", C, vnni);
			if (!fn)
				continue;
			for (int n_rows = 1; n_rows <= ROWS; n_rows += 4)
			{
				fn(NB, n_rows, (const uint8_t *) w, sizeof(opus_block_q4_0) * NB,
				   (const uint8_t *) xq, sizeof(opus_block_q8_0) * NB, xs, out);
				for (int r = 0; r < n_rows; r++)
					for (int c = 0; c < C; c++)
					{
						float		v = wi->vec_dot(NB * 32, w + r * NB, xq + c * NB);

						n_run++;
						n_bad += memcmp(&v, &out[r * 8 + c], sizeof(float)) != 0;
					}
			}
		}
	CHECK(n_bad == 0, "Q4_0 tile kernels equal vec_dot bit for bit (%d of %d differ)", n_bad, n_run);
	printf("  Q4_0  tile kernels == vec_dot at %d of %d outputs\n", n_run - n_bad, n_run);
}

/*
 * ---- (f'): the Q5_0 tile kernels of the forward pass (matmul_avx2.c) ----
 * Q5_0's vec_dot is llama.cpp's order; the tile kernels must give its bits
 * for every token, 1..16 tokens run as the forward pass runs them (groups
 * of 8, then the rest), row ranges that start anywhere and end anywhere
 * (a unit's split of the matrix), AVX2 and AVX-VNNI, with and without the
 * 512-bit kernels (OPUS_NO_AVX512); and stay within vec_dot's tolerance of
 * the scalar reference (vec_dot_ref).
 */
static void
test_q5_0_tiles_one(const char *variant)
{
	enum
	{
		NB = 20, ROWS = 19, TOK = 16
	};
	static opus_block_q5_0 w[ROWS * NB];
	static opus_block_q8_0 xq[TOK * NB];
	static float x[ROWS * NB * 32],
				xs[2][NB * 8],
				out[ROWS * 8];
	const struct opus_qtype_info *wi = opus_qtype_info(OPUS_TYPE_Q5_0);
	const struct opus_qtype_info *xi = opus_qtype_info(OPUS_TYPE_Q8_0);
	int			n_bad = 0,
				n_far = 0,
				n_run = 0;

	fill(x, ROWS * NB * 32, DATA_OUTLIERS);
	wi->from_float(x, w, ROWS * NB * 32);
	fill(x, TOK * NB * 32, DATA_NORMAL);
	for (int t = 0; t < TOK; t++)
	{
		xi->from_float(x + t * NB * 32, xq + t * NB, NB * 32);
		for (int b = 0; b < NB; b++)
			xs[t / 8][b * 8 + t % 8] = opus_fp16_to_fp32(xq[t * NB + b].d);
	}
	for (int vnni = 0; vnni < 2; vnni++)
		for (int n_tok = 1; n_tok <= TOK; n_tok++)
			for (int r0 = 0; r0 < ROWS; r0 += 5)
				for (int r1 = r0 + 1; r1 <= ROWS; r1 += 3)
					for (int t0 = 0; t0 < n_tok; t0 += 8)
					{
						int			C = n_tok - t0 < 8 ? n_tok - t0 : 8;
						opus_mm_rows_fn fn = opus_mm_rows_avx2(OPUS_TYPE_Q5_0, C, vnni != 0);

						CHECK(fn != NULL, "Q5_0 tile kernel for C=%d vnni=%d", C, vnni);
						if (!fn)
							return;
						fn(NB, r1 - r0, (const uint8_t *) (w + r0 * NB), sizeof(opus_block_q5_0) * NB,
						   (const uint8_t *) (xq + t0 * NB), sizeof(opus_block_q8_0) * NB, xs[t0 / 8], out);
						for (int r = r0; r < r1; r++)
							for (int c = 0; c < C; c++)
							{
								const opus_block_q8_0 *xt = xq + (t0 + c) * NB;
								float		v = wi->vec_dot(NB * 32, w + r * NB, xt);
								float		ref = wi->vec_dot_ref(NB * 32, w + r * NB, xt);
								double		mag = 0.0;

								for (int b = 0; b < NB; b++)
									for (int k = 0; k < 32; k++)
									{
										int			q = ((k < 16 ? w[r * NB + b].qs[k] & 15 : w[r * NB + b].qs[k - 16] >> 4) |
														 (((w[r * NB + b].qh[k / 8] >> (k % 8)) & 1) << 4)) - 16;

										mag += fabs((double) q * opus_fp16_to_fp32(w[r * NB + b].d) *
													xt[b].qs[k] * opus_fp16_to_fp32(xt[b].d));
									}
								n_run++;
								n_bad += memcmp(&v, &out[(r - r0) * 8 + c], sizeof(float)) != 0;
								n_far += fabs((double) out[(r - r0) * 8 + c] - ref) > 1e-5 * mag + 1e-30;
							}
					}
	CHECK(n_bad == 0, "%s: Q5_0 tile kernels equal vec_dot bit for bit (%d of %d differ)",
		  variant, n_bad, n_run);
	CHECK(n_far == 0, "%s: Q5_0 tile kernels within 1e-5 sum|wx| of vec_dot_ref (%d of %d not)",
		  variant, n_far, n_run);
	printf("  Q5_0  tile kernels (%s) == vec_dot at %d of %d outputs, near vec_dot_ref at %d\n",
		   variant, n_run - n_bad, n_run, n_run - n_far);
}

static void
test_q5_0_tiles(void)
{
	opus_qtype_init_cpu(false);
	if (strcmp(opus_qtype_cpu_variant(), "avx2") != 0)
	{
		printf("  SKIP: no AVX2; Q5_0 tile kernels not run\n");
		return;
	}
	test_q5_0_tiles_one("default");
	setenv("OPUS_NO_AVX512", "1", 1);
	test_q5_0_tiles_one("OPUS_NO_AVX512");
	unsetenv("OPUS_NO_AVX512");
}

/* ---- known-answer blocks: the bit layouts ---- */

static void
test_layouts(void)
{
	float		y[256];

	{
		opus_block_q4_0 b = {.d = 0x4000};	/* 2.0 */

		for (int j = 0; j < 16; j++)
			b.qs[j] = (uint8_t) (j | ((15 - j) << 4));
		opus_qtype_info(OPUS_TYPE_Q4_0)->to_float_ref(&b, y, 32);
		CHECK(y[0] == -16.0f && y[5] == -6.0f && y[16] == 14.0f && y[31] == -16.0f,
			  "Q4_0 layout: %g %g %g %g", y[0], y[5], y[16], y[31]);
	}
	{
		opus_block_q4_1 b = {.d = 0x3c00, .m = 0xb800};	/* 1.0, -0.5 */

		for (int j = 0; j < 16; j++)
			b.qs[j] = (uint8_t) (j | ((15 - j) << 4));
		opus_qtype_info(OPUS_TYPE_Q4_1)->to_float_ref(&b, y, 32);
		CHECK(y[0] == -0.5f && y[7] == 6.5f && y[16] == 14.5f && y[31] == -0.5f,
			  "Q4_1 layout: %g %g %g %g", y[0], y[7], y[16], y[31]);
	}
	{
		opus_block_q5_0 b = {.d = 0x3c00, .qh = {0x01, 0x00, 0x00, 0x80}};

		b.qs[15] = 0xF0;
		opus_qtype_info(OPUS_TYPE_Q5_0)->to_float_ref(&b, y, 32);
		CHECK(y[0] == 0.0f && y[1] == -16.0f && y[15] == -16.0f && y[31] == 15.0f,
			  "Q5_0 layout: %g %g %g %g", y[0], y[1], y[15], y[31]);
	}
	{
		opus_block_q5_1 b = {.d = 0x3c00, .m = 0x3c00, .qh = {0x00, 0x00, 0x02, 0x00}};

		b.qs[1] = 0x3F;			/* element 1 = 15, element 17 = 3 | fifth bit */
		opus_qtype_info(OPUS_TYPE_Q5_1)->to_float_ref(&b, y, 32);
		CHECK(y[1] == 16.0f && y[17] == 20.0f && y[0] == 1.0f,
			  "Q5_1 layout: %g %g %g", y[1], y[17], y[0]);
	}
	{
		opus_block_q4_K b = {.d = 0x3c00, .dmin = 0x3800,	/* 1.0, 0.5 */
			.scales = {0x41, 0x02, 0x03, 0xC4, 0x05, 0x06, 0x87, 0x08,
		0x21, 0x43, 0x65, 0x87}};

		/* scales 1 2 3 4 17 3 5 55, mins 5 6 7 8 2 4 38 8 */
		memset(b.qs, 0x21, sizeof(b.qs));
		opus_qtype_info(OPUS_TYPE_Q4_K)->to_float_ref(&b, y, 256);
		CHECK(y[0] == -1.5f && y[40] == 1.0f && y[128] == 16.0f && y[160] == 4.0f &&
			  y[192] == -14.0f && y[255] == 106.0f,
			  "Q4_K 6-bit scales/mins: %g %g %g %g %g %g", y[0], y[40], y[128], y[160], y[192], y[255]);
	}
	{
		opus_block_q5_K b = {.d = 0x3c00, .dmin = 0x0000,
		.scales = {1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}};

		b.qh[3] = 0x06;			/* bit 1: element 32+3, bit 2: element 64+3 */
		b.qs[3] = 0x10;			/* element 3 = 0, element 35 = 1 */
		opus_qtype_info(OPUS_TYPE_Q5_K)->to_float_ref(&b, y, 256);
		CHECK(y[3] == 0.0f && y[35] == 17.0f && y[67] == 16.0f && y[99] == 0.0f,
			  "Q5_K fifth bits: %g %g %g %g", y[3], y[35], y[67], y[99]);
	}
	{
		opus_block_q6_K b;

		memset(&b, 0, sizeof(b));
		b.d = 0x3c00;
		for (int g = 0; g < 16; g++)
			b.scales[g] = (int8_t) (g - 8);
		b.ql[101] = 0xA0;		/* element 229: low bits 10; element 165: 0 */
		b.qh[37] = 0xC0;		/* element 229: top bits 3 */
		opus_qtype_info(OPUS_TYPE_Q6_K)->to_float_ref(&b, y, 256);
		CHECK(y[229] == 156.0f && y[165] == -64.0f && y[0] == 256.0f,
			  "Q6_K layout: %g %g %g", y[229], y[165], y[0]);
	}
	{
		float		x[32];
		opus_block_q8_1 b;
		int			sum = 0;

		for (int j = 0; j < 32; j++)
			x[j] = (float) (j - 16);
		opus_qtype_info(OPUS_TYPE_Q8_1)->from_float_ref(x, &b, 32);
		for (int j = 0; j < 32; j++)
			sum += b.qs[j];
		CHECK(b.d == opus_fp32_to_fp16(16.0f / 127.0f) && b.qs[0] == -127 && b.qs[16] == 0 &&
			  b.qs[31] == (int8_t) roundf(15.0f * (1.0f / (16.0f / 127.0f))) &&
			  b.s == opus_fp32_to_fp16((float) sum * (16.0f / 127.0f)),
			  "Q8_1 block: d, qs and s = d*sum(qs)");
	}
	{
		float		x[256];
		opus_block_q8_K b;
		int			ok = 1;

		for (int j = 0; j < 256; j++)
			x[j] = (float) ((j % 7) - 3) * 0.25f;
		x[10] = 2.0f;			/* the extreme value maps to -127 */
		opus_qtype_info(OPUS_TYPE_Q8_K)->from_float_ref(x, &b, 256);
		for (int g = 0; g < 16; g++)
		{
			int			s = 0;

			for (int l = 0; l < 16; l++)
				s += b.qs[16 * g + l];
			ok &= s == b.bsums[g];
		}
		CHECK(ok && b.qs[10] == -127 && b.d == 1.0f / (-127.0f / 2.0f),
			  "Q8_K block: bsums, sign convention, f32 d");
	}
}

/* ---- table contract ---- */

static void
test_table(void)
{
	static const char *const names[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1",
	"Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
	{
		int			t = opus_qtype_from_name(names[i]);
		const struct opus_qtype_info *q = t >= 0 ? opus_qtype_info((uint32_t) t) : NULL;

		CHECK(q && q->supported && q->vec_dot && q->to_float && q->from_float,
			  "%s: supported with all kernels", names[i]);
	}
	CHECK(opus_qtype_from_name("q4_k") == OPUS_TYPE_Q4_K, "names are case-insensitive");
	CHECK(!opus_qtype_info(OPUS_TYPE_Q2_K)->supported, "Q2_K has no kernels");
	CHECK(!opus_qtype_info(OPUS_TYPE_Q8_K)->supported &&
		  opus_qtype_info(OPUS_TYPE_Q8_K)->from_float != NULL,
		  "Q8_K is an activation type only");
	CHECK(opus_qtype_info(OPUS_TYPE_Q4_1)->vec_dot_type == OPUS_TYPE_Q8_1 &&
		  opus_qtype_info(OPUS_TYPE_Q5_0)->vec_dot_type == OPUS_TYPE_Q8_0 &&
		  opus_qtype_info(OPUS_TYPE_Q6_K)->vec_dot_type == OPUS_TYPE_Q8_K &&
		  opus_qtype_info(OPUS_TYPE_F16)->vec_dot_type == OPUS_TYPE_F16,
		  "vec_dot types as ggml");
	CHECK(opus_qtype_info(4) == NULL && opus_qtype_info(OPUS_TYPE__COUNT) == NULL,
		  "removed and unknown ids are rejected");
}

/* ---- (d): half and bfloat16 ---- */

static double
half_value(uint16_t h)
{
	return (double) opus_fp16_to_fp32(h);
}

static void
test_fp16(void)
{
	int			bad_rt = 0,
				bad_nan = 0,
				bad_bf = 0,
				bad_round = 0,
				bad_bround = 0;

	for (uint32_t h = 0; h < 65536; h++)
	{
		float		f = opus_fp16_to_fp32((uint16_t) h);
		float		g = opus_bf16_to_fp32((uint16_t) h);

		if (isnan(f))
		{
			uint16_t	back = opus_fp32_to_fp16(f);

			bad_nan += ((back & 0x7c00) != 0x7c00 || (back & 0x3ff) == 0 ||
						(back & 0x8000) != (h & 0x8000));
		}
		else
			bad_rt += opus_fp32_to_fp16(f) != h;
		if (isnan(g))
			bad_bf += !isnan(opus_bf16_to_fp32(opus_fp32_to_bf16(g)));
		else
			bad_bf += opus_fp32_to_bf16(g) != h;
	}
	CHECK(bad_rt == 0, "fp16 -> fp32 -> fp16 exact for every non-NaN half (%d bad)", bad_rt);
	CHECK(bad_nan == 0, "fp16 NaNs stay NaN with their sign (%d bad)", bad_nan);
	CHECK(bad_bf == 0, "bf16 round trip over all 65536 patterns (%d bad)", bad_bf);

	/* nearest, ties to even: compare against both neighbours */
	for (int i = 0; i < 200000; i++)
	{
		uint32_t	u = rng_u32();
		float		f;
		uint16_t	h;
		double		v,
					e,
					en,
					ep;

		/* keep the exponent within (and a little beyond) the half range */
		u = (u & 0x807fffffu) | ((uint32_t) (96 + rng_u32() % 50) << 23);
		if (i % 4 == 0)
			u &= 0xffffe000u | (rng_u32() & 0x1000);	/* exact ties */
		memcpy(&f, &u, sizeof(f));
		h = opus_fp32_to_fp16(f);
		v = half_value(h);
		e = fabs(v - f);
		if ((h & 0x7fff) >= 0x7c00)
		{
			bad_round += fabs(f) < 65520.0;
			continue;
		}
		en = (h & 0x7fff) == 0x7bff ? INFINITY : fabs(half_value((uint16_t) (h + 1)) - f);
		ep = (h & 0x7fff) == 0 ? INFINITY : fabs(half_value((uint16_t) (h - 1)) - f);
		if (e > en || e > ep || ((e == en || e == ep) && (h & 1)))
			bad_round++;
		{
			uint16_t	b = opus_fp32_to_bf16(f);
			double		bv = opus_bf16_to_fp32(b);
			double		be = fabs(bv - f);
			double		bn = fabs((double) opus_bf16_to_fp32((uint16_t) (b + 1)) - f);
			double		bp = fabs((double) opus_bf16_to_fp32((uint16_t) (b - 1)) - f);

			if (be > bn || be > bp || ((be == bn || be == bp) && (b & 1)))
				bad_bround++;
		}
	}
	CHECK(bad_round == 0, "fp32 -> fp16 is round-to-nearest-even (%d bad of 200000)", bad_round);
	CHECK(bad_bround == 0, "fp32 -> bf16 is round-to-nearest-even (%d bad)", bad_bround);

	CHECK(opus_fp32_to_fp16(1.0f) == 0x3c00 && opus_fp32_to_fp16(-2.0f) == 0xc000,
		  "fp16 of 1 and -2");
	CHECK(opus_fp32_to_fp16(65504.0f) == 0x7bff && opus_fp32_to_fp16(65519.99f) == 0x7bff &&
		  opus_fp32_to_fp16(65520.0f) == 0x7c00 && opus_fp32_to_fp16(1e9f) == 0x7c00,
		  "fp16 overflow: 65504 max, 65520 rounds to inf");
	CHECK(opus_fp32_to_fp16(INFINITY) == 0x7c00 && opus_fp32_to_fp16(-INFINITY) == 0xfc00 &&
		  isinf(opus_fp16_to_fp32(0x7c00)) && opus_fp16_to_fp32(0xfc00) < 0,
		  "fp16 infinities");
	CHECK((opus_fp32_to_fp16(NAN) & 0x7e00) == 0x7e00 && isnan(opus_fp16_to_fp32(0x7e00)) &&
		  isnan(opus_fp16_to_fp32(0x7c01)),
		  "fp16 NaN (quiet, signalling)");
	CHECK(opus_fp16_to_fp32(0x0001) == 0x1p-24f && opus_fp16_to_fp32(0x03ff) == 1023 * 0x1p-24f &&
		  opus_fp16_to_fp32(0x0400) == 0x1p-14f && opus_fp32_to_fp16(0x1p-24f) == 0x0001 &&
		  opus_fp32_to_fp16(0x1p-25f) == 0x0000 && opus_fp32_to_fp16(0x1.8p-25f) == 0x0001 &&
		  opus_fp32_to_fp16(3 * 0x1p-25f) == 0x0002 && opus_fp32_to_fp16(1e-10f) == 0 &&
		  opus_fp32_to_fp16(-0x1p-24f) == 0x8001 && opus_fp32_to_fp16(0x1.ffcp-15f) == 0x0400,
		  "fp16 subnormals and their rounding");
	CHECK(opus_fp32_to_fp16(-0.0f) == 0x8000 && signbit(opus_fp16_to_fp32(0x8000)),
		  "fp16 negative zero");
	CHECK(opus_fp32_to_fp16(1.0f + 0x1p-11f) == 0x3c00 && opus_fp32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02 &&
		  opus_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01,
		  "fp16 ties to even, and just above a tie");
	CHECK(opus_fp32_to_bf16(1.0f) == 0x3f80 && opus_fp32_to_bf16(1.0f + 0x1p-8f) == 0x3f80 &&
		  opus_fp32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82 &&
		  opus_fp32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81,
		  "bf16 rounding and ties");
	CHECK(opus_fp32_to_bf16(INFINITY) == 0x7f80 && opus_fp32_to_bf16(3.4028235e38f) == 0x7f80 &&
		  isnan(opus_bf16_to_fp32(opus_fp32_to_bf16(NAN))) &&
		  opus_fp32_to_bf16(0x1p-130f) == 0x0008,
		  "bf16 inf, overflow, NaN, subnormal");
}

/*
 * (g) opus_vec_dot_rows and opus_vec_dot_tile (1..16 tokens): for every
 * type and every dot product it may be
 * given (the chosen vec_dot, the reference one, the llama.cpp-order
 * variants), 1..19 rows (whole groups of the several-row kernels and
 * remainders) and a few row lengths: bit-identical to the dot row by row.
 * Run with and without the 512-bit kernels (OPUS_NO_AVX512).
 */
static void
test_rows_one(const char *variant)
{
	enum
	{
		MAX_ROWS = 19,
		MAX_TOK = 16
	};
	static float x[MAX_N];
	static uint8_t w[MAX_ROWS * (MAX_N * 4 + 64)],
				xq[MAX_N * 4],
				xq_tok[MAX_TOK * MAX_N * 4];
	int			n_checked = 0;

	for (size_t c = 0; c < N_CASES; c++)
	{
		const struct opus_qtype_info *wi = opus_qtype_info(cases[c].type);
		const struct opus_qtype_info *xi = opus_qtype_info(wi->vec_dot_type);
		const int64_t *lens = wi->block_size == 1 ? lens_float :
			wi->block_size == 32 ? lens_32 : lens_256;
		int			nlens = wi->block_size == 1 ? 6 : wi->block_size == 32 ? 5 : 4;

		for (int li = 0; li < nlens; li++)
		{
			int64_t		n = lens[li];
			size_t		wb = row_bytes(cases[c].type, n),
						xb = row_bytes(wi->vec_dot_type, n);
			opus_vec_dot_fn dots[8];
			int			n_dots = 0;

			/* stride = row bytes + 0 or + an odd amount: unaligned rows too */
			for (int pad = 0; pad <= 1; pad++)
			{
				size_t		stride = wb + (size_t) pad * 36;

				for (int r = 0; r < MAX_ROWS; r++)
				{
					fill(x, n, (enum data_kind) (r % DATA__COUNT == DATA_ZERO ? DATA_NORMAL : r % DATA__COUNT));
					wi->from_float_ref(x, w + r * stride, n);
				}
				fill(x, n, DATA_NORMAL);
				xi->from_float(x, xq, n);
				for (int t = 0; t < MAX_TOK; t++)
				{
					fill(x, n, DATA_NORMAL);
					xi->from_float(x, xq_tok + (size_t) t * xb, n);
				}
				n_dots = 0;
				dots[n_dots++] = wi->vec_dot;
				dots[n_dots++] = wi->vec_dot_ref;
				for (int nt = 1; nt <= 17; nt++)
				{
					int			f,
								u;
					opus_vec_dot_fn d = opus_vec_dot_llama_batch(cases[c].type, 576, nt, &f, &u);
					opus_vec_dot_fn d7 = opus_vec_dot_llama_batch(cases[c].type, 577, nt, &f, &u);

					if (d && n_dots < 8)
						dots[n_dots++] = d;
					if (d7 && n_dots < 8)
						dots[n_dots++] = d7;
				}
				for (int k = 0; k < n_dots; k++)
				{
					for (int nr = 1; nr <= MAX_ROWS; nr++)
					{
						float		got[MAX_ROWS];
						bool		same = true;

						opus_vec_dot_rows(dots[k], n, nr, w, stride, xq, got);
						for (int r = 0; r < nr; r++)
						{
							float		want = dots[k] (n, w + r * stride, xq);

							same &= memcmp(&want, &got[r], sizeof(float)) == 0;
						}
						CHECK(same, "%s %s n=%lld dot %d rows %d stride +%d: opus_vec_dot_rows == dot row by row",
							  variant, wi->name, (long long) n, k, nr, pad * 36);
						n_checked++;
					}
					/*
					 * tiles: tokens 1..16 (x + t * xb), against 1..19 rows
					 * (whole groups of 8 and remainders)
					 */
					for (int nt = 1; nt <= MAX_TOK; nt++)
					{
						static float got[MAX_TOK * MAX_ROWS];
						int			nr = (nt * 7) % MAX_ROWS + 1;
						bool		same = true;

						opus_vec_dot_tile(dots[k], n, nr, w, stride, nt, xq_tok, xb, got, MAX_ROWS);
						for (int t = 0; t < nt; t++)
							for (int r = 0; r < nr; r++)
							{
								float		want = dots[k] (n, w + r * stride, xq_tok + (size_t) t * xb);

								same &= memcmp(&want, &got[t * MAX_ROWS + r], sizeof(float)) == 0;
							}
						CHECK(same, "%s %s n=%lld dot %d rows %d tokens %d: opus_vec_dot_tile == dot one by one",
							  variant, wi->name, (long long) n, k, nr, nt);
						n_checked++;
					}
				}
			}
		}
	}
	printf("  opus_vec_dot_rows/tile (%s): %d cases bit-identical to the dot one by one\n", variant, n_checked);
}

static void
test_rows(void)
{
	opus_qtype_init_cpu(false);
	test_rows_one("default");
	setenv("OPUS_NO_AVX512", "1", 1);
	opus_qtype_init_cpu(false);
	test_rows_one("OPUS_NO_AVX512");
	unsetenv("OPUS_NO_AVX512");
	opus_qtype_init_cpu(true);
	test_rows_one("ref");
	opus_qtype_init_cpu(false);
}

int
main(void)
{
	opus_qtype_init_cpu(true);
	test_table();
	test_layouts();
	test_fp16();
	test_reference();
	test_kquant_search();
	test_avx2();
	test_llama_batch_order();
	test_q4_0_tiles();
	test_q5_0_tiles();
	test_rows();
	return UNIT_DONE();
}
