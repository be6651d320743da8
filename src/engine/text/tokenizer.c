/*
 * tokenizer.c - text <-> token ids, following llama.cpp's llama-vocab:
 * loading the vocabulary from GGUF metadata, token pieces, detokenization
 * and the streaming UTF-8 assembler.  Encoding lives in tok_encode.c.
 *
 * Two families:
 *  - `gpt2`: byte-level BPE.  Text is split on special tokens, then by the
 *    pre-tokenizer of tokenizer.ggml.pre into words; each word's UTF-8 bytes
 *    are mapped to printable code points (the GPT-2 byte<->unicode table)
 *    and merged pairwise by merge rank (lowest rank first, leftmost first).
 *  - `llama`: SentencePiece.  Spaces become U+2581, the text is split into
 *    UTF-8 characters and adjacent pairs whose concatenation is a vocabulary
 *    entry are merged by score (highest first); characters that never form
 *    a token fall back to <0xXX> byte tokens.
 *
 * Special tokens and the end-of-generation set are derived as llama.cpp
 * derives them (token types, then detection by text: <|im_end|>, <|eot_id|>,
 * FIM tokens, ...).  Where llama.cpp's choice depends on hash-map iteration
 * order (an auto-detected EOT when several candidates exist) the lowest id
 * wins here.
 *
 * A tokenizer is immutable after load; encode/decode allocate their scratch
 * per call, so one tokenizer may be shared by many threads.
 */
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_int.h"
#include "text/unicode.h"

/* ------------------------------------------------------------ hash sets */

static bool
idmap_init(struct idmap *m, size_t n)
{
	size_t		cap = 16;

	while (cap < n * 2)
		cap <<= 1;
	m->mask = (uint32_t) (cap - 1);
	m->slot = malloc(cap * sizeof(int32_t));
	m->hash = malloc(cap * sizeof(uint32_t));
	if (!m->slot || !m->hash)
		return false;
	memset(m->slot, 0xff, cap * sizeof(int32_t));
	return true;
}

static void
idmap_free(struct idmap *m)
{
	free(m->slot);
	free(m->hash);
}

/* ------------------------------------------------------------ byte map */

static void
init_byte_map(struct opus_tokenizer *t)
{
	int			n = 0;

	for (int i = 0; i < 512; i++)
		t->cpt_byte[i] = -1;
	for (int b = 0; b < 256; b++)
	{
		uint32_t	cpt;

		/* printable Latin-1 maps to itself, the rest to 256 + n */
		if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae)
			cpt = (uint32_t) b;
		else
			cpt = 256 + (uint32_t) n++;
		t->byte_utf8_len[b] = (uint8_t) opus_utf8_encode(cpt, t->byte_utf8[b]);
		t->cpt_byte[cpt] = (int16_t) b;
	}
}

/* ------------------------------------------------------------- loading */

static const char *const eot_names[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
	"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
	"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
	"<end_of_utterance>", NULL
};
static const char *const fim_pad_names[] = {
	"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL
};
static const char *const fim_rep_names[] = {
	"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL
};
static const char *const fim_sep_names[] = {"<|file_sep|>", NULL};
static const char *const eog_names[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
	"<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
	"<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
	"<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
	"[e~[", NULL
};

/* Id of the token whose text is name, or -1. */
static int32_t
named(const struct opus_tokenizer *t, const char *name)
{
	return vocab_find(t, name, strlen(name));
}

