-- chat: messages rendered with the model's chat template (ChatML for SmolLM2).
SELECT opus_chat('[{"role": "user", "content": "What is the capital of France?"}]',
                 max_tokens => 16, temperature => 0);
SELECT opus_chat('[{"role": "system", "content": "You are a terse assistant."},
                   {"role": "user", "content": "Say hello."}]',
                 max_tokens => 16, temperature => 0);
-- A multi-turn conversation.
SELECT opus_chat('[{"role": "user", "content": "My name is Ada."},
                   {"role": "assistant", "content": "Hello Ada!"},
                   {"role": "user", "content": "What is my name?"}]',
                 max_tokens => 16, temperature => 0);
-- Extra keys in a message are ignored.
SELECT opus_chat('[{"role": "user", "content": "What is the capital of France?", "name": "x"}]',
                 max_tokens => 16, temperature => 0)
     = opus_chat('[{"role": "user", "content": "What is the capital of France?"}]',
                 max_tokens => 16, temperature => 0) AS same;

-- The chat.completion shape.
SELECT c->>'object' AS object,
       c->>'id' LIKE 'chatcmpl-%' AS id_ok,
       c->'choices'->0->'message'->>'role' AS role,
       c->'choices'->0->'message'->>'content' AS content,
       c->'choices'->0->>'finish_reason' AS finish_reason,
       (c->'usage'->>'prompt_tokens')::int > 5 AS prompt_counted,
       (c->'usage'->>'prompt_tokens')::int + (c->'usage'->>'completion_tokens')::int
           = (c->'usage'->>'total_tokens')::int AS total_ok
FROM opus_chat_completion('[{"role": "user", "content": "What is the capital of France?"}]',
                          max_tokens => 16, temperature => 0) AS c;
