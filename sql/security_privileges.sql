-- security_privileges: who may do what, for three roles.
--
-- opus_pg defines no role of its own: every function but
-- pg_stat_opus_reset() is executable by PUBLIC and every view is readable
-- by PUBLIC.  What a role sees of other roles' requests is decided by
-- pg_read_all_stats (or having the other role's privileges), and reset by
-- an explicit GRANT EXECUTE.  So the three roles are
--   the superuser (this session),
--   regress_opus_mon: the "usage" a DBA would grant: pg_read_all_stats and
--                     EXECUTE on pg_stat_opus_reset(),
--   regress_opus_p1 / regress_opus_p2: plain roles (p2 is the "other user").

SET client_min_messages = warning;
CREATE ROLE regress_opus_mon IN ROLE pg_read_all_stats;
CREATE ROLE regress_opus_p1;
CREATE ROLE regress_opus_p2;
GRANT EXECUTE ON FUNCTION pg_stat_opus_reset() TO regress_opus_mon;
RESET client_min_messages;

-- priv_wait(q): poll the boolean query q for up to 30 s.
CREATE FUNCTION priv_wait(q text) RETURNS boolean LANGUAGE plpgsql AS $$
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
GRANT EXECUTE ON FUNCTION priv_wait(text) TO PUBLIC;

-- 1. The catalogue: EXECUTE on every function (and procedure) of the
-- extension, SELECT / INSERT / UPDATE / DELETE on every relation.  Internal
-- helpers are listed too: they are callable, and must be harmless.
SELECT p.oid::regprocedure AS function,
       has_function_privilege('regress_opus_mon', p.oid, 'EXECUTE') AS mon,
       has_function_privilege('regress_opus_p1', p.oid, 'EXECUTE') AS plain,
       p.prosecdef AS secdef
FROM pg_proc AS p JOIN pg_depend AS d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
     AND d.deptype = 'e' AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'opus_pg')
ORDER BY p.proname COLLATE "C", 1::text COLLATE "C";

SELECT c.relname, c.relkind,
       has_table_privilege('regress_opus_mon', c.oid, 'SELECT') AS mon_select,
       has_table_privilege('regress_opus_p1', c.oid, 'SELECT') AS plain_select,
       has_table_privilege('regress_opus_p1', c.oid, 'INSERT') AS plain_insert,
       has_table_privilege('regress_opus_p1', c.oid, 'UPDATE') AS plain_update,
       has_table_privilege('regress_opus_p1', c.oid, 'DELETE') AS plain_delete,
       c.relrowsecurity AS rls
FROM pg_class AS c JOIN pg_depend AS d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
     AND d.deptype = 'e' AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'opus_pg')
WHERE c.relkind IN ('r', 'v', 'p', 'm', 'f')
ORDER BY c.relname COLLATE "C";

-- 2. Everyone may generate.
SET ROLE regress_opus_p1;
SELECT opus_generate('One, two,', max_tokens => 1, temperature => 0) IS NOT NULL AS p1_generates;
SET ROLE regress_opus_mon;
SELECT opus_generate('One, two,', max_tokens => 1, temperature => 0) IS NOT NULL AS mon_generates;
RESET ROLE;
SELECT opus_generate('One, two,', max_tokens => 1, temperature => 0) IS NOT NULL AS super_generates;

-- 3. Whose prompts each role sees: p1's long asynchronous request, while it
-- runs, through pg_stat_opus_activity and opus_async.
SET ROLE regress_opus_p1;
SELECT opus_submit('Secret prompt of p1: count to one thousand.', max_tokens => 1000, temperature => 0,
                   seed => 1) AS p1_req \gset
SELECT priv_wait($$SELECT count(*) = 1 FROM pg_stat_opus_activity
                   WHERE userid = 'regress_opus_p1'::regrole$$) AS p1_request_visible;
CREATE TEMP TABLE seen (who text, rows bigint, prompt text, async_rows bigint);
GRANT ALL ON seen TO PUBLIC;
INSERT INTO seen SELECT 'p1 (owner)', count(*), max(prompt), (SELECT count(*) FROM opus_async)
FROM pg_stat_opus_activity WHERE userid = 'regress_opus_p1'::regrole;
SET ROLE regress_opus_p2;
INSERT INTO seen SELECT 'p2 (plain)', count(*), max(prompt), (SELECT count(*) FROM opus_async)
FROM pg_stat_opus_activity WHERE userid = 'regress_opus_p1'::regrole;
SET ROLE regress_opus_mon;
INSERT INTO seen SELECT 'mon', count(*), max(prompt), (SELECT count(*) FROM opus_async)
FROM pg_stat_opus_activity WHERE userid = 'regress_opus_p1'::regrole;
RESET ROLE;
INSERT INTO seen SELECT 'superuser', count(*), max(prompt),
    (SELECT count(*) FROM opus_async WHERE id = :p1_req)
FROM pg_stat_opus_activity WHERE userid = 'regress_opus_p1'::regrole;
SELECT * FROM seen ORDER BY who COLLATE "C";

