/*
 * opus_tenants.h - tenancy (tenants.c): what the role a request runs for
 * was granted (cache scope, priority ceiling, fair-share weight, quotas),
 * and the shared-memory usage counters the quotas are checked against.
 */
#ifndef OPUS_TENANTS_H
#define OPUS_TENANTS_H

#include "postgres.h"

#include "opus_pg.h"

typedef struct OpusTenantConf
{
	Oid			role;
	int			ceiling;		/* best class (opus.priority_ceiling) */
	char		scope_name[NAMEDATALEN];	/* opus.cache_scope */
	uint64		scope;			/* the cache scope sent to the engine; 0 = server */
	int			weight;			/* opus.role_weight */
	int			max_requests;	/* 0 = no limit */
	int			max_async_requests;
	int			max_tokens;
	int			tokens_per_minute;
	int			tokens_per_day;
} OpusTenantConf;

extern char *opus_priority_ceiling;
extern int	opus_priority_ceiling_value;

extern void OpusDefineTenantSettings(void);
extern Size OpusTenantShmemSize(void);
extern void OpusTenantShmemRequest(void);
extern void OpusTenantShmemInit(void);

/* What role was granted (see the top of tenants.c). */
extern void OpusTenantResolve(Oid role, OpusTenantConf *c);
/* The current user's priority ceiling. */
extern int	OpusTenantCeiling(void);
/* Raise 53400 if a request of kind with max_tokens breaks c's token limits. */
extern void OpusTenantCheckRequest(const OpusTenantConf *c, uint8 kind, int max_tokens);
/* After a claim: NULL, or the slot limit the role went over. */
extern const char *OpusTenantCheckClaim(const OpusTenantConf *c, bool async, int *limit, int *held);
extern void OpusTenantRaiseSlots(const OpusTenantConf *c, const char *which, int limit,
								 int held) pg_attribute_noreturn();
/* Raise 53000 if a waiting request of class <= cls is past opus.queue_objective. */
extern void OpusTenantCheckObjective(uint8 kind, int cls);
/* Supervisor: charge a finished request's prompt + completion tokens. */
extern void OpusTenantCharge(Oid role, int64 tokens);

#endif							/* OPUS_TENANTS_H */
