-- nopreload: without shared_preload_libraries the extension can be created,
-- the settings exist, and every function fails with 55000 and a hint.
CREATE EXTENSION opus_pg;
SHOW opus.model;
\set VERBOSITY default
SELECT opus_generate('x');
\echo :LAST_ERROR_SQLSTATE
SELECT opus_chat('[{"role": "user", "content": "hi"}]');
\echo :LAST_ERROR_SQLSTATE
SELECT opus_completion('x');
\echo :LAST_ERROR_SQLSTATE
SELECT opus_chat_completion('[{"role": "user", "content": "hi"}]');
\echo :LAST_ERROR_SQLSTATE
SELECT opus_tokenize('x');
\echo :LAST_ERROR_SQLSTATE
SELECT opus_detokenize(ARRAY[1]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM opus_model;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM opus_engine;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM opus_last_request();
\echo :LAST_ERROR_SQLSTATE
SELECT opus_submit('x');
\echo :LAST_ERROR_SQLSTATE
SELECT opus_result(1);
\echo :LAST_ERROR_SQLSTATE
SELECT opus_cancel(1);
\echo :LAST_ERROR_SQLSTATE
SELECT opus_wait(ARRAY[1]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM opus_async;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM opus_generate_many(ARRAY['x']);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM opus_model_identity();
\echo :LAST_ERROR_SQLSTATE
SELECT opus_generate_stream('x');
\echo :LAST_ERROR_SQLSTATE
SELECT opus_chat_stream('[{"role": "user", "content": "hi"}]');
\echo :LAST_ERROR_SQLSTATE
SELECT opus_generate_stream_completion('x');
\echo :LAST_ERROR_SQLSTATE
SELECT opus_chat_stream_completion('[{"role": "user", "content": "hi"}]');
\echo :LAST_ERROR_SQLSTATE
-- A job can be defined, but not run.
\set SHOW_CONTEXT never
CREATE TABLE t (id int PRIMARY KEY, body text);
SELECT opus_job_create('j', 't', '{id}', '{{body}}', 't_out') > 0 AS created;
CALL opus_job_run('j');
\echo :LAST_ERROR_SQLSTATE
SELECT opus_job_drop('j', drop_target => true);
DROP TABLE t;
DROP EXTENSION opus_pg;
