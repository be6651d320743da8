# 114_tenant_quota_many.pl - a set-based call waits for its role's slot
# quota instead of failing (docs/tenants.md, Quotas): while the role holds
# all the slots opus.role_max_requests allows, a single call fails at once
# with 53400, but opus_generate_many waits, and completes every row once
# the role's other requests are gone.  The engine is paused (SIGSTOP) so
# the held requests stay held; nothing depends on timing.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = opus_node('tenant_quota_many', conf => "opus.engine_liveness_timeout = 0\n");
$node->safe_psql('postgres', q{
	CREATE ROLE quota_role;
	ALTER ROLE quota_role SET opus.role_max_requests = 2;
});
my $pid = engine_pid($node);
ok($pid, 'engine running');

# the role holds its two slots: two asynchronous requests, engine paused
kill 'STOP', $pid;
my $ids = $node->safe_psql('postgres', q{SET ROLE quota_role;
	SELECT string_agg(opus_submit('Hello', max_tokens => 2, temperature => 0)::text, ',')
	FROM generate_series(1, 2)});
is($node->safe_psql('postgres',
		"SELECT requests_held || '/' || max_requests FROM pg_stat_opus_tenants WHERE userid = 'quota_role'::regrole"),
	'2/2', 'the role holds both slots its quota allows');

my ($rc, $out, $err, $state) = psql_state($node,
	"SET ROLE quota_role; SELECT opus_generate('Hi', max_tokens => 1, temperature => 0)", 60);
is($state, '53400', 'a single call over the quota fails with 53400') or diag($err);

# a set-based call waits for a slot of the role's quota
my $many = start_query($node,
	"SELECT count(*) || ' ' || count(*) FILTER (WHERE finish_reason = 'length') FROM "
	  . "opus_generate_many(ARRAY['One', 'Two', 'Three'], max_tokens => 2, temperature => 0)",
	setup => 'SET ROLE quota_role');
ok(defined poll_until(60, sub { $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%opus_generate_many%' "
		  . "AND wait_event_type IS NOT NULL AND pid <> pg_backend_pid()") eq '1' }),
	'opus_generate_many is waiting');
ok(query_running($many), 'and has not failed');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_opus_activity WHERE userid = 'quota_role'::regrole"),
	2, 'it holds no slot beyond the quota');

# the held requests go: the set-based call gets the slots and finishes
$node->safe_psql('postgres', "SELECT opus_cancel(id) FROM unnest('{$ids}'::bigint[]) id");
kill 'CONT', $pid;
my $r = wait_query($many, 120);
is($r->{rc}, 0, 'opus_generate_many finished without an error') or diag($r->{err});
is($r->{out}, '3 3', 'with all three rows');
is($node->safe_psql('postgres',
		"SELECT refused FROM pg_stat_opus_tenants WHERE userid = 'quota_role'::regrole"),
	1, 'only the single call was refused');

no_server_crash_ok($node);
$node->stop;
done_testing();
