/*
 * supervisor.c - the opus_pg supervisor background worker.
 *
 * One supervisor per server, one engine process per model (the default
 * model, opus.model, and each of opus.models; see models.c and
 * docs/models.md).  It spawns each engine (`opus_engine serve --fd 3`,
 * fork + exec, one end of a socketpair inherited), relays requests from
 * the shared-memory slots to the engine of the model the slot names and
 * results back, and watches every engine on its own: if one exits for any
 * reason, every request it held fails with 58000, the exit is counted and
 * that engine is started again with exponential backoff (0.5 s doubling to
 * 30 s; reset after 30 s of health).  A start that fails before READY
 * (missing model, bad file, failed load) puts the model in FAILED: queued
 * and new requests for it fail at once with the reason, and the start is
 * retried on the same backoff, so a broken model never makes a restart
 * storm.  Other models never notice.
 *
 * Each engine process gets a KV arena of its own (a memfd sized from the
 * model's kv_cache_size, never PostgreSQL's shared memory), created here
 * and handed to the engine as fd 4 (`--kv-fd 4`); it is kept across
 * restarts of that engine and closed when the engine goes for good (a
 * drained old version, a removed model).  If the arena cannot be created
 * the engine runs with private memory (logged once).
 *
 * Live swap (opus_model_swap / opus_model_rollback): a model has two
 * engine places, procs[cur] (serving) and procs[1 - cur] (the candidate
 * being loaded and warmed up, or the old version draining).  A candidate
 * that reaches READY runs the canary prompts (warm-up); when all complete
 * without error before opus.model_warmup_timeout, cur flips: new requests
 * go to the new version, requests already sent finish on the old one,
 * which is stopped once it holds none.  A candidate that fails to load,
 * fails a canary, times out or dies is stopped and the old version keeps
 * serving; nothing retries.  For opus.model_probation after a switch the
 * old file is the rollback target: if the new engine dies, or half of at
 * least 8 requests fail, the supervisor swaps back by itself.
 *
 * The engine process never touches PostgreSQL shared memory: the child
 * execs immediately after fork, doing only async-signal-safe system calls
 * in between (fd set-up, setpgid, PR_SET_PDEATHSIG, signal reset).
 *
 * Slot ownership follows the rules at the top of shmem.c.  Local state:
 * sent_id[i] is the id of the request an engine holds for slot i whose
 * results still matter (0 = none) and sent_proc[i] that engine; frames for
 * any other id, or from another engine, are dropped.  cancel_sent[i] /
 * overflowed[i] track a CANCEL already sent and a result that did not fit
 * the slot buffer (the slot then waits for the engine's DONE before
 * reporting the error).  Warm-up requests use ids whose low 32 bits are 0
 * (no slot has that index).
 *
 * I/O with the engines is non-blocking and framed (src/protocol.h):
 * partial reads and writes are buffered here, every frame an engine sends
 * is validated, and a malformed one gets that engine killed and restarted.
 */
#include "postgres.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "opus_experts.h"
#include "opus_pg.h"
#include "opus_tenants.h"
#include "opus_stats.h"

#define BACKOFF_MIN_MS		500
#define BACKOFF_MAX_MS		30000
#define HEALTHY_AFTER_MS	30000
#define ENGINE_FD			3
#define KV_ARENA_FD			4
#define N_CANARIES			3
#define PROBATION_MIN_REQUESTS 8

/* The canary prompts a new version must answer before it serves, by default. */
static const char *const canary_prompts[N_CANARIES] = {
	"The capital of France is",
	"1, 2, 3, 4,",
	"Hello",
};

/* Effective settings of a model's engine (declaration + opus.* defaults). */
typedef struct EngineConfig
{
	char		path[OPUS_PROTO_PATH_LEN];	/* resolved model file */
	char		device[OPUS_PROTO_SHORT_LEN];
	int			threads;
	int			kv_cache_mb;
	int			kv_cache_type;
	int			max_batch_tokens;
} EngineConfig;

/* One engine process as the supervisor sees it. */
typedef struct EngineProc
{
	int			model;			/* model entry index */
	pid_t		pid;			/* 0 = none */
	pgsocket	sock;			/* PGINVALID_SOCKET = none */
	bool		ready;
	TimestampTz spawned_at;
	TimestampTz ready_at;
	bool		got_fatal;
	int			fatal_code;
	char		fatal_msg[OPUS_PROTO_MSG_LEN];
	EngineConfig cfg;			/* what it was started with */
	struct opus_proto_ready info;	/* valid when ready */
	int			kv_fd;			/* its KV arena, -1 = none */
	int64		kv_fd_bytes;
	bool		kv_tried;
	/* warm-up (a swap's candidate) */
	bool		warming;
	int			warm_done;
	int			warm_n;			/* canaries sent */
	char		warm_text[OPUS_MAX_CANARIES][OPUS_CANARY_LEN];	/* their outputs so far */
	size_t		warm_len[OPUS_MAX_CANARIES];
	TimestampTz warm_deadline;
	/* wait set */
	int			wes_pos;
	bool		wes_write;
	/* liveness (check_engine_alive) */
	TimestampTz heard_at;		/* last bytes received */
	TimestampTz ping_at;		/* outstanding PING sent then; 0 = none */
	TimestampTz progress_at;	/* last sign of life: bytes, or CPU time used */
	int64		cpu_ticks;		/* engine CPU time at progress_at, -1 = unknown */
	/* received bytes not yet parsed */
	char	   *in;
	size_t		in_len;
	size_t		in_cap;
	/* bytes to send: out[out_off .. out_len) */
	char	   *out;
	size_t		out_off;
	size_t		out_len;
	size_t		out_cap;
} EngineProc;

/* A model entry as the supervisor runs it (shared state: OpusModel(i)). */
typedef struct ModelCtl
{
	bool		declared;		/* entry in use */
	bool		removing;		/* dropped from opus.models: drain, then free */
	uint32		epoch;
	OpusModelDecl decl;
	char		override_path[OPUS_PROTO_PATH_LEN]; /* swapped-in file, "" = decl's */
	EngineProc	procs[2];
	int			cur;			/* procs[cur] serves */
	EngineConfig applied;		/* the serving engine's settings at its start */
	bool		reload_pending; /* restart the serving engine when idle */
	int			backoff_ms;
	TimestampTz next_start_at;
	char		last_logged[OPUS_PROTO_MSG_LEN];
	/* swap */
	OpusSwapState swap;
	bool		swap_is_rollback;
	char		swap_why[OPUS_PROTO_MSG_LEN];	/* an automatic rollback's reason */
	char		note[OPUS_PROTO_MSG_LEN];	/* last_error to show once ready again */
	TimestampTz swap_started;
	EngineConfig swap_cfg;		/* what the candidate runs */
	bool		drained_first;	/* the serving engine was stopped for the swap */
	int			n_canaries;		/* this swap's own canaries, 0 = the defaults */
	OpusCanary	canaries[OPUS_MAX_CANARIES];
	char		prev_path[OPUS_PROTO_PATH_LEN];
	TimestampTz probation_until;
	int64		probation_done;
	int64		probation_errors;
	/* fallback under overload */
	int			fallback;		/* model entry, -1 = none */
	double		ttft_ewma;		/* recent time to first token (ms) */
	TimestampTz last_done;
	bool		overloaded;
} ModelCtl;

static ModelCtl models[OPUS_MAX_MODELS];
static uint64 *sent_id;
static EngineProc **sent_proc;
static bool *cancel_sent;
static bool *overflowed;
static TimestampTz *sent_at;	/* when slot i went to its engine */
static bool *first_token;		/* slot i's request has produced a token */
static WaitEventSet *wes = NULL;
static bool wes_dirty = true;

static void engine_lost(EngineProc *p, bool kill_now, const char *reason);

#define PROC_IS_SERVING(p)	(&models[(p)->model].procs[models[(p)->model].cur] == (p))

static void
handle_sigchld(SIGNAL_ARGS)
{
	int			save_errno = errno;

	SetLatch(MyLatch);
	errno = save_errno;
}

void
OpusRegisterSupervisor(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "opus_pg");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "OpusSupervisorMain");
	snprintf(worker.bgw_name, BGW_MAXLEN, "opus_pg supervisor");
	snprintf(worker.bgw_type, BGW_MAXLEN, "opus_pg supervisor");
	worker.bgw_main_arg = (Datum) 0;
	worker.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&worker);
}

/*
 * Resolve opus.model: a value containing '/' is a path (relative paths are
 * relative to the data directory); anything else is the name of an
 * installed model, <sharedir>/extension/opus_pg/models/<name>[.gguf].
 * Returns false if the result does not fit.
 */
bool
OpusResolveModelPath(const char *setting, char *out, size_t outlen)
{
	char		sharedir[MAXPGPATH];
	int			n;

	if (strchr(setting, '/') != NULL)
		n = snprintf(out, outlen, "%s", setting);
	else
	{
		size_t		len = strlen(setting);
		bool		has_ext = len > 5 && strcmp(setting + len - 5, ".gguf") == 0;

		get_share_path(my_exec_path, sharedir);
		n = snprintf(out, outlen, "%s/extension/opus_pg/models/%s%s",
					 sharedir, setting, has_ext ? "" : ".gguf");
	}
	return n > 0 && (size_t) n < outlen;
}

