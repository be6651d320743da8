/*
 * protocol.c - the codec of the wire format in protocol.h: little-endian
 * primitives, a bounded writer and reader, and an encoder and a validating
 * parser per message.  Plain C (no PostgreSQL, no engine headers): linked
 * into opus_pg.so (the top-level Makefile's OBJS) and the engine
 * (SHARED_SRCS in src/engine/engine.mk) alike.
 *
 * Parsers never read outside [buf, buf + len), validate every field and
 * return false with a static reason on anything malformed (fuzzed by
 * test/fuzz/fuzz_protocol.c).
 */
#include "protocol.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void
opus_proto_put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t) v;
	p[1] = (uint8_t) (v >> 8);
}

void
opus_proto_put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t) v;
	p[1] = (uint8_t) (v >> 8);
	p[2] = (uint8_t) (v >> 16);
	p[3] = (uint8_t) (v >> 24);
}

void
opus_proto_put_u64(uint8_t *p, uint64_t v)
{
	opus_proto_put_u32(p, (uint32_t) v);
	opus_proto_put_u32(p + 4, (uint32_t) (v >> 32));
}

static uint16_t
opus_proto_get_u16(const uint8_t *p)
{
	return (uint16_t) (p[0] | (p[1] << 8));
}

uint32_t
opus_proto_get_u32(const uint8_t *p)
{
	return (uint32_t) p[0] | ((uint32_t) p[1] << 8) |
		((uint32_t) p[2] << 16) | ((uint32_t) p[3] << 24);
}

static uint64_t
opus_proto_get_u64(const uint8_t *p)
{
	return (uint64_t) opus_proto_get_u32(p) |
		((uint64_t) opus_proto_get_u32(p + 4) << 32);
}

void
opus_proto_writer_init(struct opus_proto_writer *w, void *buf, size_t cap)
{
	w->buf = (uint8_t *) buf;
	w->cap = cap;
	w->len = 0;
	w->overflow = false;
}

static uint8_t *
opus_proto_reserve(struct opus_proto_writer *w, size_t n)
{
	uint8_t    *p;

	if (w->overflow || n > w->cap - w->len)
	{
		w->overflow = true;
		return NULL;
	}
	p = w->buf + w->len;
	w->len += n;
	return p;
}

void
opus_proto_w_u8(struct opus_proto_writer *w, uint8_t v)
{
	uint8_t    *p = opus_proto_reserve(w, 1);

	if (p)
		p[0] = v;
}

static void
opus_proto_w_u16(struct opus_proto_writer *w, uint16_t v)
{
	uint8_t    *p = opus_proto_reserve(w, 2);

	if (p)
		opus_proto_put_u16(p, v);
}

void
opus_proto_w_u32(struct opus_proto_writer *w, uint32_t v)
{
	uint8_t    *p = opus_proto_reserve(w, 4);

	if (p)
		opus_proto_put_u32(p, v);
}

void
opus_proto_w_u64(struct opus_proto_writer *w, uint64_t v)
{
	uint8_t    *p = opus_proto_reserve(w, 8);

	if (p)
		opus_proto_put_u64(p, v);
}

static void
opus_proto_w_f32(struct opus_proto_writer *w, float v)
{
	uint32_t	u;

	memcpy(&u, &v, 4);
	opus_proto_w_u32(w, u);
}

static void
opus_proto_w_f64(struct opus_proto_writer *w, double v)
{
	uint64_t	u;

	memcpy(&u, &v, 8);
	opus_proto_w_u64(w, u);
}

void
opus_proto_w_bytes(struct opus_proto_writer *w, const void *src, size_t n)
{
	uint8_t    *p = opus_proto_reserve(w, n);

	if (p && n > 0)
		memcpy(p, src, n);
}

/* A fixed-size, NUL-padded string field (truncated to size - 1 bytes). */
static void
opus_proto_w_fixstr(struct opus_proto_writer *w, const char *s, size_t size)
{
	uint8_t    *p = opus_proto_reserve(w, size);
	size_t		n;

	if (!p)
		return;
	memset(p, 0, size);
	n = s ? strlen(s) : 0;
	if (n > size - 1)
		n = size - 1;
	if (n > 0)
		memcpy(p, s, n);
}

/* A bounded reader: any read past the end sets `bad`, later reads give 0. */
struct opus_proto_reader
{
	const uint8_t *buf;
	size_t		len;
	size_t		pos;
	bool		bad;
};

static void
opus_proto_reader_init(struct opus_proto_reader *r, const void *buf, size_t len)
{
	r->buf = (const uint8_t *) buf;
	r->len = len;
	r->pos = 0;
	r->bad = false;
}

static const uint8_t *
opus_proto_take(struct opus_proto_reader *r, size_t n)
{
	const uint8_t *p;

	if (r->bad || n > r->len - r->pos)
	{
		r->bad = true;
		return NULL;
	}
	p = r->buf + r->pos;
	r->pos += n;
	return p;
}

static uint8_t
opus_proto_r_u8(struct opus_proto_reader *r)
{
	const uint8_t *p = opus_proto_take(r, 1);

	return p ? p[0] : 0;
}

