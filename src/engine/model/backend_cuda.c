/*
 * backend_cuda.c - the CUDA backend's host side: uploads the weights once,
 * keeps the KV block pool and every activation in device memory, and runs
 * a batched forward pass as a sequence of kernels (kernels/, .cu files) and cuBLAS
 * products on one stream.  Only token ids, positions, block tables and RoPE
 * tables go in per step, and only the requested logits come out.
 *
 * Built only when nvcc is found (engine.mk) and linked only into
 * opus_engine; a CPU-only build has no reference to anything here.
 *
 * What runs on the device (llama-family incl. Mixtral, and qwen2; F16 KV):
 *   embed | per layer: rmsnorm | Q,K,V (+bias) | RoPE | store K,V | paged
 *   attention | x += Wo att | rmsnorm | gate, up | SwiGLU | x += Wdown h |
 *   final rmsnorm of the rows that want logits | logits.
 * A mixture-of-experts layer (Mixtral: llama + experts, no shared expert):
 *   rmsnorm | router logits (matvec) -> host | route on the host with moe.c
 *   (the CPU's code: gating, top-k, weights, expert load counters) | group
 *   the (token, choice) pairs by expert, tokens ascending -> device | gather
 *   the pairs' input rows | per active expert: gate, up over its group (each
 *   expert's weights read once per 8 tokens) | SwiGLU | per expert: down |
 *   combine each token's choices in choice order into x.
 * Not yet: a shared expert (qwen2moe), per-head q/k norms (qwen3moe, olmoe),
 * the Q8_0 KV cache, llama.cpp's multi-token attention order; creating a
 * context for those fails with OPUS_ERR_UNSUPPORTED.
 *
 * Matrix products.  A batch item with one token (decode) goes through the
 * matvec kernel (f32 activations, weights dequantized in registers, fixed
 * order).  The tokens of items with several tokens (prompt chunks) go
 * through cuBLAS: the weight rows are dequantized to F16 in chunks of a
 * fixed number of rows per matrix, the activations rounded to F16, and the
 * product runs in F32 in tiles of exactly GEMM_TILE tokens (padded with
 * zeros), so every call has the same shape and each token's column is
 * computed the same way whatever else is in the tile.
 *
 * Determinism.  Within each of the two classes a token's results do not
 * depend on the other tokens of the step (fixed-order kernels; fixed GEMM
 * shapes, which cuBLAS computes reproducibly on a given GPU and library
 * version).  Where it cannot hold: the same token computed as a one-token
 * item and as part of a longer prompt chunk uses different arithmetic (F32
 * vs F16 activations), so a prompt whose scheduler chunking leaves a
 * one-token chunk can differ in the last bits from one prefilled in a single
 * chunk.  OPUS_CUDA_GEMM=0 in the environment sends every token through the
 * fixed-order kernels (slower prefill, fully batch- and chunk-invariant).
 * Results differ from the CPU backend's within the tolerances test/gpu
 * states (different summation order, F32 instead of Q8 activations).
 *
 * Errors.  Every CUDA runtime and cuBLAS call is checked; a failure becomes
 * OPUS_ERR_DEVICE (OPUS_ERR_NOMEM for allocations) naming the call.  Device
 * memory is all allocated in create, so running out is an error there.
 *
 * Linking.  The CUDA runtime is linked statically (it loads the driver only
 * when first called) and cuBLAS is loaded with dlopen when the first CUDA
 * context is created: linked normally it would map ~200 MB and add ~0.2 s
 * to every engine start, on the CPU too.  So an engine built with CUDA runs
 * on machines without a GPU or without cuBLAS, and costs nothing there.
 */
#include "model/backend.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "model/model_int.h"
#include "opus_kernels.h"

#define GEMM_TILE 64			/* tokens per cuBLAS product */
#define WTILE_MAX_ELEMS ((int64_t) 64 << 20)	/* F16 weight chunk: 128 MiB */
#define DEV_ALIGN 256
#define BLAS_WORKSPACE ((size_t) 32 << 20)

/* A weight matrix in device memory. */
struct dmat
{
	const uint8_t *d;
	int			type;
	size_t		row_bytes;
	int64_t		n_in;
	int64_t		n_out;
	int64_t		chunk_rows;		/* rows dequantized per cuBLAS chunk */
};

struct dlayer
{
	struct dmat wq,
				wk,
				wv,
				wo,
				w_gate,
				w_up,
				w_down;
	const float *attn_norm;		/* [n_embd] */
	const float *ffn_norm;		/* [n_embd] */
	const float *bq;			/* qwen2 biases, else NULL */
	const float *bk;
	const float *bv;
	/* mixture of experts (the dense matrices above are unused) */
	bool		is_moe;
	struct dmat router;			/* [n_expert][n_embd] */
	struct dmat *eg;			/* [n_expert] gate, up, down of each expert */
	struct dmat *eu;
	struct dmat *ed;
};

struct cuda_be
{
	int			dev;
	char		dev_name[256];
	int			cc_major;
	int			cc_minor;
	size_t		dev_mem;
	cudaStream_t stream;
	bool		stream_made;
	cublasHandle_t blas;
	bool		blas_made;
	bool		use_gemm;		/* cuBLAS for multi-token items */

	/* weights: one allocation */
	uint8_t    *weights;
	size_t		weights_bytes;
	struct dmat tok_embd;
	struct dmat output;
	const float *output_norm;
	struct dlayer *layers;

	/* the KV block pool (kv.c's layout) */
	uint8_t    *kv;
	size_t		kv_bytes;

	/* activations; B = max_batch_tokens rows each */
	int			B;
	float	   *x;				/* [B][n_embd] residual stream */
	float	   *xn;				/* [B][max(n_embd, n_ff)] normed input / SwiGLU output */
	float	   *q;				/* [B][n_head * head_dim] */
	float	   *k;				/* [B][n_head_kv * head_dim] */
	float	   *v;				/* [B][n_head_kv * head_dim] */
	float	   *att;			/* [B][n_head * head_dim] */
	float	   *gate;			/* [B][n_ff] */
	float	   *up;				/* [B][n_ff] */
	float	   *logits;			/* [B][n_vocab] */
	/* cuBLAS path */
	void	   *blas_ws;		/* cuBLAS workspace, set once (no lazy allocation) */
	void	   *xh;				/* [B rounded up to GEMM_TILE][max n_in] F16 */
	void	   *wtile;			/* [max chunk_rows * n_in] F16 */
	float	   *ctile;			/* [GEMM_TILE][max chunk_rows] */

	/* per-step metadata: device arrays and pinned host mirrors */
	int32_t    *d_tok,
			   *h_tok;			/* [B] token ids, in device row order */
	int32_t    *d_pos,
			   *h_pos;			/* [B] positions */
	int32_t    *d_btoff,
			   *h_btoff;		/* [B] offset of the row's block table in blocks */
	int32_t    *d_outrow,
			   *h_outrow;		/* [B] rows whose logits are wanted */
	float	   *d_cos,
			   *h_cos;			/* [B][rope_dim / 2] */
	float	   *d_sin,
			   *h_sin;
	int32_t    *d_blocks,
			   *h_blocks;		/* concatenated block tables */
	int64_t		blocks_cap;
	float	   *h_logits;		/* [B][n_vocab] pinned */
	float	  **out_dst;		/* [B] host destination row of each logits row */