static enum opus_status
pre_from_name(const char *s, size_t n, enum tok_pre *pre, bool *clean,
			  bool *ignore_merges, bool *add_bos)
{
	static const struct
	{
		const char *name;
		enum tok_pre pre;
		int8_t		clean;		/* -1 keep the default (true) */
		bool		ignore_merges;
		bool		add_bos;
	}			table[] = {
		{"default", PRE_DEFAULT, -1, false, false},
		{"llama3", PRE_LLAMA3, -1, true, true},
		{"llama-v3", PRE_LLAMA3, -1, true, true},
		{"llama-bpe", PRE_LLAMA3, -1, true, true},
		{"falcon3", PRE_LLAMA3, -1, true, true},
		{"dbrx", PRE_LLAMA3, -1, false, false},
		{"smaug-bpe", PRE_LLAMA3, -1, false, false},
		{"gpt-2", PRE_GPT2, -1, false, false},
		{"phi-2", PRE_GPT2, -1, false, false},
		{"mpt", PRE_GPT2, -1, false, false},
		{"olmo", PRE_GPT2, -1, false, false},
		{"jais", PRE_GPT2, -1, false, false},
		{"starcoder", PRE_SMOLLM, -1, false, false},
		{"refact", PRE_SMOLLM, -1, false, false},
		{"command-r", PRE_SMOLLM, 0, false, false},
		{"smollm", PRE_SMOLLM, 0, false, false},
		{"codeshell", PRE_SMOLLM, -1, false, false},
		{"exaone", PRE_SMOLLM, -1, false, false},
		{"minerva-7b", PRE_SMOLLM, -1, false, false},
		{"qwen2", PRE_QWEN2, 0, false, false},
		{"deepseek-r1-qwen", PRE_QWEN2, 0, false, false},
		{"megrez", PRE_QWEN2, -1, false, false},
		{"stablelm2", PRE_QWEN2, -1, false, false},
	};

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
	{
		if (strlen(table[i].name) == n && memcmp(table[i].name, s, n) == 0)
		{
			*pre = table[i].pre;
			if (table[i].clean == 0)
				*clean = false;
			*ignore_merges = table[i].ignore_merges;
			if (table[i].add_bos)
				*add_bos = true;
			return OPUS_OK;
		}
	}
	return OPUS_ERR_UNSUPPORTED;
}

/* Read an optional token id key; out-of-range ids keep the default. */
static void
read_special_id(const struct opus_gguf *g, const char *key, int32_t n_vocab,
				int32_t *id)
{
	uint32_t	v;

	if (*id >= n_vocab)
		*id = -1;
	if (opus_gguf_get_u32(g, key, &v, NULL) == OPUS_OK && v < (uint32_t) n_vocab)
		*id = (int32_t) v;
}

static void
read_bool(const struct opus_gguf *g, const char *key, bool *out)
{
	bool		v;

	if (opus_gguf_get_bool(g, key, &v, NULL) == OPUS_OK)
		*out = v;
}

static int
cmp_special(const void *a, const void *b, void *arg)
{
	const struct opus_tokenizer *t = arg;
	int32_t		x = *(const int32_t *) a;
	int32_t		y = *(const int32_t *) b;

	if (t->text_len[x] != t->text_len[y])
		return t->text_len[x] > t->text_len[y] ? -1 : 1;
	return x < y ? -1 : (x > y);
}

/* token_to_byte: the two hex digits of "<0xXX>". */
static uint8_t
token_byte(const char *s, size_t n)
{
	char		hex[3] = {0, 0, 0};

	if (n > 3)
		hex[0] = s[3];
	if (n > 4)
		hex[1] = s[4];
	return (uint8_t) strtol(hex, NULL, 16);
}

/* Render one token as llama.cpp's token_to_piece(special = true) does. */
static bool
render_piece(const struct opus_tokenizer *t, int32_t id, struct opus_buf *out)
{
	size_t		n;
	const char *s = tok_text(t, id, &n);
	uint8_t		a = t->attr[id];

	if (a & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED))
		return opus_buf_put(out, s, n);
	if (a & ATTR_NORMAL)
	{
		if (t->kind == KIND_SPM || t->kind == KIND_WPM)
		{
			for (size_t i = 0; i < n; i++)
			{
				if (i + 2 < n && (uint8_t) s[i] == 0xe2 &&
					(uint8_t) s[i + 1] == 0x96 && (uint8_t) s[i + 2] == 0x81)
				{
					if (!opus_buf_put(out, " ", 1))
						return false;
					i += 2;
				}
				else if (!opus_buf_put(out, s + i, 1))
					return false;
			}
			return true;
		}
		/* byte-level BPE: every code point maps back to one byte */
		for (size_t off = 0; off < n;)
		{
			uint32_t	c = opus_utf8_decode((const uint8_t *) s, n, &off);
			char		enc[4];
			int			elen = opus_utf8_encode(c, enc);

			if (c < 512 && t->cpt_byte[c] >= 0)
			{
				char		b = (char) t->cpt_byte[c];

				if (!opus_buf_put(out, &b, 1))
					return false;
			}
			else
			{
				/* llama.cpp's marker for a code point outside the map */
				char		hex[3];

				if (!opus_buf_put(out, "[UNK_BYTE_0x", 12))
					return false;
				for (int k = 0; k < elen; k++)
				{
					snprintf(hex, sizeof(hex), "%02x", (uint8_t) enc[k]);
					if (!opus_buf_put(out, hex, 2))
						return false;
				}
				if (!opus_buf_put(out, s, n) || !opus_buf_put(out, "]", 1))
					return false;
			}
		}
		return true;
	}
	if (a & ATTR_BYTE)
	{
		char		b = (char) token_byte(s, n);

		return opus_buf_put(out, &b, 1);
	}
	return true;				/* undefined / unused: empty */
}

