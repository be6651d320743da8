# 100_overload_slots.pl - request slots are a budget, not a race: one role's
# set-based call (whatever its window) or its unread async results cannot
# make another role's synchronous call, tokenize or async submit fail with
# 53000 (issue 14, "Slots are a budget"); unread results move out of the
# slots into a bounded store, a role's share of it bounded (53000).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

# 8 slots: async + set-based windows may hold 6 (3/4), one role 3 (half).
# The result store is small (120 kB: 120 one-kB chunks) so that a role's
# share of it is reached quickly.
my $node = opus_node('slots',
	conf => "opus.max_requests = 8\nopus.async_result_store_size = 120kB\n");
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

# 2. Async hoarding: 50 one-token submits by one role that nobody reads.
# A finished result moves to the result store and frees its slot, so the
# hoarder (3 slots at a time) gets all 50 in, holds no slot once they are
# done, and the victim's async and synchronous calls work.
my $hoard_sql = q{
	DO $$
	DECLARE
		ids bigint[];
	BEGIN
		FOR b IN 0 .. 16 LOOP
			ids := '{}';
			FOR i IN 1 .. 3 LOOP
				EXIT WHEN b * 3 + i > 50;
				ids := ids || opus_submit('Hi', max_tokens => 1, temperature => 0);
				INSERT INTO hoard VALUES (b * 3 + i, ids[i]);
			END LOOP;
			FOR i IN 1 .. coalesce(array_length(ids, 1), 0) LOOP
				PERFORM opus_wait(ARRAY[ids[i]]);
			END LOOP;
		END LOOP;
	END $$;
	SELECT count(*) FROM hoard};
$node->safe_psql('postgres', 'CREATE TABLE hoard (n integer, id bigint); GRANT ALL ON hoard TO attacker');
my ($rc, $out, $err, $state) = psql_state($node, "$as_attacker; $hoard_sql", 300);
is($out, '50', 'one role submits 50 one-token requests, 3 slots at a time') or diag($err);
ok(defined poll_until(120, sub { busy() == 0 }), 'its unread results hold no request slot');
($rc, $out, $err) = psql_state($node,
	"$as_attacker; SELECT count(*) FROM opus_async WHERE state = 'done'", 30);
is($out, '50', 'the 50 results are kept, unread') or diag($err);
($rc, $out, $err) = psql_state($node,
	"$as_victim; SELECT opus_result(opus_submit('Hi', max_tokens => 1)) IS NOT NULL", 60);
is($rc, 0, 'another role\'s opus_submit succeeds while the results are unread') or diag($err);
($rc, $out, $err) = psql_state($node, "$as_victim; $victim_sql", 60);
is($rc, 0, 'and so does its synchronous call') or diag($err);
($rc, $out, $err) = psql_state($node,
	"$as_attacker; SELECT count(*) FILTER (WHERE opus_result(id) = opus_generate('Hi', max_tokens => 1, temperature => 0))"
	  . " FROM (SELECT id FROM hoard ORDER BY n) AS h", 300);
is($out, '50', 'every result reads back as the synchronous answer') or diag($err);

# 3. The store is bounded per role: with opus.role_max_async_requests = 1
# (1 of the 6 async slots) a role may fill 1/6 of the 120 kB store, 20 one-
# token results; the next submit fails with 53000 until it reads one.
$node->safe_psql('postgres', q{
	CREATE ROLE small LOGIN;
	ALTER ROLE small SET opus.role_max_async_requests = 1;
	GRANT ALL ON hoard TO small;
	TRUNCATE hoard;
});
my $fill_sql = q{
	DO $$
	DECLARE
		rid bigint;
	BEGIN
		FOR i IN 1 .. 30 LOOP
			BEGIN
				rid := opus_submit('Hi', max_tokens => 1, temperature => 0);
			EXCEPTION WHEN insufficient_resources THEN
				RAISE NOTICE 'refused at %: %', i, SQLERRM;
				EXIT;
			END;
			INSERT INTO hoard VALUES (i, rid);
			PERFORM opus_wait(ARRAY[rid]);
		END LOOP;
	END $$;
	SELECT count(*) FROM hoard};
my $q = wait_query(start_query($node, $fill_sql, user => 'small'), 300);
is($q->{out}, '20', 'a role fills its share of the store (20 results)') or diag($q->{err});
like($q->{err}, qr/refused at 21: too many unread asynchronous opus results for role "small"/,
	'the next submit fails with 53000');
($rc, $out, $err) = psql_state($node,
	"$as_victim; SELECT opus_result(opus_submit('Hi', max_tokens => 1)) IS NOT NULL", 60);
is($rc, 0, 'another role still submits') or diag($err);
$q = wait_query(start_query($node,
	"SELECT opus_result(id) IS NOT NULL FROM hoard WHERE n = 1;"
	  . " SELECT opus_result(opus_submit('Hi', max_tokens => 1)) IS NOT NULL", user => 'small'), 60);
is($q->{rc}, 0, 'after reading one, the role submits again') or diag($q->{err});

no_server_crash_ok($node);
$node->stop;
done_testing();
