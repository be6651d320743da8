/*
 * shmem.c - opus_pg's shared memory: the model entries (each with its
 * engine's status; entry 0 is the default model) and the fixed array
 * of request slots (opus.max_requests of them, each followed by a buffer of
 * opus.request_buffer_size bytes).
 *
 * Locking rules
 * -------------
 * Each model entry's mutex (a spinlock; OpusModel(i)->mutex, entry 0 is
 * OpusShared->engine) protects every field of its OpusEngineStatus.  Only
 * the supervisor writes it (and the postmaster at initialisation), except
 * the swap_requested / rollback_requested / requested_path fields that
 * opus_model_swap() and opus_model_rollback() set for the supervisor to
 * take; backends copy fields out under the spinlock.  The condition
 * variable cv of an entry is broadcast by the supervisor after every state
 * change.  A slot's model and model_epoch (written while FILLING) say which
 * entry it is for; see models.c.
 *
 * Each slot's mutex (a spinlock) protects state, generation, request_id and
 * the pids/oids.  Everything else in the slot, and its buffer, is owned by
 * whoever the state says, and is touched without the lock:
 *
 *   FREE       nobody.  A backend claims it: FREE -> FILLING under the lock.
 *   FILLING    the claiming backend writes parameters and the SUBMIT payload
 *              into the buffer, then FILLING -> SUBMITTED under the lock and
 *              sets the supervisor's latch.
 *   SUBMITTED  the supervisor reads the payload and sends it to the engine,
 *              then SUBMITTED -> RUNNING under the lock.
 *   RUNNING    the supervisor appends TEXT/TOKENS to the buffer and, at DONE,
 *              writes usage/timings/error, then RUNNING -> DONE or ERROR
 *              under the lock and broadcasts the slot's cv.
 *   DONE/ERROR the backend reads the result and sets FREE under the lock.
 *   CANCELLED  the backend gave up (error, cancel, timeout, exit): it may
 *              set SUBMITTED/RUNNING -> CANCELLED (and FILLING/DONE/ERROR ->
 *              FREE) under the lock and never touches the slot again.  The
 *              supervisor owns a CANCELLED slot: it sends the engine a
 *              CANCEL (the engine drops the request at its next step) and
 *              sets FREE at once; later frames for that request id are
 *              ignored, since ids are never reused.
 *
 * So a backend only ever moves a slot out of FREE, FILLING, DONE and ERROR,
 * or into CANCELLED; the supervisor moves it out of SUBMITTED, RUNNING and
 * CANCELLED.  No spinlock is held across anything but a few assignments.
 *
 * A slot with `async` set (opus_submit) belongs to no backend once
 * SUBMITTED: any backend of a role with the submitter's privileges may
 * cancel it, and may take a DONE/ERROR result by moving it to FILLING
 * (then FREE after copying); unread results expire.  Usually an async
 * slot never becomes DONE/ERROR: the supervisor moves its finished result
 * into the result store (resultstore.c) and sets FREE at once.  See async.c.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "opus_pg.h"

OpusSharedState *OpusShared = NULL;

static Size
OpusSlotStride(void)
{
	return MAXALIGN(sizeof(OpusSlot)) +
		MAXALIGN((Size) opus_request_buffer_kb * 1024);
}

/* Bytes of shared memory opus_pg needs (called in shmem_request_hook). */
Size
OpusShmemSize(void)
{
	Size		size = MAXALIGN(sizeof(OpusSharedState));

	size = add_size(size, mul_size(opus_max_requests, OpusSlotStride()));
	return size;
}

/*
 * Create or attach to the shared state.  Caller: shmem_startup_hook, in the
 * postmaster (and in each backend under EXEC_BACKEND).
 */