static enum opus_status
load_merges(struct opus_tokenizer *t, const struct opus_gguf *g,
			struct opus_error *err)
{
	int64_t		kidx = opus_gguf_find_key(g, "tokenizer.ggml.merges");
	enum opus_gguf_type et;
	uint64_t	n;
	const void *data;
	size_t		total = 0;
	size_t		pos = 0;

	if (kidx < 0)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "gpt2 tokenizer without tokenizer.ggml.merges");
	if (opus_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &data, err) != OPUS_OK ||
		et != OPUS_GGUF_STRING)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "tokenizer.ggml.merges is not a string array");
	if (n > INT32_MAX)
		return opus_error_set(err, OPUS_ERR_FORMAT, "too many merges");
	for (uint64_t i = 0; i < n; i++)
	{
		const char *s;
		size_t		len;

		if (opus_gguf_arr_str(g, kidx, i, &s, &len) != OPUS_OK || len > UINT32_MAX ||
			__builtin_add_overflow(total, len, &total))
			return opus_error_set(err, OPUS_ERR_FORMAT, "bad merge %llu",
								  (unsigned long long) i);
	}
	t->n_merges = (int32_t) n;
	t->mtext = malloc(total ? total : 1);
	t->moff = malloc((n ? n : 1) * sizeof(size_t));
	t->mlen = malloc((n ? n : 1) * sizeof(uint32_t));
	t->msplit = malloc((n ? n : 1) * sizeof(uint32_t));
	if (!t->mtext || !t->moff || !t->mlen || !t->msplit || !idmap_init(&t->merges, n))
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory loading merges");
	for (uint64_t i = 0; i < n; i++)
	{
		const char *s;
		size_t		len;
		const char *sp;
		uint32_t	h,
					slot;

		opus_gguf_arr_str(g, kidx, i, &s, &len);
		memcpy(t->mtext + pos, s, len);
		t->moff[i] = pos;
		t->mlen[i] = (uint32_t) len;
		pos += len;
		/* split at the first space after position 0, as llama.cpp does */
		sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
		if (sp == NULL)
		{
			t->msplit[i] = UINT32_MAX;	/* ("", "") can never be looked up */
			continue;
		}
		t->msplit[i] = (uint32_t) (sp - s);
		h = hash_bytes(HASH_INIT, s, len);
		slot = h & t->merges.mask;
		for (;;)
		{
			int32_t		m = t->merges.slot[slot];

			if (m < 0)
			{
				t->merges.slot[slot] = (int32_t) i;
				t->merges.hash[slot] = h;
				break;
			}
			/* a duplicate pair keeps its first (lowest) rank */
			if (t->merges.hash[slot] == h && t->mlen[m] == len &&
				t->msplit[m] == t->msplit[i] &&
				memcmp(t->mtext + t->moff[m], s, len) == 0)
				break;
			slot = (slot + 1) & t->merges.mask;
		}
	}
	return OPUS_OK;
}

static enum opus_status
load_vocab(struct opus_tokenizer *t, const struct opus_gguf *g,
		   struct opus_error *err)
{
	int64_t		kidx = opus_gguf_find_key(g, "tokenizer.ggml.tokens");
	enum opus_gguf_type et;
	uint64_t	n;
	const void *data;
	size_t		total = 0;
	size_t		pos = 0;
	char		empty_name[32];

