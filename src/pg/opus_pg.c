/*
 * opus_pg.c - module entry point: _PG_init and the shared-memory hooks.
 *
 * Loaded through shared_preload_libraries, _PG_init defines the opus.*
 * settings (settings.c and each module's own), requests shared memory
 * (shmem_request_hook), creates it (shmem_startup_hook) and registers the
 * supervisor and request-logger background workers.  Loaded any other way
 * (CREATE EXTENSION in a server without preloading), it only defines the
 * settings that may exist after start-up, so the extension can be created,
 * and every SQL function fails with 55000 and a hint (OpusCheckPreloaded,
 * shmem.c).
 *
 * Nothing else in the library calls into this file: it is the top of the
 * import order (make check-imports).
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/guc.h"

#include "opus_experts.h"
#include "opus_pg.h"
#include "opus_tenants.h"
#include "opus_stats.h"

PG_MODULE_MAGIC;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

static void
opus_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(OpusShmemSize());
	OpusResultStoreShmemRequest();
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
	OpusResultStoreShmemInit();
	OpusStatsShmemInit();
	OpusTenantShmemInit();
	OpusExpertsShmemInit();
}

void
_PG_init(void)
{
	bool		preload = process_shared_preload_libraries_in_progress;

	OpusDefineSettings();
	OpusDefineAsyncSettings();
	OpusDefineResultStoreSettings(preload);
	OpusDefineModelSettings(preload);
	OpusDefineTenantSettings();
	OpusStatsDefineSettings(preload);
	OpusLogDefineSettings(preload);
	MarkGUCPrefixReserved("opus");

	if (!preload)
		return;

	opus_pg_preloaded = true;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = opus_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = opus_shmem_startup;
	OpusRegisterSupervisor();
	OpusRegisterLogger();
	OpusRegisterDropGuard();
}
