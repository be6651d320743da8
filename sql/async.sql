-- async: opus_submit / opus_result / opus_cancel / opus_wait, the opus_async
-- view, the async slot cap, attached requests, and set-based generation
-- (opus_generate_many, opus_chat_many, opus_generate_keyed).  Answers are
-- checked against the synchronous functions on greedy prompts with clear
-- margins, so ordering mistakes show.

-- wait_for(q): poll the boolean query q for up to 30 s.
CREATE FUNCTION wait_for(q text) RETURNS boolean LANGUAGE plpgsql AS $$
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

-- Submit returns an id at once; the result is the synchronous answer.
SELECT opus_submit('The capital of France is', max_tokens => 4, temperature => 0) AS id \gset
SELECT :id > 0 AS positive_id;
SELECT state IN ('queued', 'running', 'done') AS listed, kind, usename = current_user AS mine
FROM opus_async WHERE id = :id;
SELECT opus_result(:id) = opus_generate('The capital of France is', max_tokens => 4, temperature => 0) AS same_as_sync;
-- A result is read once; afterwards the id is unknown.
SELECT try(format('SELECT opus_result(%s)', :id)) ~ '^42704: opus request \d+ does not exist$' AS read_once;
SELECT opus_cancel(:id) AS cancel_after_read;
SELECT count(*) FROM opus_async WHERE id = :id;

-- The completion form carries finish reason and usage.
SELECT opus_submit('1, 2, 3, 4, 5, 6, 7,', max_tokens => 4, temperature => 0) AS id \gset
SELECT r->>'object' AS object, r->'choices'->0->>'text' AS text,
       r->'choices'->0->>'finish_reason' AS finish_reason, r->'usage'->'completion_tokens' AS completion_tokens
FROM opus_result_completion(:id) AS r;

-- Chat.
SELECT opus_submit_chat('[{"role": "user", "content": "What is the capital of France?"}]',
                        max_tokens => 4, temperature => 0) AS id \gset
SELECT opus_result(:id) = opus_chat('[{"role": "user", "content": "What is the capital of France?"}]',
                                    max_tokens => 4, temperature => 0) AS chat_same;
SELECT opus_submit_chat('[{"role": "user", "content": "Hi"}]', max_tokens => 2, temperature => 0) AS id \gset
SELECT r->>'object' AS object, r->'choices'->0->'message'->>'role' AS role
FROM opus_result_completion(:id) AS r;

-- Not finished: wait => false and a timeout give NULL; the request goes on
-- until cancelled, and a cancelled request is gone.
SELECT opus_submit('Count from 1 to 10000, separated by commas: 1, 2, 3,',
                   max_tokens => 1500, temperature => 0) AS long_id \gset
SELECT opus_result(:long_id, wait => false) IS NULL AS not_yet;
SELECT opus_result(:long_id, timeout => '50 ms') IS NULL AS timed_out;
SELECT opus_wait(ARRAY[:long_id], timeout => '10 ms') IS NULL AS wait_timed_out;
SELECT state FROM opus_async WHERE id = :long_id;
SELECT opus_cancel(:long_id) AS cancelled;
SELECT opus_cancel(:long_id) AS cancelled_again;
SELECT try(format('SELECT opus_result(%s)', :long_id)) ~ '^42704' AS gone;
-- An interrupted wait leaves the request running (statement_timeout: 57014).
SELECT opus_submit('Count from 1 to 10000, separated by commas: 1, 2, 3,',
                   max_tokens => 1500, temperature => 0) AS long_id \gset
SET statement_timeout = '100ms';
SELECT try(format('SELECT opus_result(%s)', :long_id));
RESET statement_timeout;
SELECT state FROM opus_async WHERE id = :long_id;
SELECT opus_cancel(:long_id) AS cancelled;

-- opus_wait returns whichever finishes first.
SELECT opus_submit('Count from 1 to 10000, separated by commas: 1, 2, 3,',
                   max_tokens => 1500, temperature => 0) AS slow \gset
SELECT opus_submit('The capital of France is', max_tokens => 2, temperature => 0) AS fast \gset
SELECT opus_wait(ARRAY[:slow, :fast]) = :fast AS fast_first;
SELECT opus_cancel(:slow) AS cancelled, opus_result(:fast) IS NOT NULL AS fast_result;
SELECT opus_wait('{}') IS NULL AS empty_wait;

-- The request's own error comes from opus_result, with its SQLSTATE.
SELECT opus_submit(repeat('hello ', 9000), max_tokens => 1) AS id \gset
SELECT sqlstate_of(format('SELECT opus_result(%s)', :id)) AS too_long;
-- Argument errors are raised by opus_submit itself.
SELECT try($$SELECT opus_submit(NULL)$$);
SELECT try($$SELECT opus_submit('x', max_tokens => 0)$$);
SELECT try($$SELECT opus_submit_chat('[]')$$);
SELECT try($$SELECT opus_result(NULL)$$);
SELECT try($$SELECT opus_result(1, timeout => '-1 s')$$);
SELECT try($$SELECT opus_result(12345)$$);
SELECT opus_cancel(12345) AS unknown_cancel;

