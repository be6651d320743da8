-- Batch jobs: run the model over every row of a table or query, resumably,
-- in committed chunks, with retries, progress and pg_cron scheduling.
--
--   opus_job_create  define a job (source, key columns, prompt, target)
--   opus_job_run     PROCEDURE: process the rows not yet done; safe to
--                    interrupt and rerun at any time; one run per job at a
--                    time (a second run returns at once)
--   opus_job_alter / opus_job_reset / opus_job_drop
--   opus_job_progress  one row per job, in the style of pg_stat_progress_*
--
-- How a run keeps "exactly one result per source row": the job's work list
-- (opus_job_item, one row per distinct source key) is filled from the
-- source at the start of every run with the keys it does not have yet.  A
-- result is written to the target in the same transaction that marks its
-- item done, and only done items are never taken again; a run that dies
-- loses at most its uncommitted chunk, whose items are still pending.  A
-- per-job advisory lock, taken at the start of each of the run's
-- transactions, keeps a second run (say, pg_cron starting one while the last
-- still works) from taking the same items; it goes with the session or the
-- server, so an interrupted run never leaves it behind.
--
-- Security (modelled on pg_cron): a job belongs to the role that created it
-- and always runs with that role's privileges: a member of the owner role
-- (or a superuser) running it switches to the owner in every transaction of
-- the run, inside a security-restricted operation (opus_job_enter_owner,
-- src/pg/jobs.c), so the owner's SQL cannot SET ROLE back to the runner or
-- leave settings behind, and the commit or an error switches back.  The job tables have row-level security: a role sees and changes
-- only jobs of roles it is a member of; pg_read_all_stats may see all.
-- Identifiers are quoted with format('%I'), stored names are re-parsed,
-- templates only copy values (opus_render), and every operator in static
-- and generated SQL is schema-qualified.

-- The work list, run log and definitions ------------------------------------

CREATE TABLE @extschema@.opus_job (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL,
    owner regrole NOT NULL,
    source text,                -- a table or view, as a quoted (qualified) name
    source_query text,          -- or a query
    key_columns text[] NOT NULL,
    prompt_template text,       -- {{column}} placeholders (opus_render)
    prompt_expression text,     -- or an SQL expression over the source row
    target_table text NOT NULL, -- quoted, qualified name
    target_column text NOT NULL,
    options jsonb NOT NULL DEFAULT '{}',
    concurrency integer NOT NULL DEFAULT 16
        CHECK (concurrency OPERATOR(pg_catalog.>=) 1 AND concurrency OPERATOR(pg_catalog.<=) 10000),
    max_attempts integer NOT NULL DEFAULT 3
        CHECK (max_attempts OPERATOR(pg_catalog.>=) 1),
    retry_backoff interval NOT NULL DEFAULT '1 second',
    commit_every integer NOT NULL DEFAULT 64
        CHECK (commit_every OPERATOR(pg_catalog.>=) 1),
    created_at timestamp with time zone NOT NULL DEFAULT pg_catalog.now(),
    UNIQUE (owner, name),
    UNIQUE (id, owner),         -- for the work list's and run log's foreign keys
    CHECK (pg_catalog.num_nonnulls(source, source_query) OPERATOR(pg_catalog.=) 1),
    CHECK (pg_catalog.num_nonnulls(prompt_template, prompt_expression) OPERATOR(pg_catalog.=) 1)
);

COMMENT ON TABLE @extschema@.opus_job IS 'batch job definitions (opus_job_create); row-level security shows each role its own jobs';

CREATE TABLE @extschema@.opus_job_item (
    job_id bigint NOT NULL,
    item_id bigint GENERATED ALWAYS AS IDENTITY,
    owner regrole NOT NULL,
    key jsonb NOT NULL,         -- the source row's key columns
    prompt text,                -- rendered when the row was taken; NULL once done
    state text NOT NULL DEFAULT 'pending'
        CHECK (state OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'done', 'failed'])),
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamp with time zone,
    last_sqlstate text,
    last_error text,
    finish_reason text,
    prompt_tokens integer,
    completion_tokens integer,
    cached_tokens integer,
    finished_at timestamp with time zone,
    model text,                 -- the model that made the result (its name) ...
    model_version integer,      -- ... and version (opus_models.version)
    PRIMARY KEY (job_id, item_id),
    UNIQUE (job_id, key),
    -- (job, owner) must be the job's: row-level security checks the owner
    -- column, and a foreign key check does not see through it.
    FOREIGN KEY (job_id, owner) REFERENCES @extschema@.opus_job (id, owner)
        ON DELETE CASCADE ON UPDATE CASCADE
);

CREATE INDEX opus_job_item_pending ON @extschema@.opus_job_item (job_id, item_id)
    WHERE state OPERATOR(pg_catalog.=) 'pending';

COMMENT ON TABLE @extschema@.opus_job_item IS 'one row per source row of a job: pending, done (its result is in the target) or failed (after max_attempts, or at once for errors retrying cannot fix)';

CREATE TABLE @extschema@.opus_job_run (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id bigint NOT NULL,
    owner regrole NOT NULL,
    pid integer NOT NULL,
    run_by regrole NOT NULL,
    status text NOT NULL DEFAULT 'running'
        CHECK (status OPERATOR(pg_catalog.=) ANY (ARRAY['running', 'finished', 'interrupted', 'failed'])),
    phase text NOT NULL DEFAULT 'initializing',
    started_at timestamp with time zone NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    generating_since timestamp with time zone,
    updated_at timestamp with time zone NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    ended_at timestamp with time zone,
    rows_total bigint NOT NULL DEFAULT 0,        -- items of the job when the run started
    rows_done_before bigint NOT NULL DEFAULT 0,  -- of which done already
    rows_failed_before bigint NOT NULL DEFAULT 0,
    rows_added bigint NOT NULL DEFAULT 0,        -- new source rows this run took in
    rows_done bigint NOT NULL DEFAULT 0,         -- results written by this run
    rows_failed bigint NOT NULL DEFAULT 0,       -- rows that failed for good in this run
    rows_retried bigint NOT NULL DEFAULT 0,      -- failed attempts that will be retried
    prompt_tokens bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    cached_tokens bigint NOT NULL DEFAULT 0,
    last_error text,
    last_error_at timestamp with time zone,
    FOREIGN KEY (job_id, owner) REFERENCES @extschema@.opus_job (id, owner)
        ON DELETE CASCADE ON UPDATE CASCADE
);

CREATE INDEX opus_job_run_job ON @extschema@.opus_job_run (job_id, id);

COMMENT ON TABLE @extschema@.opus_job_run IS 'one row per run of a job (opus_job_run), updated at every committed chunk';

ALTER TABLE @extschema@.opus_job ENABLE ROW LEVEL SECURITY;
ALTER TABLE @extschema@.opus_job_item ENABLE ROW LEVEL SECURITY;
ALTER TABLE @extschema@.opus_job_run ENABLE ROW LEVEL SECURITY;

