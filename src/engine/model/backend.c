/*
 * backend.c - device names ("cpu", "auto", "cuda:N"), the choice of a
 * backend for a context, and the CPU backend's operation table.
 *
 * This file is compiled twice: plain (CPU-only engine, unit tests) and with
 * OPUS_HAVE_CUDA for an opus_engine linked with the CUDA backend
 * (engine.mk), so only that binary references CUDA symbols.
 */
#include "model/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_int.h"

enum opus_status
opus_device_parse(const char *name, struct opus_device *out, struct opus_error *err)
{
	struct opus_device d = {.kind = OPUS_DEVICE_CPU,.index = 0};

	if (!name || strcmp(name, "cpu") == 0)
	{
		*out = d;
		return OPUS_OK;
	}
	if (strcmp(name, "auto") == 0)
	{
#ifdef OPUS_HAVE_CUDA
		char		why[128];

		if (opus_cuda_device_count(why, sizeof(why)) > 0)
		{
			d.kind = OPUS_DEVICE_CUDA;
			d.index = 0;
		}
#endif
		*out = d;
		return OPUS_OK;
	}
	if (strcmp(name, "cuda") == 0)
		d.index = 0;
	else if (strncmp(name, "cuda:", 5) == 0 && name[5] != '\0' &&
			 strspn(name + 5, "0123456789") == strlen(name + 5) && strlen(name + 5) <= 3)
		d.index = atoi(name + 5);
	else
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "device \"%s\" is not \"cpu\", \"auto\" or \"cuda:N\"", name);
	d.kind = OPUS_DEVICE_CUDA;
#ifdef OPUS_HAVE_CUDA
	{
		char		why[128] = "";
		int			n = opus_cuda_device_count(why, sizeof(why));

		if (d.index >= n)
		{
			if (n == 0)
				return opus_error_set(err, OPUS_ERR_DEVICE,
									  "device \"%s\": no CUDA device is available (%s)",
									  name, why[0] ? why : "none found");
			return opus_error_set(err, OPUS_ERR_DEVICE,
								  "device \"%s\": there are only %d CUDA devices", name, n);
		}
	}
	*out = d;
	return OPUS_OK;
#else
	return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
						  "device \"%s\": this engine was built without CUDA support", name);
#endif
}

const char *
opus_device_name(const struct opus_device *d, char *buf, size_t len)
{
	if (d->kind == OPUS_DEVICE_CUDA)
		snprintf(buf, len, "cuda:%d", d->index);
	else
		snprintf(buf, len, "cpu");
	return buf;
}

enum opus_status
opus_backend_select(const struct opus_device *d, const struct opus_backend_ops **out,
					struct opus_error *err)
{
	if (d->kind == OPUS_DEVICE_CPU)
	{
		*out = &opus_backend_cpu;
		return OPUS_OK;
	}
	if (d->kind == OPUS_DEVICE_CUDA)
	{
#ifdef OPUS_HAVE_CUDA
		*out = &opus_backend_cuda;
		return OPUS_OK;
#else
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "device cuda:%d: this engine was built without CUDA support",
							  d->index);
#endif
	}
	return opus_error_set(err, OPUS_ERR_INVALID_ARG, "unknown device kind %d", (int) d->kind);
}

const char *
opus_ctx_describe(const struct opus_ctx *c, char *buf, size_t len)
{
	if (c->ops && c->ops->describe)
		c->ops->describe(c, buf, len);
	else
		snprintf(buf, len, "%s", c->ops ? c->ops->name : "none");
	return buf;
}

/* ---- the CPU backend ---- */

static enum opus_status
cpu_create(struct opus_ctx *c, struct opus_error *err)
{
	enum opus_status st;

	st = opus_pool_create(c->params.n_threads, &c->pool, err);
	if (st != OPUS_OK)
		return st;
	return opus_fwd_state_create(c, err);
}

static void
cpu_destroy(struct opus_ctx *c)
{
	opus_fwd_state_free(c->fs);
	c->fs = NULL;
	if (c->pool)
		opus_pool_free(c->pool);
	c->pool = NULL;
}

static enum opus_status
cpu_copy_block(struct opus_ctx *c, int32_t dst, int32_t src, struct opus_error *err)
{
	struct opus_kv *kv = &c->kv;

	memcpy(kv->mem + (size_t) dst * kv->block_bytes,
		   kv->mem + (size_t) src * kv->block_bytes, kv->block_bytes);
	return OPUS_OK;
}

static void
cpu_describe(const struct opus_ctx *c, char *buf, size_t len)
{
	snprintf(buf, len, "cpu (%s kernels, %d threads)", opus_qtype_cpu_variant(),
			 c->params.n_threads);
}

const struct opus_backend_ops opus_backend_cpu = {
	.name = "cpu",
	.create = cpu_create,
	.destroy = cpu_destroy,
	.forward = opus_cpu_forward,
	.copy_block = cpu_copy_block,
	.describe = cpu_describe,
};
