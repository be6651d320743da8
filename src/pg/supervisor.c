/*
 * supervisor.c - the opus_pg supervisor background worker.
 *
 * One supervisor per server.  It spawns the engine (`opus_engine serve
 * --fd 3`, fork + exec, one end of a socketpair inherited), relays requests
 * from the shared-memory slots to the engine and results back, and watches
 * the engine: if it exits for any reason, every request it held fails with
 * 58000, the exit is counted and the engine is started again with
 * exponential backoff (0.5 s doubling to 30 s; reset after 30 s of health).
 * A start that fails before READY (missing model, bad file, failed load)
 * puts the engine in FAILED: queued and new requests fail at once with the
 * reason, and the start is retried on the same backoff, so a broken model
 * never makes a restart storm.
 *
 * The KV cache lives in a shared-memory arena of its own (a memfd sized
 * from opus.kv_cache_size, never PostgreSQL's shared memory), created here
 * once and handed to every engine as fd 4 (`--kv-fd 4`); the engine maps
 * it and places its KV block pool there.  If the arena cannot be created
 * the engine runs with private memory (logged once).
 *
 * The engine process never touches PostgreSQL shared memory: the child
 * execs immediately after fork, doing only async-signal-safe system calls
 * in between (fd set-up, setpgid, PR_SET_PDEATHSIG, signal reset).
 *
 * Slot ownership follows the rules at the top of shmem.c.  Local state:
 * sent_id[i] is the id of the request the engine holds for slot i whose
 * results still matter (0 = none); frames for any other id are dropped.
 * cancel_sent[i] / overflowed[i] track a CANCEL already sent and a result
 * that did not fit the slot buffer (the slot then waits for the engine's
 * DONE before reporting the error).
 *
 * I/O with the engine is non-blocking and framed (src/protocol.h): partial
 * reads and writes are buffered here, every frame the engine sends is
 * validated, and a malformed one gets the engine killed and restarted.
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
#include "opus_stats.h"

#define BACKOFF_MIN_MS		500
#define BACKOFF_MAX_MS		30000
#define HEALTHY_AFTER_MS	30000
#define ENGINE_FD			3
#define KV_ARENA_FD			4

/* The engine process as the supervisor sees it. */
typedef struct EngineProc
{
	pid_t		pid;			/* 0 = none */
	pgsocket	sock;			/* PGINVALID_SOCKET = none */
	bool		ready;
	TimestampTz spawned_at;
	TimestampTz ready_at;
	bool		got_fatal;
	int			fatal_code;
	char		fatal_msg[OPUS_PROTO_MSG_LEN];
	char		model_path[OPUS_PROTO_PATH_LEN];
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

static EngineProc eng;
static uint64 *sent_id;
static bool *cancel_sent;
static bool *overflowed;
static int	backoff_ms = BACKOFF_MIN_MS;
static TimestampTz next_start_at = 0;
static bool reload_pending = false;
static char last_logged[OPUS_PROTO_MSG_LEN];
static WaitEventSet *wes = NULL;
static int	wes_sock_pos = -1;
static bool wes_wants_write = false;
static int	kv_arena_fd = -1;	/* the shared KV arena, -1 = none */
static bool kv_arena_tried = false;

/* applied configuration, to notice changes at reload */
static char applied_model[OPUS_PROTO_PATH_LEN];
static char applied_device[OPUS_PROTO_SHORT_LEN];
static int	applied_threads = -1;
static int	applied_kv_type = -1;

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
 * Engine status in shared memory
 * --------------------------------------------------------------------- */

static void
set_engine_state(OpusEngineState state)
{
	OpusEngineStatus *e = &OpusShared->engine;

	SpinLockAcquire(&e->mutex);
	e->state = state;
	e->engine_pid = eng.pid;
	SpinLockRelease(&e->mutex);
	ConditionVariableBroadcast(&e->cv);
}

/*
 * Record why the engine cannot serve; callers get this error until the
 * next successful start.  Logged once per distinct message.
 */
static void
set_engine_failed(int code, const char *message, const char *detail)
{
	OpusEngineStatus *e = &OpusShared->engine;

	SpinLockAcquire(&e->mutex);
	e->state = OPUS_ENGINE_FAILED;
	e->engine_pid = 0;
	e->last_err_code = code;
	strlcpy(e->last_error, message, sizeof(e->last_error));
	strlcpy(e->last_error_detail, detail ? detail : "", sizeof(e->last_error_detail));
	SpinLockRelease(&e->mutex);
	ConditionVariableBroadcast(&e->cv);

	if (strcmp(last_logged, message) != 0)
	{
		ereport(LOG,
				(errmsg("opus_pg: %s", message),
				 detail && detail[0] ? errdetail("%s", detail) : 0,
				 errhint("The engine is retried with backoff (up to %d s); requests fail until it starts.",
						 BACKOFF_MAX_MS / 1000)));
		strlcpy(last_logged, message, sizeof(last_logged));
	}
}

static void
schedule_restart(void)
{
	next_start_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), backoff_ms);
	backoff_ms = Min(backoff_ms * 2, BACKOFF_MAX_MS);
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
	cancel_sent[i] = false;
	overflowed[i] = false;
}

