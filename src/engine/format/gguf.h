/*
 * gguf.h - a validating reader (and a small writer) for GGUF v2/v3 files.
 *
 * The file is untrusted.  opus_gguf_open() maps it read-only and checks, with
 * overflow-safe arithmetic, every count, length, type id, dimension, offset
 * and size before anything is used; a malformed file returns OPUS_ERR_FORMAT
 * with a message naming the problem.  After a successful open every accessor
 * below is safe: all pointers point inside the mapping (or inside the
 * reader's own index) and stay valid until opus_gguf_close().
 *
 * Strings in GGUF are not NUL-terminated; accessors return (pointer, length).
 * Keys and tensor names are additionally checked to be NUL-free UTF-8 and
 * unique.
 */
#ifndef OPUS_GGUF_H
#define OPUS_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/qtype.h"
#include "base/status.h"

enum opus_gguf_type
{
	OPUS_GGUF_UINT8 = 0,
	OPUS_GGUF_INT8 = 1,
	OPUS_GGUF_UINT16 = 2,
	OPUS_GGUF_INT16 = 3,
	OPUS_GGUF_UINT32 = 4,
	OPUS_GGUF_INT32 = 5,
	OPUS_GGUF_FLOAT32 = 6,
	OPUS_GGUF_BOOL = 7,
	OPUS_GGUF_STRING = 8,
	OPUS_GGUF_ARRAY = 9,
	OPUS_GGUF_UINT64 = 10,
	OPUS_GGUF_INT64 = 11,
	OPUS_GGUF_FLOAT64 = 12,
	OPUS_GGUF_TYPE__COUNT
};

#define OPUS_GGUF_MAX_DIMS 4
#define OPUS_GGUF_DEFAULT_ALIGNMENT 32

struct opus_gguf;

struct opus_gguf_tensor
{
	const char *name;			/* NUL-terminated copy owned by the reader */
	int			n_dims;			/* 1..4 */
	int64_t		ne[OPUS_GGUF_MAX_DIMS];	/* ne[0] is the row length; unused dims are 1 */
	enum opus_qtype type;
	uint64_t	offset;			/* relative to the data section */
	size_t		nbytes;
	const void *data;			/* inside the mapping */
};

/* Map and validate a file.  On failure *out is NULL and err says why. */
enum opus_status opus_gguf_open(const char *path, struct opus_gguf **out,
								struct opus_error *err);

/*
 * Validate a buffer already in memory (tests, fuzzing).  The buffer must stay
 * valid until close; it is not copied.
 */
enum opus_status opus_gguf_open_memory(const void *data, size_t size,
									   struct opus_gguf **out,
									   struct opus_error *err);

void		opus_gguf_close(struct opus_gguf *g);

uint32_t	opus_gguf_version(const struct opus_gguf *g);
size_t		opus_gguf_alignment(const struct opus_gguf *g);
const void *opus_gguf_base(const struct opus_gguf *g);	/* mapping start */
size_t		opus_gguf_size(const struct opus_gguf *g);	/* file size */

/* ---- metadata ---- */

int64_t		opus_gguf_n_kv(const struct opus_gguf *g);
/* Index of a key, or -1. */
int64_t		opus_gguf_find_key(const struct opus_gguf *g, const char *key);
const char *opus_gguf_kv_key(const struct opus_gguf *g, int64_t idx);	/* NUL-terminated */
enum opus_gguf_type opus_gguf_kv_type(const struct opus_gguf *g, int64_t idx);

/*
 * Raw bytes of a value as stored in the file (for a string: including its
 * 8-byte length; for an array: including its element type and count), used by
 * the writer to copy metadata verbatim.
 */
void		opus_gguf_kv_raw(const struct opus_gguf *g, int64_t idx,
							 const void **data, size_t *size);

/*
 * Typed getters by key.  Return OPUS_OK, OPUS_ERR_NOT_FOUND (key absent), or
 * OPUS_ERR_FORMAT (present with an incompatible type, or an integer that does
 * not fit the requested type).  Integer getters accept any integer GGUF type
 * whose value fits; float getters accept FLOAT32/FLOAT64.
 */
enum opus_status opus_gguf_get_u32(const struct opus_gguf *g, const char *key,
								   uint32_t *out, struct opus_error *err);
enum opus_status opus_gguf_get_i64(const struct opus_gguf *g, const char *key,
								   int64_t *out, struct opus_error *err);
