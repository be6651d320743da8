/*
 * gguf.c - the validating GGUF v2/v3 reader.
 *
 * Layout of a GGUF file (all little-endian):
 *   "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x { string key, u32 type, value },
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset },
 *   padding to the alignment, then the data section (tensor offsets are
 *   relative to its start).
 * A string is a u64 length followed by that many bytes (no NUL); an array is
 * u32 element type, u64 count, then the elements.
 *
 * Everything is untrusted.  The parser walks the header with a bounds-checked
 * cursor; a count is compared with the bytes that remain (divided by the
 * smallest possible encoding of one entry) before anything proportional to it
 * is allocated, so memory use is bounded by a small multiple of the file
 * size.  Validation rules beyond the format itself:
 *  - version 2 or 3 (1 is UNSUPPORTED; big-endian files are UNSUPPORTED);
 *  - keys and tensor names are non-empty, NUL-free UTF-8 and unique;
 *  - bool values are 0 or 1; arrays of arrays are rejected;
 *  - general.alignment, if present, is a uint32 power of two no larger than
 *    OPUS_GGUF_MAX_ALIGNMENT (1 MiB);
 *  - a tensor has 1..4 dimensions, each > 0, a known type, a row length that
 *    is a multiple of the type's block size, an element count and byte size
 *    that fit in int64, an offset aligned to the alignment, and data that
 *    lies inside the file and overlaps no other tensor's data.
 * The last tensor's trailing padding is not required (llama.cpp does not
 * require it either).
 *
 * Lookups by key and by tensor name use open-addressing hash tables built at
 * open time.  String arrays get an index of element offsets at open time, so
 * opus_gguf_arr_str is O(1).
 */
#include "format/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/gguf_int.h"

/* Smallest encodings, used to bound declared counts by the remaining bytes. */
#define MIN_KV_BYTES	(8 + 1 + 4 + 1)	/* key len, 1-byte key, type, u8 */
#define MIN_TENSOR_BYTES (8 + 1 + 4 + 8 + 4 + 8)	/* 1-D, 1-byte name */
#define MIN_STRING_BYTES 8
#define HEADER_BYTES	(4 + 4 + 8 + 8)
/* Longest key or name quoted in an error message. */
#define MSG_NAME_MAX	96

/* A key or tensor name: in the buffer while parsing, then in g->names. */
struct name_ref
{
	const char *s;
	size_t		len;
};

struct gguf_kv
{
	enum opus_gguf_type type;
	const uint8_t *val;			/* encoded value, inside the buffer */
	size_t		val_size;
	/* arrays only */
	enum opus_gguf_type elem_type;
	uint64_t	n;
	const uint8_t *elems;		/* first element */
	size_t	   *str_off;		/* string arrays: offset of element i from elems */
};

struct opus_gguf
{
	const uint8_t *base;
	size_t		size;
	bool		mapped;
	uint32_t	version;
	size_t		alignment;
	size_t		data_off;		/* start of the data section */

	int64_t		n_kv;
	struct gguf_kv *kvs;
	struct name_ref *kv_names;
	int64_t		n_tensors;
	struct opus_gguf_tensor *tensors;
	struct name_ref *t_names;
	char	   *names;			/* every key and tensor name, NUL-terminated */

	/* hash tables: slot holds index + 1, 0 = empty; size is a power of two */
	uint64_t   *kv_slots;
	size_t		kv_mask;
	uint64_t   *t_slots;
	size_t		t_mask;
};

/* ---- shared helpers (also used by gguf_write.c) ---- */

const char *
opus_gguf_type_name(uint32_t type)
{
	static const char *const names[OPUS_GGUF_TYPE__COUNT] = {
		"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
		"bool", "string", "array", "uint64", "int64", "float64",
	};

	if (type >= OPUS_GGUF_TYPE__COUNT)
		return "unknown";
	return names[type];
}

size_t
opus_gguf_scalar_size(uint32_t type)
{
	switch (type)
	{
		case OPUS_GGUF_UINT8:
		case OPUS_GGUF_INT8:
		case OPUS_GGUF_BOOL:
			return 1;
		case OPUS_GGUF_UINT16:
		case OPUS_GGUF_INT16:
			return 2;
		case OPUS_GGUF_UINT32:
		case OPUS_GGUF_INT32:
		case OPUS_GGUF_FLOAT32:
			return 4;
		case OPUS_GGUF_UINT64:
		case OPUS_GGUF_INT64:
		case OPUS_GGUF_FLOAT64:
			return 8;
		default:
			return 0;
	}
}

