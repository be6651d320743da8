# 060_kv_cache_type.pl - opus.kv_cache_type = q8_0, the Q8_0 KV cache.
#
# With the default f16 cache the engine reports its pool's block count.
# Switched to q8_0 by ALTER SYSTEM + reload, the engine restarts with about
# 1.88 times the blocks in the same opus.kv_cache_size (a Q8_0 value takes
# 1.0625 bytes instead of 2), SHOW reports the setting, and a greedy
# generation still says "Paris"; a long prompt sent twice gives the same
# text the second time with whole blocks from the prefix cache; greedy and
# seeded requests give the same text alone and amid 4 other sessions.  A
# reset goes back to f16 with the original block count.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = opus_node('kvq8', conf => "opus.kv_cache_size = 16MB\n");

sub sql
{
	my ($q) = @_;
	return $node->safe_psql('postgres', $q);
}

sub blocks
{
	return sql('SELECT coalesce(kv_blocks_total, 0) FROM pg_stat_opus_engine');
}

# Switch opus.kv_cache_type by reload; wait for an engine with another pool.
sub switch_to
{
	my ($stmt, $from) = @_;
	sql("$stmt; SELECT pg_reload_conf()");
	my $got;
	ok( defined poll_until(
			90,
			sub {
				eval { wait_engine_ready($node, 30); 1 }
				  && ($got = blocks()) != $from;
			}),
		"the engine restarts with another pool after: $stmt")
	  or BAIL_OUT("no restart after $stmt");
	return $got;
}

sub greedy
{
	my ($prompt, $n) = @_;
	return sql("SELECT opus_generate('$prompt', max_tokens => $n, temperature => 0)");
}

is(sql('SHOW opus.kv_cache_type'), 'f16', 'default: f16');
poll_until(120, sub { blocks() > 0 });
my $b16 = blocks();
cmp_ok($b16, '>', 0, "f16 pool: $b16 blocks");
my $f16_text = greedy('The capital of France is', 8);
like($f16_text, qr/Paris/, 'f16: Paris');

my $b8 = switch_to("ALTER SYSTEM SET opus.kv_cache_type = 'q8_0'", $b16);
is(sql('SHOW opus.kv_cache_type'), 'q8_0', 'SHOW reports q8_0');
my $ratio = $b8 / $b16;
note(sprintf('q8_0 pool: %d blocks, %.3f x f16', $b8, $ratio));
ok($ratio > 1.85 && $ratio < 1.9, sprintf('q8_0 holds 1.85-1.9 x the blocks (%.3f)', $ratio));
my $q8_text = greedy('The capital of France is', 8);
like($q8_text, qr/Paris/, 'q8_0: Paris');
note("f16: $f16_text | q8_0: $q8_text");

# the prefix cache over Q8_0 blocks
my $long = 'Summarize in one sentence: the quick brown fox jumps over the lazy dog '
  . 'while the cat watches from the warm windowsill of the old farmhouse.';
my $first = sql("SELECT md5(opus_generate('$long', max_tokens => 12, temperature => 0))");
my ($second, $cached) = split /\n/,
  sql("SELECT md5(opus_generate('$long', max_tokens => 12, temperature => 0));
	SELECT cached_tokens FROM opus_last_request()");
is($second, $first, 'same text with a prefix-cache hit');
cmp_ok($cached, '>=', 16, "the second request reused cached blocks ($cached tokens)");

# determinism on Q8_0 blocks: the same texts alone and amid other sessions
my @prompts = ('Write a haiku about the sea.', 'In 1969,', 'The three primary colors are',
	'PostgreSQL is a');
my @others = ('Tell me a story about a dragon.', 'List five fruits:', 'Why is the sky blue?',
	'The recipe for bread is');
sub gen_sql
{
	my ($p, $seeded, $max) = @_;
	my $opts = $seeded ? 'temperature => 0.8, seed => 7' : 'temperature => 0';
	return "SELECT opus_generate('$p', max_tokens => $max, $opts)";
}
my @alone = map { sql(gen_sql($_, ($_ =~ /1969/ ? 1 : 0), 16)) } @prompts;
my @q;
for my $i (0 .. $#prompts)
{
	push @q, start_query($node, gen_sql($prompts[$i], ($prompts[$i] =~ /1969/ ? 1 : 0), 16));
	push @q, start_query($node, gen_sql($others[$i], $i % 2, 6 + 5 * $i));
}
wait_query($_, 120) for @q;
is(scalar(grep { $_->{rc} ne '0' } @q), 0, '8 concurrent sessions on q8_0 all complete');
for my $i (0 .. $#prompts)
{
	is($q[2 * $i]->{out}, $alone[$i], "q8_0: same text alone and amid others: $prompts[$i]");
}

my $back = switch_to('ALTER SYSTEM RESET opus.kv_cache_type', $b8);
is($back, $b16, 'back to f16: the original block count');
is(greedy('The capital of France is', 8), $f16_text, 'back to f16: the same text as before');

no_server_crash_ok($node);
$node->stop;
done_testing();