	/* mixture of experts: routing on the host, P = B * n_expert_used pairs */
	struct opus_moe_scratch *moe;	/* moe.c's routing state */
	int64_t		ff_exp;			/* expert feed-forward width */
	float	   *d_rlog,
			   *h_rlog;			/* [B][n_expert] router logits */
	int32_t    *d_row_tok,
			   *h_row_tok;		/* [P] token of each grouped row */
	int32_t    *d_pair_row,
			   *h_pair_row;		/* [B][n_used] grouped row of each (token, choice) */
	float	   *d_pair_w,
			   *h_pair_w;		/* [B][n_used] choice weights */
	float	   *d_xg;			/* [P][n_embd] gathered inputs */
	float	   *d_eg;			/* [P][ff_exp] gate */
	float	   *d_eu;			/* [P][ff_exp] up */
	float	   *d_eh;			/* [P][ff_exp] SwiGLU */
	float	   *d_eo;			/* [P][n_embd] expert outputs */
	int32_t    *grp_start;		/* [n_expert] host: first grouped row of each expert */
	int32_t    *grp_count;		/* [n_expert] */
};

/* ---- cuBLAS, loaded on first use ---- */

struct blas_api
{
	bool		loaded;
	__typeof__(cublasCreate_v2) *create;
	__typeof__(cublasDestroy_v2) *destroy;
	__typeof__(cublasSetStream_v2) *set_stream;
	__typeof__(cublasSetWorkspace_v2) *set_workspace;
	__typeof__(cublasGemmEx) *gemm_ex;
	__typeof__(cublasGetStatusString) *status_string;
};

/* The engine's contexts are created and used by one thread. */
static struct blas_api blas;

static enum opus_status
blas_load(struct opus_error *err)
{
	char		name[256];
	void	   *lib;

	if (blas.loaded)
		return OPUS_OK;
	/* OPUS_CUBLAS_LIB: another library with the same functions (test/gpu/fake) */
	if (getenv("OPUS_CUBLAS_LIB"))
		snprintf(name, sizeof(name), "%s", getenv("OPUS_CUBLAS_LIB"));
	else
		snprintf(name, sizeof(name), "libcublas.so.%d", CUBLAS_VER_MAJOR);
	lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!lib && !getenv("OPUS_CUBLAS_LIB"))
		lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return opus_error_set(err, OPUS_ERR_DEVICE, "cuda: cannot load %s: %s", name, dlerror());
	blas.create = (__typeof__(blas.create)) dlsym(lib, "cublasCreate_v2");
	blas.destroy = (__typeof__(blas.destroy)) dlsym(lib, "cublasDestroy_v2");
	blas.set_stream = (__typeof__(blas.set_stream)) dlsym(lib, "cublasSetStream_v2");
	blas.set_workspace = (__typeof__(blas.set_workspace)) dlsym(lib, "cublasSetWorkspace_v2");
	blas.gemm_ex = (__typeof__(blas.gemm_ex)) dlsym(lib, "cublasGemmEx");
	blas.status_string = (__typeof__(blas.status_string)) dlsym(lib, "cublasGetStatusString");
	if (!blas.create || !blas.destroy || !blas.set_stream || !blas.set_workspace ||
		!blas.gemm_ex || !blas.status_string)
		return opus_error_set(err, OPUS_ERR_DEVICE,
							  "cuda: %s lacks a function the backend needs (a different cuBLAS version?)",
							  name);
	/* never closed: handles may outlive a context */
	blas.loaded = true;
	return OPUS_OK;
}

/* ---- errors ---- */

static enum opus_status
ck(cudaError_t e, const char *what, struct opus_error *err)
{
	if (e == cudaSuccess)
		return OPUS_OK;
	return opus_error_set(err, e == cudaErrorMemoryAllocation ? OPUS_ERR_NOMEM : OPUS_ERR_DEVICE,
						  "cuda: %s failed: %s (%s)", what, cudaGetErrorString(e),
						  cudaGetErrorName(e));
}

static enum opus_status
ckb(cublasStatus_t s, const char *what, struct opus_error *err)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return OPUS_OK;
	return opus_error_set(err, s == CUBLAS_STATUS_ALLOC_FAILED ? OPUS_ERR_NOMEM : OPUS_ERR_DEVICE,
						  "cublas: %s failed: %s (status %d)", what,
						  blas.status_string ? blas.status_string(s) : "?", (int) s);
}

int
opus_cuda_device_count(char *why, size_t why_len)
{
	int			n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess)
	{
		if (why && why_len > 0)
			snprintf(why, why_len, "%s", cudaGetErrorString(e));
		/* clear the error so it does not stick to a later call */
		(void) cudaGetLastError();
		return 0;
	}
	return n;
}

/* ---- create ---- */

static size_t
align_up(size_t n)
{
	return (n + DEV_ALIGN - 1) / DEV_ALIGN * DEV_ALIGN;
}

static size_t
wmat_bytes(const struct opus_wmat *w)
{
	return w->data ? w->row_bytes * (size_t) w->n_out : 0;
}

/* Check that the kernels handle w; name it in the error. */
static enum opus_status
check_wmat(const struct opus_wmat *w, struct opus_error *err)
{
	if (!w->data)
		return OPUS_OK;
	if (!opus_k_type_supported((int) w->type))
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "the cuda backend has no kernels for tensor %s of type %s",
							  w->name ? w->name : "?", w->qi ? w->qi->name : "?");
	if (w->n_in % 32 != 0 || w->n_in > INT32_MAX || w->n_out > INT32_MAX)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "the cuda backend needs rows of a multiple of 32 elements, and tensor %s has %lld",
							  w->name ? w->name : "?", (long long) w->n_in);
	return OPUS_OK;
}

/* Copy a matrix (n_out rows of row_bytes at data) into the weight allocation at *off. */
static enum opus_status
upload_raw(struct cuda_be *be, const uint8_t *data, int type, size_t row_bytes, int64_t n_in,
		   int64_t n_out, size_t *off, struct dmat *out, struct opus_error *err)
{
	size_t		bytes = row_bytes * (size_t) n_out;
	enum opus_status st;

	memset(out, 0, sizeof(*out));
	if (!data)
		return OPUS_OK;
	st = ck(cudaMemcpy(be->weights + *off, data, bytes, cudaMemcpyHostToDevice),
			"cudaMemcpy (weights to the device)", err);
	if (st != OPUS_OK)
		return st;
	out->d = be->weights + *off;
	out->type = type;
	out->row_bytes = row_bytes;
	out->n_in = n_in;
	out->n_out = n_out;
	out->chunk_rows = WTILE_MAX_ELEMS / n_in;
	if (out->chunk_rows < GEMM_TILE)
		out->chunk_rows = GEMM_TILE;
	if (out->chunk_rows > n_out)
		out->chunk_rows = n_out;
	*off += align_up(bytes);
	return OPUS_OK;
}

static enum opus_status
upload_wmat(struct cuda_be *be, const struct opus_wmat *w, size_t *off, struct dmat *out,
			struct opus_error *err)
{
	return upload_raw(be, w->data, (int) w->type, w->row_bytes, w->n_in, w->n_out, off, out, err);
}

static size_t
moe_mat_bytes(const struct opus_moe_mat *w)
{
	return w->data ? w->row_bytes * (size_t) w->n_out : 0;
}

static enum opus_status
upload_moe_mat(struct cuda_be *be, const struct opus_moe_mat *w, size_t *off, struct dmat *out,
			   struct opus_error *err)
{
	return upload_raw(be, w->data, (int) w->type, w->row_bytes, w->n_in, w->n_out, off, out, err);
}

