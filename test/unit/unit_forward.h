/*
 * unit_forward.h - a forward-pass helper shared by the unit tests that
 * compare logits across threads, chunkings and KV types (test_forward.c,
 * test_kv_q8.c).  Include after unit.h and model.h.
 */
#ifndef OPUS_UNIT_FORWARD_H
#define OPUS_UNIT_FORWARD_H

#include <stdbool.h>
#include <stdio.h>

/*
 * Run toks through a fresh sequence of c in chunks of chunks[0],
 * chunks[1], ... (cycling over n_chunks sizes); every position's logits
 * into out[n][n_vocab].  False (with the error on stderr) if a step fails.
 */
static bool
unit_run_chunked(struct opus_ctx *c, const int32_t *toks, int n, const int *chunks,
				 int n_chunks, float *out, int n_vocab)
{
	struct opus_seq s;
	struct opus_error err = {0};
	int			done = 0;
	bool		ok = true;

	opus_seq_init(&s);
	for (int i = 0; done < n && ok; i++)
	{
		int			k = chunks[i % n_chunks];
		struct opus_batch_item it;

		if (k > n - done)
			k = n - done;
		it = (struct opus_batch_item)
		{
			.seq = &s,.tokens = toks + done,.n_tokens = k,
				.logits = out + (size_t) done * n_vocab,.logits_all = true,
		};
		ok = opus_forward(c, &it, 1, &err) == OPUS_OK;
		if (!ok)
			fprintf(stderr, "forward: %s\n", err.msg);
		done += k;
	}
	opus_seq_release(c, &s);
	return ok;
}

#endif							/* OPUS_UNIT_FORWARD_H */