static uint16_t
opus_proto_r_u16(struct opus_proto_reader *r)
{
	const uint8_t *p = opus_proto_take(r, 2);

	return p ? opus_proto_get_u16(p) : 0;
}

static uint32_t
opus_proto_r_u32(struct opus_proto_reader *r)
{
	const uint8_t *p = opus_proto_take(r, 4);

	return p ? opus_proto_get_u32(p) : 0;
}

static uint64_t
opus_proto_r_u64(struct opus_proto_reader *r)
{
	const uint8_t *p = opus_proto_take(r, 8);

	return p ? opus_proto_get_u64(p) : 0;
}

static float
opus_proto_r_f32(struct opus_proto_reader *r)
{
	uint32_t	u = opus_proto_r_u32(r);
	float		v;

	memcpy(&v, &u, 4);
	return v;
}

static double
opus_proto_r_f64(struct opus_proto_reader *r)
{
	uint64_t	u = opus_proto_r_u64(r);
	double		v;

	memcpy(&v, &u, 8);
	return v;
}

/*
 * A fixed-size string field: must contain a NUL within `size` bytes and
 * nothing but NULs after it.  Copies into dst (size bytes).
 */
static bool
opus_proto_r_fixstr(struct opus_proto_reader *r, char *dst, size_t size)
{
	const uint8_t *p = opus_proto_take(r, size);
	const uint8_t *nul;
	size_t		i;

	if (!p)
		return false;
	nul = (const uint8_t *) memchr(p, 0, size);
	if (!nul)
		return false;
	for (i = (size_t) (nul - p); i < size; i++)
	{
		if (p[i] != 0)
			return false;
	}
	memcpy(dst, p, size);
	return true;
}

void
opus_proto_encode_header(uint8_t *p, uint32_t length, uint16_t type, uint64_t id)
{
	opus_proto_put_u32(p, length);
	opus_proto_put_u16(p + 4, type);
	opus_proto_put_u16(p + 6, 0);
	opus_proto_put_u64(p + 8, id);
}

enum opus_proto_result
opus_proto_parse_header(const uint8_t *buf, size_t len,
						struct opus_proto_header *h, const char **why)
{
	if (len < OPUS_PROTO_HEADER_SIZE)
		return OPUS_PROTO_NEED_MORE;
	h->length = opus_proto_get_u32(buf);
	h->type = opus_proto_get_u16(buf + 4);
	h->flags = opus_proto_get_u16(buf + 6);
	h->id = opus_proto_get_u64(buf + 8);
	if (h->type == 0 || h->type >= OPUS_MSG__COUNT)
	{
		*why = "unknown frame type";
		return OPUS_PROTO_BAD;
	}
	if (h->flags != 0)
	{
		*why = "nonzero frame flags";
		return OPUS_PROTO_BAD;
	}
	if (h->length > OPUS_PROTO_MAX_PAYLOAD)
	{
		*why = "frame payload too large";
		return OPUS_PROTO_BAD;
	}
	return OPUS_PROTO_OK;
}

static bool
opus_proto_in_range(double v, double lo, double hi)
{
	return isfinite(v) && v >= lo && v <= hi;
}

const char *
opus_proto_check_params(const struct opus_proto_params *p)
{
	enum opus_param_id bad = OPUS_P__COUNT;
	double		bad_value = 0;

	OPUS_PARAMS_REQUEST(OPUS_PARAM_CHECK_FIELD)
	OPUS_PARAMS_SAMPLING(OPUS_PARAM_CHECK_FIELD)
	OPUS_PARAMS_SESSION(OPUS_PARAM_CHECK_FIELD)
	(void) bad_value;
	return bad == OPUS_P__COUNT ? NULL : opus_params[bad].name;
}

void
opus_proto_encode_hello(struct opus_proto_writer *w, const struct opus_proto_hello *m)
{
	opus_proto_w_u32(w, m->magic);
	opus_proto_w_u32(w, m->version);
	opus_proto_w_u32(w, (uint32_t) m->n_threads);
	opus_proto_w_u32(w, (uint32_t) m->n_ctx);
	opus_proto_w_u64(w, (uint64_t) m->kv_cache_bytes);
	opus_proto_w_fixstr(w, m->device, sizeof(m->device));
	opus_proto_w_fixstr(w, m->model_path, sizeof(m->model_path));
	opus_proto_w_u32(w, (uint32_t) m->kv_block_size);
	opus_proto_w_u32(w, (uint32_t) m->max_batch_tokens);
	opus_proto_w_u32(w, (uint32_t) m->kv_cache_type);
	opus_proto_w_u32(w, (uint32_t) m->step_target_ms);
	opus_proto_w_u32(w, (uint32_t) m->starve_ms);
}

static bool
opus_proto_r_magic_version(struct opus_proto_reader *r, const char *bad_magic,
						   uint32_t *magic, uint32_t *version, const char **why)
{
	if (r->len < 8)
		return true;			/* the caller's size check reports it */
	*magic = opus_proto_r_u32(r);
	*version = opus_proto_r_u32(r);
	if (*magic != OPUS_PROTO_MAGIC)
	{
		*why = bad_magic;
		return false;
	}
	if (*version != OPUS_PROTO_VERSION)
	{
		*why = OPUS_PROTO_VERSION_MISMATCH;
		return false;
	}
	return true;
}

