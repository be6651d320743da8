# 005_terminate.pl - pg_terminate_backend on backends waiting in
# opus_generate (one being served, one queued behind it) ends them cleanly:
# no server crash or restart, the engine keeps running, their slots are freed
# and the next call succeeds.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = opus_node('terminate', conf => "opus.max_requests = 4\n");
my $start_before = start_time($node);
my $engine = engine_pid($node);

my $qa = start_query($node, long_sql());
wait_generating($node, 1, 120);
my $qb = start_query($node, long_sql());
my @pids = wait_generating($node, 2, 120);
usleep(500_000);

for my $i (reverse 0 .. 1)
{
	my $q = $i ? $qb : $qa;
	my $t0 = time;
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pids[$i])");
	wait_query($q, 120);
	my $dt = $q->{t_end} - $t0;
	isnt($q->{rc}, 0, "terminated backend $i: its psql reports failure");
	like($q->{err}, qr/terminating connection due to administrator command|server closed the connection/,
		"terminated backend $i: terminated by the administrator");
	cmp_ok($dt, '<', 30, sprintf('terminated backend %d gone within 30 s, not at the end of its call (%.2f s)', $i, $dt));
}

ok(defined poll_until(120, sub { active_requests($node) == 0 }),
	'no request slot busy and none in the engine afterwards');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'server accepts connections');
is(start_time($node), $start_before, 'pg_postmaster_start_time unchanged');
is(engine_pid($node), $engine, 'engine still the same process');

my ($rc, $out, $err) = psql_state($node, short_sql(), 60);
is($rc, 0, 'next call succeeds') or diag($err);

no_server_crash_ok($node);
$node->stop;
done_testing();