/* Check an expert matrix like check_wmat. */
static enum opus_status
check_moe_mat(const struct opus_moe_mat *w, int il, struct opus_error *err)
{
	if (!w->data || !opus_k_type_supported((int) w->type) || w->n_in % 32 != 0 ||
		w->n_in > INT32_MAX || w->n_out > INT32_MAX)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "the cuda backend cannot run the experts of layer %d (type %s, rows of %lld)",
							  il, w->qi ? w->qi->name : "?", (long long) w->n_in);
	return OPUS_OK;
}

static enum opus_status
upload_vec(struct cuda_be *be, const float *v, int64_t n, size_t *off, const float **out,
		   struct opus_error *err)
{
	enum opus_status st;

	*out = NULL;
	if (!v)
		return OPUS_OK;
	st = ck(cudaMemcpy(be->weights + *off, v, (size_t) n * sizeof(float), cudaMemcpyHostToDevice),
			"cudaMemcpy (norm and bias vectors to the device)", err);
	if (st != OPUS_OK)
		return st;
	*out = (const float *) (be->weights + *off);
	*off += align_up((size_t) n * sizeof(float));
	return OPUS_OK;
}

/* cudaMalloc with an error that says what the memory was for. */
static enum opus_status
dev_alloc(void **p, size_t bytes, const char *what, struct opus_error *err)
{
	cudaError_t e;

	*p = NULL;
	e = cudaMalloc(p, bytes > 0 ? bytes : 1);
	if (e != cudaSuccess)
	{
		size_t		free_b = 0,
					total_b = 0;

		*p = NULL;
		(void) cudaGetLastError();
		(void) cudaMemGetInfo(&free_b, &total_b);
		return opus_error_set(err, e == cudaErrorMemoryAllocation ? OPUS_ERR_NOMEM : OPUS_ERR_DEVICE,
							  "cuda: cudaMalloc of %zu MiB for %s failed: %s (%zu of %zu MiB free on the device)",
							  bytes >> 20, what, cudaGetErrorString(e), free_b >> 20, total_b >> 20);
	}
	return OPUS_OK;
}

static enum opus_status
host_alloc(void **p, size_t bytes, const char *what, struct opus_error *err)
{
	cudaError_t e;

	*p = NULL;
	e = cudaHostAlloc(p, bytes > 0 ? bytes : 1, cudaHostAllocDefault);
	if (e != cudaSuccess)
	{
		*p = NULL;
		(void) cudaGetLastError();
		return opus_error_set(err, OPUS_ERR_NOMEM, "cuda: cudaHostAlloc of %zu MiB for %s failed: %s",
							  bytes >> 20, what, cudaGetErrorString(e));
	}
	return OPUS_OK;
}

/* Bytes of F16 KV blocks in kv.c's layout, to refuse any other cache type. */
static size_t
f16_block_bytes(const struct opus_hparams *hp, int bs)
{
	size_t		layer = 2 * (size_t) hp->n_head_kv * (size_t) bs * (size_t) hp->head_dim * 2;

	return ((size_t) hp->n_layer * layer + 63) / 64 * 64;
}

static enum opus_status
check_model(const struct opus_ctx *c, struct opus_error *err)
{
	const struct opus_model *m = c->model;
	const struct opus_hparams *hp = &m->hp;
	enum opus_status st;

	if (hp->n_expert > 0 && (hp->n_expert_used < 1 || hp->n_expert_used > OPUS_MOE_MAX_USED))
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "the cuda backend cannot route %d of %d experts",
							  hp->n_expert_used, hp->n_expert);
	if (hp->arch != OPUS_ARCH_LLAMA && hp->arch != OPUS_ARCH_QWEN2)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "the cuda backend does not run architecture %s yet", hp->arch_name);
	if (hp->head_dim < 2 || hp->head_dim > OPUS_K_ATTN_MAX_HD || hp->rope_dim % 2 != 0 ||
		hp->rope_dim > hp->head_dim || hp->n_embd % 32 != 0 || hp->n_head % hp->n_head_kv != 0)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "the cuda backend does not support this model's shapes (head size %d, rope dims %d, n_embd %d)",
							  hp->head_dim, hp->rope_dim, hp->n_embd);
	if (c->kv.block_bytes != f16_block_bytes(hp, c->kv.block_size))
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "the cuda backend keeps the kv cache in f16 only");
	if (c->params.llama_batch_order)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "the cuda backend has no llama.cpp batch order");
	if ((st = check_wmat(&m->tok_embd, err)) != OPUS_OK ||
		(st = check_wmat(&m->output, err)) != OPUS_OK)
		return st;
	for (int il = 0; il < hp->n_layer; il++)
	{
		const struct opus_layer *L = &m->layers[il];
		const struct opus_wmat *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};

		if (L->attn_q_norm || L->attn_k_norm)
			return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
								  "the cuda backend does not run q/k-norm layers yet");
		if (L->is_moe)
		{
			const struct opus_moe_experts *ex = &L->moe;

			if (ex->has_shared)
				return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
									  "the cuda backend does not run a shared expert (qwen2moe) yet");
			if (ex->n_expert != hp->n_expert || ex->n_used != hp->n_expert_used ||
				ex->n_embd != hp->n_embd || !L->router.data)
				return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
									  "the cuda backend: layer %d's experts do not match the model", il);
			if ((st = check_wmat(&L->router, err)) != OPUS_OK)
				return st;
			for (int e = 0; e < ex->n_expert; e++)
			{
				if ((st = check_moe_mat(&ex->gate[e], il, err)) != OPUS_OK ||
					(st = check_moe_mat(&ex->up[e], il, err)) != OPUS_OK ||
					(st = check_moe_mat(&ex->down[e], il, err)) != OPUS_OK)
					return st;
				if (ex->gate[e].n_out != hp->n_ff_exp || ex->up[e].n_out != hp->n_ff_exp ||
					ex->down[e].n_in != hp->n_ff_exp)
					return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
										  "the cuda backend needs experts of one width (layer %d)", il);
			}
			continue;
		}
		for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
		{
			if (!ws[i]->data)
				return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
									  "the cuda backend needs every dense weight of layer %d", il);
			if ((st = check_wmat(ws[i], err)) != OPUS_OK)
				return st;
		}
	}
	return OPUS_OK;
}

