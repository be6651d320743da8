/*
 * test_protocol.c - the supervisor <-> engine wire format (src/protocol.h):
 * every message round-trips through its encoder and parser, and the parsers
 * reject malformed input (truncation at every length, bad magic/version,
 * out-of-range fields, NUL bytes, inconsistent lengths, single-byte
 * corruption) without reading outside the buffer (run under ASan).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"
#include "unit.h"

static struct opus_proto_params
default_params(void)
{
	struct opus_proto_params p;

	memset(&p, 0, sizeof(p));
	p.max_tokens = 16;
	p.top_k = 40;
	p.temperature = 0.7f;
	p.top_p = 0.9f;
	p.min_p = 0.05f;
	p.presence_penalty = 0.5f;
	p.frequency_penalty = -0.5f;
	p.repetition_penalty = 1.1f;
	p.seed = 0x0123456789abcdefULL;
	p.priority = 10;
	return p;
}

/*
 * Parse buf[0..len) as a SUBMIT from an exact-size heap copy, so ASan sees
 * any overread.  The copy lives until the next call (m points into it).
 */
static uint8_t *submit_copy;

static const struct opus_proto_tenant default_tenant = {0, 0, 1, 0};

static bool
parse_submit_copy(const uint8_t *buf, size_t len, struct opus_proto_submit *m, const char **why)
{
	free(submit_copy);
	submit_copy = malloc(len ? len : 1);
	memcpy(submit_copy, buf, len);
	return opus_proto_parse_submit(submit_copy, len, m, why);
}

static void
test_header(void)
{
	uint8_t		b[OPUS_PROTO_HEADER_SIZE];
	struct opus_proto_header h;
	const char *why = NULL;

	opus_proto_encode_header(b, 1234, OPUS_MSG_DONE, 0xfeedface12345678ULL);
	CHECK(opus_proto_parse_header(b, sizeof(b), &h, &why) == OPUS_PROTO_OK, "header parses");
	CHECK(h.length == 1234 && h.type == OPUS_MSG_DONE && h.id == 0xfeedface12345678ULL,
		  "header fields round-trip");
	for (size_t n = 0; n < sizeof(b); n++)
		CHECK(opus_proto_parse_header(b, n, &h, &why) == OPUS_PROTO_NEED_MORE,
			  "a %zu-byte header needs more", n);

	opus_proto_encode_header(b, 1, 0, 1);
	CHECK(opus_proto_parse_header(b, sizeof(b), &h, &why) == OPUS_PROTO_BAD, "type 0 is bad");
	opus_proto_encode_header(b, 1, OPUS_MSG__COUNT, 1);
	CHECK(opus_proto_parse_header(b, sizeof(b), &h, &why) == OPUS_PROTO_BAD, "unknown type is bad");
	opus_proto_encode_header(b, OPUS_PROTO_MAX_PAYLOAD + 1, OPUS_MSG_TEXT, 1);
	CHECK(opus_proto_parse_header(b, sizeof(b), &h, &why) == OPUS_PROTO_BAD, "oversized payload is bad");
	opus_proto_encode_header(b, 1, OPUS_MSG_TEXT, 1);
	b[6] = 1;
	CHECK(opus_proto_parse_header(b, sizeof(b), &h, &why) == OPUS_PROTO_BAD, "flags must be zero");
}

