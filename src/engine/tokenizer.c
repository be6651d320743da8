/*
 * tokenizer.c - text <-> token ids, following llama.cpp's llama-vocab.
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
 * The pre-tokenizers mirror llama.cpp's behaviour, including its hand-written
 * splitters for the GPT-2 and Llama 3 patterns (which differ from a textbook
 * regex engine in small ways, e.g. how invalid UTF-8 becomes U+FFFD).  The
 * Qwen2 pattern is evaluated by a matcher with regex semantics (leftmost
 * alternative, greedy with backtracking), which is what llama.cpp's
 * std::regex fallback computes for it.
 *
 * A tokenizer is immutable after load; encode/decode allocate their scratch
 * per call, so one tokenizer may be shared by many threads.
 */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"

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
	KIND_SPM
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
				pad;
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

static inline const char *
tok_text(const struct opus_tokenizer *t, int32_t id, size_t *len)
{
	*len = t->text_len[id];
	return t->text + t->text_off[id];
}

/* Token id of exactly these bytes, or -1. */
static int32_t
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
static int32_t
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

/* ------------------------------------------------------- growable buffers */

struct buf
{
	char	   *p;
	size_t		n,
				cap;
};

static bool
buf_reserve(struct buf *b, size_t extra)
{
	size_t		need;

	if (__builtin_add_overflow(b->n, extra, &need))
		return false;
	if (need > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 64;
		char	   *p;

		while (cap < need)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return false;
		b->p = p;
		b->cap = cap;
	}
	return true;
}

static bool
buf_put(struct buf *b, const void *s, size_t n)
{
	if (!buf_reserve(b, n))
		return false;
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
	return true;
}

/* Growable array of fixed-size elements. */
struct vec
{
	void	   *p;
	size_t		n,
				cap,
				elem;
};

static void *
vec_push(struct vec *v)
{
	if (v->n == v->cap)
	{
		size_t		cap = v->cap ? v->cap * 2 : 32;
		void	   *p = realloc(v->p, cap * v->elem);

		if (!p)
			return NULL;
		v->p = p;
		v->cap = cap;
	}
	return (char *) v->p + v->elem * v->n++;
}

static bool
vec_reserve(struct vec *v, size_t n)
{
	if (n > v->cap)
	{
		void	   *p = realloc(v->p, n * v->elem);

		if (!p)
			return false;
		v->p = p;
		v->cap = n;
	}
	return true;
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

static bool
name_in(const char *s, size_t n, const char *const *names)
{
	for (int i = 0; names[i]; i++)
		if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0)
			return true;
	return false;
}

