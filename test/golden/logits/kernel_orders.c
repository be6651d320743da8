/*
 * kernel_orders.c - the engine's matmul kernels against llama.cpp's compiled
 * CPU kernels (libggml-cpu.so of the installed llama-cpp-python, the golden
 * oracle), bit for bit, on random rows quantized by our quantizer.  A
 * development tool behind the "llama.cpp's summation orders" section of
 * README (not part of make test: it needs llama-cpp-python's libraries).
 *
 * Checked: every quantized type through ggml's graph mul_mat (vec_dot for 1
 * token; for 8 tokens also tinyBLAS and the tiled K-quant kernels) against
 * what our forward pass runs in llama.cpp-order mode (tile kernels, vec_dot,
 * opus_vec_dot_llama_batch), and the "repack" kernels llama.cpp uses for
 * Q4_0 and Q4_K weights (ggml_gemm/gemv_*_8x8) against ours.  Build and run
 * from the repository root after make engine:
 *
 *   L=$(python3 -c 'import llama_cpp,os;print(os.path.dirname(llama_cpp.__file__))')/lib
 *   gcc -O2 -std=gnu11 -D_GNU_SOURCE -iquote src/engine test/golden/logits/kernel_orders.c \
 *       build/engine/quant/qtype.o build/engine/quant/quant_ref.o build/engine/quant/quant_avx2.o \
 *       build/engine/cpu/matmul_avx2.o -o build/kernel_orders -L$L -Wl,-rpath,$L \
 *       -l:libggml-cpu.so -l:libggml-base.so -l:libggml.so -lm
 *   build/kernel_orders
 *
 * The ggml declarations below are the few entry points used, as exported by
 * ggml 0.9.x (llama-cpp-python 0.3.36); the block layouts of the repacked
 * types are ggml's block_q4_0x8 / block_q4_Kx8 / block_q8_Kx4.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/forward_int.h"
#include "quant/qtype.h"
#include "quant/quant_blocks.h"

struct ggml_init_params
{
	size_t		mem_size;
	void	   *mem_buffer;
	bool		no_alloc;
};
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
extern struct ggml_context *ggml_init(struct ggml_init_params);
extern void ggml_free(struct ggml_context *);
extern struct ggml_tensor *ggml_new_tensor_2d(struct ggml_context *, int, int64_t, int64_t);
extern struct ggml_tensor *ggml_mul_mat(struct ggml_context *, struct ggml_tensor *, struct ggml_tensor *);
extern struct ggml_cgraph *ggml_new_graph(struct ggml_context *);
extern void ggml_build_forward_expand(struct ggml_cgraph *, struct ggml_tensor *);
extern int	ggml_graph_compute_with_ctx(struct ggml_context *, struct ggml_cgraph *, int);
extern void *ggml_get_data(const struct ggml_tensor *);
extern void ggml_cpu_init(void);
extern void quantize_row_q8_0(const float *, void *, int64_t);
extern void quantize_row_q8_K(const float *, void *, int64_t);
extern void ggml_quantize_mat_q8_0_4x8(const float *, void *, int64_t);
extern void ggml_quantize_mat_q8_K_4x8(const float *, void *, int64_t);
extern void ggml_gemv_q4_0_8x8_q8_0(int, float *, size_t, const void *, const void *, int, int);
extern void ggml_gemm_q4_0_8x8_q8_0(int, float *, size_t, const void *, const void *, int, int);
extern void ggml_gemv_q4_K_8x8_q8_K(int, float *, size_t, const void *, const void *, int, int);
extern void ggml_gemm_q4_K_8x8_q8_K(int, float *, size_t, const void *, const void *, int, int);

#define N_IN 1536
#define T 8

static int	n_fail;

static uint64_t rng = 88172645463325252ULL;

static float
rnd(void)
{
	double		u,
				v;

	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	u = (double) (rng >> 11) / 9007199254740992.0 + 1e-12;
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	v = (double) (rng >> 11) / 9007199254740992.0;
	return (float) (sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v)) * (v < 0.01 ? 10.0f : 1.0f);
}

static void
report(const char *what, const float *ours, const float *theirs, int n)
{
	int			bad = 0;

	for (int i = 0; i < n; i++)
		bad += memcmp(&ours[i], &theirs[i], sizeof(float)) != 0;
	printf("%-44s %s (%d of %d differ)\n", what, bad ? "DIFFERENT" : "identical", bad, n);
	n_fail += bad != 0;
}

/* ggml graph mul_mat of W (rows x N_IN, type t) by x (tok x N_IN) vs ours */
static void
graph_check(enum opus_qtype t, int ggml_type, int rows, int tok, const uint8_t *w, const float *x)
{
	const struct opus_qtype_info *wi = opus_qtype_info(t),
			   *xi = opus_qtype_info(wi->vec_dot_type);
	size_t		rb = (size_t) N_IN / wi->block_size * wi->type_size,
				xb = (size_t) N_IN / xi->block_size * xi->type_size;
	struct ggml_init_params ip = {64u << 20, NULL, false};
	struct ggml_context *ctx = ggml_init(ip);
	struct ggml_tensor *A = ggml_new_tensor_2d(ctx, ggml_type, N_IN, rows);
	struct ggml_tensor *B = ggml_new_tensor_2d(ctx, 0, N_IN, tok);
	struct ggml_tensor *C = ggml_mul_mat(ctx, A, B);
	struct ggml_cgraph *g = ggml_new_graph(ctx);
	uint8_t    *xq = malloc(xb * T);
	float	   *ours = malloc(sizeof(float) * rows * T),
				xs[2 * (N_IN / 32) * 8];
	int			from = 0,
				until = 0;
	opus_vec_dot_fn batch = opus_vec_dot_llama_batch(t, rows, tok, &from, &until);
	opus_mm_rows_fn tile = opus_mm_rows_avx2(t, tok, true);
	char		what[96];

	memcpy(ggml_get_data(A), w, rb * rows);
	memcpy(ggml_get_data(B), x, sizeof(float) * N_IN * tok);
	ggml_build_forward_expand(g, C);
	ggml_graph_compute_with_ctx(ctx, g, 2);
	for (int c = 0; c < tok; c++)
	{
		if (xi->block_size == 32)
			quantize_row_q8_0(x + c * N_IN, xq + c * xb, N_IN);	/* Q8_1: engine's own below */
		if (t == OPUS_TYPE_Q4_1 || t == OPUS_TYPE_Q5_1 || xi->block_size == 256)
			xi->from_float(x + c * N_IN, xq + c * xb, N_IN);
	}
	if (tile)
	{
		float		out[8 * 8];

		for (int c = 0; c < tok; c++)
			for (int b = 0; b < N_IN / 32; b++)
			{
				uint16_t	h[2];

				memcpy(h, xq + c * xb + (size_t) b * xi->type_size, sizeof(h));
				xs[b * 8 + c] = opus_fp16_to_fp32(h[0]);
				xs[(N_IN / 32 + b) * 8 + c] = opus_fp16_to_fp32(h[1]);
			}
		for (int r = 0; r < rows; r += 8)
		{
			tile(N_IN / 32, 8, w + r * rb, rb, xq, xb, xs, out);
			for (int k = 0; k < 8; k++)
				for (int c = 0; c < tok; c++)
					ours[c * rows + r + k] = out[k * 8 + c];
		}
	}
	else
		for (int c = 0; c < tok; c++)
			for (int r = 0; r < rows; r++)
				ours[c * rows + r] = (batch && c >= from && c < until ? batch : wi->vec_dot) (N_IN, w + r * rb, xq + c * xb);
	snprintf(what, sizeof(what), "%s, %d rows, %d token(s), mul_mat:", wi->name, rows, tok);
	report(what, ours, ggml_get_data(C), rows * tok);
	ggml_free(ctx);
	free(xq);
	free(ours);
}

