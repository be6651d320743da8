/*
 * tenants.c - who a request is for, and what its role was granted.
 *
 * Every request runs for a role: the current user at the call (a job's
 * owner for job rows, since jobs switch to the owner).  From that role and
 * from settings only a superuser can change (PGC_SUSET, so ALTER ROLE ...
 * SET, ALTER DATABASE ... SET and ALTER ROLE ... IN DATABASE ... SET are
 * the administrator's levers) this file derives:
 *
 *   - the prefix-cache scope sent to the engine (opus.cache_scope: role,
 *     database, server, or a group name): requests of different scopes
 *     never share cached KV blocks;
 *   - the priority ceiling (opus.priority_ceiling): the best class the
 *     role's requests get, whatever opus.priority says, and the class aging
 *     stops at;
 *   - the fair-share weight (opus.role_weight);
 *   - quotas checked before a request is queued: slots held
 *     (opus.role_max_requests), asynchronous slots held
 *     (opus.role_max_async_requests), max_tokens per request
 *     (opus.role_max_tokens), prompt + completion tokens in the last minute
 *     and the last day (opus.role_tokens_per_minute, _per_day).
 *
 * When the request's role is the session user, the session's values are
 * the role's (the server applied its ALTER ROLE settings at login).  When
 * it is another role (a job owner, SET ROLE, a SECURITY DEFINER function),
 * that role's entries in pg_db_role_setting are read and win over the
 * session's values.
 *
 * Shared memory: OpusTenants, a fixed table of OPUS_MAX_TENANTS entries,
 * one per role seen since start-up (the least recently used is reused when
 * it is full).  Each entry holds rolling token windows (60 buckets of one
 * second, 144 buckets of ten minutes) and totals.  OpusTenants->lock (an
 * LWLock) protects everything in it; backends take it to check and to
 * count refusals, the supervisor to charge finished requests' tokens.
 * Slots held are not counted here: they are counted from the slot array
 * itself after a claim (OpusTenantCheckClaim), so no path that frees a slot
 * needs to know about tenants.
 */
#include "postgres.h"

#include <limits.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_db_role_setting.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "opus_pg.h"
#include "opus_stats.h"
#include "opus_tenants.h"

#define OPUS_MAX_TENANTS	256
#define MINUTE_BUCKETS		60	/* one second each */
#define DAY_BUCKETS			144 /* ten minutes each */
#define DAY_BUCKET_S		600

/* ---- settings ---- */

char	   *opus_priority_ceiling = NULL;
int			opus_priority_ceiling_value = 0;
char	   *opus_priority = NULL;
int			opus_priority_value = 0;	/* opus.priority as a class number */
char	   *opus_cache_scope = NULL;
int			opus_role_weight = 1;
int			opus_role_max_requests = 0;
int			opus_role_max_async_requests = 0;
int			opus_role_max_tokens = 0;
int			opus_role_tokens_per_minute = 0;
int			opus_role_tokens_per_day = 0;
int			opus_queue_objective_ms = 0;

typedef struct OpusTenantEntry
{
	Oid			role;			/* InvalidOid = unused */
	TimestampTz last_used;
	int64		min_tok[MINUTE_BUCKETS];
	int64		min_stamp[MINUTE_BUCKETS];	/* the second each bucket counts */
	int64		day_tok[DAY_BUCKETS];
	int64		day_stamp[DAY_BUCKETS]; /* the ten minutes each bucket counts */
	int64		requests;		/* requests charged */
	int64		tokens;			/* prompt + completion tokens charged */
	int64		refused;		/* requests refused by a quota */
	OpusTenantConf conf;		/* the limits in force at its last request */
} OpusTenantEntry;

typedef struct OpusTenantShared
{
	LWLock	   *lock;
	OpusTenantEntry entries[OPUS_MAX_TENANTS];
} OpusTenantShared;

static OpusTenantShared *OpusTenants = NULL;

/* ---- setting hooks ---- */

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


static bool
check_priority_ceiling(char **newval, void **extra, GucSource source)
{
	int			n;
	int		   *out;

	if (!OpusParsePriority(*newval, &n))
	{
		GUC_check_errdetail("opus.priority_ceiling must be \"interactive\", \"batch\" or an integer from 0 (first) to %d.",
							OPUS_PROTO_MAX_PRIORITY);
		return false;
	}
	out = malloc(sizeof(int));
	if (!out)
		return false;
	*out = n;
	*extra = out;
	return true;
}

