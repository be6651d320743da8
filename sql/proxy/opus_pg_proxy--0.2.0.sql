-- opus_pg_proxy: a PL/Proxy front for opus_pg data nodes (docs/scale-out.md).
--
-- Installed in the proxy database, next to plproxy, where the administrator
-- has defined the cluster "opus_cluster" with SQL/MED:
--
--   CREATE SERVER opus_cluster FOREIGN DATA WRAPPER plproxy
--       OPTIONS (p0 'host=node0 dbname=app', p1 'host=node1 dbname=app');
--   CREATE USER MAPPING FOR PUBLIC SERVER opus_cluster;   -- no password here
--   GRANT USAGE ON FOREIGN SERVER opus_cluster TO app_role;
--
-- The partition count is a power of two; a key belongs to partition
-- hashtext(key) & (count - 1), PL/Proxy's rule, so rows must be placed on
-- the nodes by the same rule (test/cluster/ does).  PL/Proxy connects to a
-- node as the calling role (no user in the mapping): on the nodes, each role
-- has the privileges it was granted there, and authentication is the
-- nodes' pg_hba.conf business.  The data nodes run opus_pg 0.2.0 or later
-- (opus_job_step, opus_job_counts, opus_model_identity).
\echo Use "CREATE EXTENSION opus_pg_proxy" to load this file. \quit

-- Calls routed by key ---------------------------------------------------------

