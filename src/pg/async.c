/*
 * async.c - asynchronous requests (opus_submit, opus_result, opus_cancel,
 * opus_wait) and set-based generation (opus_generate_many,
 * opus_chat_many).
 *
 * An asynchronous request is an ordinary request slot (shmem.c) claimed
 * with slot->async set.  Nobody waits on it while it runs, and it is not
 * given up when the call that submitted it returns: its result stays in the
 * slot (DONE or ERROR) until a session of the same role reads it
 * (opus_result), cancels it (opus_cancel), or it has been finished for
 * longer than opus.async_retention, when the next asynchronous call frees
 * it.  The request id (bigint) names the slot and a per-slot generation, so
 * an id is never reused while the server runs.
 *
 * Ownership of an async slot follows the rules at the top of shmem.c, with
 * these additions (every transition under the slot's spinlock, after
 * checking that request_id still matches):
 *
 *   DONE/ERROR -> FILLING  a backend reading the result; it copies the
 *                          result out and sets FREE.  FILLING keeps the
 *                          supervisor and other readers away.
 *   DONE/ERROR -> FREE     opus_cancel of a finished request, or expiry.
 *   SUBMITTED/RUNNING -> CANCELLED  opus_cancel (the supervisor then tells
 *                          the engine and frees the slot).
 *
 * Any backend may do these, so a result outlives the session that asked
 * for it.  Access: a session may read, wait for or cancel a request whose
 * submitting role it has the privileges of (its own role, a role it
 * inherits, or any role for a superuser); others get 42501.
 *
 * Capacity: slots are a budget.  Async requests (queued, running, or
 * finished and unread) and the windows of set-based calls (slot->bulk)
 * together hold at most opus.max_async_requests slots, so synchronous calls
 * always find the remaining ones (the synchronous reserve), and one role
 * holds at most opus.max_async_requests_per_role of them, so one role
 * cannot take the whole budget from the others.  The check is made after
 * claiming: a backend that claims a slot and then counts more than allowed
 * gives its slot back (an async submit fails with 53000, a set-based call
 * waits for its own requests to finish); since every claimer counts after
 * publishing its own claim, the caps are never exceeded.
 *
 * Detached or not: opus_submit(..., detached => false) ties the request to
 * the session.  Such requests are remembered in a backend-local list and
 * cancelled when the session exits or any (top-level) transaction of the
 * session aborts before their result was read.  opus_job_run uses this so that an
 * interrupted run does not leave requests behind.
 *
 * Set-based generation keeps a window of requests in flight (ordinary,
 * non-async slots), refilling it as results arrive so the engine can batch
 * them, and returns one row per input in input order.  If anything fails,
 * the error cleanup cancels every request still in flight.
 */
#include "postgres.h"

#include <limits.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "opus_pg.h"

PG_FUNCTION_INFO_V1(opus_submit);
PG_FUNCTION_INFO_V1(opus_submit_chat);
PG_FUNCTION_INFO_V1(opus_result);
PG_FUNCTION_INFO_V1(opus_result_completion);
PG_FUNCTION_INFO_V1(opus_cancel);
PG_FUNCTION_INFO_V1(opus_wait);
PG_FUNCTION_INFO_V1(opus_async_requests);
PG_FUNCTION_INFO_V1(opus_generate_many);
PG_FUNCTION_INFO_V1(opus_chat_many);

/* How often waits for several requests look at the ones not slept on. */
#define POLL_MS			5
/* The longest sleep between looks at a request (a cancel does not wake). */
#define RECHECK_MS		1000

int			opus_max_async_requests = -1;
int			opus_async_retention_s = 600;
int			opus_max_async_requests_per_role = -1;

/* Request ids of this session's attached (detached => false) requests. */
static uint64 *attached_ids = NULL;
static int	n_attached = 0;
static int	attached_cap = 0;
static bool callbacks_registered = false;

/* ---------------------------------------------------------------------
 * Settings
 * --------------------------------------------------------------------- */

