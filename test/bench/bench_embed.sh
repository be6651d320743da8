#!/usr/bin/env bash
# bench_embed.sh - sentence embeddings per second, three ways on the same
# GGUF file and the same texts, in the same run:
#
#   engine  the engine's BERT encoder alone (opus_engine embed --input,
#           model/model_bert.c);
#   sql     the SQL path: SELECT count(*) FROM opus_embed_many(texts, ...)
#           on a throwaway cluster whose supervisor runs the same
#           build/opus_engine (the texts go through the backend, the
#           request slots, the supervisor and the socket; the engine
#           encodes the EMBED requests it reads together);
#   llama   llama.cpp (llama-cpp-python, embedding=True).
#
# Two workloads (test/bench/bench_embed.py texts): 1,000 short texts (10-60
# tokens) and 200 long ones (about 400 tokens).  Each side loads the model
# once per round (sql: once for the whole run), then embeds all texts of a
# workload in one call (the engine packs inputs into forward passes of up
# to 1,024 tokens, its default, and the SQL path's model is declared with the same
# max_batch_tokens; llama.cpp batches across inputs up to n_batch = 512
# tokens, its default: a larger batch costs it more, as every token of a
# batch attends over the whole batch under a mask); only that call is timed
# (tokenizing included, loading not; sql: timed inside the server with
# clock_timestamp() around the query).  Rounds alternate the three sides so
# a drifting load biases none; every figure is the median over ROUNDS
# rounds; the load average is printed before and after the table (the
# machine may be shared: rerun when it is busy).
#
# usage: [PG_CONFIG=...] test/bench/bench_embed.sh
# Env: MODEL (default models/all-MiniLM-L6-v2.gguf, make model-minilm),
# THREADS (2), ROUNDS (3), WINDOW (opus_embed_many's window, default 64),
# N_SHORT / N_LONG (1000 / 200: the first N of each workload, for a quick
# run on a busy machine), SKIP_LLAMA (1 = no llama.cpp), SKIP_SQL (1 = no SQL path; it needs the
# extension installed with PG_CONFIG's server, and pg_ctl), PORT (55439).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
MODEL=${MODEL:-models/all-MiniLM-L6-v2.gguf}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
WINDOW=${WINDOW:-64}
N_SHORT=${N_SHORT:-1000}
N_LONG=${N_LONG:-200}
PORT=${PORT:-55439}
PG_CONFIG=${PG_CONFIG:-pg_config}
ENGINE=build/opus_engine
[ -f "$MODEL" ] || { echo "bench_embed: $MODEL absent (make model-minilm)" >&2; exit 1; }
[ -x "$ENGINE" ] || make -s "$ENGINE"
tmp=$(mktemp -d /tmp/bench_embed.XXXXXX)
chmod 755 "$tmp"
as_pg() {
	if [ "$(id -u)" = 0 ]; then
		su postgres -s /bin/bash -c "$1"
	else
		bash -c "$1"
	fi
}
sql_up=0
cleanup() {
	if [ $sql_up = 1 ]; then
		as_pg "'$bindir/pg_ctl' -D '$tmp/data' -m immediate stop" >/dev/null 2>&1 || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
python3 test/bench/bench_embed.py texts "$tmp" "$N_SHORT" "$N_LONG"

# ---- the SQL path: a throwaway cluster serving MODEL as "bench" ----------
if [ "${SKIP_SQL:-0}" != 1 ]; then
	bindir=$("$PG_CONFIG" --bindir)
	[ "$(id -u)" = 0 ] && chown postgres "$tmp"
	cp "$MODEL" "$tmp/model.gguf"
	chmod 644 "$tmp/model.gguf" "$tmp"/*.txt
	as_pg "'$bindir/initdb' -D '$tmp/data' -A trust -U postgres --no-locale -E UTF8" >/dev/null
	cat >>"$tmp/data/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$tmp'
shared_preload_libraries = 'opus_pg'
opus.threads = $THREADS
opus.max_requests = 256
opus.max_async_requests_per_role = 192
opus.engine_path = '$repo/$ENGINE'
opus.models = 'bench=$tmp/model.gguf;threads=$THREADS;max_batch_tokens=1024'
opus.log_requests = off
EOF
	as_pg "'$bindir/pg_ctl' -D '$tmp/data' -l '$tmp/log' -w start" >/dev/null
	sql_up=1
	psql=("$bindir/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$tmp" -p "$PORT" -U postgres -d postgres)
	"${psql[@]}" >/dev/null <<EOF
CREATE EXTENSION opus_pg;
CREATE TABLE bench_texts (w text, i int, t text);
\copy bench_texts (t) FROM '$tmp/short.txt'
UPDATE bench_texts SET w = 'short' WHERE w IS NULL;
\copy bench_texts (t) FROM '$tmp/long.txt'
UPDATE bench_texts SET w = 'long' WHERE w IS NULL;
CREATE FUNCTION bench_sql(workload text, win int) RETURNS float8 LANGUAGE plpgsql AS \$\$
DECLARE
    a text[];
    t0 timestamptz;
    n int;
BEGIN
    SELECT array_agg(t ORDER BY ctid) INTO a FROM bench_texts WHERE w = workload;
    t0 := clock_timestamp();
    SELECT count(*) INTO n FROM opus_embed_many(a, model => 'bench', "window" => win);
    IF n <> cardinality(a) THEN
        RAISE EXCEPTION 'bench_sql: % rows for % texts', n, cardinality(a);
    END IF;
    RETURN extract(epoch FROM clock_timestamp() - t0);
END \$\$;
EOF
	for _ in $(seq 600); do
		[ "$("${psql[@]}" -c "SELECT state FROM opus_models WHERE name = 'bench'")" = ready ] && break
		sleep 0.1
	done
	"${psql[@]}" -c "SELECT count(*) FROM opus_embed_many(ARRAY['warm up'], model => 'bench')" >/dev/null
fi

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
printf '%-8s %5s %6s | %10s %8s | %10s %8s %7s | %10s %8s %7s\n' workload texts tokens \
	"engine e/s" "tok/s" "sql e/s" "tok/s" "sql/eng" "llama e/s" "tok/s" "eng/lla"
for w in short long; do
	: >"$tmp/opus.$w"
	: >"$tmp/sql.$w"
	: >"$tmp/llama.$w"
	for _ in $(seq "$ROUNDS"); do
		# "embed: N texts, T tokens, S s, ..."
		"$ENGINE" embed --model "$MODEL" --threads "$THREADS" --quiet --input "$tmp/$w.txt" \
			2>&1 | awk '/^embed:/ { gsub(",", ""); print $6, $2, $4 }' >>"$tmp/opus.$w"
		if [ $sql_up = 1 ]; then
			"${psql[@]}" -c "SELECT bench_sql('$w', $WINDOW)" >>"$tmp/sql.$w"
		fi
		if [ "${SKIP_LLAMA:-0}" != 1 ]; then
			python3 test/bench/bench_embed.py llama "$MODEL" "$tmp/$w.txt" "$THREADS" \
				>>"$tmp/llama.$w" 2>/dev/null
		fi
	done
	n=$(head -1 "$tmp/opus.$w" | cut -d' ' -f2)
	ntok=$(head -1 "$tmp/opus.$w" | cut -d' ' -f3)
	os=$(cut -d' ' -f1 "$tmp/opus.$w" | median)
	ss=nan
	ls=nan
	[ -s "$tmp/sql.$w" ] && ss=$(median <"$tmp/sql.$w")
	[ -s "$tmp/llama.$w" ] && ls=$(cut -d' ' -f1 "$tmp/llama.$w" | median)
	awk -v w="$w" -v n="$n" -v t="$ntok" -v os="$os" -v ss="$ss" -v ls="$ls" '
	function rate(x, k) { return (x == "nan") ? "-" : sprintf("%.1f", k / x) }
	function rtok(x) { return (x == "nan") ? "-" : sprintf("%.0f", t / x) }
	function ratio(a, b) { return (a == "nan" || b == "nan") ? "-" : sprintf("%.2fx", a / b) }
	BEGIN {
		printf "%-8s %5d %6d | %10.1f %8.0f | %10s %8s %7s | %10s %8s %7s\n", w, n, t, n / os, t / os,
			rate(ss, n), rtok(ss), ratio(os, ss), rate(ls, n), rtok(ls), ratio(ls, os) }'
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model $MODEL, $THREADS threads, median of $ROUNDS rounds; sql: opus_embed_many window $WINDOW," \
	"sql/eng = SQL path's rate / engine's, eng/lla = engine's rate / llama.cpp's"
