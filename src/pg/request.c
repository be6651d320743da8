/*
 * request.c - a backend's side of a request: claim a slot, copy the request
 * in, wake the supervisor, sleep on the slot's condition variable, copy the
 * result out, free the slot.
 *
 * Arguments are validated by the caller (input.c, args.c) before anything is
 * queued.  While the request is out, a PG_ENSURE_ERROR_CLEANUP callback
 * covers every way the wait can end early (statement_timeout,
 * pg_cancel_backend, pg_terminate_backend, opus.request_timeout, any
 * ERROR or FATAL): it marks the slot CANCELLED, so the supervisor tells the
 * engine to drop the request and frees the slot.  Slot ownership follows
 * the rules at the top of shmem.c.
 *
 * The steps (claim, submit, collect, abandon) are exported for async.c,
 * which submits requests nobody waits on and keeps several in flight.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "utils/timestamp.h"

#include "opus_pg.h"
#include "opus_stats.h"
#include "opus_tenants.h"
#include "storage/proc.h"

/* Where a claim starts looking, so backends spread over the slots. */
static int	next_claim_hint = -1;

/* The tenancy of the current user, resolved once per transaction for another role. */
static OpusTenantConf tenant_conf;
static LocalTransactionId tenant_conf_lxid = InvalidLocalTransactionId;

static const OpusTenantConf *
current_tenant(void)
{
	Oid			role = GetUserId();

	if (role != GetSessionUserId() && tenant_conf.role == role &&
		tenant_conf_lxid == MyProc->lxid && MyProc->lxid != InvalidLocalTransactionId)
		return &tenant_conf;
	OpusTenantResolve(role, &tenant_conf);
	tenant_conf_lxid = MyProc->lxid;
	return &tenant_conf;
}

/*
 * The current role's own limit on asynchronous requests
 * (opus.role_max_async_requests, 0 = none): async.c takes it into the
 * role's share of the async budget (OpusAsyncRoleCap).
 */
int
OpusRoleAsyncQuota(void)
{
	return current_tenant()->max_async_requests;
}

/*
 * The cleanup callback: give up on the request `arg` (its id).  Runs on
 * ERROR (from PG_CATCH) and at process exit.
 */
static void
abandon_request(int code, Datum arg)
{
	uint64		id = (uint64) DatumGetInt64(arg);
	int			i = OpusSlotIndexFromId(id);
	OpusSlot   *slot;
	bool		wake = false;

	if (i < 0)
		return;
	slot = OpusGetSlot(i);
	SpinLockAcquire(&slot->mutex);
	if (slot->request_id == id)
	{
		switch (slot->state)
		{
			case OPUS_SLOT_FILLING:
			case OPUS_SLOT_DONE:
			case OPUS_SLOT_ERROR:
				slot->state = OPUS_SLOT_FREE;
				break;
			case OPUS_SLOT_SUBMITTED:
			case OPUS_SLOT_RUNNING:
				slot->state = OPUS_SLOT_CANCELLED;
				wake = true;
				break;
			default:
				break;
		}
	}
	SpinLockRelease(&slot->mutex);
	if (wake)
		OpusWakeSupervisor();
}

/* Bytes the SUBMIT payload of req needs. */
static Size
payload_size(const OpusRequest *req)
{
	Size		n = OPUS_PROTO_SUBMIT_FIXED + OPUS_PROTO_TENANT_SIZE + 8;
	int			i;

	for (i = 0; i < req->n_stop; i++)
		n = add_size(n, 4 + (Size) req->stop[i].len);
	n = add_size(n, 4 + (req->grammar ? req->grammar_len : 0));
	switch (req->kind)
	{
		case OPUS_KIND_GENERATE:
		case OPUS_KIND_TOKENIZE:
			n = add_size(n, req->text_len);
			break;
		case OPUS_KIND_EMBED:
			n = add_size(n, add_size(req->prefix_len, req->text_len));
			break;
		case OPUS_KIND_CHAT:
			for (i = 0; i < req->n_messages; i++)
			{
				n = add_size(n, 5 + req->content_lens[i]);
				if (req->members && req->members[i])
					n = add_size(n, 5 + req->member_lens[i]);
			}
			if (req->tools)
				n = add_size(n, 5 + req->tools_len);
			break;
		case OPUS_KIND_DETOKENIZE:
			n = add_size(n, mul_size(4, req->n_tokens));
			break;
	}
	return n;
}