static bool
tok_is(const struct opus_tokenizer *t, int32_t id, const char *name)
{
	size_t		n;
	const char *s = tok_text(t, id, &n);

	return strlen(name) == n && memcmp(s, name, n) == 0;
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
render_piece(const struct opus_tokenizer *t, int32_t id, struct buf *out)
{
	size_t		n;
	const char *s = tok_text(t, id, &n);
	uint8_t		a = t->attr[id];

	if (a & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED))
		return buf_put(out, s, n);
	if (a & ATTR_NORMAL)
	{
		if (t->kind == KIND_SPM)
		{
			for (size_t i = 0; i < n; i++)
			{
				if (i + 2 < n && (uint8_t) s[i] == 0xe2 &&
					(uint8_t) s[i + 1] == 0x96 && (uint8_t) s[i + 2] == 0x81)
				{
					if (!buf_put(out, " ", 1))
						return false;
					i += 2;
				}
				else if (!buf_put(out, s + i, 1))
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

				if (!buf_put(out, &b, 1))
					return false;
			}
			else
			{
				/* llama.cpp's marker for a code point outside the map */
				char		hex[3];

				if (!buf_put(out, "[UNK_BYTE_0x", 12))
					return false;
				for (int k = 0; k < elen; k++)
				{
					snprintf(hex, sizeof(hex), "%02x", (uint8_t) enc[k]);
					if (!buf_put(out, hex, 2))
						return false;
				}
				if (!buf_put(out, s, n) || !buf_put(out, "]", 1))
					return false;
			}
		}
		return true;
	}
	if (a & ATTR_BYTE)
	{
		char		b = (char) token_byte(s, n);

		return buf_put(out, &b, 1);
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

/* Find the first token (by id) whose text is one of names, or -1. */
static int32_t
find_named(const struct opus_tokenizer *t, const char *const *names)
{
	for (int32_t id = 0; id < t->n_vocab; id++)
	{
		size_t		n;
		const char *s = tok_text(t, id, &n);

		if (n > 0 && n < 40 && name_in(s, n, names))
			return id;
	}
	return -1;
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
	for (int32_t id = 0; id < t->n_vocab; id++)
	{
		size_t		n;
		const char *s = tok_text(t, id, &n);

		if (n > 0 && n < 40 && name_in(s, n, eog_names))
		{
			t->eog[id] = 1;
			t->attr[id] |= ATTR_CONTROL;
		}
	}
	/* gpt-oss: these are always rendered */
	for (int32_t id = 0; id < t->n_vocab; id++)
	{
		if (tok_is(t, id, "<|channel|>") || tok_is(t, id, "<|message|>") ||
			tok_is(t, id, "<|start|>") || tok_is(t, id, "<|constrain|>"))
			t->attr[id] = ATTR_USER_DEFINED;
	}
	if (t->eos >= 0)
		t->eog[t->eos] = 1;
	if (t->eot >= 0)
		t->eog[t->eot] = 1;
	if (t->eom >= 0)
		t->eog[t->eom] = 1;

	/* harmony / solar-open: <|end|> is not end of generation there */
	for (int32_t id = 0; id < t->n_vocab; id++)
	{
		if (!t->eog[id])
			continue;
		if (tok_is(t, id, "<|return|>"))
			has_return = true;
		else if (tok_is(t, id, "<|call|>") || tok_is(t, id, "<|calls|>"))
			has_call = true;
		else if (tok_is(t, id, "<|flush|>"))
			has_flush = true;
		else if (tok_is(t, id, "<|end|>"))
			end_id = id;
		else if (tok_is(t, id, "<|tool_response>"))
			has_tool_response = true;
		else if (tok_is(t, id, "</s>"))
			s_id = id;
	}
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
	struct buf	pieces = {0};

	*out = NULL;
	if (opus_gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len, NULL) != OPUS_OK)
		return opus_error_set(err, OPUS_ERR_FORMAT, "no tokenizer.ggml.model");
	t = calloc(1, sizeof(*t));
	if (!t)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
	t->eot = t->eom = t->pad = -1;
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

/* ------------------------------------------------------- pre-tokenizers */

/*
 * Working state of one encode call.  Code points of the current fragment
 * with their category flags; word boundaries as a list of lengths.
 */
struct enc
{
	const struct opus_tokenizer *t;
	struct vec	out;			/* int32_t token ids */
	struct vec	cpt;			/* uint32_t */
	struct vec	flg;			/* uint8_t */
	struct vec	seg_a;			/* size_t segment lengths */
	struct vec	seg_b;
	struct buf	word;			/* byte-encoded word / SPM text */
	struct vec	sym;			/* struct sym */
	struct vec	heap;			/* struct bigram */
	bool		failed;			/* out of memory */
	enum opus_status status;	/* first error */
	char		msg[96];
};

static inline void
seg_add(struct enc *e, struct vec *segs, size_t len)
{
	size_t	   *p;

	if (len == 0)
		return;
	p = vec_push(segs);
	if (!p)
	{
		e->failed = true;
		return;
	}
	*p = len;
}

/* flags of the code point at pos, or 0 outside [ini, end) */
#define FL(pos) ((pos) >= ini && (pos) < end ? fl[pos] : 0)
#define CP(pos) ((pos) >= ini && (pos) < end ? cp[pos] : 0xffffffffu)
#define IS_L(f) (((f) & OPUS_UC_LETTER) != 0)
#define IS_N(f) (((f) & OPUS_UC_NUMBER) != 0)
#define IS_WS(f) (((f) & OPUS_UC_WHITESPACE) != 0)

/* \p{N} (each digit alone) or \p{N}+ (runs), as a regex split: gaps kept. */
static void
split_numbers(struct enc *e, size_t ini, size_t end, bool runs, struct vec *o)
{
	const uint8_t *fl = e->flg.p;
	size_t		gap = ini;

	for (size_t p = ini; p < end;)
	{
		if (IS_N(fl[p]))
		{
			size_t		q = p + 1;

			if (runs)
				while (q < end && IS_N(fl[q]))
					q++;
			seg_add(e, o, p - gap);
			seg_add(e, o, q - p);
			p = gap = q;
		}
		else
			p++;
	}
	seg_add(e, o, end - gap);
}

/* [0-9][0-9][0-9], leftmost non-overlapping matches, gaps kept. */
static void
split_digits3(struct enc *e, size_t ini, size_t end, struct vec *o)
{
	const uint32_t *cp = e->cpt.p;
	size_t		gap = ini;

#define ISD(c) ((c) >= '0' && (c) <= '9')
	for (size_t p = ini; p + 3 <= end;)
	{
		if (ISD(cp[p]) && ISD(cp[p + 1]) && ISD(cp[p + 2]))
		{
			seg_add(e, o, p - gap);
			seg_add(e, o, 3);
			p = gap = p + 3;
		}
		else
			p++;
	}
#undef ISD
	seg_add(e, o, end - gap);
}

/* [\p{P}\$\+<=>\^~\|]+ (the "default" pre-tokenizer's first pattern). */
static void
split_punct(struct enc *e, size_t ini, size_t end, struct vec *o)
{
	const uint32_t *cp = e->cpt.p;
	const uint8_t *fl = e->flg.p;
	size_t		gap = ini;

#define ISP(i) ((fl[i] & OPUS_UC_PUNCT) || (cp[i] < 128 && strchr("$+<=>^~|", (int) cp[i]) && cp[i]))
	for (size_t p = ini; p < end;)
	{
		if (ISP(p))
		{
			size_t		q = p + 1;

			while (q < end && ISP(q))
				q++;
			seg_add(e, o, p - gap);
			seg_add(e, o, q - p);
			p = gap = q;
		}
		else
			p++;
	}
#undef ISP
	seg_add(e, o, end - gap);
}

/*
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
 * the way llama.cpp's hand-written splitter evaluates it.
 */
static void
split_gpt2(struct enc *e, size_t ini, size_t end, struct vec *o)
{
	const uint32_t *cp = e->cpt.p;
	const uint8_t *fl = e->flg.p;
	size_t		prev = ini;

	for (size_t pos = ini; pos < end;)
	{
		uint32_t	c = cp[pos];
		uint8_t		f2;
		size_t		nws;

		if (c == '\'' && pos + 1 < end)
		{
			uint32_t	c1 = cp[pos + 1];

			if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
			{
				pos += 2;
				seg_add(e, o, pos - prev);
				prev = pos;
				continue;
			}
			if (pos + 2 < end)
			{
				uint32_t	c2 = cp[pos + 2];

				if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') ||
					(c1 == 'l' && c2 == 'l'))
				{
					pos += 3;
					seg_add(e, o, pos - prev);
					prev = pos;
					continue;
				}
			}
		}
		f2 = c == ' ' ? FL(pos + 1) : fl[pos];
		if (IS_L(f2) || IS_N(f2) || (!(IS_WS(f2) || IS_L(f2) || IS_N(f2)) && f2))
		{
			int			kind = IS_L(f2) ? 0 : IS_N(f2) ? 1 : 2;

			pos += (c == ' ');
			for (;;)
			{
				uint8_t		f = FL(pos);
				bool		ok = kind == 0 ? IS_L(f) : kind == 1 ? IS_N(f) :
					(!(IS_WS(f) || IS_L(f) || IS_N(f)) && f);

				if (!ok)
					break;
				pos++;
			}
			seg_add(e, o, pos - prev);
			prev = pos;
			continue;
		}
		nws = 0;
		while (IS_WS(FL(pos + nws)))
			nws++;
		if (nws > 1 && pos + nws < end)
		{
			pos += nws - 1;		/* \s+(?!\S): leave one for the next word */
			seg_add(e, o, pos - prev);
			prev = pos;
			continue;
		}
		if (nws > 0)
		{
			pos += nws;
			seg_add(e, o, pos - prev);
			prev = pos;
			continue;
		}
		pos++;					/* no match: a word of its own */
		seg_add(e, o, pos - prev);
		prev = pos;
	}
}

/*
 * (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
 * |[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,K}| ?[^\s\p{L}\p{N}]+[\r\n]*
 * |\s*[\r\n]+|\s+(?!\S)|\s+
 * with K = 3 (Llama 3) or K = 1 (Qwen2).  Every code point is matched by
 * some alternative, so the regex and llama.cpp's splitter agree.
 */
static void
split_llama3(struct enc *e, size_t ini, size_t end, size_t max_digits,
			 struct vec *o)
{
	const uint32_t *cp = e->cpt.p;
	const uint8_t *fl = e->flg.p;
	size_t		prev = ini;

#define LOW(c) ((c) >= 'A' && (c) <= 'Z' ? (c) + 32 : (c))
#define EMIT() do { seg_add(e, o, pos - prev); prev = pos; } while (0)
	for (size_t pos = ini; pos < end;)
	{
		uint32_t	c = cp[pos];
		uint8_t		f = fl[pos];
		uint8_t		f2;
		size_t		nws,
					last_nl;

		if (c == '\'' && pos + 1 < end)
		{
			uint32_t	c1 = LOW(cp[pos + 1]);

			if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
			{
				pos += 2;
				EMIT();
				continue;
			}
			if (pos + 2 < end)
			{
				uint32_t	c2 = LOW(cp[pos + 2]);

				if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') ||
					(c1 == 'l' && c2 == 'l'))
				{
					pos += 3;
					EMIT();
					continue;
				}
			}
		}
		/* [^\r\n\p{L}\p{N}]?\p{L}+ */
		if (!(c == '\r' || c == '\n' || IS_N(f)) && (IS_L(f) || IS_L(FL(pos + 1))))
		{
			pos++;
			while (IS_L(FL(pos)))
				pos++;
			EMIT();
			continue;
		}
		/* \p{N}{1,K} */
		if (IS_N(f))
		{
			size_t		n = 0;

			while (n < max_digits && IS_N(FL(pos)))
			{
				pos++;
				n++;
			}
			EMIT();
			continue;
		}
		/* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
		f2 = c == ' ' ? FL(pos + 1) : f;
		if (!(IS_WS(f2) || IS_L(f2) || IS_N(f2)) && f)
		{
			pos += (c == ' ');
			while (!(IS_WS(f2) || IS_L(f2) || IS_N(f2)) && f2)
			{
				pos++;
				f2 = FL(pos);
			}
			while (CP(pos) == '\r' || CP(pos) == '\n')
				pos++;
			EMIT();
			continue;
		}
		nws = 0;
		last_nl = 0;
		while (IS_WS(FL(pos + nws)))
		{
			uint32_t	c2 = cp[pos + nws];

			if (c2 == '\r' || c2 == '\n')
				last_nl = pos + nws + 1;
			nws++;
		}
		if (last_nl > 0)		/* \s*[\r\n]+ */
		{
			pos = last_nl;
			EMIT();
			continue;
		}
		if (nws > 1 && pos + nws < end) /* \s+(?!\S) */
		{
			pos += nws - 1;
			EMIT();
			continue;
		}
		if (nws > 0)			/* \s+ */
		{
			pos += nws;
			EMIT();
			continue;
		}
		pos++;
		EMIT();
	}
#undef LOW
#undef EMIT
}

