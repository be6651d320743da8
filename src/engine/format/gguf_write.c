/*
 * gguf_write.c - a small GGUF v3 writer (the quantizer, tests that build
 * files).
 *
 * Keys and tensors are collected in memory (tensor data is copied) and
 * written in the order they were added by opus_gguf_writer_write():
 * header, key/values, tensor infos, padding to the alignment, then each
 * tensor's data padded to the alignment (the last one too), so the offsets
 * are exactly what llama.cpp expects.
 *
 * general.alignment: written only when the alignment differs from the
 * default 32 (as llama.cpp and the python gguf package do).  A caller may add
 * the key itself (for example when copying every key of an input file); it
 * must then be a uint32 equal to the writer's alignment, and is not written
 * twice.
 *
 * Everything added is validated the way the reader validates it (keys and
 * names non-empty NUL-free UTF-8 and unique, raw values well-formed, tensor
 * shapes and sizes consistent), so a written file always reopens.  Tensor
 * names are limited to 63 bytes, llama.cpp's limit.  The file is written to
 * "<path>.tmp" and renamed into place, so a failed write leaves no partial
 * file at path.
 *
 * Streaming (files larger than memory, e.g. generated test models): declare
 * a tensor without its data with opus_gguf_writer_add_tensor_info(), then
 * opus_gguf_writer_stream_begin() writes the header and directory (every
 * offset is known from the shapes) and opus_gguf_writer_stream_data() takes
 * the data of the declared tensors in order, in pieces of any size; the
 * alignment padding after each tensor is written automatically, and tensors
 * added with their data (opus_gguf_writer_add_tensor) are written when the
 * stream reaches them.  opus_gguf_writer_stream_finish() checks that every
 * byte was supplied and renames "<path>.tmp" into place; freeing the writer
 * before that removes the temporary file.  The streaming path does not
 * fsync (it exists for multi-gigabyte scratch files).
 */
#include "format/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "format/gguf_int.h"

struct wkv
{
	char	   *key;
	uint32_t	type;
	uint8_t    *val;			/* encoded value */
	size_t		size;
};

struct wtensor
{
	char	   *name;
	int			n_dims;
	int64_t		ne[OPUS_GGUF_MAX_DIMS];
	enum opus_qtype type;
	void	   *data;			/* NULL: declared only, data streamed */
	size_t		nbytes;
	uint64_t	offset;			/* in the data section */
};

struct out
{
	FILE	   *f;
	uint64_t	pos;
	int			error;			/* errno of the first failed write, or 0 */
};

struct opus_gguf_writer
{
	uint32_t	alignment;
	bool		has_alignment_key;
	struct wkv *kvs;
	size_t		n_kv;
	size_t		cap_kv;
	struct wtensor *tensors;
	size_t		n_tensors;
	size_t		cap_tensors;
	uint64_t	data_size;		/* padded size of the data section so far */
	size_t		n_deferred;		/* tensors declared without data */
	/* streaming state (opus_gguf_writer_stream_*) */
	bool		streaming;		/* begun and not finished */
	struct out	so;
	char	   *stream_path;
	char	   *stream_tmp;
	size_t		cur;			/* tensor whose data comes next */
	size_t		cur_done;		/* bytes of it already written */
};

/*
 * A writer for a file with the given alignment (0 means the default, 32).
 * Returns NULL if the alignment is not a power of two no larger than 1 MiB,
 * or on out-of-memory.
 */
struct opus_gguf_writer *
opus_gguf_writer_new(uint32_t alignment)
{
	struct opus_gguf_writer *w;

	if (alignment == 0)
		alignment = OPUS_GGUF_DEFAULT_ALIGNMENT;
	if ((alignment & (alignment - 1)) != 0 || alignment > OPUS_GGUF_MAX_ALIGNMENT)
		return NULL;
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return NULL;
	w->alignment = alignment;
	return w;
}

