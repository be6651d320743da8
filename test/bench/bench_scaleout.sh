#!/usr/bin/env bash
# bench_scaleout.sh - the same distributed job on 1 data node and on 2
# (test/cluster/setup.sh; each engine with THREADS threads, 1 by default so
# that two nodes on a 2-core machine are a fair comparison), through
# PL/Proxy: rows/s and completion tokens/s, and the proxy's overhead per
# call (CALLS one-token greedy calls through opus_generate_on against the
# same calls made directly on a node).  Prints a table; not a pass/fail test.
#
# usage: [ROWS=1000] [TOKENS=8] [THREADS=1] [CALLS=50] [STEP=64] [CONC=16] [PG_CONFIG=...]
#        test/bench/bench_scaleout.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROWS=${ROWS:-1000}
TOKENS=${TOKENS:-8}
THREADS=${THREADS:-1}
CALLS=${CALLS:-50}
STEP=${STEP:-64}
CONC=${CONC:-16}
PG_CONFIG=${PG_CONFIG:-pg_config}
bindir=$("$PG_CONFIG" --bindir)
export PG_CONFIG THREADS
base=$(mktemp -d /tmp/opus_bso.XXXXXX)
chmod 755 "$base"
trap 'for n in 1 2; do DIR=$base/c$n NODES=$n test/cluster/setup.sh destroy >/dev/null 2>&1 || true; done; rm -rf "$base"' EXIT INT TERM

results=()
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for n in 1 2; do
	export DIR=$base/c$n NODES=$n PORT=$((55600 + 10 * n))
	test/cluster/setup.sh start >/dev/null
	test/cluster/setup.sh load "$ROWS"
	q() { "$bindir/psql" -qXAt -h "$DIR" -p "$1" -U postgres -d postgres -v ON_ERROR_STOP=1 -c "$2"; }
	q "$PORT" "SELECT count(*) FROM opus_cluster_job_create('bench', 'docs', '{id}', '{{body}}. Describe it:',
		'docs_out', options => '{\"max_tokens\": $TOKENS, \"temperature\": 0}', concurrency => $CONC)" >/dev/null
	t0=$(date +%s.%N)
	q "$PORT" "CALL opus_cluster_job_run('bench', step_rows => $STEP)"
	t1=$(date +%s.%N)
	ctok=0
	for i in $(seq 0 $((n - 1))); do
		c=$(q $((PORT + 1 + i)) "SELECT COALESCE(sum(completion_tokens), 0) FROM opus_job_item WHERE state = 'done'" 2>/dev/null || echo 0)
		ctok=$((ctok + ${c:-0}))
	done
	# Proxy overhead: the same one-token calls via the proxy and directly.
	tp0=$(date +%s.%N)
	q "$PORT" "SELECT count(opus_generate_on(g::text, 'Hi', max_tokens => 1, temperature => 0)) FROM generate_series(1, $CALLS) g" >/dev/null
	tp1=$(date +%s.%N)
	q $((PORT + 1)) "SELECT count(opus_generate('Hi', max_tokens => 1, temperature => 0)) FROM generate_series(1, $CALLS) g" >/dev/null
	tp2=$(date +%s.%N)
	results+=("$n $t0 $t1 $ctok $tp0 $tp1 $tp2")
	test/cluster/setup.sh destroy >/dev/null
done
python3 - "$ROWS" "$CALLS" "${results[@]}" <<'PY'
import sys
rows, calls = int(sys.argv[1]), int(sys.argv[2])
print(f"{'nodes':>5} {'rows':>6} {'seconds':>8} {'rows/s':>8} {'tokens/s':>9} {'speedup':>8} {'proxy ms/call':>14} {'direct ms/call':>15} {'overhead':>9}")
base = None
for r in sys.argv[3:]:
    n, t0, t1, ctok, tp0, tp1, tp2 = r.split()
    n = int(n); sec = float(t1) - float(t0); ctok = int(ctok)
    rps = rows / sec
    base = base or rps
    px = (float(tp1) - float(tp0)) * 1000 / calls
    dr = (float(tp2) - float(tp1)) * 1000 / calls
    print(f"{n:>5} {rows:>6} {sec:>8.1f} {rps:>8.2f} {ctok / sec:>9.1f} {rps / base:>7.2f}x {px:>14.2f} {dr:>15.2f} {px - dr:>8.2f}")
PY
echo "load average: $load0 before, $(cut -d' ' -f1-3 /proc/loadavg) after; opus.threads = $THREADS per node; $TOKENS tokens per row, greedy; step_rows $STEP, concurrency $CONC per node"
