# 030_batching.pl - continuous batching over the paged, prefix-sharing KV
# cache, seen from SQL.
#
#  1. Determinism under load: 8 prompts of different lengths, greedy and
#     seeded, give the same text alone (one at a time) and as 32 concurrent
#     sessions (16 of them the prompts under test, 16 more of other lengths).
#  2. Prefix cache: a second request with the same long instruction reports
#     cached prompt tokens (usage.prompt_tokens_details.cached_tokens, whole
#     blocks), with the same text as without the hit; pg_stat_opus_engine
#     counts the hit tokens.
#  3. The KV pool lives in the supervisor's shared-memory arena (the engine
#     maps a memfd), not in private memory.
#  4. A node with a tiny KV cache (opus.kv_cache_size = 2MB, 8-token blocks)
#     still completes 12 concurrent requests with unchanged text, by
#     preemption; a request that can never fit the cache is refused at once
#     with 54000.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $MAX_TOKENS = 20;

my @prompts = (
	'The capital of France is',
	'Once upon a time, in a small village at the foot of a great mountain, there lived an old clockmaker who',
	'def fibonacci(n):',
	'List three colours:',
	'Explain in one sentence why the sky is blue, as if to a child who keeps asking why.',
	'SELECT name FROM users WHERE',
	'Dear customer, thank you for your order. Unfortunately',
	'1, 2, 3, 5, 8, 13,',
);
my @others = (
	'Hello',
	'Write a haiku about the sea.',
	'The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox',
	'In 1969,',
);

