/*
 * resultstore.c - the store of finished asynchronous results that nobody
 * has read yet, so that an async request gives its request slot back as
 * soon as its answer is complete, not when someone reads it.
 *
 * Where the results go, and why there
 * ------------------------------------
 * A fixed area of the main shared-memory segment, sized at start-up by
 * opus.async_result_store_size (default 8 MB, 0 = no store: results stay in
 * their slots as before).  Not a table: the supervisor, which finishes
 * requests, is not connected to a database and must never wait on one, a
 * result would have to outlive the transactions of a table (and be WAL-
 * logged for nothing: ids do not survive a restart), and the logger already
 * shows how much a table write per request costs.  Not files: a result is
 * read once and is usually small (a few hundred bytes); a file per result
 * would cost a create, an fsync-less write and an unlink, and disk space
 * that must be bounded all the same.  Not dynamic shared memory: in
 * PostgreSQL 15 every backend would have to attach to it, and its bound
 * would be the same setting.  So: bytes cut into chunks of
 * OPUS_RESULT_CHUNK (1 kB), a result taking a chain of them (no
 * fragmentation: any free chunk serves), and a hash table from request id
 * to entry with at most one entry per chunk.
 *
 * Bounds (async.c applies the first one): a role whose unread results hold
 * its share of the chunks (the same fraction of the store as its share of
 * the async slot budget, half by default) cannot submit more (53000) until
 * it reads or cancels some; a result that finds no room when it finishes
 * (the store full, or larger than what is free) stays in its slot as
 * before the store existed: it counts against the async slot budget until
 * it is read, cancelled or expires.  Nothing finished is ever dropped for
 * want of room.  Entries expire after opus.async_retention like results in
 * slots.
 *
 * Locking rules
 * -------------
 * One LWLock (tranche "opus_pg results") protects everything here: the
 * table, the chunks and the free list.  It is held exclusively only to
 * copy one result in (the supervisor) or out (a reader) and to unlink it,
 * shared to look entries up; no other lock is taken while it is held.
 * An entry does not change between put and take (or drop), and at most one
 * backend takes it (under the exclusive lock).
 *
 * Order against the slots: the supervisor puts a result while it still
 * owns the RUNNING slot, and only then sets the slot FREE (relay.c).  A
 * backend that looks at the slot first and at the store second therefore
 * never misses a finished result.  If the slot was cancelled meanwhile, the
 * supervisor drops what it put.
 */
#include "postgres.h"

#include <limits.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/hsearch.h"

#include "opus_pg.h"

int			opus_async_result_store_kb = 8 * 1024;

typedef struct ResultStoreShared
{
	LWLock	   *lock;
	int			n_chunks;		/* 0 = no store */
	int			n_free;
	int			free_head;		/* first free chunk, -1 = none */
	int			n_entries;
	TimestampTz oldest_finish;	/* no entry finished before this (0: none) */
	int64		stored;			/* results put since start-up */
	int64		left_in_slot;	/* results that found no room */
	/* int32 next[n_chunks], MAXALIGNed, then the chunks follow */
} ResultStoreShared;

/* One unread result: its key is the request id. */
typedef struct ResultEntry
{
	uint64		request_id;
	Oid			userid;
	Oid			dbid;
	int			backend_pid;
	uint8		kind;
	bool		error;
	uint8		finish;
	TimestampTz submit_time;
	TimestampTz finish_time;
	int32		first_chunk;
	int32		n_chunks;
	uint32		data_len;		/* result bytes, then message, then detail */
	uint16		msg_len;
	uint16		detail_len;
	int32		n_prompt;
	int32		n_completion;
	int32		n_cached;
	double		queue_ms;
	double		ttft_ms;
	double		total_ms;
	int			model;
	int			served_model;
	int32		served_version;
	bool		tools;			/* the request had tool definitions */
	int			err_code;
} ResultEntry;

static ResultStoreShared *Store = NULL;
static HTAB *StoreHash = NULL;

/* Called from _PG_init: the store is sized once, at start-up. */
void
OpusDefineResultStoreSettings(bool preloading)
{
	if (!preloading)
		return;
	DefineCustomIntVariable("opus.async_result_store_size",
							"Shared memory for finished asynchronous results that nobody has read yet (0 = none).",
							"A finished result moves here and frees its request slot; a role may fill the same "
							"fraction of it as its share of opus.max_async_requests.",
							&opus_async_result_store_kb,
							8 * 1024, 0, 1024 * 1024,
							PGC_POSTMASTER,
							GUC_UNIT_KB,
							NULL, NULL, NULL);
}

static int
store_chunks_setting(void)
{
	return (int) ((int64) opus_async_result_store_kb * 1024 / OPUS_RESULT_CHUNK);
}

