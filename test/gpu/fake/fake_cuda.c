/*
 * fake_cuda.c - a stand-in for the CUDA runtime and for the kernels'
 * launchers, in plain C on the CPU, so the CUDA backend's host side
 * (src/engine/model/backend_cuda.c: weight upload, buffer sizing, the batch
 * layout, block tables, RoPE tables, the prefill tiles, the MoE grouping)
 * can run and be checked on a machine without a GPU, under ASan.
 *
 * "Device" memory is host memory filled with 0xFF bytes (NaN floats) when
 * allocated, so a read of something never written shows up in the logits.
 * The launchers compute what the kernels compute (opus_kernels.h), with
 * plain loops (the matvec in double), so they are a second implementation
 * of the kernels' contracts, not of their arithmetic: the logits agree with
 * the GPU's and the CPU backend's within the forward check's tolerances.
 * The cuBLAS part is fake_cublas.c (a shared library the backend dlopens
 * through OPUS_CUBLAS_LIB).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "opus_dequant.h"
#include "opus_kernels.h"
#include "quant/qtype.h"

/* ---- the runtime ---- */

static void *
fake_alloc(size_t n)
{
	size_t		sz = (n + 255) / 256 * 256;
	void	   *p = aligned_alloc(256, sz > 0 ? sz : 256);

	if (p)
		memset(p, 0xFF, sz > 0 ? sz : 256);
	return p;
}

cudaError_t
cudaGetDeviceCount(int *n)
{
	*n = 1;
	return cudaSuccess;
}

const char *
cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess ? "no error" : "fake cuda error";
}

const char *
cudaGetErrorName(cudaError_t e)
{
	return e == cudaSuccess ? "cudaSuccess" : "cudaErrorFake";
}

cudaError_t
cudaGetLastError(void)
{
	return cudaSuccess;
}

cudaError_t
cudaSetDevice(int d)
{
	return d == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t
cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "fake CUDA device on the CPU");
	p->major = 9;
	p->minor = 0;
	p->totalGlobalMem = (size_t) 64 << 30;
	return d == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t
cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	*s = (cudaStream_t) (uintptr_t) 0x5;
	return cudaSuccess;
}

cudaError_t
cudaStreamSynchronize(cudaStream_t s)
{
	return cudaSuccess;
}

cudaError_t
cudaStreamDestroy(cudaStream_t s)
{
	return cudaSuccess;
}

cudaError_t
cudaDeviceSynchronize(void)
{
	return cudaSuccess;
}

cudaError_t
cudaMalloc(void **p, size_t n)
{
	*p = fake_alloc(n);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t
cudaFree(void *p)
{
	free(p);
	return cudaSuccess;
}

cudaError_t
cudaHostAlloc(void **p, size_t n, unsigned int flags)
{
	*p = fake_alloc(n);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t
cudaFreeHost(void *p)
{
	free(p);
	return cudaSuccess;
}

cudaError_t
cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k)
{
	memmove(dst, src, n);
	return cudaSuccess;
}

cudaError_t
cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s)
{
	memmove(dst, src, n);
	return cudaSuccess;
}

cudaError_t
cudaMemset(void *p, int v, size_t n)
{
	memset(p, v, n);
	return cudaSuccess;
}

cudaError_t
cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
	memset(p, v, n);
	return cudaSuccess;
}

cudaError_t
cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
	*free_b = (size_t) 32 << 30;
	*total_b = (size_t) 64 << 30;
	return cudaSuccess;
}

/* ---- the launchers ---- */

int
opus_k_type_supported(int type)
{
	return opus_dq_block_size(type) != 0;
}

cudaError_t
opus_k_embed(cudaStream_t stream, int type, const uint8_t *table, size_t row_bytes,
			 const int32_t *tok, int n_tok, int n_embd, float *x)
{
	if (n_embd % 32 != 0 || !opus_k_type_supported(type))
		return cudaErrorInvalidValue;
	for (int t = 0; t < n_tok; t++)
		for (int c = 0; c < n_embd / 32; c++)
			opus_dq_chunk(type, table + (size_t) tok[t] * row_bytes, c, x + (size_t) t * n_embd + c * 32);
	return cudaSuccess;
}

cudaError_t
opus_k_rmsnorm(cudaStream_t stream, const float *x, size_t ldx, const int32_t *rows,
			   int n_rows, const float *w, int n, float eps, float *y, size_t ldy)
{
	for (int k = 0; k < n_rows; k++)
	{
		const float *xr = x + (size_t) (rows ? rows[k] : k) * ldx;
		double		ss = 0;
		float		scale;

		for (int i = 0; i < n; i++)
			ss += (double) (xr[i] * xr[i]);
		scale = 1.0f / sqrtf((float) (ss / n) + eps);
		for (int i = 0; i < n; i++)
			y[(size_t) k * ldy + i] = (xr[i] * scale) * w[i];
	}
	return cudaSuccess;
}