sub quote { my $s = shift; $s =~ s/'/''/g; return "'$s'"; }

# SQL of request i in mode m (0 greedy, 1 seeded); the seed follows the prompt.
sub gen_sql
{
	my ($p, $m, $max) = @_;
	$max //= $MAX_TOKENS;
	my $opts = $m ? "temperature => 0.8, seed => " . (1000 + length $p) : 'temperature => 0';
	return "SELECT opus_generate(" . quote($p) . ", max_tokens => $max, $opts)";
}

# Run every request of @$reqs alone, one after another, in one session;
# returns the texts.
sub run_alone
{
	my ($node, $reqs) = @_;
	my @out;
	for my $r (@$reqs)
	{
		my ($rc, $out, $err) = psql_state($node, gen_sql(@$r), 120);
		is($rc, 0, "alone: request ran") or diag($err);
		push @out, $out;
	}
	return @out;
}

# Run every request of @$reqs at once, one session each; returns
# (texts, errors).
sub run_together
{
	my ($node, $reqs, $timeout) = @_;
	my @q = map { start_query($node, gen_sql(@$_)) } @$reqs;
	my (@out, @err);
	for my $q (@q)
	{
		wait_query($q, $timeout);
		push @out, $q->{out};
		push @err, $q->{rc} eq '0' ? '' : ($q->{err} || "rc $q->{rc}");
	}
	return (\@out, \@err);
}

my $node = opus_node('batching', conf => "opus.max_requests = 40\n");

# ---- 1. alone vs 32 concurrent sessions ----
my @under_test;
for my $m (0, 1)
{
	push @under_test, [ $_, $m ] for @prompts;
}
my @load;
for my $i (0 .. 15)
{
	push @load, [ $others[ $i % @others ] . (' again' x int($i / 4)), $i % 2, 8 + 3 * $i ];
}
my @alone = run_alone($node, \@under_test);
ok(scalar(grep { length($_) > 0 } @alone) == @alone, 'every request alone produced text');

# interleave the requests under test with the load
my @mixed;
for my $i (0 .. $#under_test)
{
	push @mixed, $under_test[$i], $load[$i];
}
is(scalar(@mixed), 32, '32 concurrent sessions');
my $t0 = time;
my ($together, $errs) = run_together($node, \@mixed, 300);
my $elapsed = time - $t0;
my $n_err = grep { $_ ne '' } @$errs;
is($n_err, 0, 'no errors among 32 concurrent sessions')
  or diag(join("\n", grep { $_ ne '' } @$errs));
for my $i (0 .. $#under_test)
{
	my ($p, $m) = @{ $under_test[$i] };
	is($together->[ 2 * $i ], $alone[$i],
		($m ? 'seeded' : 'greedy') . " text identical amid 31 others: '$p'");
}
my $batch = $node->safe_psql('postgres',
	'SELECT mean_batch_size > 1.5 FROM pg_stat_opus_engine');
is($batch, 't', 'the engine batched requests (mean batch size over 1.5)');
diag(sprintf('32 sessions x ~%d tokens in %.1f s', $MAX_TOKENS, $elapsed));

# ---- 2. prefix cache ----
my $instr = 'You are a meticulous assistant for a hardware store. Classify the customer '
  . 'message below into exactly one of: complaint, question, praise, order. Answer with '
  . 'the single word only, in lower case, and nothing else at all. Message: ';
my @msgs = ('The drill I bought last week stopped working.', 'Do you sell ladders?');
my $before = $node->safe_psql('postgres',
	'SELECT prefix_hit_tokens FROM pg_stat_opus_engine');
my @usage;
for my $msg (@msgs, $msgs[0])
{
	# the session's opus_last_request() must agree with the jsonb
	my $out = $node->safe_psql('postgres',
		"SELECT (c->'usage'->'prompt_tokens_details'->>'cached_tokens') || '|' || "
		  . "(c->'usage'->>'prompt_tokens') || '|' || "
		  . "replace(c->'choices'->0->>'text', E'\\n', ' ') "
		  . "FROM opus_completion(" . quote($instr . $msg)
		  . ", max_tokens => 8, temperature => 0) AS c; "
		  . "SELECT cached_tokens FROM opus_last_request()");
	my ($line, $last) = split /\n/, $out;
	my ($cached, $ptok, $text) = split /\|/, $line, 3;
	push @usage, [ $cached, $ptok, $text, $last ];
}
is($usage[0][0], 0, 'first request with the instruction: nothing cached');
cmp_ok($usage[1][0], '>=', 32, "second request with the same instruction: $usage[1][0] cached tokens");
is($usage[1][0] % 16, 0, 'cached tokens are whole 16-token blocks');
cmp_ok($usage[1][0], '<', $usage[1][1], 'at least one prompt token computed');
is($usage[2][0], int(($usage[2][1] - 1) / 16) * 16,
	'a repeated prompt is served from the cache up to its last block');
is($usage[2][2], $usage[0][2], 'same text with and without a prefix-cache hit');
my $after = $node->safe_psql('postgres',
	'SELECT prefix_hit_tokens FROM pg_stat_opus_engine');
is($after - $before, $usage[1][0] + $usage[2][0],
	'pg_stat_opus_engine counts the hit tokens');
is($usage[2][3], $usage[2][0], 'opus_last_request reports the cached tokens');

# ---- 3. the KV pool is in the shared arena ----
my $epid = engine_pid($node);
my $maps = slurp_file("/proc/$epid/maps");
like($maps, qr/memfd:opus_pg kv cache/, 'the engine maps the supervisor\'s KV arena');
is(count_log_matches($node, qr/using private memory/), 0, 'no fallback to private memory');
$node->stop;

# ---- 4. a tiny KV cache: preemption, not failure ----
my $tiny = opus_node('tinykv',
	conf => "opus.max_requests = 16\nopus.kv_cache_size = 2MB\nopus.kv_block_size = 8\n");
my $blocks = $tiny->safe_psql('postgres', 'SELECT kv_blocks_total FROM pg_stat_opus_engine');
cmp_ok($blocks, '<=', 12, "a tiny pool ($blocks blocks of 8 tokens)");
my @twelve = @under_test[ 0 .. 11 ];
my ($t_out, $t_err) = run_together($tiny, \@twelve, 300);
is(scalar(grep { $_ ne '' } @$t_err), 0, 'every request completes on the tiny cache')
  or diag(join("\n", grep { $_ ne '' } @$t_err));
for my $i (0 .. $#twelve)
{
	is($t_out->[$i], $alone[$i], "unchanged text under preemption: request $i");
}
my $pre = $tiny->safe_psql('postgres', 'SELECT preemptions FROM pg_stat_opus_engine');
cmp_ok($pre, '>', 0, "the tiny cache preempted ($pre preemptions)");
my ($rc, $out, $err, $state) = psql_state($tiny,
	gen_sql('A request that can never fit this cache', 0, 400), 30);
is($state, '54000', 'a request larger than the whole cache is refused with 54000');
like($err, qr/kv blocks|cache/i, 'the message names the cache') or diag($err);
no_server_crash_ok($tiny);
$tiny->stop;

done_testing();
