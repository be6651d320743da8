/*
 * gguf_int.h - helpers shared by the GGUF reader (gguf.c) and writer
 * (gguf_write.c).  Not part of the engine's public API.
 */
#ifndef OPUS_GGUF_INT_H
#define OPUS_GGUF_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader and writer assume a little-endian host"
#endif

#define OPUS_GGUF_MAGIC "GGUF"
#define OPUS_GGUF_VERSION 3
/* Largest general.alignment accepted (and written): 1 MiB. */
#define OPUS_GGUF_MAX_ALIGNMENT (1u << 20)
/* llama.cpp (GGML_MAX_NAME) refuses tensor names of 64 bytes or more. */
#define OPUS_GGUF_MAX_NAME 63

/* "uint32", "string", ... or "unknown" for an out-of-range id. */
const char *opus_gguf_type_name(uint32_t type);

/* Bytes of one scalar of this type, or 0 for STRING, ARRAY and unknown ids. */
size_t		opus_gguf_scalar_size(uint32_t type);

/* True if s[0..n) is well-formed UTF-8 (no overlongs, surrogates, > U+10FFFF). */
bool		opus_gguf_utf8_valid(const uint8_t *s, size_t n);

/*
 * Validate one value of the given type in GGUF encoding at p, with at most
 * avail bytes readable.  On success *consumed is the encoded size.  Checks:
 * known type, no nested arrays, bools are 0 or 1, every length and count fits
 * in avail (overflow-safe).  key names the value in error messages.
 */
enum opus_status opus_gguf_check_value(const uint8_t *p, size_t avail,
									   uint32_t type, const char *key,
									   size_t *consumed,
									   struct opus_error *err);

#endif							/* OPUS_GGUF_INT_H */