	if (kidx < 0)
		return opus_error_set(err, OPUS_ERR_FORMAT, "no tokenizer.ggml.tokens");
	if (opus_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data, err) != OPUS_OK ||
		et != OPUS_GGUF_STRING)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "tokenizer.ggml.tokens is not a string array");
	if (n == 0 || n > INT32_MAX)
		return opus_error_set(err, OPUS_ERR_FORMAT, "bad vocabulary size %llu",
							  (unsigned long long) n);
	for (uint64_t i = 0; i < n; i++)
	{
		const char *s;
		size_t		len;

		if (opus_gguf_arr_str(g, kidx, i, &s, &len) != OPUS_OK || len > UINT32_MAX ||
			__builtin_add_overflow(total, len + sizeof(empty_name), &total))
			return opus_error_set(err, OPUS_ERR_FORMAT, "bad token %llu",
								  (unsigned long long) i);
	}
	t->n_vocab = (int32_t) n;
	t->text = malloc(total);
	t->text_off = malloc(n * sizeof(size_t));
	t->text_len = malloc(n * sizeof(uint32_t));
	t->score = calloc(n, sizeof(float));
	t->attr = malloc(n);
	t->eog = calloc(n, 1);
	if (!t->text || !t->text_off || !t->text_len || !t->score || !t->attr ||
		!t->eog || !idmap_init(&t->vocab, n))
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory loading vocabulary");

	for (uint64_t i = 0; i < n; i++)
	{
		const char *s;
		size_t		len;
		uint32_t	h,
					slot;

		opus_gguf_arr_str(g, kidx, i, &s, &len);
		if (len == 0)
		{
			/* llama.cpp names empty tokens so that they stay unique */
			len = (size_t) snprintf(empty_name, sizeof(empty_name),
									"[EMPTY_%llu]", (unsigned long long) i);
			s = empty_name;
		}
		memcpy(t->text + pos, s, len);
		t->text_off[i] = pos;
		t->text_len[i] = (uint32_t) len;
		if (len > t->max_token_len)
			t->max_token_len = (uint32_t) len;
		pos += len;
		h = hash_bytes(HASH_INIT, s, len);
		slot = h & t->vocab.mask;
		while (t->vocab.slot[slot] >= 0)
		{
			int32_t		o = t->vocab.slot[slot];

			if (t->vocab.hash[slot] == h && t->text_len[o] == len &&
				memcmp(t->text + t->text_off[o], s, len) == 0)
				return opus_error_set(err, OPUS_ERR_FORMAT,
									  "duplicate token in vocabulary: ids %d and %llu",
									  o, (unsigned long long) i);
			slot = (slot + 1) & t->vocab.mask;
		}
		t->vocab.slot[slot] = (int32_t) i;
		t->vocab.hash[slot] = h;
	}

	/* scores: float32 or int32 */
	if (opus_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &data, NULL) == OPUS_OK)
	{
		if ((et != OPUS_GGUF_FLOAT32 && et != OPUS_GGUF_INT32) ||
			n < (uint64_t) t->n_vocab)
			return opus_error_set(err, OPUS_ERR_FORMAT, "bad tokenizer.ggml.scores");
		for (int32_t i = 0; i < t->n_vocab; i++)
		{
			if (et == OPUS_GGUF_FLOAT32)
				memcpy(&t->score[i], (const char *) data + 4 * (size_t) i, 4);
			else
			{
				int32_t		v;

				memcpy(&v, (const char *) data + 4 * (size_t) i, 4);
				t->score[i] = (float) v;
			}
		}
	}

	/* token types -> attributes */
	memset(t->attr, ATTR_NORMAL, (size_t) t->n_vocab);
	if (opus_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data, NULL) == OPUS_OK)
	{
		if (et != OPUS_GGUF_INT32 || n < (uint64_t) t->n_vocab)
			return opus_error_set(err, OPUS_ERR_FORMAT, "bad tokenizer.ggml.token_type");
		for (int32_t i = 0; i < t->n_vocab; i++)
		{
			int32_t		tt;
			uint8_t		a;

			memcpy(&tt, (const char *) data + 4 * (size_t) i, 4);
			switch (tt)
			{
				case TT_NORMAL:
					a = ATTR_NORMAL;
					break;
				case TT_UNKNOWN:
					a = ATTR_UNKNOWN;
					break;
				case TT_CONTROL:
					a = ATTR_CONTROL;
					break;
				case TT_USER_DEFINED:
					a = ATTR_USER_DEFINED;
					break;
				case TT_UNUSED:
					a = ATTR_UNUSED;
					break;
				case TT_BYTE:
					a = ATTR_BYTE;
					break;
				default:
					a = 0;		/* undefined */
					break;
			}
			t->attr[i] = a;
		}
	}
	return OPUS_OK;
}

