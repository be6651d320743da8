# 111_tenant_fairness.pl - fair share between roles of one class.
#
# Both parts assert only on what the scheduler decides, not on how fast
# clients resubmit on a loaded machine: two fresh roles queue asynchronous
# requests while the engine is paused (SIGSTOP), so both are backlogged
# from its first step; each request has its own ~76-token prompt and 4
# generated tokens, and the KV cache (5 MB, 14 blocks) holds two of them
# whole but not three, so no request is preempted for room and fair share
# alone decides the order.  The request log's finish order says how many of
# B's were served before each of A's.  (test_scheduler checks the same in
# the scheduler alone.)
#
# Equal weights: A queues 8 requests behind B's backlog of 20 (the many
# sessions of the issue's "1 session against 24"; fair share is per role,
# whatever the number of sessions).  A's requests do not wait behind B's
# backlog: the i-th of A's finishes before B's (i+3)-th, and A gets at least
# 40% of what was served while both were backlogged (first come, first
# served would finish all 20 of B's first).
#
# Weights 3:1: 18 and 12 requests, and A's share follows the weights.

use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = opus_node('tenant_fair', conf => "opus.kv_cache_size = 5MB\nopus.max_requests = 40\n"
	  . "opus.log_requests = on\nopus.log_flush_interval = 200ms\nopus.engine_liveness_timeout = 0\n"
	  . "opus.max_async_requests = 36\nopus.max_async_requests_per_role = 20\n");
$node->safe_psql('postgres', q{
	CREATE ROLE tenant_a; CREATE ROLE tenant_b;
	CREATE ROLE tenant_w3; CREATE ROLE tenant_w1;
	ALTER ROLE tenant_w3 SET opus.role_weight = 3;
	ALTER ROLE tenant_w1 SET opus.role_weight = 1;
});
wait_engine_ready($node);
is($node->safe_psql('postgres', "SELECT kv_blocks_total FROM pg_stat_opus_engine"), 14,
	'the engine has room for two requests');
my $words = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen '
  . 'sixteen seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four';

# Role $rb queues $nb requests, then $ra $na, while the engine is paused;
# returns the finish order ('a'/'b' per request) once all are finished.
sub queued
{
	my ($what, $ra, $na, $rb, $nb) = @_;
	my $submit = "SELECT string_agg(opus_submit(format('Request %s of %s. Count on: %s %s', i, current_user, "
	  . "'$words', '$words'), max_tokens => 4, temperature => 0)::text, ',') FROM generate_series(1, N) i";
	my $pid = engine_pid($node);
	ok($pid, "$what: engine running");
	my $log0 = $node->safe_psql('postgres', "SELECT coalesce(max(id), 0) FROM opus_requests");
	kill 'STOP', $pid;
	my $ids_b = $node->safe_psql('postgres', "SET ROLE $rb; " . ($submit =~ s/\bN\)/$nb)/r));
	my $ids_a = $node->safe_psql('postgres', "SET ROLE $ra; " . ($submit =~ s/\bN\)/$na)/r));
	kill 'CONT', $pid;
	my $ids = "$ids_a,$ids_b";
	ok(defined poll_until(300, sub { $node->safe_psql('postgres',
			"SELECT count(*) FROM opus_requests WHERE id > $log0 AND request_id IN ($ids) AND status <> 'running'") == $na + $nb }),
		"$what: all requests finished");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM opus_requests WHERE id > $log0 AND request_id IN ($ids) AND status = 'completed'"),
		$na + $nb, "$what: none failed");
	note('prompt tokens: ' . $node->safe_psql('postgres',
		"SELECT min(prompt_tokens) || '-' || max(prompt_tokens) FROM opus_requests WHERE id > $log0 AND request_id IN ($ids)"));
	my $order = $node->safe_psql('postgres', qq{
		SELECT string_agg(CASE WHEN userid = '$ra'::regrole THEN 'a' ELSE 'b' END, '' ORDER BY finished_at, id)
		FROM opus_requests WHERE id > $log0 AND request_id IN ($ids)});
	diag("$what: finish order (a = $ra, b = $rb): $order");
	# read the results: async requests count against opus.max_async_requests until then
	$node->safe_psql('postgres', "SET ROLE $ra; SELECT count(opus_result(id)) FROM unnest('{$ids_a}'::bigint[]) id");
	$node->safe_psql('postgres', "SET ROLE $rb; SELECT count(opus_result(id)) FROM unnest('{$ids_b}'::bigint[]) id");
	return $order;
}

# A's share while both were backlogged: A's requests against B's finished
# before A's last; and for each of A's, how many of B's finished before it.
sub share
{
	my ($order) = @_;
	my ($a, $b, @b_before) = (0, 0);
	for my $c (split //, $order)
	{
		if ($c eq 'a') { $a++; push @b_before, $b; }
		else { $b++; }
	}
	return (sprintf('%.3f', $a / ($a + ($b_before[-1] // 0))), @b_before);
}

# equal weights: A's 8 requests queued behind B's 20
my ($na, $nb) = (8, 20);
my $order = queued('1 vs 20', 'tenant_a', $na, 'tenant_b', $nb);
is(length($order), $na + $nb, 'the log has every request');
my ($share, @b_before) = share($order);
my @late = grep { $b_before[$_] > $_ + 3 } 0 .. $#b_before;
is_deeply(\@late, [], "each of A's requests finishes before B's (i+3)-th (B's before A's: @b_before)");
cmp_ok($share, '>=', 0.40, "A gets at least 40% while both are backlogged ($share)");

# weights 3:1: two fresh roles (no service banked from the first part)
# queue 18 and 12 requests
my ($na3, $nb3) = (18, 12);
my $order3 = queued('weights 3:1', 'tenant_w3', $na3, 'tenant_w1', $nb3);
my ($share3) = share($order3);
diag("weights 3:1, $na3 and $nb3 queued requests: A's share while both were backlogged $share3 (target 0.75)");
cmp_ok($share3, '>=', 0.62, "A's share follows its weight 3:1 ($share3)");
cmp_ok($share3, '<=', 0.88, "and B still gets its part ($share3)");

no_server_crash_ok($node);
$node->stop;
done_testing();
