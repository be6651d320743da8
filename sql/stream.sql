-- stream: the streaming functions' SQL surface.  A stream is an ordinary
-- request read while it runs, so its chunks concatenate to the text of the
-- non-streaming call with the same options (greedy, or a fixed seed).
-- Arrival times, cancellation on close and errors mid-stream are checked
-- with a real client in test/t/140_stream.pl.

CREATE FUNCTION stream_wait_for(q text) RETURNS boolean LANGUAGE plpgsql AS $$
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

-- Greedy: the chunks are the text of opus_generate, in order.
SELECT string_agg(c, '' ORDER BY n)
     = opus_generate('In mathematics, a prime number is', max_tokens => 16, temperature => 0) AS same_text,
       count(*) >= 1 AS some_rows
  FROM opus_generate_stream('In mathematics, a prime number is', max_tokens => 16, temperature => 0)
       WITH ORDINALITY AS s(c, n);

-- Sampling with a seed, every option given.
SELECT string_agg(c, '' ORDER BY n)
     = opus_generate('Once upon a time', max_tokens => 24, temperature => 0.8, seed => 42,
                     top_k => 40, top_p => 0.9, min_p => 0.05, repetition_penalty => 1.1,
                     presence_penalty => 0.5, frequency_penalty => 0.5) AS seeded_same
  FROM opus_generate_stream('Once upon a time', max_tokens => 24, temperature => 0.8, seed => 42,
                            top_k => 40, top_p => 0.9, min_p => 0.05, repetition_penalty => 1.1,
                            presence_penalty => 0.5, frequency_penalty => 0.5)
       WITH ORDINALITY AS s(c, n);

-- In the select list (value per call: how clients stream it).  How the
-- text is cut into rows depends on timing, so only the whole is shown.
SELECT string_agg(c, '') AS text, count(*) >= 1 AS rows
  FROM (SELECT opus_generate_stream('The capital of France is', max_tokens => 3, temperature => 0) AS c) s;

-- A stop string is never emitted, not even split across two chunks.
SELECT string_agg(c, '' ORDER BY n) AS stopped,
       position('11' IN string_agg(c, '' ORDER BY n)) = 0 AS no_stop_string,
       string_agg(c, '' ORDER BY n)
     = opus_generate('1, 2, 3, 4, 5, 6, 7,', max_tokens => 16, temperature => 0,
                     stop => ARRAY['11']) AS same_as_generate
  FROM opus_generate_stream('1, 2, 3, 4, 5, 6, 7,', max_tokens => 16, temperature => 0,
                            stop => ARRAY['11'])
       WITH ORDINALITY AS s(c, n);

-- Chat: the same answer as opus_chat.
SELECT string_agg(c, '' ORDER BY n)
     = opus_chat('[{"role": "user", "content": "Name a color."}]', max_tokens => 12, temperature => 0) AS chat_same
  FROM opus_chat_stream('[{"role": "user", "content": "Name a color."}]', max_tokens => 12, temperature => 0)
       WITH ORDINALITY AS s(c, n);

-- Completion chunks: OpenAI chat.completion.chunk objects; the first delta
-- has the role, only the last has finish_reason and usage.
WITH s AS (
    SELECT j, n, count(*) OVER () AS total
      FROM opus_chat_stream_completion('[{"role": "user", "content": "Name a color."}]',
                                       max_tokens => 12, temperature => 0)
           WITH ORDINALITY AS s(j, n))
SELECT bool_and(j->>'object' = 'chat.completion.chunk') AS objects,
       count(DISTINCT j->>'id') = 1 AS one_id,
       bool_and((j->'choices'->0->'delta'->>'role' = 'assistant') = (n = 1)) AS role_first_only,
       bool_and((j->'choices'->0->>'finish_reason' IS NOT NULL) = (n = total)) AS finish_last_only,
       bool_and((j ? 'usage') = (n = total)) AS usage_last_only,
       max(j->'choices'->0->>'finish_reason') AS finish_reason,
       max((j->'usage'->>'completion_tokens')::int) AS completion_tokens,
       string_agg(j->'choices'->0->'delta'->>'content', '' ORDER BY n)
     = opus_chat('[{"role": "user", "content": "Name a color."}]', max_tokens => 12, temperature => 0) AS content_same
  FROM s;

WITH s AS (
    SELECT j, n, count(*) OVER () AS total
      FROM opus_generate_stream_completion('The capital of France is', max_tokens => 3, temperature => 0)
           WITH ORDINALITY AS s(j, n))
SELECT bool_and(j->>'object' = 'text_completion') AS objects,
       max(j->'choices'->0->>'finish_reason') AS finish_reason,
       max((j->'usage'->>'prompt_tokens')::int) > 0 AS has_usage,
       string_agg(j->'choices'->0->>'text', '' ORDER BY n)
     = opus_generate('The capital of France is', max_tokens => 3, temperature => 0) AS text_same
  FROM s;

-- Through a cursor, a row at a time; closing it early gives the request up.
BEGIN;
DECLARE c CURSOR FOR
    SELECT opus_generate_stream('Count from 1 to 1000: 1, 2, 3,', max_tokens => 500, temperature => 0);
MOVE 2 IN c;
CLOSE c;
COMMIT;
SELECT stream_wait_for('SELECT busy_slots = 0 FROM opus_engine') AS slots_free_after_close;

-- LIMIT stops reading early: the request is given up too.
SELECT count(*) FROM (
    SELECT opus_generate_stream('Count from 1 to 1000: 1, 2, 3,', max_tokens => 500, temperature => 0)
     LIMIT 3) s;
SELECT stream_wait_for('SELECT busy_slots = 0 FROM opus_engine') AS slots_free_after_limit;

-- An error later in the same transaction gives it up as well.
BEGIN;
DECLARE c CURSOR FOR
    SELECT opus_generate_stream('Count from 1 to 1000: 1, 2, 3,', max_tokens => 500, temperature => 0);
MOVE 1 IN c;
SELECT 1 / 0;
ROLLBACK;
SELECT stream_wait_for('SELECT busy_slots = 0 FROM opus_engine') AS slots_free_after_abort;

-- Arguments are checked as for opus_generate, before anything is queued.
\set VERBOSITY terse
SELECT opus_generate_stream('x', temperature => -1);
SELECT opus_generate_stream(NULL);
SELECT opus_chat_stream('{"role": "user"}');
SELECT opus_generate_stream('x', max_tokens => 0);
SELECT opus_chat_stream_completion('[{"role": "robot", "content": "hi"}]');
\set VERBOSITY default

DROP FUNCTION stream_wait_for(text);
