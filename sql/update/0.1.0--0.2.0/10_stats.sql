-- 0.1.0 -> 0.2.0: the request log's identity sequence is dumped with the
-- table, so a restored log goes on from its last id (docs/overload.md).
SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_requests_id_seq', '');

-- The request log keeps the role's name (username) and row-level security
-- matches rows to roles by it, not by oid: a dump restored into another
-- cluster shows each role only its own rows (docs/overload.md).
ALTER TABLE @extschema@.opus_requests ADD COLUMN username name;
UPDATE @extschema@.opus_requests q SET username = r.rolname
FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) q.userid;
DROP POLICY opus_requests_own ON @extschema@.opus_requests;
CREATE POLICY opus_requests_own ON @extschema@.opus_requests
    FOR SELECT
    USING (pg_catalog.pg_has_role(CURRENT_USER,
                                  pg_catalog.to_regrole(pg_catalog.quote_ident(username)), 'USAGE')
           OR pg_catalog.pg_has_role(CURRENT_USER, 'pg_read_all_stats', 'USAGE'));

-- pg_stat_opus_engine has one row per declared model, its name first (API
-- version 2; docs/models.md).  The view is re-pointed at the new function;
-- opus_stat_engine_v1 stays in the library for 0.1.0's script.
DROP VIEW @extschema@.pg_stat_opus_engine;
DROP FUNCTION @extschema@.opus_stat_engine_v1();

CREATE FUNCTION @extschema@.opus_stat_engine_v2(
    OUT name text,
    OUT engine_pid integer,
    OUT state text,
    OUT model text,
    OUT device text,
    OUT threads integer,
    OUT started_at timestamp with time zone,
    OUT ready_at timestamp with time zone,
    OUT uptime_seconds double precision,
    OUT starts bigint,
    OUT restarts bigint,
    OUT last_error text,
    OUT last_exit text,
    OUT steps bigint,
    OUT batch_size integer,
    OUT mean_batch_size double precision,
    OUT tokens_per_sec_10s double precision,
    OUT tokens_per_sec_1m double precision,
    OUT prompt_tokens_per_sec_10s double precision,
    OUT prompt_tokens_per_sec_1m double precision,
    OUT generated_tokens bigint,
    OUT prompt_tokens bigint,
    OUT kv_blocks_total bigint,
    OUT kv_blocks_used bigint,
    OUT kv_blocks_cached bigint,
    OUT prefix_hit_tokens bigint,
    OUT prefix_query_tokens bigint,
    OUT preemptions bigint,
    OUT queue_depth integer,
    OUT running integer,
    OUT busy_slots integer,
    OUT max_requests integer,
    OUT memory_rss bigint,
    OUT log_written bigint,
    OUT log_dropped bigint,
    OUT log_pending bigint,
    OUT stat_entries bigint,
    OUT stat_evictions bigint,
    OUT stats_reset timestamp with time zone)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_stat_engine_v2'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_stat_engine_v2()
IS 'one row per declared model: its engine, scheduler and KV cache, throughput; and the request slots and log queue (API version 2 of pg_stat_opus_engine)';

CREATE VIEW @extschema@.pg_stat_opus_engine AS
    SELECT * FROM @extschema@.opus_stat_engine_v2();

GRANT SELECT ON @extschema@.pg_stat_opus_engine TO PUBLIC;

COMMENT ON VIEW @extschema@.pg_stat_opus_engine
IS 'one row per model (name: default or one of opus.models): its engine process, batch and KV cache, prefix cache, tokens per second over 10 s and 1 min, queue depth, memory; server-wide request slot and log counters on every row';

-- Embedding requests are logged too, with kind 'embed' (docs/embeddings.md).
ALTER TABLE @extschema@.opus_requests DROP CONSTRAINT opus_requests_kind_check;
ALTER TABLE @extschema@.opus_requests ADD CONSTRAINT opus_requests_kind_check
    CHECK (kind IN ('generate', 'chat', 'embed'));
