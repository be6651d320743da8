#!/usr/bin/env bash
# bench_reqlog.sh - what the request log costs a caller: the time of a
# 16-token greedy opus_generate with opus.log_requests on and off.
#
# The calls are timed inside the server (clock_timestamp() around each
# SELECT in PL/pgSQL, so no client noise), in ROUNDS rounds of N calls with
# the log on then N with it off (interleaved, so drift in machine load hits
# both alike).  It prints, per mode, the median and mean call time and the
# median of (call time - the engine's own time for that request), and the
# overhead of the log as a ratio of the medians.  The log's records must
# really have been produced: the script shows pg_stat_opus_engine's log
# counters moved by two records (START, FINISH) per call made with it on.
#
# Needs a superuser connection (ALTER SYSTEM + pg_reload_conf toggle the
# setting; it is reset at the end) to a server running opus_pg.
#
# usage: test/bench/bench_reqlog.sh [psql connection options...]
#   e.g. test/bench/bench_reqlog.sh -h /tmp -p 5432 -d postgres
# Env: ROUNDS (default 24), N (calls per round and mode, default 5),
#      MAX_TOKENS (default 16), PROMPT.
set -euo pipefail
ROUNDS=${ROUNDS:-24}
N=${N:-5}
MAX_TOKENS=${MAX_TOKENS:-16}
PROMPT=${PROMPT:-The capital of France is}

run_block() {
	local mode=$1 round=$2
	cat <<EOF
ALTER SYSTEM SET opus.log_requests = $mode;
SELECT pg_reload_conf() \\g /dev/null
SELECT pg_sleep(0.2) \\g /dev/null
DO \$\$
DECLARE
    t0 timestamptz;
    t1 timestamptz;
    c jsonb;
BEGIN
    FOR i IN 1..$N LOOP
        t0 := clock_timestamp();
        SELECT opus_completion('$PROMPT', max_tokens => $MAX_TOKENS, temperature => 0) INTO c;
        t1 := clock_timestamp();
        INSERT INTO reqlog_bench VALUES ('$mode', $round, i,
            extract(epoch FROM t1 - t0) * 1000, (c->'timings'->>'engine_ms')::float8);
    END LOOP;
END \$\$;
EOF
}

{
	cat <<EOF
CREATE EXTENSION IF NOT EXISTS opus_pg;
CREATE TEMP TABLE reqlog_bench(mode text, round int, i int, ms float8, engine_ms float8);
-- warm up
SELECT opus_generate('$PROMPT', max_tokens => $MAX_TOKENS, temperature => 0) \\g /dev/null
CREATE TEMP TABLE reqlog_counters AS
    SELECT log_written + log_dropped + log_pending AS records FROM pg_stat_opus_engine;
-- CPU time (utime + stime, clock ticks) of the logger process
CREATE FUNCTION pg_temp.logger_cpu_ticks() RETURNS bigint LANGUAGE sql AS \$f\$
    SELECT (f[12])::bigint + (f[13])::bigint
    FROM pg_stat_activity a,
         LATERAL regexp_split_to_array(
             split_part(pg_read_file('/proc/' || a.pid || '/stat'), ') ', 2), ' ') f
    WHERE a.backend_type = 'opus_pg logger'
\$f\$;
CREATE TEMP TABLE reqlog_cpu AS SELECT pg_temp.logger_cpu_ticks() AS ticks;
EOF
	for r in $(seq 1 "$ROUNDS"); do
		run_block on "$r"
		run_block off "$r"
	done
	cat <<EOF
ALTER SYSTEM RESET opus.log_requests;
SELECT pg_reload_conf() \\g /dev/null
SELECT pg_sleep(0.3) \\g /dev/null
\\echo 'opus_generate($MAX_TOKENS tokens, greedy), timed in the server, ms:'
SELECT mode, count(*) AS calls,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3) AS median_ms,
       round(avg(ms)::numeric, 3) AS mean_ms,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms - engine_ms)::numeric, 3) AS median_outside_engine_ms
FROM reqlog_bench GROUP BY mode ORDER BY mode DESC;
\\echo 'log on vs off:'
WITH m AS (
    SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE mode = 'on') AS on_ms,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE mode = 'off') AS off_ms,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY ms - engine_ms) FILTER (WHERE mode = 'on') AS on_out,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY ms - engine_ms) FILTER (WHERE mode = 'off') AS off_out
    FROM reqlog_bench)
SELECT round((on_ms / off_ms)::numeric, 4) AS ratio_of_medians,
       round((100 * (on_ms - off_ms) / off_ms)::numeric, 2) AS overhead_pct,
       round((on_out - off_out)::numeric, 3) AS outside_engine_delta_ms,
       round((100 * (on_out - off_out) / off_ms)::numeric, 2) AS outside_engine_delta_pct
FROM m;
\\echo 'paired by round (each on-block against the off-block right after it):'
WITH r AS (
    SELECT round,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE mode = 'on') AS on_ms,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE mode = 'off') AS off_ms
    FROM reqlog_bench GROUP BY round)
SELECT count(*) AS rounds,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY 100 * (on_ms - off_ms) / off_ms)::numeric, 2) AS median_round_overhead_pct,
       round(min(100 * (on_ms - off_ms) / off_ms)::numeric, 2) AS min_pct,
       round(max(100 * (on_ms - off_ms) / off_ms)::numeric, 2) AS max_pct
FROM r;
\\echo 'CPU the logger process used (writes happen there, not in the caller):'
SELECT (SELECT count(*) FROM reqlog_bench WHERE mode = 'on') AS logged_calls,
       (pg_temp.logger_cpu_ticks() - c.ticks) * 1000 / $(getconf CLK_TCK) AS logger_cpu_ms,
       round(((pg_temp.logger_cpu_ticks() - c.ticks) * 1000.0 / $(getconf CLK_TCK)
              / (SELECT count(*) FROM reqlog_bench WHERE mode = 'on'))::numeric, 3) AS cpu_ms_per_request
FROM reqlog_cpu c;
\\echo 'log records produced (a START and a FINISH per call with the log on; none with it off):'
SELECT e.log_written + e.log_dropped + e.log_pending - c.records AS records,
       2 * (SELECT count(*) FROM reqlog_bench WHERE mode = 'on') AS expected,
       e.log_dropped AS dropped_total
FROM pg_stat_opus_engine e, reqlog_counters c;
EOF
} | psql -X -q -v ON_ERROR_STOP=1 "$@"
