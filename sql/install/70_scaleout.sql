-- Scale-out: what a data node offers a PL/Proxy front (the opus_pg_proxy
-- extension, docs/scale-out.md).  A distributed job is the same job created
-- on every node over the node's own rows; the front drives it with
-- opus_job_step, one transaction per call, so a node that dies mid-step
-- loses that step only and its rows stay pending: each row is done once.

CREATE FUNCTION @extschema@.opus_model_identity(model text DEFAULT NULL)
RETURNS TABLE(model text, path text, file_size bigint, sha256 text)
AS 'MODULE_PATHNAME', 'opus_model_identity'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_model_identity(text)
IS 'the served model (NULL: the default) as name, file, size and SHA-256 of the file, so several nodes can be checked to serve the same model';

CREATE FUNCTION @extschema@.opus_job_step(job_name text, max_rows integer DEFAULT 64)
RETURNS TABLE(rows_done bigint, rows_failed bigint, rows_pending bigint)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    j @extschema@.opus_job;
    it record;
    rid bigint;
    res jsonb;
    st text;
    msg text;
    n_take integer;
    req_ids bigint[] := '{}';
    req_items bigint[] := '{}';
    req_keys jsonb[] := '{}';
    ok_items bigint[] := '{}';
    ok_keys jsonb[] := '{}';
    ok_outputs text[] := '{}';
    ok_finish text[] := '{}';
    ok_ptok integer[] := '{}';
    ok_ctok integer[] := '{}';
    ok_cached integer[] := '{}';
    bad_items bigint[] := '{}';
    bad_states text[] := '{}';
    bad_errors text[] := '{}';
    n_failed bigint := 0;