void
opus_proto_version_mismatch(char *buf, size_t size, const char *peer,
							uint32_t peer_version, const char *self)
{
	snprintf(buf, size,
			 OPUS_PROTO_VERSION_MISMATCH ": %s speaks protocol version %u, %s version %u "
			 "(opus_engine and opus_pg.so come from different builds: install both from one release)",
			 peer, (unsigned) peer_version, self, (unsigned) OPUS_PROTO_VERSION);
}

bool
opus_proto_parse_hello(const uint8_t *buf, size_t len,
					   struct opus_proto_hello *m, const char **why)
{
	struct opus_proto_reader r;

	opus_proto_reader_init(&r, buf, len);
	memset(m, 0, sizeof(*m));
	if (!opus_proto_r_magic_version(&r, "HELLO has a bad magic number",
									&m->magic, &m->version, why))
		return false;
	if (len != OPUS_PROTO_HELLO_SIZE)
	{
		*why = "HELLO has the wrong size";
		return false;
	}
	m->n_threads = (int32_t) opus_proto_r_u32(&r);
	m->n_ctx = (int32_t) opus_proto_r_u32(&r);
	m->kv_cache_bytes = (int64_t) opus_proto_r_u64(&r);
	if (!opus_proto_r_fixstr(&r, m->device, sizeof(m->device)) ||
		!opus_proto_r_fixstr(&r, m->model_path, sizeof(m->model_path)) || r.bad)
	{
		*why = "HELLO has a malformed string field";
		return false;
	}
	m->kv_block_size = (int32_t) opus_proto_r_u32(&r);
	m->max_batch_tokens = (int32_t) opus_proto_r_u32(&r);
	m->kv_cache_type = (int32_t) opus_proto_r_u32(&r);
	m->step_target_ms = (int32_t) opus_proto_r_u32(&r);
	m->starve_ms = (int32_t) opus_proto_r_u32(&r);
	if (r.bad || m->kv_block_size < 1 || m->kv_block_size > OPUS_PROTO_MAX_BLOCK_SIZE)
	{
		*why = "HELLO kv_block_size out of range";
		return false;
	}
	if (m->max_batch_tokens < 1 || m->max_batch_tokens > (1 << 20))
	{
		*why = "HELLO max_batch_tokens out of range";
		return false;
	}
	if (m->step_target_ms < 0 || m->starve_ms < 0)
	{
		*why = "HELLO step_target_ms or starve_ms negative";
		return false;
	}
	if (m->kv_cache_type != OPUS_PROTO_KV_F16 && m->kv_cache_type != OPUS_PROTO_KV_Q8_0)
	{
		*why = "HELLO kv_cache_type is unknown";
		return false;
	}
	if (m->n_threads < 1 || m->n_threads > 1024)
	{
		*why = "HELLO n_threads out of range";
		return false;
	}
	if (m->n_ctx < 0)
	{
		*why = "HELLO n_ctx out of range";
		return false;
	}
	if (m->kv_cache_bytes <= 0 || m->kv_cache_bytes > ((int64_t) 1 << 46))
	{
		*why = "HELLO kv_cache_bytes out of range";
		return false;
	}
	if (m->model_path[0] == '\0')
	{
		*why = "HELLO has an empty model path";
		return false;
	}
	return true;
}

void
opus_proto_encode_ready(struct opus_proto_writer *w, const struct opus_proto_ready *m)
{
	opus_proto_w_u32(w, m->magic);
	opus_proto_w_u32(w, m->version);
	opus_proto_w_u64(w, (uint64_t) m->n_params);
	opus_proto_w_u32(w, (uint32_t) m->n_ctx);
	opus_proto_w_u32(w, (uint32_t) m->n_ctx_train);
	opus_proto_w_u32(w, (uint32_t) m->n_vocab);
	opus_proto_w_u32(w, (uint32_t) m->n_layer);
	opus_proto_w_u32(w, (uint32_t) m->n_embd);
	opus_proto_w_u32(w, (uint32_t) m->n_head);
	opus_proto_w_u32(w, (uint32_t) m->n_head_kv);
	opus_proto_w_u32(w, (uint32_t) m->pid);
	opus_proto_w_u64(w, (uint64_t) m->kv_tokens);
	opus_proto_w_u64(w, m->vocab_hash);
	opus_proto_w_fixstr(w, m->name, sizeof(m->name));
	opus_proto_w_fixstr(w, m->arch, sizeof(m->arch));
	opus_proto_w_fixstr(w, m->tensor_type, sizeof(m->tensor_type));
	opus_proto_w_fixstr(w, m->chat_template, sizeof(m->chat_template));
}

bool
opus_proto_parse_ready(const uint8_t *buf, size_t len,
					   struct opus_proto_ready *m, const char **why)
{
	struct opus_proto_reader r;