/* The engine binary: opus.engine_path, or opus_engine next to postgres. */
static void
resolve_engine_path(char *out, size_t outlen)
{
	char		bindir[MAXPGPATH];
	char	   *slash;

	if (opus_engine_path && opus_engine_path[0] != '\0')
	{
		snprintf(out, outlen, "%s", opus_engine_path);
		return;
	}
	strlcpy(bindir, my_exec_path, sizeof(bindir));
	slash = strrchr(bindir, '/');
	if (slash)
		*slash = '\0';
	snprintf(out, outlen, "%s/opus_engine", bindir);
}

/* ---------------------------------------------------------------------
 * Model status in shared memory
 * --------------------------------------------------------------------- */

static void
set_model_state(int m, OpusEngineState state)
{
	OpusEngineStatus *e = OpusModel(m);

	SpinLockAcquire(&e->mutex);
	e->state = state;
	e->engine_pid = models[m].procs[models[m].cur].pid;
	SpinLockRelease(&e->mutex);
	ConditionVariableBroadcast(&e->cv);
}

static void
publish_swap(int m)
{
	ModelCtl   *mc = &models[m];
	OpusEngineStatus *e = OpusModel(m);

	SpinLockAcquire(&e->mutex);
	e->swap_state = mc->swap;
	strlcpy(e->prev_path, mc->prev_path, sizeof(e->prev_path));
	e->probation_until = mc->probation_until;
	SpinLockRelease(&e->mutex);
	ConditionVariableBroadcast(&e->cv);
}

/* The name a model goes by in the log. */
static const char *
model_label(int m)
{
	static char buf[OPUS_MODEL_NAME_LEN + 16];

	if (m == 0)
		return "default";
	snprintf(buf, sizeof(buf), "%s", models[m].decl.name);
	return buf;
}

/*
 * Record why a model cannot serve; callers get this error until the next
 * successful start.  Logged once per distinct message.
 */
static void
set_model_failed(int m, int code, const char *message, const char *detail)
{
	ModelCtl   *mc = &models[m];
	OpusEngineStatus *e = OpusModel(m);

	SpinLockAcquire(&e->mutex);
	e->state = OPUS_ENGINE_FAILED;
	e->engine_pid = 0;
	e->last_err_code = code;
	strlcpy(e->last_error, message, sizeof(e->last_error));
	strlcpy(e->last_error_detail, detail ? detail : "", sizeof(e->last_error_detail));
	SpinLockRelease(&e->mutex);
	ConditionVariableBroadcast(&e->cv);

	if (strcmp(mc->last_logged, message) != 0)
	{
		ereport(LOG,
				(errmsg("opus_pg: %s", message),
				 detail && detail[0] ? errdetail("%s", detail) : 0,
				 errhint("The engine is retried with backoff (up to %d s); requests fail until it starts.",
						 BACKOFF_MAX_MS / 1000)));
		strlcpy(mc->last_logged, message, sizeof(mc->last_logged));
	}
}

static void
schedule_restart(int m)
{
	ModelCtl   *mc = &models[m];

	mc->next_start_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), mc->backoff_ms);
	mc->backoff_ms = Min(mc->backoff_ms * 2, BACKOFF_MAX_MS);
}

/* ---------------------------------------------------------------------
 * Slots
 * --------------------------------------------------------------------- */

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
	slot->finish_time = GetCurrentTimestamp();
	pg_write_barrier();
	SpinLockAcquire(&slot->mutex);
	if (slot->state == OPUS_SLOT_SUBMITTED || slot->state == OPUS_SLOT_RUNNING)
		slot->state = OPUS_SLOT_ERROR;
	else if (slot->state == OPUS_SLOT_CANCELLED)
		slot->state = OPUS_SLOT_FREE;
	SpinLockRelease(&slot->mutex);
	ConditionVariableBroadcast(&slot->cv);
	sent_id[i] = 0;
	sent_proc[i] = NULL;
	cancel_sent[i] = false;
	overflowed[i] = false;
}

/* Fail every request engine p holds (it died or is being replaced). */
static void
fail_in_flight(EngineProc *p, int code, const char *message, const char *detail)
{
	int			i;

	for (i = 0; i < OpusShared->n_slots; i++)
	{
		if (sent_id[i] != 0 && sent_proc[i] == p)
			fail_slot(i, code, message, detail);
	}
}

static int
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
static void
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

/* ---------------------------------------------------------------------
 * Output buffers
 * --------------------------------------------------------------------- */

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

static void
send_frame(EngineProc *p, uint16 type, uint64 id, const void *payload, size_t len)
{
	out_reserve(p, OPUS_PROTO_HEADER_SIZE + len);
	opus_proto_encode_header((uint8_t *) p->out + p->out_len, (uint32_t) len, type, id);
	if (len > 0)
		memcpy(p->out + p->out_len + OPUS_PROTO_HEADER_SIZE, payload, len);
	p->out_len += OPUS_PROTO_HEADER_SIZE + len;
}

/* Write what the socket takes now.  False on a write error (engine gone). */
static bool
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

/* ---------------------------------------------------------------------
 * Spawning and reaping engines
 * --------------------------------------------------------------------- */

/*
 * fork + exec the engine with `sock` as fd 3.  In the child only
 * async-signal-safe calls happen before exec, and all signals stay blocked
 * until the handlers are reset, so no PostgreSQL code runs in the child.
 */
static pid_t
spawn_engine(const char *path, int child_sock, int kv_fd)
{
	char	   *argv[7];
	sigset_t	all,
				old;
	pid_t		parent = getpid();
	pid_t		pid;

	argv[0] = (char *) path;
	argv[1] = "serve";
	argv[2] = "--fd";
	argv[3] = "3";
	argv[4] = kv_fd >= 0 ? "--kv-fd" : NULL;
	argv[5] = "4";
	argv[6] = NULL;

	fflush(NULL);
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid = fork();
	if (pid == 0)
	{
		struct sigaction dfl;
		int			sig;
		int			fd;

		/* move both fds out of the way of 3 and 4 first */
		if (kv_fd >= 0 && kv_fd <= KV_ARENA_FD &&
			(kv_fd = fcntl(kv_fd, F_DUPFD, KV_ARENA_FD + 1)) < 0)
			_exit(126);
		if (child_sock == KV_ARENA_FD &&
			(child_sock = fcntl(child_sock, F_DUPFD, KV_ARENA_FD + 1)) < 0)
			_exit(126);
		if (kv_fd >= 0 && dup2(kv_fd, KV_ARENA_FD) < 0)
			_exit(126);
		if (child_sock == ENGINE_FD)
		{
			if (fcntl(ENGINE_FD, F_SETFD, 0) < 0)
				_exit(126);
		}
		else if (dup2(child_sock, ENGINE_FD) < 0)
			_exit(126);
#ifdef SYS_close_range
		if (syscall(SYS_close_range, KV_ARENA_FD + 1, ~0U, 0) < 0)
#endif
		{
			long		maxfd = sysconf(_SC_OPEN_MAX);

			for (fd = KV_ARENA_FD + 1; fd < (maxfd > 0 ? maxfd : 1024); fd++)
				(void) close(fd);
		}
		if (kv_fd < 0)
			(void) close(KV_ARENA_FD);
		fd = open("/dev/null", O_RDONLY);
		if (fd >= 0 && fd != 0)
		{
			(void) dup2(fd, 0);
			(void) close(fd);
		}
		(void) setpgid(0, 0);
		(void) prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(125);
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		sigemptyset(&dfl.sa_mask);
		for (sig = 1; sig < NSIG; sig++)
			(void) sigaction(sig, &dfl, NULL);
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		execv(path, argv);
		_exit(127);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return pid;
}

static void
describe_exit(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "was killed by signal %d: %s",
				 WTERMSIG(status), pg_strsignal(WTERMSIG(status)));
	else
		snprintf(buf, len, "ended with wait status %d", status);
}

/* Every engine socket plus the latch and postmaster death. */
static void
rebuild_wait_set(void)
{
	int			m,
				k,
				n = 2;

	if (wes)
		FreeWaitEventSet(wes);
	for (m = 0; m < OPUS_MAX_MODELS; m++)
		for (k = 0; k < 2; k++)
			n += models[m].procs[k].sock != PGINVALID_SOCKET;
	wes = CreateWaitEventSet(TopMemoryContext, n);
	AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (m = 0; m < OPUS_MAX_MODELS; m++)
		for (k = 0; k < 2; k++)
		{
			EngineProc *p = &models[m].procs[k];

			p->wes_pos = -1;
			p->wes_write = false;
			if (p->sock != PGINVALID_SOCKET)
				p->wes_pos = AddWaitEventToSet(wes, WL_SOCKET_READABLE, p->sock, NULL, p);
		}
	wes_dirty = false;
}

static void
close_arena(EngineProc *p)
{
	if (p->kv_fd >= 0)
		close(p->kv_fd);
	p->kv_fd = -1;
	p->kv_fd_bytes = 0;
	p->kv_tried = false;
}

/*
 * Stop engine p (if any) and describe how it ended.  Closing the socket
 * makes a healthy engine exit 0; if it has not exited after `grace_ms`,
 * SIGKILL.  Blocks at most grace_ms + a little.
 */
