# 006_queue_full.pl - with every request slot taken, one more call fails at
# once with 53000 (insufficient_resources) instead of waiting; when the slots
# free up, calls succeed again.  No wall-clock bounds: "at once" is checked
# as "while the long calls still hold the slots", and every wait polls for
# the state with a generous bound (CI runs at load 15-20).
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
my @pids = wait_generating($node, $max_requests, 120);
# the backends are in opus_generate; wait until both hold their slot
ok(defined poll_until(120, sub { $node->safe_psql('postgres', 'SELECT busy_slots FROM opus_engine') >= $max_requests }),
	'every slot taken');
ok(query_running($_), 'long call still running') for @long;

my $t0 = time;
my ($rc, $out, $err, $state) = psql_state($node, short_sql(), 120);
my $dt = time - $t0;
is($state, '53000', 'call beyond opus.max_requests fails with 53000')
  or diag($err);
# it did not wait for a slot: both long calls still hold theirs
ok(query_running($_), sprintf('and fails while the long calls still run (%.2f s)', $dt)) for @long;

$node->safe_psql('postgres', "SELECT pg_cancel_backend($_)") for @pids;
for my $q (@long)
{
	wait_query($q, 120);
	is($q->{sqlstate}, '57014', 'long call cancelled');
}

ok(defined poll_until(120, sub { active_requests($node) == 0 }),
	'slots free again');
($rc, $out, $err) = psql_state($node, short_sql(), 300);
is($rc, 0, 'a call succeeds once slots are free') or diag($err);

no_server_crash_ok($node);
$node->stop;
done_testing();
