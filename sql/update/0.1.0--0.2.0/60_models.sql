-- 0.1.0 -> 0.2.0: several models (sql/install/60_models.sql, docs/models.md).
-- The generation functions gain two last arguments, model text and fallback
-- boolean (both DEFAULT NULL): dropped and created again with the text of
-- sql/install/00_core.sql and 20_async.sql (opus_generate_keyed first: it
-- calls opus_generate_many).
DROP FUNCTION @extschema@.opus_generate(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[]);
DROP FUNCTION @extschema@.opus_chat(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[]);
DROP FUNCTION @extschema@.opus_completion(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[]);
DROP FUNCTION @extschema@.opus_chat_completion(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[]);
DROP FUNCTION @extschema@.opus_submit(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], boolean);
DROP FUNCTION @extschema@.opus_submit_chat(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], boolean);
DROP FUNCTION @extschema@.opus_generate_keyed(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer);
DROP FUNCTION @extschema@.opus_generate_many(text[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer);
DROP FUNCTION @extschema@.opus_chat_many(jsonb[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer);

CREATE FUNCTION @extschema@.opus_generate(
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
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'opus_generate'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_generate(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean)
IS 'complete a prompt with the served model; max_tokens NULL means opus.default_max_tokens, seed NULL means random';

CREATE FUNCTION @extschema@.opus_chat(
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
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'opus_chat'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_chat(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean)
IS 'answer OpenAI-style chat messages ([{"role": ..., "content": ...}]) with the model''s chat template';

CREATE FUNCTION @extschema@.opus_completion(
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
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'opus_completion'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_completion(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean)
IS 'like opus_generate, returning an OpenAI text_completion object with finish_reason, usage and timings';

CREATE FUNCTION @extschema@.opus_chat_completion(
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
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'opus_chat_completion'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_chat_completion(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean)
IS 'like opus_chat, returning an OpenAI chat.completion object with finish_reason, usage and timings';

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
    fallback boolean DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'opus_submit'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_submit(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], boolean, text, boolean)
IS 'queue a completion of prompt and return its request id at once; detached => false cancels it if the session ends or a transaction of the session aborts before the result is read';

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
    fallback boolean DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'opus_submit_chat'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_submit_chat(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], boolean, text, boolean)
IS 'queue an answer to OpenAI-style chat messages and return its request id at once';

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
    fallback boolean DEFAULT NULL)
RETURNS TABLE(ordinal integer, output text, finish_reason text,
              prompt_tokens integer, completion_tokens integer)
AS 'MODULE_PATHNAME', 'opus_generate_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_generate_many(text[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean)
IS 'complete every prompt, keeping "window" requests in flight so the engine batches them (NULL: up to 16); one row per prompt, in input order; any failure raises and cancels the rest';

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
    fallback boolean DEFAULT NULL)
RETURNS TABLE(ordinal integer, output text, finish_reason text,
              prompt_tokens integer, completion_tokens integer)
AS 'MODULE_PATHNAME', 'opus_chat_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_chat_many(jsonb[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean)
IS 'answer every conversation (each an OpenAI-style messages array) like opus_generate_many';

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
    fallback boolean DEFAULT NULL)
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
        frequency_penalty, repetition_penalty, seed, stop, "window", model, fallback) AS g
    ORDER BY g.ordinal
$$;

COMMENT ON FUNCTION @extschema@.opus_generate_keyed(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean)
IS 'opus_generate_many over a JSON array of {"key": ..., "prompt": ...}; returns each item''s key with its output, in input order';


CREATE FUNCTION @extschema@.opus_models_v1(
    OUT name text,
    OUT state text,
    OUT version integer,
    OUT path text,
    OUT architecture text,
    OUT parameters bigint,
    OUT tensor_type text,
    OUT context_length integer,
    OUT engine_pid integer,
    OUT rss_bytes bigint,
    OUT weights_bytes bigint,
    OUT kv_cache_bytes bigint,
    OUT threads integer,
    OUT ready_at timestamp with time zone,
    OUT restarts bigint,
    OUT last_error text,
    OUT previous_path text,
    OUT probation_until timestamp with time zone,
    OUT rollbacks bigint,
    OUT role text,
    OUT swapping_to text,
    OUT fallback text,
    OUT max_ttft_ms integer,
    OUT overloaded boolean,
    OUT recent_ttft_ms double precision,
    OUT fallback_requests bigint,
    OUT kind text,
    OUT dimensions integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_models_v1'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_models_v1()
IS 'one row per declared model (the default plus opus.models): state, version, file, engine, memory, rollback target, whether it generates or embeds (and its dimensions); paths and errors only for superusers and pg_read_all_settings';

CREATE VIEW @extschema@.opus_models AS
    SELECT * FROM @extschema@.opus_models_v1();

COMMENT ON VIEW @extschema@.opus_models IS 'the declared models and their state';

GRANT SELECT ON @extschema@.opus_models TO PUBLIC;

-- opus_model_info(name): the opus_models row of one model (42704 if none).
CREATE FUNCTION @extschema@.opus_model_info(name text)
RETURNS @extschema@.opus_models
LANGUAGE plpgsql VOLATILE STRICT PARALLEL RESTRICTED
AS $$
DECLARE
    r @extschema@.opus_models;
BEGIN
    SELECT * INTO r FROM @extschema@.opus_models_v1() m WHERE m.name OPERATOR(pg_catalog.=) $1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'opus model "%" does not exist', $1
            USING ERRCODE = 'undefined_object',
                  HINT = 'Models are declared in opus.models; SELECT name FROM opus_models lists them.';
    END IF;
    RETURN r;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_model_info(text)
IS 'the opus_models row of one declared model (default or a name of opus.models)';

CREATE FUNCTION @extschema@.opus_model_swap(name text, path text, canaries jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'opus_model_swap'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_model_swap(text, text, jsonb)
IS 'start path as the new version of model name beside the serving one; it takes over after a warm-up (canaries: [{"prompt", "expect", "max_tokens"}], default three fixed prompts), and the old version stays the rollback target for opus.model_probation';

REVOKE ALL ON FUNCTION @extschema@.opus_model_swap(text, text, jsonb) FROM PUBLIC;

CREATE FUNCTION @extschema@.opus_model_rollback(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'opus_model_rollback'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_model_rollback(text)
IS 'swap model name back to the version its last swap replaced (with the same warm-up)';

REVOKE ALL ON FUNCTION @extschema@.opus_model_rollback(text) FROM PUBLIC;