static void
stop_engine(EngineProc *p, bool kill_now, int grace_ms, char *how, size_t howlen)
{
	int			status = 0;
	int			waited = 0;
	bool		reaped = false;

	how[0] = '\0';
	if (p->sock != PGINVALID_SOCKET)
	{
		close(p->sock);
		p->sock = PGINVALID_SOCKET;
	}
	p->in_len = 0;
	p->out_off = p->out_len = 0;
	if (p->pid > 0)
	{
		if (kill_now)
			(void) kill(p->pid, SIGKILL);
		for (;;)
		{
			pid_t		r = waitpid(p->pid, &status, WNOHANG);

			if (r == p->pid || (r < 0 && errno != EINTR))
			{
				reaped = (r == p->pid);
				break;
			}
			if (waited >= grace_ms)
			{
				(void) kill(p->pid, SIGKILL);
				while ((r = waitpid(p->pid, &status, 0)) < 0 && errno == EINTR)
					;
				reaped = (r == p->pid);
				break;
			}
			pg_usleep(1000L);
			waited++;
		}
		if (reaped)
		{
			char		desc[128];

			describe_exit(status, desc, sizeof(desc));
			snprintf(how, howlen, "The engine process (PID %d) %s.", (int) p->pid, desc);
		}
		else
			snprintf(how, howlen, "The engine process (PID %d) could not be waited for.", (int) p->pid);
	}
	p->pid = 0;
	p->ready = false;
	p->warming = false;
	wes_dirty = true;
}

/* Publish a serving engine's READY description in the model's entry. */
static void
publish_ready(int m, EngineProc *p)
{
	OpusEngineStatus *e = OpusModel(m);

	SpinLockAcquire(&e->mutex);
	e->model = p->info;
	e->ever_ready = true;
	e->ready_at = p->ready_at;
	e->started_at = p->spawned_at;
	strlcpy(e->model_path, p->cfg.path, sizeof(e->model_path));
	e->threads = p->cfg.threads;
	e->kv_bytes = (int64) p->cfg.kv_cache_mb * 1024 * 1024;
	e->last_err_code = 0;
	strlcpy(e->last_error, models[m].note, sizeof(e->last_error));
	e->last_error_detail[0] = '\0';
	memset(&e->stats, 0, sizeof(e->stats));
	SpinLockRelease(&e->mutex);
	models[m].note[0] = '\0';
	if (m == 0)
	{
		OpusStatsEngineReady();
		OpusExpertsEngineReady(&p->info);
	}
	set_model_state(m, OPUS_ENGINE_READY);
	models[m].last_logged[0] = '\0';
}

/*
 * A swap ended without switching (the candidate failed to load, failed
 * its warm-up, timed out or died).  The serving version keeps serving;
 * the entry's last_error says why; nothing retries.
 */
static void
swap_failed(int m, const char *message, const char *detail)
{
	ModelCtl   *mc = &models[m];
	EngineProc *cand = &mc->procs[1 - mc->cur];
	OpusEngineStatus *e = OpusModel(m);
	char		how[OPUS_PROTO_MSG_LEN];

	if (cand->pid > 0 || cand->sock != PGINVALID_SOCKET)
		stop_engine(cand, true, 200, how, sizeof(how));
	fail_in_flight(cand, OPUS_PG_ERR_ENGINE_DIED, "opus engine terminated", message);
	close_arena(cand);
	mc->swap = OPUS_SWAP_NONE;
	if (mc->drained_first)
	{
		/* the old version was stopped for this swap: start it again now */
		mc->drained_first = false;
		mc->next_start_at = 0;
		mc->backoff_ms = BACKOFF_MIN_MS;
	}
	SpinLockAcquire(&e->mutex);
	e->swap_path[0] = '\0';
	strlcpy(e->last_error, message, sizeof(e->last_error));
	strlcpy(e->last_error_detail, detail ? detail : "", sizeof(e->last_error_detail));
	SpinLockRelease(&e->mutex);
	publish_swap(m);
	ereport(LOG,
			(errmsg("opus_pg: model \"%s\": %s; the serving version keeps serving", model_label(m), message),
			 detail && detail[0] ? errdetail("%s", detail) : 0));
}

static void start_swap(int m, const char *path, bool is_rollback, const char *why);

/*
 * Engine p is gone or must go (EOF, I/O error, protocol error, exit seen
 * by waitpid).  Fails what it held, records why.  A serving engine is
 * restarted with backoff (or, in probation after a swap, replaced by the
 * previous version); a candidate ends its swap; a draining one just ends.
 */
static void
engine_lost(EngineProc *p, bool kill_now, const char *reason)
{
	int			m = p->model;
	ModelCtl   *mc = &models[m];
	OpusEngineStatus *e = OpusModel(m);
	char		how[OPUS_PROTO_MSG_LEN];
	char		detail[OPUS_PROTO_MSG_LEN];
	bool		was_ready = p->ready;
	bool		got_fatal = p->got_fatal;
	bool		serving = PROC_IS_SERVING(p);
	TimestampTz now;

	stop_engine(p, kill_now, 200, how, sizeof(how));
	now = GetCurrentTimestamp();
	if (reason && how[0])
		snprintf(detail, sizeof(detail), "%s %s", reason, how);
	else if (reason)
		strlcpy(detail, reason, sizeof(detail));
	else
		strlcpy(detail, how[0] ? how : "The engine closed its socket.", sizeof(detail));

	fail_in_flight(p, OPUS_PG_ERR_ENGINE_DIED, "opus engine terminated", detail);

	if (!serving)
	{
		if (mc->swap == OPUS_SWAP_LOADING || mc->swap == OPUS_SWAP_WARMING)
		{
			char		msg[OPUS_PROTO_MSG_LEN];

			snprintf(msg, sizeof(msg), "swap to \"%s\" failed: the new version's engine %s",
					 p->cfg.path, got_fatal ? "could not load the model" : "exited");
			swap_failed(m, msg, got_fatal ? p->fatal_msg : detail);
		}
		else
		{
			/* the old version died while draining: its requests failed above */
			close_arena(p);
			mc->swap = OPUS_SWAP_NONE;
			publish_swap(m);
			ereport(LOG,
					(errmsg("opus_pg: model \"%s\": the old version ended while draining", model_label(m)),
					 errdetail("%s", detail)));
		}
		return;
	}

	if (m == 0)
		OpusStatsEngineLost();
	SpinLockAcquire(&e->mutex);
	e->restarts++;
	strlcpy(e->last_exit, detail, sizeof(e->last_exit));
	SpinLockRelease(&e->mutex);

	/* In probation after a swap: go back to the previous version. */
	if (mc->prev_path[0] != '\0' && now < mc->probation_until &&
		mc->swap == OPUS_SWAP_NONE && !mc->removing)
	{
		char		why[OPUS_PROTO_MSG_LEN];

		snprintf(why, sizeof(why), "the new version's engine died during probation: %s", detail);
		ereport(LOG,
				(errmsg("opus_pg: model \"%s\": rolling back to \"%s\"", model_label(m), mc->prev_path),
				 errdetail("%s", why)));
		strlcpy(mc->override_path, mc->prev_path, sizeof(mc->override_path));
		mc->prev_path[0] = '\0';
		mc->probation_until = 0;
		mc->backoff_ms = BACKOFF_MIN_MS;
		mc->next_start_at = 0;
		snprintf(mc->note, sizeof(mc->note), "rolled back: %s", why);
		SpinLockAcquire(&e->mutex);
		e->rollbacks++;
		e->version++;
		strlcpy(e->last_error, mc->note, sizeof(e->last_error));
		SpinLockRelease(&e->mutex);
		publish_swap(m);
		set_model_state(m, OPUS_ENGINE_BACKOFF);
		return;
	}

	if (was_ready)
	{
		if (TimestampDifferenceExceeds(p->ready_at, now, HEALTHY_AFTER_MS))
			mc->backoff_ms = BACKOFF_MIN_MS;
		if (m == 0)
			ereport(LOG,
					(errmsg("opus_pg: engine terminated; restarting in %d ms", mc->backoff_ms),
					 errdetail("%s", detail)));
		else
			ereport(LOG,
					(errmsg("opus_pg: engine of model \"%s\" terminated; restarting in %d ms",
							model_label(m), mc->backoff_ms),
					 errdetail("%s", detail)));
		set_model_state(m, OPUS_ENGINE_BACKOFF);
	}
	else if (got_fatal)
	{
		char		msg[OPUS_PROTO_MSG_LEN];

		snprintf(msg, sizeof(msg), "opus engine could not load model \"%s\"", p->cfg.path);
		set_model_failed(m, p->fatal_code == OPUS_PROTO_ERR_NOT_FOUND ?
						 OPUS_PG_ERR_MODEL_MISSING : OPUS_PG_ERR_ENGINE_DOWN,
						 msg, p->fatal_msg);
	}
	else
		set_model_failed(m, OPUS_PG_ERR_ENGINE_DOWN,
						 "opus engine exited during start-up", detail);
	schedule_restart(m);
}

/*
 * Give engine p a KV arena of `bytes`: an anonymous memory file allocated
 * up front, so that a machine without the memory says so here.  Kept for
 * restarts of the same size.  On failure the engine uses private memory.
 */
static void
ensure_kv_arena(EngineProc *p, int64 bytes)
{
	int			fd;
	int			rc;

	if (p->kv_fd >= 0 && p->kv_fd_bytes == bytes)
		return;
	if (p->kv_fd >= 0)
		close_arena(p);
	if (p->kv_tried)
		return;
	p->kv_tried = true;
	fd = memfd_create("opus_pg kv cache", MFD_CLOEXEC);
	if (fd < 0)
	{
		ereport(LOG,
				(errmsg("opus_pg: could not create the shared KV cache arena: %m"),
				 errdetail("The engine keeps its KV cache in private memory.")));
		return;
	}
	if (ftruncate(fd, (off_t) bytes) != 0)
		rc = errno;
	else
		rc = posix_fallocate(fd, 0, (off_t) bytes);
	if (rc != 0)
	{
		close(fd);
		ereport(LOG,
				(errmsg("opus_pg: could not allocate a shared KV cache arena of %lld bytes: %s",
						(long long) bytes, strerror(rc)),
				 errdetail("The engine keeps its KV cache in private memory.")));
		return;
	}
	p->kv_fd = fd;
	p->kv_fd_bytes = bytes;
}