BEGIN
    j := @extschema@.opus_job_find(job_name);
    PERFORM @extschema@.opus_job_check_owner(j, 'run');
    PERFORM FROM @extschema@.opus_engine_status();     -- 55000 unless preloaded
    IF max_rows IS NULL OR max_rows OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'max_rows must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT @extschema@.opus_job_begin(j) THEN
        RAISE EXCEPTION 'opus job "%" is being run by another session', j.name
            USING ERRCODE = 'lock_not_available',
                  HINT = 'A job is driven either by opus_job_run or by opus_job_step calls, one at a time.';
    END IF;

    -- Take in the source rows the work list does not have yet (as opus_job_run).
    EXECUTE pg_catalog.format($m$
        INSERT INTO @extschema@.opus_job_item (job_id, owner, key, prompt)
        SELECT $1, $2, %1$s, %2$s
        FROM %3$s AS s
        WHERE %4$s
          AND NOT EXISTS (SELECT FROM @extschema@.opus_job_item AS i
                          WHERE i.job_id OPERATOR(pg_catalog.=) $1
                            AND i.key OPERATOR(pg_catalog.=) %1$s)
        ON CONFLICT (job_id, key) DO NOTHING$m$,
        @extschema@.opus_job_key_sql(j.key_columns, 's'),
        CASE WHEN j.prompt_template IS NOT NULL
             THEN pg_catalog.format('@extschema@.opus_render(%L, pg_catalog.to_jsonb(s))', j.prompt_template)
             ELSE '(' OPERATOR(pg_catalog.||) j.prompt_expression OPERATOR(pg_catalog.||) E'\n)::text' END,
        @extschema@.opus_job_source_sql(j),
        (SELECT pg_catalog.string_agg(pg_catalog.format('s.%I IS NOT NULL', c), ' AND ')
         FROM pg_catalog.unnest(j.key_columns) AS c))
    USING j.id, j.owner;

    -- Submit up to max_rows due rows (at most the job's concurrency at once).
    n_take := LEAST(max_rows, j.concurrency);
    FOR it IN
        SELECT i.item_id, i.key, i.prompt FROM @extschema@.opus_job_item AS i
        WHERE i.job_id OPERATOR(pg_catalog.=) j.id AND i.state OPERATOR(pg_catalog.=) 'pending'
          AND (i.next_attempt_at IS NULL OR i.next_attempt_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp())
        ORDER BY i.item_id
        LIMIT n_take
    LOOP
        IF it.prompt IS NULL THEN
            bad_items := pg_catalog.array_append(bad_items, it.item_id);
            bad_states := pg_catalog.array_append(bad_states, '22004');
            bad_errors := pg_catalog.array_append(bad_errors, 'the prompt of this row is null');
            CONTINUE;
        END IF;
        BEGIN
            rid := @extschema@.opus_job_submit(it.prompt, j.options);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
            rid := NULL;
        END;
        IF rid IS NULL THEN
            EXIT WHEN st OPERATOR(pg_catalog.=) '53000';    -- no slot now: the next step
            bad_items := pg_catalog.array_append(bad_items, it.item_id);
            bad_states := pg_catalog.array_append(bad_states, st);
            bad_errors := pg_catalog.array_append(bad_errors, msg);
        ELSE
            req_ids := pg_catalog.array_append(req_ids, rid);
            req_items := pg_catalog.array_append(req_items, it.item_id);
            req_keys := pg_catalog.array_append(req_keys, it.key);
        END IF;
    END LOOP;

    -- Collect every result.
    FOR pos IN 1 .. pg_catalog.cardinality(req_ids) LOOP
        BEGIN
            res := @extschema@.opus_result_completion(req_ids[pos]);
            st := NULL;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
        END;
        IF st IS NULL THEN
            ok_items := pg_catalog.array_append(ok_items, req_items[pos]);
            ok_keys := pg_catalog.array_append(ok_keys, req_keys[pos]);
            ok_outputs := pg_catalog.array_append(ok_outputs, COALESCE(
                res OPERATOR(pg_catalog.#>>) '{choices,0,text}',
                res OPERATOR(pg_catalog.#>>) '{choices,0,message,content}'));
            ok_finish := pg_catalog.array_append(ok_finish, res OPERATOR(pg_catalog.#>>) '{choices,0,finish_reason}');
            ok_ptok := pg_catalog.array_append(ok_ptok, (res OPERATOR(pg_catalog.#>>) '{usage,prompt_tokens}')::integer);
            ok_ctok := pg_catalog.array_append(ok_ctok, (res OPERATOR(pg_catalog.#>>) '{usage,completion_tokens}')::integer);
            ok_cached := pg_catalog.array_append(ok_cached,
                (res OPERATOR(pg_catalog.#>>) '{usage,prompt_tokens_details,cached_tokens}')::integer);
        ELSE
            bad_items := pg_catalog.array_append(bad_items, req_items[pos]);
            bad_states := pg_catalog.array_append(bad_states, st);
            bad_errors := pg_catalog.array_append(bad_errors, msg);
        END IF;
    END LOOP;

    IF pg_catalog.cardinality(ok_items) OPERATOR(pg_catalog.>) 0 THEN
        PERFORM @extschema@.opus_job_write(j, ok_items, ok_keys, ok_outputs, ok_finish,
                                           ok_ptok, ok_ctok, ok_cached);
    END IF;
    IF pg_catalog.cardinality(bad_items) OPERATOR(pg_catalog.>) 0 THEN
        n_failed := @extschema@.opus_job_fail(j, bad_items, bad_states, bad_errors);
    END IF;
    rows_done := pg_catalog.cardinality(ok_items);
    rows_failed := n_failed;
    SELECT pg_catalog.count(*) INTO rows_pending FROM @extschema@.opus_job_item AS i
    WHERE i.job_id OPERATOR(pg_catalog.=) j.id AND i.state OPERATOR(pg_catalog.=) 'pending';
    RETURN NEXT;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_step(text, integer)
IS 'process up to max_rows pending rows of a job in this one transaction (for a front such as PL/Proxy that cannot CALL opus_job_run); returns rows done and failed in this step and rows still pending';

CREATE FUNCTION @extschema@.opus_job_counts(job_name text)
RETURNS TABLE(rows_total bigint, rows_done bigint, rows_failed bigint, rows_pending bigint)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.count(*),
           pg_catalog.count(*) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'done'),
           pg_catalog.count(*) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'failed'),
           pg_catalog.count(*) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'pending')
    FROM @extschema@.opus_job_item AS i
    WHERE i.job_id OPERATOR(pg_catalog.=) (@extschema@.opus_job_find(job_name)).id
$$;

COMMENT ON FUNCTION @extschema@.opus_job_counts(text)
IS 'rows of a job''s work list by state (rows not yet taken in from the source are not counted until a run or step)';
