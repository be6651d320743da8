\echo Use "CREATE EXTENSION opus_pg" to load this file. \quit

-- opus_pg: LLM inference served by a supervised engine process.
-- Generation functions are VOLATILE (sampling, a model that can change on
-- reload) and PARALLEL UNSAFE (a request holds a shared slot for its call).
-- A NULL option means its default; see the README for ranges and SQLSTATEs.

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

CREATE FUNCTION @extschema@.opus_tokenize(input text)
RETURNS integer[]
AS 'MODULE_PATHNAME', 'opus_tokenize'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_tokenize(text)
IS 'token ids of a text under the served model''s tokenizer (special tokens added as the model says, special text not parsed)';

CREATE FUNCTION @extschema@.opus_detokenize(tokens integer[])
RETURNS text
AS 'MODULE_PATHNAME', 'opus_detokenize'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_detokenize(integer[])
IS 'text of token ids under the served model''s tokenizer (special tokens render as nothing)';

CREATE FUNCTION @extschema@.opus_model_info(
    OUT name text,
    OUT architecture text,
    OUT parameters bigint,
    OUT tensor_type text,
    OUT context_length integer,
    OUT vocab_size integer,
    OUT n_layer integer,
    OUT n_embd integer,
    OUT path text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_model_info'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_model_info()
IS 'the model the engine has loaded (waits for the engine to be ready)';

CREATE VIEW @extschema@.opus_model AS
    SELECT * FROM @extschema@.opus_model_info();

COMMENT ON VIEW @extschema@.opus_model IS 'the model the engine has loaded';

-- Readable by everyone, like the function under it (and pg_stat_opus_engine).
GRANT SELECT ON @extschema@.opus_model TO PUBLIC;

CREATE FUNCTION @extschema@.opus_engine_status(
    OUT state text,
    OUT supervisor_pid integer,
    OUT engine_pid integer,
    OUT starts bigint,
    OUT restarts bigint,
    OUT started_at timestamp with time zone,
    OUT ready_at timestamp with time zone,
    OUT model_path text,
    OUT last_error text,
    OUT last_exit text,
    OUT busy_slots integer,
    OUT engine_requests integer,
    OUT max_requests integer,
    OUT tokens_generated bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_engine_status'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_engine_status()
IS 'the engine process as the supervisor sees it: state, pids, restarts, last error, request slots in use';

CREATE VIEW @extschema@.opus_engine AS
    SELECT * FROM @extschema@.opus_engine_status();

COMMENT ON VIEW @extschema@.opus_engine IS 'the engine process as the supervisor sees it';

GRANT SELECT ON @extschema@.opus_engine TO PUBLIC;

CREATE FUNCTION @extschema@.opus_last_request(
    OUT kind text,
    OUT finish_reason text,
    OUT prompt_tokens integer,
    OUT completion_tokens integer,
    OUT cached_tokens integer,
    OUT queue_ms double precision,
    OUT ttft_ms double precision,
    OUT engine_ms double precision,
    OUT total_ms double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_last_request'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_last_request()
IS 'usage and timings of this session''s last successful request: engine_ms is the engine''s own time, total_ms the backend''s (slot claim to result)';
