# 001_engine_crash.pl - kill -9 the engine in the middle of a long
# generation while another session runs ordinary SQL.
#
# PostgreSQL must not notice: same postmaster (start time and pid), the other
# session keeps its connection and its work; the generating call fails within
# about two seconds with 58000 (system_error); the supervisor starts a new
# engine and the next call succeeds.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = opus_node('crash');
my $start_before = start_time($node);
my $pm_before = postmaster_pid($node);
my $engine = engine_pid($node);
ok($engine, 'engine process found under the postmaster');
my $info = engine_info($node);
is($info->{engine_pid}, $engine, 'opus_engine view shows the same engine pid');
is($info->{state}, 'ready', 'engine state is ready');

# An ordinary session, connected before the crash.
my $other = $node->background_psql('postgres', on_error_stop => 0);
$other->query_safe('CREATE TABLE t (i int)');
my $other_pid = $other->query_safe('SELECT pg_backend_pid()');

# A long generation, well under way when the engine dies.
my $gen = start_query($node, long_sql());
wait_generating($node, 1, 120);
ok(defined poll_until(120, sub { engine_info($node)->{engine_requests} >= 1 }),
	'the request reached the engine');
usleep(1_000_000);    # well into decoding
ok(query_running($gen), 'generation still running before the kill');

$other->query_safe('INSERT INTO t SELECT generate_series(1, 1000)');

ok(kill('KILL', $engine), "SIGKILL sent to engine $engine");
my $t_kill = time;

# Meanwhile the other session goes on with ordinary SQL.
is($other->query_safe('SELECT count(*) FROM t'),
	'1000', 'other session works right after the kill');

wait_query($gen, 120);
my $dt = $gen->{t_end} - $t_kill;
isnt($gen->{rc}, 0, 'generating call failed');
is($gen->{sqlstate}, '58000', 'generating call failed with SQLSTATE 58000')
  or diag($gen->{err});
cmp_ok($dt, '<', 30, sprintf('error within 30 s of the kill, not at the end of the call (%.2f s)', $dt));
like($gen->{err}, qr/engine/i, 'error message mentions the engine');

# The next call succeeds (the supervisor restarts the engine).
my ($rc, $out, $err) = psql_state($node, short_sql(), 90);
is($rc, 0, 'next call succeeds') or diag($err);
is($out, 't', 'next call returns text');

my $engine2 = engine_pid($node);
ok($engine2 && $engine2 != $engine, 'a new engine process runs');
my $info2 = engine_info($node);
is($info2->{engine_pid}, $engine2, 'opus_engine view shows the new engine');
is($info2->{restarts}, $info->{restarts} + 1, 'the restart is counted');
is($info2->{busy_slots}, 0, 'no request slot left busy');

# The server itself never restarted, the other session kept its connection.
is(start_time($node), $start_before, 'pg_postmaster_start_time unchanged');
is(postmaster_pid($node), $pm_before, 'postmaster pid unchanged');
is($other->query_safe('SELECT pg_backend_pid()'),
	$other_pid, 'other session is the same backend');
$other->query_safe('INSERT INTO t VALUES (1)');
is($other->query_safe('SELECT count(*) FROM t'),
	'1001', 'other session still writes');
$other->quit;

no_server_crash_ok($node);
$node->stop;
done_testing();
