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

-- The parts of a job's run shared by opus_job_run (a procedure that
-- commits in chunks) and opus_job_step (one transaction).

-- The most rows of job j in flight at once: its concurrency; for an
-- embedding job, whose window is its token budget (opus_job_fill), the
-- largest concurrency (request slots, opus.max_async_requests, bound it too).
CREATE FUNCTION @extschema@.opus_job_window(j @extschema@.opus_job)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN @extschema@.opus_job_embeds(j.options) THEN 10000 ELSE j.concurrency END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_window(@extschema@.opus_job)
IS 'internal: how many rows of a job may be in flight (an embedding job: as many as its token budget takes)';

-- The tokens a row of an embedding job is counted as before the engine
-- has counted them: its bytes / 3 + 2 ([CLS], [SEP]), an upper estimate
-- for WordPiece (about 4-5 bytes per English token, 3 per CJK character).
CREATE FUNCTION @extschema@.opus_job_token_estimate(input text)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT pg_catalog.octet_length(input) OPERATOR(pg_catalog./) 3 OPERATOR(pg_catalog.+) 2
$$;

COMMENT ON FUNCTION @extschema@.opus_job_token_estimate(text)
IS 'internal: the tokens an embedding job counts a row as, against its batch_tokens budget';

-- Take in the source rows the work list does not have yet; returns how many.
CREATE FUNCTION @extschema@.opus_job_take_in(j @extschema@.opus_job)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    n bigint;
BEGIN
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
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_take_in(@extschema@.opus_job)
IS 'internal: add the source rows the job''s work list does not have yet; returns how many';

-- Submit up to need pending rows that are due and not in busy: submitted
-- rows are appended to req_*, rows that cannot be submitted to bad_*; no
-- free request slot (53000) stops it with slots_full.  taken: rows used.
-- An embedding job also stops where the rows in flight (req_items) and
-- those it takes would pass its token budget, batch_tokens (default 512,
-- rows counted by opus_job_token_estimate), but always takes one row when
-- none is in flight.
CREATE FUNCTION @extschema@.opus_job_fill(
    j @extschema@.opus_job,
    need integer,
    busy bigint[],
    INOUT req_ids bigint[],
    INOUT req_items bigint[],
    INOUT req_keys jsonb[],
    INOUT bad_items bigint[],
    INOUT bad_states text[],
    INOUT bad_errors text[],
    OUT taken integer,
    OUT slots_full boolean)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    it record;
    rid bigint;
    st text;
    msg text;
    embeds boolean := @extschema@.opus_job_embeds(j.options);
    budget bigint;
    in_flight bigint := 0;
BEGIN
    taken := 0;
    slots_full := false;
    IF embeds THEN
        budget := COALESCE((j.options OPERATOR(pg_catalog.->>) 'batch_tokens')::bigint, 512);
        SELECT COALESCE(pg_catalog.sum(@extschema@.opus_job_token_estimate(i.prompt)), 0) INTO in_flight
        FROM @extschema@.opus_job_item AS i
        WHERE i.job_id OPERATOR(pg_catalog.=) j.id AND i.item_id OPERATOR(pg_catalog.=) ANY (req_items);
    END IF;
    FOR it IN
        SELECT i.item_id, i.key, i.prompt FROM @extschema@.opus_job_item AS i
        WHERE i.job_id OPERATOR(pg_catalog.=) j.id AND i.state OPERATOR(pg_catalog.=) 'pending'
          AND (i.next_attempt_at IS NULL OR i.next_attempt_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp())
          AND i.item_id OPERATOR(pg_catalog.<>) ALL (busy)
        ORDER BY i.item_id
        LIMIT GREATEST(need, 0)
    LOOP
        IF it.prompt IS NULL THEN
            bad_items := pg_catalog.array_append(bad_items, it.item_id);
            bad_states := pg_catalog.array_append(bad_states, '22004');
            bad_errors := pg_catalog.array_append(bad_errors, 'the prompt of this row is null');
            taken := taken OPERATOR(pg_catalog.+) 1;
            CONTINUE;
        END IF;
        IF embeds THEN
            EXIT WHEN in_flight OPERATOR(pg_catalog.>) 0 AND in_flight OPERATOR(pg_catalog.+)
                @extschema@.opus_job_token_estimate(it.prompt) OPERATOR(pg_catalog.>) budget;
            in_flight := in_flight OPERATOR(pg_catalog.+) @extschema@.opus_job_token_estimate(it.prompt);
        END IF;
        BEGIN
            rid := CASE WHEN embeds THEN @extschema@.opus_job_submit_embed(it.prompt, j.options)
                        ELSE @extschema@.opus_job_submit(it.prompt, j.options) END;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
            rid := NULL;
        END;
        IF rid IS NULL THEN
            IF st OPERATOR(pg_catalog.=) '53000' THEN
                slots_full := true;     -- no request slot now: try again later
                EXIT;
            END IF;
            bad_items := pg_catalog.array_append(bad_items, it.item_id);
            bad_states := pg_catalog.array_append(bad_states, st);
            bad_errors := pg_catalog.array_append(bad_errors, msg);
        ELSE
            req_ids := pg_catalog.array_append(req_ids, rid);
            req_items := pg_catalog.array_append(req_items, it.item_id);
            req_keys := pg_catalog.array_append(req_keys, it.key);
        END IF;
        taken := taken OPERATOR(pg_catalog.+) 1;
    END LOOP;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_fill(@extschema@.opus_job, integer, bigint[], bigint[], bigint[], jsonb[], bigint[], text[], text[])
