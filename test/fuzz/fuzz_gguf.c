/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader.
 *
 * Opens the input with opus_gguf_open_memory() and, when it is accepted,
 * walks every accessor: every key with every typed getter, every array
 * element (string arrays through opus_gguf_arr_str), every tensor's name
 * lookup and the first and last byte of its data.  Any out-of-bounds read,
 * overflow or leak is reported by ASan/UBSan.  Build: see test/fuzz/README.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"

static volatile uint64_t sink;

static size_t
elem_size(enum opus_gguf_type t)
{
	switch (t)
	{
		case OPUS_GGUF_UINT8:
		case OPUS_GGUF_INT8:
		case OPUS_GGUF_BOOL:
			return 1;
		case OPUS_GGUF_UINT16:
		case OPUS_GGUF_INT16:
			return 2;
		case OPUS_GGUF_UINT64:
		case OPUS_GGUF_INT64:
		case OPUS_GGUF_FLOAT64:
			return 8;
		default:
			return 4;
	}
}

static void
walk(const struct opus_gguf *g)
{
	struct opus_error err;
	uint64_t	sum = opus_gguf_version(g) + opus_gguf_alignment(g) +
		opus_gguf_size(g) + (uintptr_t) opus_gguf_base(g);

	for (int64_t i = 0; i < opus_gguf_n_kv(g); i++)
	{
		const char *key = opus_gguf_kv_key(g, i);
		const void *raw;
		size_t		rsz;
		uint32_t	u32;
		int64_t		i64;
		float		f;
		bool		b;
		const char *s;
		size_t		len;
		enum opus_gguf_type et;
		uint64_t	n;
		const void *data;

		if (opus_gguf_find_key(g, key) != i)
			abort();
		sum += strlen(key) + opus_gguf_kv_type(g, i);
		opus_gguf_kv_raw(g, i, &raw, &rsz);
		if (rsz > 0)
			sum += ((const uint8_t *) raw)[0] + ((const uint8_t *) raw)[rsz - 1];
		if (opus_gguf_get_u32(g, key, &u32, &err) == OPUS_OK)
			sum += u32;
		if (opus_gguf_get_i64(g, key, &i64, &err) == OPUS_OK)
			sum += (uint64_t) i64;
		if (opus_gguf_get_f32(g, key, &f, &err) == OPUS_OK)
			sum += f == f;
		if (opus_gguf_get_bool(g, key, &b, &err) == OPUS_OK)
			sum += b;
		if (opus_gguf_get_str(g, key, &s, &len, &err) == OPUS_OK && len > 0)
			sum += (uint8_t) s[0] + (uint8_t) s[len - 1];
		if (opus_gguf_get_arr(g, key, &et, &n, &data, &err) != OPUS_OK)
			continue;
		if (et == OPUS_GGUF_STRING)
		{
			for (uint64_t k = 0; k < n; k++)
			{
				if (opus_gguf_arr_str(g, i, k, &s, &len) != OPUS_OK)
					abort();
				if (len > 0)
					sum += (uint8_t) s[0] + (uint8_t) s[len - 1];
			}
			if (opus_gguf_arr_str(g, i, n, &s, &len) == OPUS_OK)
				abort();
		}
		else if (n > 0)
		{
			const uint8_t *p = data;

			sum += p[0] + p[n * elem_size(et) - 1];
		}
	}
	for (int64_t i = 0; i < opus_gguf_n_tensors(g); i++)
	{
		const struct opus_gguf_tensor *t = opus_gguf_tensor_at(g, i);
		const uint8_t *d = t->data;

		if (opus_gguf_find_tensor(g, t->name) != t || t->nbytes == 0)
			abort();
		sum += strlen(t->name) + d[0] + d[t->nbytes - 1] + (uint64_t) t->ne[3];
	}
	sink = sum;
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct opus_gguf *g = NULL;
	struct opus_error err;

	if (opus_gguf_open_memory(data, size, &g, &err) == OPUS_OK)
	{
		walk(g);
		opus_gguf_close(g);
	}
	return 0;
}
