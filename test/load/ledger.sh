#!/usr/bin/env bash
# ledger.sh - load with a ledger, and faults under load (too long for CI).
#
# Starts a temporary PostgreSQL 15 cluster with opus_pg preloaded (the
# installed extension, engine and default model: run `make install` first),
# then:
#
#   phase 1  pgbench, CLIENTS clients for DURATION seconds, custom script: a
#            mix of short (4 tokens) and long (64 tokens) generations and
#            chats, 10% of calls under a statement_timeout they cannot meet
#            (cancelled), and more clients than opus.max_requests slots (so
#            some calls are rejected with 53000).  Every call goes through a
#            PL/pgSQL wrapper, ledger_call(), that catches the expected
#            errors by SQLSTATE and records one outcome row per call, so no
#            client aborts (pgbench 15 has no --continue-on-error; its
#            --max-tries only retries serialization failures and deadlocks).
#            The engine is kill -9'd at 1/3 and 2/3 of the run.
#   ledger   counts from the clients (outcome rows), pg_stat_opus and the
#            request log (opus_requests) must balance:
#              submitted = completed + failed + cancelled + rejected
#            no request left queued or running, every slot and KV block
#            free, engine memory (pg_stat_opus_engine.memory_rss, sampled
#            every 2 s) flat.
#   phase 2  (BACKEND_KILL=1) SIGKILL of one backend waiting in
#            opus_generate while 8 other clients generate: reports what
#            PostgreSQL does (for any backend killed by SIGKILL the
#            postmaster terminates every other backend and reinitialises
#            shared memory, with crash recovery; this is PostgreSQL's own
#            rule, not something an extension can change), and whether
#            opus_pg comes back: engine ready, slots free, no log row left
#            'running'.
#
# TENANTS=2 splits the clients between two roles (ledger_client and
# ledger_client2, equal weights) and the ledger must balance for each role
# on its own (pg_stat_opus and opus_requests are per role); it also prints
# each role's share of the completed calls and tokens against its fair
# share (50%).
#
# Environment: DURATION (s, default 180), CLIENTS (32), TENANTS (1), MAX_REQUESTS
# (opus.max_requests, default 16), ENGINE_KILLS (2), BACKEND_KILL (1),
# PORT (5488), PG_CONFIG, KEEP=1 keeps the cluster directory.
# Run as root, it runs itself as the postgres user.  Exit status: 0 when the
# ledger balances and nothing is left behind, 1 otherwise.
set -uo pipefail

if [ "$(id -u)" = 0 ]; then
	tmp=$(mktemp /tmp/opus_ledger_XXXXXX.sh)
	cp "$0" "$tmp"
	chmod 755 "$tmp"
	chown postgres "$tmp"
	rc=0
	runuser -u postgres -- env DURATION="${DURATION:-}" CLIENTS="${CLIENTS:-}" \
		MAX_REQUESTS="${MAX_REQUESTS:-}" ENGINE_KILLS="${ENGINE_KILLS:-}" \
		BACKEND_KILL="${BACKEND_KILL:-}" PORT="${PORT:-}" KEEP="${KEEP:-}" TENANTS="${TENANTS:-}" \
		PG_CONFIG="${PG_CONFIG:-}" bash "$tmp" || rc=$?
	rm -f "$tmp"
	exit $rc
fi

DURATION=${DURATION:-180}
CLIENTS=${CLIENTS:-32}
TENANTS=${TENANTS:-1}
ROLES=(ledger_client)
[ "$TENANTS" = 2 ] && ROLES=(ledger_client ledger_client2)
MAX_REQUESTS=${MAX_REQUESTS:-16}
ENGINE_KILLS=${ENGINE_KILLS:-2}
BACKEND_KILL=${BACKEND_KILL:-1}
PORT=${PORT:-5488}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
[ -x "$PG_CONFIG" ] || PG_CONFIG=pg_config
BIN=$("$PG_CONFIG" --bindir)
DIR=$(mktemp -d /tmp/opus_ledger.XXXXXX)
DATA=$DIR/data
LOG=$DIR/postmaster.log
export PGHOST=$DIR PGPORT=$PORT PGDATABASE=ledger
PSQL=("$BIN/psql" -X -q -v ON_ERROR_STOP=1 -At)
ok=1
sampler=