static Size
store_struct_size(int n_chunks)
{
	Size		size = MAXALIGN(sizeof(ResultStoreShared));

	size = add_size(size, MAXALIGN(mul_size(n_chunks, sizeof(int32))));
	return add_size(size, mul_size(n_chunks, OPUS_RESULT_CHUNK));
}

void
OpusResultStoreShmemRequest(void)
{
	int			n = store_chunks_setting();
	Size		size = store_struct_size(n);

	if (n > 0)
		size = add_size(size, hash_estimate_size(n, sizeof(ResultEntry)));
	RequestAddinShmemSpace(size);
	RequestNamedLWLockTranche("opus_pg results", 1);
}

static int32 *
chunk_next(void)
{
	return (int32 *) ((char *) Store + MAXALIGN(sizeof(ResultStoreShared)));
}

static char *
chunk_data(int c)
{
	char	   *base = (char *) chunk_next() + MAXALIGN((Size) Store->n_chunks * sizeof(int32));

	return base + (Size) c * OPUS_RESULT_CHUNK;
}

void
OpusResultStoreShmemInit(void)
{
	bool		found;
	int			n = store_chunks_setting();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	Store = ShmemInitStruct("opus_pg results", store_struct_size(n), &found);
	if (!found)
	{
		int32	   *next;
		int			c;

		memset(Store, 0, sizeof(ResultStoreShared));
		Store->lock = &(GetNamedLWLockTranche("opus_pg results"))->lock;
		Store->n_chunks = n;
		Store->n_free = n;
		Store->free_head = n > 0 ? 0 : -1;
		next = chunk_next();
		for (c = 0; c < n; c++)
			next[c] = c + 1 < n ? c + 1 : -1;
	}
	if (n > 0)
	{
		HASHCTL		info;

		memset(&info, 0, sizeof(info));
		info.keysize = sizeof(uint64);
		info.entrysize = sizeof(ResultEntry);
		StoreHash = ShmemInitHash("opus_pg results hash", n, n, &info,
								  HASH_ELEM | HASH_BLOBS);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Copy len bytes at offset off of e's chain from or to buf. */
static void
chain_copy(const ResultEntry *e, Size off, char *buf, Size len, bool to_store)
{
	int32	   *next = chunk_next();
	int			c = e->first_chunk;

	while (off >= OPUS_RESULT_CHUNK)
	{
		c = next[c];
		off -= OPUS_RESULT_CHUNK;
	}
	while (len > 0)
	{
		Size		n = Min(len, OPUS_RESULT_CHUNK - off);

		if (to_store)
			memcpy(chunk_data(c) + off, buf, n);
		else
			memcpy(buf, chunk_data(c) + off, n);
		buf += n;
		len -= n;
		off = 0;
		c = next[c];
	}
}

/* Unlink e: its chunks back to the free list, the entry out.  Exclusive lock held. */
static void
remove_entry(ResultEntry *e)
{
	int32	   *next = chunk_next();
	int			c = e->first_chunk;
	uint64		id = e->request_id;
	int			k;

	for (k = 0; k < e->n_chunks; k++)
	{
		int			nc = next[c];

		next[c] = Store->free_head;
		Store->free_head = c;
		c = nc;
	}
	Store->n_free += e->n_chunks;
	Store->n_entries--;
	(void) hash_search(StoreHash, &id, HASH_REMOVE, NULL);
}

/* True when the store exists (opus.async_result_store_size > 0 at start-up). */
bool
OpusResultStoreEnabled(void)
{
	return Store != NULL && Store->n_chunks > 0;
}

/*
 * Put the finished result of async slot `slot` into the store.  Caller:
 * the supervisor, owning the slot (RUNNING or SUBMITTED), with the result,
 * usage and error fields written; `error` as the slot would finish.
 * Returns false, storing nothing, when there is no room: the result then
 * stays in the slot.
 */
bool
OpusResultStorePut(OpusSlot *slot, bool error)
{
	uint32		data_len = error ? 0 : slot->result_len;
	uint16		msg_len = error ? (uint16) strnlen(slot->err_message, OPUS_PROTO_MSG_LEN - 1) : 0;
	uint16		detail_len = error ? (uint16) strnlen(slot->err_detail, OPUS_PROTO_MSG_LEN - 1) : 0;
	Size		total = (Size) data_len + msg_len + detail_len;
	int			need = (int) Max(1, (total + OPUS_RESULT_CHUNK - 1) / OPUS_RESULT_CHUNK);
	uint64		id = slot->request_id;
	ResultEntry *e;
	bool		found;
	int32	   *next;
	int			k;
	int			c;

	if (!OpusResultStoreEnabled())
		return false;
	LWLockAcquire(Store->lock, LW_EXCLUSIVE);
	if (need > Store->n_free || Store->n_entries >= Store->n_chunks)
	{
		Store->left_in_slot++;
		LWLockRelease(Store->lock);
		return false;
	}
	e = hash_search(StoreHash, &id, HASH_ENTER_NULL, &found);
	if (e == NULL || found)
	{
		/* cannot happen: ids are never reused, and entries <= chunks */
		Store->left_in_slot++;
		LWLockRelease(Store->lock);
		return false;
	}
	e->userid = slot->userid;
	e->dbid = slot->dbid;
	e->backend_pid = slot->backend_pid;
	e->kind = slot->kind;
	e->error = error;
	e->finish = slot->finish;
	e->submit_time = slot->submit_time;
	e->finish_time = slot->finish_time;
	e->data_len = data_len;
	e->msg_len = msg_len;
	e->detail_len = detail_len;
	e->n_prompt = slot->n_prompt;
	e->n_completion = slot->n_completion;
	e->n_cached = slot->n_cached;
	e->queue_ms = slot->queue_ms;
	e->ttft_ms = slot->ttft_ms;
	e->total_ms = slot->total_ms;
	e->model = slot->model;
	e->served_model = slot->served_model;
	e->served_version = slot->served_version;
	e->tools = slot->tools;
	e->err_code = slot->err_code;
	/* take `need` chunks off the free list, in order */
	next = chunk_next();
	e->first_chunk = Store->free_head;
	e->n_chunks = need;
	c = Store->free_head;
	for (k = 1; k < need; k++)
		c = next[c];
	Store->free_head = next[c];
	next[c] = -1;
	Store->n_free -= need;
	Store->n_entries++;
	Store->stored++;
	if (Store->oldest_finish == 0 || e->finish_time < Store->oldest_finish)
		Store->oldest_finish = e->finish_time;
	if (data_len > 0)
		chain_copy(e, 0, OpusSlotBuf(slot), data_len, true);
	if (msg_len > 0)
		chain_copy(e, data_len, slot->err_message, msg_len, true);
	if (detail_len > 0)
		chain_copy(e, (Size) data_len + msg_len, slot->err_detail, detail_len, true);
	LWLockRelease(Store->lock);
	return true;
}

/*
 * Look request `id` up.  Returns false if the store does not hold it; else
 * fills what is not NULL of its role, kind, whether it failed.
 */
bool
OpusResultStoreLookup(uint64 id, Oid *userid, uint8 *kind, bool *error)
{
	ResultEntry *e;
	bool		got = false;

	if (!OpusResultStoreEnabled())
		return false;
	LWLockAcquire(Store->lock, LW_SHARED);
	e = hash_search(StoreHash, &id, HASH_FIND, NULL);
	if (e != NULL)
	{
		got = true;
		if (userid)
			*userid = e->userid;
		if (kind)
			*kind = e->kind;
		if (error)
			*error = e->error;
	}
	LWLockRelease(Store->lock);
	return got;
}

/*
 * Take result `id` out of the store (the caller checked access): as
 * OpusCollectResult does for a slot, returns 0 and fills *res (data
 * palloc'd in the current context), or the error code with message and
 * detail (OPUS_PROTO_MSG_LEN bytes each).  *found is false, and nothing
 * filled, if the store does not hold it (read or dropped meanwhile).
 */
int
OpusResultStoreTake(uint64 id, OpusResult *res, char *err_message, char *err_detail,
					bool *found)
{
	ResultEntry *e;
	int			err_code = 0;

	*found = false;
	if (!OpusResultStoreEnabled())
		return 0;
	memset(res, 0, sizeof(*res));
	LWLockAcquire(Store->lock, LW_EXCLUSIVE);
	e = hash_search(StoreHash, &id, HASH_FIND, NULL);
	if (e == NULL)
	{
		LWLockRelease(Store->lock);
		return 0;
	}
	*found = true;
	res->request_id = id;
	if (e->error || e->err_code != 0)
	{
		err_code = e->err_code != 0 ? e->err_code : OPUS_PROTO_ERR_INTERNAL;
		chain_copy(e, e->data_len, err_message, e->msg_len, false);
		err_message[e->msg_len] = '\0';
		chain_copy(e, (Size) e->data_len + e->msg_len, err_detail, e->detail_len, false);
		err_detail[e->detail_len] = '\0';
		if (e->err_code == 0)
		{
			strlcpy(err_message, "opus request failed", OPUS_PROTO_MSG_LEN);
			err_detail[0] = '\0';
		}
	}
	else
	{
		/* palloc under the lock: an out-of-memory error releases it */
		res->len = e->data_len;
		res->data = palloc(res->len + 1);
		chain_copy(e, 0, res->data, res->len, false);
		res->data[res->len] = '\0';
		res->finish = e->finish;
		res->n_prompt = e->n_prompt;
		res->n_completion = e->n_completion;
		res->n_cached = e->n_cached;
		res->queue_ms = e->queue_ms;
		res->ttft_ms = e->ttft_ms;
		res->total_ms = e->total_ms;
		res->model = e->model;
		res->served_model = e->served_model;
		res->served_version = e->served_version;
		res->tools = e->tools;
	}
	remove_entry(e);
	LWLockRelease(Store->lock);
	return err_code;
}

/* Drop result `id` (opus_cancel, a cancelled slot).  False if not held. */
bool
OpusResultStoreDrop(uint64 id)
{
	ResultEntry *e;

	if (!OpusResultStoreEnabled())
		return false;
	LWLockAcquire(Store->lock, LW_EXCLUSIVE);
	e = hash_search(StoreHash, &id, HASH_FIND, NULL);
	if (e != NULL)
		remove_entry(e);
	LWLockRelease(Store->lock);
	return e != NULL;
}

/* Drop results finished more than retention_ms before now. */
void
OpusResultStoreExpire(TimestampTz now, int64 retention_ms)
{
	HASH_SEQ_STATUS seq;
	ResultEntry *e;
	int			ms = (int) Min(retention_ms, INT_MAX);
	TimestampTz oldest = 0;

	if (!OpusResultStoreEnabled())
		return;
	LWLockAcquire(Store->lock, LW_SHARED);
	/* nothing stored, or nothing old enough: no scan */
	if (Store->n_entries == 0 ||
		!TimestampDifferenceExceeds(Store->oldest_finish, now, ms))
	{
		LWLockRelease(Store->lock);
		return;
	}
	LWLockRelease(Store->lock);
	LWLockAcquire(Store->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, StoreHash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		/* dynahash allows removing the entry just returned */
		if (TimestampDifferenceExceeds(e->finish_time, now, ms))
			remove_entry(e);
		else if (oldest == 0 || e->finish_time < oldest)
			oldest = e->finish_time;
	}
	Store->oldest_finish = oldest;
	LWLockRelease(Store->lock);
}

/*
 * Chunks the unread results of `role` hold, and (*n_chunks) the store's
 * size in chunks (0 = no store).
 */
int
OpusResultStoreRoleChunks(Oid role, int *n_chunks)
{
	HASH_SEQ_STATUS seq;
	ResultEntry *e;
	int			n = 0;

	*n_chunks = OpusResultStoreEnabled() ? Store->n_chunks : 0;
	if (*n_chunks == 0 || Store->n_entries == 0)
		return 0;
	LWLockAcquire(Store->lock, LW_SHARED);
	hash_seq_init(&seq, StoreHash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (e->userid == role)
			n += e->n_chunks;
	}
	LWLockRelease(Store->lock);
	return n;
}

/* Unread results of database dbid (the DROP EXTENSION guard). */
int
OpusResultStoreCountDb(Oid dbid)
{
	HASH_SEQ_STATUS seq;
	ResultEntry *e;
	int			n = 0;

	if (!OpusResultStoreEnabled() || Store->n_entries == 0)
		return 0;
	LWLockAcquire(Store->lock, LW_SHARED);
	hash_seq_init(&seq, StoreHash);
	while ((e = hash_seq_search(&seq)) != NULL)
		n += e->dbid == dbid;
	LWLockRelease(Store->lock);
	return n;
}

/*
 * The unread results now stored (palloc'd array, *n of them), for the
 * opus_async view.
 */
OpusStoredResult *
OpusResultStoreList(int *n)
{
	HASH_SEQ_STATUS seq;
	ResultEntry *e;
	OpusStoredResult *out;
	int			k = 0;
	int			cap;

	*n = 0;
	if (!OpusResultStoreEnabled())
		return NULL;
	LWLockAcquire(Store->lock, LW_SHARED);
	cap = Max(Store->n_entries, 1);
	out = palloc(sizeof(OpusStoredResult) * cap);
	hash_seq_init(&seq, StoreHash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (k >= cap)
		{
			hash_seq_term(&seq);
			break;
		}
		out[k].request_id = e->request_id;
		out[k].userid = e->userid;
		out[k].backend_pid = e->backend_pid;
		out[k].kind = e->kind;
		out[k].error = e->error || e->err_code != 0;
		out[k].submit_time = e->submit_time;
		out[k].finish_time = e->finish_time;
		k++;
	}
	LWLockRelease(Store->lock);
	*n = k;
	return out;
}