/* Models declared now (the default plus opus.models). */
static int
n_declared(void)
{
	int			m,
				n = 0;

	for (m = 0; m < OPUS_MAX_MODELS; m++)
		n += models[m].declared && !models[m].removing;
	return n;
}

/*
 * The settings model m's engine runs with: its declaration, then opus.*.
 * With opus.threads = 0 and no per-model threads, the cores are shared
 * out among the declared models.  False if the path does not fit.
 */
static bool
model_config(int m, EngineConfig *cfg)
{
	ModelCtl   *mc = &models[m];
	const OpusModelDecl *d = &mc->decl;

	memset(cfg, 0, sizeof(*cfg));
	if (mc->override_path[0] != '\0')
		strlcpy(cfg->path, mc->override_path, sizeof(cfg->path));
	else if (!OpusResolveModelPath(m == 0 ? opus_model : d->setting, cfg->path, sizeof(cfg->path)))
		return false;
	strlcpy(cfg->device, d->device[0] ? d->device : opus_device, sizeof(cfg->device));
	cfg->threads = d->threads > 0 ? d->threads : opus_threads;
	if (cfg->threads <= 0)
	{
		long		ncpu = sysconf(_SC_NPROCESSORS_ONLN);

		cfg->threads = ncpu > 0 ? (int) Min(ncpu, 1024) : 1;
		cfg->threads = Max(1, cfg->threads / Max(1, n_declared()));
	}
	cfg->kv_cache_mb = d->kv_cache_size_mb > 0 ? d->kv_cache_size_mb : opus_kv_cache_size_mb;
	cfg->kv_cache_type = d->kv_cache_type >= 0 ? d->kv_cache_type : opus_kv_cache_type;
	cfg->max_batch_tokens = d->max_batch_tokens > 0 ? d->max_batch_tokens : opus_max_batch_tokens;
	return true;
}

static bool
config_equal(const EngineConfig *a, const EngineConfig *b)
{
	return strcmp(a->path, b->path) == 0 && strcmp(a->device, b->device) == 0 &&
		a->threads == b->threads && a->kv_cache_mb == b->kv_cache_mb &&
		a->kv_cache_type == b->kv_cache_type && a->max_batch_tokens == b->max_batch_tokens;
}

/* Memory an engine with cfg takes: its weights (the file) and KV arena. */
static int64
engine_bytes(const EngineConfig *cfg)
{
	struct stat st;
	int64		w = stat(cfg->path, &st) == 0 ? (int64) st.st_size : 0;

	return w + (int64) cfg->kv_cache_mb * 1024 * 1024;
}

static int64
memory_budget_bytes(void)
{
	long		pages = sysconf(_SC_PHYS_PAGES);
	long		pagesize = sysconf(_SC_PAGESIZE);

	if (opus_memory_budget_mb > 0)
		return (int64) opus_memory_budget_mb * 1024 * 1024;
	if (pages <= 0 || pagesize <= 0)
		return INT64_MAX;
	return (int64) pages * pagesize / 2;
}

/*
 * Does an engine with cfg fit opus.memory_budget beside the engines now
 * running (other than `self`)?  Fills used/budget for the message.
 */
static bool
fits_budget(const EngineConfig *cfg, const EngineProc *self, int64 *need, int64 *used, int64 *budget)
{
	int			m,
				k;

	*need = engine_bytes(cfg);
	*used = 0;
	*budget = memory_budget_bytes();
	for (m = 0; m < OPUS_MAX_MODELS; m++)
		for (k = 0; k < 2; k++)
		{
			EngineProc *p = &models[m].procs[k];

			if (p != self && p->pid > 0)
				*used += engine_bytes(&p->cfg);
		}
	return *need + *used <= *budget;
}

/*
 * Start an engine for model m in p with cfg.  On a failure before the
 * process exists, fills code/msg/detail and returns false.
 */
