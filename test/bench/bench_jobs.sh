#!/usr/bin/env bash
# bench_jobs.sh - a batch job's throughput against the engine's aggregate
# throughput under concurrent sessions, and whether a shared instruction
# prefix shows up as cached prompt tokens.
#
#   1. pgbench: CLIENTS sessions (default 16) each calling
#      opus_generate(..., max_tokens => TOKENS) for DURATION seconds, once
#      before and once after the job; the baseline is the mean of the two,
#      so a machine whose load drifts (a shared CI runner) biases neither;
#   2. a job over ROWS rows (default 1000) with TOKENS-token outputs and a
#      window of WINDOW requests (default 16), run with CALL opus_job_run;
#   3. the same job with a shared system message (chat) over the first
#      PREFIX_ROWS rows, reporting how many prompt tokens the engine served
#      from its prefix cache.
#
# Throughput is generated tokens per second as the engine counts them
# (opus_engine.tokens_generated before and after), so early stops count the
# same in every mode.  Prints a table with the job/pgbench ratio.
#
# usage: test/bench/bench_jobs.sh [psql connection options...]
#   e.g. test/bench/bench_jobs.sh -h /tmp -p 5432 -d postgres
# Needs opus_pg preloaded with opus.max_requests >= CLIENTS and >= WINDOW,
# and pgbench.  Env: ROWS (1000), TOKENS (32), CLIENTS (16), WINDOW (16),
# DURATION (30), PREFIX_ROWS (ROWS).
set -euo pipefail
ROWS=${ROWS:-1000}
TOKENS=${TOKENS:-32}
CLIENTS=${CLIENTS:-16}
WINDOW=${WINDOW:-16}
DURATION=${DURATION:-30}
PREFIX_ROWS=${PREFIX_ROWS:-$ROWS}

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

# 1. pgbench: CLIENTS concurrent sessions (run before and after the job).
script=$(mktemp /tmp/bench_jobs.XXXXXX.sql)
pglog=$(mktemp /tmp/bench_jobs.XXXXXX.log)
trap 'rm -f "$script" "$pglog"' EXIT
cat >"$script" <<EOF
\set n random(1, $ROWS)
SELECT opus_generate('Write one sentence about the number ' || :n || ':', max_tokens => $TOKENS, temperature => 0);
EOF
run_pgbench() {
	local t0_tok t1_tok t0 t1
	t0_tok=$(engine_tokens)
	t0=$(now)
	pgbench -n -f "$script" -c "$CLIENTS" -j "$CLIENTS" -T "$DURATION" "$@" >"$pglog" 2>&1 || {
		cat "$pglog" >&2
		exit 1
	}
	t1=$(now)
	t1_tok=$(engine_tokens)
	echo "$((t1_tok - t0_tok)) $(echo "$t1 - $t0" | bc -l) $(grep -E '^tps' "$pglog" | head -1 | awk '{print $3}')"
}
read -r pg_tok pg_sec pg_tps <<<"$(run_pgbench "$@")"

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
read -r pg2_tok pg2_sec pg2_tps <<<"$(run_pgbench "$@")"

# 3. The job with a shared instruction prefix (a system message).
system='You are a careful technical writer. For every request, write exactly one clear, factual sentence in plain English. Do not use lists, headings, quotation marks or emoji. Do not repeat the request. Prefer concrete facts over opinions, and keep a neutral tone throughout the sentence.'
"${PSQL[@]}" -c "SELECT opus_job_create('bench_prefix',
	source_query => 'SELECT id, topic FROM bench_src WHERE id <= $PREFIX_ROWS', key_columns => '{id}',
	prompt_template => 
	'Write one sentence about {{topic}}.', target_table => 'bench_out_prefix',
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
	-v pt2="$pg2_tok" -v ps2="$pg2_sec" -v ptps2="$pg2_tps" \
	-v jt="$job_tok" -v js="$job_sec" -v jr="$job_rows" -v w="$WINDOW" \
	-v xt="$pre_tok" -v xs="$pre_sec" -v xr="$pre_rows" -v xp="$pre_prompt" -v xc="$pre_cached" \
	-v tokens="$TOKENS" 'BEGIN {
	base = (pt / ps + pt2 / ps2) / 2;
	printf "max_tokens %d; baseline = mean of the two pgbench runs (%.1f tokens/s)\n", tokens, base;
	printf "%-44s %6s %9s %9s %10s %7s\n", "mode", "rows", "tokens", "seconds", "tokens/s", "ratio";
	printf "%-44s %6s %9d %9.1f %10.1f %7.2f\n", sprintf("pgbench, %d sessions, before (%.2f calls/s)", c, ptps), "-", pt, ps, pt / ps, (pt / ps) / base;
	printf "%-44s %6d %9d %9.1f %10.1f %7.2f\n", "job, window " w, jr, jt, js, jt / js, (jt / js) / base;
	printf "%-44s %6s %9d %9.1f %10.1f %7.2f\n", sprintf("pgbench, %d sessions, after (%.2f calls/s)", c, ptps2), "-", pt2, ps2, pt2 / ps2, (pt2 / ps2) / base;
	printf "%-44s %6d %9d %9.1f %10.1f %7.2f\n", "job, window " w ", shared system prefix", xr, xt, xs, xt / xs, (xt / xs) / base;
	printf "shared prefix: %d of %d prompt tokens served from the prefix cache (%.1f%%)\n", xc, xp, xp ? 100 * xc / xp : 0;
}'

"${PSQL[@]}" <<EOF
SELECT opus_job_drop('bench', drop_target => true);
SELECT opus_job_drop('bench_prefix', drop_target => true);
DROP TABLE bench_src;
EOF
