/*
 * relay.c - the supervisor's relay between the request slots and the
 * engines (part of the supervisor worker: supervisor_int.h).
 *
 * SUBMITTED slots go to the serving engine of the model they name (or its
 * fallback while that model misses its time-to-first-token objective, if
 * the request allows it) as SUBMIT frames; CANCELLED slots become CANCEL
 * frames.  Every frame an engine sends is validated here; a malformed one
 * gets that engine killed and restarted (engine_lost).  Results go into
 * the slot buffers, DONE finishes the slot; an async request's finished
 * result moves on to the result store (resultstore.c), freeing its slot.
 *
 * Slot ownership follows the rules at the top of shmem.c.  Local state:
 * sent_id[i] is the id of the request an engine holds for slot i whose
 * results still matter (0 = none) and sent_proc[i] that engine; frames for
 * any other id, or from another engine, are dropped.  cancel_sent[i] /
 * overflowed[i] track a CANCEL already sent and a result that did not fit
 * the slot buffer (the slot then waits for the engine's DONE before
 * reporting the error).  Warm-up requests use ids whose low 32 bits are 0
 * (no slot has that index); their frames go to swap.c.
 *
 * I/O with the engines is non-blocking and framed (src/protocol.h):
 * partial reads and writes are buffered here.
 */
#include "postgres.h"

#include <errno.h>
#include <sys/socket.h>

#include "port/atomics.h"
#include "utils/memutils.h"

#include "opus_experts.h"
#include "opus_stats.h"
#include "opus_tenants.h"
#include "supervisor_int.h"

static bool candidate_vocab_conflict(int m, const EngineProc *cand,
									 const struct opus_proto_ready *r,
									 char *msg, char *detail);

static uint64 *sent_id;
static EngineProc **sent_proc;
static bool *cancel_sent;
static bool *overflowed;
static TimestampTz *sent_at;	/* when slot i went to its engine */
static bool *first_token;		/* slot i's request has produced a token */

/* At start-up: the per-slot state above, for OpusShared->n_slots slots. */
void
relay_init(void)
{
	sent_id = MemoryContextAllocZero(TopMemoryContext, sizeof(uint64) * OpusShared->n_slots);
	sent_proc = MemoryContextAllocZero(TopMemoryContext, sizeof(EngineProc *) * OpusShared->n_slots);
	cancel_sent = MemoryContextAllocZero(TopMemoryContext, sizeof(bool) * OpusShared->n_slots);
	overflowed = MemoryContextAllocZero(TopMemoryContext, sizeof(bool) * OpusShared->n_slots);
	sent_at = MemoryContextAllocZero(TopMemoryContext, sizeof(TimestampTz) * OpusShared->n_slots);
	first_token = MemoryContextAllocZero(TopMemoryContext, sizeof(bool) * OpusShared->n_slots);
}

/*
 * End a slot the supervisor owns (SUBMITTED, RUNNING or CANCELLED) whose
 * result, usage and error fields are written: the backend waiting on it
 * finds it DONE or ERROR.  The result of an async request moves to the
 * result store (resultstore.c) and the slot is freed at once, so unread
 * results do not hold slots; without room it stays in the slot.  A
 * CANCELLED slot is freed (and what was stored for it dropped).
 */
static void
publish_slot(OpusSlot *slot, bool error)
{
	uint64		id = slot->request_id;
	bool		stored = false;
	bool		cancelled = false;
	OpusSlotState st;

	slot->finish_time = GetCurrentTimestamp();
	pg_write_barrier();
	SpinLockAcquire(&slot->mutex);
	st = slot->state;
	SpinLockRelease(&slot->mutex);
	if (slot->async && st != OPUS_SLOT_CANCELLED)
		stored = OpusResultStorePut(slot, error);
	SpinLockAcquire(&slot->mutex);
	if (slot->state == OPUS_SLOT_SUBMITTED || slot->state == OPUS_SLOT_RUNNING)
		slot->state = stored ? OPUS_SLOT_FREE : error ? OPUS_SLOT_ERROR : OPUS_SLOT_DONE;
	else if (slot->state == OPUS_SLOT_CANCELLED)
	{
		slot->state = OPUS_SLOT_FREE;
		cancelled = true;
	}
	SpinLockRelease(&slot->mutex);
	if (stored && cancelled)
		(void) OpusResultStoreDrop(id);
	ConditionVariableBroadcast(&slot->cv);
}

