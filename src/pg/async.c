/*
 * async.c - asynchronous requests (opus_submit, opus_result, opus_cancel,
 * opus_wait) and the slot budget they share with set-based calls (many.c).
 *
 * An asynchronous request is an ordinary request slot (shmem.c) claimed
 * with slot->async set.  Nobody waits on it while it runs, and it is not
 * given up when the call that submitted it returns.  When it finishes, the
 * supervisor moves its result into the result store (resultstore.c) and
 * frees the slot, so a finished result nobody reads holds no request slot;
 * only when the store has no room does the result stay in the slot (DONE or
 * ERROR), as it always did before the store.  Either way the result is
 * kept until a session of the same role reads it (opus_result), cancels it
 * (opus_cancel), or it has been finished for longer than
 * opus.async_retention, when the next asynchronous call frees it.  Lookups
 * look at the slot first and the store second (see the order rule at the
 * top of resultstore.c).  The request id (bigint) names the slot and a
 * per-slot generation, so an id is never reused while the server runs.
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
 * Capacity: slots are a budget.  Async requests in slots (queued, running,
 * or finished and unread where the store had no room) and the windows of
 * set-based calls (slot->bulk)
 * together hold at most opus.max_async_requests slots, so synchronous calls
 * always find the remaining ones (the synchronous reserve), and one role
 * holds at most opus.max_async_requests_per_role of them, so one role
 * cannot take the whole budget from the others.  The check is made after
 * claiming: a backend that claims a slot and then counts more than allowed
 * gives its slot back (an async submit fails with 53000, a set-based call
 * waits for its own requests to finish); since every claimer counts after
 * publishing its own claim, the caps are never exceeded.  The result store
 * is shared the same way: a role whose unread results fill its share of it
 * (the fraction of the store its slot share is of the budget) cannot
 * submit (53000) until it reads or cancels some.
 *
 * Detached or not: opus_submit(..., detached => false) ties the request to
 * the session.  Such requests are remembered in a backend-local list and
 * cancelled when the session exits or any (top-level) transaction of the
 * session aborts before their result was read.  opus_job_run uses this so that an
 * interrupted run does not leave requests behind.
 *
 * Embeddings: opus_submit_embed queues an EMBED request (the arguments of
 * opus_embed); its vector is read by opus_result_embedding (real[]) or
 * opus_result_completion (the OpenAI embeddings object); opus_result, which
 * returns text, refuses it (42809) without taking it, and so does
 * opus_result_embedding a text request.
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
PG_FUNCTION_INFO_V1(opus_submit_embed);
PG_FUNCTION_INFO_V1(opus_result_embedding);
PG_FUNCTION_INFO_V1(opus_result);
PG_FUNCTION_INFO_V1(opus_result_completion);
PG_FUNCTION_INFO_V1(opus_cancel);
PG_FUNCTION_INFO_V1(opus_wait);
PG_FUNCTION_INFO_V1(opus_async_requests);

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

/* Called from _PG_init (opus_pg.c). */
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
int
OpusAsyncCap(void)
{
	int			n = OpusShared->n_slots;

	if (opus_max_async_requests < 0)
		return Max(1, n * 3 / 4);
	return Min(opus_max_async_requests, n);
}

/*
 * The number of those slots the current role may hold now (at least 1 if
 * any): the server-wide share (opus.max_async_requests_per_role), or the
 * role's own limit (opus.role_max_async_requests, ALTER ROLE) where that is
 * smaller.  One limit: both count asynchronous requests and set-based
 * windows alike.  *which (may be NULL): the setting that decided.
 */
static int
role_cap(const char **which)
{
	int			cap = OpusAsyncCap();
	int			rcap;
	int			quota = OpusRoleAsyncQuota();

	if (opus_max_async_requests_per_role < 0)
		rcap = Max(Min(cap, 1), cap / 2);
	else
		rcap = Min(opus_max_async_requests_per_role, cap);
	if (which)
		*which = "opus.max_async_requests_per_role";
	if (quota > 0 && quota < rcap)
	{
		rcap = quota;
		if (which)
			*which = "opus.role_max_async_requests";
	}
	return rcap;
}

int
OpusAsyncRoleCap(void)
{
	return role_cap(NULL);
}

/* ---------------------------------------------------------------------
 * Slot helpers
 * --------------------------------------------------------------------- */

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
		if (!slot->async || !OpusSlotFinished(slot->state))
			continue;
		SpinLockAcquire(&slot->mutex);
		if (slot->async && OpusSlotFinished(slot->state) && slot->finish_time != 0 &&
			TimestampDifferenceExceeds(slot->finish_time, now, opus_async_retention_s * 1000))
			slot->state = OPUS_SLOT_FREE;
		SpinLockRelease(&slot->mutex);
	}
	OpusResultStoreExpire(now, (int64) opus_async_retention_s * 1000);
}

