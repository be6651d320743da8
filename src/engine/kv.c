/*
 * kv.c - the KV cache block pool and sequences' block tables.
 *
 * The pool is n_blocks fixed-size blocks; a block holds, for block_size
 * consecutive positions of one sequence, the K and V vectors (F16) of every
 * layer, laid out [layer][K|V][kv_head][slot][head_dim] so attention reads
 * one head's keys of a block contiguously.  Blocks carry reference counts so
 * several sequences (or the prefix cache) can share full blocks read-only;
 * opus_forward copies a shared block before writing into it.  Free blocks sit
 * on a stack.  Everything here is used by the context's single caller thread.
 */
#include "model_int.h"

#include <stdlib.h>
#include <string.h>

size_t
opus_kv_block_bytes(const struct opus_hparams *hp, int block_size)
{
	size_t		half = (size_t) hp->n_head_kv * block_size * hp->head_dim * sizeof(uint16_t);
	size_t		layer = 2 * half;

	/* keep every block 64-byte aligned */
	return ((size_t) hp->n_layer * layer + 63) / 64 * 64;
}

enum opus_status
opus_kv_init(struct opus_kv *kv, const struct opus_hparams *hp,
			 const struct opus_ctx_params *p, struct opus_error *err)
{
	unsigned long long total;

	memset(kv, 0, sizeof(*kv));
	kv->block_size = p->block_size;
	kv->n_blocks = p->n_blocks;
	kv->kv_half_bytes = (size_t) hp->n_head_kv * p->block_size * hp->head_dim * sizeof(uint16_t);
	kv->layer_bytes = 2 * kv->kv_half_bytes;
	kv->block_bytes = opus_kv_block_bytes(hp, p->block_size);
	if (opus_mul_overflow_u64(kv->block_bytes, (unsigned long long) p->n_blocks, &total) ||
		total > SIZE_MAX / 2)
		return opus_error_set(err, OPUS_ERR_NOMEM, "kv cache size overflows");
	if (p->kv_memory)
	{
		if (p->kv_memory_size < total)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "kv memory of %zu bytes is smaller than the %llu the pool needs",
								  p->kv_memory_size, total);
		kv->mem = p->kv_memory;
		kv->mem_owned = false;
	}
	else
	{
		kv->mem = aligned_alloc(64, (size_t) total);
		if (!kv->mem)
			return opus_error_set(err, OPUS_ERR_NOMEM,
								  "out of memory for a kv cache of %llu bytes", total);
		kv->mem_owned = true;
	}
	kv->refcount = calloc((size_t) p->n_blocks, sizeof(int32_t));
	kv->free_list = malloc((size_t) p->n_blocks * sizeof(int32_t));
	if (!kv->refcount || !kv->free_list)
	{
		opus_kv_destroy(kv);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for kv block tables");
	}
	/* stack: block 0 on top */
	for (int64_t i = 0; i < p->n_blocks; i++)
		kv->free_list[i] = (int32_t) (p->n_blocks - 1 - i);
	kv->n_free = p->n_blocks;
	return OPUS_OK;
}

void
opus_kv_destroy(struct opus_kv *kv)
{
	if (kv->mem_owned)
		free(kv->mem);
	free(kv->refcount);
	free(kv->free_list);
	memset(kv, 0, sizeof(*kv));
}

int32_t
opus_kv_alloc(struct opus_kv *kv)
{
	int32_t		id;

	if (kv->n_free == 0)
		return -1;
	id = kv->free_list[--kv->n_free];
	kv->refcount[id] = 1;
	return id;
}

void
opus_kv_retain(struct opus_kv *kv, int32_t id)
{
	kv->refcount[id]++;
}

void
opus_kv_unref(struct opus_kv *kv, int32_t id)
{
	if (--kv->refcount[id] == 0)
		kv->free_list[kv->n_free++] = id;
}

/* ---- sequences ---- */

void
opus_seq_init(struct opus_seq *s)
{
	memset(s, 0, sizeof(*s));
}

void
opus_seq_release(struct opus_ctx *c, struct opus_seq *s)
{
	for (int32_t i = 0; i < s->n_blocks; i++)
		opus_kv_unref(&c->kv, s->blocks[i]);
	free(s->blocks);
	memset(s, 0, sizeof(*s));
}

void
opus_seq_truncate(struct opus_ctx *c, struct opus_seq *s, int32_t n_pos)
{
	int32_t		keep;

	if (n_pos < 0)
		n_pos = 0;
	if (n_pos >= s->n_pos)
		return;
	keep = (n_pos + c->kv.block_size - 1) / c->kv.block_size;
	while (s->n_blocks > keep)
		opus_kv_unref(&c->kv, s->blocks[--s->n_blocks]);
	s->n_pos = n_pos;
}

enum opus_status
opus_seq_fork(struct opus_ctx *c, const struct opus_seq *src,
			  struct opus_seq *dst, struct opus_error *err)
{
	int32_t    *blocks = NULL;

	if (dst->n_blocks != 0 || dst->n_pos != 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "the fork target sequence is not empty");
	if (src->n_blocks > 0)
	{
		blocks = malloc((size_t) src->n_blocks * sizeof(int32_t));
		if (!blocks)
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for a block table");
		memcpy(blocks, src->blocks, (size_t) src->n_blocks * sizeof(int32_t));
		for (int32_t i = 0; i < src->n_blocks; i++)
			opus_kv_retain(&c->kv, blocks[i]);
	}
	free(dst->blocks);
	dst->blocks = blocks;
	dst->n_blocks = src->n_blocks;
	dst->n_blocks_cap = src->n_blocks;
	dst->n_pos = src->n_pos;
	return OPUS_OK;
}
