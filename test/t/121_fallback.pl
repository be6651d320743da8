# 121_fallback.pl - a fallback model under overload (docs/models.md).
#
# "big" (the default model's file, 16 tokens per batched step, objective:
# first token within 300 ms) falls back to "tiny" (random weights).  Four
# sessions with long prompts overload big; meanwhile batch-class calls and
# calls with fallback => true are served by tiny, interactive ones by big;
# when the load is gone, batch calls return to big.
use strict;
use warnings;

use Time::HiRes qw(time usleep);
use Test::More;
use PostgreSQL::Test::Utils;
use OpusTest;

my $dir = PostgreSQL::Test::Utils::tempdir();
my $engine = $ENV{OPUS_ENGINE_PATH} // 'opus_engine';
system($engine, 'genmodel', '--shape', 'tiny', '--type', 'q8_0', '--out', "$dir/tiny.gguf") == 0
  or BAIL_OUT("genmodel failed");

my $node = opus_node('fallback',
	conf => "opus.models = 'big=SmolLM2-135M-Instruct.Q4_1; max_batch_tokens=16; max_ttft=300; fallback=tiny, "
	  . "tiny=$dir/tiny.gguf; threads=1; kv_cache_size=8'\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub served
{
	my ($setup, $extra) = @_;
	$extra //= '';
	return sql("$setup SELECT opus_completion('Hello', max_tokens => 4, temperature => 0, model => 'big'$extra)->>'model'");
}

ok(defined poll_until(60, sub { sql("SELECT count(*) FROM opus_models WHERE state = 'ready'") == 3 }),
	'three models ready');
is(served('SET opus.priority = batch;'), 'big', 'unloaded: a batch call is served by big');
is(sql("SELECT overloaded FROM opus_models WHERE name = 'big'"), 'f', 'big is not overloaded');

# Overload big: four sessions with long prompts, 16 prompt tokens per step.
my $long = "SELECT length(opus_generate(repeat('The quick brown fox jumps over the lazy dog. ', 25), "
  . "max_tokens => 4, temperature => 0, model => 'big', fallback => false))";
my @load = map { start_query($node, $long) } 1 .. 4;
my $t = poll_until(30, sub { sql("SELECT overloaded FROM opus_models WHERE name = 'big'") eq 't' });
ok(defined $t, 'big misses its objective under load');
note('recent_ttft_ms: ' . sql("SELECT recent_ttft_ms FROM opus_models WHERE name = 'big'"));

is(served('SET opus.priority = batch;'), 'tiny', 'overloaded: a batch call is served by the fallback');
is(served('', ', fallback => true'), 'tiny', 'overloaded: fallback => true is served by the fallback');
is(served('SET opus.priority = batch;', ', fallback => false'), 'big',
	'overloaded: fallback => false stays with big');
is(served(''), 'big', 'overloaded: an interactive call is served by big');
cmp_ok(sql("SELECT fallback_requests FROM opus_models WHERE name = 'tiny'"), '>=', 2,
	'opus_models counts the requests tiny served as a fallback');

my $failed = 0;
for my $q (@load)
{
	my $r = wait_query($q, 120);
	$failed++ unless $r->{rc} eq '0';
}
is($failed, 0, 'the load itself finished');
ok(defined poll_until(30, sub { sql("SELECT overloaded FROM opus_models WHERE name = 'big'") eq 'f' }),
	'big recovers');
is(served('SET opus.priority = batch;'), 'big', 'recovered: batch calls return to big');
ok(count_log_matches($node, qr/misses its time-to-first-token objective/) >= 1, 'the overload is logged');

no_server_crash_ok($node);
$node->stop;
done_testing();