#undef FL
#undef CP

enum splitter
{
	SPLIT_DIGIT,
	SPLIT_DIGITS,
	SPLIT_DIGIT3,
	SPLIT_PUNCT,
	SPLIT_GPT2,
	SPLIT_LLAMA3,
	SPLIT_QWEN2
};

/* Apply one splitter to every current segment (e->seg_a -> e->seg_b, swapped). */
static void
apply_split(struct enc *e, enum splitter s)
{
	size_t		start = 0;
	const size_t *segs = e->seg_a.p;
	struct vec	tmp;

	e->seg_b.n = 0;
	for (size_t i = 0; i < e->seg_a.n; i++)
	{
		size_t		ini = start,
					end = start + segs[i];

		switch (s)
		{
			case SPLIT_DIGIT:
				split_numbers(e, ini, end, false, &e->seg_b);
				break;
			case SPLIT_DIGITS:
				split_numbers(e, ini, end, true, &e->seg_b);
				break;
			case SPLIT_DIGIT3:
				split_digits3(e, ini, end, &e->seg_b);
				break;
			case SPLIT_PUNCT:
				split_punct(e, ini, end, &e->seg_b);
				break;
			case SPLIT_GPT2:
				split_gpt2(e, ini, end, &e->seg_b);
				break;
			case SPLIT_LLAMA3:
				split_llama3(e, ini, end, 3, &e->seg_b);
				break;
			case SPLIT_QWEN2:
				split_llama3(e, ini, end, 1, &e->seg_b);
				break;
		}
		start = end;
	}
	tmp = e->seg_a;
	e->seg_a = e->seg_b;
	e->seg_b = tmp;
}

