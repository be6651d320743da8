#!/usr/bin/env bash
# bench_many_memory.sh - backend memory of a set-based call against the
# number of inputs (issue 14: "memory must not grow with the input count").
#
#   PSQL="psql -h HOST -p PORT -d DB" bash test/bench/bench_many_memory.sh [N...]
#
# For each N, runs opus_generate_many over N one-token prompts and samples the
# backend's RssAnon (/proc/PID/status, private memory: not shared buffers)
# every 0.2 s.  Prints N, the input array's size, the RssAnon before the call,
# its peak, and peak minus before per 1,000 rows.  Flat memory: the growth
# does not scale with N beyond the input array itself.  Run on the server's
# machine (it reads /proc).  Timing plays no part in the numbers.
set -euo pipefail
PSQL=${PSQL:-psql}
NS=("$@")
[ ${#NS[@]} -eq 0 ] && NS=(500 2000)
PROMPT=${PROMPT:-Hi}
printf '%8s %12s %12s %12s %14s\n' rows input_kB before_kB peak_kB growth_kB/1k
for n in "${NS[@]}"; do
	fifo=$(mktemp -u); mkfifo "$fifo"
	# one session: report its pid, wait for the go, run the call
	( $PSQL -XAtq -c "SELECT pg_backend_pid()" -c "SELECT pg_sleep(1)" \
		-c "SELECT count(*) FROM opus_generate_many(array_fill('$PROMPT'::text, ARRAY[$n]), max_tokens => 1, temperature => 0, seed => 1)" \
		>"$fifo" ) &
	job=$!
	exec 3<"$fifo"
	read -r pid <&3
	before=$(awk '/^RssAnon/ {print $2}' /proc/$pid/status)
	peak=$before
	while kill -0 $job 2>/dev/null; do
		r=$(awk '/^RssAnon/ {print $2}' /proc/$pid/status 2>/dev/null || true)
		[ -n "$r" ] && [ "$r" -gt "$peak" ] && peak=$r
		sleep 0.2
	done
	read -r count <&3 || true
	exec 3<&-; rm -f "$fifo"
	input=$($PSQL -XAtqc "SELECT pg_column_size(array_fill('$PROMPT'::text, ARRAY[$n])) / 1024")
	printf '%8s %12s %12s %12s %14.1f\n' "$n" "$input" "$before" "$peak" \
		"$(echo "($peak - $before) * 1000 / $n" | bc -l)"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