/* Fail every request the engine holds (it died or is being replaced). */
static void
fail_in_flight(int code, const char *message, const char *detail)
{
	int			i;

	for (i = 0; i < OpusShared->n_slots; i++)
	{
		if (sent_id[i] != 0)
			fail_slot(i, code, message, detail);
	}
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
 * Output buffer
 * --------------------------------------------------------------------- */

static void
out_reserve(size_t extra)
{
	size_t		need;

	/* compact first */
	if (eng.out_off > 0)
	{
		memmove(eng.out, eng.out + eng.out_off, eng.out_len - eng.out_off);
		eng.out_len -= eng.out_off;
		eng.out_off = 0;
	}
	need = eng.out_len + extra;
	if (need > eng.out_cap)
	{
		size_t		cap = Max(eng.out_cap * 2, need);

		eng.out = eng.out ? repalloc_huge(eng.out, cap) :
			MemoryContextAllocHuge(TopMemoryContext, cap);
		eng.out_cap = cap;
	}
}

static void
send_frame(uint16 type, uint64 id, const void *payload, size_t len)
{
	out_reserve(OPUS_PROTO_HEADER_SIZE + len);
	opus_proto_encode_header((uint8_t *) eng.out + eng.out_len, (uint32_t) len, type, id);
	if (len > 0)
		memcpy(eng.out + eng.out_len + OPUS_PROTO_HEADER_SIZE, payload, len);
	eng.out_len += OPUS_PROTO_HEADER_SIZE + len;
}

/* Write what the socket takes now.  False on a write error (engine gone). */
static bool
flush_output(void)
{
	while (eng.sock != PGINVALID_SOCKET && eng.out_off < eng.out_len)
	{
		ssize_t		n = send(eng.sock, eng.out + eng.out_off,
							 eng.out_len - eng.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0)
		{
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return true;
			return false;
		}
		eng.out_off += (size_t) n;
	}
	if (eng.out_off == eng.out_len)
		eng.out_off = eng.out_len = 0;
	return true;
}

/* ---------------------------------------------------------------------
 * Spawning and reaping the engine
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

static void
rebuild_wait_set(void)
{
	if (wes)
		FreeWaitEventSet(wes);
	wes = CreateWaitEventSet(TopMemoryContext, 3);
	AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	wes_sock_pos = -1;
	wes_wants_write = false;
	if (eng.sock != PGINVALID_SOCKET)
		wes_sock_pos = AddWaitEventToSet(wes, WL_SOCKET_READABLE, eng.sock, NULL, NULL);
}

/*
 * Stop the engine process (if any) and describe how it ended.  Closing the
 * socket makes a healthy engine exit 0; if it has not exited after
 * `grace_ms`, SIGKILL.  Blocks at most grace_ms + a little.
 */
static void
stop_engine(bool kill_now, int grace_ms, char *how, size_t howlen)
{
	int			status = 0;
	int			waited = 0;
	bool		reaped = false;

	how[0] = '\0';
	if (eng.sock != PGINVALID_SOCKET)
	{
		close(eng.sock);
		eng.sock = PGINVALID_SOCKET;
	}
	eng.in_len = 0;
	eng.out_off = eng.out_len = 0;
	if (eng.pid > 0)
	{
		if (kill_now)
			(void) kill(eng.pid, SIGKILL);
		for (;;)
		{
			pid_t		r = waitpid(eng.pid, &status, WNOHANG);

			if (r == eng.pid || (r < 0 && errno != EINTR))
			{
				reaped = (r == eng.pid);
				break;
			}
			if (waited >= grace_ms)
			{
				(void) kill(eng.pid, SIGKILL);
				while ((r = waitpid(eng.pid, &status, 0)) < 0 && errno == EINTR)
					;
				reaped = (r == eng.pid);
				break;
			}
			pg_usleep(1000L);
			waited++;
		}
		if (reaped)
		{
			char		desc[128];

			describe_exit(status, desc, sizeof(desc));
			snprintf(how, howlen, "The engine process (PID %d) %s.", (int) eng.pid, desc);
		}
		else
			snprintf(how, howlen, "The engine process (PID %d) could not be waited for.", (int) eng.pid);
	}
	eng.pid = 0;
	eng.ready = false;
	rebuild_wait_set();
}

/*
 * The engine is gone or must go (EOF, I/O error, protocol error, exit
 * seen by waitpid).  Fails what it held, records why, schedules a restart.
 */
static void
engine_lost(bool kill_now, const char *reason)
{
	OpusEngineStatus *e = &OpusShared->engine;
	char		how[OPUS_PROTO_MSG_LEN];
	char		detail[OPUS_PROTO_MSG_LEN];
	bool		was_ready = eng.ready;
	bool		got_fatal = eng.got_fatal;
	TimestampTz now;

	stop_engine(kill_now, 200, how, sizeof(how));
	now = GetCurrentTimestamp();
	if (reason && how[0])
		snprintf(detail, sizeof(detail), "%s %s", reason, how);
	else if (reason)
		strlcpy(detail, reason, sizeof(detail));
	else
		strlcpy(detail, how[0] ? how : "The engine closed its socket.", sizeof(detail));

	OpusStatsEngineLost();
	SpinLockAcquire(&e->mutex);
	e->restarts++;
	strlcpy(e->last_exit, detail, sizeof(e->last_exit));
	SpinLockRelease(&e->mutex);

	fail_in_flight(OPUS_PG_ERR_ENGINE_DIED, "opus engine terminated", detail);

	if (was_ready)
	{
		if (TimestampDifferenceExceeds(eng.ready_at, now, HEALTHY_AFTER_MS))
			backoff_ms = BACKOFF_MIN_MS;
		ereport(LOG,
				(errmsg("opus_pg: engine terminated; restarting in %d ms", backoff_ms),
				 errdetail("%s", detail)));
		set_engine_state(OPUS_ENGINE_BACKOFF);
	}
	else if (got_fatal)
	{
		char		msg[OPUS_PROTO_MSG_LEN];

		snprintf(msg, sizeof(msg), "opus engine could not load model \"%s\"", eng.model_path);
		set_engine_failed(eng.fatal_code == OPUS_PROTO_ERR_NOT_FOUND ?
						  OPUS_PG_ERR_MODEL_MISSING : OPUS_PG_ERR_ENGINE_DOWN,
						  msg, eng.fatal_msg);
	}
	else
		set_engine_failed(OPUS_PG_ERR_ENGINE_DOWN,
						  "opus engine exited during start-up", detail);
	schedule_restart();
}

/*
 * Create the shared KV arena once: an anonymous memory file of
 * opus.kv_cache_size bytes, allocated up front so that a machine without
 * the memory says so here.  On failure the engine uses private memory.
 */
static void
ensure_kv_arena(void)
{
	off_t		size = (off_t) opus_kv_cache_size_mb * 1024 * 1024;
	int			fd;
	int			rc;

	if (kv_arena_fd >= 0 || kv_arena_tried)
		return;
	kv_arena_tried = true;
	fd = memfd_create("opus_pg kv cache", MFD_CLOEXEC);
	if (fd < 0)
	{
		ereport(LOG,
				(errmsg("opus_pg: could not create the shared KV cache arena: %m"),
				 errdetail("The engine keeps its KV cache in private memory.")));
		return;
	}
	if (ftruncate(fd, size) != 0)
		rc = errno;
	else
		rc = posix_fallocate(fd, 0, size);
	if (rc != 0)
	{
		close(fd);
		ereport(LOG,
				(errmsg("opus_pg: could not allocate a shared KV cache arena of %lld bytes: %s",
						(long long) size, strerror(rc)),
				 errdetail("The engine keeps its KV cache in private memory.")));
		return;
	}
	kv_arena_fd = fd;
}

/* Start the engine if it is time.  Failures to start are FAILED states. */
static void
maybe_start_engine(void)
{
	char		engine_path[MAXPGPATH];
	char		msg[OPUS_PROTO_MSG_LEN];
	char		detail[OPUS_PROTO_MSG_LEN];
	struct stat st;
	int			sv[2];
	struct opus_proto_hello hello;
	struct opus_proto_writer w;
	uint8_t		payload[OPUS_PROTO_HELLO_SIZE];
	OpusEngineStatus *e = &OpusShared->engine;
	int			nthreads;

	if (eng.pid > 0 || GetCurrentTimestamp() < next_start_at)
		return;

	/* What to run. */
	strlcpy(applied_model, opus_model, sizeof(applied_model));
	strlcpy(applied_device, opus_device, sizeof(applied_device));
	applied_threads = opus_threads;
	applied_kv_type = opus_kv_cache_type;
	reload_pending = false;

	if (!OpusResolveModelPath(opus_model, eng.model_path, sizeof(eng.model_path)))
	{
		set_engine_failed(OPUS_PG_ERR_MODEL_MISSING, "opus.model resolves to a path that is too long", NULL);
		schedule_restart();
		return;
	}
	SpinLockAcquire(&e->mutex);
	strlcpy(e->model_path, eng.model_path, sizeof(e->model_path));
	SpinLockRelease(&e->mutex);
	if (stat(eng.model_path, &st) != 0 || !S_ISREG(st.st_mode))
	{
		snprintf(msg, sizeof(msg), "opus model file \"%s\" does not exist", eng.model_path);
		snprintf(detail, sizeof(detail), "opus.model is set to \"%s\".", opus_model);
		set_engine_failed(OPUS_PG_ERR_MODEL_MISSING, msg, detail);
		schedule_restart();
		return;
	}
	resolve_engine_path(engine_path, sizeof(engine_path));
	if (access(engine_path, X_OK) != 0)
	{
		snprintf(msg, sizeof(msg), "opus engine binary \"%s\" is not executable", engine_path);
		snprintf(detail, sizeof(detail), "%s.", strerror(errno));
		set_engine_failed(OPUS_PG_ERR_ENGINE_MISSING, msg, detail);
		schedule_restart();
		return;
	}

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
	{
		snprintf(detail, sizeof(detail), "socketpair failed: %s.", strerror(errno));
		set_engine_failed(OPUS_PG_ERR_ENGINE_DOWN, "opus engine could not be started", detail);
		schedule_restart();
		return;
	}
	ensure_kv_arena();
	eng.pid = spawn_engine(engine_path, sv[1], kv_arena_fd);
	close(sv[1]);
	if (eng.pid < 0)
	{
		snprintf(detail, sizeof(detail), "fork failed: %s.", strerror(errno));
		close(sv[0]);
		eng.pid = 0;
		set_engine_failed(OPUS_PG_ERR_ENGINE_DOWN, "opus engine could not be started", detail);
		schedule_restart();
		return;
	}
	eng.sock = sv[0];
	if (!pg_set_noblock(eng.sock))
		elog(LOG, "opus_pg: could not make the engine socket non-blocking: %m");
	eng.ready = false;
	eng.got_fatal = false;
	eng.fatal_msg[0] = '\0';
	eng.spawned_at = GetCurrentTimestamp();
	eng.in_len = 0;
	eng.out_off = eng.out_len = 0;
	rebuild_wait_set();

	memset(&hello, 0, sizeof(hello));
	hello.magic = OPUS_PROTO_MAGIC;
	hello.version = OPUS_PROTO_VERSION;
	nthreads = opus_threads;
	if (nthreads <= 0)
	{
		long		ncpu = sysconf(_SC_NPROCESSORS_ONLN);

		nthreads = ncpu > 0 ? (int) Min(ncpu, 1024) : 1;
	}
	hello.n_threads = nthreads;
	hello.n_ctx = 0;
	hello.kv_cache_bytes = (int64) opus_kv_cache_size_mb * 1024 * 1024;
	hello.kv_block_size = opus_kv_block_size;
	hello.max_batch_tokens = opus_max_batch_tokens;
	hello.kv_cache_type = applied_kv_type;
	/*
	 * The engine resolves "auto" (cuda:0 when it was built with CUDA and
	 * sees a GPU, else cpu) and fails a CUDA device it cannot use.
	 */
	strlcpy(hello.device, opus_device, sizeof(hello.device));
	strlcpy(hello.model_path, eng.model_path, sizeof(hello.model_path));
	opus_proto_writer_init(&w, payload, sizeof(payload));
	opus_proto_encode_hello(&w, &hello);
	send_frame(OPUS_MSG_HELLO, 0, payload, w.len);
	OpusStatsEngineSpawned(eng.model_path, hello.device, hello.n_threads);

	SpinLockAcquire(&e->mutex);
	e->starts++;
	e->started_at = eng.spawned_at;
	SpinLockRelease(&e->mutex);
	set_engine_state(OPUS_ENGINE_STARTING);
	ereport(LOG,
			(errmsg("opus_pg: started engine (PID %d) for model \"%s\"",
					(int) eng.pid, eng.model_path)));
}

/* Notice an engine that exited without us seeing EOF first. */
static void
check_engine_exited(void)
{
	int			status;
	pid_t		r;

	if (eng.pid <= 0)
		return;
	r = waitpid(eng.pid, &status, WNOHANG);
	if (r == eng.pid)
	{
		char		desc[128];
		char		reason[OPUS_PROTO_MSG_LEN];

		describe_exit(status, desc, sizeof(desc));
		/* Already reaped: stop_engine must not wait for it. */
		eng.pid = 0;
		snprintf(reason, sizeof(reason), "The engine process %s.", desc);
		engine_lost(false, reason);
	}
}

/* ---------------------------------------------------------------------
 * Frames from the engine
 * --------------------------------------------------------------------- */

/* The slot a request id names, if it is the request the engine holds. */
static int
slot_for_id(uint64 id)
{
	int			i = OpusSlotIndexFromId(id);

	if (i < 0 || sent_id[i] != id)
		return -1;
	return i;
}

static void
append_result(int i, uint64 id, const char *data, size_t len)
{
	OpusSlot   *slot = OpusGetSlot(i);

	if (overflowed[i])
		return;
	if ((Size) slot->result_len + len > OpusShared->slot_buf_size)
	{
		overflowed[i] = true;
		if (!cancel_sent[i])
		{
			send_frame(OPUS_MSG_CANCEL, id, NULL, 0);
			cancel_sent[i] = true;
		}
		return;
	}
	memcpy(OpusSlotBuf(slot) + slot->result_len, data, len);
	slot->result_len += (uint32) len;
}

static void
finish_slot(int i, const struct opus_proto_done *d)
{
	OpusSlot   *slot = OpusGetSlot(i);
	bool		error = d->finish == OPUS_PROTO_FINISH_ERROR || overflowed[i];

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
	OpusStatsRequestDone(i, d, error);
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
	cancel_sent[i] = false;
	overflowed[i] = false;
}

/*
 * Handle one complete frame from the engine.  Returns NULL if fine, or why
 * the frame is a protocol violation.
 */
static const char *
handle_engine_frame(const struct opus_proto_header *h, const uint8_t *p)
{
	const char *why = NULL;
	OpusEngineStatus *e = &OpusShared->engine;
	int			i;

	switch (h->type)
	{
		case OPUS_MSG_READY:
			{
				struct opus_proto_ready r;

				if (eng.ready)
					return "READY received twice";
				if (!opus_proto_parse_ready(p, h->length, &r, &why))
				{
					static char mismatch[OPUS_PROTO_MSG_LEN];

					if (strcmp(why, OPUS_PROTO_VERSION_MISMATCH) != 0)
						return why;
					opus_proto_version_mismatch(mismatch, sizeof(mismatch), "opus_engine",
												r.version, "opus_pg.so");
					return mismatch;
				}
				eng.ready = true;
				eng.ready_at = GetCurrentTimestamp();
				SpinLockAcquire(&e->mutex);
				e->model = r;
				e->ever_ready = true;
				e->ready_at = eng.ready_at;
				e->last_err_code = 0;
				e->last_error[0] = '\0';
				e->last_error_detail[0] = '\0';
				memset(&e->stats, 0, sizeof(e->stats));
				SpinLockRelease(&e->mutex);
				OpusStatsEngineReady();
				OpusExpertsEngineReady(&r);
				set_engine_state(OPUS_ENGINE_READY);
				last_logged[0] = '\0';
				ereport(LOG,
						(errmsg("opus_pg: engine (PID %d) ready: %s (%s, %s, context %d)",
								(int) eng.pid, r.name, r.arch, r.tensor_type, r.n_ctx)));
				return NULL;
			}
		case OPUS_MSG_FATAL:
			{
				struct opus_proto_fatal f;

				if (!opus_proto_parse_fatal(p, h->length, &f, &why))
					return why;
				eng.got_fatal = true;
				eng.fatal_code = (int) f.code;
				strlcpy(eng.fatal_msg, f.message, sizeof(eng.fatal_msg));
				return NULL;
			}
		case OPUS_MSG_STATS:
			{
				struct opus_proto_stats s;

				if (!eng.ready)
					return "STATS before READY";
				if (!opus_proto_parse_stats(p, h->length, &s, &why))
					return why;
				SpinLockAcquire(&e->mutex);
				e->stats = s;
				SpinLockRelease(&e->mutex);
				OpusStatsEngineStats(&s);
				return NULL;
			}
		case OPUS_MSG_EXPERTS:
			{
				struct opus_proto_experts x;

				if (!eng.ready)
					return "EXPERTS before READY";
				if (h->id != 0)
					return "EXPERTS with a request id";
				if (!opus_proto_parse_experts(p, h->length, &x, &why))
					return why;
				OpusExpertsEngineReport(&x);
				return NULL;
			}
		case OPUS_MSG_PROGRESS:
			{
				struct opus_proto_progress pr;

				if (!eng.ready)
					return "PROGRESS before READY";
				if (!opus_proto_parse_progress(p, h->length, &pr, &why))
					return why;
				if (OpusSlotIndexFromId(h->id) < 0)
					return "PROGRESS for an unknown request id";
				i = slot_for_id(h->id);
				if (i >= 0)
					OpusStatsRequestProgress(i, &pr);
				return NULL;
			}
		case OPUS_MSG_PONG:
			return opus_proto_parse_empty(h->length, &why) ? NULL : why;
		case OPUS_MSG_TEXT:
		case OPUS_MSG_TOKENS:
			if (!eng.ready)
				return "result frame before READY";
			if (h->type == OPUS_MSG_TEXT ? !opus_proto_parse_text(p, h->length, &why) :
				!opus_proto_parse_tokens(p, h->length, &why))
				return why;
			if (OpusSlotIndexFromId(h->id) < 0)
				return "result frame for an unknown request id";
			i = slot_for_id(h->id);
			if (i < 0)
				return NULL;	/* a request we no longer care about */
			if ((OpusGetSlot(i)->kind == OPUS_KIND_TOKENIZE) != (h->type == OPUS_MSG_TOKENS))
				return "result frame of the wrong type for the request";
			append_result(i, h->id, (const char *) p, h->length);
			return NULL;
		case OPUS_MSG_DONE:
			{
				struct opus_proto_done d;

				if (!eng.ready)
					return "DONE before READY";
				if (!opus_proto_parse_done(p, h->length, &d, &why))
					return why;
				if (OpusSlotIndexFromId(h->id) < 0)
					return "DONE for an unknown request id";
				i = slot_for_id(h->id);
				if (i >= 0)
					finish_slot(i, &d);
				return NULL;
			}
		default:
			return "frame type the engine must not send";
	}
}

/*
 * Read what the engine sent and handle every complete frame.  Returns
 * false if the engine is gone (EOF / error) or broke the protocol; the
 * engine has then been dealt with.
 */
static bool
read_engine(void)
{
	for (;;)
	{
		ssize_t		n;
		size_t		off = 0;

		if (eng.in_cap - eng.in_len < 65536)
		{
			size_t		cap = Max(eng.in_cap * 2, eng.in_len + 65536);

			eng.in = eng.in ? repalloc_huge(eng.in, cap) :
				MemoryContextAllocHuge(TopMemoryContext, cap);
			eng.in_cap = cap;
		}
		n = recv(eng.sock, eng.in + eng.in_len, eng.in_cap - eng.in_len, MSG_DONTWAIT);
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
			engine_lost(false, reason[0] ? reason : NULL);
			return false;
		}
		eng.in_len += (size_t) n;

		for (;;)
		{
			struct opus_proto_header h;
			const char *why = NULL;
			enum opus_proto_result r;

			r = opus_proto_parse_header((const uint8_t *) eng.in + off, eng.in_len - off, &h, &why);
			if (r == OPUS_PROTO_NEED_MORE)
				break;
			if (r == OPUS_PROTO_OK)
			{
				if (eng.in_len - off < OPUS_PROTO_HEADER_SIZE + (size_t) h.length)
					break;
				why = handle_engine_frame(&h, (const uint8_t *) eng.in + off + OPUS_PROTO_HEADER_SIZE);
			}
			if (why != NULL)
			{
				char		reason[OPUS_PROTO_MSG_LEN];

				ereport(WARNING,
						(errmsg("opus_pg: engine (PID %d) broke the protocol: %s; killing it",
								(int) eng.pid, why)));
				snprintf(reason, sizeof(reason), "The engine broke the protocol (%s).", why);
				engine_lost(true, reason);
				return false;
			}
			off += OPUS_PROTO_HEADER_SIZE + h.length;
		}
		if (off > 0)
		{
			memmove(eng.in, eng.in + off, eng.in_len - off);
			eng.in_len -= off;
		}
	}
}