void
opus_gguf_writer_free(struct opus_gguf_writer *w)
{
	if (w == NULL)
		return;
	for (size_t i = 0; i < w->n_kv; i++)
	{
		free(w->kvs[i].key);
		free(w->kvs[i].val);
	}
	for (size_t i = 0; i < w->n_tensors; i++)
	{
		free(w->tensors[i].name);
		free(w->tensors[i].data);
	}
	if (w->streaming)
	{
		fclose(w->so.f);
		unlink(w->stream_tmp);
	}
	free(w->stream_path);
	free(w->stream_tmp);
	free(w->kvs);
	free(w->tensors);
	free(w);
}

/* Grow an array of elem-sized items so one more fits; false on OOM. */
static bool
grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	size_t		ncap;
	void	   *p;

	if (n < *cap)
		return true;
	ncap = *cap ? *cap * 2 : 16;
	if (ncap > SIZE_MAX / elem)
		return false;
	p = realloc(*arr, ncap * elem);
	if (p == NULL)
		return false;
	*arr = p;
	*cap = ncap;
	return true;
}

static enum opus_status
check_name(const char *what, const char *name, size_t max_len,
		   struct opus_error *err)
{
	size_t		len;

	if (name == NULL || name[0] == '\0')
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "%s name is empty", what);
	len = strlen(name);
	if (len > max_len)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "%s name \"%.64s...\" is longer than %zu bytes",
							  what, name, max_len);
	if (!opus_gguf_utf8_valid((const uint8_t *) name, len))
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "%s name is not valid UTF-8", what);
	return OPUS_OK;
}

enum opus_status
opus_gguf_writer_add_raw(struct opus_gguf_writer *w, const char *key,
						 enum opus_gguf_type type, const void *value,
						 size_t size, struct opus_error *err)
{
	enum opus_status st;
	size_t		used;
	struct wkv *kv;

	if (w->streaming)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "key \"%.96s\": the file is already being written",
							  key ? key : "");
	st = check_name("key", key, SIZE_MAX, err);
	if (st != OPUS_OK)
		return st;
	if (value == NULL && size > 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "key \"%.96s\": no value", key);
	for (size_t i = 0; i < w->n_kv; i++)
	{
		if (strcmp(w->kvs[i].key, key) == 0)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "duplicate key \"%.96s\"", key);
	}
	st = opus_gguf_check_value(value ? value : "", size, (uint32_t) type, key,
							   &used, err);
	if (st != OPUS_OK)
		return st;
	if (used != size)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "key \"%.96s\": value is %zu bytes, its encoding says %zu",
							  key, size, used);
	if (strcmp(key, "general.alignment") == 0)
	{
		uint32_t	a;

		if (type != OPUS_GGUF_UINT32)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "general.alignment has type %s, expected uint32",
								  opus_gguf_type_name(type));
		memcpy(&a, value, 4);
		if (a != w->alignment)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "general.alignment %u differs from the writer's alignment %u",
								  a, w->alignment);
		w->has_alignment_key = true;
	}

	if (!grow((void **) &w->kvs, &w->cap_kv, w->n_kv, sizeof(*w->kvs)))
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	kv = &w->kvs[w->n_kv];
	kv->key = strdup(key);
	kv->val = malloc(size > 0 ? size : 1);
	if (kv->key == NULL || kv->val == NULL)
	{
		free(kv->key);
		free(kv->val);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	}
	if (size > 0)
		memcpy(kv->val, value, size);
	kv->type = (uint32_t) type;
	kv->size = size;
	w->n_kv++;
	return OPUS_OK;
}

enum opus_status
opus_gguf_writer_add_u32(struct opus_gguf_writer *w, const char *key,
						 uint32_t v, struct opus_error *err)
{
	return opus_gguf_writer_add_raw(w, key, OPUS_GGUF_UINT32, &v, 4, err);
}

