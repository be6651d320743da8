# 004_broken_model.pl - a broken opus.model gives callers a clear error
# (58P01 for a missing file, 58000 for a file that is not a model) and no
# restart storm: the engine is started again only as often as the backoff
# allows.  Fixing the setting and reloading brings generation back without a
# server restart.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $missing = '/nonexistent/opus_pg/missing-model.gguf';
my $node = opus_node(
	'broken',
	conf => "opus.model = '$missing'\n",
	ready => 0);
my $start_before = start_time($node);

# A missing file.
my $t0 = time;
my ($rc, $out, $err, $state) = psql_state($node, short_sql(), 60);
my $dt = time - $t0;
isnt($rc, 0, 'call with a missing model fails');
like($state, qr/^(58P01|58000)$/, "SQLSTATE 58P01 or 58000 ($state)")
  or diag($err);
like($err, qr/missing-model\.gguf|model/i, 'error names the model');
cmp_ok($dt, '<', 15, sprintf('error comes promptly (%.1f s)', $dt));

my $info = engine_info($node);
like($info->{last_error}, qr/missing-model/,
	"opus_engine.last_error says why ($info->{last_error})");
like(slurp_file($node->logfile), qr/missing-model\.gguf/,
	'the server log names the missing model');
no_restart_storm_ok($node, 'missing model');

# Same answer a second time.
($rc, $out, $err, $state) = psql_state($node, short_sql(), 60);
like($state, qr/^(58P01|58000)$/, "second call: same clear error ($state)");

# A file that exists but is not a GGUF model.
my $junk = $node->basedir . '/junk.gguf';
PostgreSQL::Test::Utils::append_to_file($junk, "this is not a model\n" x 100);
$node->safe_psql('postgres',
	"ALTER SYSTEM SET opus.model = '$junk'; SELECT pg_reload_conf()");
my $junk_err;
ok( defined poll_until(
		30,
		sub {
			($rc, $out, $err, $state) = psql_state($node, short_sql(), 60);
			$junk_err = $err;
			$rc ne '0' && $err =~ /junk\.gguf|gguf|model/i && $state ne '55000';
		}),
	'a file that is not a model gives a clear error')
  or diag($junk_err);
like($state, qr/^(58000|XX000|22023)$/, "SQLSTATE for a bad file ($state)");
no_restart_storm_ok($node, 'not a model');

# Fix it: back to the default model (by its installed name), by reload only.
$node->safe_psql('postgres',
	"ALTER SYSTEM SET opus.model = 'SmolLM2-135M-Instruct.Q4_1'; SELECT pg_reload_conf()");
ok(eval { wait_engine_ready($node, 90) }, 'generation works after the fix')
  or diag($@);

is(start_time($node), $start_before, 'server never restarted');
no_server_crash_ok($node);
$node->stop;
done_testing();

# no_restart_storm_ok(NODE, WHAT) - over a few seconds, the engine is
# started or tried (in the log and in opus_engine.starts) only as often as the
# backoff allows: it doubles from 0.5 s, so a handful at most.
sub no_restart_storm_ok
{
	my ($node, $what) = @_;
	my $window = 6;
	my $from = log_offset($node);
	my $starts0 = engine_info($node)->{starts};
	sleep($window);
	my $logged = count_log_matches($node,
		qr/LOG:\s+opus_pg: (?:started engine|opus model file .* does not exist)/, $from);
	my $counted = engine_info($node)->{starts} - $starts0;
	note("$what: engine starts in ${window}s: $logged logged, $counted counted");
	cmp_ok($logged, '<=', 4, "$what: at most 4 engine starts logged in $window s ($logged)");
	cmp_ok($counted, '<=', 4, "$what: at most 4 engine starts counted in $window s ($counted)");
}