CREATE POLICY opus_job_member ON @extschema@.opus_job
    USING (pg_catalog.pg_has_role(owner, 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(owner, 'MEMBER'));
CREATE POLICY opus_job_read_all_stats ON @extschema@.opus_job FOR SELECT
    USING (pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE'));
CREATE POLICY opus_job_item_member ON @extschema@.opus_job_item
    USING (pg_catalog.pg_has_role(owner, 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(owner, 'MEMBER'));
CREATE POLICY opus_job_item_read_all_stats ON @extschema@.opus_job_item FOR SELECT
    USING (pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE'));
CREATE POLICY opus_job_run_member ON @extschema@.opus_job_run
    USING (pg_catalog.pg_has_role(owner, 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(owner, 'MEMBER'));
CREATE POLICY opus_job_run_read_all_stats ON @extschema@.opus_job_run FOR SELECT
    USING (pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE'));

GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.opus_job, @extschema@.opus_job_item,
    @extschema@.opus_job_run TO PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_job', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_job_item', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_job_run', '');
-- Their identity sequences too: a restored database goes on from the last ids.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_job_item_item_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_job_run_id_seq', '');

-- Templates ------------------------------------------------------------------

CREATE FUNCTION @extschema@.opus_render(template text, vars jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'opus_render'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.opus_render(text, jsonb)
IS 'template with every {{name}} replaced by vars->>name (NULL as empty); values are copied, never interpreted';

CREATE FUNCTION @extschema@.opus_template_columns(template text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'opus_template_columns'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.opus_template_columns(text)
IS 'the names of a template''s {{name}} placeholders';

-- Internal helpers ------------------------------------------------------------

CREATE FUNCTION @extschema@.opus_job_check_not_in_block()
RETURNS void
AS 'MODULE_PATHNAME', 'opus_job_check_not_in_block'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_job_check_not_in_block()
IS 'internal: raise 25001 inside an explicit transaction block, where opus_job_run cannot commit';

-- The advisory lock of a job's runs: (classid, objid) = ('opus', job id).
CREATE FUNCTION @extschema@.opus_job_lock_space()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1869641075 $$;   -- 'opus' as a little-endian int4

COMMENT ON FUNCTION @extschema@.opus_job_lock_space()
IS 'internal: the first key of the advisory lock a running job holds (the second is the job id)';

CREATE FUNCTION @extschema@.opus_job_enter_owner(owner regrole)
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'opus_job_enter_owner';

COMMENT ON FUNCTION @extschema@.opus_job_enter_owner(regrole)
IS 'internal: run the rest of this transaction as the job owner, inside a security-restricted operation (no SET ROLE back, settings changed by the owner''s code undone at commit)';

CREATE FUNCTION @extschema@.opus_job_execute_as(owner regrole, sql text)
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'opus_job_execute_as';

COMMENT ON FUNCTION @extschema@.opus_job_execute_as(regrole, text)
IS 'internal: run one statement as the job owner inside a security-restricted operation';

-- Start a transaction of a run of job j: switch to the owner for this
-- transaction (opus_job_enter_owner: the owner's privileges inside a
-- security-restricted operation, switched back at the commit or by an
-- error) and take the job's transaction-level advisory lock.  False if
-- another run holds the lock.  Called after every COMMIT of opus_job_run.
CREATE FUNCTION @extschema@.opus_job_begin(j @extschema@.opus_job)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
BEGIN
    PERFORM @extschema@.opus_job_enter_owner(j.owner);
    RETURN pg_catalog.pg_try_advisory_xact_lock(@extschema@.opus_job_lock_space(), j.id::integer);
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_begin(@extschema@.opus_job)
IS 'internal: switch to the job owner''s role for this transaction and take the job''s run lock; false if another run has it';

-- A job by name: the caller's own, else the one job of that name the caller
-- can see (a privileged role).  Raises 42704 / 42725 (ambiguous).
CREATE FUNCTION @extschema@.opus_job_find(job_name text)
RETURNS @extschema@.opus_job
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    j @extschema@.opus_job;
    n bigint;
BEGIN
    SELECT * INTO j FROM @extschema@.opus_job AS o
    WHERE o.name OPERATOR(pg_catalog.=) job_name
      AND o.owner::pg_catalog.oid OPERATOR(pg_catalog.=)
          (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER);
    IF FOUND THEN
        RETURN j;
    END IF;
    SELECT pg_catalog.count(*) INTO n FROM @extschema@.opus_job AS o
    WHERE o.name OPERATOR(pg_catalog.=) job_name;
    IF n OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'opus job "%" does not exist', job_name
            USING ERRCODE = 'undefined_object';
    ELSIF n OPERATOR(pg_catalog.>) 1 THEN
        RAISE EXCEPTION 'opus job name "%" is ambiguous', job_name
            USING ERRCODE = 'ambiguous_function',
                  DETAIL = pg_catalog.format('%s roles have a job of that name.', n),
                  HINT = 'SET ROLE to the job''s owner first.';
    END IF;
    SELECT * INTO j FROM @extschema@.opus_job AS o WHERE o.name OPERATOR(pg_catalog.=) job_name;
    RETURN j;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_find(text)
IS 'internal: the job of that name the caller owns, or the only one it can see';

-- Raise 42501 unless the caller may run or change job j (is a member of its owner).
CREATE FUNCTION @extschema@.opus_job_check_owner(j @extschema@.opus_job, action text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF NOT pg_catalog.pg_has_role(j.owner, 'MEMBER') THEN
        RAISE EXCEPTION 'permission denied to % opus job "%"', action, j.name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('The job belongs to role %s.', j.owner);
    END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_check_owner(@extschema@.opus_job, text)
IS 'internal: raise 42501 unless the caller is a member of the job''s owner role';

-- A stored relation name, parsed and re-quoted ("schema"."name").
CREATE FUNCTION @extschema@.opus_quote_relname(name text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(p.part), '.' ORDER BY p.n)
    FROM pg_catalog.unnest(pg_catalog.parse_ident(name)) WITH ORDINALITY AS p(part, n)
$$;

COMMENT ON FUNCTION @extschema@.opus_quote_relname(text)
IS 'internal: a relation name as SQL text (possibly qualified, possibly quoted), re-quoted part by part';

-- pg_catalog.jsonb_build_object('k1', alias."k1", ...) for key columns.
CREATE FUNCTION @extschema@.opus_job_key_sql(key_columns text[], alias text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT 'pg_catalog.jsonb_build_object('
        OPERATOR(pg_catalog.||) pg_catalog.string_agg(pg_catalog.format('%L, %I.%I', c.col, alias, c.col), ', ' ORDER BY c.n)
        OPERATOR(pg_catalog.||) ')'
    FROM pg_catalog.unnest(key_columns) WITH ORDINALITY AS c(col, n)
$$;

COMMENT ON FUNCTION @extschema@.opus_job_key_sql(text[], text)
IS 'internal: the SQL expression that builds a row''s key as jsonb';

-- "a.k1 = b.k1 AND a.k2 = b.k2" for key columns.
CREATE FUNCTION @extschema@.opus_job_key_match_sql(key_columns text[], a text, b text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT pg_catalog.string_agg(pg_catalog.format('%I.%I OPERATOR(pg_catalog.=) %I.%I', a, c.col, b, c.col),
                                 ' AND ' ORDER BY c.n)
    FROM pg_catalog.unnest(key_columns) WITH ORDINALITY AS c(col, n)
$$;

COMMENT ON FUNCTION @extschema@.opus_job_key_match_sql(text[], text, text)
IS 'internal: the SQL condition that two aliases have the same key';

-- The source as a FROM item: a relation name, or the query in parentheses.
CREATE FUNCTION @extschema@.opus_job_source_sql(j @extschema@.opus_job)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN j.source IS NOT NULL
                THEN @extschema@.opus_quote_relname(j.source)
                ELSE '(' OPERATOR(pg_catalog.||) j.source_query OPERATOR(pg_catalog.||) E'\n)' END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_source_sql(@extschema@.opus_job)
IS 'internal: the job''s source as an SQL FROM item';

-- Columns (name, SQL type) of a relation, or of a query's result.
CREATE FUNCTION @extschema@.opus_job_columns(rel text, query text)
RETURNS TABLE(name text, type text)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    relid pg_catalog.oid;
BEGIN
    IF rel IS NOT NULL THEN
        relid := pg_catalog.to_regclass(rel);
    ELSE
        -- A temporary view describes the query's columns (and checks it).
        EXECUTE 'CREATE TEMPORARY VIEW opus_job_probe AS SELECT * FROM (' OPERATOR(pg_catalog.||)
                query OPERATOR(pg_catalog.||) E'\n) AS s';
        relid := 'pg_temp.opus_job_probe'::pg_catalog.regclass;
    END IF;
    RETURN QUERY
        SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod)
        FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid OPERATOR(pg_catalog.=) relid
          AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
        ORDER BY a.attnum;
    IF rel IS NULL THEN
        DROP VIEW pg_temp.opus_job_probe;
    END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_columns(text, text)
IS 'internal: the columns and types of a relation, or of a query''s result';

-- A job option that is a JSON array of strings (stop, choices) as text[];
-- NULL when the option is absent or null; 22023 when it is not an array.
CREATE FUNCTION @extschema@.opus_job_option_texts(options jsonb, key text)
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN pg_catalog.jsonb_typeof(options OPERATOR(pg_catalog.->) key) OPERATOR(pg_catalog.<>) 'null'
                THEN ARRAY(SELECT pg_catalog.jsonb_array_elements_text(options OPERATOR(pg_catalog.->) key)) END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_option_texts(jsonb, text)
IS 'internal: a job option given as a JSON array of strings (stop, choices) as text[] (NULL when absent or null)';

-- The keys a job's options may have.
CREATE FUNCTION @extschema@.opus_job_check_options(options jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    k text;
BEGIN
    IF options IS NULL OR pg_catalog.jsonb_typeof(options) OPERATOR(pg_catalog.<>) 'object' THEN
        RAISE EXCEPTION 'job options must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF options OPERATOR(pg_catalog.?) 'embed'
       AND pg_catalog.jsonb_typeof(options OPERATOR(pg_catalog.->) 'embed') OPERATOR(pg_catalog.<>) 'boolean' THEN
        RAISE EXCEPTION 'job option "embed" must be true or false' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF @extschema@.opus_job_embeds(options) THEN
        -- An embedding job: the arguments of opus_embed, and a token budget.
        FOR k IN SELECT pg_catalog.jsonb_object_keys(options) LOOP
            IF NOT k OPERATOR(pg_catalog.=) ANY (ARRAY['embed', 'model', 'normalize', 'truncate', 'input_type', 'batch_tokens']) THEN
                RAISE EXCEPTION 'job option "%" does not apply to an embedding job', k
                    USING ERRCODE = 'invalid_parameter_value',
                          HINT = 'An embedding job takes the arguments of opus_embed (model, normalize, truncate, input_type) and batch_tokens.';
            END IF;
        END LOOP;
        IF COALESCE(options OPERATOR(pg_catalog.->>) 'input_type', 'document') OPERATOR(pg_catalog.<>) ALL (ARRAY['query', 'document']) THEN
            RAISE EXCEPTION 'job option "input_type" must be "query" or "document"' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF options OPERATOR(pg_catalog.?) 'batch_tokens'
           AND (pg_catalog.jsonb_typeof(options OPERATOR(pg_catalog.->) 'batch_tokens') OPERATOR(pg_catalog.<>) 'number'
                OR (options OPERATOR(pg_catalog.->>) 'batch_tokens')::numeric OPERATOR(pg_catalog.<) 1
                OR (options OPERATOR(pg_catalog.->>) 'batch_tokens')::numeric OPERATOR(pg_catalog.>) 1000000
                OR (options OPERATOR(pg_catalog.->>) 'batch_tokens')::numeric OPERATOR(pg_catalog.<>)
                   pg_catalog.trunc((options OPERATOR(pg_catalog.->>) 'batch_tokens')::numeric)) THEN
            RAISE EXCEPTION 'job option "batch_tokens" must be an integer between 1 and 1000000'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN;
    END IF;
    FOR k IN SELECT pg_catalog.jsonb_object_keys(options) LOOP
        IF NOT k OPERATOR(pg_catalog.=) ANY (ARRAY['max_tokens', 'temperature', 'top_p', 'top_k', 'min_p',
                'presence_penalty', 'frequency_penalty', 'repetition_penalty', 'seed', 'stop',
                'system', 'chat', 'model', 'fallback', 'response_format', 'grammar', 'regex', 'choices', 'embed']) THEN
            RAISE EXCEPTION 'unknown job option "%"', k
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Options are the arguments of opus_generate (max_tokens, temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty, repetition_penalty, seed, stop, model, fallback, response_format, grammar, regex, choices), plus "system" (a system message: the rows are sent as chat) and "chat" (true: send rows as chat); "embed": true makes an embedding job (model, normalize, truncate, batch_tokens).';
        END IF;
    END LOOP;
    -- the output constraint is checked (and compiled) now, not at the first row
    PERFORM @extschema@.opus_constraint_grammar(
        response_format => options OPERATOR(pg_catalog.->) 'response_format',
        grammar => options OPERATOR(pg_catalog.->>) 'grammar',
        regex => options OPERATOR(pg_catalog.->>) 'regex',
        choices => @extschema@.opus_job_option_texts(options, 'choices'));
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_check_options(jsonb)
IS 'internal: raise 22023 for an option key a job does not know';

-- Whether a job's options make it an embedding job.
CREATE FUNCTION @extschema@.opus_job_embeds(options jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT COALESCE(options OPERATOR(pg_catalog.->) 'embed' OPERATOR(pg_catalog.=) 'true'::jsonb, false)
$$;

COMMENT ON FUNCTION @extschema@.opus_job_embeds(jsonb)
IS 'internal: true for the options of an embedding job ("embed": true)';

-- Submit one prompt with a job's options; returns the request id.  The
-- request is attached to the session (detached => false): an interrupted
-- run leaves nothing running.
CREATE FUNCTION @extschema@.opus_job_submit(prompt text, options jsonb)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
BEGIN
    IF options OPERATOR(pg_catalog.?) 'system' OR
       COALESCE((options OPERATOR(pg_catalog.->>) 'chat')::boolean, false) THEN
        RETURN @extschema@.opus_submit_chat(
            CASE WHEN options OPERATOR(pg_catalog.?) 'system'
                 THEN pg_catalog.jsonb_build_array(
                          pg_catalog.jsonb_build_object('role', 'system', 'content', options OPERATOR(pg_catalog.->>) 'system'),
                          pg_catalog.jsonb_build_object('role', 'user', 'content', prompt))
                 ELSE pg_catalog.jsonb_build_array(
                          pg_catalog.jsonb_build_object('role', 'user', 'content', prompt)) END,
            max_tokens => (options OPERATOR(pg_catalog.->>) 'max_tokens')::integer,
            temperature => (options OPERATOR(pg_catalog.->>) 'temperature')::double precision,
            top_p => (options OPERATOR(pg_catalog.->>) 'top_p')::double precision,
            top_k => (options OPERATOR(pg_catalog.->>) 'top_k')::integer,
            min_p => (options OPERATOR(pg_catalog.->>) 'min_p')::double precision,
            presence_penalty => (options OPERATOR(pg_catalog.->>) 'presence_penalty')::double precision,
            frequency_penalty => (options OPERATOR(pg_catalog.->>) 'frequency_penalty')::double precision,
            repetition_penalty => (options OPERATOR(pg_catalog.->>) 'repetition_penalty')::double precision,
            seed => (options OPERATOR(pg_catalog.->>) 'seed')::bigint,
            stop => @extschema@.opus_job_option_texts(options, 'stop'),
            detached => false,
            model => options OPERATOR(pg_catalog.->>) 'model',
            fallback => (options OPERATOR(pg_catalog.->>) 'fallback')::boolean,
            response_format => options OPERATOR(pg_catalog.->) 'response_format',
            grammar => options OPERATOR(pg_catalog.->>) 'grammar',
            regex => options OPERATOR(pg_catalog.->>) 'regex',
            choices => @extschema@.opus_job_option_texts(options, 'choices'));
    END IF;
    RETURN @extschema@.opus_submit(
        prompt,
        max_tokens => (options OPERATOR(pg_catalog.->>) 'max_tokens')::integer,
        temperature => (options OPERATOR(pg_catalog.->>) 'temperature')::double precision,
        top_p => (options OPERATOR(pg_catalog.->>) 'top_p')::double precision,
        top_k => (options OPERATOR(pg_catalog.->>) 'top_k')::integer,
        min_p => (options OPERATOR(pg_catalog.->>) 'min_p')::double precision,
        presence_penalty => (options OPERATOR(pg_catalog.->>) 'presence_penalty')::double precision,
        frequency_penalty => (options OPERATOR(pg_catalog.->>) 'frequency_penalty')::double precision,
        repetition_penalty => (options OPERATOR(pg_catalog.->>) 'repetition_penalty')::double precision,
        seed => (options OPERATOR(pg_catalog.->>) 'seed')::bigint,
        stop => @extschema@.opus_job_option_texts(options, 'stop'),
        detached => false,
        model => options OPERATOR(pg_catalog.->>) 'model',
        fallback => (options OPERATOR(pg_catalog.->>) 'fallback')::boolean,
        response_format => options OPERATOR(pg_catalog.->) 'response_format',
        grammar => options OPERATOR(pg_catalog.->>) 'grammar',
        regex => options OPERATOR(pg_catalog.->>) 'regex',
        choices => @extschema@.opus_job_option_texts(options, 'choices'));
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_submit(text, jsonb)
IS 'internal: submit one prompt with a job''s options, attached to the session';

-- The same for a row of an embedding job (opus_submit_embed; a row is a
-- document unless the options say "input_type": "query").
CREATE FUNCTION @extschema@.opus_job_submit_embed(input text, options jsonb)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
BEGIN
    RETURN @extschema@.opus_submit_embed(
        input,
        options OPERATOR(pg_catalog.->>) 'model',
        (options OPERATOR(pg_catalog.->>) 'normalize')::boolean,
        (options OPERATOR(pg_catalog.->>) 'truncate')::boolean,
        detached => false,
        input_type => COALESCE(options OPERATOR(pg_catalog.->>) 'input_type', 'document'));
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_submit_embed(text, jsonb)
IS 'internal: submit one input of an embedding job with its options, attached to the session';

-- Whether retrying cannot help an error: bad data or arguments (22), limits
-- (54, prompt too long), unsupported (0A), and errors of the SQL itself (42,
-- except 42704: a request that vanished).
CREATE FUNCTION @extschema@.opus_job_error_is_permanent(sqlstate text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.left(sqlstate, 2) OPERATOR(pg_catalog.=) ANY (ARRAY['22', '54', '0A', '42', '23'])
       AND sqlstate OPERATOR(pg_catalog.<>) '42704'
$$;

COMMENT ON FUNCTION @extschema@.opus_job_error_is_permanent(text)
IS 'internal: true for SQLSTATEs a retry cannot fix (classes 22, 23, 42, 54, 0A)';

-- Whether an error is the engine's rather than the row's (class 58: the
-- engine died, cannot start, or its model is missing).  Such a failure does
-- not use up one of the row's attempts.
CREATE FUNCTION @extschema@.opus_job_error_is_system(sqlstate text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.left(sqlstate, 2) OPERATOR(pg_catalog.=) '58'
$$;

COMMENT ON FUNCTION @extschema@.opus_job_error_is_system(text)
IS 'internal: true for SQLSTATEs of class 58 (the engine, not the row, failed)';

-- Write results: the target rows (updated where the key exists, inserted
-- where not) and the items marked done with the model and version that
-- made them, in the caller's transaction.  An embedding job's outputs are
-- real[] literals, cast to the target column's type (real[], or pgvector's
-- vector through its cast from real[]).
CREATE FUNCTION @extschema@.opus_job_write(
    j @extschema@.opus_job,
    items bigint[], keys jsonb[], outputs text[], finishes text[],
    ptoks integer[], ctoks integer[], cached integer[],
    models text[], versions integer[])
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    target text := @extschema@.opus_quote_relname(j.target_table);
    keys_r text;
    keys_list text;
    value_sql text := 'x.output';
BEGIN
    SELECT pg_catalog.string_agg(pg_catalog.format('p.%I', c), ', '),
           pg_catalog.string_agg(pg_catalog.format('%I', c), ', ')
    INTO keys_r, keys_list
    FROM pg_catalog.unnest(j.key_columns) AS c;
    IF @extschema@.opus_job_embeds(j.options) THEN
        SELECT pg_catalog.format('CAST(CAST(x.output AS real[]) AS %s)', c.type) INTO value_sql
        FROM @extschema@.opus_job_columns(target, NULL) AS c
        WHERE c.name OPERATOR(pg_catalog.=) j.target_column;
    END IF;
    EXECUTE pg_catalog.format($w$
        WITH r AS (
            SELECT %3$s, %8$s AS %2$I
            FROM ROWS FROM (pg_catalog.unnest($1::jsonb[]), pg_catalog.unnest($2::text[])) AS x(key, output),
                 LATERAL pg_catalog.jsonb_populate_record(NULL::%1$s, x.key) AS p
        ), u AS (
            UPDATE %1$s AS t SET %2$I = r.%2$I FROM r WHERE %5$s RETURNING %6$s
        )
        INSERT INTO %1$s (%4$s, %2$I)
        SELECT %4$s, r.%2$I FROM r
        WHERE NOT EXISTS (SELECT FROM u WHERE %7$s)$w$,
        target, j.target_column, keys_r, keys_list,
        @extschema@.opus_job_key_match_sql(j.key_columns, 't', 'r'),
        (SELECT pg_catalog.string_agg(pg_catalog.format('t.%I', c), ', ') FROM pg_catalog.unnest(j.key_columns) AS c),
        @extschema@.opus_job_key_match_sql(j.key_columns, 'u', 'r'),
        value_sql)
    USING keys, outputs;

    UPDATE @extschema@.opus_job_item AS i
    SET state = 'done', attempts = i.attempts OPERATOR(pg_catalog.+) 1, prompt = NULL,
        finish_reason = x.finish_reason, prompt_tokens = x.prompt_tokens,
        completion_tokens = x.completion_tokens, cached_tokens = x.cached_tokens,
        finished_at = pg_catalog.clock_timestamp(), next_attempt_at = NULL,
        last_sqlstate = NULL, last_error = NULL,
        model = x.model, model_version = x.model_version
    FROM ROWS FROM (pg_catalog.unnest(items), pg_catalog.unnest(finishes), pg_catalog.unnest(ptoks),
                    pg_catalog.unnest(ctoks), pg_catalog.unnest(cached),
                    pg_catalog.unnest(models), pg_catalog.unnest(versions))
         AS x(item_id, finish_reason, prompt_tokens, completion_tokens, cached_tokens, model, model_version)
    WHERE i.job_id OPERATOR(pg_catalog.=) j.id AND i.item_id OPERATOR(pg_catalog.=) x.item_id;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_write(@extschema@.opus_job, bigint[], jsonb[], text[], text[], integer[], integer[], integer[], text[], integer[])
IS 'internal: write a chunk of results to the target and mark their items done, with the model and version that made them';

-- Record failed attempts; returns how many items failed for good.  An
-- engine failure (class 58) is retried without counting as an attempt.
CREATE FUNCTION @extschema@.opus_job_fail(
    j @extschema@.opus_job, item_ids bigint[], sqlstates text[], errors text[])
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$
    WITH f AS (
        UPDATE @extschema@.opus_job_item AS i
        SET attempts = i.attempts OPERATOR(pg_catalog.+)
                CASE WHEN @extschema@.opus_job_error_is_system(x.sqlstate) THEN 0 ELSE 1 END,
            last_sqlstate = x.sqlstate, last_error = x.error,
            state = CASE WHEN @extschema@.opus_job_error_is_system(x.sqlstate) THEN 'pending'
                         WHEN @extschema@.opus_job_error_is_permanent(x.sqlstate)
                           OR i.attempts OPERATOR(pg_catalog.+) 1 OPERATOR(pg_catalog.>=) j.max_attempts
                         THEN 'failed' ELSE 'pending' END,
            next_attempt_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)
                LEAST(j.retry_backoff OPERATOR(pg_catalog.*)
                                 pg_catalog.power(2, LEAST(i.attempts, 20)),
                                 '1 hour'::interval),
            finished_at = pg_catalog.clock_timestamp()
        FROM ROWS FROM (pg_catalog.unnest(item_ids), pg_catalog.unnest(sqlstates), pg_catalog.unnest(errors)) AS x(item_id, sqlstate, error)
        WHERE i.job_id OPERATOR(pg_catalog.=) j.id AND i.item_id OPERATOR(pg_catalog.=) x.item_id
        RETURNING i.state
    )
    SELECT pg_catalog.count(*) FROM f WHERE f.state OPERATOR(pg_catalog.=) 'failed'
$$;

COMMENT ON FUNCTION @extschema@.opus_job_fail(@extschema@.opus_job, bigint[], text[], text[])
IS 'internal: record failed attempts (retried after retry_backoff doubling per attempt, up to max_attempts)';

-- Defining, changing and dropping jobs ----------------------------------------

CREATE FUNCTION @extschema@.opus_job_create(
    name text,
    source regclass DEFAULT NULL,
    key_columns text[] DEFAULT NULL,
    prompt_template text DEFAULT NULL,
    target_table text DEFAULT NULL,
    target_column text DEFAULT 'output',
    options jsonb DEFAULT '{}',
    concurrency integer DEFAULT 16,
    source_query text DEFAULT NULL,
    prompt_expression text DEFAULT NULL,
    max_attempts integer DEFAULT 3,
    retry_backoff interval DEFAULT '1 second',
    commit_every integer DEFAULT 64)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    src_name text;
    src_cols text[];
    src_types text[];
    tgt text;
    tgt_cols text[];
    tgt_types text[];
    k text;
    job_id bigint;
BEGIN
    IF name IS NULL OR name OPERATOR(pg_catalog.=) '' THEN
        RAISE EXCEPTION 'job name must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.num_nonnulls(source, source_query) OPERATOR(pg_catalog.<>) 1 THEN
        RAISE EXCEPTION 'give exactly one of source and source_query' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.num_nonnulls(prompt_template, prompt_expression) OPERATOR(pg_catalog.<>) 1 THEN
        RAISE EXCEPTION 'give exactly one of prompt_template and prompt_expression' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF key_columns IS NULL OR pg_catalog.cardinality(key_columns) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'key_columns must name at least one column' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF target_table IS NULL OR target_column IS NULL THEN
        RAISE EXCEPTION 'target_table and target_column must be given' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF target_column OPERATOR(pg_catalog.=) ANY (key_columns) THEN
        RAISE EXCEPTION 'target_column must not be a key column' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM @extschema@.opus_job_check_options(options);
    IF EXISTS (SELECT FROM @extschema@.opus_job AS o
               WHERE o.name OPERATOR(pg_catalog.=) opus_job_create.name
                 AND o.owner::pg_catalog.oid OPERATOR(pg_catalog.=)
                     (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER)) THEN
        RAISE EXCEPTION 'opus job "%" already exists', opus_job_create.name USING ERRCODE = 'duplicate_object';
    END IF;
    IF concurrency IS NULL OR concurrency OPERATOR(pg_catalog.<) 1 OR concurrency OPERATOR(pg_catalog.>) 10000 THEN
        RAISE EXCEPTION 'concurrency must be between 1 and 10000' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- The source and its columns (checked as the caller, who owns the job).
    IF source IS NOT NULL THEN
        src_name := source::text;   -- regclass output is quoted and qualified as needed
        IF NOT pg_catalog.has_table_privilege(source, 'SELECT') THEN
            RAISE EXCEPTION 'permission denied for table %', src_name USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
    SELECT pg_catalog.array_agg(c.name), pg_catalog.array_agg(c.type)
    INTO src_cols, src_types
    FROM @extschema@.opus_job_columns(src_name, source_query) AS c;
    FOREACH k IN ARRAY key_columns LOOP
        IF NOT k OPERATOR(pg_catalog.=) ANY (src_cols) THEN
            RAISE EXCEPTION 'key column "%" is not a column of the source', k USING ERRCODE = 'undefined_column';
        END IF;
    END LOOP;
    IF prompt_template IS NOT NULL THEN
        FOREACH k IN ARRAY @extschema@.opus_template_columns(prompt_template) LOOP
            IF NOT k OPERATOR(pg_catalog.=) ANY (src_cols) THEN
                RAISE EXCEPTION 'prompt template refers to "%", which is not a column of the source', k
                    USING ERRCODE = 'undefined_column',
                          HINT = 'Placeholders are written {{column name}}, with the name as it is stored (no quotes).';
            END IF;
        END LOOP;
    ELSE
        -- Check the expression now (plans it, runs nothing).
        EXECUTE pg_catalog.format('EXPLAIN SELECT (%s)::text FROM %s AS s', prompt_expression,
            CASE WHEN source IS NOT NULL THEN src_name ELSE '(' OPERATOR(pg_catalog.||) source_query OPERATOR(pg_catalog.||) E'\n)' END);
    END IF;

    -- The target: created (keys + text column, or real[] for an embedding
    -- job, primary key on the keys) if missing.
    tgt := @extschema@.opus_quote_relname(target_table);
    IF pg_catalog.to_regclass(tgt) IS NULL THEN
        EXECUTE pg_catalog.format('CREATE TABLE %s (%s, %I %s, PRIMARY KEY (%s))', tgt,
            (SELECT pg_catalog.string_agg(pg_catalog.format('%I %s', k2, src_types[pg_catalog.array_position(src_cols, k2)]), ', ')
             FROM pg_catalog.unnest(key_columns) AS k2),
            target_column,
            CASE WHEN @extschema@.opus_job_embeds(options) THEN 'real[]' ELSE 'text' END,
            (SELECT pg_catalog.string_agg(pg_catalog.format('%I', k2), ', ') FROM pg_catalog.unnest(key_columns) AS k2));
    ELSE
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_class AS c
                       WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(tgt)
                         AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::"char"[])) THEN
            RAISE EXCEPTION 'target % is not a table', tgt USING ERRCODE = 'wrong_object_type';
        END IF;
        SELECT pg_catalog.array_agg(c.name), pg_catalog.array_agg(c.type)
        INTO tgt_cols, tgt_types
        FROM @extschema@.opus_job_columns(tgt, NULL) AS c;
        FOREACH k IN ARRAY key_columns LOOP
            IF NOT k OPERATOR(pg_catalog.=) ANY (tgt_cols) THEN
                RAISE EXCEPTION 'key column "%" is not a column of target %', k, tgt USING ERRCODE = 'undefined_column';
            END IF;
        END LOOP;
        IF NOT target_column OPERATOR(pg_catalog.=) ANY (tgt_cols) THEN
            RAISE EXCEPTION 'column "%" of target % does not exist', target_column, tgt USING ERRCODE = 'undefined_column';
        END IF;
        -- An embedding goes into real[] or, where pgvector is installed, vector.
        IF @extschema@.opus_job_embeds(options)
           AND NOT pg_catalog.split_part(tgt_types[pg_catalog.array_position(tgt_cols, target_column)], '(', 1)
                   OPERATOR(pg_catalog.=) ANY (ARRAY['real[]', 'vector']) THEN
            RAISE EXCEPTION 'column "%" of target % is of type %, not real[] or vector', target_column, tgt,
                tgt_types[pg_catalog.array_position(tgt_cols, target_column)]
                USING ERRCODE = 'datatype_mismatch',
                      HINT = 'An embedding job writes real[] (or pgvector''s vector) columns.';
        END IF;
        IF NOT pg_catalog.has_table_privilege(pg_catalog.to_regclass(tgt), 'INSERT, UPDATE') THEN
            RAISE EXCEPTION 'permission denied for table %', tgt USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;

    INSERT INTO @extschema@.opus_job (name, owner, source, source_query, key_columns,
        prompt_template, prompt_expression, target_table, target_column, options,
        concurrency, max_attempts, retry_backoff, commit_every)
    VALUES (opus_job_create.name, pg_catalog.quote_ident(CURRENT_USER)::regrole, src_name, source_query, key_columns,
        prompt_template, prompt_expression, tgt, target_column, options,
        concurrency, max_attempts, retry_backoff, commit_every)
    RETURNING id INTO job_id;
    RETURN job_id;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_create(text, regclass, text[], text, text, text, jsonb, integer, text, text, integer, interval, integer)
IS 'define a batch job: run the model over every row of source (or source_query), writing target_table.target_column by key (options "embed": true: the embedding of each row, real[]); the target is created if missing';

CREATE FUNCTION @extschema@.opus_job_alter(
    job_name text,
    new_name text DEFAULT NULL,
    prompt_template text DEFAULT NULL,
    prompt_expression text DEFAULT NULL,
    options jsonb DEFAULT NULL,
    concurrency integer DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    retry_backoff interval DEFAULT NULL,
    commit_every integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    j @extschema@.opus_job := @extschema@.opus_job_find(job_name);
    k text;
    cols text[];
BEGIN
    PERFORM @extschema@.opus_job_check_owner(j, 'alter');
    IF options IS NOT NULL THEN
        PERFORM @extschema@.opus_job_check_options(options);
    END IF;
    IF prompt_template IS NOT NULL AND prompt_expression IS NOT NULL THEN
        RAISE EXCEPTION 'give at most one of prompt_template and prompt_expression' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF prompt_template IS NOT NULL THEN
        SELECT pg_catalog.array_agg(c.name) INTO cols
        FROM @extschema@.opus_job_columns(j.source, j.source_query) AS c;
        FOREACH k IN ARRAY @extschema@.opus_template_columns(prompt_template) LOOP
            IF NOT k OPERATOR(pg_catalog.=) ANY (cols) THEN
                RAISE EXCEPTION 'prompt template refers to "%", which is not a column of the source', k
                    USING ERRCODE = 'undefined_column';
            END IF;
        END LOOP;
    ELSIF prompt_expression IS NOT NULL THEN
        -- as the owner: planning may run the owner's (immutable) functions
        PERFORM @extschema@.opus_job_execute_as(j.owner,
            pg_catalog.format('EXPLAIN SELECT (%s)::text FROM %s AS s', prompt_expression,
                              @extschema@.opus_job_source_sql(j)));
    END IF;
    IF NOT pg_catalog.pg_try_advisory_xact_lock(@extschema@.opus_job_lock_space(), j.id::integer) THEN
        RAISE EXCEPTION 'opus job "%" is running', j.name USING ERRCODE = 'object_in_use';
    END IF;
    UPDATE @extschema@.opus_job AS o SET
        name = COALESCE(new_name, o.name),
        prompt_template = CASE WHEN opus_job_alter.prompt_expression IS NOT NULL THEN NULL
                               ELSE COALESCE(opus_job_alter.prompt_template, o.prompt_template) END,
        prompt_expression = CASE WHEN opus_job_alter.prompt_template IS NOT NULL THEN NULL
                                 ELSE COALESCE(opus_job_alter.prompt_expression, o.prompt_expression) END,
        options = COALESCE(opus_job_alter.options, o.options),
        concurrency = COALESCE(opus_job_alter.concurrency, o.concurrency),
        max_attempts = COALESCE(opus_job_alter.max_attempts, o.max_attempts),
        retry_backoff = COALESCE(opus_job_alter.retry_backoff, o.retry_backoff),
        commit_every = COALESCE(opus_job_alter.commit_every, o.commit_every)
    WHERE o.id OPERATOR(pg_catalog.=) j.id;
    -- Rows not done yet were rendered with the old prompt: take them afresh.
    IF prompt_template IS NOT NULL OR prompt_expression IS NOT NULL THEN
        DELETE FROM @extschema@.opus_job_item AS i
        WHERE i.job_id OPERATOR(pg_catalog.=) j.id AND i.state OPERATOR(pg_catalog.<>) 'done';
    END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_alter(text, text, text, text, jsonb, integer, integer, interval, integer)
IS 'change a job (NULL: unchanged); a new prompt applies to every row not done yet, failed rows included';

CREATE FUNCTION @extschema@.opus_job_reset(job_name text, failed_only boolean DEFAULT true)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    j @extschema@.opus_job := @extschema@.opus_job_find(job_name);
    n bigint;
BEGIN
    PERFORM @extschema@.opus_job_check_owner(j, 'reset');
    IF failed_only THEN
        UPDATE @extschema@.opus_job_item AS i
        SET state = 'pending', attempts = 0, next_attempt_at = NULL
        WHERE i.job_id OPERATOR(pg_catalog.=) j.id AND i.state OPERATOR(pg_catalog.=) 'failed';
    ELSE
        DELETE FROM @extschema@.opus_job_item AS i WHERE i.job_id OPERATOR(pg_catalog.=) j.id;
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_reset(text, boolean)
IS 'give failed rows a new set of attempts (failed_only), or forget every row so the next run does all again (its results are then written over)';

CREATE FUNCTION @extschema@.opus_job_drop(job_name text, drop_target boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    j @extschema@.opus_job := @extschema@.opus_job_find(job_name);
BEGIN
    PERFORM @extschema@.opus_job_check_owner(j, 'drop');
    IF NOT pg_catalog.pg_try_advisory_xact_lock(@extschema@.opus_job_lock_space(), j.id::integer) THEN
        RAISE EXCEPTION 'opus job "%" is running', j.name USING ERRCODE = 'object_in_use';
    END IF;
    DELETE FROM @extschema@.opus_job AS o WHERE o.id OPERATOR(pg_catalog.=) j.id;
    IF drop_target THEN
        -- as the owner: only a table the owner may drop (the stored name is
        -- the owner's to edit, so a member or superuser must not drop
        -- whatever it names with their own rights)
        PERFORM @extschema@.opus_job_execute_as(j.owner,
            pg_catalog.format('DROP TABLE IF EXISTS %s', @extschema@.opus_quote_relname(j.target_table)));
    END IF;
    RETURN true;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_drop(text, boolean)
IS 'drop a job with its work list and run log (and its target table if drop_target)';

-- Running ---------------------------------------------------------------------

CREATE PROCEDURE @extschema@.opus_job_run(job_name text, max_rows bigint DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    j @extschema@.opus_job;
    caller text := CURRENT_USER;
    lost boolean := false;
    run_id bigint;
    n bigint;
    -- in flight: request ids and their items
    req_ids bigint[] := '{}';
    req_items bigint[] := '{}';
    req_keys jsonb[] := '{}';
    -- finished, not yet written
    ok_items bigint[] := '{}';
    ok_keys jsonb[] := '{}';
    ok_outputs text[] := '{}';
    ok_finish text[] := '{}';
    ok_ptok integer[] := '{}';
    ok_ctok integer[] := '{}';
    ok_cached integer[] := '{}';
    ok_model text[] := '{}';
    ok_version integer[] := '{}';
    bad_items bigint[] := '{}';
    bad_states text[] := '{}';
    bad_errors text[] := '{}';
    rid bigint;
    pos integer;
    need integer;
    n_taken integer;
    taken bigint := 0;
    slots_full boolean;
    last_flush timestamp with time zone := pg_catalog.clock_timestamp();
    next_retry timestamp with time zone;
    n_failed bigint;
    st text;
    msg text;
    engine_errors integer := 0;     -- engine failures since the last success
    peak integer := 0;              -- the most requests in flight at once
BEGIN
    j := @extschema@.opus_job_find(job_name);
    PERFORM @extschema@.opus_job_check_owner(j, 'run');
    PERFORM FROM @extschema@.opus_engine_status();     -- 55000 unless preloaded
    PERFORM @extschema@.opus_job_check_not_in_block();
    IF max_rows IS NOT NULL AND max_rows OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION 'max_rows must not be negative' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Run as the owner, one run per job: a second one returns at once.
    -- Every transaction below starts with opus_job_begin.
    IF NOT @extschema@.opus_job_begin(j) THEN
        RAISE NOTICE 'opus job "%" is already running; nothing to do', j.name;
        RETURN;
    END IF;

    -- Runs that were running when their session or the server went away.
    UPDATE @extschema@.opus_job_run AS r
    SET status = 'interrupted', phase = 'interrupted', ended_at = r.updated_at,
        last_error = COALESCE(r.last_error, 'the run was interrupted (its session ended or the server restarted)')
    WHERE r.job_id OPERATOR(pg_catalog.=) j.id AND r.status OPERATOR(pg_catalog.=) 'running';
    INSERT INTO @extschema@.opus_job_run (job_id, owner, pid, run_by)
    VALUES (j.id, j.owner, pg_catalog.pg_backend_pid(), pg_catalog.quote_ident(caller)::regrole)
    RETURNING id INTO run_id;
    COMMIT;
    IF NOT @extschema@.opus_job_begin(j) THEN
        RAISE NOTICE 'opus job "%" was started by another run', j.name;
        RETURN;
    END IF;

    -- Take in the source rows the work list does not have yet.
    n := @extschema@.opus_job_take_in(j);
    UPDATE @extschema@.opus_job_run AS r
    SET rows_added = n, phase = 'generating',
        generating_since = pg_catalog.clock_timestamp(), updated_at = pg_catalog.clock_timestamp(),
        (rows_total, rows_done_before, rows_failed_before) =
            (SELECT pg_catalog.count(*),
                    pg_catalog.count(*) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'done'),
                    pg_catalog.count(*) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'failed')
             FROM @extschema@.opus_job_item AS i WHERE i.job_id OPERATOR(pg_catalog.=) j.id)
    WHERE r.id OPERATOR(pg_catalog.=) run_id;
    COMMIT;
    IF NOT @extschema@.opus_job_begin(j) THEN
        RAISE NOTICE 'opus job "%" was started by another run', j.name;
        RETURN;
    END IF;

    LOOP
        -- Fill the window with pending rows that are due (an embedding
        -- job's window is its token budget, which opus_job_fill applies).
        need := @extschema@.opus_job_window(j) OPERATOR(pg_catalog.-) pg_catalog.cardinality(req_ids);
        IF max_rows IS NOT NULL THEN
            need := LEAST(need, max_rows OPERATOR(pg_catalog.-) taken);
        END IF;
        slots_full := false;
        IF need OPERATOR(pg_catalog.>) 0 THEN
            SELECT * INTO req_ids, req_items, req_keys, bad_items, bad_states, bad_errors, n_taken, slots_full
            FROM @extschema@.opus_job_fill(j, need, req_items OPERATOR(pg_catalog.||) ok_items OPERATOR(pg_catalog.||) bad_items,
                                           req_ids, req_items, req_keys, bad_items, bad_states, bad_errors);
            taken := taken OPERATOR(pg_catalog.+) n_taken;
            peak := GREATEST(peak, pg_catalog.cardinality(req_ids));
        END IF;

        IF pg_catalog.cardinality(req_ids) OPERATOR(pg_catalog.>) 0 THEN
            -- Take the next result that is ready.
            rid := @extschema@.opus_wait(req_ids, '1 second');
            IF rid IS NOT NULL THEN
                pos := pg_catalog.array_position(req_ids, rid);
                SELECT * INTO ok_items, ok_keys, ok_outputs, ok_finish, ok_ptok, ok_ctok, ok_cached,
                              ok_model, ok_version, bad_items, bad_states, bad_errors, st
                FROM @extschema@.opus_job_collect(rid, req_items[pos], req_keys[pos],
                    ok_items, ok_keys, ok_outputs, ok_finish, ok_ptok, ok_ctok, ok_cached,
                    ok_model, ok_version, bad_items, bad_states, bad_errors);
                IF st IS NULL THEN
                    engine_errors := 0;
                ELSIF @extschema@.opus_job_error_is_system(st) THEN
                    engine_errors := engine_errors OPERATOR(pg_catalog.+) 1;
                END IF;
                req_ids := pg_catalog.array_cat(req_ids[:pos OPERATOR(pg_catalog.-) 1], req_ids[pos OPERATOR(pg_catalog.+) 1:]);
                req_items := pg_catalog.array_cat(req_items[:pos OPERATOR(pg_catalog.-) 1], req_items[pos OPERATOR(pg_catalog.+) 1:]);
                req_keys := pg_catalog.array_cat(req_keys[:pos OPERATOR(pg_catalog.-) 1], req_keys[pos OPERATOR(pg_catalog.+) 1:]);
            END IF;
        END IF;

        -- Write a chunk: when it is full, every second, when idle, and
        -- before giving up on an engine that keeps failing.
        IF engine_errors OPERATOR(pg_catalog.>=) GREATEST(32, 2 OPERATOR(pg_catalog.*) j.concurrency, 2 OPERATOR(pg_catalog.*) peak)
           OR pg_catalog.cardinality(ok_items) OPERATOR(pg_catalog.+) pg_catalog.cardinality(bad_items)
               OPERATOR(pg_catalog.>=) j.commit_every
           OR pg_catalog.cardinality(req_ids) OPERATOR(pg_catalog.=) 0
           OR pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) last_flush OPERATOR(pg_catalog.>=) '1 second'::interval THEN
            IF pg_catalog.cardinality(ok_items) OPERATOR(pg_catalog.>) 0 THEN
                BEGIN
                    PERFORM @extschema@.opus_job_write(j, ok_items, ok_keys, ok_outputs, ok_finish,
                                                       ok_ptok, ok_ctok, ok_cached, ok_model, ok_version);
                EXCEPTION WHEN OTHERS THEN
                    -- One row the target refuses must not sink the chunk: write row by row.
                    FOR pos IN 1 .. pg_catalog.cardinality(ok_items) LOOP
                        BEGIN
                            PERFORM @extschema@.opus_job_write(j, ARRAY[ok_items[pos]], ARRAY[ok_keys[pos]],
                                ARRAY[ok_outputs[pos]], ARRAY[ok_finish[pos]], ARRAY[ok_ptok[pos]],
                                ARRAY[ok_ctok[pos]], ARRAY[ok_cached[pos]], ARRAY[ok_model[pos]],
                                ARRAY[ok_version[pos]]);
                        EXCEPTION WHEN OTHERS THEN
                            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
                            bad_items := pg_catalog.array_append(bad_items, ok_items[pos]);
                            bad_states := pg_catalog.array_append(bad_states, st);
                            bad_errors := pg_catalog.array_append(bad_errors, 'writing the result failed: ' OPERATOR(pg_catalog.||) msg);
                            ok_ctok[pos] := 0;
                            ok_ptok[pos] := 0;
                            ok_cached[pos] := 0;
                            ok_items[pos] := NULL;
                        END;
                    END LOOP;
                END;
            END IF;
            n_failed := 0;
            IF pg_catalog.cardinality(bad_items) OPERATOR(pg_catalog.>) 0 THEN
                n_failed := @extschema@.opus_job_fail(j, bad_items, bad_states, bad_errors);
            END IF;
            UPDATE @extschema@.opus_job_run AS r SET
                rows_done = r.rows_done OPERATOR(pg_catalog.+)
                    pg_catalog.cardinality(pg_catalog.array_remove(ok_items, NULL)),
                rows_failed = r.rows_failed OPERATOR(pg_catalog.+) n_failed,
                rows_retried = r.rows_retried OPERATOR(pg_catalog.+)
                    pg_catalog.cardinality(bad_items) OPERATOR(pg_catalog.-) n_failed,
                prompt_tokens = r.prompt_tokens OPERATOR(pg_catalog.+)
                    COALESCE((SELECT pg_catalog.sum(x) FROM pg_catalog.unnest(ok_ptok) AS x), 0),
                completion_tokens = r.completion_tokens OPERATOR(pg_catalog.+)
                    COALESCE((SELECT pg_catalog.sum(x) FROM pg_catalog.unnest(ok_ctok) AS x), 0),
                cached_tokens = r.cached_tokens OPERATOR(pg_catalog.+)
                    COALESCE((SELECT pg_catalog.sum(x) FROM pg_catalog.unnest(ok_cached) AS x), 0),
                last_error = CASE WHEN pg_catalog.cardinality(bad_items) OPERATOR(pg_catalog.>) 0
                                  THEN bad_states[pg_catalog.cardinality(bad_states)] OPERATOR(pg_catalog.||) ': '
                                       OPERATOR(pg_catalog.||) bad_errors[pg_catalog.cardinality(bad_errors)]
                                  ELSE r.last_error END,
                last_error_at = CASE WHEN pg_catalog.cardinality(bad_items) OPERATOR(pg_catalog.>) 0
                                     THEN pg_catalog.clock_timestamp() ELSE r.last_error_at END,
                phase = 'generating',
                updated_at = pg_catalog.clock_timestamp()
            WHERE r.id OPERATOR(pg_catalog.=) run_id;
            COMMIT;
            lost := NOT @extschema@.opus_job_begin(j);
            EXIT WHEN lost;
            IF engine_errors OPERATOR(pg_catalog.>=) GREATEST(32, 2 OPERATOR(pg_catalog.*) j.concurrency, 2 OPERATOR(pg_catalog.*) peak) THEN
                -- Every request fails in the engine: stop, leaving the rows
                -- pending (their attempts untouched) for a later run.
                PERFORM @extschema@.opus_cancel(x) FROM pg_catalog.unnest(req_ids) AS x;
                UPDATE @extschema@.opus_job_run AS r SET status = 'failed', phase = 'failed',
                    ended_at = pg_catalog.clock_timestamp(), updated_at = pg_catalog.clock_timestamp()
                WHERE r.id OPERATOR(pg_catalog.=) run_id;
                COMMIT;
                RAISE EXCEPTION 'opus job "%" stopped: the engine failed % requests in a row', j.name, engine_errors
                    USING ERRCODE = 'system_error',
                          DETAIL = 'The last error was: ' OPERATOR(pg_catalog.||) bad_errors[pg_catalog.cardinality(bad_errors)],
                          HINT = 'Rows stay pending; run the job again once the engine works (see opus_engine).';
            END IF;
            ok_items := '{}'; ok_keys := '{}'; ok_outputs := '{}'; ok_finish := '{}';
            ok_ptok := '{}'; ok_ctok := '{}'; ok_cached := '{}'; ok_model := '{}'; ok_version := '{}';
            bad_items := '{}'; bad_states := '{}'; bad_errors := '{}';
            last_flush := pg_catalog.clock_timestamp();
        END IF;

        CONTINUE WHEN pg_catalog.cardinality(req_ids) OPERATOR(pg_catalog.>) 0;

        -- Nothing in flight.
        IF slots_full THEN
            UPDATE @extschema@.opus_job_run AS r SET phase = 'waiting for a request slot',
                updated_at = pg_catalog.clock_timestamp()
            WHERE r.id OPERATOR(pg_catalog.=) run_id;
            COMMIT;
            lost := NOT @extschema@.opus_job_begin(j);
            EXIT WHEN lost;
            PERFORM pg_catalog.pg_sleep(0.1);
            CONTINUE;
        END IF;
        EXIT WHEN max_rows IS NOT NULL AND taken OPERATOR(pg_catalog.>=) max_rows;
        SELECT pg_catalog.min(i.next_attempt_at) INTO next_retry
        FROM @extschema@.opus_job_item AS i
        WHERE i.job_id OPERATOR(pg_catalog.=) j.id AND i.state OPERATOR(pg_catalog.=) 'pending';
        IF NOT FOUND OR NOT EXISTS (SELECT FROM @extschema@.opus_job_item AS i
                                    WHERE i.job_id OPERATOR(pg_catalog.=) j.id
                                      AND i.state OPERATOR(pg_catalog.=) 'pending') THEN
            EXIT;
        END IF;
        IF next_retry IS NOT NULL AND next_retry OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN
            UPDATE @extschema@.opus_job_run AS r SET phase = 'waiting to retry failed rows',
                updated_at = pg_catalog.clock_timestamp()
            WHERE r.id OPERATOR(pg_catalog.=) run_id;
            COMMIT;
            lost := NOT @extschema@.opus_job_begin(j);
            EXIT WHEN lost;
            PERFORM pg_catalog.pg_sleep(LEAST(1.0,
                pg_catalog.date_part('epoch', next_retry OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())));
        END IF;
    END LOOP;

    IF lost THEN
        -- Another run took the lock between two of our transactions (it
        -- can only have started then): leave the rows to it.
        PERFORM @extschema@.opus_cancel(x) FROM pg_catalog.unnest(req_ids) AS x;
        RAISE NOTICE 'opus job "%" was taken over by another run', j.name;
        RETURN;
    END IF;
    UPDATE @extschema@.opus_job_run AS r SET status = 'finished', phase = 'finished',
        ended_at = pg_catalog.clock_timestamp(), updated_at = pg_catalog.clock_timestamp()
    WHERE r.id OPERATOR(pg_catalog.=) run_id;
    COMMIT;
END
$$;

COMMENT ON PROCEDURE @extschema@.opus_job_run(text, bigint)
IS 'process the job''s rows that are not done (at most max_rows), committing results in chunks; interrupt and rerun at will; a second concurrent run returns at once';

-- Progress --------------------------------------------------------------------

-- security_invoker: the job tables' row-level security applies to the reader.
CREATE VIEW @extschema@.opus_job_progress WITH (security_invoker = true) AS
    SELECT
        CASE WHEN running THEN r.pid END AS pid,
        j.id AS job_id,
        j.name AS job,
        j.owner,
        r.id AS run_id,
        CASE WHEN r.id IS NULL THEN 'never run'
             WHEN r.status OPERATOR(pg_catalog.=) 'running' AND NOT running THEN 'interrupted'
             ELSE r.phase END AS phase,
        r.started_at,
        r.ended_at,
        r.rows_total,
        r.rows_done_before OPERATOR(pg_catalog.+) r.rows_done AS rows_done,
        r.rows_failed_before OPERATOR(pg_catalog.+) r.rows_failed AS rows_failed,
        GREATEST(0, r.rows_total OPERATOR(pg_catalog.-) r.rows_done_before
            OPERATOR(pg_catalog.-) r.rows_done OPERATOR(pg_catalog.-) r.rows_failed_before
            OPERATOR(pg_catalog.-) r.rows_failed) AS rows_remaining,
        r.rows_retried,
        r.completion_tokens AS tokens_generated,
        r.prompt_tokens,
        r.cached_tokens,
        pg_catalog.round((r.rows_done::numeric OPERATOR(pg_catalog./) NULLIF(secs, 0))::numeric, 2) AS rows_per_second,
        pg_catalog.round((r.completion_tokens::numeric OPERATOR(pg_catalog./) NULLIF(secs, 0))::numeric, 1) AS tokens_per_second,
        CASE WHEN running AND r.rows_done OPERATOR(pg_catalog.>) 0 THEN
            pg_catalog.make_interval(secs => pg_catalog.round(
                (GREATEST(0, r.rows_total OPERATOR(pg_catalog.-) r.rows_done_before
                    OPERATOR(pg_catalog.-) r.rows_done OPERATOR(pg_catalog.-) r.rows_failed_before
                    OPERATOR(pg_catalog.-) r.rows_failed)::numeric
                 OPERATOR(pg_catalog.*) secs::numeric OPERATOR(pg_catalog./) r.rows_done::numeric))::double precision)
        END AS estimated_time_left,
        r.last_error AS current_error,
        r.updated_at
    FROM @extschema@.opus_job AS j
    LEFT JOIN LATERAL (
        SELECT * FROM @extschema@.opus_job_run AS x
        WHERE x.job_id OPERATOR(pg_catalog.=) j.id
        ORDER BY x.id DESC LIMIT 1) AS r ON true
    LEFT JOIN LATERAL (
        SELECT EXISTS (SELECT FROM pg_catalog.pg_locks AS k
                       WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory'
                         AND k.classid OPERATOR(pg_catalog.=) @extschema@.opus_job_lock_space()::pg_catalog.oid
                         AND k.objid OPERATOR(pg_catalog.=) j.id::pg_catalog.oid
                         AND k.objsubid OPERATOR(pg_catalog.=) 2
                         AND k.pid OPERATOR(pg_catalog.=) r.pid
                         AND k.granted) AS held
    ) AS l ON true
    LEFT JOIN LATERAL (
        SELECT l.held AND r.status OPERATOR(pg_catalog.=) 'running' AS running,
               pg_catalog.date_part('epoch',
                   CASE WHEN l.held THEN pg_catalog.clock_timestamp() ELSE COALESCE(r.ended_at, r.updated_at) END
                   OPERATOR(pg_catalog.-) COALESCE(r.generating_since, r.started_at)) AS secs
    ) AS s ON true;

COMMENT ON VIEW @extschema@.opus_job_progress IS 'each visible job''s latest run, in the style of pg_stat_progress_*: phase, rows total/done/failed/remaining, tokens, rates, estimated time left, last error';

GRANT SELECT ON @extschema@.opus_job_progress TO PUBLIC;
