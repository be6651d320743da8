-- Structured output (docs/structured-output.md): the grammar a constraint
-- becomes.

CREATE FUNCTION @extschema@.opus_constraint_grammar(
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'opus_constraint_grammar'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.opus_constraint_grammar(jsonb, text, text, text[])
IS 'the GBNF grammar (llama.cpp dialect) an output constraint becomes: response_format (OpenAI shape, JSON Schema), grammar, regex or choices, at most one; NULL when unconstrained';

-- opus_classify and opus_extract: a chat request held to a constraint,
-- greedy (docs/structured-output.md).
CREATE FUNCTION @extschema@.opus_classify(
    input text,
    labels text[],
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'opus_classify'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_classify(text, text[], text, boolean)
IS 'the label (one of labels) the model gives the input, its output held to the labels (greedy)';

CREATE FUNCTION @extschema@.opus_classify(
    input text,
    label anyenum,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL)
RETURNS anyenum
AS 'MODULE_PATHNAME', 'opus_classify_enum'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_classify(text, anyenum, text, boolean)
IS 'the value of the enum type of label (NULL::my_enum will do) the model gives the input, its output held to the enum''s labels (greedy)';

CREATE FUNCTION @extschema@.opus_extract(
    input text,
    schema jsonb,
    max_tokens integer DEFAULT NULL,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'opus_extract'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_extract(text, jsonb, integer, text, boolean)
IS 'the data of the input as JSON matching the JSON Schema, its output held to the schema (greedy); 22P02 when cut at max_tokens';

-- opus_generate, opus_chat, opus_completion and opus_chat_completion gain
-- the output constraint as arguments: response_format jsonb, grammar text,
-- regex text, choices text[].
DROP FUNCTION @extschema@.opus_generate(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean);
DROP FUNCTION @extschema@.opus_chat(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb);

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
    fallback boolean DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'opus_generate'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_generate(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb, text, text, text[])
IS 'complete a prompt with the served model; max_tokens NULL means opus.default_max_tokens, seed NULL means random; response_format, grammar, regex or choices (at most one) constrain the output';

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
    fallback boolean DEFAULT NULL,
    tools jsonb DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'opus_chat'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_chat(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb, jsonb, text, text, text[])
IS 'answer OpenAI-style chat messages ([{"role": ..., "content": ...}]) with the model''s chat template; tools: OpenAI tool definitions for the template; response_format, grammar, regex or choices (at most one) constrain the output';

DROP FUNCTION @extschema@.opus_completion(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean);
DROP FUNCTION @extschema@.opus_chat_completion(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb);

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
    fallback boolean DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'opus_completion'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_completion(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb, text, text, text[])
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
    fallback boolean DEFAULT NULL,
    tools jsonb DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'opus_chat_completion'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_chat_completion(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb, jsonb, text, text, text[])
IS 'like opus_chat, returning an OpenAI chat.completion object with finish_reason, usage and timings (and tool_calls when the model called a tool)';

-- opus_submit, opus_submit_chat and the set-based functions
-- (opus_generate_many, opus_chat_many, opus_generate_keyed) gain the output
-- constraint as arguments too.
DROP FUNCTION @extschema@.opus_submit(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], boolean, text, boolean);
DROP FUNCTION @extschema@.opus_submit_chat(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], boolean, text, boolean);
DROP FUNCTION @extschema@.opus_generate_keyed(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean);
DROP FUNCTION @extschema@.opus_generate_many(text[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean);
DROP FUNCTION @extschema@.opus_chat_many(jsonb[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean);

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