bool
opus_gguf_utf8_valid(const uint8_t *s, size_t n)
{
	size_t		i = 0;

	while (i < n)
	{
		uint8_t		c = s[i];
		uint32_t	cp;
		size_t		len;

		if (c < 0x80)
		{
			i++;
			continue;
		}
		if (c >= 0xC2 && c <= 0xDF)
		{
			len = 2;
			cp = c & 0x1F;
		}
		else if (c >= 0xE0 && c <= 0xEF)
		{
			len = 3;
			cp = c & 0x0F;
		}
		else if (c >= 0xF0 && c <= 0xF4)
		{
			len = 4;
			cp = c & 0x07;
		}
		else
			return false;
		if (n - i < len)
			return false;
		for (size_t k = 1; k < len; k++)
		{
			if ((s[i + k] & 0xC0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3F);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
			(cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
			return false;
		i += len;
	}
	return true;
}

static uint64_t
rd64(const uint8_t *p)
{
	uint64_t	v;

	memcpy(&v, p, 8);
	return v;
}

static uint32_t
rd32(const uint8_t *p)
{
	uint32_t	v;

	memcpy(&v, p, 4);
	return v;
}

enum opus_status
opus_gguf_check_value(const uint8_t *p, size_t avail, uint32_t type,
					  const char *key, size_t *consumed,
					  struct opus_error *err)
{
	size_t		sz = opus_gguf_scalar_size(type);

	if (sz > 0)
	{
		if (avail < sz)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "key \"%.*s\": value truncated",
								  MSG_NAME_MAX, key);
		if (type == OPUS_GGUF_BOOL && p[0] > 1)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "key \"%.*s\": bool value %u is not 0 or 1",
								  MSG_NAME_MAX, key, p[0]);
		*consumed = sz;
		return OPUS_OK;
	}
	if (type == OPUS_GGUF_STRING)
	{
		uint64_t	len;

		if (avail < 8)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "key \"%.*s\": string length truncated",
								  MSG_NAME_MAX, key);
		len = rd64(p);
		if (len > avail - 8)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "key \"%.*s\": string of %llu bytes extends past end of file",
								  MSG_NAME_MAX, key, (unsigned long long) len);
		*consumed = 8 + (size_t) len;
		return OPUS_OK;
	}
	if (type == OPUS_GGUF_ARRAY)
	{
		uint32_t	et;
		uint64_t	n;
		size_t		esz;
		size_t		rest;
		size_t		pos;

		if (avail < 12)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "key \"%.*s\": array header truncated",
								  MSG_NAME_MAX, key);
		et = rd32(p);
		n = rd64(p + 4);
		rest = avail - 12;
		if (et == OPUS_GGUF_ARRAY)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "key \"%.*s\": arrays of arrays are not supported",
								  MSG_NAME_MAX, key);
		if (et >= OPUS_GGUF_TYPE__COUNT)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "key \"%.*s\": array of unknown value type %u",
								  MSG_NAME_MAX, key, et);
		esz = opus_gguf_scalar_size(et);
		if (esz > 0)
		{
			if (n > rest / esz)
				return opus_error_set(err, OPUS_ERR_FORMAT,
									  "key \"%.*s\": array of %llu %s elements extends past end of file",
									  MSG_NAME_MAX, key, (unsigned long long) n,
									  opus_gguf_type_name(et));
			if (et == OPUS_GGUF_BOOL)
			{
				for (uint64_t i = 0; i < n; i++)
				{
					if (p[12 + i] > 1)
						return opus_error_set(err, OPUS_ERR_FORMAT,
											  "key \"%.*s\": bool element %llu is not 0 or 1",
											  MSG_NAME_MAX, key,
											  (unsigned long long) i);
				}
			}
			*consumed = 12 + (size_t) n * esz;
			return OPUS_OK;
		}
		/* array of strings: each needs at least its 8-byte length */
		if (n > rest / MIN_STRING_BYTES)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "key \"%.*s\": array of %llu strings extends past end of file",
								  MSG_NAME_MAX, key, (unsigned long long) n);
		pos = 12;
		for (uint64_t i = 0; i < n; i++)
		{
			uint64_t	len;

			if (avail - pos < 8)
				return opus_error_set(err, OPUS_ERR_FORMAT,
									  "key \"%.*s\": string %llu truncated",
									  MSG_NAME_MAX, key, (unsigned long long) i);
			len = rd64(p + pos);
			pos += 8;
			if (len > avail - pos)
				return opus_error_set(err, OPUS_ERR_FORMAT,
									  "key \"%.*s\": string %llu of %llu bytes extends past end of file",
									  MSG_NAME_MAX, key, (unsigned long long) i,
									  (unsigned long long) len);
			pos += (size_t) len;
		}
		*consumed = pos;
		return OPUS_OK;
	}
	return opus_error_set(err, OPUS_ERR_FORMAT,
						  "key \"%.*s\": unknown value type %u",
						  MSG_NAME_MAX, key, type);
}

/* ---- parsing ---- */

struct cursor
{
	const uint8_t *p;
	size_t		size;
	size_t		pos;
};

static size_t
cur_left(const struct cursor *c)
{
	return c->size - c->pos;
}

static bool
cur_u32(struct cursor *c, uint32_t *v)
{
	if (cur_left(c) < 4)
		return false;
	*v = rd32(c->p + c->pos);
	c->pos += 4;
	return true;
}