static Size
data_size(const OpusRequest *req)
{
	Size		n = 0;
	int			i;

	switch (req->kind)
	{
		case OPUS_KIND_GENERATE:
		case OPUS_KIND_TOKENIZE:
			n = req->text_len;
			break;
		case OPUS_KIND_EMBED:
			n = req->prefix_len + req->text_len;	/* the model's prefix first */
			break;
		case OPUS_KIND_CHAT:
			for (i = 0; i < req->n_messages; i++)
			{
				n += 5 + req->content_lens[i];
				if (req->members && req->members[i])
					n += 5 + req->member_lens[i];
			}
			if (req->tools)
				n += 5 + req->tools_len;
			break;
		case OPUS_KIND_DETOKENIZE:
			n = (Size) req->n_tokens * 4;
			break;
	}
	return n;
}

/* A chat request's items: the tools, the messages and their members. */
static uint32
chat_items(const OpusRequest *req)
{
	uint32		n = (uint32) req->n_messages + (req->tools ? 1 : 0);

	for (int i = 0; req->members && i < req->n_messages; i++)
		n += req->members[i] != NULL;
	return n;
}

/*
 * Encode req as a SUBMIT payload into buf (cap bytes); returns its length,
 * and the parameters as sent in *sent (when not NULL).  Also used by the
 * supervisor for a new model version's warm-up prompts.
 */
uint32
OpusEncodeRequest(const OpusRequest *req, char *buf, Size cap,
				  struct opus_proto_params *sent)
{
	struct opus_proto_params params;
	struct opus_proto_tenant tenant;
	struct opus_proto_writer w;
	const OpusTenantConf *tc = current_tenant();
	int			i;

	/*
	 * The session's scheduling class (opus.priority) at submission, never
	 * before the role's ceiling; the tenancy the server derived.
	 */
	params = req->params;
	params.priority = Max(opus_priority_value, tc->ceiling);
	params.allow_special_tokens = opus_allow_special_tokens ? 1 : 0;
	tenant.cache_scope = tc->scope;
	tenant.tenant = (uint32) tc->role;
	tenant.weight = (uint32) tc->weight;
	tenant.min_priority = tc->ceiling;
	opus_proto_writer_init(&w, buf, cap);
	opus_proto_encode_submit_head(&w, req->kind, &params, req->n_stop, req->stop);
	opus_proto_encode_submit_tenant(&w, &tenant);
	opus_proto_encode_submit_grammar(&w, req->grammar,
									 req->grammar ? (uint32) req->grammar_len : 0);
	opus_proto_encode_submit_data_head(&w, req->kind == OPUS_KIND_CHAT ? chat_items(req) :
									   req->kind == OPUS_KIND_DETOKENIZE ? (uint32) req->n_tokens :
									   req->kind == OPUS_KIND_EMBED ? req->embed_flags : 0,
									   (uint32) data_size(req));
	switch (req->kind)
	{
		case OPUS_KIND_GENERATE:
		case OPUS_KIND_TOKENIZE:
			opus_proto_w_bytes(&w, req->text, req->text_len);
			break;
		case OPUS_KIND_EMBED:
			if (req->prefix_len > 0)
				opus_proto_w_bytes(&w, req->prefix, req->prefix_len);
			opus_proto_w_bytes(&w, req->text, req->text_len);
			break;
		case OPUS_KIND_CHAT:
			if (req->tools)
				opus_proto_encode_chat_message(&w, OPUS_ROLE_TOOLS, req->tools,
											   (uint32) req->tools_len);
			for (i = 0; i < req->n_messages; i++)
			{
				opus_proto_encode_chat_message(&w, req->roles[i], req->contents[i],
											   (uint32) req->content_lens[i]);
				if (req->members && req->members[i])
					opus_proto_encode_chat_message(&w, OPUS_ROLE_MEMBERS, req->members[i],
												   (uint32) req->member_lens[i]);
			}
			break;
		case OPUS_KIND_DETOKENIZE:
			for (i = 0; i < req->n_tokens; i++)
				opus_proto_w_u32(&w, (uint32) req->tokens[i]);
			break;
	}
	if (w.overflow)
		elog(ERROR, "opus_pg: request encoding overflowed its buffer");
	if (sent)
		*sent = params;
	return (uint32) w.len;
}

