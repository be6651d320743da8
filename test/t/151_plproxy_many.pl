# 151_plproxy_many.pl - the set-based, asynchronous and job-definition calls
# of opus_pg_proxy on one proxy and two data nodes (docs/scale-out.md):
#
#  - opus_generate_many_on / opus_chat_many_on: one row per item, in input
#    order, each item run on the node that owns its key (both nodes used),
#    with the same greedy text opus_generate_many / opus_chat_many give on
#    one node; mismatched arrays and null keys refused, empty arrays empty;
#  - opus_submit_on / opus_result_on / opus_cancel_on: an id is read back on
#    the node that owns its key;
#  - the constraint arguments (response_format, grammar, regex, choices)
#    and tools pass through every routed call: outputs obey them, with the
#    text a direct call gives; a bad constraint is the node's 22023;
#  - opus_cluster_job_create takes every argument opus_job_create takes
#    (source_query, prompt_expression, max_attempts, retry_backoff,
#    commit_every), and the job runs to the end on both nodes; the view
#    opus_cluster_progress sums every job over the nodes.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
plan skip_all => 'PL/Proxy is not installed (Debian: postgresql-15-plproxy)'
  unless -f "$sharedir/extension/plproxy.control";

my @nodes;
for my $i (0, 1)
{
	my $n = opus_node("data$i", conf => "opus.threads = 1\nopus_pg_proxy.node = $i\n");
	$n->safe_psql('postgres', qq{
		CREATE TABLE docs (id integer PRIMARY KEY, body text);
		INSERT INTO docs SELECT g, 'row ' || g FROM generate_series(1, 40) g
		WHERE hashtext(g::text) & 1 = $i;
	});
	push @nodes, $n;
}
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
});

sub owner { my ($key) = @_; return $proxy->safe_psql('postgres', "SELECT hashtext('$key') & 1"); }

# 1. opus_generate_many_on: input order, both nodes, same text as one node.
my $keys = q{ARRAY(SELECT 'k' || g FROM generate_series(1, 12) g)};
my $prompts = q{ARRAY(SELECT 'Count: ' || g || ',' FROM generate_series(1, 12) g)};
my $opts = 'max_tokens => 3, temperature => 0';
my $via = $proxy->safe_psql('postgres', qq{
	SELECT string_agg(ordinal || ':' || key || ':' || output || ':' || completion_tokens, '|' ORDER BY n)
	FROM opus_generate_many_on($keys, $prompts, $opts, "window" => 4) WITH ORDINALITY AS m(ordinal, key, output, f, pt, completion_tokens, n)});
my $direct = $nodes[0]->safe_psql('postgres', qq{
	SELECT string_agg(ordinal || ':k' || ordinal || ':' || output || ':' || completion_tokens, '|' ORDER BY ordinal)
	FROM opus_generate_many($prompts, $opts)});
is($via, $direct, 'opus_generate_many_on: rows in input order, the same greedy text as opus_generate_many on one node');
my %owners = map { owner("k$_") => 1 } (1 .. 12);
is(scalar(keys %owners), 2, 'the 12 keys belong to both nodes');

# 2. opus_chat_many_on.
my $convs = q{ARRAY(SELECT jsonb_build_array(jsonb_build_object('role', 'user', 'content', 'Say ' || g)) FROM generate_series(1, 6) g)};
$via = $proxy->safe_psql('postgres', qq{
	SELECT string_agg(ordinal || ':' || output, '|' ORDER BY n)
	FROM opus_chat_many_on(ARRAY(SELECT g::text FROM generate_series(1, 6) g), $convs, $opts)
	     WITH ORDINALITY AS m(ordinal, key, output, f, pt, ct, n)});
$direct = $nodes[1]->safe_psql('postgres', qq{
	SELECT string_agg(ordinal || ':' || output, '|' ORDER BY ordinal) FROM opus_chat_many($convs, $opts)});
is($via, $direct, 'opus_chat_many_on: the same answers as opus_chat_many on one node, in input order');

# 3. Argument checks.
is((psql_state($proxy, q{SELECT * FROM opus_generate_many_on('{a,b}', '{x}')}))[3], '22023',
	'keys and prompts of different lengths: 22023');
is((psql_state($proxy, q{SELECT * FROM opus_chat_many_on('{a}', NULL)}))[3], '22023',
	'conversations missing: 22023');