static bool
cur_u64(struct cursor *c, uint64_t *v)
{
	if (cur_left(c) < 8)
		return false;
	*v = rd64(c->p + c->pos);
	c->pos += 8;
	return true;
}

static uint64_t
hash_bytes(const void *s, size_t n)
{
	const uint8_t *b = s;
	uint64_t	h = 1469598103934665603ULL;

	for (size_t i = 0; i < n; i++)
	{
		h ^= b[i];
		h *= 1099511628211ULL;
	}
	return h;
}

/* A power of two >= 2 * n (at least 16), or 0 on overflow. */
static size_t
table_size(int64_t n)
{
	size_t		sz = 16;

	while (sz < (size_t) n * 2)
	{
		if (sz > SIZE_MAX / 2)
			return 0;
		sz *= 2;
	}
	return sz;
}

/*
 * Read a key or tensor name: a string that is non-empty, NUL-free UTF-8.
 * what/idx name the entry in messages ("key 3", "tensor 12").
 */
static enum opus_status
read_name(struct cursor *c, const char *what, int64_t idx,
		  const uint8_t **s, size_t *len, struct opus_error *err)
{
	uint64_t	n;

	if (!cur_u64(c, &n))
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "%s %lld: name length truncated", what,
							  (long long) idx);
	if (n > cur_left(c))
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "%s %lld: name of %llu bytes extends past end of file",
							  what, (long long) idx, (unsigned long long) n);
	if (n == 0)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "%s %lld has an empty name", what, (long long) idx);
	*s = c->p + c->pos;
	*len = (size_t) n;
	if (memchr(*s, 0, *len) != NULL)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "%s %lld: name contains a NUL byte", what,
							  (long long) idx);
	if (!opus_gguf_utf8_valid(*s, *len))
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "%s %lld: name is not valid UTF-8", what,
							  (long long) idx);
	c->pos += *len;
	return OPUS_OK;
}

/*
 * Insert index idx (whose name is refs[idx]) into a table; false if an entry
 * with the same name is already there.
 */
static bool
table_insert(uint64_t *slots, size_t mask, const struct name_ref *refs,
			 int64_t idx)
{
	const struct name_ref *r = &refs[idx];
	size_t		h = (size_t) hash_bytes(r->s, r->len) & mask;

	for (;;)
	{
		uint64_t	v = slots[h];

		if (v == 0)
		{
			slots[h] = (uint64_t) idx + 1;
			return true;
		}
		if (refs[v - 1].len == r->len && memcmp(refs[v - 1].s, r->s, r->len) == 0)
			return false;
		h = (h + 1) & mask;
	}
}

/* Index of the entry named s (NUL-terminated), or -1. */
static int64_t
table_find(const uint64_t *slots, size_t mask, const struct name_ref *refs,
		   const char *s)
{
	size_t		len;
	size_t		h;

	if (slots == NULL || s == NULL)
		return -1;
	len = strlen(s);
	h = (size_t) hash_bytes(s, len) & mask;
	for (;;)
	{
		uint64_t	v = slots[h];

		if (v == 0)
			return -1;
		if (refs[v - 1].len == len && memcmp(refs[v - 1].s, s, len) == 0)
			return (int64_t) (v - 1);
		h = (h + 1) & mask;
	}
}

static enum opus_status
parse_kvs(struct opus_gguf *g, struct cursor *c, struct opus_error *err)
{
	enum opus_status st;

	for (int64_t i = 0; i < g->n_kv; i++)
	{
		struct gguf_kv *kv = &g->kvs[i];
		const uint8_t *name;
		size_t		len;
		uint32_t	type;
		size_t		used;
		char		keybuf[MSG_NAME_MAX + 1];

		st = read_name(c, "key", i, &name, &len, err);
		if (st != OPUS_OK)
			return st;
		g->kv_names[i].s = (const char *) name;	/* replaced by a copy later */
		g->kv_names[i].len = len;
		snprintf(keybuf, sizeof(keybuf), "%.*s",
				 (int) (len < MSG_NAME_MAX ? len : MSG_NAME_MAX), name);
		if (!table_insert(g->kv_slots, g->kv_mask, g->kv_names, i))
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "duplicate key \"%s\"", keybuf);
		if (!cur_u32(c, &type))
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "key \"%s\": value type truncated", keybuf);
		st = opus_gguf_check_value(c->p + c->pos, cur_left(c), type, keybuf,
								   &used, err);
		if (st != OPUS_OK)
			return st;
		kv->type = (enum opus_gguf_type) type;
		kv->val = c->p + c->pos;
		kv->val_size = used;
		if (type == OPUS_GGUF_ARRAY)
		{
			kv->elem_type = (enum opus_gguf_type) rd32(kv->val);
			kv->n = rd64(kv->val + 4);
			kv->elems = kv->val + 12;
			if (kv->elem_type == OPUS_GGUF_STRING && kv->n > 0)
			{
				size_t		pos = 0;

				/* n <= used / 8: checked by opus_gguf_check_value */
				kv->str_off = malloc((size_t) kv->n * sizeof(size_t));
				if (kv->str_off == NULL)
					return opus_error_set(err, OPUS_ERR_NOMEM,
										  "out of memory indexing key \"%s\"",
										  keybuf);
				for (uint64_t k = 0; k < kv->n; k++)
				{
					kv->str_off[k] = pos;
					pos += 8 + (size_t) rd64(kv->elems + pos);
				}
			}
		}
		c->pos += used;
	}
	return OPUS_OK;
}

