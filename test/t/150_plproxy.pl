# 150_plproxy.pl - opus_pg behind PL/Proxy: one proxy, two data nodes, a
# table sharded by hashtext(id::text) & 1 (docs/scale-out.md).
#
#  - calls routed by key give the same greedy text as a direct call;
#  - both nodes serve the same model (opus_cluster_check_models);
#  - a distributed job over 400 rows survives kill -9 of one node's engine
#    and an immediate stop of the other node mid-run; when the node is back
#    it finishes with exactly one result per row, each on the node that owns
#    its key, with the text a single node gives;
#  - a node that is down fails its keys only; cancelling a proxy call
#    cancels the remote generation; the proxy connects as the calling role.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
plan skip_all => 'PL/Proxy is not installed (Debian: postgresql-15-plproxy)'
  unless -f "$sharedir/extension/plproxy.control";

my @nodes;
for my $i (0, 1)
{
	my $n = opus_node("data$i", conf => "opus.threads = 1\nopus_pg_proxy.node = $i\n");
	$n->safe_psql('postgres', q{
		CREATE TABLE docs (id integer PRIMARY KEY, body text);
		CREATE ROLE alice LOGIN;
		GRANT SELECT ON docs TO alice;
	});
	push @nodes, $n;
}
my $rows = 400;
for my $i (0, 1)
{
	$nodes[$i]->safe_psql('postgres',
		"INSERT INTO docs SELECT g, 'row ' || g FROM generate_series(1, $rows) g "
		  . "WHERE hashtext(g::text) & 1 = $i");
}
my @owned = map { $_->safe_psql('postgres', 'SELECT count(*) FROM docs') } @nodes;
is($owned[0] + $owned[1], $rows, "$rows rows sharded ($owned[0] + $owned[1])");

my $proxy = PostgreSQL::Test::Cluster->new('proxy');
$proxy->init;
$proxy->start;
my $p = join(', ', map {
	sprintf("p%d 'host=%s port=%d dbname=postgres'", $_, $nodes[$_]->host, $nodes[$_]->port)
} (0, 1));
$proxy->safe_psql('postgres', qq{
	CREATE EXTENSION plproxy;
	CREATE EXTENSION opus_pg_proxy;
	CREATE SERVER opus_cluster FOREIGN DATA WRAPPER plproxy OPTIONS ($p);
	CREATE USER MAPPING FOR PUBLIC SERVER opus_cluster;
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN;
	GRANT USAGE ON FOREIGN SERVER opus_cluster TO alice, bob;
});

sub owner { my ($key) = @_; return $proxy->safe_psql('postgres', "SELECT hashtext('$key') & 1"); }

# 1. Routed calls: same greedy text as a direct call on any node.
my $prompt = 'The capital of France is';
my $via = $proxy->safe_psql('postgres',
	"SELECT opus_generate_on('7', '$prompt', max_tokens => 8, temperature => 0)");
my $direct = $nodes[1 - owner('7')]->safe_psql('postgres',
	"SELECT opus_generate('$prompt', max_tokens => 8, temperature => 0)");
is($via, $direct, 'opus_generate_on = opus_generate on another node (greedy)');
my $chat = $proxy->safe_psql('postgres',
	q{SELECT opus_chat_on('k', '[{"role": "user", "content": "Hi"}]', max_tokens => 4, temperature => 0) IS NOT NULL});
is($chat, 't', 'opus_chat_on answers');
my $keyed = $proxy->safe_psql('postgres', q{
	SELECT count(*), count(DISTINCT key), bool_and(output IS NOT NULL)
	FROM opus_generate_keyed_on(ARRAY(SELECT g::text FROM generate_series(1, 10) g),
	                            ARRAY(SELECT 'Count: ' || g FROM generate_series(1, 10) g),
	                            max_tokens => 3, temperature => 0)});
is($keyed, '10|10|t', 'opus_generate_keyed_on: one row per key, from both nodes');

# 2. Same model everywhere.
my $models = $proxy->safe_psql('postgres',
	'SELECT count(*), count(DISTINCT sha256), min(node), max(node) FROM opus_cluster_models()');
is($models, '2|1|0|1', 'both nodes report the same model file');
like($proxy->safe_psql('postgres', 'SELECT opus_cluster_check_models()'),
	qr/^[0-9a-f]{64}$/, 'opus_cluster_check_models returns the SHA-256');

# 3. A distributed job through a kill -9 of one engine and a node stop.
$proxy->safe_psql('postgres', q{
	SELECT count(*) FROM opus_cluster_job_create('dist', 'docs', '{id}', 'Item {{id}}: {{body}}. Next:',
	                                             'docs_out', options => '{"max_tokens": 3, "temperature": 0}',
	                                             concurrency => 8)});