	opus_proto_reader_init(&r, buf, len);
	memset(m, 0, sizeof(*m));
	if (!opus_proto_r_magic_version(&r, "READY has a bad magic number",
									&m->magic, &m->version, why))
		return false;
	if (len != OPUS_PROTO_READY_SIZE)
	{
		*why = "READY has the wrong size";
		return false;
	}
	m->n_params = (int64_t) opus_proto_r_u64(&r);
	m->n_ctx = (int32_t) opus_proto_r_u32(&r);
	m->n_ctx_train = (int32_t) opus_proto_r_u32(&r);
	m->n_vocab = (int32_t) opus_proto_r_u32(&r);
	m->n_layer = (int32_t) opus_proto_r_u32(&r);
	m->n_embd = (int32_t) opus_proto_r_u32(&r);
	m->n_head = (int32_t) opus_proto_r_u32(&r);
	m->n_head_kv = (int32_t) opus_proto_r_u32(&r);
	m->pid = (int32_t) opus_proto_r_u32(&r);
	m->kv_tokens = (int64_t) opus_proto_r_u64(&r);
	m->vocab_hash = opus_proto_r_u64(&r);
	if (!opus_proto_r_fixstr(&r, m->name, sizeof(m->name)) ||
		!opus_proto_r_fixstr(&r, m->arch, sizeof(m->arch)) ||
		!opus_proto_r_fixstr(&r, m->tensor_type, sizeof(m->tensor_type)) ||
		!opus_proto_r_fixstr(&r, m->chat_template, sizeof(m->chat_template)) ||
		r.bad)
	{
		*why = "READY has a malformed string field";
		return false;
	}
	if (m->n_params < 0 || m->n_ctx < 1 || m->n_ctx_train < 0 ||
		m->n_vocab < 1 || m->n_layer < 1 || m->n_embd < 1 ||
		m->n_head < 1 || m->n_head_kv < 1 || m->pid < 0 || m->kv_tokens < 0)
	{
		*why = "READY has a field out of range";
		return false;
	}
	return true;
}

void
opus_proto_encode_fatal(struct opus_proto_writer *w, uint32_t code, const char *msg)
{
	size_t		n = strlen(msg);

	if (n > OPUS_PROTO_MSG_LEN - 1)
		n = OPUS_PROTO_MSG_LEN - 1;
	opus_proto_w_u32(w, code);
	opus_proto_w_u16(w, (uint16_t) n);
	opus_proto_w_bytes(w, msg, n);
}

/* A message: at most OPUS_PROTO_MSG_LEN - 1 bytes, no NUL bytes. */
static bool
opus_proto_r_message(struct opus_proto_reader *r, char *dst)
{
	uint16_t	n = opus_proto_r_u16(r);
	const uint8_t *p;

	dst[0] = '\0';
	if (r->bad || n > OPUS_PROTO_MSG_LEN - 1)
		return false;
	p = opus_proto_take(r, n);
	if (!p || memchr(p, 0, n) != NULL)
		return false;
	memcpy(dst, p, n);
	dst[n] = '\0';
	return true;
}

bool
opus_proto_parse_fatal(const uint8_t *buf, size_t len,
					   struct opus_proto_fatal *m, const char **why)
{
	struct opus_proto_reader r;

	opus_proto_reader_init(&r, buf, len);
	m->code = opus_proto_r_u32(&r);
	if (!opus_proto_r_message(&r, m->message) || r.pos != len)
	{
		*why = "FATAL is malformed";
		return false;
	}
	if (m->code == OPUS_PROTO_ERR_OK || m->code >= OPUS_PROTO_ERR__COUNT)
	{
		*why = "FATAL has an unknown status code";
		return false;
	}
	return true;
}

void
opus_proto_encode_submit_head(struct opus_proto_writer *w, uint8_t kind,
							  const struct opus_proto_params *p,
							  int n_stop, const struct opus_proto_str *stop)
{
	int			i;

	opus_proto_w_u8(w, kind);
	opus_proto_w_u8(w, 0);
	opus_proto_w_u16(w, (uint16_t) n_stop);
	opus_proto_w_u32(w, (uint32_t) p->max_tokens);
	opus_proto_w_u32(w, (uint32_t) p->top_k);
	opus_proto_w_f32(w, p->temperature);
	opus_proto_w_f32(w, p->top_p);
	opus_proto_w_f32(w, p->min_p);
	opus_proto_w_f32(w, p->presence_penalty);
	opus_proto_w_f32(w, p->frequency_penalty);
	opus_proto_w_f32(w, p->repetition_penalty);
	opus_proto_w_u64(w, p->seed);
	opus_proto_w_u32(w, (uint32_t) p->priority);
	opus_proto_w_u32(w, (uint32_t) p->allow_special_tokens);
	for (i = 0; i < n_stop; i++)
	{
		opus_proto_w_u32(w, stop[i].len);
		opus_proto_w_bytes(w, stop[i].ptr, stop[i].len);
	}
}

