/*
 * models.c - several models served at once: the opus.models declaration,
 * the model lookup a backend does per call (model => 'name'), and the SQL
 * surface (opus_models, opus_model_swap, opus_model_rollback).
 *
 * Model entries live in shared memory (OpusModel(i), i < OPUS_MAX_MODELS):
 * entry 0 is the default model (opus.model, named "default"), entries 1..
 * are opus.models' declarations in the supervisor's order.  Only the
 * supervisor assigns entries (at start and at each reload); backends read
 * them under the entry's spinlock.  A request carries the entry index and
 * the entry's epoch at lookup: if the entry was removed or re-declared
 * under another name before the supervisor sends it, the request fails
 * with 42704 instead of going to another model.
 *
 * opus.models syntax (PGC_SIGHUP, so ALTER SYSTEM + pg_reload_conf()):
 *
 *     name=path-or-installed-name[;option=value...][, ...]
 *
 * options: device, threads, kv_cache_size (MB), kv_cache_type (f16 or
 * q8_0), max_batch_tokens, role (only members of that role may use the
 * model), fallback (another declared model, or "default") with max_ttft
 * (ms; while the model's time to first token misses it, requests that
 * allow it go to the fallback), query_prefix and document_prefix (an
 * embedding model's text before every input of that input_type, in
 * 'quotes' to keep blanks at its ends; no ',' or ';' inside).  Names are lower-case identifiers, unique, not "default".  The
 * check hook refuses a malformed value, so a reload never half-applies.
 * The parser itself is plain C in src/model_decl.c (fuzzed by
 * test/fuzz/fuzz_modeldecl.c).  See docs/models.md.
 */
#include "postgres.h"

#include <ctype.h>
#include <errno.h>
#include <unistd.h>

#include "catalog/pg_authid.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "opus_pg.h"

StaticAssertDecl(OPUS_ROLE_NAME_LEN == NAMEDATALEN,
				 "model_decl.h's role name length is NAMEDATALEN");

char	   *opus_models = NULL;
int			opus_model_warmup_timeout_ms = 60000;
int			opus_model_probation_s = 300;
char	   *opus_model_fallback = NULL;
int			opus_model_max_ttft_ms = 0;
int			opus_memory_budget_mb = 0;

/* opus.model_fallback: empty, or a model name (declared or not yet). */
static bool
check_model_fallback(char **newval, void **extra, GucSource source)
{
	const char *v = *newval ? *newval : "";

	if (v[0] == '\0')
		return true;
	if (!opus_model_name_valid(v, strlen(v)) || strcmp(v, "default") == 0)
	{
		GUC_check_errdetail("opus.model_fallback must name a model declared in opus.models (a lower-case identifier, not \"default\").");
		return false;
	}
	return true;
}

static bool
check_opus_models(char **newval, void **extra, GucSource source)
{
	OpusModelDecl decl[OPUS_MAX_MODELS - 1];
	char		err[256];
	int			n;

	if (!OpusParseModels(*newval, decl, &n, err, sizeof(err)))
	{
		GUC_check_errdetail("%s", err);
		return false;
	}
	return true;
}

