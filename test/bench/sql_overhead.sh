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
# opus_pg's).  It also prints the client-side view (psql \timing of
# SELECT opus_generate minus the engine time of an identical request).
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

# Client side: psql \timing of SELECT opus_generate (includes the client round trip).
sql=""
for i in $(seq 1 "$N"); do
	sql+="SELECT opus_generate('$PROMPT', max_tokens => $MAX_TOKENS, temperature => 0);"$'\n'
done
times=$( (echo '\timing on'; echo "SELECT opus_generate('$PROMPT', max_tokens => $MAX_TOKENS, temperature => 0);"; echo "$sql") |
	psql -X -q -At "$@" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -n "$N")
eng=$(psql -X -At "$@" -c "SELECT (opus_completion('$PROMPT', max_tokens => $MAX_TOKENS, temperature => 0)->'timings'->>'engine_ms')")
echo "$times" | sort -n | awk -v eng="$eng" -v n="$N" '
	{ t[NR] = $1 }
	END {
		m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2;
		printf "client-side: median psql time of SELECT opus_generate %.3f ms over %d calls; engine time of the same request %.3f ms; difference %.3f ms\n", m, NR, eng, m - eng;
	}'