enum opus_status
opus_gguf_writer_add_str(struct opus_gguf_writer *w, const char *key,
						 const char *s, struct opus_error *err)
{
	size_t		len;
	uint64_t	len64;
	uint8_t    *buf;
	enum opus_status st;

	if (s == NULL)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "no string value");
	len = strlen(s);
	if (len > SIZE_MAX - 8)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "string too long");
	buf = malloc(8 + len);
	if (buf == NULL)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	len64 = len;
	memcpy(buf, &len64, 8);
	memcpy(buf + 8, s, len);
	st = opus_gguf_writer_add_raw(w, key, OPUS_GGUF_STRING, buf, 8 + len, err);
	free(buf);
	return st;
}

/* An array value: element type, count, then the elements' bytes in b. */
static enum opus_status
add_array(struct opus_gguf_writer *w, const char *key, struct opus_buf *b,
		  struct opus_error *err)
{
	enum opus_status st;

	if (b->oom)
		st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	else
		st = opus_gguf_writer_add_raw(w, key, OPUS_GGUF_ARRAY, b->p, b->n, err);
	opus_buf_free(b);
	return st;
}

enum opus_status
opus_gguf_writer_add_str_array(struct opus_gguf_writer *w, const char *key,
							   char *const *s, size_t n, struct opus_error *err)
{
	struct opus_buf b = {0};
	uint32_t	type = OPUS_GGUF_STRING;
	uint64_t	count = n;

	(void) opus_buf_put(&b, &type, 4);
	(void) opus_buf_put(&b, &count, 8);
	for (size_t i = 0; i < n; i++)
	{
		uint64_t	len = strlen(s[i]);

		(void) opus_buf_put(&b, &len, 8);
		(void) opus_buf_put(&b, s[i], len);
	}
	return add_array(w, key, &b, err);
}

enum opus_status
opus_gguf_writer_add_i32_array(struct opus_gguf_writer *w, const char *key,
							   const int32_t *v, size_t n, struct opus_error *err)
{
	struct opus_buf b = {0};
	uint32_t	type = OPUS_GGUF_INT32;
	uint64_t	count = n;

	(void) opus_buf_put(&b, &type, 4);
	(void) opus_buf_put(&b, &count, 8);
	if (n > SIZE_MAX / sizeof(int32_t))
		b.oom = true;
	else
		(void) opus_buf_put(&b, v, n * sizeof(int32_t));
	return add_array(w, key, &b, err);
}

/*
 * Validate and append a tensor.  data NULL with deferred: declared only, its
 * nbytes computed from the shape; else nbytes must match and data is copied.
 */