/* Called from opus_define_settings (opus_pg.c). */
void
OpusDefineAsyncSettings(void)
{
	DefineCustomIntVariable("opus.max_async_requests",
							"Request slots that asynchronous requests may hold at once (-1 = three quarters of opus.max_requests).",
							"Queued, running and finished-but-unread asynchronous requests count; the other slots stay free for synchronous calls.",
							&opus_max_async_requests,
							-1, -1, 10000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("opus.max_async_requests_per_role",
							"Request slots one role's asynchronous requests and set-based windows may hold at once (-1 = half of opus.max_async_requests).",
							"A set-based call's window is clamped to this share.",
							&opus_max_async_requests_per_role,
							-1, -1, 10000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("opus.async_retention",
							"How long the unread result of an asynchronous request is kept.",
							NULL,
							&opus_async_retention_s,
							600, 1, INT_MAX / 1000,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);
}

/* The number of slots async requests may hold now. */
static int
async_cap(void)
{
	int			n = OpusShared->n_slots;

	if (opus_max_async_requests < 0)
		return Max(1, n * 3 / 4);
	return Min(opus_max_async_requests, n);
}

/* The number of those slots one role may hold now (at least 1 if any). */
static int
role_cap(void)
{
	int			cap = async_cap();

	if (opus_max_async_requests_per_role < 0)
		return Max(Min(cap, 1), cap / 2);
	return Min(opus_max_async_requests_per_role, cap);
}

/* ---------------------------------------------------------------------
 * Slot helpers
 * --------------------------------------------------------------------- */

static bool
finished_state(OpusSlotState st)
{
	return st == OPUS_SLOT_DONE || st == OPUS_SLOT_ERROR;
}

/*
 * Free async results that have been finished for longer than
 * opus.async_retention.  Any backend may call this.
 */
static void
expire_results(void)
{
	TimestampTz now = GetCurrentTimestamp();
	int			i;

	for (i = 0; i < OpusShared->n_slots; i++)
	{
		OpusSlot   *slot = OpusGetSlot(i);

		/* unlocked peek; rechecked under the lock */
		if (!slot->async || !finished_state(slot->state))
			continue;
		SpinLockAcquire(&slot->mutex);
		if (slot->async && finished_state(slot->state) && slot->finish_time != 0 &&
			TimestampDifferenceExceeds(slot->finish_time, now, opus_async_retention_s * 1000))
			slot->state = OPUS_SLOT_FREE;
		SpinLockRelease(&slot->mutex);
	}
}

/*
 * Slots now holding async requests or set-based windows: any state but
 * FREE, and CANCELLED, which the supervisor frees at its next pass.  The
 * return value counts all of them, *n_role those of role.
 */
static int
count_budget(Oid role, int *n_role)
{
	int			n = 0;
	int			i;

	*n_role = 0;
	for (i = 0; i < OpusShared->n_slots; i++)
	{
		OpusSlot   *slot = OpusGetSlot(i);
		bool		held;

		SpinLockAcquire(&slot->mutex);
		held = (slot->async || slot->bulk) &&
			slot->state != OPUS_SLOT_FREE && slot->state != OPUS_SLOT_CANCELLED;
		if (held)
		{
			n++;
			*n_role += slot->userid == role;
		}
		SpinLockRelease(&slot->mutex);
	}
	return n;
}

/* What a backend sees of an async request, copied under the slot's lock. */
typedef struct AsyncLookup
{
	OpusSlot   *slot;			/* NULL: no such async request */
	OpusSlotState state;
	Oid			userid;
	uint8		kind;
} AsyncLookup;

static AsyncLookup
lookup_async(int64 id)
{
	AsyncLookup l;
	int			i = OpusSlotIndexFromId((uint64) id);
	OpusSlot   *slot;

	memset(&l, 0, sizeof(l));
	if (i < 0)
		return l;
	slot = OpusGetSlot(i);
	SpinLockAcquire(&slot->mutex);
	if (slot->request_id == (uint64) id && slot->async && slot->state != OPUS_SLOT_FREE)
	{
		l.slot = slot;
		l.state = slot->state;
		l.userid = slot->userid;
		l.kind = slot->kind;
	}
	SpinLockRelease(&slot->mutex);
	return l;
}

static void
check_access(const AsyncLookup *l, int64 id)
{
	if (l->userid != GetUserId() && !has_privs_of_role(GetUserId(), l->userid))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for opus request " INT64_FORMAT, id),
				 errdetail("Only roles with the privileges of the submitting role may use a request.")));
}