static enum opus_status
upload_model(struct cuda_be *be, const struct opus_model *m, struct opus_error *err)
{
	const struct opus_hparams *hp = &m->hp;
	int64_t		E = hp->n_embd;
	int64_t		qd = (int64_t) hp->n_head * hp->head_dim;
	int64_t		kvd = (int64_t) hp->n_head_kv * hp->head_dim;
	bool		tied = m->output.data == m->tok_embd.data;
	size_t		total = 0,
				off = 0;
	enum opus_status st;

	total += align_up(wmat_bytes(&m->tok_embd));
	if (!tied)
		total += align_up(wmat_bytes(&m->output));
	total += align_up((size_t) E * sizeof(float));
	for (int il = 0; il < hp->n_layer; il++)
	{
		const struct opus_layer *L = &m->layers[il];

		if (L->is_moe)
		{
			total += align_up(wmat_bytes(&L->router));
			for (int e = 0; e < L->moe.n_expert; e++)
				total += align_up(moe_mat_bytes(&L->moe.gate[e])) +
					align_up(moe_mat_bytes(&L->moe.up[e])) +
					align_up(moe_mat_bytes(&L->moe.down[e]));
		}
		total += align_up(wmat_bytes(&L->wq)) + align_up(wmat_bytes(&L->wk)) +
			align_up(wmat_bytes(&L->wv)) + align_up(wmat_bytes(&L->wo)) +
			align_up(wmat_bytes(&L->w_gate)) + align_up(wmat_bytes(&L->w_up)) +
			align_up(wmat_bytes(&L->w_down));
		total += 2 * align_up((size_t) E * sizeof(float));
		if (L->bq)
			total += align_up((size_t) qd * sizeof(float));
		if (L->bk)
			total += align_up((size_t) kvd * sizeof(float));
		if (L->bv)
			total += align_up((size_t) kvd * sizeof(float));
	}
	be->weights_bytes = total;
	st = dev_alloc((void **) &be->weights, total, "the model weights", err);
	if (st != OPUS_OK)
		return st;
	be->layers = calloc((size_t) hp->n_layer, sizeof(*be->layers));
	if (!be->layers)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for the cuda layer table");
	if ((st = upload_wmat(be, &m->tok_embd, &off, &be->tok_embd, err)) != OPUS_OK)
		return st;
	if (tied)
	{
		be->output = be->tok_embd;
		be->output.chunk_rows = be->tok_embd.chunk_rows;
	}
	else if ((st = upload_wmat(be, &m->output, &off, &be->output, err)) != OPUS_OK)
		return st;
	if ((st = upload_vec(be, m->output_norm, E, &off, &be->output_norm, err)) != OPUS_OK)
		return st;
	for (int il = 0; il < hp->n_layer; il++)
	{
		const struct opus_layer *L = &m->layers[il];
		struct dlayer *D = &be->layers[il];

		if ((st = upload_wmat(be, &L->wq, &off, &D->wq, err)) != OPUS_OK ||
			(st = upload_wmat(be, &L->wk, &off, &D->wk, err)) != OPUS_OK ||
			(st = upload_wmat(be, &L->wv, &off, &D->wv, err)) != OPUS_OK ||
			(st = upload_wmat(be, &L->wo, &off, &D->wo, err)) != OPUS_OK ||
			(st = upload_wmat(be, &L->w_gate, &off, &D->w_gate, err)) != OPUS_OK ||
			(st = upload_wmat(be, &L->w_up, &off, &D->w_up, err)) != OPUS_OK ||
			(st = upload_wmat(be, &L->w_down, &off, &D->w_down, err)) != OPUS_OK ||
			(st = upload_vec(be, L->attn_norm, E, &off, &D->attn_norm, err)) != OPUS_OK ||
			(st = upload_vec(be, L->ffn_norm, E, &off, &D->ffn_norm, err)) != OPUS_OK ||
			(st = upload_vec(be, L->bq, qd, &off, &D->bq, err)) != OPUS_OK ||
			(st = upload_vec(be, L->bk, kvd, &off, &D->bk, err)) != OPUS_OK ||
			(st = upload_vec(be, L->bv, kvd, &off, &D->bv, err)) != OPUS_OK)
			return st;
		if (L->is_moe)
		{
			int			ne = L->moe.n_expert;

			D->is_moe = true;
			D->eg = calloc((size_t) ne, sizeof(struct dmat));
			D->eu = calloc((size_t) ne, sizeof(struct dmat));
			D->ed = calloc((size_t) ne, sizeof(struct dmat));
			if (!D->eg || !D->eu || !D->ed)
				return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for the cuda expert table");
			if ((st = upload_wmat(be, &L->router, &off, &D->router, err)) != OPUS_OK)
				return st;
			for (int e = 0; e < ne; e++)
				if ((st = upload_moe_mat(be, &L->moe.gate[e], &off, &D->eg[e], err)) != OPUS_OK ||
					(st = upload_moe_mat(be, &L->moe.up[e], &off, &D->eu[e], err)) != OPUS_OK ||
					(st = upload_moe_mat(be, &L->moe.down[e], &off, &D->ed[e], err)) != OPUS_OK)
					return st;
		}
	}
	if (off != total)
		return opus_error_set(err, OPUS_ERR_INTERNAL, "cuda weight layout: %zu of %zu bytes placed",
							  off, total);
	return OPUS_OK;
}

/* (Re)allocate the block-table arrays for at least n entries. */
static enum opus_status
ensure_blocks(struct cuda_be *be, int64_t n, struct opus_error *err)
{
	int64_t		cap = be->blocks_cap > 0 ? be->blocks_cap : 1024;
	enum opus_status st;

	if (n <= be->blocks_cap)
		return OPUS_OK;
	while (cap < n)
		cap *= 2;
	if (be->d_blocks)
		(void) cudaFree(be->d_blocks);
	if (be->h_blocks)
		(void) cudaFreeHost(be->h_blocks);
	be->d_blocks = NULL;
	be->h_blocks = NULL;
	be->blocks_cap = 0;
	if ((st = dev_alloc((void **) &be->d_blocks, (size_t) cap * sizeof(int32_t), "block tables", err)) != OPUS_OK ||
		(st = host_alloc((void **) &be->h_blocks, (size_t) cap * sizeof(int32_t), "block tables", err)) != OPUS_OK)
		return st;
	be->blocks_cap = cap;
	return OPUS_OK;
}

/* Routing state and buffers of the MoE layers (B tokens, n_used choices each). */
static enum opus_status
moe_create(struct cuda_be *be, const struct opus_model *m, struct opus_error *err)
{
	const struct opus_hparams *hp = &m->hp;
	const struct opus_moe_experts **layers;
	size_t		B = (size_t) be->B,
				P = B * (size_t) hp->n_expert_used,
				E = (size_t) hp->n_embd,
				ne = (size_t) hp->n_expert;
	enum opus_status st;

	be->ff_exp = hp->n_ff_exp;
	layers = malloc(sizeof(*layers) * (size_t) hp->n_layer);
	if (!layers)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for the cuda backend");
	for (int il = 0; il < hp->n_layer; il++)
		layers[il] = &m->layers[il].moe;
	st = opus_moe_scratch_create(layers, hp->n_layer, be->B, &be->moe, err);
	free(layers);
	if (st != OPUS_OK)
		return st;
	be->grp_start = calloc(ne, sizeof(int32_t));
	be->grp_count = calloc(ne, sizeof(int32_t));
	if (!be->grp_start || !be->grp_count)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for the cuda backend");
	if ((st = dev_alloc((void **) &be->d_rlog, B * ne * sizeof(float), "router logits", err)) != OPUS_OK ||
		(st = host_alloc((void **) &be->h_rlog, B * ne * sizeof(float), "router logits", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_row_tok, P * sizeof(int32_t), "expert groups", err)) != OPUS_OK ||
		(st = host_alloc((void **) &be->h_row_tok, P * sizeof(int32_t), "expert groups", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_pair_row, P * sizeof(int32_t), "expert groups", err)) != OPUS_OK ||
		(st = host_alloc((void **) &be->h_pair_row, P * sizeof(int32_t), "expert groups", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_pair_w, P * sizeof(float), "expert weights", err)) != OPUS_OK ||
		(st = host_alloc((void **) &be->h_pair_w, P * sizeof(float), "expert weights", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_xg, P * E * sizeof(float), "expert inputs", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_eg, P * (size_t) be->ff_exp * sizeof(float), "expert activations", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_eu, P * (size_t) be->ff_exp * sizeof(float), "expert activations", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_eh, P * (size_t) be->ff_exp * sizeof(float), "expert activations", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_eo, P * E * sizeof(float), "expert outputs", err)) != OPUS_OK)
		return st;
	return OPUS_OK;
}

