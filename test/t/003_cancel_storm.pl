# 003_cancel_storm.pl - 50 cancelled calls in a row leave nothing behind.
#
# 35 calls end by statement_timeout, with timeouts spread from 5 ms to
# 400 ms so that cancels land while queued, in prefill and in decoding; 15
# more end by pg_cancel_backend from another session.  Afterwards no request
# is reported active, the engine is the same process, and opus.max_requests
# concurrent calls all succeed.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $max_requests = 4;
my $node = opus_node('storm', conf => "opus.max_requests = $max_requests\n");
my $engine = engine_pid($node);
my $n_timeout = 35;
my $n_cancel = 15;

# statement_timeout, in one session, without stopping at errors.
my $script = '';
for my $i (1 .. $n_timeout)
{
	my $ms = 5 + ($i * 37) % 400;
	$script .= "SET statement_timeout = $ms;\n" . long_sql() . ";\n";
}
my $script_file = $node->basedir . '/storm.sql';
PostgreSQL::Test::Utils::append_to_file($script_file, $script);
my ($out, $err) = ('', '');
my $q = IPC::Run::start(
	[
		'psql', '-XAtq', '-v', 'ON_ERROR_STOP=0', '-v', 'VERBOSITY=verbose',
		'-d', $node->connstr('postgres'), '-f', $script_file
	],
	'<', '/dev/null', '>', \$out, '2>', \$err);
my $deadline = time + 120;
while ($q->pumpable && time < $deadline)
{
	$q->pump_nb;
	usleep(20_000);
}
$q->kill_kill if $q->pumpable;
$q->finish;
my $n57014 = () = $err =~ /ERROR:\s+57014:/g;
is($n57014, $n_timeout, "$n_timeout calls ended by statement_timeout with 57014");
my $nother = () = $err =~ /ERROR:\s+(?!57014:)[0-9A-Z]{5}:/g;
is($nother, 0, 'no other error') or diag($err);

# pg_cancel_backend while the call is waiting for the engine.
my $cancelled = 0;
for my $i (1 .. $n_cancel)
{
	my $c = start_query($node, long_sql());
	my ($pid) = wait_generating($node, 1, 20);
	usleep(($i * 53) % 300 * 1000);
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
	wait_query($c, 10);
	$cancelled++
	  if $c->{sqlstate} eq '57014' && $c->{err} =~ /due to user request/;
	diag("call $i: rc $c->{rc}: $c->{err}") if $c->{sqlstate} ne '57014';
}
is($cancelled, $n_cancel, "$n_cancel calls ended by pg_cancel_backend with 57014");

# Nothing left behind.
ok(defined poll_until(120, sub { active_requests($node) == 0 }),
	'no request slot busy and none in the engine (view opus_engine)');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_stat_opus_activity'),
	'0', 'pg_stat_opus_activity is empty');
is(engine_pid($node), $engine, 'engine still the same process');

my @qs;
push @qs, start_query($node, short_sql()) for 1 .. $max_requests;
my $ok = 0;
for my $c (@qs)
{
	wait_query($c, 60);
	$ok++ if $c->{rc} eq '0' && $c->{out} eq 't';
	diag($c->{err}) if $c->{rc} ne '0';
}
is($ok, $max_requests, "then $max_requests concurrent calls all succeed");

no_server_crash_ok($node);
$node->stop;
done_testing();