cleanup()
{
	[ -n "$sampler" ] && kill "$sampler" 2>/dev/null
	"$BIN/pg_ctl" -D "$DATA" -m immediate stop >/dev/null 2>&1
	if [ -n "${KEEP:-}" ]; then
		echo "ledger: kept $DIR"
	else
		rm -rf "$DIR"
	fi
}
trap cleanup EXIT

say() { printf '\n== %s\n' "$*"; }
fail() { echo "LEDGER FAILURE: $*"; ok=0; }
q() { "${PSQL[@]}" -c "$1"; }

say "cluster in $DIR (port $PORT): opus.max_requests = $MAX_REQUESTS, $CLIENTS clients, $DURATION s"
"$BIN/initdb" -D "$DATA" -A trust --no-locale -E UTF8 >/dev/null || exit 1
cat >>"$DATA/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$DIR'
max_connections = $((CLIENTS + 20))
shared_preload_libraries = 'opus_pg'
opus.max_requests = $MAX_REQUESTS
opus.threads = 2
opus.database = 'ledger'
opus.log_flush_interval = '200ms'
restart_after_crash = on
log_line_prefix = '%m [%p] '
EOF
"$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w start >/dev/null || { cat "$LOG"; exit 1; }
"$BIN/createdb" ledger || exit 1

q "CREATE EXTENSION opus_pg" || exit 1
"${PSQL[@]}" <<'EOF' || exit 1
CREATE ROLE ledger_client LOGIN;
CREATE ROLE ledger_client2 LOGIN;
CREATE TABLE outcome (
    id bigserial PRIMARY KEY,
    tenant name DEFAULT current_user,
    client int,
    kind text,
    outcome text,      -- completed | cancelled | rejected | failed | other
    sqlstate text,
    message text,
    started_at timestamptz,
    finished_at timestamptz);
GRANT INSERT, SELECT ON outcome TO ledger_client, ledger_client2;
GRANT USAGE ON SEQUENCE outcome_id_seq TO ledger_client, ledger_client2;
CREATE TABLE memory (at timestamptz DEFAULT clock_timestamp(), engine_pid int, rss bigint,
                     busy_slots int, kv_used bigint, running int, queue_depth int);

