#!/usr/bin/env bash
# bench_fairness.sh - fair share between roles, measured: each role's share
# of the tokens the engine generated while both roles were backlogged,
# against its target, on an engine whose KV cache holds about two
# sequences (so requests queue), with greedy MAX_TOKENS-token calls looped
# by pgbench for DURATION seconds per scenario:
#
#   1 vs N    role fa with 1 session, role fb with N_B (24) sessions, equal
#             weights; target: fa at least 40% (the issue), 50% ideal
#   3:1       fw3 and fw1 with 4 sessions each, opus.role_weight 3 and 1
#             (roles the first scenario did not use); target 75%
#   1 vs N, scheduler off   the same as the first with both sessions' groups
#             as one role (no fair share between them): the share 1 session
#             gets without it
#
# "While both are backlogged": from the request log, over the window from
# the later of the two roles' first submissions to the earlier of their
# last completed calls' ends; a call's tokens are spread evenly from its
# first token to its end and counted for the part inside the window.  When
# the first pgbench run ends, the other role's calls still queued or
# running are cancelled: waiting for them would only add its drain (with
# 24 sessions, 24 more calls run with nobody else asking, and the shares
# this bench printed before 2026-12-02 counted them).  "p99 queue" and
# "median queue" are submission to admission over the role's calls
# submitted and admitted in the window; "tokens/step" the role's
# tokens per engine step (steps counted while both runs went on),
# "engine tokens/step" everyone's (about the number of sequences in a
# batch): one session decodes at most one token per step, so its share is
# at most 1 / (engine tokens/step).
# Prints one row per role and scenario, and the load average.
#
# usage: [PG_CONFIG=...] [DURATION=20] [N_B=24] [MAX_TOKENS=64] [KV=3MB]
#        [ENGINE=path] [ONLY=weights|one] [PROMPTS=shared|per-client]
#        test/bench/bench_fairness.sh
# MAX_TOKENS=64, KV=3MB (8 blocks of 16 tokens; one of these calls takes
# six, so the engine runs about two at a time: 1.94 sequences per step in
# a quiet run, where 5 MB ran 3.27, since admission takes the blocks a
# request needs now and a third fits while the others are short) and
# PROMPTS=per-client (the pgbench client number at the head of
# the prompt, so no two calls share a cached block) are the issue's setup.
# PROMPTS=shared gives every call the same prompt: greedy calls of one role
# then share their blocks, generated ones included, and many more fit
# (about five 64-token calls in 5 MB).  MAX_TOKENS=16 KV=2MB PROMPTS=shared
# is this bench's earlier setup (about 2.3 sequences per step).  ONLY=one
# runs the first scenario only.
# Runs a throwaway cluster (as postgres when run as root) from PG_CONFIG's
# installation, which must have opus_pg installed (make install).
set -euo pipefail
cd "$(dirname "$0")/../.."
PG_CONFIG=${PG_CONFIG:-pg_config}
bindir=$("$PG_CONFIG" --bindir)
DURATION=${DURATION:-20}
N_B=${N_B:-24}
MAX_TOKENS=${MAX_TOKENS:-64}
KV=${KV:-3MB}
PORT=${PORT:-55473}
dir=$(mktemp -d /tmp/opus_bf.XXXXXX)
chmod 755 "$dir"
as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$1"; else bash -c "$1"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$dir"
cleanup() { as_pg "'$bindir/pg_ctl' -D '$dir/data' -m immediate stop" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
as_pg "'$bindir/initdb' -D '$dir/data' -A trust" >/dev/null
cat >> "$dir/data/postgresql.conf" <<CONF
port = $PORT
unix_socket_directories = '$dir'
shared_preload_libraries = 'opus_pg'
opus.threads = 2
opus.kv_cache_size = $KV
opus.max_requests = 40
opus.log_requests = on
opus.log_flush_interval = 200ms
max_connections = 64
CONF
[ -n "${ENGINE:-}" ] && echo "opus.engine_path = '$ENGINE'" >> "$dir/data/postgresql.conf"
as_pg "'$bindir/pg_ctl' -D '$dir/data' -l '$dir/log' -w start" >/dev/null
psql=("$bindir/psql" -XAtq -h "$dir" -p "$PORT" -U postgres -d postgres)
"${psql[@]}" -c "CREATE EXTENSION opus_pg" -c "SELECT opus_generate('hi', max_tokens => 1)" >/dev/null
"${psql[@]}" -c "CREATE ROLE fa LOGIN" -c "CREATE ROLE fb LOGIN" \
	-c "CREATE ROLE fw3 LOGIN" -c "CREATE ROLE fw1 LOGIN" \
	-c "CREATE TABLE bf_snap (at timestamptz, steps bigint)" >/dev/null

if [ "${PROMPTS:-per-client}" = per-client ]; then
	# the client number first, so no two sessions share a cached block
	cat > "$dir/gen.sql" <<SQL
SELECT opus_completion('Client :client_id counts from 1 to 1000: 1, 2, 3, 4,', max_tokens => $MAX_TOKENS, temperature => 0);
SQL
else
	cat > "$dir/gen.sql" <<SQL
SELECT opus_completion('Count from 1 to 1000: 1, 2, 3, 4,', max_tokens => $MAX_TOKENS, temperature => 0);
SQL
fi

# scenario LABEL ROLE_A SESSIONS_A ROLE_B SESSIONS_B TARGET: one row per role
scenario() {
	local label=$1 ra=$2 na=$3 rb=$4 nb=$5 target=$6
	"${psql[@]}" -c "SELECT pg_stat_opus_reset()" -c "TRUNCATE bf_snap" >/dev/null
	local log0
	log0=$("${psql[@]}" -c "SELECT coalesce(max(id), 0) FROM opus_requests")
	"${psql[@]}" -c "INSERT INTO bf_snap SELECT clock_timestamp(), sum(steps) FROM pg_stat_opus_engine" >/dev/null
	as_pg "'$bindir/pgbench' -n -h '$dir' -p $PORT -U $ra -c $na -j 1 -T $DURATION -f '$dir/gen.sql' postgres" \
		>"$dir/a.out" 2>&1 &
	local pa=$!
	as_pg "'$bindir/pgbench' -n -h '$dir' -p $PORT -U $rb -c $nb -j 2 -T $DURATION -f '$dir/gen.sql' postgres" \
		>"$dir/b.out" 2>&1 &
	local pb=$!
	# engine steps per second while both run (for tokens per step)
	wait -n $pa $pb || true
	"${psql[@]}" -c "INSERT INTO bf_snap SELECT clock_timestamp(), sum(steps) FROM pg_stat_opus_engine" >/dev/null
	# the window is over: cancel the other role's queued calls instead of
	# waiting for them (pgbench reports those clients as aborted)
	"${psql[@]}" -c "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity
		WHERE usename IN ('$ra', '$rb') AND backend_type = 'client backend'" >/dev/null
	wait $pa $pb || true
	sleep 1		# the request log's last flush
	# The window: from the later of the two roles' first submissions to the
	# earlier of their last calls' ends.  A call's tokens are spread evenly
	# from its first token to its end and counted for the part in the window.
	"${psql[@]}" -F ' | ' -c "
		WITH q AS (SELECT userid::regrole::text AS role, * FROM opus_requests
		           WHERE id > $log0 AND status IN ('completed', 'cancelled') AND userid IN ('$ra'::regrole, '$rb'::regrole)),
		     win AS (SELECT max(s) AS ws, min(e) AS we FROM
		             (SELECT min(submitted_at) AS s, max(finished_at) FILTER (WHERE status = 'completed') AS e
		              FROM q GROUP BY role) r),
		     tok AS (SELECT role, sum(CASE WHEN finished_at <= first_token_at
		                                   THEN CASE WHEN finished_at > ws AND finished_at <= we THEN completion_tokens ELSE 0 END
		                                   ELSE completion_tokens * greatest(0, extract(epoch FROM least(finished_at, we) - greatest(first_token_at, ws)))
		                                        / extract(epoch FROM finished_at - first_token_at) END) AS tokens,
		                    percentile_disc(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - submitted_at) * 1000)
		                        FILTER (WHERE submitted_at >= ws AND started_at <= we) AS p99,
		                    percentile_disc(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - submitted_at) * 1000)
		                        FILTER (WHERE submitted_at >= ws AND started_at <= we) AS p50
		             FROM q, win GROUP BY role),
		     sps AS (SELECT (max(steps) - min(steps)) / extract(epoch FROM max(at) - min(at)) AS v FROM bf_snap)
		SELECT '$label', role, CASE role WHEN '$ra' THEN $na ELSE $nb END,
		       (SELECT weight FROM pg_stat_opus_tenants t WHERE t.userid = role::regrole),
		       round(extract(epoch FROM we - ws)::numeric, 1), round(tokens),
		       round(100.0 * tokens / nullif(sum(tokens) OVER (), 0), 1) || '%',
		       CASE role WHEN '$ra' THEN '$target' ELSE '' END,
		       round(p99::numeric), round(p50::numeric),
		       round((tokens / nullif(sps.v * extract(epoch FROM we - ws), 0))::numeric, 2),
		       round((sum(tokens) OVER () / nullif(sps.v * extract(epoch FROM we - ws), 0))::numeric, 2),
		       round((sum(tokens) OVER () / nullif(extract(epoch FROM we - ws), 0))::numeric, 1)
		FROM tok, win, sps ORDER BY role"
}