/* ------------------------------------------------------------ BPE merge */

struct sym
{
	int32_t		prev,
				next;
	uint32_t	off;			/* into e->word */
	uint32_t	n;
};

struct bigram
{
	int32_t		left,
				right;
	float		score;			/* SPM */
	int32_t		rank;			/* BPE */
	uint32_t	size;
	uint32_t	ln,
				rn;				/* BPE: part lengths when queued */
};

/* heap order: BPE lowest rank first, SPM highest score first; then leftmost */
static inline bool
bigram_before(const struct bigram *a, const struct bigram *b, bool spm)
{
	if (spm)
	{
		if (a->score != b->score)
			return a->score > b->score;
	}
	else if (a->rank != b->rank)
		return a->rank < b->rank;
	return a->left < b->left;
}

static bool
heap_push(struct vec *h, const struct bigram *b, bool spm)
{
	struct bigram *a;
	size_t		i;

	if (!vec_push(h))
		return false;
	a = h->p;
	i = h->n - 1;
	while (i > 0)
	{
		size_t		parent = (i - 1) / 2;

		if (!bigram_before(b, &a[parent], spm))
			break;
		a[i] = a[parent];
		i = parent;
	}
	a[i] = *b;
	return true;
}

static struct bigram
heap_pop(struct vec *h, bool spm)
{
	struct bigram *a = h->p;
	struct bigram top = a[0];
	struct bigram last = a[--h->n];
	size_t		i = 0;

	for (;;)
	{
		size_t		c = 2 * i + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && bigram_before(&a[c + 1], &a[c], spm))
			c++;
		if (!bigram_before(&a[c], &last, spm))
			break;
		a[i] = a[c];
		i = c;
	}
	if (h->n > 0)
		a[i] = last;
	return top;
}