void
OpusDefineModelSettings(bool preloading)
{
	DefineCustomStringVariable("opus.models",
							   "Named models served beside the default one: name=path[;option=value...], ...",
							   "Options: device, threads, kv_cache_size, kv_cache_type, max_batch_tokens, role, fallback, max_ttft, query_prefix, document_prefix. "
							   "Each model gets its own engine; see docs/models.md.",
							   &opus_models,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY,
							   check_opus_models, NULL, NULL);
	DefineCustomIntVariable("opus.model_warmup_timeout",
							"Time a swapped-in model version has to load and answer its canary prompts.",
							NULL,
							&opus_model_warmup_timeout_ms,
							60000, 1000, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("opus.model_probation",
							"After a swap, how long the old version stays the automatic rollback target.",
							NULL,
							&opus_model_probation_s,
							300, 0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomStringVariable("opus.model_fallback",
							   "The model that serves the default model's requests that allow it while the default model misses opus.model_max_ttft.",
							   "A model declared in opus.models; empty = none. See docs/models.md.",
							   &opus_model_fallback,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY,
							   check_model_fallback, NULL, NULL);
	DefineCustomIntVariable("opus.model_max_ttft",
							"The default model's time-to-first-token objective: while it is missed, requests that allow it go to opus.model_fallback.",
							"0 = no objective (no fallback).",
							&opus_model_max_ttft_ms,
							0, 0, 3600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("opus.memory_budget",
							"Memory all engines together may use for weights and KV caches (0 = half of RAM).",
							NULL,
							&opus_memory_budget_mb,
							0, 0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MB,
							NULL, NULL, NULL);
}

/* ---------------------------------------------------------------------
 * Lookup (backends)
 * --------------------------------------------------------------------- */

/*
 * The model entry serving `name` (NULL or "default" = entry 0), with its
 * epoch.  Raises 42704 for an unknown name and 42501 when the current
 * role may not use the model.  display (may be NULL) receives the name
 * results report.
 */
int
OpusLookupModel(const char *name, uint32 *epoch, char *display, size_t displen)
{
	int			i;

	OpusCheckPreloaded();
	for (i = 0; i < OPUS_MAX_MODELS; i++)
	{
		OpusEngineStatus *e = OpusModel(i);
		bool		match;
		char		role[NAMEDATALEN];

		SpinLockAcquire(&e->mutex);
		match = (i == 0 && (name == NULL || strcmp(name, "default") == 0)) ||
			(i > 0 && e->in_use && name != NULL && strcmp(e->name, name) == 0);
		if (match)
		{
			*epoch = e->epoch;
			strlcpy(role, e->role, sizeof(role));
		}
		SpinLockRelease(&e->mutex);
		if (!match)
			continue;
		if (role[0] != '\0')
		{
			Oid			roleid = get_role_oid(role, true);

			if (!OidIsValid(roleid) || !has_privs_of_role(GetUserId(), roleid))
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("permission denied for opus model \"%s\"", name),
						 errdetail("Only members of role \"%s\" may use this model.", role)));
		}
		if (display)
			strlcpy(display, i == 0 ? "" : name, displen);
		return i;
	}
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("opus model \"%s\" does not exist", name),
			 errhint("Models are declared in opus.models; SELECT name FROM opus_models lists them.")));
	return -1;					/* keep compiler quiet */
}

/* ---------------------------------------------------------------------
 * SQL
 * --------------------------------------------------------------------- */

static const char *
model_state_name(const OpusEngineStatus *e)
{
	if (e->swap_state == OPUS_SWAP_LOADING || e->swap_state == OPUS_SWAP_WARMING ||
		e->swap_state == OPUS_SWAP_DRAIN_FIRST)
		return "swapping";
	if (e->swap_state == OPUS_SWAP_DRAINING)
		return "draining";
	switch (e->state)
	{
		case OPUS_ENGINE_STOPPED:
		case OPUS_ENGINE_STARTING:
		case OPUS_ENGINE_BACKOFF:
			return "loading";
		case OPUS_ENGINE_READY:
			return "ready";
		case OPUS_ENGINE_FAILED:
			return "failed";
	}
	return "unknown";
}

