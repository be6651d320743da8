#!/usr/bin/env bash
# bench_models.sh - several models (docs/models.md) on a throwaway cluster:
#
#   1. resident memory of the engines with one model, then with two;
#   2. throughput of SESSIONS sessions on model a alone, on b alone, and on
#      both at once (half the sessions each);
#   3. a live swap of model b under SESSIONS-session load: requests failed
#      (must be 0) and p50/p99 latency before, during and after the swap.
#
# Next to 2, the same load against llama.cpp (test/bench/bench_models_llama.py),
# served as llama.cpp's router and Ollama serve several models, one process
# per model: a alone, b alone, then both processes at once (half the
# sessions each), each with OPUS_THREADS threads as each engine has.  The
# process is llama.cpp's server with one parallel slot per session and
# continuous batching if LLAMA_SERVER names a llama-server binary (or one is
# on PATH), else llama-cpp-python serving its sessions one request at a time
# (LLAMA=0: skip).  The table puts both side by side with the ratio of
# requests per second (opus_pg / llama.cpp).
#
# Model a is the default model; b and the swap target are variants made
# with `opus_engine quantize` (Q4_0 and Q8_0 of the same weights, so their
# greedy outputs differ).  Every request: a short story prompt that starts
# with its own number (so no two share a cached prefix, here or in
# llama.cpp), max_tokens TOKENS, greedy; tokens per second count the
# tokens generated (usage.completion_tokens).  Prints tables; not a
# pass/fail test.
#
# usage: [PG_CONFIG=...] [ENGINE=build/opus_engine] [SESSIONS=16]
#        [PHASE=10] [TOKENS=16] [OPUS_THREADS=2] [PORT=55437]
#        [LLAMA=1] [LLAMA_SERVER=path] test/bench/bench_models.sh
# Needs the extension installed (make install) and the default model
# (make model).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
PG_CONFIG=${PG_CONFIG:-pg_config}
bindir=$("$PG_CONFIG" --bindir)
ENGINE=${ENGINE:-$repo/build/opus_engine}
SESSIONS=${SESSIONS:-16}
PHASE=${PHASE:-10}
TOKENS=${TOKENS:-16}
OPUS_THREADS=${OPUS_THREADS:-2}
PORT=${PORT:-55437}
MODEL=${MODEL:-$repo/models/SmolLM2-135M-Instruct.Q4_1.gguf}
# greedy, this continues for well over 16 tokens (the default model's
# answer to "Write a short story about a robot." is an immediate EOS)
PROMPT='Once upon a time, in a small village by the sea, there lived a robot named Unit 17. Every morning the robot'

