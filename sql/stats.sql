-- stats: pg_stat_opus*, the latency histograms and the request log.
-- Counts are checked for two dedicated roles only, so requests of other
-- tests (still running asynchronously, say) cannot disturb them.

-- wait_until(q): poll the boolean query q (a fresh snapshot each time) for up to 30 s.
CREATE FUNCTION wait_until(q text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    ok boolean;
BEGIN
    FOR i IN 1 .. 300 LOOP
        PERFORM pg_stat_clear_snapshot();
        EXECUTE q INTO ok;
        IF ok THEN
            RETURN true;
        END IF;
        PERFORM pg_sleep(0.1);
    END LOOP;
    RETURN false;
END $$;

-- The views and their columns.
SELECT c.relname, a.attnum, a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
WHERE c.relname IN ('pg_stat_opus', 'pg_stat_opus_activity', 'pg_stat_opus_engine',
                    'pg_stat_opus_latency', 'pg_stat_opus_latency_buckets', 'opus_requests')
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY c.relname COLLATE "C", a.attnum;

-- Views are thin wrappers over versioned functions.
SELECT c.relname, pg_catalog.pg_get_viewdef(c.oid) ~ 'opus_stat_[a-z_]*v[0-9]+\(\)' AS versioned
FROM pg_class c
WHERE c.relkind = 'v' AND c.relname LIKE 'pg\_stat\_opus%'
ORDER BY c.relname COLLATE "C";

-- Nothing of earlier tests still running (the histograms are server-wide).
SELECT wait_until($$SELECT count(*) = 0 FROM pg_stat_opus_activity$$);

-- Reset is for superusers (and whoever they grant it to).
SELECT pg_catalog.has_function_privilege('public', 'pg_stat_opus_reset()', 'EXECUTE') AS public_may_reset;
SELECT pg_stat_opus_reset() IS NOT NULL AS t;
SELECT count(*) AS entries_after_reset FROM pg_stat_opus;
SELECT histogram, count FROM pg_stat_opus_latency ORDER BY histogram COLLATE "C";

CREATE ROLE regress_opus_a;
CREATE ROLE regress_opus_b;
CREATE TABLE stats_usage (who name, prompt_tokens int, completion_tokens int, tokenized int, finish text);
GRANT INSERT ON stats_usage TO regress_opus_a, regress_opus_b;

-- Known requests: two completions as a, one chat as b.
SET ROLE regress_opus_a;
INSERT INTO stats_usage
SELECT current_user, (r->'usage'->>'prompt_tokens')::int, (r->'usage'->>'completion_tokens')::int,
       array_length(opus_tokenize(p), 1), r->'choices'->0->>'finish_reason'
FROM (VALUES ('The capital of France is'), ('One, two, three, four,')) v(p),
     LATERAL opus_completion(p, max_tokens => 16, temperature => 0) r;
SET ROLE regress_opus_b;
INSERT INTO stats_usage
SELECT current_user, (r->'usage'->>'prompt_tokens')::int, (r->'usage'->>'completion_tokens')::int,
       NULL, r->'choices'->0->>'finish_reason'
FROM opus_chat_completion('[{"role": "system", "content": "Stats test."}, {"role": "user", "content": "Say hello."}]', max_tokens => 8, temperature => 0) r;
RESET ROLE;

-- Prompt tokens agree with opus_tokenize; greedy runs to max_tokens here.
SELECT who, prompt_tokens = tokenized AS tokens_agree, completion_tokens, finish
FROM stats_usage WHERE tokenized IS NOT NULL ORDER BY who, prompt_tokens;

-- pg_stat_opus moved by exactly the usage of those calls (cached_tokens:
-- each role hits only its own earlier prompts, docs/tenants.md).
SELECT r.rolname, s.model = (SELECT model FROM pg_stat_opus_engine) AS served_model,
       s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AS this_db,
       s.calls, s.errors, s.cancellations, s.rejections,
       s.prompt_tokens = u.p AS prompt_tokens_match,
       s.completion_tokens = u.c AS completion_tokens_match,
       s.cached_tokens,
       s.min_time <= s.mean_time AND s.mean_time <= s.max_time AS time_order,
       abs(s.total_time - s.mean_time * s.calls) < 1e-6 * s.total_time AS total_is_sum,
       s.mean_time_to_first_token > 0 AND s.mean_time_to_first_token <= s.max_time AS ttft_ok,
       s.mean_time_per_output_token > 0 AS tpot_ok
FROM pg_stat_opus s
JOIN pg_roles r ON r.oid = s.userid
JOIN (SELECT who, sum(prompt_tokens) p, sum(completion_tokens) c FROM stats_usage GROUP BY who) u
  ON u.who = r.rolname
ORDER BY r.rolname COLLATE "C";

-- The histograms saw exactly these three completed requests: one queue,
-- first-token and end-to-end observation each, and a gap between each
-- pair of consecutive output tokens.
SELECT l.histogram, l.count,
       l.count = CASE WHEN l.histogram = 'inter_token_latency'
                      THEN (SELECT sum(completion_tokens) - count(*) FROM stats_usage)
                      ELSE 3 END AS expected_count,
       l.p50_ms <= l.p95_ms AND l.p95_ms <= l.p99_ms AND l.p99_ms <= l.max_ms AS ordered,
       b.count = l.count AS inf_bucket_is_total
FROM pg_stat_opus_latency l
JOIN pg_stat_opus_latency_buckets b ON b.histogram = l.histogram AND b.le_ms = 'Infinity'
ORDER BY l.histogram COLLATE "C";
-- buckets are cumulative
SELECT histogram, bool_and(ok) AS cumulative
FROM (SELECT histogram, count >= lag(count, 1, 0::bigint) OVER (PARTITION BY histogram ORDER BY le_ms) AS ok
      FROM pg_stat_opus_latency_buckets) x
GROUP BY histogram ORDER BY histogram COLLATE "C";

-- Errors, rejections and cancellations, as b (opus.max_prompt_bytes is
-- superuser-only: raised before the switch to b).
SET opus.max_prompt_bytes = '1MB';
SET ROLE regress_opus_b;
SELECT sqlstate_of($$SELECT opus_generate('hi', max_tokens => 100000)$$) AS too_long;
SELECT sqlstate_of($$SELECT opus_generate(repeat('a', 600000))$$) AS too_large;
SET statement_timeout = '300ms';
SELECT sqlstate_of($$SELECT opus_generate('Count to a thousand: 1, 2, 3,', max_tokens => 2000, temperature => 0)$$) AS timed_out;
RESET statement_timeout;
RESET ROLE;
RESET opus.max_prompt_bytes;
SELECT wait_until($$SELECT cancellations = 1 FROM pg_stat_opus WHERE userid = 'regress_opus_b'::regrole$$);
SELECT calls, errors, cancellations, rejections
FROM pg_stat_opus WHERE userid = 'regress_opus_b'::regrole;

-- The engine view.
SELECT state, engine_pid > 0 AS has_pid, device, threads, restarts, uptime_seconds >= 0 AS up,
       steps > 0 AS stepped, generated_tokens >= (SELECT sum(completion_tokens) FROM stats_usage) AS counted,
       tokens_per_sec_1m > 0 AS rate, kv_blocks_total > 0 AS kv, kv_blocks_used <= kv_blocks_total AS kv_ok,
       memory_rss > 0 AS rss, max_requests, stat_entries >= 2 AS entries, stat_evictions
FROM pg_stat_opus_engine;

-- Activity: a running request of a, seen by b without its prompt.
SET ROLE regress_opus_a;
SELECT opus_submit('My secret prompt: count to a thousand: 1, 2, 3,', max_tokens => 2000, temperature => 0) AS req \gset
RESET ROLE;
SELECT wait_until(format($$SELECT state = 'decode' FROM pg_stat_opus_activity WHERE request_id = %s$$, :req));
SELECT kind, state, pid = pg_backend_pid() AS mine, userid = 'regress_opus_a'::regrole AS user_a,
       prompt_tokens > 0 AS has_prompt_tokens, completion_tokens > 0 AS generating, max_tokens,
       kv_blocks > 0 AS holds_kv, started_at >= submitted_at AS started, prompt
FROM pg_stat_opus_activity WHERE request_id = :req;
SET ROLE regress_opus_b;
SELECT prompt FROM pg_stat_opus_activity WHERE request_id = :req;
SET ROLE regress_opus_a;
SELECT prompt FROM pg_stat_opus_activity WHERE request_id = :req;
SELECT opus_cancel(:req);
RESET ROLE;
SELECT wait_until(format($$SELECT count(*) = 0 FROM pg_stat_opus_activity WHERE request_id = %s$$, :req));

-- Plain roles may not reset.
SET ROLE regress_opus_b;
SELECT sqlstate_of('SELECT pg_stat_opus_reset()') AS reset_denied;
RESET ROLE;

-- The request log: the logger runs in this database (opus.database).
SELECT wait_until($$SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'opus_pg logger'$$);
SELECT backend_type, datname = current_database() AS this_db
FROM pg_stat_activity WHERE backend_type = 'opus_pg logger';
SELECT wait_until($$SELECT count(*) = 6 FROM opus_requests
                    WHERE userid IN ('regress_opus_a'::regrole, 'regress_opus_b'::regrole)
                      AND status <> 'running'$$);
-- (the usage of requests that did not complete is as far as they got: not shown)
SELECT r.rolname, q.kind, q.status, q.finish_reason,
       CASE WHEN q.status = 'completed' THEN q.prompt_tokens END AS prompt_tokens,
       CASE WHEN q.status = 'completed' THEN q.completion_tokens END AS completion_tokens,
       (q.params->>'max_tokens')::int AS max_tokens,
       q.submitted_at <= q.started_at AND q.started_at <= q.finished_at AS times_ordered,
       CASE WHEN q.status = 'completed' THEN q.first_token_at > q.started_at END AS has_first_token,
       q.error IS NOT NULL AS has_error
FROM opus_requests q JOIN pg_roles r ON r.oid = q.userid
WHERE q.userid IN ('regress_opus_a'::regrole, 'regress_opus_b'::regrole)
ORDER BY r.rolname COLLATE "C", q.id;
-- Completed rows agree with the usage the callers saw.
SELECT count(*) AS usage_rows_matching
FROM opus_requests q JOIN pg_roles r ON r.oid = q.userid
JOIN stats_usage u ON u.who = r.rolname AND u.prompt_tokens = q.prompt_tokens
                   AND u.completion_tokens = q.completion_tokens
WHERE q.status = 'completed';
-- Row-level security: each plain role sees only its own rows.
SET ROLE regress_opus_b;
SELECT count(*) AS visible, bool_and(userid = 'regress_opus_b'::regrole) AS only_own FROM opus_requests;
SET ROLE regress_opus_a;
SELECT count(*) AS visible, bool_and(userid = 'regress_opus_a'::regrole) AS only_own FROM opus_requests;
RESET ROLE;
-- ... unless they have pg_read_all_stats.
GRANT pg_read_all_stats TO regress_opus_b;
SET ROLE regress_opus_b;
SELECT count(*) >= 6 AS sees_all FROM opus_requests;
RESET ROLE;

-- Turning the log off (a reload setting) stops new rows.
ALTER SYSTEM SET opus.log_requests = off;
SELECT pg_reload_conf();
SELECT pg_sleep(1);   -- the supervisor reloads at once; this session at its next command
SHOW opus.log_requests;
SET ROLE regress_opus_a;
SELECT length(opus_generate('Hello', max_tokens => 2, temperature => 0)) >= 0 AS ran;
RESET ROLE;
SELECT wait_until($$SELECT calls = 3 FROM pg_stat_opus WHERE userid = 'regress_opus_a'::regrole$$);
SELECT pg_sleep(1.5);
SELECT count(*) AS rows_of_a FROM opus_requests WHERE userid = 'regress_opus_a'::regrole;
ALTER SYSTEM RESET opus.log_requests;
SELECT pg_reload_conf();

DROP TABLE stats_usage;
DELETE FROM opus_requests WHERE userid IN ('regress_opus_a'::regrole, 'regress_opus_b'::regrole);
DROP ROLE regress_opus_a;
DROP ROLE regress_opus_b;