/* The lowest id among the tokens whose text is one of names, or -1. */
static int32_t
find_named(const struct opus_tokenizer *t, const char *const *names)
{
	int32_t		best = -1;

	for (int i = 0; names[i]; i++)
	{
		int32_t		id = named(t, names[i]);

		if (id >= 0 && (best < 0 || id < best))
			best = id;
	}
	return best;
}

static void
mark_control(struct opus_tokenizer *t, int32_t id)
{
	if (id >= 0)
		t->attr[id] |= ATTR_CONTROL;
}

static void
setup_special(struct opus_tokenizer *t, const struct opus_gguf *g)
{
	int32_t		fim_pad = -1,
				fim_rep = -1,
				fim_sep = -1;
	int32_t		end_id = -1;
	bool		has_return = false,
				has_call = false,
				has_flush = false,
				has_tool_response = false;
	int32_t		s_id = -1;

	read_special_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos);
	read_special_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos);
	read_special_id(g, "tokenizer.ggml.eot_token_id", t->n_vocab, &t->eot);
	read_special_id(g, "tokenizer.ggml.eom_token_id", t->n_vocab, &t->eom);
	read_special_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk);
	read_special_id(g, "tokenizer.ggml.padding_token_id", t->n_vocab, &t->pad);
	read_special_id(g, "tokenizer.ggml.seperator_token_id", t->n_vocab, &t->sep);
	read_special_id(g, "tokenizer.ggml.fim_pad_token_id", t->n_vocab, &fim_pad);
	read_special_id(g, "tokenizer.ggml.fim_rep_token_id", t->n_vocab, &fim_rep);
	read_special_id(g, "tokenizer.ggml.fim_sep_token_id", t->n_vocab, &fim_sep);

	/* auto-detection by text, as llama.cpp does; marks them CONTROL */
	if (t->eot < 0)
	{
		t->eot = find_named(t, eot_names);
		mark_control(t, t->eot);
	}
	if (t->eom < 0)
	{
		static const char *const eom_names[] = {"<|eom_id|>", NULL};

		t->eom = find_named(t, eom_names);
		mark_control(t, t->eom);
	}
	if (fim_pad < 0)
	{
		fim_pad = find_named(t, fim_pad_names);
		mark_control(t, fim_pad);
	}
	if (fim_rep < 0)
	{
		fim_rep = find_named(t, fim_rep_names);
		mark_control(t, fim_rep);
	}
	if (fim_sep < 0)
	{
		fim_sep = find_named(t, fim_sep_names);
		mark_control(t, fim_sep);
	}

	/* end-of-generation set */
	if (fim_pad >= 0)
		t->eog[fim_pad] = 1;
	if (fim_rep >= 0)
		t->eog[fim_rep] = 1;
	if (fim_sep >= 0)
		t->eog[fim_sep] = 1;
	for (int i = 0; eog_names[i]; i++)
	{
		int32_t		id = named(t, eog_names[i]);

		if (id >= 0)
		{
			t->eog[id] = 1;
			t->attr[id] |= ATTR_CONTROL;
		}
	}
	/* gpt-oss: these are always rendered */
	{
		static const char *const always[] = {
			"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL
		};

		for (int i = 0; always[i]; i++)
		{
			int32_t		id = named(t, always[i]);

			if (id >= 0)
				t->attr[id] = ATTR_USER_DEFINED;
		}
	}
	if (t->eos >= 0)
		t->eog[t->eos] = 1;
	/* llama.cpp reports a WordPiece vocabulary's [PAD] as end of generation */
	if (t->kind == KIND_WPM && t->pad >= 0)
		t->eog[t->pad] = 1;
	if (t->eot >= 0)
		t->eog[t->eot] = 1;
	if (t->eom >= 0)
		t->eog[t->eom] = 1;

	/* harmony / solar-open: <|end|> is not end of generation there */
#define EOG_ID(name) (named(t, name) >= 0 && t->eog[named(t, name)] ? named(t, name) : -1)
	has_return = EOG_ID("<|return|>") >= 0;
	has_call = EOG_ID("<|call|>") >= 0 || EOG_ID("<|calls|>") >= 0;
	has_flush = EOG_ID("<|flush|>") >= 0;
	has_tool_response = EOG_ID("<|tool_response>") >= 0;
	end_id = EOG_ID("<|end|>");
	s_id = EOG_ID("</s>");
