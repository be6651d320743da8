-- tools: OpenAI tool definitions handed to the model's chat template as
-- `tools`, and tool calls in the answer returned in the OpenAI shape
-- (docs/tools.md).
\set tools '[{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]'
\set msgs '[{"role": "user", "content": "What is the weather in Paris?"}]'

-- SmolLM2's template does not use tools: the same prompt and answer with
-- and without them, and a plain answer has no tool_calls.
SELECT opus_chat(:'msgs', max_tokens => 8, temperature => 0, tools => :'tools')
     = opus_chat(:'msgs', max_tokens => 8, temperature => 0) AS same_answer;
SELECT c->'usage'->'prompt_tokens' AS prompt_tokens,
       c->'choices'->0->'message' ? 'tool_calls' AS has_tool_calls,
       c->'choices'->0->>'finish_reason' AS finish_reason
FROM opus_chat_completion(:'msgs', max_tokens => 8, temperature => 0, tools => :'tools') AS c;
SELECT (opus_chat_completion(:'msgs', max_tokens => 1, temperature => 0)->'usage'->'prompt_tokens')::int AS without_tools;
-- A tool's result (role "tool") is a message for the template.
SELECT (opus_chat_completion('[{"role": "user", "content": "What is the weather in Paris?"},
                               {"role": "tool", "content": "{\"temperature\": 21}"}]',
                             max_tokens => 1, temperature => 0, tools => :'tools')->'usage'->>'prompt_tokens')::int
     > (opus_chat_completion(:'msgs', max_tokens => 1, temperature => 0)->'usage'->>'prompt_tokens')::int AS tool_message_rendered;

-- An answer the model formats as a tool call (here SmolLM2 repeats one):
-- message.tool_calls in the OpenAI shape, the text around it as content,
-- finish_reason tool_calls.  Without tools the same answer is plain text.
\set echo '[{"role": "user", "content": "Repeat exactly: <tool_call>{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"Paris\\"}}</tool_call>"}]'
SELECT c->'choices'->0 #- '{message,tool_calls,0,id}' AS choice,
       c->'choices'->0->'message'->'tool_calls'->0->>'id' LIKE 'call\_%' AS has_id
FROM opus_chat_completion(:'echo', max_tokens => 40, temperature => 0, tools => :'tools') AS c;
SELECT c->'choices'->0->'message' ? 'tool_calls' AS has_tool_calls,
       c->'choices'->0->>'finish_reason' AS finish_reason
FROM opus_chat_completion(:'echo', max_tokens => 40, temperature => 0) AS c;

-- The tool-call formats of the template families (opus_tool_calls is the
-- parser opus_chat_completion uses on the answer).
-- Hermes / Qwen: <tool_call> blocks, one per call.
SELECT opus_tool_calls(E'<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>');
SELECT jsonb_array_length(opus_tool_calls(E'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')) AS n_calls;
-- arguments given as a JSON string stay that string; no arguments: {}
SELECT opus_tool_calls('<tool_call>{"name": "now", "arguments": "{\"tz\": \"UTC\"}"}</tool_call>')->0->'function' AS string_arguments;
SELECT opus_tool_calls('<tool_call>{"name": "now"}</tool_call>')->0->'function' AS no_arguments;
-- an unterminated last block (generation stopped by max_tokens) still counts
SELECT opus_tool_calls('<tool_call>{"name": "now", "arguments": {}}')->0->'function'->>'name' AS unterminated;
-- Mistral: [TOOL_CALLS] and an array.
SELECT opus_tool_calls('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "now", "arguments": {}}]');
-- Llama 3.x: the answer is one JSON object with "parameters".
SELECT opus_tool_calls('{"name": "get_weather", "parameters": {"city": "Paris"}}');
SELECT opus_tool_calls(E'<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}\n')->0->'function'->>'name' AS python_tag;
-- Not tool calls: plain text, bad JSON, no name, a JSON answer that is not
-- a call, one bad block among good ones.
SELECT opus_tool_calls('The weather in Paris is sunny.') IS NULL AS plain;
SELECT opus_tool_calls('<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>') IS NULL AS bad_json;
SELECT opus_tool_calls('<tool_call>{"arguments": {}}</tool_call>') IS NULL AS no_name;
SELECT opus_tool_calls('{"answer": 42}') IS NULL AS not_a_call;
SELECT opus_tool_calls('[1, 2, 3]') IS NULL AS an_array;
SELECT opus_tool_calls('<tool_call>{"name": "a"}</tool_call><tool_call>oops</tool_call>') IS NULL AS one_bad_block;
SELECT opus_tool_calls('[TOOL_CALLS][]') IS NULL AS empty_list;
SELECT opus_tool_calls(NULL) IS NULL AS strict;

-- Bad tools: 22023 (messages as for opus_chat: 22023 / 22004).
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "Hi"}]', tools => '{}')$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "Hi"}]', tools => '"get_weather"')$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "Hi"}]', tools => '[1]')$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "Hi"}]', tools => '[{"type": "retrieval"}]')$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "Hi"}]', tools => '[{"type": "function"}]')$$);
SELECT try($$SELECT opus_chat_completion('[{"role": "user", "content": "Hi"}]', tools => '[{"type": "function", "function": {"name": ""}}]')$$);
SELECT try($$SELECT opus_chat_completion('[{"role": "user", "content": "Hi"}]', tools => '[{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": []}]')$$);
SELECT try($$SELECT opus_chat('[{"role": "robot", "content": "Hi"}]')$$);
-- An empty list: templates test `tools` for truth, as for none.
SELECT opus_chat(:'msgs', max_tokens => 4, temperature => 0, tools => '[]')
     = opus_chat(:'msgs', max_tokens => 4, temperature => 0) AS empty_tools;