CREATE FUNCTION @extschema@.opus_generate_on(
    key text,
    prompt text,
    max_tokens integer DEFAULT NULL,
    temperature double precision DEFAULT 1.0,
    top_p double precision DEFAULT 1.0,
    top_k integer DEFAULT 0,
    min_p double precision DEFAULT 0.0,
    presence_penalty double precision DEFAULT 0.0,
    frequency_penalty double precision DEFAULT 0.0,
    repetition_penalty double precision DEFAULT 1.0,
    seed bigint DEFAULT NULL,
    stop text[] DEFAULT NULL,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS text
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON pg_catalog.hashtext(key);
    SELECT opus_generate($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18);
$$;

COMMENT ON FUNCTION @extschema@.opus_generate_on(text, text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb, text, text, text[])
IS 'opus_generate on the node that owns key (PL/Proxy RUN ON hashtext(key)); options as opus_generate';

CREATE FUNCTION @extschema@.opus_chat_on(
    key text,
    messages jsonb,
    max_tokens integer DEFAULT NULL,
    temperature double precision DEFAULT 1.0,
    top_p double precision DEFAULT 1.0,
    top_k integer DEFAULT 0,
    min_p double precision DEFAULT 0.0,
    presence_penalty double precision DEFAULT 0.0,
    frequency_penalty double precision DEFAULT 0.0,
    repetition_penalty double precision DEFAULT 1.0,
    seed bigint DEFAULT NULL,
    stop text[] DEFAULT NULL,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL,
    tools jsonb DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS text
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON pg_catalog.hashtext(key);
    SELECT opus_chat($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19);
$$;

COMMENT ON FUNCTION @extschema@.opus_chat_on(text, jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], text, boolean, jsonb, jsonb, text, text, text[])
IS 'opus_chat on the node that owns key (PL/Proxy RUN ON hashtext(key)); options as opus_chat';

CREATE FUNCTION @extschema@.opus_generate_keyed_on(
    keys text[],
    prompts text[],
    max_tokens integer DEFAULT NULL,
    temperature double precision DEFAULT 1.0,
    top_p double precision DEFAULT 1.0,
    top_k integer DEFAULT 0,
    min_p double precision DEFAULT 0.0,
    presence_penalty double precision DEFAULT 0.0,
    frequency_penalty double precision DEFAULT 0.0,
    repetition_penalty double precision DEFAULT 1.0,
    seed bigint DEFAULT NULL,
    stop text[] DEFAULT NULL,
    "window" integer DEFAULT NULL,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS TABLE(key text, output text, finish_reason text,
              prompt_tokens integer, completion_tokens integer)
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    SPLIT keys, prompts;
    RUN ON pg_catalog.hashtext(keys);
    SELECT k.key OPERATOR(pg_catalog.#>>) '{}' AS key, k.output, k.finish_reason, k.prompt_tokens, k.completion_tokens
    FROM opus_generate_keyed(
        (SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('key', u.k, 'prompt', u.p) ORDER BY u.n)
         FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) WITH ORDINALITY AS u(k, p, n)),
        $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19) AS k;
$$;

COMMENT ON FUNCTION @extschema@.opus_generate_keyed_on(text[], text[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean, jsonb, text, text, text[])
IS 'opus_generate_keyed over (key, prompt) pairs: each pair on the node that owns its key (PL/Proxy SPLIT), batched there; one row per pair';

-- Internal: opus_generate_many on each node over its share of the items (PL/Proxy SPLIT);
-- ordinals carry each item's place in the caller's arrays.
CREATE FUNCTION @extschema@.opus_generate_many_split(
    keys text[],
    prompts text[],
    ordinals integer[],
    max_tokens integer,
    temperature double precision,
    top_p double precision,
    top_k integer,
    min_p double precision,
    presence_penalty double precision,
    frequency_penalty double precision,
    repetition_penalty double precision,
    seed bigint,
    stop text[],
    "window" integer,
    model text,
    fallback boolean,
    response_format jsonb,
    grammar text,
    regex text,
    choices text[])
RETURNS TABLE(ordinal integer, key text, output text, finish_reason text,
              prompt_tokens integer, completion_tokens integer)
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    SPLIT keys, prompts, ordinals;
    RUN ON pg_catalog.hashtext(keys);
    SELECT ($3)[g.ordinal] AS ordinal, ($1)[g.ordinal] AS key, g.output, g.finish_reason,
           g.prompt_tokens, g.completion_tokens
    FROM opus_generate_many($2, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20) AS g;
$$;

COMMENT ON FUNCTION @extschema@.opus_generate_many_split(text[], text[], integer[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean, jsonb, text, text, text[])
IS 'internal: opus_generate_many on every node over the items whose key it owns (used by opus_generate_many_on)';

CREATE FUNCTION @extschema@.opus_generate_many_on(
    keys text[],
    prompts text[],
    max_tokens integer DEFAULT NULL,
    temperature double precision DEFAULT 1.0,
    top_p double precision DEFAULT 1.0,
    top_k integer DEFAULT 0,
    min_p double precision DEFAULT 0.0,
    presence_penalty double precision DEFAULT 0.0,
    frequency_penalty double precision DEFAULT 0.0,
    repetition_penalty double precision DEFAULT 1.0,
    seed bigint DEFAULT NULL,
    stop text[] DEFAULT NULL,
    "window" integer DEFAULT NULL,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS TABLE(ordinal integer, key text, output text, finish_reason text,
              prompt_tokens integer, completion_tokens integer)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
BEGIN
    IF pg_catalog.num_nulls(pg_catalog.cardinality(keys), pg_catalog.cardinality(prompts)) OPERATOR(pg_catalog.=) 1
       OR pg_catalog.cardinality(keys) OPERATOR(pg_catalog.<>) pg_catalog.cardinality(prompts) THEN
        RAISE EXCEPTION 'keys and prompts must have the same number of elements'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF COALESCE(pg_catalog.cardinality(keys), 0) OPERATOR(pg_catalog.=) 0 THEN
        RETURN;
    END IF;
    IF pg_catalog.array_position(keys, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'a key must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    RETURN QUERY
        SELECT s.ordinal, s.key, s.output, s.finish_reason, s.prompt_tokens, s.completion_tokens
        FROM @extschema@.opus_generate_many_split(keys, prompts,
            ARRAY(SELECT pg_catalog.generate_series(1, pg_catalog.cardinality(keys))),
            max_tokens, temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty,
            repetition_penalty, seed, stop, "window", model, fallback,
            response_format, grammar, regex, choices) AS s
        ORDER BY s.ordinal;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_generate_many_on(text[], text[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean, jsonb, text, text, text[])
IS 'opus_generate_many with a key per item: each item on the node that owns its key, batched there with the node''s other items, all nodes at once; one row per item in input order; any failure raises';

-- Internal: opus_chat_many on each node over its share of the items (PL/Proxy SPLIT);
-- ordinals carry each item's place in the caller's arrays.
CREATE FUNCTION @extschema@.opus_chat_many_split(
    keys text[],
    conversations jsonb[],
    ordinals integer[],
    max_tokens integer,
    temperature double precision,
    top_p double precision,
    top_k integer,
    min_p double precision,
    presence_penalty double precision,
    frequency_penalty double precision,
    repetition_penalty double precision,
    seed bigint,
    stop text[],
    "window" integer,
    model text,
    fallback boolean,
    tools jsonb,
    response_format jsonb,
    grammar text,
    regex text,
    choices text[])
RETURNS TABLE(ordinal integer, key text, output text, finish_reason text,
              prompt_tokens integer, completion_tokens integer)
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    SPLIT keys, conversations, ordinals;
    RUN ON pg_catalog.hashtext(keys);
    SELECT ($3)[g.ordinal] AS ordinal, ($1)[g.ordinal] AS key, g.output, g.finish_reason,
           g.prompt_tokens, g.completion_tokens
    FROM opus_chat_many($2, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21) AS g;
$$;

COMMENT ON FUNCTION @extschema@.opus_chat_many_split(text[], jsonb[], integer[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean, jsonb, jsonb, text, text, text[])
IS 'internal: opus_chat_many on every node over the items whose key it owns (used by opus_chat_many_on)';

CREATE FUNCTION @extschema@.opus_chat_many_on(
    keys text[],
    conversations jsonb[],
    max_tokens integer DEFAULT NULL,
    temperature double precision DEFAULT 1.0,
    top_p double precision DEFAULT 1.0,
    top_k integer DEFAULT 0,
    min_p double precision DEFAULT 0.0,
    presence_penalty double precision DEFAULT 0.0,
    frequency_penalty double precision DEFAULT 0.0,
    repetition_penalty double precision DEFAULT 1.0,
    seed bigint DEFAULT NULL,
    stop text[] DEFAULT NULL,
    "window" integer DEFAULT NULL,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL,
    tools jsonb DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS TABLE(ordinal integer, key text, output text, finish_reason text,
              prompt_tokens integer, completion_tokens integer)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
BEGIN
    IF pg_catalog.num_nulls(pg_catalog.cardinality(keys), pg_catalog.cardinality(conversations)) OPERATOR(pg_catalog.=) 1
       OR pg_catalog.cardinality(keys) OPERATOR(pg_catalog.<>) pg_catalog.cardinality(conversations) THEN
        RAISE EXCEPTION 'keys and conversations must have the same number of elements'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF COALESCE(pg_catalog.cardinality(keys), 0) OPERATOR(pg_catalog.=) 0 THEN
        RETURN;
    END IF;
    IF pg_catalog.array_position(keys, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'a key must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    RETURN QUERY
        SELECT s.ordinal, s.key, s.output, s.finish_reason, s.prompt_tokens, s.completion_tokens
        FROM @extschema@.opus_chat_many_split(keys, conversations,
            ARRAY(SELECT pg_catalog.generate_series(1, pg_catalog.cardinality(keys))),
            max_tokens, temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty,
            repetition_penalty, seed, stop, "window", model, fallback,
            tools, response_format, grammar, regex, choices) AS s
        ORDER BY s.ordinal;
END
$$;

COMMENT ON FUNCTION @extschema@.opus_chat_many_on(text[], jsonb[], integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], integer, text, boolean, jsonb, jsonb, text, text, text[])
IS 'opus_chat_many with a key per item: each item on the node that owns its key, batched there with the node''s other items, all nodes at once; one row per item in input order; any failure raises';

-- Asynchronous requests routed by key --------------------------------------------
-- A request id is the id of the node that owns key: pass the same key to
-- read, wait for or cancel it.  PL/Proxy keeps one connection per node and
-- proxy backend, so detached => false ties a request to that connection.

CREATE FUNCTION @extschema@.opus_submit_on(
    key text,
    prompt text,
    max_tokens integer DEFAULT NULL,
    temperature double precision DEFAULT 1.0,
    top_p double precision DEFAULT 1.0,
    top_k integer DEFAULT 0,
    min_p double precision DEFAULT 0.0,
    presence_penalty double precision DEFAULT 0.0,
    frequency_penalty double precision DEFAULT 0.0,
    repetition_penalty double precision DEFAULT 1.0,
    seed bigint DEFAULT NULL,
    stop text[] DEFAULT NULL,
    detached boolean DEFAULT true,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON pg_catalog.hashtext(key);
    SELECT opus_submit($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19);
$$;

COMMENT ON FUNCTION @extschema@.opus_submit_on(text, text, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], boolean, text, boolean, jsonb, text, text, text[])
IS 'opus_submit on the node that owns key; the id is that node''s: read it with opus_result_on(key, id)';

CREATE FUNCTION @extschema@.opus_submit_chat_on(
    key text,
    messages jsonb,
    max_tokens integer DEFAULT NULL,
    temperature double precision DEFAULT 1.0,
    top_p double precision DEFAULT 1.0,
    top_k integer DEFAULT 0,
    min_p double precision DEFAULT 0.0,
    presence_penalty double precision DEFAULT 0.0,
    frequency_penalty double precision DEFAULT 0.0,
    repetition_penalty double precision DEFAULT 1.0,
    seed bigint DEFAULT NULL,
    stop text[] DEFAULT NULL,
    detached boolean DEFAULT true,
    model text DEFAULT NULL,
    fallback boolean DEFAULT NULL,
    tools jsonb DEFAULT NULL,
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON pg_catalog.hashtext(key);
    SELECT opus_submit_chat($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20);
$$;

COMMENT ON FUNCTION @extschema@.opus_submit_chat_on(text, jsonb, integer, double precision, double precision, integer, double precision, double precision, double precision, double precision, bigint, text[], boolean, text, boolean, jsonb, jsonb, text, text, text[])
IS 'opus_submit_chat on the node that owns key; the id is that node''s: read it with opus_result_on(key, id)';

CREATE FUNCTION @extschema@.opus_result_on(
    key text,
    id bigint,
    wait boolean DEFAULT true,
    timeout interval DEFAULT NULL)
RETURNS text
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON pg_catalog.hashtext(key);
    SELECT opus_result($2, $3, $4);
$$;

COMMENT ON FUNCTION @extschema@.opus_result_on(text, bigint, boolean, interval)
IS 'opus_result on the node that owns key (the id opus_submit_on returned for that key)';

CREATE FUNCTION @extschema@.opus_result_completion_on(
    key text,
    id bigint,
    wait boolean DEFAULT true,
    timeout interval DEFAULT NULL)
RETURNS jsonb
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON pg_catalog.hashtext(key);
    SELECT opus_result_completion($2, $3, $4);
$$;

COMMENT ON FUNCTION @extschema@.opus_result_completion_on(text, bigint, boolean, interval)
IS 'opus_result_completion on the node that owns key';

CREATE FUNCTION @extschema@.opus_cancel_on(key text, id bigint)
RETURNS boolean
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON pg_catalog.hashtext(key);
    SELECT opus_cancel($2);
$$;

COMMENT ON FUNCTION @extschema@.opus_cancel_on(text, bigint)
IS 'opus_cancel on the node that owns key';

-- Model identity --------------------------------------------------------------

CREATE FUNCTION @extschema@.opus_cluster_models(model text DEFAULT NULL)
RETURNS TABLE(node integer, model text, path text, file_size bigint, sha256 text)
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON ALL;
    SELECT pg_catalog.current_setting('opus_pg_proxy.node', true)::integer AS node, m.*
    FROM opus_model_identity($1) AS m;
$$;

COMMENT ON FUNCTION @extschema@.opus_cluster_models(text)
IS 'the model each node serves (name, file, size, SHA-256), one row per node; fails if a node cannot be reached';

CREATE FUNCTION @extschema@.opus_cluster_check_models(model text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    n_nodes integer;
    n_ids integer;
    ids text;
BEGIN
    SELECT pg_catalog.count(*), pg_catalog.count(DISTINCT (m.model, m.sha256)),
           pg_catalog.string_agg(pg_catalog.format('node %s: %s (%s)', COALESCE(m.node::text, '?'), m.model,
                                                   pg_catalog.left(m.sha256, 16)), '; ')
    INTO n_nodes, n_ids, ids
    FROM @extschema@.opus_cluster_models(model) AS m;
    IF n_ids OPERATOR(pg_catalog.<>) 1 THEN
        RAISE EXCEPTION 'the nodes of opus_cluster do not serve the same model'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = ids,
                  HINT = 'Install the same model file on every node (same name and SHA-256) before a distributed job.';
    END IF;
    RETURN (SELECT m.sha256 FROM @extschema@.opus_cluster_models(model) AS m LIMIT 1);
END
$$;

COMMENT ON FUNCTION @extschema@.opus_cluster_check_models(text)
IS 'raise 55000 unless every node serves the same model (name and file SHA-256); returns the SHA-256';

-- Distributed jobs --------------------------------------------------------------
-- The same job on every node, each over the node's own rows of the source.

CREATE FUNCTION @extschema@.opus_cluster_job_create(
    name text,
    source text DEFAULT NULL,
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
RETURNS SETOF bigint
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON ALL;
    SELECT opus_job_create($1, $2::regclass, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13);
$$;

COMMENT ON FUNCTION @extschema@.opus_cluster_job_create(text, text, text[], text, text, text, jsonb, integer, text, text, integer, interval, integer)
IS 'opus_job_create on every node, with all its arguments (each node''s job over its own rows of source or source_query); one job id per node';

CREATE FUNCTION @extschema@.opus_cluster_job_step(name text, max_rows integer DEFAULT 64)
RETURNS TABLE(node integer, rows_done bigint, rows_failed bigint, rows_pending bigint)
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON ALL;
    SELECT pg_catalog.current_setting('opus_pg_proxy.node', true)::integer AS node, s.*
    FROM opus_job_step($1, $2) AS s;
$$;

COMMENT ON FUNCTION @extschema@.opus_cluster_job_step(text, integer)
IS 'one opus_job_step on every node at once (in parallel); fails if a node cannot be reached';

CREATE FUNCTION @extschema@.opus_cluster_job_step_on(part integer, name text, max_rows integer DEFAULT 64)
RETURNS TABLE(node integer, rows_done bigint, rows_failed bigint, rows_pending bigint)
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON part;
    SELECT pg_catalog.current_setting('opus_pg_proxy.node', true)::integer AS node, s.*
    FROM opus_job_step($2, $3) AS s;
$$;

COMMENT ON FUNCTION @extschema@.opus_cluster_job_step_on(integer, text, integer)
IS 'one opus_job_step on partition part only';

CREATE FUNCTION @extschema@.opus_cluster_job_counts(name text)
RETURNS TABLE(node integer, rows_total bigint, rows_done bigint, rows_failed bigint, rows_pending bigint)
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON ALL;
    SELECT pg_catalog.current_setting('opus_pg_proxy.node', true)::integer AS node, c.*
    FROM opus_job_counts($1) AS c;
$$;

COMMENT ON FUNCTION @extschema@.opus_cluster_job_counts(text)
IS 'a distributed job''s rows by state on every node';

CREATE FUNCTION @extschema@.opus_cluster_job_progress(name text)
RETURNS TABLE(nodes integer, rows_total bigint, rows_done bigint, rows_failed bigint, rows_pending bigint)
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$
    SELECT pg_catalog.count(*)::integer, pg_catalog.sum(c.rows_total)::bigint, pg_catalog.sum(c.rows_done)::bigint,
           pg_catalog.sum(c.rows_failed)::bigint, pg_catalog.sum(c.rows_pending)::bigint
    FROM @extschema@.opus_cluster_job_counts(name) AS c
$$;

COMMENT ON FUNCTION @extschema@.opus_cluster_job_progress(text)
IS 'a distributed job''s progress summed over the nodes';

-- Every job the caller can see on every node (the nodes' row-level security
-- applies: PL/Proxy connects as the calling role), and their sum per job.
CREATE FUNCTION @extschema@.opus_cluster_job_list()
RETURNS TABLE(node integer, job text, owner text, rows_total bigint, rows_done bigint,
              rows_failed bigint, rows_pending bigint)
LANGUAGE plproxy
AS $$
    CLUSTER 'opus_cluster';
    RUN ON ALL;
    SELECT pg_catalog.current_setting('opus_pg_proxy.node', true)::integer AS node,
           j.name AS job, j.owner::text AS owner,
           pg_catalog.count(i.item_id) AS rows_total,
           pg_catalog.count(i.item_id) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'done') AS rows_done,
           pg_catalog.count(i.item_id) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'failed') AS rows_failed,
           pg_catalog.count(i.item_id) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'pending') AS rows_pending
    FROM opus_job AS j LEFT JOIN opus_job_item AS i ON i.job_id OPERATOR(pg_catalog.=) j.id
    GROUP BY j.id, j.name, j.owner;
$$;

COMMENT ON FUNCTION @extschema@.opus_cluster_job_list()
IS 'every job the caller can see on every node, with its rows by state; one row per node and job';

CREATE VIEW @extschema@.opus_cluster_progress AS
    SELECT l.job, l.owner, pg_catalog.count(*)::integer AS nodes,
           pg_catalog.sum(l.rows_total)::bigint AS rows_total, pg_catalog.sum(l.rows_done)::bigint AS rows_done,
           pg_catalog.sum(l.rows_failed)::bigint AS rows_failed, pg_catalog.sum(l.rows_pending)::bigint AS rows_pending
    FROM @extschema@.opus_cluster_job_list() AS l
    GROUP BY l.job, l.owner;

COMMENT ON VIEW @extschema@.opus_cluster_progress
IS 'distributed jobs summed over the nodes that have them (rows not yet taken in from the source are counted after the first step)';

GRANT SELECT ON @extschema@.opus_cluster_progress TO PUBLIC;

-- Drive a distributed job to the end: every node steps at once; when a node
-- cannot be reached, the others go on one by one and the missing node is
-- retried every round until it is back or max_wait has passed.  Each row is
-- done exactly once (opus_job_step is one transaction on its node).
CREATE PROCEDURE @extschema@.opus_cluster_job_run(
    name text,
    step_rows integer DEFAULT 64,
    max_wait interval DEFAULT '10 minutes')
LANGUAGE plpgsql
AS $$
DECLARE
    n_parts integer;
    pending bigint;
    failing text;
    down_since timestamp with time zone;
    st text;
    msg text;
    r record;
BEGIN
    PERFORM @extschema@.opus_cluster_check_models();
    SELECT pg_catalog.count(*) INTO n_parts
    FROM pg_catalog.pg_foreign_server AS s, pg_catalog.unnest(s.srvoptions) AS o
    WHERE s.srvname OPERATOR(pg_catalog.=) 'opus_cluster' AND o OPERATOR(pg_catalog.~) '^p[0-9]+=';
    LOOP
        pending := 0;
        failing := NULL;
        BEGIN
            SELECT pg_catalog.sum(s.rows_pending) INTO pending
            FROM @extschema@.opus_cluster_job_step(name, step_rows) AS s;
        EXCEPTION WHEN OTHERS THEN
            -- A node is missing: step the others one by one.
            pending := 0;
            FOR p IN 0 .. n_parts OPERATOR(pg_catalog.-) 1 LOOP
                BEGIN
                    SELECT pg_catalog.sum(s.rows_pending) OPERATOR(pg_catalog.+) pending INTO pending
                    FROM @extschema@.opus_cluster_job_step_on(p, name, step_rows) AS s;
                EXCEPTION WHEN OTHERS THEN
                    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
                    IF st OPERATOR(pg_catalog.=) ANY (ARRAY['42704', '42725', '42501', '22023']) THEN
                        RAISE;      -- the job's own errors are not a missing node
                    END IF;
                    failing := COALESCE(failing OPERATOR(pg_catalog.||) '; ', '')
                               OPERATOR(pg_catalog.||) pg_catalog.format('partition %s: %s', p, msg);
                END;
            END LOOP;
        END;
        IF failing IS NULL THEN
            down_since := NULL;
            EXIT WHEN COALESCE(pending, 0) OPERATOR(pg_catalog.=) 0;
        ELSE
            down_since := COALESCE(down_since, pg_catalog.clock_timestamp());
            IF pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) down_since OPERATOR(pg_catalog.>) max_wait THEN
                RAISE EXCEPTION 'opus cluster job "%" stopped: a node has been unreachable for %', name, max_wait
                    USING ERRCODE = 'connection_failure',
                          DETAIL = failing,
                          HINT = 'The other nodes'' rows are done; run it again once the node is back: each row is done once.';
            END IF;
            RAISE NOTICE 'opus cluster job "%": %', name, failing;
            PERFORM pg_catalog.pg_sleep(0.5);
        END IF;
    END LOOP;
END
$$;

COMMENT ON PROCEDURE @extschema@.opus_cluster_job_run(text, integer, interval)
IS 'run a distributed job to the end on every node; waits up to max_wait for a node that is down; every row done once';
