-- 0.1.0 -> 0.2.0: job options "model" and "fallback" (docs/models.md):
-- opus_job_check_options and opus_job_submit, dropped and created again
-- with the text of sql/install/30_jobs.sql (only PL/pgSQL calls them).
DROP FUNCTION @extschema@.opus_job_check_options(jsonb);
DROP FUNCTION @extschema@.opus_job_submit(text, jsonb);

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

-- The job tables' identity sequences are dumped with them, so a restored
-- database goes on from the last ids (docs/overload.md).
SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_job_item_item_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_job_run_id_seq', '');

-- 0.1.0 -> 0.2.0: embedding jobs (docs/embeddings.md): options "embed",
-- "normalize", "truncate", "batch_tokens" (opus_job_check_options above,
-- opus_job_submit_embed), a real[] target (opus_job_create), and every
-- result's model and version in the work list (opus_job_write, which
-- takes them from opus_job_collect).
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

ALTER TABLE @extschema@.opus_job_item ADD COLUMN model text;
ALTER TABLE @extschema@.opus_job_item ADD COLUMN model_version integer;

DROP FUNCTION @extschema@.opus_job_write(@extschema@.opus_job, bigint[], jsonb[], text[], text[], integer[], integer[], integer[]);

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

DROP FUNCTION @extschema@.opus_job_create(text, regclass, text[], text, text, text, jsonb, integer, text, text, integer, interval, integer);

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