/*
 * Slots now holding async requests or set-based windows: any state but
 * FREE, and CANCELLED, which the supervisor frees at its next pass.  The
 * return value counts all of them, *n_role those of role.
 */
int
OpusAsyncBudgetHeld(Oid role, int *n_role)
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

/*
 * What a backend sees of an async request: in a slot (copied under the
 * slot's lock), or finished in the result store.
 */
typedef struct AsyncLookup
{
	OpusSlot   *slot;			/* NULL: not in a slot */
	bool		stored;			/* in the result store (state DONE/ERROR) */
	OpusSlotState state;
	Oid			userid;
	uint8		kind;
} AsyncLookup;

/* Whether a lookup found the request, in a slot or in the store. */
static inline bool
async_found(const AsyncLookup *l)
{
	return l->slot != NULL || l->stored;
}

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
	if (l.slot == NULL)
	{
		bool		error = false;

		/* the store second: a result is put there before its slot is freed */
		if (OpusResultStoreLookup((uint64) id, &l.userid, &l.kind, &error))
		{
			l.stored = true;
			l.state = error ? OPUS_SLOT_ERROR : OPUS_SLOT_DONE;
		}
	}
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

	if (!async_found(&l))
		raise_no_request(id);
	check_access(&l, id);
	return l;
}

/*
 * Cancel async request `id` if it still exists: a queued or running one
 * becomes CANCELLED (the supervisor stops it), a finished one (in its slot
 * or in the result store) is dropped.  Returns false if it was not found
 * (or another backend is reading it).
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
	if (!found)
		found = OpusResultStoreDrop(id);
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
	int			cap = OpusAsyncCap();

	OpusCheckRequestSize(req);
	expire_results();
	if (cap <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("asynchronous opus requests are disabled"),
				 errhint("Set opus.max_async_requests above 0.")));

	/* the role's share of the result store (see Capacity at the top) */
	{
		int			n_chunks;
		int			used = OpusResultStoreRoleChunks(GetUserId(), &n_chunks);
		const char *rwhich;
		int			rcap = role_cap(&rwhich);
		int			share = (int) Max(1, (int64) n_chunks * rcap / cap);

		if (n_chunks > 0 && used >= share)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
					 errmsg("too many unread asynchronous opus results for role \"%s\"",
							GetUserNameFromId(GetUserId(), false)),
					 errdetail("Its unread results hold %d kB of opus.async_result_store_size; its share is %d kB (%d of %d async slots, %s).",
							   used * (OPUS_RESULT_CHUNK / 1024), share * (OPUS_RESULT_CHUNK / 1024),
							   rcap, cap, rwhich),
					 errhint("Read or cancel finished requests (opus_result, opus_cancel).")));
	}

	if (!detached)
		reserve_attached();

	index = OpusClaimSlot(req->kind, true, &id, false);
	slot = OpusGetSlot(index);
	PG_ENSURE_ERROR_CLEANUP(abandon_callback, Int64GetDatum((int64) id));
	{
		int			n_role;
		int			n = OpusAsyncBudgetHeld(GetUserId(), &n_role);
		const char *rwhich;
		int			rcap = role_cap(&rwhich);

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
					 errdetail("%s allows %d, counting set-based calls' windows; async requests count until their result is read, they are cancelled, or they expire.", rwhich, rcap),
					 errhint("Read or cancel finished requests (opus_result, opus_cancel), or raise %s.", rwhich)));
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

	OpusParseGeneration(fcinfo, kind, &req);
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

/* opus_submit_embed: an EMBED request (embed.c parses it as opus_embed does). */
Datum
opus_submit_embed(PG_FUNCTION_ARGS)
{
	OpusRequest req;
	int			detached_arg = OpusArgNo(fcinfo, "detached");
	bool		detached = detached_arg < 0 || PG_ARGISNULL(detached_arg) ? true : PG_GETARG_BOOL(detached_arg);

	OpusParseEmbedRequest(fcinfo, &req);
	PG_RETURN_INT64(submit_async(&req, detached));
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

	if (l.stored)
		return true;
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
		if (!same || st == OPUS_SLOT_FREE || OpusSlotFinished(st))
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
 * access): from its slot (DONE/ERROR -> FILLING, copy, FREE) or else from
 * the result store.  Raises the request's error.
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
	if (slot->request_id == (uint64) id && slot->async && OpusSlotFinished(slot->state))
	{
		was_error = slot->state == OPUS_SLOT_ERROR;
		slot->state = OPUS_SLOT_FILLING;
		got = true;
	}
	SpinLockRelease(&slot->mutex);
	if (!got)
	{
		bool		found;

		err_code = OpusResultStoreTake((uint64) id, res, err_message, err_detail, &found);
		if (!found)
			raise_no_request(id);
		forget_attached((uint64) id);
		res->elapsed_ms = res->total_ms;
		if (err_code != 0)
			OpusRaiseError(err_code, err_message, err_detail);
		return;
	}

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
 * Raise 42809 unless a request of kind `kind` can be read by `func`: an
 * embedding only by opus_result_embedding and opus_result_completion, text
 * only by the others.  Checked before the result is taken, so a wrong call
 * leaves it to be read.
 */
