# 020_jobs_restart.pl - a 1,000-row batch job survives an engine kill and a
# PostgreSQL restart in the middle of its run: rerunning completes it with
# exactly one result per source row.
#
# The target table has no unique constraint, so a row written twice would
# show as a duplicate.  While the first run works, a second CALL returns at
# once (one run per job).  The engine is killed mid-run (the requests it held
# fail with 58000 and are retried), then the server is stopped in immediate
# mode (a crash, as far as the run can tell) and started again; the job's
# progress then reads "interrupted", and a rerun finishes it.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $ROWS = 1000;
my $node = opus_node('jobs_restart', conf => "opus.max_requests = 32\n");

$node->safe_psql('postgres', qq{
	CREATE TABLE src (id integer PRIMARY KEY, body text);
	INSERT INTO src SELECT i, 'Row ' || i || ' says' FROM generate_series(1, $ROWS) AS i;
	CREATE TABLE results (id integer, output text);
	SELECT opus_job_create('big', 'src', '{id}', '{{body}}', 'results',
	                       options => '{"max_tokens": 4, "temperature": 0}',
	                       concurrency => 16, commit_every => 32);
});

sub results_count
{
	my ($rc, $out) = psql_state($node, 'SELECT count(*) FROM results', 20);
	return $rc eq '0' && $out =~ /^\d+$/ ? $out + 0 : -1;
}

# The first run, in the background.
my $run = start_query($node, "CALL opus_job_run('big')");
ok(defined poll_until(120, sub { results_count() >= 50 }), 'the first run commits results')
  or diag(slurp_file($node->logfile));
ok(query_running($run), 'the first run is still going');

# A second run while the first is active returns at once, doing nothing.
my $t0 = time;
my $second = wait_query(start_query($node, "CALL opus_job_run('big')"), 30);
is($second->{rc}, 0, 'a second run returns without error') or diag($second->{err});
like($second->{err}, qr/already running/, 'the second run says the job is already running');
cmp_ok(time - $t0, '<', 10, 'the second run returned at once');
my ($rc, $phase) = psql_state($node, "SELECT phase FROM opus_job_progress WHERE job = 'big'");
is($phase, 'generating', 'progress shows the first run generating');

# Kill the engine mid-run: its requests fail and are retried.
my $at_kill = results_count();
my $engine = engine_pid($node);
ok($engine && kill('KILL', $engine), "engine $engine killed with $at_kill results written");
ok(defined poll_until(120, sub { results_count() >= $at_kill + 100 }),
	'the run goes on after the engine restarts');
ok(query_running($run), 'the first run survived the engine kill');

# Now the server goes away under the run.
my $at_stop = results_count();
$node->stop('immediate');
wait_query($run, 30);
isnt($run->{rc}, 0, 'the first run ended with the server');
$node->start;
wait_engine_ready($node);

my ($rc2, $counts) = psql_state($node,
	'SELECT count(*), count(DISTINCT id) FROM results');
my ($n_after, $d_after) = split /\|/, $counts;
cmp_ok($n_after, '<', $ROWS, "the job was interrupted part way ($n_after of $ROWS)");
cmp_ok($n_after, '>=', $at_stop - 32 * 2, 'committed chunks survived the restart');
is($n_after, $d_after, 'no duplicates after the restart');
($rc2, $phase) = psql_state($node, "SELECT phase FROM opus_job_progress WHERE job = 'big'");
is($phase, 'interrupted', 'progress shows the run as interrupted');

# The rerun finishes the job: exactly one result per source row.
my $rerun = wait_query(start_query($node, "CALL opus_job_run('big')"), 600);
is($rerun->{rc}, 0, 'the rerun succeeds') or diag($rerun->{err});
my $check = $node->safe_psql('postgres', q{
	SELECT count(*), count(DISTINCT r.id), count(r.output),
	       (SELECT count(*) FROM src AS s WHERE NOT EXISTS (SELECT FROM results AS x WHERE x.id = s.id))
	FROM results AS r});
is($check, "$ROWS|$ROWS|$ROWS|0", "exactly $ROWS results, no duplicates, none missing");
is($node->safe_psql('postgres',
		"SELECT state || ':' || count(*) FROM opus_job_item GROUP BY state"),
	"done:$ROWS", 'every work item is done');
cmp_ok($node->safe_psql('postgres', 'SELECT sum(rows_retried) FROM opus_job_run'),
	'>=', 1, 'requests lost with the engine were retried');
is($node->safe_psql('postgres', 'SELECT max(attempts) FROM opus_job_item'), '1',
	'engine failures did not use up attempts');
is($node->safe_psql('postgres',
		"SELECT string_agg(status, ',' ORDER BY id) FROM opus_job_run"),
	'interrupted,finished', 'the run log: one interrupted run, one finished');
is($node->safe_psql('postgres', q{
		SELECT phase || ' ' || rows_total || ' ' || rows_done || ' ' || rows_failed || ' ' || rows_remaining
		FROM opus_job_progress WHERE job = 'big'}),
	"finished $ROWS $ROWS 0 0", 'progress: finished, all rows done');
is($node->safe_psql('postgres', 'SELECT busy_slots FROM opus_engine'), '0',
	'no request slot left busy');

# A third run has nothing to do.
my $third = wait_query(start_query($node, "CALL opus_job_run('big')"), 60);
is($third->{rc}, 0, 'a third run succeeds');
is($node->safe_psql('postgres', 'SELECT count(*) FROM results'), $ROWS,
	'the third run wrote nothing');

# An engine that cannot start stops a run without failing its rows: they
# stay pending, attempts untouched, and the next run does them.
$node->safe_psql('postgres', qq{
	INSERT INTO src SELECT i, 'Row ' || i || ' says' FROM generate_series($ROWS + 1, $ROWS + 100) AS i;
	ALTER SYSTEM SET opus.model = '/nonexistent/model.gguf';
	SELECT pg_reload_conf();
});
ok(defined poll_until(60, sub { engine_info($node)->{state} eq 'failed' }),
	'the engine cannot start');
my $broken = wait_query(start_query($node, "CALL opus_job_run('big')"), 120);
is($broken->{sqlstate}, '58000', 'the run stops with 58000') or diag($broken->{err});
like($broken->{err}, qr/engine failed \d+ requests in a row/, 'and says why');
is($node->safe_psql('postgres', q{
		SELECT count(*) || ' ' || max(attempts) FROM opus_job_item WHERE state = 'pending'}),
	'100 0', 'the new rows are pending with no attempt used');
is($node->safe_psql('postgres', 'SELECT status FROM opus_job_run ORDER BY id DESC LIMIT 1'),
	'failed', 'the run is logged as failed');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET opus.model; SELECT pg_reload_conf();');
wait_engine_ready($node);
my $fixed = wait_query(start_query($node, "CALL opus_job_run('big')"), 300);
is($fixed->{rc}, 0, 'the next run succeeds') or diag($fixed->{err});
is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT id) FROM results'),
	($ROWS + 100) . '|' . ($ROWS + 100), 'and writes the new rows once each');

$node->stop;
done_testing();
