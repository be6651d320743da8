-- security_limits: absurd requests are refused with their documented
-- SQLSTATE before they cost memory: the backend's peak RSS and the
-- engine's RSS stay flat, nothing reaches the engine (its token counters
-- do not move) and no KV block is taken.

-- The absurd arguments, built once (their own size is not the extension's
-- doing).
CREATE TEMP TABLE absurd AS SELECT
    repeat('x', 10 * 1024 * 1024) AS big_prompt,
    array_fill('x'::text, ARRAY[10000]) AS many_stops,
    array_fill(42, ARRAY[100000]) AS tokens_100k,
    array_fill(42, ARRAY[1000000]) AS tokens_1m,
    (SELECT jsonb_agg(jsonb_build_object('role', 'user', 'content', 'hi'))
     FROM generate_series(1, 100000)) AS many_messages,
    jsonb_build_array(jsonb_build_object('role', 'user', 'content', repeat('x', 10 * 1024 * 1024))) AS big_message,
    jsonb_build_array(jsonb_build_object('role', 'user',
        'content', (repeat('[', 5000) || repeat(']', 5000))::jsonb)) AS nested_content,
    ('[{"role": "user", "content": "hi", "extra": ' || repeat('{"a": ', 5000) || '1' || repeat('}', 5000) || '}]')::jsonb AS nested_extra;

-- memory now: this backend's peak RSS (VmHWM) and the engine's RSS
CREATE FUNCTION backend_hwm_kb() RETURNS bigint LANGUAGE sql AS $$
    SELECT (regexp_match(pg_read_file('/proc/' || pg_backend_pid() || '/status'), 'VmHWM:\s+(\d+) kB'))[1]::bigint
$$;
SELECT opus_generate('Warm up', max_tokens => 1, temperature => 0) IS NOT NULL AS warm;
SELECT pg_sleep(0.6);
SELECT backend_hwm_kb() AS hwm0,
       (SELECT memory_rss FROM pg_stat_opus_engine) AS rss0,
       (SELECT generated_tokens + prompt_tokens FROM pg_stat_opus_engine) AS tokens0 \gset

