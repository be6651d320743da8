#!/usr/bin/env bash
# bench_victim.sh - what one user's attack costs another: a victim role's
# small greedy call (opus_completion, 8 tokens, temperature 0) timed alone and
# under each attack of issue 14, one attack at a time, on a fresh server with
# the default settings (64 slots, 2 threads):
#
#   window      one set-based statement with a huge window:
#               opus_generate_many(200 prompts, max_tokens 300, "window" 10000)
#   async_huge  as many async requests with max_tokens 2800 as the attacker's
#               share allows (it tries 48)
#   long_prompt an attacker looping on ~2,600-token prompts (each a fresh
#               prefix, so the prefix cache does not help)
#   job_1000    a batch job with concurrency 1000 over 2,000 rows
#   unread      60 one-token async results the attacker never reads (each
#               finished before the next is submitted); the victim's own
#               opus_submit is also tried
#   sigstop     the engine stopped with SIGSTOP while the victim calls (the
#               supervisor kills and restarts it after
#               opus.engine_liveness_timeout)
#
# For each: the victim's CALLS calls one after the other, end-to-end latency
# p50 / p99 (nearest rank), the engine's queue time (p50, max), time to
# first token (p50) and time per later token (p50 and max of the calls'
# (total - ttft) / (tokens - 1)) from the completion's timings, and its
# errors by SQLSTATE, against the victim
# alone in the same run (before the attacks, and again after them, to show
# the noise); load average before and after.  Timings on a busy
# machine are noisy: compare ratios within a run.
#
# usage: [PG_CONFIG=...] [CALLS=8] [ATTACKS="window async_huge ..."]
#        [OPUS_ENGINE_PATH=build/opus_engine] test/bench/bench_victim.sh
# (OPUS_ENGINE_PATH: another engine binary than the installed one, e.g. to
# compare two builds in alternate runs)
# Runs a throwaway cluster (as postgres when run as root) from PG_CONFIG's
# installation, which must have opus_pg installed (make install).
set -euo pipefail
cd "$(dirname "$0")/../.."
PG_CONFIG=${PG_CONFIG:-pg_config}
bindir=$("$PG_CONFIG" --bindir)
CALLS=${CALLS:-8}
ATTACKS=${ATTACKS:-"window async_huge long_prompt job_1000 unread sigstop"}
PORT=${PORT:-55481}
dir=$(mktemp -d /tmp/opus_bv.XXXXXX)
chmod 755 "$dir"
as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$1"; else bash -c "$1"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$dir"
bg_pids=()
cleanup() {
	for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	as_pg "'$bindir/pg_ctl' -D '$dir/data' -m immediate stop" >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT
as_pg "'$bindir/initdb' -D '$dir/data' -A trust" >/dev/null
cat >> "$dir/data/postgresql.conf" <<CONF
port = $PORT
unix_socket_directories = '$dir'
shared_preload_libraries = 'opus_pg'
opus.threads = 2
max_connections = 100
CONF
if [ -n "${OPUS_ENGINE_PATH:-}" ]; then
	echo "opus.engine_path = '$(realpath "$OPUS_ENGINE_PATH")'" >> "$dir/data/postgresql.conf"
fi
as_pg "'$bindir/pg_ctl' -D '$dir/data' -l '$dir/log' -w start" >/dev/null
psql=("$bindir/psql" -XAtq -h "$dir" -p "$PORT" -U postgres -d postgres)
"${psql[@]}" >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION opus_pg;
CREATE ROLE attacker;
CREATE ROLE victim;
GRANT CREATE ON SCHEMA public TO attacker;
CREATE TABLE job_src (id integer PRIMARY KEY, topic text);
INSERT INTO job_src SELECT i, 'the number ' || i FROM generate_series(1, 2000) AS i;
ALTER TABLE job_src OWNER TO attacker;
-- The victim's calls: CALLS small greedy calls, one after the other; each
-- row is its latency, the engine's queue time and time to first token (the
-- completion's timings), and 'ok' or its SQLSTATE.
CREATE FUNCTION victim_calls(n integer)
RETURNS TABLE (ms double precision, queue_ms double precision, ttft_ms double precision,
               itl_ms double precision, state text)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz;
    r jsonb;
BEGIN
    FOR i IN 1 .. n LOOP
        t0 := clock_timestamp();
        queue_ms := NULL;
        ttft_ms := NULL;
        itl_ms := NULL;
        BEGIN
            r := opus_completion('The capital of France is', max_tokens => 8, temperature => 0);
            queue_ms := (r->'timings'->>'queue_ms')::double precision;
            ttft_ms := (r->'timings'->>'ttft_ms')::double precision;
            IF (r->'usage'->>'completion_tokens')::integer > 1 THEN
                itl_ms := ((r->'timings'->>'engine_ms')::double precision - ttft_ms)
                          / ((r->'usage'->>'completion_tokens')::integer - 1);
            END IF;
            state := 'ok';
        EXCEPTION WHEN OTHERS THEN
            state := SQLSTATE;
        END;
        ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
        RETURN NEXT;
    END LOOP;
END $$;
SQL
"${psql[@]}" -c "SELECT opus_generate('warm up', max_tokens => 2) IS NOT NULL" >/dev/null

q() { local s=$1; shift; "${psql[@]}" -c "$s" "$@"; }
busy() { q "SELECT busy_slots FROM opus_engine"; }
wait_until() {	# $1 = SQL returning t/f, $2 = seconds
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		[ "$(q "$1" 2>/dev/null || true)" = t ] && return 0
		sleep 0.1
	done
	echo "bench_victim: timed out waiting for: $1" >&2
	return 1
}
# Run SQL as the attacker in the background (application_name attack).
attack_bg() {
	PGAPPNAME=attack "$bindir/psql" -XAtq -h "$dir" -p "$PORT" -U postgres -d postgres \
		-c "SET ROLE attacker" -c "$1" >"$dir/attack.out" 2>&1 &
	bg_pids+=($!)
}
stop_attack() {
	q "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE application_name = 'attack'" >/dev/null
	for p in "${bg_pids[@]}"; do wait "$p" 2>/dev/null || true; done
	bg_pids=()
	q "SELECT count(opus_cancel(id)) FROM opus_async" >/dev/null
	wait_until "SELECT busy_slots = 0 FROM opus_engine" 300
}
# Measure the victim: prints "p50 p99 queue_p50 queue_max ttft_p50 itl_p50
# itl_max errors" (errors: SQLSTATE:count,...).
victim() {
	"${psql[@]}" -c "SET ROLE victim" -c "
		WITH c AS (SELECT * FROM victim_calls($CALLS)),
		o AS (SELECT ms, row_number() OVER (ORDER BY ms) AS r, count(*) OVER () AS n FROM c)
		SELECT round((SELECT ms FROM o WHERE r = greatest(1, ceil(0.50 * n)))::numeric, 0) || ' ' ||
		       round((SELECT ms FROM o WHERE r = greatest(1, ceil(0.99 * n)))::numeric, 0) || ' ' ||
		       coalesce(round((SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY queue_ms) FROM c)::numeric, 0)::text, '-') || ' ' ||
		       coalesce(round((SELECT max(queue_ms) FROM c)::numeric, 0)::text, '-') || ' ' ||
		       coalesce(round((SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY ttft_ms) FROM c)::numeric, 0)::text, '-') || ' ' ||
		       coalesce(round((SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY itl_ms) FROM c)::numeric, 0)::text, '-') || ' ' ||
		       coalesce(round((SELECT max(itl_ms) FROM c)::numeric, 0)::text, '-') || ' ' ||
		       coalesce((SELECT string_agg(state || ':' || k, ',') FROM
		                 (SELECT state, count(*) AS k FROM c WHERE state <> 'ok' GROUP BY state) AS e), '-')"
}