static bool
start_engine(int m, EngineProc *p, const EngineConfig *cfg,
			 int *code, char *msg, char *detail)
{
	char		engine_path[MAXPGPATH];
	struct stat st;
	int			sv[2];
	struct opus_proto_hello hello;
	struct opus_proto_writer w;
	uint8_t		payload[OPUS_PROTO_HELLO_SIZE];
	int64		need,
				used,
				budget;

	msg[0] = detail[0] = '\0';
	p->model = m;
	p->cfg = *cfg;
	if (stat(cfg->path, &st) != 0 || !S_ISREG(st.st_mode))
	{
		*code = OPUS_PG_ERR_MODEL_MISSING;
		snprintf(msg, OPUS_PROTO_MSG_LEN, "opus model file \"%s\" does not exist", cfg->path);
		if (m == 0 && models[m].override_path[0] == '\0')
			snprintf(detail, OPUS_PROTO_MSG_LEN, "opus.model is set to \"%s\".", opus_model);
		else
			snprintf(detail, OPUS_PROTO_MSG_LEN, "Model \"%s\" names this file.", model_label(m));
		return false;
	}
	if (!fits_budget(cfg, p, &need, &used, &budget))
	{
		*code = OPUS_PG_ERR_MODEL_MEMORY;
		snprintf(msg, OPUS_PROTO_MSG_LEN, "opus model \"%s\" does not fit opus.memory_budget", model_label(m));
		snprintf(detail, OPUS_PROTO_MSG_LEN,
				 "It needs %lld MB (weights and KV cache); engines already use %lld MB of %lld MB.",
				 (long long) (need >> 20), (long long) (used >> 20), (long long) (budget >> 20));
		return false;
	}
	resolve_engine_path(engine_path, sizeof(engine_path));
	if (access(engine_path, X_OK) != 0)
	{
		*code = OPUS_PG_ERR_ENGINE_MISSING;
		snprintf(msg, OPUS_PROTO_MSG_LEN, "opus engine binary \"%s\" is not executable", engine_path);
		snprintf(detail, OPUS_PROTO_MSG_LEN, "%s.", strerror(errno));
		return false;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
	{
		*code = OPUS_PG_ERR_ENGINE_DOWN;
		snprintf(msg, OPUS_PROTO_MSG_LEN, "opus engine could not be started");
		snprintf(detail, OPUS_PROTO_MSG_LEN, "socketpair failed: %s.", strerror(errno));
		return false;
	}
	ensure_kv_arena(p, (int64) cfg->kv_cache_mb * 1024 * 1024);
	p->pid = spawn_engine(engine_path, sv[1], p->kv_fd);
	close(sv[1]);
	if (p->pid < 0)
	{
		*code = OPUS_PG_ERR_ENGINE_DOWN;
		snprintf(msg, OPUS_PROTO_MSG_LEN, "opus engine could not be started");
		snprintf(detail, OPUS_PROTO_MSG_LEN, "fork failed: %s.", strerror(errno));
		close(sv[0]);
		p->pid = 0;
		return false;
	}
	p->sock = sv[0];
	if (!pg_set_noblock(p->sock))
		elog(LOG, "opus_pg: could not make the engine socket non-blocking: %m");
	p->ready = false;
	p->got_fatal = false;
	p->fatal_msg[0] = '\0';
	p->warming = false;
	p->warm_done = 0;
	p->spawned_at = GetCurrentTimestamp();
	p->in_len = 0;
	p->out_off = p->out_len = 0;
	wes_dirty = true;

	memset(&hello, 0, sizeof(hello));
	hello.magic = OPUS_PROTO_MAGIC;
	hello.version = OPUS_PROTO_VERSION;
	hello.n_threads = cfg->threads;
	hello.n_ctx = 0;
	hello.kv_cache_bytes = (int64) cfg->kv_cache_mb * 1024 * 1024;
	hello.kv_block_size = opus_kv_block_size;
	hello.max_batch_tokens = cfg->max_batch_tokens;
	hello.kv_cache_type = cfg->kv_cache_type;
	hello.step_target_ms = opus_step_latency_target_ms;
	hello.starve_ms = opus_admission_starvation_ms;
	/*
	 * The engine resolves "auto" (cuda:0 when it was built with CUDA and
	 * sees a GPU, else cpu) and fails a CUDA device it cannot use.
	 */
	strlcpy(hello.device, cfg->device, sizeof(hello.device));
	strlcpy(hello.model_path, cfg->path, sizeof(hello.model_path));
	opus_proto_writer_init(&w, payload, sizeof(payload));
	opus_proto_encode_hello(&w, &hello);
	send_frame(p, OPUS_MSG_HELLO, 0, payload, w.len);

	SpinLockAcquire(&OpusModel(m)->mutex);
	OpusModel(m)->weights_bytes = (int64) st.st_size;
	SpinLockRelease(&OpusModel(m)->mutex);
	if (m == 0)
		ereport(LOG,
				(errmsg("opus_pg: started engine (PID %d) for model \"%s\"",
						(int) p->pid, cfg->path)));
	else
		ereport(LOG,
				(errmsg("opus_pg: started engine (PID %d) for model \"%s\" (\"%s\")",
						(int) p->pid, model_label(m), cfg->path)));
	return true;
}

/* Start model m's serving engine if it is time.  Failures are FAILED states. */
static void
maybe_start_engine(int m)
{
	ModelCtl   *mc = &models[m];
	EngineProc *p = &mc->procs[mc->cur];
	OpusEngineStatus *e = OpusModel(m);
	EngineConfig cfg;
	int			code;
	char		msg[OPUS_PROTO_MSG_LEN];
	char		detail[OPUS_PROTO_MSG_LEN];

	if (!mc->declared || mc->removing || p->pid > 0 || mc->drained_first ||
		GetCurrentTimestamp() < mc->next_start_at)
		return;

	mc->reload_pending = false;
	if (!model_config(m, &cfg))
	{
		set_model_failed(m, OPUS_PG_ERR_MODEL_MISSING,
						 m == 0 ? "opus.model resolves to a path that is too long" :
						 "opus model path is too long", NULL);
		schedule_restart(m);
		return;
	}
	mc->applied = cfg;
	SpinLockAcquire(&e->mutex);
	strlcpy(e->model_path, cfg.path, sizeof(e->model_path));
	SpinLockRelease(&e->mutex);
	if (!start_engine(m, p, &cfg, &code, msg, detail))
	{
		set_model_failed(m, code, msg, detail);
		schedule_restart(m);
		return;
	}
	if (m == 0)
		OpusStatsEngineSpawned(cfg.path, cfg.device, cfg.threads);
	SpinLockAcquire(&e->mutex);
	e->starts++;
	e->started_at = p->spawned_at;
	e->threads = cfg.threads;
	e->kv_bytes = (int64) cfg.kv_cache_mb * 1024 * 1024;
	SpinLockRelease(&e->mutex);
	set_model_state(m, OPUS_ENGINE_STARTING);
}

/* Notice an engine that exited without us seeing EOF first. */
static void
check_engine_exited(EngineProc *p)
{
	int			status;
	pid_t		r;

	if (p->pid <= 0)
		return;
	r = waitpid(p->pid, &status, WNOHANG);
	if (r == p->pid)
	{
		char		desc[128];
		char		reason[OPUS_PROTO_MSG_LEN];

		describe_exit(status, desc, sizeof(desc));
		/* Already reaped: stop_engine must not wait for it. */
		p->pid = 0;
		snprintf(reason, sizeof(reason), "The engine process %s.", desc);
		engine_lost(p, false, reason);
	}
}

/* ---------------------------------------------------------------------
 * Live swap: warm-up, switch, drain
 * --------------------------------------------------------------------- */

/*
 * Start model m's candidate engine for `path` beside the serving one.
 * is_rollback: the target is the previous version (then no new rollback
 * target is kept).  why: an automatic rollback's reason, or NULL.
 */
static void
start_swap(int m, const char *path, bool is_rollback, const char *why)
{
	ModelCtl   *mc = &models[m];
	EngineProc *cand = &mc->procs[1 - mc->cur];
	OpusEngineStatus *e = OpusModel(m);
	EngineConfig cfg;
	int			code;
	char		msg[OPUS_PROTO_MSG_LEN];
	char		detail[OPUS_PROTO_MSG_LEN];

	if (mc->swap != OPUS_SWAP_NONE || cand->pid > 0)
		return;
	if (!model_config(m, &cfg))
		return;
	strlcpy(cfg.path, path, sizeof(cfg.path));
	mc->swap_is_rollback = is_rollback;
	strlcpy(mc->swap_why, why ? why : "", sizeof(mc->swap_why));
	mc->swap_started = GetCurrentTimestamp();
	SpinLockAcquire(&e->mutex);
	strlcpy(e->swap_path, path, sizeof(e->swap_path));
	SpinLockRelease(&e->mutex);
	mc->swap_cfg = cfg;
	mc->drained_first = false;
	{
		int64		need,
					used,
					budget;
		EngineProc *serving = &mc->procs[mc->cur];

		if (serving->pid > 0 && !fits_budget(&cfg, cand, &need, &used, &budget) &&
			need + used - engine_bytes(&serving->cfg) <= budget)
		{
			/* both versions do not fit: hold new requests, drain, then load */
			mc->swap = OPUS_SWAP_DRAIN_FIRST;
			publish_swap(m);
			ereport(LOG,
					(errmsg("opus_pg: model \"%s\": \"%s\" does not fit opus.memory_budget beside the serving version; draining the serving version first",
							model_label(m), path),
					 errdetail("The new version needs %lld MB; engines use %lld MB of %lld MB. New requests wait until it is ready (or the old version is back).",
							   (long long) (need >> 20), (long long) (used >> 20), (long long) (budget >> 20))));
			return;
		}
	}
	mc->swap = OPUS_SWAP_LOADING;
	publish_swap(m);
	ereport(LOG,
			(errmsg("opus_pg: model \"%s\": %s \"%s\" beside the serving version",
					model_label(m), is_rollback ? "rolling back to" : "swapping in", path),
			 why ? errdetail("%s", why) : 0));
	if (!start_engine(m, cand, &cfg, &code, msg, detail))
		swap_failed(m, msg, detail);
	else
		cand->warm_deadline = TimestampTzPlusMilliseconds(mc->swap_started,
														  opus_model_warmup_timeout_ms);
}

/*
 * A drain-first swap: the serving engine holds no request any more; stop
 * it and load the new version in its stead (warm-up as usual; if that
 * fails, swap_failed starts the old version again).
 */
static void
drain_first_load(int m)
{
	ModelCtl   *mc = &models[m];
	EngineProc *serving = &mc->procs[mc->cur];
	EngineProc *cand = &mc->procs[1 - mc->cur];
	char		how[OPUS_PROTO_MSG_LEN];
	int			code;
	char		msg[OPUS_PROTO_MSG_LEN];
	char		detail[OPUS_PROTO_MSG_LEN];

	stop_engine(serving, false, 1000, how, sizeof(how));
	close_arena(serving);
	mc->drained_first = true;
	mc->swap = OPUS_SWAP_LOADING;
	publish_swap(m);
	set_model_state(m, OPUS_ENGINE_STARTING);
	ereport(LOG,
			(errmsg("opus_pg: model \"%s\": the serving version drained and stopped; loading \"%s\"",
					model_label(m), mc->swap_cfg.path),
			 errdetail("%s", how)));
	if (!start_engine(m, cand, &mc->swap_cfg, &code, msg, detail))
		swap_failed(m, msg, detail);
	else
		cand->warm_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  opus_model_warmup_timeout_ms);
}

/*
 * The candidate is READY: send the canary prompts (greedy; the swap's own,
 * or the defaults with 8 tokens each).
 */
static void
send_canaries(EngineProc *p)
{
	ModelCtl   *mc = &models[p->model];
	int			n = mc->n_canaries > 0 ? mc->n_canaries : N_CANARIES;
	int			k;

	for (k = 0; k < n; k++)
	{
		OpusRequest req;
		char		buf[1024];
		uint32		len;
		const char *prompt = mc->n_canaries > 0 ? mc->canaries[k].prompt : canary_prompts[k];

		memset(&req, 0, sizeof(req));
		req.kind = OPUS_KIND_GENERATE;
		req.params.max_tokens = mc->n_canaries > 0 ? mc->canaries[k].max_tokens : 8;
		req.params.temperature = 0.0f;
		req.params.top_p = 1.0f;
		req.params.repetition_penalty = 1.0f;
		req.params.seed = 1;
		req.text = prompt;
		req.text_len = strlen(prompt);
		len = OpusEncodeRequest(&req, buf, sizeof(buf), NULL);
		send_frame(p, OPUS_MSG_SUBMIT, ((uint64) (k + 1)) << 32, buf, len);
		p->warm_len[k] = 0;
		p->warm_text[k][0] = '\0';
	}
	p->warm_n = n;
	p->warming = true;
	p->warm_done = 0;
}

/* Output of a canary (TEXT frame): kept to compare with its "expect". */
static void
canary_text(EngineProc *p, uint64 id, const uint8_t *data, size_t len)
{
	int			k = (int) (id >> 32) - 1;
	size_t		room;

	if (k < 0 || k >= p->warm_n)
		return;
	room = OPUS_CANARY_LEN - 1 - p->warm_len[k];
	if (len > room)
		len = room;
	memcpy(p->warm_text[k] + p->warm_len[k], data, len);
	p->warm_len[k] += len;
	p->warm_text[k][p->warm_len[k]] = '\0';
}

/*
 * The candidate passed its warm-up: new requests go to it from now on.
 * The old version drains (requests it holds finish there) and is kept as
 * the rollback target for opus.model_probation.
 */
static void
switch_to_candidate(int m)
{
	ModelCtl   *mc = &models[m];
	EngineProc *old = &mc->procs[mc->cur];
	EngineProc *cand = &mc->procs[1 - mc->cur];
	OpusEngineStatus *e = OpusModel(m);
	TimestampTz now = GetCurrentTimestamp();
	char		old_path[OPUS_PROTO_PATH_LEN];
	long		ms = (long) ((now - mc->swap_started) / 1000);

	strlcpy(old_path, old->cfg.path, sizeof(old_path));
	cand->warming = false;
	mc->cur = 1 - mc->cur;
	mc->applied = cand->cfg;
	strlcpy(mc->override_path, cand->cfg.path, sizeof(mc->override_path));
	if (mc->swap_is_rollback)
	{
		mc->prev_path[0] = '\0';
		mc->probation_until = 0;
	}
	else
	{
		strlcpy(mc->prev_path, old_path, sizeof(mc->prev_path));
		mc->probation_until = TimestampTzPlusMilliseconds(now, (int64) opus_model_probation_s * 1000);
	}
	mc->probation_done = mc->probation_errors = 0;
	mc->swap = old->pid > 0 ? OPUS_SWAP_DRAINING : OPUS_SWAP_NONE;
	mc->drained_first = false;
	if (old->pid <= 0)
		close_arena(old);
	SpinLockAcquire(&e->mutex);
	e->version++;
	e->swapped_at = now;
	e->swap_path[0] = '\0';
	if (mc->swap_is_rollback)
		e->rollbacks++;
	SpinLockRelease(&e->mutex);
	if (m == 0)
		OpusStatsEngineSpawned(cand->cfg.path, cand->cfg.device, cand->cfg.threads);
	if (mc->swap_is_rollback && mc->swap_why[0])
		snprintf(mc->note, sizeof(mc->note), "rolled back: %s", mc->swap_why);
	publish_ready(m, cand);
	publish_swap(m);
	ereport(LOG,
			(errmsg("opus_pg: model \"%s\" now served by \"%s\" (engine PID %d), %ld ms after the %s began; the old version drains",
					model_label(m), cand->cfg.path, (int) cand->pid, ms,
					mc->swap_is_rollback ? "rollback" : "swap")));
}

