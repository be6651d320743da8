/*
 * engine_proc.c - an engine process's lifecycle, as the supervisor runs it
 * (part of the supervisor worker: supervisor_int.h).
 *
 * Start: the settings of the model (its declaration, then opus.*), the
 * memory budget, fork + exec of `opus_engine serve --fd 3`, the HELLO
 * frame.  Stop, loss (fail what it held, count the exit, restart with
 * backoff or end the swap it was part of), reaping, and liveness (PING,
 * CPU time).  The model's state in shared memory (OpusModel(m)) is
 * published from here.
 *
 * Each engine process gets a KV arena of its own (a memfd sized from the
 * model's kv_cache_size, never PostgreSQL's shared memory), created here
 * and handed to the engine as fd 4 (`--kv-fd 4`); it is kept across
 * restarts of that engine and closed when the engine goes for good (a
 * drained old version, a removed model).  If the arena cannot be created
 * the engine runs with private memory (logged once).
 *
 * The engine process never touches PostgreSQL shared memory: the child
 * execs immediately after fork, doing only async-signal-safe system calls
 * in between (fd set-up, setpgid, PR_SET_PDEATHSIG, signal reset).
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
#include "utils/memutils.h"

#include "opus_experts.h"
#include "opus_stats.h"
#include "supervisor_int.h"

#define ENGINE_FD			3
#define KV_ARENA_FD			4

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

void
set_model_state(int m, OpusEngineState state)
{
	OpusEngineStatus *e = OpusModel(m);

	SpinLockAcquire(&e->mutex);
	e->state = state;
	e->engine_pid = models[m].procs[models[m].cur].pid;
	SpinLockRelease(&e->mutex);
	ConditionVariableBroadcast(&e->cv);
}

void
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
const char *
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

void
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
void
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
void
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
	models[m].vocab_known = true;
	models[m].n_vocab = p->info.n_vocab;
	models[m].vocab_hash = p->info.vocab_hash;
	OpusStatsEngineReady(m);
	if (m == 0)
		OpusExpertsEngineReady(&p->info);
	set_model_state(m, OPUS_ENGINE_READY);
	models[m].last_logged[0] = '\0';
}

/*
 * Engine p is gone or must go (EOF, I/O error, protocol error, exit seen
 * by waitpid).  Fails what it held, records why.  A serving engine is
 * restarted with backoff (or, in probation after a swap, replaced by the
 * previous version); a candidate ends its swap; a draining one just ends.
 */
void
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

	OpusStatsEngineLost(m);
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
bool
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

bool
config_equal(const EngineConfig *a, const EngineConfig *b)
{
	return strcmp(a->path, b->path) == 0 && strcmp(a->device, b->device) == 0 &&
		a->threads == b->threads && a->kv_cache_mb == b->kv_cache_mb &&
		a->kv_cache_type == b->kv_cache_type && a->max_batch_tokens == b->max_batch_tokens;
}

/* Memory an engine with cfg takes: its weights (the file) and KV arena. */
int64
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
bool
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
bool
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
void
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
	OpusStatsEngineSpawned(m, cfg.path, cfg.device, cfg.threads);
	SpinLockAcquire(&e->mutex);
	e->starts++;
	e->started_at = p->spawned_at;
	e->threads = cfg.threads;
	e->kv_bytes = (int64) cfg.kv_cache_mb * 1024 * 1024;
	SpinLockRelease(&e->mutex);
	set_model_state(m, OPUS_ENGINE_STARTING);
}

/* Notice an engine that exited without us seeing EOF first. */
void
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

/* Mark a serving engine unresponsive (or not) in the views. */
void
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
long
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