static void
test_hello_ready(void)
{
	struct opus_proto_hello h,
				h2;
	struct opus_proto_ready r,
				r2;
	uint8_t		buf[OPUS_PROTO_READY_SIZE + OPUS_PROTO_HELLO_SIZE];
	struct opus_proto_writer w;
	const char *why = NULL;

	memset(&h, 0, sizeof(h));
	h.magic = OPUS_PROTO_MAGIC;
	h.version = OPUS_PROTO_VERSION;
	h.n_threads = 4;
	h.n_ctx = 0;
	h.kv_cache_bytes = 64 << 20;
	strcpy(h.device, "cpu");
	strcpy(h.model_path, "/models/x.gguf");
	h.kv_block_size = 16;
	h.max_batch_tokens = 512;
	h.kv_cache_type = OPUS_PROTO_KV_Q8_0;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_hello(&w, &h);
	CHECK(!w.overflow && w.len == OPUS_PROTO_HELLO_SIZE, "HELLO size %zu", w.len);
	CHECK(opus_proto_parse_hello(buf, w.len, &h2, &why), "HELLO parses");
	CHECK(memcmp(&h, &h2, sizeof(h)) == 0, "HELLO round-trips");
	for (size_t n = 0; n < w.len; n++)
		CHECK(!opus_proto_parse_hello(buf, n, &h2, &why), "truncated HELLO (%zu) rejected", n);

	/* version mismatch, bad magic, no NUL in the path, garbage after NUL */
	opus_proto_put_u32(buf + 4, OPUS_PROTO_VERSION + 1);
	CHECK(!opus_proto_parse_hello(buf, w.len, &h2, &why) &&
		  strstr(why, "version") != NULL, "version mismatch rejected: %s", why);
	/* another version's HELLO may have another size: still a version mismatch */
	CHECK(!opus_proto_parse_hello(buf, w.len - 4, &h2, &why) &&
		  strcmp(why, OPUS_PROTO_VERSION_MISMATCH) == 0 && h2.version == OPUS_PROTO_VERSION + 1,
		  "a shorter HELLO of another version is a version mismatch: %s", why);
	{
		char		msg[OPUS_PROTO_MSG_LEN];
		char		want[128];

		opus_proto_version_mismatch(msg, sizeof(msg), "opus_pg.so", h2.version, "this opus_engine");
		snprintf(want, sizeof(want), "opus_pg.so speaks protocol version %u, this opus_engine version %u",
				 (unsigned) OPUS_PROTO_VERSION + 1, (unsigned) OPUS_PROTO_VERSION);
		CHECK(strstr(msg, want) != NULL && strlen(msg) < sizeof(msg) - 1,
			  "the mismatch error names both versions: %s", msg);
	}
	opus_proto_put_u32(buf + 4, OPUS_PROTO_VERSION);
	opus_proto_put_u32(buf, 0xdeadbeef);
	CHECK(!opus_proto_parse_hello(buf, w.len, &h2, &why), "bad magic rejected");
	opus_proto_put_u32(buf, OPUS_PROTO_MAGIC);
	memset(buf + 24 + OPUS_PROTO_SHORT_LEN, 'a', OPUS_PROTO_PATH_LEN);
	CHECK(!opus_proto_parse_hello(buf, w.len, &h2, &why), "unterminated path rejected");
	memset(buf + 24 + OPUS_PROTO_SHORT_LEN, 0, OPUS_PROTO_PATH_LEN);
	buf[24 + OPUS_PROTO_SHORT_LEN] = 'x';
	buf[24 + OPUS_PROTO_SHORT_LEN + 5] = 'y';
	CHECK(!opus_proto_parse_hello(buf, w.len, &h2, &why), "bytes after the NUL rejected");
	h.n_threads = 0;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_hello(&w, &h);
	CHECK(!opus_proto_parse_hello(buf, w.len, &h2, &why), "n_threads 0 rejected");
	h.n_threads = 4;
	h.kv_block_size = 0;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_hello(&w, &h);
	CHECK(!opus_proto_parse_hello(buf, w.len, &h2, &why), "kv_block_size 0 rejected");
	h.kv_block_size = 16;
	h.max_batch_tokens = 0;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_hello(&w, &h);
	CHECK(!opus_proto_parse_hello(buf, w.len, &h2, &why), "max_batch_tokens 0 rejected");
	h.max_batch_tokens = 512;
	h.kv_cache_type = 7;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_hello(&w, &h);
	CHECK(!opus_proto_parse_hello(buf, w.len, &h2, &why), "unknown kv_cache_type rejected");

	memset(&r, 0, sizeof(r));
	r.magic = OPUS_PROTO_MAGIC;
	r.version = OPUS_PROTO_VERSION;
	r.n_params = 134515008;
	r.n_ctx = 8192;
	r.n_ctx_train = 8192;
	r.n_vocab = 49152;
	r.n_layer = 30;
	r.n_embd = 576;
	r.n_head = 9;
	r.n_head_kv = 3;
	r.pid = 4242;
	r.kv_tokens = 2048;
	r.vocab_hash = 0x8000000000000001ULL;	/* all 64 bits travel */
	strcpy(r.name, "SmolLM2");
	strcpy(r.arch, "llama");
	strcpy(r.tensor_type, "Q4_1");
	strcpy(r.chat_template, "chatml");
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_ready(&w, &r);
	CHECK(!w.overflow && w.len == OPUS_PROTO_READY_SIZE, "READY size %zu", w.len);
	CHECK(opus_proto_parse_ready(buf, w.len, &r2, &why), "READY parses");
	CHECK(memcmp(&r, &r2, sizeof(r)) == 0, "READY round-trips");
	CHECK(!opus_proto_parse_ready(buf, w.len - 1, &r2, &why), "short READY rejected");
	r.n_vocab = 0;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_ready(&w, &r);
	CHECK(!opus_proto_parse_ready(buf, w.len, &r2, &why), "n_vocab 0 rejected");
}

