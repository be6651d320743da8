-- tenants: what a role gets is what a superuser granted it.  Priority
-- ceilings, cache scopes, weights and quotas are superuser-only settings
-- (ALTER ROLE ... SET); a role may ask for less, never more; quotas fail at
-- once with 53400 and a DETAIL naming the limit.
GRANT EXECUTE ON FUNCTION try(text) TO PUBLIC;
CREATE ROLE regress_tenant_m;
CREATE ROLE regress_tenant_n;
GRANT pg_read_all_stats TO regress_tenant_n;
ALTER ROLE regress_tenant_m SET opus.priority_ceiling = 'batch';

-- Only a superuser sets the tenancy settings, for itself or any role.
SET ROLE regress_tenant_m;
SELECT s AS setting, try(format('SET %s = %L', s, v)) AS as_m
FROM (VALUES ('opus.priority_ceiling', 'interactive'), ('opus.cache_scope', 'server'),
             ('opus.role_weight', '100'), ('opus.role_max_requests', '100'),
             ('opus.role_max_async_requests', '100'), ('opus.role_max_tokens', '100'),
             ('opus.role_tokens_per_minute', '100'), ('opus.role_tokens_per_day', '100'),
             ('opus.max_prompt_bytes', '1MB')) AS t(s, v);
SELECT try($$ALTER ROLE regress_tenant_m SET opus.priority_ceiling = 'interactive'$$) AS alter_self;
SELECT try($$SELECT set_config('opus.role_max_tokens', '100000', false)$$) AS set_config;

-- opus.priority may go down, not above the role's ceiling: by SET,
-- set_config or a function's SET clause.
SELECT try($$SET opus.priority = 'interactive'$$) AS set_interactive;
SELECT try($$SET opus.priority = 9$$) AS set_9;
SELECT try($$SELECT set_config('opus.priority', '0', false)$$) AS set_config_0;
SELECT try($$SET opus.priority = 'batch'$$) AS set_batch;
SELECT try($$SET opus.priority = 20$$) AS set_20;
RESET ROLE;
CREATE FUNCTION regress_urgent() RETURNS text LANGUAGE sql SET opus.priority = 0
    AS $$ SELECT opus_generate('Hi', max_tokens => 1, temperature => 0) $$;
SET ROLE regress_tenant_m;
SELECT try($$SELECT regress_urgent()$$) AS function_set_clause;
RESET ROLE;
DROP FUNCTION regress_urgent();
RESET opus.priority;

-- Values are checked like the server's own settings.
SELECT try($$SET opus.cache_scope = ''$$) AS empty_scope;
SELECT try($$SET opus.cache_scope = 'a b'$$) AS bad_scope;
SELECT try($$SET opus.priority_ceiling = 'urgent'$$) AS bad_ceiling;
SELECT try($$SET opus.role_weight = 0$$) AS bad_weight;

-- Quotas: max_tokens per request, and prompt + completion tokens per
-- minute, counted once a request has finished.
ALTER ROLE regress_tenant_m SET opus.role_max_tokens = 4;
ALTER ROLE regress_tenant_m SET opus.role_tokens_per_minute = 12;
SET ROLE regress_tenant_m;
SELECT try($$SELECT opus_generate('Hello', max_tokens => 5, temperature => 0)$$) AS over_max_tokens;
SELECT opus_generate('Hello there, how are', max_tokens => 4, temperature => 0) IS NOT NULL AS within;
SELECT opus_generate('Hello there, how are', max_tokens => 4, temperature => 0) IS NOT NULL AS within;
SELECT regexp_replace(try($$SELECT opus_generate('Hello', max_tokens => 2, temperature => 0)$$),
                      '[0-9]+ s', 'N s', 'g') AS over_tokens_per_minute;
-- tokenizing costs no generation quota
SELECT opus_tokenize('Hello') IS NOT NULL AS tokenize_ok;
RESET ROLE;

-- Slots held: asynchronous requests.
ALTER ROLE regress_tenant_m RESET opus.role_tokens_per_minute;
ALTER ROLE regress_tenant_m SET opus.role_max_async_requests = 1;
SET ROLE regress_tenant_m;
SELECT opus_submit('One', max_tokens => 1, temperature => 0) AS req1 \gset
SELECT try($$SELECT opus_submit('Two', max_tokens => 1, temperature => 0)$$) AS second_async;
SELECT opus_result(:req1) IS NOT NULL AS read_first;
SELECT opus_result(opus_submit('Three', max_tokens => 1, temperature => 0)) IS NOT NULL AS then_ok;
RESET ROLE;

-- The view: each role's usage against its limits.
SET ROLE regress_tenant_m;
SELECT userid::regrole AS role, requests_held, max_requests, async_requests_held, max_async_requests,
       tokens_last_minute > 0 AS used, tokens_per_minute, max_tokens, priority_ceiling,
       weight, cache_scope, requests > 0 AS charged, refused
FROM pg_stat_opus_tenants WHERE userid = current_user::regrole;
SET ROLE regress_tenant_n;
SELECT count(*) > 0 AS sees_others FROM pg_stat_opus_tenants WHERE userid = 'regress_tenant_m'::regrole;
RESET ROLE;

ALTER ROLE regress_tenant_m RESET ALL;
DROP ROLE regress_tenant_m;
DROP ROLE regress_tenant_n;
