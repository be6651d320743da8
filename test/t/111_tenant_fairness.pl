# 111_tenant_fairness.pl - fair share between roles of one class.
#
# On an engine whose KV cache holds about two sequences, tenant A runs one
# session and tenant B 24, all greedy 16-token calls (64 in the issue; 16 keeps the
# test short on a loaded machine).  While both are
# backlogged A gets at least 40% of the tokens generated and its requests
# wait under a second for admission (p99), while B's queue.
#
# With weights 3:1 the shares follow.  That part asserts only on what the
# scheduler decides, not on how fast clients resubmit on a loaded machine:
# two fresh roles queue 18 and 12 asynchronous requests while the engine is
# paused (SIGSTOP), so both are backlogged from its first step; each
# request has its own ~76-token prompt and 4 generated tokens, and the KV
# cache (5 MB, 14 blocks) holds two of them whole but not three, so no
# request is preempted for room and fair share alone decides the order.  The request
# log's finish order says how many of B's were served before A's backlog
# ran out.  (test_scheduler checks the same in the scheduler alone.)
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = opus_node('tenant_fair', conf => "opus.kv_cache_size = 2MB\nopus.max_requests = 40\n"
	  . "opus.log_requests = on\nopus.log_flush_interval = 200ms\nopus.engine_liveness_timeout = 0\n"
	  . "opus.max_async_requests = 36\nopus.max_async_requests_per_role = 20\n");
$node->safe_psql('postgres', q{
	CREATE ROLE tenant_a LOGIN; CREATE ROLE tenant_b LOGIN;
	CREATE TABLE calls (tenant text, phase int, done_at timestamptz, queue_ms float8, tokens int);
	GRANT INSERT ON calls TO PUBLIC;
});

# Every session loops 16-token calls until the deadline, logging each.
sub client
{
	my ($role, $phase, $deadline) = @_;
	return start_query($node, qq{
		DO \$\$
		DECLARE r jsonb;
		BEGIN
			WHILE clock_timestamp() < '$deadline'::timestamptz LOOP
				r := opus_completion('Count from 1 to 1000: 1, 2, 3, 4,', max_tokens => 16, temperature => 0);
				INSERT INTO calls VALUES ('$role', $phase, clock_timestamp(),
					(r -> 'timings' ->> 'queue_ms')::float8,
					(r -> 'usage' ->> 'completion_tokens')::int);
			END LOOP;
		END \$\$}, setup => "SET ROLE $role");
}