/* Resident set size of a process in bytes from /proc, -1 if unknown. */
static int64
process_rss(int pid)
{
	char		path[64];
	FILE	   *f;
	long		pages_total,
				pages_rss;
	int64		r = -1;

	if (pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/statm", pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	if (fscanf(f, "%ld %ld", &pages_total, &pages_rss) == 2)
		r = (int64) pages_rss * (int64) sysconf(_SC_PAGESIZE);
	fclose(f);
	return r;
}

#define MODELS_COLS 28

/*
 * opus_models_v1(): one row per model entry in use.  Paths and errors
 * are shown to superusers and members of pg_read_all_settings only.
 */
PG_FUNCTION_INFO_V1(opus_models_v1);
Datum
opus_models_v1(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		see_paths;
	int			i;

	OpusCheckPreloaded();
	see_paths = superuser() || has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_SETTINGS);
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < OPUS_MAX_MODELS; i++)
	{
		OpusEngineStatus *e = OpusModel(i);
		OpusEngineStatus snap;
		Datum		values[MODELS_COLS];
		bool		nulls[MODELS_COLS];
		int64		rss;

		SpinLockAcquire(&e->mutex);
		memcpy(&snap, e, sizeof(snap));
		SpinLockRelease(&e->mutex);
		if (i > 0 && !snap.in_use)
			continue;
		memset(nulls, 0, sizeof(nulls));
		values[0] = CStringGetTextDatum(i == 0 ? "default" : snap.name);
		values[1] = CStringGetTextDatum(model_state_name(&snap));
		values[2] = Int32GetDatum(snap.version);
		values[3] = CStringGetTextDatum(snap.model_path);
		nulls[3] = !see_paths || snap.model_path[0] == '\0';
		values[4] = CStringGetTextDatum(snap.model.arch);
		nulls[4] = !snap.ever_ready;
		values[5] = Int64GetDatum(snap.model.n_params);
		nulls[5] = !snap.ever_ready;
		values[6] = CStringGetTextDatum(snap.model.tensor_type);
		nulls[6] = !snap.ever_ready;
		values[7] = Int32GetDatum(snap.model.n_ctx);
		nulls[7] = !snap.ever_ready;
		values[8] = Int32GetDatum(snap.engine_pid);
		nulls[8] = snap.engine_pid == 0;
		rss = process_rss(snap.engine_pid);
		values[9] = Int64GetDatum(rss);
		nulls[9] = rss < 0;
		values[10] = Int64GetDatum(snap.weights_bytes);
		nulls[10] = snap.weights_bytes <= 0;
		values[11] = Int64GetDatum(snap.kv_bytes);
		nulls[11] = snap.kv_bytes <= 0;
		values[12] = Int32GetDatum(snap.threads);
		nulls[12] = snap.threads <= 0;
		values[13] = TimestampTzGetDatum(snap.ready_at);
		nulls[13] = snap.ready_at == 0;
		values[14] = Int64GetDatum(snap.restarts);
		values[15] = CStringGetTextDatum(snap.last_error);
		nulls[15] = !see_paths || snap.last_error[0] == '\0';
		values[16] = CStringGetTextDatum(snap.prev_path);
		nulls[16] = !see_paths || snap.prev_path[0] == '\0';
		values[17] = TimestampTzGetDatum(snap.probation_until);
		nulls[17] = snap.probation_until == 0 || snap.prev_path[0] == '\0';
		values[18] = Int64GetDatum(snap.rollbacks);
		values[19] = CStringGetTextDatum(snap.role);
		nulls[19] = snap.role[0] == '\0';
		values[20] = CStringGetTextDatum(snap.swap_path);
		nulls[20] = !see_paths || snap.swap_state == OPUS_SWAP_NONE || snap.swap_path[0] == '\0';
		values[21] = CStringGetTextDatum(snap.fallback);
		nulls[21] = snap.fallback[0] == '\0';
		values[22] = Int32GetDatum(snap.max_ttft_ms);
		nulls[22] = snap.max_ttft_ms <= 0;
		values[23] = BoolGetDatum(snap.overloaded);
		values[24] = Float8GetDatum(snap.recent_ttft_ms);
		nulls[24] = snap.max_ttft_ms <= 0;
		values[25] = Int64GetDatum(snap.fallbacks);
		/*
		 * The engine of an embedding (encoder) model keeps no KV cache: its
		 * READY says 0 token positions, which a generator never does.
		 */
		values[26] = CStringGetTextDatum(snap.model.kv_tokens == 0 ? "embedding" : "generation");
		nulls[26] = !snap.ever_ready;
		values[27] = Int32GetDatum(snap.model.n_embd);
		nulls[27] = !snap.ever_ready || snap.model.kv_tokens != 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* Entry index of a declared model name for the administration functions. */
static int
admin_lookup(text *name_t)
{
	char	   *name = text_to_cstring(name_t);
	uint32		epoch;

	return OpusLookupModel(name, &epoch, NULL, 0);
}

/*
 * opus_model_swap(name, path, canaries): start `path` as the new version
 * of model `name` beside the serving one; it takes over after its warm-up
 * (the canaries, jsonb [{"prompt", "expect", "max_tokens"}], or three
 * fixed prompts; a canary with "expect" must give exactly that greedy
 * output).  Returns
 * at once; opus_models shows the progress.  Superuser-only by default
 * (EXECUTE revoked from PUBLIC).
 */
static void
canary_error(const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("canaries must be a JSON array of up to %d objects {\"prompt\": ..., \"expect\": ..., \"max_tokens\": ...}",
					OPUS_MAX_CANARIES),
			 errdetail("%s", detail)));
}

/* A string member of a canary object into out (UTF-8), false if absent. */
static bool
canary_string(JsonbContainer *obj, const char *key, char *out, bool required)
{
	JsonbValue	v;
	const char *s;
	size_t		len;

	if (!getKeyJsonValueFromContainer(obj, key, strlen(key), &v))
	{
		if (required)
			canary_error(psprintf("A canary has no \"%s\".", key));
		return false;
	}
	if (v.type != jbvString)
		canary_error(psprintf("\"%s\" must be a string.", key));
	s = OpusTextToUtf8(v.val.string.val, v.val.string.len, &len);
	if (len >= OPUS_CANARY_LEN || (required && len == 0))
		canary_error(psprintf("\"%s\" must have 1 to %d bytes.", key, OPUS_CANARY_LEN - 1));
	memcpy(out, s, len);
	out[len] = '\0';
	return true;
}

