-- Several models served at once (docs/models.md): the model catalog view,
-- live swap and rollback.  Models are declared in opus.models.

CREATE FUNCTION @extschema@.opus_models_v1(
    OUT name text,
    OUT state text,
    OUT version integer,
    OUT path text,
    OUT architecture text,
    OUT parameters bigint,
    OUT tensor_type text,
    OUT context_length integer,
    OUT engine_pid integer,
    OUT rss_bytes bigint,
    OUT weights_bytes bigint,
    OUT kv_cache_bytes bigint,
    OUT threads integer,
    OUT ready_at timestamp with time zone,
    OUT restarts bigint,
    OUT last_error text,
    OUT previous_path text,
    OUT probation_until timestamp with time zone,
    OUT rollbacks bigint,
    OUT role text,
    OUT swapping_to text,
    OUT fallback text,
    OUT max_ttft_ms integer,
    OUT overloaded boolean,
    OUT recent_ttft_ms double precision,
    OUT fallback_requests bigint,
    OUT kind text,
    OUT dimensions integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_models_v1'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_models_v1()
IS 'one row per declared model (the default plus opus.models): state, version, file, engine, memory, rollback target, whether it generates or embeds (and its dimensions); paths and errors only for superusers and pg_read_all_settings';

CREATE VIEW @extschema@.opus_models AS
    SELECT * FROM @extschema@.opus_models_v1();

COMMENT ON VIEW @extschema@.opus_models IS 'the declared models and their state';

GRANT SELECT ON @extschema@.opus_models TO PUBLIC;

-- opus_model_info(name): the opus_models row of one model (42704 if none).
CREATE FUNCTION @extschema@.opus_model_info(name text)
RETURNS @extschema@.opus_models
LANGUAGE plpgsql VOLATILE STRICT PARALLEL RESTRICTED
AS $$
DECLARE
    r @extschema@.opus_models;
BEGIN
    SELECT * INTO r FROM @extschema@.opus_models_v1() m WHERE m.name OPERATOR(pg_catalog.=) $1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'opus model "%" does not exist', $1
            USING ERRCODE = 'undefined_object',
                  HINT = 'Models are declared in opus.models; SELECT name FROM opus_models lists them.';
    END IF;
    RETURN r;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_model_info(text)
IS 'the opus_models row of one declared model (default or a name of opus.models)';

CREATE FUNCTION @extschema@.opus_model_swap(name text, path text, canaries jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'opus_model_swap'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_model_swap(text, text, jsonb)
IS 'start path as the new version of model name beside the serving one; it takes over after a warm-up (canaries: [{"prompt", "expect", "max_tokens"}], default three fixed prompts), and the old version stays the rollback target for opus.model_probation';

REVOKE ALL ON FUNCTION @extschema@.opus_model_swap(text, text, jsonb) FROM PUBLIC;

CREATE FUNCTION @extschema@.opus_model_rollback(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'opus_model_rollback'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_model_rollback(text)
IS 'swap model name back to the version its last swap replaced (with the same warm-up)';

REVOKE ALL ON FUNCTION @extschema@.opus_model_rollback(text) FROM PUBLIC;
