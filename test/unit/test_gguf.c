/*
 * test_gguf.c - the GGUF reader and writer.
 *
 * Builds small GGUF images in memory with a byte-level builder (so malformed
 * files can be made on purpose) and checks that every malformed class the
 * reader must reject is rejected with OPUS_ERR_FORMAT (or UNSUPPORTED) and a
 * message naming the problem; that truncation at every byte position fails;
 * that random mutations never crash (run under ASan/UBSan); that the writer's
 * output reopens identically; and, with $OPUS_MODEL, that the real model
 * opens and survives a writer round trip.
 *
 * Extra modes, used by test/tools/gguf_crosscheck.py to compare with the
 * python gguf package and llama.cpp:
 *   test_gguf --dump FILE          canonical dump of FILE (our reader)
 *   test_gguf --write-sample FILE  write a sample file with our writer
 *   test_gguf --copy IN OUT        copy IN through our writer
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "unit.h"

/* ---- byte builder ---- */

struct buf
{
	uint8_t    *p;
	size_t		n;
	size_t		cap;
};

static void
b_bytes(struct buf *b, const void *p, size_t n)
{
	if (b->n + n > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 256;

		while (cap < b->n + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		if (b->p == NULL)
		{
			fprintf(stderr, "out of memory\n");
			exit(2);
		}
		b->cap = cap;
	}
	if (n > 0)
		memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void
b_u8(struct buf *b, uint8_t v)
{
	b_bytes(b, &v, 1);
}

static void
b_u16(struct buf *b, uint16_t v)
{
	b_bytes(b, &v, 2);
}

static void
b_u32(struct buf *b, uint32_t v)
{
	b_bytes(b, &v, 4);
}

static void
b_u64(struct buf *b, uint64_t v)
{
	b_bytes(b, &v, 8);
}

static void
b_strn(struct buf *b, const char *s, size_t n)
{
	b_u64(b, n);
	b_bytes(b, s, n);
}

static void
b_str(struct buf *b, const char *s)
{
	b_strn(b, s, strlen(s));
}

static void
b_pad(struct buf *b, size_t align)
{
	while (b->n % align != 0)
		b_u8(b, 0);
}

static void
b_header(struct buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	b_bytes(b, "GGUF", 4);
	b_u32(b, version);
	b_u64(b, n_tensors);
	b_u64(b, n_kv);
}

static void
b_kv_u32(struct buf *b, const char *key, uint32_t v)
{
	b_str(b, key);
	b_u32(b, OPUS_GGUF_UINT32);
	b_u32(b, v);
}

static void
b_kv_str(struct buf *b, const char *key, const char *v)
{
	b_str(b, key);
	b_u32(b, OPUS_GGUF_STRING);
	b_str(b, v);
}

static void
b_tinfo(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
		uint32_t type, uint64_t offset)
{
	b_str(b, name);
	b_u32(b, n_dims);
	/* callers pass at most 5 dimensions, even with a larger n_dims */
	for (uint32_t d = 0; d < n_dims && d < 5; d++)
		b_u64(b, ne[d]);
	b_u32(b, type);
	b_u64(b, offset);
}

/* data: n bytes of a recognisable pattern */
static void
b_data(struct buf *b, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		b_u8(b, (uint8_t) (seed + i * 7));
}

static void
b_free(struct buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/*
 * The valid sample: every value type, a few arrays, three tensors (F32 8x2,
 * Q4_0 64x1, F16 16) whose data ends exactly at the end of the file (no
 * trailing padding), so every shorter length is invalid.
 */
#define SAMPLE_N_KV 20

static void
build_sample(struct buf *b, uint32_t version)
{
	uint64_t	ne_a[2] = {8, 2};
	uint64_t	ne_b[2] = {64, 1};
	uint64_t	ne_c[1] = {16};
	double		f64 = -2.5;
	float		f32 = 0.125f;

	b_header(b, version, 3, SAMPLE_N_KV);
	b_kv_str(b, "general.architecture", "llama");
	b_str(b, "t.u8");
	b_u32(b, OPUS_GGUF_UINT8);
	b_u8(b, 200);
	b_str(b, "t.i8");
	b_u32(b, OPUS_GGUF_INT8);
	b_u8(b, (uint8_t) -5);
	b_str(b, "t.u16");
	b_u32(b, OPUS_GGUF_UINT16);
	b_u16(b, 60000);
	b_str(b, "t.i16");
	b_u32(b, OPUS_GGUF_INT16);
	b_u16(b, (uint16_t) -300);
	b_kv_u32(b, "t.u32", 4000000000u);
	b_str(b, "t.i32");
	b_u32(b, OPUS_GGUF_INT32);
	b_u32(b, (uint32_t) -70000);
	b_str(b, "t.f32");
	b_u32(b, OPUS_GGUF_FLOAT32);
	b_bytes(b, &f32, 4);
	b_str(b, "t.bool");
	b_u32(b, OPUS_GGUF_BOOL);
	b_u8(b, 1);
	b_str(b, "t.u64");
	b_u32(b, OPUS_GGUF_UINT64);
	b_u64(b, UINT64_MAX);
	b_str(b, "t.i64");
	b_u32(b, OPUS_GGUF_INT64);
	b_u64(b, (uint64_t) INT64_MIN);
	b_str(b, "t.f64");
	b_u32(b, OPUS_GGUF_FLOAT64);
	b_bytes(b, &f64, 8);
	b_str(b, "t.arr_u32");
	b_u32(b, OPUS_GGUF_ARRAY);
	b_u32(b, OPUS_GGUF_UINT32);
	b_u64(b, 3);
	b_u32(b, 10);
	b_u32(b, 20);
	b_u32(b, 30);
	b_str(b, "t.arr_str");
	b_u32(b, OPUS_GGUF_ARRAY);
	b_u32(b, OPUS_GGUF_STRING);
	b_u64(b, 4);
	b_str(b, "hello");
	b_str(b, "");
	b_strn(b, "a\0b", 3);		/* NUL inside a string value is fine */
	b_str(b, "\xc3\xa9t\xc3\xa9");
	b_str(b, "t.arr_bool");
	b_u32(b, OPUS_GGUF_ARRAY);
	b_u32(b, OPUS_GGUF_BOOL);
	b_u64(b, 2);
	b_u8(b, 0);
	b_u8(b, 1);
	b_str(b, "t.arr_empty");
	b_u32(b, OPUS_GGUF_ARRAY);
	b_u32(b, OPUS_GGUF_INT64);
	b_u64(b, 0);
	b_kv_str(b, "t.str_empty", "");
	b_kv_str(b, "t.\xe2\x82\xac", "euro key");
	b_kv_u32(b, "general.alignment", 32);
	b_str(b, "t.arr_f64");
	b_u32(b, OPUS_GGUF_ARRAY);
	b_u32(b, OPUS_GGUF_FLOAT64);
	b_u64(b, 1);
	b_bytes(b, &f64, 8);

	b_tinfo(b, "a", 2, ne_a, OPUS_TYPE_F32, 0);
	b_tinfo(b, "blk.0.attn_q.weight", 2, ne_b, OPUS_TYPE_Q4_0, 64);
	b_tinfo(b, "c", 1, ne_c, OPUS_TYPE_F16, 128);
	b_pad(b, 32);
	b_data(b, 64, 1);
	b_data(b, 36, 2);
	b_pad(b, 32);
	b_data(b, 32, 3);
}

/* ---- helpers ---- */

static enum opus_status
open_buf(const struct buf *b, size_t len, struct opus_gguf **g,
		 struct opus_error *err)
{
	memset(err, 0, sizeof(*err));
	return opus_gguf_open_memory(b->p, len, g, err);
}

/* Expect opening b to fail with code and a message containing want. */
static void
expect_fail_len(const char *label, const struct buf *b, size_t len,
				enum opus_status code, const char *want)
{
	struct opus_gguf *g = (struct opus_gguf *) 1;
	struct opus_error err;
	enum opus_status st = open_buf(b, len, &g, &err);

	CHECK(st == code, "%s: status %s, expected %s (msg: %s)", label,
		  opus_status_name(st), opus_status_name(code), err.msg);
	CHECK(g == NULL, "%s: *out not NULL on failure", label);
	CHECK(st == OPUS_OK || err.code == st, "%s: err.code %d != status %d",
		  label, err.code, st);
	if (want)
		CHECK(strstr(err.msg, want) != NULL, "%s: message \"%s\" lacks \"%s\"",
			  label, err.msg, want);
	if (st == OPUS_OK)
		opus_gguf_close(g);
}

static void
expect_fail(const char *label, const struct buf *b, enum opus_status code,
			const char *want)
{
	expect_fail_len(label, b, b->n, code, want);
}

static void
expect_ok(const char *label, const struct buf *b)
{
	struct opus_gguf *g = NULL;
	struct opus_error err;
	enum opus_status st = open_buf(b, b->n, &g, &err);

	CHECK(st == OPUS_OK, "%s: expected ok, got %s: %s", label,
		  opus_status_name(st), err.msg);
	opus_gguf_close(g);
}

/*
 * Touch everything a successful open exposes; returns a checksum so the
 * compiler cannot drop the reads.  ASan/UBSan catch any bad access.
 */
static uint64_t
walk(const struct opus_gguf *g)
{
	uint64_t	sum = 0;
	struct opus_error err;

	sum += opus_gguf_version(g) + opus_gguf_alignment(g) + opus_gguf_size(g);
	for (int64_t i = 0; i < opus_gguf_n_kv(g); i++)
	{
		const char *key = opus_gguf_kv_key(g, i);
		enum opus_gguf_type type = opus_gguf_kv_type(g, i);
		const void *raw;
		size_t		rsz;
		uint32_t	u32;
		int64_t		i64;
		float		f;
		bool		bl;
		const char *s;
		size_t		len;
		enum opus_gguf_type et;
		uint64_t	n;
		const void *data;

		sum += strlen(key) + type;
		CHECK(opus_gguf_find_key(g, key) == i, "find_key(%s) != %lld", key,
			  (long long) i);
		opus_gguf_kv_raw(g, i, &raw, &rsz);
		for (size_t k = 0; k < rsz; k++)
			sum += ((const uint8_t *) raw)[k];
		if (opus_gguf_get_u32(g, key, &u32, &err) == OPUS_OK)
			sum += u32;
		if (opus_gguf_get_i64(g, key, &i64, &err) == OPUS_OK)
			sum += (uint64_t) i64;
		if (opus_gguf_get_f32(g, key, &f, &err) == OPUS_OK)
			sum += (uint64_t) (f == f);
		if (opus_gguf_get_bool(g, key, &bl, &err) == OPUS_OK)
			sum += bl;
		if (opus_gguf_get_str(g, key, &s, &len, &err) == OPUS_OK)
		{
			for (size_t k = 0; k < len; k++)
				sum += (uint8_t) s[k];
		}
		if (opus_gguf_get_arr(g, key, &et, &n, &data, &err) == OPUS_OK)
		{
			if (et == OPUS_GGUF_STRING)
			{
				for (uint64_t k = 0; k < n; k++)
				{
					CHECK(opus_gguf_arr_str(g, i, k, &s, &len) == OPUS_OK,
						  "arr_str %s[%llu]", key, (unsigned long long) k);
					if (len > 0)
						sum += (uint8_t) s[0] + (uint8_t) s[len - 1];
				}
				CHECK(opus_gguf_arr_str(g, i, n, &s, &len) != OPUS_OK,
					  "arr_str past the end");
			}
			else
			{
				const uint8_t *p = data;
				size_t		esz = et == OPUS_GGUF_UINT8 || et == OPUS_GGUF_INT8 || et == OPUS_GGUF_BOOL ? 1 :
					et == OPUS_GGUF_UINT16 || et == OPUS_GGUF_INT16 ? 2 :
					et == OPUS_GGUF_UINT64 || et == OPUS_GGUF_INT64 || et == OPUS_GGUF_FLOAT64 ? 8 : 4;

				if (n > 0)
					sum += p[0] + p[n * esz - 1];
			}
		}
	}
	for (int64_t i = 0; i < opus_gguf_n_tensors(g); i++)
	{
		const struct opus_gguf_tensor *t = opus_gguf_tensor_at(g, i);
		const uint8_t *d = t->data;

		CHECK(opus_gguf_find_tensor(g, t->name) == t, "find_tensor(%s)", t->name);
		CHECK(t->n_dims >= 1 && t->n_dims <= 4 && t->nbytes > 0,
			  "tensor %s shape", t->name);
		sum += d[0] + d[t->nbytes - 1] + (uint64_t) t->ne[0];
	}
	return sum;
}

/* ---- tests ---- */

static void
test_valid_sample(void)
{
	struct buf	b = {0};
	struct opus_gguf *g = NULL;
	struct opus_error err;
	uint32_t	u32;
	int64_t		i64;
	float		f;
	bool		bl;
	const char *s;
	size_t		len;
	enum opus_gguf_type et;
	uint64_t	n;
	const void *data;
	const void *raw;
	size_t		rsz;
	const struct opus_gguf_tensor *t;
	int64_t		idx;

	build_sample(&b, 3);
	CHECK(open_buf(&b, b.n, &g, &err) == OPUS_OK, "sample opens: %s", err.msg);
	if (g == NULL)
	{
		b_free(&b);
		return;
	}
	CHECK(opus_gguf_version(g) == 3, "version");
	CHECK(opus_gguf_alignment(g) == 32, "alignment");
	CHECK(opus_gguf_n_kv(g) == SAMPLE_N_KV, "n_kv %lld", (long long) opus_gguf_n_kv(g));
	CHECK(opus_gguf_n_tensors(g) == 3, "n_tensors");
	CHECK(opus_gguf_base(g) == b.p && opus_gguf_size(g) == b.n, "base/size");

	/* typed getters, including range checks */
	CHECK(opus_gguf_get_str(g, "general.architecture", &s, &len, &err) == OPUS_OK &&
		  len == 5 && memcmp(s, "llama", 5) == 0, "architecture");
	CHECK(opus_gguf_get_u32(g, "t.u8", &u32, &err) == OPUS_OK && u32 == 200, "u8 as u32");
	CHECK(opus_gguf_get_i64(g, "t.i8", &i64, &err) == OPUS_OK && i64 == -5, "i8 as i64");
	CHECK(opus_gguf_get_u32(g, "t.i8", &u32, &err) == OPUS_ERR_FORMAT &&
		  strstr(err.msg, "does not fit") != NULL, "negative i8 as u32: %s", err.msg);
	CHECK(opus_gguf_get_u32(g, "t.u16", &u32, &err) == OPUS_OK && u32 == 60000, "u16");
	CHECK(opus_gguf_get_i64(g, "t.i16", &i64, &err) == OPUS_OK && i64 == -300, "i16");
	CHECK(opus_gguf_get_u32(g, "t.u32", &u32, &err) == OPUS_OK && u32 == 4000000000u, "u32");
	CHECK(opus_gguf_get_i64(g, "t.i32", &i64, &err) == OPUS_OK && i64 == -70000, "i32");
	CHECK(opus_gguf_get_f32(g, "t.f32", &f, &err) == OPUS_OK && f == 0.125f, "f32");
	CHECK(opus_gguf_get_f32(g, "t.f64", &f, &err) == OPUS_OK && f == -2.5f, "f64 as f32");
	CHECK(opus_gguf_get_bool(g, "t.bool", &bl, &err) == OPUS_OK && bl, "bool");
	CHECK(opus_gguf_get_u32(g, "t.u64", &u32, &err) == OPUS_ERR_FORMAT, "u64 max as u32");
	CHECK(opus_gguf_get_i64(g, "t.u64", &i64, &err) == OPUS_ERR_FORMAT, "u64 max as i64");
	CHECK(opus_gguf_get_i64(g, "t.i64", &i64, &err) == OPUS_OK && i64 == INT64_MIN, "i64");
	CHECK(opus_gguf_get_u32(g, "t.f32", &u32, &err) == OPUS_ERR_FORMAT &&
		  strstr(err.msg, "has type float32") != NULL, "f32 as u32: %s", err.msg);
	CHECK(opus_gguf_get_f32(g, "t.u32", &f, &err) == OPUS_ERR_FORMAT, "u32 as f32");
	CHECK(opus_gguf_get_bool(g, "t.u8", &bl, &err) == OPUS_ERR_FORMAT, "u8 as bool");
	CHECK(opus_gguf_get_str(g, "t.arr_str", &s, &len, &err) == OPUS_ERR_FORMAT, "arr as str");
	CHECK(opus_gguf_get_u32(g, "t.bool", &u32, &err) == OPUS_ERR_FORMAT, "bool as u32");
	CHECK(opus_gguf_get_u32(g, "no.such.key", &u32, &err) == OPUS_ERR_NOT_FOUND &&
		  strstr(err.msg, "no.such.key") != NULL, "absent key: %s", err.msg);
	CHECK(opus_gguf_get_str(g, "t.str_empty", &s, &len, &err) == OPUS_OK && len == 0,
		  "empty string");
	CHECK(opus_gguf_find_key(g, "t.\xe2\x82\xac") >= 0, "utf-8 key");
	CHECK(opus_gguf_find_key(g, "t") == -1 && opus_gguf_find_key(g, "") == -1 &&
		  opus_gguf_find_key(g, "t.u32x") == -1, "prefixes are not keys");

	/* arrays */
	CHECK(opus_gguf_get_arr(g, "t.arr_u32", &et, &n, &data, &err) == OPUS_OK &&
		  et == OPUS_GGUF_UINT32 && n == 3, "arr_u32");
	if (et == OPUS_GGUF_UINT32 && n == 3)
	{
		uint32_t	v[3];

		memcpy(v, data, sizeof(v));
		CHECK(v[0] == 10 && v[1] == 20 && v[2] == 30, "arr_u32 values");
	}
	CHECK(opus_gguf_get_arr(g, "t.arr_empty", &et, &n, &data, &err) == OPUS_OK &&
		  et == OPUS_GGUF_INT64 && n == 0, "empty array");
	CHECK(opus_gguf_get_arr(g, "t.u32", &et, &n, &data, &err) == OPUS_ERR_FORMAT,
		  "scalar as array");
	idx = opus_gguf_find_key(g, "t.arr_str");
	CHECK(opus_gguf_get_arr(g, "t.arr_str", &et, &n, &data, &err) == OPUS_OK &&
		  et == OPUS_GGUF_STRING && n == 4, "arr_str");
	CHECK(opus_gguf_arr_str(g, idx, 0, &s, &len) == OPUS_OK && len == 5 &&
		  memcmp(s, "hello", 5) == 0, "arr_str[0]");
	CHECK(opus_gguf_arr_str(g, idx, 1, &s, &len) == OPUS_OK && len == 0, "arr_str[1]");
	CHECK(opus_gguf_arr_str(g, idx, 2, &s, &len) == OPUS_OK && len == 3 &&
		  memcmp(s, "a\0b", 3) == 0, "arr_str[2]");
	CHECK(opus_gguf_arr_str(g, idx, 3, &s, &len) == OPUS_OK && len == 5, "arr_str[3]");
	CHECK(opus_gguf_arr_str(g, idx, 4, &s, &len) != OPUS_OK, "arr_str[4] out of range");
	CHECK(opus_gguf_arr_str(g, opus_gguf_find_key(g, "t.arr_u32"), 0, &s, &len) != OPUS_OK,
		  "arr_str on a u32 array");
	CHECK(opus_gguf_arr_str(g, -1, 0, &s, &len) != OPUS_OK &&
		  opus_gguf_arr_str(g, SAMPLE_N_KV, 0, &s, &len) != OPUS_OK, "arr_str bad index");

	/* raw values */
	opus_gguf_kv_raw(g, opus_gguf_find_key(g, "general.architecture"), &raw, &rsz);
	CHECK(rsz == 13 && memcmp((const char *) raw + 8, "llama", 5) == 0, "raw string");
	opus_gguf_kv_raw(g, opus_gguf_find_key(g, "t.arr_u32"), &raw, &rsz);
	CHECK(rsz == 12 + 12, "raw array size %zu", rsz);
	opus_gguf_kv_raw(g, 99, &raw, &rsz);
	CHECK(raw == NULL && rsz == 0, "raw bad index");
	CHECK(opus_gguf_kv_key(g, -1) == NULL && opus_gguf_kv_key(g, SAMPLE_N_KV) == NULL,
		  "kv_key bad index");
	CHECK(opus_gguf_kv_type(g, SAMPLE_N_KV) == OPUS_GGUF_TYPE__COUNT, "kv_type bad index");

	/* tensors */
	t = opus_gguf_find_tensor(g, "blk.0.attn_q.weight");
	CHECK(t != NULL && t->type == OPUS_TYPE_Q4_0 && t->n_dims == 2 &&
		  t->ne[0] == 64 && t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1 &&
		  t->nbytes == 36 && t->offset == 64, "tensor b");
	if (t)
	{
		const uint8_t *d = t->data;

		CHECK(strcmp(t->name, "blk.0.attn_q.weight") == 0, "name copy is NUL-terminated");
		CHECK(d[0] == 2 && d[1] == 9 && d[35] == (uint8_t) (2 + 35 * 7), "tensor b data");
	}
	t = opus_gguf_find_tensor(g, "c");
	CHECK(t != NULL && t->nbytes == 32 && (const uint8_t *) t->data + 32 == b.p + b.n,
		  "last tensor ends at end of file");
	t = opus_gguf_tensor_at(g, 0);
	CHECK(t != NULL && strcmp(t->name, "a") == 0 && t->nbytes == 64 &&
		  ((uintptr_t) ((const uint8_t *) t->data - b.p)) % 32 == 0, "tensor a");
	CHECK(opus_gguf_tensor_at(g, 3) == NULL && opus_gguf_tensor_at(g, -1) == NULL,
		  "tensor_at bad index");
	CHECK(opus_gguf_find_tensor(g, "blk.0") == NULL &&
		  opus_gguf_find_tensor(g, "") == NULL, "absent tensor");
	walk(g);
	opus_gguf_close(g);

	/* version 2 is the same format */
	b_free(&b);
	build_sample(&b, 2);
	CHECK(open_buf(&b, b.n, &g, &err) == OPUS_OK && opus_gguf_version(g) == 2,
		  "v2 opens: %s", err.msg);
	opus_gguf_close(g);
	b_free(&b);
}

static void
test_truncation(void)
{
	struct buf	b = {0};
	int			bad = 0;

	build_sample(&b, 3);
	for (size_t len = 0; len < b.n; len++)
	{
		struct opus_gguf *g = NULL;
		struct opus_error err;
		enum opus_status st = open_buf(&b, len, &g, &err);

		if (st != OPUS_ERR_FORMAT || g != NULL || err.msg[0] == '\0')
		{
			if (bad++ < 5)
				CHECK(false, "truncated to %zu of %zu bytes: status %s (%s)",
					  len, b.n, opus_status_name(st), err.msg);
			opus_gguf_close(g);
		}
	}
	CHECK(bad == 0, "%d truncation lengths were not rejected", bad);
	/* the buffer copy at its exact length: ASan sees any read past the end */
	{
		for (size_t len = 0; len < b.n; len += 7)
		{
			uint8_t    *copy = malloc(len ? len : 1);
			struct opus_gguf *g = NULL;
			struct opus_error err;

			memcpy(copy, b.p, len);
			CHECK(opus_gguf_open_memory(copy, len, &g, &err) == OPUS_ERR_FORMAT,
				  "exact-size truncated copy %zu", len);
			opus_gguf_close(g);
			free(copy);
		}
	}
	b_free(&b);
}

static void
test_header(void)
{
	struct buf	b = {0};

	b_bytes(&b, "GGUX", 4);
	b_u32(&b, 3);
	b_u64(&b, 0);
	b_u64(&b, 0);
	expect_fail("bad magic", &b, OPUS_ERR_FORMAT, "bad magic");
	b_free(&b);

	b_header(&b, 1, 0, 0);
	expect_fail("version 1", &b, OPUS_ERR_UNSUPPORTED, "version 1");
	b_free(&b);
	b_header(&b, 0, 0, 0);
	expect_fail("version 0", &b, OPUS_ERR_FORMAT, "version 0");
	b_free(&b);
	b_header(&b, 4, 0, 0);
	expect_fail("version 4", &b, OPUS_ERR_FORMAT, "version 4");
	b_free(&b);
	b_header(&b, 0xFFFFFFFFu, 0, 0);
	expect_fail("version max", &b, OPUS_ERR_FORMAT, "version");
	b_free(&b);
	b_header(&b, 0x03000000u, 0, 0);
	expect_fail("big-endian", &b, OPUS_ERR_UNSUPPORTED, "big-endian");
	b_free(&b);

	/* an empty file and a header with no keys or tensors */
	expect_fail_len("empty", &b, 0, OPUS_ERR_FORMAT, NULL);
	b_header(&b, 3, 0, 0);
	expect_ok("minimal header", &b);
	b_free(&b);

	/* counts: huge, "negative", and just one more than the bytes allow */
	b_header(&b, 3, 0, UINT64_MAX);
	expect_fail("n_kv max", &b, OPUS_ERR_FORMAT, "metadata count");
	b_free(&b);
	b_header(&b, 3, 0, (uint64_t) INT64_MIN);
	expect_fail("n_kv negative", &b, OPUS_ERR_FORMAT, "metadata count");
	b_free(&b);
	b_header(&b, 3, UINT64_MAX, 0);
	expect_fail("n_tensors max", &b, OPUS_ERR_FORMAT, "tensor count");
	b_free(&b);
	b_header(&b, 3, (uint64_t) -1 / 2 + 1, 0);
	expect_fail("n_tensors negative", &b, OPUS_ERR_FORMAT, "tensor count");
	b_free(&b);
	b_header(&b, 3, 0, 2);
	b_kv_u32(&b, "k", 1);		/* room for one key only */
	expect_fail("n_kv one too many", &b, OPUS_ERR_FORMAT, NULL);
	b_free(&b);
	b_header(&b, 3, 1000000, 0);
	b_data(&b, 4096, 0);
	expect_fail("n_tensors vs size", &b, OPUS_ERR_FORMAT, "tensor count");
	b_free(&b);
}

static void
test_keys_and_values(void)
{
	struct buf	b = {0};

	/* oversized string lengths */
	b_header(&b, 3, 0, 1);
	b_u64(&b, UINT64_MAX);
	b_data(&b, 32, 0);
	expect_fail("key length max", &b, OPUS_ERR_FORMAT, "extends past end of file");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_u64(&b, 100);
	b_bytes(&b, "abcdefgh", 8);
	b_u32(&b, OPUS_GGUF_UINT8);
	b_u8(&b, 0);
	expect_fail("key length past end", &b, OPUS_ERR_FORMAT, "key 0");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_str(&b, "k");
	b_u32(&b, OPUS_GGUF_STRING);
	b_u64(&b, (uint64_t) INT64_MAX + 5);
	b_data(&b, 16, 0);
	expect_fail("string value length", &b, OPUS_ERR_FORMAT, "key \"k\": string");
	b_free(&b);

	/* key content */
	b_header(&b, 3, 0, 1);
	b_strn(&b, "a\0b", 3);
	b_u32(&b, OPUS_GGUF_UINT8);
	b_u8(&b, 0);
	expect_fail("key with NUL", &b, OPUS_ERR_FORMAT, "NUL");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_strn(&b, "", 0);
	b_u32(&b, OPUS_GGUF_UINT8);
	b_u8(&b, 0);
	b_data(&b, 8, 0);			/* so the count check passes */
	expect_fail("empty key", &b, OPUS_ERR_FORMAT, "empty");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_str(&b, "bad\xc0\xafkey");
	b_u32(&b, OPUS_GGUF_UINT8);
	b_u8(&b, 0);
	expect_fail("overlong utf-8 key", &b, OPUS_ERR_FORMAT, "UTF-8");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_str(&b, "\xed\xa0\x80");	/* a surrogate */
	b_u32(&b, OPUS_GGUF_UINT8);
	b_u8(&b, 0);
	expect_fail("surrogate key", &b, OPUS_ERR_FORMAT, "UTF-8");
	b_free(&b);

	/* value types */
	b_header(&b, 3, 0, 1);
	b_str(&b, "k");
	b_u32(&b, 13);
	b_u64(&b, 0);
	expect_fail("value type 13", &b, OPUS_ERR_FORMAT, "unknown value type 13");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_str(&b, "k");
	b_u32(&b, 0xFFFFFFFFu);
	b_u64(&b, 0);
	expect_fail("value type max", &b, OPUS_ERR_FORMAT, "unknown value type");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_str(&b, "k");
	b_u32(&b, OPUS_GGUF_BOOL);
	b_u8(&b, 2);
	expect_fail("bool 2", &b, OPUS_ERR_FORMAT, "not 0 or 1");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_str(&b, "k");
	b_u32(&b, OPUS_GGUF_UINT64);
	b_u32(&b, 0);				/* only 4 of 8 bytes */
	expect_fail("short u64", &b, OPUS_ERR_FORMAT, "truncated");
	b_free(&b);

	/* arrays */
	b_header(&b, 3, 0, 1);
	b_str(&b, "k");
	b_u32(&b, OPUS_GGUF_ARRAY);
	b_u32(&b, OPUS_GGUF_ARRAY);
	b_u64(&b, 1);
	b_u32(&b, OPUS_GGUF_UINT8);
	b_u64(&b, 1);
	b_u8(&b, 0);
	expect_fail("nested array", &b, OPUS_ERR_FORMAT, "arrays of arrays");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_str(&b, "k");
	b_u32(&b, OPUS_GGUF_ARRAY);
	b_u32(&b, 77);
	b_u64(&b, 1);
	b_u8(&b, 0);
	expect_fail("array of unknown type", &b, OPUS_ERR_FORMAT, "unknown value type 77");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_str(&b, "k");
	b_u32(&b, OPUS_GGUF_ARRAY);
	b_u32(&b, OPUS_GGUF_UINT32);
	b_u64(&b, (uint64_t) 1 << 62);	/* 2^62 * 4 wraps to 0 */
	b_data(&b, 64, 0);
	expect_fail("array count overflow", &b, OPUS_ERR_FORMAT, "extends past end of file");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_str(&b, "k");
	b_u32(&b, OPUS_GGUF_ARRAY);
	b_u32(&b, OPUS_GGUF_UINT16);
	b_u64(&b, 5);
	b_data(&b, 9, 0);
	expect_fail("array one byte short", &b, OPUS_ERR_FORMAT, "extends past end of file");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_str(&b, "k");
	b_u32(&b, OPUS_GGUF_ARRAY);
	b_u32(&b, OPUS_GGUF_STRING);
	b_u64(&b, UINT64_MAX / 8);
	b_data(&b, 64, 0);
	expect_fail("string array count", &b, OPUS_ERR_FORMAT, "strings extends past end");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_str(&b, "k");
	b_u32(&b, OPUS_GGUF_ARRAY);
	b_u32(&b, OPUS_GGUF_STRING);
	b_u64(&b, 2);
	b_str(&b, "x");
	b_u64(&b, UINT64_MAX);
	b_data(&b, 8, 0);
	expect_fail("string array element length", &b, OPUS_ERR_FORMAT, "string 1");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_str(&b, "k");
	b_u32(&b, OPUS_GGUF_ARRAY);
	b_u32(&b, OPUS_GGUF_BOOL);
	b_u64(&b, 3);
	b_u8(&b, 1);
	b_u8(&b, 0);
	b_u8(&b, 7);
	expect_fail("bool array element", &b, OPUS_ERR_FORMAT, "bool element 2");
	b_free(&b);

	/* duplicates */
	b_header(&b, 3, 0, 2);
	b_kv_u32(&b, "dup.key", 1);
	b_kv_str(&b, "dup.key", "x");
	expect_fail("duplicate key", &b, OPUS_ERR_FORMAT, "duplicate key \"dup.key\"");
	b_free(&b);
}

static void
test_alignment(void)
{
	struct buf	b = {0};
	uint64_t	ne[1] = {16};
	struct opus_gguf *g = NULL;
	struct opus_error err;
	static const uint32_t bad[] = {0, 3, 48, 1u << 21, 0x80000000u};
	char		label[64];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
	{
		b_header(&b, 3, 0, 1);
		b_kv_u32(&b, "general.alignment", bad[i]);
		snprintf(label, sizeof(label), "alignment %u", bad[i]);
		expect_fail(label, &b, OPUS_ERR_FORMAT, "general.alignment");
		b_free(&b);
	}
	b_header(&b, 3, 0, 1);
	b_str(&b, "general.alignment");
	b_u32(&b, OPUS_GGUF_UINT64);
	b_u64(&b, 32);
	expect_fail("alignment as u64", &b, OPUS_ERR_FORMAT, "expected uint32");
	b_free(&b);
	b_header(&b, 3, 0, 1);
	b_kv_str(&b, "general.alignment", "32");
	expect_fail("alignment as string", &b, OPUS_ERR_FORMAT, "expected uint32");
	b_free(&b);

	/* a valid alignment of 64 moves the data section */
	b_header(&b, 3, 1, 1);
	b_kv_u32(&b, "general.alignment", 64);
	b_tinfo(&b, "t", 1, ne, OPUS_TYPE_F32, 0);
	b_pad(&b, 64);
	b_data(&b, 64, 0);
	CHECK(open_buf(&b, b.n, &g, &err) == OPUS_OK && opus_gguf_alignment(g) == 64 &&
		  ((const uint8_t *) opus_gguf_tensor_at(g, 0)->data - b.p) % 64 == 0,
		  "alignment 64: %s", err.msg);
	opus_gguf_close(g);
	b_free(&b);

	/* the same tensor at offset 32 is misaligned for 64 */
	b_header(&b, 3, 1, 1);
	b_kv_u32(&b, "general.alignment", 64);
	b_tinfo(&b, "t", 1, ne, OPUS_TYPE_F32, 32);
	b_pad(&b, 64);
	b_data(&b, 128, 0);
	expect_fail("offset 32 with alignment 64", &b, OPUS_ERR_FORMAT,
				"tensor \"t\": offset 32 is not a multiple of the alignment 64");
	b_free(&b);
}

/* One tensor with the given shape/type/offset and enough data for 256 bytes. */
static void
one_tensor(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
		   uint32_t type, uint64_t offset, size_t data_bytes)
{
	b_header(b, 3, 1, 0);
	b_tinfo(b, name, n_dims, ne, type, offset);
	b_pad(b, 32);
	b_data(b, data_bytes, 0);
}

static void
test_tensors(void)
{
	struct buf	b = {0};
	uint64_t	ne[5] = {32, 1, 1, 1, 1};
	uint64_t	ne2[2];

	one_tensor(&b, "ok", 1, ne, OPUS_TYPE_F32, 0, 128);
	expect_ok("one tensor", &b);
	b_free(&b);

	one_tensor(&b, "t", 0, ne, OPUS_TYPE_F32, 0, 128);
	expect_fail("n_dims 0", &b, OPUS_ERR_FORMAT, "n_dims 0");
	b_free(&b);
	one_tensor(&b, "t", 5, ne, OPUS_TYPE_F32, 0, 128);
	expect_fail("n_dims 5", &b, OPUS_ERR_FORMAT, "n_dims 5");
	b_free(&b);
	one_tensor(&b, "t", 0xFFFFFFFFu, ne, OPUS_TYPE_F32, 0, 128);
	expect_fail("n_dims max", &b, OPUS_ERR_FORMAT, "n_dims");
	b_free(&b);

	ne2[0] = 32;
	ne2[1] = 0;
	one_tensor(&b, "t", 2, ne2, OPUS_TYPE_F32, 0, 128);
	expect_fail("dimension 0", &b, OPUS_ERR_FORMAT, "dimension 1 is 0");
	b_free(&b);
	ne2[1] = (uint64_t) -4;
	one_tensor(&b, "t", 2, ne2, OPUS_TYPE_F32, 0, 128);
	expect_fail("negative dimension", &b, OPUS_ERR_FORMAT, "dimension 1 is -4");
	b_free(&b);

	/* element count overflow, and byte size overflow with a fitting count */
	ne2[0] = (uint64_t) 1 << 32;
	ne2[1] = (uint64_t) 1 << 32;
	one_tensor(&b, "t", 2, ne2, OPUS_TYPE_F32, 0, 128);
	expect_fail("element overflow", &b, OPUS_ERR_FORMAT, "element count overflows");
	b_free(&b);
	ne2[0] = (uint64_t) 1 << 31;
	ne2[1] = (uint64_t) 1 << 31;
	one_tensor(&b, "t", 2, ne2, OPUS_TYPE_F32, 0, 128);
	expect_fail("byte overflow", &b, OPUS_ERR_FORMAT, "byte size overflows");
	b_free(&b);
	ne2[0] = (uint64_t) 1 << 61;
	one_tensor(&b, "t", 1, ne2, OPUS_TYPE_F64, 0, 128);
	expect_fail("byte overflow 1-D", &b, OPUS_ERR_FORMAT, "byte size overflows");
	b_free(&b);
	/* fits in int64 but is far larger than the file */
	ne2[0] = (uint64_t) 1 << 40;
	one_tensor(&b, "big", 1, ne2, OPUS_TYPE_F32, 0, 128);
	expect_fail("huge tensor", &b, OPUS_ERR_FORMAT,
				"tensor \"big\": data extends past end of file");
	b_free(&b);

	/* types */
	one_tensor(&b, "t", 1, ne, 4, 0, 128);
	expect_fail("removed type 4", &b, OPUS_ERR_FORMAT, "unknown tensor type 4");
	b_free(&b);
	one_tensor(&b, "t", 1, ne, OPUS_TYPE__COUNT, 0, 128);
	expect_fail("type 40", &b, OPUS_ERR_FORMAT, "unknown tensor type 40");
	b_free(&b);
	one_tensor(&b, "t", 1, ne, 0xFFFFFFFFu, 0, 128);
	expect_fail("type max", &b, OPUS_ERR_FORMAT, "unknown tensor type 4294967295");
	b_free(&b);
	ne2[0] = 48;
	one_tensor(&b, "t", 1, ne2, OPUS_TYPE_Q4_0, 0, 128);
	expect_fail("row not multiple of block", &b, OPUS_ERR_FORMAT,
				"row length 48 is not a multiple");
	b_free(&b);
	ne2[0] = 128;
	one_tensor(&b, "t", 1, ne2, OPUS_TYPE_Q4_K, 0, 256);
	expect_fail("row not multiple of 256", &b, OPUS_ERR_FORMAT, "Q4_K block size 256");
	b_free(&b);

	/* offsets */
	one_tensor(&b, "t", 1, ne, OPUS_TYPE_F32, 8, 256);
	expect_fail("misaligned offset", &b, OPUS_ERR_FORMAT, "not a multiple of the alignment");
	b_free(&b);
	one_tensor(&b, "blk.0.attn_q.weight", 1, ne, OPUS_TYPE_F32, 128, 128);
	expect_fail("past end", &b, OPUS_ERR_FORMAT,
				"tensor \"blk.0.attn_q.weight\": data extends past end of file");
	b_free(&b);
	one_tensor(&b, "t", 1, ne, OPUS_TYPE_F32, UINT64_MAX - 31, 128);
	expect_fail("offset wraps", &b, OPUS_ERR_FORMAT, "past end of file");
	b_free(&b);
	one_tensor(&b, "t", 1, ne, OPUS_TYPE_F32, 0, 127);
	expect_fail("one byte short", &b, OPUS_ERR_FORMAT, "past end of file");
	b_free(&b);

	/* no data section at all although a tensor is declared */
	b_header(&b, 3, 1, 0);
	b_tinfo(&b, "t", 1, ne, OPUS_TYPE_F32, 0);
	expect_fail("no data section", &b, OPUS_ERR_FORMAT, NULL);
	b_free(&b);

	/* overlap: same offset, and a partial overlap */
	b_header(&b, 3, 2, 0);
	b_tinfo(&b, "x", 1, ne, OPUS_TYPE_F32, 0);
	b_tinfo(&b, "y", 1, ne, OPUS_TYPE_F32, 0);
	b_pad(&b, 32);
	b_data(&b, 256, 0);
	expect_fail("same offset", &b, OPUS_ERR_FORMAT, "overlaps");
	b_free(&b);
	b_header(&b, 3, 2, 0);
	b_tinfo(&b, "x", 1, ne, OPUS_TYPE_F32, 96);
	b_tinfo(&b, "y", 1, ne, OPUS_TYPE_F32, 32);	/* 32..160 overlaps 96.. */
	b_pad(&b, 32);
	b_data(&b, 256, 0);
	expect_fail("partial overlap", &b, OPUS_ERR_FORMAT,
				"tensor \"x\": data overlaps tensor \"y\"");
	b_free(&b);
	/* adjacent, out of order, is fine */
	b_header(&b, 3, 2, 0);
	b_tinfo(&b, "x", 1, ne, OPUS_TYPE_F32, 128);
	b_tinfo(&b, "y", 1, ne, OPUS_TYPE_F32, 0);
	b_pad(&b, 32);
	b_data(&b, 256, 0);
	expect_ok("adjacent out of order", &b);
	b_free(&b);

	/* names */
	b_header(&b, 3, 2, 0);
	b_tinfo(&b, "same", 1, ne, OPUS_TYPE_F32, 0);
	b_tinfo(&b, "same", 1, ne, OPUS_TYPE_F32, 128);
	b_pad(&b, 32);
	b_data(&b, 256, 0);
	expect_fail("duplicate tensor", &b, OPUS_ERR_FORMAT, "duplicate tensor name \"same\"");
	b_free(&b);
	b_header(&b, 3, 1, 0);
	b_strn(&b, "ab\0", 3);
	b_u32(&b, 1);
	b_u64(&b, 32);
	b_u32(&b, OPUS_TYPE_F32);
	b_u64(&b, 0);
	b_pad(&b, 32);
	b_data(&b, 128, 0);
	expect_fail("tensor name with NUL", &b, OPUS_ERR_FORMAT, "tensor 0: name contains a NUL");
	b_free(&b);
	one_tensor(&b, "", 1, ne, OPUS_TYPE_F32, 0, 128);
	expect_fail("empty tensor name", &b, OPUS_ERR_FORMAT, "empty name");
	b_free(&b);
	one_tensor(&b, "\xff", 1, ne, OPUS_TYPE_F32, 0, 128);
	expect_fail("invalid utf-8 tensor name", &b, OPUS_ERR_FORMAT, "UTF-8");
	b_free(&b);
	b_header(&b, 3, 1, 0);
	b_u64(&b, 1000);
	b_data(&b, 40, 0);
	expect_fail("tensor name past end", &b, OPUS_ERR_FORMAT, "tensor 0: name of 1000 bytes");
	b_free(&b);
}

/* A small deterministic PRNG (xorshift64*). */
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint64_t
rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}

static void
test_mutations(void)
{
	struct buf	b = {0};
	uint8_t    *m;
	int			opened = 0;
	int			iters = 30000;
	static const uint64_t special[] = {
		0, 1, 2, 3, 4, 5, 8, 9, 12, 13, 31, 32, 33, 255, 256, 0x7FFFFFFF,
		0x80000000ULL, 0xFFFFFFFFULL, 0x100000000ULL, (uint64_t) INT64_MAX,
		(uint64_t) INT64_MIN, UINT64_MAX, UINT64_MAX - 7,
	};

	build_sample(&b, 3);
	for (int it = 0; it < iters; it++)
	{
		size_t		len = b.n;
		int			nmut = 1 + (int) (rng() % 4);
		struct opus_gguf *g = NULL;
		struct opus_error err;

		if (rng() % 8 == 0)
			len = (size_t) (rng() % (b.n + 1));
		m = malloc(len ? len : 1);
		memcpy(m, b.p, len);
		for (int k = 0; k < nmut && len > 0; k++)
		{
			size_t		pos = (size_t) (rng() % len);

			switch (rng() % 3)
			{
				case 0:
					m[pos] = (uint8_t) rng();
					break;
				case 1:
					m[pos] ^= (uint8_t) (1u << (rng() % 8));
					break;
				default:
					{
						uint64_t	v = special[rng() % (sizeof(special) / sizeof(special[0]))];
						size_t		w = (rng() % 2) ? 8 : 4;

						if (len - pos >= w)
							memcpy(m + pos, &v, w);
					}
			}
		}
		if (opus_gguf_open_memory(m, len, &g, &err) == OPUS_OK)
		{
			opened++;
			walk(g);
			opus_gguf_close(g);
		}
		else
		{
			if (!(g == NULL && err.msg[0] != '\0'))
				CHECK(false, "mutation %d: failure without message", it);
		}
		free(m);
	}
	CHECK(opened > 0 && opened < iters, "mutations: %d of %d opened", opened, iters);
	printf("mutations: %d of %d mutated files opened\n", opened, iters);
	b_free(&b);
}

static char tmp_path[256];

static const char *
tmp_file(const char *tag)
{
	snprintf(tmp_path, sizeof(tmp_path), "/tmp/opus_test_gguf_%d_%s.gguf",
			 (int) getpid(), tag);
	return tmp_path;
}

static void
test_writer(void)
{
	struct opus_gguf_writer *w;
	struct opus_error err;
	struct opus_gguf *g = NULL;
	float		a[2][32];
	uint8_t		q[3][18];		/* Q4_0, ne = {32, 3} */
	int64_t		ne_a[2] = {32, 2};
	int64_t		ne_q[2] = {32, 3};
	uint8_t		arr[12 + 8];
	uint32_t	u32;
	const char *s;
	size_t		len;
	const char *path = tmp_file("writer");

	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 32; j++)
			a[i][j] = (float) (i * 32 + j) * 0.5f;
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 18; j++)
			q[i][j] = (uint8_t) (i * 18 + j);

	CHECK(opus_gguf_writer_new(3) == NULL, "writer alignment 3");
	CHECK(opus_gguf_writer_new(1u << 21) == NULL, "writer alignment 2 MiB");
	w = opus_gguf_writer_new(64);
	CHECK(w != NULL, "writer_new(64)");
	if (w == NULL)
		return;
	CHECK(opus_gguf_writer_add_str(w, "general.architecture", "llama", &err) == OPUS_OK, "add_str");
	CHECK(opus_gguf_writer_add_u32(w, "x.n", 42, &err) == OPUS_OK, "add_u32");
	{
		uint32_t	et = OPUS_GGUF_INT16;
		uint64_t	n = 4;
		int16_t		v[4] = {-1, 2, -3, 4};

		memcpy(arr, &et, 4);
		memcpy(arr + 4, &n, 8);
		memcpy(arr + 12, v, 8);
	}
	CHECK(opus_gguf_writer_add_raw(w, "x.arr", OPUS_GGUF_ARRAY, arr, sizeof(arr), &err) == OPUS_OK,
		  "add_raw array: %s", err.msg);
	/* rejected additions */
	CHECK(opus_gguf_writer_add_u32(w, "x.n", 1, &err) != OPUS_OK &&
		  strstr(err.msg, "duplicate key") != NULL, "duplicate key: %s", err.msg);
	CHECK(opus_gguf_writer_add_u32(w, "", 1, &err) != OPUS_OK, "empty key");
	CHECK(opus_gguf_writer_add_raw(w, "x.bad", OPUS_GGUF_ARRAY, arr, sizeof(arr) - 1, &err) == OPUS_ERR_FORMAT,
		  "short raw array: %s", err.msg);
	CHECK(opus_gguf_writer_add_raw(w, "x.bad", OPUS_GGUF_UINT32, arr, 8, &err) == OPUS_ERR_FORMAT,
		  "long raw u32: %s", err.msg);
	CHECK(opus_gguf_writer_add_raw(w, "x.bad", (enum opus_gguf_type) 13, arr, 1, &err) == OPUS_ERR_FORMAT,
		  "raw type 13: %s", err.msg);
	CHECK(opus_gguf_writer_add_u32(w, "general.alignment", 32, &err) == OPUS_ERR_INVALID_ARG,
		  "alignment key mismatch: %s", err.msg);
	CHECK(opus_gguf_writer_add_tensor(w, "a", 2, ne_a, OPUS_TYPE_F32, a, sizeof(a), &err) == OPUS_OK,
		  "add_tensor a: %s", err.msg);
	CHECK(opus_gguf_writer_add_tensor(w, "q", 2, ne_q, OPUS_TYPE_Q4_0, q, sizeof(q), &err) == OPUS_OK,
		  "add_tensor q: %s", err.msg);
	CHECK(opus_gguf_writer_add_tensor(w, "a", 2, ne_a, OPUS_TYPE_F32, a, sizeof(a), &err) == OPUS_ERR_INVALID_ARG,
		  "duplicate tensor");
	CHECK(opus_gguf_writer_add_tensor(w, "z", 2, ne_a, OPUS_TYPE_F32, a, sizeof(a) - 4, &err) == OPUS_ERR_INVALID_ARG &&
		  strstr(err.msg, "expected 256") != NULL, "wrong nbytes: %s", err.msg);
	CHECK(opus_gguf_writer_add_tensor(w, "z", 2, ne_a, OPUS_TYPE_Q4_K, a, sizeof(a), &err) == OPUS_ERR_INVALID_ARG,
		  "row not multiple of block");
	CHECK(opus_gguf_writer_add_tensor(w, "z", 2, ne_a, (enum opus_qtype) 5, a, sizeof(a), &err) == OPUS_ERR_INVALID_ARG,
		  "unknown type");
	CHECK(opus_gguf_writer_add_tensor(w, "z", 5, ne_a, OPUS_TYPE_F32, a, sizeof(a), &err) == OPUS_ERR_INVALID_ARG,
		  "n_dims 5");
	CHECK(opus_gguf_writer_add_tensor(w, "0123456789012345678901234567890123456789012345678901234567890123",
									  2, ne_a, OPUS_TYPE_F32, a, sizeof(a), &err) == OPUS_ERR_INVALID_ARG,
		  "64-byte name");
	CHECK(opus_gguf_writer_write(w, "/nonexistent-dir/x.gguf", &err) == OPUS_ERR_IO,
		  "write to a missing directory");
	CHECK(opus_gguf_writer_write(w, path, &err) == OPUS_OK, "write: %s", err.msg);
	opus_gguf_writer_free(w);

	CHECK(opus_gguf_open(path, &g, &err) == OPUS_OK, "reopen: %s", err.msg);
	if (g)
	{
		const struct opus_gguf_tensor *ta = opus_gguf_find_tensor(g, "a");
		const struct opus_gguf_tensor *tq = opus_gguf_find_tensor(g, "q");
		enum opus_gguf_type et;
		uint64_t	n;
		const void *data;

		CHECK(opus_gguf_version(g) == 3 && opus_gguf_alignment(g) == 64, "v3, alignment 64");
		CHECK(opus_gguf_n_kv(g) == 4, "3 keys + general.alignment, got %lld",
			  (long long) opus_gguf_n_kv(g));
		CHECK(opus_gguf_get_u32(g, "general.alignment", &u32, &err) == OPUS_OK && u32 == 64,
			  "general.alignment written");
		CHECK(opus_gguf_get_str(g, "general.architecture", &s, &len, &err) == OPUS_OK &&
			  len == 5 && memcmp(s, "llama", 5) == 0, "string round trip");
		CHECK(opus_gguf_get_u32(g, "x.n", &u32, &err) == OPUS_OK && u32 == 42, "u32 round trip");
		CHECK(opus_gguf_get_arr(g, "x.arr", &et, &n, &data, &err) == OPUS_OK &&
			  et == OPUS_GGUF_INT16 && n == 4 && memcmp(data, arr + 12, 8) == 0,
			  "array round trip");
		CHECK(ta && ta->n_dims == 2 && ta->ne[0] == 32 && ta->ne[1] == 2 &&
			  ta->type == OPUS_TYPE_F32 && ta->nbytes == sizeof(a) &&
			  memcmp(ta->data, a, sizeof(a)) == 0, "tensor a round trip");
		CHECK(tq && tq->type == OPUS_TYPE_Q4_0 && tq->nbytes == sizeof(q) &&
			  memcmp(tq->data, q, sizeof(q)) == 0 && tq->offset == 256,
			  "tensor q round trip (offset %llu)", tq ? (unsigned long long) tq->offset : 0);
		CHECK(((const uint8_t *) ta->data - (const uint8_t *) opus_gguf_base(g)) % 64 == 0,
			  "data section aligned to 64");
		CHECK(opus_gguf_size(g) % 64 == 0, "last tensor padded");
		opus_gguf_close(g);
	}
	unlink(path);

	/* default alignment: general.alignment is not written */
	w = opus_gguf_writer_new(0);
	CHECK(opus_gguf_writer_add_u32(w, "x.n", 1, &err) == OPUS_OK, "add");
	CHECK(opus_gguf_writer_write(w, path, &err) == OPUS_OK, "write: %s", err.msg);
	opus_gguf_writer_free(w);
	CHECK(opus_gguf_open(path, &g, &err) == OPUS_OK && opus_gguf_n_kv(g) == 1 &&
		  opus_gguf_alignment(g) == 32 && opus_gguf_n_tensors(g) == 0,
		  "default alignment file: %s", err.msg);
	opus_gguf_close(g);
	unlink(path);

	CHECK(opus_gguf_open("/nonexistent-dir/x.gguf", &g, &err) == OPUS_ERR_IO &&
		  g == NULL && strstr(err.msg, "cannot open") != NULL, "open missing file");
	CHECK(opus_gguf_open("/tmp", &g, &err) == OPUS_ERR_IO, "open a directory");
}