is((psql_state($proxy, q{SELECT * FROM opus_generate_many_on(ARRAY['a', NULL], '{x,y}')}))[3], '22004',
	'a null key: 22004');
is($proxy->safe_psql('postgres', q{SELECT count(*) FROM opus_generate_many_on('{}', '{}')}), '0',
	'empty arrays: no rows');
is($proxy->safe_psql('postgres', q{
	SELECT count(*), count(DISTINCT key) FROM opus_generate_keyed_on('{a,b,c}', '{x,y,z}', max_tokens => 1, "window" => 1)}),
	'3|3', 'opus_generate_keyed_on takes "window"');

# 4. Asynchronous requests routed by key.
my ($ka) = grep { owner($_) == 0 } map { "a$_" } (1 .. 20);
my ($kb) = grep { owner($_) == 1 } map { "a$_" } (1 .. 20);
my $id_a = $proxy->safe_psql('postgres', "SELECT opus_submit_on('$ka', 'The sky is', max_tokens => 4, temperature => 0)");
my $id_b = $proxy->safe_psql('postgres', qq{SELECT opus_submit_chat_on('$kb', '[{"role": "user", "content": "Hi"}]', max_tokens => 4, temperature => 0)});
like($id_a, qr/^\d+$/, 'opus_submit_on returns an id');
is($proxy->safe_psql('postgres', "SELECT opus_result_on('$ka', $id_a)"),
	$nodes[1]->safe_psql('postgres', "SELECT opus_generate('The sky is', max_tokens => 4, temperature => 0)"),
	'opus_result_on reads it back from the owning node: the text of a direct call');
is($proxy->safe_psql('postgres', "SELECT opus_result_completion_on('$kb', $id_b) #>> '{choices,0,finish_reason}' IS NOT NULL"),
	't', 'opus_result_completion_on reads the chat request');
my $id_c = $proxy->safe_psql('postgres', "SELECT opus_submit_on('$ka', 'Count: 1, 2,', max_tokens => 200)");
is($proxy->safe_psql('postgres', "SELECT opus_cancel_on('$ka', $id_c)"), 't', 'opus_cancel_on cancels it');
is($nodes[0]->safe_psql('postgres', "SELECT count(*) FROM opus_async WHERE id = $id_c AND state <> 'cancelled'"),
	'0', 'the request is gone on its node');

# 5. Constraints and tools pass through every routed call.
my $choice = q{choices => '{yes,no}', max_tokens => 4, temperature => 0};
my ($k0) = grep { owner($_) == 0 } map { "c$_" } (1 .. 20);
my ($k1) = grep { owner($_) == 1 } map { "c$_" } (1 .. 20);
my $hi = q{'[{"role": "user", "content": "Is the sky blue?"}]'};
is($proxy->safe_psql('postgres', "SELECT opus_generate_on('$k0', 'Is the sky blue? Answer:', $choice)"),
	$nodes[1]->safe_psql('postgres', "SELECT opus_generate('Is the sky blue? Answer:', $choice)"),
	'opus_generate_on passes choices: the text of a direct call');
like($proxy->safe_psql('postgres', "SELECT opus_generate_on('$k1', 'Is the sky blue? Answer:', $choice)"),
	qr/^(yes|no)$/, 'opus_generate_on with choices: one of the labels');
like($proxy->safe_psql('postgres', qq{SELECT opus_chat_on('$k0', $hi, regex => '[0-9]{2}', max_tokens => 4, temperature => 0,
	tools => '[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]')}),
	qr/^[0-9]{2}$/, 'opus_chat_on passes regex (and tools)');
is($proxy->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE output IN ('yes', 'no')), count(DISTINCT pg_catalog.hashtext(key) & 1)
	FROM opus_generate_keyed_on(ARRAY(SELECT 'c' || g FROM generate_series(1, 6) g),
		ARRAY(SELECT 'Is ' || g || ' even? Answer:' FROM generate_series(1, 6) g),
		choices => '{yes,no}', max_tokens => 4, temperature => 0)}),
	'6|2', 'opus_generate_keyed_on passes choices, on both nodes');
