/*
 * quantize.c - rewrite a GGUF model with its weight matrices in another
 * tensor type (quantize.h; the command is `opus_engine quantize`,
 * cli/cmd_quantize.c).
 *
 * The rules follow llama.cpp's quantizer so that llama.cpp loads the result:
 *  - every metadata key is copied verbatim, except general.file_type, which
 *    is set to llama.cpp's LLAMA_FTYPE number for TYPE (Q4_K and Q5_K are
 *    labelled as the _M mixes, the usual names of such files);
 *    general.quantization_version is added if absent and TYPE is quantized;
 *  - weight matrices (tensors of 2+ dimensions whose name ends in "weight",
 *    except MoE router "ffn_gate_inp" weights, which stay F32, and BERT's
 *    "position_embd.weight" and "token_types.weight", which keep their type
 *    as llama.cpp's quantizer keeps them) become TYPE.
 *    A row length that is not a multiple of 256 cannot hold a K-quant and
 *    falls back as llama.cpp does: Q4_K -> Q5_0, Q5_K -> Q5_1,
 *    Q6_K -> Q8_0; a row length that is not a multiple of the (fallback)
 *    block size is stored as F16;
 *  - 1-D tensors (norms, biases) are stored as F32; other tensors keep their
 *    type;
 *  - a tensor already in its target type is copied byte for byte.
 * Conversion is row by row (dequantize to f32 with the type's reference
 * kernel, quantize with the reference quantizer), rows split over threads;
 * each row depends only on its input, so the output is the same bytes for
 * any thread count.  Memory: the input is mapped; the output is assembled by
 * the GGUF writer (which holds the converted tensors until it writes the
 * file); scratch is one f32 row per thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/quantize.h"

#define MAX_THREADS OPUS_QUANTIZE_MAX_THREADS

/* target types: name, llama.cpp file type (LLAMA_FTYPE_*) */
static const struct
{
	enum opus_qtype type;
	uint32_t	ftype;
}			targets[] = {
	{OPUS_TYPE_F32, 0},
	{OPUS_TYPE_F16, 1},
	{OPUS_TYPE_Q4_0, 2},
	{OPUS_TYPE_Q4_1, 3},
	{OPUS_TYPE_Q8_0, 7},
	{OPUS_TYPE_Q5_0, 8},
	{OPUS_TYPE_Q5_1, 9},
	{OPUS_TYPE_Q4_K, 15},		/* LLAMA_FTYPE_MOSTLY_Q4_K_M */
	{OPUS_TYPE_Q5_K, 17},		/* LLAMA_FTYPE_MOSTLY_Q5_K_M */
	{OPUS_TYPE_Q6_K, 18},
	{OPUS_TYPE_BF16, 32},
};

#define N_TARGETS (sizeof(targets) / sizeof(targets[0]))