/* Copy every key and tensor of g into a writer and write it to path. */
static enum opus_status
copy_file(const struct opus_gguf *g, const char *path, struct opus_error *err)
{
	struct opus_gguf_writer *w = opus_gguf_writer_new((uint32_t) opus_gguf_alignment(g));
	enum opus_status st = OPUS_OK;

	if (w == NULL)
		return opus_error_set(err, OPUS_ERR_NOMEM, "writer_new failed");
	for (int64_t i = 0; i < opus_gguf_n_kv(g) && st == OPUS_OK; i++)
	{
		const void *raw;
		size_t		rsz;

		opus_gguf_kv_raw(g, i, &raw, &rsz);
		st = opus_gguf_writer_add_raw(w, opus_gguf_kv_key(g, i),
									  opus_gguf_kv_type(g, i), raw, rsz, err);
	}
	for (int64_t i = 0; i < opus_gguf_n_tensors(g) && st == OPUS_OK; i++)
	{
		const struct opus_gguf_tensor *t = opus_gguf_tensor_at(g, i);

		st = opus_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type,
										 t->data, t->nbytes, err);
	}
	if (st == OPUS_OK)
		st = opus_gguf_writer_write(w, path, err);
	opus_gguf_writer_free(w);
	return st;
}

static void
test_real_model(void)
{
	const char *path = unit_model_path();
	struct opus_gguf *g = NULL;
	struct opus_gguf *g2 = NULL;
	struct opus_error err;
	const char *s;
	size_t		len;
	enum opus_gguf_type et;
	uint64_t	n;
	const void *data;
	uint32_t	u32;
	const char *copy = tmp_file("copy");

	if (path == NULL)
	{
		printf("skip: OPUS_MODEL not set\n");
		return;
	}
	CHECK(opus_gguf_open(path, &g, &err) == OPUS_OK, "open %s: %s", path, err.msg);
	if (g == NULL)
		return;
	CHECK(opus_gguf_version(g) == 3, "model version");
	CHECK(opus_gguf_n_tensors(g) == 272, "model tensors %lld", (long long) opus_gguf_n_tensors(g));
	CHECK(opus_gguf_get_str(g, "general.architecture", &s, &len, &err) == OPUS_OK &&
		  len == 5 && memcmp(s, "llama", 5) == 0, "architecture");
	CHECK(opus_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data, &err) == OPUS_OK &&
		  et == OPUS_GGUF_STRING && n == 49152, "tokens: %llu", (unsigned long long) n);
	CHECK(opus_gguf_arr_str(g, opus_gguf_find_key(g, "tokenizer.ggml.tokens"), 0, &s, &len) == OPUS_OK &&
		  len == 13 && memcmp(s, "<|endoftext|>", 13) == 0, "token 0 is <|endoftext|>");
	CHECK(opus_gguf_get_u32(g, "llama.embedding_length", &u32, &err) == OPUS_OK && u32 == 576,
		  "n_embd");
	CHECK(opus_gguf_get_u32(g, "llama.block_count", &u32, &err) == OPUS_OK && u32 == 30,
		  "n_layer");
	CHECK(opus_gguf_find_tensor(g, "blk.29.ffn_down.weight") != NULL &&
		  opus_gguf_find_tensor(g, "token_embd.weight") != NULL, "tensor lookup");
	walk(g);

	/* writer round trip: every key verbatim, every tensor */
	CHECK(copy_file(g, copy, &err) == OPUS_OK, "copy: %s", err.msg);
	CHECK(opus_gguf_open(copy, &g2, &err) == OPUS_OK, "reopen copy: %s", err.msg);
	if (g2)
	{
		bool		same = opus_gguf_n_kv(g2) == opus_gguf_n_kv(g) &&
			opus_gguf_n_tensors(g2) == opus_gguf_n_tensors(g);

		for (int64_t i = 0; same && i < opus_gguf_n_kv(g); i++)
		{
			const void *r1,
					   *r2;
			size_t		s1,
						s2;

			opus_gguf_kv_raw(g, i, &r1, &s1);
			opus_gguf_kv_raw(g2, i, &r2, &s2);
			same = strcmp(opus_gguf_kv_key(g, i), opus_gguf_kv_key(g2, i)) == 0 &&
				opus_gguf_kv_type(g, i) == opus_gguf_kv_type(g2, i) &&
				s1 == s2 && memcmp(r1, r2, s1) == 0;
			CHECK(same, "key %lld (%s) differs", (long long) i, opus_gguf_kv_key(g, i));
		}
		for (int64_t i = 0; same && i < opus_gguf_n_tensors(g); i++)
		{
			const struct opus_gguf_tensor *a = opus_gguf_tensor_at(g, i);
			const struct opus_gguf_tensor *b = opus_gguf_tensor_at(g2, i);

			same = strcmp(a->name, b->name) == 0 && a->n_dims == b->n_dims &&
				memcmp(a->ne, b->ne, sizeof(a->ne)) == 0 && a->type == b->type &&
				a->offset == b->offset && a->nbytes == b->nbytes &&
				memcmp(a->data, b->data, a->nbytes) == 0;
			CHECK(same, "tensor %s differs", a->name);
		}
		CHECK(same, "round trip identical");
		/* the model was written by llama.cpp with the same layout rules */
		CHECK(opus_gguf_size(g2) == opus_gguf_size(g) &&
			  memcmp(opus_gguf_base(g2), opus_gguf_base(g), opus_gguf_size(g)) == 0,
			  "copy is byte-identical to the original");
		opus_gguf_close(g2);
	}
	unlink(copy);
	opus_gguf_close(g);
}

