#!/usr/bin/env bash
# bench_jobs.sh - a batch job's throughput against the engine's aggregate
# throughput under concurrent sessions, and whether a shared instruction
# prefix shows up as cached prompt tokens.
#
# Two modes, alternated over ROUNDS rounds so that a machine whose load
# drifts (a shared CI runner) biases neither:
#   pgbench  CLIENTS sessions (default 16) each calling
#            opus_generate(..., max_tokens => TOKENS) for DURATION/ROUNDS s;
#   job      CALL opus_job_run('bench', max_rows => ROWS/ROUNDS): a job over
#            ROWS rows (default 1000) with TOKENS-token outputs and a window
#            of WINDOW requests (default 16); after the last round every row
#            has exactly one result.
# Then the same kind of job with a shared system message (chat) over the
# first PREFIX_ROWS rows, reporting how many prompt tokens the engine served
# from its prefix cache.
#
# Throughput is generated tokens per second as the engine counts them
# (opus_engine.tokens_generated before and after), so early stops count the
# same in every mode.  Prints a table with the job/pgbench ratio, per round
# and in total.
#
# usage: test/bench/bench_jobs.sh [psql connection options...]
#   e.g. test/bench/bench_jobs.sh -h /tmp -p 5432 -d postgres
# Needs opus_pg preloaded with opus.max_requests >= CLIENTS and >= WINDOW,
# and pgbench.  Env: ROWS (1000), TOKENS (32), CLIENTS (16), WINDOW (16),
# DURATION (40, pgbench seconds in all), ROUNDS (4), PREFIX_ROWS (200).
set -euo pipefail
ROWS=${ROWS:-1000}
TOKENS=${TOKENS:-32}
CLIENTS=${CLIENTS:-16}
WINDOW=${WINDOW:-16}
DURATION=${DURATION:-40}
ROUNDS=${ROUNDS:-4}
PREFIX_ROWS=${PREFIX_ROWS:-200}

PSQL=(psql -X -q -At -v ON_ERROR_STOP=1 "$@")
engine_tokens() { "${PSQL[@]}" -c 'SELECT tokens_generated FROM opus_engine'; }
now() { date +%s.%N; }

"${PSQL[@]}" >/dev/null <<EOF
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS opus_pg;
SELECT opus_job_drop(name) FROM opus_job WHERE name IN ('bench', 'bench_prefix');
DROP TABLE IF EXISTS bench_src, bench_out, bench_out_prefix;
CREATE TABLE bench_src (id integer PRIMARY KEY, topic text);
INSERT INTO bench_src SELECT i, 'the number ' || i FROM generate_series(1, $ROWS) AS i;
SELECT opus_generate('warm up', max_tokens => 2) IS NOT NULL;
SELECT opus_job_create('bench', 'bench_src', '{id}', 'Write one sentence about {{topic}}:', 'bench_out',
                       options => '{"max_tokens": $TOKENS, "temperature": 0}', concurrency => $WINDOW) > 0;
EOF

script=$(mktemp /tmp/bench_jobs.XXXXXX.sql)
pglog=$(mktemp /tmp/bench_jobs.XXXXXX.log)
trap 'rm -f "$script" "$pglog"' EXIT
cat >"$script" <<EOF
\set n random(1, $ROWS)
SELECT opus_generate('Write one sentence about the number ' || :n || ':', max_tokens => $TOKENS, temperature => 0);
EOF

# measure CMD...: prints "tokens seconds" for the engine while CMD runs.
measure() {
	local t0_tok t1_tok t0 t1
	t0_tok=$(engine_tokens)
	t0=$(now)
	"$@"
	t1=$(now)
	t1_tok=$(engine_tokens)
	echo "$((t1_tok - t0_tok)) $(echo "$t1 - $t0" | bc -l)"
}
run_pgbench() {
	pgbench -n -f "$script" -c "$CLIENTS" -j "$CLIENTS" -T "$((DURATION / ROUNDS))" "$@" >"$pglog" 2>&1 || {
		cat "$pglog" >&2
		exit 1
	}
}
run_job() {
	"${PSQL[@]}" -c "CALL opus_job_run('bench', max_rows => $(((ROWS + ROUNDS - 1) / ROUNDS)))"
}

