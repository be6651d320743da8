#!/usr/bin/env bash
# bench_fairness.sh - fair share between roles, measured: each role's share
# of the tokens the engine generated against its target, on an engine whose
# KV cache holds about two sequences (so requests queue), with greedy
# 16-token calls looped by pgbench for DURATION seconds per scenario:
#
#   1 vs N    role fa with 1 session, role fb with N_B (24) sessions, equal
#             weights; target: fa at least 40% (the issue), 50% ideal
#   3:1       fw3 and fw1 with 4 sessions each, opus.role_weight 3 and 1
#             (roles the first scenario did not use); target 75%
#   1 vs N, scheduler off   the same as the first with both sessions' groups
#             as one role (no fair share between them): the share 1 session
#             gets without it
#
# Shares come from pg_stat_opus (per role, reset before each scenario), so
# they count only completed calls; the mean queue time is from there too.
# "in flight" is the part of its sessions' time a role had a call submitted
# (the sum of its calls' times from slot claim to the supervisor's receipt
# of the end, over sessions x DURATION): the rest its clients spent between
# calls (the result's way back, the client, the next call's way in).  "share in
# flight" is the role's token rate while it had a call submitted (tokens
# over that summed time) against the engine's rate over the whole run: for
# a role with one session, the share the scheduler gave it whenever it
# asked.  "tokens/step" is the role's generated tokens per engine step of
# the run, "engine tokens/step" everyone's (about the number of sequences
# in a batch): one session decodes at most one token per step, so a role
# with one session near 1.0 was in (nearly) every step's batch, and its
# share cannot exceed 1 / (engine tokens/step) however the scheduler
# orders the queue.  Prints one row per role and scenario, and the load
# average.
#
# usage: [PG_CONFIG=...] [DURATION=20] [N_B=24] [ENGINE=path] [ONLY=weights|one]
#        [PROMPTS=shared|per-client] test/bench/bench_fairness.sh
# ONLY=one runs the first scenario only.  PROMPTS=per-client puts the
# pgbench client number at the head of the prompt: with the default (every
# call the same prompt) a role's concurrent calls share the prompt's first
# cached block, so the 2 MB cache holds about three sequences, not two.
# Runs a throwaway cluster (as postgres when run as root) from PG_CONFIG's
# installation, which must have opus_pg installed (make install).
set -euo pipefail
cd "$(dirname "$0")/../.."
PG_CONFIG=${PG_CONFIG:-pg_config}
bindir=$("$PG_CONFIG" --bindir)
DURATION=${DURATION:-20}
N_B=${N_B:-24}
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
opus.kv_cache_size = 2MB
opus.max_requests = 40
max_connections = 64
CONF
[ -n "${ENGINE:-}" ] && echo "opus.engine_path = '$ENGINE'" >> "$dir/data/postgresql.conf"
as_pg "'$bindir/pg_ctl' -D '$dir/data' -l '$dir/log' -w start" >/dev/null
psql=("$bindir/psql" -XAtq -h "$dir" -p "$PORT" -U postgres -d postgres)
"${psql[@]}" -c "CREATE EXTENSION opus_pg" -c "SELECT opus_generate('hi', max_tokens => 1)" >/dev/null
"${psql[@]}" -c "CREATE ROLE fa LOGIN" -c "CREATE ROLE fb LOGIN" \
	-c "CREATE ROLE fw3 LOGIN" -c "CREATE ROLE fw1 LOGIN" >/dev/null

if [ "${PROMPTS:-shared}" = per-client ]; then
	# the client number first, so no two sessions share a cached block
	cat > "$dir/gen.sql" <<'SQL'
SELECT opus_completion('Client :client_id counts from 1 to 1000: 1, 2, 3, 4,', max_tokens => 16, temperature => 0);
SQL
else
	cat > "$dir/gen.sql" <<'SQL'
SELECT opus_completion('Count from 1 to 1000: 1, 2, 3, 4,', max_tokens => 16, temperature => 0);
SQL
fi

# scenario LABEL ROLE_A SESSIONS_A ROLE_B SESSIONS_B TARGET: one row per role
scenario() {
	local label=$1 ra=$2 na=$3 rb=$4 nb=$5 target=$6
	"${psql[@]}" -c "SELECT pg_stat_opus_reset()" >/dev/null
	local s0 s1
	s0=$("${psql[@]}" -c "SELECT sum(steps) FROM pg_stat_opus_engine")
	as_pg "'$bindir/pgbench' -n -h '$dir' -p $PORT -U $ra -c $na -j 1 -T $DURATION -f '$dir/gen.sql' postgres" \
		>"$dir/a.out" 2>&1 &
	local pa=$!
	as_pg "'$bindir/pgbench' -n -h '$dir' -p $PORT -U $rb -c $nb -j 2 -T $DURATION -f '$dir/gen.sql' postgres" \
		>"$dir/b.out" 2>&1 &
	local pb=$!
	wait $pa $pb
	s1=$("${psql[@]}" -c "SELECT sum(steps) FROM pg_stat_opus_engine")
	"${psql[@]}" -F ' | ' -c "
		SELECT '$label', userid::regrole, CASE userid WHEN '$ra'::regrole THEN $na ELSE $nb END,
		       (SELECT weight FROM pg_stat_opus_tenants t WHERE t.userid = s.userid), sum(calls),
		       sum(completion_tokens),
		       round(100.0 * sum(completion_tokens) / sum(sum(completion_tokens)) OVER (), 1) || '%',
		       CASE userid WHEN '$ra'::regrole THEN '$target' ELSE '' END,
		       round((sum(mean_queue_time * calls) / nullif(sum(calls), 0))::numeric, 0),
		       round((100.0 * sum(total_time) / (1000.0 * $DURATION *
		              CASE userid WHEN '$ra'::regrole THEN $na ELSE $nb END))::numeric, 0) || '%',
		       round((100.0 * sum(completion_tokens) / nullif(sum(total_time), 0) /
		              (sum(sum(completion_tokens)) OVER () / (1000.0 * $DURATION)))::numeric, 1) || '%',
		       round(sum(completion_tokens) / nullif($s1 - $s0, 0)::numeric, 2),
		       round(sum(sum(completion_tokens)) OVER () / nullif($s1 - $s0, 0)::numeric, 2)
		FROM pg_stat_opus s WHERE userid IN ('$ra'::regrole, '$rb'::regrole) GROUP BY userid ORDER BY userid::regrole::text"
}

echo "bench_fairness: ${DURATION} s per scenario, 16-token greedy calls (prompts ${PROMPTS:-shared}), KV cache 2 MB; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "scenario | role | sessions | weight | calls | tokens | share | target (first role) | mean queue ms | in flight | share in flight | tokens/step | engine tokens/step"
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
