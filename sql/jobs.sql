-- jobs: batch jobs over tables (opus_job_create / run / alter / reset /
-- drop, opus_job_progress): exactly one result per source row, reruns that
-- do nothing, new rows picked up, failures recorded and retried, hostile
-- identifiers, and who may see and run a job.

-- A 200-row table, a template over its columns, a target created for us.
CREATE TABLE docs (id integer PRIMARY KEY, body text);
INSERT INTO docs SELECT i, 'Item number ' || i FROM generate_series(1, 200) AS i;
SELECT opus_job_create('summaries', 'docs', '{id}', 'Repeat: {{body}}', 'doc_summaries',
                       options => '{"max_tokens": 2, "temperature": 0}') > 0 AS created;
\d doc_summaries
SELECT job, phase, rows_total FROM opus_job_progress;
CALL opus_job_run('summaries');
SELECT count(*) AS results, count(DISTINCT id) AS ids, count(output) AS outputs FROM doc_summaries;
SELECT count(*) AS missing FROM docs AS d LEFT JOIN doc_summaries AS s USING (id) WHERE s.id IS NULL;
-- The outputs are the model's answers to the rendered prompts.
SELECT bool_and(s.output = opus_generate('Repeat: ' || d.body, max_tokens => 2, temperature => 0)) AS same
FROM docs AS d JOIN doc_summaries AS s USING (id) WHERE d.id % 40 = 0;
SELECT job, phase, rows_total, rows_done, rows_failed, rows_remaining, tokens_generated,
       rows_per_second > 0 AS has_rate, tokens_per_second > 0 AS has_token_rate,
       estimated_time_left, current_error
FROM opus_job_progress;
SELECT state, count(*), sum(completion_tokens) AS tokens, bool_and(prompt IS NULL) AS prompts_dropped
FROM opus_job_item GROUP BY state;

-- A rerun does nothing: no row is generated or written again.
CREATE TEMP TABLE before_rerun AS SELECT id, xmin::text AS x FROM doc_summaries;
CALL opus_job_run('summaries');
SELECT count(*) AS untouched FROM doc_summaries AS s JOIN before_rerun AS b ON b.id = s.id AND b.x = s.xmin::text;
SELECT phase, rows_total, rows_done, rows_remaining, tokens_generated FROM opus_job_progress;
SELECT count(*) AS runs, count(*) FILTER (WHERE status = 'finished') AS finished FROM opus_job_run;

-- New source rows are taken by the next run; max_rows bounds a run.
INSERT INTO docs SELECT i, 'Item number ' || i FROM generate_series(201, 210) AS i;
CALL opus_job_run('summaries', max_rows => 4);
SELECT count(*) AS results FROM doc_summaries;
SELECT phase, rows_total, rows_done, rows_remaining FROM opus_job_progress;
CALL opus_job_run('summaries');
SELECT count(*) AS results, count(DISTINCT id) AS ids FROM doc_summaries;

-- Failures: a NULL prompt and a prompt longer than the context fail at once
-- (retrying cannot help); the other rows go on.  Results are written back
-- into the source table itself here (an existing target is updated by key).
CREATE TABLE notes (k text PRIMARY KEY, body text, summary text);
INSERT INTO notes VALUES ('a', 'The capital of France is', NULL), ('b', NULL, NULL),
                         ('c', repeat('hello ', 9000), NULL), ('d', 'Once upon a time', NULL);
SELECT opus_job_create('notes', 'notes', '{k}', prompt_expression => 'body', target_table => 'notes',
                       target_column => 'summary', options => '{"max_tokens": 3, "temperature": 0}') > 0 AS created;
CALL opus_job_run('notes');
SELECT k, CASE WHEN body IS NULL OR length(body) > 1000 THEN summary IS NULL
            ELSE summary = opus_generate(body, max_tokens => 3, temperature => 0) END AS as_expected
FROM notes ORDER BY k;
SELECT i.key ->> 'k' AS k, i.state, i.attempts, i.last_sqlstate, i.last_error
FROM opus_job_item AS i JOIN opus_job AS j ON j.id = i.job_id WHERE j.name = 'notes' ORDER BY 1;
SELECT phase, rows_total, rows_done, rows_failed, rows_remaining, current_error IS NOT NULL AS has_error
FROM opus_job_progress WHERE job = 'notes';
-- Failed rows get new attempts after opus_job_reset (here they fail again).
SELECT opus_job_reset('notes') AS reset_rows;
CALL opus_job_run('notes');
SELECT i.key ->> 'k' AS k, i.state, i.attempts FROM opus_job_item AS i JOIN opus_job AS j ON j.id = i.job_id
WHERE j.name = 'notes' AND i.state <> 'done' ORDER BY 1;