static void
push_token(struct enc *e, int32_t id)
{
	int32_t    *p = vec_push(&e->out);

	if (!p)
		e->failed = true;
	else
		*p = id;
}

/* Split e->word into one symbol per UTF-8 character. */
static bool
make_symbols(struct enc *e)
{
	const uint8_t *w = (const uint8_t *) e->word.p;
	size_t		n = e->word.n;
	struct sym *s;
	size_t		k = 0;

	if (!vec_reserve(&e->sym, n))
		return false;
	s = e->sym.p;
	for (size_t off = 0; off < n;)
	{
		size_t		len = (size_t) opus_utf8_seq_len(w[off]);

		if (len > n - off)
			len = n - off;
		s[k].off = (uint32_t) off;
		s[k].n = (uint32_t) len;
		s[k].prev = (int32_t) k - 1;
		off += len;
		s[k].next = off == n ? -1 : (int32_t) k + 1;
		k++;
	}
	e->sym.n = k;
	return true;
}

static void
bpe_add_bigram(struct enc *e, int32_t left, int32_t right)
{
	struct sym *s = e->sym.p;
	struct bigram b;
	int32_t		rank;

	if (left < 0 || right < 0)
		return;
	rank = merge_find(e->t, e->word.p + s[left].off, s[left].n,
					  e->word.p + s[right].off, s[right].n);
	if (rank < 0)
		return;
	b.left = left;
	b.right = right;
	b.rank = rank;
	b.score = 0;
	b.ln = s[left].n;
	b.rn = s[right].n;
	b.size = b.ln + b.rn;
	if (!heap_push(&e->heap, &b, false))
		e->failed = true;
}

/* BPE-encode the byte-encoded word in e->word and append its tokens. */
static void
bpe_word(struct enc *e)
{
	const struct opus_tokenizer *t = e->t;
	struct sym *s;

	if (e->word.n == 0)
		return;
	if (t->ignore_merges)
	{
		int32_t		id = vocab_find(t, e->word.p, e->word.n);

		if (id >= 0)
		{
			push_token(e, id);
			return;
		}
	}
	if (e->word.n > UINT32_MAX / 2 || !make_symbols(e))
	{
		e->failed = true;
		return;
	}
	e->heap.n = 0;
	for (size_t i = 1; i < e->sym.n; i++)
		bpe_add_bigram(e, (int32_t) i - 1, (int32_t) i);
	s = e->sym.p;
	while (e->heap.n > 0)
	{
		struct bigram b = heap_pop(&e->heap, false);
		struct sym *l = &s[b.left];
		struct sym *r = &s[b.right];

		/* stale: one side was merged into something else since queuing */
		if (l->n == 0 || r->n == 0 || l->n != b.ln || r->n != b.rn)
			continue;
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			s[r->next].prev = b.left;
		bpe_add_bigram(e, l->prev, b.left);
		bpe_add_bigram(e, b.left, l->next);
		s = e->sym.p;
	}
	for (int32_t i = 0; i != -1; i = s[i].next)
	{
		const char *txt = e->word.p + s[i].off;
		int32_t		id;

		if (s[i].n == 0)
			continue;
		id = vocab_find(t, txt, s[i].n);
		if (id >= 0)
			push_token(e, id);
		else
		{
			/* llama.cpp looks each byte up as a one-byte token */
			for (uint32_t k = 0; k < s[i].n; k++)
			{
				int32_t		bid = vocab_find(t, txt + k, 1);

				if (bid >= 0)
					push_token(e, bid);
			}
		}
	}
}