static enum opus_status
cuda_create(struct opus_ctx *c, struct opus_error *err)
{
	const struct opus_model *m = c->model;
	const struct opus_hparams *hp = &m->hp;
	struct cuda_be *be;
	struct cudaDeviceProp prop;
	const char *env = getenv("OPUS_CUDA_GEMM");
	size_t		B,
				E = (size_t) hp->n_embd,
				F = (size_t) hp->n_ff,
				V = (size_t) hp->n_vocab,
				qd = (size_t) hp->n_head * hp->head_dim,
				kvd = (size_t) hp->n_head_kv * hp->head_dim,
				half = (size_t) hp->rope_dim / 2,
				max_in,
				max_chunk_elems = 0,
				max_chunk_rows = 0;
	enum opus_status st;

	if ((st = check_model(c, err)) != OPUS_OK)
		return st;
	be = calloc(1, sizeof(*be));
	if (!be)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for the cuda backend");
	c->be = be;
	be->dev = c->params.device.index;
	be->B = c->params.max_batch_tokens;
	be->use_gemm = !(env && strcmp(env, "0") == 0);
	B = (size_t) be->B;

	if ((st = ck(cudaSetDevice(be->dev), "cudaSetDevice", err)) != OPUS_OK ||
		(st = ck(cudaGetDeviceProperties(&prop, be->dev), "cudaGetDeviceProperties", err)) != OPUS_OK)
		return st;
	snprintf(be->dev_name, sizeof(be->dev_name), "%s", prop.name);
	be->cc_major = prop.major;
	be->cc_minor = prop.minor;
	be->dev_mem = prop.totalGlobalMem;
	if ((st = blas_load(err)) != OPUS_OK)
		return st;
	if ((st = ck(cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking),
				 "cudaStreamCreateWithFlags", err)) != OPUS_OK)
		return st;
	be->stream_made = true;
	if ((st = ckb(blas.create(&be->blas), "cublasCreate", err)) != OPUS_OK)
		return st;
	be->blas_made = true;
	if ((st = ckb(blas.set_stream(be->blas, be->stream), "cublasSetStream", err)) != OPUS_OK)
		return st;

	if ((st = upload_model(be, m, err)) != OPUS_OK)
		return st;

	/* the KV pool */
	be->kv_bytes = c->kv.block_bytes * (size_t) c->kv.n_blocks;
	if ((st = dev_alloc((void **) &be->kv, be->kv_bytes, "the kv cache", err)) != OPUS_OK ||
		(st = ck(cudaMemsetAsync(be->kv, 0, be->kv_bytes, be->stream), "cudaMemsetAsync (kv cache)", err)) != OPUS_OK)
		return st;

	/* activations */
	if ((st = dev_alloc((void **) &be->x, B * E * sizeof(float), "activations", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->xn, B * (E > F ? E : F) * sizeof(float), "activations", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->q, B * qd * sizeof(float), "activations", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->k, B * kvd * sizeof(float), "activations", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->v, B * kvd * sizeof(float), "activations", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->att, B * qd * sizeof(float), "activations", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->gate, B * F * sizeof(float), "activations", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->up, B * F * sizeof(float), "activations", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->logits, B * V * sizeof(float), "logits", err)) != OPUS_OK)
		return st;

	/* cuBLAS scratch: the widest input and the largest weight chunk */
	max_in = E > F ? E : F;
	max_in = max_in > qd ? max_in : qd;
	max_chunk_elems = (size_t) be->output.chunk_rows * (size_t) be->output.n_in;
	max_chunk_rows = (size_t) be->output.chunk_rows;
	for (int il = 0; il < hp->n_layer; il++)
	{
		const struct dlayer *D = &be->layers[il];
		const struct dmat *ms[] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->w_gate, &D->w_up, &D->w_down};

		for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
		{
			size_t		el = (size_t) ms[i]->chunk_rows * (size_t) ms[i]->n_in;

			if (el > max_chunk_elems)
				max_chunk_elems = el;
			if ((size_t) ms[i]->chunk_rows > max_chunk_rows)
				max_chunk_rows = (size_t) ms[i]->chunk_rows;
		}
	}
	if (be->use_gemm)
	{
		size_t		b_pad = (B + GEMM_TILE - 1) / GEMM_TILE * GEMM_TILE;

		if ((st = dev_alloc(&be->blas_ws, BLAS_WORKSPACE, "the cuBLAS workspace", err)) != OPUS_OK ||
			(st = ckb(blas.set_workspace(be->blas, be->blas_ws, BLAS_WORKSPACE),
					  "cublasSetWorkspace", err)) != OPUS_OK ||
			(st = dev_alloc(&be->xh, b_pad * max_in * 2, "f16 activations", err)) != OPUS_OK ||
			(st = dev_alloc(&be->wtile, max_chunk_elems * 2, "f16 weight chunks", err)) != OPUS_OK ||
			(st = dev_alloc((void **) &be->ctile, (size_t) GEMM_TILE * max_chunk_rows * sizeof(float),
							"gemm output tiles", err)) != OPUS_OK)
			return st;
	}

	/* per-step metadata */
	if ((st = dev_alloc((void **) &be->d_tok, B * sizeof(int32_t), "step metadata", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_pos, B * sizeof(int32_t), "step metadata", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_btoff, B * sizeof(int32_t), "step metadata", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_outrow, B * sizeof(int32_t), "step metadata", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_cos, B * (half + 1) * sizeof(float), "rope tables", err)) != OPUS_OK ||
		(st = dev_alloc((void **) &be->d_sin, B * (half + 1) * sizeof(float), "rope tables", err)) != OPUS_OK ||
		(st = host_alloc((void **) &be->h_tok, B * sizeof(int32_t), "step metadata", err)) != OPUS_OK ||
		(st = host_alloc((void **) &be->h_pos, B * sizeof(int32_t), "step metadata", err)) != OPUS_OK ||
		(st = host_alloc((void **) &be->h_btoff, B * sizeof(int32_t), "step metadata", err)) != OPUS_OK ||
		(st = host_alloc((void **) &be->h_outrow, B * sizeof(int32_t), "step metadata", err)) != OPUS_OK ||
		(st = host_alloc((void **) &be->h_cos, B * (half + 1) * sizeof(float), "rope tables", err)) != OPUS_OK ||
		(st = host_alloc((void **) &be->h_sin, B * (half + 1) * sizeof(float), "rope tables", err)) != OPUS_OK ||
		(st = host_alloc((void **) &be->h_logits, B * V * sizeof(float), "logits", err)) != OPUS_OK)
		return st;
	be->out_dst = calloc(B, sizeof(float *));
	if (!be->out_dst)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for the cuda backend");
	if (hp->n_expert > 0 && (st = moe_create(be, m, err)) != OPUS_OK)
		return st;
	if ((st = ensure_blocks(be, (int64_t) B * 4, err)) != OPUS_OK)
		return st;
	/*
	 * The uploads ran on the legacy stream, which the non-blocking stream
	 * does not wait for (and a pageable cudaMemcpy may return before its
	 * DMA ends): wait for the whole device once.
	 */
	return ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after upload)", err);
}

