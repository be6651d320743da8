-- generate: greedy completions of fixed prompts, seeds, stop strings, and
-- the OpenAI-shaped jsonb variant.
SELECT opus_generate('The capital of France is', max_tokens => 16, temperature => 0);
SELECT opus_generate('def fibonacci(n):', max_tokens => 16, temperature => 0);
SELECT opus_generate('Once upon a time', max_tokens => 16, temperature => 0);

-- Greedy is deterministic; so is sampling with a fixed seed.
SELECT opus_generate('Once upon a time', max_tokens => 16, temperature => 0)
     = opus_generate('Once upon a time', max_tokens => 16, temperature => 0) AS greedy_repeats;
SELECT opus_generate('Once upon a time', max_tokens => 16, temperature => 0.8, seed => 42)
     = opus_generate('Once upon a time', max_tokens => 16, temperature => 0.8, seed => 42) AS seeded_repeats;
SELECT opus_generate('Once upon a time', max_tokens => 16, temperature => 0.8, seed => 42, top_k => 40, top_p => 0.9, min_p => 0.05);

-- Named and positional arguments agree; NULL options mean their defaults.
SELECT opus_generate('The capital of France is', 16, 0)
     = opus_generate('The capital of France is', max_tokens => 16, temperature => 0, top_p => NULL, stop => NULL) AS same;

-- A stop string ends the text before it.
SELECT opus_generate('The capital of France is', max_tokens => 16, temperature => 0, stop => ARRAY['.']);

-- max_tokens NULL uses opus.default_max_tokens.
SET opus.default_max_tokens = 4;
SELECT (opus_completion('Once upon a time', temperature => 0)->'usage'->>'completion_tokens')::int <= 4 AS capped;
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
FROM opus_completion('The capital of France is', max_tokens => 16, temperature => 0) AS c;

-- finish_reason "length" when max_tokens runs out.
SELECT opus_completion('Once upon a time', max_tokens => 2, temperature => 0)->'choices'->0->>'finish_reason' AS finish_reason;

-- Many rows, one call each.
SELECT i, length(opus_generate('Count: ' || i, max_tokens => 4, temperature => 0)) > 0 AS nonempty
FROM generate_series(1, 3) AS i;
