-- security: the install script and the extension's SQL against hostile
-- objects.  Functions and operators that would win overload resolution over
-- pg_catalog's (better-matching argument types than pg_catalog's variadic,
-- polymorphic or cross-type ones) are planted in public and in a schema put
-- first in search_path; each writes a row into a trap table when called.
-- Then CREATE EXTENSION runs in a fresh database and every function is
-- exercised (as the superuser and as a plain role); the trap stays empty.
-- Every update path (ALTER EXTENSION UPDATE) is run the same way.
-- Also: the request logger (a superuser background worker) in the
-- regression database; SECURITY DEFINER functions have a pinned
-- search_path; nothing in the script is CREATE OR REPLACE'd; every object
-- the extension's members depend on is the extension's own or pg_catalog's.

-- plant(schema): hostile functions and operators in schema, each logging
-- its call into public.opus_trap and then doing what pg_catalog's would.
CREATE FUNCTION plant(s text) RETURNS void LANGUAGE plpgsql AS $plant$
DECLARE
    f record;
BEGIN
    FOR f IN SELECT * FROM (VALUES
        ('format', 'text, name', 'text', 'pg_catalog.format($1, $2)'),
        ('format', 'text, text', 'text', 'pg_catalog.format($1, $2)'),
        ('format', 'text, text, text', 'text', 'pg_catalog.format($1, $2, $3)'),
        ('format', 'text, name, name', 'text', 'pg_catalog.format($1, $2, $3)'),
        ('format', 'text, text, text, text', 'text', 'pg_catalog.format($1, $2, $3, $4)'),
        ('format', 'text, text, text, text, text', 'text', 'pg_catalog.format($1, $2, $3, $4, $5)'),
        ('format', 'text, integer', 'text', 'pg_catalog.format($1, $2)'),
        ('format', 'text, bigint', 'text', 'pg_catalog.format($1, $2)'),
        ('concat', 'text, text', 'text', 'pg_catalog.concat($1, $2)'),
        ('jsonb_build_object', 'text, text', 'jsonb', 'pg_catalog.jsonb_build_object($1, $2)'),
        ('jsonb_build_object', 'text, text, text, text', 'jsonb', 'pg_catalog.jsonb_build_object($1, $2, $3, $4)'),
        ('jsonb_build_array', 'jsonb', 'jsonb', 'pg_catalog.jsonb_build_array($1)'),
        ('jsonb_build_array', 'jsonb, jsonb', 'jsonb', 'pg_catalog.jsonb_build_array($1, $2)'),
        ('num_nonnulls', 'text, text', 'integer', 'pg_catalog.num_nonnulls($1, $2)'),
        ('num_nonnulls', 'regclass, text', 'integer', 'pg_catalog.num_nonnulls($1, $2)'),
        ('array_append', 'text[], text', 'text[]', 'pg_catalog.array_append($1, $2)'),
        ('array_append', 'bigint[], bigint', 'bigint[]', 'pg_catalog.array_append($1, $2)'),
        ('array_append', 'integer[], integer', 'integer[]', 'pg_catalog.array_append($1, $2)'),
        ('array_append', 'jsonb[], jsonb', 'jsonb[]', 'pg_catalog.array_append($1, $2)'),
        ('array_cat', 'bigint[], bigint[]', 'bigint[]', 'pg_catalog.array_cat($1, $2)'),
        ('array_cat', 'jsonb[], jsonb[]', 'jsonb[]', 'pg_catalog.array_cat($1, $2)'),
        ('array_cat', 'text[], text[]', 'text[]', 'pg_catalog.array_cat($1, $2)'),
        ('cardinality', 'bigint[]', 'integer', 'pg_catalog.cardinality($1)'),
        ('cardinality', 'text[]', 'integer', 'pg_catalog.cardinality($1)'),
        ('cardinality', 'integer[]', 'integer', 'pg_catalog.cardinality($1)'),
        ('array_length', 'text[], integer', 'integer', 'pg_catalog.array_length($1, $2)'),
        ('array_position', 'bigint[], bigint', 'integer', 'pg_catalog.array_position($1, $2)'),
        ('unnest', 'bigint[]', 'SETOF bigint', NULL),
        ('to_jsonb', 'text', 'jsonb', 'pg_catalog.to_jsonb($1)'),
        ('to_jsonb', 'bigint', 'jsonb', 'pg_catalog.to_jsonb($1)'),
        ('quote_ident', 'name', 'text', 'pg_catalog.quote_ident($1)'),
        ('power', 'integer, integer', 'double precision', 'pg_catalog.power($1, $2)'),
        ('power', 'integer, bigint', 'double precision', 'pg_catalog.power($1, $2)'),
        ('date_part', 'text, interval', 'double precision', 'pg_catalog.date_part($1, $2)'),
        ('round', 'numeric, integer', 'numeric', 'pg_catalog.round($1, $2)'),
        ('make_interval', 'integer', 'interval', 'pg_catalog.make_interval(mins => $1)'),
        ('pg_has_role', 'name, oid, text', 'boolean', 'pg_catalog.pg_has_role($1, $2, $3)'),
        ('pg_has_role', 'name, text, text', 'boolean', 'pg_catalog.pg_has_role($1, $2, $3)')
    ) AS v(name, args, ret, expr)
    LOOP
        IF f.expr IS NULL THEN
            EXECUTE pg_catalog.format(
                'CREATE FUNCTION %I.%I(%s) RETURNS %s LANGUAGE plpgsql AS $f$ BEGIN '
                'INSERT INTO public.opus_trap VALUES (%L, current_user); '
                'RETURN QUERY SELECT * FROM pg_catalog.unnest($1); END $f$',
                s, f.name, f.args, f.ret, s || '.' || f.name || '(' || f.args || ')');
            INSERT INTO public.opus_planted VALUES (pg_catalog.format('DROP FUNCTION %I.%I(%s)', s, f.name, f.args));
        ELSE
            EXECUTE pg_catalog.format(
                'CREATE FUNCTION %I.%I(%s) RETURNS %s LANGUAGE plpgsql AS $f$ BEGIN '
                'INSERT INTO public.opus_trap VALUES (%L, current_user); '
                'RETURN %s; END $f$',
                s, f.name, f.args, f.ret, s || '.' || f.name || '(' || f.args || ')', f.expr);
            INSERT INTO public.opus_planted VALUES (pg_catalog.format('DROP FUNCTION %I.%I(%s)', s, f.name, f.args));
        END IF;
    END LOOP;
    -- Cross-type operators pg_catalog resolves only through a cast, and
    -- same-type ones on types without their own (varchar, name).
    FOR f IN SELECT * FROM (VALUES
        ('=', 'numeric', 'integer', 'boolean', '$1 OPERATOR(pg_catalog.=) $2'),
        ('<', 'numeric', 'integer', 'boolean', '$1 OPERATOR(pg_catalog.<) $2'),
        ('>', 'numeric', 'integer', 'boolean', '$1 OPERATOR(pg_catalog.>) $2'),
        ('/', 'numeric', 'integer', 'numeric', '$1 OPERATOR(pg_catalog./) $2'),
        ('*', 'interval', 'integer', 'interval', '$1 OPERATOR(pg_catalog.*) $2'),
        ('*', 'interval', 'double precision', 'interval', '$1 OPERATOR(pg_catalog.*) $2'),
        ('=', 'bigint', 'numeric', 'boolean', '$1 OPERATOR(pg_catalog.=) $2'),
        ('=', 'oid', 'bigint', 'boolean', '$1 OPERATOR(pg_catalog.=) $2'),
        ('=', 'oid', 'integer', 'boolean', '$1 OPERATOR(pg_catalog.=) $2'),
        ('=', 'regrole', 'oid', 'boolean', '$1 OPERATOR(pg_catalog.=) $2'),
        ('=', 'varchar', 'varchar', 'boolean', '$1 OPERATOR(pg_catalog.=) $2'),
        ('=', 'name', 'name', 'boolean', '$1 OPERATOR(pg_catalog.=) $2'),
        ('=', 'name', 'varchar', 'boolean', '$1 OPERATOR(pg_catalog.=) $2'),
        ('<>', 'name', 'name', 'boolean', '$1 OPERATOR(pg_catalog.<>) $2'),
        ('=', 'char', 'text', 'boolean', '$1::text OPERATOR(pg_catalog.=) $2'),
        ('||', 'text', 'varchar', 'text', '$1 OPERATOR(pg_catalog.||) $2'),
        ('||', 'name', 'text', 'text', '$1 OPERATOR(pg_catalog.||) $2'),
        ('->>', 'jsonb', 'varchar', 'text', '$1 OPERATOR(pg_catalog.->>) $2::text'),
        ('-', 'timestamptz', 'timestamp', 'interval', '$1 OPERATOR(pg_catalog.-) $2'),
        ('<', 'timestamptz', 'timestamp', 'boolean', '$1 OPERATOR(pg_catalog.<) $2'),
        ('=', 'jsonb', 'text', 'boolean', '$1 OPERATOR(pg_catalog.=) pg_catalog.to_jsonb($2)')
    ) AS v(op, l, r, ret, expr)
    LOOP
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION %I.%I(%s, %s) RETURNS %s LANGUAGE plpgsql AS $f$ BEGIN '
            'INSERT INTO public.opus_trap VALUES (%L, current_user); RETURN %s; END $f$',
            s, 'trap_op_' || md5(f.op || f.l || f.r), f.l, f.r, f.ret,
            s || '.' || f.op || '(' || f.l || ', ' || f.r || ')', f.expr);
        EXECUTE pg_catalog.format('CREATE OPERATOR %I.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = %I.%I)',
            s, f.op, f.l, f.r, s, 'trap_op_' || md5(f.op || f.l || f.r));
        INSERT INTO public.opus_planted VALUES
            (pg_catalog.format('DROP FUNCTION %I.%I(%s, %s) CASCADE', s, 'trap_op_' || md5(f.op || f.l || f.r), f.l, f.r));
    END LOOP;