static void
cuda_destroy(struct opus_ctx *c)
{
	struct cuda_be *be = c->be;

	if (!be)
		return;
	(void) cudaSetDevice(be->dev);
	if (be->stream_made)
		(void) cudaStreamSynchronize(be->stream);
	/* the handle goes before the workspace it was given */
	if (be->blas_made)
		(void) blas.destroy(be->blas);
	be->blas_made = false;
	{
		void	   *dptrs[] = {be->weights, be->kv, be->x, be->xn, be->q, be->k, be->v, be->att,
			be->gate, be->up, be->logits, be->blas_ws, be->xh, be->wtile, be->ctile, be->d_tok, be->d_pos,
		be->d_btoff, be->d_outrow, be->d_cos, be->d_sin, be->d_blocks, be->d_rlog, be->d_row_tok,
		be->d_pair_row, be->d_pair_w, be->d_xg, be->d_eg, be->d_eu, be->d_eh, be->d_eo};
		void	   *hptrs[] = {be->h_tok, be->h_pos, be->h_btoff, be->h_outrow, be->h_cos,
			be->h_sin, be->h_blocks, be->h_logits, be->h_rlog, be->h_row_tok, be->h_pair_row,
		be->h_pair_w};

		for (size_t i = 0; i < sizeof(dptrs) / sizeof(dptrs[0]); i++)
			if (dptrs[i])
				(void) cudaFree(dptrs[i]);
		for (size_t i = 0; i < sizeof(hptrs) / sizeof(hptrs[0]); i++)
			if (hptrs[i])
				(void) cudaFreeHost(hptrs[i]);
	}
	if (be->stream_made)
		(void) cudaStreamDestroy(be->stream);
	(void) cudaGetLastError();
	for (int il = 0; be->layers && il < c->model->hp.n_layer; il++)
	{
		free(be->layers[il].eg);
		free(be->layers[il].eu);
		free(be->layers[il].ed);
	}
	opus_moe_scratch_free(be->moe);
	free(be->grp_start);
	free(be->grp_count);
	free(be->layers);
	free(be->out_dst);
	free(be);
	c->be = NULL;
}

/* ---- forward ---- */

/*
 * out rows [0, n) = W in rows [0, n) (+ bias), accumulated into out or not:
 * rows below n_dec by the matvec kernel, the rest by cuBLAS tiles.
 */
static enum opus_status
matmul(struct cuda_be *be, const struct dmat *W, const float *in, size_t ld_in, int n,
	   int n_dec, float *out, size_t ld_out, const float *bias, bool acc,
	   struct opus_error *err)
{
	static const float one = 1.0f,
				zero = 0.0f;
	int			n_pre = n - n_dec;
	enum opus_status st;

