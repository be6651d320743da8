#!/usr/bin/env bash
# bench_embed_job.sh - an embedding job (opus_job_create with "embed": true,
# docs/embeddings.md) against opus_embed_many over the same rows, in the
# same run on the same server and model.
#
# ROWS short texts (10-60 tokens, as bench_embed.sh's short workload) are
# embedded, each mode ROUNDS times, the modes alternated so that a machine
# whose load drifts biases none:
#   many       SELECT count(*) FROM opus_embed_many(ARRAY(all texts), model,
#              "window" => WINDOW)           (one statement, nothing written)
#   job/B      CALL opus_job_run over a job of batch_tokens B, for each B in
#              BUDGETS (rows in flight bounded by B estimated tokens;
#              results committed to a real[] table every commit_every rows)
# A job is reset (opus_job_reset(failed_only => false)) before each round, so
# every round embeds every row again.  Prints rows per second (the median
# of the rounds) and the ratio to opus_embed_many; not a pass/fail test.
#
# usage: test/bench/bench_embed_job.sh [psql connection options...]
# Needs opus_pg preloaded with the model declared in opus.models (default
# name minilm: 'minilm = all-MiniLM-L6-v2', make model-minilm before make
# install).  Env: MODEL (minilm), ROWS (400), ROUNDS (3), WINDOW (16),
# BUDGETS ("512 4096").
set -euo pipefail
MODEL=${MODEL:-minilm}
ROWS=${ROWS:-400}
ROUNDS=${ROUNDS:-3}
WINDOW=${WINDOW:-16}
BUDGETS=${BUDGETS:-512 4096}

PSQL=(psql -X -q -At -v ON_ERROR_STOP=1 "$@")
now() { date +%s.%N; }

"${PSQL[@]}" >/dev/null <<EOF
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS opus_pg;
SELECT opus_job_drop(name, drop_target => true) FROM opus_job WHERE name LIKE 'bench_embed_%';
DROP TABLE IF EXISTS bench_embed_src;
CREATE TABLE bench_embed_src (id integer PRIMARY KEY, body text);
-- 10-60 tokens: a sentence plus 0-45 more words
INSERT INTO bench_embed_src
SELECT i, 'Note ' || i || ' is about ' || (ARRAY['databases', 'cats', 'the weather', 'tax filings', 'music'])[1 + i % 5]
          || ' and ' || (SELECT coalesce(string_agg((ARRAY['index', 'table', 'query', 'river', 'garden', 'engine', 'window',
                                                  'paper', 'signal', 'market'])[1 + (i * 7 + k) % 10], ' '), 'more')
                         FROM generate_series(1, (i * 13) % 46) AS k)
FROM generate_series(1, $ROWS) AS i;
SELECT array_length(opus_embed('warm up', '$MODEL', input_type => 'document'), 1);
EOF
for b in $BUDGETS; do
	"${PSQL[@]}" >/dev/null -c "SELECT opus_job_create('bench_embed_$b', 'bench_embed_src', '{id}', '{{body}}',
		'bench_embed_out_$b', target_column => 'v',
		options => '{\"embed\": true, \"model\": \"$MODEL\", \"batch_tokens\": $b}')"
done
tokens=$("${PSQL[@]}" -c "SELECT sum(m.n) FROM (SELECT (opus_result_completion(opus_submit_embed(body, '$MODEL', input_type => 'document'))#>>'{usage,prompt_tokens}')::int AS n FROM bench_embed_src LIMIT 50) AS m")

declare -A secs
run_many() {
	"${PSQL[@]}" >/dev/null -c "SELECT count(*) FROM opus_embed_many(ARRAY(SELECT body FROM bench_embed_src ORDER BY id), '$MODEL', \"window\" => $WINDOW, input_type => 'document')"
}
run_job() {
	"${PSQL[@]}" >/dev/null -c "SELECT opus_job_reset('bench_embed_$1', failed_only => false)"
	"${PSQL[@]}" >/dev/null -c "CALL opus_job_run('bench_embed_$1')"
}
for r in $(seq 1 "$ROUNDS"); do
	t0=$(now); run_many; t1=$(now)
	secs[many]+="$(echo "$t1 - $t0" | bc -l) "
	for b in $BUDGETS; do
		t0=$(now); run_job "$b"; t1=$(now)
		secs[job_$b]+="$(echo "$t1 - $t0" | bc -l) "
	done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

many_s=$(echo "${secs[many]}" | median)
echo "embedding $ROWS texts (first 50: $tokens tokens) with model $MODEL, $ROUNDS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| mode | seconds (median) | rows/s | vs opus_embed_many |\n|---|---:|---:|---:|\n'
printf '| opus_embed_many (window %s) | %.2f | %.1f | 1.00 |\n' "$WINDOW" "$many_s" "$(echo "$ROWS / $many_s" | bc -l)"
for b in $BUDGETS; do
	s=$(echo "${secs[job_$b]}" | median)
	printf '| job, batch_tokens %s | %.2f | %.1f | %.2f |\n' "$b" "$s" "$(echo "$ROWS / $s" | bc -l)" "$(echo "$many_s / $s" | bc -l)"
done
"${PSQL[@]}" >/dev/null -c "SELECT count(*) FROM (SELECT opus_job_drop(name, drop_target => true) FROM opus_job WHERE name LIKE 'bench_embed_%') AS d; DROP TABLE bench_embed_src"
