/*
 * fuzz_protocol.c - libFuzzer target for the supervisor <-> engine wire
 * format (src/protocol.h).
 *
 * The input is read as a byte stream of frames, the way both sides read
 * their socket: each header is parsed, and each complete payload is handed
 * to every payload parser (whatever the frame type says, so every parser
 * sees every shape of input).  Accepted SUBMITs are then walked as the
 * engine walks them (chat messages, token ids, stop strings).  ASan and
 * UBSan report any read outside the buffer.  Build: see test/fuzz/README.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"

static volatile uint64_t sink;

static void
walk_submit(const struct opus_proto_submit *m)
{
	uint32_t	i;

	for (i = 0; i < m->n_stop; i++)
		sink += (uint8_t) m->stop[i].ptr[m->stop[i].len - 1];
	if (m->kind == OPUS_KIND_CHAT)
	{
		uint32_t	pos = 0;

		for (i = 0; i < m->n_items; i++)
		{
			uint8_t		role;
			struct opus_proto_str c;

			opus_proto_next_chat_message(m, &pos, &role, &c);
			sink += role + c.len + (c.len ? (uint8_t) c.ptr[c.len - 1] : 0);
		}
	}
	else if (m->kind == OPUS_KIND_DETOKENIZE)
	{
		for (i = 0; i < m->n_items; i++)
			sink += (uint32_t) opus_proto_token_at(m, i);
	}
	else if (m->data_len > 0)
		sink += m->data[m->data_len - 1];
}

static void
parse_payload(const uint8_t *p, size_t len)
{
	const char *why = NULL;
	struct opus_proto_hello hello;
	struct opus_proto_ready ready;
	struct opus_proto_fatal fatal;
	struct opus_proto_submit submit;
	struct opus_proto_done done;
	struct opus_proto_stats stats;
	struct opus_proto_progress progress;
	struct opus_proto_experts experts;

	sink += opus_proto_parse_hello(p, len, &hello, &why);
	sink += opus_proto_parse_ready(p, len, &ready, &why);
	sink += opus_proto_parse_fatal(p, len, &fatal, &why);
	if (opus_proto_parse_submit(p, len, &submit, &why))
		walk_submit(&submit);
	sink += opus_proto_parse_done(p, len, &done, &why);
	sink += opus_proto_parse_stats(p, len, &stats, &why);
	sink += opus_proto_parse_progress(p, len, &progress, &why);
	if (opus_proto_parse_experts(p, len, &experts, &why))
		sink += (uint64_t) opus_proto_expert_count(&experts,
												   (size_t) experts.n_layer * experts.n_expert - 1);
	sink += opus_proto_parse_text(p, len, &why);
	sink += opus_proto_parse_tokens(p, len, &why);
	sink += opus_proto_parse_embedding(p, len, &why);
	sink += opus_proto_parse_empty(len, &why);
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t		off = 0;

	for (;;)
	{
		struct opus_proto_header h;
		const char *why = NULL;
		enum opus_proto_result r = opus_proto_parse_header(data + off, size - off, &h, &why);
		uint8_t    *copy;

		if (r != OPUS_PROTO_OK || size - off - OPUS_PROTO_HEADER_SIZE < h.length)
			break;
		/* an exact-size heap copy, so any overread is caught */
		copy = malloc(h.length ? h.length : 1);
		if (!copy)
			break;
		memcpy(copy, data + off + OPUS_PROTO_HEADER_SIZE, h.length);
		parse_payload(copy, h.length);
		free(copy);
		off += OPUS_PROTO_HEADER_SIZE + h.length;
	}
	return 0;
}