static void
raise_no_request(int64 id)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("opus request " INT64_FORMAT " does not exist", id),
			 errdetail("It was never submitted, its result was already read or cancelled, "
					   "or it expired after opus.async_retention.")));
}

/* Find an async request the caller may use; raises 42704 / 42501. */
static AsyncLookup
lookup_accessible(int64 id)
{
	AsyncLookup l = lookup_async(id);

	if (l.slot == NULL)
		raise_no_request(id);
	check_access(&l, id);
	return l;
}

/*
 * Cancel async request `id` if it still exists: a queued or running one
 * becomes CANCELLED (the supervisor stops it), a finished one is dropped.
 * Returns false if it was not found (or another backend is reading it).
 */
static bool
cancel_async(uint64 id)
{
	int			i = OpusSlotIndexFromId(id);
	OpusSlot   *slot;
	bool		found = false;
	bool		wake = false;

	if (i < 0)
		return false;
	slot = OpusGetSlot(i);
	SpinLockAcquire(&slot->mutex);
	if (slot->request_id == id && slot->async)
	{
		switch (slot->state)
		{
			case OPUS_SLOT_SUBMITTED:
			case OPUS_SLOT_RUNNING:
				slot->state = OPUS_SLOT_CANCELLED;
				found = wake = true;
				break;
			case OPUS_SLOT_DONE:
			case OPUS_SLOT_ERROR:
				slot->state = OPUS_SLOT_FREE;
				found = true;
				break;
			default:
				break;
		}
	}
	SpinLockRelease(&slot->mutex);
	if (found)
		ConditionVariableBroadcast(&slot->cv);
	if (wake)
		OpusWakeSupervisor();
	return found;
}

/* ---------------------------------------------------------------------
 * Attached requests: cancelled at abort and at exit
 * --------------------------------------------------------------------- */

static void
forget_attached(uint64 id)
{
	int			k;

	for (k = 0; k < n_attached; k++)
	{
		if (attached_ids[k] == id)
		{
			attached_ids[k] = attached_ids[--n_attached];
			return;
		}
	}
}

static void
cancel_attached(void)
{
	int			k;

	if (OpusShared == NULL)
		return;
	for (k = 0; k < n_attached; k++)
		(void) cancel_async(attached_ids[k]);
	n_attached = 0;
}

static void
attached_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		cancel_attached();
}

static void
attached_exit_callback(int code, Datum arg)
{
	cancel_attached();
}

/*
 * Make room for one more attached request (and register the callbacks), so
 * that remembering it after it is submitted cannot fail.
 */
static void
reserve_attached(void)
{
	if (!callbacks_registered)
	{
		RegisterXactCallback(attached_xact_callback, NULL);
		before_shmem_exit(attached_exit_callback, (Datum) 0);
		callbacks_registered = true;
	}
	if (n_attached == attached_cap)
	{
		int			cap = Max(16, attached_cap * 2);

		attached_ids = attached_ids ?
			repalloc(attached_ids, sizeof(uint64) * cap) :
			MemoryContextAlloc(TopMemoryContext, sizeof(uint64) * cap);
		attached_cap = cap;
	}
}

/* ---------------------------------------------------------------------
 * Submitting
 * --------------------------------------------------------------------- */

/* Error cleanup while a backend owns an async slot (FILLING). */
static void
abandon_callback(int code, Datum arg)
{
	OpusAbandonRequest((uint64) DatumGetInt64(arg));
}