[ -x "$ENGINE" ] || { echo "$0: $ENGINE is not an executable (make)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "$0: $MODEL is missing (make model)" >&2; exit 1; }
dir=$(mktemp -d /tmp/opus_bm.XXXXXX)
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

"$ENGINE" quantize "$MODEL" "$dir/b_q4_0.gguf" q4_0 >/dev/null 2>&1
"$ENGINE" quantize "$MODEL" "$dir/b_q8_0.gguf" q8_0 >/dev/null 2>&1
chmod 644 "$dir"/*.gguf

as_pg "'$bindir/initdb' -D '$dir/data' -A trust -U postgres --no-locale -E UTF8" >/dev/null
cat >>"$dir/data/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$dir'
max_connections = 80
shared_preload_libraries = 'opus_pg'
opus.threads = $OPUS_THREADS
opus.max_requests = 64
opus.engine_path = '$ENGINE'
opus.model = '$MODEL'
opus.log_requests = off
EOF
as_pg "'$bindir/pg_ctl' -D '$dir/data' -l '$dir/log' -w start" >/dev/null
psql=("$bindir/psql" -X -q -At -h "$dir" -p "$PORT" -U postgres -d postgres)
q() { "${psql[@]}" -c "$1"; }
q "CREATE EXTENSION opus_pg"
q "CREATE UNLOGGED TABLE lat (phase text, model text, t0 timestamptz, ms double precision, ok boolean, tokens int)"
q "CREATE UNLOGGED TABLE llama (phase text, model text, requests int, tokens int, p50_ms double precision)"
wait_ready() {
	for _ in $(seq 1 600); do
		[ "$(q "SELECT count(*) FROM opus_models WHERE state = 'ready'")" = "$1" ] && return 0
		sleep 0.1
	done
	echo "$0: models not ready" >&2; exit 1
}
wait_ready 1
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; $SESSIONS sessions; $TOKENS tokens per request; $PHASE s per phase"

# session PHASE MODEL SECONDS: a loop of greedy requests, each timed
session() {
	"${psql[@]}" -c "DO \$\$ DECLARE t0 timestamptz; ok boolean; n int; k int := 0; BEGIN
	  WHILE clock_timestamp() < now() + interval '$3 s' LOOP
	    t0 := clock_timestamp();
	    k := k + 1;
	    BEGIN
	      n := (opus_completion(format('Story %s-%s: $PROMPT', pg_backend_pid(), k),
	                            max_tokens => $TOKENS, temperature => 0,
	                            model => nullif('$2', 'default'))->'usage'->>'completion_tokens')::int;
	      ok := true;
	    EXCEPTION WHEN OTHERS THEN ok := false; n := 0;
	    END;
	    INSERT INTO lat VALUES ('$1', '$2', t0, extract(epoch FROM clock_timestamp() - t0) * 1000, ok, n);
	  END LOOP; END \$\$" >/dev/null
}
run_phase() {	# run_phase NAME SECONDS MODEL...  (sessions spread over the models)
	local name=$1 secs=$2; shift 2
	local models=("$@") pids=() k
	for k in $(seq 0 $((SESSIONS - 1))); do
		session "$name" "${models[$((k % ${#models[@]}))]}" "$secs" &
		pids+=($!)
	done
	wait "${pids[@]}"
}

# 1. memory (after a generation, so the weights are touched)
q "SELECT opus_generate('Hello', max_tokens => 4)" >/dev/null
rss_one=$(q "SELECT sum(rss_bytes) FROM opus_models")
q "ALTER SYSTEM SET opus.models = 'b=$dir/b_q4_0.gguf'" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
wait_ready 2
q "SELECT opus_generate('Hello', max_tokens => 4, model => 'b')" >/dev/null
q "SELECT opus_generate('Hello', max_tokens => 4)" >/dev/null

# 2. throughput
run_phase a_alone "$PHASE" default
run_phase b_alone "$PHASE" b
run_phase both "$PHASE" default b
rss_two=$(q "SELECT sum(rss_bytes) FROM opus_models")
echo
echo "resident memory of the engines (RSS, weights mapped + KV arena touched)"
{ echo "model|rss|file|kv_arena"; q "SELECT name, pg_size_pretty(rss_bytes) AS rss, pg_size_pretty(weights_bytes) AS file, pg_size_pretty(kv_cache_bytes) AS kv_arena FROM opus_models ORDER BY name"; } | column -t -s'|'
echo "one model: $(numfmt --to=iec "$rss_one")   two models: $(numfmt --to=iec "$rss_two")"
echo
echo "throughput (requests/s and generated tokens/s over the phase)"
{ echo "phase|model|requests|req_per_s|tok_per_s|p50_ms"; q "SELECT phase, coalesce(model, 'all') AS model, count(*) AS requests,
          round((count(*) / $PHASE.0)::numeric, 2) AS req_per_s,
          round((sum(tokens) / $PHASE.0)::numeric, 1) AS tok_per_s,
          round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p50_ms
   FROM lat WHERE phase IN ('a_alone', 'b_alone', 'both') GROUP BY GROUPING SETS ((phase, model), (phase))
   HAVING model IS NOT NULL OR phase = 'both' ORDER BY phase, model NULLS LAST"; } | column -t -s'|'

# 2b. the same against llama.cpp, one process per model
llama_mode=none
if [ "${LLAMA:-1}" != 0 ]; then
	LLAMA_SERVER=${LLAMA_SERVER:-$(command -v llama-server || true)}
	if [ -n "$LLAMA_SERVER" ] && [ -x "$LLAMA_SERVER" ]; then
		llama_mode=server
	elif python3 -c 'import llama_cpp' 2>/dev/null; then
		llama_mode=sequential
	fi
fi
llama_phase() {	# llama_phase NAME LABEL=FILE...  (the sessions split over them)
	local name=$1; shift
	local per=$((SESSIONS / $#)) pids=() k=0 spec label
	rm -f "$dir"/llama-go "$dir"/llama-ready-*
	for spec in "$@"; do
		label=${spec%%=*}
		python3 "$repo/test/bench/bench_models_llama.py" --mode "$llama_mode" \
			--server-bin "${LLAMA_SERVER:-llama-server}" --model "${spec#*=}" --label "$label" \
			--ready-file "$dir/llama-ready-$label" --go-file "$dir/llama-go" \
			--sessions "$per" --seconds "$PHASE" --tokens "$TOKENS" --threads "$OPUS_THREADS" --prompt "$PROMPT" \
			--port $((18090 + k)) --logdir "$dir" >"$dir/llama-$name-$label.out" 2>"$dir/llama-$name-$label.err" &
		pids+=($!)
		k=$((k + 1))
	done
	for _ in $(seq 1 3000); do
		[ "$(ls "$dir"/llama-ready-* 2>/dev/null | wc -l)" = $# ] && break
		sleep 0.1
	done
	touch "$dir/llama-go"
	wait "${pids[@]}" || { echo "$0: llama.cpp failed: $(cat "$dir"/llama-"$name"-*.err | tail -3)" >&2; return 0; }
	for spec in "$@"; do
		label=${spec%%=*}
		line=$(grep '^llama ' "$dir/llama-$name-$label.out" || true)
		[ -n "$line" ] || continue
		get() { echo "$line" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
		q "INSERT INTO llama VALUES ('$name', '$label', $(get requests), $(get tokens), $(get p50_ms))"
	done
}
if [ "$llama_mode" != none ]; then
	llama_phase a_alone "default=$MODEL"
	llama_phase b_alone "b=$dir/b_q4_0.gguf"
	llama_phase both "default=$MODEL" "b=$dir/b_q4_0.gguf"
	echo
	echo "the same against llama.cpp ($llama_mode: one process per model, $OPUS_THREADS threads each); ratio = opus_pg req/s / llama.cpp req/s"
	{ echo "phase|model|opus_req_s|opus_tok_s|opus_p50_ms|llama_req_s|llama_tok_s|llama_p50_ms|ratio"
	q "WITH o AS (SELECT phase, model, count(*) AS n, sum(tokens) AS tokens, percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50
	              FROM lat WHERE phase IN ('a_alone', 'b_alone', 'both') GROUP BY phase, model),
	        l AS (SELECT phase, model, requests AS n, tokens, p50_ms AS p50 FROM llama),
	        j AS (SELECT phase, model, o.n AS on_, o.tokens AS ot, o.p50 AS op50, l.n AS ln, l.tokens AS lt, l.p50 AS lp50
	              FROM o FULL JOIN l USING (phase, model)
	              UNION ALL
	              SELECT 'both', 'all', (SELECT sum(n) FROM o WHERE phase = 'both'), (SELECT sum(tokens) FROM o WHERE phase = 'both'), NULL,
	                     (SELECT sum(n) FROM l WHERE phase = 'both'), (SELECT sum(tokens) FROM l WHERE phase = 'both'), NULL)
	   SELECT phase, model,
	          round((on_ / $PHASE.0)::numeric, 2) AS opus_req_s, round((ot / $PHASE.0)::numeric, 1) AS opus_tok_s,
	          round(op50::numeric, 1) AS opus_p50_ms,
	          round((ln / $PHASE.0)::numeric, 2) AS llama_req_s, round((lt / $PHASE.0)::numeric, 1) AS llama_tok_s,
	          round(lp50::numeric, 1) AS llama_p50_ms,
	          round((on_::numeric / nullif(ln, 0)), 2) AS ratio
	   FROM j ORDER BY phase, model = 'all', model"; } | column -t -s'|'
else
	echo
	echo "llama.cpp: skipped (LLAMA=0, or neither llama-server nor llama-cpp-python found)"
fi

# 3. a swap under load
run_phase swap $((3 * PHASE)) b &
load=$!
sleep "$PHASE"
t_swap=$(q "SELECT clock_timestamp()")
q "SELECT opus_model_swap('b', '$dir/b_q8_0.gguf')" >/dev/null
for _ in $(seq 1 600); do
	[ "$(q "SELECT version FROM opus_models WHERE name = 'b'")" = 2 ] && break
	sleep 0.05
done
t_switched=$(q "SELECT clock_timestamp()")
wait $load
for _ in $(seq 1 100); do
	[ "$(q "SELECT state FROM opus_models WHERE name = 'b'")" = ready ] && break
	sleep 0.1
done
echo
echo "swap of model b (Q4_0 -> Q8_0) under $SESSIONS-session load; switch $(q "SELECT round(extract(epoch FROM '$t_switched'::timestamptz - '$t_swap')::numeric, 2)") s after opus_model_swap()"
{ echo "window|requests|failed|p50_ms|p99_ms"; q "SELECT w AS window, count(*) AS requests, count(*) FILTER (WHERE NOT ok) AS failed,
          round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p50_ms,
          round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p99_ms
   FROM (SELECT CASE WHEN t0 < '$t_swap' THEN '1 before'
                     WHEN t0 < '$t_switched' THEN '2 during'
                     ELSE '3 after' END AS w, ms, ok
         FROM lat WHERE phase = 'swap') s
   GROUP BY w ORDER BY w"; } | column -t -s'|'
echo "log: $(grep -o 'model "b" now served.*' "$dir/log" | head -1)"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
