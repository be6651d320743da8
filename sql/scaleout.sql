-- scaleout: what a data node offers a PL/Proxy front (docs/scale-out.md).
-- The front itself (opus_pg_proxy, several clusters) is test/t/150_plproxy.pl.

-- The served model's identity: the SHA-256 is the one make model verifies.
SELECT model, file_size > 0 AS has_size,
       sha256 = 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53' AS known_sha256
FROM opus_model_identity();
SELECT count(*) FROM opus_model_identity('default');
\set VERBOSITY terse
SELECT * FROM opus_model_identity('no_such_model');
\set VERBOSITY default

-- A job driven in steps: each step is one transaction.
CREATE TABLE step_src (id integer PRIMARY KEY, body text);
INSERT INTO step_src SELECT g, 'Count to ' || g || ':' FROM generate_series(1, 5) g;
SELECT opus_job_create('steps', 'step_src', '{id}', '{{body}}', 'step_out',
                       options => '{"max_tokens": 2, "temperature": 0}') > 0 AS created;
SELECT * FROM opus_job_counts('steps');
SELECT * FROM opus_job_step('steps', 2);
SELECT * FROM opus_job_counts('steps');
-- A step that is rolled back leaves its rows pending.
BEGIN;
SELECT rows_done FROM opus_job_step('steps', 2);
ROLLBACK;
SELECT * FROM opus_job_counts('steps');
SELECT * FROM opus_job_step('steps', 10);
SELECT count(*), count(DISTINCT id) FROM step_out;
SELECT o.output = opus_generate('Count to 3:', max_tokens => 2, temperature => 0) AS same_text
FROM step_out o WHERE o.id = 3;
-- Nothing left: a step does nothing.
SELECT * FROM opus_job_step('steps');
\set VERBOSITY terse
SELECT * FROM opus_job_step('steps', 0);
SELECT * FROM opus_job_step('no_such_job');
\set VERBOSITY default
SELECT opus_job_drop('steps') IS NOT NULL AS dropped;
DROP TABLE step_src, step_out;
