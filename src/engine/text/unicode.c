/*
 * unicode.c - UTF-8 decoding/encoding and category flags for the tokenizer.
 *
 * General categories come from libutf8proc (utf8proc_category is a two-level
 * table lookup, cheap enough to call per code point).
 */
#include "text/unicode.h"

#include <stdbool.h>
#include <utf8proc.h>

uint32_t
opus_utf8_decode(const uint8_t *s, size_t len, size_t *off)
{
	size_t		i = *off;
	uint8_t		b0 = s[i];
	uint32_t	cpt;
	int			n;

	if (b0 < 0x80)
	{
		*off = i + 1;
		return b0;
	}
	if ((b0 & 0x40) == 0)
		goto invalid;			/* stray continuation byte */
	if ((b0 & 0x20) == 0)
	{
		n = 2;
		cpt = b0 & 0x1f;
	}
	else if ((b0 & 0x10) == 0)
	{
		n = 3;
		cpt = b0 & 0x0f;
	}
	else if ((b0 & 0x08) == 0)
	{
		n = 4;
		cpt = b0 & 0x07;
	}
	else
		goto invalid;

	/* llama.cpp requires offset + n - 1 < size, i.e. all bytes present */
	if (i + (size_t) n > len)
		goto invalid;
	for (int k = 1; k < n; k++)
	{
		if ((s[i + k] & 0xc0) != 0x80)
			goto invalid;
		cpt = (cpt << 6) | (s[i + k] & 0x3f);
	}
	if (cpt > 0x10ffff)
		goto invalid;
	*off = i + n;
	return cpt;

invalid:
	*off = i + 1;
	return OPUS_UC_REPLACEMENT;
}

int
opus_utf8_encode(uint32_t cpt, char *buf)
{
	if (cpt <= 0x7f)
	{
		buf[0] = (char) cpt;
		return 1;
	}
	if (cpt <= 0x7ff)
	{
		buf[0] = (char) (0xc0 | (cpt >> 6));
		buf[1] = (char) (0x80 | (cpt & 0x3f));
		return 2;
	}
	if (cpt <= 0xffff)
	{
		buf[0] = (char) (0xe0 | (cpt >> 12));
		buf[1] = (char) (0x80 | ((cpt >> 6) & 0x3f));
		buf[2] = (char) (0x80 | (cpt & 0x3f));
		return 3;
	}
	buf[0] = (char) (0xf0 | ((cpt >> 18) & 0x07));
	buf[1] = (char) (0x80 | ((cpt >> 12) & 0x3f));
	buf[2] = (char) (0x80 | ((cpt >> 6) & 0x3f));
	buf[3] = (char) (0x80 | (cpt & 0x3f));
	return 4;
}

static bool
is_white_space(uint32_t c)
{
	/* The Unicode White_Space property (PropList.txt). */
	return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 ||
		c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
		c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
		c == 0x3000;
}

static uint8_t
flags_slow(uint32_t cpt)
{
	uint8_t		f = 0;

	if (cpt > 0x10ffff)
		return OPUS_UC_OTHER;
	switch (utf8proc_category((utf8proc_int32_t) cpt))
	{
		case UTF8PROC_CATEGORY_LU:
		case UTF8PROC_CATEGORY_LL:
		case UTF8PROC_CATEGORY_LT:
		case UTF8PROC_CATEGORY_LM:
		case UTF8PROC_CATEGORY_LO:
			f = OPUS_UC_LETTER;
			break;
		case UTF8PROC_CATEGORY_MN:
		case UTF8PROC_CATEGORY_MC:
		case UTF8PROC_CATEGORY_ME:
			f = OPUS_UC_MARK;
			break;
		case UTF8PROC_CATEGORY_ND:
		case UTF8PROC_CATEGORY_NL:
		case UTF8PROC_CATEGORY_NO:
			f = OPUS_UC_NUMBER;
			break;
		case UTF8PROC_CATEGORY_PC:
		case UTF8PROC_CATEGORY_PD:
		case UTF8PROC_CATEGORY_PS:
		case UTF8PROC_CATEGORY_PE:
		case UTF8PROC_CATEGORY_PI:
		case UTF8PROC_CATEGORY_PF:
		case UTF8PROC_CATEGORY_PO:
			f = OPUS_UC_PUNCT;
			break;
		case UTF8PROC_CATEGORY_SM:
		case UTF8PROC_CATEGORY_SC:
		case UTF8PROC_CATEGORY_SK:
		case UTF8PROC_CATEGORY_SO:
			f = OPUS_UC_SYMBOL;
			break;
		case UTF8PROC_CATEGORY_ZS:
		case UTF8PROC_CATEGORY_ZL:
		case UTF8PROC_CATEGORY_ZP:
			f = OPUS_UC_SEPARATOR;
			break;
		default:
			f = OPUS_UC_OTHER;
			break;
	}
	if (is_white_space(cpt))
		f |= OPUS_UC_WHITESPACE;
	return f;
}

uint8_t
opus_unicode_flags(uint32_t cpt)
{
	return flags_slow(cpt);
}