/*
 * Claim a free slot (FREE -> FILLING) for a request of `kind`; `async`
 * marks a request that outlives the call (opus_submit, see async.c).
 * Returns the slot index and its new request id, or -1 when every slot is
 * busy and missing_ok; otherwise a full queue raises 53000.
 */
int
OpusClaimSlot(uint8 kind, bool async, uint64 *id_out, bool missing_ok)
{
	int			n = OpusShared->n_slots;
	int			k;

	if (next_claim_hint < 0)
		next_claim_hint = MyProcPid % n;
	for (k = 0; k < n; k++)
	{
		int			i = (next_claim_hint + k) % n;
		OpusSlot   *slot = OpusGetSlot(i);
		bool		got = false;

		if (slot->state != OPUS_SLOT_FREE)
			continue;			/* unlocked peek; rechecked below */
		SpinLockAcquire(&slot->mutex);
		if (slot->state == OPUS_SLOT_FREE)
		{
			slot->state = OPUS_SLOT_FILLING;
			slot->generation++;
			slot->request_id = ((uint64) slot->generation << 32) | (uint64) (i + 1);
			slot->backend_pid = MyProcPid;
			slot->userid = GetUserId();
			slot->dbid = MyDatabaseId;
			slot->async = async;
			slot->stream = false;
			slot->bulk = false;
			slot->finish_time = 0;
			*id_out = slot->request_id;
			got = true;
		}
		SpinLockRelease(&slot->mutex);
		if (got)
		{
			const OpusTenantConf *tc = current_tenant();
			const char *over;
			int			limit,
						held;

			next_claim_hint = (i + 1) % n;
			slot->kind = kind;
			over = OpusTenantCheckClaim(tc, async, &limit, &held);
			if (over == NULL)
				return i;
			/* over the role's quota: give the slot back (nobody else saw it) */
			SpinLockAcquire(&slot->mutex);
			slot->state = OPUS_SLOT_FREE;
			SpinLockRelease(&slot->mutex);
			if (missing_ok)
				return -1;
			OpusStatsRejected(kind);
			OpusTenantRaiseSlots(tc, over, limit, held);
		}
	}
	if (missing_ok)
		return -1;
	OpusStatsRejected(kind);
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
			 errmsg("opus request queue is full"),
			 errdetail("All %d request slots are in use.", n),
			 errhint("Retry later, or raise opus.max_requests (requires a restart).")));
	return -1;					/* keep compiler quiet */
}

/*
 * Sleep until the slot is DONE or ERROR.  Interrupts and timeouts raise an
 * ERROR (the caller's cleanup callback cancels the slot).
 */
