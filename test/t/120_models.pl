# 120_models.pl - several models at once (docs/models.md).
#
# The default model (SmolLM2) and a named one ("tiny", random weights from
# `opus_engine genmodel`, so its greedy text differs) are served together:
# 16 sessions, each gets its own model's greedy text; kill -9 of tiny's
# engine while the default generates leaves the default untouched; a swap
# to a truncated file fails and the old version keeps serving; a good swap
# under 16-session load loses no request and switches the greedy text; the
# new version crashing in probation rolls back by itself; a manual
# rollback; a model over the memory budget is refused with 53200.
use strict;
use warnings;

use File::Copy qw(copy);
use Time::HiRes qw(time usleep);
use Test::More;
use PostgreSQL::Test::Utils;
use OpusTest;

my $dir = PostgreSQL::Test::Utils::tempdir();
my $engine = $ENV{OPUS_ENGINE_PATH} // 'opus_engine';
for my $seed (1, 2)
{
	system($engine, 'genmodel', '--shape', 'tiny', '--type', 'q8_0',
		'--seed', $seed, '--out', "$dir/tiny$seed.gguf") == 0
	  or BAIL_OUT("genmodel failed");
}
{
	open my $in, '<:raw', "$dir/tiny1.gguf" or die;
	my $buf;
	read($in, $buf, 100_000);
	close $in;
	open my $out, '>:raw', "$dir/truncated.gguf" or die;
	print $out $buf;
	close $out;
}