#undef EOG_ID
	if (end_id >= 0 && ((has_return && has_call) || (has_call && has_flush)))
	{
		t->eog[end_id] = 0;
		t->attr[end_id] = ATTR_USER_DEFINED;
	}
	if (has_tool_response && s_id >= 0)
	{
		t->eog[s_id] = 0;
		t->attr[s_id] = ATTR_NORMAL;
	}
}

enum opus_status
opus_tokenizer_load(const struct opus_gguf *g, struct opus_tokenizer **out,
					struct opus_error *err)
{
	struct opus_tokenizer *t;
	const char *model,
			   *pre = NULL;
	size_t		model_len,
				pre_len = 0;
	enum opus_status st;
	struct opus_buf	pieces = {0};

	*out = NULL;
	if (opus_gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len, NULL) != OPUS_OK)
		return opus_error_set(err, OPUS_ERR_FORMAT, "no tokenizer.ggml.model");
	t = calloc(1, sizeof(*t));
	if (!t)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	t->eot = t->eom = t->pad = t->sep = -1;
	init_byte_map(t);

	if (model_len == 4 && memcmp(model, "gpt2", 4) == 0)
	{
		t->kind = KIND_BPE;
		t->bos = t->eos = 11;	/* llama.cpp's defaults for BPE */
		t->unk = -1;
		t->add_bos = false;
		t->add_space_prefix = false;
		t->clean_spaces = true;
		t->pre = PRE_DEFAULT;
		if (opus_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len, NULL) == OPUS_OK &&
			pre_from_name(pre, pre_len, &t->pre, &t->clean_spaces,
						  &t->ignore_merges, &t->add_bos) != OPUS_OK)
		{
			st = opus_error_set(err, OPUS_ERR_UNSUPPORTED,
								"unsupported pre-tokenizer \"%.*s\"",
								(int) (pre_len > 64 ? 64 : pre_len), pre);
			goto fail;
		}
	}
	else if (model_len == 5 && memcmp(model, "llama", 5) == 0)
	{
		t->kind = KIND_SPM;
		t->bos = 1;
		t->eos = 2;
		t->unk = 0;
		t->add_bos = true;
		t->add_space_prefix = true;
		t->clean_spaces = false;
	}
	else if (model_len == 4 && memcmp(model, "bert", 4) == 0)
	{
		/* llama.cpp's defaults for WordPiece */
		t->kind = KIND_WPM;
		t->bos = 101;			/* [CLS] */
		t->eos = -1;
		t->unk = 100;
		t->sep = 102;
		t->pad = 0;
		t->add_bos = false;
		t->add_space_prefix = false;
		t->clean_spaces = true;
	}
	else
	{
		st = opus_error_set(err, OPUS_ERR_UNSUPPORTED, "unsupported tokenizer model \"%.*s\"",
							(int) (model_len > 64 ? 64 : model_len), model);
		goto fail;
	}
	read_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);

	if ((st = load_vocab(t, g, err)) != OPUS_OK)
		goto fail;
	if (t->kind == KIND_BPE && (st = load_merges(t, g, err)) != OPUS_OK)
		goto fail;

	setup_special(t, g);
	read_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
	read_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos);
	if (t->add_bos && t->bos < 0)
	{
		st = opus_error_set(err, OPUS_ERR_FORMAT, "add_bos_token is set but there is no bos token");
		goto fail;
	}
	if (t->kind == KIND_WPM && t->unk < 0)
	{
		st = opus_error_set(err, OPUS_ERR_FORMAT, "WordPiece vocabulary without an unknown token");
		goto fail;
	}
	if (t->add_eos && t->eos < 0)
	{
		st = opus_error_set(err, OPUS_ERR_FORMAT, "add_eos_token is set but there is no eos token");
		goto fail;
	}

	/* special tokens, longest first (ties by id, for determinism) */
	t->special = malloc((size_t) t->n_vocab * sizeof(int32_t));
	if (!t->special)
	{
		st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
		goto fail;
	}
	for (int32_t id = 0; id < t->n_vocab; id++)
		if (t->attr[id] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))
			t->special[t->n_special++] = id;
	qsort_r(t->special, (size_t) t->n_special, sizeof(int32_t), cmp_special, t);

	/* piece cache */
	t->piece_off = malloc((size_t) t->n_vocab * sizeof(size_t));
	t->piece_len = malloc((size_t) t->n_vocab * sizeof(uint32_t));
	if (!t->piece_off || !t->piece_len)
	{
		st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
		goto fail;
	}
	for (int32_t id = 0; id < t->n_vocab; id++)
	{
		size_t		before = pieces.n;

		if (!render_piece(t, id, &pieces))
		{
			free(pieces.p);
			st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
			goto fail;
		}
		t->piece_off[id] = before;
		t->piece_len[id] = (uint32_t) (pieces.n - before);
	}
	t->piece = pieces.p ? pieces.p : malloc(1);
	*out = t;
	return OPUS_OK;

