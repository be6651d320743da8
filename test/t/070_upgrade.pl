# 070_upgrade.pl - ALTER EXTENSION opus_pg UPDATE from every released
# version: the updated catalog equals a fresh install's, the data survives,
# and a job interrupted half-way under the old version finishes after the
# update with exactly one result per source row.
#
# For each installed version older than the default one, in its own
# database:
#
#  1. CREATE EXTENSION opus_pg VERSION 'old'.  The library built here is the
#     new one, and it refuses the old SQL (55000, naming both versions):
#     generation functions and opus_job_run fail at once, while the plpgsql
#     job definitions (opus_job_create) and the tables work.
#  2. Fill it as the old release would have: rows in the request log, and a
#     job whose run died half-way (half of its work items done, their
#     results in the target table, the other half pending with their
#     prompts, the run still marked 'running' by a backend that is gone).
#     These rows are written with SQL, the way the old library's job runner
#     and logger write them (opus_job_write, the logger's INSERT), since the
#     old library itself is not built here.
#  3. Update step by step to the default version (ALTER EXTENSION ... UPDATE
#     TO each version on the way).
#  4. Compare the catalog with a fresh install in database postgres: every
#     member of the extension; functions with their signatures, defaults,
#     result types, kind, volatility, strictness, parallel safety, security,
#     leakproofness, cost, settings, language and body; tables, views and
#     indexes with their columns (in order), types, defaults, identity,
#     constraints, options, row-level security and policies; view
#     definitions; privileges (also the initial privileges pg_dump uses),
#     comments, and which tables pg_dump dumps (pg_extension_config_dump).
#  5. The data is unchanged; the job then runs to the end: each source row
#     has exactly one result, the results from before the update are kept,
#     the dead run reads 'interrupted'.  The request logger keeps writing
#     into the updated database (opus.database), and an asynchronous result
#     submitted before the update is still readable after it.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OpusTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $LOGDB = 'from_0_1_0';    # opus.database: the oldest release's database
my $node = opus_node('upgrade',
	conf => "opus.database = '$LOGDB'\nopus.log_flush_interval = 50\n");

my $newest = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'opus_pg'");
my @versions = split /\n/, $node->safe_psql('postgres', q{
	SELECT version FROM pg_available_extension_versions WHERE name = 'opus_pg'
	ORDER BY pg_catalog.string_to_array(version, '.')::integer[]});
my @old = grep { $_ ne $newest } @versions;
ok(scalar(@old) >= 1, "released versions to update from: @old (default $newest)");
is($node->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'opus_pg'"),
	$newest, "database postgres has a fresh $newest");

# The catalog of the extension in a database, one line per property, sorted.
my $CATALOG = <<'SQL';
WITH ext AS (SELECT oid, extconfig, extcondition FROM pg_extension WHERE extname = 'opus_pg'),
members AS (
    SELECT d.classid, d.objid FROM pg_depend AS d, ext
    WHERE d.deptype = 'e' AND d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid),
