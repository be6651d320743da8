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
 * The worker is four files over one internal header (supervisor_int.h):
 * this one (registration, start-up, the model declarations of opus.model /
 * opus.models, the main loop and its wait set), engine_proc.c (an engine
 * process's lifecycle), swap.c (live swap) and relay.c (slots <-> engines).
 *
 * The main loop, once per wake-up: reap engines that exited, advance the
 * swaps (swap.c), start engines that are due, relay new and cancelled
 * slots (relay.c), check liveness and flush output; then wait for the
 * latch, an engine socket, or the next timer (a restart, a warm-up
 * deadline, a liveness check).
 */
#include "postgres.h"

#include <errno.h>
#include <signal.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "opus_stats.h"
#include "supervisor_int.h"

ModelCtl	models[OPUS_MAX_MODELS];
bool		wes_dirty = true;
static WaitEventSet *wes = NULL;

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
				mc->vocab_known = false;
				mc->fallback_vocab_bad = false;
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
				OpusStatsEngineDeclared(found);
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
		strlcpy(OpusModel(found)->query_prefix, decl[k].query_prefix, OPUS_EMBED_PREFIX_LEN);
		strlcpy(OpusModel(found)->document_prefix, decl[k].document_prefix, OPUS_EMBED_PREFIX_LEN);
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

	/* the default model's fallback: opus.model_fallback, opus.model_max_ttft */
	strlcpy(models[0].decl.fallback, opus_model_fallback ? opus_model_fallback : "",
			sizeof(models[0].decl.fallback));
	models[0].decl.max_ttft_ms = models[0].decl.fallback[0] != '\0' ? opus_model_max_ttft_ms : 0;
	SpinLockAcquire(&OpusModel(0)->mutex);
	strlcpy(OpusModel(0)->fallback, models[0].decl.fallback, sizeof(OpusModel(0)->fallback));
	OpusModel(0)->max_ttft_ms = models[0].decl.max_ttft_ms;
	SpinLockRelease(&OpusModel(0)->mutex);

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
	if (models[0].decl.fallback[0] != '\0' && models[0].fallback < 0)
		ereport(LOG,
				(errmsg("opus_pg: opus.model_fallback names \"%s\", which opus.models does not declare; the default model has no fallback",
						models[0].decl.fallback)));
	else if (models[0].fallback > 0 && models[0].decl.max_ttft_ms <= 0)
		ereport(LOG,
				(errmsg("opus_pg: opus.model_fallback is set but opus.model_max_ttft is 0; the default model's requests never go to \"%s\"",
						models[0].decl.fallback)));

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
	relay_init();
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
			/* an overload starts or ends without any frame arriving: look again */
			if (mc->overloaded || mc->awaiting_first)
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