END
$plant$;

-- sec_wait(q): poll the boolean query q for up to 30 s.
CREATE FUNCTION sec_wait(q text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    ok boolean;
BEGIN
    FOR i IN 1 .. 300 LOOP
        EXECUTE q INTO ok;
        IF ok THEN
            RETURN true;
        END IF;
        PERFORM pg_sleep(0.1);
    END LOOP;
    RETURN false;
END $$;

-- 1. The request logger (a superuser background worker) in this database,
-- opus.database: hostile objects in public, where its default search_path
-- looks, must not run.
CREATE TABLE public.opus_trap (what text, who name);
GRANT INSERT ON public.opus_trap TO PUBLIC;
CREATE TABLE public.opus_planted (drop_cmd text);
SELECT plant('public');
SELECT count(*) AS planted FROM public.opus_planted;
SELECT count(*) AS log_rows_before FROM opus_requests \gset
SELECT opus_generate('Logger trap check', max_tokens => 2, temperature => 0) IS NOT NULL AS generated;
SELECT sec_wait(pg_catalog.format($$SELECT count(*) > %s FROM opus_requests$$, :log_rows_before)) AS logged;
SELECT sec_wait($$SELECT log_pending = 0 FROM pg_stat_opus_engine$$) AS log_flushed;
SELECT what, who FROM public.opus_trap ORDER BY 1, 2;
DO $$
DECLARE
    c text;
BEGIN
    FOR c IN SELECT drop_cmd FROM public.opus_planted LOOP
        EXECUTE c;
    END LOOP;
END $$;
DROP TABLE public.opus_trap, public.opus_planted;
SELECT pg_get_functiondef('plant(text)'::regprocedure) AS plant_def \gset
DROP FUNCTION plant(text), sec_wait(text);

-- 2. The install script in a fresh database with hostile objects in public
-- and in schema "early", first in everyone's search_path.
CREATE DATABASE regress_opus_sec;
\c regress_opus_sec
SET client_min_messages = warning;
CREATE TABLE public.opus_trap (what text, who name);
GRANT INSERT ON public.opus_trap TO PUBLIC;
CREATE SCHEMA early;
GRANT USAGE ON SCHEMA early TO PUBLIC;
CREATE TABLE public.opus_planted (drop_cmd text);
:plant_def;
SELECT plant('public');
SELECT plant('early');
ALTER DATABASE regress_opus_sec SET search_path = early, "$user", public;
\c regress_opus_sec
SET client_min_messages = warning;
SHOW search_path;
CREATE EXTENSION opus_pg;
SELECT count(*) AS trapped_by_install FROM public.opus_trap;

-- Members of the extension depend only on pg_catalog and on the extension's
-- own objects (a view, policy, default, constraint or index bound to one of
-- the planted objects would show up here).
WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'opus_pg'),
members AS (
    SELECT d.classid, d.objid FROM pg_depend AS d, ext
    WHERE d.deptype = 'e' AND d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid),
