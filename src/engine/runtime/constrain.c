/*
 * constrain.c - grammar masks on logits rows (constrain.h).
 */
#include "runtime/constrain.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum opus_status
opus_constrain_create(const struct opus_tokenizer *t, struct opus_constrain **out,
					  struct opus_error *err)
{
	struct opus_constrain *c = calloc(1, sizeof(*c));
	int32_t		n = opus_tokenizer_n_vocab(t);
	const uint8_t **bytes = NULL;
	uint32_t   *lens = NULL;
	char	   *buf = NULL;
	size_t		used = 0,
				cap = 0;
	size_t	   *offs = NULL;
	enum opus_status st = OPUS_OK;

	*out = NULL;
	if (!c)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for the grammar vocabulary");
	c->tok = t;
	c->n_vocab = n;
	bytes = calloc((size_t) n + 1, sizeof(*bytes));
	lens = calloc((size_t) n + 1, sizeof(*lens));
	offs = calloc((size_t) n + 1, sizeof(*offs));
	c->eog = malloc(((size_t) n + 1) * sizeof(int32_t));
	cap = (size_t) n * 8 + 256;
	buf = malloc(cap);
	if (!bytes || !lens || !offs || !c->eog || !buf)
		goto nomem;
	for (int32_t i = 0; i < n; i++)
	{
		int			k;

		if (opus_tokenizer_is_eog(t, i))
		{
			c->eog[c->n_eog++] = i;
			continue;
		}
		for (;;)
		{
			k = opus_tokenizer_piece(t, i, false, buf + used, (int) (cap - used));
			if (k < 0)
				k = 0;
			if ((size_t) k <= cap - used)
				break;
			{
				char	   *nb;

				cap = cap * 2 + (size_t) k;
				nb = realloc(buf, cap);
				if (!nb)
					goto nomem;
				buf = nb;
			}
		}
		offs[i] = used;
		lens[i] = (uint32_t) k;
		used += (size_t) k;
	}
	for (int32_t i = 0; i < n; i++)
		bytes[i] = (const uint8_t *) buf + offs[i];
	c->vocab = opus_grammar_vocab_new(n, bytes, lens, err);
	if (!c->vocab)
	{
		st = err ? err->code : OPUS_ERR_NOMEM;
		goto fail;
	}
	free(bytes);
	free(lens);
	free(offs);
	free(buf);
	*out = c;
	return OPUS_OK;

nomem:
	st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for the grammar vocabulary");
fail:
	free(bytes);
	free(lens);
	free(offs);
	free(buf);
	opus_constrain_free(c);
	return st;
}

void
opus_constrain_free(struct opus_constrain *c)
{
	if (!c)
		return;
	opus_grammar_vocab_free(c->vocab);
	free(c->eog);
	free(c);
}

int32_t
opus_constrain_apply(const struct opus_constrain *c, const opus_grammar_state *s,
					 const uint32_t *mask, float *logits)
{
	int32_t		n = 0;
	int32_t		words = opus_constrain_mask_words(c);
	bool		accepting = opus_grammar_is_accepting(s);
	float		save_eog[64];
	int			n_save = c->n_eog < 64 ? c->n_eog : 64;

	for (int i = 0; i < n_save; i++)
		save_eog[i] = logits[c->eog[i]];
	for (int32_t w = 0; w < words; w++)
	{
		uint32_t	m = mask[w];
		int32_t		base = w * 32;
		int32_t		lim = c->n_vocab - base < 32 ? c->n_vocab - base : 32;

		if (m == 0xFFFFFFFFu && lim == 32)
		{
			n += 32;
			continue;
		}
		for (int32_t b = 0; b < lim; b++)
		{
			if ((m >> b) & 1)
				n++;
			else
				logits[base + b] = -INFINITY;
		}
	}
	if (accepting)
	{
		for (int i = 0; i < n_save; i++)
		{
			logits[c->eog[i]] = save_eog[i];
			n++;
		}
	}
	return n;
}

bool
opus_constrain_accept(const struct opus_constrain *c, opus_grammar_state *s,
					  int32_t tok)
{
	char		piece[256];
	char	   *p = piece;
	int			k;
	bool		ok;

	if (opus_tokenizer_is_eog(c->tok, tok))
		return opus_grammar_is_accepting(s);
	k = opus_tokenizer_piece(c->tok, tok, false, piece, sizeof(piece));
	if (k < 0)
		return false;
	if (k > (int) sizeof(piece))
	{
		p = malloc((size_t) k);
		if (!p)
			return false;
		opus_tokenizer_piece(c->tok, tok, false, p, k);
	}
	ok = k > 0 && opus_grammar_accept_bytes(s, (const uint8_t *) p, (size_t) k);
	if (p != piece)
		free(p);
	return ok;
}