/*
 * Finish a slot the supervisor owns (SUBMITTED, RUNNING or CANCELLED) with
 * an error.  A CANCELLED slot is simply freed.
 */
static void
fail_slot(int i, int code, const char *message, const char *detail)
{
	OpusSlot   *slot = OpusGetSlot(i);

	OpusStatsRequestFailed(i, code, message);
	slot->err_code = code;
	strlcpy(slot->err_message, message, sizeof(slot->err_message));
	strlcpy(slot->err_detail, detail ? detail : "", sizeof(slot->err_detail));
	slot->finish = OPUS_PROTO_FINISH_ERROR;
	slot->result_len = 0;
	publish_slot(slot, true);
	sent_id[i] = 0;
	sent_proc[i] = NULL;
	cancel_sent[i] = false;
	overflowed[i] = false;
}

/* Fail every request engine p holds (it died or is being replaced). */
void
fail_in_flight(EngineProc *p, int code, const char *message, const char *detail)
{
	int			i;

	for (i = 0; i < OpusShared->n_slots; i++)
	{
		if (sent_id[i] != 0 && sent_proc[i] == p)
			fail_slot(i, code, message, detail);
	}
}

int
n_in_flight(const EngineProc *p)
{
	int			i,
				n = 0;

	for (i = 0; i < OpusShared->n_slots; i++)
		n += sent_id[i] != 0 && sent_proc[i] == p;
	return n;
}

/*
 * At supervisor start: nothing is in flight (any earlier engine died with
 * the earlier supervisor).  Fail RUNNING slots, free CANCELLED ones.
 */
void
recover_slots(void)
{
	int			i;

	for (i = 0; i < OpusShared->n_slots; i++)
	{
		OpusSlot   *slot = OpusGetSlot(i);
		OpusSlotState st;

		SpinLockAcquire(&slot->mutex);
		st = slot->state;
		SpinLockRelease(&slot->mutex);
		if (st == OPUS_SLOT_RUNNING || st == OPUS_SLOT_CANCELLED)
			fail_slot(i, OPUS_PG_ERR_ENGINE_DIED, "opus engine terminated",
					  "The opus_pg supervisor restarted while the request was running.");
	}
}

static void
out_reserve(EngineProc *p, size_t extra)
{
	size_t		need;

	/* compact first */
	if (p->out_off > 0)
	{
		memmove(p->out, p->out + p->out_off, p->out_len - p->out_off);
		p->out_len -= p->out_off;
		p->out_off = 0;
	}
	need = p->out_len + extra;
	if (need > p->out_cap)
	{
		size_t		cap = Max(p->out_cap * 2, need);

		p->out = p->out ? repalloc_huge(p->out, cap) :
			MemoryContextAllocHuge(TopMemoryContext, cap);
		p->out_cap = cap;
	}
}

void
send_frame(EngineProc *p, uint16 type, uint64 id, const void *payload, size_t len)
{
	out_reserve(p, OPUS_PROTO_HEADER_SIZE + len);
	opus_proto_encode_header((uint8_t *) p->out + p->out_len, (uint32_t) len, type, id);
	if (len > 0)
		memcpy(p->out + p->out_len + OPUS_PROTO_HEADER_SIZE, payload, len);
	p->out_len += OPUS_PROTO_HEADER_SIZE + len;
}

/* Write what the socket takes now.  False on a write error (engine gone). */
bool
flush_output(EngineProc *p)
{
	while (p->sock != PGINVALID_SOCKET && p->out_off < p->out_len)
	{
		ssize_t		n = send(p->sock, p->out + p->out_off,
							 p->out_len - p->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0)
		{
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return true;
			return false;
		}
		p->out_off += (size_t) n;
	}
	if (p->out_off == p->out_len)
		p->out_off = p->out_len = 0;
	return true;
}

/* The slot a request id names, if it is the request engine p holds. */
static int
slot_for_id(EngineProc *p, uint64 id)
{
	int			i = OpusSlotIndexFromId(id);

	if (i < 0 || sent_id[i] != id || sent_proc[i] != p)
		return -1;
	return i;
}