-- One call of the mix; every expected error is caught and recorded, so a
-- pgbench client never aborts.  r (1..100): <= 10 a long call under a
-- statement_timeout it cannot meet (set by the pgbench script), <= 40 a
-- long generation, <= 50 a chat, else a short generation.
CREATE FUNCTION ledger_call(client int, r int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    k text := CASE WHEN r <= 10 THEN 'timeout' WHEN r <= 40 THEN 'long'
                   WHEN r <= 50 THEN 'chat' ELSE 'short' END;
    t0 timestamptz := clock_timestamp();
    res text := 'completed';
    st text := NULL;
    msg text := NULL;
BEGIN
    BEGIN
        IF k = 'timeout' THEN
            PERFORM opus_generate('Write a long story about a lighthouse keeper.', max_tokens => 400,
                                  temperature => 0.8);
        ELSIF k = 'long' THEN
            PERFORM opus_generate('List the planets of the solar system and describe each one.',
                                  max_tokens => 64, temperature => 0.7);
        ELSIF k = 'chat' THEN
            PERFORM opus_chat('[{"role": "user", "content": "Name three colours."}]', max_tokens => 16);
        ELSE
            PERFORM opus_generate('The capital of France is', max_tokens => 4, temperature => 0);
        END IF;
    EXCEPTION WHEN query_canceled OR OTHERS THEN
        st := SQLSTATE;
        msg := SQLERRM;
        res := CASE st WHEN '57014' THEN 'cancelled' WHEN '53000' THEN 'rejected'
                       WHEN '58000' THEN 'failed' ELSE 'other' END;
    END;
    INSERT INTO outcome (client, kind, outcome, sqlstate, message, started_at, finished_at)
    VALUES (client, k, res, st, msg, t0, clock_timestamp());
    -- a client told the queue is full backs off before its next call
    IF res = 'rejected' THEN
        PERFORM pg_sleep(0.2);
    END IF;
    RETURN res;
END $$;
GRANT EXECUTE ON FUNCTION ledger_call(int, int) TO ledger_client, ledger_client2;
EOF

cat >"$DIR/mix.sql" <<'EOF'
\set r random(1, 100)
\if :r <= 10
SET statement_timeout = '500ms';
\endif
SELECT ledger_call(:client_id, :r);
\if :r <= 10
SET statement_timeout = 0;
\endif
EOF

# the engine must be up before the clock starts
for i in $(seq 1 120); do
	[ "$(q "SELECT state FROM opus_engine")" = ready ] && break
	sleep 0.5
done
q "SELECT opus_generate('warm up', max_tokens => 2) IS NOT NULL" >/dev/null
q "SELECT pg_stat_opus_reset()" >/dev/null
start_time=$(q "SELECT pg_postmaster_start_time()")
restarts0=$(q "SELECT restarts FROM opus_engine")

# memory / state sampler, every 2 s
(
	while sleep 2; do
		"${PSQL[@]}" -c "INSERT INTO memory (engine_pid, rss, busy_slots, kv_used, running, queue_depth)
			SELECT engine_pid, memory_rss, busy_slots, kv_blocks_used, running, queue_depth
			FROM pg_stat_opus_engine" 2>/dev/null
	done
) &
sampler=$!

say "phase 1: pgbench"
benches=()
for role in "${ROLES[@]}"; do
	"$BIN/pgbench" -n -U "$role" -c $((CLIENTS / TENANTS)) -j $((4 / TENANTS)) -T "$DURATION" \
		-f "$DIR/mix.sql" ledger >"$DIR/pgbench.$role.out" 2>&1 &
	benches+=($!)
done
killed=0
for k in $(seq 1 "$ENGINE_KILLS"); do
	sleep $((DURATION / (ENGINE_KILLS + 1)))
	pid=$(q "SELECT engine_pid FROM opus_engine")
	busy=$(q "SELECT busy_slots FROM opus_engine")
	if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then
		killed=$((killed + 1))
		echo "$(date +%T) kill -9 engine PID $pid ($busy slots busy)"
	else
		echo "$(date +%T) no engine to kill (state $(q "SELECT state FROM opus_engine"))"
	fi
done
for i in "${!benches[@]}"; do
	role=${ROLES[$i]}
	wait "${benches[$i]}"
	bench_rc=$?
	echo "pgbench as $role:"
	grep -E "number of transactions actually processed|number of failed|aborted|tps =|latency average" \
		"$DIR/pgbench.$role.out"
	[ $bench_rc -eq 0 ] || { fail "pgbench as $role exited $bench_rc"; tail -20 "$DIR/pgbench.$role.out"; }
done

# let the system settle: nothing running, the logger flushed
for i in $(seq 1 120); do
	[ "$(q "SELECT busy_slots = 0 AND (SELECT count(*) FROM opus_requests WHERE status = 'running') = 0
	        AND log_pending = 0 FROM pg_stat_opus_engine")" = t ] && break
	sleep 0.5
done
sleep 1
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
sampler=

say "ledger (per role)"
for role in "${ROLES[@]}"; do
"$BIN/psql" -X -d ledger -v role="$role" <<'EOF'
\pset footer off
SELECT :'role' AS role, 'clients (outcome rows)' AS source, count(*) AS submitted,
       count(*) FILTER (WHERE outcome = 'completed') AS completed,
       count(*) FILTER (WHERE outcome = 'failed') AS failed,
       count(*) FILTER (WHERE outcome = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE outcome = 'rejected') AS rejected,
       count(*) FILTER (WHERE outcome = 'other') AS other
FROM outcome WHERE tenant = :'role'
UNION ALL
SELECT :'role', 'pg_stat_opus', sum(calls + errors + cancellations + rejections), sum(calls), sum(errors),
       sum(cancellations), sum(rejections), NULL
FROM pg_stat_opus WHERE userid = :'role'::regrole
UNION ALL
SELECT :'role', 'opus_requests (log)', count(*), count(*) FILTER (WHERE status = 'completed'),
       count(*) FILTER (WHERE status IN ('failed', 'error')), count(*) FILTER (WHERE status = 'cancelled'),
       NULL, count(*) FILTER (WHERE status NOT IN ('completed', 'failed', 'error', 'cancelled'))
FROM opus_requests WHERE userid = :'role'::regrole;
EOF
done
"$BIN/psql" -X -d ledger <<'EOF'
\pset footer off
SELECT kind, outcome, sqlstate, count(*) FROM outcome GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;
SELECT outcome, left(message, 90) AS message, count(*) FROM outcome WHERE outcome <> 'completed'
GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 12;
EOF
if [ "$TENANTS" = 2 ]; then
	say "fair share: each role's part of what the engine completed (target 50%, equal weights)"
	"$BIN/psql" -X -d ledger <<'EOF'
\pset footer off
SELECT userid::regrole AS role, sum(calls) AS completed_calls,
       round(100.0 * sum(calls) / sum(sum(calls)) OVER (), 1) AS calls_pct,
       sum(prompt_tokens + completion_tokens) AS tokens,
       round(100.0 * sum(prompt_tokens + completion_tokens) / sum(sum(prompt_tokens + completion_tokens)) OVER (), 1) AS tokens_pct,
       50.0 AS target_pct
FROM pg_stat_opus WHERE userid IN ('ledger_client'::regrole, 'ledger_client2'::regrole)
GROUP BY 1 ORDER BY 1;
EOF
fi

# the checks, per role
processed=0
for role in "${ROLES[@]}"; do
	n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$DIR/pgbench.$role.out")
	processed=$((processed + ${n:-0}))
done
led() { q "SELECT $1 FROM (SELECT count(*) AS submitted,
	count(*) FILTER (WHERE outcome = 'completed') AS completed,
	count(*) FILTER (WHERE outcome = 'failed') AS failed,
	count(*) FILTER (WHERE outcome = 'cancelled') AS cancelled,
	count(*) FILTER (WHERE outcome = 'rejected') AS rejected,
	count(*) FILTER (WHERE outcome = 'other') AS other FROM outcome ${2:-}) c"; }
# pgbench counts only transactions that completed before -T expired; the
# clients' rows also include the calls in flight at the end
sub=$(led submitted)
[ "$processed" -gt 0 ] && [ "$sub" -ge "$processed" ] && [ "$sub" -le $((processed + CLIENTS)) ] ||
	fail "pgbench processed $processed transactions, the clients recorded $sub calls"
for role in "${ROLES[@]}"; do
	w="WHERE tenant = '$role'"
	[ "$(led "submitted = completed + failed + cancelled + rejected" "$w")" = t ] ||
		fail "$role: submitted <> completed + failed + cancelled + rejected (other errors: $(led other "$w"))"
	[ "$(q "SELECT (c.completed, c.failed, c.cancelled, c.rejected) = (s.calls, s.errors, s.cancellations, s.rejections)
		FROM (SELECT count(*) FILTER (WHERE outcome = 'completed') AS completed,
		             count(*) FILTER (WHERE outcome = 'failed') AS failed,
		             count(*) FILTER (WHERE outcome = 'cancelled') AS cancelled,
		             count(*) FILTER (WHERE outcome = 'rejected') AS rejected FROM outcome $w) c,
		     (SELECT sum(calls) AS calls, sum(errors) AS errors, sum(cancellations) AS cancellations,
		             sum(rejections) AS rejections FROM pg_stat_opus WHERE userid = '$role'::regrole) s")" = t ] ||
		fail "$role: pg_stat_opus does not match the clients"
	[ "$(q "SELECT (c.completed, c.failed) = (l.completed, l.failed) AND l.cancelled <= c.cancelled AND l.other = 0
		FROM (SELECT count(*) FILTER (WHERE outcome = 'completed') AS completed,
		             count(*) FILTER (WHERE outcome = 'failed') AS failed,
		             count(*) FILTER (WHERE outcome = 'cancelled') AS cancelled FROM outcome $w) c,
		     (SELECT count(*) FILTER (WHERE status = 'completed') AS completed,
		             count(*) FILTER (WHERE status IN ('failed', 'error')) AS failed,
		             count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
		             count(*) FILTER (WHERE status NOT IN ('completed', 'failed', 'error', 'cancelled')) AS other
		      FROM opus_requests WHERE userid = '$role'::regrole) l")" = t ] ||
		fail "$role: the request log does not match the clients"
done
echo "(the log has no rejected requests by design: they never reach the supervisor; it logs a"
echo " cancelled request only if it was sent to the engine before the cancel)"

say "left behind"
"$BIN/psql" -X -d ledger <<'EOF'
\pset footer off
SELECT state, busy_slots, max_requests, running, queue_depth, kv_blocks_total, kv_blocks_used,
       kv_blocks_total - kv_blocks_used AS kv_blocks_free, restarts, log_dropped
FROM pg_stat_opus_engine;
SELECT count(*) AS activity_rows FROM pg_stat_opus_activity;
SELECT count(*) AS log_rows_running FROM opus_requests WHERE status = 'running';
EOF
[ "$(q "SELECT busy_slots = 0 AND running = 0 AND queue_depth = 0 AND kv_blocks_used = 0 FROM pg_stat_opus_engine")" = t ] ||
	fail "slots or KV blocks left in use"
[ "$(q "SELECT count(*) FROM pg_stat_opus_activity")" = 0 ] || fail "requests left in pg_stat_opus_activity"
[ "$(q "SELECT count(*) FROM opus_requests WHERE status = 'running'")" = 0 ] || fail "log rows left 'running'"
restarts=$(($(q "SELECT restarts FROM opus_engine") - restarts0))
echo "engine restarts during the run: $restarts (engine kills: $killed)"
[ "$restarts" -eq "$killed" ] || fail "$killed kills but $restarts restarts"

say "engine memory (RSS, MB) per engine process: first sample, max, last sample"
"$BIN/psql" -X -d ledger <<'EOF'
\pset footer off
SELECT engine_pid, count(*) AS samples,
       round((array_agg(rss ORDER BY at))[1] / 1048576.0, 1) AS first_mb,
       round(max(rss) / 1048576.0, 1) AS max_mb,
       round((array_agg(rss ORDER BY at DESC))[1] / 1048576.0, 1) AS last_mb,
       max(busy_slots) AS max_busy, max(kv_used) AS max_kv_used
FROM memory WHERE rss > 0 GROUP BY engine_pid ORDER BY min(at);
EOF
# flat: an engine's RSS rises while it faults in the model and touches KV
# blocks, up to a plateau; the plateau must be the same for every engine of
# the run (the kills make each engine live DURATION / (ENGINE_KILLS + 1) s):
# the largest per-engine peak exceeds the smallest by less than 8 MB, and
# no engine exceeds the model file + opus.kv_cache_size + 128 MB.
[ "$(q "SELECT max(peak) - min(peak) < 8 * 1048576 FROM (
	SELECT engine_pid, max(rss) AS peak FROM memory WHERE rss > 0 GROUP BY 1) p")" = t ] ||
	fail "engine RSS peaks differ by 8 MB or more between engines of the run"
budget=$(q "SELECT (SELECT size FROM pg_stat_file(path)) + pg_size_bytes(current_setting('opus.kv_cache_size')) + 128 * 1048576
	FROM opus_model")
[ "$(q "SELECT max(rss) < $budget FROM memory")" = t ] ||
	fail "engine RSS over model + KV cache + 128 MB ($budget bytes)"
echo "engine RSS budget (model file + opus.kv_cache_size + 128 MB): $((budget / 1048576)) MB"

say "crash recovery during phase 1"
[ "$(q "SELECT pg_postmaster_start_time()")" = "$start_time" ] || fail "postmaster start time changed"
if grep -q "terminating any other active server processes" "$LOG"; then
	fail "the server log says 'terminating any other active server processes'"
else
	echo "none: postmaster start time unchanged, no 'terminating any other active server processes'"
fi

if [ "$BACKEND_KILL" = 1 ]; then
	say "phase 2: SIGKILL of one backend waiting in opus_generate, under load (8 clients)"
	lines0=$(wc -l <"$LOG")
	stat_before=$(q "SELECT coalesce(sum(calls + errors + cancellations + rejections), 0) FROM pg_stat_opus")
	log_before=$(q "SELECT count(*) FROM opus_requests")
	"$BIN/pgbench" -n -U ledger_client -c 8 -j 2 -T 20 -f "$DIR/mix.sql" ledger >"$DIR/pgbench2.out" 2>&1 &
	bench=$!
	PGAPPNAME=victim "${PSQL[@]}" -U ledger_client \
		-c "SELECT opus_generate('Count from one to one thousand: one, two, three,', max_tokens => 2000, temperature => 0)" \
		>"$DIR/victim.out" 2>&1 &
	victim_psql=$!
	vpid=
	for i in $(seq 1 300); do
		vpid=$(q "SELECT a.pid FROM pg_stat_activity a JOIN pg_stat_opus_activity o ON o.pid = a.pid
		          WHERE a.application_name = 'victim'")
		[ -n "$vpid" ] && break
		sleep 0.1
	done
	echo "$(date +%T) kill -9 backend PID $vpid (waiting: $(q "SELECT state FROM pg_stat_opus_activity WHERE pid = $vpid"))"
	[ -n "$vpid" ] && kill -9 "$vpid"
	wait $victim_psql
	echo "victim's client: $(tr '\n' ' ' <"$DIR/victim.out" | cut -c1-200)"
	wait $bench
	echo "pgbench under the kill: $(grep -E "actually processed|aborted" "$DIR/pgbench2.out" | tr '\n' ' ')"
	grep -E "client [0-9]+ aborted" "$DIR/pgbench2.out" | head -3
	for i in $(seq 1 120); do
		[ "$(q "SELECT state FROM opus_engine" 2>/dev/null)" = ready ] && break
		sleep 0.5
	done
	echo "server log after the kill:"
	tail -n +"$((lines0 + 1))" "$LOG" | grep -E "terminated by signal|terminating any other|all server processes terminated|not properly shut down|automatic recovery|redo done|ready to accept|opus_pg: (started|engine)|marked .* interrupted" |
		sed 's/^/  /' | head -20
	echo "postmaster start time: before $start_time, after $(q "SELECT pg_postmaster_start_time()")"
	sleep 2
	q "SELECT 'after: engine ' || state || ', busy_slots ' || busy_slots || ', kv_blocks_used ' ||
	   coalesce(kv_blocks_used::text, '?') || ', log rows running ' ||
	   (SELECT count(*) FROM opus_requests WHERE status = 'running') ||
	   ', interrupted rows ' || (SELECT count(*) FROM opus_requests WHERE status = 'interrupted')
	   FROM pg_stat_opus_engine"
	echo "pg_stat_opus requests: $stat_before before phase 2, $(q "SELECT coalesce(sum(calls + errors + cancellations + rejections), 0) FROM pg_stat_opus") after"
	echo "  (shared memory is reinitialised by the crash restart: the counters start again from zero)"
	echo "opus_requests rows: $log_before before phase 2, $(q "SELECT count(*) FROM opus_requests") after;" \
		"by status after: $(q "SELECT string_agg(status || ' ' || n, ', ' ORDER BY status) FROM
			(SELECT status, count(*) AS n FROM opus_requests WHERE submitted_at > now() - interval '2 min' GROUP BY 1) s")"
	[ "$(q "SELECT state FROM opus_engine")" = ready ] || fail "engine not ready after the backend kill"
	[ "$(q "SELECT generate IS NOT NULL FROM opus_generate('after', max_tokens => 2) AS generate")" = t ] ||
		fail "cannot generate after the backend kill"
fi

say "verdict"
if [ $ok = 1 ]; then
	echo "ledger balances; nothing left behind"
	exit 0
fi
echo "ledger FAILED (see above)"
exit 1