-- max_tokens in the millions: out of range, or over the context / KV cache
SELECT try($$SELECT opus_generate('Hi', max_tokens => 2000000)$$) AS max_tokens_2m;
SELECT try($$SELECT opus_generate('Hi', max_tokens => 1000000)$$) AS max_tokens_1m;
SELECT sqlstate_of($$SELECT opus_generate('Hi', max_tokens => 8000)$$) AS max_tokens_8000;
SELECT try($$SELECT opus_completion('Hi', max_tokens => 2147483647)$$) AS completion_int_max;
SELECT try($$SELECT opus_submit('Hi', max_tokens => 2000000)$$) AS submit_2m;
SELECT try($$SELECT * FROM opus_generate_many(ARRAY['a', 'b'], max_tokens => 1000000)$$) AS many_1m;
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "Hi"}]', max_tokens => 1000000)$$) AS chat_1m;
-- a 10 MB prompt (opus.max_prompt_bytes is 256kB)
SELECT try($$SELECT opus_generate(big_prompt, max_tokens => 1) FROM absurd$$) AS prompt_10mb;
SELECT try($$SELECT opus_completion(big_prompt, max_tokens => 1) FROM absurd$$) AS completion_10mb;
SELECT try($$SELECT opus_submit(big_prompt, max_tokens => 1) FROM absurd$$) AS submit_10mb;
SELECT try($$SELECT opus_tokenize(big_prompt) FROM absurd$$) AS tokenize_10mb;
SELECT try($$SELECT * FROM opus_generate_many(ARRAY[(SELECT big_prompt FROM absurd)], max_tokens => 1)$$) AS many_10mb;
-- raising opus.max_prompt_bytes does not get past the request buffer
SET opus.max_prompt_bytes = '100MB';
SELECT try($$SELECT opus_generate(big_prompt, max_tokens => 1) FROM absurd$$) AS prompt_10mb_raised_cap;
RESET opus.max_prompt_bytes;
-- 10,000 stop strings (at most 16), and one too long
SELECT try($$SELECT opus_generate('Hi', max_tokens => 1, stop => many_stops) FROM absurd$$) AS stops_10000;
SELECT try($$SELECT opus_submit('Hi', max_tokens => 1, stop => many_stops) FROM absurd$$) AS submit_stops_10000;
SELECT try($$SELECT opus_generate('Hi', max_tokens => 1, stop => ARRAY[repeat('x', 100000)])$$) AS stop_100kb;
-- token arrays: 100k fits the request buffer and is detokenized; 1M does not
SELECT length(opus_detokenize(tokens_100k)) AS detokenized_100k FROM absurd;
SELECT try($$SELECT opus_detokenize(tokens_1m) FROM absurd$$) AS detokenize_1m;
SELECT try($$SELECT opus_detokenize(ARRAY[2147483647])$$) AS detokenize_bad_id;
SELECT try($$SELECT opus_detokenize(ARRAY[-1])$$) AS detokenize_negative_id;
SELECT try($$SELECT opus_detokenize('{{1,2},{3,4}}'::integer[])$$) AS detokenize_2d;
SELECT try($$SELECT opus_detokenize(ARRAY[1, NULL])$$) AS detokenize_null;
-- chat: 100,000 messages, a 10 MB message, deep nesting
SELECT try($$SELECT opus_chat(many_messages, max_tokens => 1) FROM absurd$$) AS messages_100k;
SELECT try($$SELECT opus_chat(big_message, max_tokens => 1) FROM absurd$$) AS message_10mb;
SELECT try($$SELECT opus_chat_completion(big_message, max_tokens => 1) FROM absurd$$) AS chat_completion_10mb;
SELECT try($$SELECT opus_submit_chat(big_message, max_tokens => 1) FROM absurd$$) AS submit_chat_10mb;
SELECT try($$SELECT opus_chat(nested_content, max_tokens => 1) FROM absurd$$) AS nested_content;
-- (other members reach the template; one nested 5,000 deep is refused, not a crash;
-- a shallow one is served)
SELECT sqlstate_of($$SELECT opus_chat(nested_extra, max_tokens => 1, temperature => 0) FROM absurd$$) AS nested_extra_key;
SELECT sqlstate_of($$SELECT opus_chat('[{"role": "user", "content": "hi", "extra": {"a": [1, {"b": 2}]}}]', max_tokens => 1, temperature => 0)$$) AS shallow_extra_key;
SELECT try($$SELECT * FROM opus_chat_many(ARRAY[(SELECT big_message FROM absurd)], max_tokens => 1)$$) AS chat_many_10mb;
SELECT try($$SELECT * FROM opus_generate_keyed((SELECT jsonb_build_array(jsonb_build_object('key', 1, 'prompt', big_prompt)) FROM absurd), max_tokens => 1)$$) AS keyed_10mb;
-- options out of range
SELECT try($$SELECT opus_generate('Hi', max_tokens => 1, temperature => 'Infinity')$$) AS temperature_inf;
SELECT try($$SELECT opus_generate('Hi', max_tokens => 1, top_p => 'NaN')$$) AS top_p_nan;
SELECT try($$SELECT opus_generate('Hi', max_tokens => 1, top_k => -1)$$) AS top_k_negative;
SELECT try($$SELECT opus_generate('Hi', max_tokens => 1, top_k => 2147483647)$$) = 'ok' AS top_k_huge_ok;
SELECT try($$SELECT * FROM opus_generate_many(ARRAY['a'], max_tokens => 1, "window" => 2147483647)$$) AS window_huge;

-- Nothing reached the engine (one refused-in-engine request is allowed:
-- max_tokens 8000 is only known to exceed the KV pool there) and memory
-- stayed flat: the backend's peak grew by less than 64 MB over requests
-- carrying 10 MB arguments, the engine's RSS by less than 16 MB.
-- (the engine's counters follow its steps: wait for the last blocks to be freed, up to 30 s)
DO $$ BEGIN FOR i IN 1 .. 300 LOOP PERFORM pg_stat_clear_snapshot(); EXIT WHEN NOT EXISTS (SELECT FROM pg_stat_opus_engine WHERE kv_blocks_used > 0); PERFORM pg_sleep(0.1); END LOOP; END $$;
SELECT count(*) = 0 AS no_kv_blocks_held FROM pg_stat_opus_engine WHERE kv_blocks_used > 0;
SELECT (SELECT generated_tokens + prompt_tokens FROM pg_stat_opus_engine) - :tokens0
       < 200 AS engine_did_little,
       backend_hwm_kb() - :hwm0 < 64 * 1024 AS backend_peak_flat,
       (SELECT memory_rss FROM pg_stat_opus_engine) - :rss0 < 16 * 1024 * 1024 AS engine_rss_flat;
SELECT busy_slots FROM opus_engine;

DROP FUNCTION backend_hwm_kb();
DROP TABLE absurd;
