# 006_queue_full.pl - with every request slot taken, one more call fails at
# once with 53000 (insufficient_resources) instead of waiting; when the slots
# free up, calls succeed again.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $max_requests = 2;
my $node = opus_node('full', conf => "opus.max_requests = $max_requests\n");

my @long;
push @long, start_query($node, long_sql()) for 1 .. $max_requests;
my @pids = wait_generating($node, $max_requests, 20);
usleep(300_000);
ok(query_running($_), 'long call still running') for @long;

my $t0 = time;
my ($rc, $out, $err, $state) = psql_state($node, short_sql(), 30);
my $dt = time - $t0;
is($state, '53000', 'call beyond opus.max_requests fails with 53000')
  or diag($err);
cmp_ok($dt, '<', 1.0, sprintf('and fails at once (%.2f s)', $dt));

$node->safe_psql('postgres', "SELECT pg_cancel_backend($_)") for @pids;
for my $q (@long)
{
	wait_query($q, 10);
	is($q->{sqlstate}, '57014', 'long call cancelled');
}

ok(defined poll_until(1.0, sub { active_requests($node) == 0 }),
	'slots free again');
($rc, $out, $err) = psql_state($node, short_sql(), 60);
is($rc, 0, 'a call succeeds once slots are free') or diag($err);

no_server_crash_ok($node);
$node->stop;
done_testing();