void
opus_proto_encode_submit_tenant(struct opus_proto_writer *w,
								const struct opus_proto_tenant *t)
{
	opus_proto_w_u64(w, t->cache_scope);
	opus_proto_w_u32(w, t->tenant);
	opus_proto_w_u32(w, t->weight);
	opus_proto_w_u32(w, (uint32_t) t->min_priority);
}

void
opus_proto_encode_submit_grammar(struct opus_proto_writer *w,
								 const char *grammar, uint32_t len)
{
	opus_proto_w_u32(w, len);
	if (len)
		opus_proto_w_bytes(w, grammar, len);
}

void
opus_proto_encode_submit_data_head(struct opus_proto_writer *w,
								   uint32_t n_items, uint32_t data_len)
{
	opus_proto_w_u32(w, n_items);
	opus_proto_w_u32(w, data_len);
}

void
opus_proto_encode_chat_message(struct opus_proto_writer *w, uint8_t role,
							   const char *content, uint32_t len)
{
	opus_proto_w_u8(w, role);
	opus_proto_w_u32(w, len);
	opus_proto_w_bytes(w, content, len);
}

void
opus_proto_next_chat_message(const struct opus_proto_submit *m, uint32_t *pos,
							 uint8_t *role, struct opus_proto_str *content)
{
	const uint8_t *p = m->data + *pos;

	*role = p[0];
	content->len = opus_proto_get_u32(p + 1);
	content->ptr = (const char *) (p + 5);
	*pos += 5 + content->len;
}

int32_t
opus_proto_token_at(const struct opus_proto_submit *m, uint32_t i)
{
	return (int32_t) opus_proto_get_u32(m->data + 4 * (size_t) i);
}

bool
opus_proto_parse_submit(const uint8_t *buf, size_t len,
						struct opus_proto_submit *m, const char **why)
{
	struct opus_proto_reader r;
	const char *bad;
	uint32_t	i;

	opus_proto_reader_init(&r, buf, len);
	memset(m, 0, sizeof(*m));
	m->kind = opus_proto_r_u8(&r);
	if (opus_proto_r_u8(&r) != 0)
	{
		*why = "SUBMIT has a nonzero reserved byte";
		return false;
	}
	m->n_stop = opus_proto_r_u16(&r);
	m->params.max_tokens = (int32_t) opus_proto_r_u32(&r);
	m->params.top_k = (int32_t) opus_proto_r_u32(&r);
	m->params.temperature = opus_proto_r_f32(&r);
	m->params.top_p = opus_proto_r_f32(&r);
	m->params.min_p = opus_proto_r_f32(&r);
	m->params.presence_penalty = opus_proto_r_f32(&r);
	m->params.frequency_penalty = opus_proto_r_f32(&r);
	m->params.repetition_penalty = opus_proto_r_f32(&r);
	m->params.seed = opus_proto_r_u64(&r);
	m->params.priority = (int32_t) opus_proto_r_u32(&r);
	m->params.allow_special_tokens = (int32_t) opus_proto_r_u32(&r);
	if (r.bad)
	{
		*why = "SUBMIT is truncated";
		return false;
	}
	if (m->params.allow_special_tokens != 0 && m->params.allow_special_tokens != 1)
	{
		*why = "SUBMIT has a bad allow_special_tokens flag";
		return false;
	}
	if (m->kind == 0 || m->kind >= OPUS_KIND__COUNT)
	{
		*why = "SUBMIT has an unknown kind";
		return false;
	}
	if (m->n_stop > OPUS_PROTO_MAX_STOP)
	{
		*why = "SUBMIT has too many stop strings";
		return false;
	}
	if ((bad = opus_proto_check_params(&m->params)) != NULL)
	{
		*why = "SUBMIT has an out-of-range parameter";
		return false;
	}
	for (i = 0; i < m->n_stop; i++)
	{
		uint32_t	n = opus_proto_r_u32(&r);
		const uint8_t *p;

		if (r.bad || n == 0 || n > OPUS_PROTO_MAX_STOP_LEN)
		{
			*why = "SUBMIT has a bad stop string length";
			return false;
		}
		p = opus_proto_take(&r, n);
		if (!p || memchr(p, 0, n) != NULL)
		{
			*why = "SUBMIT has a malformed stop string";
			return false;
		}
		m->stop[i].ptr = (const char *) p;
		m->stop[i].len = n;
	}
	m->tenant.cache_scope = opus_proto_r_u64(&r);
	m->tenant.tenant = opus_proto_r_u32(&r);
	m->tenant.weight = opus_proto_r_u32(&r);
	m->tenant.min_priority = (int32_t) opus_proto_r_u32(&r);
	if (r.bad || m->tenant.weight < 1 || m->tenant.weight > OPUS_PROTO_MAX_WEIGHT ||
		m->tenant.min_priority < 0 || m->tenant.min_priority > m->params.priority)
	{
		*why = "SUBMIT has a bad tenant block";
		return false;
	}
	m->grammar.len = opus_proto_r_u32(&r);
	m->grammar.ptr = NULL;
	if (r.bad || m->grammar.len > OPUS_PROTO_MAX_GRAMMAR)
	{
		*why = "SUBMIT has a bad grammar length";
		return false;
	}
	if (m->grammar.len)
	{
		const uint8_t *p = opus_proto_take(&r, m->grammar.len);

		if (!p || memchr(p, 0, m->grammar.len) != NULL)
		{
			*why = "SUBMIT has a malformed grammar";
			return false;
		}
		m->grammar.ptr = (const char *) p;
	}
	m->n_items = opus_proto_r_u32(&r);
	m->data_len = opus_proto_r_u32(&r);
	if (r.bad || m->data_len != r.len - r.pos)
	{
		*why = "SUBMIT data length does not match the frame";
		return false;
	}
	m->data = r.buf + r.pos;
	switch (m->kind)
	{
		case OPUS_KIND_GENERATE:
		case OPUS_KIND_TOKENIZE:
			if (m->n_items != 0 || memchr(m->data, 0, m->data_len) != NULL)
			{
				*why = "SUBMIT prompt is malformed";
				return false;
			}
			break;
		case OPUS_KIND_EMBED:
			if ((m->n_items & ~(uint32_t) OPUS_PROTO_EMBED_FLAGS) != 0 ||
				memchr(m->data, 0, m->data_len) != NULL)
			{
				*why = "SUBMIT embedding input is malformed";
				return false;
			}
			break;
		case OPUS_KIND_DETOKENIZE:
			if (m->n_items > OPUS_PROTO_MAX_PAYLOAD / 4 ||
				(size_t) m->n_items * 4 != m->data_len)
			{
				*why = "SUBMIT token array is malformed";
				return false;
			}
			break;
		case OPUS_KIND_CHAT:
			{
				size_t		pos = 0;
				uint32_t	n_tools = 0;
				uint32_t	n_members = 0;
				bool		after_message = false;	/* the item before is a message */

				if (m->n_items == 0 || m->n_items > 2 * OPUS_PROTO_MAX_MESSAGES + 1)
				{
					*why = "SUBMIT has a bad number of chat messages";
					return false;
				}
				for (i = 0; i < m->n_items; i++)
				{
					uint32_t	n;

					if (m->data_len - pos < 5 || m->data[pos] >= OPUS_ROLE__COUNT)
					{
						*why = "SUBMIT chat message is malformed";
						return false;
					}
					n_tools += m->data[pos] == OPUS_ROLE_TOOLS;
					if (m->data[pos] == OPUS_ROLE_MEMBERS)
					{
						if (!after_message)
						{
							*why = "SUBMIT chat members item does not follow a message";
							return false;
						}
						n_members++;
					}
					after_message = m->data[pos] < OPUS_ROLE_TOOLS;
					n = opus_proto_get_u32(m->data + pos + 1);
					pos += 5;
					if (n > m->data_len - pos ||
						memchr(m->data + pos, 0, n) != NULL)
					{
						*why = "SUBMIT chat message content is malformed";
						return false;
					}
					pos += n;
				}
				if (pos != m->data_len)
				{
					*why = "SUBMIT has trailing bytes after the chat messages";
					return false;
				}
				if (n_tools > 1 || m->n_items - n_tools - n_members == 0 ||
					m->n_items - n_tools - n_members > OPUS_PROTO_MAX_MESSAGES)
				{
					*why = "SUBMIT has a bad number of chat messages or tool lists";
					return false;
				}
			}
			break;
		default:
			*why = "SUBMIT has an unknown kind";
			return false;
	}
	return true;
}

