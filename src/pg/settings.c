/*
 * settings.c - the core opus.* settings: the default model and its engine
 * (model, device, threads, KV cache, batch size, liveness), request limits
 * (max_requests, default_max_tokens, request_timeout, max_prompt_bytes,
 * request_buffer_size).
 *
 * Other modules define their own settings next to their code (async.c,
 * models.c, tenants.c with opus.priority, stats.c, reqlog.c); _PG_init
 * (opus_pg.c) calls each definer.
 */
#include "postgres.h"

#include <limits.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "opus_pg.h"

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
bool		opus_allow_special_tokens = false;

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

/* opus.kv_cache_type: the HELLO kv_cache_type values */
static const struct config_enum_entry kv_cache_type_options[] = {
	{"f16", OPUS_PROTO_KV_F16, false},
	{"q8_0", OPUS_PROTO_KV_Q8_0, false},
	{NULL, 0, false}
};

/*
 * Define the settings above.  Those that size shared memory or name the
 * engine exist only when the library is preloaded.  The other modules
 * define their own (_PG_init calls each).
 */
void
OpusDefineSettings(void)
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
	DefineCustomBoolVariable("opus.allow_special_tokens",
							 "Chat message contents may give special tokens (unsafe: a user's text can forge turns).",
							 "Off: contents are plain text, only the chat template's markup gives special tokens. "
							 "A superuser setting; GRANT SET ON PARAMETER lets a role use it.",
							 &opus_allow_special_tokens,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
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
								"Step time the engine aims for: prompt chunks are cut to fit it, so running requests get their tokens and new ones start within about this long.",
								"At the step time measured for each step size; a prompt alone gets at least one KV block per step, one behind generating requests at least one every other step. 0 = only opus.max_batch_tokens bounds prompt chunks.",
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
}
