#!/usr/bin/env bash
# bench_batching.sh - continuous batching under concurrent sessions: opus_pg
# against llama.cpp on the same machine, the same model and the same load.
#
# For each level of concurrency (LEVELS, default 1 4 16 32) pgbench runs
# that many sessions, each calling opus_generate(prompt, max_tokens =>
# TOKENS, temperature => 0) REQS times (prompts drawn from a fixed list of
# 64 open-ended ones, so outputs are long and prefixes are not all shared).
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
# LLAMA_SERVER (path), MODEL (the GGUF llama.cpp loads; default: the
# repository's default model), THREADS (2, llama.cpp's threads; match
# opus.threads), SKIP_LLAMA (1 = opus_pg only).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
LEVELS=${LEVELS:-1 4 16 32}
TOKENS=${TOKENS:-64}
REQS=${REQS:-2}
THREADS=${THREADS:-2}
MODEL=${MODEL:-$repo/models/SmolLM2-135M-Instruct.Q4_1.gguf}
SKIP_LLAMA=${SKIP_LLAMA:-0}

PSQL=(psql -X -q -At -v ON_ERROR_STOP=1 "$@")
now() { date +%s.%N; }
engine_tokens() { "${PSQL[@]}" -c 'SELECT tokens_generated FROM opus_engine'; }

work=$(mktemp -d /tmp/bench_batching.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

# 64 prompts: 16 topics x 4 open-ended forms.
topics=("a lighthouse keeper" "the history of bread" "a robot learning to paint"
	"the water cycle" "a city at night" "how bridges are built" "a lost cat"
	"the first day of school" "volcanoes" "a chess tournament" "the ocean floor"
	"a long train journey" "how bees make honey" "an old library" "the northern lights"
	"a small bakery")
forms=("Write a short story about %s:" "Tell me everything you know about %s."
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
\set p random(1, $n_prompts)
SELECT length(opus_generate(prompt, max_tokens => $TOKENS, temperature => 0)) FROM bench_prompts WHERE id = :p;
INSERT INTO bench_timings SELECT completion_tokens, ttft_ms, engine_ms FROM opus_last_request();
EOF

declare -A O_TOK O_TTFT50 O_TTFT99 O_ITL O_PRE L_TOK L_TTFT50 L_TTFT99 L_ITL
loads=()
for n in $LEVELS; do
	"${PSQL[@]}" -c 'TRUNCATE bench_timings'
	pre0=$("${PSQL[@]}" -c 'SELECT coalesce(preemptions, 0) FROM pg_stat_opus_engine' 2>/dev/null || echo 0)
	t0_tok=$(engine_tokens)
	t0=$(now)
	pgbench -n -f "$work/script.sql" -c "$n" -j "$n" -t "$REQS" "$@" >"$work/pgbench.log" 2>&1 || {
		cat "$work/pgbench.log" >&2
		exit 1
	}
	t1=$(now)
	t1_tok=$(engine_tokens)
	pre1=$("${PSQL[@]}" -c 'SELECT coalesce(preemptions, 0) FROM pg_stat_opus_engine' 2>/dev/null || echo 0)
	sec=$(echo "$t1 - $t0" | bc -l)
	O_TOK[$n]=$(echo "($t1_tok - $t0_tok) / $sec" | bc -l)
	O_PRE[$n]=$((pre1 - pre0))
	read -r O_TTFT50[$n] O_TTFT99[$n] O_ITL[$n] <<<"$("${PSQL[@]}" -F ' ' -c "
		SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_ms),
		       percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_ms),
		       percentile_cont(0.5) WITHIN GROUP (ORDER BY (engine_ms - ttft_ms) / (completion_tokens - 1))
		         FILTER (WHERE completion_tokens > 1)
		FROM bench_timings")"
	loads+=("$(cut -d' ' -f1 /proc/loadavg)")
	printf 'opus_pg   %2d sessions: %7.1f tok/s  ttft p50 %7.1f ms  p99 %7.1f ms  itl p50 %6.1f ms  preemptions %d\n' \
		"$n" "${O_TOK[$n]}" "${O_TTFT50[$n]}" "${O_TTFT99[$n]}" "${O_ITL[$n]:-0}" "${O_PRE[$n]}" >&2
done

llama_mode=none
if [ "$SKIP_LLAMA" != 1 ]; then
	LLAMA_SERVER=${LLAMA_SERVER:-$(command -v llama-server || true)}
	if [ -n "$LLAMA_SERVER" ] && [ -x "$LLAMA_SERVER" ]; then
		llama_mode=server
	elif python3 -c 'import llama_cpp' 2>/dev/null; then
		llama_mode=sequential
	fi
fi
if [ "$llama_mode" != none ]; then
	python3 "$repo/test/bench/bench_batching_llama.py" --mode "$llama_mode" \
		--server-bin "${LLAMA_SERVER:-llama-server}" --model "$MODEL" \
		--prompts "$work/prompts.txt" --levels "$(echo $LEVELS | tr ' ' ,)" \
		--tokens "$TOKENS" --reqs "$REQS" --threads "$THREADS" --logdir "$work" \
		>"$work/llama.txt"
	while read -r line; do
		n=$(sed -E 's/.*clients=([0-9]+).*/\1/' <<<"$line")
		L_TOK[$n]=$(sed -E 's/.*tok_s=([0-9.]+).*/\1/' <<<"$line")
		L_TTFT50[$n]=$(sed -E 's/.*ttft_p50=([0-9.na]+).*/\1/' <<<"$line")
		L_TTFT99[$n]=$(sed -E 's/.*ttft_p99=([0-9.na]+).*/\1/' <<<"$line")
		L_ITL[$n]=$(sed -E 's/.*itl_p50=([0-9.na]+).*/\1/' <<<"$line")
	done < <(grep '^level' "$work/llama.txt")
fi

first=${LEVELS%% *}
echo
echo "continuous batching: opus_generate, ${TOKENS}-token outputs, $REQS requests per session, greedy"
echo "llama.cpp: $llama_mode ($([ "$llama_mode" = server ] && echo "llama-server, one parallel slot per session" || echo "one request at a time"))"
echo "load average during the opus_pg levels: ${loads[*]}  (2 cores shared; rerun when busy)"
echo
printf '| sessions | opus_pg tok/s | x 1 session | ttft p50 ms | ttft p99 ms | itl p50 ms | preempt | llama.cpp tok/s | ttft p50 ms | ttft p99 ms | itl p50 ms | opus/llama |\n'
printf '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for n in $LEVELS; do
	lt=${L_TOK[$n]:-}
	ratio='-'
	if [ -n "$lt" ]; then
		ratio=$(printf '%.2f' "$(echo "${O_TOK[$n]} / $lt" | bc -l)")
	fi
	printf '| %d | %.1f | %.2f | %.0f | %.0f | %.1f | %d | %s | %s | %s | %s | %s |\n' \
		"$n" "${O_TOK[$n]}" "$(echo "${O_TOK[$n]} / ${O_TOK[$first]}" | bc -l)" \
		"${O_TTFT50[$n]}" "${O_TTFT99[$n]}" "${O_ITL[$n]:-0}" "${O_PRE[$n]}" \
		"${lt:--}" "${L_TTFT50[$n]:--}" "${L_TTFT99[$n]:--}" "${L_ITL[$n]:--}" "$ratio"
done
"${PSQL[@]}" -c 'DROP TABLE bench_prompts, bench_timings'