static void
wait_for_slot(OpusSlot *slot, TimestampTz start)
{
	int			timeout_ms = opus_request_timeout_ms;

	ConditionVariablePrepareToSleep(&slot->cv);
	for (;;)
	{
		OpusSlotState st;

		SpinLockAcquire(&slot->mutex);
		st = slot->state;
		SpinLockRelease(&slot->mutex);
		if (st == OPUS_SLOT_DONE || st == OPUS_SLOT_ERROR)
			break;
		if (timeout_ms > 0)
		{
			long		elapsed = (long) ((GetCurrentTimestamp() - start) / 1000);

			if (elapsed >= timeout_ms)
				ereport(ERROR,
						(errcode(ERRCODE_QUERY_CANCELED),
						 errmsg("canceling opus request due to opus.request_timeout"),
						 errdetail("The request did not finish within %d ms.", timeout_ms)));
			(void) ConditionVariableTimedSleep(&slot->cv, timeout_ms - elapsed,
											   PG_WAIT_EXTENSION);
		}
		else
			ConditionVariableSleep(&slot->cv, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	pg_read_barrier();
}

/*
 * Raise 54000 unless req's SUBMIT payload fits a slot buffer, 53400 if it
 * breaks a quota of its role (tenants.c).  Call before claiming a slot.
 */
void
OpusCheckRequestSize(const OpusRequest *req)
{
	Size		need = payload_size(req);

	OpusTenantCheckRequest(current_tenant(), req->kind, req->params.max_tokens);
	OpusTenantCheckObjective(req->kind, Max(opus_priority_value, current_tenant()->ceiling));
	if (need > OpusShared->slot_buf_size)
	{
		OpusStatsRejected(req->kind);
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("opus request is too large"),
				 errdetail("The request needs %zu bytes, but opus.request_buffer_size is %zu bytes.",
						   (size_t) need, (size_t) OpusShared->slot_buf_size)));
	}
}

/*
 * Copy req into the slot the caller claimed (FILLING, size checked) and
 * hand it to the supervisor: FILLING -> SUBMITTED.
 */
void
OpusSubmitSlot(OpusSlot *slot, const OpusRequest *req, TimestampTz start)
{
	slot->payload_len = OpusEncodeRequest(req, OpusSlotBuf(slot), OpusShared->slot_buf_size,
										  &slot->params);
	slot->n_stop = (uint16) req->n_stop;
	slot->embed_flags = req->kind == OPUS_KIND_EMBED ? req->embed_flags : 0;
	slot->result_len = 0;
	slot->err_code = 0;
	slot->model = (uint8) req->model;
	slot->model_epoch = req->model_epoch;
	slot->fallback = (int8) req->fallback;
	slot->tools = req->kind == OPUS_KIND_CHAT && req->tools != NULL;
	slot->priority = Max(opus_priority_value, current_tenant()->ceiling);
	slot->served_model = (uint8) req->model;
	slot->served_version = 0;
	slot->submit_time = start;
	OpusStatsSlotFilled(OpusSlotIndexFromId(slot->request_id), slot->request_id, req);
	pg_write_barrier();
	SpinLockAcquire(&slot->mutex);
	slot->state = OPUS_SLOT_SUBMITTED;
	SpinLockRelease(&slot->mutex);
	OpusWakeSupervisor();
}

/* Give up on request `id` (see abandon_request); a no-op once it is gone. */
void
OpusAbandonRequest(uint64 id)
{
	abandon_request(0, Int64GetDatum((int64) id));
}

/*
 * Copy the outcome of a finished slot (DONE or ERROR, owned by the caller)
 * out.  Returns 0 and fills *res (data palloc'd in the current context), or
 * returns the error code and fills message and detail (OPUS_PROTO_MSG_LEN
 * bytes each).  Does not free the slot.
 */
int
OpusCollectResult(OpusSlot *slot, OpusResult *res, char *err_message, char *err_detail)
{
	int			err_code = slot->err_code;

	pg_read_barrier();
	memset(res, 0, sizeof(*res));
	res->request_id = slot->request_id;
	if (slot->state == OPUS_SLOT_ERROR || err_code != 0)
	{
		if (err_code == 0)
			err_code = OPUS_PROTO_ERR_INTERNAL;
		strlcpy(err_message, slot->err_message, OPUS_PROTO_MSG_LEN);
		strlcpy(err_detail, slot->err_detail, OPUS_PROTO_MSG_LEN);
		return err_code;
	}
	res->len = slot->result_len;
	res->data = palloc(res->len + 1);
	memcpy(res->data, OpusSlotBuf(slot), res->len);
	res->data[res->len] = '\0';
	res->finish = slot->finish;
	res->n_prompt = slot->n_prompt;
	res->n_completion = slot->n_completion;
	res->n_cached = slot->n_cached;
	res->queue_ms = slot->queue_ms;
	res->ttft_ms = slot->ttft_ms;
	res->total_ms = slot->total_ms;
	res->model = slot->model;
	res->served_model = slot->served_model;
	res->served_version = slot->served_version;
	res->tools = slot->tools;
	return 0;
}

