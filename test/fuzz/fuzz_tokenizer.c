/*
 * fuzz_tokenizer.c - libFuzzer target for the tokenizer.
 *
 * The first input byte picks the vocabulary (the committed SentencePiece
 * or WordPiece test vocabulary, or the default model's byte-level BPE vocabulary with
 * one of its pre-tokenizers when OPUS_MODEL is set) and the add_special /
 * parse_special flags; the rest is the text.  Each input is encoded, the ids
 * are decoded with and without special tokens, every piece is rendered and
 * fed through the streaming UTF-8 assembler, whose output must equal the
 * concatenated pieces.  ASan/UBSan report any bad access.
 *
 * Build and run from the repository root (the type table and kernels come
 * from the gcc build, as for fuzz_gguf; see test/fuzz/README):
 *
 *   make build/engine/quant/qtype.o build/engine/quant/quant_ref.o build/engine/quant/quant_avx2.o
 *   clang -g -O1 -std=gnu11 -D_GNU_SOURCE -iquote src/engine \
 *       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
 *       test/fuzz/fuzz_tokenizer.c src/engine/text/tokenizer.c src/engine/text/tok_encode.c \
 *       src/engine/text/tok_wpm.c \
 *       src/engine/text/unicode.c src/engine/format/gguf.c src/engine/format/gguf_write.c \
 *       src/engine/base/status.c build/engine/quant/qtype.o build/engine/quant/quant_ref.o \
 *       build/engine/quant/quant_avx2.o -lutf8proc -lm -lpthread -o build/fuzz/fuzz_tokenizer
 *   mkdir -p build/fuzz/corpus_tok
 *   OPUS_MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf \
 *       build/fuzz/fuzz_tokenizer -max_len=2048 -max_total_time=60 build/fuzz/corpus_tok
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "text/tokenizer.h"

#define MAX_TOK 8

static struct opus_tokenizer *toks[MAX_TOK];
static int	n_toks;

/* A variant of g with tokenizer.ggml.pre replaced, loaded as a tokenizer. */
static void
load_variant(const struct opus_gguf *g, const char *pre)
{
	struct opus_gguf_writer *w = opus_gguf_writer_new(OPUS_GGUF_DEFAULT_ALIGNMENT);
	char		path[] = "/tmp/opus_fuzz_tok_XXXXXX";
	int			fd = mkstemp(path);
	struct opus_gguf *v = NULL;

	if (!w || fd < 0)
		abort();
	close(fd);
	for (int64_t i = 0; i < opus_gguf_n_kv(g); i++)
	{
		const void *data;
		size_t		size;

		if (strcmp(opus_gguf_kv_key(g, i), "tokenizer.ggml.pre") == 0)
			continue;
		opus_gguf_kv_raw(g, i, &data, &size);
		opus_gguf_writer_add_raw(w, opus_gguf_kv_key(g, i), opus_gguf_kv_type(g, i),
								 data, size, NULL);
	}
	opus_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre, NULL);
	if (opus_gguf_writer_write(w, path, NULL) != OPUS_OK ||
		opus_gguf_open(path, &v, NULL) != OPUS_OK ||
		opus_tokenizer_load(v, &toks[n_toks++], NULL) != OPUS_OK)
		abort();
	opus_gguf_writer_free(w);
	opus_gguf_close(v);
	unlink(path);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct opus_gguf *g = NULL;
	const char *model = getenv("OPUS_MODEL");

	if (opus_gguf_open("test/golden/tokenizer/spm-vocab.gguf", &g, NULL) != OPUS_OK ||
		opus_tokenizer_load(g, &toks[n_toks++], NULL) != OPUS_OK)
	{
		fprintf(stderr, "run from the repository root\n");
		abort();
	}
	opus_gguf_close(g);
	g = NULL;
	if (opus_gguf_open("test/golden/tokenizer/wpm-vocab.gguf", &g, NULL) != OPUS_OK ||
		opus_tokenizer_load(g, &toks[n_toks++], NULL) != OPUS_OK)
		abort();
	opus_gguf_close(g);
	if (model && opus_gguf_open(model, &g, NULL) == OPUS_OK)
	{
		static const char *pres[] = {"smollm", "llama-bpe", "qwen2", "gpt-2", "default"};

		for (size_t i = 0; i < sizeof(pres) / sizeof(pres[0]); i++)
			load_variant(g, pres[i]);
		opus_gguf_close(g);
	}
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct opus_tokenizer *t;
	bool		add,
				parse;
	int64_t		n = 0;
	int32_t    *ids;
	int64_t		cap;

	if (size < 1)
		return 0;
	t = toks[(data[0] >> 2) % n_toks];
	add = data[0] & 1;
	parse = data[0] & 2;
	data++;
	size--;

	cap = (int64_t) size * 2 + 8;
	ids = malloc((size_t) cap * sizeof(int32_t));
	if (opus_tokenizer_encode(t, (const char *) data, size, add, parse, ids, cap,
							  &n, NULL) != OPUS_OK)
		abort();				/* the buffer is always big enough */

	for (int special = 0; special < 2; special++)
	{
		char	   *text = NULL;
		size_t		len = 0;
		struct opus_utf8_stream s = {0};
		char	   *streamed = malloc(520 * (size_t) n + 16);
		char	   *joined = malloc(520 * (size_t) n + 16);
		size_t		sl = 0,
					jl = 0;

		if (opus_tokenizer_decode(t, ids, n, special, &text, &len, NULL) != OPUS_OK)
			abort();
		for (int64_t i = 0; i < n; i++)
		{
			char		piece[512];
			int			pl = opus_tokenizer_piece(t, ids[i], special, piece, sizeof(piece));

			if (pl < 0 || pl > (int) sizeof(piece))
				abort();
			sl += (size_t) opus_utf8_stream_feed(&s, piece, pl, streamed + sl);
			memcpy(joined + jl, piece, (size_t) pl);
			jl += (size_t) pl;
		}
		sl += (size_t) opus_utf8_stream_flush(&s, streamed + sl);
		if (sl != jl || memcmp(streamed, joined, sl) != 0)
			abort();
		free(streamed);
		free(joined);
		free(text);
	}
	free(ids);
	return 0;
}