cudaError_t
opus_k_matvec(cudaStream_t stream, int type, const uint8_t *W, size_t row_bytes,
			  int64_t n_in, int64_t n_out, const float *x, size_t ldx, int n_tok,
			  float *y, size_t ldy, const float *bias, int accumulate)
{
	float	   *row = malloc(sizeof(float) * (size_t) n_in);

	if (!row || n_in % 32 != 0 || ldx % 4 != 0 || !opus_k_type_supported(type))
	{
		free(row);
		return cudaErrorInvalidValue;
	}
	for (int64_t r = 0; r < n_out; r++)
	{
		for (int64_t c = 0; c < n_in / 32; c++)
			opus_dq_chunk(type, W + (size_t) r * row_bytes, c, row + c * 32);
		for (int t = 0; t < n_tok; t++)
		{
			double		s = 0;
			float		v;
			float	   *d = y + (size_t) t * ldy + r;

			for (int64_t i = 0; i < n_in; i++)
				s += (double) row[i] * x[(size_t) t * ldx + i];
			v = (float) s;
			if (bias)
				v += bias[r];
			*d = accumulate ? *d + v : v;
		}
	}
	free(row);
	return cudaSuccess;
}

cudaError_t
opus_k_dequant_f16(cudaStream_t stream, int type, const uint8_t *W, size_t row_bytes,
				   int64_t n_in, int64_t r0, int64_t n_rows, void *out)
{
	uint16_t   *o = out;
	float		y[32];

	if (n_in % 32 != 0 || !opus_k_type_supported(type))
		return cudaErrorInvalidValue;
	for (int64_t r = 0; r < n_rows; r++)
		for (int64_t c = 0; c < n_in / 32; c++)
		{
			opus_dq_chunk(type, W + (size_t) (r0 + r) * row_bytes, c, y);
			for (int j = 0; j < 32; j++)
				o[(size_t) r * n_in + c * 32 + j] = opus_fp32_to_fp16(y[j]);
		}
	return cudaSuccess;
}

cudaError_t
opus_k_to_f16(cudaStream_t stream, const float *x, size_t ldx, int n_rows, int n_rows_pad,
			  int64_t n_cols, void *out)
{
	uint16_t   *o = out;

	for (int t = 0; t < n_rows_pad; t++)
		for (int64_t k = 0; k < n_cols; k++)
			o[(size_t) t * n_cols + k] = t < n_rows ? opus_fp32_to_fp16(x[(size_t) t * ldx + k]) : 0;
	return cudaSuccess;
}

cudaError_t
opus_k_store_tile(cudaStream_t stream, const float *c, size_t ldc, int n_tok, int64_t m,
				  float *y, size_t ldy, int64_t col0, const float *bias, int accumulate)
{
	for (int t = 0; t < n_tok; t++)
		for (int64_t i = 0; i < m; i++)
		{
			float		v = c[(size_t) t * ldc + i];
			float	   *d = y + (size_t) t * ldy + col0 + i;

			if (bias)
				v += bias[col0 + i];
			*d = accumulate ? *d + v : v;
		}
	return cudaSuccess;
}

cudaError_t
opus_k_rope(cudaStream_t stream, float *v, size_t ld, int n_tok, int n_heads, int head_dim,
			int rope_dim, int neox, const float *cs, const float *sn)
{
	int			half = rope_dim / 2;

	for (int t = 0; t < n_tok; t++)
		for (int h = 0; h < n_heads; h++)
		{
			float	   *xv = v + (size_t) t * ld + (size_t) h * head_dim;

			for (int i = 0; i < half; i++)
			{
				int			i0 = neox ? i : 2 * i;
				int			i1 = neox ? i + half : 2 * i + 1;
				float		x0 = xv[i0],
							x1 = xv[i1],
							c = cs[(size_t) t * half + i],
							s = sn[(size_t) t * half + i];

				xv[i0] = fmaf(x0, c, -(x1 * s));
				xv[i1] = fmaf(x0, s, x1 * c);
			}
		}
	return cudaSuccess;
}

static uint16_t *
kv_k(const struct opus_k_kv *kv, int32_t blk, int g)
{
	return (uint16_t *) (kv->pool + (size_t) blk * kv->block_bytes + kv->layer_off) +
		(size_t) g * kv->bs * kv->head_dim;
}

static uint16_t *
kv_v(const struct opus_k_kv *kv, int32_t blk, int g)
{
	return (uint16_t *) (kv->pool + (size_t) blk * kv->block_bytes + kv->layer_off +
						 kv->kv_half_bytes) + (size_t) g * kv->bs * kv->head_dim;
}

