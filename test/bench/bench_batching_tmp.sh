#!/usr/bin/env bash
# bench_batching_tmp.sh - run bench_batching.sh against a throwaway cluster.
#
# Creates a temporary PostgreSQL instance (as the postgres user when run as
# root) with opus_pg preloaded, the engine binary ENGINE (default: this
# tree's build/opus_engine, so an uninstalled engine can be measured against
# the installed extension), OPUS_THREADS engine threads (default 2), a KV
# cache of KV_CACHE (default 64MB, as in the README's table) and
# opus.max_requests 64; runs test/bench/bench_batching.sh against it (its
# environment - LEVELS, ROUNDS, LLAMA_SERVER, SKIP_LLAMA, ... - passes
# through), then stops the instance and removes it.  BENCH picks another
# benchmark that takes psql connection options, e.g.
# BENCH=test/bench/bench_jobs.sh.
#
# usage: [ENGINE=path] [OPUS_THREADS=n] [PORT=55433] [KV_CACHE=64MB]
#        test/bench/bench_batching_tmp.sh
# Needs the extension installed (make install) and pgbench.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
bindir=$(pg_config --bindir)
ENGINE=${ENGINE:-$repo/build/opus_engine}
OPUS_THREADS=${OPUS_THREADS:-2}
PORT=${PORT:-55433}
KV_CACHE=${KV_CACHE:-64MB}
MODEL=${MODEL:-$repo/models/SmolLM2-135M-Instruct.Q4_1.gguf}
export MODEL

[ -x "$ENGINE" ] || { echo "$0: $ENGINE is not an executable (make engine)" >&2; exit 1; }
dir=$(mktemp -d /tmp/opus_bb.XXXXXX)
chmod 755 "$dir"
as_pg() {
	if [ "$(id -u)" = 0 ]; then
		su postgres -s /bin/bash -c "$1"
	else
		bash -c "$1"
	fi
}
[ "$(id -u)" = 0 ] && chown postgres "$dir"
cleanup() {
	as_pg "'$bindir/pg_ctl' -D '$dir/data' -m immediate stop" >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

as_pg "'$bindir/initdb' -D '$dir/data' -A trust -U postgres --no-locale -E UTF8" >/dev/null
cat >>"$dir/data/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$dir'
max_connections = 80
shared_preload_libraries = 'opus_pg'
opus.threads = $OPUS_THREADS
opus.max_requests = 64
opus.kv_cache_size = '$KV_CACHE'
opus.engine_path = '$ENGINE'
opus.model = '$MODEL'
EOF
as_pg "'$bindir/pg_ctl' -D '$dir/data' -l '$dir/log' -w start" >/dev/null
echo "temporary instance in $dir (port $PORT), engine $ENGINE, $OPUS_THREADS thread(s)" >&2
rc=0
"${BENCH:-test/bench/bench_batching.sh}" -h "$dir" -p "$PORT" -U postgres -d postgres || rc=$?
if [ $rc -ne 0 ]; then
	echo "--- server log (last 30 lines)" >&2
	tail -30 "$dir/log" >&2
fi
exit $rc
