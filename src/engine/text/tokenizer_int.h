/*
 * tokenizer_int.h - internals shared by tokenizer.c (loading, decoding) and
 * tok_encode.c (pre-tokenizers, BPE and SentencePiece merging, encode).
 *
 * Not part of the engine API: only those files and tok_wpm.c include it.  A loaded
 * struct opus_tokenizer is immutable; the lookup helpers here only read it.
 */
#ifndef OPUS_TOKENIZER_INT_H
#define OPUS_TOKENIZER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "text/tokenizer.h"

/* llama.cpp's token attributes (bit flags), derived from token_type. */
#define ATTR_UNKNOWN		0x01
#define ATTR_UNUSED			0x02
#define ATTR_NORMAL			0x04
#define ATTR_CONTROL		0x08
#define ATTR_USER_DEFINED	0x10
#define ATTR_BYTE			0x20

/* GGUF tokenizer.ggml.token_type values. */
#define TT_NORMAL		1
#define TT_UNKNOWN		2
#define TT_CONTROL		3
#define TT_USER_DEFINED 4
#define TT_UNUSED		5
#define TT_BYTE			6

enum tok_kind
{
	KIND_BPE,
	KIND_SPM,
	KIND_WPM					/* WordPiece ("bert"), tok_wpm.c */
};

enum tok_pre
{
	PRE_DEFAULT,				/* no/unknown-but-"default" pre-tokenizer */
	PRE_GPT2,					/* gpt-2, phi-2, mpt, olmo, ... */
	PRE_SMOLLM,					/* digits split, then GPT-2 (starcoder family) */
	PRE_LLAMA3,					/* llama-bpe, llama3, dbrx, smaug-bpe ... */
	PRE_QWEN2					/* qwen2, stablelm2, deepseek-r1-qwen ... */
};

/* Open-addressing hash set of ids; the caller supplies key comparison. */
struct idmap
{
	uint32_t	mask;
	int32_t    *slot;			/* id, or -1 when empty */
	uint32_t   *hash;
};

struct opus_tokenizer
{
	enum tok_kind kind;
	enum tok_pre pre;
	int32_t		n_vocab;

	char	   *text;			/* all token texts, concatenated */
	size_t	   *text_off;
	uint32_t   *text_len;
	float	   *score;
	uint8_t    *attr;
	struct idmap vocab;

	/* BPE merges: merge i is "left right" = mtext[moff[i] .. + mlen[i]) */
	int32_t		n_merges;
	char	   *mtext;
	size_t	   *moff;
	uint32_t   *mlen;
	uint32_t   *msplit;			/* length of the left part */
	struct idmap merges;

	/* token_to_piece(special = true) of every token */
	char	   *piece;
	size_t	   *piece_off;
	uint32_t   *piece_len;

	int32_t		bos,
				eos,
				eot,
				eom,
				unk,
				pad,
				sep;			/* WPM: appended after the text */
	uint32_t	max_token_len;	/* longest token text, bytes */
	bool		add_bos;
	bool		add_eos;
	bool		add_space_prefix;
	bool		clean_spaces;
	bool		ignore_merges;
	uint8_t    *eog;			/* per token: 1 if end of generation */

	/* CONTROL/USER_DEFINED/UNKNOWN tokens, longest text first */
	int32_t    *special;
	int32_t		n_special;

	/* GPT-2 byte <-> unicode map */
	char		byte_utf8[256][2];
	uint8_t		byte_utf8_len[256];
	int16_t		cpt_byte[512];	/* mapped code point -> byte, or -1 */
};

/* ---------------------------------------------------------------- hashing */

static inline uint32_t
hash_bytes(uint32_t h, const char *s, size_t n)
{
	/* FNV-1a, 32 bit */
	for (size_t i = 0; i < n; i++)
	{
		h ^= (uint8_t) s[i];
		h *= 16777619u;
	}
	return h;
}

#define HASH_INIT 2166136261u

static inline const char *
tok_text(const struct opus_tokenizer *t, int32_t id, size_t *len)
{
	*len = t->text_len[id];
	return t->text + t->text_off[id];
}

/* Token id of exactly these bytes, or -1. */
static inline int32_t
vocab_find(const struct opus_tokenizer *t, const char *s, size_t n)
{
	uint32_t	h = hash_bytes(HASH_INIT, s, n);
	uint32_t	i = h & t->vocab.mask;

	for (;;)
	{
		int32_t		id = t->vocab.slot[i];

		if (id < 0)
			return -1;
		if (t->vocab.hash[i] == h && t->text_len[id] == n &&
			memcmp(t->text + t->text_off[id], s, n) == 0)
			return id;
		i = (i + 1) & t->vocab.mask;
	}
}

/* Rank of the merge (left, right), or -1. */
static inline int32_t
merge_find(const struct opus_tokenizer *t, const char *l, size_t ln,
		   const char *r, size_t rn)
{
	uint32_t	h = hash_bytes(hash_bytes(hash_bytes(HASH_INIT, l, ln), " ", 1), r, rn);
	uint32_t	i = h & t->merges.mask;

	for (;;)
	{
		int32_t		m = t->merges.slot[i];

		if (m < 0)
			return -1;
		if (t->merges.hash[i] == h && t->msplit[m] == ln &&
			t->mlen[m] == ln + 1 + rn)
		{
			const char *s = t->mtext + t->moff[m];

			if (memcmp(s, l, ln) == 0 && memcmp(s + ln + 1, r, rn) == 0)
				return m;
		}
		i = (i + 1) & t->merges.mask;
	}
}

/*
 * WordPiece-tokenize raw text (no special tokens added) and append the ids
 * to out (int32_t elements).  False only when out of memory.
 */
bool		opus_wpm_tokenize(const struct opus_tokenizer *t, const char *text,
							  size_t len, struct opus_vec *out);

#endif							/* OPUS_TOKENIZER_INT_H */
