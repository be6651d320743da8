#!/usr/bin/env bash
# bench_jobs.sh - a batch job's throughput against the engine's aggregate
# throughput under concurrent sessions, and whether a shared instruction
# prefix shows up as cached prompt tokens.
#
#   1. pgbench: CLIENTS sessions (default 16) each calling
#      opus_generate(..., max_tokens => TOKENS) for DURATION seconds;
#   2. a job over ROWS rows (default 1000) with TOKENS-token outputs and a
#      window of WINDOW requests (default 16), run with CALL opus_job_run;
#   3. the same job with a shared system message (chat), reporting how many
#      prompt tokens the engine served from its prefix cache.
#
# Throughput is generated tokens per second as the engine counts them
# (opus_engine.tokens_generated before and after), so early stops count the
# same in every mode.  Prints a table with the job/pgbench ratio.
#
# usage: test/bench/bench_jobs.sh [psql connection options...]
#   e.g. test/bench/bench_jobs.sh -h /tmp -p 5432 -d postgres
# Needs opus_pg preloaded with opus.max_requests >= CLIENTS and >= WINDOW,
# and pgbench.  Env: ROWS (1000), TOKENS (32), CLIENTS (16), WINDOW (16),
# DURATION (30).
set -euo pipefail
ROWS=${ROWS:-1000}
TOKENS=${TOKENS:-32}
CLIENTS=${CLIENTS:-16}
WINDOW=${WINDOW:-16}
DURATION=${DURATION:-30}

PSQL=(psql -X -q -At -v ON_ERROR_STOP=1 "$@")
engine_tokens() { "${PSQL[@]}" -c 'SELECT tokens_generated FROM opus_engine'; }
now() { date +%s.%N; }

"${PSQL[@]}" <<EOF
CREATE EXTENSION IF NOT EXISTS opus_pg;
DROP TABLE IF EXISTS bench_src, bench_out, bench_out_prefix;
SELECT opus_job_drop(name) FROM opus_job WHERE name IN ('bench', 'bench_prefix');
CREATE TABLE bench_src (id integer PRIMARY KEY, topic text);
INSERT INTO bench_src SELECT i, 'the number ' || i FROM generate_series(1, $ROWS) AS i;
SELECT opus_generate('warm up', max_tokens => 2) IS NOT NULL;
EOF

# 1. pgbench: CLIENTS concurrent sessions.
script=$(mktemp /tmp/bench_jobs.XXXXXX.sql)
trap 'rm -f "$script"' EXIT
cat >"$script" <<EOF
\set n random(1, $ROWS)
SELECT opus_generate('Write one sentence about the number ' || :n || ':', max_tokens => $TOKENS, temperature => 0);
EOF
t0_tok=$(engine_tokens)
t0=$(now)
pgbench -n -f "$script" -c "$CLIENTS" -j "$CLIENTS" -T "$DURATION" "$@" >/tmp/bench_jobs_pgbench.log 2>&1 || {
	cat /tmp/bench_jobs_pgbench.log >&2
	exit 1
}
t1=$(now)
t1_tok=$(engine_tokens)
pg_tok=$((t1_tok - t0_tok))
pg_sec=$(echo "$t1 - $t0" | bc -l)
pg_tps=$(grep -E '^tps' /tmp/bench_jobs_pgbench.log | head -1 | awk '{print $3}')

# 2. The job.
"${PSQL[@]}" -c "SELECT opus_job_create('bench', 'bench_src', '{id}',
	'Write one sentence about {{topic}}:', 'bench_out',
	options => '{\"max_tokens\": $TOKENS, \"temperature\": 0}', concurrency => $WINDOW)" >/dev/null
t0_tok=$(engine_tokens)
t0=$(now)
"${PSQL[@]}" -c "CALL opus_job_run('bench')"
t1=$(now)
t1_tok=$(engine_tokens)
job_tok=$((t1_tok - t0_tok))
job_sec=$(echo "$t1 - $t0" | bc -l)
job_rows=$("${PSQL[@]}" -c 'SELECT count(*) FROM bench_out')

# 3. The job with a shared instruction prefix (a system message).
system='You are a careful technical writer. For every request, write exactly one clear, factual sentence in plain English. Do not use lists, headings, quotation marks or emoji. Do not repeat the request. Prefer concrete facts over opinions, and keep a neutral tone throughout the sentence.'
"${PSQL[@]}" -c "SELECT opus_job_create('bench_prefix', 'bench_src', '{id}',
	'Write one sentence about {{topic}}.', 'bench_out_prefix',
	options => jsonb_build_object('max_tokens', $TOKENS, 'temperature', 0, 'system', '$system'),
	concurrency => $WINDOW)" >/dev/null
t0_tok=$(engine_tokens)
t0=$(now)
"${PSQL[@]}" -c "CALL opus_job_run('bench_prefix')"
t1=$(now)
t1_tok=$(engine_tokens)
pre_tok=$((t1_tok - t0_tok))
pre_sec=$(echo "$t1 - $t0" | bc -l)
IFS='|' read -r pre_rows pre_prompt pre_cached <<<"$("${PSQL[@]}" -c "
	SELECT r.rows_done, r.prompt_tokens, r.cached_tokens FROM opus_job_run AS r
	JOIN opus_job AS j ON j.id = r.job_id WHERE j.name = 'bench_prefix' ORDER BY r.id DESC LIMIT 1")"

awk -v pt="$pg_tok" -v ps="$pg_sec" -v ptps="$pg_tps" -v c="$CLIENTS" \
	-v jt="$job_tok" -v js="$job_sec" -v jr="$job_rows" -v w="$WINDOW" \
	-v xt="$pre_tok" -v xs="$pre_sec" -v xr="$pre_rows" -v xp="$pre_prompt" -v xc="$pre_cached" \
	-v tokens="$TOKENS" 'BEGIN {
	base = pt / ps;
	printf "max_tokens %d\n", tokens;
	printf "%-36s %8s %9s %9s %10s %7s\n", "mode", "rows", "tokens", "seconds", "tokens/s", "ratio";
	printf "%-36s %8s %9d %9.1f %10.1f %7.2f\n", "pgbench, " c " sessions (" ptps " calls/s)", "-", pt, ps, base, 1;
	printf "%-36s %8d %9d %9.1f %10.1f %7.2f\n", "job, window " w, jr, jt, js, jt / js, (jt / js) / base;
	printf "%-36s %8d %9d %9.1f %10.1f %7.2f\n", "job, window " w ", shared system prefix", xr, xt, xs, xt / xs, (xt / xs) / base;
	printf "shared prefix: %d of %d prompt tokens served from the prefix cache (%.1f%%)\n", xc, xp, xp ? 100 * xc / xp : 0;
}'

"${PSQL[@]}" <<EOF
SELECT opus_job_drop('bench', drop_target => true);
SELECT opus_job_drop('bench_prefix', drop_target => true);
DROP TABLE bench_src;
EOF
