/*
 * quantize.h - rewriting a GGUF model with its weight matrices in another
 * tensor type, by llama.cpp's rules (quantize.c states them).  The command
 * is `opus_engine quantize` (cli/cmd_quantize.c).
 */
#ifndef OPUS_QUANTIZE_H
#define OPUS_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "format/gguf.h"
#include "quant/qtype.h"

#define OPUS_QUANTIZE_MAX_THREADS 64

struct opus_quantize_stats
{
	int64_t		n_converted;	/* tensors converted */
	int64_t		n_copied;		/* tensors copied byte for byte */
	int64_t		n_fallback;		/* weights stored in a fallback type */
	unsigned long long in_bytes;
	unsigned long long out_bytes;
};

/*
 * Whether a type id is a target of opus_quantize_file; if so and ftype is
 * not NULL, *ftype = llama.cpp's general.file_type for it (LLAMA_FTYPE_*).
 */
bool		opus_quantize_target(int type_id, uint32_t *ftype);

/*
 * The type a weight matrix with rows of n elements is stored in for target
 * type target: llama.cpp's fallbacks for K-quants on rows not a multiple of
 * 256 (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), then F16 for rows not a
 * multiple of the type's block size.
 */
enum opus_qtype opus_quantize_row_type(int64_t n, enum opus_qtype target);

/*
 * Write in's tensors to out in type target (opus_quantize_target must
 * accept it) with n_threads threads (1..OPUS_QUANTIZE_MAX_THREADS); the
 * output bytes do not depend on n_threads.
 */
enum opus_status opus_quantize_file(const char *in, const char *out, enum opus_qtype target,
									int n_threads, struct opus_quantize_stats *stats,
									struct opus_error *err);

#endif							/* OPUS_QUANTIZE_H */
