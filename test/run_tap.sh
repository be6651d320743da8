#!/usr/bin/env bash
# run_tap.sh [OUTDIR] [TEST...] - run the TAP tests (test/t/*.pl) with prove
# against the installed PostgreSQL 15 and the installed opus_pg, using the
# PostgreSQL::Test::Cluster framework that postgresql-server-dev-15 ships.
#
# Must run as a user that may run initdb (not root).  OUTDIR (default: a new
# temporary directory) receives tmp_check/ with every node's data directory
# and log; it must be writable by the current user.  Each test bounds its own
# waits; PG_TEST_TIMEOUT_DEFAULT bounds PostgreSQL::Test's own waits.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -eq 0 ]; then
	echo "run_tap.sh: run as an unprivileged user (e.g. runuser -u postgres -- $0)" >&2
	exit 2
fi

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
bindir=$("$PG_CONFIG" --bindir)
pgxs=$("$PG_CONFIG" --pgxs)                      # .../lib/pgxs/src/makefiles/pgxs.mk
pgxsdir=$(dirname "$(dirname "$(dirname "$pgxs")")")   # .../lib/pgxs

outdir=${1:-}
[ $# -gt 0 ] && shift
if [ -z "$outdir" ]; then
	outdir=$(mktemp -d "${TMPDIR:-/tmp}/opus_pg_tap.XXXXXX")
fi
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
rm -rf "$outdir/tmp_check"
mkdir -p "$outdir/tmp_check"

export PATH="$bindir:$PATH"
export TESTDIR=$outdir
export PG_REGRESS="$pgxsdir/src/test/regress/pg_regress"
export PG_TEST_TIMEOUT_DEFAULT=${PG_TEST_TIMEOUT_DEFAULT:-60}
export PGPORT=${PGPORT:-6$((RANDOM % 900 + 100))}
unset PGDATA PGHOST PGUSER PGDATABASE PGSERVICE PGOPTIONS

tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
	tests=(test/t/*.pl)
fi

echo "run_tap: prove ${tests[*]} (logs in $outdir/tmp_check/log)"
status=0
prove -I "$pgxsdir/src/test/perl" -I test/t --timer ${PROVE_FLAGS:-} "${tests[@]}" || status=$?

if [ $status -ne 0 ]; then
	# Show the failing tests' own logs so CI output tells why.
	for f in "$outdir"/tmp_check/log/regress_log_*; do
		[ -f "$f" ] || continue
		if grep -q '^not ok' "$f"; then
			echo "----- $f (last 150 lines)"
			tail -n 150 "$f"
		fi
	done
fi
exit $status