echo "bench_fairness: ${DURATION} s per scenario, ${MAX_TOKENS}-token greedy calls (prompts ${PROMPTS:-per-client}), KV cache $KV; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "scenario | role | sessions | weight | window s | tokens | share | target (first role) | p99 queue ms | median queue ms | tokens/step | engine tokens/step | engine tokens/s"
echo "---|---|---|---|---|---|---|---|---|---|---|---|---"
[ "${ONLY:-}" = weights ] || scenario "1 vs $N_B, equal weights" fa 1 fb "$N_B" ">= 40% (50% ideal)"
[ "${ONLY:-}" = one ] && { echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"; exit 0; }
# fresh roles: the engine's counters of fa and fb carry the first
# scenario's service (fb far ahead), which would hold fb back here
"${psql[@]}" -c "ALTER ROLE fw3 SET opus.role_weight = 3" -c "ALTER ROLE fw1 SET opus.role_weight = 1" >/dev/null
scenario "4 vs 4, weights 3:1" fw3 4 fw1 4 "75%"
[ "${ONLY:-}" = weights ] && exit 0
# no fair share between the two groups: both as one role (fb), the one
# session's part counted by its own pgbench's transactions
"${psql[@]}" -c "SELECT pg_stat_opus_reset()" >/dev/null
as_pg "'$bindir/pgbench' -n -h '$dir' -p $PORT -U fb -c 1 -j 1 -T $DURATION -f '$dir/gen.sql' postgres" >"$dir/a.out" 2>&1 &
pa=$!
as_pg "'$bindir/pgbench' -n -h '$dir' -p $PORT -U fb -c $N_B -j 2 -T $DURATION -f '$dir/gen.sql' postgres" >"$dir/b.out" 2>&1 &
pb=$!
wait $pa $pb
ta=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$dir/a.out")
tb=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$dir/b.out")
echo "1 vs $N_B, one role (no fair share between them) | the 1 session | 1 | 1 | $ta | | $(awk -v a="$ta" -v b="$tb" 'BEGIN { printf "%.1f%%", (a + b) ? 100 * a / (a + b) : 0 }') | (1/$((N_B + 1)) = $(awk -v n="$N_B" 'BEGIN { printf "%.1f%%", 100 / (n + 1) }')) |"
echo "1 vs $N_B, one role (no fair share between them) | the $N_B sessions | $N_B | 1 | $tb | | | |"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