sub run_phase
{
	my ($phase, $na, $nb, $secs) = @_;
	my $deadline = $node->safe_psql('postgres', "SELECT now() + interval '$secs s'");
	my @q;
	push @q, client('tenant_b', $phase, $deadline) for 1 .. $nb;
	push @q, client('tenant_a', $phase, $deadline) for 1 .. $na;
	wait_query($_, $secs + 60) for @q;
	is(scalar(grep { ($_->{sqlstate} // '') ne '' } @q), 0, "phase $phase: no call failed");
	# tokens completed while both were busy: from 3 s in to the first finish of the last call
	my $share = $node->safe_psql('postgres', qq{
		WITH w AS (SELECT min(done_at) + interval '2 s' AS t0,
		                  least(max(done_at) FILTER (WHERE tenant = 'tenant_a'),
		                        max(done_at) FILTER (WHERE tenant = 'tenant_b')) AS t1
		           FROM calls WHERE phase = $phase)
		SELECT round(sum(tokens) FILTER (WHERE tenant = 'tenant_a')::numeric / sum(tokens), 3) || ' ' ||
		       count(*) FILTER (WHERE tenant = 'tenant_a') || ' ' || count(*) FILTER (WHERE tenant = 'tenant_b')
		FROM calls, w WHERE phase = $phase AND done_at BETWEEN w.t0 AND w.t1});
	my $p99 = $node->safe_psql('postgres', qq{
		SELECT round(percentile_disc(0.99) WITHIN GROUP (ORDER BY queue_ms)::numeric, 1) || ' ' ||
		       round((SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY queue_ms) FROM calls
		              WHERE phase = $phase AND tenant = 'tenant_b')::numeric, 1)
		FROM calls WHERE phase = $phase AND tenant = 'tenant_a'});
	return (split(/ /, $share), split(/ /, $p99));
}

# equal weights: 1 session against 24
my ($share, $na, $nb, $p99a, $p50b) = run_phase(1, 1, 24, 15);
diag("1 vs 24 sessions: A's share $share ($na calls vs $nb), A's p99 queue $p99a ms, B's median queue $p50b ms");
cmp_ok($share, '>=', 0.40, "A with 1 session gets at least 40% against 24 sessions ($share)");
cmp_ok($p99a, '<', 1000, "A's p99 queue time is under a second ($p99a ms)");
cmp_ok($p50b, '>', $p99a, "while B's requests queue ($p50b ms median)");

# weights 3:1: two fresh roles (no service banked from the first part) queue
# 18 and 12 requests while the engine is paused
$node->safe_psql('postgres', q{
	CREATE ROLE tenant_w3; CREATE ROLE tenant_w1;
	ALTER ROLE tenant_w3 SET opus.role_weight = 3;
	ALTER ROLE tenant_w1 SET opus.role_weight = 1;
});
$node->safe_psql('postgres', "ALTER SYSTEM SET opus.kv_cache_size = '5MB'");
$node->restart;
wait_engine_ready($node);
is($node->safe_psql('postgres', "SELECT kv_blocks_total FROM pg_stat_opus_engine"), 14,
	'the engine has room for two requests');
my $pid = engine_pid($node);
ok($pid, 'engine running');
kill 'STOP', $pid;
my ($na3, $nb3) = (18, 12);
my $words = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen '
  . 'sixteen seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four';
my $submit = "SELECT string_agg(opus_submit(format('Request %s of %s. Count on: %s %s', i, current_user, "
  . "'$words', '$words'), max_tokens => 4, temperature => 0)::text, ',') FROM generate_series(1, N) i";
my $log0 = $node->safe_psql('postgres', "SELECT coalesce(max(id), 0) FROM opus_requests");
my $ids_b = $node->safe_psql('postgres', "SET ROLE tenant_w1; " . ($submit =~ s/\bN\)/$nb3)/r));
my $ids_a = $node->safe_psql('postgres', "SET ROLE tenant_w3; " . ($submit =~ s/\bN\)/$na3)/r));
kill 'CONT', $pid;
my $ids = "$ids_a,$ids_b";
ok(defined poll_until(300, sub { $node->safe_psql('postgres',
		"SELECT count(*) FROM opus_requests WHERE id > $log0 AND request_id IN ($ids) AND status <> 'running'") == $na3 + $nb3 }),
	'weights 3:1: all requests finished');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM opus_requests WHERE id > $log0 AND request_id IN ($ids) AND status = 'completed'"),
	$na3 + $nb3, 'none failed');
# B's requests finished before A's last one, by the engine's finish order.
my ($b_before, $a_all) = split(/\|/, $node->safe_psql('postgres', qq{
	SELECT count(*) FILTER (WHERE userid = 'tenant_w1'::regrole AND finished_at <
	           (SELECT max(finished_at) FROM opus_requests WHERE id > $log0 AND request_id IN ($ids_a))),
	       count(*) FILTER (WHERE userid = 'tenant_w3'::regrole)
	FROM opus_requests WHERE id > $log0 AND request_id IN ($ids)}));
diag('finish order (a = weight 3, b = weight 1): ' . $node->safe_psql('postgres', qq{
	SELECT string_agg(CASE WHEN userid = 'tenant_w3'::regrole THEN 'a' ELSE 'b' END, '' ORDER BY finished_at)
	FROM opus_requests WHERE id > $log0 AND request_id IN ($ids)}));
note('prompt tokens: ' . $node->safe_psql('postgres',
	"SELECT min(prompt_tokens) || '-' || max(prompt_tokens) FROM opus_requests WHERE id > $log0 AND request_id IN ($ids)"));
my $share3 = sprintf('%.3f', $a_all / ($a_all + $b_before));
diag("weights 3:1, $na3 and $nb3 queued requests: B finished $b_before while A finished its $a_all "
	  . "(A's share $share3, target 0.75)");
cmp_ok($share3, '>=', 0.62, "A's share follows its weight 3:1 ($share3)");
cmp_ok($share3, '<=', 0.88, "and B still gets its part ($share3)");

no_server_crash_ok($node);
$node->stop;
done_testing();