rounds=""
for r in $(seq 1 "$ROUNDS"); do
	read -r pt ps <<<"$(measure run_pgbench "$@")"
	read -r jt js <<<"$(measure run_job)"
	rounds+="$r $pt $ps $jt $js"$'\n'
done
"${PSQL[@]}" -c "CALL opus_job_run('bench')"     # nothing left unless a round fell short

IFS='|' read -r job_rows job_ids <<<"$("${PSQL[@]}" -c 'SELECT count(*), count(DISTINCT id) FROM bench_out')"

# The job with a shared instruction prefix (a system message).
system='You are a careful technical writer. For every request, write exactly one clear, factual sentence in plain English. Do not use lists, headings, quotation marks or emoji. Do not repeat the request. Prefer concrete facts over opinions, and keep a neutral tone throughout the sentence.'
"${PSQL[@]}" -c "SELECT opus_job_create('bench_prefix',
	source_query => 'SELECT id, topic FROM bench_src WHERE id <= $PREFIX_ROWS', key_columns => '{id}',
	prompt_template => 'Write one sentence about {{topic}}.', target_table => 'bench_out_prefix',
	options => jsonb_build_object('max_tokens', $TOKENS, 'temperature', 0, 'system', '$system'),
	concurrency => $WINDOW)" >/dev/null
read -r xt xs <<<"$(measure "${PSQL[@]}" -c "CALL opus_job_run('bench_prefix')")"
IFS='|' read -r xr xp xc <<<"$("${PSQL[@]}" -c "
	SELECT r.rows_done, r.prompt_tokens, r.cached_tokens FROM opus_job_run AS r
	JOIN opus_job AS j ON j.id = r.job_id WHERE j.name = 'bench_prefix' ORDER BY r.id DESC LIMIT 1")"

echo "$rounds" | awk -v c="$CLIENTS" -v w="$WINDOW" -v tokens="$TOKENS" -v rows="$job_rows" -v ids="$job_ids" \
	-v xt="$xt" -v xs="$xs" -v xr="$xr" -v xp="$xp" -v xc="$xc" '
NF == 5 {
	n++; PT += $2; PS += $3; JT += $4; JS += $5;
	line[n] = sprintf("round %d: pgbench %6.1f tokens/s, job %6.1f tokens/s, ratio %.2f", $1, $2 / $3, $4 / $5, ($4 / $5) / ($2 / $3));
}
END {
	printf "max_tokens %d, %d pgbench sessions, job window %d\n", tokens, c, w;
	for (i = 1; i <= n; i++) print line[i];
	printf "%-38s %6s %9s %9s %10s %7s\n", "mode (all rounds)", "rows", "tokens", "seconds", "tokens/s", "ratio";
	printf "%-38s %6s %9d %9.1f %10.1f %7.2f\n", "pgbench, " c " sessions", "-", PT, PS, PT / PS, 1;
	printf "%-38s %6d %9d %9.1f %10.1f %7.2f\n", "job, window " w, rows, JT, JS, JT / JS, (JT / JS) / (PT / PS);
	printf "%-38s %6d %9d %9.1f %10.1f %7s\n", "job, shared system prefix", xr, xt, xs, xt / xs, "-";
	printf "job results: %d rows, %d distinct keys\n", rows, ids;
	printf "shared prefix: %d of %d prompt tokens served from the prefix cache (%.1f%%)\n", xc, xp, xp ? 100 * xc / xp : 0;
}'

"${PSQL[@]}" >/dev/null <<EOF
SET client_min_messages = warning;
SELECT opus_job_drop('bench', drop_target => true);
SELECT opus_job_drop('bench_prefix', drop_target => true);
DROP TABLE bench_src;
EOF