/* ---- modes for test/tools/gguf_crosscheck.py ---- */

/* Adler-like checksum pair, easy to compute with numpy too. */
static void
checksum(const void *p, size_t n, uint64_t *s1, uint64_t *s2)
{
	const uint8_t *b = p;
	uint64_t	a = 0,
				c = 0;

	for (size_t i = 0; i < n; i++)
	{
		a += b[i];
		c += (uint64_t) (i + 1) * b[i];
	}
	*s1 = a;
	*s2 = c;
}

static int
mode_dump(const char *path)
{
	struct opus_gguf *g;
	struct opus_error err;

	if (opus_gguf_open(path, &g, &err) != OPUS_OK)
	{
		fprintf(stderr, "error: %s\n", err.msg);
		return 1;
	}
	printf("version %u\nalignment %zu\n", opus_gguf_version(g), opus_gguf_alignment(g));
	for (int64_t i = 0; i < opus_gguf_n_kv(g); i++)
	{
		const void *raw;
		size_t		rsz;
		uint64_t	s1,
					s2;

		opus_gguf_kv_raw(g, i, &raw, &rsz);
		checksum(raw, rsz, &s1, &s2);
		printf("kv %s %d %zu %" PRIu64 " %" PRIu64 "\n", opus_gguf_kv_key(g, i),
			   (int) opus_gguf_kv_type(g, i), rsz, s1, s2);
	}
	for (int64_t i = 0; i < opus_gguf_n_tensors(g); i++)
	{
		const struct opus_gguf_tensor *t = opus_gguf_tensor_at(g, i);
		uint64_t	s1,
					s2;

		checksum(t->data, t->nbytes, &s1, &s2);
		printf("tensor %s %d %d %lld %lld %lld %lld %zu %zu %" PRIu64 " %" PRIu64 "\n",
			   t->name, (int) t->type, t->n_dims, (long long) t->ne[0],
			   (long long) t->ne[1], (long long) t->ne[2], (long long) t->ne[3],
			   (size_t) ((const uint8_t *) t->data - (const uint8_t *) opus_gguf_base(g)),
			   t->nbytes, s1, s2);
	}
	opus_gguf_close(g);
	return 0;
}

