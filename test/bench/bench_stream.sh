#!/usr/bin/env bash
# bench_stream.sh - streaming latency seen by a client against the engine's
# own, for the same requests (docs/streaming.md):
#
#   client TTFT  arrival of the first row at a libpq single-row-mode client
#                (test/tools/stream_client.c), from sending the query;
#   engine TTFT  the engine's time to first token (timings.ttft_ms of the
#                last chunk: from the engine receiving the request);
#   client ITL   median gap between rows at the client;
#   engine ITL   (engine_ms - ttft_ms) / (completion_tokens - 1).
#
# Each client connection is warmed first with a one-token call (as a pooled
# application connection would be: a new backend's first call loads its
# catalog caches).  RUNS requests at 1 stream, then RUNS rounds of STREAMS
# concurrent streams;
# medians over all requests.  The difference client - engine is what the
# PostgreSQL path adds (parse, slot, supervisor relay, flush).  Not a
# pass/fail test.
#
# usage: [PG_CONFIG=...] [RUNS=20] [STREAMS=16] [TOKENS=32] [OPUS_THREADS=2]
#        [PORT=55447] test/bench/bench_stream.sh
# Needs the extension installed (make install) and the default model.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
PG_CONFIG=${PG_CONFIG:-pg_config}
bindir=$("$PG_CONFIG" --bindir)
RUNS=${RUNS:-20}
STREAMS=${STREAMS:-16}
TOKENS=${TOKENS:-32}
OPUS_THREADS=${OPUS_THREADS:-2}
PORT=${PORT:-55447}

dir=$(mktemp -d /tmp/opus_bs.XXXXXX)
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

cc -O2 -I"$("$PG_CONFIG" --includedir)" test/tools/stream_client.c \
	-L"$("$PG_CONFIG" --libdir)" -lpq -o "$dir/stream_client"
as_pg "'$bindir/initdb' -D '$dir/data' -A trust -U postgres --no-locale -E UTF8" >/dev/null
cat >>"$dir/data/postgresql.conf" <<EOC
port = $PORT
listen_addresses = ''
unix_socket_directories = '$dir'
shared_preload_libraries = 'opus_pg'
opus.threads = $OPUS_THREADS
EOC
as_pg "'$bindir/pg_ctl' -D '$dir/data' -l '$dir/log' -w start" >/dev/null
conn="host=$dir port=$PORT user=postgres dbname=postgres"
"$bindir/psql" -qX "$conn" -c 'CREATE EXTENSION opus_pg' >/dev/null
# Wait for the engine, and warm it up.
for _ in $(seq 1 120); do
	"$bindir/psql" -qXAt "$conn" -c "SELECT opus_generate('Hi', max_tokens => 2)" >/dev/null 2>&1 && break
	sleep 1
done

prompts=("Once upon a time" "The history of the city begins" "In a quiet village by the sea"
	"The recipe for bread is simple:" "Dear friend, I am writing to tell you")
run_round() {	# $1 = concurrent streams, $2 = round number
	local pids=()
	for s in $(seq 1 "$1"); do
		local p=${prompts[$(((s + $2) % ${#prompts[@]}))]}
		STREAM_CLIENT_WARMUP="SELECT opus_generate_stream('Hi', max_tokens => 1)" \
			"$dir/stream_client" "$conn" \
			"SELECT opus_generate_stream_completion('$p', max_tokens => $TOKENS, temperature => 0, seed => $s)" \
			>"$dir/out.$1.$2.$s" &
		pids+=($!)
	done
	wait "${pids[@]}"
}
for r in $(seq 1 "$RUNS"); do run_round 1 "$r"; done
for r in $(seq 1 "$RUNS"); do run_round "$STREAMS" "$r"; done

python3 - "$dir" "$STREAMS" <<'PY'
import glob, json, statistics, sys
d, streams = sys.argv[1], int(sys.argv[2])
def stats(conc):
    ct, et, ci, ei = [], [], [], []
    for f in glob.glob(f"{d}/out.{conc}.*"):
        rows = []
        for line in open(f):
            if line.startswith("ROW "):
                _, t, rest = line.rstrip("\n").split(" ", 2)
                rows.append((float(t), rest))
        if len(rows) < 3:
            continue
        last = json.loads(rows[-1][1].replace("\\\\", "\\"))
        tim, use = last["timings"], last["usage"]
        ct.append(rows[0][0]); et.append(tim["ttft_ms"])
        gaps = [b[0] - a[0] for a, b in zip(rows[:-2], rows[1:-1])]
        if gaps:
            ci.append(statistics.median(gaps))
        n = use["completion_tokens"]
        if n > 1:
            ei.append((tim["engine_ms"] - tim["ttft_ms"]) / (n - 1))
    m = statistics.median
    return len(ct), m(ct), m(et), m(ci), m(ei)
print(f"{'streams':>7} {'requests':>8} {'client TTFT':>12} {'engine TTFT':>12} {'diff':>7} {'client ITL':>11} {'engine ITL':>11} {'diff':>7}")
for conc in (1, streams):
    n, ct, et, ci, ei = stats(conc)
    print(f"{conc:>7} {n:>8} {ct:>10.2f}ms {et:>10.2f}ms {ct-et:>6.2f} {ci:>9.2f}ms {ei:>9.2f}ms {ci-ei:>6.2f}")
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); opus.threads = $OPUS_THREADS; $TOKENS tokens, greedy; medians"