static void
check_result_kind(uint8 kind, const char *func, bool embedding_only, bool any)
{
	if (any || (kind == OPUS_KIND_EMBED) == embedding_only)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_WRONG_OBJECT_TYPE),
			 errmsg(kind == OPUS_KIND_EMBED ? "%s cannot read an embedding request"
					: "%s can only read an embedding request", func),
			 errhint(kind == OPUS_KIND_EMBED ?
					 "Read it with opus_result_embedding or opus_result_completion." :
					 "Read it with opus_result or opus_result_completion.")));
}

/*
 * opus_result / opus_result_completion / opus_result_embedding: wait (if
 * asked) and take the result, which must be of a kind func reads (see
 * check_result_kind).  Returns false, having taken nothing, if the request
 * has not finished (wait false, or the timeout passed).
 */
static bool
result_common(FunctionCallInfo fcinfo, OpusResult *res, uint8 *kind,
			  const char *func, bool embedding_only, bool any)
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
	check_result_kind(l.kind, func, embedding_only, any);
	if (!OpusSlotFinished(l.state))
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

	if (!result_common(fcinfo, &res, &kind, "opus_result", false, false))
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(OpusTextFromUtf8(res.data, res.len)));
}

Datum
opus_result_completion(PG_FUNCTION_ARGS)
{
	OpusResult	res;
	uint8		kind;

	if (!result_common(fcinfo, &res, &kind, "opus_result_completion", false, true))
		PG_RETURN_NULL();
	if (kind == OPUS_KIND_EMBED)
		PG_RETURN_DATUM(OpusEmbeddingJsonb(&res));
	PG_RETURN_DATUM(OpusCompletionJsonb(kind == OPUS_KIND_CHAT, res.tools, &res));
}

Datum
opus_result_embedding(PG_FUNCTION_ARGS)
{
	OpusResult	res;
	uint8		kind;

	if (!result_common(fcinfo, &res, &kind, "opus_result_embedding", true, false))
		PG_RETURN_NULL();
	PG_RETURN_DATUM(OpusEmbeddingArray(res.data, res.len));
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
	if (!async_found(&l))
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
		if (async_found(&l))
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

			if (l.slot == NULL || OpusSlotFinished(l.state))
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
		values[2] = CStringGetTextDatum(kind == OPUS_KIND_CHAT ? "chat" :
										kind == OPUS_KIND_EMBED ? "embed" : "generate");
		rolname = GetUserNameFromId(userid, true);
		values[3] = CStringGetTextDatum(rolname ? rolname : "?");
		values[4] = Int32GetDatum(pid);
		values[5] = TimestampTzGetDatum(submitted);
		nulls[5] = submitted == 0;
		values[6] = TimestampTzGetDatum(finished);
		nulls[6] = !OpusSlotFinished(st) || finished == 0;
		values[7] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(finished,
																	(int64) opus_async_retention_s * 1000));
		nulls[7] = nulls[6];
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	/* finished results in the store */
	{
		int			n;
		OpusStoredResult *r = OpusResultStoreList(&n);
		int			k;

		for (k = 0; k < n; k++)
		{
			Datum		values[8];
			bool		nulls[8];
			char	   *rolname;

			if (r[k].userid != GetUserId() && !has_privs_of_role(GetUserId(), r[k].userid))
				continue;
			memset(nulls, 0, sizeof(nulls));
			values[0] = Int64GetDatum((int64) r[k].request_id);
			values[1] = CStringGetTextDatum(r[k].error ? "error" : "done");
			values[2] = CStringGetTextDatum(r[k].kind == OPUS_KIND_CHAT ? "chat" :
												r[k].kind == OPUS_KIND_EMBED ? "embed" : "generate");
			rolname = GetUserNameFromId(r[k].userid, true);
			values[3] = CStringGetTextDatum(rolname ? rolname : "?");
			values[4] = Int32GetDatum(r[k].backend_pid);
			values[5] = TimestampTzGetDatum(r[k].submit_time);
			nulls[5] = r[k].submit_time == 0;
			values[6] = TimestampTzGetDatum(r[k].finish_time);
			values[7] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(r[k].finish_time,
																		(int64) opus_async_retention_s * 1000));
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}
