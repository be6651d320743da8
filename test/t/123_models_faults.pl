# 123_models_faults.pl - engines killed in the middle of a swap, and a
# declared file that is not GGUF (docs/models.md).  The issue's promise:
# killing any engine (old, new, during warm-up, during drain) leaves every
# other model serving and the state truthful.
#
#   - a declared file that is not GGUF: that model is failed with the
#     engine's message, the others serve;
#   - the new version's engine, killed while it loads or warms up (caught
#     as soon as it appears and held with SIGSTOP, so the machine's speed
#     does not decide which): the swap fails, the old version never stopped
#     serving;
#   - the old version's engine, killed while it drains (held with SIGSTOP
#     with a request in it, so it is still draining): that request fails,
#     the new version serves, the state is ready at version 2.
use strict;
use warnings;

use Time::HiRes qw(usleep);
use Test::More;
use PostgreSQL::Test::Utils;
use OpusTest;

my $dir = PostgreSQL::Test::Utils::tempdir();
my $engine = $ENV{OPUS_ENGINE_PATH} // 'opus_engine';
for my $seed (1, 2)
{
	system($engine, 'genmodel', '--shape', 'tiny', '--type', 'q8_0', '--seed', $seed,
		'--out', "$dir/tiny$seed.gguf") == 0
	  or BAIL_OUT("genmodel failed");
}
open my $fh, '>', "$dir/junk.gguf" or die;
print $fh "this is not a model\n" x 100;
close $fh;

my $node = opus_node('models_faults',
	conf => "opus.models = 'tiny=$dir/tiny1.gguf; threads=1; kv_cache_size=8, "
	  . "junk=$dir/junk.gguf; threads=1; kv_cache_size=8'\n"
	  . "opus.engine_liveness_timeout = 0\n"
	  . "opus.model_warmup_timeout = '60s'\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub row
{
	my ($name) = @_;
	my @f = split /\|/, sql("SELECT state || '|' || version || '|' || coalesce(path, '') || '|' "
		  . "|| coalesce(engine_pid, 0) || '|' || coalesce(last_error, '') FROM opus_models WHERE name = '$name'"), 5;
	return { state => $f[0], version => $f[1], path => $f[2], pid => $f[3], last_error => $f[4] // '' };
}

my $GEN = "SELECT md5(opus_generate('Hello', max_tokens => 8, temperature => 0%s))";
sub gen { my ($m) = @_; return sql(sprintf($GEN, $m ? ", model => '$m'" : '')); }

sub engines
{
	return map { $_->[0] } grep { $_->[1] =~ /opus_engine/ } descendants(postmaster_pid($node));
}

ok(defined poll_until(60, sub { row('tiny')->{state} eq 'ready' && row('junk')->{state} eq 'failed' }),
	'tiny is ready, junk failed');
like(row('junk')->{last_error}, qr/^opus engine could not load model ".*junk\.gguf"$/, 'opus_models says which file failed');
my (undef, undef, $err, $state) = psql_state($node, sprintf($GEN, ", model => 'junk'"));
is($state, '58000', 'a call to junk gets 58000');
like($err, qr/DETAIL:.*not a gguf file \(bad magic\)/, 'with the engine\'s reason');
my $text_default = gen(undef);
my $text1 = gen('tiny');
isnt($text1, $text_default, 'the default model and tiny serve, each its own text');

# ---- the new version killed while it loads or warms up
{
	my %known = map { $_ => 1 } engines();
	my $target = sql("SELECT path FROM opus_models WHERE name = 'default'");	# a slower load than tiny's
	sql("SELECT opus_model_swap('tiny', '$target')");
	my $cand;
	for (1 .. 20000)	# as fast as ps allows, up to a minute or so
	{
		my @new = grep { !$known{$_} } engines();
		if (@new)
		{
			$cand = $new[0];
			kill 'STOP', $cand;
			last;
		}
		usleep(2_000);
	}
	ok(defined $cand, 'the new version\'s engine appears');
	is(row('tiny')->{state}, 'swapping', 'opus_models says swapping');
	is(gen('tiny'), $text1, 'the old version serves meanwhile');
	kill 'KILL', $cand;
	kill 'CONT', $cand;
	ok(defined poll_until(60, sub { my $r = row('tiny'); $r->{state} eq 'ready' && $r->{last_error} =~ /^swap to .* failed/ }),
		'the swap fails') or diag(explain(row('tiny')));
	my $r = row('tiny');
	is($r->{version} . ' ' . ($r->{path} =~ /tiny1\.gguf$/ ? 'old' : $r->{path}), '1 old', 'tiny keeps version 1 and its file');
	is(gen('tiny'), $text1, 'the old version still serves');
	is(gen(undef), $text_default, 'so does the default model');
	ok(!kill(0, $cand), 'no half-started engine is left');
}

# ---- the old version killed while it drains
{
	my $old = row('tiny')->{pid};
	# paused first, so the request sent to it stays there
	kill 'STOP', $old;
	my $held = start_query($node, "SELECT opus_generate('Hello', max_tokens => 8, temperature => 0, model => 'tiny')");
	ok(defined poll_until(60, sub { sql("SELECT count(*) FROM pg_stat_opus_activity") >= 1 }),
		'a request waits in tiny');
	sql("SELECT opus_model_swap('tiny', '$dir/tiny2.gguf')");
	ok(defined poll_until(60, sub { my $r = row('tiny'); $r->{version} == 2 && $r->{state} eq 'draining' }),
		'switched; the old version drains (it holds the request)') or diag(explain(row('tiny')));
	my $text2 = gen('tiny');
	isnt($text2, $text1, 'the new version serves');
	kill 'KILL', $old;
	kill 'CONT', $old;
	my $res = wait_query($held, 60);
	like($res->{err}, qr/opus engine terminated/, 'the request the old version held fails with the engine\'s end');
	ok(defined poll_until(60, sub { row('tiny')->{state} eq 'ready' }), 'tiny is ready again')
	  or diag(explain(row('tiny')));
	my $r = row('tiny');
	is($r->{version} . ' ' . ($r->{path} =~ /tiny2\.gguf$/ ? 'new' : $r->{path}), '2 new', 'at version 2, the new file');
	isnt($r->{pid}, $old, 'served by the new engine');
	is(gen('tiny'), $text2, 'which keeps serving');
	is(gen(undef), $text_default, 'and the default model too');
	ok(count_log_matches($node, qr/the old version ended while draining/) >= 1, 'the log says the old version ended');
}

no_server_crash_ok($node);
$node->stop;
done_testing();