static void
append_result(EngineProc *p, int i, uint64 id, const char *data, size_t len)
{
	OpusSlot   *slot = OpusGetSlot(i);

	if (overflowed[i])
		return;
	if ((Size) slot->result_len + len > OpusShared->slot_buf_size)
	{
		overflowed[i] = true;
		if (!cancel_sent[i])
		{
			send_frame(p, OPUS_MSG_CANCEL, id, NULL, 0);
			cancel_sent[i] = true;
		}
		return;
	}
	memcpy(OpusSlotBuf(slot) + slot->result_len, data, len);
	pg_write_barrier();			/* the bytes before the length (stream.c) */
	slot->result_len += (uint32) len;
	if (slot->stream)
		ConditionVariableBroadcast(&slot->cv);
}

static void
finish_slot(EngineProc *p, int i, const struct opus_proto_done *d)
{
	OpusSlot   *slot = OpusGetSlot(i);
	bool		error = d->finish == OPUS_PROTO_FINISH_ERROR || overflowed[i];
	ModelCtl   *mc = &models[p->model];

	slot->finish = d->finish;
	slot->n_prompt = d->n_prompt;
	slot->n_completion = d->n_completion;
	slot->n_cached = d->n_cached;
	slot->queue_ms = d->queue_ms;
	slot->ttft_ms = d->ttft_ms;
	slot->total_ms = d->total_ms;
	if (overflowed[i])
	{
		slot->err_code = OPUS_PG_ERR_RESULT_TOO_LARGE;
		strlcpy(slot->err_message, "opus result is too large", sizeof(slot->err_message));
		snprintf(slot->err_detail, sizeof(slot->err_detail),
				 "The result did not fit in opus.request_buffer_size (%zu bytes).",
				 (size_t) OpusShared->slot_buf_size);
	}
	else if (d->finish == OPUS_PROTO_FINISH_ERROR)
	{
		slot->err_code = (int) d->code;
		strlcpy(slot->err_message, d->message[0] ? d->message : "opus engine error",
				sizeof(slot->err_message));
		slot->err_detail[0] = '\0';
	}
	else if (d->finish == OPUS_PROTO_FINISH_CANCELLED)
	{
		/* We never cancel a request whose backend still waits, but be safe. */
		error = true;
		slot->err_code = OPUS_PROTO_ERR_CANCELLED;
		strlcpy(slot->err_message, "opus request was cancelled", sizeof(slot->err_message));
		slot->err_detail[0] = '\0';
	}
	else
		slot->err_code = 0;
	/* the new version's record while it is in probation */
	if (PROC_IS_SERVING(p) && mc->prev_path[0] != '\0' && !overflowed[i] &&
		d->finish != OPUS_PROTO_FINISH_CANCELLED)
	{
		mc->probation_done++;
		if (d->finish == OPUS_PROTO_FINISH_ERROR &&
			d->code != OPUS_PROTO_ERR_INVALID_ARG && d->code != OPUS_PROTO_ERR_CONTEXT &&
			d->code != OPUS_PROTO_ERR_CAPACITY && d->code != OPUS_PROTO_ERR_TOKENIZE &&
			d->code != OPUS_PROTO_ERR_TEMPLATE)
			mc->probation_errors++;
	}
	/* the time-to-first-token signal of the model (fallback under overload) */
	if (PROC_IS_SERVING(p) && d->finish != OPUS_PROTO_FINISH_ERROR &&
		d->finish != OPUS_PROTO_FINISH_CANCELLED && d->ttft_ms >= 0)
	{
		mc->ttft_ewma = mc->last_done == 0 ? d->ttft_ms : 0.7 * mc->ttft_ewma + 0.3 * d->ttft_ms;
		mc->last_done = GetCurrentTimestamp();
	}
	OpusStatsRequestDone(i, d, error);
	OpusTenantCharge(slot->userid, (int64) d->n_prompt + d->n_completion);
	publish_slot(slot, error);
	sent_id[i] = 0;
	sent_proc[i] = NULL;
	cancel_sent[i] = false;
	overflowed[i] = false;
}

/* A warm-up request's id: low 32 bits 0, high 1..N_CANARIES. */
static bool
is_canary_id(uint64 id)
{
	return (uint32) id == 0 && (id >> 32) >= 1 && (id >> 32) <= OPUS_MAX_CANARIES;
}

