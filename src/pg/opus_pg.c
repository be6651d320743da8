/*
 * opus_pg.c - module entry point: settings, shared-memory hooks and the
 * supervisor's registration.
 *
 * Loaded through shared_preload_libraries, _PG_init defines the opus.*
 * settings, requests shared memory (shmem_request_hook), creates it
 * (shmem_startup_hook) and registers the supervisor background worker.
 * Loaded any other way (CREATE EXTENSION in a server without preloading),
 * it only defines the settings that may exist after start-up, so the
 * extension can be created, and every SQL function fails with 55000 and a
 * hint (OpusCheckPreloaded).
 *
 * The library is built for one version of the extension's SQL
 * (OPUS_PG_VERSION, the control file's default_version): OpusCheckPreloaded
 * also refuses, with 55000 naming both versions, to run under the SQL of
 * another version (a server restarted with a new library before ALTER
 * EXTENSION opus_pg UPDATE, or still running an old one after it); see
 * docs/upgrade.md.
 */
#include "postgres.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/rel.h"

#include "opus_experts.h"
#include "opus_pg.h"
#include "opus_tenants.h"
#include "opus_stats.h"

PG_MODULE_MAGIC;

char	   *opus_model = NULL;
char	   *opus_device = NULL;
int			opus_threads = 2;
int			opus_max_requests = 64;
int			opus_kv_cache_size_mb = 64;
int			opus_default_max_tokens = OPUS_PARAM_DEFAULT_MAX_TOKENS;
int			opus_request_timeout_ms = 0;
int			opus_max_prompt_bytes = 256 * 1024;
int			opus_request_buffer_kb = 512;
char	   *opus_engine_path = NULL;
int			opus_kv_block_size = 16;
int			opus_kv_cache_type = OPUS_PROTO_KV_F16;
int			opus_max_batch_tokens = 512;
int			opus_step_latency_target_ms = 250;
int			opus_admission_starvation_ms = 10000;
int			opus_engine_liveness_timeout_ms = 10000;
char	   *opus_priority = NULL;
int			opus_priority_value = 0;

bool		opus_pg_preloaded = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

static void
opus_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(OpusShmemSize());
	OpusStatsShmemRequest();
	OpusTenantShmemRequest();
	OpusExpertsShmemRequest();
}

static void
opus_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	OpusShmemInit();
	OpusStatsShmemInit();
	OpusTenantShmemInit();
	OpusExpertsShmemInit();
}

/* opus.device: "cpu", "auto" or "cuda:N". */
static bool
check_opus_device(char **newval, void **extra, GucSource source)
{
	const char *v = *newval;

	if (strcmp(v, "cpu") == 0 || strcmp(v, "auto") == 0)
		return true;
	if (strncmp(v, "cuda:", 5) == 0 && v[5] != '\0' &&
		strspn(v + 5, "0123456789") == strlen(v + 5) && strlen(v + 5) <= 3)
		return true;
	GUC_check_errdetail("opus.device must be \"cpu\", \"auto\" or \"cuda:N\".");
	return false;
}

/* opus.model: not empty, no NUL, fits the protocol's path field. */
static bool
check_opus_model(char **newval, void **extra, GucSource source)
{
	if ((*newval)[0] == '\0')
	{
		GUC_check_errdetail("opus.model must name a model or a GGUF file.");
		return false;
	}
	if (strlen(*newval) >= OPUS_PROTO_PATH_LEN - 64)
	{
		GUC_check_errdetail("opus.model is too long.");
		return false;
	}
	return true;
}

/*
 * opus.priority: "interactive" (0), "batch" (10) or an integer class 0..1000;
 * smaller classes are scheduled first.
 */
bool
OpusParsePriority(const char *v, int *out)
{
	long		n;

	if (pg_strcasecmp(v, "interactive") == 0)
		n = OPUS_PRIORITY_INTERACTIVE;
	else if (pg_strcasecmp(v, "batch") == 0)
		n = OPUS_PRIORITY_BATCH;
	else
	{
		char	   *end;

		errno = 0;
		n = strtol(v, &end, 10);
		if (v[0] == '\0' || *end != '\0' || errno != 0 || n < 0 || n > OPUS_PROTO_MAX_PRIORITY)
			return false;
	}
	*out = (int) n;
	return true;
}

/*
 * A SET (or set_config, or a function's SET clause) may not ask for a class
 * before the role's ceiling (opus.priority_ceiling); requests are clamped to
 * the ceiling anyway, whatever the setting's source.
 */