my $run = start_query($proxy, "CALL opus_cluster_job_run('dist', step_rows => 8, max_wait => '3 minutes')");
sub done_rows
{
	my $d = $proxy->safe_psql('postgres', 'SELECT rows_done FROM opus_cluster_job_progress(\'dist\')');
	return $d eq '' ? 0 : $d;
}
ok(defined poll_until(120, sub { done_rows() >= 60 }), 'the job is under way on the cluster');
my $engine1 = engine_pid($nodes[1]);
ok(kill('KILL', $engine1), 'engine of node 1 killed mid-run');
ok(defined poll_until(120, sub { done_rows() >= 160 }), 'the job goes on after the engine restarts');
$nodes[0]->stop('immediate');
note('node 0 stopped');
usleep(3_000_000);
ok(query_running($run), 'the distributed run waits for the missing node');
$nodes[0]->start;
wait_engine_ready($nodes[0]);
wait_query($run, 300);
is($run->{rc}, 0, 'distributed job finished') or diag($run->{err});

for my $i (0, 1)
{
	my $r = $nodes[$i]->safe_psql('postgres', qq{
		SELECT count(*), count(DISTINCT o.id),
		       count(*) = (SELECT count(*) FROM docs),
		       bool_and(hashtext(o.id::text) & 1 = $i),
		       bool_and(o.output IS NOT NULL)
		FROM docs_out o});
	is($r, "$owned[$i]|$owned[$i]|t|t|t", "node $i: one result per own row, none elsewhere");
}
# Same text as a single node: node 1's rows recomputed on node 0.
my @sample = split /\n/, $nodes[1]->safe_psql('postgres',
	q{SELECT d.id FROM docs d ORDER BY d.id LIMIT 5});
for my $id (@sample)
{
	my $out = $nodes[1]->safe_psql('postgres', "SELECT output FROM docs_out WHERE id = $id");
	my $again = $nodes[0]->safe_psql('postgres',
		"SELECT opus_generate('Item $id: row $id. Next:', max_tokens => 3, temperature => 0)");
	is($out, $again, "row $id: the same text as a single node gives");
}

# 4. A node that is down fails its own keys only.
my ($k0) = grep { owner($_) == 0 } map { "$_" } (1 .. 20);
my ($k1) = grep { owner($_) == 1 } map { "$_" } (1 .. 20);
$nodes[1]->stop('fast');
my ($rc, $out, $err) = $proxy->psql('postgres',
	"SELECT opus_generate_on('$k1', 'Hi', max_tokens => 1, temperature => 0)");
isnt($rc, 0, 'a key of the stopped node fails');
like($err, qr/connect|connection|server/i, 'with a connection error') or diag($err);
($rc, $out) = $proxy->psql('postgres',
	"SELECT opus_generate_on('$k0', 'Hi', max_tokens => 1, temperature => 0) IS NOT NULL");
is($out, 't', 'a key of the other node still works');
$nodes[1]->start;
wait_engine_ready($nodes[1]);

# 5. Cancelling the proxy call cancels the remote generation.
($rc, $out, $err) = $proxy->psql('postgres',
	"SET statement_timeout = '1500ms'; "
	  . "SELECT opus_generate_on('$k1', 'Count from 1 to 10000: 1, 2, 3,', max_tokens => 1500, temperature => 0)");
isnt($rc, 0, 'proxy call cancelled by statement_timeout');
ok(defined poll_until(20, sub {
	$nodes[1]->safe_psql('postgres', 'SELECT busy_slots FROM opus_engine') eq '0' }),
	'the remote request was given up (no busy slot on the node)');

# 6. The proxy connects as the calling role.
$out = $proxy->safe_psql('postgres',
	"SET ROLE alice; SELECT opus_generate_on('$k0', 'Hi', max_tokens => 1, temperature => 0) IS NOT NULL");
is($out, 't', 'alice calls through the proxy');
ok(defined poll_until(20, sub {
	$nodes[0]->safe_psql('postgres',
		q{SELECT count(*) > 0 FROM opus_requests WHERE userid = 'alice'::regrole}) eq 't' }),
	'the node ran it as alice');
($rc, $out, $err) = $proxy->psql('postgres',
	"SET ROLE bob; SELECT opus_generate_on('$k0', 'Hi', max_tokens => 1)");
isnt($rc, 0, 'a role unknown on the nodes is refused');
like($err, qr/bob/, 'the error names the role') or diag($err);

$proxy->stop;
no_server_crash_ok($_) for @nodes;
$_->stop for @nodes;
done_testing();