/* A warm-up request ended: count it, or fail the swap. */
static void
canary_done(EngineProc *p, uint64 id, const struct opus_proto_done *d)
{
	int			m = p->model;
	ModelCtl   *mc = &models[m];
	int			k = (int) (id >> 32) - 1;

	if (d->finish == OPUS_PROTO_FINISH_ERROR || d->finish == OPUS_PROTO_FINISH_CANCELLED)
	{
		char		msg[OPUS_PROTO_MSG_LEN];

		snprintf(msg, sizeof(msg), "swap to \"%s\" failed: a warm-up prompt failed", p->cfg.path);
		swap_failed(m, msg, d->message);
		return;
	}
	if (mc->n_canaries > 0 && k >= 0 && k < mc->n_canaries && mc->canaries[k].has_expect &&
		strcmp(p->warm_text[k], mc->canaries[k].expect) != 0)
	{
		char		msg[OPUS_PROTO_MSG_LEN];
		char		detail[OPUS_PROTO_MSG_LEN];

		snprintf(msg, sizeof(msg), "swap to \"%s\" failed: warm-up prompt %d did not give the expected output",
				 p->cfg.path, k + 1);
		snprintf(detail, sizeof(detail), "Expected \"%s\", got \"%s\".",
				 mc->canaries[k].expect, p->warm_text[k]);
		swap_failed(m, msg, detail);
		return;
	}
	if (++p->warm_done == p->warm_n)
		switch_to_candidate(m);
}

/*
 * Timers and requests of the swap machinery, once per loop: warm-up
 * deadlines, drains that finished, swaps and rollbacks asked for from SQL,
 * serving engines to restart after a settings change, removed models.
 */
static void
advance_models(void)
{
	TimestampTz now = GetCurrentTimestamp();
	int			m;

	for (m = 0; m < OPUS_MAX_MODELS; m++)
	{
		ModelCtl   *mc = &models[m];
		EngineProc *serving = &mc->procs[mc->cur];
		EngineProc *other = &mc->procs[1 - mc->cur];
		OpusEngineStatus *e = OpusModel(m);
		bool		want_swap,
					want_rollback;
		char		path[OPUS_PROTO_PATH_LEN];
		char		how[OPUS_PROTO_MSG_LEN];

		if (!mc->declared)
			continue;

		/* a candidate that takes too long */
		if ((mc->swap == OPUS_SWAP_LOADING || mc->swap == OPUS_SWAP_WARMING) &&
			other->pid > 0 && now >= other->warm_deadline)
		{
			char		msg[OPUS_PROTO_MSG_LEN];
			char		detail[OPUS_PROTO_MSG_LEN];

			snprintf(msg, sizeof(msg), "swap to \"%s\" failed: the warm-up did not finish in time", other->cfg.path);
			snprintf(detail, sizeof(detail), "opus.model_warmup_timeout is %d ms; %d of %d canary prompts had completed.",
					 opus_model_warmup_timeout_ms, other->warm_done, N_CANARIES);
			swap_failed(m, msg, detail);
		}
		if (mc->swap == OPUS_SWAP_LOADING && other->ready)
			mc->swap = OPUS_SWAP_WARMING;

		/* a drain-first swap: the serving version holds nothing any more */
		if (mc->swap == OPUS_SWAP_DRAIN_FIRST && n_in_flight(serving) == 0)
			drain_first_load(m);

		/* the old version drained */
		if (mc->swap == OPUS_SWAP_DRAINING && n_in_flight(other) == 0)
		{
			stop_engine(other, false, 1000, how, sizeof(how));
			close_arena(other);
			mc->swap = OPUS_SWAP_NONE;
			publish_swap(m);
			ereport(LOG, (errmsg("opus_pg: model \"%s\": the old version drained and stopped", model_label(m)),
						  errdetail("%s", how)));
		}

		/* the serving engine of a removed model, or after a settings change */
		if ((mc->removing || mc->reload_pending) && serving->pid > 0 &&
			n_in_flight(serving) == 0 && mc->swap == OPUS_SWAP_NONE)
		{
			stop_engine(serving, false, 1000, how, sizeof(how));
			if (mc->removing)
				ereport(LOG, (errmsg("opus_pg: model \"%s\" removed; its engine stopped", model_label(m)),
							  errdetail("%s", how)));
			else
				ereport(LOG, (errmsg(m == 0 ? "opus_pg: engine stopped for a settings change" :
									 "opus_pg: engine of a model stopped for a settings change"),
							  errdetail("%s", how)));
			set_model_state(m, OPUS_ENGINE_STOPPED);
			mc->next_start_at = 0;
			mc->backoff_ms = BACKOFF_MIN_MS;
		}
		if (mc->removing && serving->pid <= 0 && other->pid <= 0 &&
			n_in_flight(serving) == 0 && n_in_flight(other) == 0)
		{
			close_arena(serving);
			close_arena(other);
			SpinLockAcquire(&e->mutex);
			e->state = OPUS_ENGINE_STOPPED;
			e->engine_pid = 0;
			SpinLockRelease(&e->mutex);
			mc->declared = false;
			mc->removing = false;
			continue;
		}

		/* error rate in probation */
		if (mc->prev_path[0] != '\0' && now >= mc->probation_until)
		{
			mc->prev_path[0] = '\0';
			mc->probation_until = 0;
			publish_swap(m);
		}
		if (mc->prev_path[0] != '\0' && mc->swap == OPUS_SWAP_NONE &&
			mc->probation_done >= PROBATION_MIN_REQUESTS &&
			mc->probation_errors * 2 > mc->probation_done)
		{
			char		why[OPUS_PROTO_MSG_LEN];

			snprintf(why, sizeof(why), "%lld of the new version's first %lld requests failed during probation",
					 (long long) mc->probation_errors, (long long) mc->probation_done);
			strlcpy(path, mc->prev_path, sizeof(path));
			mc->probation_done = mc->probation_errors = 0;
			mc->n_canaries = 0;
			start_swap(m, path, true, why);
		}

		/* swap and rollback requests from SQL */
		SpinLockAcquire(&e->mutex);
		want_swap = e->swap_requested;
		want_rollback = e->rollback_requested;
		if (want_swap)
		{
			mc->n_canaries = e->n_requested_canaries;
			memcpy(mc->canaries, e->requested_canaries, sizeof(OpusCanary) * mc->n_canaries);
		}
		else if (want_rollback)
			mc->n_canaries = 0;
		strlcpy(path, want_swap ? e->requested_path : mc->prev_path, sizeof(path));
		e->swap_requested = e->rollback_requested = false;
		SpinLockRelease(&e->mutex);
		if ((want_swap || want_rollback) && mc->swap != OPUS_SWAP_NONE)
			ereport(LOG, (errmsg("opus_pg: model \"%s\": a swap is already under way; request ignored", model_label(m))));
		else if (want_swap || (want_rollback && path[0] != '\0'))
		{
			if (serving->pid <= 0 || !serving->ready)
			{
				/* nothing serves: no warm-up beside it, just start the new file */
				strlcpy(mc->override_path, path, sizeof(mc->override_path));
				if (want_rollback)
					mc->prev_path[0] = '\0';
				mc->next_start_at = 0;
				mc->backoff_ms = BACKOFF_MIN_MS;
				if (serving->pid > 0)
					engine_lost(serving, true, "Replaced by a swap before it was ready.");
				SpinLockAcquire(&e->mutex);
				e->version++;
				SpinLockRelease(&e->mutex);
				publish_swap(m);
			}
			else
				start_swap(m, path, want_rollback, want_rollback ? "Asked for by opus_model_rollback()." : NULL);
		}
	}
}

/* ---------------------------------------------------------------------
 * Frames from engines
 * --------------------------------------------------------------------- */

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
	slot->finish_time = GetCurrentTimestamp();
	pg_write_barrier();
	SpinLockAcquire(&slot->mutex);
	if (slot->state == OPUS_SLOT_RUNNING)
		slot->state = error ? OPUS_SLOT_ERROR : OPUS_SLOT_DONE;
	else if (slot->state == OPUS_SLOT_CANCELLED)
		slot->state = OPUS_SLOT_FREE;
	SpinLockRelease(&slot->mutex);
	ConditionVariableBroadcast(&slot->cv);
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
				if (m == 0)
					OpusStatsEngineStats(&s);
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
			if (!p->ready)
				return "result frame before READY";
			if (h->type == OPUS_MSG_TEXT ? !opus_proto_parse_text(payload, h->length, &why) :
				!opus_proto_parse_tokens(payload, h->length, &why))
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
			if ((OpusGetSlot(i)->kind == OPUS_KIND_TOKENIZE) != (h->type == OPUS_MSG_TOKENS))
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

