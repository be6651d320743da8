-- Streaming: one row per chunk of newly decoded text while the request runs
-- (src/pg/stream.c, docs/streaming.md).  Value-per-call set-returning
-- functions: call them in the select list (or through a cursor) so rows
-- reach the client as they are produced; ROWS 50 is a planner hint.

CREATE FUNCTION @extschema@.opus_generate_stream(
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
RETURNS SETOF text
AS 'MODULE_PATHNAME', 'opus_generate_stream'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 50;

COMMENT ON FUNCTION @extschema@.opus_generate_stream(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb, text, text, text[])
IS 'stream the completion of a prompt as text chunks, one row per chunk while it is generated (options as opus_generate)';

CREATE FUNCTION @extschema@.opus_chat_stream(
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
RETURNS SETOF text
AS 'MODULE_PATHNAME', 'opus_chat_stream'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 50;

COMMENT ON FUNCTION @extschema@.opus_chat_stream(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb, jsonb, text, text, text[])
IS 'stream the answer to chat messages as text chunks, one row per chunk while it is generated (options as opus_chat)';

CREATE FUNCTION @extschema@.opus_generate_stream_completion(
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
RETURNS SETOF jsonb
AS 'MODULE_PATHNAME', 'opus_generate_stream_completion'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 50;

COMMENT ON FUNCTION @extschema@.opus_generate_stream_completion(text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb, text, text, text[])
IS 'like opus_generate_stream, as OpenAI text_completion chunks; the last row has finish_reason and usage';

CREATE FUNCTION @extschema@.opus_chat_stream_completion(
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
RETURNS SETOF jsonb
AS 'MODULE_PATHNAME', 'opus_chat_stream_completion'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 50;

COMMENT ON FUNCTION @extschema@.opus_chat_stream_completion(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb, jsonb, text, text, text[])
IS 'like opus_chat_stream, as OpenAI chat.completion.chunk objects; the last row has finish_reason and usage';