declare -A res note
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
res[alone]=$(victim)

for a in $ATTACKS; do
	note[$a]=""
	case $a in
	window)
		attack_bg "SELECT count(*) FROM opus_generate_many(array_fill('Count: 1, 2, 3,'::text, ARRAY[200]), max_tokens => 300, temperature => 0, \"window\" => 10000)"
		wait_until "SELECT busy_slots >= 10 FROM opus_engine" 60
		note[$a]="attacker holds $(busy) slots"
		res[$a]=$(victim)
		stop_attack
		;;
	async_huge)
		n=$(q "SET ROLE attacker" -c "
			DO \$\$ BEGIN
			    FOR i IN 1 .. 48 LOOP
			        PERFORM opus_submit('Count from 1 to 10000, separated by commas: 1, 2, 3,', max_tokens => 2800, temperature => 0);
			    END LOOP;
			EXCEPTION WHEN insufficient_resources THEN NULL;
			END \$\$" -c "SELECT count(*) FROM opus_async")
		note[$a]="$n requests of 2800 tokens accepted"
		res[$a]=$(victim)
		stop_attack
		;;
	long_prompt)
		attack_bg "DO \$\$ BEGIN
			    FOR i IN 1 .. 1000 LOOP
			        PERFORM opus_generate(i || ' ' || repeat('the quick brown fox jumps over the lazy dog ', 260), max_tokens => 1);
			    END LOOP;
			END \$\$"
		wait_until "SELECT EXISTS (SELECT FROM pg_stat_opus_activity WHERE prompt_tokens > 2000)" 60 || true
		note[$a]="$(q "SELECT max(prompt_tokens) FROM pg_stat_opus_activity") prompt tokens"
		res[$a]=$(victim)
		stop_attack
		;;
	job_1000)
		q "SET ROLE attacker" -c "SELECT opus_job_create('flood', 'job_src', '{id}', 'Write one sentence about {{topic}}:', 'flood_out', options => '{\"max_tokens\": 32, \"temperature\": 0}', concurrency => 1000)" >/dev/null
		attack_bg "CALL opus_job_run('flood')"
		wait_until "SELECT busy_slots >= 10 FROM opus_engine" 60
		note[$a]="the job holds $(busy) slots"
		res[$a]=$(victim)
		stop_attack
		;;
	unread)
		n=$(q "SET ROLE attacker" -c "
			DO \$\$ DECLARE rid bigint; BEGIN
			    FOR i IN 1 .. 60 LOOP
			        rid := opus_submit('Hi', max_tokens => 1, temperature => 0);
			        PERFORM opus_wait(ARRAY[rid]);
			    END LOOP;
			EXCEPTION WHEN insufficient_resources THEN NULL;
			END \$\$" -c "SELECT count(*) FROM opus_async")
		sub=$(q "SET ROLE victim" -c "SELECT opus_result(opus_submit('Hi', max_tokens => 1)) IS NOT NULL" 2>&1 | tail -1 || true)
		note[$a]="$n unread results, $(busy) slots held; victim opus_submit: $sub"
		res[$a]=$(victim)
		stop_attack
		;;
	sigstop)
		epid=$(q "SELECT engine_pid FROM opus_engine")
		kill -STOP "$epid"
		res[$a]=$(victim)
		kill -CONT "$epid" 2>/dev/null || true
		wait_until "SELECT state = 'ready' FROM opus_engine" 120
		note[$a]="engine restarts: $(q "SELECT restarts FROM opus_engine")"
		;;
	*)
		echo "bench_victim: unknown attack $a" >&2
		exit 2
		;;
	esac