/* ---------------------------------------------------------------------
 * Slots -> engine
 * --------------------------------------------------------------------- */

static void
process_slots(void)
{
	OpusEngineStatus *e = &OpusShared->engine;
	OpusEngineState estate;
	int			fail_code;
	char		fail_msg[OPUS_PROTO_MSG_LEN];
	char		fail_detail[OPUS_PROTO_MSG_LEN];
	int			i;

	SpinLockAcquire(&e->mutex);
	estate = e->state;
	fail_code = e->last_err_code;
	strlcpy(fail_msg, e->last_error, sizeof(fail_msg));
	strlcpy(fail_detail, e->last_error_detail, sizeof(fail_detail));
	SpinLockRelease(&e->mutex);

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
			if (estate == OPUS_ENGINE_READY && eng.ready && !reload_pending)
			{
				pg_read_barrier();
				slot->result_len = 0;
				send_frame(OPUS_MSG_SUBMIT, id, OpusSlotBuf(slot), slot->payload_len);
				OpusStatsRequestSent(i);
				sent_id[i] = id;
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
			if (sent_id[i] == id && id != 0 && !cancel_sent[i])
				send_frame(OPUS_MSG_CANCEL, id, NULL, 0);
			OpusStatsRequestCancelled(i);
			sent_id[i] = 0;
			cancel_sent[i] = false;
			overflowed[i] = false;
			SpinLockAcquire(&slot->mutex);
			if (slot->state == OPUS_SLOT_CANCELLED && slot->request_id == id)
				slot->state = OPUS_SLOT_FREE;
			SpinLockRelease(&slot->mutex);
		}
	}
}