static enum opus_status
check_alignment(struct opus_gguf *g, struct opus_error *err)
{
	int64_t		idx = opus_gguf_find_key(g, "general.alignment");
	uint32_t	a;

	g->alignment = OPUS_GGUF_DEFAULT_ALIGNMENT;
	if (idx < 0)
		return OPUS_OK;
	if (g->kvs[idx].type != OPUS_GGUF_UINT32)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "general.alignment has type %s, expected uint32",
							  opus_gguf_type_name(g->kvs[idx].type));
	a = rd32(g->kvs[idx].val);
	if (a == 0 || (a & (a - 1)) != 0)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "general.alignment %u is not a power of two", a);
	if (a > OPUS_GGUF_MAX_ALIGNMENT)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "general.alignment %u exceeds the maximum of %u",
							  a, OPUS_GGUF_MAX_ALIGNMENT);
	g->alignment = a;
	return OPUS_OK;
}

/* Tensor name for messages: the in-buffer name, truncated. */
#define TNAME_ARGS(t, len) \
	(int) ((len) < MSG_NAME_MAX ? (len) : MSG_NAME_MAX), (t)->name

static enum opus_status
parse_tensor_infos(struct opus_gguf *g, struct cursor *c,
				   struct opus_error *err)
{
	enum opus_status st;

	for (int64_t i = 0; i < g->n_tensors; i++)
	{
		struct opus_gguf_tensor *t = &g->tensors[i];
		const uint8_t *name;
		size_t		len;
		uint32_t	n_dims;
		uint32_t	type;
		uint64_t	off;
		const struct opus_qtype_info *qi;
		int64_t		nelem = 1;
		int64_t		nrows = 1;
		size_t		row;
		unsigned long long nbytes;

		st = read_name(c, "tensor", i, &name, &len, err);
		if (st != OPUS_OK)
			return st;
		t->name = (const char *) name;	/* replaced by a copy later */
		g->t_names[i].s = t->name;
		g->t_names[i].len = len;
		if (!table_insert(g->t_slots, g->t_mask, g->t_names, i))
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "duplicate tensor name \"%.*s\"",
								  TNAME_ARGS(t, len));
		if (!cur_u32(c, &n_dims))
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "tensor \"%.*s\": n_dims truncated",
								  TNAME_ARGS(t, len));
		if (n_dims == 0 || n_dims > OPUS_GGUF_MAX_DIMS)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "tensor \"%.*s\": n_dims %u is not between 1 and %d",
								  TNAME_ARGS(t, len), n_dims, OPUS_GGUF_MAX_DIMS);
		t->n_dims = (int) n_dims;
		for (int d = 0; d < OPUS_GGUF_MAX_DIMS; d++)
			t->ne[d] = 1;
		for (uint32_t d = 0; d < n_dims; d++)
		{
			uint64_t	ne;

			if (!cur_u64(c, &ne))
				return opus_error_set(err, OPUS_ERR_FORMAT,
									  "tensor \"%.*s\": dimensions truncated",
									  TNAME_ARGS(t, len));
			if (ne == 0 || ne > (uint64_t) INT64_MAX)
				return opus_error_set(err, OPUS_ERR_FORMAT,
									  "tensor \"%.*s\": dimension %u is %lld, expected > 0",
									  TNAME_ARGS(t, len), d, (long long) ne);
			t->ne[d] = (int64_t) ne;
			if (__builtin_mul_overflow(nelem, t->ne[d], &nelem))
				return opus_error_set(err, OPUS_ERR_FORMAT,
									  "tensor \"%.*s\": element count overflows",
									  TNAME_ARGS(t, len));
			if (d > 0)
				nrows *= t->ne[d];	/* cannot overflow: divides nelem */
		}
		if (!cur_u32(c, &type))
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "tensor \"%.*s\": type truncated",
								  TNAME_ARGS(t, len));
		qi = opus_qtype_info(type);
		if (qi == NULL)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "tensor \"%.*s\": unknown tensor type %u",
								  TNAME_ARGS(t, len), type);
		t->type = (enum opus_qtype) type;
		if (t->ne[0] % qi->block_size != 0)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "tensor \"%.*s\": row length %lld is not a multiple of the %s block size %d",
								  TNAME_ARGS(t, len), (long long) t->ne[0],
								  qi->name, qi->block_size);
		if (!opus_qtype_row_size(t->type, t->ne[0], &row) ||
			opus_mul_overflow_u64(row, (unsigned long long) nrows, &nbytes) ||
			nbytes > (unsigned long long) INT64_MAX)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "tensor \"%.*s\": byte size overflows",
								  TNAME_ARGS(t, len));
		t->nbytes = (size_t) nbytes;
		if (!cur_u64(c, &off))
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "tensor \"%.*s\": offset truncated",
								  TNAME_ARGS(t, len));
		t->offset = off;
	}
	return OPUS_OK;
}