/* ggml's interleaved layouts of 8 weight rows (repack) and 4 Q8_K rows */
typedef struct
{
	uint16_t	d[8];
	uint8_t		qs[128];
} q4_0x8;
typedef struct
{
	uint16_t	d[8];
	uint16_t	dmin[8];
	uint8_t		scales[96];
	uint8_t		qs[1024];
} q4_Kx8;
typedef struct
{
	uint16_t	d[4];
	int8_t		qs[128];
} q8_0x4;
typedef struct
{
	float		d[4];
	int8_t		qs[1024];
	int16_t		bsums[64];
} q8_Kx4;

/* sub-block j's 6-bit scale and min of a Q4_K block */
static void
k_sm(const uint8_t *q, int j, int *sc, int *m)
{
	if (j < 4)
	{
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	}
	else
	{
		*sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

static void
repack_check(const uint8_t *w40, const uint8_t *w4k, const float *x, int rows)
{
	const opus_block_q4_0 *a0 = (const opus_block_q4_0 *) w40;
	const opus_block_q4_K *ak = (const opus_block_q4_K *) w4k;
	int			nb0 = N_IN / 32,
				nbk = N_IN / 256;
	q4_0x8	   *r0 = calloc((size_t) rows / 8 * nb0, sizeof(q4_0x8));
	q4_Kx8	   *rk = calloc((size_t) rows / 8 * nbk, sizeof(q4_Kx8));
	opus_block_q8_0 *x0 = malloc(sizeof(opus_block_q8_0) * T * nb0);
	opus_block_q8_K *xk = malloc(sizeof(opus_block_q8_K) * T * nbk);
	q8_0x4	   *m0 = malloc(sizeof(q8_0x4) * T / 4 * nb0);
	q8_Kx4	   *mk = malloc(sizeof(q8_Kx4) * T / 4 * nbk);
	float	   *gemm = malloc(sizeof(float) * T * rows),
			   *gemv = malloc(sizeof(float) * T * rows),
			   *ours = malloc(sizeof(float) * T * rows),
				xs[(N_IN / 32) * 8];
	const struct opus_qtype_info *qk = opus_qtype_info(OPUS_TYPE_Q4_K);
	opus_mm_rows_fn tile = opus_mm_rows_avx2(OPUS_TYPE_Q4_0, T, true);
	int			from,
				until;
	opus_vec_dot_fn q4k_one = opus_vec_dot_llama_batch(OPUS_TYPE_Q4_K, rows, 1, &from, &until);

	for (int g = 0; g < rows / 8; g++)
	{
		for (int b = 0; b < nb0; b++)
			for (int k = 0; k < 8; k++)
			{
				r0[g * nb0 + b].d[k] = a0[(g * 8 + k) * nb0 + b].d;
				for (int i = 0; i < 16; i++)
					r0[g * nb0 + b].qs[(i / 8) * 64 + k * 8 + i % 8] =
						a0[(g * 8 + k) * nb0 + b].qs[i] ^ 0x88;
			}
		for (int b = 0; b < nbk; b++)
		{
			q4_Kx8	   *o = &rk[g * nbk + b];

			for (int k = 0; k < 8; k++)
			{
				o->d[k] = ak[(g * 8 + k) * nbk + b].d;
				o->dmin[k] = ak[(g * 8 + k) * nbk + b].dmin;
			}
			for (int i = 0; i < 128; i++)
				memcpy(o->qs + i * 8, ak[(g * 8 + i % 8) * nbk + b].qs + (i / 8) * 8, 8);
			for (int j = 0; j < 8; j++)
			{
				int			sc[8],
							m[8];
				uint8_t    *p = o->scales + 12 * j;

				for (int c = 0; c < 8; c++)
					k_sm(ak[(g * 8 + c) * nbk + b].scales, j, &sc[c], &m[c]);
				for (int c = 0; c < 4; c++)
				{
					p[c] = (uint8_t) ((sc[c] & 63) | ((sc[c + 4] >> 4) << 6));
					p[c + 4] = (uint8_t) ((m[c] & 63) | ((m[c + 4] >> 4) << 6));
					p[8 + c] = (uint8_t) ((sc[c + 4] & 15) | ((m[c + 4] & 15) << 4));
				}
			}
		}
	}
	for (int c = 0; c < T; c++)
	{
		quantize_row_q8_0(x + c * N_IN, x0 + c * nb0, N_IN);
		quantize_row_q8_K(x + c * N_IN, xk + c * nbk, N_IN);
		for (int b = 0; b < nb0; b++)
			xs[b * 8 + c] = opus_fp16_to_fp32(x0[c * nb0 + b].d);
	}
	for (int g = 0; g < T / 4; g++)
	{
		ggml_quantize_mat_q8_0_4x8(x + g * 4 * N_IN, m0 + g * nb0, N_IN);
		ggml_quantize_mat_q8_K_4x8(x + g * 4 * N_IN, mk + g * nbk, N_IN);
	}

	/* Q4_0: gemm (groups of 4 tokens) and gemv give the same bits; ours: the tile kernel */
	ggml_gemm_q4_0_8x8_q8_0(N_IN, gemm, rows, r0, m0, T, rows);
	for (int c = 0; c < T; c++)
		ggml_gemv_q4_0_8x8_q8_0(N_IN, gemv + c * rows, rows, r0, x0 + c * nb0, 1, rows);
	for (int r = 0; r < rows; r += 8)
	{
		float		out[64];

		tile(nb0, 8, w40 + (size_t) r * nb0 * 18, (size_t) nb0 * 18, (const uint8_t *) x0,
			 sizeof(opus_block_q8_0) * nb0, xs, out);
		for (int k = 0; k < 8; k++)
			for (int c = 0; c < T; c++)
				ours[c * rows + r + k] = out[k * 8 + c];
	}
	report("Q4_0 repacked, gemm (4 tokens at a time):", ours, gemm, T * rows);
	report("Q4_0 repacked, gemv (1 token):", ours, gemv, T * rows);

	/* Q4_K: gemm = our vec_dot, gemv = our one-token (llama_batch_order) form */
	ggml_gemm_q4_K_8x8_q8_K(N_IN, gemm, rows, rk, mk, T, rows);
	for (int c = 0; c < T; c++)
		ggml_gemv_q4_K_8x8_q8_K(N_IN, gemv + c * rows, rows, rk, xk + c * nbk, 1, rows);
	for (int c = 0; c < T; c++)
		for (int r = 0; r < rows; r++)
			ours[c * rows + r] = qk->vec_dot(N_IN, ak + r * nbk, xk + c * nbk);
	report("Q4_K repacked, gemm vs our vec_dot:", ours, gemm, T * rows);
	for (int c = 0; c < T; c++)
		for (int r = 0; r < rows; r++)
			ours[c * rows + r] = q4k_one(N_IN, ak + r * nbk, xk + c * nbk);
	report("Q4_K repacked, gemv vs our one-token form:", ours, gemv, T * rows);
	free(r0);
	free(rk);
	free(x0);
	free(xk);
	free(m0);
	free(mk);
	free(gemm);
	free(gemv);
	free(ours);
}

int
main(void)
{
	static const struct
	{
		enum opus_qtype t;
		int			ggml;
		int			rows;
	}			types[] = {
		{OPUS_TYPE_Q8_0, 8, 64}, {OPUS_TYPE_Q4_1, 3, 64}, {OPUS_TYPE_Q5_0, 6, 64},
		{OPUS_TYPE_Q5_1, 7, 64}, {OPUS_TYPE_Q4_K, 12, 68}, {OPUS_TYPE_Q5_K, 13, 64},
		{OPUS_TYPE_Q6_K, 14, 64},
	};
	static float wf[72 * N_IN],
				x[T * N_IN];
	static uint8_t w[72 * N_IN * 2],
				w40[72 * N_IN],
				w4k[72 * N_IN];

	ggml_cpu_init();
	opus_qtype_init_cpu(false);
	for (int i = 0; i < 72 * N_IN; i++)
		wf[i] = rnd() * 0.05f;
	for (int i = 0; i < T * N_IN; i++)
		x[i] = rnd();
	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++)
	{
		const struct opus_qtype_info *wi = opus_qtype_info(types[k].t);

		wi->from_float_ref(wf, w, (int64_t) types[k].rows * N_IN);
		graph_check(types[k].t, types[k].ggml, types[k].rows, 1, w, x);
		graph_check(types[k].t, types[k].ggml, types[k].rows, T, w, x);
	}
	opus_qtype_info(OPUS_TYPE_Q4_0)->from_float_ref(wf, w40, (int64_t) 64 * N_IN);
	opus_qtype_info(OPUS_TYPE_Q4_K)->from_float_ref(wf, w4k, (int64_t) 64 * N_IN);
	repack_check(w40, w4k, x, 64);
	printf("%s\n", n_fail ? "SOME ORDERS DIFFER" : "all identical");
	return n_fail != 0;
}
