# 122_default_fallback.pl - the default model's fallback (docs/models.md):
# opus.model_fallback names a model of opus.models and opus.model_max_ttft
# the default model's objective.  As in 121, the overload is made: the
# default model's engine is paused (SIGSTOP) with a request waiting in it.
# Meanwhile batch-class calls without a model (and fallback => true) are
# served by the fallback, interactive ones wait for the default model; a
# fallback name that is not declared is logged and changes nothing.
#
# The vocabulary rule: a model and its fallback share a vocabulary.  The
# default model and "tiny" are random-weight models of one vocabulary (two
# seeds); "odd" has another.  A swap of "tiny" (the default's fallback) to
# odd's file is refused when the new engine reports its vocabulary, and
# tiny keeps serving; "c", declared with odd as its fallback, names the
# mismatch in last_error and keeps its requests under overload.
use strict;
use warnings;

use Test::More;
use PostgreSQL::Test::Utils;
use OpusTest;

my $dir = PostgreSQL::Test::Utils::tempdir();
my $engine = $ENV{OPUS_ENGINE_PATH} // 'opus_engine';
for my $m ([ 'tiny', 1 ], [ 'main', 2 ], [ 'c', 3 ], [ 'odd', 1, '--vocab', 300 ])
{
	my ($name, $seed, @more) = @$m;
	system($engine, 'genmodel', '--shape', 'tiny', '--type', 'q8_0', '--seed', $seed, @more,
		'--out', "$dir/$name.gguf") == 0
	  or BAIL_OUT("genmodel failed");
}