static const enum splitter pre_default[] = {SPLIT_PUNCT, SPLIT_GPT2, SPLIT_DIGITS, SPLIT_DIGIT3};
static const enum splitter pre_gpt2[] = {SPLIT_GPT2};
static const enum splitter pre_smollm[] = {SPLIT_DIGIT, SPLIT_GPT2};
static const enum splitter pre_llama3[] = {SPLIT_LLAMA3};
static const enum splitter pre_qwen2[] = {SPLIT_QWEN2};

/* Tokenize one raw-text fragment with byte-level BPE. */
static void
bpe_fragment(struct enc *e, const char *text, size_t len)
{
	const struct opus_tokenizer *t = e->t;
	const enum splitter *steps;
	size_t		n_steps;
	size_t		m = 0;
	size_t		start = 0;
	const uint32_t *cp;

	switch (t->pre)
	{
		case PRE_GPT2:
			steps = pre_gpt2;
			n_steps = 1;
			break;
		case PRE_SMOLLM:
			steps = pre_smollm;
			n_steps = 2;
			break;
		case PRE_LLAMA3:
			steps = pre_llama3;
			n_steps = 1;
			break;
		case PRE_QWEN2:
			steps = pre_qwen2;
			n_steps = 1;
			break;
		default:
			steps = pre_default;
			n_steps = 4;
			break;
	}

	/* decode to code points (invalid bytes become U+FFFD) */
	if (!vec_reserve(&e->cpt, len) || !vec_reserve(&e->flg, len))
	{
		e->failed = true;
		return;
	}
	for (size_t off = 0; off < len;)
	{
		uint32_t	c = opus_utf8_decode((const uint8_t *) text, len, &off);

		((uint32_t *) e->cpt.p)[m] = c;
		((uint8_t *) e->flg.p)[m] = opus_unicode_flags(c);
		m++;
	}
	e->cpt.n = e->flg.n = m;

	e->seg_a.n = 0;
	seg_add(e, &e->seg_a, m);
	for (size_t i = 0; i < n_steps && !e->failed; i++)
		apply_split(e, steps[i]);
	if (e->failed)
		return;

	cp = e->cpt.p;
	for (size_t w = 0; w < e->seg_a.n && !e->failed; w++)
	{
		size_t		wl = ((size_t *) e->seg_a.p)[w];

		e->word.n = 0;
		for (size_t i = start; i < start + wl; i++)
		{
			char		u[4];
			int			ul = opus_utf8_encode(cp[i], u);

			for (int k = 0; k < ul; k++)
			{
				uint8_t		b = (uint8_t) u[k];

				if (!buf_put(&e->word, t->byte_utf8[b], t->byte_utf8_len[b]))
				{
					e->failed = true;
					return;
				}
			}
		}
		start += wl;
		bpe_word(e);
	}
}

/* ------------------------------------------------------------------ SPM */

static void
spm_add_bigram(struct enc *e, int32_t left, int32_t right)
{
	struct sym *s = e->sym.p;
	struct bigram b;
	int32_t		id;

	if (left < 0 || right < 0)
		return;
	id = vocab_find(e->t, e->word.p + s[left].off, s[left].n + s[right].n);
	if (id < 0)
		return;
	b.left = left;
	b.right = right;
	b.score = e->t->score[id];
	b.rank = 0;
	b.size = s[left].n + s[right].n;
	b.ln = b.rn = 0;
	if (!heap_push(&e->heap, &b, true))
		e->failed = true;
}

