# 021_jobs_cron.pl - pg_cron runs a batch job by itself.
#
# The node preloads pg_cron next to opus_pg (background-worker mode, so no
# connection settings are needed); a job scheduled every minute with
# cron.schedule('...', 'CALL opus_job_run(''name'')') processes its table
# without anyone calling it, rows added later are picked up by a later
# tick, and every tick's run is recorded as succeeded.  pg_cron 1.4 ticks
# once a minute, so this test takes two to three minutes.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
plan skip_all => 'pg_cron is not installed (Debian: postgresql-15-cron)'
  unless -f "$sharedir/extension/pg_cron.control";

my $node = opus_node('jobs_cron', conf => join('',
	"shared_preload_libraries = 'opus_pg,pg_cron'\n",
	"cron.database_name = 'postgres'\n",
	"cron.use_background_workers = on\n",
	"max_worker_processes = 16\n"));

$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_cron;
	CREATE TABLE docs (id integer PRIMARY KEY, body text);
	INSERT INTO docs SELECT i, 'Doc ' || i FROM generate_series(1, 40) AS i;
	SELECT opus_job_create('nightly', 'docs', '{id}', 'Title for: {{body}}', 'doc_titles',
	                       options => '{"max_tokens": 3, "temperature": 0}');
	SELECT cron.schedule('opus-nightly', '* * * * *', $$CALL opus_job_run('nightly')$$);
});

sub count_titles
{
	my ($rc, $out) = psql_state($node, 'SELECT count(*) FROM doc_titles', 20);
	return $rc eq '0' && $out =~ /^\d+$/ ? $out + 0 : -1;
}

ok(defined poll_until(150, sub { count_titles() == 40 }),
	'the scheduled job processed every row by itself')
  or diag($node->safe_psql('postgres',
	'SELECT status, return_message FROM cron.job_run_details'));

# Rows added later are taken by a later tick.
$node->safe_psql('postgres',
	"INSERT INTO docs SELECT i, 'Doc ' || i FROM generate_series(41, 50) AS i");
ok(defined poll_until(150, sub { count_titles() == 50 }),
	'a later tick processed the new rows');

is($node->safe_psql('postgres',
		'SELECT count(*), count(DISTINCT id) FROM doc_titles'),
	'50|50', 'one title per row');
my $runs = $node->safe_psql('postgres',
	"SELECT count(*) FILTER (WHERE status = 'succeeded') || '/' || count(*) FROM cron.job_run_details");
like($runs, qr/^(\d+)\/\1$/, "every cron run succeeded ($runs)");
is($node->safe_psql('postgres',
		"SELECT count(*) > 0 FROM opus_job_run WHERE status = 'finished'"),
	't', 'the job runs are logged as finished');
is($node->safe_psql('postgres',
		"SELECT phase || ' ' || rows_done || ' ' || rows_remaining FROM opus_job_progress WHERE job = 'nightly'"),
	'finished 50 0', 'progress: all rows done');

$node->safe_psql('postgres', "SELECT cron.unschedule('opus-nightly')");
$node->stop;
done_testing();
