-- Asynchronous requests and set-based generation (src/pg/async.c).
--
-- opus_submit returns a request id at once; the request runs in the engine
-- while the session does other work, or ends.  Its result is kept until a
-- session of the same role reads it (opus_result), cancels it (opus_cancel),
-- or opus.async_retention passes.  At most opus.max_async_requests request
-- slots hold asynchronous requests, so synchronous calls are never starved.

CREATE FUNCTION @extschema@.opus_submit(
    prompt text,
    max_tokens integer DEFAULT NULL,
    temperature double precision DEFAULT 1.0,
    top_p double precision DEFAULT 1.0,
    top_k integer DEFAULT 0,
    min_p double precision DEFAULT 0.0,
    presence_penalty double precision DEFAULT 0.0,
    frequency_penalty double precision DEFAULT 0.0,
    repetition_penalty double precision DEFAULT 1.0,
    seed bigint DEFAULT NULL,
    stop text[] DEFAULT NULL,
    detached boolean DEFAULT true,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'opus_submit'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_submit(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], boolean, text, boolean, jsonb, text, text, text[])
IS 'queue a completion of prompt and return its request id at once; detached => false cancels it if the session ends or a transaction of the session aborts before the result is read; response_format, grammar, regex or choices (at most one) constrain the output';

CREATE FUNCTION @extschema@.opus_submit_chat(
    messages jsonb,
    max_tokens integer DEFAULT NULL,
    temperature double precision DEFAULT 1.0,
    top_p double precision DEFAULT 1.0,
    top_k integer DEFAULT 0,
    min_p double precision DEFAULT 0.0,
    presence_penalty double precision DEFAULT 0.0,
    frequency_penalty double precision DEFAULT 0.0,
    repetition_penalty double precision DEFAULT 1.0,
    seed bigint DEFAULT NULL,
    stop text[] DEFAULT NULL,
    detached boolean DEFAULT true,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL,
    tools jsonb DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'opus_submit_chat'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_submit_chat(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], boolean, text, boolean, jsonb, jsonb, text, text, text[])
IS 'queue an answer to OpenAI-style chat messages and return its request id at once; response_format, grammar, regex or choices (at most one) constrain the output';

