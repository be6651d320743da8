# 102_overload_hol.pl - no head-of-line blocking: while async requests that
# need more KV cache than there is keep preempting each other, a small
# greedy call is admitted at once and finishes (issue 14, "Admission without
# head-of-line blocking").  Reports the victim's queue wait and latency alone
# and under the attack.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

# 8 MB of KV: about 22 blocks of 16 tokens for this model.
my $node = opus_node('hol', conf => "opus.kv_cache_size = 8MB\nopus.max_requests = 16\n");
my $victim = q{SELECT (r -> 'timings' ->> 'queue_ms')::float8 || ' ' || (r -> 'timings' ->> 'total_ms')::float8
  FROM opus_completion('Count: 1, 2, 3,', max_tokens => 16, temperature => 0) AS r};

sub victim_runs
{
	my ($n) = @_;
	my (@q, @t);
	for (1 .. $n)
	{
		my ($rc, $out, $err) = psql_state($node, $victim, 120);
		is($rc, 0, 'victim call succeeds') or diag($err);
		my ($qm, $tm) = split / /, $out // '0 0';
		push @q, $qm;
		push @t, $tm;
	}
	my @sq = sort { $a <=> $b } @q;
	my @st = sort { $a <=> $b } @t;
	return ($sq[int($n / 2)], $st[int($n / 2)], $sq[-1]);
}

my ($q_alone, $t_alone) = victim_runs(3);

# The attack: 4 async requests of about 25 + 300 tokens each, 80 blocks in
# all: they keep preempting each other, and a preempted one needs more
# blocks to recompute than are free.
my $ids = $node->safe_psql('postgres',
	"SELECT string_agg(opus_submit('Count from 1 to 10000, separated by commas: ' || g || ', 2, 3,',"
	  . " max_tokens => 300, temperature => 0)::text, ',') FROM generate_series(1, 4) g");
ok(defined poll_until(30, sub {
	my ($rc, $o) = psql_state($node, 'SELECT preemptions > 0 FROM pg_stat_opus_engine', 10);
	$o eq 't' }), 'the attack makes the engine preempt');
my ($q_attack, $t_attack, $q_max) = victim_runs(3);
cmp_ok($q_max, '<', 5000, sprintf('under the attack the victim is admitted within 5 s (worst %.0f ms)', $q_max));
my ($rc, $out) = psql_state($node, "SELECT count(*) FROM unnest('{$ids}'::bigint[]) i WHERE opus_cancel(i)", 30);
is($out, '4', 'the attackers were still there');
diag(sprintf('victim median queue/total ms: alone %.0f / %.0f, under the attack %.0f / %.0f',
	$q_alone, $t_alone, $q_attack, $t_attack));

no_server_crash_ok($node);
$node->stop;
done_testing();
