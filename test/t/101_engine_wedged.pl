# 101_engine_wedged.pl - a stopped (SIGSTOP) engine is noticed: shown as
# unresponsive, its requests fail with 58000 and it is restarted within
# opus.engine_liveness_timeout; a long step that computes is not killed
# (issue 14, "Engine liveness").
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = opus_node('wedged',
	conf => "opus.engine_liveness_timeout = 2s\n"
	  . "opus.max_batch_tokens = 4096\n"
	  . "opus.step_latency_target = 0\n");

# 1. A long step that computes: one prefill of ~500 tokens in one step,
# which takes longer than the timeout on this machine, is not killed.
my $pid0 = engine_pid($node);
my $long_prompt = 'one two three four five six seven eight nine ten ' x 50;
my $t0 = time;
my ($rc, $out, $err) = psql_state($node,
	"SELECT opus_generate('$long_prompt', max_tokens => 1, temperature => 0) IS NOT NULL", 120);
my $dt = time - $t0;
is($rc, 0, sprintf('a long prefill step (%.1f s) completes', $dt)) or diag($err);
is(engine_info($node)->{restarts}, 0, 'and the engine was not restarted');
is(engine_pid($node), $pid0, 'same engine process');

# 2. SIGSTOP: noticed, requests fail with 58000, restarted.
my $q = start_query($node, long_sql(max_tokens => 400));
wait_generating($node, 1, 30);
kill 'STOP', $pid0;
my $t_stop = time;
my $seen = poll_until(120, sub {
	my ($r, $o) = psql_state($node, 'SELECT state FROM pg_stat_opus_engine', 10);
	return $o eq 'unresponsive';
});
ok(defined $seen, sprintf('pg_stat_opus_engine shows the stopped engine as unresponsive (%.1f s)', $seen // -1));
wait_query($q, 120);
my $dt_fail = $q->{t_end} - $t_stop;
is($q->{sqlstate}, '58000', 'the in-flight call fails with 58000') or diag($q->{err});
cmp_ok($dt_fail, '<', 30, sprintf('from the liveness check, not at the end of the call (%.1f s)', $dt_fail));
kill 'CONT', $pid0;    # harmless if it was killed already
ok(defined poll_until(60, sub { my $p = engine_pid($node); $p && $p != $pid0 }), 'a new engine was started');
wait_engine_ready($node, 90);
($rc, $out, $err) = psql_state($node, short_sql(), 60);
is($rc, 0, 'calls work again') or diag($err);
like(engine_info($node)->{state}, qr/^ready$/, 'state ready again');

no_server_crash_ok($node);
$node->stop;
done_testing();
