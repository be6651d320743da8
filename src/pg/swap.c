/*
 * swap.c - live swap of a model's file (opus_model_swap /
 * opus_model_rollback), part of the supervisor worker (supervisor_int.h).
 *
 * A model has two engine places, procs[cur] (serving) and procs[1 - cur]
 * (the candidate being loaded and warmed up, or the old version
 * draining).  A candidate that reaches READY runs the canary prompts
 * (warm-up); when all complete without error before
 * opus.model_warmup_timeout, cur flips: new requests go to the new
 * version, requests already sent finish on the old one, which is stopped
 * once it holds none.  A candidate that fails to load, fails a canary,
 * times out or dies is stopped and the old version keeps serving; nothing
 * retries.  For opus.model_probation after a switch the old file is the
 * rollback target: if the new engine dies, or half of at least 8 requests
 * fail, the supervisor swaps back by itself.  A new version that does not
 * fit opus.memory_budget beside the serving one drains that one first.
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "opus_stats.h"
#include "supervisor_int.h"

/* The canary prompts a new version must answer before it serves, by default. */
static const char *const canary_prompts[N_CANARIES] = {
	"The capital of France is",
	"1, 2, 3, 4,",
	"Hello",
};

/*
 * A swap ended without switching (the candidate failed to load, failed
 * its warm-up, timed out or died).  The serving version keeps serving;
 * the entry's last_error says why; nothing retries.
 */
void
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
void
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
void
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
	OpusStatsEngineSpawned(m, cand->cfg.path, cand->cfg.device, cand->cfg.threads);
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
void
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
void
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