	if (n_dec > 0 &&
		(st = ck(opus_k_matvec(be->stream, W->type, W->d, W->row_bytes, W->n_in, W->n_out,
							   in, ld_in, n_dec, out, ld_out, bias, acc),
				 "matvec kernel launch", err)) != OPUS_OK)
		return st;
	if (n_pre <= 0)
		return OPUS_OK;
	{
		const float *in_p = in + (size_t) n_dec * ld_in;
		float	   *out_p = out + (size_t) n_dec * ld_out;
		int			n_pad = (n_pre + GEMM_TILE - 1) / GEMM_TILE * GEMM_TILE;

		if ((st = ck(opus_k_to_f16(be->stream, in_p, ld_in, n_pre, n_pad, W->n_in, be->xh),
					 "f16 conversion kernel launch", err)) != OPUS_OK)
			return st;
		for (int64_t r0 = 0; r0 < W->n_out; r0 += W->chunk_rows)
		{
			int64_t		rows = W->n_out - r0 < W->chunk_rows ? W->n_out - r0 : W->chunk_rows;

			if ((st = ck(opus_k_dequant_f16(be->stream, W->type, W->d, W->row_bytes, W->n_in,
											r0, rows, be->wtile),
						 "dequantize kernel launch", err)) != OPUS_OK)
				return st;
			for (int t0 = 0; t0 < n_pad; t0 += GEMM_TILE)
			{
				int			nt = n_pre - t0 < GEMM_TILE ? n_pre - t0 : GEMM_TILE;
				const uint8_t *xt = (const uint8_t *) be->xh + (size_t) t0 * (size_t) W->n_in * 2;

				/* ctile[t][r] = sum_k wtile[r][k] * xt[t][k] (column-major: W^T x) */
				if ((st = ckb(blas.gemm_ex(be->blas, CUBLAS_OP_T, CUBLAS_OP_N,
										   (int) rows, GEMM_TILE, (int) W->n_in, &one,
										   be->wtile, CUDA_R_16F, (int) W->n_in,
										   xt, CUDA_R_16F, (int) W->n_in, &zero,
										   be->ctile, CUDA_R_32F, (int) rows,
										   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
							  "cublasGemmEx", err)) != OPUS_OK)
					return st;
				if ((st = ck(opus_k_store_tile(be->stream, be->ctile, (size_t) rows, nt, rows,
											   out_p + (size_t) t0 * ld_out, ld_out, r0, bias, acc),
							 "store kernel launch", err)) != OPUS_OK)
					return st;
			}
		}
	}
	return OPUS_OK;
}

/* RoPE cos/sin of one position, as forward.c's rope_tables computes them. */
static void
rope_row(const struct opus_model *m, float theta_scale, int32_t pos, float *cs, float *sn)
{
	const struct opus_hparams *hp = &m->hp;
	int			half = hp->rope_dim / 2;
	float		theta = (float) pos;

	for (int i = 0; i < half; i++)
	{
		float		th = theta;

		if (m->rope_freqs)
			th /= m->rope_freqs[i];
		th *= hp->rope_freq_scale;
		cs[i] = cosf(th);
		sn[i] = sinf(th);
		theta *= theta_scale;
	}
}

/*
 * x += experts(rmsnorm(x)) for the N tokens of a MoE layer: router on the
 * device, routing and grouping on the host (moe.c), experts and the
 * combine on the device.
 */
static enum opus_status
moe_layer(struct opus_ctx *c, struct cuda_be *be, int il, int N, struct opus_error *err)
{
	const struct opus_hparams *hp = &c->model->hp;
	const struct opus_layer *L = &c->model->layers[il];
	const struct dlayer *D = &be->layers[il];
	const struct opus_moe_step_stats *mst;
	int			E = hp->n_embd,
				ne = hp->n_expert,
				nu = hp->n_expert_used,
				P = N * nu;
	int64_t		Fe = be->ff_exp;
	cudaStream_t s = be->stream;
	enum opus_status st;

	if ((st = ck(opus_k_rmsnorm(s, be->x, E, NULL, N, D->ffn_norm, E, hp->norm_eps, be->xn, E),
				 "rmsnorm kernel launch", err)) != OPUS_OK ||
		(st = ck(opus_k_matvec(s, D->router.type, D->router.d, D->router.row_bytes, D->router.n_in,
							   D->router.n_out, be->xn, E, N, be->d_rlog, ne, NULL, 0),
				 "router matvec launch", err)) != OPUS_OK ||
		(st = ck(cudaMemcpyAsync(be->h_rlog, be->d_rlog, (size_t) N * ne * sizeof(float),
								 cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (router logits)", err)) != OPUS_OK ||
		(st = ck(cudaStreamSynchronize(s), "cudaStreamSynchronize (router logits)", err)) != OPUS_OK)
		return st;

	/* the CPU's routing: gating, top-k, weights, load counters */
	opus_moe_route(be->moe, &L->moe, be->h_rlog, (size_t) ne, NULL, N,
				   c->expert_load ? c->expert_load + (size_t) il * ne : NULL);
	mst = opus_moe_last_stats(be->moe);
	c->moe_io.bytes_last += (uint64_t) mst->weight_bytes;
	c->moe_io.bytes_total += (uint64_t) mst->weight_bytes;
	c->moe_io.active_last += mst->n_active;
	if (mst->max_reads > c->moe_io.max_reads_last)
		c->moe_io.max_reads_last = mst->max_reads;

	/* groups: experts in index order, tokens ascending inside a group */
	memset(be->grp_count, 0, sizeof(int32_t) * (size_t) ne);
	for (int t = 0; t < N; t++)
	{
		const int32_t *ch = opus_moe_choices(be->moe, t);

		for (int k = 0; k < nu; k++)
		{
			if (ch[k] < 0 || ch[k] >= ne)
				return opus_error_set(err, OPUS_ERR_INTERNAL, "expert choice %d out of range", ch[k]);
			be->grp_count[ch[k]]++;
		}
	}
	for (int e = 0, row = 0; e < ne; e++)
	{
		be->grp_start[e] = row;
		row += be->grp_count[e];
	}
	for (int e = 0; e < ne; e++)
		be->grp_count[e] = 0;
	for (int t = 0; t < N; t++)
	{
		const int32_t *ch = opus_moe_choices(be->moe, t);
		const float *w = opus_moe_weights(be->moe, t);

		for (int k = 0; k < nu; k++)
		{
			int			row = be->grp_start[ch[k]] + be->grp_count[ch[k]]++;

			be->h_row_tok[row] = t;
			be->h_pair_row[t * nu + k] = row;
			be->h_pair_w[t * nu + k] = w[k];
		}
	}
	if ((st = ck(cudaMemcpyAsync(be->d_row_tok, be->h_row_tok, (size_t) P * sizeof(int32_t),
								 cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (expert groups)", err)) != OPUS_OK ||
		(st = ck(cudaMemcpyAsync(be->d_pair_row, be->h_pair_row, (size_t) P * sizeof(int32_t),
								 cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (expert groups)", err)) != OPUS_OK ||
		(st = ck(cudaMemcpyAsync(be->d_pair_w, be->h_pair_w, (size_t) P * sizeof(float),
								 cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (expert weights)", err)) != OPUS_OK ||
		(st = ck(opus_k_gather_rows(s, be->xn, E, be->d_row_tok, P, E, be->d_xg, E),
				 "gather kernel launch", err)) != OPUS_OK)
		return st;
	for (int e = 0; e < ne; e++)
	{
		int			n = be->grp_count[e];
		size_t		r0 = (size_t) be->grp_start[e];

		if (n == 0)
			continue;
		if ((st = ck(opus_k_matvec(s, D->eg[e].type, D->eg[e].d, D->eg[e].row_bytes, D->eg[e].n_in,
								   D->eg[e].n_out, be->d_xg + r0 * E, E, n, be->d_eg + r0 * Fe, Fe,
								   NULL, 0), "expert gate matvec launch", err)) != OPUS_OK ||
			(st = ck(opus_k_matvec(s, D->eu[e].type, D->eu[e].d, D->eu[e].row_bytes, D->eu[e].n_in,
								   D->eu[e].n_out, be->d_xg + r0 * E, E, n, be->d_eu + r0 * Fe, Fe,
								   NULL, 0), "expert up matvec launch", err)) != OPUS_OK)
			return st;
	}
	if ((st = ck(opus_k_swiglu(s, be->d_eg, be->d_eu, be->d_eh, (int64_t) P * Fe),
				 "swiglu kernel launch", err)) != OPUS_OK)
		return st;
	for (int e = 0; e < ne; e++)
	{
		int			n = be->grp_count[e];
		size_t		r0 = (size_t) be->grp_start[e];

		if (n == 0)
			continue;
		if ((st = ck(opus_k_matvec(s, D->ed[e].type, D->ed[e].d, D->ed[e].row_bytes, D->ed[e].n_in,
								   D->ed[e].n_out, be->d_eh + r0 * Fe, Fe, n, be->d_eo + r0 * E, E,
								   NULL, 0), "expert down matvec launch", err)) != OPUS_OK)
			return st;
	}
	return ck(opus_k_moe_combine(s, be->d_eo, E, be->d_pair_row, be->d_pair_w, N, nu, E, be->x, E),
			  "combine kernel launch", err);
}

static enum opus_status
cuda_forward(struct opus_ctx *c, struct opus_batch_item *items, int n_items,
			 struct opus_error *err)
{
	struct cuda_be *be = c->be;
	const struct opus_model *m = c->model;
	const struct opus_hparams *hp = &m->hp;
	const struct opus_kv *kvh = &c->kv;
	int			E = hp->n_embd,
				F = hp->n_ff,
				V = hp->n_vocab,
				hd = hp->head_dim,
				qd = hp->n_head * hd,
				kvd = hp->n_head_kv * hd,
				half = hp->rope_dim / 2;
	bool		neox = hp->arch != OPUS_ARCH_LLAMA;
	float		theta_scale = powf(hp->rope_freq_base, -2.0f / hp->rope_dim);
	int			N = 0,
				n_dec = 0,
				n_out = 0,
				n_out_dec = 0;
	int64_t		n_bt = 0;
	struct opus_k_kv kv;
	enum opus_status st;
	cudaStream_t s = be->stream;

	/* block tables: size first */
	for (int i = 0; i < n_items; i++)
		if (items[i].n_tokens > 0)
			n_bt += items[i].seq->n_blocks;
	if ((st = ensure_blocks(be, n_bt, err)) != OPUS_OK)
		return st;

	/*
	 * Device rows: one-token items first (matvec), then the others (cuBLAS
	 * unless disabled); each class in item order.
	 */
	n_bt = 0;
	for (int pass = 0; pass < 2; pass++)
	{
		for (int i = 0; i < n_items; i++)
		{
			struct opus_batch_item *it = &items[i];
			struct opus_seq *sq = it->seq;
			bool		single = it->n_tokens == 1;
			int64_t		off = n_bt;

			if (it->n_tokens <= 0 || single != (pass == 0))
				continue;
			memcpy(be->h_blocks + off, sq->blocks, (size_t) sq->n_blocks * sizeof(int32_t));
			n_bt += sq->n_blocks;
			for (int j = 0; j < it->n_tokens; j++, N++)
			{
				be->h_tok[N] = it->tokens[j];
				be->h_pos[N] = sq->n_pos + j;
				be->h_btoff[N] = (int32_t) off;
				rope_row(m, theta_scale, sq->n_pos + j, be->h_cos + (size_t) N * half,
						 be->h_sin + (size_t) N * half);
				if (it->logits && (it->logits_all || j == it->n_tokens - 1))
				{
					be->h_outrow[n_out] = N;
					be->out_dst[n_out] = it->logits +
						(it->logits_all ? (size_t) j * hp->n_vocab : 0);
					n_out++;
				}
			}
		}
		if (pass == 0)
		{
			n_dec = N;
			n_out_dec = n_out;
		}
	}
	if (!be->use_gemm)
	{
		n_dec = N;
		n_out_dec = n_out;
	}
	if (N == 0)
		return OPUS_OK;

	if (be->moe)
	{
		c->moe_io.steps++;
		c->moe_io.bytes_last = 0;
		c->moe_io.max_reads_last = 0;
		c->moe_io.active_last = 0;
	}
	if ((st = ck(cudaSetDevice(be->dev), "cudaSetDevice", err)) != OPUS_OK ||
		(st = ck(cudaMemcpyAsync(be->d_tok, be->h_tok, (size_t) N * sizeof(int32_t),
								 cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (tokens)", err)) != OPUS_OK ||
		(st = ck(cudaMemcpyAsync(be->d_pos, be->h_pos, (size_t) N * sizeof(int32_t),
								 cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (positions)", err)) != OPUS_OK ||
		(st = ck(cudaMemcpyAsync(be->d_btoff, be->h_btoff, (size_t) N * sizeof(int32_t),
								 cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (block table offsets)", err)) != OPUS_OK ||
		(st = ck(cudaMemcpyAsync(be->d_blocks, be->h_blocks, (size_t) n_bt * sizeof(int32_t),
								 cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (block tables)", err)) != OPUS_OK ||
		(st = ck(cudaMemcpyAsync(be->d_cos, be->h_cos, (size_t) N * half * sizeof(float),
								 cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (rope tables)", err)) != OPUS_OK ||
		(st = ck(cudaMemcpyAsync(be->d_sin, be->h_sin, (size_t) N * half * sizeof(float),
								 cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (rope tables)", err)) != OPUS_OK)
		return st;
	if (n_out > 0 &&
		(st = ck(cudaMemcpyAsync(be->d_outrow, be->h_outrow, (size_t) n_out * sizeof(int32_t),
								 cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (output rows)", err)) != OPUS_OK)
		return st;

	if ((st = ck(opus_k_embed(s, be->tok_embd.type, be->tok_embd.d, be->tok_embd.row_bytes,
							  be->d_tok, N, E, be->x), "embedding kernel launch", err)) != OPUS_OK)
		return st;

	kv.pool = be->kv;
	kv.block_bytes = kvh->block_bytes;
	kv.kv_half_bytes = kvh->kv_half_bytes;
	kv.bs = kvh->block_size;
	kv.n_head_kv = hp->n_head_kv;
	kv.head_dim = hd;
	kv.pos = be->d_pos;
	kv.bt_off = be->d_btoff;
	kv.blocks = be->d_blocks;

	for (int il = 0; il < hp->n_layer; il++)
	{
		const struct dlayer *D = &be->layers[il];

		kv.layer_off = (size_t) il * kvh->layer_bytes;
		if ((st = ck(opus_k_rmsnorm(s, be->x, E, NULL, N, D->attn_norm, E, hp->norm_eps,
									be->xn, E), "rmsnorm kernel launch", err)) != OPUS_OK ||
			(st = matmul(be, &D->wq, be->xn, E, N, n_dec, be->q, qd, D->bq, false, err)) != OPUS_OK ||
			(st = matmul(be, &D->wk, be->xn, E, N, n_dec, be->k, kvd, D->bk, false, err)) != OPUS_OK ||
			(st = matmul(be, &D->wv, be->xn, E, N, n_dec, be->v, kvd, D->bv, false, err)) != OPUS_OK ||
			(st = ck(opus_k_rope(s, be->q, qd, N, hp->n_head, hd, hp->rope_dim, neox,
								 be->d_cos, be->d_sin), "rope kernel launch", err)) != OPUS_OK ||
			(st = ck(opus_k_rope(s, be->k, kvd, N, hp->n_head_kv, hd, hp->rope_dim, neox,
								 be->d_cos, be->d_sin), "rope kernel launch", err)) != OPUS_OK ||
			(st = ck(opus_k_kv_store(s, &kv, be->k, be->v, N), "kv store kernel launch", err)) != OPUS_OK ||
			(st = ck(opus_k_attention(s, &kv, be->q, be->att, N, hp->n_head,
									  1.0f / sqrtf((float) hd)), "attention kernel launch", err)) != OPUS_OK ||
			(st = matmul(be, &D->wo, be->att, qd, N, n_dec, be->x, E, NULL, true, err)) != OPUS_OK)
			return st;
		if (D->is_moe)
		{
			if ((st = moe_layer(c, be, il, N, err)) != OPUS_OK)
				return st;
			continue;
		}
		if ((st = ck(opus_k_rmsnorm(s, be->x, E, NULL, N, D->ffn_norm, E, hp->norm_eps,
									be->xn, E), "rmsnorm kernel launch", err)) != OPUS_OK ||
			(st = matmul(be, &D->w_gate, be->xn, E, N, n_dec, be->gate, F, NULL, false, err)) != OPUS_OK ||
			(st = matmul(be, &D->w_up, be->xn, E, N, n_dec, be->up, F, NULL, false, err)) != OPUS_OK ||
			(st = ck(opus_k_swiglu(s, be->gate, be->up, be->xn, (int64_t) N * F),
					 "swiglu kernel launch", err)) != OPUS_OK ||
			(st = matmul(be, &D->w_down, be->xn, F, N, n_dec, be->x, E, NULL, true, err)) != OPUS_OK)
			return st;
	}

	if (n_out > 0)
	{
		if ((st = ck(opus_k_rmsnorm(s, be->x, E, be->d_outrow, n_out, be->output_norm, E,
									hp->norm_eps, be->xn, E), "rmsnorm kernel launch", err)) != OPUS_OK ||
			(st = matmul(be, &be->output, be->xn, E, n_out, n_out_dec, be->logits, V, NULL,
						 false, err)) != OPUS_OK ||
			(st = ck(cudaMemcpyAsync(be->h_logits, be->logits, (size_t) n_out * V * sizeof(float),
									 cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (logits)", err)) != OPUS_OK)
			return st;
	}
	if ((st = ck(cudaStreamSynchronize(s), "cudaStreamSynchronize (forward pass)", err)) != OPUS_OK)
		return st;
	for (int k = 0; k < n_out; k++)
		memcpy(be->out_dst[k], be->h_logits + (size_t) k * V, (size_t) V * sizeof(float));
	return OPUS_OK;
}

static enum opus_status
cuda_copy_block(struct opus_ctx *c, int32_t dst, int32_t src, struct opus_error *err)
{
	struct cuda_be *be = c->be;
	size_t		bb = c->kv.block_bytes;

	return ck(cudaMemcpyAsync(be->kv + (size_t) dst * bb, be->kv + (size_t) src * bb, bb,
							  cudaMemcpyDeviceToDevice, be->stream),
			  "cudaMemcpyAsync (kv block copy)", err);
}

static void
cuda_describe(const struct opus_ctx *c, char *buf, size_t len)
{
	const struct cuda_be *be = c->be;

	if (!be)
	{
		snprintf(buf, len, "cuda");
		return;
	}
	snprintf(buf, len, "cuda:%d (%s, sm_%d%d, %zu MiB; weights %zu MiB, kv cache %zu MiB; %s)",
			 be->dev, be->dev_name, be->cc_major, be->cc_minor, be->dev_mem >> 20,
			 be->weights_bytes >> 20, be->kv_bytes >> 20,
			 be->use_gemm ? "cuBLAS prefill" : "fixed-order kernels only");
}

const struct opus_backend_ops opus_backend_cuda = {
	.name = "cuda",
	.create = cuda_create,
	.destroy = cuda_destroy,
	.forward = cuda_forward,
	.copy_block = cuda_copy_block,
	.describe = cuda_describe,
};