static size_t
encode_chat(uint8_t *buf, size_t cap, const struct opus_proto_params *p)
{
	struct opus_proto_writer w;
	struct opus_proto_str stop[2] = {{"\n\n", 2}, {"END", 3}};
	const char *c0 = "You are helpful.";
	const char *c1 = "Hi!";

	opus_proto_writer_init(&w, buf, cap);
	opus_proto_encode_submit_head(&w, OPUS_KIND_CHAT, p, 2, stop);
	opus_proto_encode_submit_tenant(&w, &default_tenant);
	opus_proto_encode_submit_grammar(&w, NULL, 0);
	opus_proto_encode_submit_data_head(&w, 2, (uint32_t) (5 + strlen(c0) + 5 + strlen(c1)));
	opus_proto_encode_chat_message(&w, OPUS_ROLE_SYSTEM, c0, (uint32_t) strlen(c0));
	opus_proto_encode_chat_message(&w, OPUS_ROLE_USER, c1, (uint32_t) strlen(c1));
	return w.overflow ? 0 : w.len;
}

static void
test_submit(void)
{
	uint8_t		buf[1024];
	struct opus_proto_params p = default_params();
	struct opus_proto_submit m;
	struct opus_proto_writer w;
	const char *why = NULL;
	size_t		len;
	int			n_rejected_corrupt = 0;

	/* generate */
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_submit_head(&w, OPUS_KIND_GENERATE, &p, 0, NULL);
	opus_proto_encode_submit_tenant(&w, &default_tenant);
	opus_proto_encode_submit_grammar(&w, "root ::= \"x\"", 12);
	opus_proto_encode_submit_data_head(&w, 0, 5);
	opus_proto_w_bytes(&w, "hello", 5);
	CHECK(parse_submit_copy(buf, w.len, &m, &why), "GENERATE parses");
	CHECK(m.grammar.len == 12 && memcmp(m.grammar.ptr, "root ::= \"x\"", 12) == 0,
		  "grammar round-trips");
	CHECK(m.kind == OPUS_KIND_GENERATE && m.data_len == 5 && memcmp(m.data, "hello", 5) == 0 &&
		  m.params.max_tokens == 16 && m.params.top_k == 40 && m.params.seed == p.seed &&
		  m.params.priority == 10 &&
		  m.params.temperature == p.temperature && m.params.repetition_penalty == p.repetition_penalty,
		  "GENERATE fields round-trip");
	for (size_t n = 0; n < w.len; n++)
		CHECK(!parse_submit_copy(buf, n, &m, &why), "truncated GENERATE (%zu) rejected", n);
	/* a NUL inside the prompt */
	buf[w.len - 2] = 0;
	CHECK(!parse_submit_copy(buf, w.len, &m, &why), "NUL in prompt rejected");

	/* chat, with stop strings */
	len = encode_chat(buf, sizeof(buf), &p);
	CHECK(len > 0 && parse_submit_copy(buf, len, &m, &why), "CHAT parses (%s)", why ? why : "");
	CHECK(m.n_stop == 2 && m.stop[1].len == 3 && memcmp(m.stop[1].ptr, "END", 3) == 0,
		  "stop strings round-trip");
	{
		uint32_t	pos = 0;
		uint8_t		role;
		struct opus_proto_str c;

		opus_proto_next_chat_message(&m, &pos, &role, &c);
		CHECK(role == OPUS_ROLE_SYSTEM && c.len == 16, "first message");
		opus_proto_next_chat_message(&m, &pos, &role, &c);
		CHECK(role == OPUS_ROLE_USER && c.len == 3 && memcmp(c.ptr, "Hi!", 3) == 0, "second message");
	}
	for (size_t n = 0; n < len; n++)
		CHECK(!parse_submit_copy(buf, n, &m, &why), "truncated CHAT (%zu) rejected", n);
	/* flip every byte: must never crash; most flips must be rejected */
	for (size_t i = 0; i < len; i++)
	{
		uint8_t		save = buf[i];

		buf[i] ^= 0xff;
		if (!parse_submit_copy(buf, len, &m, &why))
			n_rejected_corrupt++;
		buf[i] = save;
	}
	CHECK(n_rejected_corrupt > 0, "corruptions rejected: %d", n_rejected_corrupt);

	/* bad role */
	len = encode_chat(buf, sizeof(buf), &p);
	{
		/* the first message's role byte follows head + stops + tenant + n_items + data_len */
		size_t		role_at = OPUS_PROTO_SUBMIT_FIXED + (4 + 2) + (4 + 3) + OPUS_PROTO_TENANT_SIZE + 4 + 8;

		CHECK(buf[role_at] == OPUS_ROLE_SYSTEM, "role byte located");
		buf[role_at] = OPUS_ROLE__COUNT;
		CHECK(!parse_submit_copy(buf, len, &m, &why), "unknown role rejected");
	}
	/* tool lists: one is fine (beside a tool message), two are not */
	{
		size_t		role_at = OPUS_PROTO_SUBMIT_FIXED + (4 + 2) + (4 + 3) + OPUS_PROTO_TENANT_SIZE + 4 + 8;
		size_t		role2_at = role_at + 5 + strlen("You are helpful.");

		len = encode_chat(buf, sizeof(buf), &p);
		buf[role_at] = OPUS_ROLE_TOOLS;
		CHECK(parse_submit_copy(buf, len, &m, &why), "a tools item and a message parse (%s)",
			  why ? why : "");
		buf[role2_at] = OPUS_ROLE_TOOL;
		CHECK(parse_submit_copy(buf, len, &m, &why), "a tools item and a tool message parse");
		buf[role2_at] = OPUS_ROLE_TOOLS;
		CHECK(!parse_submit_copy(buf, len, &m, &why), "two tools items rejected");
		/* members: after a message only */
		buf[role_at] = OPUS_ROLE_SYSTEM;
		buf[role2_at] = OPUS_ROLE_MEMBERS;
		CHECK(parse_submit_copy(buf, len, &m, &why), "a message and its members parse (%s)",
			  why ? why : "");
		buf[role_at] = OPUS_ROLE_TOOLS;
		CHECK(!parse_submit_copy(buf, len, &m, &why), "members after the tools item rejected");
		buf[role_at] = OPUS_ROLE_MEMBERS;
		CHECK(!parse_submit_copy(buf, len, &m, &why), "members first rejected");
	}

	/* out-of-range parameters are rejected by the parser too */
	{
		struct opus_proto_params bad[10];
		int			nb = 0;

		for (int i = 0; i < 10; i++)
			bad[i] = default_params();
		bad[nb++].max_tokens = 0;
		bad[nb++].temperature = -1.0f;
		bad[nb++].temperature = NAN;
		bad[nb++].top_p = 0.0f;
		bad[nb++].top_k = -2;
		bad[nb++].min_p = 1.5f;
		bad[nb++].repetition_penalty = INFINITY;
		bad[nb++].presence_penalty = 3.0f;
		bad[nb++].priority = -1;
		bad[nb++].priority = OPUS_PROTO_MAX_PRIORITY + 1;
		for (int i = 0; i < nb; i++)
		{
			len = encode_chat(buf, sizeof(buf), &bad[i]);
			CHECK(!parse_submit_copy(buf, len, &m, &why), "bad parameter %d rejected", i);
		}
	}

	/* the tenant block: round trip, and out-of-range fields rejected */
	{
		struct opus_proto_tenant t = {0xabcdef0123456789ULL, 4242, 3, 10};
		struct opus_proto_tenant bad_t[3] = {{0, 0, 0, 0}, {0, 0, OPUS_PROTO_MAX_WEIGHT + 1, 0},
		{0, 0, 1, 11}};

		opus_proto_writer_init(&w, buf, sizeof(buf));
		opus_proto_encode_submit_head(&w, OPUS_KIND_GENERATE, &p, 0, NULL);
		opus_proto_encode_submit_tenant(&w, &t);
		opus_proto_encode_submit_grammar(&w, NULL, 0);
		opus_proto_encode_submit_data_head(&w, 0, 5);
		opus_proto_w_bytes(&w, "hello", 5);
		CHECK(parse_submit_copy(buf, w.len, &m, &why) &&
			  m.tenant.cache_scope == t.cache_scope && m.tenant.tenant == 4242 &&
			  m.tenant.weight == 3 && m.tenant.min_priority == 10, "tenant block round trip");
		for (int i = 0; i < 3; i++)
		{
			opus_proto_writer_init(&w, buf, sizeof(buf));
			opus_proto_encode_submit_head(&w, OPUS_KIND_GENERATE, &p, 0, NULL);
			opus_proto_encode_submit_tenant(&w, &bad_t[i]);
			opus_proto_encode_submit_grammar(&w, NULL, 0);
			opus_proto_encode_submit_data_head(&w, 0, 5);
			opus_proto_w_bytes(&w, "hello", 5);
			CHECK(!parse_submit_copy(buf, w.len, &m, &why), "bad tenant block %d rejected", i);
		}
	}

	/* detokenize: data_len must be 4 * n_items */
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_submit_head(&w, OPUS_KIND_DETOKENIZE, &p, 0, NULL);
	opus_proto_encode_submit_tenant(&w, &default_tenant);
	opus_proto_encode_submit_grammar(&w, NULL, 0);
	opus_proto_encode_submit_data_head(&w, 3, 12);
	opus_proto_w_u32(&w, 1);
	opus_proto_w_u32(&w, 2);
	opus_proto_w_u32(&w, 49151);
	CHECK(parse_submit_copy(buf, w.len, &m, &why) && m.n_items == 3 &&
		  opus_proto_token_at(&m, 2) == 49151, "DETOKENIZE parses");
	opus_proto_put_u32(buf + w.len - 12 - 8, 4);	/* n_items 4, data 12 bytes */
	CHECK(!parse_submit_copy(buf, w.len, &m, &why), "DETOKENIZE count mismatch rejected");

	/* embed: the text, flags in n_items (normalize, truncate; no others) */
	for (uint32_t flags = 0; flags <= OPUS_PROTO_EMBED_FLAGS + 1; flags++)
	{
		opus_proto_writer_init(&w, buf, sizeof(buf));
		opus_proto_encode_submit_head(&w, OPUS_KIND_EMBED, &p, 0, NULL);
		opus_proto_encode_submit_tenant(&w, &default_tenant);
		opus_proto_encode_submit_grammar(&w, NULL, 0);
		opus_proto_encode_submit_data_head(&w, flags, 5);
		opus_proto_w_bytes(&w, "hello", 5);
		if (flags <= OPUS_PROTO_EMBED_FLAGS)
			CHECK(parse_submit_copy(buf, w.len, &m, &why) && m.kind == OPUS_KIND_EMBED &&
				  m.n_items == flags && m.data_len == 5, "EMBED with flags %u parses", flags);
		else
			CHECK(!parse_submit_copy(buf, w.len, &m, &why), "EMBED with unknown flags rejected");
	}
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_submit_head(&w, OPUS_KIND_EMBED, &p, 0, NULL);
	opus_proto_encode_submit_tenant(&w, &default_tenant);
	opus_proto_encode_submit_grammar(&w, NULL, 0);
	opus_proto_encode_submit_data_head(&w, 1, 3);
	opus_proto_w_bytes(&w, "a\0b", 3);
	CHECK(!parse_submit_copy(buf, w.len, &m, &why), "EMBED text with a NUL rejected");

	/* unknown kind */
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_submit_head(&w, 9, &p, 0, NULL);
	opus_proto_encode_submit_tenant(&w, &default_tenant);
	opus_proto_encode_submit_grammar(&w, NULL, 0);
	opus_proto_encode_submit_data_head(&w, 0, 0);
	CHECK(!parse_submit_copy(buf, w.len, &m, &why), "unknown kind rejected");
}