IS 'internal: submit up to need due pending rows of a job (not in busy) with its options';

-- Read the result of request rid (for item, key): appended to ok_* when it
-- succeeded (with the model and version that served it; an embedding as a
-- real[] literal), to bad_* with its error when not (error_state, NULL on
-- success).
CREATE FUNCTION @extschema@.opus_job_collect(
    rid bigint,
    item bigint,
    key jsonb,
    INOUT ok_items bigint[],
    INOUT ok_keys jsonb[],
    INOUT ok_outputs text[],
    INOUT ok_finish text[],
    INOUT ok_ptok integer[],
    INOUT ok_ctok integer[],
    INOUT ok_cached integer[],
    INOUT ok_model text[],
    INOUT ok_version integer[],
    INOUT bad_items bigint[],
    INOUT bad_states text[],
    INOUT bad_errors text[],
    OUT error_state text)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    res jsonb;
    msg text;
BEGIN
    BEGIN
        res := @extschema@.opus_result_completion(rid);
        error_state := NULL;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS error_state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
    END;
    IF error_state IS NULL THEN
        ok_items := pg_catalog.array_append(ok_items, item);
        ok_keys := pg_catalog.array_append(ok_keys, key);
        ok_outputs := pg_catalog.array_append(ok_outputs, COALESCE(
            res OPERATOR(pg_catalog.#>>) '{choices,0,text}',
            res OPERATOR(pg_catalog.#>>) '{choices,0,message,content}',
            pg_catalog.translate(res OPERATOR(pg_catalog.#>>) '{data,0,embedding}', '[]', '{}')));
        ok_finish := pg_catalog.array_append(ok_finish, res OPERATOR(pg_catalog.#>>) '{choices,0,finish_reason}');
        ok_ptok := pg_catalog.array_append(ok_ptok, (res OPERATOR(pg_catalog.#>>) '{usage,prompt_tokens}')::integer);
        ok_ctok := pg_catalog.array_append(ok_ctok, (res OPERATOR(pg_catalog.#>>) '{usage,completion_tokens}')::integer);
        ok_cached := pg_catalog.array_append(ok_cached,
            (res OPERATOR(pg_catalog.#>>) '{usage,prompt_tokens_details,cached_tokens}')::integer);
        ok_model := pg_catalog.array_append(ok_model, res OPERATOR(pg_catalog.->>) 'model');
        ok_version := pg_catalog.array_append(ok_version, (res OPERATOR(pg_catalog.->>) 'model_version')::integer);
    ELSE
        bad_items := pg_catalog.array_append(bad_items, item);
        bad_states := pg_catalog.array_append(bad_states, error_state);
        bad_errors := pg_catalog.array_append(bad_errors, msg);
    END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_job_collect(bigint, bigint, jsonb, bigint[], jsonb[], text[], text[], integer[], integer[], integer[], text[], integer[], bigint[], text[], text[])
IS 'internal: read a job request''s result into the rows done (ok_*) or failed (bad_*)';

-- One step: up to max_rows rows with at most the job's concurrency in
-- flight, a finished request's slot refilled at once, all in this one
-- transaction (results and done marks commit together or not at all).
CREATE FUNCTION @extschema@.opus_job_step(job_name text, max_rows integer DEFAULT 64)
RETURNS TABLE(rows_done bigint, rows_failed bigint, rows_pending bigint)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    j @extschema@.opus_job;
    rid bigint;
    pos integer;
    st text;
    n_taken integer;
    taken integer := 0;
    slots_full boolean := false;
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
    ok_model text[] := '{}';
    ok_version integer[] := '{}';
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
    PERFORM @extschema@.opus_job_take_in(j);

    LOOP
        -- Keep the window full while rows are left to take.
        IF NOT slots_full AND taken OPERATOR(pg_catalog.<) max_rows
           AND pg_catalog.cardinality(req_ids) OPERATOR(pg_catalog.<) @extschema@.opus_job_window(j) THEN
            SELECT * INTO req_ids, req_items, req_keys, bad_items, bad_states, bad_errors, n_taken, slots_full
            FROM @extschema@.opus_job_fill(j,
                LEAST(max_rows OPERATOR(pg_catalog.-) taken,
                      @extschema@.opus_job_window(j) OPERATOR(pg_catalog.-) pg_catalog.cardinality(req_ids)),
                req_items OPERATOR(pg_catalog.||) ok_items OPERATOR(pg_catalog.||) bad_items,
                req_ids, req_items, req_keys, bad_items, bad_states, bad_errors);
            taken := taken OPERATOR(pg_catalog.+) n_taken;
            -- Nothing due: drain what is in flight (an embedding job takes
            -- nothing while its token budget is full: not the end).
            IF n_taken OPERATOR(pg_catalog.=) 0 AND NOT slots_full
               AND (NOT @extschema@.opus_job_embeds(j.options)
                    OR pg_catalog.cardinality(req_ids) OPERATOR(pg_catalog.=) 0) THEN
                taken := max_rows;
            END IF;
        END IF;
        EXIT WHEN pg_catalog.cardinality(req_ids) OPERATOR(pg_catalog.=) 0;
        -- The next result that is ready.
        rid := @extschema@.opus_wait(req_ids, '1 second');
        CONTINUE WHEN rid IS NULL;
        pos := pg_catalog.array_position(req_ids, rid);
        SELECT * INTO ok_items, ok_keys, ok_outputs, ok_finish, ok_ptok, ok_ctok, ok_cached,
                      ok_model, ok_version, bad_items, bad_states, bad_errors, st
        FROM @extschema@.opus_job_collect(rid, req_items[pos], req_keys[pos],
            ok_items, ok_keys, ok_outputs, ok_finish, ok_ptok, ok_ctok, ok_cached,
            ok_model, ok_version, bad_items, bad_states, bad_errors);
        req_ids := pg_catalog.array_cat(req_ids[:pos OPERATOR(pg_catalog.-) 1], req_ids[pos OPERATOR(pg_catalog.+) 1:]);
        req_items := pg_catalog.array_cat(req_items[:pos OPERATOR(pg_catalog.-) 1], req_items[pos OPERATOR(pg_catalog.+) 1:]);
        req_keys := pg_catalog.array_cat(req_keys[:pos OPERATOR(pg_catalog.-) 1], req_keys[pos OPERATOR(pg_catalog.+) 1:]);
        slots_full := false;    -- a request slot was freed: fill again
    END LOOP;

    IF pg_catalog.cardinality(ok_items) OPERATOR(pg_catalog.>) 0 THEN
        PERFORM @extschema@.opus_job_write(j, ok_items, ok_keys, ok_outputs, ok_finish,
                                           ok_ptok, ok_ctok, ok_cached, ok_model, ok_version);
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
IS 'process up to max_rows pending rows of a job in this one transaction, keeping the job''s concurrency in flight (for a front such as PL/Proxy that cannot CALL opus_job_run); returns rows done and failed in this step and rows still pending';

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
