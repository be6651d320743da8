-- Tenants (src/pg/tenants.c): each role's usage against the limits a
-- superuser granted it (opus.role_* settings, opus.priority_ceiling,
-- opus.cache_scope, set with ALTER ROLE ... SET).  One row per role seen
-- since the server started; other roles' rows need pg_read_all_stats.

CREATE FUNCTION @extschema@.opus_stat_tenants_v1(
    OUT userid oid,
    OUT requests_held integer,
    OUT max_requests integer,
    OUT async_requests_held integer,
    OUT max_async_requests integer,
    OUT tokens_last_minute bigint,
    OUT tokens_per_minute integer,
    OUT tokens_last_day bigint,
    OUT tokens_per_day integer,
    OUT max_tokens integer,
    OUT priority_ceiling integer,
    OUT weight integer,
    OUT cache_scope text,
    OUT requests bigint,
    OUT refused bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_stat_tenants_v1'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_stat_tenants_v1()
IS 'each role''s request slots and tokens against its limits (API version 1 of pg_stat_opus_tenants)';

CREATE VIEW @extschema@.pg_stat_opus_tenants AS
    SELECT * FROM @extschema@.opus_stat_tenants_v1();

GRANT SELECT ON @extschema@.pg_stat_opus_tenants TO PUBLIC;

COMMENT ON VIEW @extschema@.pg_stat_opus_tenants
IS 'per role: request slots, asynchronous requests and tokens (last minute, last 24 hours) held or used, against its limits (NULL = none); its priority ceiling, fair-share weight and cache scope; requests charged and refused';
