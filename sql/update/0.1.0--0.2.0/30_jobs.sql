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
    FOR k IN SELECT pg_catalog.jsonb_object_keys(options) LOOP
        IF NOT k OPERATOR(pg_catalog.=) ANY (ARRAY['max_tokens', 'temperature', 'top_p', 'top_k', 'min_p',
                'presence_penalty', 'frequency_penalty', 'repetition_penalty', 'seed', 'stop',
                'system', 'chat', 'model', 'fallback', 'response_format', 'grammar', 'regex', 'choices']) THEN
            RAISE EXCEPTION 'unknown job option "%"', k
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Options are the arguments of opus_generate (max_tokens, temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty, repetition_penalty, seed, stop, model, fallback, response_format, grammar, regex, choices), plus "system" (a system message: the rows are sent as chat) and "chat" (true: send rows as chat).';
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
