-- models: the SQL surface of several models (opus.models, model => ...,
-- opus_models, opus_model_swap / opus_model_rollback) and every error.
-- Only the default model really loads here; the TAP test 120_models.pl
-- serves two real models.

-- The default model is "default", version 1, ready.
SELECT name, state, version, architecture, path LIKE '%SmolLM2-135M-Instruct.Q4_1.gguf' AS path_ok,
       engine_pid > 0 AS has_pid, rss_bytes > 0 AS has_rss, kv_cache_bytes, threads,
       previous_path, rollbacks
FROM opus_models;

-- model => NULL and model => 'default' are the default model.
SELECT opus_generate('Hello', max_tokens => 4, temperature => 0, model => NULL)
     = opus_generate('Hello', max_tokens => 4, temperature => 0, model => 'default') AS same;
SELECT c->>'model' AS model, c->'model_version' AS version
FROM opus_completion('Hello', max_tokens => 2, temperature => 0, model => 'default') AS c;

-- Unknown model: 42704, for every generation function.
SELECT try($$SELECT opus_generate('x', model => 'nope')$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "hi"}]', model => 'nope')$$);
SELECT try($$SELECT opus_completion('x', model => 'nope')$$);
SELECT try($$SELECT opus_chat_completion('[{"role": "user", "content": "hi"}]', model => 'nope')$$);
SELECT try($$SELECT opus_submit('x', model => 'nope')$$);
SELECT try($$SELECT opus_submit_chat('[{"role": "user", "content": "hi"}]', model => 'nope')$$);
SELECT try($$SELECT * FROM opus_generate_many(ARRAY['x'], model => 'nope')$$);
SELECT try($$SELECT * FROM opus_chat_many(ARRAY['[{"role": "user", "content": "hi"}]'::jsonb], model => 'nope')$$);
SELECT try($$SELECT * FROM opus_generate_keyed('[{"key": 1, "prompt": "x"}]', model => 'nope')$$);
SELECT try($$SELECT opus_generate('x', model => '')$$);

-- Malformed declarations are refused when set: 22023, nothing applied.
ALTER SYSTEM SET opus.models = 'Big=/x.gguf';
ALTER SYSTEM SET opus.models = 'a=/x.gguf, a=/y.gguf';
ALTER SYSTEM SET opus.models = 'default=/x.gguf';
ALTER SYSTEM SET opus.models = 'a';
ALTER SYSTEM SET opus.models = 'a=';
ALTER SYSTEM SET opus.models = 'a=/x.gguf;threads=0';
ALTER SYSTEM SET opus.models = 'a=/x.gguf;colour=blue';
ALTER SYSTEM SET opus.models = 'a=/x.gguf;kv_cache_type=f32';
ALTER SYSTEM SET opus.models = 'a=/x.gguf;device=tpu';
ALTER SYSTEM SET opus.models = 'a=/x.gguf,,b=/y.gguf';
ALTER SYSTEM SET opus.models = 'm1=/x,m2=/x,m3=/x,m4=/x,m5=/x,m6=/x,m7=/x,m8=/x';
-- Fallbacks: another declared model (or default), with an objective.
ALTER SYSTEM SET opus.models = 'a=/x.gguf;fallback=b;max_ttft=100';
ALTER SYSTEM SET opus.models = 'a=/x.gguf;fallback=a;max_ttft=100';
ALTER SYSTEM SET opus.models = 'a=/x.gguf;fallback=default';
ALTER SYSTEM SET opus.models = 'a=/x.gguf;max_ttft=100';
ALTER SYSTEM SET opus.models = 'a=/x.gguf;fallback=default;max_ttft=0';

-- Two declared models whose files do not exist, one limited to a role.
CREATE ROLE regress_opus_model_user;
CREATE ROLE regress_opus_model_vip;
GRANT regress_opus_model_vip TO regress_opus_model_user;
CREATE ROLE regress_opus_model_other;
ALTER SYSTEM SET opus.models = 'ghost = /nonexistent/ghost.gguf; threads = 1; kv_cache_size = 8; fallback = default; max_ttft = 250, vip=/nonexistent/vip.gguf;role=regress_opus_model_vip';
SELECT pg_reload_conf();
DO $$
BEGIN
    FOR i IN 1..300 LOOP
        EXIT WHEN (SELECT count(*) FROM opus_models WHERE name IN ('ghost', 'vip') AND state = 'failed') = 2;
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
SELECT name, state, version, regexp_replace(path, '^.*/', '') AS file, role, last_error,
       fallback, max_ttft_ms, overloaded, fallback_requests
FROM opus_models ORDER BY name COLLATE "C";
-- pg_stat_opus_engine: one row per model (API version 2), the default's
-- first and as before; a model that never started has no engine columns.
SELECT name, state, engine_pid > 0 AS has_pid, model, threads, generated_tokens > 0 AS generated,
       kv_blocks_total > 0 AS has_kv, busy_slots = (SELECT busy_slots FROM pg_stat_opus_engine WHERE name = 'default') AS same_slots