-- Retries: a target whose first two writes fail (a transient error) gets
-- its row on the second attempt; a row it always refuses fails after
-- max_attempts, with the error recorded.
CREATE SEQUENCE flaky_seq;
CREATE TABLE flaky_out (k text PRIMARY KEY, answer text);
CREATE FUNCTION flaky() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.k = 'never' THEN
        RAISE EXCEPTION 'refusing %', NEW.k;
    END IF;
    IF nextval('flaky_seq') <= 2 THEN
        RAISE EXCEPTION 'transient failure';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER flaky BEFORE INSERT ON flaky_out FOR EACH ROW EXECUTE FUNCTION flaky();
CREATE TABLE flaky_src (k text PRIMARY KEY, q text);
INSERT INTO flaky_src VALUES ('first', 'Hello'), ('never', 'Hello'), ('third', 'Hello');
SELECT opus_job_create('flaky', 'flaky_src', '{k}', '{{q}}', 'flaky_out', target_column => 'answer',
                       options => '{"max_tokens": 2, "temperature": 0}', concurrency => 1,
                       max_attempts => 3, retry_backoff => '10 ms') > 0 AS created;
CALL opus_job_run('flaky');
SELECT k FROM flaky_out ORDER BY k;
SELECT i.key ->> 'k' AS k, i.state, i.attempts, i.last_sqlstate, i.last_error
FROM opus_job_item AS i JOIN opus_job AS j ON j.id = i.job_id WHERE j.name = 'flaky' ORDER BY 1;
SELECT rows_done, rows_failed, rows_retried FROM opus_job_progress WHERE job = 'flaky';