/* opus_model_swap's canaries (jsonb) into out[]; returns how many. */
static int
parse_canaries(Jsonb *jb, OpusCanary *out)
{
	int			n,
				i;

	if (!JB_ROOT_IS_ARRAY(jb) || JB_ROOT_IS_SCALAR(jb))
		canary_error("The value is not a JSON array.");
	n = JB_ROOT_COUNT(jb);
	if (n < 1 || n > OPUS_MAX_CANARIES)
		canary_error(psprintf("It has %d elements.", n));
	for (i = 0; i < n; i++)
	{
		JsonbValue *elem = getIthJsonbValueFromContainer(&jb->root, i);
		JsonbValue	v;

		if (elem == NULL || elem->type != jbvBinary || !JsonContainerIsObject(elem->val.binary.data))
			canary_error("An element is not a JSON object.");
		memset(&out[i], 0, sizeof(OpusCanary));
		(void) canary_string(elem->val.binary.data, "prompt", out[i].prompt, true);
		out[i].has_expect = canary_string(elem->val.binary.data, "expect", out[i].expect, false);
		out[i].max_tokens = 8;
		if (getKeyJsonValueFromContainer(elem->val.binary.data, "max_tokens", 10, &v))
		{
			if (v.type != jbvNumeric)
				canary_error("\"max_tokens\" must be a number.");
			out[i].max_tokens = DatumGetInt32(DirectFunctionCall1(numeric_int4, NumericGetDatum(v.val.numeric)));
			if (out[i].max_tokens < 1 || out[i].max_tokens > 64)
				canary_error("\"max_tokens\" must be between 1 and 64.");
		}
	}
	return n;
}

PG_FUNCTION_INFO_V1(opus_model_swap);
Datum
opus_model_swap(PG_FUNCTION_ARGS)
{
	int			i;
	char	   *path;
	char		resolved[OPUS_PROTO_PATH_LEN];
	OpusEngineStatus *e;
	bool		busy;
	OpusCanary	canaries[OPUS_MAX_CANARIES];
	int			n_canaries = 0;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("model name and path must not be null")));
	i = admin_lookup(PG_GETARG_TEXT_PP(0));
	path = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (path[0] == '\0' || strlen(path) >= OPUS_PROTO_PATH_LEN - 64 ||
		!OpusResolveModelPath(path, resolved, sizeof(resolved)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("model path is empty or too long")));
	if (access(resolved, R_OK) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FILE),
				 errmsg("opus model file \"%s\" does not exist", resolved)));
	if (PG_NARGS() > 2 && !PG_ARGISNULL(2))
		n_canaries = parse_canaries(PG_GETARG_JSONB_P(2), canaries);
	e = OpusModel(i);
	SpinLockAcquire(&e->mutex);
	busy = e->swap_state != OPUS_SWAP_NONE || e->swap_requested || e->rollback_requested;
	if (!busy)
	{
		strlcpy(e->requested_path, resolved, sizeof(e->requested_path));
		e->n_requested_canaries = n_canaries;
		memcpy(e->requested_canaries, canaries, sizeof(OpusCanary) * n_canaries);
		e->swap_requested = true;
	}
	SpinLockRelease(&e->mutex);
	if (busy)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("a swap of opus model \"%s\" is already in progress", text_to_cstring(PG_GETARG_TEXT_PP(0)))));
	OpusWakeSupervisor();
	PG_RETURN_VOID();
}

/*
 * opus_model_rollback(name): swap back to the version the last swap
 * replaced (kept as the rollback target).  55000 when there is none.
 */
PG_FUNCTION_INFO_V1(opus_model_rollback);
Datum
opus_model_rollback(PG_FUNCTION_ARGS)
{
	int			i;
	OpusEngineStatus *e;
	bool		busy,
				none;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("model name must not be null")));
	i = admin_lookup(PG_GETARG_TEXT_PP(0));
	e = OpusModel(i);
	SpinLockAcquire(&e->mutex);
	busy = e->swap_state == OPUS_SWAP_LOADING || e->swap_state == OPUS_SWAP_WARMING ||
		e->swap_state == OPUS_SWAP_DRAIN_FIRST || e->swap_requested || e->rollback_requested;
	none = e->prev_path[0] == '\0';
	if (!busy && !none)
		e->rollback_requested = true;
	SpinLockRelease(&e->mutex);
	if (busy)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("a swap of opus model \"%s\" is already in progress", text_to_cstring(PG_GETARG_TEXT_PP(0)))));
	if (none)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("opus model \"%s\" has no previous version to roll back to", text_to_cstring(PG_GETARG_TEXT_PP(0)))));
	OpusWakeSupervisor();
	PG_RETURN_VOID();
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