rels AS (SELECT c.* FROM pg_class AS c JOIN members AS m ON m.classid = 'pg_class'::regclass AND m.objid = c.oid),
procs AS (SELECT p.* FROM pg_proc AS p JOIN members AS m ON m.classid = 'pg_proc'::regclass AND m.objid = p.oid),
lines AS (
    SELECT 'member ' || pg_describe_object(classid, objid, 0) AS line FROM members
    UNION ALL
    SELECT 'comment ' || pg_describe_object(m.classid, m.objid, 0) || ': ' || d.description
    FROM members AS m JOIN pg_description AS d ON d.classoid = m.classid AND d.objoid = m.objid AND d.objsubid = 0
    UNION ALL
    SELECT 'function ' || p.oid::regprocedure::text
        || ' args(' || pg_get_function_arguments(p.oid) || ')'
        || ' returns ' || coalesce(pg_get_function_result(p.oid), '-')
        || ' kind ' || p.prokind::text || ' volatile ' || p.provolatile::text || ' strict ' || p.proisstrict
        || ' parallel ' || p.proparallel::text || ' secdef ' || p.prosecdef || ' leakproof ' || p.proleakproof
        || ' cost ' || p.procost || ' rows ' || p.prorows
        || ' lang ' || (SELECT lanname FROM pg_language WHERE oid = p.prolang)
        || ' config ' || coalesce(p.proconfig::text, '-')
        || ' owner ' || p.proowner::regrole::text
        || ' acl ' || coalesce(p.proacl::text, '-')
        || ' bin ' || coalesce(p.probin, '-')
        || ' body ' || md5(p.prosrc) || ' ' || left(regexp_replace(p.prosrc, '\s+', ' ', 'g'), 60)
    FROM procs AS p
    UNION ALL
    SELECT 'relation ' || c.oid::regclass::text || ' kind ' || c.relkind::text
        || ' options ' || coalesce(c.reloptions::text, '-')
        || ' rls ' || c.relrowsecurity || ' force_rls ' || c.relforcerowsecurity
        || ' persistence ' || c.relpersistence::text || ' owner ' || c.relowner::regrole::text
        || ' acl ' || coalesce(c.relacl::text, '-')
    FROM rels AS c
    UNION ALL
    SELECT 'column ' || c.oid::regclass::text || ' #'
        || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) || ' ' || quote_ident(a.attname)
        || ' ' || format_type(a.atttypid, a.atttypmod) || ' notnull ' || a.attnotnull
        || ' identity ' || coalesce(nullif(a.attidentity::text, ''), '-')
        || ' generated ' || coalesce(nullif(a.attgenerated::text, ''), '-')
        || ' default ' || coalesce(pg_get_expr(ad.adbin, ad.adrelid), '-')
        || ' collation ' || coalesce((SELECT collname FROM pg_collation WHERE oid = a.attcollation), '-')
        || ' acl ' || coalesce(a.attacl::text, '-')
        || ' comment ' || coalesce(col_description(c.oid, a.attnum), '-')
    FROM rels AS c JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef AS ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
    UNION ALL
    SELECT 'constraint ' || c.oid::regclass::text || ' ' || quote_ident(k.conname) || ' '
        || pg_get_constraintdef(k.oid) || ' deferrable ' || k.condeferrable
    FROM rels AS c JOIN pg_constraint AS k ON k.conrelid = c.oid
    UNION ALL
    SELECT 'index ' || pg_get_indexdef(i.indexrelid)
    FROM rels AS c JOIN pg_index AS i ON i.indrelid = c.oid
    UNION ALL
    SELECT 'policy ' || c.oid::regclass::text || ' ' || quote_ident(p.polname) || ' cmd ' || p.polcmd::text
        || ' permissive ' || p.polpermissive
        || ' roles ' || array(SELECT CASE WHEN r = 0 THEN 'public' ELSE r::regrole::text END
                              FROM unnest(p.polroles) AS r ORDER BY 1)::text
        || ' using ' || coalesce(pg_get_expr(p.polqual, p.polrelid), '-')
        || ' check ' || coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '-')
    FROM rels AS c JOIN pg_policy AS p ON p.polrelid = c.oid
    UNION ALL
    SELECT 'trigger ' || pg_get_triggerdef(t.oid)
    FROM rels AS c JOIN pg_trigger AS t ON t.tgrelid = c.oid AND NOT t.tgisinternal
    UNION ALL
    SELECT 'view ' || c.oid::regclass::text || ' ' || pg_get_viewdef(c.oid)
    FROM rels AS c WHERE c.relkind IN ('v', 'm')
    UNION ALL
    SELECT 'sequence ' || s.seqrelid::regclass::text || ' ' || format_type(s.seqtypid, NULL)
        || ' ' || s.seqstart || ' ' || s.seqincrement || ' ' || s.seqmin || ' ' || s.seqmax || ' ' || s.seqcycle
    FROM pg_sequence AS s
    JOIN pg_depend AS d ON d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid
                       AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
    JOIN rels AS c ON c.oid = d.refobjid
    UNION ALL
    SELECT 'type ' || format_type(t.oid, NULL) || ' ' || t.typtype::text
    FROM pg_type AS t JOIN members AS m ON m.classid = 'pg_type'::regclass AND m.objid = t.oid
    UNION ALL
    SELECT 'init_privs ' || pg_describe_object(ip.classoid, ip.objoid, ip.objsubid) || ' '
        || ip.privtype::text || ' ' || ip.initprivs::text
    FROM pg_init_privs AS ip JOIN members AS m ON m.classid = ip.classoid AND m.objid = ip.objoid
    UNION ALL
    SELECT 'config_dump ' || c::regclass::text || ' ' || coalesce(ext.extcondition[n], '-')
    FROM ext, unnest(ext.extconfig) WITH ORDINALITY AS x(c, n)
    UNION ALL
    SELECT 'extension ' || e.extname || ' schema ' || e.extnamespace::regnamespace::text
        || ' relocatable ' || e.extrelocatable || ' version ' || e.extversion
    FROM pg_extension AS e WHERE e.extname = 'opus_pg')