static enum opus_status
add_tensor(struct opus_gguf_writer *w, const char *name, int n_dims,
		   const int64_t *ne, enum opus_qtype type, const void *data,
		   size_t nbytes, bool deferred, struct opus_error *err)
{
	enum opus_status st;
	const struct opus_qtype_info *qi;
	int64_t		nrows = 1;
	int64_t		nelem;
	size_t		row;
	unsigned long long expect;
	unsigned long long padded;
	unsigned long long end;
	struct wtensor *t;

	if (w->streaming)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "tensor \"%.64s\": the file is already being written",
							  name ? name : "");
	st = check_name("tensor", name, OPUS_GGUF_MAX_NAME, err);
	if (st != OPUS_OK)
		return st;
	for (size_t i = 0; i < w->n_tensors; i++)
	{
		if (strcmp(w->tensors[i].name, name) == 0)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "duplicate tensor name \"%s\"", name);
	}
	if (n_dims < 1 || n_dims > OPUS_GGUF_MAX_DIMS || ne == NULL)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "tensor \"%s\": n_dims %d is not between 1 and %d",
							  name, n_dims, OPUS_GGUF_MAX_DIMS);
	for (int d = 0; d < n_dims; d++)
	{
		if (ne[d] <= 0)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "tensor \"%s\": dimension %d is %lld, expected > 0",
								  name, d, (long long) ne[d]);
		if (d > 0 && __builtin_mul_overflow(nrows, ne[d], &nrows))
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "tensor \"%s\": element count overflows", name);
	}
	qi = opus_qtype_info((uint32_t) type);
	if (qi == NULL)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "tensor \"%s\": unknown tensor type %u", name,
							  (unsigned) type);
	if (ne[0] % qi->block_size != 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "tensor \"%s\": row length %lld is not a multiple of the %s block size %d",
							  name, (long long) ne[0], qi->name, qi->block_size);
	if (__builtin_mul_overflow(nrows, ne[0], &nelem) ||
		!opus_qtype_row_size(type, ne[0], &row) ||
		opus_mul_overflow_u64(row, (unsigned long long) nrows, &expect) ||
		expect > (unsigned long long) INT64_MAX)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "tensor \"%s\": byte size overflows", name);
	if (deferred)
	{
		if (expect > SIZE_MAX)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "tensor \"%s\": byte size overflows", name);
		nbytes = (size_t) expect;
	}
	else if (nbytes != expect)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "tensor \"%s\": %zu bytes of data, expected %llu",
							  name, nbytes, expect);
	if (data == NULL && !deferred)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "tensor \"%s\": no data", name);
	if (opus_add_overflow_u64(expect, w->alignment - 1, &padded) ||
		opus_add_overflow_u64(w->data_size, padded & ~((unsigned long long) w->alignment - 1), &end) ||
		end > (unsigned long long) INT64_MAX)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "tensor \"%s\": data section too large", name);

	if (!grow((void **) &w->tensors, &w->cap_tensors, w->n_tensors,
			  sizeof(*w->tensors)))
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	t = &w->tensors[w->n_tensors];
	memset(t, 0, sizeof(*t));
	t->name = strdup(name);
	t->data = deferred ? NULL : malloc(nbytes > 0 ? nbytes : 1);
	if (t->name == NULL || (!deferred && t->data == NULL))
	{
		free(t->name);
		free(t->data);
		return opus_error_set(err, OPUS_ERR_NOMEM,
							  "out of memory copying tensor \"%s\"", name);
	}
	if (!deferred)
		memcpy(t->data, data, nbytes);
	else
		w->n_deferred++;
	t->n_dims = n_dims;
	for (int d = 0; d < OPUS_GGUF_MAX_DIMS; d++)
		t->ne[d] = d < n_dims ? ne[d] : 1;
	t->type = type;
	t->nbytes = nbytes;
	t->offset = w->data_size;
	w->data_size = end;
	w->n_tensors++;
	return OPUS_OK;
}

enum opus_status
opus_gguf_writer_add_tensor(struct opus_gguf_writer *w, const char *name,
							int n_dims, const int64_t *ne,
							enum opus_qtype type, const void *data,
							size_t nbytes, struct opus_error *err)
{
	return add_tensor(w, name, n_dims, ne, type, data, nbytes, false, err);
}

enum opus_status
opus_gguf_writer_add_tensor_info(struct opus_gguf_writer *w, const char *name,
								 int n_dims, const int64_t *ne,
								 enum opus_qtype type, struct opus_error *err)
{
	return add_tensor(w, name, n_dims, ne, type, NULL, 0, true, err);
}

/* ---- output ---- */

static void
put(struct out *o, const void *p, size_t n)
{
	if (o->error != 0 || n == 0)
		return;
	if (fwrite(p, 1, n, o->f) != n)
		o->error = errno ? errno : EIO;
	o->pos += n;
}

static void
put_u32(struct out *o, uint32_t v)
{
	put(o, &v, 4);
}

static void
put_u64(struct out *o, uint64_t v)
{
	put(o, &v, 8);
}

static void
put_str(struct out *o, const char *s)
{
	size_t		len = strlen(s);

	put_u64(o, len);
	put(o, s, len);
}