-- Other roles cannot read, wait for, cancel or see a request.
CREATE ROLE regress_opus_other;
SELECT opus_submit('The capital of France is', max_tokens => 2, temperature => 0) AS id \gset
SET ROLE regress_opus_other;
SELECT try(format('SELECT opus_result(%s)', :id)) ~ '^42501: permission denied for opus request' AS no_read;
SELECT try(format('SELECT opus_cancel(%s)', :id)) ~ '^42501' AS no_cancel;
SELECT try(format('SELECT opus_wait(ARRAY[%s])', :id)) ~ '^42501' AS no_wait;
SELECT count(*) AS visible FROM opus_async;
RESET ROLE;
SELECT opus_result(:id) IS NOT NULL AS owner_reads;

-- At most opus.max_async_requests slots (-1: 6 of the 8 here) hold async
-- requests and set-based windows, one role at most
-- opus.max_async_requests_per_role (-1: half, 3 here); synchronous and
-- set-based calls still find a slot.
SHOW opus.max_async_requests;
SHOW opus.max_async_requests_per_role;
CREATE TEMP TABLE held AS
SELECT opus_submit('Count from 1 to 10000, separated by commas: 1, 2, 3,', max_tokens => 1500, temperature => 0) AS id
FROM generate_series(1, 3);
SELECT try($$SELECT opus_submit('x')$$);
SELECT opus_generate('The capital of France is', max_tokens => 2, temperature => 0) IS NOT NULL AS sync_works;
SELECT count(*) AS many_works FROM opus_generate_many(ARRAY['a', 'b'], max_tokens => 1);
SELECT bool_and(opus_cancel(id)) AS all_cancelled FROM held;
-- The supervisor frees cancelled slots at its next pass.
SELECT wait_for('SELECT busy_slots = 0 FROM opus_engine') AS slots_free;

-- A finished result moves out of its slot into the result store
-- (opus.async_result_store_size), so unread results hold no slot: one
-- role's 12 one-token requests, each finished before the next is submitted
-- (4 times its share of 3 slots), all succeed, every slot is free again,
-- another role can still submit and call, and every result reads back as
-- the synchronous answer.
SHOW opus.async_result_store_size;
CREATE TEMP TABLE hoard (n integer, id bigint);
DO $$
DECLARE
    rid bigint;
BEGIN
    FOR i IN 1 .. 12 LOOP
        rid := opus_submit('The capital of France is', max_tokens => 1, temperature => 0);
        INSERT INTO hoard VALUES (i, rid);
        PERFORM opus_wait(ARRAY[rid]);
    END LOOP;
END $$;
SELECT count(*) AS submitted FROM hoard;
SELECT wait_for('SELECT busy_slots = 0 FROM opus_engine') AS no_slot_held;
SELECT count(*) AS unread, bool_and(state = 'done') AS all_done, bool_and(expires_at > finished_at) AS expire_later
FROM opus_async WHERE id IN (SELECT id FROM hoard);
GRANT SELECT ON hoard TO regress_opus_other;
SET ROLE regress_opus_other;
SELECT opus_result(opus_submit('The capital of France is', max_tokens => 1, temperature => 0)) IS NOT NULL AS other_submits;
SELECT opus_generate('The capital of France is', max_tokens => 1, temperature => 0) IS NOT NULL AS other_sync;
SELECT try(format('SELECT opus_result(%s)', (SELECT id FROM hoard WHERE n = 1))) ~ '^42501' AS stored_no_read;
SELECT try(format('SELECT opus_wait(ARRAY[%s])', (SELECT id FROM hoard WHERE n = 1))) ~ '^42501' AS stored_no_wait;
SELECT try(format('SELECT opus_cancel(%s)', (SELECT id FROM hoard WHERE n = 1))) ~ '^42501' AS stored_no_cancel;
SELECT count(*) AS stored_visible FROM opus_async;
RESET ROLE;
SELECT opus_wait(ARRAY[id]) = id AS wait_sees_stored FROM hoard WHERE n = 2;
SELECT opus_cancel(id) AS stored_cancelled FROM hoard WHERE n = 3;
SELECT try(format('SELECT opus_result(%s)', id)) ~ '^42704' AS cancelled_gone FROM hoard WHERE n = 3;
SELECT r->'choices'->0->>'text' = opus_generate('The capital of France is', max_tokens => 1, temperature => 0) AS completion_same,
       r->'usage'->'completion_tokens' AS completion_tokens, r->'choices'->0->>'finish_reason' AS finish_reason