static bool
ends_with(const char *s, const char *suffix)
{
	size_t		ls = strlen(s),
				lx = strlen(suffix);

	return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

enum opus_qtype
opus_quantize_row_type(int64_t n, enum opus_qtype target)
{
	enum opus_qtype type = target;

	if (n % 256 != 0)
	{
		if (type == OPUS_TYPE_Q4_K)
			type = OPUS_TYPE_Q5_0;
		else if (type == OPUS_TYPE_Q5_K)
			type = OPUS_TYPE_Q5_1;
		else if (type == OPUS_TYPE_Q6_K)
			type = OPUS_TYPE_Q8_0;
	}
	if (n % opus_qtype_info(type)->block_size != 0)
		type = OPUS_TYPE_F16;
	return type;
}

/* The type a tensor is written in (see the header comment). */
static enum opus_qtype
output_type(const struct opus_gguf_tensor *t, enum opus_qtype target)
{
	if (t->n_dims < 2)
		return OPUS_TYPE_F32;
	if (!ends_with(t->name, "weight"))
		return t->type;
	if (strstr(t->name, "ffn_gate_inp") != NULL)
		return OPUS_TYPE_F32;
	if (strcmp(t->name, "position_embd.weight") == 0 || strcmp(t->name, "token_types.weight") == 0)
		return t->type;
	return opus_quantize_row_type(t->ne[0], target);
}

/* ---- row conversion, split over threads ---- */

struct convert_job
{
	const uint8_t *src;
	uint8_t    *dst;
	size_t		src_row,
				dst_row;
	int64_t		n;				/* row length */
	int64_t		row_begin,
				row_end;
	opus_to_float_fn to_float;
	opus_from_float_fn from_float;
	bool		failed;			/* scratch allocation failed */
};

static void *
convert_rows(void *arg)
{
	struct convert_job *j = arg;
	float	   *row = malloc((size_t) j->n * sizeof(float));

	if (row == NULL)
	{
		j->failed = true;
		return NULL;
	}
	for (int64_t r = j->row_begin; r < j->row_end; r++)
	{
		j->to_float(j->src + (size_t) r * j->src_row, row, j->n);
		j->from_float(row, j->dst + (size_t) r * j->dst_row, j->n);
	}
	free(row);
	return NULL;
}

/*
 * Convert the rows of t into type `to`, writing nbytes at dst.  The source
 * type must have kernels.
 */
static enum opus_status
convert_tensor(const struct opus_gguf_tensor *t, enum opus_qtype to,
			   void *dst, int n_threads, struct opus_error *err)
{
	const struct opus_qtype_info *si = opus_qtype_info(t->type);
	const struct opus_qtype_info *di = opus_qtype_info(to);
	struct convert_job jobs[MAX_THREADS];
	pthread_t	tid[MAX_THREADS];
	bool		started[MAX_THREADS] = {false};
	int64_t		nrows = 1;
	size_t		src_row,
				dst_row;
	bool		failed = false;

	if (si == NULL || !si->supported || si->to_float_ref == NULL)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "tensor \"%s\": cannot convert from type %s",
							  t->name, si ? si->name : "?");
	for (int d = 1; d < t->n_dims; d++)
		nrows *= t->ne[d];		/* validated by the reader */
	if (!opus_qtype_row_size(t->type, t->ne[0], &src_row) ||
		!opus_qtype_row_size(to, t->ne[0], &dst_row))
		return opus_error_set(err, OPUS_ERR_INTERNAL,
							  "tensor \"%s\": bad row size", t->name);
	if (n_threads > nrows)
		n_threads = (int) nrows;
	if (n_threads < 1)
		n_threads = 1;

	for (int i = 0; i < n_threads; i++)
	{
		jobs[i] = (struct convert_job)
		{
			.src = t->data,
				.dst = dst,
				.src_row = src_row,
				.dst_row = dst_row,
				.n = t->ne[0],
				.row_begin = nrows * i / n_threads,
				.row_end = nrows * (i + 1) / n_threads,
				.to_float = si->to_float_ref,
				.from_float = di->from_float_ref,
		};
		if (i > 0)
			started[i] = pthread_create(&tid[i], NULL, convert_rows, &jobs[i]) == 0;
		if (i > 0 && !started[i])
			convert_rows(&jobs[i]);		/* no thread: do it here */
	}
	convert_rows(&jobs[0]);
	for (int i = 0; i < n_threads; i++)
	{
		if (started[i])
			pthread_join(tid[i], NULL);
		failed |= jobs[i].failed;
	}
	if (failed)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory converting \"%s\"",
							  t->name);
	return OPUS_OK;
}

/* ---- the whole file ---- */