static void
put_pad(struct out *o, uint32_t alignment)
{
	static const uint8_t zeros[256];
	uint64_t	pad = (alignment - (o->pos % alignment)) % alignment;

	while (pad > 0)
	{
		size_t		k = pad < sizeof(zeros) ? (size_t) pad : sizeof(zeros);

		put(o, zeros, k);
		pad -= k;
	}
}

/* "<path>.tmp", malloc'd, or NULL. */
static char *
tmp_path(const char *path)
{
	size_t		plen = strlen(path);
	char	   *tmp = malloc(plen + 5);

	if (tmp != NULL)
	{
		memcpy(tmp, path, plen);
		memcpy(tmp + plen, ".tmp", 5);
	}
	return tmp;
}

/* Header, key/values, tensor infos and the padding before the data. */
static void
put_header(struct opus_gguf_writer *w, struct out *o)
{
	bool		add_alignment = w->alignment != OPUS_GGUF_DEFAULT_ALIGNMENT &&
		!w->has_alignment_key;

	put(o, OPUS_GGUF_MAGIC, 4);
	put_u32(o, OPUS_GGUF_VERSION);
	put_u64(o, w->n_tensors);
	put_u64(o, w->n_kv + (add_alignment ? 1 : 0));
	for (size_t i = 0; i < w->n_kv; i++)
	{
		put_str(o, w->kvs[i].key);
		put_u32(o, w->kvs[i].type);
		put(o, w->kvs[i].val, w->kvs[i].size);
	}
	if (add_alignment)
	{
		put_str(o, "general.alignment");
		put_u32(o, OPUS_GGUF_UINT32);
		put_u32(o, w->alignment);
	}
	for (size_t i = 0; i < w->n_tensors; i++)
	{
		const struct wtensor *t = &w->tensors[i];

		put_str(o, t->name);
		put_u32(o, (uint32_t) t->n_dims);
		for (int d = 0; d < t->n_dims; d++)
			put_u64(o, (uint64_t) t->ne[d]);
		put_u32(o, (uint32_t) t->type);
		put_u64(o, t->offset);
	}
	put_pad(o, w->alignment);
}

enum opus_status
opus_gguf_writer_write(struct opus_gguf_writer *w, const char *path,
					   struct opus_error *err)
{
	struct out	o = {0};
	char	   *tmp;
	int			saved;

	if (path == NULL || path[0] == '\0')
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "no output path");
	if (w->streaming)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "the file is already being streamed");
	if (w->n_deferred > 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "%zu tensors were declared without data: stream the file",
							  w->n_deferred);
	tmp = tmp_path(path);
	if (tmp == NULL)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	o.f = fopen(tmp, "wb");
	if (o.f == NULL)
	{
		saved = errno;
		free(tmp);
		return opus_error_set(err, OPUS_ERR_IO, "cannot create \"%s\": %s",
							  path, strerror(saved));
	}

	put_header(w, &o);
	for (size_t i = 0; i < w->n_tensors; i++)
	{
		put(&o, w->tensors[i].data, w->tensors[i].nbytes);
		put_pad(&o, w->alignment);
	}

	saved = o.error;
	if (fflush(o.f) != 0 && saved == 0)
		saved = errno ? errno : EIO;
	if (saved == 0 && fsync(fileno(o.f)) != 0)
		saved = errno;
	if (fclose(o.f) != 0 && saved == 0)
		saved = errno ? errno : EIO;
	if (saved == 0 && rename(tmp, path) != 0)
		saved = errno;
	if (saved != 0)
	{
		unlink(tmp);
		free(tmp);
		return opus_error_set(err, OPUS_ERR_IO, "cannot write \"%s\": %s",
							  path, strerror(saved));
	}
	free(tmp);
	return OPUS_OK;
}

/* ---- streaming ---- */

/* Write the tensors that already have their data, from w->cur on. */
static void
stream_held(struct opus_gguf_writer *w)
{
	while (w->cur < w->n_tensors && w->tensors[w->cur].data != NULL)
	{
		put(&w->so, w->tensors[w->cur].data, w->tensors[w->cur].nbytes);
		put_pad(&w->so, w->alignment);
		w->cur++;
	}
}

