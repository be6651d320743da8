-- Observability (src/pg/stats.c, stats_views.c, reqlog.c): statistics views
-- over shared-memory counters, latency histograms and the request log.
--
-- Every view is a thin SELECT * over a set-returning C function whose name
-- carries an API version (opus_stat_v1, ...); a later release adds columns
-- in a _v2 function and its upgrade script re-points the view.  The
-- statistics are readable by everyone; prompts of other users are shown as
-- '<insufficient privilege>' unless the reader has pg_read_all_stats.
-- Times are in milliseconds.

-- pg_stat_opus ----------------------------------------------------------

CREATE FUNCTION @extschema@.opus_stat_v1(
    OUT userid oid,
    OUT dbid oid,
    OUT model text,
    OUT calls bigint,
    OUT errors bigint,
    OUT cancellations bigint,
    OUT rejections bigint,
    OUT prompt_tokens bigint,
    OUT completion_tokens bigint,
    OUT cached_tokens bigint,
    OUT total_time double precision,
    OUT min_time double precision,
    OUT max_time double precision,
    OUT mean_time double precision,
    OUT stddev_time double precision,
    OUT mean_queue_time double precision,
    OUT mean_time_to_first_token double precision,
    OUT mean_time_per_output_token double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_stat_v1'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_stat_v1()
IS 'generation statistics per user, database and model (API version 1 of pg_stat_opus)';

CREATE VIEW @extschema@.pg_stat_opus AS
    SELECT * FROM @extschema@.opus_stat_v1();

GRANT SELECT ON @extschema@.pg_stat_opus TO PUBLIC;

COMMENT ON VIEW @extschema@.pg_stat_opus
IS 'generation requests per user, database and model: completed calls, errors, cancellations, rejections, tokens and times (ms, end to end, of completed calls)';

-- pg_stat_opus_activity ---------------------------------------------------

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

-- pg_stat_opus_engine -----------------------------------------------------

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

-- latency histograms ------------------------------------------------------

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

-- reset ---------------------------------------------------------------------

CREATE FUNCTION @extschema@.pg_stat_opus_reset()
RETURNS timestamp with time zone
AS 'MODULE_PATHNAME', 'opus_stat_reset'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pg_stat_opus_reset()
IS 'discard pg_stat_opus entries and the latency histograms; returns the reset time';

REVOKE ALL ON FUNCTION @extschema@.pg_stat_opus_reset() FROM PUBLIC;

-- the request log -----------------------------------------------------------
--
-- Written by the "opus_pg logger" background worker in the database named
-- by opus.database (default postgres); there it records generation and
-- embedding requests (kind 'embed') of every database on the server.  Rows of requests still running have
-- status 'running'; those a crash or restart interrupted are marked
-- 'interrupted' when the logger starts.  Rows older than opus.log_retention
-- are deleted.  Each user sees only their own rows (row-level security)
-- unless they have pg_read_all_stats.  Rows are matched to roles by name
-- (username), not by oid: a dump restored into another cluster, where the
-- oids differ, shows each role its own rows and no one else's.

CREATE TABLE @extschema@.opus_requests (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id bigint NOT NULL,
    userid oid NOT NULL,
    dbid oid NOT NULL,
    backend_pid integer,
    model text,
    kind text NOT NULL CHECK (kind IN ('generate', 'chat', 'embed')),
    params jsonb NOT NULL,
    status text NOT NULL
        CHECK (status IN ('running', 'completed', 'error', 'cancelled', 'failed', 'interrupted')),
    finish_reason text CHECK (finish_reason IN ('stop', 'length', 'cancelled', 'error')),
    prompt_tokens integer,
    completion_tokens integer,
    cached_tokens integer,
    error text,
    submitted_at timestamp with time zone NOT NULL,
    started_at timestamp with time zone,
    first_token_at timestamp with time zone,
    finished_at timestamp with time zone,
    username name
);

CREATE INDEX opus_requests_submitted_at ON @extschema@.opus_requests (submitted_at);
CREATE INDEX opus_requests_running ON @extschema@.opus_requests (request_id)
    WHERE status = 'running';

COMMENT ON TABLE @extschema@.opus_requests
IS 'the request log: one row per generation or embedding request (opus.log_requests, opus.log_sample_rate), written by the opus_pg logger in database opus.database; each user sees their own rows unless they have pg_read_all_stats';

ALTER TABLE @extschema@.opus_requests ENABLE ROW LEVEL SECURITY;

CREATE POLICY opus_requests_own ON @extschema@.opus_requests
    FOR SELECT
    USING (pg_catalog.pg_has_role(CURRENT_USER,
                                  pg_catalog.to_regrole(pg_catalog.quote_ident(username)), 'USAGE')
           OR pg_catalog.pg_has_role(CURRENT_USER, 'pg_read_all_stats', 'USAGE'));

GRANT SELECT ON @extschema@.opus_requests TO PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_requests', '');
-- The identity sequence too: a restored log goes on from its last id.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_requests_id_seq', '');