-- Hostile identifiers: a table, key column, prompt column, target and target
-- column named with quotes, semicolons and spaces work, and inject nothing.
CREATE TABLE "odd; ""name"" --" ("id; DROP TABLE docs; --" integer PRIMARY KEY, "the ""body""" text);
INSERT INTO "odd; ""name"" --" SELECT i, 'Text ''' || i || '''; DROP TABLE docs; --' FROM generate_series(1, 5) AS i;
SELECT opus_job_create('hostile''; DROP TABLE docs; --', '"odd; ""name"" --"',
                       ARRAY['id; DROP TABLE docs; --'], 'Echo {{the "body"}}', '"out; ''t'' table"',
                       'result"; --', '{"max_tokens": 2, "temperature": 0}') > 0 AS created;
\d "out; 't' table"
CALL opus_job_run('hostile''; DROP TABLE docs; --');
SELECT count(*) AS results, count("result""; --") AS outputs FROM "out; 't' table";
SELECT count(*) AS docs_intact FROM docs;
-- The template copied the values verbatim.
SELECT opus_render('Echo {{the "body"}}', to_jsonb(o)) FROM "odd; ""name"" --" AS o WHERE "id; DROP TABLE docs; --" = 1;
SELECT opus_render('{{ a }} and {{b}}, {{c}} {{ unclosed', '{"a": "x", "b": null, "c": {"n": 1}}');
SELECT try($$SELECT opus_render('{{nope}}', '{}')$$);

-- Argument checks.
SELECT try($$SELECT opus_job_create('summaries', 'docs', '{id}', '{{body}}', 'other')$$);
SELECT try($$SELECT opus_job_create('x', 'docs', '{nope}', '{{body}}', 'other')$$);
SELECT try($$SELECT opus_job_create('x', 'docs', '{id}', '{{nope}}', 'other')$$);
SELECT try($$SELECT opus_job_create('x', 'docs', '{id}', '{{body}}', 'other', options => '{"temprature": 0}')$$);
SELECT try($$SELECT opus_job_create('x', 'docs', '{id}', target_table => 'other')$$);
SELECT try($$SELECT opus_job_create('x', 'docs', '{id}', '{{body}}', 'docs', target_column => 'id')$$);
SELECT try($$SELECT opus_job_create('x', 'docs', '{id}', '{{body}}', 'docs', target_column => 'nope')$$);
SELECT try($$SELECT opus_job_create('x', source_query => 'SELECT 1 AS id, nope', key_columns => '{id}',
                                    prompt_template => 'x', target_table => 'other')$$);
SELECT try($$CALL opus_job_run('no such job')$$);
-- A run commits, so it refuses to run inside a transaction block.
\set SHOW_CONTEXT never
BEGIN;
CALL opus_job_run('summaries');
ROLLBACK;
\set SHOW_CONTEXT errors

-- A query source and a chat job with a system message.
SELECT opus_job_create('from_query', source_query => 'SELECT id, body FROM docs WHERE id <= 3',
                       key_columns => '{id}', prompt_template => '{{body}}', target_table => 'query_out',
                       options => '{"max_tokens": 2, "temperature": 0, "system": "Answer briefly."}') > 0 AS created;
CALL opus_job_run('from_query');
SELECT id, output = opus_chat(jsonb_build_array(jsonb_build_object('role', 'system', 'content', 'Answer briefly.'),
                                                jsonb_build_object('role', 'user', 'content', body)),
                              max_tokens => 2, temperature => 0) AS same
FROM query_out JOIN docs USING (id) ORDER BY id;

-- Who may see, run and change a job: row-level security on the job tables.
CREATE ROLE regress_opus_alice;
CREATE ROLE regress_opus_bob;
CREATE ROLE regress_opus_watcher IN ROLE pg_read_all_stats;
GRANT CREATE ON SCHEMA public TO regress_opus_alice;
SET ROLE regress_opus_alice;
CREATE TABLE alice_docs (id integer PRIMARY KEY, body text);
INSERT INTO alice_docs SELECT i, 'Secret ' || i FROM generate_series(1, 3) AS i;
SELECT opus_job_create('alice_job', 'alice_docs', '{id}', '{{body}}', 'alice_out',
                       options => '{"max_tokens": 2, "temperature": 0}') > 0 AS created;
SELECT try($$SELECT opus_job_create('steal', 'docs', '{id}', '{{body}}', 'alice_stolen')$$);
SELECT job FROM opus_job_progress ORDER BY job;
RESET ROLE;
SET ROLE regress_opus_bob;
SELECT count(*) AS bob_sees_jobs FROM opus_job;
SELECT count(*) AS bob_sees_items FROM opus_job_item;
SELECT count(*) AS bob_sees_progress FROM opus_job_progress;
SELECT try($$CALL opus_job_run('alice_job')$$);
SELECT try($$SELECT opus_job_drop('alice_job')$$);
UPDATE opus_job SET options = '{}';
DELETE FROM opus_job_item;
RESET ROLE;
SET ROLE regress_opus_watcher;
SELECT job, owner, phase FROM opus_job_progress WHERE job = 'alice_job';
SELECT try($$CALL opus_job_run('alice_job')$$);
SELECT try($$SELECT opus_job_alter('alice_job', concurrency => 2)$$);
RESET ROLE;
-- A superuser's run of alice's job runs as alice, and comes back.
CALL opus_job_run('alice_job');
SELECT current_user = session_user AS role_restored;
SELECT r.run_by, r.owner, r.status, r.rows_done FROM opus_job_run AS r JOIN opus_job AS j ON j.id = r.job_id
WHERE j.name = 'alice_job';
SELECT count(*) AS alice_results FROM alice_out;

-- A job's SQL runs as its owner in a security-restricted operation: it
-- cannot SET ROLE back to whoever runs it (a superuser, pg_cron), neither
-- when the runner is the superuser nor when a superuser session did SET
-- ROLE to the owner first, and settings it changes do not outlive the run.
SET ROLE regress_opus_alice;
SELECT opus_job_create('alice_escalate', 'alice_docs', '{id}', target_table => 'alice_escalate_out',
                       prompt_expression => $$set_config('role', session_user::text, true) || body$$,
                       options => '{"max_tokens": 2, "temperature": 0}') > 0 AS created;
SELECT opus_job_create('alice_auth', 'alice_docs', '{id}', target_table => 'alice_auth_out',
                       prompt_expression => $$set_config('session_authorization', session_user::text, true) || body$$,
                       options => '{"max_tokens": 2, "temperature": 0}') > 0 AS created;
SELECT opus_job_create('alice_setting', 'alice_docs', '{id}', target_table => 'alice_setting_out',
                       prompt_expression => $$body || set_config('search_path', 'pg_temp, alice_trap', false)$$,
                       options => '{"max_tokens": 2, "temperature": 0}') > 0 AS created;
CALL opus_job_run('alice_escalate');
SELECT current_user, current_setting('role') AS role_setting;
RESET ROLE;
CALL opus_job_run('alice_escalate');
CALL opus_job_run('alice_auth');
SELECT current_user = session_user AS role_restored;
SHOW search_path;
CALL opus_job_run('alice_setting');
SHOW search_path;
SELECT count(*) AS setting_results FROM alice_setting_out;
SELECT count(*) AS escalate_items FROM opus_job_item AS i JOIN opus_job AS j ON j.id = i.job_id
WHERE j.name IN ('alice_escalate', 'alice_auth');
-- The owner edits her job's target to a table she does not own: a
-- superuser dropping the job with its target must not drop that table.
SET ROLE regress_opus_alice;
UPDATE opus_job SET target_table = 'public.docs' WHERE name = 'alice_setting';
RESET ROLE;
SELECT try($$SELECT opus_job_drop('alice_setting', drop_target => true)$$);
SELECT to_regclass('public.docs') IS NOT NULL AS docs_kept, count(*) AS alice_setting_jobs
FROM opus_job WHERE name = 'alice_setting';
-- A new prompt expression is checked as the owner, too.
SELECT try($$SELECT opus_job_alter('alice_escalate', prompt_expression => 'body || (SELECT count(*) FROM docs)::text')$$);
SET ROLE regress_opus_alice;
UPDATE opus_job SET target_table = 'alice_setting_out' WHERE name = 'alice_setting';
RESET ROLE;
SELECT opus_job_drop('alice_setting', drop_target => true) AND opus_job_drop('alice_escalate', drop_target => true)
       AND opus_job_drop('alice_auth', drop_target => true) AS dropped;
-- Work-list and run-log rows belong to their job's owner: bob cannot add
-- any to alice's job, under his name (foreign key) or hers (row security).
SELECT id AS alice_job_id FROM opus_job WHERE name = 'alice_job' \gset
SET ROLE regress_opus_bob;
SELECT try(format($$INSERT INTO opus_job_item (job_id, owner, key) VALUES (%s, 'regress_opus_bob', '{"id": 9}')$$, :alice_job_id));
SELECT try(format($$INSERT INTO opus_job_item (job_id, owner, key) VALUES (%s, 'regress_opus_alice', '{"id": 9}')$$, :alice_job_id));
SELECT try(format($$INSERT INTO opus_job_run (job_id, owner, pid, run_by) VALUES (%s, 'regress_opus_bob', 1, 'regress_opus_bob')$$, :alice_job_id));
RESET ROLE;

-- Changing the prompt applies to the rows not done; dropping removes it all.
SELECT 'altered' AS done FROM opus_job_alter('notes', prompt_template => '{{k}}: {{body}}', concurrency => 2);
SELECT prompt_template, prompt_expression, concurrency FROM opus_job WHERE name = 'notes';
SELECT count(*) AS items_left FROM opus_job_item AS i JOIN opus_job AS j ON j.id = i.job_id
WHERE j.name = 'notes' AND i.state <> 'done';
-- Row b now has a prompt ('b: '); c is still too long.
CALL opus_job_run('notes');
SELECT i.key ->> 'k' AS k, i.state, i.attempts, i.last_sqlstate FROM opus_job_item AS i
JOIN opus_job AS j ON j.id = i.job_id WHERE j.name = 'notes' ORDER BY 1;
SELECT k, summary IS NOT NULL AS has_summary FROM notes ORDER BY k;
SELECT opus_job_drop('flaky') AS dropped;
SELECT opus_job_drop('from_query', drop_target => true) AS dropped;
SELECT to_regclass('query_out') IS NULL AS target_dropped, count(*) AS jobs FROM opus_job;
SELECT try($$SELECT opus_job_drop('flaky')$$);

-- Interrupted runs show as such; the next run marks them and carries on.
UPDATE opus_job_run SET status = 'running', phase = 'generating', ended_at = NULL
WHERE id = (SELECT max(r.id) FROM opus_job_run AS r JOIN opus_job AS j ON j.id = r.job_id WHERE j.name = 'summaries');
SELECT phase, pid FROM opus_job_progress WHERE job = 'summaries';
CALL opus_job_run('summaries');
SELECT status, count(*) FROM opus_job_run AS r JOIN opus_job AS j ON j.id = r.job_id
WHERE j.name = 'summaries' GROUP BY status ORDER BY status;

SELECT opus_job_drop('alice_job', drop_target => true);
DROP TABLE alice_docs;
REVOKE CREATE ON SCHEMA public FROM regress_opus_alice;
DROP ROLE regress_opus_alice, regress_opus_bob, regress_opus_watcher;