my $node = opus_node('default_fallback',
	conf => "opus.model = '$dir/main.gguf'\nopus.kv_cache_size = 8\n"
	  . "opus.models = 'tiny=$dir/tiny.gguf; threads=1; kv_cache_size=8'\n"
	  . "opus.model_fallback = tiny\nopus.model_max_ttft = 300\n"
	  . "opus.engine_liveness_timeout = 0\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

my $q = "SELECT opus_completion('Hello', max_tokens => 4, temperature => 0%s)->>'model'";
ok(defined poll_until(60, sub { sql("SELECT count(*) FROM opus_models WHERE state = 'ready'") == 2 }),
	'two models ready');
is(sql("SELECT fallback || ' ' || max_ttft_ms FROM opus_models WHERE name = 'default'"), 'tiny 300',
	"opus_models shows the default model's fallback and objective");
my $default_name = sql("SET opus.priority = batch; " . sprintf($q, ''));
isnt($default_name, 'tiny', "unloaded: a batch call is served by the default model ($default_name)");

my $pid = sql("SELECT engine_pid FROM opus_models WHERE name = 'default'");
ok($pid > 0, "the default model's engine pid");
kill 'STOP', $pid;
my @waiting = (start_query($node, sprintf($q, ', fallback => false')));
ok(defined poll_until(60, sub { sql("SELECT overloaded FROM opus_models WHERE name = 'default'") eq 't' }),
	'the default model misses its objective while a request waits in it');
is(sql("SET opus.priority = batch; " . sprintf($q, '')), 'tiny',
	'overloaded: a batch call without a model is served by the fallback');
is(sql(sprintf($q, ', fallback => true')), 'tiny', 'overloaded: fallback => true too');
push @waiting, start_query($node, sprintf($q, ''));
ok(defined poll_until(60, sub { sql("SELECT count(*) FROM pg_stat_opus_activity") >= 2 }),
	'two calls wait for the default model');
is(sql("SELECT string_agg(DISTINCT model, ' ') FROM pg_stat_opus_activity"), 'main',
	'pg_stat_opus_activity names the model they are in');
kill 'CONT', $pid;
my @served = map { my $r = wait_query($_, 120); $r->{rc} eq '0' ? $r->{out} : "failed: $r->{err}" } @waiting;
is($served[1], $default_name, 'overloaded: an interactive call stayed with the default model');
is($served[0], $default_name, 'the waiting call was served by the default model');
ok(defined poll_until(60, sub { sql("SELECT overloaded FROM opus_models WHERE name = 'default'") eq 'f' }),
	'the default model recovers');
is(sql("SET opus.priority = batch; " . sprintf($q, '')), $default_name, 'recovered: batch calls return');

# ---- the vocabulary rule
# A swap of the default's fallback to a file of another vocabulary: refused.
sql("SELECT opus_model_swap('tiny', '$dir/odd.gguf')");
ok(defined poll_until(60, sub { sql("SELECT state = 'ready' AND swapping_to IS NULL AND last_error LIKE 'swap to %' FROM opus_models WHERE name = 'tiny'") eq 't' }),
	'a swap of the fallback to another vocabulary ends');
like(sql("SELECT last_error FROM opus_models WHERE name = 'tiny'"),
	qr/^swap to ".*odd\.gguf" refused: its vocabulary differs from model "default"'s$/,
	'it is refused, and last_error says why');
is(sql("SELECT version || ' ' || (path LIKE '%/tiny.gguf') FROM opus_models WHERE name = 'tiny'"), '1 true',
	'tiny keeps its version and file');
is(sql(sprintf($q, ", model => 'tiny'")), 'tiny', 'and serves');
ok(count_log_matches($node, qr/"tiny" is the fallback of "default", and a model and its fallback must share a vocabulary: the new file has 300 tokens/) >= 1,
	'the log names both models and the token counts');

# A model whose fallback has another vocabulary: the fallback is not used.
$node->append_conf('postgresql.conf',
	"opus.models = 'tiny=$dir/tiny.gguf; threads=1; kv_cache_size=8, odd=$dir/odd.gguf; threads=1; kv_cache_size=8, "
	  . "c=$dir/c.gguf; threads=1; kv_cache_size=8; fallback=odd; max_ttft=300'\n");
$node->reload;
ok(defined poll_until(60, sub { sql("SELECT last_error FROM opus_models WHERE name = 'c'") =~ /^fallback "odd" is not used: its vocabulary differs from this model's$/ }),
	'a fallback of another vocabulary: last_error says it is not used');
$pid = sql("SELECT engine_pid FROM opus_models WHERE name = 'c'");
kill 'STOP', $pid;
my $cq = sprintf($q, ", model => 'c'");
my @wait_c = (start_query($node, $cq));
ok(defined poll_until(60, sub { sql("SELECT overloaded FROM opus_models WHERE name = 'c'") eq 't' }),
	'c misses its objective');
push @wait_c, start_query($node, sprintf($q, ", model => 'c', fallback => true"));
ok(defined poll_until(60, sub { sql("SELECT count(*) FROM pg_stat_opus_activity") >= 2 }),
	'a call that allows the fallback waits for c too');
kill 'CONT', $pid;
@served = map { my $r = wait_query($_, 120); $r->{rc} eq '0' ? $r->{out} : "failed: $r->{err}" } @wait_c;
is_deeply(\@served, [ 'c', 'c' ], 'both are served by c');
is(sql("SELECT fallback_requests FROM opus_models WHERE name = 'odd'"), 0, 'odd served none');
# c declared without the fallback: the note goes.
$node->append_conf('postgresql.conf',
	"opus.models = 'tiny=$dir/tiny.gguf; threads=1; kv_cache_size=8, odd=$dir/odd.gguf; threads=1; kv_cache_size=8, "
	  . "c=$dir/c.gguf; threads=1; kv_cache_size=8'\n");
$node->reload;
ok(defined poll_until(60, sub { sql("SELECT coalesce(last_error, '') FROM opus_models WHERE name = 'c'") eq '' }),
	'without the fallback, c\'s last_error is clear again');

# a fallback that is not declared: logged, no fallback
$node->append_conf('postgresql.conf', "opus.model_fallback = nosuch\n");
$node->reload;
ok(defined poll_until(30, sub { count_log_matches($node, qr/opus.model_fallback names "nosuch", which opus.models does not declare/) >= 1 }),
	'an undeclared fallback is logged');
my ($rc, $out, $err) = psql_state($node, "ALTER SYSTEM SET opus.model_fallback = 'Not A Name'");
like($err, qr/invalid value for parameter "opus.model_fallback"/, 'a malformed name is refused');

no_server_crash_ok($node);
$node->stop;
done_testing();
