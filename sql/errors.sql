-- errors: every user-facing error, with its SQLSTATE.
-- NULLs where a value is required: 22004.
SELECT try($$SELECT opus_generate(NULL)$$);
SELECT try($$SELECT opus_chat(NULL)$$);
SELECT try($$SELECT opus_completion(NULL)$$);
SELECT try($$SELECT opus_tokenize(NULL)$$);
SELECT try($$SELECT opus_detokenize(NULL)$$);
SELECT try($$SELECT opus_detokenize(ARRAY[1, NULL, 3])$$);
SELECT try($$SELECT opus_generate('x', stop => ARRAY['a', NULL])$$);

-- Out-of-range options: 22023.
SELECT try($$SELECT opus_generate('x', max_tokens => 0)$$);
SELECT try($$SELECT opus_generate('x', max_tokens => -5)$$);
SELECT try($$SELECT opus_generate('x', max_tokens => 2000000)$$);
SELECT try($$SELECT opus_generate('x', temperature => -0.5)$$);
SELECT try($$SELECT opus_generate('x', temperature => 101)$$);
SELECT try($$SELECT opus_generate('x', temperature => 'NaN')$$);
SELECT try($$SELECT opus_generate('x', top_p => 0)$$);
SELECT try($$SELECT opus_generate('x', top_p => 1.5)$$);
SELECT try($$SELECT opus_generate('x', top_k => -1)$$);
SELECT try($$SELECT opus_generate('x', min_p => 1.5)$$);
SELECT try($$SELECT opus_generate('x', presence_penalty => 2.5)$$);
SELECT try($$SELECT opus_generate('x', frequency_penalty => -3)$$);
SELECT try($$SELECT opus_generate('x', repetition_penalty => 0)$$);
SELECT try($$SELECT opus_generate('x', repetition_penalty => 'Infinity')$$);
SELECT try($$SELECT opus_generate('x', stop => ARRAY['a', ''])$$);
SELECT try($$SELECT opus_generate('x', stop => ARRAY[repeat('s', 257)])$$);
SELECT try($$SELECT opus_generate('x', stop => (SELECT array_agg(i::text) FROM generate_series(1, 17) i))$$);
SELECT try($$SELECT opus_generate('x', stop => ARRAY[['a'], ['b']])$$);
SELECT try($$SELECT opus_detokenize(ARRAY[-1])$$);
SELECT try($$SELECT opus_detokenize(ARRAY[[1], [2]])$$);
-- A token id past the vocabulary is refused by the engine.
SELECT sqlstate_of($$SELECT opus_detokenize(ARRAY[1, 999999])$$);

-- Malformed chat messages: 22023.
SELECT try($$SELECT opus_chat('{"role": "user", "content": "hi"}')$$);
SELECT try($$SELECT opus_chat('"hi"')$$);
SELECT try($$SELECT opus_chat('[]')$$);
SELECT try($$SELECT opus_chat('["hi"]')$$);
SELECT try($$SELECT opus_chat('[{"content": "hi"}]')$$);
SELECT try($$SELECT opus_chat('[{"role": "robot", "content": "hi"}]')$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": 42}]')$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": null}]')$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "hi"}, {"role": "user"}]')$$);

-- Too large for the settings: 54000.
SET opus.max_prompt_bytes = 16;
SELECT try($$SELECT opus_generate('a prompt of more than sixteen bytes')$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "more than sixteen bytes"}]')$$);
SELECT try($$SELECT opus_tokenize('more than sixteen bytes')$$);
RESET opus.max_prompt_bytes;
-- Longer than the model's context (8192 tokens): 54000, from the engine.
SELECT sqlstate_of($$SELECT opus_generate(repeat('hello ', 9000), max_tokens => 1)$$);
SELECT sqlstate_of($$SELECT opus_generate('x', max_tokens => 9000)$$);

-- Timeouts: 57014, and the slot is free again afterwards.
SET opus.request_timeout = '10ms';
SELECT try($$SELECT opus_generate('Once upon a time', max_tokens => 2000, temperature => 0)$$);
RESET opus.request_timeout;
SET statement_timeout = '50ms';
SELECT sqlstate_of($$SELECT opus_generate('Once upon a time', max_tokens => 2000, temperature => 0)$$);
RESET statement_timeout;
-- (the engine frees the slots at its next step: wait for it, up to 30 s)
DO $$ BEGIN FOR i IN 1 .. 300 LOOP EXIT WHEN (SELECT busy_slots = 0 AND engine_requests = 0 FROM opus_engine); PERFORM pg_sleep(0.1); END LOOP; END $$;
SELECT busy_slots, engine_requests FROM opus_engine;

-- After all that, generation still works.
SELECT opus_generate('The capital of France is', max_tokens => 4, temperature => 0) IS NOT NULL AS works;