rels AS (SELECT objid AS relid FROM members WHERE classid = 'pg_class'::regclass),
related AS (
    SELECT classid, objid FROM members
    UNION SELECT 'pg_rewrite'::regclass, r.oid FROM pg_rewrite AS r JOIN rels ON r.ev_class = rels.relid
    UNION SELECT 'pg_constraint'::regclass, c.oid FROM pg_constraint AS c JOIN rels ON c.conrelid = rels.relid
    UNION SELECT 'pg_attrdef'::regclass, a.oid FROM pg_attrdef AS a JOIN rels ON a.adrelid = rels.relid
    UNION SELECT 'pg_policy'::regclass, p.oid FROM pg_policy AS p JOIN rels ON p.polrelid = rels.relid
    UNION SELECT 'pg_class'::regclass, i.indexrelid FROM pg_index AS i JOIN rels ON i.indrelid = rels.relid)
SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) AS member,
       pg_catalog.pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid) AS depends_on
FROM pg_depend AS d JOIN related AS r ON r.classid = d.classid AND r.objid = d.objid
WHERE d.refclassid IN ('pg_proc'::regclass, 'pg_operator'::regclass, 'pg_type'::regclass,
                       'pg_cast'::regclass, 'pg_collation'::regclass, 'pg_opclass'::regclass)
  AND d.refobjid >= 16384
  AND NOT EXISTS (SELECT 1 FROM members AS m WHERE m.classid = d.refclassid AND m.objid = d.refobjid)
  AND NOT EXISTS (SELECT 1 FROM pg_type AS t LEFT JOIN pg_type AS e ON e.oid = t.typelem
                  WHERE d.refclassid = 'pg_type'::regclass AND t.oid = d.refobjid
                    AND (t.typrelid IN (SELECT relid FROM rels) OR e.typrelid IN (SELECT relid FROM rels)))