static void
spm_byte(struct enc *e, uint8_t ch)
{
	static const char hex[] = "0123456789ABCDEF";
	char		name[6] = {'<', '0', 'x', hex[ch >> 4], hex[ch & 15], '>'};
	int32_t		id = vocab_find(e->t, name, 6);

	if (id < 0)
		id = vocab_find(e->t, (const char *) &ch, 1);
	if (id < 0)
	{
		if (e->status == OPUS_OK)
		{
			e->status = OPUS_ERR_TOKENIZE;
			snprintf(e->msg, sizeof(e->msg), "byte 0x%02x has no token in the vocabulary", ch);
		}
		return;
	}
	push_token(e, id);
}

/* Tokenize one raw-text fragment with SentencePiece. */
static void
spm_fragment(struct enc *e, const char *text, size_t len, bool prefix_space)
{
	struct sym *s;

	e->word.n = 0;
	if (prefix_space && !buf_put(&e->word, "\xe2\x96\x81", 3))
		goto oom;
	for (size_t i = 0; i < len; i++)
	{
		bool		ok = text[i] == ' ' ? buf_put(&e->word, "\xe2\x96\x81", 3) :
			buf_put(&e->word, text + i, 1);

		if (!ok)
			goto oom;
	}
	if (e->word.n == 0)
		return;
	if (e->word.n > UINT32_MAX / 2 || !make_symbols(e))
		goto oom;
	e->heap.n = 0;
	for (size_t i = 1; i < e->sym.n; i++)
		spm_add_bigram(e, (int32_t) i - 1, (int32_t) i);
	s = e->sym.p;
	while (e->heap.n > 0)
	{
		struct bigram b = heap_pop(&e->heap, true);
		struct sym *l = &s[b.left];
		struct sym *r = &s[b.right];

		if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
			continue;
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			s[r->next].prev = b.left;
		spm_add_bigram(e, l->prev, b.left);
		spm_add_bigram(e, b.left, l->next);
		s = e->sym.p;
	}

	/*
	 * Every merged symbol is a vocabulary entry by construction, so only
	 * single characters can miss; llama.cpp's reverse-merge lookup never
	 * applies to them (its keys are all vocabulary entries) and they fall
	 * back to byte tokens.
	 */
	for (int32_t i = 0; i != -1; i = s[i].next)
	{
		const char *txt = e->word.p + s[i].off;
		int32_t		id;

		if (s[i].n == 0)
			continue;
		id = vocab_find(e->t, txt, s[i].n);
		if (id >= 0)
			push_token(e, id);
		else
			for (uint32_t k = 0; k < s[i].n; k++)
				spm_byte(e, (uint8_t) txt[k]);
	}
	return;
oom:
	e->failed = true;
}

/* ------------------------------------------------- special token split */

struct frag
{
	int32_t		tok;			/* >= 0: a special token; -1: raw text */
	size_t		off,
				len;
};

static bool
partition_special(const struct opus_tokenizer *t, const char *text, size_t len,
				  bool parse_special, struct vec *frags)
{
	struct vec	next = {.elem = sizeof(struct frag)};
	struct frag *f;
	uint8_t    *pairs;			/* which byte pairs occur in the text */

	frags->n = 0;
	if (len == 0)
		return true;
	f = vec_push(frags);
	if (!f)
		return false;
	f->tok = -1;
	f->off = 0;
	f->len = len;

	pairs = calloc(65536 / 8, 1);
	if (!pairs)
		return false;
	for (size_t i = 0; i + 1 < len; i++)
	{
		unsigned	k = ((unsigned) (uint8_t) text[i] << 8) | (uint8_t) text[i + 1];

		pairs[k >> 3] |= (uint8_t) (1u << (k & 7));
	}

	for (int32_t si = 0; si < t->n_special; si++)
	{
		int32_t		id = t->special[si];
		size_t		tl;
		const char *tt = tok_text(t, id, &tl);
		bool		found = false;

		if (!parse_special && (t->attr[id] & (ATTR_CONTROL | ATTR_UNKNOWN)))
			continue;
		if (tl == 0 || tl > len)
			continue;
		if (tl >= 2)
		{
			unsigned	k = ((unsigned) (uint8_t) tt[0] << 8) | (uint8_t) tt[1];

			if (!(pairs[k >> 3] & (1u << (k & 7))))
				continue;
		}

		next.n = 0;
		for (size_t fi = 0; fi < frags->n; fi++)
		{
			struct frag cur = ((struct frag *) frags->p)[fi];
			struct frag *nf;

			if (cur.tok >= 0)
			{
				if (!(nf = vec_push(&next)))
					goto oom;
				*nf = cur;
				continue;
			}
			while (cur.len > 0)
			{
				const char *m = memmem(text + cur.off, cur.len, tt, tl);
				size_t		mo;

				if (!m)
					break;
				found = true;
				mo = (size_t) (m - text);
				if (mo > cur.off)
				{
					if (!(nf = vec_push(&next)))
						goto oom;
					nf->tok = -1;
					nf->off = cur.off;
					nf->len = mo - cur.off;
				}
				if (!(nf = vec_push(&next)))
					goto oom;
				nf->tok = id;
				nf->off = mo;
				nf->len = tl;
				cur.len -= mo + tl - cur.off;
				cur.off = mo + tl;
			}
			if (cur.len > 0)
			{
				if (!(nf = vec_push(&next)))
					goto oom;
				*nf = cur;
			}
		}
		if (found)
		{
			struct vec	tmp = *frags;

			*frags = next;
			next = tmp;
		}
	}
	free(next.p);
	free(pairs);
	return true;
oom:
	free(next.p);
	free(pairs);
	return false;
}