fail:
	opus_tokenizer_free(t);
	return st;
}

void
opus_tokenizer_free(struct opus_tokenizer *t)
{
	if (!t)
		return;
	free(t->text);
	free(t->text_off);
	free(t->text_len);
	free(t->score);
	free(t->attr);
	free(t->eog);
	idmap_free(&t->vocab);
	free(t->mtext);
	free(t->moff);
	free(t->mlen);
	free(t->msplit);
	idmap_free(&t->merges);
	free(t->piece);
	free(t->piece_off);
	free(t->piece_len);
	free(t->special);
	free(t);
}

int32_t
opus_tokenizer_n_vocab(const struct opus_tokenizer *t)
{
	return t->n_vocab;
}

static uint64_t
fnv1a(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++)
	{
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

uint64_t
opus_tokenizer_vocab_hash(const struct opus_tokenizer *t)
{
	uint64_t	h = 14695981039346656037ULL;
	uint32_t	head[4];

	head[0] = (uint32_t) t->kind;
	head[1] = (uint32_t) t->n_vocab;
	head[2] = (uint32_t) t->bos;
	head[3] = (uint32_t) t->eos;
	h = fnv1a(h, head, sizeof(head));
	for (int32_t i = 0; i < t->n_vocab; i++)
	{
		h = fnv1a(h, &t->text_len[i], sizeof(t->text_len[i]));
		h = fnv1a(h, t->text + t->text_off[i], t->text_len[i]);
		h = fnv1a(h, &t->attr[i], 1);
	}
	return h;
}

int32_t
opus_tokenizer_bos(const struct opus_tokenizer *t)
{
	return t->bos;
}

int32_t
opus_tokenizer_eos(const struct opus_tokenizer *t)
{
	return t->eos;
}

int32_t
opus_tokenizer_eot(const struct opus_tokenizer *t)
{
	return t->eot;
}

bool
opus_tokenizer_is_eog(const struct opus_tokenizer *t, int32_t tok)
{
	return tok >= 0 && tok < t->n_vocab && t->eog[tok];
}

bool
opus_tokenizer_adds_bos(const struct opus_tokenizer *t)
{
	return t->add_bos;
}

/* ---------------------------------------------------------------- decode */

int
opus_tokenizer_piece(const struct opus_tokenizer *t, int32_t tok,
					 bool render_special, char *buf, int cap)
{
	uint32_t	n;

	if (tok < 0 || tok >= t->n_vocab)
		return -1;
	if (!render_special && (t->attr[tok] & (ATTR_UNKNOWN | ATTR_CONTROL)))
		return 0;
	n = t->piece_len[tok];
	if (cap > 0)
		memcpy(buf, t->piece + t->piece_off[tok], n < (uint32_t) cap ? n : (size_t) cap);
	return (int) n;
}

/* llama.cpp's clean_spaces post-processing, in place; returns the new length. */
static size_t
clean_spaces(char *s, size_t total)
{
	size_t		n1 = total,
				n2,
				n3;

	/* " ?", " !", " .", " ," lose the space */
	total = total ? 1 : 0;
	for (size_t i = 1; i < n1; i++)
	{
		char		x = s[i];

		if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
			total--;
		s[total++] = x;
	}
	/* " ' " becomes "'" */
	n2 = total;
	total = total ? 1 : 0;
	for (size_t i = 1; i < n2; i++)
	{
		char		x = s[i];

		if (x == '\'' && i + 1 < n2 && s[i - 1] == ' ' && s[i + 1] == ' ')
		{
			total--;
			s[++i] = '\0';
		}
		s[total++] = x;
	}
	/* " 's", " 'm", " 're", " 've" lose the space */
	n3 = total;
	total = total ? 1 : 0;
	for (size_t i = 1; i < n3; i++)
	{
		char		x = s[i];

		if (s[i - 1] == ' ' && x == '\'' && i + 1 < n3)
		{
			char		x1 = s[i + 1];

			if (x1 == 's' || x1 == 'm')
				total--;
			else if (x1 != 't' && x1 != 'd' && i + 2 < n3)
			{
				char		x2 = s[i + 2];

				if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))
					total--;
			}
		}
		s[total++] = x;
	}
	return total;
}

