/*
 * version.c - the library against the SQL installed in the database: the
 * library is built for one version of the extension's SQL (OPUS_PG_VERSION,
 * the control file's default_version) and refuses, with 55000 naming both
 * versions, to run under the SQL of another (a server restarted with a new
 * library before ALTER EXTENSION opus_pg UPDATE, or still running an old
 * one after it); see docs/upgrade.md.  OpusCheckPreloaded (shmem.c) calls
 * it for every SQL function.
 */
#include "postgres.h"

#include <stdlib.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

#include "opus_pg.h"

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