is($proxy->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE CASE WHEN finish_reason = 'length' THEN true ELSE jsonb_typeof(output::jsonb) = 'object' END)
	FROM opus_generate_many_on(ARRAY(SELECT 'j' || g FROM generate_series(1, 4) g),
		ARRAY(SELECT 'A JSON object about item ' || g || ':' FROM generate_series(1, 4) g),
		response_format => '{"type": "json_object"}', max_tokens => 24, temperature => 0)}),
	'4', 'opus_generate_many_on passes response_format: every output is a JSON object (or cut at max_tokens)');
is($proxy->safe_psql('postgres', qq{
	SELECT string_agg(output, ',' ORDER BY ordinal)
	FROM opus_chat_many_on('{a,b}', ARRAY[${hi}::jsonb, ${hi}::jsonb], grammar => 'root ::= "ja" | "nein"',
		max_tokens => 4, temperature => 0)}),
	join(',', ($nodes[0]->safe_psql('postgres', qq{SELECT opus_chat($hi, grammar => 'root ::= "ja" | "nein"', max_tokens => 4, temperature => 0)})) x 2),
	'opus_chat_many_on passes grammar: the text of a direct call');
my $id_g = $proxy->safe_psql('postgres', qq{SELECT opus_submit_on('$k1', 'Is the sky blue? Answer:', $choice)});
like($proxy->safe_psql('postgres', "SELECT opus_result_on('$k1', $id_g)"), qr/^(yes|no)$/,
	'opus_submit_on passes choices');
my $id_h = $proxy->safe_psql('postgres', qq{SELECT opus_submit_chat_on('$k0', $hi, regex => '[A-Z]{3}', max_tokens => 4, temperature => 0)});
like($proxy->safe_psql('postgres', "SELECT opus_result_on('$k0', $id_h)"), qr/^[A-Z]{3}$/,
	'opus_submit_chat_on passes regex');
is((psql_state($proxy, qq{SELECT opus_generate_on('$k0', 'x', regex => 'a', choices => '{a}')}))[3], '22023',
	'two constraint kinds through the proxy: the node\'s 22023');

# 6. A cluster job with every argument of opus_job_create.
$proxy->safe_psql('postgres', q{
	SELECT count(*) FROM opus_cluster_job_create('q', source_query => 'SELECT id, body FROM docs WHERE id <= 30',
		key_columns => '{id}', prompt_expression => $$'Item ' || s.id || ':'$$, target_table => 'q_out',
		target_column => 'answer', options => '{"max_tokens": 2, "temperature": 0}', concurrency => 4,
		max_attempts => 5, retry_backoff => '2 seconds', commit_every => 7)});
for my $i (0, 1)
{
	is($nodes[$i]->safe_psql('postgres', q{
		SELECT source IS NULL, source_query IS NOT NULL, prompt_expression IS NOT NULL, prompt_template IS NULL,
		       target_column, concurrency, max_attempts, retry_backoff, commit_every
		FROM opus_job WHERE name = 'q'}),
		't|t|t|t|answer|4|5|00:00:02|7', "node $i: the job has every argument");
}
$proxy->safe_psql('postgres', "CALL opus_cluster_job_run('q', step_rows => 8)");
is($proxy->safe_psql('postgres', 'SELECT nodes, rows_total, rows_done, rows_pending FROM opus_cluster_job_progress(\'q\')'),
	'2|30|30|0', 'the job ran to the end on both nodes');
is($proxy->safe_psql('postgres', q{SELECT job, nodes, rows_total, rows_done, rows_pending FROM opus_cluster_progress WHERE job = 'q'}),
	'q|2|30|30|0', 'view opus_cluster_progress: the job summed over both nodes');
is($proxy->safe_psql('postgres', q{SELECT string_agg(node || ':' || rows_done, ',' ORDER BY node) FROM opus_cluster_job_list() WHERE job = 'q'}),
	join(',', map { "$_:" . $nodes[$_]->safe_psql('postgres', 'SELECT count(*) FROM q_out') } (0, 1)),
	'opus_cluster_job_list: each node\'s own rows');
my $row = $nodes[owner('5')]->safe_psql('postgres', 'SELECT answer FROM q_out WHERE id = 5');
is($row, $nodes[1 - owner('5')]->safe_psql('postgres', q{SELECT opus_generate('Item 5:', max_tokens => 2, temperature => 0)}),
	'row 5 on its owner, with the text of a single node');

$proxy->stop;
no_server_crash_ok($_) for @nodes;
$_->stop for @nodes;
done_testing();