struct range
{
	uint64_t	off;
	uint64_t	end;
	int64_t		idx;
};

static int
range_cmp(const void *a, const void *b)
{
	const struct range *x = a;
	const struct range *y = b;

	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Place the data section and check every tensor's data range. */
static enum opus_status
check_tensor_data(struct opus_gguf *g, size_t infos_end,
				  struct opus_error *err)
{
	unsigned long long start;
	size_t		data_size;
	struct range *r;

	if (opus_add_overflow_u64(infos_end, g->alignment - 1, &start))
		return opus_error_set(err, OPUS_ERR_FORMAT, "data section offset overflows");
	start &= ~((unsigned long long) g->alignment - 1);
	if (start > g->size)
	{
		if (g->n_tensors > 0)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "data section starts past end of file");
		start = g->size;
	}
	g->data_off = (size_t) start;
	data_size = g->size - g->data_off;
	if (g->n_tensors == 0)
		return OPUS_OK;

	for (int64_t i = 0; i < g->n_tensors; i++)
	{
		struct opus_gguf_tensor *t = &g->tensors[i];
		size_t		len = g->t_names[i].len;

		if (t->offset % g->alignment != 0)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "tensor \"%.*s\": offset %llu is not a multiple of the alignment %zu",
								  TNAME_ARGS(t, len),
								  (unsigned long long) t->offset, g->alignment);
		if (t->offset > data_size || t->nbytes > data_size - t->offset)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "tensor \"%.*s\": data extends past end of file",
								  TNAME_ARGS(t, len));
		t->data = g->base + g->data_off + t->offset;
	}

	/* n_tensors was bounded by the file size in parse() */
	r = malloc((size_t) g->n_tensors * sizeof(*r));
	if (r == NULL)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory checking tensor ranges");
	for (int64_t i = 0; i < g->n_tensors; i++)
	{
		r[i].off = g->tensors[i].offset;
		r[i].end = g->tensors[i].offset + g->tensors[i].nbytes;
		r[i].idx = i;
	}
	qsort(r, (size_t) g->n_tensors, sizeof(*r), range_cmp);
	for (int64_t i = 1; i < g->n_tensors; i++)
	{
		if (r[i].off < r[i - 1].end)
		{
			const struct opus_gguf_tensor *a = &g->tensors[r[i - 1].idx];
			const struct opus_gguf_tensor *b = &g->tensors[r[i].idx];
			size_t		la = g->t_names[r[i - 1].idx].len;
			size_t		lb = g->t_names[r[i].idx].len;
			int			ma = (int) (la < 48 ? la : 48);
			int			mb = (int) (lb < 48 ? lb : 48);

			free(r);
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "tensor \"%.*s\": data overlaps tensor \"%.*s\"",
								  mb, b->name, ma, a->name);
		}
	}
	free(r);
	return OPUS_OK;
}

/* Copy every key and tensor name into one NUL-terminated block. */
static enum opus_status
copy_names(struct opus_gguf *g, struct opus_error *err)
{
	size_t		total = 0;
	char	   *p;

	/* each name lies in the buffer, so the sum is below 2 * size */
	for (int64_t i = 0; i < g->n_kv; i++)
		total += g->kv_names[i].len + 1;
	for (int64_t i = 0; i < g->n_tensors; i++)
		total += g->t_names[i].len + 1;
	g->names = malloc(total > 0 ? total : 1);
	if (g->names == NULL)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory copying names");
	p = g->names;
	for (int64_t i = 0; i < g->n_kv; i++)
	{
		memcpy(p, g->kv_names[i].s, g->kv_names[i].len);
		p[g->kv_names[i].len] = '\0';
		g->kv_names[i].s = p;
		p += g->kv_names[i].len + 1;
	}
	for (int64_t i = 0; i < g->n_tensors; i++)
	{
		memcpy(p, g->t_names[i].s, g->t_names[i].len);
		p[g->t_names[i].len] = '\0';
		g->t_names[i].s = p;
		g->tensors[i].name = p;
		p += g->t_names[i].len + 1;
	}
	return OPUS_OK;
}

