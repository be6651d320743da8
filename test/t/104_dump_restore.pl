# 104_dump_restore.pl - pg_dump and restore of a database using opus_pg into
# a fresh cluster keeps it working (issue 14, "Dump and restore"):
#
#  - the identity sequences of the extension's tables are dumped with them
#    (pg_extension_config_dump), so opus_job_create after the restore does
#    not fail with 23505 and the request logger does not drop its records on
#    duplicate ids;
#  - the request log matches rows to roles by name (username), and jobs by
#    regrole (dumped as names): the roles are created in the other order in
#    the new cluster, so their oids differ (alice's old oid is likely bob's
#    new one), and each role still sees only its own rows.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $conf = "opus.log_flush_interval = 50\n";

# The source: roles first, then the extension, rows of both roles.
my $src = opus_node('dump_src', conf => $conf, create => 0, ready => 0);
$src->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN;
	GRANT CREATE ON SCHEMA public TO alice, bob;
	CREATE EXTENSION opus_pg;
});
wait_engine_ready($src);
my %src_oid = map { $_ => $src->safe_psql('postgres', "SELECT '$_'::regrole::oid") } qw(alice bob);

for my $r ([alice => 2], [bob => 1])
{
	my ($role, $n) = @$r;
	for my $i (1 .. $n)
	{
		$src->safe_psql('postgres',
			"SET ROLE $role; SELECT opus_generate('Hello $i', max_tokens => 1, temperature => 0)");
	}
}
$src->safe_psql('postgres', q{
	SET ROLE alice;
	CREATE TABLE alice_src (id integer PRIMARY KEY, body text);
	INSERT INTO alice_src VALUES (1, 'one'), (2, 'two');
	SELECT opus_job_create('alice_job', 'alice_src', '{id}', 'Repeat: {{body}}', 'alice_out',
	                       options => '{"max_tokens": 1, "temperature": 0}');
	CALL opus_job_run('alice_job');
});
ok(defined poll_until(60, sub {
	$src->safe_psql('postgres', 'SELECT count(*) FROM opus_requests') >= 5 }),
	'the source logged the calls and the job\'s rows');
my $src_max_id = $src->safe_psql('postgres', 'SELECT max(id) FROM opus_requests');
my $src_log = $src->safe_psql('postgres',
	"SELECT username, count(*) FROM opus_requests WHERE username <> 'postgres' GROUP BY 1 ORDER BY 1");
is($src_log, "alice|4\nbob|1", 'the log names the roles');

my $dump = $PostgreSQL::Test::Utils::tmp_check . '/opus_dump.sql';
$src->command_ok([ 'pg_dump', '-d', $src->connstr('postgres'), '-f', $dump ],
	'pg_dump of a database with the extension');
$src->stop;

# The destination: the roles in the other order (other oids), restore into a
# new database that the logger writes.
my $dst = opus_node('dump_dst', conf => $conf . "opus.database = 'restored'\n",
	create => 0, ready => 0);
$dst->safe_psql('postgres', q{
	CREATE ROLE bob LOGIN;
	CREATE ROLE alice LOGIN;
	CREATE DATABASE restored;
});
my %dst_oid = map { $_ => $dst->safe_psql('postgres', "SELECT '$_'::regrole::oid") } qw(alice bob);
note("oids: source alice $src_oid{alice} bob $src_oid{bob}; restored alice $dst_oid{alice} bob $dst_oid{bob}");
$dst->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $dst->connstr('restored'),
	'-f', $dump ], 'the dump restores without errors');
ok(defined poll_until(90, sub {
	my $r = wait_query(start_query($dst, short_sql(), db => 'restored'), 30);
	return $r->{rc} == 0 && $r->{out} eq 't' }), 'the engine answers in the restored database');

sub q_restored { my ($sql) = @_; return $dst->safe_psql('restored', $sql) }

is(q_restored('SELECT max(id) FROM opus_requests'), $src_max_id, 'the log is restored');
cmp_ok(q_restored("SELECT nextval('opus_requests_id_seq')"), '>', $src_max_id,
	'its sequence goes on after the last id');

# Each role sees only its own rows, by name.
is(q_restored("SET ROLE alice; SELECT count(*), bool_and(username = 'alice') FROM opus_requests"),
	'4|t', 'alice sees her own log rows');
is(q_restored("SET ROLE bob; SELECT count(*), bool_and(username = 'bob') FROM opus_requests"),
	'1|t', 'bob sees only his own log row');
is(q_restored("SET ROLE bob; SELECT count(*) FROM opus_job"), '0', 'bob sees no job of alice');
is(q_restored("SET ROLE alice; SELECT name, owner FROM opus_job"), 'alice_job|alice',
	'alice\'s job is hers');

# Jobs can be created and run; the logger writes.
is(q_restored(q{
	SET ROLE alice;
	SELECT opus_job_create('alice_job2', 'alice_src', '{id}', 'Say: {{body}}', 'alice_out2',
	                       options => '{"max_tokens": 1, "temperature": 0}') > 0;
	CALL opus_job_run('alice_job2');
	SELECT count(*) FROM alice_out2;
}), "t\n2", 'a job can be created and run after the restore (no 23505)');
q_restored("SET ROLE bob; SELECT opus_generate('After restore', max_tokens => 1, temperature => 0)");
ok(defined poll_until(60, sub {
	q_restored("SELECT count(*) FROM opus_requests WHERE id > $src_max_id") >= 3 }),
	'the logger writes new rows after the restored ones');
is(q_restored('SELECT log_dropped FROM pg_stat_opus_engine'), '0', 'and drops none');
is(q_restored("SET ROLE bob; SELECT count(*) FROM opus_requests"), '2',
	'bob sees his new row too, and still none of alice\'s');

done_testing();