ORDER BY 1, 2;

-- Every SECURITY DEFINER function of the extension pins search_path.
SELECT count(*) AS security_definer_functions,
       count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proconfig) AS c
                                          WHERE c LIKE 'search\_path=%')) AS without_search_path
FROM pg_proc AS p JOIN pg_depend AS d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
     AND d.deptype = 'e' AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'opus_pg')
WHERE p.prosecdef;

-- The scripts (the install script of every version and every update
-- script) replace nothing (CREATE OR REPLACE could take over an object
-- someone else made first) and qualify the objects they create.
SELECT count(*) AS scripts, string_agg(pg_read_file(d || '/' || f), E'\n' ORDER BY f) AS script
FROM (SELECT setting || '/extension' AS d FROM pg_config WHERE name = 'SHAREDIR') AS s,
     pg_ls_dir(d) AS f
WHERE f LIKE 'opus\_pg--%.sql' \gset
SELECT :scripts >= 3 AS install_and_update_scripts_read;
SELECT :'script' ~* 'create\s+or\s+replace' AS has_create_or_replace;
SELECT m[1] AS unqualified_create
FROM regexp_matches(:'script', '(?:^|\n)\s*CREATE\s+(?:UNIQUE\s+)?(?:FUNCTION|PROCEDURE|VIEW|TABLE|TYPE|DOMAIN|OPERATOR|CAST|AGGREGATE|SEQUENCE)\s+(?!@extschema@\.)(\S+)', 'gi') AS m
ORDER BY 1;