static enum opus_status
parse(struct opus_gguf *g, struct opus_error *err)
{
	struct cursor c = {.p = g->base, .size = g->size, .pos = 0};
	uint32_t	version;
	uint64_t	n_tensors;
	uint64_t	n_kv;
	enum opus_status st;

	if (g->size < 4 || memcmp(g->base, OPUS_GGUF_MAGIC, 4) != 0)
		return opus_error_set(err, OPUS_ERR_FORMAT, "not a gguf file (bad magic)");
	c.pos = 4;
	if (!cur_u32(&c, &version))
		return opus_error_set(err, OPUS_ERR_FORMAT, "gguf header truncated");
	if (version == 1)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "gguf version 1 is not supported (convert the file to version 3)");
	if (__builtin_bswap32(version) >= 1 && __builtin_bswap32(version) <= 3)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "big-endian gguf files are not supported");
	if (version != 2 && version != 3)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "unsupported gguf version %u", version);
	g->version = version;
	if (!cur_u64(&c, &n_tensors) || !cur_u64(&c, &n_kv))
		return opus_error_set(err, OPUS_ERR_FORMAT, "gguf header truncated");

	/* counts must fit in the bytes that remain before anything is allocated */
	if (n_kv > cur_left(&c) / MIN_KV_BYTES)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "metadata count %llu is too large for the file size",
							  (unsigned long long) n_kv);
	if (n_tensors > cur_left(&c) / MIN_TENSOR_BYTES)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "tensor count %llu is too large for the file size",
							  (unsigned long long) n_tensors);
	if (n_kv + n_tensors > cur_left(&c) / MIN_KV_BYTES)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "metadata and tensor counts (%llu, %llu) are too large for the file size",
							  (unsigned long long) n_kv,
							  (unsigned long long) n_tensors);
	g->n_kv = (int64_t) n_kv;
	g->n_tensors = (int64_t) n_tensors;

	g->kv_mask = table_size(g->n_kv) - 1;
	g->t_mask = table_size(g->n_tensors) - 1;
	g->kvs = calloc(n_kv > 0 ? n_kv : 1, sizeof(*g->kvs));
	g->kv_slots = calloc(g->kv_mask + 1, sizeof(uint64_t));
	g->tensors = calloc(n_tensors > 0 ? n_tensors : 1, sizeof(*g->tensors));
	g->kv_names = calloc(n_kv > 0 ? n_kv : 1, sizeof(*g->kv_names));
	g->t_names = calloc(n_tensors > 0 ? n_tensors : 1, sizeof(*g->t_names));
	g->t_slots = calloc(g->t_mask + 1, sizeof(uint64_t));
	if (!g->kvs || !g->kv_slots || !g->kv_names ||
		!g->tensors || !g->t_names || !g->t_slots)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory reading gguf header");

	st = parse_kvs(g, &c, err);
	if (st == OPUS_OK)
		st = check_alignment(g, err);
	if (st == OPUS_OK)
		st = parse_tensor_infos(g, &c, err);
	if (st == OPUS_OK)
		st = check_tensor_data(g, c.pos, err);
	if (st == OPUS_OK)
		st = copy_names(g, err);
	return st;
}

/* ---- open / close ---- */

enum opus_status
opus_gguf_open_memory(const void *data, size_t size, struct opus_gguf **out,
					  struct opus_error *err)
{
	struct opus_gguf *g;
	enum opus_status st;

	if (out == NULL)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "no output pointer");
	*out = NULL;
	if (data == NULL && size > 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "no buffer");
	g = calloc(1, sizeof(*g));
	if (g == NULL)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	g->base = data ? data : (const uint8_t *) "";
	g->size = size;
	st = parse(g, err);
	if (st != OPUS_OK)
	{
		opus_gguf_close(g);
		return st;
	}
	*out = g;
	return OPUS_OK;
}

enum opus_status
opus_gguf_open(const char *path, struct opus_gguf **out,
			   struct opus_error *err)
{
	int			fd;
	struct stat sb;
	void	   *map = NULL;
	size_t		size;
	enum opus_status st;

	if (out == NULL || path == NULL)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "no path or output pointer");
	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return opus_error_set(err, OPUS_ERR_IO, "cannot open \"%s\": %s",
							  path, strerror(errno));
	if (fstat(fd, &sb) != 0)
	{
		int			e = errno;

		close(fd);
		return opus_error_set(err, OPUS_ERR_IO, "cannot stat \"%s\": %s",
							  path, strerror(e));
	}
	if (!S_ISREG(sb.st_mode))
	{
		close(fd);
		return opus_error_set(err, OPUS_ERR_IO, "\"%s\" is not a regular file", path);
	}
	if ((uint64_t) sb.st_size > SIZE_MAX)
	{
		close(fd);
		return opus_error_set(err, OPUS_ERR_IO, "\"%s\" is too large to map", path);
	}
	size = (size_t) sb.st_size;
	if (size > 0)
	{
		map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED)
		{
			int			e = errno;

			close(fd);
			return opus_error_set(err, OPUS_ERR_IO, "cannot map \"%s\": %s",
								  path, strerror(e));
		}
	}
	close(fd);
	st = opus_gguf_open_memory(map, size, out, err);
	if (st != OPUS_OK)
	{
		if (map)
			munmap(map, size);
		return st;
	}
	(*out)->mapped = (map != NULL);
	return OPUS_OK;
}

