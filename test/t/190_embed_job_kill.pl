# 190_embed_job_kill.pl - an embedding job survives a kill -9 of the engine
# of its embedding model in the middle of its run: the run goes on once the
# engine is back and ends with exactly one result per source row, each the
# very vector opus_embed gives for the row's text, with the model and its
# version recorded.
#
# The target table has no unique constraint, so a row written twice would
# show as a duplicate.  The requests the killed engine held (the default
# token budget of 512 puts about a dozen of these rows in flight) fail with
# 58000 and are retried without using up an attempt.  Where pgvector is installed,
# a second job writes a vector(384) column (skipped with a message where it
# is not).  Needs all-MiniLM-L6-v2 installed (make model-minilm before make
# install).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $ROWS = 150;
my $node = opus_node('embed_job_kill', conf => "opus.max_requests = 64\n"
	  . "opus.models = 'minilm = all-MiniLM-L6-v2; threads = 2'\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub minilm_state
{
	my ($rc, $out) = psql_state($node,
		"SELECT state || '|' || coalesce(engine_pid, 0) || '|' || coalesce(last_error, '') "
		  . "FROM opus_models WHERE name = 'minilm'", 10);
	return $rc eq '0' ? split(/\|/, $out, 3) : ('', 0, '');
}

my @st;
poll_until(120, sub { @st = minilm_state(); $st[0] eq 'ready' || $st[0] eq 'failed' });
if ($st[0] ne 'ready')
{
	plan skip_all => "all-MiniLM-L6-v2 is not served ($st[0]: $st[2]); run make model-minilm before make install";
}

# Rows of 20-40 tokens, so that the run takes long enough to be killed.
sql(qq{
	CREATE TABLE src (id integer PRIMARY KEY, body text);
	INSERT INTO src SELECT i, 'Row ' || i || ' of the table is a note about '
	    || (ARRAY['databases and their indexes', 'cats sleeping in the sun', 'the weather over the sea',
	              'quarterly tax filings and receipts'])[1 + i % 4]
	    || ', written on day ' || (i % 28 + 1) || ' of the month by someone who likes to write long sentences.'
	FROM generate_series(1, $ROWS) AS i;
	CREATE TABLE results (id integer, embedding real[]);
	SELECT opus_job_create('vec', 'src', '{id}', '{{body}}', 'results', target_column => 'embedding',
	                       options => '{"embed": true, "model": "minilm"}',
	                       commit_every => 8);
});

sub results_count
{
	my ($rc, $out) = psql_state($node, 'SELECT count(*) FROM results', 20);
	return $rc eq '0' && $out =~ /^\d+$/ ? $out + 0 : -1;
}

my $run = start_query($node, "CALL opus_job_run('vec')");
ok(defined poll_until(180, sub { results_count() >= 16 }), 'the run commits embeddings')
  or diag(slurp_file($node->logfile));
my $at_kill = results_count();
SKIP:
{
	skip 'the run finished before the engine could be killed', 2 if $at_kill >= $ROWS;
	ok(query_running($run), 'the run is still going');
	@st = minilm_state();
	ok($st[1] && kill('KILL', $st[1]), "minilm's engine $st[1] killed with $at_kill results written");
}
my $done = wait_query($run, 600);
is($done->{rc}, 0, 'the run finishes after the engine restarts') or diag($done->{err});
@st = minilm_state();
is($st[0], 'ready', 'the embedding model is served again');
cmp_ok(sql("SELECT restarts FROM opus_models WHERE name = 'minilm'"), '>=', 1,
	'its engine was restarted');

is(sql(q{
	SELECT count(*) || '|' || count(DISTINCT id) || '|' || count(embedding)
	       || '|' || (SELECT count(*) FROM src AS s WHERE NOT EXISTS (SELECT FROM results AS r WHERE r.id = s.id))
	FROM results}),
	"$ROWS|$ROWS|$ROWS|0", "exactly $ROWS results, no duplicates, none missing");
is(sql(q{
	SELECT count(*) FROM results AS r
	JOIN opus_embed_many(ARRAY(SELECT body FROM src ORDER BY id), 'minilm') AS m ON m.ordinal = r.id
	WHERE m.embedding = r.embedding}),
	$ROWS, 'every vector is the one opus_embed gives');
is(sql(q{SELECT state || ':' || model || ':' || model_version || ':' || count(*) || ':' || max(attempts)
	FROM opus_job_item GROUP BY state, model, model_version}),
	"done:minilm:1:$ROWS:1", 'every item done once by minilm version 1, no attempt used up');
my $retried = sql('SELECT sum(rows_retried) FROM opus_job_run');
cmp_ok($retried, '>=', $at_kill < $ROWS ? 1 : 0, "requests lost with the engine were retried ($retried)");
is(sql('SELECT busy_slots FROM opus_engine'), '0', 'no request slot left busy');

# A rerun has nothing to do.
my $again = wait_query(start_query($node, "CALL opus_job_run('vec')"), 60);
is($again->{rc}, 0, 'a rerun succeeds');
is(sql('SELECT count(*) FROM results'), $ROWS, 'and writes nothing');

# pgvector: a vector(384) target, when the extension is installed.
SKIP:
{
	skip 'pgvector is not installed on this machine: the vector target is not tested', 3
	  unless sql("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'") eq '1';
	sql(q{
		CREATE EXTENSION vector;
		CREATE TABLE vresults (id integer PRIMARY KEY, embedding vector(384));
		SELECT opus_job_create('vvec', 'src', '{id}', '{{body}}', 'vresults', target_column => 'embedding',
		                       options => '{"embed": true, "model": "minilm"}');
	});
	my $v = wait_query(start_query($node, "CALL opus_job_run('vvec', max_rows => 20)"), 300);
	is($v->{rc}, 0, 'a job writes a vector column') or diag($v->{err});
	is(sql('SELECT count(*) FROM vresults'), '20', 'twenty rows');
	is(sql(q{SELECT count(*) FROM vresults AS v JOIN results AS r USING (id)
	         WHERE v.embedding::real[] = r.embedding}), '20', 'the same vectors as in real[]');
}

$node->stop;
done_testing();
