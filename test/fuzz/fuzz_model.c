/*
 * fuzz_model.c - libFuzzer target for model loading: the GGUF file as the
 * engine sees it (opus_model_load: header, hyperparameters, tensor names,
 * shapes and types, tokenizer), and, when a file is accepted, a context and
 * a short forward pass over it.
 *
 * The input is the whole file.  It is written to a memfd and loaded through
 * /proc/self/fd/N, exactly as a path.  An accepted model gets a context
 * (1 thread, 8 KV blocks of 16, batch 16, n_ctx 64), a 4-token prefill of
 * ids taken from the input's last bytes (modulo the vocabulary) and one
 * decode step; the logits must be produced.  Whatever the file declares,
 * the loader must refuse what does not fit before allocating for it
 * (make fuzz caps single allocations at 512 MB).
 *
 * Seeds: test/fuzz/corpus/model/ (make_seeds.py: a tiny two-layer llama with
 * the SentencePiece test vocabulary and random weights, Q8_0 / F32 / F16).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/model.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink;

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int			fd = memfd_create("fuzz_model", 0);
	char		path[64];
	struct opus_model *m = NULL;
	struct opus_ctx *c = NULL;
	struct opus_error err = {0};
	const struct opus_hparams *hp;
	struct opus_ctx_params cp = {.n_threads = 1,.block_size = 16,.n_blocks = 8,
	.max_batch_tokens = 16,.n_ctx = 64};
	struct opus_seq s;
	int32_t		toks[4];
	float	   *logits = NULL;

	if (fd < 0)
		abort();
	if (size > 0 && write(fd, data, size) != (ssize_t) size)
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if (opus_model_load(path, NULL, &m, &err) != OPUS_OK)
	{
		if (m != NULL || err.msg[0] == '\0')
			abort();			/* a failure must say why and leave nothing */
		close(fd);
		return 0;
	}
	hp = opus_model_hparams(m);
	if (hp == NULL || hp->n_vocab <= 0 || opus_model_tokenizer(m) == NULL)
		abort();
	if (hp->is_encoder)
	{
		/* an embedding model: encode 4 tokens (model_bert.c) */
		struct opus_encoder *e = NULL;
		float	   *v = malloc(sizeof(float) * (size_t) hp->n_embd);

		for (int i = 0; i < 4; i++)
			toks[i] = (int32_t) (data[size - 1 - (size_t) i % size] % (uint32_t) hp->n_vocab);
		if (v && hp->n_ctx_train <= 4096 &&
			opus_encoder_create(m, 1, 16, &e, &err) == OPUS_OK)
		{
			struct opus_embed_item it = {toks, hp->n_ctx_train < 4 ? hp->n_ctx_train : 4, v};

			if (opus_encode(e, &it, 1, true, &err) == OPUS_OK)
				sink += v[0];
		}
		opus_encoder_free(e);
		free(v);
		goto out;
	}
	if (opus_ctx_create(m, &cp, &c, &err) != OPUS_OK)
		goto out;
	logits = malloc(sizeof(float) * (size_t) hp->n_vocab);
	if (!logits)
		goto out;
	for (int i = 0; i < 4; i++)
		toks[i] = (int32_t) (data[size - 1 - (size_t) i % size] % (uint32_t) hp->n_vocab);
	opus_seq_init(&s);
	{
		struct opus_batch_item it = {.seq = &s,.tokens = toks,.n_tokens = 4,.logits = logits};

		if (opus_forward(c, &it, 1, &err) == OPUS_OK)
		{
			if (s.n_pos != 4)
				abort();
			sink += logits[0] + logits[hp->n_vocab - 1];
			it.tokens = &toks[3];
			it.n_tokens = 1;
			if (opus_forward(c, &it, 1, &err) == OPUS_OK)
				sink += logits[hp->n_vocab / 2];
		}
	}
	opus_seq_release(c, &s);
out:
	free(logits);
	opus_ctx_free(c);
	opus_model_free(m);
	close(fd);
	return 0;
}