FROM hoard, opus_result_completion(id) AS r WHERE n = 4;
SELECT count(*) AS read, bool_and(opus_result(id) = opus_generate('The capital of France is', max_tokens => 1, temperature => 0)) AS all_same
FROM hoard WHERE n NOT IN (3, 4);
SELECT count(*) AS left_unread FROM opus_async;
DROP TABLE hoard;

-- detached => false: cancelled when the transaction aborts ...
BEGIN;
SELECT opus_submit('Count from 1 to 10000, separated by commas: 1, 2, 3,',
                   max_tokens => 1500, temperature => 0, detached => false) AS att \gset
SELECT 1 / 0;
ROLLBACK;
SELECT wait_for(format('SELECT NOT EXISTS (SELECT FROM opus_async WHERE id = %s)', :att)) AS cancelled_at_abort;
-- ... or when the session ends; a detached request outlives its session.
SELECT opus_submit('Count from 1 to 10000, separated by commas: 1, 2, 3,',
                   max_tokens => 1500, temperature => 0, detached => false) AS att \gset
SELECT opus_submit('The capital of France is', max_tokens => 3, temperature => 0) AS det \gset
\c
SELECT wait_for(format('SELECT NOT EXISTS (SELECT FROM opus_async WHERE id = %s)', :att)) AS cancelled_at_exit;
SELECT opus_result(:det) = opus_generate('The capital of France is', max_tokens => 3, temperature => 0) AS outlived_session;

-- Set-based: one row per prompt, in input order, each the synchronous answer.
SELECT g.ordinal, g.n = g.ordinal AS in_order,
       g.output = opus_generate(p.prompt, max_tokens => 4, temperature => 0) AS same,
       g.finish_reason, g.completion_tokens
FROM opus_generate_many(ARRAY['In mathematics, a prime number is', 'The capital of France is',
                              '1, 2, 3, 4, 5, 6, 7,', 'Once upon a time'],
                        max_tokens => 4, temperature => 0) WITH ORDINALITY AS g(ordinal, output, finish_reason,
                                                                                   prompt_tokens, completion_tokens, n)
JOIN unnest(ARRAY['In mathematics, a prime number is', 'The capital of France is',
                  '1, 2, 3, 4, 5, 6, 7,', 'Once upon a time']) WITH ORDINALITY AS p(prompt, n)
  ON p.n = g.ordinal;
-- More prompts than the window and than the slots: all come back, in order.
SELECT count(*) AS n, bool_and(ordinal = n) AS in_order, bool_and(completion_tokens = 2) AS all_generated,
       count(DISTINCT output) > 1 AS varied
FROM opus_generate_many(ARRAY(SELECT 'Number ' || i FROM generate_series(1, 40) AS i),
                        max_tokens => 2, temperature => 0, "window" => 3) WITH ORDINALITY AS g(ordinal, output, finish_reason,
                                                                                               prompt_tokens, completion_tokens, n);
SELECT count(*) AS n FROM opus_generate_many(ARRAY(SELECT 'Number ' || i FROM generate_series(1, 20) AS i),
                                             max_tokens => 2, temperature => 0, "window" => 100);
SELECT count(*) AS n FROM opus_generate_many('{}'::text[]);
SELECT try($$SELECT * FROM opus_generate_many(ARRAY['a', NULL])$$);
SELECT try($$SELECT * FROM opus_generate_many(ARRAY['a'], "window" => 0)$$);
-- One failing prompt fails the call (and cancels the rest).
SELECT sqlstate_of($$SELECT * FROM opus_generate_many(ARRAY['a', repeat('hello ', 9000), 'b'], max_tokens => 2)$$) AS one_bad;
-- Keyed form, from a query.
SELECT key, output = opus_generate('Say ' || (key #>> '{}'), max_tokens => 3, temperature => 0) AS same
FROM opus_generate_keyed((SELECT jsonb_agg(jsonb_build_object('key', w, 'prompt', 'Say ' || w) ORDER BY w)
                          FROM unnest(ARRAY['hello', 'world', 'again']) AS w),
                         max_tokens => 3, temperature => 0);
-- Chat form.
SELECT ordinal, output = opus_chat(c, max_tokens => 3, temperature => 0) AS same
FROM opus_chat_many(ARRAY['[{"role": "user", "content": "Hi"}]'::jsonb,
                          '[{"role": "user", "content": "What is the capital of France?"}]'::jsonb],
                    max_tokens => 3, temperature => 0) AS g
JOIN unnest(ARRAY['[{"role": "user", "content": "Hi"}]'::jsonb,
                  '[{"role": "user", "content": "What is the capital of France?"}]'::jsonb]) WITH ORDINALITY AS u(c, n)
  ON u.n = g.ordinal;

-- Nothing is left holding a slot.
SELECT wait_for('SELECT busy_slots = 0 FROM opus_engine') AS slots_free;
SELECT count(*) AS async_left FROM opus_async;
DROP ROLE regress_opus_other;