static void
assign_priority_ceiling(const char *newval, void *extra)
{
	opus_priority_ceiling_value = *(int *) extra;
}

static bool
valid_scope(const char *v)
{
	size_t		len = strlen(v);

	if (len == 0 || len >= NAMEDATALEN)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!(isalnum((unsigned char) v[i]) || v[i] == '_' || v[i] == '-' || v[i] == '.'))
			return false;
	return true;
}

static bool
check_cache_scope(char **newval, void **extra, GucSource source)
{
	if (!valid_scope(*newval))
	{
		GUC_check_errdetail("opus.cache_scope must be \"role\", \"database\", \"server\" or a group name of 1 to %d letters, digits, '_', '-' or '.'.",
							NAMEDATALEN - 1);
		return false;
	}
	return true;
}

void
OpusDefineTenantSettings(void)
{
	DefineCustomStringVariable("opus.priority",
							   "Scheduling class of this session's requests: interactive, batch or 0..1000.",
							   "Smaller classes go first (interactive = 0, batch = 10); a waiting request "
							   "moves up one class every 2 seconds, so every class progresses.",
							   &opus_priority,
							   "interactive",
							   PGC_USERSET,
							   0,
							   check_opus_priority, assign_opus_priority, NULL);
	DefineCustomStringVariable("opus.priority_ceiling",
							   "The best scheduling class this role's requests get: interactive, batch or 0..1000.",
							   "opus.priority may ask for a later class, never an earlier one; aging stops here.",
							   &opus_priority_ceiling, "interactive", PGC_SUSET, 0,
							   check_priority_ceiling, assign_priority_ceiling, NULL);
	DefineCustomStringVariable("opus.cache_scope",
							   "Which requests may share cached prompt prefixes: role, database, server or a group name.",
							   "Requests of different scopes never share prefix-cache blocks; a group name "
							   "lets the roles given the same name share.",
							   &opus_cache_scope, "role", PGC_SUSET, 0,
							   check_cache_scope, NULL, NULL);
	DefineCustomIntVariable("opus.queue_objective",
							"Refuse new requests of a class while a request of that class or an earlier one has waited this long for its first token (0 = never).",
							"Refused requests fail at once with 53000 instead of queueing without bound.",
							&opus_queue_objective_ms, 0, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("opus.role_weight",
							"This role's fair share of the engine, relative to other roles of the same class.",
							NULL, &opus_role_weight, 1, 1, OPUS_PROTO_MAX_WEIGHT,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("opus.role_max_requests",
							"Request slots this role may hold at once (0 = no limit but opus.max_requests).",
							NULL, &opus_role_max_requests, 0, 0, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("opus.role_max_async_requests",
							"Asynchronous requests this role may hold at once (0 = no limit but opus.max_async_requests).",
							NULL, &opus_role_max_async_requests, 0, 0, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("opus.role_max_tokens",
							"The largest max_tokens this role may ask for in one request (0 = no limit).",
							NULL, &opus_role_max_tokens, 0, 0, OPUS_PROTO_MAX_TOKENS,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("opus.role_tokens_per_minute",
							"Prompt plus completion tokens this role may use in any minute (0 = no limit).",
							NULL, &opus_role_tokens_per_minute, 0, 0, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("opus.role_tokens_per_day",
							"Prompt plus completion tokens this role may use in any 24 hours (0 = no limit).",
							NULL, &opus_role_tokens_per_day, 0, 0, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
}

/* ---- resolution ---- */

static uint64
scope_key(const char *scope, Oid role)
{
	uint64		v;

	if (strcmp(scope, "server") == 0)
		return 0;
	if (strcmp(scope, "role") == 0)
		v = hash_bytes_uint32_extended((uint32) role, 0x726f6c65);
	else if (strcmp(scope, "database") == 0)
		v = hash_bytes_uint32_extended((uint32) MyDatabaseId, 0x64617461);
	else
		v = hash_bytes_extended((const unsigned char *) scope, (int) strlen(scope), 0x67726f75);
	return v == 0 ? 1 : v;
}

/* Apply one "name=value" entry of pg_db_role_setting to c (ours only). */
static void
apply_role_setting(OpusTenantConf *c, const char *entry)
{
	const char *eq = strchr(entry, '=');
	const char *v;
	char		name[64];
	size_t		len;
	long		n;
	char	   *end;

	if (!eq || (len = (size_t) (eq - entry)) >= sizeof(name))
		return;
	memcpy(name, entry, len);
	name[len] = '\0';
	v = eq + 1;
	if (pg_strcasecmp(name, "opus.priority_ceiling") == 0)
	{
		int			p;

		if (OpusParsePriority(v, &p))
			c->ceiling = p;
		return;
	}
	if (pg_strcasecmp(name, "opus.cache_scope") == 0)
	{
		if (valid_scope(v))
			strlcpy(c->scope_name, v, sizeof(c->scope_name));
		return;
	}
	errno = 0;
	n = strtol(v, &end, 10);
	if (*v == '\0' || *end != '\0' || errno != 0 || n < 0 || n > INT_MAX)
		return;
	if (pg_strcasecmp(name, "opus.role_weight") == 0 && n >= 1 && n <= OPUS_PROTO_MAX_WEIGHT)
		c->weight = (int) n;
	else if (pg_strcasecmp(name, "opus.role_max_requests") == 0)
		c->max_requests = (int) n;
	else if (pg_strcasecmp(name, "opus.role_max_async_requests") == 0)
		c->max_async_requests = (int) n;
	else if (pg_strcasecmp(name, "opus.role_max_tokens") == 0)
		c->max_tokens = (int) n;
	else if (pg_strcasecmp(name, "opus.role_tokens_per_minute") == 0)
		c->tokens_per_minute = (int) n;
	else if (pg_strcasecmp(name, "opus.role_tokens_per_day") == 0)
		c->tokens_per_day = (int) n;
}

/* Apply role's pg_db_role_setting entries for database db to c. */
static void
read_role_settings(Relation rel, Oid db, Oid role, OpusTenantConf *c)
{
	ScanKeyData keys[2];
	SysScanDesc scan;
	HeapTuple	tup;

	ScanKeyInit(&keys[0], Anum_pg_db_role_setting_setdatabase, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(db));
	ScanKeyInit(&keys[1], Anum_pg_db_role_setting_setrole, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(role));
	scan = systable_beginscan(rel, DbRoleSettingDatidRolidIndexId, true, NULL, 2, keys);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_db_role_setting_setconfig,
									 RelationGetDescr(rel), &isnull);
		Datum	   *elems;
		bool	   *elem_nulls;
		int			n;

		if (isnull)
			continue;
		deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT,
						  &elems, &elem_nulls, &n);
		for (int i = 0; i < n; i++)
			if (!elem_nulls[i])
				apply_role_setting(c, TextDatumGetCString(elems[i]));
	}
	systable_endscan(scan);
}

/*
 * What role was granted: the session's settings, and when role is not the
 * session user, its own ALTER ROLE settings (role-wide, then for this
 * database) over them.
 */
void
OpusTenantResolve(Oid role, OpusTenantConf *c)
{
	memset(c, 0, sizeof(*c));
	c->role = role;
	c->ceiling = opus_priority_ceiling_value;
	strlcpy(c->scope_name, opus_cache_scope ? opus_cache_scope : "role", sizeof(c->scope_name));
	c->weight = opus_role_weight;
	c->max_requests = opus_role_max_requests;
	c->max_async_requests = opus_role_max_async_requests;
	c->max_tokens = opus_role_max_tokens;
	c->tokens_per_minute = opus_role_tokens_per_minute;
	c->tokens_per_day = opus_role_tokens_per_day;
	if (role != GetSessionUserId() && IsTransactionState())
	{
		Relation	rel = table_open(DbRoleSettingRelationId, AccessShareLock);

		read_role_settings(rel, InvalidOid, role, c);
		read_role_settings(rel, MyDatabaseId, role, c);
		table_close(rel, AccessShareLock);
	}
	c->scope = scope_key(c->scope_name, role);
}

/* The priority ceiling of the current user (see OpusTenantResolve). */
int
OpusTenantCeiling(void)
{
	OpusTenantConf c;

	if (GetUserId() == GetSessionUserId() || !IsTransactionState())
		return opus_priority_ceiling_value;
	OpusTenantResolve(GetUserId(), &c);
	return c.ceiling;
}

/* ---- shared memory ---- */

Size
OpusTenantShmemSize(void)
{
	return MAXALIGN(sizeof(OpusTenantShared));
}

void
OpusTenantShmemRequest(void)
{
	RequestAddinShmemSpace(OpusTenantShmemSize());
	RequestNamedLWLockTranche("opus_pg tenants", 1);
}

void
OpusTenantShmemInit(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	OpusTenants = ShmemInitStruct("opus_pg tenants", OpusTenantShmemSize(), &found);
	if (!found)
	{
		memset(OpusTenants, 0, OpusTenantShmemSize());
		OpusTenants->lock = &(GetNamedLWLockTranche("opus_pg tenants"))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* The entry of role, taken over (LRU) when create and it has none.  Lock held exclusively when create. */
static OpusTenantEntry *
entry_for(Oid role, bool create)
{
	OpusTenantEntry *lru = NULL;

	for (int i = 0; i < OPUS_MAX_TENANTS; i++)
	{
		OpusTenantEntry *e = &OpusTenants->entries[i];

		if (e->role == role)
			return e;
		if (!lru || e->role == InvalidOid ||
			(lru->role != InvalidOid && e->last_used < lru->last_used))
			lru = e;
	}
	if (!create)
		return NULL;
	memset(lru, 0, sizeof(*lru));
	lru->role = role;
	return lru;
}

/*
 * Tokens e used in the window of n buckets of width_s seconds ending now
 * (second `now_s`), and when the oldest of them leave it (seconds from now,
 * with how many).
 */
static int64
window_sum(const int64 *tok, const int64 *stamp, int n, int width_s, int64 now_s,
		   int64 *free_in_s, int64 *free_tokens)
{
	int64		cur = now_s / width_s;
	int64		sum = 0;
	int64		oldest = -1;

	*free_tokens = 0;
	for (int i = 0; i < n; i++)
	{
		if (tok[i] == 0 || stamp[i] <= cur - n)
			continue;
		sum += tok[i];
		if (oldest < 0 || stamp[i] < oldest)
		{
			oldest = stamp[i];
			*free_tokens = tok[i];
		}
	}
	*free_in_s = oldest < 0 ? 0 : (oldest + n) * width_s - now_s;
	return sum;
}

static int64
now_seconds(void)
{
	return (int64) (GetCurrentTimestamp() / USECS_PER_SEC);
}

static void
count_refusal(Oid role)
{
	OpusTenantEntry *e;

	LWLockAcquire(OpusTenants->lock, LW_EXCLUSIVE);
	e = entry_for(role, true);
	e->refused++;
	e->last_used = GetCurrentTimestamp();
	LWLockRelease(OpusTenants->lock);
}

static const char *
role_name(Oid role)
{
	char	   *n = GetUserNameFromId(role, true);

	return n ? n : "?";
}

/*
 * Check what needs no slot: max_tokens (generation kinds) and the token
 * windows.  Raises 53400 with a DETAIL naming the limit and when it frees.
 * Remembers the limits in the role's entry.
 */
void
OpusTenantCheckRequest(const OpusTenantConf *c, uint8 kind, int max_tokens)
{
	OpusTenantEntry *e;
	int64		now_s = now_seconds();
	int64		used_min = 0,
				used_day = 0,
				free_min_s = 0,
				free_day_s = 0,
				free_min_tok = 0,
				free_day_tok = 0;
	bool		gen = kind == OPUS_KIND_GENERATE || kind == OPUS_KIND_CHAT;

	if (OpusTenants == NULL)
		return;
	if (gen && c->max_tokens > 0 && max_tokens > c->max_tokens)
	{
		count_refusal(c->role);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("max_tokens %d is over role \"%s\"'s limit of %d", max_tokens,
						role_name(c->role), c->max_tokens),
				 errdetail("opus.role_max_tokens is %d for this role.", c->max_tokens),
				 errhint("Ask for at most %d tokens.", c->max_tokens)));
	}
	LWLockAcquire(OpusTenants->lock, LW_EXCLUSIVE);
	e = entry_for(c->role, true);
	e->conf = *c;
	e->last_used = GetCurrentTimestamp();
	if (gen && c->tokens_per_minute > 0)
		used_min = window_sum(e->min_tok, e->min_stamp, MINUTE_BUCKETS, 1, now_s,
							  &free_min_s, &free_min_tok);
	if (gen && c->tokens_per_day > 0)
		used_day = window_sum(e->day_tok, e->day_stamp, DAY_BUCKETS, DAY_BUCKET_S, now_s,
							  &free_day_s, &free_day_tok);
	if ((c->tokens_per_minute > 0 && used_min >= c->tokens_per_minute) ||
		(c->tokens_per_day > 0 && used_day >= c->tokens_per_day))
		e->refused++;
	LWLockRelease(OpusTenants->lock);

	if (gen && c->tokens_per_minute > 0 && used_min >= c->tokens_per_minute)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("role \"%s\" has used its %d tokens per minute", role_name(c->role),
						c->tokens_per_minute),
				 errdetail("opus.role_tokens_per_minute is %d; %lld tokens were used in the last minute, and %lld of them leave the window in %lld s.",
						   c->tokens_per_minute, (long long) used_min,
						   (long long) free_min_tok, (long long) free_min_s),
				 errhint("Retry in %lld s.", (long long) free_min_s)));
	if (gen && c->tokens_per_day > 0 && used_day >= c->tokens_per_day)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("role \"%s\" has used its %d tokens per day", role_name(c->role),
						c->tokens_per_day),
				 errdetail("opus.role_tokens_per_day is %d; %lld tokens were used in the last 24 hours, and %lld of them leave the window in %lld s.",
						   c->tokens_per_day, (long long) used_day,
						   (long long) free_day_tok, (long long) free_day_s),
				 errhint("Retry in %lld s.", (long long) free_day_s)));
}