SELECT line FROM lines ORDER BY line COLLATE "C";
SQL

sub catalog
{
	my ($db) = @_;
	return [ split /\n/, $node->safe_psql($db, $CATALOG) ];
}

# A digest of a query's rows, to compare data before and after the update.
sub digest
{
	my ($db, $q) = @_;
	return $node->safe_psql($db, "SELECT count(*) || ' ' || md5(coalesce(string_agg(x::text, E'\\n' ORDER BY x::text), '')) FROM ($q) AS x");
}

my $fresh = catalog('postgres');
cmp_ok(scalar(@$fresh), '>', 100, 'the fresh install lists ' . scalar(@$fresh) . ' catalog lines');
ok((grep { /^function opus_generate\(/ } @$fresh) && (grep { /^column opus_requests #2 request_id bigint/ } @$fresh)
	  && (grep { /^policy opus_job / } @$fresh) && (grep { /^config_dump opus_job_item / } @$fresh),
	'the listing has functions, columns, policies and dump configuration');

# An unread asynchronous result from before the updates.
my $async_id = $node->safe_psql('postgres', "SELECT opus_submit('Hello', max_tokens => 2, temperature => 0)");

my $ROWS = 20;
for my $v (@old)
{
	(my $db = "from_$v") =~ tr/./_/;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION opus_pg VERSION '$v'");
	is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'opus_pg'"),
		$v, "$db: version $v installed");

	# 1. The new library refuses the old SQL.
	my ($rc, $out, $err) = $node->psql($db, "SELECT opus_generate('x', max_tokens => 1)");
	like($err, qr/opus_pg library version \Q$newest\E does not match the extension version \Q$v\E installed in database "$db"/,
		"$db: generation refused under the $v SQL, naming both versions");
	like($err, qr/ALTER EXTENSION opus_pg UPDATE/, "$db: the hint says what to run");
	is(wait_query(start_query($node, "SELECT opus_generate('x', max_tokens => 1)", db => $db), 60)->{sqlstate},
		'55000', "$db: SQLSTATE 55000");

	# The request logger leaves the old version's table alone.
	if ($db eq $LOGDB)
	{
		my $off = log_offset($node);
		$node->safe_psql('postgres', "SELECT opus_generate('Not logged', max_tokens => 1)");
		ok(defined poll_until(120, sub {
			substr(slurp_file($node->logfile), $off) =~
			  /the extension in database "$db" is version \Q$v\E, the library \Q$newest\E; request records are discarded/ }),
			"$db: the logger refuses the $v table, naming both versions");
		is($node->safe_psql($db, 'SELECT count(*) FROM opus_requests'), '0', "$db: and wrote nothing");
	}

	# 2. Fill it as the old release would have.
	$node->safe_psql($db, q{
		CREATE TABLE src (id integer PRIMARY KEY, body text);
		INSERT INTO src SELECT i, 'Row ' || i FROM generate_series(1, 20) AS i;
		CREATE TABLE results (id integer, output text);
		SELECT opus_job_create('half', 'src', '{id}', 'Say {{body}}', 'results',
		                       options => '{"max_tokens": 2, "temperature": 0}', commit_every => 4);
	});
	is(wait_query(start_query($node, "CALL opus_job_run('half')", db => $db), 60)->{sqlstate}, '55000',
		"$db: the job does not run under the $v SQL");
	$node->safe_psql($db, q{
		BEGIN;
		INSERT INTO opus_job_item (job_id, owner, key, prompt)
		SELECT j.id, j.owner, pg_catalog.jsonb_build_object('id', s.id), opus_render(j.prompt_template, to_jsonb(s))
		FROM opus_job AS j, src AS s WHERE j.name = 'half' ORDER BY s.id;
		-- what opus_job_write does for a committed chunk
		INSERT INTO results SELECT id, 'written by the old release #' || id FROM src WHERE id <= 10;
		UPDATE opus_job_item SET state = 'done', attempts = 1, prompt = NULL, finish_reason = 'length',
		       prompt_tokens = 5, completion_tokens = 2, cached_tokens = 0, finished_at = now()
		WHERE (key->>'id')::integer <= 10;
		-- the run, left 'running' by a backend that is gone
		INSERT INTO opus_job_run (job_id, owner, pid, run_by, phase, generating_since,
		                          rows_total, rows_added, rows_done, prompt_tokens, completion_tokens)
		SELECT id, owner, 1073741823, owner, 'generating', now(), 20, 20, 10, 50, 20
		FROM opus_job WHERE name = 'half';
		-- the request log: what the logger inserts
		INSERT INTO opus_requests (request_id, userid, dbid, backend_pid, model, kind, params, status,
		                           finish_reason, prompt_tokens, completion_tokens, cached_tokens, error,
		                           submitted_at, started_at, first_token_at, finished_at)
		VALUES (900000001, 10, 1, 4242, 'm', 'generate', '{"max_tokens": 2}', 'completed', 'length', 3, 2, 0, NULL,
		        now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour'),
		       (900000002, 10, 1, 4242, 'm', 'chat', '{}', 'error', 'error', 3, 0, 0, 'boom',
		        now() - interval '1 hour', now() - interval '1 hour', NULL, now() - interval '1 hour'),
		       (900000003, 10, 1, 4243, 'm', 'generate', '{}', 'running', NULL, NULL, NULL, NULL, NULL,
		        now() - interval '1 hour', NULL, NULL, NULL);
		COMMIT;
	});
	my %queries = (
		job => 'SELECT * FROM opus_job',
		# (0.2.0 adds model and model_version: NULL for rows done before, checked below)
		items => "SELECT to_jsonb(i) - 'model' - 'model_version' FROM opus_job_item i",
		runs => 'SELECT * FROM opus_job_run',
		results => 'SELECT * FROM results',
		# (0.2.0 adds username, filled from userid: checked below)
		log => "SELECT to_jsonb(q) - 'username' FROM opus_requests q WHERE request_id >= 900000000",
		progress => 'SELECT * FROM opus_job_progress');
	my %before = map { $_ => digest($db, $queries{$_}) } keys %queries;
	like($before{items}, qr/^20 /, "$db: 20 work items, half done");

	# 3. Update step by step.
	my $seen = 0;
	for my $to (@versions)
	{
		if ($to eq $v) { $seen = 1; next; }
		next unless $seen;
		$node->safe_psql($db, "ALTER EXTENSION opus_pg UPDATE TO '$to'");
		is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'opus_pg'"),
			$to, "$db: updated to $to");
	}

	# 4. The catalog equals a fresh install's.
	my $updated = catalog($db);
	my %in_fresh = map { $_ => 1 } @$fresh;
	my %in_updated = map { $_ => 1 } @$updated;
	my @missing = grep { !$in_updated{$_} } @$fresh;
	my @extra = grep { !$in_fresh{$_} } @$updated;
	is(scalar(@missing) + scalar(@extra), 0, "$db: the updated catalog equals a fresh $newest install ("
		  . scalar(@$updated) . ' lines)')
	  or diag(join("\n", (map { "  only in the fresh install: $_" } @missing),
		(map { "  only in the updated one:   $_" } @extra)));

	# 5. Data: unchanged by the update.
	for my $k (sort keys %queries)
	{
		is(digest($db, $queries{$k}), $before{$k}, "$db: $k unchanged by the update");
	}
	is($node->safe_psql($db, "SELECT count(*) FILTER (WHERE username IS DISTINCT FROM userid::regrole::text) "
		  . "FROM opus_requests WHERE request_id >= 900000000"),
		'0', "$db: the update names the log rows' roles (username)");
	is($node->safe_psql($db, 'SELECT count(*) FILTER (WHERE model IS NOT NULL OR model_version IS NOT NULL) '
		  . 'FROM opus_job_item'),
		'0', "$db: items done before the update name no model");
	is($node->safe_psql($db, "SELECT phase || ' ' || rows_done || '/' || rows_total FROM opus_job_progress WHERE job = 'half'"),
		'interrupted 10/20', "$db: progress shows the old run interrupted half-way");

	# The job finishes, each row exactly once.
	my $run = wait_query(start_query($node, "CALL opus_job_run('half')", db => $db), 300);
	is($run->{rc}, 0, "$db: the job runs after the update") or diag($run->{err});
	is($node->safe_psql($db, q{
			SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || count(output)
			       || ' ' || count(*) FILTER (WHERE output LIKE 'written by the old release #%')
			       || ' ' || (SELECT count(*) FROM src AS s WHERE NOT EXISTS (SELECT FROM results AS r WHERE r.id = s.id))
			FROM results}),
		"$ROWS $ROWS $ROWS 10 0", "$db: exactly one result per source row, the 10 old ones kept");
	is($node->safe_psql($db, "SELECT state || ':' || count(*) || ':' || max(attempts) FROM opus_job_item GROUP BY state"),
		"done:$ROWS:1", "$db: every item done, none twice");
	is($node->safe_psql($db, "SELECT string_agg(status || ' ' || rows_done, ',' ORDER BY id) FROM opus_job_run"),
		'interrupted 10,finished 10', "$db: the old run reads interrupted, the new one did the other 10");
	my $again = wait_query(start_query($node, "CALL opus_job_run('half')", db => $db), 120);
	is($again->{rc}, 0, "$db: a second run succeeds");
	is($node->safe_psql($db, 'SELECT count(*) FROM results'), $ROWS, "$db: and writes nothing");

	# The comparison can fail: small differences an update script could
	# leave behind are each found.
	$node->safe_psql($db, q{
		ALTER TABLE opus_job ALTER COLUMN commit_every SET DEFAULT 65;
		REVOKE SELECT ON opus_requests FROM PUBLIC;
		ALTER FUNCTION opus_render(text, jsonb) VOLATILE;
		COMMENT ON VIEW opus_job_progress IS 'changed';
		ALTER EXTENSION opus_pg DROP FUNCTION opus_template_columns(text);
	});
	my %now = map { $_ => 1 } @{ catalog($db) };
	my @diff = ((grep { !$now{$_} } @$fresh), (grep { !$in_fresh{$_} } keys %now));
	for my $want (qr/^column opus_job #\d+ commit_every .* default 65 /, qr/^relation opus_requests .* acl \{\w+=arwdDxt\/\w+\}$/,
		qr/^function opus_render\(text,jsonb\) .* volatile v /, qr/^comment view opus_job_progress: changed/,
		qr/^member function opus_template_columns\(text\)$/)
	{
		ok((grep { $_ =~ $want } @diff), "$db: the comparison finds a planted difference: $want")
		  or diag(join("\n", @diff));
	}
}

# The logger still writes into the updated database named by opus.database.
SKIP:
{
	skip "no database $LOGDB (no 0.1.0 to update from)", 1 unless grep { $_ eq '0.1.0' } @old;
	my $before = $node->safe_psql($LOGDB, 'SELECT coalesce(max(id), 0) FROM opus_requests');
	$node->safe_psql('postgres', "SELECT opus_generate('Logged after the update', max_tokens => 2, temperature => 0)");
	ok(defined poll_until(120, sub {
		$node->safe_psql($LOGDB, "SELECT count(*) FROM opus_requests WHERE id > $before AND status = 'completed'") > 0 }),
		'the request logger writes into the updated database');
}

my ($rc, $res) = psql_state($node, "SELECT opus_result($async_id) IS NOT NULL");
is($res, 't', 'the asynchronous result from before the updates is readable');

no_server_crash_ok($node);
$node->stop;
done_testing();