-- 4. Who may read or cancel it: not another plain role, nor the monitoring
-- role (seeing is not owning); the superuser may.
-- (request ids vary between runs: digits are masked)
CREATE FUNCTION try_masked(q text) RETURNS text LANGUAGE sql AS $$ SELECT regexp_replace(try(q), 'request [0-9]+', 'request N', 'g') $$;
GRANT EXECUTE ON FUNCTION try_masked(text), try(text) TO PUBLIC;
SET ROLE regress_opus_p2;
SELECT try_masked(format('SELECT opus_cancel(%s)', :p1_req)) AS p2_cancels;
SELECT try_masked(format('SELECT opus_result(%s, wait => false)', :p1_req)) AS p2_reads;
SELECT try_masked(format('SELECT opus_result_completion(%s, wait => false)', :p1_req)) AS p2_reads_completion;
SELECT try_masked(format('SELECT opus_wait(ARRAY[%s::bigint], timeout => ''0.1 s'')', :p1_req)) AS p2_waits;
SET ROLE regress_opus_mon;
SELECT try_masked(format('SELECT opus_cancel(%s)', :p1_req)) AS mon_cancels;
SELECT try_masked(format('SELECT opus_result(%s, wait => false)', :p1_req)) AS mon_reads;
SET ROLE regress_opus_p1;
SELECT count(*) AS p1_still_has_it FROM opus_async WHERE id = :p1_req;
RESET ROLE;
SELECT opus_cancel(:p1_req) AS super_cancels;
SELECT priv_wait($$SELECT count(*) = 0 FROM pg_stat_opus_activity
                   WHERE userid = 'regress_opus_p1'::regrole$$) AS p1_request_gone;

-- 5. The request log: each role its own rows; mon and the superuser all.
SET ROLE regress_opus_p2;
SELECT opus_generate('Hello from p2', max_tokens => 1, temperature => 0) IS NOT NULL AS p2_generates;
RESET ROLE;
SELECT priv_wait($$SELECT count(DISTINCT userid) = 3 FROM opus_requests
                   WHERE userid IN ('regress_opus_p1'::regrole, 'regress_opus_p2'::regrole,
                                    'regress_opus_mon'::regrole)
                     AND status <> 'running'$$) AS logged;
CREATE TEMP TABLE log_seen (who text, own boolean, others bigint);
GRANT ALL ON log_seen TO PUBLIC;
SET ROLE regress_opus_p1;
INSERT INTO log_seen SELECT 'p1', count(*) FILTER (WHERE userid = 'regress_opus_p1'::regrole) > 0,
    count(*) FILTER (WHERE userid IN ('regress_opus_p2'::regrole, 'regress_opus_mon'::regrole)) FROM opus_requests;
SET ROLE regress_opus_p2;
INSERT INTO log_seen SELECT 'p2', count(*) FILTER (WHERE userid = 'regress_opus_p2'::regrole) > 0,
    count(*) FILTER (WHERE userid IN ('regress_opus_p1'::regrole, 'regress_opus_mon'::regrole)) FROM opus_requests;
SET ROLE regress_opus_mon;
INSERT INTO log_seen SELECT 'mon', count(*) FILTER (WHERE userid = 'regress_opus_mon'::regrole) > 0,
    count(DISTINCT userid) FILTER (WHERE userid IN ('regress_opus_p1'::regrole, 'regress_opus_p2'::regrole)) FROM opus_requests;
RESET ROLE;
INSERT INTO log_seen SELECT 'superuser', NULL,
    count(DISTINCT userid) FILTER (WHERE userid IN ('regress_opus_p1'::regrole, 'regress_opus_p2'::regrole,
                                                    'regress_opus_mon'::regrole)) FROM opus_requests;
SELECT who, own AS sees_own, others FROM log_seen ORDER BY who COLLATE "C";
-- nobody but the logger writes it
SET ROLE regress_opus_p1;
SELECT sqlstate_of($$INSERT INTO opus_requests (request_id, userid, dbid, kind, params, status, submitted_at)
                     VALUES (1, 1, 1, 'generate', '{}', 'completed', now())$$) AS p1_inserts_log;
SELECT sqlstate_of($$DELETE FROM opus_requests$$) AS p1_deletes_log;
SELECT sqlstate_of($$UPDATE opus_requests SET status = 'completed'$$) AS p1_updates_log;
RESET ROLE;

-- 6. Statistics: pg_stat_opus has counters, no text: readable by all.
-- Reset: the superuser and whoever was granted it.
SET ROLE regress_opus_p1;
SELECT count(*) > 0 AS p1_reads_stats FROM pg_stat_opus;
SELECT sqlstate_of('SELECT pg_stat_opus_reset()') AS p1_resets;
SET ROLE regress_opus_mon;
SELECT sqlstate_of('SELECT pg_stat_opus_reset()') AS mon_resets;
RESET ROLE;
SELECT sqlstate_of('SELECT pg_stat_opus_reset()') AS super_resets;