/*
 * After claiming slot `index` for role (async or not): count the slots the
 * role holds, this one included.  Returns NULL when within its limits, else
 * the name of the limit exceeded (and *limit, *held); the caller frees the
 * slot and raises with OpusTenantRaiseSlots.
 */
const char *
OpusTenantCheckClaim(const OpusTenantConf *c, bool async, int *limit, int *held)
{
	int			n_all = 0,
				n_async = 0;

	if (c->max_requests <= 0 && (!async || c->max_async_requests <= 0))
		return NULL;
	for (int i = 0; i < OpusShared->n_slots; i++)
	{
		OpusSlot   *s = OpusGetSlot(i);

		/* unlocked reads: a claim is published before anyone counts it */
		if (s->state == OPUS_SLOT_FREE || s->userid != c->role)
			continue;
		n_all++;
		n_async += s->async ? 1 : 0;
	}
	if (c->max_requests > 0 && n_all > c->max_requests)
	{
		*limit = c->max_requests;
		*held = n_all - 1;
		return "opus.role_max_requests";
	}
	if (async && c->max_async_requests > 0 && n_async > c->max_async_requests)
	{
		*limit = c->max_async_requests;
		*held = n_async - 1;
		return "opus.role_max_async_requests";
	}
	return NULL;
}

