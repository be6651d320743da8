/*
 * tokenizer.h - text <-> token ids from GGUF tokenizer metadata.
 *
 * Families: `gpt2` byte-level BPE (pre-tokenizers selected by
 * tokenizer.ggml.pre: smollm, llama-bpe/llama3, qwen2, gpt2/default),
 * `llama` SentencePiece (score-based merges with <0xXX> byte fallback) and
 * `bert` WordPiece (tok_wpm.c; add_special gives [CLS] ... [SEP]).
 * Behaviour matches llama.cpp's llama_tokenize / llama_token_to_piece, which
 * is the oracle for the goldens in test/golden/.
 *
 * A tokenizer is immutable after load and may be used from many threads.
 */
#ifndef OPUS_TOKENIZER_H
#define OPUS_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "base/status.h"

struct opus_tokenizer;

/* Build from the metadata of an open GGUF (copies what it needs). */
enum opus_status opus_tokenizer_load(const struct opus_gguf *g,
									 struct opus_tokenizer **out,
									 struct opus_error *err);
void		opus_tokenizer_free(struct opus_tokenizer *t);

int32_t		opus_tokenizer_n_vocab(const struct opus_tokenizer *t);
int32_t		opus_tokenizer_bos(const struct opus_tokenizer *t);	/* -1 if none */
int32_t		opus_tokenizer_eos(const struct opus_tokenizer *t);	/* -1 if none */
int32_t		opus_tokenizer_eot(const struct opus_tokenizer *t);	/* -1 if none */
/* True for end-of-generation tokens (EOS, EOT, <|im_end|>, <|eot_id|> ...). */
bool		opus_tokenizer_is_eog(const struct opus_tokenizer *t, int32_t tok);
/* Whether encode(add_special=true) prepends BOS (tokenizer.ggml.add_bos_token). */
bool		opus_tokenizer_adds_bos(const struct opus_tokenizer *t);
/*
 * The vocabulary's identity: a 64-bit FNV-1a hash of the tokenizer kind,
 * the token count, every token's text and attributes in id order, and the
 * BOS/EOS ids.  Two files with the same vocabulary give the same value; a
 * model and its fallback must (docs/models.md).
 */
uint64_t	opus_tokenizer_vocab_hash(const struct opus_tokenizer *t);

/*
 * Encode text (len bytes, need not be NUL-terminated, may be invalid UTF-8).
 * add_special: add BOS/EOS as the model's metadata says (llama.cpp semantics).
 * parse_special: recognise special/control token text (e.g. "<|im_start|>")
 * as single tokens; otherwise it is tokenized as plain text.
 * Writes at most max_out ids to out and sets *n_out to the number of tokens
 * the text needs; if that exceeds max_out, returns OPUS_ERR_CAPACITY (call
 * again with a bigger buffer).
 */
enum opus_status opus_tokenizer_encode(const struct opus_tokenizer *t,
									   const char *text, size_t len,
									   bool add_special, bool parse_special,
									   int32_t *out, int64_t max_out,
									   int64_t *n_out,
									   struct opus_error *err);

/*
 * The same, where control-token text overlapping one of the literal spans
 * (byte ranges of text) stays plain text even with parse_special: the
 * engine renders chat messages with the template and tokenizes the
 * template's markup with special tokens, the message contents without.
 */
struct opus_text_span
{
	size_t		off,
				len;
};
enum opus_status opus_tokenizer_encode_spans(const struct opus_tokenizer *t,
											 const char *text, size_t len,
											 bool add_special, bool parse_special,
											 const struct opus_text_span *literal,
											 int n_literal,
											 int32_t *out, int64_t max_out,
											 int64_t *n_out,
											 struct opus_error *err);

/*
 * The texts opus_tokenizer_find_control looks for, one by one: for i from 0
 * to opus_tokenizer_n_special() - 1, the text of the i-th special token when
 * it is a control (or unknown) token with a text, else NULL; *len its bytes.
 */
int32_t		opus_tokenizer_n_special(const struct opus_tokenizer *t);
const char *opus_tokenizer_control_text(const struct opus_tokenizer *t, int32_t i, size_t *len);

/* The id of a control token whose text occurs in text, or -1. */
int32_t		opus_tokenizer_find_control(const struct opus_tokenizer *t,
										const char *text, size_t len);

/*
 * The bytes of one token as llama.cpp's token_to_piece(special=render_special)
 * returns them (byte-level BPE decoded to raw bytes, SentencePiece "▁" to
 * space, <0xXX> to the byte; special tokens empty unless render_special).
 * Returns the number of bytes (may be more than cap, in which case nothing
 * beyond cap is written), or -1 for an invalid id.
 */
int			opus_tokenizer_piece(const struct opus_tokenizer *t, int32_t tok,
								 bool render_special, char *buf, int cap);

/*
 * Decode a whole token array into text (malloc'd, NUL-terminated, *len set).
 * Invalid ids are an OPUS_ERR_TOKENIZE error.  Bytes are returned as they
 * are (they may end in an incomplete UTF-8 sequence); use the streaming
 * decoder below to emit only complete characters.  For SentencePiece, the
 * leading space of the first piece is removed as llama.cpp's detokenize does
 * when remove_space is set.
 */
enum opus_status opus_tokenizer_decode(const struct opus_tokenizer *t,
									   const int32_t *toks, int64_t n,
									   bool render_special,
									   char **out, size_t *len,
									   struct opus_error *err);

/*
 * Streaming UTF-8 assembly for generation: feed pieces, get back the longest
 * prefix of pending bytes that ends on a complete UTF-8 character.
 */
struct opus_utf8_stream
{
	char		pending[8];
	int			n_pending;
};
/*
 * Append piece (n bytes) to the stream; write complete text to out (cap bytes
 * must be >= n + 8) and return its length.  Incomplete trailing sequences are
 * held back; invalid sequences are passed through byte-wise.
 */
int			opus_utf8_stream_feed(struct opus_utf8_stream *s, const char *piece,
								  int n, char *out);
/* Flush whatever is pending (at end of generation). */
int			opus_utf8_stream_flush(struct opus_utf8_stream *s, char *out);

#endif							/* OPUS_TOKENIZER_H */