void
opus_gguf_close(struct opus_gguf *g)
{
	if (g == NULL)
		return;
	if (g->kvs)
	{
		for (int64_t i = 0; i < g->n_kv; i++)
			free(g->kvs[i].str_off);
	}
	free(g->kvs);
	free(g->kv_slots);
	free(g->tensors);
	free(g->kv_names);
	free(g->t_names);
	free(g->t_slots);
	free(g->names);
	if (g->mapped)
		munmap((void *) g->base, g->size);
	free(g);
}

/* ---- accessors ---- */

uint32_t
opus_gguf_version(const struct opus_gguf *g)
{
	return g->version;
}

size_t
opus_gguf_alignment(const struct opus_gguf *g)
{
	return g->alignment;
}

const void *
opus_gguf_base(const struct opus_gguf *g)
{
	return g->base;
}

size_t
opus_gguf_size(const struct opus_gguf *g)
{
	return g->size;
}

int64_t
opus_gguf_n_kv(const struct opus_gguf *g)
{
	return g->n_kv;
}

int64_t
opus_gguf_find_key(const struct opus_gguf *g, const char *key)
{
	return table_find(g->kv_slots, g->kv_mask, g->kv_names, key);
}

const char *
opus_gguf_kv_key(const struct opus_gguf *g, int64_t idx)
{
	if (idx < 0 || idx >= g->n_kv)
		return NULL;
	return g->kv_names[idx].s;
}

enum opus_gguf_type
opus_gguf_kv_type(const struct opus_gguf *g, int64_t idx)
{
	if (idx < 0 || idx >= g->n_kv)
		return OPUS_GGUF_TYPE__COUNT;
	return g->kvs[idx].type;
}

void
opus_gguf_kv_raw(const struct opus_gguf *g, int64_t idx, const void **data,
				 size_t *size)
{
	if (idx < 0 || idx >= g->n_kv)
	{
		*data = NULL;
		*size = 0;
		return;
	}
	*data = g->kvs[idx].val;
	*size = g->kvs[idx].val_size;
}

/* Look a key up; fills err with NOT_FOUND if absent. */
static const struct gguf_kv *
get_kv(const struct opus_gguf *g, const char *key, struct opus_error *err)
{
	int64_t		idx = opus_gguf_find_key(g, key);

	if (idx < 0)
	{
		opus_error_set(err, OPUS_ERR_NOT_FOUND, "key \"%.*s\" not found",
					   MSG_NAME_MAX, key ? key : "(null)");
		return NULL;
	}
	return &g->kvs[idx];
}

static enum opus_status
wrong_type(const struct gguf_kv *kv, const char *key, const char *expected,
		   struct opus_error *err)
{
	return opus_error_set(err, OPUS_ERR_FORMAT,
						  "key \"%.*s\" has type %s, expected %s",
						  MSG_NAME_MAX, key, opus_gguf_type_name(kv->type),
						  expected);
}

/*
 * Read an integer value: signed types into *s (with *is_signed set),
 * unsigned ones into *u.  False if kv does not hold an integer.
 */
static bool
kv_integer(const struct gguf_kv *kv, bool *is_signed, int64_t *s, uint64_t *u)
{
	const uint8_t *p = kv->val;

	*is_signed = false;
	*s = 0;
	*u = 0;
	switch (kv->type)
	{
		case OPUS_GGUF_UINT8:
			*u = p[0];
			return true;
		case OPUS_GGUF_UINT16:
			{
				uint16_t	v;

				memcpy(&v, p, 2);
				*u = v;
				return true;
			}
		case OPUS_GGUF_UINT32:
			*u = rd32(p);
			return true;
		case OPUS_GGUF_UINT64:
			*u = rd64(p);
			return true;
		case OPUS_GGUF_INT8:
			*is_signed = true;
			*s = (int8_t) p[0];
			return true;
		case OPUS_GGUF_INT16:
			{
				int16_t		v;

				memcpy(&v, p, 2);
				*is_signed = true;
				*s = v;
				return true;
			}
		case OPUS_GGUF_INT32:
			{
				int32_t		v;

				memcpy(&v, p, 4);
				*is_signed = true;
				*s = v;
				return true;
			}
		case OPUS_GGUF_INT64:
			{
				int64_t		v;

				memcpy(&v, p, 8);
				*is_signed = true;
				*s = v;
				return true;
			}
		default:
			return false;
	}
}

enum opus_status
opus_gguf_get_u32(const struct opus_gguf *g, const char *key, uint32_t *out,
				  struct opus_error *err)
{
	const struct gguf_kv *kv = get_kv(g, key, err);
	bool		is_signed;
	int64_t		s;
	uint64_t	u;