-- 7. Settings: the model, device and engine are the superuser's; a plain or
-- monitoring role may only change its own per-request settings, and not
-- the limits a superuser grants (opus.max_prompt_bytes, see tenants).
CREATE FUNCTION settings_matrix() RETURNS TABLE(setting text, plain text, mon text, super text)
LANGUAGE plpgsql AS $$
DECLARE
    s text;
    v text;
    r text;
    res text[];
BEGIN
    FOR s, v IN VALUES ('opus.model', 'other'), ('opus.device', 'cpu'), ('opus.threads', '1'),
                       ('opus.engine_path', '/bin/false'), ('opus.max_requests', '1'),
                       ('opus.kv_cache_size', '1MB'), ('opus.request_buffer_size', '8kB'),
                       ('opus.database', 'x'), ('opus.log_requests', 'off'),
                       ('opus.log_sample_rate', '0'), ('opus.max_async_requests', '1'),
                       ('opus.default_max_tokens', '7'), ('opus.request_timeout', '1s'),
                       ('opus.max_prompt_bytes', '1kB')
    LOOP
        res := '{}';
        FOREACH r IN ARRAY ARRAY['regress_opus_p1', 'regress_opus_mon', NULL] LOOP
            IF r IS NOT NULL THEN
                EXECUTE format('SET LOCAL ROLE %I', r);
            END IF;
            BEGIN
                PERFORM set_config(s, v, true);
                res := res || 'ok'::text;
            EXCEPTION WHEN OTHERS THEN
                res := res || SQLSTATE;
            END;
            RESET ROLE;
        END LOOP;
        setting := s;
        plain := res[1];
        mon := res[2];
        super := res[3];
        RETURN NEXT;
    END LOOP;
END $$;
SELECT * FROM settings_matrix() ORDER BY setting COLLATE "C";
-- and only the superuser changes the server's configuration
SET ROLE regress_opus_p1;
ALTER SYSTEM SET opus.model = 'x';
SELECT sqlstate_of($$SELECT pg_reload_conf()$$) AS p1_reload;
SELECT sqlstate_of($$ALTER ROLE regress_opus_p1 SET opus.model = 'x'$$) AS p1_alter_role_model;
SELECT sqlstate_of($$ALTER DATABASE regression SET opus.model = 'x'$$) AS p1_alter_db_model;
SET ROLE regress_opus_mon;
ALTER SYSTEM SET opus.model = 'x';
RESET ROLE;
SHOW opus.model;

-- 8. Jobs: a plain role's job is invisible to another plain role, visible
-- (not runnable) to the monitoring role.
CREATE SCHEMA regress_priv;
GRANT USAGE, CREATE ON SCHEMA regress_priv TO regress_opus_p1;
SET ROLE regress_opus_p1;
CREATE TABLE regress_priv.priv_docs (id integer PRIMARY KEY, body text);
INSERT INTO regress_priv.priv_docs VALUES (1, 'a');
SELECT opus_job_create('priv_job', 'regress_priv.priv_docs', '{id}', 'Say {{body}}', 'regress_priv.priv_out',
                       options => '{"max_tokens": 1, "temperature": 0}') > 0 AS p1_creates_job;
SET ROLE regress_opus_p2;
SELECT count(*) AS p2_sees_jobs FROM opus_job_progress WHERE job = 'priv_job';
SELECT count(*) AS p2_sees_job_rows FROM opus_job;
SELECT sqlstate_of($$CALL opus_job_run('priv_job')$$) AS p2_runs;
SELECT sqlstate_of($$SELECT opus_job_drop('priv_job')$$) AS p2_drops;
SELECT sqlstate_of($$SELECT opus_job_reset('priv_job')$$) AS p2_resets;
SELECT sqlstate_of($$SELECT opus_job_alter('priv_job', concurrency => 1)$$) AS p2_alters;
SELECT sqlstate_of($$UPDATE opus_job SET concurrency = 1$$) AS p2_updates_job_table;
SET ROLE regress_opus_mon;
SELECT count(*) AS mon_sees_jobs FROM opus_job_progress WHERE job = 'priv_job';
SELECT sqlstate_of($$CALL opus_job_run('priv_job')$$) AS mon_runs;
SELECT sqlstate_of($$SELECT opus_job_drop('priv_job')$$) AS mon_drops;
SET ROLE regress_opus_p1;
CALL opus_job_run('priv_job');
SELECT count(*) AS p1_results FROM regress_priv.priv_out;
SELECT opus_job_drop('priv_job', drop_target => true) AS p1_drops;
DROP TABLE regress_priv.priv_docs;
RESET ROLE;
DROP SCHEMA regress_priv;
DROP FUNCTION try_masked(text);
REVOKE EXECUTE ON FUNCTION try(text) FROM PUBLIC;

DROP FUNCTION settings_matrix();
DROP FUNCTION priv_wait(text);
DROP TABLE seen, log_seen;
-- the log rows of these roles stay (pg_dump keeps the log); drop the roles'
-- privileges, then the roles
REVOKE EXECUTE ON FUNCTION pg_stat_opus_reset() FROM regress_opus_mon;
DROP ROLE regress_opus_mon, regress_opus_p1, regress_opus_p2;