static int
mode_write_sample(const char *path)
{
	struct buf	b = {0};
	struct opus_gguf *g;
	struct opus_error err;
	int			rc;

	/* the in-memory sample (every value type), re-written by our writer */
	build_sample(&b, 3);
	if (opus_gguf_open_memory(b.p, b.n, &g, &err) != OPUS_OK)
	{
		fprintf(stderr, "error: %s\n", err.msg);
		return 1;
	}
	rc = copy_file(g, path, &err) == OPUS_OK ? 0 : 1;
	if (rc)
		fprintf(stderr, "error: %s\n", err.msg);
	opus_gguf_close(g);
	b_free(&b);
	return rc;
}

static int
mode_copy(const char *in, const char *out)
{
	struct opus_gguf *g;
	struct opus_error err;
	int			rc;

	if (opus_gguf_open(in, &g, &err) != OPUS_OK)
	{
		fprintf(stderr, "error: %s\n", err.msg);
		return 1;
	}
	rc = copy_file(g, out, &err) == OPUS_OK ? 0 : 1;
	if (rc)
		fprintf(stderr, "error: %s\n", err.msg);
	opus_gguf_close(g);
	return rc;
}

int
main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--dump") == 0)
		return mode_dump(argv[2]);
	if (argc == 3 && strcmp(argv[1], "--write-sample") == 0)
		return mode_write_sample(argv[2]);
	if (argc == 4 && strcmp(argv[1], "--copy") == 0)
		return mode_copy(argv[2], argv[3]);

	test_valid_sample();
	test_truncation();
	test_header();
	test_keys_and_values();
	test_alignment();
	test_tensors();
	test_mutations();
	test_writer();
	test_real_model();
	return UNIT_DONE();
}