void
OpusTenantRaiseSlots(const OpusTenantConf *c, const char *which, int limit, int held)
{
	bool		async = strcmp(which, "opus.role_max_async_requests") == 0;

	count_refusal(c->role);
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("role \"%s\" already holds %d %s", role_name(c->role), held,
					async ? "asynchronous opus requests" : "opus request slots"),
			 errdetail("%s is %d for this role; a slot frees when one of its requests %s.",
					   which, limit,
					   async ? "is read with opus_result, cancelled or expires" : "finishes")));
}

/*
 * Load shedding by objective: when a generation request of class cls would
 * queue behind a request of class cls or an earlier one (a smaller number)
 * that has waited longer than opus.queue_objective without its first token,
 * refuse it at once with 53000.  Slot fields are read without locks: a
 * stale read only moves the decision by one request.
 */
void
OpusTenantCheckObjective(uint8 kind, int cls)
{
	TimestampTz now;
	int64		worst_ms = 0;
	int			worst_cls = 0;

	if (opus_queue_objective_ms <= 0 || OpusShared == NULL ||
		(kind != OPUS_KIND_GENERATE && kind != OPUS_KIND_CHAT))
		return;
	now = GetCurrentTimestamp();
	for (int i = 0; i < OpusShared->n_slots; i++)
	{
		OpusSlot   *s = OpusGetSlot(i);
		OpusSlotState st = s->state;
		int64		waited;

		if ((st != OPUS_SLOT_SUBMITTED && st != OPUS_SLOT_RUNNING) ||
			(s->kind != OPUS_KIND_GENERATE && s->kind != OPUS_KIND_CHAT) ||
			s->result_len != 0 || s->priority > cls)
			continue;
		waited = (now - s->submit_time) / 1000;
		if (waited > worst_ms)
		{
			worst_ms = waited;
			worst_cls = s->priority;
		}
	}
	if (worst_ms > opus_queue_objective_ms)
	{
		OpusStatsRejected(kind);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("opus requests of class %d are past their queueing objective", cls),
				 errdetail("A request of class %d has waited %lld ms for its first token, over opus.queue_objective (%d ms).",
						   worst_cls, (long long) worst_ms, opus_queue_objective_ms),
				 errhint("Retry later, or ask for fewer or shorter generations.")));
	}
}

