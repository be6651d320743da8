/*
 * unicode.h - the small amount of Unicode the tokenizer needs: a lenient
 * UTF-8 decoder that behaves like llama.cpp's (an invalid byte becomes
 * U+FFFD and decoding resumes at the next byte), an encoder, and per
 * code point category flags (letter, number, whitespace, ...).
 *
 * Categories come from libutf8proc (Unicode general categories); the
 * whitespace set is the Unicode White_Space property.  All functions are
 * pure and thread-safe.
 */
#ifndef OPUS_UNICODE_H
#define OPUS_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#define OPUS_UC_LETTER		0x01	/* \p{L} */
#define OPUS_UC_NUMBER		0x02	/* \p{N} */
#define OPUS_UC_PUNCT		0x04	/* \p{P} */
#define OPUS_UC_SYMBOL		0x08	/* \p{S} */
#define OPUS_UC_MARK		0x10	/* \p{M} */
#define OPUS_UC_SEPARATOR	0x20	/* \p{Z} */
#define OPUS_UC_OTHER		0x40	/* \p{C} and unassigned */
#define OPUS_UC_WHITESPACE	0x80	/* White_Space property (\s) */

#define OPUS_UC_REPLACEMENT 0xFFFDu

/*
 * Decode one code point from s[*off .. len) (caller guarantees *off < len)
 * and advance *off.  Like llama.cpp's decoder: only the lead byte's length
 * and the continuation bytes' top bits are checked (overlong forms and
 * surrogates pass); anything else yields U+FFFD and advances one byte.  Code
 * points above U+10FFFF are also treated as invalid.
 */
uint32_t	opus_utf8_decode(const uint8_t *s, size_t len, size_t *off);

/* Encode cpt (<= 0x10FFFF) into buf (4 bytes); returns the byte count. */
int			opus_utf8_encode(uint32_t cpt, char *buf);

/* Length of the UTF-8 sequence a lead byte announces (1 for a stray byte). */
static inline int
opus_utf8_seq_len(uint8_t lead)
{
	static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};

	return lut[lead >> 4];
}

/* Value of an ASCII hex digit, or -1 (escapes in grammars, regexes, Jinja
 * and JSON strings). */
static inline int
opus_hex_digit(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* OPUS_UC_* flags of a code point. */
uint8_t		opus_unicode_flags(uint32_t cpt);

#endif							/* OPUS_UNICODE_H */