static enum opus_status
copy_metadata(const struct opus_gguf *g, struct opus_gguf_writer *w,
			  uint32_t ftype, bool quantized, struct opus_error *err)
{
	enum opus_status st;
	bool		have_ftype = false;

	for (int64_t i = 0; i < opus_gguf_n_kv(g); i++)
	{
		const char *key = opus_gguf_kv_key(g, i);
		const void *val;
		size_t		size;

		if (strcmp(key, "general.file_type") == 0)
		{
			st = opus_gguf_writer_add_u32(w, key, ftype, err);
			have_ftype = true;
		}
		else
		{
			opus_gguf_kv_raw(g, i, &val, &size);
			st = opus_gguf_writer_add_raw(w, key, opus_gguf_kv_type(g, i), val, size, err);
		}
		if (st != OPUS_OK)
			return st;
	}
	if (!have_ftype)
	{
		st = opus_gguf_writer_add_u32(w, "general.file_type", ftype, err);
		if (st != OPUS_OK)
			return st;
	}
	if (quantized && opus_gguf_find_key(g, "general.quantization_version") < 0)
		return opus_gguf_writer_add_u32(w, "general.quantization_version", 2, err);
	return OPUS_OK;
}

bool
opus_quantize_target(int type_id, uint32_t *ftype)
{
	for (size_t i = 0; i < N_TARGETS; i++)
	{
		if ((int) targets[i].type == type_id)
		{
			if (ftype != NULL)
				*ftype = targets[i].ftype;
			return true;
		}
	}
	return false;
}

enum opus_status
opus_quantize_file(const char *in, const char *out, enum opus_qtype target,
				   int n_threads, struct opus_quantize_stats *stats,
				   struct opus_error *err)
{
	struct opus_gguf *g = NULL;
	struct opus_gguf_writer *w = NULL;
	enum opus_status st;
	uint32_t	ftype;
	bool		quantized = target != OPUS_TYPE_F32 && target != OPUS_TYPE_F16 &&
		target != OPUS_TYPE_BF16;

	memset(stats, 0, sizeof(*stats));
	if (!opus_quantize_target((int) target, &ftype))
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED, "unsupported target type %d", (int) target);
	st = opus_gguf_open(in, &g, err);
	if (st != OPUS_OK)
		return st;
	w = opus_gguf_writer_new((uint32_t) opus_gguf_alignment(g));
	if (w == NULL)
	{
		opus_gguf_close(g);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	}
	st = copy_metadata(g, w, ftype, quantized, err);

	for (int64_t i = 0; st == OPUS_OK && i < opus_gguf_n_tensors(g); i++)
	{
		const struct opus_gguf_tensor *t = opus_gguf_tensor_at(g, i);
		enum opus_qtype to = output_type(t, target);
		int64_t		nrows = 1;
		size_t		row,
					nbytes;
		void	   *buf;

		for (int d = 1; d < t->n_dims; d++)
			nrows *= t->ne[d];
		stats->in_bytes += t->nbytes;
		if (to == t->type)
		{
			st = opus_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, to,
											 t->data, t->nbytes, err);
			stats->n_copied++;
			stats->out_bytes += t->nbytes;
			continue;
		}
		if (t->n_dims >= 2 && to != target && ends_with(t->name, "weight"))
			stats->n_fallback++;
		if (!opus_qtype_row_size(to, t->ne[0], &row) ||
			__builtin_mul_overflow(row, (size_t) nrows, &nbytes))
		{
			st = opus_error_set(err, OPUS_ERR_FORMAT, "tensor \"%s\": size overflows",
								t->name);
			break;
		}
		buf = malloc(nbytes > 0 ? nbytes : 1);
		if (buf == NULL)
		{
			st = opus_error_set(err, OPUS_ERR_NOMEM,
								"out of memory for tensor \"%s\" (%zu bytes)",
								t->name, nbytes);
			break;
		}
		st = convert_tensor(t, to, buf, n_threads, err);
		if (st == OPUS_OK)
			st = opus_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, to,
											 buf, nbytes, err);
		free(buf);
		stats->n_converted++;
		stats->out_bytes += nbytes;
	}
	if (st == OPUS_OK)
		st = opus_gguf_writer_write(w, out, err);
	opus_gguf_writer_free(w);
	opus_gguf_close(g);
	return st;
}
