# 103_long_prompt.pl - a long prompt does not stall the others: a greedy
# call of 48 tokens that is generating when a ~600-token prompt arrives, with the step time
# target off (prompt chunks of opus.max_batch_tokens) and on (the default
# 250 ms).  Reports the victim's median queue and total time for each
# (issue 14, "Long prefills are chunked by a time budget").
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = opus_node('longp', conf => "opus.step_latency_target = 0\n");
my $victim = q{SELECT (r -> 'timings' ->> 'queue_ms')::float8 || ' ' || (r -> 'timings' ->> 'total_ms')::float8
  FROM opus_completion('Count: 1, 2, 3,', max_tokens => 48, temperature => 0) AS r};
my $long = 'one two three four five six seven eight nine ten ' x 60;

sub measure
{
	my ($label) = @_;
	my (@q, @t);
	for my $i (1 .. 2)
	{
		# the victim generates; a fresh long prompt (no prefix-cache hit)
		# arrives while it does
		my $v = start_query($node, $victim);
		usleep(1_000_000);
		my $id = $node->safe_psql('postgres',
			"SELECT opus_submit('$i $label $long', max_tokens => 1, temperature => 0)");
		wait_query($v, 120);
		is($v->{rc}, 0, "$label: the victim call succeeds") or diag($v->{err});
		my ($qm, $tm) = split / /, $v->{out} || '0 0';
		push @q, $qm;
		push @t, $tm;
		$node->safe_psql('postgres', "SELECT opus_result($id)");
	}
	@q = sort { $a <=> $b } @q;
	@t = sort { $a <=> $b } @t;
	diag(sprintf('%s: victim median queue %.0f ms, total %.0f ms', $label, $q[0], $t[0]));
	return ($q[-1], $t[0]);
}

my ($q_off, $t_off) = measure('target off');
$node->append_conf('postgresql.conf', "opus.step_latency_target = 250ms\n");
$node->restart;
wait_engine_ready($node);
my ($q_on, $t_on) = measure('target 250 ms');
cmp_ok($q_on, '<', 1000, sprintf('with the target the victim is admitted within 1 s (worst %.0f ms)', $q_on));

no_server_crash_ok($node);
$node->stop;
done_testing();
