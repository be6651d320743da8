#!/usr/bin/env bash
# sql_overhead.sh - the cost of the SQL path around the engine: for N calls
# (default 20) of the same greedy request, the time of the SQL call minus the
# engine's own time for that request (DONE frame's total_ms, reported as
# timings.engine_ms by opus_completion), and the median of those overheads.
#
# The call is timed inside the server with clock_timestamp() around
# `SELECT opus_completion(...) INTO c` in PL/pgSQL, so the figure covers the
# function call, argument checks, slot claim, supervisor relay in both
# directions, the engine's tokenization and framing, the wake-up of the
# backend and building the result - everything except the engine's
# generation itself (and the client's network round trip, which is not
# opus_pg's).  It also prints the client-side view: psql \timing of each
# SELECT opus_generate minus the engine time of that same request (read
# back with opus_last_request()).
#
# usage: test/bench/sql_overhead.sh [psql connection options...]
#   e.g. test/bench/sql_overhead.sh -h /tmp -p 5432 -d postgres
# Env: N (calls, default 20), MAX_TOKENS (default 16), PROMPT.
set -euo pipefail
N=${N:-20}
MAX_TOKENS=${MAX_TOKENS:-16}
PROMPT=${PROMPT:-The capital of France is}

psql -X -q -v ON_ERROR_STOP=1 "$@" <<EOF
CREATE EXTENSION IF NOT EXISTS opus_pg;
CREATE TEMP TABLE overhead(i int, sql_ms float8, engine_ms float8, slot_ms float8);
DO \$\$
DECLARE
    t0 timestamptz;
    t1 timestamptz;
    c jsonb;
BEGIN
    -- warm up (engine loaded, caches hot)
    PERFORM opus_completion('$PROMPT', max_tokens => $MAX_TOKENS, temperature => 0);
    FOR i IN 1..$N LOOP
        t0 := clock_timestamp();
        SELECT opus_completion('$PROMPT', max_tokens => $MAX_TOKENS, temperature => 0) INTO c;
        t1 := clock_timestamp();
        INSERT INTO overhead VALUES (i,
            extract(epoch FROM t1 - t0) * 1000,
            (c->'timings'->>'engine_ms')::float8,
            (c->'timings'->>'total_ms')::float8);
    END LOOP;
END \$\$;
\echo 'server-side: SQL call time vs engine time (ms), N calls'
SELECT count(*) AS n,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY sql_ms)::numeric, 3) AS median_sql_ms,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY engine_ms)::numeric, 3) AS median_engine_ms,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY sql_ms - engine_ms)::numeric, 3) AS median_overhead_ms,
       round(min(sql_ms - engine_ms)::numeric, 3) AS min_overhead_ms,
       round(max(sql_ms - engine_ms)::numeric, 3) AS max_overhead_ms,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY slot_ms - engine_ms)::numeric, 3) AS median_slot_overhead_ms
FROM overhead;
EOF

# Client side: psql \timing of each SELECT opus_generate (includes the
# client round trip and psql), paired with the engine's time for that same
# request from opus_last_request().
script='\timing on'$'\n'
for i in $(seq 0 "$N"); do
	script+="SELECT opus_generate('$PROMPT', max_tokens => $MAX_TOKENS, temperature => 0) \\g /dev/null"$'\n'
	script+="SELECT 'ENGINE ' || engine_ms FROM opus_last_request();"$'\n'
done
echo "$script" | psql -X -q -At "$@" |
	awk '/^Time: / { last = $2; next }
	     /^ENGINE / { k++; if (k > 1) printf "%.3f %.3f\n", last - $2, last }' |
	sort -n | awk '
	{ d[NR] = $1; t[NR] = $2; sum_t += $2 }
	END {
		m = NR;
		md = (m % 2) ? d[(m + 1) / 2] : (d[m / 2] + d[m / 2 + 1]) / 2;
		printf "client-side: %d calls of SELECT opus_generate (mean psql time %.3f ms): median (psql time - engine time of the same request) %.3f ms, min %.3f, max %.3f\n", m, sum_t / m, md, d[1], d[m];
	}'