enum opus_status opus_gguf_get_f32(const struct opus_gguf *g, const char *key,
								   float *out, struct opus_error *err);
enum opus_status opus_gguf_get_bool(const struct opus_gguf *g, const char *key,
									bool *out, struct opus_error *err);
enum opus_status opus_gguf_get_str(const struct opus_gguf *g, const char *key,
								   const char **s, size_t *len,
								   struct opus_error *err);

/*
 * Array access.  opus_gguf_get_arr returns the element type and count; for
 * numeric element types *data points at the packed little-endian elements
 * (possibly unaligned: read with memcpy).  Arrays of arrays are rejected at
 * open.  For string arrays use opus_gguf_arr_str (random access, O(1)).
 */
enum opus_status opus_gguf_get_arr(const struct opus_gguf *g, const char *key,
								   enum opus_gguf_type *elem_type,
								   uint64_t *n, const void **data,
								   struct opus_error *err);
/* The i-th string of the string array stored under key index kv_idx. */
enum opus_status opus_gguf_arr_str(const struct opus_gguf *g, int64_t kv_idx,
								   uint64_t i, const char **s, size_t *len);

/* ---- tensors ---- */

int64_t		opus_gguf_n_tensors(const struct opus_gguf *g);
const struct opus_gguf_tensor *opus_gguf_tensor_at(const struct opus_gguf *g,
												   int64_t i);
/* By name, or NULL. */
const struct opus_gguf_tensor *opus_gguf_find_tensor(const struct opus_gguf *g,
													 const char *name);

/* ---- writer (used by the quantizer and by tests that build files) ---- */

struct opus_gguf_writer;

struct opus_gguf_writer *opus_gguf_writer_new(uint32_t alignment);
void		opus_gguf_writer_free(struct opus_gguf_writer *w);
/* Add a key/value whose value bytes are in GGUF encoding (see opus_gguf_kv_raw). */
enum opus_status opus_gguf_writer_add_raw(struct opus_gguf_writer *w,
										  const char *key,
										  enum opus_gguf_type type,
										  const void *value, size_t size,
										  struct opus_error *err);
enum opus_status opus_gguf_writer_add_u32(struct opus_gguf_writer *w,
										  const char *key, uint32_t v,
										  struct opus_error *err);
enum opus_status opus_gguf_writer_add_str(struct opus_gguf_writer *w,
										  const char *key, const char *s,
										  struct opus_error *err);
/* Arrays of n strings / n int32 values. */
enum opus_status opus_gguf_writer_add_str_array(struct opus_gguf_writer *w,
												const char *key, char *const *s,
												size_t n, struct opus_error *err);
enum opus_status opus_gguf_writer_add_i32_array(struct opus_gguf_writer *w,
												const char *key, const int32_t *v,
												size_t n, struct opus_error *err);
/* Add a tensor; data (nbytes, which must equal the row size times rows) is copied. */
enum opus_status opus_gguf_writer_add_tensor(struct opus_gguf_writer *w,
											 const char *name, int n_dims,
											 const int64_t *ne,
											 enum opus_qtype type,
											 const void *data, size_t nbytes,
											 struct opus_error *err);
/* Write a GGUF v3 file (every tensor must have been added with its data). */
enum opus_status opus_gguf_writer_write(struct opus_gguf_writer *w,
										const char *path,
										struct opus_error *err);

/*
 * Streaming (see gguf_write.c): declare a tensor whose data is supplied later
 * through opus_gguf_writer_stream_data, in declaration order.  No keys or
 * tensors can be added once the stream has begun; freeing the writer before
 * stream_finish removes the partial file.
 */
enum opus_status opus_gguf_writer_add_tensor_info(struct opus_gguf_writer *w,
												  const char *name, int n_dims,
												  const int64_t *ne,
												  enum opus_qtype type,
												  struct opus_error *err);
enum opus_status opus_gguf_writer_stream_begin(struct opus_gguf_writer *w,
											   const char *path,
											   struct opus_error *err);
enum opus_status opus_gguf_writer_stream_data(struct opus_gguf_writer *w,
											  const void *data, size_t nbytes,
											  struct opus_error *err);
enum opus_status opus_gguf_writer_stream_finish(struct opus_gguf_writer *w,
												struct opus_error *err);

#endif							/* OPUS_GGUF_H */