enum opus_status
opus_tokenizer_decode(const struct opus_tokenizer *t, const int32_t *toks,
					  int64_t n, bool render_special, char **out, size_t *len,
					  struct opus_error *err)
{
	struct opus_buf	b = {0};
	bool		remove_space = t->add_space_prefix;

	*out = NULL;
	*len = 0;
	if (n < 0 || (n > 0 && toks == NULL))
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "bad token array");
	for (int64_t i = 0; i < n; i++)
	{
		int32_t		tok = toks[i];
		const char *p;
		size_t		pn;

		if (tok < 0 || tok >= t->n_vocab)
		{
			free(b.p);
			return opus_error_set(err, OPUS_ERR_TOKENIZE, "invalid token id %d at %lld",
								  tok, (long long) i);
		}
		if (render_special || !(t->attr[tok] & (ATTR_UNKNOWN | ATTR_CONTROL)))
		{
			p = t->piece + t->piece_off[tok];
			pn = t->piece_len[tok];
			if (remove_space && pn > 0 && p[0] == ' ')
			{
				p++;
				pn--;
			}
			if (!opus_buf_put(&b, p, pn))
			{
				free(b.p);
				return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
			}
		}
		remove_space = false;
	}
	if (!opus_buf_reserve(&b, 1))
	{
		free(b.p);
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	}
	if (t->clean_spaces)
		b.n = clean_spaces(b.p, b.n);
	b.p[b.n] = '\0';
	*out = b.p;
	*len = b.n;
	return OPUS_OK;
}

/* ------------------------------------------------------ UTF-8 streaming */

/*
 * Length of the complete UTF-8 sequence at s[0..n), 0 if s holds a valid
 * but incomplete prefix of one, or -1 if s[0] does not start a valid
 * sequence (then one byte is passed through).
 */
static int
utf8_complete(const uint8_t *s, int n)
{
	int			need;
	uint8_t		lo = 0x80,
				hi = 0xbf;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		need = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
	{
		need = 3;
		if (s[0] == 0xe0)
			lo = 0xa0;
		else if (s[0] == 0xed)
			hi = 0x9f;
	}
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
	{
		need = 4;
		if (s[0] == 0xf0)
			lo = 0x90;
		else if (s[0] == 0xf4)
			hi = 0x8f;
	}
	else
		return -1;
	for (int k = 1; k < need; k++)
	{
		if (k >= n)
			return 0;
		if (k == 1 ? (s[k] < lo || s[k] > hi) : (s[k] & 0xc0) != 0x80)
			return -1;
	}
	return need;
}

int
opus_utf8_stream_feed(struct opus_utf8_stream *s, const char *piece, int n,
					  char *out)
{
	int			w = 0;
	int			i = 0;
	int			total;
	char		tmp[8];

	/* pending (< 4 bytes) followed by the piece, read without copying it */
	total = s->n_pending + (n > 0 ? n : 0);
#define AT(k) ((k) < s->n_pending ? (uint8_t) s->pending[k] : (uint8_t) piece[(k) - s->n_pending])
	while (i < total)
	{
		uint8_t		seq[4];
		int			avail = total - i < 4 ? total - i : 4;
		int			c;

		for (int k = 0; k < avail; k++)
			seq[k] = AT(i + k);
		c = utf8_complete(seq, avail);
		if (c == 0)
			break;				/* incomplete tail: hold back */
		if (c < 0)
			c = 1;
		for (int k = 0; k < c; k++)
			out[w++] = (char) seq[k];
		i += c;
	}
	/* keep the tail */
	{
		int			k = 0;

		for (; i < total; i++)
			tmp[k++] = (char) AT(i);
		memcpy(s->pending, tmp, (size_t) k);
		s->n_pending = k;
	}
#undef AT
	return w;
}

int
opus_utf8_stream_flush(struct opus_utf8_stream *s, char *out)
{
	int			n = s->n_pending;

	memcpy(out, s->pending, (size_t) n);
	s->n_pending = 0;
	return n;
}