void
opus_proto_encode_done(struct opus_proto_writer *w, const struct opus_proto_done *m)
{
	size_t		n = strnlen(m->message, OPUS_PROTO_MSG_LEN - 1);

	opus_proto_w_u8(w, m->finish);
	opus_proto_w_u8(w, 0);
	opus_proto_w_u16(w, 0);
	opus_proto_w_u32(w, m->code);
	opus_proto_w_u32(w, (uint32_t) m->n_prompt);
	opus_proto_w_u32(w, (uint32_t) m->n_completion);
	opus_proto_w_u32(w, (uint32_t) m->n_cached);
	opus_proto_w_f64(w, m->queue_ms);
	opus_proto_w_f64(w, m->ttft_ms);
	opus_proto_w_f64(w, m->total_ms);
	opus_proto_w_u16(w, (uint16_t) n);
	opus_proto_w_bytes(w, m->message, n);
}

bool
opus_proto_parse_done(const uint8_t *buf, size_t len,
					  struct opus_proto_done *m, const char **why)
{
	struct opus_proto_reader r;

	opus_proto_reader_init(&r, buf, len);
	memset(m, 0, sizeof(*m));
	m->finish = opus_proto_r_u8(&r);
	if (opus_proto_r_u8(&r) != 0 || opus_proto_r_u16(&r) != 0)
	{
		*why = "DONE has nonzero reserved bytes";
		return false;
	}
	m->code = opus_proto_r_u32(&r);
	m->n_prompt = (int32_t) opus_proto_r_u32(&r);
	m->n_completion = (int32_t) opus_proto_r_u32(&r);
	m->n_cached = (int32_t) opus_proto_r_u32(&r);
	m->queue_ms = opus_proto_r_f64(&r);
	m->ttft_ms = opus_proto_r_f64(&r);
	m->total_ms = opus_proto_r_f64(&r);
	if (!opus_proto_r_message(&r, m->message) || r.pos != len)
	{
		*why = "DONE is malformed";
		return false;
	}
	if (m->finish == OPUS_PROTO_FINISH_NONE || m->finish >= OPUS_PROTO_FINISH__COUNT)
	{
		*why = "DONE has an unknown finish reason";
		return false;
	}
	if (m->code >= OPUS_PROTO_ERR__COUNT ||
		((m->finish == OPUS_PROTO_FINISH_ERROR) != (m->code != OPUS_PROTO_ERR_OK)))
	{
		*why = "DONE has an inconsistent status code";
		return false;
	}
	if (m->n_prompt < 0 || m->n_completion < 0 || m->n_cached < 0 ||
		m->n_cached > m->n_prompt)
	{
		*why = "DONE has a negative token count";
		return false;
	}
	if (!opus_proto_in_range(m->queue_ms, 0.0, 1e12) ||
		!opus_proto_in_range(m->ttft_ms, 0.0, 1e12) ||
		!opus_proto_in_range(m->total_ms, 0.0, 1e12))
	{
		*why = "DONE has a bad timing";
		return false;
	}
	return true;
}

