#!/usr/bin/env bash
# bench_tenants.sh - what tenancy costs: engine throughput at SESSIONS
# concurrent sessions with per-role cache scopes, quotas and fair share
# (4 roles) against one role with the server-wide cache scope and no
# quotas; and the per-call cost of the quota check: the calling backend's
# CPU time (from /proc, so other processes' load does not count) per
# opus_tokenize call, quotas set vs none, as the session user and as
# another role.
#
# The throughput runs alternate, off then on, on then off, ... for ROUNDS
# rounds (each with the load average before it); the on/off ratio is
# taken per round and its median printed (target >= 0.95).
#
# usage: [PG_CONFIG=...] [SESSIONS=16] [DURATION=20] [ROUNDS=3] [CALLS=5000]
#        [ENGINE=path] test/bench/bench_tenants.sh
# Runs a throwaway cluster (as postgres when run as root) from PG_CONFIG's
# installation, which must have opus_pg installed (make install).
set -euo pipefail
cd "$(dirname "$0")/../.."
PG_CONFIG=${PG_CONFIG:-pg_config}
bindir=$("$PG_CONFIG" --bindir)
SESSIONS=${SESSIONS:-16}
DURATION=${DURATION:-20}
CALLS=${CALLS:-5000}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-55471}
dir=$(mktemp -d /tmp/opus_bt.XXXXXX)
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
opus.max_requests = 64
max_connections = 64
CONF
[ -n "${ENGINE:-}" ] && echo "opus.engine_path = '$ENGINE'" >> "$dir/data/postgresql.conf"
as_pg "'$bindir/pg_ctl' -D '$dir/data' -l '$dir/log' -w start" >/dev/null
psql=("$bindir/psql" -XAtq -h "$dir" -p "$PORT" -U postgres -d postgres)
"${psql[@]}" -c "CREATE EXTENSION opus_pg" -c "SELECT opus_generate('hi', max_tokens => 1)" >/dev/null
for r in 0 1 2 3; do "${psql[@]}" -c "CREATE ROLE bt_$r"; done

cat > "$dir/gen_off.sql" <<'SQL'
SELECT set_config('role', 'postgres', false);
SELECT opus_generate('Write one sentence about databases number ' || (:client_id % 8), max_tokens => 32, temperature => 0, seed => 1);
SQL
sed "s/set_config('role', 'postgres', false)/set_config('role', 'bt_' || (:client_id % 4), false)/" \
	"$dir/gen_off.sql" > "$dir/gen_on.sql"
for r in 0 1 2 3; do
	"${psql[@]}" -c "ALTER ROLE bt_$r SET opus.role_max_requests = 32" \
		-c "ALTER ROLE bt_$r SET opus.role_tokens_per_minute = 1000000000" \
		-c "ALTER ROLE bt_$r SET opus.role_tokens_per_day = 1000000000" \
		-c "ALTER ROLE bt_$r SET opus.role_max_tokens = 1000" >/dev/null
done

run_mode() {	# $1 = off | on; prints tokens/s
	local out tps
	if [ "$1" = off ]; then
		# one role (the session user), server scope, no quotas
		"${psql[@]}" -c "ALTER SYSTEM SET opus.cache_scope = 'server'" -c "SELECT pg_reload_conf()" >/dev/null
	else
		# four roles (scope per role, quotas, fair share between them)
		"${psql[@]}" -c "ALTER SYSTEM RESET opus.cache_scope" -c "SELECT pg_reload_conf()" >/dev/null
	fi
	sleep 1
	out=$(as_pg "'$bindir/pgbench' -n -h '$dir' -p $PORT -U postgres -c $SESSIONS -j 2 -T $DURATION -f '$dir/gen_$1.sql' postgres" 2>&1) || { echo "$out" >&2; exit 1; }
	tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1)
	echo "$(echo "$tps * 32" | bc -l)"
}