-- Exercise everything as the superuser and as a plain role, with the
-- hostile schema first in search_path (and, as the superuser, also with
-- pg_catalog after it, which only qualified references survive).
CREATE ROLE regress_opus_sec_user;
GRANT CREATE ON SCHEMA public TO regress_opus_sec_user;
-- Only qualified operators and functions in here, so that anything the
-- trap catches comes from the extension.
CREATE FUNCTION public.exercise() RETURNS SETOF text LANGUAGE plpgsql AS $ex$
DECLARE
    id bigint;
    id2 bigint;
    docs text := pg_catalog.quote_ident(pg_catalog.concat('sec_docs_', current_user));
    outs text := pg_catalog.quote_ident(pg_catalog.concat('sec_out_', current_user));
BEGIN
    RETURN NEXT pg_catalog.concat('tokenize ', public.opus_tokenize('Hello world') IS NOT NULL);
    RETURN NEXT pg_catalog.concat('detokenize ', public.opus_detokenize(public.opus_tokenize('Hello world')));
    RETURN NEXT pg_catalog.concat('generate ', public.opus_generate('The sky is', max_tokens => 2, temperature => 0,
                                                                   stop => ARRAY['zzz']) IS NOT NULL);
    RETURN NEXT pg_catalog.concat('chat ', public.opus_chat('[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]',
                                                           max_tokens => 2, temperature => 0) IS NOT NULL);
    RETURN NEXT pg_catalog.concat('completion ', public.opus_completion('Hi', max_tokens => 2, temperature => 0)
                                                 OPERATOR(pg_catalog.?) 'usage');
    RETURN NEXT pg_catalog.concat('chat_completion ', public.opus_chat_completion('[{"role":"user","content":"Hi"}]',
                                  max_tokens => 2, temperature => 0) OPERATOR(pg_catalog.?) 'choices');
    RETURN NEXT pg_catalog.concat('generate_many ', (SELECT pg_catalog.count(*) FROM public.opus_generate_many(ARRAY['a', 'b'], max_tokens => 1)));
    RETURN NEXT pg_catalog.concat('chat_many ', (SELECT pg_catalog.count(*)
        FROM public.opus_chat_many(ARRAY['[{"role":"user","content":"Hi"}]'::pg_catalog.jsonb], max_tokens => 1)));
    RETURN NEXT pg_catalog.concat('generate_keyed ', (SELECT pg_catalog.count(*)
        FROM public.opus_generate_keyed('[{"key": 1, "prompt": "a"}, {"key": "x", "prompt": "b"}]', max_tokens => 1)));
    id := public.opus_submit('Async', max_tokens => 2);
    id2 := public.opus_submit_chat('[{"role":"user","content":"Hi"}]', max_tokens => 2, detached => false);
    RETURN NEXT pg_catalog.concat('wait ', public.opus_wait(ARRAY[id, id2]) IS NOT NULL);
    RETURN NEXT pg_catalog.concat('async ', (SELECT pg_catalog.count(*) FROM public.opus_async) OPERATOR(pg_catalog.>=) 0);
    RETURN NEXT pg_catalog.concat('result ', public.opus_result(id) IS NOT NULL);
    RETURN NEXT pg_catalog.concat('result_completion ', public.opus_result_completion(id2) IS NOT NULL);
    id := public.opus_submit('Cancelled', max_tokens => 50);
    RETURN NEXT pg_catalog.concat('cancel ', public.opus_cancel(id));
    RETURN NEXT pg_catalog.concat('model ', (SELECT pg_catalog.count(*) FROM public.opus_model));
    RETURN NEXT pg_catalog.concat('engine ', (SELECT state FROM public.opus_engine));
    RETURN NEXT pg_catalog.concat('last_request ', (SELECT pg_catalog.count(*) FROM public.opus_last_request()));
    RETURN NEXT pg_catalog.concat('views ',
        (SELECT pg_catalog.count(*) FROM public.pg_stat_opus) OPERATOR(pg_catalog.>=) 0
        AND (SELECT pg_catalog.count(*) FROM public.pg_stat_opus_activity) OPERATOR(pg_catalog.>=) 0
        AND (SELECT pg_catalog.count(*) FROM public.pg_stat_opus_engine) OPERATOR(pg_catalog.=) 1
        AND (SELECT pg_catalog.count(*) FROM public.pg_stat_opus_latency) OPERATOR(pg_catalog.>) 0
        AND (SELECT pg_catalog.count(*) FROM public.pg_stat_opus_latency_buckets) OPERATOR(pg_catalog.>) 0
        AND (SELECT pg_catalog.count(*) FROM public.opus_requests) OPERATOR(pg_catalog.>=) 0);
    RETURN NEXT pg_catalog.concat('render ', public.opus_render('Hi {{name}}, {{n}}', '{"name": "Ann", "n": 3}'));
    RETURN NEXT pg_catalog.concat('template_columns ', pg_catalog.array_to_string(public.opus_template_columns('{{a}} {{b}}'), ','));
    -- a job over a small table: created, altered, reset and dropped
    EXECUTE pg_catalog.format('CREATE TABLE public.%s (id integer PRIMARY KEY, body text)', docs);
    EXECUTE pg_catalog.format('INSERT INTO public.%s VALUES (1, %L), (2, %L), (3, NULL)', docs, 'a', 'b');
    RETURN NEXT pg_catalog.concat('job_create ', public.opus_job_create('sec_job',
        pg_catalog.to_regclass(pg_catalog.concat('public.', docs)), '{id}', 'Say {{body}}',
        pg_catalog.concat('public.', outs),
        options => '{"max_tokens": 1, "temperature": 0, "stop": ["x"], "system": "Be brief."}',
        max_attempts => 1) OPERATOR(pg_catalog.>) 0);
    RETURN NEXT pg_catalog.concat('job_alter ', public.opus_job_alter('sec_job', options => '{"max_tokens": 1, "temperature": 0}') IS NOT NULL);
    RETURN NEXT pg_catalog.concat('job_progress ', (SELECT phase FROM public.opus_job_progress WHERE job OPERATOR(pg_catalog.=) 'sec_job'));
    RETURN NEXT pg_catalog.concat('job_reset ', public.opus_job_reset('sec_job', failed_only => false) IS NOT NULL);
    RETURN NEXT pg_catalog.concat('job_drop ', public.opus_job_drop('sec_job', drop_target => true) IS NOT NULL);
    EXECUTE pg_catalog.format('DROP TABLE public.%s', docs);
