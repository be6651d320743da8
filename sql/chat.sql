-- chat: messages rendered with the model's own Jinja chat template, as
-- Hugging Face's apply_chat_template renders it (docs/chat_templates.md).
-- SmolLM2's template adds a default system message ("You are a helpful AI
-- assistant named SmolLM, trained by Hugging Face") when there is none: the
-- answer below is the model's with that prompt (before 0.2.0 the prompt had
-- no system message and the answer was "The capital of France is Paris.").
SELECT opus_chat('[{"role": "user", "content": "What is the capital of France?"}]',
                 max_tokens => 16, temperature => 0);
-- With a system message of our own, the template leaves it as it is.
SELECT opus_chat('[{"role": "system", "content": "You are a helpful assistant."},
                   {"role": "user", "content": "What is the capital of France?"}]',
                 max_tokens => 16, temperature => 0);
-- A system message and a multi-turn conversation are accepted.
SELECT length(opus_chat('[{"role": "system", "content": "You are a terse assistant."},
                          {"role": "user", "content": "Say hello."}]',
                        max_tokens => 8, temperature => 0)) > 0 AS answered;
SELECT length(opus_chat('[{"role": "user", "content": "My name is Ada."},
                          {"role": "assistant", "content": "Hello Ada!"},
                          {"role": "user", "content": "What is my name?"}]',
                        max_tokens => 8, temperature => 0)) > 0 AS answered;
-- The template matters: the same words as a raw prompt give other tokens.
SELECT (opus_chat_completion('[{"role": "user", "content": "Hi"}]', max_tokens => 1, temperature => 0)->'usage'->>'prompt_tokens')::int
     > (opus_completion('Hi', max_tokens => 1, temperature => 0)->'usage'->>'prompt_tokens')::int AS template_applied;
-- Extra keys in a message are ignored.
SELECT opus_chat('[{"role": "user", "content": "What is the capital of France?", "name": "x"}]',
                 max_tokens => 16, temperature => 0)
     = opus_chat('[{"role": "user", "content": "What is the capital of France?"}]',
                 max_tokens => 16, temperature => 0) AS same;

-- The chat.completion shape; the answer ends at the end-of-turn token.
SELECT c->>'object' AS object,
       c->>'id' LIKE 'chatcmpl-%' AS id_ok,
       c->'choices'->0->'message'->>'role' AS role,
       c->'choices'->0->'message'->>'content' AS content,
       c->'choices'->0->>'finish_reason' AS finish_reason,
       c->'usage'->'prompt_tokens' AS prompt_tokens,
       (c->'usage'->>'prompt_tokens')::int + (c->'usage'->>'completion_tokens')::int
           = (c->'usage'->>'total_tokens')::int AS total_ok
FROM opus_chat_completion('[{"role": "system", "content": "You are a helpful assistant."},
                            {"role": "user", "content": "What is the capital of France?"}]',
                          max_tokens => 16, temperature => 0) AS c;