static int
n_in_flight(void)
{
	int			i,
				n = 0;

	for (i = 0; i < OpusShared->n_slots; i++)
		n += sent_id[i] != 0;
	return n;
}

/* ---------------------------------------------------------------------
 * Main loop
 * --------------------------------------------------------------------- */

static void
supervisor_exit(int code, Datum arg)
{
	OpusEngineStatus *e = &OpusShared->engine;
	char		how[OPUS_PROTO_MSG_LEN];

	stop_engine(false, 1000, how, sizeof(how));
	fail_in_flight(OPUS_PG_ERR_ENGINE_DOWN, "opus engine stopped",
				   "The opus_pg supervisor is shutting down.");
	SpinLockAcquire(&e->mutex);
	e->state = OPUS_ENGINE_STOPPED;
	e->engine_pid = 0;
	e->supervisor_pid = 0;
	e->supervisor_procno = -1;
	SpinLockRelease(&e->mutex);
	ConditionVariableBroadcast(&e->cv);
}

static void
process_reload(void)
{
	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	if (strcmp(applied_model, opus_model) != 0 ||
		strcmp(applied_device, opus_device) != 0 ||
		applied_threads != opus_threads ||
		applied_kv_type != opus_kv_cache_type)
	{
		if (eng.pid > 0)
		{
			ereport(LOG,
					(errmsg("opus_pg: engine settings changed; restarting the engine when its requests finish")));
			reload_pending = true;
		}
		/* A failed or waiting engine starts again right away. */
		backoff_ms = BACKOFF_MIN_MS;
		next_start_at = 0;
		last_logged[0] = '\0';
	}
}

