#!/usr/bin/env bash
# setup.sh - the reference scale-out setup on one machine (docs/scale-out.md):
# N data nodes (PostgreSQL 15 clusters, opus_pg preloaded, each with its own
# engine and the same model) and one proxy cluster with PL/Proxy and
# opus_pg_proxy, whose SQL/MED server "opus_cluster" lists the nodes.  The
# table docs(id, body) is created on every node; load rows with
#   test/cluster/setup.sh load ROWS
# which places row id on node hashtext(id::text) & (N - 1), PL/Proxy's rule.
#
#   test/cluster/setup.sh start     create (if needed) and start everything
#   test/cluster/setup.sh load ROWS fill docs with ROWS rows, sharded
#   test/cluster/setup.sh stop      stop everything
#   test/cluster/setup.sh destroy   stop and remove DIR
#
# Environment: DIR (default /tmp/opus_cluster), NODES (power of two,
# default 2), PORT (first port, default 55500; proxy = PORT, node i =
# PORT + 1 + i), THREADS (opus.threads per node, default 1), PG_CONFIG.
# Needs opus_pg installed (make install) and postgresql-15-plproxy.  Run as a
# non-root user, or as root (the clusters then run as postgres).
set -euo pipefail
DIR=${DIR:-/tmp/opus_cluster}
NODES=${NODES:-2}
PORT=${PORT:-55500}
THREADS=${THREADS:-1}
PG_CONFIG=${PG_CONFIG:-pg_config}
bindir=$("$PG_CONFIG" --bindir)

if [ $((NODES & (NODES - 1))) -ne 0 ] || [ "$NODES" -lt 1 ]; then
	echo "setup.sh: NODES must be a power of two (PL/Proxy's partition count)" >&2
	exit 2
fi
as_pg() {
	if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$1"; else bash -c "$1"; fi
}
psql_at() {	# psql_at PORT SQL
	"$bindir/psql" -qXAt -h "$DIR" -p "$1" -U postgres -d postgres -v ON_ERROR_STOP=1 -c "$2"
}
init_cluster() {	# init_cluster NAME PORT EXTRA_CONF
	local d=$DIR/$1
	[ -d "$d" ] && return 0
	as_pg "'$bindir/initdb' -D '$d' -A trust -U postgres --no-locale -E UTF8" >/dev/null
	cat >>"$d/postgresql.conf" <<EOC
port = $2
listen_addresses = ''
unix_socket_directories = '$DIR'
$3
EOC
}

case "${1:-start}" in
start)
	mkdir -p "$DIR"
	[ "$(id -u)" = 0 ] && chown postgres "$DIR"
	fresh=0
	[ -d "$DIR/proxy" ] || fresh=1
	for i in $(seq 0 $((NODES - 1))); do
		init_cluster "node$i" $((PORT + 1 + i)) "shared_preload_libraries = 'opus_pg'
opus.threads = $THREADS
opus_pg_proxy.node = $i"
	done
	init_cluster proxy "$PORT" ""
	for c in proxy $(seq -f 'node%g' 0 $((NODES - 1))); do
		as_pg "'$bindir/pg_ctl' -D '$DIR/$c' -l '$DIR/$c.log' -w status" >/dev/null 2>&1 ||
			as_pg "'$bindir/pg_ctl' -D '$DIR/$c' -l '$DIR/$c.log' -w start" >/dev/null
	done
	if [ $fresh = 1 ]; then
		for i in $(seq 0 $((NODES - 1))); do
			psql_at $((PORT + 1 + i)) "CREATE EXTENSION opus_pg; CREATE TABLE docs (id integer PRIMARY KEY, body text)"
		done
		opts=$(for i in $(seq 0 $((NODES - 1))); do
			printf "p%d 'host=%s port=%d dbname=postgres'," "$i" "$DIR" $((PORT + 1 + i)); done)
		psql_at "$PORT" "CREATE EXTENSION plproxy; CREATE EXTENSION opus_pg_proxy;
			CREATE SERVER opus_cluster FOREIGN DATA WRAPPER plproxy OPTIONS (${opts%,});
			CREATE USER MAPPING FOR PUBLIC SERVER opus_cluster"
	fi
	# Until every node's engine answers.
	for _ in $(seq 1 120); do
		psql_at "$PORT" "SELECT opus_cluster_check_models()" >/dev/null 2>&1 && break
		sleep 1
	done
	psql_at "$PORT" "SELECT node, model, sha256 FROM opus_cluster_models() ORDER BY node"
	;;
load)
	rows=${2:?ROWS}
	for i in $(seq 0 $((NODES - 1))); do
		psql_at $((PORT + 1 + i)) "TRUNCATE docs; INSERT INTO docs
			SELECT g, 'Item ' || g || ' of the catalogue' FROM generate_series(1, $rows) g
			WHERE hashtext(g::text) & $((NODES - 1)) = $i"
	done
	;;
stop)
	for c in proxy $(seq -f 'node%g' 0 $((NODES - 1))); do
		[ -d "$DIR/$c" ] && as_pg "'$bindir/pg_ctl' -D '$DIR/$c' -m fast -w stop" >/dev/null 2>&1 || true
	done
	;;
destroy)
	"$0" stop
	rm -rf "$DIR"
	;;
*)
	echo "usage: $0 start|load ROWS|stop|destroy" >&2
	exit 2
	;;
esac
