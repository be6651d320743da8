-- settings: defaults, contexts and permissions.
SELECT name, setting, unit, context, vartype
FROM pg_settings WHERE name LIKE 'opus.%' AND name <> 'opus.engine_path' ORDER BY name;
SELECT name, context FROM pg_settings WHERE name = 'opus.engine_path';

SHOW opus.model;
SHOW opus.kv_cache_size;
SHOW opus.request_timeout;

-- Postmaster-level and reload-level settings cannot be SET.
SELECT try($$SET opus.max_requests = 10$$);
SELECT try($$SET opus.kv_cache_size = '128MB'$$);
SELECT try($$SET opus.threads = 4$$);
SELECT try($$SET opus.engine_path = '/bin/false'$$);
SELECT try($$SET opus.kv_block_size = 32$$);
SELECT try($$SET opus.max_batch_tokens = 64$$);
-- opus.kv_cache_type: f16 (default) or q8_0, changed by a reload (the engine restarts).
SHOW opus.kv_cache_type;
SELECT try($$SET opus.kv_cache_type = 'q8_0'$$);
ALTER SYSTEM SET opus.kv_cache_type = 'q4_0';
-- Bad values.
SELECT try($$SET opus.device = 'gpu'$$);
SELECT try($$SET opus.model = ''$$);
SELECT try($$SET opus.default_max_tokens = 0$$);
SELECT try($$SET opus.request_timeout = -1$$);
SELECT try($$SET opus.device = 'cuda:0'$$);
RESET opus.device;
-- opus.priority: interactive, batch or a class number 0..1000.
SHOW opus.priority;
SELECT try($$SET opus.priority = 'batch'$$);
SELECT try($$SET opus.priority = 'Interactive'$$);
SELECT try($$SET opus.priority = 3$$);
SELECT try($$SET opus.priority = 'urgent'$$);
SELECT try($$SET opus.priority = 1001$$);
SELECT try($$SET opus.priority = -1$$);
RESET opus.priority;
-- Unknown opus.* names are refused (the prefix is reserved).
SELECT try($$SET opus.no_such_setting = 1$$);

-- opus.model and opus.device are superuser-only; user-level ones are not.
CREATE ROLE opus_regress_user;
SET ROLE opus_regress_user;
SELECT try($$SET opus.model = '/tmp/other.gguf'$$);
SELECT try($$SET opus.device = 'cpu'$$);
SELECT try($$SET opus.default_max_tokens = 8$$);
SELECT try($$SET opus.request_timeout = '10min'$$);
SELECT try($$SET opus.priority = 'batch'$$);
-- A plain role can generate (here in the batch class).
SELECT opus_generate('The capital of France is', max_tokens => 4, temperature => 0) IS NOT NULL AS can_generate;
RESET ROLE;
-- A role's default class.
ALTER ROLE opus_regress_user SET opus.priority = 'batch';
SELECT setconfig FROM pg_db_role_setting WHERE setrole = 'opus_regress_user'::regrole;
ALTER ROLE opus_regress_user RESET opus.priority;
DROP ROLE opus_regress_user;
