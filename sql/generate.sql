-- generate: greedy completions of fixed prompts, seeds, stop strings, and
-- the OpenAI-shaped jsonb variant.  The prompts are ones whose greedy
-- continuation llama.cpp picks with a clear margin at every step (see
-- test/golden/logits/greedy.txt), so the text is the oracle's too.
SELECT opus_generate('In mathematics, a prime number is', max_tokens => 16, temperature => 0);
SELECT opus_generate('1, 2, 3, 4, 5, 6, 7,', max_tokens => 16, temperature => 0);
SELECT opus_generate(E'Question: What is the boiling point of water at sea level?\nAnswer:',
                     max_tokens => 8, temperature => 0);
SELECT opus_generate('The capital of France is', max_tokens => 3, temperature => 0);

-- Greedy is deterministic; so is sampling with a fixed seed.
SELECT opus_generate('Once upon a time', max_tokens => 16, temperature => 0)
     = opus_generate('Once upon a time', max_tokens => 16, temperature => 0) AS greedy_repeats;
SELECT opus_generate('Once upon a time', max_tokens => 16, temperature => 0.8, seed => 42)
     = opus_generate('Once upon a time', max_tokens => 16, temperature => 0.8, seed => 42) AS seeded_repeats;
SELECT opus_generate('Once upon a time', max_tokens => 16, temperature => 0.8, seed => 42,
                     top_k => 40, top_p => 0.9, min_p => 0.05, repetition_penalty => 1.1,
                     presence_penalty => 0.5, frequency_penalty => 0.5) <> '' AS all_options;

-- Named and positional arguments agree; NULL options mean their defaults.
SELECT opus_generate('In mathematics, a prime number is', 8, 0)
     = opus_generate('In mathematics, a prime number is', max_tokens => 8, temperature => 0,
                     top_p => NULL, top_k => NULL, stop => NULL) AS same;

-- A stop string ends the text before it.
SELECT opus_generate('1, 2, 3, 4, 5, 6, 7,', max_tokens => 16, temperature => 0, stop => ARRAY['11']);
SELECT opus_generate('In mathematics, a prime number is', max_tokens => 16, temperature => 0,
                     stop => ARRAY['zzz', 'than']);

-- max_tokens NULL uses opus.default_max_tokens.
SET opus.default_max_tokens = 4;
SELECT (opus_completion('1, 2, 3, 4, 5, 6, 7,', temperature => 0)->'usage'->>'completion_tokens')::int AS completion_tokens;
RESET opus.default_max_tokens;

-- The jsonb shape (id, created and timings vary; compare the rest).
SELECT c->>'object' AS object,
       c->>'model' AS model,
       c->>'id' LIKE 'cmpl-%' AS id_ok,
       (c->>'created')::bigint > 1700000000 AS created_ok,
       jsonb_array_length(c->'choices') AS n_choices,
       c->'choices'->0->>'text' AS text,
       c->'choices'->0->>'finish_reason' AS finish_reason,
       c->'usage'->'prompt_tokens' AS prompt_tokens,
       c->'usage'->'completion_tokens' AS completion_tokens,
       c->'usage'->'total_tokens' AS total_tokens,
       (c->'timings'->>'total_ms')::float8 >= (c->'timings'->>'engine_ms')::float8 AS timings_ok
FROM opus_completion('In mathematics, a prime number is', max_tokens => 16, temperature => 0) AS c;

-- finish_reason "stop" at a stop string, "length" when max_tokens runs out.
SELECT opus_completion('1, 2, 3, 4, 5, 6, 7,', max_tokens => 16, temperature => 0,
                       stop => ARRAY['10'])->'choices'->0->>'finish_reason' AS finish_reason;
SELECT opus_completion('1, 2, 3, 4, 5, 6, 7,', max_tokens => 2, temperature => 0)->'choices'->0->>'finish_reason' AS finish_reason;

-- Many rows, one call each.
SELECT i, opus_generate(i || ', ' || i + 1 || ', ' || i + 2 || ',', max_tokens => 2, temperature => 0) AS next
FROM generate_series(1, 3) AS i;

-- opus_last_request(): usage and timings of this session's last request.
SELECT opus_generate('1, 2, 3, 4, 5, 6, 7,', max_tokens => 4, temperature => 0) IS NOT NULL AS generated;
SELECT kind, finish_reason, prompt_tokens, completion_tokens, cached_tokens,
       engine_ms > 0 AS engine_timed, total_ms >= engine_ms AS total_covers_engine,
       ttft_ms <= engine_ms AS ttft_ok
FROM opus_last_request();
SELECT opus_tokenize('Hello world') IS NOT NULL AS tokenized;
SELECT kind, prompt_tokens FROM opus_last_request();
