-- 0.1.0 -> 0.2.0: tools in chat (sql/install/65_tools.sql, docs/tools.md).
-- opus_chat and opus_chat_completion gain a last argument, tools jsonb
-- DEFAULT NULL: dropped and created again with the text of
-- sql/install/00_core.sql.
DROP FUNCTION @extschema@.opus_chat(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean);
DROP FUNCTION @extschema@.opus_chat_completion(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean);

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
    tools jsonb DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'opus_chat'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_chat(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb)
IS 'answer OpenAI-style chat messages ([{"role": ..., "content": ...}]) with the model''s chat template; tools: OpenAI tool definitions for the template';

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
    tools jsonb DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'opus_chat_completion'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_chat_completion(jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb)
IS 'like opus_chat, returning an OpenAI chat.completion object with finish_reason, usage and timings (and tool_calls when the model called a tool)';


CREATE FUNCTION @extschema@.opus_tool_calls(content text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'opus_tool_calls'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.opus_tool_calls(text)
IS 'the tool calls in a chat answer (Hermes/Qwen <tool_call>, Mistral [TOOL_CALLS], Llama 3 JSON) as an OpenAI tool_calls array, NULL when there are none';
