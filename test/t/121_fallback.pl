# 121_fallback.pl - a fallback model under overload (docs/models.md).
#
# "big" (objective: first token within 300 ms) falls back to "tiny"; both
# have random weights (another seed each) and the same vocabulary, as a
# model and its fallback must (docs/models.md; 122 checks the rule).  The
# overload is made, not hoped
# for: big's engine is paused (SIGSTOP) with a request waiting in it, so its
# oldest wait for a first token passes the objective however fast or loaded
# the machine is.  Meanwhile batch-class calls and calls with fallback =>
# true are served by tiny, interactive ones and fallback => false wait for
# big; once big runs again and its recent requests meet the objective,
# batch calls return to big.
use strict;
use warnings;

use Time::HiRes qw(time usleep);
use Test::More;
use PostgreSQL::Test::Utils;
use OpusTest;

my $dir = PostgreSQL::Test::Utils::tempdir();
my $engine = $ENV{OPUS_ENGINE_PATH} // 'opus_engine';
for my $m ([ 'tiny', 1 ], [ 'big', 2 ])
{
	system($engine, 'genmodel', '--shape', 'tiny', '--type', 'q8_0', '--seed', $m->[1],
		'--out', "$dir/$m->[0].gguf") == 0
	  or BAIL_OUT("genmodel failed");
}

my $node = opus_node('fallback',
	conf => "opus.models = 'big=$dir/big.gguf; threads=1; kv_cache_size=8; max_ttft=300; fallback=tiny, "
	  . "tiny=$dir/tiny.gguf; threads=1; kv_cache_size=8'\n"
	  . "opus.engine_liveness_timeout = 0\n");

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

# Overload big: pause its engine with a request waiting for its first token.
my $pid = sql("SELECT engine_pid FROM opus_models WHERE name = 'big'");
ok($pid > 0, "big's engine pid");
my $q = "SELECT opus_completion('Hello', max_tokens => 4, temperature => 0, model => 'big'%s)->>'model'";
kill 'STOP', $pid;
my @waiting = (start_query($node, sprintf($q, ', fallback => false')));
ok(defined poll_until(60, sub { sql("SELECT overloaded FROM opus_models WHERE name = 'big'") eq 't' }),
	'big misses its objective while a request waits in it');
note('recent_ttft_ms: ' . sql("SELECT recent_ttft_ms FROM opus_models WHERE name = 'big'"));

is(served('SET opus.priority = batch;'), 'tiny', 'overloaded: a batch call is served by the fallback');
is(served('', ', fallback => true'), 'tiny', 'overloaded: fallback => true is served by the fallback');
push @waiting, start_query($node, sprintf($q, ', fallback => false'), setup => 'SET opus.priority = batch');
push @waiting, start_query($node, sprintf($q, ''));
ok(defined poll_until(60, sub { sql("SELECT count(*) FROM pg_stat_opus_activity") >= 3 }),
	'three calls wait for big');
cmp_ok(sql("SELECT fallback_requests FROM opus_models WHERE name = 'tiny'"), '>=', 2,
	'opus_models counts the requests tiny served as a fallback');
is(sql("SELECT overloaded FROM opus_models WHERE name = 'big'"), 't', 'big is still overloaded');
kill 'CONT', $pid;

my @served = map { my $r = wait_query($_, 120); $r->{rc} eq '0' ? $r->{out} : "failed: $r->{err}" } @waiting;
is($served[1], 'big', 'overloaded: a batch call with fallback => false stayed with big');
is($served[2], 'big', 'overloaded: an interactive call stayed with big');
is($served[0], 'big', 'the waiting call was served by big');
ok(defined poll_until(60, sub { sql("SELECT overloaded FROM opus_models WHERE name = 'big'") eq 'f' }),
	'big recovers');
is(served('SET opus.priority = batch;'), 'big', 'recovered: batch calls return to big');
ok(count_log_matches($node, qr/misses its time-to-first-token objective/) >= 1, 'the overload is logged');

no_server_crash_ok($node);
$node->stop;
done_testing();