cudaError_t
opus_k_kv_store(cudaStream_t stream, const struct opus_k_kv *kv, const float *k, const float *v,
				int n_tok)
{
	int			hd = kv->head_dim;

	for (int t = 0; t < n_tok; t++)
	{
		int			p = kv->pos[t];
		int32_t		blk = kv->blocks[kv->bt_off[t] + p / kv->bs];
		int			slot = p % kv->bs;

		for (int g = 0; g < kv->n_head_kv; g++)
			for (int d = 0; d < hd; d++)
			{
				size_t		src = (size_t) t * kv->n_head_kv * hd + (size_t) g * hd + d;

				kv_k(kv, blk, g)[(size_t) d * kv->bs + slot] = opus_fp32_to_fp16(k[src]);
				kv_v(kv, blk, g)[(size_t) slot * hd + d] = opus_fp32_to_fp16(v[src]);
			}
	}
	return cudaSuccess;
}

cudaError_t
opus_k_attention(cudaStream_t stream, const struct opus_k_kv *kv, const float *q, float *out,
				 int n_tok, int n_head, float scale)
{
	int			hd = kv->head_dim;
	int			n_rep = n_head / kv->n_head_kv;

	if (hd > OPUS_K_ATTN_MAX_HD || n_head % kv->n_head_kv != 0)
		return cudaErrorInvalidValue;
	for (int t = 0; t < n_tok; t++)
	{
		int			n_kv = kv->pos[t] + 1;
		const int32_t *bt = kv->blocks + kv->bt_off[t];
		double	   *sc = malloc(sizeof(double) * (size_t) n_kv);

		if (!sc)
			return cudaErrorMemoryAllocation;
		for (int h = 0; h < n_head; h++)
		{
			int			g = h / n_rep;
			const float *qt = q + ((size_t) t * n_head + h) * hd;
			double		mx = -INFINITY,
						sum = 0;

			for (int p = 0; p < n_kv; p++)
			{
				const uint16_t *K = kv_k(kv, bt[p / kv->bs], g);
				double		s = 0;

				for (int d = 0; d < hd; d++)
					s += (double) qt[d] * opus_fp16_to_fp32(K[(size_t) d * kv->bs + p % kv->bs]);
				sc[p] = s * scale;
				if (sc[p] > mx)
					mx = sc[p];
			}
			for (int p = 0; p < n_kv; p++)
			{
				sc[p] = exp(sc[p] - mx);
				sum += sc[p];
			}
			for (int d = 0; d < hd; d++)
			{
				double		o = 0;

				for (int p = 0; p < n_kv; p++)
					o += sc[p] * opus_fp16_to_fp32(kv_v(kv, bt[p / kv->bs], g)[(size_t) (p % kv->bs) * hd + d]);
				out[((size_t) t * n_head + h) * hd + d] = (float) (o / sum);
			}
		}
		free(sc);
	}
	return cudaSuccess;
}

cudaError_t
opus_k_swiglu(cudaStream_t stream, const float *g, const float *u, float *h, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
	return cudaSuccess;
}

cudaError_t
opus_k_gather_rows(cudaStream_t stream, const float *src, size_t ld_src, const int32_t *idx,
				   int n_rows, int64_t n_cols, float *dst, size_t ld_dst)
{
	for (int r = 0; r < n_rows; r++)
		memcpy(dst + (size_t) r * ld_dst, src + (size_t) idx[r] * ld_src, sizeof(float) * (size_t) n_cols);
	return cudaSuccess;
}

cudaError_t
opus_k_moe_combine(cudaStream_t stream, const float *y, size_t ld_y, const int32_t *pair_row,
				   const float *w, int n_tok, int n_used, int64_t n, float *out, size_t ld_out)
{
	for (int t = 0; t < n_tok; t++)
		for (int64_t c = 0; c < n; c++)
		{
			float		acc = 0;

			for (int k = 0; k < n_used; k++)
			{
				size_t		p = (size_t) t * n_used + k;

				acc += w[p] * y[(size_t) pair_row[p] * ld_y + c];
			}
			out[(size_t) t * ld_out + c] += acc;
		}
	return cudaSuccess;
}

cudaError_t
opus_k_argmax(cudaStream_t stream, const float *x, size_t ldx, int n_rows, int n, int32_t *out)
{
	for (int r = 0; r < n_rows; r++)
	{
		int			b = 0;

		for (int i = 1; i < n; i++)
			if (x[(size_t) r * ldx + i] > x[(size_t) r * ldx + b])
				b = i;
		out[r] = b;
	}
	return cudaSuccess;
}