END
$ex$;
GRANT EXECUTE ON FUNCTION public.exercise() TO PUBLIC;

SELECT * FROM public.exercise();
-- jobs are run by CALL (a procedure cannot run inside a function)
CREATE TABLE public.sec_docs (id integer PRIMARY KEY, body text);
INSERT INTO public.sec_docs VALUES (1, 'a'), (2, 'b');
SELECT opus_job_create('sec_run', 'public.sec_docs', '{id}', 'Say {{body}}', 'public.sec_run_out',
                       options => '{"max_tokens": 1, "temperature": 0}') > 0 AS created;
CALL opus_job_run('sec_run');
SELECT count(*) AS job_results FROM public.sec_run_out;
SELECT opus_job_drop('sec_run', drop_target => true);
SELECT pg_stat_opus_reset() IS NOT NULL AS reset;

SET ROLE regress_opus_sec_user;
SELECT * FROM public.exercise();
CREATE TABLE public.sec_docs_u (id integer PRIMARY KEY, body text);
INSERT INTO public.sec_docs_u VALUES (1, 'a'), (2, 'b');
SELECT opus_job_create('sec_run_u', 'public.sec_docs_u', '{id}', 'Say {{body}}', 'public.sec_run_out_u',
                       options => '{"max_tokens": 1, "temperature": 0}') > 0 AS created;