/* The supervisor: charge a finished request's tokens to role. */
void
OpusTenantCharge(Oid role, int64 tokens)
{
	OpusTenantEntry *e;
	int64		now_s;
	int			b;

	if (OpusTenants == NULL || tokens <= 0)
		return;
	now_s = now_seconds();
	LWLockAcquire(OpusTenants->lock, LW_EXCLUSIVE);
	e = entry_for(role, true);
	b = (int) (now_s % MINUTE_BUCKETS);
	if (e->min_stamp[b] != now_s)
	{
		e->min_stamp[b] = now_s;
		e->min_tok[b] = 0;
	}
	e->min_tok[b] += tokens;
	b = (int) ((now_s / DAY_BUCKET_S) % DAY_BUCKETS);
	if (e->day_stamp[b] != now_s / DAY_BUCKET_S)
	{
		e->day_stamp[b] = now_s / DAY_BUCKET_S;
		e->day_tok[b] = 0;
	}
	e->day_tok[b] += tokens;
	e->requests++;
	e->tokens += tokens;
	e->last_used = GetCurrentTimestamp();
	LWLockRelease(OpusTenants->lock);
}

/* ---- the view ---- */

PG_FUNCTION_INFO_V1(opus_stat_tenants_v1);

#define TENANT_COLS 15