# off and on interleaved, ROUNDS times, the order swapped every round so a
# drift of the machine's load does not favour either
printf '\n%-6s %-5s %12s  %s\n' "round" "mode" "tokens/s" "load average before"
offs=(); ons=(); ratios=()
for round in $(seq 1 "$ROUNDS"); do
	if [ $((round % 2)) = 1 ]; then order="off on"; else order="on off"; fi
	for m in $order; do
		l=$(cut -d' ' -f1-3 /proc/loadavg)
		v=$(run_mode "$m")
		printf '%-6s %-5s %12.1f  %s\n' "$round" "$m" "$v" "$l"
		if [ "$m" = off ]; then off=$v; else on=$v; fi
	done
	offs+=("$off"); ons+=("$on"); ratios+=("$(echo "$on / $off" | bc -l)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# the quota check: CALLS tokenize calls in one transaction
percall() {	# $1 = setup SQL, $2 = role to call as (or empty); prints the backend's CPU time (user + system) per call in us
	"${psql[@]}" -c "$1" -c "DO \$\$ DECLARE c0 bigint; c1 bigint; BEGIN
		SELECT f[12]::bigint + f[13]::bigint INTO c0 FROM (SELECT string_to_array(split_part(pg_read_file('/proc/' || pg_backend_pid() || '/stat'), ') ', 2), ' ') AS f) s;
		IF '${2:-}' <> '' THEN EXECUTE 'SET LOCAL ROLE ${2:-}'; END IF;
		FOR i IN 1..$CALLS LOOP PERFORM opus_tokenize('x'); END LOOP;
		RESET ROLE;
		SELECT f[12]::bigint + f[13]::bigint INTO c1 FROM (SELECT string_to_array(split_part(pg_read_file('/proc/' || pg_backend_pid() || '/stat'), ') ', 2), ' ') AS f) s;
		RAISE NOTICE 'us %', round((c1 - c0) * 1e6 / $(getconf CLK_TCK) / $CALLS, 1); END \$\$" 2>&1 |
		sed -n 's/.*us \([0-9.]*\).*/\1/p'
}
"${psql[@]}" -c "ALTER ROLE postgres SET opus.role_max_requests = 32" -c "ALTER ROLE postgres SET opus.role_tokens_per_minute = 1000000000" \
	-c "ALTER ROLE postgres SET opus.role_tokens_per_day = 1000000000" -c "ALTER ROLE postgres SET opus.role_max_tokens = 1000" >/dev/null
median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
percall "SELECT 1" >/dev/null	# warm-up
a=(); b=(); c=()
for round in 1 2 3; do	# interleaved, medians of three
	a+=("$(percall "SET opus.role_max_requests = 0; SET opus.role_tokens_per_minute = 0; SET opus.role_tokens_per_day = 0; SET opus.role_max_tokens = 0")")
	b+=("$(percall "SELECT 1")")
	c+=("$(percall "SELECT 1" bt_0)")
done
q_none=$(median3 "${a[@]}"); q_on=$(median3 "${b[@]}"); q_other=$(median3 "${c[@]}")

load=$(cut -d' ' -f1-3 /proc/loadavg)
printf '\n%-44s %12s\n' "engine, $SESSIONS sessions x 32 tokens, ${DURATION}s" "tokens/s"
printf '%-44s %12.1f\n' "one role, server cache scope, no quotas" "$(median "${offs[@]}")"
printf '%-44s %12.1f\n' "4 roles, role scopes, quotas, fair share" "$(median "${ons[@]}")"
printf '%-44s %12s\n' "ratio on / off per round" "$(printf '%.3f ' "${ratios[@]}")"
printf '%-44s %12.3f\n' "ratio on / off, median of $ROUNDS rounds" "$(median "${ratios[@]}")"
printf '\n%-44s %12s\n' "opus_tokenize('x'), $CALLS calls, median of 3" "CPU us/call"
printf '%-44s %12s\n' "no quotas" "$q_none"
printf '%-44s %12s\n' "4 quotas, session user" "$q_on"
printf '%-44s %12s\n' "4 quotas, another role (SET ROLE)" "$q_other"
echo "load average: $load"