/*
 * Run one request to completion.  On success fills *res (data palloc'd in
 * the current memory context); on any failure raises the mapped SQLSTATE.
 */
void
OpusRunRequest(const OpusRequest *req, OpusResult *res)
{
	uint64		id = 0;
	int			index;
	OpusSlot   *slot;
	TimestampTz start = GetCurrentTimestamp();
	int			err_code = 0;
	char		err_message[OPUS_PROTO_MSG_LEN];
	char		err_detail[OPUS_PROTO_MSG_LEN];

	OpusCheckPreloaded();
	OpusCheckRequestSize(req);
	index = OpusClaimSlot(req->kind, false, &id, false);
	slot = OpusGetSlot(index);

	PG_ENSURE_ERROR_CLEANUP(abandon_request, Int64GetDatum((int64) id));
	{
		OpusSubmitSlot(slot, req, start);
		wait_for_slot(slot, start);
		err_code = OpusCollectResult(slot, res, err_message, err_detail);
		SpinLockAcquire(&slot->mutex);
		slot->state = OPUS_SLOT_FREE;
		SpinLockRelease(&slot->mutex);
	}
	PG_END_ENSURE_ERROR_CLEANUP(abandon_request, Int64GetDatum((int64) id));

	if (err_code != 0)
		OpusRaiseError(err_code, err_message, err_detail);
	res->elapsed_ms = (double) (GetCurrentTimestamp() - start) / 1000.0;
}

/*
 * Wait until the default model's engine is ready and copy its description.
 * Raises the engine's start-up error if it cannot start.
 */
void
OpusWaitEngineReady(struct opus_proto_ready *info, char *path, size_t pathlen)
{
	OpusWaitModelReady(0, info, path, pathlen);
}

/* The same for model entry `model` (see models.c). */
void
OpusWaitModelReady(int model, struct opus_proto_ready *info, char *path, size_t pathlen)
{
	OpusEngineStatus *e;
	TimestampTz start = GetCurrentTimestamp();
	int			timeout_ms = opus_request_timeout_ms;

	OpusCheckPreloaded();
	e = OpusModel(model);
	ConditionVariablePrepareToSleep(&e->cv);
	for (;;)
	{
		OpusEngineState st;
		int			code;
		char		msg[OPUS_PROTO_MSG_LEN];
		char		detail[OPUS_PROTO_MSG_LEN];

		SpinLockAcquire(&e->mutex);
		st = e->state;
		code = e->last_err_code;
		if (st == OPUS_ENGINE_READY)
		{
			*info = e->model;
			strlcpy(path, e->model_path, pathlen);
		}
		strlcpy(msg, e->last_error, sizeof(msg));
		strlcpy(detail, e->last_error_detail, sizeof(detail));
		SpinLockRelease(&e->mutex);

		if (st == OPUS_ENGINE_READY)
			break;
		if (st == OPUS_ENGINE_FAILED)
		{
			ConditionVariableCancelSleep();
			OpusRaiseError(code ? code : OPUS_PG_ERR_ENGINE_DOWN,
						   msg[0] ? msg : "opus engine is not running", detail);
		}
		if (timeout_ms > 0)
		{
			long		elapsed = (long) ((GetCurrentTimestamp() - start) / 1000);

			if (elapsed >= timeout_ms)
				ereport(ERROR,
						(errcode(ERRCODE_QUERY_CANCELED),
						 errmsg("canceling opus request due to opus.request_timeout"),
						 errdetail("The engine did not become ready within %d ms.", timeout_ms)));
			(void) ConditionVariableTimedSleep(&e->cv, timeout_ms - elapsed, PG_WAIT_EXTENSION);
		}
		else
			ConditionVariableSleep(&e->cv, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
}