/* Claim an async slot and send req; returns the request id. */
static int64
submit_async(const OpusRequest *req, bool detached)
{
	TimestampTz start = GetCurrentTimestamp();
	uint64		id = 0;
	int			index;
	OpusSlot   *slot;
	int			cap = async_cap();

	OpusCheckRequestSize(req);
	expire_results();
	if (cap <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("asynchronous opus requests are disabled"),
				 errhint("Set opus.max_async_requests above 0.")));

	if (!detached)
		reserve_attached();

	index = OpusClaimSlot(req->kind, true, &id, false);
	slot = OpusGetSlot(index);
	PG_ENSURE_ERROR_CLEANUP(abandon_callback, Int64GetDatum((int64) id));
	{
		int			n_role;
		int			n = count_budget(GetUserId(), &n_role);
		int			rcap = role_cap();

		if (n > cap)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
					 errmsg("too many asynchronous opus requests"),
					 errdetail("opus.max_async_requests allows %d, counting set-based calls' windows; async requests count until their result is read, they are cancelled, or they expire.", cap),
					 errhint("Read or cancel finished requests (opus_result, opus_cancel), or raise opus.max_async_requests.")));
		if (n_role > rcap)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
					 errmsg("too many asynchronous opus requests for role \"%s\"",
							GetUserNameFromId(GetUserId(), false)),
					 errdetail("opus.max_async_requests_per_role allows %d, counting set-based calls' windows; async requests count until their result is read, they are cancelled, or they expire.", rcap),
					 errhint("Read or cancel finished requests (opus_result, opus_cancel), or raise opus.max_async_requests_per_role.")));
		OpusSubmitSlot(slot, req, start);
	}
	PG_END_ENSURE_ERROR_CLEANUP(abandon_callback, Int64GetDatum((int64) id));

	if (!detached)
		attached_ids[n_attached++] = id;	/* room reserved above */
	return (int64) id;
}

static Datum
submit_common(FunctionCallInfo fcinfo, uint8 kind)
{
	OpusRequest req;
	int			detached_arg = OpusArgNo(fcinfo, "detached");
	bool		detached = detached_arg < 0 || PG_ARGISNULL(detached_arg) ? true : PG_GETARG_BOOL(detached_arg);

	OpusCheckPreloaded();
	memset(&req, 0, sizeof(req));
	req.kind = kind;
	if (kind == OPUS_KIND_CHAT)
	{
		if (PG_ARGISNULL(0))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("messages must not be null")));
		OpusParseMessages(PG_GETARG_JSONB_P(0), &req);
	}
	else
	{
		text	   *t;

		if (PG_ARGISNULL(0))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("prompt must not be null")));
		t = PG_GETARG_TEXT_PP(0);
		req.text = OpusTextToUtf8(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), &req.text_len);
		OpusCheckPromptSize(req.text_len, "prompt is");
	}
	OpusParseOptions(fcinfo, &req);
	OpusParseModelArg(fcinfo, &req);
	PG_RETURN_INT64(submit_async(&req, detached));
}

Datum
opus_submit(PG_FUNCTION_ARGS)
{
	return submit_common(fcinfo, OPUS_KIND_GENERATE);
}

Datum
opus_submit_chat(PG_FUNCTION_ARGS)
{
	return submit_common(fcinfo, OPUS_KIND_CHAT);
}

/* ---------------------------------------------------------------------
 * Results
 * --------------------------------------------------------------------- */

