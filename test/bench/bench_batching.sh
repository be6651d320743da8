#!/usr/bin/env bash
# bench_batching.sh - continuous batching under concurrent sessions: opus_pg
# against llama.cpp on the same machine, the same model and the same load.
#
# For each level of concurrency (LEVELS, default 1 4 16 32) pgbench runs
# that many sessions, each calling opus_generate(prompt, max_tokens =>
# TOKENS, temperature => 0) REQS times.  Request k of session c uses prompt
# (c * REQS + k) mod 64 of a fixed list of open-ended prompts (greedy
# continuations of them run the full TOKENS), so every level and both
# engines see the same prompts and prefixes are not all shared.
# Each call's own timings come from opus_last_request() in the same
# session.  Reported per level:
#
#   tok/s     aggregate generated tokens per second (the engine's own count
#             of generated tokens over the level's wall-clock time)
#   ttft p50 / p99   time to first token (engine: submit -> first token)
#   itl p50   median over requests of (engine time - ttft) / (tokens - 1)
#
# Then the same load against llama.cpp (test/bench/bench_batching_llama.py):
# llama.cpp's server with LEVEL parallel slots and continuous batching if
# LLAMA_SERVER names a llama-server binary (or one is on PATH), else
# llama-cpp-python serving the sessions one request at a time.  Its times
# are measured by the streaming client.  The table puts both side by side
# with the throughput ratio, the scaling over one session, and the load
# average (the machine may be shared: rerun when it is busy).
#
# usage: test/bench/bench_batching.sh [psql connection options...]
#   e.g. test/bench/bench_batching.sh -h /tmp -p 5432 -d postgres
# Needs a server with opus_pg preloaded, opus.max_requests >= the largest
# level, and pgbench.  Env: LEVELS ("1 4 16 32"), TOKENS (64), REQS (2),
# ROUNDS (3; every figure is the median over rounds),
# LLAMA_SERVER (path), LLAMA_ARGS (extra llama-server options, default
# "--poll 0": no busy-waiting threads, much faster on a shared machine),
# MODEL (the GGUF llama.cpp loads; default: the repository's default model),
# THREADS (llama.cpp's threads; default: the server's opus.threads),
# SKIP_LLAMA (1 = opus_pg only).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
LEVELS=${LEVELS:-1 4 16 32}
TOKENS=${TOKENS:-64}
REQS=${REQS:-2}
THREADS=${THREADS:-}
LLAMA_ARGS=${LLAMA_ARGS:---poll 0}
MODEL=${MODEL:-$repo/models/SmolLM2-135M-Instruct.Q4_1.gguf}
SKIP_LLAMA=${SKIP_LLAMA:-0}
ROUNDS=${ROUNDS:-3}
CONN=("$@")

PSQL=(psql -X -q -At -v ON_ERROR_STOP=1 "$@")
now() { date +%s.%N; }
engine_tokens() { "${PSQL[@]}" -c 'SELECT tokens_generated FROM opus_engine'; }
# llama.cpp gets the engine's thread count unless THREADS says otherwise
THREADS=${THREADS:-$("${PSQL[@]}" -c 'SHOW opus.threads')}
[ "$THREADS" = 0 ] && THREADS=$(nproc)

work=$(mktemp -d /tmp/bench_batching.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

# 64 prompts: 16 topics x 4 open-ended forms.
topics=("a lighthouse keeper" "the history of bread" "a robot learning to paint"
	"the water cycle" "a city at night" "how bridges are built" "a lost cat"
	"the first day of school" "volcanoes" "a chess tournament" "the ocean floor"
	"a long train journey" "how bees make honey" "an old library" "the northern lights"
	"a small bakery")
forms=("Write a short story about %s:" "Once upon a time, %s"
	"Here is a detailed description of %s:" "Explain to a child %s, step by step:")
: >"$work/prompts.txt"
for t in "${topics[@]}"; do
	for f in "${forms[@]}"; do
		printf "$f\n" "$t" >>"$work/prompts.txt"
	done
done

"${PSQL[@]}" <<EOF
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS opus_pg;
DROP TABLE IF EXISTS bench_prompts, bench_timings;
CREATE TABLE bench_prompts (id integer PRIMARY KEY, prompt text NOT NULL);
CREATE UNLOGGED TABLE bench_timings (completion_tokens int, ttft_ms float8, engine_ms float8);
EOF
n_prompts=$(wc -l <"$work/prompts.txt")
sed "s/'/''/g; s/.*/INSERT INTO bench_prompts SELECT coalesce(max(id), 0) + 1, '&' FROM bench_prompts;/" \
	"$work/prompts.txt" | "${PSQL[@]}"
"${PSQL[@]}" -c "SELECT opus_generate('warm up', max_tokens => 2) IS NOT NULL" >/dev/null

cat >"$work/script.sql" <<EOF
\set k :k + 1
\set p 1 + (:client_id * $REQS + :k - 1) % $n_prompts
SELECT length(opus_generate(prompt, max_tokens => $TOKENS, temperature => 0)) FROM bench_prompts WHERE id = :p;
INSERT INTO bench_timings SELECT completion_tokens, ttft_ms, engine_ms FROM opus_last_request();
EOF

# results: one line per (engine, round, level) in $work/results:
#   engine level tok_s ttft_p50 ttft_p99 itl_p50 preemptions
: >"$work/results"
run_opus_level() {
	local n=$1 pre0 pre1 t0_tok t1_tok t0 t1 sec tok stats
	"${PSQL[@]}" -c 'TRUNCATE bench_timings'
	pre0=$("${PSQL[@]}" -c 'SELECT coalesce(preemptions, 0) FROM pg_stat_opus_engine')
	t0_tok=$(engine_tokens)
	t0=$(now)
	pgbench -n -f "$work/script.sql" -D k=0 -c "$n" -j "$n" -t "$REQS" "${CONN[@]}" >"$work/pgbench.log" 2>&1 || {
		cat "$work/pgbench.log" >&2
		exit 1
	}
	t1=$(now)
	t1_tok=$(engine_tokens)
	pre1=$("${PSQL[@]}" -c 'SELECT coalesce(preemptions, 0) FROM pg_stat_opus_engine')
	sec=$(echo "$t1 - $t0" | bc -l)
	tok=$(echo "($t1_tok - $t0_tok) / $sec" | bc -l)
	stats=$("${PSQL[@]}" -F ' ' -c "
		SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_ms)::numeric, 1),
		       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_ms)::numeric, 1),
		       round(coalesce(percentile_cont(0.5) WITHIN GROUP
		         (ORDER BY (engine_ms - ttft_ms) / (completion_tokens - 1))
		         FILTER (WHERE completion_tokens > 1), 0)::numeric, 1)
		FROM bench_timings")
	echo "opus $n $(printf '%.1f' "$tok") $stats $((pre1 - pre0))" >>"$work/results"
	printf 'round %d opus_pg   %2d sessions: %7.1f tok/s  ttft p50/p99 %s ms  itl p50 %s ms  preemptions %d\n' \
		"$round" "$n" "$tok" "$(cut -d' ' -f1,2 <<<"$stats" | tr ' ' /)" "$(cut -d' ' -f3 <<<"$stats")" \
		"$((pre1 - pre0))" >&2
}