/*
 * pg_stat_opus_tenants: one row per role seen since start-up: the limits in
 * force at its last request, and its usage against them.  Other roles'
 * rows need their privileges or pg_read_all_stats.
 */
Datum
opus_stat_tenants_v1(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	OpusTenantEntry *copy;
	int			n = 0;
	int64		now_s;
	Oid			me = GetUserId();
	bool		all = has_privs_of_role(me, ROLE_PG_READ_ALL_STATS);

	OpusCheckPreloaded();
	InitMaterializedSRF(fcinfo, 0);
	copy = palloc(sizeof(OpusTenantEntry) * OPUS_MAX_TENANTS);
	LWLockAcquire(OpusTenants->lock, LW_SHARED);
	for (int i = 0; i < OPUS_MAX_TENANTS; i++)
		if (OpusTenants->entries[i].role != InvalidOid)
			copy[n++] = OpusTenants->entries[i];
	LWLockRelease(OpusTenants->lock);
	now_s = now_seconds();

	for (int i = 0; i < n; i++)
	{
		OpusTenantEntry *e = &copy[i];
		Datum		values[TENANT_COLS];
		bool		nulls[TENANT_COLS];
		int			k = 0;
		int			held = 0,
					held_async = 0;
		int64		fs,
					ft;

		if (!all && e->role != me && !has_privs_of_role(me, e->role))
			continue;
		for (int j = 0; j < OpusShared->n_slots; j++)
		{
			OpusSlot   *s = OpusGetSlot(j);

			if (s->state == OPUS_SLOT_FREE || s->userid != e->role)
				continue;
			held++;
			held_async += s->async ? 1 : 0;
		}
		memset(nulls, 0, sizeof(nulls));
#define LIMIT(v) do { if ((v) > 0) values[k++] = Int32GetDatum(v); else nulls[k++] = true; } while (0)
		values[k++] = ObjectIdGetDatum(e->role);
		values[k++] = Int32GetDatum(held);
		LIMIT(e->conf.max_requests);
		values[k++] = Int32GetDatum(held_async);
		LIMIT(e->conf.max_async_requests);
		values[k++] = Int64GetDatum(window_sum(e->min_tok, e->min_stamp, MINUTE_BUCKETS, 1,
											   now_s, &fs, &ft));
		LIMIT(e->conf.tokens_per_minute);
		values[k++] = Int64GetDatum(window_sum(e->day_tok, e->day_stamp, DAY_BUCKETS,
											   DAY_BUCKET_S, now_s, &fs, &ft));
		LIMIT(e->conf.tokens_per_day);
		LIMIT(e->conf.max_tokens);
		values[k++] = Int32GetDatum(e->conf.ceiling);
		values[k++] = Int32GetDatum(e->conf.weight);
		values[k++] = CStringGetTextDatum(e->conf.scope_name);
		values[k++] = Int64GetDatum(e->requests);
		values[k++] = Int64GetDatum(e->refused);
#undef LIMIT
		Assert(k == TENANT_COLS);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
