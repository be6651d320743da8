/*
 * encoding.c - text between the database encoding and UTF-8, the engine's
 * encoding: arguments on their way in, results on their way out.
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "lib/stringinfo.h"

#include "opus_pg.h"

/* Server-encoded bytes -> UTF-8 (may return the input pointer). */
const char *
OpusTextToUtf8(const char *s, size_t len, size_t *out_len)
{
	char	   *r = pg_server_to_any(s, (int) len, PG_UTF8);

	*out_len = (r == s) ? len : strlen(r);
	return r;
}

/*
 * UTF-8 bytes from the engine -> a server-encoded, NUL-terminated string.
 * Invalid UTF-8 (a model can emit a partial character at the very end) is
 * replaced with U+FFFD so the result is always valid text.
 */
char *
OpusTextFromUtf8(const char *s, size_t len)
{
	StringInfoData buf;
	size_t		i = 0;
	char	   *r;

	initStringInfo(&buf);
	while (i < len)
	{
		unsigned char c = (unsigned char) s[i];
		int			l = (c < 0x80) ? 1 : pg_utf_mblen((const unsigned char *) s + i);

		if (c != 0 && l <= (int) (len - i) && pg_utf8_islegal((const unsigned char *) s + i, l))
		{
			appendBinaryStringInfo(&buf, s + i, l);
			i += l;
		}
		else
		{
			appendStringInfoString(&buf, "\xEF\xBF\xBD");
			i++;
		}
	}
	r = pg_any_to_server(buf.data, buf.len, PG_UTF8);
	return r;
}
