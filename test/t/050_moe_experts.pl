# 050_moe_experts.pl - pg_stat_opus_experts on a generated Mixture-of-Experts
# model (test/tools/gen_moe_model.py "mixtral": 4 layers, 8 experts, top-2).
#
# The default (dense) model shows an empty view.  Switched to the MoE model
# by ALTER SYSTEM + reload, a greedy generation of known length routes every
# processed token (prompt tokens + completion tokens - 1: the last one is
# never fed back) to 2 experts in each of the 4 layers, so after a reset the
# view must show 4 x 8 rows whose tokens add up to 4 x 2 x processed, the
# same sum in every layer, shares adding up to 1 per layer.  A second
# generation adds to the totals; a reset zeroes them; going back to the
# dense model empties the view.
#
# The model: models/moe/mixtral-q4_k.gguf when `make golden-moe` made it
# (test/run_tests.sh copies it into the suite's work tree; OPUS_MOE_MODELS
# names another directory), else an f32 mixtral generated here (python gguf
# + numpy, ~150 MB, tens of seconds); skipped when neither works.
use strict;
use warnings;
use Cwd ();
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::RealBin/../..";
my $N_LAYER = 4;
my $N_EXPERT = 8;
my $TOP_K = 2;

my $model = ($ENV{OPUS_MOE_MODELS} // "$root/models/moe") . "/mixtral-q4_k.gguf";
if (!-f $model)
{
	my $dir = PostgreSQL::Test::Utils::tempdir('moe');
	my $tok = "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf";
	my $ok = -f $tok && system('python3', "$root/test/tools/gen_moe_model.py",
		'--out', $dir, '--names', 'mixtral', '--types', 'f32',
		'--tokenizer-from', $tok) == 0;
	plan skip_all => 'no MoE model: run make golden-moe (needs python gguf, numpy)'
	  unless $ok && -f "$dir/mixtral-f32.gguf";
	$model = "$dir/mixtral-f32.gguf";
}
$model = Cwd::abs_path($model);
note("MoE model: $model");

my $node = opus_node('moe');

sub sql
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

# The dense default model.
is(sql("SELECT count(*) FROM pg_stat_opus_experts"), '0',
	'dense model: pg_stat_opus_experts is empty');

# Switch to the MoE model by reload.
sql("ALTER SYSTEM SET opus.model = '$model'; SELECT pg_reload_conf()");
ok( defined poll_until(
		90,
		sub {
			sql("SELECT coalesce(string_agg(path, ''), '') FROM opus_model") eq $model
			  && eval { wait_engine_ready($node, 30); 1 };
		}),
	'the engine serves the MoE model after a reload')
  or BAIL_OUT('MoE model did not load');
is(sql("SELECT n_layer FROM opus_model"), $N_LAYER, "opus_model: $N_LAYER layers");

# Wait for the readiness probe's counts, then start from zero.
poll_until(120, sub { sql("SELECT count(*) FROM pg_stat_opus_experts") == $N_LAYER * $N_EXPERT });
sql("SELECT pg_stat_opus_experts_reset()");
is(sql("SELECT count(*) || ' ' || sum(tokens) || ' ' || count(share) FROM pg_stat_opus_experts"),
	($N_LAYER * $N_EXPERT) . " 0 0",
	'after a reset: a row per (layer, expert), no tokens, share NULL');

# One greedy generation of known length.
sub generate
{
	my ($prompt, $max) = @_;
	my $out = sql("SELECT opus_generate('$prompt', max_tokens => $max, temperature => 0) IS NOT NULL;
		SELECT finish_reason, prompt_tokens, completion_tokens, cached_tokens FROM opus_last_request()");
	my ($finish, $np, $nc, $ncached) = split /\|/, (split /\n/, $out)[-1];
	note("generated: finish $finish, prompt $np, completion $nc, cached $ncached");
	return ($np - $ncached) + ($nc > 0 ? $nc - 1 : 0);
}

sub expect_total
{
	my ($processed, $what) = @_;
	my $want = $N_LAYER * $TOP_K * $processed;
	my $got;
	poll_until(120, sub {
		$got = sql("SELECT sum(tokens) FROM pg_stat_opus_experts");
		$got == $want;
	});
	is($got, $want, "$what: sum(tokens) = n_layer x top_k x processed tokens = $N_LAYER x $TOP_K x $processed");
}

my $p1 = generate('The expert router of layer three prefers', 12);
cmp_ok($p1, '>', 5, "tokens processed ($p1)");
expect_total($p1, 'first generation');
is( sql("SELECT count(*) FROM (SELECT layer, sum(tokens) AS t, sum(share) AS s
			FROM pg_stat_opus_experts GROUP BY layer) l
		WHERE t = $TOP_K * $p1 AND abs(s - 1) < 1e-9"),
	$N_LAYER,
	"every layer routed top_k x $p1 tokens, shares add up to 1");
is( sql("SELECT min(layer) || ' ' || max(layer) || ' ' || min(expert) || ' ' || max(expert)
		|| ' ' || bool_and(tokens >= 0) FROM pg_stat_opus_experts"),
	"0 " . ($N_LAYER - 1) . " 0 " . ($N_EXPERT - 1) . " true",
	'layers and experts numbered from 0');
is(sql("SELECT count(*) FROM (SELECT layer FROM pg_stat_opus_experts WHERE tokens > 0
		GROUP BY layer HAVING count(*) >= 2) l"),
	$N_LAYER, 'each layer used at least two experts');

my $p2 = generate('Mixture of experts models route each token to', 6);
expect_total($p1 + $p2, 'second generation adds');

my $before = sql("SELECT string_agg(tokens::text, ',' ORDER BY layer, expert) FROM pg_stat_opus_experts");
note("expert load (layer-major, 8 experts per layer): $before");
note(sql("SELECT layer, expert, tokens, round(share::numeric, 3) FROM pg_stat_opus_experts ORDER BY 1, 2"));

sql("SELECT pg_stat_opus_experts_reset()");
is(sql("SELECT sum(tokens) FROM pg_stat_opus_experts"), '0', 'reset zeroes the totals');

# Back to the dense default model: the view is empty again.
sql("ALTER SYSTEM RESET opus.model; SELECT pg_reload_conf()");
ok( defined poll_until(
		90,
		sub {
			sql("SELECT coalesce(string_agg(path, ''), '') FROM opus_model") ne $model
			  && eval { wait_engine_ready($node, 30); 1 };
		}),
	'back on the dense model');
poll_until(120, sub { sql("SELECT count(*) FROM pg_stat_opus_experts") == 0 });
is(sql("SELECT count(*) FROM pg_stat_opus_experts"), '0', 'dense model again: the view is empty');

no_server_crash_ok($node);
$node->stop;
done_testing();