llama_mode=none
if [ "$SKIP_LLAMA" != 1 ]; then
	LLAMA_SERVER=${LLAMA_SERVER:-$(command -v llama-server || true)}
	if [ -n "$LLAMA_SERVER" ] && [ -x "$LLAMA_SERVER" ]; then
		llama_mode=server
	elif python3 -c 'import llama_cpp' 2>/dev/null; then
		llama_mode=sequential
	fi
fi
run_llama_round() {
	python3 "$repo/test/bench/bench_batching_llama.py" --mode "$llama_mode" \
		--server-bin "${LLAMA_SERVER:-llama-server}" --model "$MODEL" \
		--prompts "$work/prompts.txt" --levels "$(echo $LEVELS | tr ' ' ,)" \
		--tokens "$TOKENS" --reqs "$REQS" --threads "$THREADS" --logdir "$work" \
		--server-args "$LLAMA_ARGS" |
		while read -r line; do
			[[ $line == level* ]] || continue
			get() { sed -E "s/.*$1=([0-9.a-z]+).*/\1/" <<<"$line"; }
			echo "llama $(get clients) $(get tok_s) $(get ttft_p50) $(get ttft_p99) $(get itl_p50) 0" >>"$work/results"
			echo "round $round llama.cpp $line" >&2
		done
}

loads=()
for round in $(seq 1 "$ROUNDS"); do
	for n in $LEVELS; do
		run_opus_level "$n"
	done
	loads+=("$(cut -d' ' -f1 /proc/loadavg)")
	if [ "$llama_mode" != none ]; then
		run_llama_round
		loads+=("$(cut -d' ' -f1 /proc/loadavg)")
	fi
done

# median of column COL over the rounds of (engine, level)
med() {
	awk -v e="$1" -v n="$2" -v c="$3" '$1 == e && $2 == n { v[k++] = $c }
		END { if (k == 0) { print "-"; exit }
		      for (i = 0; i < k; i++) for (j = i + 1; j < k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
		      print (k % 2) ? v[(k - 1) / 2] : (v[k / 2 - 1] + v[k / 2]) / 2 }' "$work/results"
}

first=${LEVELS%% *}
echo
echo "continuous batching: opus_generate, ${TOKENS}-token outputs, $REQS requests per session, greedy;"
echo "medians of $ROUNDS rounds (opus_pg then llama.cpp in each round)"
echo "llama.cpp: $llama_mode ($([ "$llama_mode" = server ] && echo "llama-server $LLAMA_ARGS, one parallel slot per session, continuous batching" || echo "one request at a time")); $THREADS thread(s) each"
echo "load average (1 min) after each half-round: ${loads[*]}  ($(nproc) cores; rerun when busy)"
echo
printf '| sessions | opus_pg tok/s | x 1 session | ttft p50 ms | ttft p99 ms | itl p50 ms | preempt | llama.cpp tok/s | ttft p50 ms | ttft p99 ms | itl p50 ms | opus/llama |\n'
printf '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
base=$(med opus "$first" 3)
for n in $LEVELS; do
	ot=$(med opus "$n" 3)
	lt=$(med llama "$n" 3)
	ratio='-'
	[ "$lt" != - ] && ratio=$(printf '%.2f' "$(echo "$ot / $lt" | bc -l)")
	printf '| %d | %.1f | %.2f | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' \
		"$n" "$ot" "$(echo "$ot / $base" | bc -l)" "$(med opus "$n" 4)" "$(med opus "$n" 5)" \
		"$(med opus "$n" 6)" "$(med opus "$n" 7)" "$lt" "$(med llama "$n" 4)" \
		"$(med llama "$n" 5)" "$(med llama "$n" 6)" "$ratio"
done
"${PSQL[@]}" -c 'DROP TABLE bench_prompts, bench_timings'