/*
 * Handle one complete frame from engine p.  Returns NULL if fine, or why
 * the frame is a protocol violation.
 */
static const char *
handle_engine_frame(EngineProc *p, const struct opus_proto_header *h, const uint8_t *payload)
{
	const char *why = NULL;
	int			m = p->model;
	OpusEngineStatus *e = OpusModel(m);
	bool		serving = PROC_IS_SERVING(p);
	int			i;

	switch (h->type)
	{
		case OPUS_MSG_READY:
			{
				struct opus_proto_ready r;

				if (p->ready)
					return "READY received twice";
				if (!opus_proto_parse_ready(payload, h->length, &r, &why))
				{
					static char mismatch[OPUS_PROTO_MSG_LEN];

					if (strcmp(why, OPUS_PROTO_VERSION_MISMATCH) != 0)
						return why;
					opus_proto_version_mismatch(mismatch, sizeof(mismatch), "opus_engine",
												r.version, "opus_pg.so");
					return mismatch;
				}
				p->ready = true;
				p->ready_at = GetCurrentTimestamp();
				p->info = r;
				if (!serving)
				{
					char		msg[OPUS_PROTO_MSG_LEN];
					char		detail[OPUS_PROTO_MSG_LEN];

					/* a model and its fallback share a vocabulary */
					if (candidate_vocab_conflict(m, p, &r, msg, detail))
					{
						swap_failed(m, msg, detail);
						return NULL;
					}
					/* a swap's candidate: warm it up before it serves */
					if (models[m].swap == OPUS_SWAP_LOADING)
						models[m].swap = OPUS_SWAP_WARMING;
					publish_swap(m);
					send_canaries(p);
					return NULL;
				}
				publish_ready(m, p);
				ereport(LOG,
						(errmsg("opus_pg: engine (PID %d) ready: %s (%s, %s, context %d)%s%s%s",
								(int) p->pid, r.name, r.arch, r.tensor_type, r.n_ctx,
								m == 0 ? "" : " for model \"", m == 0 ? "" : model_label(m),
								m == 0 ? "" : "\"")));
				return NULL;
			}
		case OPUS_MSG_FATAL:
			{
				struct opus_proto_fatal f;

				if (!opus_proto_parse_fatal(payload, h->length, &f, &why))
					return why;
				p->got_fatal = true;
				p->fatal_code = (int) f.code;
				strlcpy(p->fatal_msg, f.message, sizeof(p->fatal_msg));
				return NULL;
			}
		case OPUS_MSG_STATS:
			{
				struct opus_proto_stats s;

				if (!p->ready)
					return "STATS before READY";
				if (!opus_proto_parse_stats(payload, h->length, &s, &why))
					return why;
				if (!serving)
					return NULL;
				SpinLockAcquire(&e->mutex);
				e->stats = s;
				SpinLockRelease(&e->mutex);
				OpusStatsEngineStats(m, &s);
				return NULL;
			}
		case OPUS_MSG_EXPERTS:
			{
				struct opus_proto_experts x;

				if (!p->ready)
					return "EXPERTS before READY";
				if (h->id != 0)
					return "EXPERTS with a request id";
				if (!opus_proto_parse_experts(payload, h->length, &x, &why))
					return why;
				if (serving && m == 0)
					OpusExpertsEngineReport(&x);
				return NULL;
			}
		case OPUS_MSG_PROGRESS:
			{
				struct opus_proto_progress pr;

				if (!p->ready)
					return "PROGRESS before READY";
				if (!opus_proto_parse_progress(payload, h->length, &pr, &why))
					return why;
				if (p->warming && is_canary_id(h->id))
					return NULL;
				if (OpusSlotIndexFromId(h->id) < 0)
					return "PROGRESS for an unknown request id";
				i = slot_for_id(p, h->id);
				if (i >= 0)
				{
					OpusStatsRequestProgress(i, &pr);
					if (pr.phase == OPUS_PROTO_PHASE_DECODE)
						first_token[i] = true;
				}
				return NULL;
			}
		case OPUS_MSG_PONG:
			return opus_proto_parse_empty(h->length, &why) ? NULL : why;
		case OPUS_MSG_TEXT:
		case OPUS_MSG_TOKENS:
		case OPUS_MSG_EMBEDDING:
			if (!p->ready)
				return "result frame before READY";
			if (h->type == OPUS_MSG_TEXT ? !opus_proto_parse_text(payload, h->length, &why) :
				h->type == OPUS_MSG_TOKENS ? !opus_proto_parse_tokens(payload, h->length, &why) :
				!opus_proto_parse_embedding(payload, h->length, &why))
				return why;
			if (p->warming && is_canary_id(h->id))
			{
				if (h->type == OPUS_MSG_TEXT)
					canary_text(p, h->id, payload, h->length);
				return NULL;
			}
			if (OpusSlotIndexFromId(h->id) < 0)
				return "result frame for an unknown request id";
			i = slot_for_id(p, h->id);
			if (i < 0)
				return NULL;	/* a request we no longer care about */
			if ((OpusGetSlot(i)->kind == OPUS_KIND_TOKENIZE) != (h->type == OPUS_MSG_TOKENS) ||
				(OpusGetSlot(i)->kind == OPUS_KIND_EMBED) != (h->type == OPUS_MSG_EMBEDDING))
				return "result frame of the wrong type for the request";
			first_token[i] = true;
			append_result(p, i, h->id, (const char *) payload, h->length);
			return NULL;
		case OPUS_MSG_DONE:
			{
				struct opus_proto_done d;

				if (!p->ready)
					return "DONE before READY";
				if (!opus_proto_parse_done(payload, h->length, &d, &why))
					return why;
				if (p->warming && is_canary_id(h->id))
				{
					canary_done(p, h->id, &d);
					return NULL;
				}
				if (OpusSlotIndexFromId(h->id) < 0)
					return "DONE for an unknown request id";
				i = slot_for_id(p, h->id);
				if (i >= 0)
					finish_slot(p, i, &d);
				return NULL;
			}
		default:
			return "frame type the engine must not send";
	}
}

