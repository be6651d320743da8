# 105_many_memory.pl - a set-based call over a million prompts keeps the
# backend's memory flat (issue 14, "Bounded backend memory for set-based
# calls"; docs/overload.md, "Set-based calls keep memory flat").
#
# opus_generate_many over 1,000,000 one-token prompts (max_tokens 1) while
# the test samples the backend's RssAnon (private memory) and VmRSS from
# /proc/<pid>/status and the rows done so far (pg_stat_opus.calls).  Memory
# may grow while the call warms up (the input array is read, the result
# tuplestore fills work_mem, here 1 MB, and then spills to disk); from 10% of
# the rows on it must stay within a few MB of its value there: before the
# fix each row kept ~1 kB (a GB for these rows).
#
# So that a million rows take a minute or two on a shared CPU, the server's
# model is the "micro" shape of `opus_engine genmodel` (random weights, one
# layer of width 64: a step costs microseconds, 1 thread), and the request
# log is off (it would write a million rows).  What is measured is the
# backend's side of the call, which does not depend on the model.
# OPUS_MANY_ROWS sets another number of rows.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $rows = $ENV{OPUS_MANY_ROWS} // 1_000_000;
my $dir = PostgreSQL::Test::Utils::tempdir();
my $engine = $ENV{OPUS_ENGINE_PATH} // 'opus_engine';
system($engine, 'genmodel', '--shape', 'micro', '--type', 'q8_0', '--seed', '1',
	'--out', "$dir/micro.gguf") == 0
  or BAIL_OUT("genmodel failed");

my $node = opus_node('many_memory',
	conf => "opus.model = '$dir/micro.gguf'\n"
	  . "opus.threads = 1\n"
	  . "opus.max_requests = 256\n"
	  . "opus.log_requests = off\n");

# the default window is 16; the role's share of 256 slots allows 96
my $q = start_query($node,
	"SELECT count(*) FROM opus_generate_many(array_fill('H'::text, ARRAY[$rows]), "
	  . "max_tokens => 1, temperature => 0, \"window\" => 96)",
	setup => "SET work_mem = '1MB'");
my $pid;
poll_until(60, sub {
	$pid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE query LIKE '%opus_generate_many%' "
		  . "AND pid <> pg_backend_pid()");
	return $pid =~ /^\d+$/;
});
ok($pid =~ /^\d+$/, "the set-based call runs (backend $pid)") or BAIL_OUT('no backend');

sub status_kb
{
	my %kb;
	open my $fh, '<', "/proc/$pid/status" or return undef;
	while (<$fh>)
	{
		$kb{$1} = $2 if /^(VmRSS|RssAnon):\s+(\d+) kB/;
	}
	close $fh;
	return exists $kb{RssAnon} ? \%kb : undef;
}

# samples of [rows done, RssAnon kB, VmRSS kB]
my @s;
my $t0 = time;
while (query_running($q) && time - $t0 < 1200)
{
	my $done = $node->safe_psql('postgres', 'SELECT coalesce(sum(calls), 0) FROM pg_stat_opus');
	my $kb = status_kb();
	push @s, [ $done, $kb->{RssAnon}, $kb->{VmRSS} ] if $kb;
	usleep(250_000);
}
wait_query($q, 60);
my $secs = time - $t0;
is($q->{rc}, 0, 'the call finishes') or diag($q->{err});
is($q->{out}, $rows, "one row per prompt ($rows)");

my @after = grep { $_->[0] >= $rows / 10 } @s;
cmp_ok(scalar(@after), '>=', 5, 'memory sampled after 10% of the rows: ' . scalar(@after) . ' samples');
if (@after)
{
	my ($base_anon, $base_rss) = ($after[0][1], $after[0][2]);
	my ($max_anon, $max_rss) = ($base_anon, $base_rss);
	for (@after)
	{
		$max_anon = $_->[1] if $_->[1] > $max_anon;
		$max_rss = $_->[2] if $_->[2] > $max_rss;
	}
	# least-squares slope of RssAnon against rows done, bytes per row
	my $n = @after;
	my ($sx, $sy, $sxx, $sxy) = (0, 0, 0, 0);
	for (@after)
	{
		$sx += $_->[0];
		$sy += $_->[1];
		$sxx += $_->[0]**2;
		$sxy += $_->[0] * $_->[1];
	}
	my $den = $n * $sxx - $sx**2;
	my $slope = $den > 0 ? ($n * $sxy - $sx * $sy) / $den * 1024 : 0;
	diag(sprintf('%d rows in %.0f s (load %s); RssAnon %d kB at %d rows, max %d kB after; '
		  . 'VmRSS %d kB, max %d kB; slope %.2f bytes per row',
		$rows, $secs, (split ' ', `cat /proc/loadavg`)[0], $base_anon, $after[0][0],
		$max_anon, $base_rss, $max_rss, $slope));
	cmp_ok($max_anon - $base_anon, '<', 4096,
		'RssAnon stays within 4 MB of its value at 10% of the rows');
	cmp_ok($max_rss - $base_rss, '<', 8192,
		'VmRSS stays within 8 MB of its value at 10% of the rows');
	cmp_ok($slope, '<', 4, 'RssAnon does not grow with the rows (bytes per row)');
}

no_server_crash_ok($node);
$node->stop;
done_testing();
