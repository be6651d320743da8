/*
 * model_decl.c - the opus.models value parsed into declarations
 * (OpusModelDecl).  Plain C with no PostgreSQL dependency: the extension's
 * GUC check hook and supervisor call it (src/pg/models.c), and the fuzz
 * harness runs it on arbitrary bytes (test/fuzz/fuzz_modeldecl.c).  The
 * syntax is described in models.c and docs/models.md.
 */
#include "model_decl.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* strlcpy's contract (the C library here has none): always NUL-ended. */
static void
copy_str(char *dst, const char *src, size_t dstlen)
{
	size_t		n = strlen(src);

	if (n >= dstlen)
		n = dstlen - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* ---------------------------------------------------------------------
 * Parsing opus.models
 * --------------------------------------------------------------------- */

bool
opus_model_name_valid(const char *s, size_t len)
{
	size_t		i;

	if (len == 0 || len >= OPUS_MODEL_NAME_LEN)
		return false;
	if (!(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z')))
		return false;
	for (i = 1; i < len; i++)
		if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

/* s[0..len) without leading and trailing blanks, into out (NUL-ended). */
static bool
copy_trimmed(const char *s, size_t len, char *out, size_t outlen)
{
	while (len > 0 && isspace((unsigned char) s[0]))
		s++, len--;
	while (len > 0 && isspace((unsigned char) s[len - 1]))
		len--;
	if (len >= outlen)
		return false;
	memcpy(out, s, len);
	out[len] = '\0';
	return true;
}

static bool
parse_int_opt(const char *v, int lo, int hi, int *out)
{
	char	   *end;
	long		n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (v[0] == '\0' || *end != '\0' || errno != 0 || n < lo || n > hi)
		return false;
	*out = (int) n;
	return true;
}

/* One "option=value" of a declaration into d; false + err when bad. */
static bool
parse_option(const char *opt, OpusModelDecl *d, char *err, size_t errlen)
{
	const char *eq = strchr(opt, '=');
	char		key[32];
	char		val[OPUS_PROTO_PATH_LEN];

	if (eq == NULL || !copy_trimmed(opt, eq - opt, key, sizeof(key)) ||
		!copy_trimmed(eq + 1, strlen(eq + 1), val, sizeof(val)))
	{
		snprintf(err, errlen, "Model \"%s\": option \"%s\" is not option=value.", d->name, opt);
		return false;
	}
	if (strcmp(key, "device") == 0)
	{
		if (!(strcmp(val, "cpu") == 0 || strcmp(val, "auto") == 0 ||
			  (strncmp(val, "cuda:", 5) == 0 && val[5] != '\0' && strlen(val) <= 8 &&
			   strspn(val + 5, "0123456789") == strlen(val + 5))))
		{
			snprintf(err, errlen, "Model \"%s\": device must be cpu, auto or cuda:N.", d->name);
			return false;
		}
		copy_str(d->device, val, sizeof(d->device));
	}
	else if (strcmp(key, "threads") == 0)
	{
		if (!parse_int_opt(val, 1, 1024, &d->threads))
		{
			snprintf(err, errlen, "Model \"%s\": threads must be between 1 and 1024.", d->name);
			return false;
		}
	}
	else if (strcmp(key, "kv_cache_size") == 0)
	{
		if (!parse_int_opt(val, 1, INT_MAX / 2, &d->kv_cache_size_mb))
		{
			snprintf(err, errlen, "Model \"%s\": kv_cache_size must be a number of megabytes.", d->name);
			return false;
		}
	}
	else if (strcmp(key, "kv_cache_type") == 0)
	{
		if (strcmp(val, "f16") == 0)
			d->kv_cache_type = OPUS_PROTO_KV_F16;
		else if (strcmp(val, "q8_0") == 0)
			d->kv_cache_type = OPUS_PROTO_KV_Q8_0;
		else
		{
			snprintf(err, errlen, "Model \"%s\": kv_cache_type must be f16 or q8_0.", d->name);
			return false;
		}
	}
	else if (strcmp(key, "max_batch_tokens") == 0)
	{
		if (!parse_int_opt(val, 16, 65536, &d->max_batch_tokens))
		{
			snprintf(err, errlen, "Model \"%s\": max_batch_tokens must be between 16 and 65536.", d->name);
			return false;
		}
	}
	else if (strcmp(key, "fallback") == 0)
	{
		if (!opus_model_name_valid(val, strlen(val)))
		{
			snprintf(err, errlen, "Model \"%s\": fallback must name a model.", d->name);
			return false;
		}
		copy_str(d->fallback, val, sizeof(d->fallback));
	}
	else if (strcmp(key, "max_ttft") == 0)
	{
		if (!parse_int_opt(val, 1, 3600000, &d->max_ttft_ms))
		{
			snprintf(err, errlen, "Model \"%s\": max_ttft must be a number of milliseconds (1 to 3600000).", d->name);
			return false;
		}
	}
	else if (strcmp(key, "role") == 0)
	{
		if (val[0] == '\0' || strlen(val) >= OPUS_ROLE_NAME_LEN)
		{
			snprintf(err, errlen, "Model \"%s\": role must name a role.", d->name);
			return false;
		}
		copy_str(d->role, val, sizeof(d->role));
	}
	else if (strcmp(key, "query_prefix") == 0 || strcmp(key, "document_prefix") == 0)
	{
		/* kept as written: 'quotes' keep blanks at its ends ('search_query: ') */
		size_t		len = strlen(val);
		char	   *to = key[0] == 'q' ? d->query_prefix : d->document_prefix;

		if (len >= 2 && val[0] == '\'' && val[len - 1] == '\'')
		{
			memmove(val, val + 1, len - 2);
			val[len - 2] = '\0';
			len -= 2;
		}
		if (len >= OPUS_EMBED_PREFIX_LEN || strchr(val, '\'') != NULL)
		{
			snprintf(err, errlen, "Model \"%s\": %s must be at most %d bytes, without quotes inside.",
					 d->name, key, OPUS_EMBED_PREFIX_LEN - 1);
			return false;
		}
		copy_str(to, val, OPUS_EMBED_PREFIX_LEN);
	}
	else
	{
		snprintf(err, errlen, "Model \"%s\": unknown option \"%s\" (known: device, threads, kv_cache_size, kv_cache_type, max_batch_tokens, role, fallback, max_ttft, query_prefix, document_prefix).",
				 d->name, key);
		return false;
	}
	return true;
}

/*
 * Parse an opus.models value into out[] (room for OPUS_MAX_MODELS - 1).
 * Returns false and a sentence in err when the value is malformed.  Pure
 * string work: callable from a GUC check hook and from the supervisor.
 */
bool
OpusParseModels(const char *value, OpusModelDecl *out, int *n_out,
				char *err, size_t errlen)
{
	const char *p = value ? value : "";
	int			n = 0;

	*n_out = 0;
	while (*p != '\0')
	{
		const char *end = strchr(p, ',');
		size_t		len = end ? (size_t) (end - p) : strlen(p);
		char		item[OPUS_PROTO_PATH_LEN + 512];
		char	   *eq;
		char	   *opts;
		OpusModelDecl *d;
		int			k;

		if (!copy_trimmed(p, len, item, sizeof(item)))
		{
			snprintf(err, errlen, "A model declaration is too long.");
			return false;
		}
		p = end ? end + 1 : p + len;
		if (item[0] == '\0')
		{
			if (end == NULL && n > 0)
				break;
			snprintf(err, errlen, "A model declaration is empty.");
			return false;
		}
		if (n >= OPUS_MAX_MODELS - 1)
		{
			snprintf(err, errlen, "At most %d models can be declared besides the default.", OPUS_MAX_MODELS - 1);
			return false;
		}
		d = &out[n];
		memset(d, 0, sizeof(*d));
		d->kv_cache_type = -1;
		eq = strchr(item, '=');
		if (eq == NULL)
		{
			snprintf(err, errlen, "\"%s\" is not name=path.", item);
			return false;
		}
		if (!copy_trimmed(item, eq - item, d->name, sizeof(d->name)) ||
			!opus_model_name_valid(d->name, strlen(d->name)))
		{
			char		shown[OPUS_MODEL_NAME_LEN];

			(void) copy_trimmed(item, ((size_t) (eq - item) < sizeof(shown) - 1 ? (size_t) (eq - item) : sizeof(shown) - 1), shown, sizeof(shown));
			snprintf(err, errlen, "Model name \"%s\" is not a lower-case identifier of at most %d characters.",
					 shown, OPUS_MODEL_NAME_LEN - 1);
			return false;
		}
		if (strcmp(d->name, "default") == 0)
		{
			snprintf(err, errlen, "The name \"default\" is reserved for opus.model.");
			return false;
		}
		for (k = 0; k < n; k++)
			if (strcmp(out[k].name, d->name) == 0)
			{
				snprintf(err, errlen, "Model \"%s\" is declared twice.", d->name);
				return false;
			}
		opts = strchr(eq + 1, ';');
		if (opts)
			*opts++ = '\0';
		if (!copy_trimmed(eq + 1, strlen(eq + 1), d->setting, sizeof(d->setting) - 64) ||
			d->setting[0] == '\0')
		{
			snprintf(err, errlen, "Model \"%s\" needs a path or an installed model name.", d->name);
			return false;
		}
		while (opts && *opts)
		{
			char	   *next = strchr(opts, ';');

			if (next)
				*next++ = '\0';
			if (!parse_option(opts, d, err, errlen))
				return false;
			opts = next;
		}
		n++;
	}
	/* fallbacks name another declared model (or the default) */
	{
		int			k,
					j;

		for (k = 0; k < n; k++)
		{
			bool		found = strcmp(out[k].fallback, "default") == 0;

			if (out[k].fallback[0] == '\0')
			{
				if (out[k].max_ttft_ms > 0)
				{
					snprintf(err, errlen, "Model \"%s\": max_ttft needs a fallback.", out[k].name);
					return false;
				}
				continue;
			}
			if (strcmp(out[k].fallback, out[k].name) == 0)
			{
				snprintf(err, errlen, "Model \"%s\" cannot be its own fallback.", out[k].name);
				return false;
			}
			for (j = 0; j < n; j++)
				found |= strcmp(out[j].name, out[k].fallback) == 0;
			if (!found)
			{
				snprintf(err, errlen, "Model \"%s\": fallback \"%s\" is not declared.", out[k].name, out[k].fallback);
				return false;
			}
			if (out[k].max_ttft_ms <= 0)
			{
				snprintf(err, errlen, "Model \"%s\": a fallback needs max_ttft (the objective that sends requests to it).", out[k].name);
				return false;
			}
		}
	}
	*n_out = n;
	return true;
}