/* Close the stream and remove the temporary file; returns the error. */
static enum opus_status
stream_fail(struct opus_gguf_writer *w, int saved, struct opus_error *err)
{
	fclose(w->so.f);
	unlink(w->stream_tmp);
	w->streaming = false;
	return opus_error_set(err, OPUS_ERR_IO, "cannot write \"%s\": %s",
						  w->stream_path, strerror(saved));
}

enum opus_status
opus_gguf_writer_stream_begin(struct opus_gguf_writer *w, const char *path,
							  struct opus_error *err)
{
	int			saved;

	if (path == NULL || path[0] == '\0')
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "no output path");
	if (w->streaming || w->stream_path != NULL)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "this writer has already streamed a file");
	w->stream_path = strdup(path);
	w->stream_tmp = tmp_path(path);
	if (w->stream_path == NULL || w->stream_tmp == NULL)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	memset(&w->so, 0, sizeof(w->so));
	w->so.f = fopen(w->stream_tmp, "wb");
	if (w->so.f == NULL)
	{
		saved = errno;
		return opus_error_set(err, OPUS_ERR_IO, "cannot create \"%s\": %s",
							  path, strerror(saved));
	}
	w->streaming = true;
	w->cur = 0;
	w->cur_done = 0;
	put_header(w, &w->so);
	stream_held(w);
	if (w->so.error != 0)
		return stream_fail(w, w->so.error, err);
	return OPUS_OK;
}

enum opus_status
opus_gguf_writer_stream_data(struct opus_gguf_writer *w, const void *data,
							 size_t nbytes, struct opus_error *err)
{
	const uint8_t *p = data;

	if (!w->streaming)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "no file is being streamed");
	if (nbytes > 0 && data == NULL)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "no data");
	while (nbytes > 0)
	{
		struct wtensor *t;
		size_t		k;

		if (w->cur >= w->n_tensors)
			return opus_error_set(err, OPUS_ERR_INVALID_ARG,
								  "%zu bytes of data beyond the last tensor", nbytes);
		t = &w->tensors[w->cur];
		k = t->nbytes - w->cur_done;
		if (k > nbytes)
			k = nbytes;
		put(&w->so, p, k);
		p += k;
		nbytes -= k;
		w->cur_done += k;
		if (w->cur_done == t->nbytes)
		{
			put_pad(&w->so, w->alignment);
			w->cur++;
			w->cur_done = 0;
			stream_held(w);
		}
		if (w->so.error != 0)
			return stream_fail(w, w->so.error, err);
	}
	return OPUS_OK;
}

enum opus_status
opus_gguf_writer_stream_finish(struct opus_gguf_writer *w, struct opus_error *err)
{
	int			saved;

	if (!w->streaming)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "no file is being streamed");
	if (w->cur < w->n_tensors)
	{
		const struct wtensor *t = &w->tensors[w->cur];

		fclose(w->so.f);
		unlink(w->stream_tmp);
		w->streaming = false;
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "tensor \"%s\": %zu of %zu bytes of data supplied",
							  t->name, w->cur_done, t->nbytes);
	}
	saved = w->so.error;
	if (fflush(w->so.f) != 0 && saved == 0)
		saved = errno ? errno : EIO;
	if (saved != 0)
		return stream_fail(w, saved, err);
	w->streaming = false;
	if (fclose(w->so.f) != 0)
		saved = errno ? errno : EIO;
	if (saved == 0 && rename(w->stream_tmp, w->stream_path) != 0)
		saved = errno;
	if (saved != 0)
	{
		unlink(w->stream_tmp);
		return opus_error_set(err, OPUS_ERR_IO, "cannot write \"%s\": %s",
							  w->stream_path, strerror(saved));
	}
	return OPUS_OK;
}
