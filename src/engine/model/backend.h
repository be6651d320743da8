/*
 * backend.h - internal: the operation table a backend (CPU, CUDA) provides
 * behind struct opus_ctx.
 *
 * The split of work: everything about sequences and the KV block pool's
 * bookkeeping (block tables, reference counts, the prefix cache, validation
 * of a batch) stays on the host in kv.c and opus_forward (forward.c), the
 * same for every backend.  A backend owns the compute: the weights where it
 * reads them, the KV block memory (host memory for the CPU, device memory
 * for CUDA, both in kv.c's layout), scratch buffers, and the forward pass.
 * The granularity is a whole batched forward pass, so a GPU keeps every
 * intermediate on the device and moves only token ids, positions, block
 * tables in and logits out.
 *
 * Call order: create once (after opus_kv_init, so c->kv's geometry is
 * known), then any number of copy_block / forward calls from the context's
 * one caller thread, then destroy (which must cope with a create that
 * failed half way).
 */
#ifndef OPUS_BACKEND_H
#define OPUS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "base/status.h"

struct opus_ctx;

struct opus_backend_ops
{
	const char *name;			/* "cpu", "cuda" */

	/*
	 * Build the run state for c (c->model, c->params, c->kv set; c->be
	 * NULL).  Weights are uploaded here; running out of device memory is
	 * an error here, never later.
	 */
	enum opus_status (*create) (struct opus_ctx *c, struct opus_error *err);

	/* Free whatever create made (also after a failed create). */
	void		(*destroy) (struct opus_ctx *c);

	/*
	 * One forward pass over a validated batch: every item's block table
	 * already covers its new positions (seq->n_pos is not advanced yet;
	 * the caller does that on success).  Writes the requested logits.
	 */
	enum opus_status (*forward) (struct opus_ctx *c, struct opus_batch_item *items,
								 int n_items, struct opus_error *err);

	/* Copy KV block src into dst (copy-on-write of a shared partial block). */
	enum opus_status (*copy_block) (struct opus_ctx *c, int32_t dst, int32_t src,
									struct opus_error *err);

	/* A line about the device, e.g. "cuda:0 (NVIDIA H200, sm_90, 140 GiB)". */
	void		(*describe) (const struct opus_ctx *c, char *buf, size_t len);
};

/* The CPU backend (forward.c's pass over the thread pool). */
extern const struct opus_backend_ops opus_backend_cpu;

/* The backend for a device, or an error if this build or machine has none. */
enum opus_status opus_backend_select(const struct opus_device *d,
									 const struct opus_backend_ops **out,
									 struct opus_error *err);

/* forward.c: the CPU backend's forward pass (the context's thread pool). */
enum opus_status opus_cpu_forward(struct opus_ctx *c, struct opus_batch_item *items,
								  int n_items, struct opus_error *err);

#ifdef OPUS_HAVE_CUDA
/* backend_cuda.c */
extern const struct opus_backend_ops opus_backend_cuda;

/* Number of CUDA devices (0 when there is none or no usable driver). */
int			opus_cuda_device_count(char *why, size_t why_len);
#endif

#endif							/* OPUS_BACKEND_H */