/* Milliseconds in an interval argument (NULL: -1 = no limit). */
static long
timeout_arg(FunctionCallInfo fcinfo, int argno)
{
	Interval   *iv;
	double		us;

	if (PG_ARGISNULL(argno))
		return -1;
	iv = PG_GETARG_INTERVAL_P(argno);
	us = (double) iv->time + (double) iv->day * USECS_PER_DAY +
		(double) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
	if (us < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must not be negative")));
	if (us / 1000.0 > (double) INT_MAX)
		return INT_MAX;
	return (long) (us / 1000.0);
}

/*
 * Wait until async request `id` has finished, at most timeout_ms (-1: no
 * limit).  Returns false on timeout.  Interrupts raise as usual; the
 * request keeps running.
 */
static bool
wait_async(int64 id, long timeout_ms)
{
	TimestampTz start = GetCurrentTimestamp();
	AsyncLookup l = lookup_accessible(id);
	bool		finished = false;

	ConditionVariablePrepareToSleep(&l.slot->cv);
	for (;;)
	{
		OpusSlotState st;
		bool		same;
		long		nap;

		SpinLockAcquire(&l.slot->mutex);
		st = l.slot->state;
		same = l.slot->request_id == (uint64) id;
		SpinLockRelease(&l.slot->mutex);
		if (!same || st == OPUS_SLOT_FREE || finished_state(st))
		{
			finished = true;
			break;
		}
		nap = RECHECK_MS;
		if (timeout_ms >= 0)
		{
			long		elapsed = (long) ((GetCurrentTimestamp() - start) / 1000);

			if (elapsed >= timeout_ms)
				break;
			nap = Min(nap, timeout_ms - elapsed);
		}
		(void) ConditionVariableTimedSleep(&l.slot->cv, nap, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	return finished;
}

/*
 * Take the result of finished async request `id` (the caller checked
 * access): DONE/ERROR -> FILLING, copy, FREE.  Raises the request's error.
 */
static void
take_result(int64 id, OpusResult *res)
{
	int			i = OpusSlotIndexFromId((uint64) id);
	OpusSlot   *slot = OpusGetSlot(i);
	bool		got = false;
	bool		was_error = false;
	int			err_code = 0;
	char		err_message[OPUS_PROTO_MSG_LEN];
	char		err_detail[OPUS_PROTO_MSG_LEN];

	SpinLockAcquire(&slot->mutex);
	if (slot->request_id == (uint64) id && slot->async && finished_state(slot->state))
	{
		was_error = slot->state == OPUS_SLOT_ERROR;
		slot->state = OPUS_SLOT_FILLING;
		got = true;
	}
	SpinLockRelease(&slot->mutex);
	if (!got)
		raise_no_request(id);

	PG_ENSURE_ERROR_CLEANUP(abandon_callback, Int64GetDatum(id));
	{
		/* The state is FILLING now: an ERROR without a code is internal. */
		err_code = OpusCollectResult(slot, res, err_message, err_detail);
		if (was_error && err_code == 0)
		{
			err_code = OPUS_PROTO_ERR_INTERNAL;
			strlcpy(err_message, "opus request failed", sizeof(err_message));
			err_detail[0] = '\0';
		}
		SpinLockAcquire(&slot->mutex);
		slot->state = OPUS_SLOT_FREE;
		SpinLockRelease(&slot->mutex);
	}
	PG_END_ENSURE_ERROR_CLEANUP(abandon_callback, Int64GetDatum(id));
	forget_attached((uint64) id);
	res->elapsed_ms = res->total_ms;
	if (err_code != 0)
		OpusRaiseError(err_code, err_message, err_detail);
}

/*
 * opus_result / opus_result_completion: wait (if asked) and take the
 * result.  Returns false, having taken nothing, if the request has not
 * finished (wait false, or the timeout passed).
 */
static bool
result_common(FunctionCallInfo fcinfo, OpusResult *res, uint8 *kind)
{
	int64		id;
	bool		wait = PG_ARGISNULL(1) ? true : PG_GETARG_BOOL(1);
	long		timeout_ms = timeout_arg(fcinfo, 2);
	AsyncLookup l;

	OpusCheckPreloaded();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("request id must not be null")));
	id = PG_GETARG_INT64(0);
	l = lookup_accessible(id);
	*kind = l.kind;
	if (!finished_state(l.state))
	{
		if (!wait || !wait_async(id, timeout_ms))
			return false;
	}
	take_result(id, res);
	return true;
}

Datum
opus_result(PG_FUNCTION_ARGS)
{
	OpusResult	res;
	uint8		kind;

	if (!result_common(fcinfo, &res, &kind))
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(OpusTextFromUtf8(res.data, res.len)));
}

Datum
opus_result_completion(PG_FUNCTION_ARGS)
{
	OpusResult	res;
	uint8		kind;

	if (!result_common(fcinfo, &res, &kind))
		PG_RETURN_NULL();
	PG_RETURN_DATUM(OpusCompletionJsonb(kind == OPUS_KIND_CHAT, &res));
}

/*
 * opus_cancel(id): stop a queued or running request, or drop an unread
 * result.  True if the request existed; false if it is unknown (or already
 * read).
 */
Datum
opus_cancel(PG_FUNCTION_ARGS)
{
	int64		id = PG_GETARG_INT64(0);
	AsyncLookup l;

	OpusCheckPreloaded();
	l = lookup_async(id);
	if (l.slot == NULL)
		PG_RETURN_BOOL(false);
	check_access(&l, id);
	forget_attached((uint64) id);
	PG_RETURN_BOOL(cancel_async((uint64) id));
}

/*
 * opus_wait(ids bigint[], timeout interval): the first of ids (in array
 * order) that has finished, or no longer exists; NULL if none has within
 * the timeout.  Waits on the first unfinished request's condition variable
 * and looks at the others every POLL_MS.
 */
