/*
 * scaleout.c - what a data node tells a PL/Proxy front (docs/scale-out.md):
 * the identity of the model it serves, so a distributed job can refuse to
 * start when the nodes would not give the same answers.
 *
 * opus_model_identity(model) returns the model's name, the file the engine
 * loaded, its size and its SHA-256, read by the backend from the file
 * itself (the same file the engine mapped; both run as the server's OS
 * user).  The hash of ~100 MB takes a fraction of a second; it is kept per
 * backend, keyed by path, size and modification time, so a front that
 * checks before every job step pays it once per connection.
 */
#include "postgres.h"

#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "opus_pg.h"

PG_FUNCTION_INFO_V1(opus_model_identity);

static char cached_path[OPUS_PROTO_PATH_LEN];
static off_t cached_size = -1;
static time_t cached_mtime;
static char cached_hex[PG_SHA256_DIGEST_LENGTH * 2 + 1];

/* SHA-256 of the file at path, as hex, into hex; *size_out its size. */
static void
file_sha256(const char *path, char *hex, int64 *size_out)
{
	struct stat st;
	pg_cryptohash_ctx *ctx;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char	   *buf;
	int			fd;

	fd = open(path, O_RDONLY | PG_BINARY, 0);
	if (fd < 0 || fstat(fd, &st) != 0)
	{
		int			save = errno;

		if (fd >= 0)
			close(fd);
		errno = save;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read the model file \"%s\": %m", path)));
	}
	*size_out = (int64) st.st_size;
	if (strcmp(cached_path, path) == 0 && cached_size == st.st_size &&
		cached_mtime == st.st_mtime)
	{
		close(fd);
		strlcpy(hex, cached_hex, sizeof(cached_hex));
		return;
	}
	ctx = pg_cryptohash_create(PG_SHA256);
	if (ctx == NULL || pg_cryptohash_init(ctx) < 0)
	{
		close(fd);
		elog(ERROR, "could not initialize SHA-256");
	}
	buf = palloc(1024 * 1024);
	for (;;)
	{
		ssize_t		n = read(fd, buf, 1024 * 1024);

		if (n < 0)
		{
			int			save = errno;

			close(fd);
			pg_cryptohash_free(ctx);
			errno = save;
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read the model file \"%s\": %m", path)));
		}
		if (n == 0)
			break;
		if (pg_cryptohash_update(ctx, (uint8 *) buf, (size_t) n) < 0)
		{
			close(fd);
			pg_cryptohash_free(ctx);
			elog(ERROR, "could not compute SHA-256");
		}
		CHECK_FOR_INTERRUPTS();
	}
	close(fd);
	pfree(buf);
	if (pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
	{
		pg_cryptohash_free(ctx);
		elog(ERROR, "could not compute SHA-256");
	}
	pg_cryptohash_free(ctx);
	for (int i = 0; i < PG_SHA256_DIGEST_LENGTH; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	strlcpy(cached_path, path, sizeof(cached_path));
	cached_size = st.st_size;
	cached_mtime = st.st_mtime;
	strlcpy(cached_hex, hex, sizeof(cached_hex));
}

/*
 * opus_model_identity(model text DEFAULT NULL)
 *   RETURNS TABLE(model text, path text, file_size bigint, sha256 text)
 * For the default model (NULL or 'default') or a declared one the caller
 * may use; waits until its engine has loaded a model.
 */
Datum
opus_model_identity(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	char	   *name = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));
	uint32		epoch;
	char		display[OPUS_PROTO_PATH_LEN];
	char		path[OPUS_PROTO_PATH_LEN];
	char		hex[PG_SHA256_DIGEST_LENGTH * 2 + 1];
	int64		size;
	int			i;
	OpusEngineStatus *e;

	OpusCheckPreloaded();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "opus_model_identity must return a row");
	i = OpusLookupModel(name, &epoch, display, sizeof(display));
	if (i == 0)
	{
		struct opus_proto_ready info;

		OpusWaitEngineReady(&info, path, sizeof(path));
	}
	else
	{
		e = OpusModel(i);
		SpinLockAcquire(&e->mutex);
		strlcpy(path, e->model_path, sizeof(path));
		SpinLockRelease(&e->mutex);
		if (path[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("opus model \"%s\" has not loaded a file yet", display)));
	}
	file_sha256(path, hex, &size);
	values[0] = CStringGetTextDatum(i == 0 ? OpusServedModelName(0) : display);
	values[1] = CStringGetTextDatum(path);
	values[2] = Int64GetDatum(size);
	values[3] = CStringGetTextDatum(hex);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}