/*
 * Read what engine p sent and handle every complete frame.  Returns false
 * if the engine is gone (EOF / error) or broke the protocol; it has then
 * been dealt with.
 */
bool
read_engine(EngineProc *p)
{
	for (;;)
	{
		ssize_t		n;
		size_t		off = 0;

		if (p->in_cap - p->in_len < 65536)
		{
			size_t		cap = Max(p->in_cap * 2, p->in_len + 65536);

			p->in = p->in ? repalloc_huge(p->in, cap) :
				MemoryContextAllocHuge(TopMemoryContext, cap);
			p->in_cap = cap;
		}
		n = recv(p->sock, p->in + p->in_len, p->in_cap - p->in_len, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return true;
		if (n <= 0)
		{
			char		reason[OPUS_PROTO_MSG_LEN];

			if (n < 0)
				snprintf(reason, sizeof(reason), "Reading from the engine failed: %s.", strerror(errno));
			else
				reason[0] = '\0';
			engine_lost(p, false, reason[0] ? reason : NULL);
			return false;
		}
		p->in_len += (size_t) n;
		p->heard_at = GetCurrentTimestamp();
		p->ping_at = 0;
		set_unresponsive(p, false);

		for (;;)
		{
			struct opus_proto_header h;
			const char *why = NULL;
			enum opus_proto_result r;

			r = opus_proto_parse_header((const uint8_t *) p->in + off, p->in_len - off, &h, &why);
			if (r == OPUS_PROTO_NEED_MORE)
				break;
			if (r == OPUS_PROTO_OK)
			{
				if (p->in_len - off < OPUS_PROTO_HEADER_SIZE + (size_t) h.length)
					break;
				why = handle_engine_frame(p, &h, (const uint8_t *) p->in + off + OPUS_PROTO_HEADER_SIZE);
			}
			if (why != NULL)
			{
				char		reason[OPUS_PROTO_MSG_LEN];

				ereport(WARNING,
						(errmsg("opus_pg: engine (PID %d) broke the protocol: %s; killing it",
								(int) p->pid, why)));
				snprintf(reason, sizeof(reason), "The engine broke the protocol (%s).", why);
				engine_lost(p, true, reason);
				return false;
			}
			/* the frame may have stopped this engine (a failed warm-up) */
			if (p->sock == PGINVALID_SOCKET)
				return false;
			off += OPUS_PROTO_HEADER_SIZE + h.length;
		}
		if (off > 0)
		{
			memmove(p->in, p->in + off, p->in_len - off);
			p->in_len -= off;
		}
	}
}

/*
 * Is model m missing its time-to-first-token objective now?  The signal is
 * the larger of the longest wait of a request it holds that has no token
 * yet, and the mean of recent requests' times to first token (completions
 * of the last 2 s).  Published in the entry, logged when it changes.
 */
static void
update_overload(int m, TimestampTz now)
{
	ModelCtl   *mc = &models[m];
	EngineProc *p = &mc->procs[mc->cur];
	OpusEngineStatus *e = OpusModel(m);
	double		oldest = 0;
	double		signal;
	bool		over;
	int			i;

	mc->awaiting_first = false;
	if (mc->fallback < 0 || mc->decl.max_ttft_ms <= 0)
		return;
	for (i = 0; i < OpusShared->n_slots; i++)
		if (sent_id[i] != 0 && sent_proc[i] == p && !first_token[i])
		{
			oldest = Max(oldest, (double) (now - sent_at[i]) / 1000.0);
			mc->awaiting_first = true;
		}
	signal = oldest;
	if (mc->last_done != 0 && !TimestampDifferenceExceeds(mc->last_done, now, 2000))
		signal = Max(signal, mc->ttft_ewma);
	over = signal > mc->decl.max_ttft_ms;
	SpinLockAcquire(&e->mutex);
	e->overloaded = over;
	e->recent_ttft_ms = signal;
	SpinLockRelease(&e->mutex);
	if (over != mc->overloaded)
		ereport(LOG,
				(errmsg(over ? "opus_pg: model \"%s\" misses its time-to-first-token objective (%.0f ms > %d ms); requests that allow it go to \"%s\"" :
						"opus_pg: model \"%s\" meets its time-to-first-token objective again (%.0f ms <= %d ms); requests stay with it (fallback \"%s\")",
						model_label(m), signal, mc->decl.max_ttft_ms,
						mc->fallback == 0 ? "default" : models[mc->fallback].decl.name)));
	mc->overloaded = over;
}

/*
 * The vocabulary rule (docs/models.md): a model and its fallback share a
 * vocabulary.  A request that falls back keeps its max_tokens and its
 * stop conditions and reports usage, all counted in tokens: with another
 * vocabulary the same request would mean another amount of text, and
 * usage would not compare.  The identity is READY's token count and
 * vocabulary hash, known once a version of each model has been ready.
 */
static const char *
entry_name(int m)
{
	return m == 0 ? "default" : models[m].decl.name;
}

static bool
vocab_same(int a, int b)
{
	return models[a].vocab_known && models[b].vocab_known &&
		models[a].n_vocab == models[b].n_vocab &&
		models[a].vocab_hash == models[b].vocab_hash;
}

/*
 * Note (log, last_error) when model m's fallback is found to have another
 * vocabulary, and when that is no longer so.  While it is, route_request
 * keeps m's requests on m.
 */
static void
check_fallback_vocab(int m)
{
	ModelCtl   *mc = &models[m];
	OpusEngineStatus *e = OpusModel(m);
	int			f = mc->fallback;
	bool		bad;
	char		msg[OPUS_PROTO_MSG_LEN];
	char		detail[OPUS_PROTO_MSG_LEN];

	bad = f >= 0 && models[m].vocab_known && models[f].vocab_known && !vocab_same(m, f);
	if (bad == mc->fallback_vocab_bad)
	{
		/* a restart of m cleared last_error: say it again (no log) */
		if (bad && mc->note[0] == '\0')
		{
			SpinLockAcquire(&e->mutex);
			if (e->last_error[0] == '\0')
				snprintf(e->last_error, sizeof(e->last_error),
						 "fallback \"%s\" is not used: its vocabulary differs from this model's",
						 entry_name(f));
			SpinLockRelease(&e->mutex);
		}
		return;
	}
	mc->fallback_vocab_bad = bad;
	snprintf(msg, sizeof(msg), "fallback \"%s\" is not used: its vocabulary differs from this model's",
			 f >= 0 ? entry_name(f) : "");
	if (bad)
	{
		snprintf(detail, sizeof(detail),
				 "\"%s\" has %d tokens (vocabulary hash %016llx), \"%s\" has %d (%016llx); a model and its fallback must share a vocabulary.",
				 entry_name(m), (int) models[m].n_vocab, (unsigned long long) models[m].vocab_hash,
				 entry_name(f), (int) models[f].n_vocab, (unsigned long long) models[f].vocab_hash);
		SpinLockAcquire(&e->mutex);
		strlcpy(e->last_error, msg, sizeof(e->last_error));
		strlcpy(e->last_error_detail, detail, sizeof(e->last_error_detail));
		SpinLockRelease(&e->mutex);
		ereport(LOG,
				(errmsg("opus_pg: model \"%s\": %s", entry_name(m), msg),
				 errdetail("%s", detail)));
	}
	else
	{
		/* resolved, or no fallback any more: forget the note */
		SpinLockAcquire(&e->mutex);
		if (strncmp(e->last_error, "fallback \"", 10) == 0 &&
			strstr(e->last_error, "\" is not used: its vocabulary differs") != NULL)
			e->last_error[0] = e->last_error_detail[0] = '\0';
		SpinLockRelease(&e->mutex);
		if (f >= 0)
			ereport(LOG,
					(errmsg("opus_pg: model \"%s\": its fallback \"%s\" shares its vocabulary again",
							entry_name(m), entry_name(f))));
	}
}

/*
 * Would a candidate of model m whose READY is r break the vocabulary rule
 * with a model it is the fallback of, or with its own fallback?  Then msg
 * and detail say so.
 */
static bool
candidate_vocab_conflict(int m, const EngineProc *cand, const struct opus_proto_ready *r,
						 char *msg, char *detail)
{
	int			k;

	for (k = 0; k < OPUS_MAX_MODELS; k++)
	{
		bool		uses_m,
					used_by_m;

		if (k == m || !models[k].declared || models[k].removing || !models[k].vocab_known)
			continue;
		uses_m = models[k].fallback == m;
		used_by_m = models[m].fallback == k;
		if (!uses_m && !used_by_m)
			continue;
		if (models[k].n_vocab == r->n_vocab && models[k].vocab_hash == r->vocab_hash)
			continue;
		snprintf(msg, OPUS_PROTO_MSG_LEN, "swap to \"%s\" refused: its vocabulary differs from model \"%s\"'s",
				 cand->cfg.path, entry_name(k));
		snprintf(detail, OPUS_PROTO_MSG_LEN,
				 "\"%s\" is the fallback of \"%s\", and a model and its fallback must share a vocabulary: the new file has %d tokens (vocabulary hash %016llx), \"%s\" %d (%016llx).",
				 uses_m ? entry_name(m) : entry_name(k), uses_m ? entry_name(k) : entry_name(m),
				 (int) r->n_vocab, (unsigned long long) r->vocab_hash,
				 entry_name(k), (int) models[k].n_vocab, (unsigned long long) models[k].vocab_hash);
		return true;
	}
	return false;
}

/*
 * The model a SUBMITTED slot for model m goes to: m, or m's fallback
 * while m is overloaded, the request allows it (fallback => true, or NULL
 * and a batch-class session), it is a generation, and the fallback is
 * ready and shares m's vocabulary.
 */
static int
route_request(OpusSlot *slot, int m)
{
	ModelCtl   *mc = &models[m];
	int			f = mc->fallback;
	bool		allowed;
	OpusEngineState fstate;

	if (f < 0 || !mc->overloaded || !models[f].declared || models[f].removing)
		return m;
	if (slot->kind != OPUS_KIND_GENERATE && slot->kind != OPUS_KIND_CHAT)
		return m;
	allowed = slot->fallback == 1 ||
		(slot->fallback == -1 && slot->priority >= OPUS_PRIORITY_BATCH);
	if (!allowed)
		return m;
	SpinLockAcquire(&OpusModel(f)->mutex);
	fstate = OpusModel(f)->state;
	SpinLockRelease(&OpusModel(f)->mutex);
	if (fstate != OPUS_ENGINE_READY || !models[f].procs[models[f].cur].ready)
		return m;
	if (!vocab_same(m, f))
		return m;
	return f;
}

void
process_slots(void)
{
	int			i;
	TimestampTz now = GetCurrentTimestamp();

	for (i = 0; i < OPUS_MAX_MODELS; i++)
		if (models[i].declared)
		{
			check_fallback_vocab(i);
			update_overload(i, now);
		}
	for (i = 0; i < OpusShared->n_slots; i++)
	{
		OpusSlot   *slot = OpusGetSlot(i);
		OpusSlotState st;
		uint64		id;

		SpinLockAcquire(&slot->mutex);
		st = slot->state;
		id = slot->request_id;
		SpinLockRelease(&slot->mutex);

		if (st == OPUS_SLOT_SUBMITTED)
		{
			int			m = slot->model;
			ModelCtl   *mc;
			EngineProc *p;
			OpusEngineStatus *e;
			OpusEngineState estate;

			if (m < 0 || m >= OPUS_MAX_MODELS || !models[m].declared || models[m].removing ||
				(m > 0 && slot->model_epoch != models[m].epoch))
			{
				fail_slot(i, OPUS_PG_ERR_MODEL_UNKNOWN, "opus model was removed",
						  "The model the request named was removed from opus.models before the request was sent.");
				continue;
			}
			m = route_request(slot, m);
			mc = &models[m];
			p = &mc->procs[mc->cur];
			e = OpusModel(m);
			SpinLockAcquire(&e->mutex);
			estate = e->state;
			SpinLockRelease(&e->mutex);
			if (estate == OPUS_ENGINE_READY && p->ready && !mc->reload_pending &&
				mc->swap != OPUS_SWAP_DRAIN_FIRST)
			{
				pg_read_barrier();
				slot->result_len = 0;
				slot->served_model = (uint8) m;
				SpinLockAcquire(&e->mutex);
				slot->served_version = e->version;
				if (m != slot->model)
					e->fallbacks++;
				SpinLockRelease(&e->mutex);
				send_frame(p, OPUS_MSG_SUBMIT, id, OpusSlotBuf(slot), slot->payload_len);
				OpusStatsRequestSent(i);
				sent_id[i] = id;
				sent_proc[i] = p;
				sent_at[i] = GetCurrentTimestamp();
				first_token[i] = false;
				mc->awaiting_first = true;	/* watch its objective */
				cancel_sent[i] = false;
				overflowed[i] = false;
				SpinLockAcquire(&slot->mutex);
				if (slot->state == OPUS_SLOT_SUBMITTED)
					slot->state = OPUS_SLOT_RUNNING;
				SpinLockRelease(&slot->mutex);
				/* If it was cancelled meanwhile, the next pass sends CANCEL. */
			}
			else if (estate == OPUS_ENGINE_FAILED)
			{
				int			fail_code;
				char		fail_msg[OPUS_PROTO_MSG_LEN];
				char		fail_detail[OPUS_PROTO_MSG_LEN];

				SpinLockAcquire(&e->mutex);
				fail_code = e->last_err_code;
				strlcpy(fail_msg, e->last_error, sizeof(fail_msg));
				strlcpy(fail_detail, e->last_error_detail, sizeof(fail_detail));
				SpinLockRelease(&e->mutex);
				fail_slot(i, fail_code ? fail_code : OPUS_PG_ERR_ENGINE_DOWN,
						  fail_msg[0] ? fail_msg : "opus engine is not running",
						  fail_detail);
			}
		}
		else if (st == OPUS_SLOT_CANCELLED)
		{
			/*
			 * Tell the engine (it drops the request at its next step), and
			 * free the slot now: whatever the engine still sends for this
			 * id is ignored, because sent_id no longer names it.
			 */
			if (sent_id[i] == id && id != 0 && !cancel_sent[i] && sent_proc[i] != NULL &&
				sent_proc[i]->sock != PGINVALID_SOCKET)
				send_frame(sent_proc[i], OPUS_MSG_CANCEL, id, NULL, 0);
			OpusStatsRequestCancelled(i);
			sent_id[i] = 0;
			sent_proc[i] = NULL;
			cancel_sent[i] = false;
			overflowed[i] = false;
			SpinLockAcquire(&slot->mutex);
			if (slot->state == OPUS_SLOT_CANCELLED && slot->request_id == id)
				slot->state = OPUS_SLOT_FREE;
			SpinLockRelease(&slot->mutex);
		}
	}
}