FROM pg_stat_opus_engine ORDER BY name COLLATE "C";
-- opus_model_info(name): one model's row; 42704 for an unknown name.
SELECT name, state, regexp_replace(path, '^.*/', '') AS file FROM opus_model_info('ghost');
SELECT (opus_model_info('default')).name;
SELECT try($$SELECT opus_model_info('nope')$$);
SELECT opus_model_info(NULL) IS NULL AS null_in_null_out;
-- fallback => is accepted by every generation function.
SELECT length(opus_generate('Hello', max_tokens => 2, temperature => 0, fallback => true)) > 0 AS ok;
SELECT try($$SELECT opus_generate('x', model => 'ghost', fallback => false)$$);

-- A model whose file is missing: 58P01 with the reason; the default still serves.
SELECT try($$SELECT opus_generate('x', model => 'ghost')$$);
SELECT length(opus_generate('Hello', max_tokens => 2, temperature => 0)) > 0 AS default_serves;

-- A model limited to a role: 42501 for others, members get through to it.
SET ROLE regress_opus_model_other;
SELECT try($$SELECT opus_generate('x', model => 'vip')$$);
-- Paths and errors are hidden from roles without pg_read_all_settings.
SELECT name, state, path, last_error FROM opus_models ORDER BY name COLLATE "C";
-- Swap and rollback are not granted to PUBLIC.
SELECT try($$SELECT opus_model_swap('ghost', '/x.gguf')$$);
SELECT try($$SELECT opus_model_rollback('ghost')$$);
RESET ROLE;
SET ROLE regress_opus_model_user;
SELECT try($$SELECT opus_generate('x', model => 'vip')$$);
RESET ROLE;

-- Swap and rollback errors.
SELECT try($$SELECT opus_model_swap('nope', '/x.gguf')$$);
SELECT try($$SELECT opus_model_swap(NULL, '/x.gguf')$$);
SELECT try($$SELECT opus_model_swap('ghost', '')$$);
SELECT try($$SELECT opus_model_swap('ghost', '/nonexistent/new.gguf')$$);
-- Canaries: a JSON array of 1 to 4 {"prompt", "expect", "max_tokens"}.
SELECT try($$SELECT opus_model_swap('ghost', (SELECT path FROM opus_models WHERE name = 'default'), '{}')$$);
SELECT try($$SELECT opus_model_swap('ghost', (SELECT path FROM opus_models WHERE name = 'default'), '[]')$$);
SELECT try($$SELECT opus_model_swap('ghost', (SELECT path FROM opus_models WHERE name = 'default'), '[1]')$$);
SELECT try($$SELECT opus_model_swap('ghost', (SELECT path FROM opus_models WHERE name = 'default'), '[{"expect": "x"}]')$$);
SELECT try($$SELECT opus_model_swap('ghost', (SELECT path FROM opus_models WHERE name = 'default'), '[{"prompt": ""}]')$$);
SELECT try($$SELECT opus_model_swap('ghost', (SELECT path FROM opus_models WHERE name = 'default'), '[{"prompt": 5}]')$$);
SELECT try($$SELECT opus_model_swap('ghost', (SELECT path FROM opus_models WHERE name = 'default'), '[{"prompt": "x", "max_tokens": 0}]')$$);
SELECT try($$SELECT opus_model_swap('ghost', (SELECT path FROM opus_models WHERE name = 'default'), '[{"prompt": "x", "max_tokens": "8"}]')$$);
SELECT try($$SELECT opus_model_swap('ghost', (SELECT path FROM opus_models WHERE name = 'default'), (SELECT jsonb_agg(jsonb_build_object('prompt', 'x')) FROM generate_series(1, 5)))$$);
SELECT try($$SELECT opus_model_swap('ghost', (SELECT path FROM opus_models WHERE name = 'default'), jsonb_build_array(jsonb_build_object('prompt', repeat('x', 300))))$$);
SELECT try($$SELECT opus_model_rollback('nope')$$);
SELECT try($$SELECT opus_model_rollback('default')$$);

-- Jobs take "model" and "fallback" options.
SELECT try($$SELECT opus_job_check_options('{"model": "ghost", "fallback": true}')$$);

-- Removing the declarations: the models go, their names are unknown again.
ALTER SYSTEM RESET opus.models;
SELECT pg_reload_conf();
DO $$
BEGIN
    FOR i IN 1..300 LOOP
        EXIT WHEN (SELECT count(*) FROM opus_models) = 1;
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
SELECT name, state FROM opus_models;
SELECT try($$SELECT opus_generate('x', model => 'ghost')$$);
DROP ROLE regress_opus_model_user;
DROP ROLE regress_opus_model_vip;
DROP ROLE regress_opus_model_other;