done
res[alone_end]=$(victim)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

row() {	# $1 = label, $2 = result line, $3 = note
	local p50 p99 q50 qmax t50 i50 imax err ratio
	read -r p50 p99 q50 qmax t50 i50 imax err <<<"$2"
	ratio=$(awk -v a="$p50" -v b="$a50" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
	printf '| %-12s | %8s | %8s | %8s | %9s | %9s | %8s | %7s | %7s | %-9s | %s |\n' \
		"$1" "$p50" "$p99" "$ratio" "$q50" "$qmax" "$t50" "$i50" "$imax" "$err" "$3"
}
read -r a50 _ <<<"${res[alone]}"
echo
echo "victim: opus_completion 8 tokens greedy, $CALLS calls per row; load average before: $load_before, after: $load_after"
printf '| %-12s | %8s | %8s | %8s | %9s | %9s | %8s | %7s | %7s | %-9s | %s |\n' \
	attack "p50 ms" "p99 ms" "p50 x" "queue p50" "queue max" "ttft p50" "tpot p50" "tpot max" errors "attack state"
echo '|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|'
row alone "${res[alone]}" ""
for a in $ATTACKS; do
	row "$a" "${res[$a]}" "${note[$a]}"
done
row "alone again" "${res[alone_end]}" "after the attacks"