void
OpusShmemInit(void)
{
	bool		found;
	int			i;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	OpusShared = ShmemInitStruct("opus_pg", OpusShmemSize(), &found);
	if (!found)
	{
		int			m;

		memset(OpusShared, 0, sizeof(OpusSharedState));
		for (m = 0; m < OPUS_MAX_MODELS; m++)
		{
			OpusEngineStatus *e = OpusModel(m);

			SpinLockInit(&e->mutex);
			e->state = OPUS_ENGINE_STOPPED;
			e->supervisor_procno = -1;
			e->in_use = m == 0;
			e->version = 1;
			strlcpy(e->name, m == 0 ? "default" : "", sizeof(e->name));
			ConditionVariableInit(&e->cv);
		}
		OpusShared->n_slots = opus_max_requests;
		OpusShared->slot_buf_size = (Size) opus_request_buffer_kb * 1024;
		OpusShared->slot_stride = OpusSlotStride();
		for (i = 0; i < OpusShared->n_slots; i++)
		{
			OpusSlot   *slot = OpusGetSlot(i);

			memset(slot, 0, sizeof(OpusSlot));
			SpinLockInit(&slot->mutex);
			slot->state = OPUS_SLOT_FREE;
			ConditionVariableInit(&slot->cv);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

OpusSlot *
OpusGetSlot(int index)
{
	char	   *base = (char *) OpusShared + MAXALIGN(sizeof(OpusSharedState));

	Assert(index >= 0 && index < OpusShared->n_slots);
	return (OpusSlot *) (base + (Size) index * OpusShared->slot_stride);
}

char *
OpusSlotBuf(OpusSlot *slot)
{
	return (char *) slot + MAXALIGN(sizeof(OpusSlot));
}

/* Slot index encoded in a request id, or -1 if it cannot be one of ours. */
int
OpusSlotIndexFromId(uint64 request_id)
{
	uint32		low = (uint32) request_id;

	if (low == 0 || low > (uint32) OpusShared->n_slots)
		return -1;
	return (int) low - 1;
}

/* Set the supervisor's latch, if a supervisor is running. */
void
OpusWakeSupervisor(void)
{
	int			procno;

	SpinLockAcquire(&OpusShared->engine.mutex);
	procno = OpusShared->engine.supervisor_procno;
	SpinLockRelease(&OpusShared->engine.mutex);
	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/* True when loaded through shared_preload_libraries (set by _PG_init). */
bool		opus_pg_preloaded = false;

/*
 * Every SQL function's first check: raise 55000 unless the library was
 * preloaded and this backend is attached to the shared state above, or if
 * the installed SQL is another version than the library's (version.c).
 */
void
OpusCheckPreloaded(void)
{
	if (!opus_pg_preloaded || OpusShared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("opus_pg is not loaded through shared_preload_libraries"),
				 errdetail("The inference engine is supervised by a background worker that only a preloaded library can start."),
				 errhint("Add opus_pg to shared_preload_libraries and restart the server.")));
	OpusCheckSqlVersion();
}

/* Ids of requests the supervisor has handed to the engine and not ended. */
uint64 *
OpusLiveRequestIds(int *n)
{
	uint64	   *ids = palloc(sizeof(uint64) * Max(OpusShared->n_slots, 1));
	int			k = 0;
	int			i;

	for (i = 0; i < OpusShared->n_slots; i++)
	{
		OpusSlot   *slot = OpusGetSlot(i);
		OpusSlotState st;
		uint64		id;

		SpinLockAcquire(&slot->mutex);
		st = slot->state;
		id = slot->request_id;
		SpinLockRelease(&slot->mutex);
		if (st == OPUS_SLOT_SUBMITTED || st == OPUS_SLOT_RUNNING ||
			st == OPUS_SLOT_CANCELLED)
			ids[k++] = id;
	}
	*n = k;
	return ids;
}

/*
 * An engine state as the views show it; a READY engine that stopped
 * answering (opus.engine_liveness_timeout) is "unresponsive".
 */
const char *
OpusEngineStateName(OpusEngineState st, bool unresponsive)
{
	switch (st)
	{
		case OPUS_ENGINE_STOPPED:
			return "stopped";
		case OPUS_ENGINE_STARTING:
			return "starting";
		case OPUS_ENGINE_READY:
			return unresponsive ? "unresponsive" : "ready";
		case OPUS_ENGINE_BACKOFF:
			return "restarting";
		case OPUS_ENGINE_FAILED:
			return "failed";
	}
	return "unknown";
}