/* ---------------------------------------------------------------- encode */

enum opus_status
opus_tokenizer_encode(const struct opus_tokenizer *t, const char *text,
					  size_t len, bool add_special, bool parse_special,
					  int32_t *out, int64_t max_out, int64_t *n_out,
					  struct opus_error *err)
{
	struct enc	e = {
		.t = t,
		.out = {.elem = sizeof(int32_t)},
		.cpt = {.elem = sizeof(uint32_t)},
		.flg = {.elem = 1},
		.seg_a = {.elem = sizeof(size_t)},
		.seg_b = {.elem = sizeof(size_t)},
		.sym = {.elem = sizeof(struct sym)},
		.heap = {.elem = sizeof(struct bigram)},
		.status = OPUS_OK,
	};
	struct vec	frags = {.elem = sizeof(struct frag)};
	enum opus_status st = OPUS_OK;

	*n_out = 0;
	if (text == NULL && len > 0)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "text is NULL");
	if (max_out < 0 || (max_out > 0 && out == NULL))
		return opus_error_set(err, OPUS_ERR_INVALID_ARG, "bad output buffer");

	if (!partition_special(t, text, len, parse_special, &frags))
		e.failed = true;

	if (add_special && t->add_bos)
		push_token(&e, t->bos);
	if (t->kind == KIND_BPE)
	{
		for (size_t i = 0; i < frags.n && !e.failed; i++)
		{
			struct frag *f = &((struct frag *) frags.p)[i];

			if (f->tok >= 0)
				push_token(&e, f->tok);
			else
				bpe_fragment(&e, text + f->off, f->len);
		}
	}
	else
	{
		bool		prev_special = true;	/* prefix a space at the start */

		for (size_t i = 0; i < frags.n && !e.failed; i++)
		{
			struct frag *f = &((struct frag *) frags.p)[i];

			if (f->tok >= 0)
			{
				push_token(&e, f->tok);
				prev_special = true;
			}
			else
			{
				spm_fragment(&e, text + f->off, f->len,
							 t->add_space_prefix && prev_special);
				prev_special = false;
			}
		}
	}
	if (add_special && t->add_eos)
		push_token(&e, t->eos);

	if (e.failed)
		st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory while tokenizing");
	else if (e.status != OPUS_OK)
		st = opus_error_set(err, e.status, "%s", e.msg);
	else
	{
		*n_out = (int64_t) e.out.n;
		if ((int64_t) e.out.n > max_out)
			st = opus_error_set(err, OPUS_ERR_CAPACITY,
								"text needs %zu tokens, buffer holds %lld",
								e.out.n, (long long) max_out);
		else if (e.out.n > 0)
			memcpy(out, e.out.p, e.out.n * sizeof(int32_t));
	}
	free(frags.p);
	free(e.out.p);
	free(e.cpt.p);
	free(e.flg.p);
	free(e.seg_a.p);
	free(e.seg_b.p);
	free(e.word.p);
	free(e.sym.p);
	free(e.heap.p);
	return st;
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
	struct buf	b = {0};
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
			if (!buf_put(&b, p, pn))
			{
				free(b.p);
				return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory");
			}
		}
		remove_space = false;
	}
	if (!buf_reserve(&b, 1))
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