static void
test_done_stats_fatal(void)
{
	uint8_t		buf[1024];
	struct opus_proto_writer w;
	struct opus_proto_done d,
				d2;
	struct opus_proto_stats s,
				s2;
	struct opus_proto_fatal f;
	const char *why = NULL;

	memset(&d, 0, sizeof(d));
	d.finish = OPUS_PROTO_FINISH_LENGTH;
	d.n_prompt = 10;
	d.n_completion = 16;
	d.n_cached = 4;
	d.queue_ms = 0.5;
	d.ttft_ms = 12.25;
	d.total_ms = 99.0;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_done(&w, &d);
	CHECK(opus_proto_parse_done(buf, w.len, &d2, &why), "DONE parses");
	CHECK(d2.finish == d.finish && d2.n_prompt == 10 && d2.n_completion == 16 &&
		  d2.n_cached == 4 && d2.ttft_ms == 12.25 && d2.total_ms == 99.0 && d2.message[0] == 0,
		  "DONE round-trips");
	for (size_t n = 0; n < w.len; n++)
		CHECK(!opus_proto_parse_done(buf, n, &d2, &why), "truncated DONE (%zu) rejected", n);

	d.finish = OPUS_PROTO_FINISH_ERROR;
	d.code = OPUS_PROTO_ERR_CONTEXT;
	strcpy(d.message, "prompt is too long");
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_done(&w, &d);
	CHECK(opus_proto_parse_done(buf, w.len, &d2, &why) && d2.code == OPUS_PROTO_ERR_CONTEXT &&
		  strcmp(d2.message, "prompt is too long") == 0, "error DONE round-trips");
	d.code = OPUS_PROTO_ERR_OK;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_done(&w, &d);
	CHECK(!opus_proto_parse_done(buf, w.len, &d2, &why), "ERROR without a code rejected");
	d.code = OPUS_PROTO_ERR__COUNT;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_done(&w, &d);
	CHECK(!opus_proto_parse_done(buf, w.len, &d2, &why), "unknown code rejected");
	d.code = OPUS_PROTO_ERR_CONTEXT;
	d.total_ms = NAN;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_done(&w, &d);
	CHECK(!opus_proto_parse_done(buf, w.len, &d2, &why), "NaN timing rejected");
	d.total_ms = 1;
	d.n_cached = 11;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_done(&w, &d);
	CHECK(!opus_proto_parse_done(buf, w.len, &d2, &why), "n_cached > n_prompt rejected");

	memset(&s, 0, sizeof(s));
	s.n_active = 3;
	s.kv_blocks_total = 100;
	s.tokens_decode = 1 << 20;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_stats(&w, &s);
	CHECK(opus_proto_parse_stats(buf, w.len, &s2, &why) && memcmp(&s, &s2, sizeof(s)) == 0,
		  "STATS round-trips");
	opus_proto_put_u32(buf, (uint32_t) -1);
	CHECK(!opus_proto_parse_stats(buf, w.len, &s2, &why), "negative STATS rejected");

	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_fatal(&w, OPUS_PROTO_ERR_FORMAT, "not a gguf file");
	CHECK(opus_proto_parse_fatal(buf, w.len, &f, &why) && f.code == OPUS_PROTO_ERR_FORMAT &&
		  strcmp(f.message, "not a gguf file") == 0, "FATAL round-trips");
	CHECK(!opus_proto_parse_fatal(buf, w.len + 1, &f, &why), "FATAL with trailing byte rejected");
	buf[8] = 0;
	CHECK(!opus_proto_parse_fatal(buf, w.len, &f, &why), "NUL in FATAL message rejected");

	CHECK(opus_proto_parse_text((const uint8_t *) "abc", 3, &why), "TEXT ok");
	CHECK(!opus_proto_parse_text((const uint8_t *) "a\0c", 3, &why), "TEXT with NUL rejected");
	CHECK(!opus_proto_parse_text((const uint8_t *) "", 0, &why), "empty TEXT rejected");
	{
		uint8_t		t[8];

		opus_proto_put_u32(t, 5);
		opus_proto_put_u32(t + 4, 7);
		CHECK(opus_proto_parse_tokens(t, 8, &why), "TOKENS ok");
		CHECK(!opus_proto_parse_tokens(t, 7, &why), "ragged TOKENS rejected");
		opus_proto_put_u32(t + 4, (uint32_t) -3);
		CHECK(!opus_proto_parse_tokens(t, 8, &why), "negative token rejected");
	}
	{
		uint8_t		e[8];
		float		v[2] = {-0.5f, 3.25f};
		uint32_t	u;

		for (int i = 0; i < 2; i++)
		{
			memcpy(&u, &v[i], 4);
			opus_proto_put_u32(e + 4 * i, u);
		}
		CHECK(opus_proto_parse_embedding(e, 8, &why), "EMBEDDING ok (negative values too)");
		CHECK(!opus_proto_parse_embedding(e, 6, &why), "ragged EMBEDDING rejected");
		CHECK(!opus_proto_parse_embedding(e, 0, &why), "empty EMBEDDING rejected");
		v[1] = NAN;
		memcpy(&u, &v[1], 4);
		opus_proto_put_u32(e + 4, u);
		CHECK(!opus_proto_parse_embedding(e, 8, &why), "NaN in EMBEDDING rejected");
	}
	CHECK(opus_proto_parse_empty(0, &why) && !opus_proto_parse_empty(1, &why), "empty payloads");
}

