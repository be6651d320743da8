/*
 * genmodel.h - internal to `opus_engine genmodel` (cli_genmodel.c, whose
 * header describes the command): the seeded random numbers every part
 * draws from, the tensor row generators (genmodel_rows.c) and the
 * byte-level BPE vocabulary (genmodel_vocab.c).
 */
#ifndef OPUS_GENMODEL_H
#define OPUS_GENMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "quant/qtype.h"

/* ---- random numbers ---- */

static inline uint64_t
splitmix64(uint64_t *s)
{
	uint64_t	z = (*s += 0x9E3779B97F4A7C15ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

static inline uint64_t
hash_str(const char *s)
{
	uint64_t	h = 1469598103934665603ULL;

	for (; *s; s++)
	{
		h ^= (uint8_t) *s;
		h *= 1099511628211ULL;
	}
	return h;
}

/* uniform in [0, 1) */
static inline float
unif(uint64_t *s)
{
	return (float) (splitmix64(s) >> 40) * (1.0f / 16777216.0f);
}

/* ---- row generators (genmodel_rows.c) ---- */

enum tkind
{
	KIND_MATRIX,				/* normal-ish, deviation sigma, in the tensor's type */
	KIND_NORM,					/* f32 in [0.95, 1.05] */
	KIND_ROPE_FREQS				/* Llama 3.1 rope scaling factors, f32 */
};

struct tensor_spec
{
	char		name[64];
	int			n_dims;
	int64_t		ne[3];
	enum opus_qtype type;
	enum tkind	kind;
	float		sigma;
	size_t		row_bytes;
	int64_t		n_rows;
	uint16_t	dtab[2][64];	/* block scales (fill_scale_table) */
};

/*
 * Row `row` of tensor t in its type into dst (t->row_bytes), from the
 * generator seeded by (seed, t->name, row); scratch holds a row of floats.
 */
void		gen_row(const struct tensor_spec *t, int64_t row, uint64_t seed, uint8_t *dst,
					float *scratch);
/* t->dtab: the per-tensor table of block scales (and offsets). */
void		fill_scale_table(struct tensor_spec *t);

/* ---- the vocabulary (genmodel_vocab.c) ---- */

enum tok_flavor
{
	TOK_CHATML,					/* SmolLM2: <|endoftext|> <|im_start|> <|im_end|> first */
	TOK_LLAMA3,					/* Llama 3: 256 specials at the end */
	TOK_MISTRAL					/* <unk> <s> </s> [INST] [/INST] first */
};

struct strvec
{
	char	  **s;
	size_t		n;
	size_t		cap;
};

struct vocab
{
	struct strvec tokens;
	struct strvec merges;
	int32_t    *types;			/* token_type per token */
	int32_t		bos,
				eos,
				unk,
				pad;
	const char *pre;
	const char *chat_template;
	bool		add_bos;
};

/*
 * Build the vocabulary: specials, 256 byte tokens, merged letter tokens.
 * Deterministic (its own fixed seed).
 */
enum opus_status build_vocab(enum tok_flavor flavor, int64_t n_vocab, struct vocab *v,
							 struct opus_error *err);
void		vocab_free(struct vocab *v);

#endif							/* OPUS_GENMODEL_H */
