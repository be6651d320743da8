# 112_tenant_limits.pl - a role gets what the administrator granted, over
# real logins: it cannot raise its priority above its ceiling by SET,
# set_config, a function's SET clause or ALTER ROLE on itself (the last one
# is clamped: the engine runs the request at the ceiling), and a slot quota
# refuses the next request at once with 53400.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = opus_node('tenant_limits');
$node->safe_psql('postgres', q{
	CREATE ROLE mallory LOGIN;
	ALTER ROLE mallory SET opus.priority_ceiling = 'batch';
	CREATE FUNCTION urgent() RETURNS text LANGUAGE sql SET opus.priority = 0
		AS $$ SELECT opus_generate('Hi', max_tokens => 1, temperature => 0) $$;
});

sub as_mallory
{
	my ($sql) = @_;
	my ($stdout, $stderr) = ('', '');
	$node->psql('postgres', $sql, stdout => \$stdout, stderr => \$stderr,
		extra_params => [ '-U', 'mallory', '-v', 'VERBOSITY=verbose' ]);
	my ($state) = $stderr =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($state // '', $stdout, $stderr);
}

my ($state) = as_mallory("SET opus.priority = 0");
is($state, '42501', 'SET opus.priority above the ceiling: 42501');
($state) = as_mallory("SELECT set_config('opus.priority', 'interactive', false)");
is($state, '42501', 'set_config above the ceiling: 42501');
($state) = as_mallory("SELECT urgent()");
is($state, '42501', "a function's SET clause above the ceiling: 42501");
($state) = as_mallory("SET opus.priority_ceiling = 'interactive'");
is($state, '42501', 'the ceiling itself is not settable');
($state) = as_mallory("ALTER ROLE mallory SET opus.priority_ceiling = 'interactive'");
is($state, '42501', 'nor with ALTER ROLE on itself');
($state) = as_mallory("SET opus.priority = 'batch'");
is($state, '', 'the ceiling class itself is fine');

# ALTER ROLE on itself for opus.priority is allowed (a user setting), but the
# request still runs at the ceiling.
($state) = as_mallory("ALTER ROLE mallory SET opus.priority = 'interactive'");
is($state, '', 'mallory may ALTER ROLE itself SET opus.priority');
# (the long call, 1500 tokens, runs until cancelled below even on a fast
# machine; the priority is read in the same query that sees it decoding)
my $q = start_query($node, long_sql(), user => 'mallory');
my $prio = '';
ok(defined poll_until(120, sub {
	$prio = $node->safe_psql('postgres',
		"SELECT priority FROM pg_stat_opus_activity WHERE userid = 'mallory'::regrole AND state = 'decode'");
	$prio ne '' }),
	'mallory generating');
is($prio, '10', 'and the engine runs it at the ceiling class, 10');

# a slot quota: the second concurrent request fails at once
$node->safe_psql('postgres', 'ALTER ROLE mallory SET opus.role_max_requests = 1');
my $t0 = time;
my ($st2, undef, $err) = as_mallory("SELECT opus_generate('Hi', max_tokens => 1)");
my $dt = time - $t0;
is($st2, '53400', 'a second request over opus.role_max_requests: 53400') or diag($err);
like($err, qr/DETAIL:\s+opus.role_max_requests is 1 for this role/, 'DETAIL names the limit');
ok(query_running($q), sprintf('without waiting for the first to finish (%.2f s, a new session included)', $dt));
$node->safe_psql('postgres',
	"SELECT pg_cancel_backend(pid) FROM pg_stat_opus_activity WHERE userid = 'mallory'::regrole");
wait_query($q, 120);
is($node->safe_psql('postgres',
	"SELECT refused > 0 FROM pg_stat_opus_tenants WHERE userid = 'mallory'::regrole"), 't',
	'pg_stat_opus_tenants counts the refusal');

no_server_crash_ok($node);
$node->stop;
done_testing();