static bool
check_opus_priority(char **newval, void **extra, GucSource source)
{
	int			n;
	int		   *out;

	if (!OpusParsePriority(*newval, &n))
	{
		GUC_check_errdetail("opus.priority must be \"interactive\", \"batch\" or an integer from 0 (first) to %d.",
							OPUS_PROTO_MAX_PRIORITY);
		return false;
	}
	if (source == PGC_S_SESSION && IsTransactionState() && !superuser())
	{
		int			ceiling = OpusTenantCeiling();

		if (n < ceiling)
		{
			GUC_check_errcode(ERRCODE_INSUFFICIENT_PRIVILEGE);
			GUC_check_errmsg("opus.priority %d is above this role's ceiling", n);
			GUC_check_errdetail("opus.priority_ceiling is %d for this role: a smaller class number is not allowed.",
								ceiling);
			return false;
		}
	}
	out = malloc(sizeof(int));
	if (!out)
		return false;
	*out = n;
	*extra = out;
	return true;
}

static void
assign_opus_priority(const char *newval, void *extra)
{
	opus_priority_value = *(int *) extra;
}

/* opus.kv_cache_type: the HELLO kv_cache_type values */
static const struct config_enum_entry kv_cache_type_options[] = {
	{"f16", OPUS_PROTO_KV_F16, false},
	{"q8_0", OPUS_PROTO_KV_Q8_0, false},
	{NULL, 0, false}
};