COMMENT ON TABLE @extschema@.opus_requests
IS 'the request log: one row per generation or embedding request (opus.log_requests, opus.log_sample_rate), written by the opus_pg logger in database opus.database; each user sees their own rows unless they have pg_read_all_stats';

-- pg_stat_opus_activity gains a model column, pg_stat_opus_latency and
-- pg_stat_opus_latency_buckets one row set per model (API version 2;
-- docs/models.md).  The _v1 functions stay in the library for 0.1.0.
DROP VIEW @extschema@.pg_stat_opus_activity;
DROP FUNCTION @extschema@.opus_stat_activity_v1();
DROP VIEW @extschema@.pg_stat_opus_latency;
DROP FUNCTION @extschema@.opus_stat_latency_v1();
DROP VIEW @extschema@.pg_stat_opus_latency_buckets;
DROP FUNCTION @extschema@.opus_stat_latency_buckets_v1();

CREATE FUNCTION @extschema@.opus_stat_activity_v2(
    OUT pid integer,
    OUT userid oid,
    OUT dbid oid,
    OUT request_id bigint,
    OUT kind text,
    OUT model text,
    OUT state text,
    OUT priority integer,
    OUT submitted_at timestamp with time zone,
    OUT started_at timestamp with time zone,
    OUT prompt_tokens integer,
    OUT completion_tokens integer,
    OUT max_tokens integer,
    OUT kv_blocks integer,
    OUT prompt text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_stat_activity_v2'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_stat_activity_v2()
IS 'one row per queued or running request (API version 2 of pg_stat_opus_activity)';

CREATE VIEW @extschema@.pg_stat_opus_activity AS
    SELECT * FROM @extschema@.opus_stat_activity_v2();

GRANT SELECT ON @extschema@.pg_stat_opus_activity TO PUBLIC;

COMMENT ON VIEW @extschema@.pg_stat_opus_activity
IS 'requests queued or running: the model serving it (or asked for while queued), state queued, prefill or decode, tokens so far, KV blocks held, and the prompt (the first 1 kB; hidden unless it is your own or you have pg_read_all_stats)';

CREATE FUNCTION @extschema@.opus_stat_latency_v2(
    OUT model text,
    OUT histogram text,
    OUT count bigint,
    OUT sum_ms double precision,
    OUT mean_ms double precision,
    OUT max_ms double precision,
    OUT p50_ms double precision,
    OUT p95_ms double precision,
    OUT p99_ms double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_stat_latency_v2'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_stat_latency_v2()
IS 'latency summaries per model from the fixed-bucket histograms; percentiles interpolated linearly inside their bucket (API version 2 of pg_stat_opus_latency)';

CREATE VIEW @extschema@.pg_stat_opus_latency AS
    SELECT * FROM @extschema@.opus_stat_latency_v2();

GRANT SELECT ON @extschema@.pg_stat_opus_latency TO PUBLIC;

COMMENT ON VIEW @extschema@.pg_stat_opus_latency
IS 'queue, time_to_first_token, inter_token_latency and end_to_end latency of completed generation requests, per model (named as in pg_stat_opus): count, mean, max, p50, p95, p99 (ms)';

CREATE FUNCTION @extschema@.opus_stat_latency_buckets_v2(
    OUT model text,
    OUT histogram text,
    OUT le_ms double precision,
    OUT count bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_stat_latency_buckets_v2'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_stat_latency_buckets_v2()
IS 'the latency histograms'' buckets per model: cumulative count of observations <= le_ms, Prometheus style (API version 2 of pg_stat_opus_latency_buckets)';

CREATE VIEW @extschema@.pg_stat_opus_latency_buckets AS
    SELECT * FROM @extschema@.opus_stat_latency_buckets_v2();

GRANT SELECT ON @extschema@.pg_stat_opus_latency_buckets TO PUBLIC;

COMMENT ON VIEW @extschema@.pg_stat_opus_latency_buckets
IS 'cumulative latency histogram buckets per model (le_ms = Infinity is the total), for Prometheus';