my $node = opus_node('models',
	conf => "opus.models = 'tiny=$dir/tiny1.gguf; threads=1; kv_cache_size=8'\n"
	  . "opus.max_requests = 48\n"
	  . "opus.model_warmup_timeout = '20s'\n"
	  . "opus.model_probation = '60s'\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub model_row
{
	my ($name) = @_;
	my $r = sql("SELECT state || '|' || version || '|' || coalesce(path, '') || '|' || "
		  . "coalesce(engine_pid, 0) || '|' || rollbacks || '|' || coalesce(last_error, '') "
		  . "FROM opus_models WHERE name = '$name'");
	my @f = split /\|/, $r, 6;
	return { state => $f[0], version => $f[1], path => $f[2], pid => $f[3],
		rollbacks => $f[4], last_error => $f[5] // '' };
}

sub wait_model
{
	my ($name, $code, $what) = @_;
	my $t = poll_until(60, sub { $code->(model_row($name)) });
	ok(defined $t, $what) or diag(explain(model_row($name)));
}

my $GEN = "opus_generate('Hello', max_tokens => 8, temperature => 0%s)";
sub gen_sql { my ($m) = @_; return sprintf("SELECT md5($GEN)", $m ? ", model => '$m'" : ''); }

wait_model('tiny', sub { $_[0]{state} eq 'ready' }, 'tiny is ready');
my $text_default = sql(gen_sql(undef));
my $text_tiny = sql(gen_sql('tiny'));
isnt($text_tiny, $text_default, 'the two models answer differently');

# ---- 16 sessions, two models at once
{
	my @q;
	for my $k (1 .. 16)
	{
		my $m = $k % 2 ? 'tiny' : undef;
		push @q, [ $m, start_query($node, gen_sql($m)) ];
	}
	my $ok = 0;
	for my $e (@q)
	{
		my $r = wait_query($e->[1], 60);
		$ok++ if $r->{rc} eq '0'
		  && $r->{out} =~ /^\Q@{[ $e->[0] ? $text_tiny : $text_default ]}\E\s*$/;
	}
	is($ok, 16, '16 concurrent sessions each get their own model\'s greedy text');
	cmp_ok(sql("SELECT coalesce(sum(calls), 0) FROM pg_stat_opus WHERE model = 'tiny'"), '>=', 9,
		'pg_stat_opus counts tiny\'s calls under its name');
	cmp_ok(sql("SELECT coalesce(sum(calls), 0) FROM pg_stat_opus WHERE model = 'SmolLM2-135M-Instruct.Q4_1'"), '>=', 9,
		'and the default model\'s under its own');
	ok(defined poll_until(120, sub { sql("SELECT count(*) FROM opus_requests WHERE model = 'tiny'") >= 9 }),
		'the request log names the model');
	# pg_stat_opus_engine: one row per model, each with its own engine and
	# tokens (at least 8 of the 8 it generated for each of its 8 calls).
	is(sql("SELECT string_agg(e.name || ':' || (e.engine_pid = m.engine_pid) || ':' "
		  . "|| (e.generated_tokens >= 64) || ':' || (e.steps > 0), ' ' ORDER BY e.name) "
		  . "FROM pg_stat_opus_engine e JOIN opus_models m USING (name)"),
		'default:true:true:true tiny:true:true:true',
		'pg_stat_opus_engine: a row per model, its engine, its tokens and steps');
	is(sql("SELECT model FROM pg_stat_opus_engine WHERE name = 'tiny'"), 'tiny1',
		'the row names the file the model serves');
	is(sql("SELECT string_agg(model || ':' || (count >= 8), ' ' ORDER BY model) FROM pg_stat_opus_latency "
		  . "WHERE histogram = 'end_to_end'"), 'SmolLM2-135M-Instruct.Q4_1:true tiny:true',
		'pg_stat_opus_latency: each model\'s requests in its own histograms');
}

# ---- a job with options {"model": "tiny"}
sql("CREATE TABLE src (k int PRIMARY KEY, body text); INSERT INTO src SELECT g, 'Hello' FROM generate_series(1, 3) g");
sql(q{SELECT opus_job_create('tinyjob', 'src', '{k}', '{{body}}', 'out', options => '{"model": "tiny", "max_tokens": 8, "temperature": 0}')});
sql("CALL opus_job_run('tinyjob')");
is(sql("SELECT count(*) FILTER (WHERE md5(output) = '$text_tiny') FROM out"), 3,
	'a job with the "model" option runs on that model');

# ---- kill -9 of tiny's engine while the default generates
{
	my $tiny_pid = model_row('tiny')->{pid};
	my $restarts0 = sql("SELECT restarts FROM opus_models WHERE name = 'tiny'");
	my $long = start_query($node, long_sql(max_tokens => 200));
	wait_generating($node, 1);
	kill 'KILL', $tiny_pid;
	my $r = wait_query($long, 120);
	is($r->{rc}, '0', 'the default model\'s generation finishes while tiny\'s engine is killed')
	  or diag($r->{err});
	wait_model('tiny', sub { $_[0]{state} eq 'ready' && $_[0]{pid} != $tiny_pid },
		'tiny restarts by itself');
	is(sql("SELECT restarts FROM opus_models WHERE name = 'tiny'"), $restarts0 + 1,
		'tiny counted one restart');
	is(sql("SELECT restarts FROM opus_models WHERE name = 'default'"), 0,
		'the default model did not restart');
}

# ---- swap to a truncated file: the old version keeps serving
sql("SELECT opus_model_swap('tiny', '$dir/truncated.gguf')");
wait_model('tiny', sub { $_[0]{state} eq 'ready' && $_[0]{last_error} =~ /swap to .* failed/ },
	'a swap to a truncated file fails');
is(model_row('tiny')->{version}, 1, 'version unchanged');
like(model_row('tiny')->{path}, qr/tiny1\.gguf$/, 'still the old file');
is(sql(gen_sql('tiny')), $text_tiny, 'the old version keeps serving');

# ---- a good swap under 16-session load: no request fails
sql("CREATE UNLOGGED TABLE answers (t timestamptz, h text)");
my $text_tiny2;
{
	my $loop = "DO \$\$ DECLARE h text; t0 timestamptz; BEGIN "
	  . "WHILE clock_timestamp() < now() + interval '6 s' LOOP "
	  . "t0 := clock_timestamp(); h := md5(opus_generate('Hello', max_tokens => 8, temperature => 0, model => 'tiny')); "
	  . "INSERT INTO answers VALUES (t0, h); END LOOP; END \$\$";
	my @q = map { start_query($node, $loop) } 1 .. 16;
	usleep(1_000_000);
	my $t_swap = time;
	sql("SELECT opus_model_swap('tiny', '$dir/tiny2.gguf')");
	my $switched_at;
	poll_until(30, sub {
		my $row = model_row('tiny');
		return 0 unless $row->{version} == 2;
		$switched_at = sql("SELECT clock_timestamp()");
		return 1;
	});
	ok(defined $switched_at, 'the swap switched under load');
	note(sprintf('swap: %.2f s from the call to the new version serving', time - $t_swap));
	my $failed = 0;
	for my $q (@q)
	{
		my $r = wait_query($q, 60);
		$failed++ unless $r->{rc} eq '0';
		diag($r->{err}) unless $r->{rc} eq '0';
	}
	is($failed, 0, 'zero failed requests across the swap (16 sessions)');
	$text_tiny2 = sql(gen_sql('tiny'));
	isnt($text_tiny2, $text_tiny, 'greedy text switched to the new version');
	is(sql("SELECT count(*) FROM answers WHERE h NOT IN ('$text_tiny', '$text_tiny2')"), 0,
		'every answer is one version\'s greedy text');
	is(sql("SELECT count(*) FROM answers WHERE t > '$switched_at' AND h <> '$text_tiny2'"), 0,
		'requests admitted after the switch got the new version');
	cmp_ok(sql("SELECT count(*) FROM answers"), '>', 16, 'the sessions made requests throughout');
	my $row = model_row('tiny');
	like($row->{path}, qr/tiny2\.gguf$/, 'opus_models shows the new file');
	like(sql("SELECT previous_path FROM opus_models WHERE name = 'tiny'"), qr/tiny1\.gguf$/,
		'the old file is the rollback target');
	wait_model('tiny', sub { $_[0]{state} eq 'ready' }, 'the old version drained');
}

# ---- the new version crashes in probation: automatic rollback
{
	my $pid = model_row('tiny')->{pid};
	kill 'KILL', $pid;
	wait_model('tiny', sub { $_[0]{state} eq 'ready' && $_[0]{rollbacks} == 1 && $_[0]{path} =~ /tiny1\.gguf$/ },
		'a crash in probation rolls back by itself');
	like(model_row('tiny')->{last_error}, qr/rolled back/, 'last_error says it rolled back');
	is(sql(gen_sql('tiny')), $text_tiny, 'the old version serves again');
	is(sql("SELECT coalesce(previous_path, '') FROM opus_models WHERE name = 'tiny'"), '',
		'no rollback target after a rollback');
}

# ---- manual rollback
{
	sql("SELECT opus_model_swap('tiny', '$dir/tiny2.gguf')");
	wait_model('tiny', sub { $_[0]{state} eq 'ready' && $_[0]{path} =~ /tiny2\.gguf$/ }, 'swapped again');
	my $t0 = time;
	sql("SELECT opus_model_rollback('tiny')");
	wait_model('tiny', sub { $_[0]{state} eq 'ready' && $_[0]{path} =~ /tiny1\.gguf$/ }, 'opus_model_rollback goes back');
	note(sprintf('rollback: %.2f s', time - $t0));
	is(sql(gen_sql('tiny')), $text_tiny, 'and the old text comes back');
	is(sql(gen_sql(undef)), $text_default, 'the default model never changed');
}

# ---- canaries: a wrong expected output fails the swap; the right one passes
{
	sql(q{SELECT opus_model_swap('tiny', '} . "$dir/tiny2.gguf" . q{', '[{"prompt": "Hello", "expect": "certainly not this"}]')});
	wait_model('tiny', sub { $_[0]{last_error} =~ /did not give the expected output/ },
		'a canary with the wrong expected output fails the swap');
	like(model_row('tiny')->{path}, qr/tiny1\.gguf$/, 'and the old version keeps serving');
	my $path = sql("SELECT path FROM opus_models WHERE name = 'default'");
	my $v = model_row('default')->{version};
	sql(q{SELECT opus_model_swap('default', '} . $path . q{', jsonb_build_array(jsonb_build_object(
		'prompt', 'The capital of France is', 'max_tokens', 4,
		'expect', opus_generate('The capital of France is', max_tokens => 4, temperature => 0))))});
	wait_model('default', sub { $_[0]{version} == $v + 1 && $_[0]{state} eq 'ready' },
		'the default model swaps when its canary gives the expected output');
	is(sql(gen_sql(undef)), $text_default, 'the default model answers as before');
}

# ---- a swap that does not fit beside the serving version drains it first
{
	my $used = sql("SELECT sum(weights_bytes + kv_cache_bytes) FROM opus_models");
	my $budget_mb = int($used / 1048576) + 3;	# less than one more tiny engine
	sql("ALTER SYSTEM SET opus.memory_budget = '${budget_mb}MB'; SELECT pg_reload_conf()");
	usleep(2_000_000);	# the supervisor picks the budget up at its next loop
	my $from = log_offset($node);
	sql("SELECT opus_model_swap('tiny', '$dir/tiny2.gguf')");
	wait_model('tiny', sub { $_[0]{state} eq 'ready' && $_[0]{path} =~ /tiny2\.gguf$/ },
		'a swap over the memory budget drains the old version first, then switches');
	ok(count_log_matches($node, qr/does not fit opus.memory_budget beside the serving version; draining/, $from) == 1,
		'the log says the swap drained first');
	is(sql(gen_sql('tiny')), $text_tiny2, 'the new version serves');
	sql("ALTER SYSTEM RESET opus.memory_budget; SELECT pg_reload_conf()");
	sql("SELECT opus_model_rollback('tiny')");
	wait_model('tiny', sub { $_[0]{state} eq 'ready' && $_[0]{path} =~ /tiny1\.gguf$/ }, 'and back');
}

# ---- memory admission
sql("ALTER SYSTEM SET opus.models = 'tiny=$dir/tiny1.gguf; threads=1; kv_cache_size=8, "
	  . "huge=$dir/tiny1.gguf; kv_cache_size=1000000'");
sql("SELECT pg_reload_conf()");
wait_model('huge', sub { $_[0]{state} eq 'failed' }, 'a model over the memory budget fails');
like(model_row('huge')->{last_error}, qr/does not fit opus.memory_budget/, 'with a clear message');
my ($rc, $out, $err, $state) = psql_state($node, gen_sql('huge'));
is($state, '53200', 'calls to it get 53200');
is(sql(gen_sql('tiny')), $text_tiny, 'the other models keep serving');

no_server_crash_ok($node);
$node->stop;
done_testing();