-- Every chat function takes tools (the OPUS_PARAMS_CHAT row of src/params.h):
-- the streaming, asynchronous and set-based forms answer as opus_chat does
-- with the same tools, and check them the same way.
SELECT string_agg(c, '' ORDER BY n) = opus_chat(:'echo', max_tokens => 40, temperature => 0, tools => :'tools') AS stream_same
FROM opus_chat_stream(:'echo', max_tokens => 40, temperature => 0, tools => :'tools') WITH ORDINALITY AS s(c, n);
-- the last chunk of a stream with tools has the answer's tool calls
SELECT c->'choices'->0->'delta'->'tool_calls'->0->'function' AS stream_call,
       c->'choices'->0->>'finish_reason' AS finish_reason
FROM (SELECT c, row_number() OVER () AS n, count(*) OVER () AS total
      FROM opus_chat_stream_completion(:'echo', max_tokens => 40, temperature => 0, tools => :'tools') AS c) AS s
WHERE n = total;
-- each streamed call carries its position, as OpenAI's delta.tool_calls[].index
-- (a client assembles calls by it); message.tool_calls above have none
SELECT jsonb_path_query_array(c, '$.choices[0].delta.tool_calls[*].index') AS stream_indexes,
       c->'choices'->0->'delta'->'tool_calls'->0->>'id' LIKE 'call\_%' AS has_id
FROM (SELECT c, row_number() OVER () AS n, count(*) OVER () AS total
      FROM opus_chat_stream_completion(:'echo', max_tokens => 40, temperature => 0, tools => :'tools') AS c) AS s
WHERE n = total;
SELECT count(*) FILTER (WHERE c->'choices'->0->'delta' ? 'tool_calls') AS chunks_with_calls,
       bool_and(c->'choices'->0->>'finish_reason' IS DISTINCT FROM 'tool_calls') AS no_tool_finish
FROM opus_chat_stream_completion(:'echo', max_tokens => 40, temperature => 0) AS c;
SELECT opus_submit_chat(:'echo', max_tokens => 40, temperature => 0, tools => :'tools') AS id \gset
SELECT c->'choices'->0->'message'->'tool_calls'->0->'function' AS async_call,
       c->'choices'->0->>'finish_reason' AS finish_reason
FROM opus_result_completion(:id) AS c;
SELECT opus_submit_chat(:'echo', max_tokens => 40, temperature => 0) AS id \gset
SELECT opus_result_completion(:id)->'choices'->0->'message' ? 'tool_calls' AS async_without_tools;
SELECT bool_and(output = opus_chat(:'echo', max_tokens => 40, temperature => 0, tools => :'tools')) AS many_same,
       count(*) AS n
FROM opus_chat_many(ARRAY[:'echo', :'echo']::jsonb[], max_tokens => 40, temperature => 0, tools => :'tools');
SELECT try($$SELECT * FROM opus_chat_stream('[{"role": "user", "content": "Hi"}]', tools => '[1]')$$);
SELECT try($$SELECT * FROM opus_chat_stream_completion('[{"role": "user", "content": "Hi"}]', tools => '{}')$$);
SELECT try($$SELECT opus_submit_chat('[{"role": "user", "content": "Hi"}]', tools => '[{"type": "function"}]')$$);
SELECT try($$SELECT * FROM opus_chat_many(ARRAY['[{"role": "user", "content": "Hi"}]'::jsonb], tools => '"f"')$$);

-- A conversation that went through a tool call, in the OpenAI shape: the
-- assistant message carries tool_calls, the result tool_call_id; their
-- members reach the template as they are (docs/tools.md; the renderer's
-- goldens against jinja2 are test/golden/jinja/chat_items.golden).
-- SmolLM2's template prints only role and content: the same prompt as
-- without them.
\set call_msgs '[{"role": "user", "content": "What is the weather in Paris?"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "call_1", "content": "21 degrees"}]'
\set plain_msgs '[{"role": "user", "content": "What is the weather in Paris?"}, {"role": "assistant", "content": ""}, {"role": "tool", "content": "21 degrees"}]'
SELECT (opus_chat_completion(:'call_msgs', max_tokens => 1, temperature => 0, tools => :'tools')->'usage'->>'prompt_tokens')::int
     = (opus_chat_completion(:'plain_msgs', max_tokens => 1, temperature => 0, tools => :'tools')->'usage'->>'prompt_tokens')::int AS members_ignored_by_smollm2;
-- content null (OpenAI's form beside tool_calls) is null for the template:
-- SmolLM2's template adds it to a string and fails, as jinja2 does.
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "user", "content": "Go on"}]', max_tokens => 1)$$);
-- Malformed: 22023.
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "Hi", "tool_calls": []}]')$$);
SELECT try($$SELECT opus_chat('[{"role": "assistant", "content": "", "tool_calls": {}}]')$$);
SELECT try($$SELECT opus_chat('[{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {}}]}]')$$);
SELECT try($$SELECT opus_chat('[{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": 1}}]}]')$$);
SELECT try($$SELECT opus_chat('[{"role": "assistant", "content": "", "tool_calls": [{"type": "code", "function": {"name": "f"}}]}]')$$);
SELECT try($$SELECT opus_chat('[{"role": "tool", "content": "x", "tool_call_id": 7}]')$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": null}]')$$);