void
opus_proto_encode_stats(struct opus_proto_writer *w, const struct opus_proto_stats *m)
{
	opus_proto_w_u32(w, (uint32_t) m->n_active);
	opus_proto_w_u32(w, (uint32_t) m->n_queued);
	opus_proto_w_u32(w, (uint32_t) m->n_running);
	opus_proto_w_u32(w, (uint32_t) m->batch_size);
	opus_proto_w_u64(w, (uint64_t) m->steps);
	opus_proto_w_u64(w, (uint64_t) m->tokens_prefill);
	opus_proto_w_u64(w, (uint64_t) m->tokens_decode);
	opus_proto_w_u64(w, (uint64_t) m->kv_blocks_total);
	opus_proto_w_u64(w, (uint64_t) m->kv_blocks_used);
	opus_proto_w_u64(w, (uint64_t) m->kv_blocks_cached);
	opus_proto_w_u64(w, (uint64_t) m->preemptions);
	opus_proto_w_u64(w, (uint64_t) m->prefix_hit_tokens);
	opus_proto_w_u64(w, (uint64_t) m->prefix_query_tokens);
}

bool
opus_proto_parse_stats(const uint8_t *buf, size_t len,
					   struct opus_proto_stats *m, const char **why)
{
	struct opus_proto_reader r;

	opus_proto_reader_init(&r, buf, len);
	if (len != OPUS_PROTO_STATS_SIZE)
	{
		*why = "STATS has the wrong size";
		return false;
	}
	m->n_active = (int32_t) opus_proto_r_u32(&r);
	m->n_queued = (int32_t) opus_proto_r_u32(&r);
	m->n_running = (int32_t) opus_proto_r_u32(&r);
	m->batch_size = (int32_t) opus_proto_r_u32(&r);
	m->steps = (int64_t) opus_proto_r_u64(&r);
	m->tokens_prefill = (int64_t) opus_proto_r_u64(&r);
	m->tokens_decode = (int64_t) opus_proto_r_u64(&r);
	m->kv_blocks_total = (int64_t) opus_proto_r_u64(&r);
	m->kv_blocks_used = (int64_t) opus_proto_r_u64(&r);
	m->kv_blocks_cached = (int64_t) opus_proto_r_u64(&r);
	m->preemptions = (int64_t) opus_proto_r_u64(&r);
	m->prefix_hit_tokens = (int64_t) opus_proto_r_u64(&r);
	m->prefix_query_tokens = (int64_t) opus_proto_r_u64(&r);
	if (m->n_active < 0 || m->n_queued < 0 || m->n_running < 0 ||
		m->batch_size < 0 || m->steps < 0 || m->tokens_prefill < 0 ||
		m->tokens_decode < 0 || m->kv_blocks_total < 0 ||
		m->kv_blocks_used < 0 || m->kv_blocks_cached < 0 ||
		m->preemptions < 0 || m->prefix_hit_tokens < 0 ||
		m->prefix_query_tokens < 0)
	{
		*why = "STATS has a negative counter";
		return false;
	}
	return true;
}

void
opus_proto_encode_progress(struct opus_proto_writer *w, const struct opus_proto_progress *m)
{
	opus_proto_w_u8(w, m->phase);
	opus_proto_w_u8(w, 0);
	opus_proto_w_u16(w, 0);
	opus_proto_w_u32(w, (uint32_t) m->priority);
	opus_proto_w_u32(w, (uint32_t) m->n_prompt);
	opus_proto_w_u32(w, (uint32_t) m->n_prompt_done);
	opus_proto_w_u32(w, (uint32_t) m->n_generated);
	opus_proto_w_u32(w, (uint32_t) m->kv_blocks);
}

bool
opus_proto_parse_progress(const uint8_t *buf, size_t len,
						  struct opus_proto_progress *m, const char **why)
{
	struct opus_proto_reader r;