void
OpusSupervisorMain(Datum arg)
{
	OpusEngineStatus *e;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	pqsignal(SIGCHLD, handle_sigchld);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	if (OpusShared == NULL)
		ereport(ERROR, (errmsg("opus_pg shared memory is not initialised")));
	e = &OpusShared->engine;

	memset(&eng, 0, sizeof(eng));
	eng.sock = PGINVALID_SOCKET;
	sent_id = MemoryContextAllocZero(TopMemoryContext, sizeof(uint64) * OpusShared->n_slots);
	cancel_sent = MemoryContextAllocZero(TopMemoryContext, sizeof(bool) * OpusShared->n_slots);
	overflowed = MemoryContextAllocZero(TopMemoryContext, sizeof(bool) * OpusShared->n_slots);
	rebuild_wait_set();

	recover_slots();
	SpinLockAcquire(&e->mutex);
	e->supervisor_pid = MyProcPid;
	e->supervisor_procno = MyProc->pgprocno;
	e->engine_pid = 0;
	e->state = OPUS_ENGINE_STOPPED;
	SpinLockRelease(&e->mutex);
	before_shmem_exit(supervisor_exit, (Datum) 0);

	for (;;)
	{
		WaitEvent	events[3];
		int			nevents;
		long		timeout = -1;
		int			k;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
			process_reload();

		check_engine_exited();
		if (reload_pending && eng.pid > 0 && n_in_flight() == 0)
		{
			char		how[OPUS_PROTO_MSG_LEN];

			stop_engine(false, 1000, how, sizeof(how));
			ereport(LOG, (errmsg("opus_pg: engine stopped for a settings change"), errdetail("%s", how)));
			set_engine_state(OPUS_ENGINE_STOPPED);
			next_start_at = 0;
			backoff_ms = BACKOFF_MIN_MS;
		}
		maybe_start_engine();
		process_slots();
		if (eng.sock != PGINVALID_SOCKET && !flush_output())
			engine_lost(false, "Writing to the engine failed.");

		/* Wait for the latch, the socket, a restart time, or a reap. */
		if (eng.sock != PGINVALID_SOCKET && wes_sock_pos >= 0)
		{
			bool		want_write = eng.out_off < eng.out_len;

			if (want_write != wes_wants_write)
			{
				ModifyWaitEvent(wes, wes_sock_pos,
								WL_SOCKET_READABLE | (want_write ? WL_SOCKET_WRITEABLE : 0), NULL);
				wes_wants_write = want_write;
			}
		}
		if (eng.pid <= 0)
		{
			TimestampTz now = GetCurrentTimestamp();

			timeout = next_start_at > now ?
				(long) ((next_start_at - now) / 1000) + 1 : 0;
		}
		else if (eng.sock == PGINVALID_SOCKET)
			timeout = 10;

		nevents = WaitEventSetWait(wes, timeout, events, lengthof(events), PG_WAIT_EXTENSION);
		for (k = 0; k < nevents; k++)
		{
			if (events[k].events & WL_LATCH_SET)
				ResetLatch(MyLatch);
			if (events[k].pos == wes_sock_pos && eng.sock != PGINVALID_SOCKET &&
				(events[k].events & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE)))
			{
				if (events[k].events & WL_SOCKET_READABLE)
					(void) read_engine();
				if (eng.sock != PGINVALID_SOCKET && (events[k].events & WL_SOCKET_WRITEABLE) &&
					!flush_output())
					engine_lost(false, "Writing to the engine failed.");
			}
		}
	}
}