CREATE FUNCTION @extschema@.opus_result(
    id bigint,
    wait boolean DEFAULT true,
    timeout interval DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'opus_result'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_result(bigint, boolean, interval)
IS 'the text of an asynchronous request, which is then forgotten; raises the request''s error; NULL if it has not finished (wait false, or timeout passed)';

CREATE FUNCTION @extschema@.opus_result_completion(
    id bigint,
    wait boolean DEFAULT true,
    timeout interval DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'opus_result_completion'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_result_completion(bigint, boolean, interval)
IS 'like opus_result, returning the OpenAI completion object (finish_reason, usage, timings)';

CREATE FUNCTION @extschema@.opus_cancel(id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'opus_cancel'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_cancel(bigint)
IS 'stop a queued or running asynchronous request, or drop its unread result; false if no such request exists';

CREATE FUNCTION @extschema@.opus_wait(
    ids bigint[],
    timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'opus_wait'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_wait(bigint[], interval)
IS 'the first of ids that has finished (or no longer exists), waiting for one; NULL if none within timeout';

CREATE FUNCTION @extschema@.opus_async_requests(
    OUT id bigint,
    OUT state text,
    OUT kind text,
    OUT usename text,
    OUT pid integer,
    OUT submitted_at timestamp with time zone,
    OUT finished_at timestamp with time zone,
    OUT expires_at timestamp with time zone)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_async_requests'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_async_requests()
IS 'asynchronous requests the caller may use (its own role''s): queued, running, or finished and waiting to be read';

CREATE VIEW @extschema@.opus_async AS
    SELECT * FROM @extschema@.opus_async_requests();

COMMENT ON VIEW @extschema@.opus_async IS 'asynchronous requests the caller may use, with their state and when an unread result expires';

GRANT SELECT ON @extschema@.opus_async TO PUBLIC;

CREATE FUNCTION @extschema@.opus_generate_many(
    prompts text[],
    max_tokens integer DEFAULT NULL,
    temperature double precision DEFAULT 1.0,
    top_p double precision DEFAULT 1.0,
    top_k integer DEFAULT 0,
    min_p double precision DEFAULT 0.0,
    presence_penalty double precision DEFAULT 0.0,
    frequency_penalty double precision DEFAULT 0.0,
    repetition_penalty double precision DEFAULT 1.0,
    seed bigint DEFAULT NULL,
    stop text[] DEFAULT NULL,
    "window" integer DEFAULT NULL,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS TABLE(ordinal integer, output text, finish_reason text,
              prompt_tokens integer, completion_tokens integer)
AS 'MODULE_PATHNAME', 'opus_generate_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_generate_many(text[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean, jsonb, text, text, text[])
IS 'complete every prompt, keeping "window" requests in flight so the engine batches them (NULL: up to 16); one row per prompt, in input order; any failure raises and cancels the rest; response_format, grammar, regex or choices (at most one) constrain every output';

CREATE FUNCTION @extschema@.opus_chat_many(
    conversations jsonb[],
    max_tokens integer DEFAULT NULL,
    temperature double precision DEFAULT 1.0,
    top_p double precision DEFAULT 1.0,
    top_k integer DEFAULT 0,
    min_p double precision DEFAULT 0.0,
    presence_penalty double precision DEFAULT 0.0,
    frequency_penalty double precision DEFAULT 0.0,
    repetition_penalty double precision DEFAULT 1.0,
    seed bigint DEFAULT NULL,
    stop text[] DEFAULT NULL,
    "window" integer DEFAULT NULL,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL,
    tools jsonb DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS TABLE(ordinal integer, output text, finish_reason text,
              prompt_tokens integer, completion_tokens integer)
AS 'MODULE_PATHNAME', 'opus_chat_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_chat_many(jsonb[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean, jsonb, jsonb, text, text, text[])
IS 'answer every conversation (each an OpenAI-style messages array) like opus_generate_many';

-- The keyed form: items is a JSON array of {"key": any, "prompt": text}, as
-- jsonb_agg(jsonb_build_object('key', id, 'prompt', body)) makes from a query.
-- A prompt that is not a JSON string (a number, an object, missing) is taken
-- as NULL, so the call fails ("prompt N must not be null") instead of
-- generating from the number's text.
CREATE FUNCTION @extschema@.opus_generate_keyed(
    items jsonb,
    max_tokens integer DEFAULT NULL,
    temperature double precision DEFAULT 1.0,
    top_p double precision DEFAULT 1.0,
    top_k integer DEFAULT 0,
    min_p double precision DEFAULT 0.0,
    presence_penalty double precision DEFAULT 0.0,
    frequency_penalty double precision DEFAULT 0.0,
    repetition_penalty double precision DEFAULT 1.0,
    seed bigint DEFAULT NULL,
    stop text[] DEFAULT NULL,
    "window" integer DEFAULT NULL,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS TABLE(key jsonb, output text, finish_reason text,
              prompt_tokens integer, completion_tokens integer)
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$
    SELECT items OPERATOR(pg_catalog.->) (g.ordinal OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.->) 'key',
           g.output, g.finish_reason, g.prompt_tokens, g.completion_tokens
    FROM @extschema@.opus_generate_many(
        ARRAY(SELECT CASE pg_catalog.jsonb_typeof(e.value OPERATOR(pg_catalog.->) 'prompt')
                         WHEN 'string' THEN e.value OPERATOR(pg_catalog.->>) 'prompt' END
              FROM pg_catalog.jsonb_array_elements(items) WITH ORDINALITY AS e(value, n)
              ORDER BY e.n),
        max_tokens, temperature, top_p, top_k, min_p, presence_penalty,
        frequency_penalty, repetition_penalty, seed, stop, "window", model, fallback,
        response_format, grammar, regex, choices) AS g
    ORDER BY g.ordinal
$$;

COMMENT ON FUNCTION @extschema@.opus_generate_keyed(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean, jsonb, text, text, text[])
IS 'opus_generate_many over a JSON array of {"key": ..., "prompt": ...}; returns each item''s key with its output, in input order';