Datum
opus_wait(PG_FUNCTION_ARGS)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	long		timeout_ms = timeout_arg(fcinfo, 1);
	TimestampTz start = GetCurrentTimestamp();
	int			k;

	OpusCheckPreloaded();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("request ids must not be null")));
	arr = PG_GETARG_ARRAYTYPE_P(0);
	deconstruct_array(arr, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, &nulls, &n);
	for (k = 0; k < n; k++)
	{
		AsyncLookup l;

		if (nulls[k])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("request ids must not be null")));
		l = lookup_async(DatumGetInt64(elems[k]));
		if (l.slot != NULL)
			check_access(&l, DatumGetInt64(elems[k]));
	}
	if (n == 0)
		PG_RETURN_NULL();

	for (;;)
	{
		OpusSlot   *sleep_on = NULL;
		long		nap = n > 1 ? POLL_MS : RECHECK_MS;

		for (k = 0; k < n; k++)
		{
			AsyncLookup l = lookup_async(DatumGetInt64(elems[k]));

			if (l.slot == NULL || finished_state(l.state))
			{
				ConditionVariableCancelSleep();
				PG_RETURN_INT64(DatumGetInt64(elems[k]));
			}
			if (sleep_on == NULL)
				sleep_on = l.slot;
		}
		if (timeout_ms >= 0)
		{
			long		elapsed = (long) ((GetCurrentTimestamp() - start) / 1000);

			if (elapsed >= timeout_ms)
				break;
			nap = Min(nap, timeout_ms - elapsed);
		}
		/* A wake-up from the slot's cv arrives at once; the rest are polled. */
		ConditionVariablePrepareToSleep(&sleep_on->cv);
		(void) ConditionVariableTimedSleep(&sleep_on->cv, nap, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	PG_RETURN_NULL();
}

static const char *
slot_state_name(OpusSlotState st)
{
	switch (st)
	{
		case OPUS_SLOT_FILLING:
			return "busy";
		case OPUS_SLOT_SUBMITTED:
			return "queued";
		case OPUS_SLOT_RUNNING:
			return "running";
		case OPUS_SLOT_DONE:
			return "done";
		case OPUS_SLOT_ERROR:
			return "error";
		case OPUS_SLOT_CANCELLED:
			return "cancelling";
		default:
			return "free";
	}
}

/*
 * opus_async_requests(): the asynchronous requests the caller may use,
 * with their state and when an unread result expires.
 */
Datum
opus_async_requests(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	OpusCheckPreloaded();
	expire_results();
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < OpusShared->n_slots; i++)
	{
		OpusSlot   *slot = OpusGetSlot(i);
		uint64		id;
		OpusSlotState st;
		Oid			userid;
		int			pid;
		uint8		kind;
		TimestampTz submitted;
		TimestampTz finished;
		Datum		values[8];
		bool		nulls[8];
		char	   *rolname;

		SpinLockAcquire(&slot->mutex);
		id = slot->request_id;
		st = slot->state;
		userid = slot->userid;
		pid = slot->backend_pid;
		kind = slot->kind;
		submitted = slot->submit_time;
		finished = slot->finish_time;
		if (!slot->async)
			st = OPUS_SLOT_FREE;
		SpinLockRelease(&slot->mutex);
		if (st == OPUS_SLOT_FREE)
			continue;
		if (userid != GetUserId() && !has_privs_of_role(GetUserId(), userid))
			continue;

		memset(nulls, 0, sizeof(nulls));
		values[0] = Int64GetDatum((int64) id);
		values[1] = CStringGetTextDatum(slot_state_name(st));
		values[2] = CStringGetTextDatum(kind == OPUS_KIND_CHAT ? "chat" : "generate");
		rolname = GetUserNameFromId(userid, true);
		values[3] = CStringGetTextDatum(rolname ? rolname : "?");
		values[4] = Int32GetDatum(pid);
		values[5] = TimestampTzGetDatum(submitted);
		nulls[5] = submitted == 0;
		values[6] = TimestampTzGetDatum(finished);
		nulls[6] = !finished_state(st) || finished == 0;
		values[7] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(finished,
																	(int64) opus_async_retention_s * 1000));
		nulls[7] = nulls[6];
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* ---------------------------------------------------------------------
 * Set-based generation
 * --------------------------------------------------------------------- */

/* Requests of one opus_generate_many call that are in flight. */
typedef struct ManyState
{
	int			window;
	int			n_inflight;
	int		   *input;			/* [window] input ordinal (0-based) */
	uint64	   *ids;			/* [window] request id */
} ManyState;

/*
 * Claim a slot for a set-based call's window, within the budget (the
 * async cap and the role's share, see Capacity at the top); -1 when no
 * slot is free or the budget is spent (the caller waits for its own
 * requests).  A call with nothing in flight (alone) may take one slot
 * beyond the budget, as a synchronous call would, so it never waits on
 * results nobody reads.
 */
static int
claim_bulk(uint8 kind, uint64 *id, bool alone)
{
	int			index = OpusClaimSlot(kind, false, id, true);
	OpusSlot   *slot;
	int			n_role;
	int			n;

	if (index < 0)
		return -1;
	if (async_cap() <= 0)
		return index;			/* async disabled: a window of 1, like a synchronous call */
	slot = OpusGetSlot(index);
	SpinLockAcquire(&slot->mutex);
	slot->bulk = true;
	SpinLockRelease(&slot->mutex);
	n = count_budget(GetUserId(), &n_role);
	if (n <= async_cap() && n_role <= role_cap())
		return index;
	SpinLockAcquire(&slot->mutex);
	slot->bulk = false;
	if (!alone)
		slot->state = OPUS_SLOT_FREE;
	SpinLockRelease(&slot->mutex);
	return alone ? index : -1;
}

static void
many_cleanup(int code, Datum arg)
{
	ManyState  *ms = (ManyState *) DatumGetPointer(arg);
	int			k;

	for (k = 0; k < ms->n_inflight; k++)
		OpusAbandonRequest(ms->ids[k]);
	ms->n_inflight = 0;
}

/* One input of a set-based call, its outcome once finished. */
typedef struct ManyRow
{
	bool		null_input;
	char	   *output;
	uint8		finish;
	int32		n_prompt;
	int32		n_completion;
} ManyRow;

static Datum
many_common(FunctionCallInfo fcinfo, uint8 kind)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			window;
	bool		random_seed = OpusArgIsNull(fcinfo, "seed");
	int			window_arg = OpusArgNo(fcinfo, "window");
	OpusRequest proto;
	OpusRequest *reqs;
	ManyRow    *rows;
	ManyState  *ms;
	int			next = 0;
	int			n_done = 0;
	int			k;

	OpusCheckPreloaded();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", kind == OPUS_KIND_CHAT ? "conversations" : "prompts")));
	arr = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", kind == OPUS_KIND_CHAT ? "conversations" : "prompts")));
	if (kind == OPUS_KIND_CHAT)
		deconstruct_array(arr, JSONBOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	else
		deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);

	if (window_arg < 0 || PG_ARGISNULL(window_arg))
		window = Min(16, Max(1, async_cap()));
	else
	{
		window = PG_GETARG_INT32(window_arg);
		if (window < 1 || window > 10000)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("window must be between 1 and 10000"),
					 errdetail("The value given was %d.", window)));
	}
	/* a window beyond the role's share of the budget would only wait */
	window = Min(window, Max(1, role_cap()));
	window = Min(window, OpusShared->n_slots);

	/* Validate everything before queuing anything. */
	memset(&proto, 0, sizeof(proto));
	proto.kind = kind;
	OpusParseOptions(fcinfo, &proto);
	OpusParseModelArg(fcinfo, &proto);
	reqs = palloc0(sizeof(OpusRequest) * Max(n, 1));
	rows = palloc0(sizeof(ManyRow) * Max(n, 1));
	for (k = 0; k < n; k++)
	{
		reqs[k] = proto;
		if (nulls[k])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s %d must not be null", kind == OPUS_KIND_CHAT ? "conversation" : "prompt", k + 1)));
		if (kind == OPUS_KIND_CHAT)
			OpusParseMessages(DatumGetJsonbP(elems[k]), &reqs[k]);
		else
		{
			text	   *t = DatumGetTextPP(elems[k]);

			reqs[k].text = OpusTextToUtf8(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), &reqs[k].text_len);
			OpusCheckPromptSize(reqs[k].text_len, "prompt is");
		}
		if (random_seed)
			reqs[k].params.seed = pg_prng_uint64(&pg_global_prng_state);
		OpusCheckRequestSize(&reqs[k]);
	}

	ms = palloc0(sizeof(ManyState));
	ms->window = window;
	ms->input = palloc(sizeof(int) * window);
	ms->ids = palloc(sizeof(uint64) * window);

	PG_ENSURE_ERROR_CLEANUP(many_cleanup, PointerGetDatum(ms));
	{
		while (n_done < n)
		{
			bool		progressed = false;

			/* Fill the window with whatever slots are free. */
			while (ms->n_inflight < window && next < n)
			{
				uint64		id;
				int			index = claim_bulk(kind, &id, ms->n_inflight == 0);

				if (index < 0)
					break;
				ms->input[ms->n_inflight] = next;
				ms->ids[ms->n_inflight] = id;
				ms->n_inflight++;
				OpusSubmitSlot(OpusGetSlot(index), &reqs[next], GetCurrentTimestamp());
				next++;
			}

			/* Collect every finished request. */
			for (k = 0; k < ms->n_inflight;)
			{
				OpusSlot   *slot = OpusGetSlot(OpusSlotIndexFromId(ms->ids[k]));
				OpusSlotState st;
				OpusResult	res;
				int			err_code;
				char		err_message[OPUS_PROTO_MSG_LEN];
				char		err_detail[OPUS_PROTO_MSG_LEN];
				ManyRow    *row = &rows[ms->input[k]];

				SpinLockAcquire(&slot->mutex);
				st = slot->state;
				SpinLockRelease(&slot->mutex);
				if (!finished_state(st))
				{
					k++;
					continue;
				}
				err_code = OpusCollectResult(slot, &res, err_message, err_detail);
				SpinLockAcquire(&slot->mutex);
				slot->state = OPUS_SLOT_FREE;
				SpinLockRelease(&slot->mutex);
				ms->ids[k] = ms->ids[ms->n_inflight - 1];
				ms->input[k] = ms->input[ms->n_inflight - 1];
				ms->n_inflight--;
				if (err_code != 0)
					OpusRaiseError(err_code, err_message, err_detail);
				row->output = OpusTextFromUtf8(res.data, res.len);
				pfree(res.data);
				row->finish = res.finish;
				row->n_prompt = res.n_prompt;
				row->n_completion = res.n_completion;
				n_done++;
				progressed = true;
			}
			if (progressed || n_done == n)
				continue;

			/*
			 * Nothing finished: sleep on the oldest request (its completion
			 * wakes us at once), looking at the others every POLL_MS.  With
			 * nothing in flight, every slot is busy: wait for one.
			 */
			if (ms->n_inflight > 0)
			{
				OpusSlot   *slot = OpusGetSlot(OpusSlotIndexFromId(ms->ids[0]));

				ConditionVariablePrepareToSleep(&slot->cv);
				(void) ConditionVariableTimedSleep(&slot->cv, POLL_MS, PG_WAIT_EXTENSION);
				ConditionVariableCancelSleep();
			}
			else
			{
				(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
								 10, PG_WAIT_EXTENSION);
				ResetLatch(MyLatch);
				CHECK_FOR_INTERRUPTS();
			}
		}
	}
	PG_END_ENSURE_ERROR_CLEANUP(many_cleanup, PointerGetDatum(ms));

	InitMaterializedSRF(fcinfo, 0);
	for (k = 0; k < n; k++)
	{
		Datum		values[5];
		bool		vnulls[5];

		memset(vnulls, 0, sizeof(vnulls));
		values[0] = Int32GetDatum(k + 1);
		values[1] = CStringGetTextDatum(rows[k].output);
		values[2] = CStringGetTextDatum(rows[k].finish == OPUS_PROTO_FINISH_LENGTH ? "length" : "stop");
		values[3] = Int32GetDatum(rows[k].n_prompt);
		values[4] = Int32GetDatum(rows[k].n_completion);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, vnulls);
	}
	return (Datum) 0;
}

Datum
opus_generate_many(PG_FUNCTION_ARGS)
{
	return many_common(fcinfo, OPUS_KIND_GENERATE);
}

Datum
opus_chat_many(PG_FUNCTION_ARGS)
{
	return many_common(fcinfo, OPUS_KIND_CHAT);
}
