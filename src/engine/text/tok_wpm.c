/*
 * tok_wpm.c - WordPiece (tokenizer.ggml.model = "bert"), as llama.cpp's
 * llm_tokenizer_wpm_session tokenizes a GGUF converted from a Hugging Face
 * BERT tokenizer.
 *
 * The vocabulary is in "phantom space" form: a word-initial piece is stored
 * as U+2581 + piece, a "##" continuation as the bare piece, "[X]" specials
 * as they are.  Pre-processing, per code point of the (lenient) UTF-8 text:
 *   - map it to the first code point of its canonical decomposition (this is
 *     llama.cpp's "NFD": one code point in, one out);
 *   - whitespace ends the current word; U+0000, U+FFFD (invalid UTF-8),
 *     combining marks (\p{M}: so accents go, precomposed or not) and
 *     control/format/private-use/surrogate code points are dropped;
 *   - lowercase it (simple lowercase mapping);
 *   - punctuation, ASCII symbols and CJK ideographs are words of their own.
 * Each word, prefixed with U+2581, is then split greedily into the longest
 * vocabulary matches from left to right (byte substrings, at most the
 * longest token's length); if any position has no match the whole word
 * becomes [UNK].  There is no word length limit (Hugging Face's 100-char
 * limit is not applied by llama.cpp either).
 */
#include "text/tokenizer.h"

#include <utf8proc.h>

#include "text/tokenizer_int.h"
#include "text/unicode.h"

static bool
is_chinese_char(uint32_t c)
{
	return (c >= 0x4E00 && c <= 0x9FFF) ||
		(c >= 0x3400 && c <= 0x4DBF) ||
		(c >= 0x20000 && c <= 0x2A6DF) ||
		(c >= 0x2A700 && c <= 0x2B73F) ||
		(c >= 0x2B740 && c <= 0x2B81F) ||
		(c >= 0x2B920 && c <= 0x2CEAF) ||	/* sic: Hugging Face's range */
		(c >= 0xF900 && c <= 0xFAFF) ||
		(c >= 0x2F800 && c <= 0x2FA1F);
}

/* First code point of the canonical decomposition of c (c if none). */
static uint32_t
nfd_first(uint32_t c)
{
	utf8proc_int32_t d[32];
	int			last_bound = 0;
	utf8proc_ssize_t n;

	if (c < 0xC0)
		return c;
	n = utf8proc_decompose_char((utf8proc_int32_t) c, d, 32, UTF8PROC_DECOMPOSE,
								&last_bound);
	return n >= 1 && n <= 32 ? (uint32_t) d[0] : c;
}

static bool
is_control(uint32_t c)
{
	utf8proc_category_t k = utf8proc_category((utf8proc_int32_t) c);

	return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF ||
		k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CS;
}

static bool
put_id(struct opus_vec *out, int32_t id)
{
	int32_t    *p = opus_vec_push(out);

	if (!p)
		return false;
	*p = id;
	return true;
}

/* Split word ("\u2581" + text, n bytes) into pieces, or [UNK]. */
static bool
wpm_word(const struct opus_tokenizer *t, const char *w, size_t n,
		 struct opus_vec *out)
{
	size_t		before = out->n;

	for (size_t i = 0; i < n; i++)
	{
		size_t		hi = i + (size_t) t->max_token_len + 1;
		bool		match = false;

		if (hi > n)
			hi = n;
		for (size_t j = hi; j > i; j--)
		{
			int32_t		id = vocab_find(t, w + i, j - i);

			if (id >= 0)
			{
				if (!put_id(out, id))
					return false;
				match = true;
				i = j - 1;
				break;
			}
		}
		if (!match)
		{
			out->n = before;
			break;
		}
	}
	if (out->n == before)
		return put_id(out, t->unk);
	return true;
}

bool
opus_wpm_tokenize(const struct opus_tokenizer *t, const char *text, size_t len,
				  struct opus_vec *out)
{
	struct opus_buf	word = {0};
	bool		ok = true;

	/* every word starts with the phantom space */
#define WORD_START() (word.n = 0, opus_buf_put(&word, "\xe2\x96\x81", 3))
#define WORD_END() \
	do { \
		if (word.n > 3 && !wpm_word(t, word.p, word.n, out)) \
			goto oom; \
		if (!WORD_START()) \
			goto oom; \
	} while (0)

	if (!WORD_START())
		goto oom;
	for (size_t off = 0; off < len;)
	{
		uint32_t	c = nfd_first(opus_utf8_decode((const uint8_t *) text, len, &off));
		uint8_t		fl = opus_unicode_flags(c);
		char		enc[4];
		int			el;

		if (fl & OPUS_UC_WHITESPACE)
		{
			WORD_END();
			continue;
		}
		if (c == 0 || c == OPUS_UC_REPLACEMENT || (fl & OPUS_UC_MARK) || is_control(c))
			continue;
		el = opus_utf8_encode((uint32_t) utf8proc_tolower((utf8proc_int32_t) c), enc);
		if ((fl & OPUS_UC_PUNCT) || (c < 0x7F && (fl & OPUS_UC_SYMBOL)) ||
			is_chinese_char(c))
		{
			WORD_END();
			if (!opus_buf_put(&word, enc, (size_t) el))
				goto oom;
			WORD_END();
		}
		else if (!opus_buf_put(&word, enc, (size_t) el))
			goto oom;
	}
	WORD_END();
#undef WORD_START
#undef WORD_END
	free(word.p);
	return ok;
oom:
	free(word.p);
	return false;
}
