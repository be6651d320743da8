/*
 * dropguard.c - DROP EXTENSION opus_pg refuses while the database has batch
 * jobs or asynchronous requests (running, or finished and unread): dropping
 * the extension would silently delete the jobs with their work lists and
 * history, and the results could no longer be read.  DROP EXTENSION ...
 * CASCADE drops them all the same.  A ProcessUtility hook, installed when
 * the library is preloaded (without preloading there are no asynchronous
 * requests; the jobs are then not guarded).
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "opus_pg.h"

static ProcessUtility_hook_type prev_process_utility = NULL;

/* Whether stmt is DROP EXTENSION opus_pg without CASCADE. */
static bool
drops_opus_pg(Node *stmt)
{
	DropStmt   *drop;
	ListCell   *lc;

	if (!IsA(stmt, DropStmt))
		return false;
	drop = (DropStmt *) stmt;
	if (drop->removeType != OBJECT_EXTENSION || drop->behavior == DROP_CASCADE)
		return false;
	foreach(lc, drop->objects)
	{
		Node	   *o = lfirst(lc);

		if (IsA(o, String) && strcmp(strVal(o), "opus_pg") == 0)
			return true;
	}
	return false;
}

/* Batch jobs defined in this database (0 without the table). */
static int64
count_jobs(void)
{
	int64		n = 0;
	char	   *nspname = NULL;

	SPI_connect();
	if (SPI_execute("SELECT n.nspname FROM pg_catalog.pg_extension e "
					"JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace "
					"WHERE e.extname OPERATOR(pg_catalog.=) 'opus_pg'", true, 1) == SPI_OK_SELECT &&
		SPI_processed == 1)
		nspname = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (nspname != NULL &&
		OidIsValid(get_relname_relid("opus_job", get_namespace_oid(nspname, true))) &&
		SPI_execute(psprintf("SELECT pg_catalog.count(*) FROM %s.opus_job",
							 quote_identifier(nspname)), true, 1) == SPI_OK_SELECT &&
		SPI_processed == 1)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			n = DatumGetInt64(d);
	}
	SPI_finish();
	return n;
}

/* Asynchronous requests of this database, running or with unread results. */
static int
count_async(void)
{
	int			n = 0;

	if (OpusShared == NULL)
		return 0;
	for (int i = 0; i < OpusShared->n_slots; i++)
	{
		OpusSlot   *slot = OpusGetSlot(i);

		SpinLockAcquire(&slot->mutex);
		if (slot->state != OPUS_SLOT_FREE && slot->async && slot->dbid == MyDatabaseId)
			n++;
		SpinLockRelease(&slot->mutex);
	}
	return n + OpusResultStoreCountDb(MyDatabaseId);
}

static void
check_drop(void)
{
	Oid			ext = get_extension_oid("opus_pg", true);
	int64		jobs;
	int			async;

	if (!OidIsValid(ext))
		return;					/* DROP EXTENSION reports it (or IF EXISTS) */
	jobs = count_jobs();
	async = count_async();
	if (jobs == 0 && async == 0)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
			 errmsg("cannot drop extension opus_pg because this database has %lld batch job(s) and %d asynchronous request(s) not yet read",
					(long long) jobs, async),
			 errdetail("Dropping it would delete the jobs with their work lists and run history, and the asynchronous results could no longer be read."),
			 errhint("Drop the jobs (opus_job_drop) and read or cancel the requests (opus_result, opus_cancel), or use DROP EXTENSION opus_pg CASCADE to drop them too.")));
}

static void
opus_process_utility(PlannedStmt *pstmt, const char *queryString,
					 bool readOnlyTree, ProcessUtilityContext context,
					 ParamListInfo params, QueryEnvironment *queryEnv,
					 DestReceiver *dest, QueryCompletion *qc)
{
	if (drops_opus_pg(pstmt->utilityStmt))
		check_drop();
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

void
OpusRegisterDropGuard(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = opus_process_utility;
}