static void
opus_define_settings(void)
{
	DefineCustomStringVariable("opus.model",
							   "The model the engine serves: a GGUF file path or an installed model name.",
							   "A bare name is looked up as <sharedir>/extension/opus_pg/models/<name>.gguf. "
							   "The engine reloads when this changes on a configuration reload.",
							   &opus_model,
							   "SmolLM2-135M-Instruct.Q4_1",
							   PGC_SUSET,
							   0,
							   check_opus_model, NULL, NULL);
	DefineCustomStringVariable("opus.device",
							   "The device the engine runs on: cpu, auto or cuda:N.",
							   NULL,
							   &opus_device,
							   "cpu",
							   PGC_SUSET,
							   0,
							   check_opus_device, NULL, NULL);
	DefineCustomIntVariable("opus.threads",
							"Engine worker threads (0 = one per CPU).",
							NULL,
							&opus_threads,
							2, 0, 1024,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
	DefineCustomEnumVariable("opus.kv_cache_type",
							 "Element type of the engine's KV cache: f16, or q8_0 (about 1.9 times the tokens in the same memory).",
							 "The engine restarts when this changes on a configuration reload.",
							 &opus_kv_cache_type,
							 OPUS_PROTO_KV_F16,
							 kv_cache_type_options,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("opus.engine_liveness_timeout",
							"How long the engine may neither answer a ping nor use CPU before it is declared hung and restarted.",
							"A long step that keeps computing is not a hang. 0 = never.",
							&opus_engine_liveness_timeout_ms,
							10000, 0, 3600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("opus.default_max_tokens",
							"Tokens generated when max_tokens is not given.",
							NULL,
							&opus_default_max_tokens,
							OPUS_PARAM_DEFAULT_MAX_TOKENS,
							(int) opus_params[OPUS_P_max_tokens].lo,
							(int) opus_params[OPUS_P_max_tokens].hi,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("opus.request_timeout",
							"Cancel a request that waits longer than this (0 = no limit).",
							NULL,
							&opus_request_timeout_ms,
							0, 0, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("opus.max_prompt_bytes",
							"The largest prompt (or all chat messages together) accepted.",
							NULL,
							&opus_max_prompt_bytes,
							256 * 1024, 1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomStringVariable("opus.priority",
							   "Scheduling class of this session's requests: interactive, batch or 0..1000.",
							   "Smaller classes go first (interactive = 0, batch = 10); a waiting request "
							   "moves up one class every 2 seconds, so every class progresses.",
							   &opus_priority,
							   "interactive",
							   PGC_USERSET,
							   0,
							   check_opus_priority, assign_opus_priority, NULL);
	OpusDefineAsyncSettings();
	OpusDefineModelSettings(process_shared_preload_libraries_in_progress);
	OpusDefineTenantSettings();
	/*
	 * Settings that size shared memory or name the engine only exist when
	 * preloaded: PostgreSQL refuses PGC_POSTMASTER variables after start-up.
	 */
	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("opus.max_requests",
								"Request slots in shared memory: the most requests queued or running at once.",
								NULL,
								&opus_max_requests,
								64, 1, 10000,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);
		DefineCustomIntVariable("opus.kv_cache_size",
								"Memory for the engine's KV cache.",
								NULL,
								&opus_kv_cache_size_mb,
								64, 1, INT_MAX / 2,
								PGC_POSTMASTER,
								GUC_UNIT_MB,
								NULL, NULL, NULL);
		DefineCustomIntVariable("opus.kv_block_size",
								"Token positions per KV cache block (the unit of paging and prefix sharing).",
								NULL,
								&opus_kv_block_size,
								16, 1, 1024,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);
		DefineCustomIntVariable("opus.max_batch_tokens",
								"Most tokens the engine puts through the model in one batched step.",
								"Bounds how much prompt is read per step while others are generating.",
								&opus_max_batch_tokens,
								512, 16, 65536,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);
		DefineCustomIntVariable("opus.step_latency_target",
								"Step time the engine aims for while requests are generating: prompt chunks are cut to fit it.",
								"At the measured cost per token; at least one KV block of prompt per step. 0 = only opus.max_batch_tokens bounds prompt chunks.",
								&opus_step_latency_target_ms,
								250, 0, 600000,
								PGC_POSTMASTER,
								GUC_UNIT_MS,
								NULL, NULL, NULL);
		DefineCustomIntVariable("opus.admission_starvation_limit",
								"How long a queued request that does not fit the free KV cache may be overtaken by smaller ones.",
								"After this wait in the queue, nothing behind it is admitted until it fits. 0 = always overtake.",
								&opus_admission_starvation_ms,
								10000, 0, 3600000,
								PGC_POSTMASTER,
								GUC_UNIT_MS,
								NULL, NULL, NULL);
		DefineCustomIntVariable("opus.request_buffer_size",
								"Shared-memory buffer per request slot, holding the prompt and then the result.",
								NULL,
								&opus_request_buffer_kb,
								512, 64, 1024 * 1024,
								PGC_POSTMASTER,
								GUC_UNIT_KB,
								NULL, NULL, NULL);
		DefineCustomStringVariable("opus.engine_path",
								   "The opus_engine binary the supervisor runs (empty = the server's bin directory).",
								   NULL,
								   &opus_engine_path,
								   "",
								   PGC_POSTMASTER,
								   GUC_SUPERUSER_ONLY,
								   NULL, NULL, NULL);
	}
	OpusStatsDefineSettings(process_shared_preload_libraries_in_progress);
	OpusLogDefineSettings(process_shared_preload_libraries_in_progress);
	MarkGUCPrefixReserved("opus");
}

void
_PG_init(void)
{
	opus_define_settings();

	if (!process_shared_preload_libraries_in_progress)
		return;

	opus_pg_preloaded = true;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = opus_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = opus_shmem_startup;
	OpusRegisterSupervisor();
	OpusRegisterLogger();
}

/*
 * Compare two dotted version strings numerically ("0.10.0" > "0.9.1");
 * anything that is not a number compares as 0.
 */
static int
version_cmp(const char *a, const char *b)
{
	while (*a != '\0' || *b != '\0')
	{
		long		x = strtol(a, (char **) &a, 10);
		long		y = strtol(b, (char **) &b, 10);

		if (x != y)
			return x < y ? -1 : 1;
		while (*a != '\0' && *a != '.')
			a++;
		while (*b != '\0' && *b != '.')
			b++;
		if (*a == '.')
			a++;
		if (*b == '.')
			b++;
	}
	return 0;
}

/*
 * The version of opus_pg installed in the current database (palloc'd), or
 * NULL if there is none (or it is being created or dropped).
 */
static char *
installed_sql_version(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	char	   *version = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("opus_pg"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = text_to_cstring(DatumGetTextPP(d));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/*
 * Refuse to run the SQL of another version than the library's: its
 * functions may pass other arguments, expect other result columns or
 * other tables.  One index lookup per command: a match is remembered for
 * the rest of the command (transaction and command id), since ALTER
 * EXTENSION only takes effect at a later one.  (Per call, the lookup cost
 * 2-6 us against 0.3-0.6 us for a cheap call such as opus_cancel.)
 */
void
OpusCheckSqlVersion(void)
{
	static LocalTransactionId ok_lxid = InvalidLocalTransactionId;
	static CommandId ok_cid = InvalidCommandId;
	char	   *sql;
	bool		sql_older;

	if (MyProc != NULL && MyProc->lxid == ok_lxid && GetCurrentCommandId(false) == ok_cid)
		return;
	sql = installed_sql_version();
	if (sql == NULL || strcmp(sql, OPUS_PG_VERSION) == 0)
	{
		if (sql != NULL && MyProc != NULL)
		{
			ok_lxid = MyProc->lxid;
			ok_cid = GetCurrentCommandId(false);
		}
		return;
	}
	sql_older = version_cmp(sql, OPUS_PG_VERSION) < 0;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("opus_pg library version %s does not match the extension version %s installed in database \"%s\"",
					OPUS_PG_VERSION, sql, get_database_name(MyDatabaseId)),
			 sql_older ?
			 errhint("Run ALTER EXTENSION opus_pg UPDATE in this database (see docs/upgrade.md).") :
			 errhint("The server still runs an older opus_pg library: install opus_pg %s and restart the server (see docs/upgrade.md).", sql)));
}

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