/* Mark a serving engine unresponsive (or not) in the views. */
static void
set_unresponsive(EngineProc *p, bool on)
{
	OpusEngineStatus *e;

	if (!PROC_IS_SERVING(p))
		return;
	e = OpusModel(p->model);
	if (e->unresponsive == on)	/* only the supervisor writes it */
		return;
	SpinLockAcquire(&e->mutex);
	e->unresponsive = on;
	SpinLockRelease(&e->mutex);
}

/*
 * CPU time (user + system, all threads, in clock ticks) the process has
 * used, or -1 if unknown; a stopped process (SIGSTOP, state T or t)
 * reports -2, so it never counts as progressing.
 */
static int64
process_cpu_ticks(pid_t pid)
{
	char		path[64];
	char		buf[1024];
	FILE	   *f;
	size_t		n;
	char	   *c;
	char		state;
	unsigned long long utime,
				stime;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* the command name may contain anything: fields follow its last ')' */
	c = strrchr(buf, ')');
	if (c == NULL)
		return -1;
	if (sscanf(c + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
			   &state, &utime, &stime) != 3)
		return -1;
	if (state == 'T' || state == 't')
		return -2;
	return (int64) (utime + stime);
}

/*
 * Liveness: with opus.engine_liveness_timeout set and engine p ready, send
 * a PING after a quarter of the timeout without hearing from it; an engine
 * that then neither answers nor uses CPU for half the timeout is shown as
 * unresponsive, and for the whole timeout is killed (its requests fail
 * with 58000) and restarted.  CPU time is the engine's step progress as
 * the supervisor can see it without the engine's help: a long step that
 * computes is not a hang, a stopped or deadlocked engine is.  Returns the
 * milliseconds until the next check is due (-1 = none).
 */
static long
check_engine_alive(EngineProc *p)
{
	int			timeout = opus_engine_liveness_timeout_ms;
	TimestampTz now;
	int64		cpu;

	if (timeout <= 0 || p->pid <= 0 || p->sock == PGINVALID_SOCKET || !p->ready)
	{
		p->ping_at = 0;
		if (p->pid > 0)
			set_unresponsive(p, false);
		return -1;
	}
	now = GetCurrentTimestamp();
	if (p->heard_at == 0 || p->heard_at < p->ready_at)
		p->heard_at = now;
	if (p->ping_at == 0)
	{
		if (!TimestampDifferenceExceeds(p->heard_at, now, timeout / 4))
			return Max(timeout / 4, 10);
		send_frame(p, OPUS_MSG_PING, 0, NULL, 0);
		p->ping_at = now;
		p->progress_at = now;
		p->cpu_ticks = process_cpu_ticks(p->pid);
		return Max(timeout / 8, 10);
	}
	cpu = process_cpu_ticks(p->pid);
	if (cpu >= 0 && cpu != p->cpu_ticks)
	{
		p->cpu_ticks = cpu;
		p->progress_at = now;
		set_unresponsive(p, false);
	}
	if (TimestampDifferenceExceeds(p->progress_at, now, timeout))
	{
		char		reason[OPUS_PROTO_MSG_LEN];

		snprintf(reason, sizeof(reason),
				 "The engine neither answered a ping nor used CPU for %d ms (opus.engine_liveness_timeout): %s; killed.",
				 timeout, cpu == -2 ? "it is stopped" : "it is hung");
		ereport(LOG, (errmsg("opus_pg: engine unresponsive"), errdetail("%s", reason)));
		set_unresponsive(p, false);
		engine_lost(p, true, reason);
		return -1;
	}
	if (TimestampDifferenceExceeds(p->progress_at, now, timeout / 2))
		set_unresponsive(p, true);
	return Max(timeout / 8, 10);
}

/*
 * Read what engine p sent and handle every complete frame.  Returns false
 * if the engine is gone (EOF / error) or broke the protocol; it has then
 * been dealt with.
 */
static bool
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

/* ---------------------------------------------------------------------
 * Slots -> engines
 * --------------------------------------------------------------------- */

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

	if (mc->fallback < 0 || mc->decl.max_ttft_ms <= 0)
		return;
	for (i = 0; i < OpusShared->n_slots; i++)
		if (sent_id[i] != 0 && sent_proc[i] == p && !first_token[i])
			oldest = Max(oldest, (double) (now - sent_at[i]) / 1000.0);
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
 * The model a SUBMITTED slot for model m goes to: m, or m's fallback
 * while m is overloaded, the request allows it (fallback => true, or NULL
 * and a batch-class session), it is a generation, and the fallback is
 * ready.
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
	return f;
}