CALL opus_job_run('sec_run_u');
SELECT count(*) AS job_results FROM public.sec_run_out_u;
RESET ROLE;

-- As the superuser with pg_catalog searched after the hostile schema.
SET search_path = early, pg_catalog, public;
SELECT * FROM public.exercise();
CALL public.opus_job_run('sec_run_u');
RESET search_path;

-- Upgrades: every update path the installed scripts offer is run with the
-- hostile objects in place (install the path's source version, then ALTER
-- EXTENSION UPDATE); then the default version again.
CREATE TEMP TABLE upgrades_run (path text);
DO $$
DECLARE
    u record;
BEGIN
    FOR u IN SELECT source, target FROM pg_extension_update_paths('opus_pg')
             WHERE path IS NOT NULL AND source <> target LOOP
        DROP EXTENSION opus_pg CASCADE;
        EXECUTE pg_catalog.format('CREATE EXTENSION opus_pg VERSION %L', u.source);
        EXECUTE pg_catalog.format('ALTER EXTENSION opus_pg UPDATE TO %L', u.target);
        INSERT INTO upgrades_run VALUES (u.source || ' -> ' || u.target);
    END LOOP;
    IF FOUND THEN
        DROP EXTENSION opus_pg CASCADE;
        CREATE EXTENSION opus_pg;
    END IF;
END $$;
SELECT count(*) OPERATOR(pg_catalog.>) 0 AS update_paths_run FROM upgrades_run;

-- Every function again, on the oldest version updated to the newest.
DROP EXTENSION opus_pg CASCADE;
SELECT pg_catalog.format('CREATE EXTENSION opus_pg VERSION %L', source)
FROM pg_extension_update_paths('opus_pg') AS p
WHERE path IS NOT NULL
  AND target OPERATOR(pg_catalog.=) (SELECT default_version::text FROM pg_available_extensions WHERE name OPERATOR(pg_catalog.=) 'opus_pg')
ORDER BY pg_catalog.string_to_array(source, '.')::integer[] LIMIT 1
\gexec
ALTER EXTENSION opus_pg UPDATE;
SELECT extversion OPERATOR(pg_catalog.=) (SELECT default_version::text FROM pg_available_extensions
                                          WHERE name OPERATOR(pg_catalog.=) 'opus_pg') AS updated
FROM pg_extension WHERE extname OPERATOR(pg_catalog.=) 'opus_pg';
SET search_path = early, pg_catalog, public;
SELECT * FROM public.exercise();
RESET search_path;

SELECT what, who, count(*) FROM public.opus_trap GROUP BY 1, 2 ORDER BY 1, 2;

\c regression
SET client_min_messages = warning;
DROP DATABASE regress_opus_sec;
DROP ROLE regress_opus_sec_user;
RESET client_min_messages;