	opus_proto_reader_init(&r, buf, len);
	memset(m, 0, sizeof(*m));
	if (len != OPUS_PROTO_PROGRESS_SIZE)
	{
		*why = "PROGRESS has the wrong size";
		return false;
	}
	m->phase = opus_proto_r_u8(&r);
	if (opus_proto_r_u8(&r) != 0 || opus_proto_r_u16(&r) != 0)
	{
		*why = "PROGRESS has nonzero reserved bytes";
		return false;
	}
	m->priority = (int32_t) opus_proto_r_u32(&r);
	m->n_prompt = (int32_t) opus_proto_r_u32(&r);
	m->n_prompt_done = (int32_t) opus_proto_r_u32(&r);
	m->n_generated = (int32_t) opus_proto_r_u32(&r);
	m->kv_blocks = (int32_t) opus_proto_r_u32(&r);
	if (m->phase == 0 || m->phase >= OPUS_PROTO_PHASE__COUNT)
	{
		*why = "PROGRESS has an unknown phase";
		return false;
	}
	if (m->priority < 0 || m->n_prompt < 0 || m->n_prompt_done < 0 ||
		m->n_prompt_done > m->n_prompt || m->n_generated < 0 || m->kv_blocks < 0)
	{
		*why = "PROGRESS has a field out of range";
		return false;
	}
	return true;
}

void
opus_proto_encode_experts(struct opus_proto_writer *w, int32_t n_layer,
						  int32_t n_expert, const uint64_t *counts)
{
	size_t		n = (size_t) n_layer * (size_t) n_expert;
	size_t		i;

	opus_proto_w_u32(w, (uint32_t) n_layer);
	opus_proto_w_u32(w, (uint32_t) n_expert);
	for (i = 0; i < n; i++)
		opus_proto_w_u64(w, counts[i] > (uint64_t) INT64_MAX ?
						 (uint64_t) INT64_MAX : counts[i]);
}

bool
opus_proto_parse_experts(const uint8_t *buf, size_t len,
						 struct opus_proto_experts *m, const char **why)
{
	struct opus_proto_reader r;
	uint32_t	n_layer,
				n_expert;
	size_t		n,
				i;

	opus_proto_reader_init(&r, buf, len);
	memset(m, 0, sizeof(*m));
	n_layer = opus_proto_r_u32(&r);
	n_expert = opus_proto_r_u32(&r);
	if (r.bad)
	{
		*why = "EXPERTS is truncated";
		return false;
	}
	if (n_layer < 1 || n_layer > OPUS_PROTO_MAX_EXPERT_LAYERS ||
		n_expert < 1 || n_expert > OPUS_PROTO_MAX_EXPERTS ||
		(size_t) n_layer * n_expert > OPUS_PROTO_MAX_EXPERT_COUNTS)
	{
		*why = "EXPERTS has a shape out of range";
		return false;
	}
	n = (size_t) n_layer * n_expert;
	if (len != OPUS_PROTO_EXPERTS_SIZE(n))
	{
		*why = "EXPERTS has the wrong size";
		return false;
	}
	for (i = 0; i < n; i++)
	{
		if (opus_proto_get_u64(buf + 8 + 8 * i) > (uint64_t) INT64_MAX)
		{
			*why = "EXPERTS has a count out of range";
			return false;
		}
	}
	m->n_layer = (int32_t) n_layer;
	m->n_expert = (int32_t) n_expert;
	m->counts = buf + 8;
	return true;
}

int64_t
opus_proto_expert_count(const struct opus_proto_experts *m, size_t i)
{
	return (int64_t) opus_proto_get_u64(m->counts + 8 * i);
}

bool
opus_proto_parse_text(const uint8_t *buf, size_t len, const char **why)
{
	if (len == 0 || memchr(buf, 0, len) != NULL)
	{
		*why = "TEXT is empty or contains a NUL byte";
		return false;
	}
	return true;
}

bool
opus_proto_parse_tokens(const uint8_t *buf, size_t len, const char **why)
{
	size_t		i;

	if (len == 0 || len % 4 != 0)
	{
		*why = "TOKENS has a bad length";
		return false;
	}
	for (i = 0; i < len; i += 4)
	{
		if ((int32_t) opus_proto_get_u32(buf + i) < 0)
		{
			*why = "TOKENS has a negative token id";
			return false;
		}
	}
	return true;
}

bool
opus_proto_parse_embedding(const uint8_t *buf, size_t len, const char **why)
{
	size_t		i;

	if (len == 0 || len % 4 != 0)
	{
		*why = "EMBEDDING has a bad length";
		return false;
	}
	for (i = 0; i < len; i += 4)
	{
		uint32_t	u = opus_proto_get_u32(buf + i);
		float		f;

		memcpy(&f, &u, sizeof(f));
		if (!isfinite(f))
		{
			*why = "EMBEDDING has a value that is not finite";
			return false;
		}
	}
	return true;
}

bool
opus_proto_parse_empty(size_t len, const char **why)
{
	if (len != 0)
	{
		*why = "frame should have an empty payload";
		return false;
	}
	return true;
}