static void
process_slots(void)
{
	int			i;
	TimestampTz now = GetCurrentTimestamp();

	for (i = 0; i < OPUS_MAX_MODELS; i++)
		if (models[i].declared)
			update_overload(i, now);
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

/* ---------------------------------------------------------------------
 * Declarations (start-up and reload)
 * --------------------------------------------------------------------- */

/*
 * Bring the model entries in line with opus.model / opus.models: new
 * names get a free entry (and a new epoch), removed ones drain and go,
 * changed settings restart that model's engine once it is idle.
 */
static void
apply_declarations(void)
{
	OpusModelDecl decl[OPUS_MAX_MODELS - 1];
	char		err[256];
	int			n = 0;
	int			k,
				m;
	bool		keep[OPUS_MAX_MODELS];

	if (!OpusParseModels(opus_models, decl, &n, err, sizeof(err)))
	{
		/* the check hook makes this unreachable; be safe */
		ereport(LOG, (errmsg("opus_pg: opus.models is invalid, ignored"), errdetail("%s", err)));
		return;
	}
	memset(keep, 0, sizeof(keep));
	keep[0] = true;
	models[0].declared = true;
	for (k = 0; k < n; k++)
	{
		int			found = -1;

		for (m = 1; m < OPUS_MAX_MODELS; m++)
			if (models[m].declared && !models[m].removing &&
				strcmp(models[m].decl.name, decl[k].name) == 0)
				found = m;
		if (found < 0)
		{
			for (m = 1; m < OPUS_MAX_MODELS && found < 0; m++)
				if (!models[m].declared)
					found = m;
			if (found < 0)
			{
				ereport(LOG, (errmsg("opus_pg: no free model entry for \"%s\" (a removed model is still draining)",
									 decl[k].name)));
				continue;
			}
			/* a fresh entry */
			{
				ModelCtl   *mc = &models[found];
				OpusEngineStatus *e = OpusModel(found);
				uint32		epoch = mc->epoch + 1;

				memset(mc->override_path, 0, sizeof(mc->override_path));
				mc->declared = true;
				mc->removing = false;
				mc->epoch = epoch;
				mc->decl = decl[k];
				mc->backoff_ms = BACKOFF_MIN_MS;
				mc->next_start_at = 0;
				mc->reload_pending = false;
				mc->swap = OPUS_SWAP_NONE;
				mc->prev_path[0] = '\0';
				mc->probation_until = 0;
				mc->last_logged[0] = '\0';
				mc->note[0] = '\0';
				SpinLockAcquire(&e->mutex);
				e->in_use = true;
				e->epoch = epoch;
				strlcpy(e->name, decl[k].name, sizeof(e->name));
				strlcpy(e->role, decl[k].role, sizeof(e->role));
				e->version = 1;
				e->swap_state = OPUS_SWAP_NONE;
				e->swap_path[0] = e->prev_path[0] = '\0';
				e->probation_until = 0;
				e->rollbacks = e->restarts = e->starts = e->fallbacks = 0;
				e->overloaded = false;
				e->recent_ttft_ms = 0;
				e->ever_ready = false;
				e->last_err_code = 0;
				e->last_error[0] = e->last_error_detail[0] = e->last_exit[0] = '\0';
				e->model_path[0] = '\0';
				e->state = OPUS_ENGINE_STOPPED;
				e->engine_pid = 0;
				e->swap_requested = e->rollback_requested = false;
				SpinLockRelease(&e->mutex);
				ereport(LOG, (errmsg("opus_pg: model \"%s\" declared: \"%s\"", decl[k].name, decl[k].setting)));
			}
		}
		else
		{
			ModelCtl   *mc = &models[found];
			OpusEngineStatus *e = OpusModel(found);

			if (strcmp(mc->decl.setting, decl[k].setting) != 0)
				mc->override_path[0] = '\0';	/* the declaration wins over a swap */
			mc->decl = decl[k];
			SpinLockAcquire(&e->mutex);
			strlcpy(e->role, decl[k].role, sizeof(e->role));
			SpinLockRelease(&e->mutex);
		}
		SpinLockAcquire(&OpusModel(found)->mutex);
		strlcpy(OpusModel(found)->fallback, decl[k].fallback, sizeof(OpusModel(found)->fallback));
		OpusModel(found)->max_ttft_ms = decl[k].max_ttft_ms;
		SpinLockRelease(&OpusModel(found)->mutex);
		keep[found] = true;
	}
	for (m = 1; m < OPUS_MAX_MODELS; m++)
		if (models[m].declared && !keep[m] && !models[m].removing)
		{
			OpusEngineStatus *e = OpusModel(m);

			models[m].removing = true;
			SpinLockAcquire(&e->mutex);
			e->in_use = false;
			SpinLockRelease(&e->mutex);
			ereport(LOG, (errmsg("opus_pg: model \"%s\" removed from opus.models; it drains and stops",
								 models[m].decl.name)));
			/* a swap in progress ends here */
			if (models[m].swap == OPUS_SWAP_LOADING || models[m].swap == OPUS_SWAP_WARMING ||
				models[m].swap == OPUS_SWAP_DRAIN_FIRST)
				swap_failed(m, "swap abandoned: the model was removed", NULL);
		}

	/* fallbacks by entry */
	for (m = 0; m < OPUS_MAX_MODELS; m++)
	{
		ModelCtl   *mc = &models[m];
		int			f;

		mc->fallback = -1;
		if (!mc->declared || mc->removing || mc->decl.fallback[0] == '\0')
			continue;
		if (strcmp(mc->decl.fallback, "default") == 0)
			mc->fallback = 0;
		for (f = 1; f < OPUS_MAX_MODELS; f++)
			if (models[f].declared && !models[f].removing &&
				strcmp(models[f].decl.name, mc->decl.fallback) == 0)
				mc->fallback = f;
	}

	/* settings changes of running engines: restart when idle */
	for (m = 0; m < OPUS_MAX_MODELS; m++)
	{
		ModelCtl   *mc = &models[m];
		EngineConfig cfg;

		if (!mc->declared || mc->removing)
			continue;
		if (!model_config(m, &cfg) || !config_equal(&cfg, &mc->applied))
		{
			if (mc->procs[mc->cur].pid > 0)
			{
				if (m == 0)
					ereport(LOG,
							(errmsg("opus_pg: engine settings changed; restarting the engine when its requests finish")));
				else
					ereport(LOG,
							(errmsg("opus_pg: settings of model \"%s\" changed; restarting its engine when its requests finish",
									model_label(m))));
				mc->reload_pending = true;
			}
			/* A failed or waiting engine starts again right away. */
			mc->backoff_ms = BACKOFF_MIN_MS;
			mc->next_start_at = 0;
			mc->last_logged[0] = '\0';
		}
	}
}

/* ---------------------------------------------------------------------
 * Main loop
 * --------------------------------------------------------------------- */

static void
supervisor_exit(int code, Datum arg)
{
	OpusEngineStatus *e = &OpusShared->engine;
	char		how[OPUS_PROTO_MSG_LEN];
	int			m,
				k;

	for (m = 0; m < OPUS_MAX_MODELS; m++)
		for (k = 0; k < 2; k++)
		{
			EngineProc *p = &models[m].procs[k];

			if (p->pid > 0 || p->sock != PGINVALID_SOCKET)
				stop_engine(p, false, 1000, how, sizeof(how));
			fail_in_flight(p, OPUS_PG_ERR_ENGINE_DOWN, "opus engine stopped",
						   "The opus_pg supervisor is shutting down.");
		}
	for (m = 0; m < OPUS_MAX_MODELS; m++)
	{
		OpusEngineStatus *me = OpusModel(m);

		SpinLockAcquire(&me->mutex);
		me->state = OPUS_ENGINE_STOPPED;
		me->engine_pid = 0;
		SpinLockRelease(&me->mutex);
		ConditionVariableBroadcast(&me->cv);
	}
	SpinLockAcquire(&e->mutex);
	e->supervisor_pid = 0;
	e->supervisor_procno = -1;
	SpinLockRelease(&e->mutex);
}

static void
process_reload(void)
{
	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	apply_declarations();
}

void
OpusSupervisorMain(Datum arg)
{
	OpusEngineStatus *e;
	int			m,
				k;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	pqsignal(SIGCHLD, handle_sigchld);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	if (OpusShared == NULL)
		ereport(ERROR, (errmsg("opus_pg shared memory is not initialised")));
	e = &OpusShared->engine;

	memset(models, 0, sizeof(models));
	for (m = 0; m < OPUS_MAX_MODELS; m++)
	{
		OpusEngineStatus *me = OpusModel(m);

		models[m].backoff_ms = BACKOFF_MIN_MS;
		models[m].applied.threads = -1;
		models[m].decl.kv_cache_type = -1;	/* entry 0: opus.* throughout */
		models[m].fallback = -1;
		for (k = 0; k < 2; k++)
		{
			models[m].procs[k].model = m;
			models[m].procs[k].sock = PGINVALID_SOCKET;
			models[m].procs[k].kv_fd = -1;
			models[m].procs[k].wes_pos = -1;
		}
		/* entries of an earlier supervisor are re-declared below */
		SpinLockAcquire(&me->mutex);
		models[m].epoch = me->epoch;
		if (m > 0)
			me->in_use = false;
		me->swap_state = OPUS_SWAP_NONE;
		me->swap_path[0] = '\0';
		me->prev_path[0] = '\0';
		if (m == 0 && me->version == 0)
			me->version = 1;
		SpinLockRelease(&me->mutex);
	}
	sent_id = MemoryContextAllocZero(TopMemoryContext, sizeof(uint64) * OpusShared->n_slots);
	sent_proc = MemoryContextAllocZero(TopMemoryContext, sizeof(EngineProc *) * OpusShared->n_slots);
	cancel_sent = MemoryContextAllocZero(TopMemoryContext, sizeof(bool) * OpusShared->n_slots);
	overflowed = MemoryContextAllocZero(TopMemoryContext, sizeof(bool) * OpusShared->n_slots);
	sent_at = MemoryContextAllocZero(TopMemoryContext, sizeof(TimestampTz) * OpusShared->n_slots);
	first_token = MemoryContextAllocZero(TopMemoryContext, sizeof(bool) * OpusShared->n_slots);
	rebuild_wait_set();

	recover_slots();
	SpinLockAcquire(&e->mutex);
	e->supervisor_pid = MyProcPid;
	e->supervisor_procno = MyProc->pgprocno;
	e->engine_pid = 0;
	e->state = OPUS_ENGINE_STOPPED;
	SpinLockRelease(&e->mutex);
	before_shmem_exit(supervisor_exit, (Datum) 0);
	apply_declarations();

	for (;;)
	{
		WaitEvent	events[2 + 2 * OPUS_MAX_MODELS];
		int			nevents;
		long		timeout = -1;
		long		alive_ms;
		TimestampTz now;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
			process_reload();

		for (m = 0; m < OPUS_MAX_MODELS; m++)
			for (k = 0; k < 2; k++)
				check_engine_exited(&models[m].procs[k]);
		advance_models();
		for (m = 0; m < OPUS_MAX_MODELS; m++)
			maybe_start_engine(m);
		process_slots();
		alive_ms = -1;
		for (m = 0; m < OPUS_MAX_MODELS; m++)
			for (k = 0; k < 2; k++)
			{
				EngineProc *p = &models[m].procs[k];
				long		a = check_engine_alive(p);

				if (a >= 0 && (alive_ms < 0 || a < alive_ms))
					alive_ms = a;
				if (p->sock != PGINVALID_SOCKET && !flush_output(p))
					engine_lost(p, false, "Writing to the engine failed.");
			}
		if (wes_dirty)
			rebuild_wait_set();

		/* Wait for the latch, a socket, a restart or warm-up time, or a reap. */
		now = GetCurrentTimestamp();
		for (m = 0; m < OPUS_MAX_MODELS; m++)
		{
			ModelCtl   *mc = &models[m];

			for (k = 0; k < 2; k++)
			{
				EngineProc *p = &mc->procs[k];
				long		t = -1;

				if (p->sock != PGINVALID_SOCKET && p->wes_pos >= 0)
				{
					bool		want_write = p->out_off < p->out_len;

					if (want_write != p->wes_write)
					{
						ModifyWaitEvent(wes, p->wes_pos,
										WL_SOCKET_READABLE | (want_write ? WL_SOCKET_WRITEABLE : 0), NULL);
						p->wes_write = want_write;
					}
				}
				if (p->pid > 0 && p->sock == PGINVALID_SOCKET)
					t = 10;
				else if (p->pid > 0 && !PROC_IS_SERVING(p) && mc->swap != OPUS_SWAP_DRAINING)
					t = p->warm_deadline > now ? (long) ((p->warm_deadline - now) / 1000) + 1 : 0;
				else if (k == mc->cur && p->pid <= 0 && mc->declared && !mc->removing)
					t = mc->next_start_at > now ? (long) ((mc->next_start_at - now) / 1000) + 1 : 0;
				if (t >= 0 && (timeout < 0 || t < timeout))
					timeout = t;
			}
			/* drains, removals and probation ends are checked at least every second */
			if (mc->swap == OPUS_SWAP_DRAINING || mc->swap == OPUS_SWAP_DRAIN_FIRST ||
				mc->removing || mc->reload_pending ||
				mc->prev_path[0] != '\0')
				timeout = timeout < 0 ? 1000 : Min(timeout, 1000);
			/* an overload ends without any frame arriving: look again */
			if (mc->overloaded)
				timeout = timeout < 0 ? 250 : Min(timeout, 250);
		}

		if (alive_ms >= 0 && (timeout < 0 || alive_ms < timeout))
			timeout = alive_ms;
		nevents = WaitEventSetWait(wes, timeout, events, lengthof(events), PG_WAIT_EXTENSION);
		for (k = 0; k < nevents; k++)
		{
			EngineProc *p = (EngineProc *) events[k].user_data;

			if (events[k].events & WL_LATCH_SET)
				ResetLatch(MyLatch);
			if (p != NULL && p->sock != PGINVALID_SOCKET && events[k].pos == p->wes_pos &&
				(events[k].events & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE)))
			{
				if (events[k].events & WL_SOCKET_READABLE)
					(void) read_engine(p);
				if (p->sock != PGINVALID_SOCKET && (events[k].events & WL_SOCKET_WRITEABLE) &&
					!flush_output(p))
					engine_lost(p, false, "Writing to the engine failed.");
			}
		}
	}
}
