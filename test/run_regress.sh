#!/usr/bin/env bash
# run_regress.sh - the pg_regress suite on temporary instances.
#
#   1. sql/<REGRESS tests>.sql against a temporary cluster with
#      shared_preload_libraries = 'opus_pg' and the installed default model
#      (outputs: ./results, ./regression.diffs);
#   2. sql/nopreload.sql against one without preloading, where every
#      function must fail with 55000 (outputs: ./nopreload/).
#
# Needs `make install` first (library, SQL script, opus_engine in
# pg_config --bindir, the default model in the extension's models dir).
# PostgreSQL refuses to run as root: run this as a non-root user from a
# directory that user can write (CI: the postgres user in a copy of the
# tree).  Run as root, it copies sql/ and expected/ to a postgres-owned
# temporary directory and re-runs itself there as postgres.
#
# Environment: PG_CONFIG (default pg_config), OPUS_REGRESS_PORT (default: let
# pg_regress pick), OPUS_REGRESS_TESTS (default: REGRESS from the Makefile),
# OPUS_ENGINE_PATH (an engine binary to use instead of the installed one).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
PG_CONFIG=${PG_CONFIG:-pg_config}

if [ "$(id -u)" = 0 ]; then
	tmp=$(mktemp -d /tmp/opus_regress.XXXXXX)
	mkdir -p "$tmp/test"
	cp -r sql expected Makefile "$tmp/"
	cp test/run_regress.sh "$tmp/test/"
	chown -R postgres "$tmp"
	rc=0
	su postgres -s /bin/bash -c "cd '$tmp' && PG_CONFIG='$PG_CONFIG' OPUS_REGRESS_PORT='${OPUS_REGRESS_PORT:-}' OPUS_REGRESS_TESTS='${OPUS_REGRESS_TESTS:-}' OPUS_ENGINE_PATH='${OPUS_ENGINE_PATH:-}' bash test/run_regress.sh" || rc=$?
	for f in regression.diffs regression.out nopreload/regression.diffs nopreload/regression.out; do
		if [ -f "$tmp/$f" ]; then
			mkdir -p "$(dirname "$repo/$f")"
			cp "$tmp/$f" "$repo/$f"
		fi
	done
	if [ $rc -eq 0 ]; then
		rm -rf "$tmp"
	else
		echo "run_regress: outputs kept in $tmp" >&2
	fi
	exit $rc
fi

pgxs=$($PG_CONFIG --pgxs)
pg_regress=$(dirname "$pgxs")/../test/regress/pg_regress
bindir=$($PG_CONFIG --bindir)
tests=${OPUS_REGRESS_TESTS:-$(sed -n 's/^REGRESS = //p' Makefile)}
port_opt=()
if [ -n "${OPUS_REGRESS_PORT:-}" ]; then
	port_opt=(--port="$OPUS_REGRESS_PORT")
fi

if [ -z "${OPUS_ENGINE_PATH:-}" ] && [ ! -x "$bindir/opus_engine" ]; then
	echo "run_regress: $bindir/opus_engine is missing; run 'make install' first" >&2
	exit 1
fi

conf=$(mktemp /tmp/opus_regress_conf.XXXXXX)
conf_np=$(mktemp /tmp/opus_regress_conf_np.XXXXXX)
trap 'rm -f "$conf" "$conf_np"' EXIT
cat >"$conf" <<'EOF'
shared_preload_libraries = 'opus_pg'
opus.threads = 2
opus.max_requests = 8
# the request log goes to the test database (sql/stats.sql reads it)
opus.database = 'regression'
EOF
if [ -n "${OPUS_ENGINE_PATH:-}" ]; then
	echo "opus.engine_path = '$OPUS_ENGINE_PATH'" >>"$conf"
fi
echo "# no shared_preload_libraries" >"$conf_np"

rm -rf results regression.diffs regression.out tmp_check nopreload
rc=0
"$pg_regress" --temp-instance=./tmp_check --temp-config="$conf" \
	--inputdir=. --outputdir=. --bindir="$bindir" \
	--encoding=UTF8 --no-locale "${port_opt[@]}" \
	$tests || rc=$?

mkdir -p nopreload
"$pg_regress" --temp-instance=./nopreload/tmp_check --temp-config="$conf_np" \
	--inputdir=. --outputdir=./nopreload --bindir="$bindir" \
	--encoding=UTF8 --no-locale "${port_opt[@]}" \
	nopreload || rc=$?

if [ $rc -ne 0 ]; then
	for f in regression.diffs nopreload/regression.diffs; do
		[ -f "$f" ] && { echo "--- $f"; head -300 "$f"; }
	done
	for f in log/postmaster.log; do
		[ -f "$f" ] && { echo "--- $f (last 50 lines)"; tail -50 "$f"; }
	done
fi
exit $rc
