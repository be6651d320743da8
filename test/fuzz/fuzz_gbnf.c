/*
 * fuzz_gbnf.c - libFuzzer target for the GBNF parser and automaton
 * (src/engine/text/grammar.c, grammar_mask.c).
 *
 * Input layout: the bytes up to the first NUL are a grammar; the bytes after
 * it, if any, are fed to the compiled automaton in chunks of 1..4 bytes
 * (split code points included), with a mask computed over a small fixed
 * vocabulary after each chunk.
 * Checks beyond ASan/UBSan: a failed compile has an error code and a
 * message, a syntax error a position; a rejected chunk leaves the state as
 * it was (the same mask before and after); a mask allows only tokens whose
 * bytes the state accepts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const vocab_text[] = {
	"{", "}", "\"", "a", "ab", " ", "\n", "0", "12", ":", ",", "[", "]",
	"\xc3", "\xa9", "\xc3\xa9", "\xe2\x82\xac", "true", "null", "x", "-",
};
#define NV ((int32_t) (sizeof(vocab_text) / sizeof(vocab_text[0])))

static opus_grammar_vocab *vocab;

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t		glen = nul ? (size_t) (nul - data) : size;
	struct opus_grammar_error err;
	opus_grammar *g;
	opus_grammar_state *s;
	uint32_t	mask[1],
				mask2[1];

	if (!vocab)
	{
		const uint8_t *b[NV];
		uint32_t	l[NV];

		for (int32_t i = 0; i < NV; i++)
		{
			b[i] = (const uint8_t *) vocab_text[i];
			l[i] = (uint32_t) strlen(vocab_text[i]);
		}
		vocab = opus_grammar_vocab_new(NV, b, l, NULL);
		if (!vocab)
			abort();
	}
	g = opus_grammar_compile((const char *) data, glen, &err);
	if (!g)
	{
		if (err.code == OPUS_GRAMMAR_OK || err.msg[0] == 0)
			abort();
		if (err.code == OPUS_GRAMMAR_ERR_SYNTAX && (err.line < 1 || err.col < 1))
			abort();
		return 0;
	}
	s = opus_grammar_state_new(g);
	if (!s)
		abort();
	if (nul)
	{
		const uint8_t *in = nul + 1;
		size_t		n = size - glen - 1;

		for (size_t i = 0; i < n;)
		{
			size_t		k = 1 + (in[i] & 3);

			if (k > n - i)
				k = n - i;
			opus_grammar_mask(s, vocab, mask);
			for (int32_t t = 0; t < NV; t++)
			{
				opus_grammar_state *c = opus_grammar_state_clone(s);
				bool		ok = opus_grammar_accept_bytes(c, (const uint8_t *) vocab_text[t],
														   strlen(vocab_text[t]));

				if (ok != (bool) ((mask[0] >> t) & 1))
					abort();
				opus_grammar_state_free(c);
			}
			if (!opus_grammar_accept_bytes(s, in + i, k))
			{
				opus_grammar_mask(s, vocab, mask2);
				if (mask2[0] != mask[0])
					abort();
			}
			i += k;
		}
		(void) opus_grammar_is_accepting(s);
		(void) opus_grammar_is_finished(s);
	}
	opus_grammar_state_free(s);
	opus_grammar_free(g);
	return 0;
}
