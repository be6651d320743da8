-- Tools in chat (docs/tools.md): the tool calls in a chat answer.

CREATE FUNCTION @extschema@.opus_tool_calls(content text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'opus_tool_calls'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.opus_tool_calls(text)
IS 'the tool calls in a chat answer (Hermes/Qwen <tool_call>, Mistral [TOOL_CALLS], Llama 3 JSON) as an OpenAI tool_calls array, NULL when there are none';
