-- upgrade: the library runs only under the SQL of its own version.  A
-- database still at an older version gets 55000 naming both versions and
-- the ALTER EXTENSION to run; after the update everything works.  (The full
-- update test, catalog against a fresh install and data kept, is
-- test/t/070_upgrade.pl.)
CREATE DATABASE regress_opus_upgrade;
\c regress_opus_upgrade
CREATE EXTENSION opus_pg VERSION '0.1.0';
SELECT extversion FROM pg_extension WHERE extname = 'opus_pg';
\set VERBOSITY default
SELECT opus_generate('x', max_tokens => 1);
\echo :LAST_ERROR_SQLSTATE
SELECT opus_submit('x', max_tokens => 1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM pg_stat_opus_engine;
\echo :LAST_ERROR_SQLSTATE
-- functions that need no engine keep working
SELECT opus_render('Hi {{name}}', '{"name": "Ann"}');
\set VERBOSITY terse
SELECT source, target, path FROM pg_extension_update_paths('opus_pg') WHERE path IS NOT NULL ORDER BY 1, 2;
ALTER EXTENSION opus_pg UPDATE;
SELECT extversion = default_version AS updated
FROM pg_extension, pg_available_extensions WHERE extname = 'opus_pg' AND name = 'opus_pg';
SELECT opus_generate('x', max_tokens => 1, temperature => 0) IS NOT NULL AS generated;
SELECT count(*) = 1 AS engine_row FROM pg_stat_opus_engine;
-- An installed SQL version newer than the library's (the server still runs
-- the old library after the SQL was updated): the other hint.  The check
-- remembers a match for the rest of a command only: a change earlier in the
-- same transaction is seen.
BEGIN;
SELECT array_length(opus_tokenize('Hello'), 1) > 0 AS tokenized;
SET LOCAL allow_system_table_mods = on;
UPDATE pg_extension SET extversion = '99.0.0' WHERE extname = 'opus_pg';
\set VERBOSITY default
SELECT opus_tokenize('x');
\set VERBOSITY terse
ROLLBACK;
SELECT array_length(opus_tokenize('Hello'), 1) > 0 AS tokenized;
\c regression
DROP DATABASE regress_opus_upgrade;