static void
test_writer_overflow(void)
{
	uint8_t		buf[8];
	struct opus_proto_writer w;

	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_w_u64(&w, 1);
	CHECK(!w.overflow && w.len == 8, "exact fit");
	opus_proto_w_u8(&w, 1);
	CHECK(w.overflow && w.len == 8, "overflow flagged, nothing written");
}

/* PROGRESS (protocol v2): round trip, sizes, reserved bytes, ranges. */
static void
test_progress(void)
{
	uint8_t		buf[64];
	struct opus_proto_writer w;
	struct opus_proto_progress p,
				p2;
	const char *why = NULL;

	memset(&p, 0, sizeof(p));
	p.phase = OPUS_PROTO_PHASE_DECODE;
	p.priority = 3;
	p.n_prompt = 40;
	p.n_prompt_done = 40;
	p.n_generated = 7;
	p.kv_blocks = 3;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_progress(&w, &p);
	CHECK(w.len == OPUS_PROTO_PROGRESS_SIZE, "PROGRESS has its fixed size");
	CHECK(opus_proto_parse_progress(buf, w.len, &p2, &why) && p2.phase == p.phase &&
		  p2.priority == 3 && p2.n_prompt == 40 && p2.n_prompt_done == 40 &&
		  p2.n_generated == 7 && p2.kv_blocks == 3, "PROGRESS round-trips");
	for (size_t n = 0; n < w.len; n++)
		CHECK(!opus_proto_parse_progress(buf, n, &p2, &why), "truncated PROGRESS (%zu) rejected", n);
	CHECK(!opus_proto_parse_progress(buf, w.len + 1, &p2, &why), "PROGRESS with a trailing byte rejected");
	buf[1] = 1;
	CHECK(!opus_proto_parse_progress(buf, w.len, &p2, &why), "PROGRESS reserved byte checked");
	buf[1] = 0;
	buf[0] = OPUS_PROTO_PHASE__COUNT;
	CHECK(!opus_proto_parse_progress(buf, w.len, &p2, &why), "unknown phase rejected");
	buf[0] = 0;
	CHECK(!opus_proto_parse_progress(buf, w.len, &p2, &why), "phase 0 rejected");
	p.n_prompt_done = 41;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_progress(&w, &p);
	CHECK(!opus_proto_parse_progress(buf, w.len, &p2, &why), "prompt done beyond the prompt rejected");
	p.n_prompt_done = 40;
	p.kv_blocks = -1;
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_progress(&w, &p);
	CHECK(!opus_proto_parse_progress(buf, w.len, &p2, &why), "negative KV blocks rejected");
}