	if (kv == NULL)
		return OPUS_ERR_NOT_FOUND;
	if (!kv_integer(kv, &is_signed, &s, &u))
		return wrong_type(kv, key, "an integer", err);
	if (is_signed)
	{
		if (s < 0 || s > (int64_t) UINT32_MAX)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "key \"%.*s\": value %lld does not fit in uint32",
								  MSG_NAME_MAX, key, (long long) s);
		*out = (uint32_t) s;
	}
	else
	{
		if (u > UINT32_MAX)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "key \"%.*s\": value %llu does not fit in uint32",
								  MSG_NAME_MAX, key, (unsigned long long) u);
		*out = (uint32_t) u;
	}
	return OPUS_OK;
}

enum opus_status
opus_gguf_get_i64(const struct opus_gguf *g, const char *key, int64_t *out,
				  struct opus_error *err)
{
	const struct gguf_kv *kv = get_kv(g, key, err);
	bool		is_signed;
	int64_t		s;
	uint64_t	u;

	if (kv == NULL)
		return OPUS_ERR_NOT_FOUND;
	if (!kv_integer(kv, &is_signed, &s, &u))
		return wrong_type(kv, key, "an integer", err);
	if (is_signed)
		*out = s;
	else
	{
		if (u > (uint64_t) INT64_MAX)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "key \"%.*s\": value %llu does not fit in int64",
								  MSG_NAME_MAX, key, (unsigned long long) u);
		*out = (int64_t) u;
	}
	return OPUS_OK;
}

enum opus_status
opus_gguf_get_f32(const struct opus_gguf *g, const char *key, float *out,
				  struct opus_error *err)
{
	const struct gguf_kv *kv = get_kv(g, key, err);

	if (kv == NULL)
		return OPUS_ERR_NOT_FOUND;
	if (kv->type == OPUS_GGUF_FLOAT32)
	{
		memcpy(out, kv->val, 4);
		return OPUS_OK;
	}
	if (kv->type == OPUS_GGUF_FLOAT64)
	{
		double		d;

		memcpy(&d, kv->val, 8);
		*out = (float) d;
		return OPUS_OK;
	}
	return wrong_type(kv, key, "float32 or float64", err);
}

enum opus_status
opus_gguf_get_bool(const struct opus_gguf *g, const char *key, bool *out,
				   struct opus_error *err)
{
	const struct gguf_kv *kv = get_kv(g, key, err);

	if (kv == NULL)
		return OPUS_ERR_NOT_FOUND;
	if (kv->type != OPUS_GGUF_BOOL)
		return wrong_type(kv, key, "bool", err);
	*out = kv->val[0] != 0;
	return OPUS_OK;
}

enum opus_status
opus_gguf_get_str(const struct opus_gguf *g, const char *key, const char **s,
				  size_t *len, struct opus_error *err)
{
	const struct gguf_kv *kv = get_kv(g, key, err);

	if (kv == NULL)
		return OPUS_ERR_NOT_FOUND;
	if (kv->type != OPUS_GGUF_STRING)
		return wrong_type(kv, key, "string", err);
	*s = (const char *) kv->val + 8;
	*len = kv->val_size - 8;
	return OPUS_OK;
}

enum opus_status
opus_gguf_get_arr(const struct opus_gguf *g, const char *key,
				  enum opus_gguf_type *elem_type, uint64_t *n,
				  const void **data, struct opus_error *err)
{
	const struct gguf_kv *kv = get_kv(g, key, err);

	if (kv == NULL)
		return OPUS_ERR_NOT_FOUND;
	if (kv->type != OPUS_GGUF_ARRAY)
		return wrong_type(kv, key, "array", err);
	*elem_type = kv->elem_type;
	*n = kv->n;
	*data = kv->elems;
	return OPUS_OK;
}

enum opus_status
opus_gguf_arr_str(const struct opus_gguf *g, int64_t kv_idx, uint64_t i,
				  const char **s, size_t *len)
{
	const struct gguf_kv *kv;
	const uint8_t *p;

	if (kv_idx < 0 || kv_idx >= g->n_kv)
		return OPUS_ERR_NOT_FOUND;
	kv = &g->kvs[kv_idx];
	if (kv->type != OPUS_GGUF_ARRAY || kv->elem_type != OPUS_GGUF_STRING)
		return OPUS_ERR_INVALID_ARG;
	if (i >= kv->n)
		return OPUS_ERR_NOT_FOUND;
	p = kv->elems + kv->str_off[i];
	*len = (size_t) rd64(p);
	*s = (const char *) p + 8;
	return OPUS_OK;
}

int64_t
opus_gguf_n_tensors(const struct opus_gguf *g)
{
	return g->n_tensors;
}

const struct opus_gguf_tensor *
opus_gguf_tensor_at(const struct opus_gguf *g, int64_t i)
{
	if (i < 0 || i >= g->n_tensors)
		return NULL;
	return &g->tensors[i];
}

const struct opus_gguf_tensor *
opus_gguf_find_tensor(const struct opus_gguf *g, const char *name)
{
	int64_t		idx = table_find(g->t_slots, g->t_mask, g->t_names, name);

	return idx < 0 ? NULL : &g->tensors[idx];
}
