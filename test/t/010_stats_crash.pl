# 010_stats_crash.pl - the statistics and the request log across an engine
# crash and a server crash.
#
# kill -9 of the engine mid-request: the request's log row (already written
# as 'running') becomes 'failed' with the engine's error, pg_stat_opus_engine
# counts exactly one more restart, pg_stat_opus one more error, and nothing
# stays running (no log row, no activity row).  An immediate shutdown
# mid-request: at the next start the logger marks the row 'interrupted'.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = opus_node('stats_crash', conf => "opus.log_flush_interval = 100ms\n");

sub scalar_sql
{
	my ($sql) = @_;
	my ($rc, $out, $err) = psql_state($node, $sql, 30);
	die "query failed: $sql: $err" unless $rc eq '0';
	return $out;
}

sub wait_true
{
	my ($sql, $timeout, $what) = @_;
	my $t = poll_until($timeout, sub { scalar_sql($sql) eq 't' });
	ok(defined $t, $what);
}

my $restarts = scalar_sql('SELECT restarts FROM pg_stat_opus_engine');
scalar_sql('SELECT pg_stat_opus_reset()');

# A long generation, decoding and logged as running.
my $gen = start_query($node, long_sql());
wait_true(q{SELECT count(*) = 1 FROM pg_stat_opus_activity WHERE state = 'decode'},
	30, 'the request is decoding (pg_stat_opus_activity)');
wait_true(q{SELECT count(*) = 1 FROM opus_requests WHERE status = 'running'},
	30, 'its log row is written as running');
my $row = scalar_sql(q{SELECT id FROM opus_requests WHERE status = 'running'});

my $engine = engine_pid($node);
ok($engine, 'engine process found');
ok(kill('KILL', $engine), "SIGKILL sent to engine $engine");
wait_query($gen, 30);
is($gen->{sqlstate}, '58000', 'the generating call failed with 58000')
  or diag($gen->{err});

wait_true(qq{SELECT status = 'failed' FROM opus_requests WHERE id = $row},
	30, 'the log row is marked failed');
like(scalar_sql(qq{SELECT error FROM opus_requests WHERE id = $row}),
	qr/engine terminated/, 'with the engine error');
is(scalar_sql(qq{SELECT finished_at >= started_at FROM opus_requests WHERE id = $row}),
	't', 'and a finish time');
is(scalar_sql(q{SELECT count(*) FROM opus_requests WHERE status = 'running'}),
	'0', 'no log row stays running');
is(scalar_sql('SELECT count(*) FROM pg_stat_opus_activity'),
	'0', 'no activity row stays');
is(scalar_sql('SELECT sum(errors) FROM pg_stat_opus'), '1', 'pg_stat_opus counts one error');

# The engine comes back; exactly one restart is counted.
wait_engine_ready($node);
is(scalar_sql('SELECT restarts FROM pg_stat_opus_engine'),
	$restarts + 1, 'restarts went up by one');
is(scalar_sql(q{SELECT state FROM pg_stat_opus_engine}), 'ready', 'engine ready again');
like(scalar_sql(q{SELECT last_exit FROM pg_stat_opus_engine}),
	qr/killed by signal 9/, 'last_exit says how the engine ended');

# The server goes down hard mid-request: the row is interrupted at start-up.
$gen = start_query($node, long_sql());
wait_true(q{SELECT count(*) = 1 FROM opus_requests WHERE status = 'running'},
	30, 'a second request is logged as running');
$row = scalar_sql(q{SELECT id FROM opus_requests WHERE status = 'running'});
# The logger commits asynchronously (a crash may lose its last batch, by
# design); make the 'running' row durable so the test is about the sweep.
scalar_sql('CHECKPOINT');
$node->stop('immediate');
wait_query($gen, 30);
$node->start;
wait_true(qq{SELECT status = 'interrupted' FROM opus_requests WHERE id = $row},
	30, 'after a server crash the row is marked interrupted');
is(scalar_sql(q{SELECT count(*) FROM opus_requests WHERE status = 'running'}),
	'0', 'no log row stays running after the restart');
like(slurp_file($node->logfile), qr/marked 1 running request log rows as interrupted/,
	'the logger says so');

$node->stop;
done_testing();
