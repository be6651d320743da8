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
DROP EXTENSION opus_pg;
