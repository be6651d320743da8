# 100_overload_slots.pl - request slots are a budget, not a race: one role's
# set-based call (whatever its window) or its unread async results cannot
# make another role's synchronous call, tokenize or async submit fail with
# 53000 (issue 14, "Slots are a budget").
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

# 8 slots: async + set-based windows may hold 6 (3/4), one role 3 (half).
my $node = opus_node('slots', conf => "opus.max_requests = 8\n");
$node->safe_psql('postgres', q{
	CREATE ROLE attacker LOGIN;
	CREATE ROLE victim LOGIN;
});
my $as_attacker = 'SET ROLE attacker';
my $as_victim = 'SET ROLE victim';
my $victim_sql = "SELECT opus_generate('Hello', max_tokens => 4, temperature => 0) IS NOT NULL";

sub busy { my ($rc, $out) = psql_state($node, 'SELECT busy_slots FROM opus_engine', 10); return $out // 0 }

# 1. A set-based call with a huge window.
my $many = start_query($node,
	"SELECT count(*) FROM opus_generate_many(array_fill('Count: 1, 2, 3,'::text, ARRAY[24]),"
	  . " max_tokens => 24, temperature => 0, \"window\" => 10000)",
	setup => $as_attacker);
ok(defined poll_until(30, sub { busy() >= 3 }), 'the set-based call holds slots');
cmp_ok(busy(), '<=', 3, 'its window is clamped to the role\'s share');
for my $sql ($victim_sql, "SELECT opus_tokenize('hi') IS NOT NULL",
	"SELECT opus_cancel(opus_submit('Hi', max_tokens => 1))")
{
	my $q = wait_query(start_query($node, $sql, setup => $as_victim), 60);
	is($q->{rc}, 0, "another role runs '$sql' during the set-based call")
	  or diag($q->{err});
}
ok(query_running($many), 'the set-based call was still running');
$many = wait_query($many, 120);
is($many->{out}, '24', 'the set-based call finishes all its rows') or diag($many->{err});

# 2. Async hoarding: one-token submits nobody reads.
my $n_ok = 0;
my $last_state = '';
for (1 .. 10)
{
	my ($rc, $out, $err, $state) = psql_state($node,
		"$as_attacker; SELECT opus_submit('Hi', max_tokens => 1)", 30);
	if ($rc eq '0') { $n_ok++ } else { $last_state = $state; last }
}
is($last_state, '53000', 'the hoarder hits its share');
cmp_ok($n_ok, '<', 6, "the hoarder holds only part of the async budget ($n_ok)");
my ($rc, $out, $err) = psql_state($node,
	"$as_victim; SELECT opus_result(opus_submit('Hi', max_tokens => 1)) IS NOT NULL", 60);
is($rc, 0, 'another role\'s opus_submit succeeds while the results are unread') or diag($err);
($rc, $out, $err) = psql_state($node, "$as_victim; $victim_sql", 60);
is($rc, 0, 'and so does its synchronous call') or diag($err);

no_server_crash_ok($node);
$node->stop;
done_testing();