/* EXPERTS (protocol v4): round trip, shape limits, size, count range. */
static void
test_experts(void)
{
	uint64_t	counts[2 * 8];
	uint8_t		buf[OPUS_PROTO_EXPERTS_SIZE(2 * 8) + 8];
	uint8_t		big[16];
	struct opus_proto_writer w;
	struct opus_proto_experts x;
	const char *why = NULL;
	size_t		len;
	bool		same = true;

	memset(buf, 0, sizeof(buf));
	for (int i = 0; i < 16; i++)
		counts[i] = (uint64_t) i * 1000003u + 7;
	counts[15] = UINT64_MAX;	/* clamped to INT64_MAX by the encoder */
	opus_proto_writer_init(&w, buf, sizeof(buf));
	opus_proto_encode_experts(&w, 2, 8, counts);
	len = w.len;
	CHECK(!w.overflow && len == OPUS_PROTO_EXPERTS_SIZE(16), "EXPERTS size %zu", len);
	CHECK(opus_proto_parse_experts(buf, len, &x, &why) && x.n_layer == 2 &&
		  x.n_expert == 8, "EXPERTS round-trips (%s)", why ? why : "");
	for (int i = 0; i < 15; i++)
		same = same && opus_proto_expert_count(&x, (size_t) i) == (int64_t) counts[i];
	CHECK(same && opus_proto_expert_count(&x, 15) == INT64_MAX, "EXPERTS counts round-trip");
	for (size_t n = 0; n < len; n++)
		CHECK(!opus_proto_parse_experts(buf, n, &x, &why), "truncated EXPERTS (%zu) rejected", n);
	CHECK(!opus_proto_parse_experts(buf, len + 8, &x, &why), "EXPERTS with a trailing count rejected");
	/* a count above INT64_MAX */
	opus_proto_put_u64(buf + 8 + 8 * 3, (uint64_t) INT64_MAX + 1);
	CHECK(!opus_proto_parse_experts(buf, len, &x, &why), "EXPERTS count above INT64_MAX rejected");
	opus_proto_put_u64(buf + 8 + 8 * 3, 3);
	/* shapes: zero, too many experts, too many layers, too many counters */
	opus_proto_put_u32(buf, 0);
	CHECK(!opus_proto_parse_experts(buf, len, &x, &why), "EXPERTS with 0 layers rejected");
	opus_proto_put_u32(buf, 2);
	opus_proto_put_u32(buf + 4, 0);
	CHECK(!opus_proto_parse_experts(buf, len, &x, &why), "EXPERTS with 0 experts rejected");
	opus_proto_put_u32(buf + 4, 16);
	CHECK(!opus_proto_parse_experts(buf, len, &x, &why), "EXPERTS shape not matching the size rejected");
	opus_proto_put_u32(buf, 1);
	CHECK(opus_proto_parse_experts(buf, len, &x, &why) && x.n_layer == 1 && x.n_expert == 16,
		  "EXPERTS 1 x 16 in the same bytes accepted");
	/* huge declared shapes must be refused before any size arithmetic */
	opus_proto_put_u32(big, OPUS_PROTO_MAX_EXPERT_LAYERS + 1);
	opus_proto_put_u32(big + 4, 1);
	opus_proto_put_u64(big + 8, 0);
	CHECK(!opus_proto_parse_experts(big, 16, &x, &why), "EXPERTS with too many layers rejected");
	opus_proto_put_u32(big, 1);
	opus_proto_put_u32(big + 4, OPUS_PROTO_MAX_EXPERTS + 1);
	CHECK(!opus_proto_parse_experts(big, 16, &x, &why), "EXPERTS with too many experts rejected");
	opus_proto_put_u32(big, OPUS_PROTO_MAX_EXPERT_LAYERS);
	opus_proto_put_u32(big + 4, OPUS_PROTO_MAX_EXPERTS);
	CHECK(!opus_proto_parse_experts(big, 16, &x, &why), "EXPERTS with too many counters rejected");
	opus_proto_put_u32(big, 0xFFFFFFFFu);
	opus_proto_put_u32(big + 4, 0xFFFFFFFFu);
	CHECK(!opus_proto_parse_experts(big, 16, &x, &why), "EXPERTS with a 2^32 x 2^32 shape rejected");
	/* the largest shape fits one frame */
	CHECK(OPUS_PROTO_EXPERTS_SIZE(OPUS_PROTO_MAX_EXPERT_COUNTS) <= OPUS_PROTO_MAX_PAYLOAD,
		  "largest EXPERTS fits a frame");
	/* a header of type EXPERTS parses */
	{
		uint8_t		hb[OPUS_PROTO_HEADER_SIZE];
		struct opus_proto_header h;

		opus_proto_encode_header(hb, (uint32_t) len, OPUS_MSG_EXPERTS, 0);
		CHECK(opus_proto_parse_header(hb, sizeof(hb), &h, &why) == OPUS_PROTO_OK &&
			  h.type == OPUS_MSG_EXPERTS, "EXPERTS header accepted");
	}
}

int
main(void)
{
	test_header();
	test_hello_ready();
	test_submit();
	test_done_stats_fatal();
	test_progress();
	test_experts();
	test_writer_overflow();
	free(submit_copy);
	return UNIT_DONE();
}
