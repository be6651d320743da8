-- embed: opus_embed on an embedding model declared in opus.models
-- (all-MiniLM-L6-v2, installed next to the default model by make install
-- after make model-minilm), checked against llama.cpp's vector for one text
-- (test/golden/embed/minilm.f32, row 1, not normalised), and every error.

ALTER SYSTEM SET opus.models = 'minilm = all-MiniLM-L6-v2; threads = 1';
SELECT pg_reload_conf();
DO $$
BEGIN
    FOR i IN 1..1200 LOOP
        EXIT WHEN (SELECT state FROM opus_models WHERE name = 'minilm') IN ('ready', 'failed');
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
SELECT name, state, architecture, last_error FROM opus_models WHERE name = 'minilm';
-- The model row says which models embed (and into how many dimensions).
SELECT name, kind, dimensions FROM opus_models ORDER BY name COLLATE "C";

-- llama.cpp's pooled vector for the first golden text.
CREATE TEMP TABLE golden AS
SELECT 'PostgreSQL needs a materialized view as expected.'::text AS input,
       '{-0.17957367,-0.347396791,-0.192741483,0.118901387,-0.503994763,-0.13074474,-0.219747379,-0.418212652,0.194249034,0.187641755,-0.0303646456,0.0813813433,-0.246166289,-0.280419618,-0.131376192,0.164509714,0.502928793,-0.356596202,0.204836413,-0.00233737449,-0.355041027,-0.046985738,-0.198700532,0.30387339,0.0410533138,-0.100977235,-0.0392290801,-0.0942904949,-0.0276319031,-0.217298195,-0.240784183,0.265512913,-0.0976976305,0.276814073,-0.131497368,0.117092274,0.133505449,-0.263763487,0.0114335408,-0.327695251,0.291209668,0.21406509,-0.287522495,0.0518231466,-0.0510373712,-0.505273819,-0.0120928921,-0.321894169,0.0834738538,-0.238632634,-0.736608922,0.18786104,0.0219681449,-0.194325015,-0.189141437,0.134837866,-0.398682147,-0.2217291,-0.0256419424,0.139763266,0.0244245287,0.151698366,0.224645823,0.0380587503,-0.437583536,0.236122236,0.125646234,0.0259496141,0.398166746,-0.0112231588,0.42404452,0.226905122,-0.481229812,-0.360836685,-0.37759456,-0.162927851,-0.134753764,-0.221570715,0.345341623,-0.0375325531,-0.133252457,0.0796531141,-0.28214404,-0.321696103,0.0890529454,-0.184872821,-0.147701249,-0.389140159,-0.138530567,-0.214920491,-0.130540311,0.479529828,-0.217986852,-0.0494108498,-0.376288354,-0.0211830176,0.263419837,0.0478729606,0.400744647,0.271845967,-0.0338765271,0.581984937,0.198582157,0.0957940221,-0.58973676,-0.48997438,-0.110190935,0.117791876,-0.537110865,-0.0611155033,0.235484958,-0.0295243077,-0.103876963,0.068961598,-0.193128482,0.213477939,0.0362326242,-0.19793354,0.142565817,-0.0978752226,0.352195472,0.150473401,0.0543216541,0.291447282,0.0291063692,-0.074919872,0.271542579,-5.76793882e-33,0.0675901324,0.0134846289,0.449929237,-0.0484303012,0.411423296,0.166477486,-0.112510674,0.288239449,0.204215035,0.221565261,-0.00755728642,0.195852146,0.0484127589,0.0771219581,-0.0439023897,0.0810483545,-0.296678901,0.329669744,-0.363419652,-0.0767170712,0.123325489,0.0338348709,-0.201893419,0.112953663,-0.132497489,0.524107695,0.144315198,0.40733397,-0.204171732,0.105208553,-0.0773954615,0.111890011,0.254013926,-0.137837738,0.0625146329,0.233748853,0.0999845117,-0.239540905,-0.012603038,-0.240228951,0.00443917513,0.195146754,0.0442253053,-0.219007686,-0.200840712,0.228891015,-0.108370401,0.398784429,-0.174244791,-0.00720388861,0.0762744844,-0.0384562537,-0.0245718006,0.190758079,-0.143689945,-0.270323664,-0.0315646976,0.178855181,0.191918463,0.46664682,-0.073427543,-0.419330567,-0.278069288,0.370761126,-0.179182395,0.360468179,0.0813669041,0.289715379,0.242610544,0.145480186,0.223780707,0.379141659,0.140315831,0.244111821,0.0269916113,-0.415489316,-0.350266993,0.0386987329,0.120835781,0.418814927,0.29758814,-0.257708371,0.0431364588,0.365108728,-0.194431096,-0.311721325,0.16701816,0.253243506,-0.300694019,-0.231755987,-0.252464801,0.233671904,0.631449521,-0.351664603,0.429017603,-1.43578171e-32,0.000250204961,-0.36605823,-0.0218324736,-0.114772946,0.113077804,-0.00692778686,0.140116692,0.0909714103,-0.182385713,-0.199162856,-0.263043791,-0.13522172,0.312691182,0.131828398,0.350511432,0.0314796753,0.287669778,-0.403460473,-0.650258005,0.438899249,0.0679283366,0.331782997,-0.0901860967,0.279586941,0.428839475,0.239342764,0.08695665,-0.0708498061,-0.310686678,0.269942582,0.0611226298,-0.27898699,-0.362965524,-0.174169928,-0.190379232,0.151584268,0.0386068672,0.0295240004,-0.0599131174,0.0998861939,-0.285825253,-0.0787847191,0.123801686,0.43160966,0.198471159,-0.0287874974,0.204317197,0.0504365899,0.0996611938,0.0468189456,-0.294665158,0.338270277,-0.305967867,0.104718812,0.197393447,-0.277927995,-0.335853189,-0.0950535163,-0.160776675,-0.394696832,-0.169761345,-0.132910296,-0.0731793493,-0.0609698147,0.0976932272,-0.454169095,0.108894296,-0.255095452,0.358658493,-0.221215621,-0.0403225869,-0.116667904,-0.310364127,0.0968121067,0.057894282,0.19102332,-0.0174678899,0.330901921,0.408488035,0.561013699,0.0556703508,-0.109073505,0.467846215,0.180144861,0.227121755,-0.493886024,-0.232183263,-0.193572924,-0.272556901,0.221917897,-0.0332058929,-0.313771069,-0.599409282,0.33599174,-0.13058804,-9.81190311e-08,-0.258129328,0.157785684,-0.218407646,0.160676286,0.141427696,-0.228461564,0.0953741148,0.18722178,-0.255100727,-0.276103556,-0.192581177,-0.323467612,-0.0247386396,0.0973621234,-0.063960284,-0.339049786,0.0828392655,-0.290909201,-0.311104029,-0.0476709753,-0.718871772,0.200892344,-0.197806537,-0.2974042,0.164372787,0.084040083,-0.445155591,0.116732106,0.397862703,0.119506024,0.385570675,-0.110872373,-0.0782916173,0.106317408,0.277385145,-0.319831818,0.505882442,0.293128788,-0.155872926,-0.550629437,-0.124150999,0.0189597718,0.0952344909,0.37956506,0.126682684,-0.0306227747,-0.139560655,-0.169365346,0.283976823,0.273200721,-0.267834008,-0.447820991,-0.176209688,-0.0198960435,0.0339465104,0.157231212,0.148770839,0.206924424,0.0356251672,-0.126523033,0.376519591,-0.345240712,-0.31232205,0.466019511}'::real[] AS v;

CREATE FUNCTION cosine(a real[], b real[]) RETURNS float8 LANGUAGE sql AS $$
    SELECT sum(x::float8 * y) / sqrt(sum(x::float8 * x) * sum(y::float8 * y))
    FROM unnest(a, b) AS u(x, y)
$$;
CREATE FUNCTION norm(a real[]) RETURNS float8 LANGUAGE sql AS $$
    SELECT sqrt(sum(x::float8 * x)) FROM unnest(a) AS u(x)
$$;

-- 384 dimensions, unit norm, the same direction as llama.cpp's.
SELECT array_length(e, 1) AS dims, abs(norm(e) - 1) < 1e-5 AS unit_norm,
       cosine(e, g.v) >= 0.9999 AS matches_llama_cpp
FROM golden g, LATERAL (SELECT opus_embed(g.input, model => 'minilm') AS e) s;
-- normalize => false: llama.cpp's pooled vector itself (its norm too).
SELECT abs(norm(e) - norm(g.v)) / norm(g.v) < 1e-3 AS same_norm,
       cosine(e, g.v) >= 0.9999 AS matches_llama_cpp
FROM golden g, LATERAL (SELECT opus_embed(g.input, model => 'minilm', "normalize" => false) AS e) s;
-- Deterministic, and similar texts are closer than unrelated ones.
SELECT opus_embed('hello world', 'minilm') = opus_embed('hello world', 'minilm') AS same;
SELECT cosine(opus_embed('A cat sits on the mat.', 'minilm'), opus_embed('A kitten is sitting on a rug.', 'minilm'))
     > cosine(opus_embed('A cat sits on the mat.', 'minilm'), opus_embed('Quarterly tax filings are due in April.', 'minilm')) AS closer;

-- Longer than the model's 512 tokens: 54000, unless truncate.
SELECT sqlstate_of($$SELECT opus_embed(repeat('word ', 600), 'minilm')$$);
SELECT array_length(opus_embed(repeat('word ', 600), 'minilm', truncate => true), 1) AS dims;

-- opus_embed_many: one row per input, in input order, each equal to opus_embed's.
SELECT m.ordinal, m.embedding = opus_embed(t.input, 'minilm') AS same_as_opus_embed
FROM opus_embed_many(ARRAY['hello world', 'PostgreSQL needs a materialized view as expected.', 'x', 'hello world'],
                     'minilm', "window" => 3) AS m
JOIN unnest(ARRAY['hello world', 'PostgreSQL needs a materialized view as expected.', 'x', 'hello world'])
     WITH ORDINALITY AS t(input, ordinal) ON t.ordinal = m.ordinal
ORDER BY m.ordinal;
SELECT count(*), bool_and(abs(norm(embedding) - norm(g.v)) / norm(g.v) < 1e-3) AS unnormalised
FROM golden g, opus_embed_many(ARRAY[g.input, g.input], 'minilm', "normalize" => false) AS m;
SELECT count(*) FROM opus_embed_many('{}'::text[], 'minilm');
SELECT sqlstate_of($$SELECT * FROM opus_embed_many(ARRAY['a', repeat('word ', 600)], 'minilm')$$);
SELECT count(*) FROM opus_embed_many(ARRAY['a', repeat('word ', 600)], 'minilm', truncate => true);
SELECT try($$SELECT * FROM opus_embed_many(ARRAY['a', NULL], 'minilm')$$);
SELECT try($$SELECT * FROM opus_embed_many(NULL, 'minilm')$$);
SELECT sqlstate_of($$SELECT * FROM opus_embed_many(ARRAY['a'])$$);

-- The wrong kind of model: 0A000 both ways; NULL input 22004; unknown model 42704.
SELECT sqlstate_of($$SELECT opus_embed('x')$$);
SELECT sqlstate_of($$SELECT opus_generate('x', model => 'minilm')$$);
SELECT sqlstate_of($$SELECT opus_chat('[{"role": "user", "content": "hi"}]', model => 'minilm')$$);
SELECT try($$SELECT opus_embed(NULL, 'minilm')$$);
SELECT try($$SELECT opus_embed('x', 'nope')$$);

-- Asynchronous: opus_submit_embed + opus_result_embedding give opus_embed's
-- vector; opus_result_completion the OpenAI embeddings object; opus_result
-- refuses an embedding (42809) without taking it, opus_result_embedding a
-- text request; errors come back from opus_result_embedding.
SELECT opus_submit_embed('hello world', 'minilm') AS rid \gset
SELECT sqlstate_of(format('SELECT opus_result(%s)', :rid)) AS text_reader;
SELECT opus_result_embedding(:rid) = opus_embed('hello world', 'minilm') AS same_as_opus_embed;
SELECT sqlstate_of(format('SELECT opus_result_embedding(%s)', :rid)) AS read_twice;
SELECT opus_submit_embed(g.input, 'minilm', "normalize" => false, detached => false) AS rid FROM golden g \gset
SELECT r->>'object' AS object, r->>'model' AS model, (r->>'model_version')::int AS model_version,
       (r#>>'{usage,prompt_tokens}')::int AS prompt_tokens,
       jsonb_array_length(r#>'{data,0,embedding}') AS dims,
       translate(r#>>'{data,0,embedding}', '[]', '{}')::real[] = opus_embed(g.input, 'minilm', "normalize" => false) AS exact,
       cosine(translate(r#>>'{data,0,embedding}', '[]', '{}')::real[], g.v) >= 0.9999 AS matches_llama_cpp
FROM golden g, LATERAL (SELECT opus_result_completion(:rid) AS r) s;
SELECT opus_submit(prompt => 'Hi', max_tokens => 1) AS rid \gset
SELECT sqlstate_of(format('SELECT opus_result_embedding(%s)', :rid)) AS embedding_reader;
SELECT opus_result(:rid) IS NOT NULL AS still_readable;
SELECT opus_submit_embed(repeat('word ', 600), 'minilm') AS rid \gset
SELECT sqlstate_of(format('SELECT opus_result_embedding(%s)', :rid)) AS too_long;
SELECT opus_submit_embed('x') AS rid \gset
SELECT sqlstate_of(format('SELECT opus_result_embedding(%s)', :rid)) AS generator;
SELECT try($$SELECT opus_submit_embed(NULL, 'minilm')$$);
SELECT try($$SELECT opus_submit_embed('x', 'nope')$$);
SELECT kind, count(*) FROM opus_async_requests() GROUP BY kind;

-- Observability: embedding calls count in pg_stat_opus under the model
-- (calls, prompt tokens, no completion tokens, times) and in the request
-- log with kind 'embed'.
CREATE TEMP TABLE embed_stats_before AS
SELECT coalesce(sum(calls), 0) AS calls, coalesce(sum(prompt_tokens), 0) AS ptok,
       coalesce(sum(errors), 0) AS errors
FROM pg_stat_opus WHERE model = 'minilm' AND userid = current_user::regrole;
SELECT count(*) AS embedded FROM opus_embed_many(ARRAY['one two three', 'four'], 'minilm');
SELECT array_length(opus_embed('hello world', 'minilm'), 1) AS dims;
SELECT sqlstate_of($$SELECT opus_embed(repeat('word ', 600), 'minilm')$$) AS too_long;
SELECT s.calls - b.calls AS calls, s.prompt_tokens - b.ptok AS prompt_tokens,
       s.errors - b.errors AS errors, s.completion_tokens, s.max_time > 0 AS timed
FROM pg_stat_opus s, embed_stats_before b
WHERE s.model = 'minilm' AND s.userid = current_user::regrole;
-- (every request counted there is logged: wait for the logger to write them all)
DO $$
BEGIN
    FOR i IN 1..400 LOOP
        EXIT WHEN (SELECT count(*) FROM opus_requests WHERE model = 'minilm' AND status <> 'running')
                = (SELECT sum(calls + errors + cancellations) FROM pg_stat_opus WHERE model = 'minilm');
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
-- (the generate and chat errors are the 0A000 calls above)
SELECT kind, model, status, CASE WHEN kind = 'embed' THEN params::text END AS embed_options,
       bool_and(prompt_tokens > 0) AS has_tokens,
       bool_and(completion_tokens IS NULL OR completion_tokens = 0) AS no_completion
FROM opus_requests WHERE model = 'minilm' AND status IN ('completed', 'error')
GROUP BY 1, 2, 3, 4
ORDER BY kind COLLATE "C", status COLLATE "C", CASE WHEN kind = 'embed' THEN params::text END COLLATE "C";
SELECT sum(prompt_tokens) = (SELECT sum(prompt_tokens) FROM pg_stat_opus WHERE model = 'minilm') AS same_tokens
FROM opus_requests WHERE model = 'minilm' AND status = 'completed';
-- The engine's counters (pg_stat_opus_engine): its encode calls and the tokens they encoded.
SELECT name, steps > 0 AS steps, prompt_tokens >= (SELECT sum(prompt_tokens) FROM opus_requests
                                                  WHERE model = 'minilm' AND status = 'completed') AS tokens
FROM pg_stat_opus_engine WHERE name = 'minilm';

-- An embedding job: the target column is real[], each row's vector is
-- opus_embed's, with the model and version recorded; a rerun does nothing;
-- new rows are taken; the token budget batches the window.
CREATE TABLE embed_docs (id integer PRIMARY KEY, body text);
INSERT INTO embed_docs SELECT i, 'Document number ' || i || ' is about ' ||
    (ARRAY['databases', 'cats', 'the weather', 'tax filings'])[1 + i % 4] FROM generate_series(1, 40) AS i;
SELECT opus_job_create('embed_docs', 'embed_docs', '{id}', '{{body}}', 'embed_docs_vec',
                       target_column => 'embedding',
                       options => '{"embed": true, "model": "minilm", "batch_tokens": 64}') > 0 AS created;
\d embed_docs_vec
CALL opus_job_run('embed_docs');
SELECT count(*) AS rows, count(DISTINCT id) AS ids, bool_and(array_length(embedding, 1) = 384) AS dims
FROM embed_docs_vec;
SELECT bool_and(v.embedding = opus_embed(d.body, 'minilm')) AS same_as_opus_embed
FROM embed_docs d JOIN embed_docs_vec v USING (id);
SELECT i.state, i.model, i.model_version, count(*), bool_and(i.prompt_tokens > 0) AS tokens,
       bool_and(i.completion_tokens IS NULL) AS no_completion
FROM opus_job_item i JOIN opus_job j ON j.id = i.job_id WHERE j.name = 'embed_docs'
GROUP BY 1, 2, 3;
SELECT phase, rows_total, rows_done, rows_failed, prompt_tokens > 0 AS tokens
FROM opus_job_progress WHERE job = 'embed_docs';
CREATE TEMP TABLE embed_before_rerun AS SELECT id, xmin::text AS x FROM embed_docs_vec;
INSERT INTO embed_docs VALUES (41, 'A late document'), (42, repeat('word ', 600));
CALL opus_job_run('embed_docs');
SELECT count(*) AS untouched FROM embed_docs_vec v JOIN embed_before_rerun b ON b.id = v.id AND b.x = v.xmin::text;
SELECT v.embedding = opus_embed('A late document', 'minilm') AS late_row FROM embed_docs_vec v WHERE id = 41;
SELECT state, last_sqlstate FROM opus_job_item i JOIN opus_job j ON j.id = i.job_id
WHERE j.name = 'embed_docs' AND (i.key->>'id')::int = 42;
-- truncate => true embeds it; a real[] target that exists is used as it is.
CREATE TABLE embed_vec2 (id integer PRIMARY KEY, embedding real[], note text);
SELECT opus_job_create('embed_docs2', 'embed_docs', '{id}', '{{body}}', 'embed_vec2', target_column => 'embedding',
                       options => '{"embed": true, "model": "minilm", "truncate": true, "normalize": false}') > 0 AS created;
SELECT * FROM opus_job_step('embed_docs2', max_rows => 50);
SELECT count(*) AS rows, bool_and(abs(norm(embedding) - 1) > 1e-3) AS unnormalised FROM embed_vec2;
SELECT v.embedding = opus_embed(d.body, 'minilm', "normalize" => false, truncate => true) AS same
FROM embed_docs d JOIN embed_vec2 v USING (id) WHERE id IN (3, 42) ORDER BY id;
-- Errors: options of generation, bad budget, a target column of another type.
SELECT try($$SELECT opus_job_create('e1', 'embed_docs', '{id}', '{{body}}', 'e1_out', options => '{"embed": true, "max_tokens": 4}')$$);
SELECT try($$SELECT opus_job_create('e2', 'embed_docs', '{id}', '{{body}}', 'e2_out', options => '{"embed": true, "batch_tokens": 0}')$$);
SELECT try($$SELECT opus_job_create('e3', 'embed_docs', '{id}', '{{body}}', 'embed_vec2', target_column => 'note', options => '{"embed": true}')$$);
SELECT try($$SELECT opus_job_create('e4', 'embed_docs', '{id}', '{{body}}', 'e4_out', options => '{"embed": "yes"}')$$);
-- The token budget: rows of 39 bytes count 39 / 3 + 2 = 15 tokens, so a
-- budget of 40 takes two rows, and none more while those two are in flight.
CREATE TABLE budget_docs (id integer PRIMARY KEY, body text);
INSERT INTO budget_docs SELECT i, repeat('x', 38) || i % 10 FROM generate_series(1, 5) AS i;
SELECT opus_job_create('budget', 'budget_docs', '{id}', '{{body}}', 'budget_vec', target_column => 'v',
                       options => '{"embed": true, "model": "minilm", "batch_tokens": 40}') > 0 AS created;
SELECT opus_job_take_in(j) AS taken_in FROM opus_job j WHERE j.name = 'budget';
CREATE TEMP TABLE budget_fill AS
SELECT f.* FROM opus_job j, opus_job_fill(j, 100, '{}', '{}', '{}', '{}', '{}', '{}', '{}') f WHERE j.name = 'budget';
SELECT taken, cardinality(req_ids) AS in_flight, opus_job_token_estimate(repeat('x', 39)) AS tokens_per_row
FROM budget_fill;
SELECT f2.taken AS taken_while_full
FROM opus_job j, budget_fill b,
     opus_job_fill(j, 100, b.req_items, '{}', b.req_items, '{}', '{}', '{}', '{}') f2 WHERE j.name = 'budget';
SELECT count(*) FILTER (WHERE array_length(opus_result_embedding(x), 1) = 384) AS read
FROM budget_fill, unnest(req_ids) AS x;
SELECT opus_job_drop('budget', drop_target => true);
DROP TABLE budget_docs;

-- (a pgvector vector target is tested by TAP 190 where pgvector is installed)
SELECT opus_job_drop('embed_docs', drop_target => true), opus_job_drop('embed_docs2');
DROP TABLE embed_docs, embed_vec2;

-- Query / document prefixes declared with the model (nomic's
-- 'search_query: ' / 'search_document: '): input_type picks one and is then
-- required; the text sent is the prefix and the input.
CREATE TEMP TABLE prefixed AS
SELECT opus_embed('search_query: how do cats sleep', 'minilm') AS q,
       opus_embed('search_document: Cats sleep most of the day.', 'minilm') AS d,
       opus_embed('how do cats sleep', 'minilm') AS plain;
SELECT opus_embed('x', 'minilm', input_type => 'query') = opus_embed('x', 'minilm') AS no_prefix_declared;
ALTER SYSTEM SET opus.models = 'minilm = all-MiniLM-L6-v2; threads = 1; query_prefix = ''search_query: ''; document_prefix = ''search_document: ''';
SELECT pg_reload_conf();
-- (the new declaration is in force once input_type is required)
DO $$
BEGIN
    FOR i IN 1..1200 LOOP
        BEGIN
            PERFORM opus_embed('x', 'minilm');
        EXCEPTION WHEN invalid_parameter_value THEN
            EXIT;
        END;
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
SELECT opus_embed('how do cats sleep', 'minilm', input_type => 'query') = p.q AS query_prefixed,
       opus_embed('Cats sleep most of the day.', 'minilm', input_type => 'document') = p.d AS document_prefixed,
       opus_embed('how do cats sleep', 'minilm', input_type => 'query') <> p.plain AS differs_from_plain
FROM prefixed p;
SELECT try($$SELECT opus_embed('how do cats sleep', 'minilm')$$);
SELECT try($$SELECT opus_embed('x', 'minilm', input_type => 'passage')$$);
SELECT m.embedding = p.d AS many_document
FROM prefixed p, opus_embed_many(ARRAY['Cats sleep most of the day.'], 'minilm', input_type => 'document') m;
SELECT opus_result_embedding(opus_submit_embed('how do cats sleep', 'minilm', input_type => 'query')) = p.q AS async_query
FROM prefixed p;
-- A job's rows are documents unless its options say "input_type": "query".
CREATE TABLE cat_docs (id integer PRIMARY KEY, body text);
INSERT INTO cat_docs VALUES (1, 'Cats sleep most of the day.');
SELECT opus_job_create('cat_docs', 'cat_docs', '{id}', '{{body}}', 'cat_vec', target_column => 'v',
                       options => '{"embed": true, "model": "minilm"}') > 0 AS created;
CALL opus_job_run('cat_docs');
SELECT v.v = p.d AS job_document FROM cat_vec v, prefixed p;
SELECT try($$SELECT opus_job_create('e5', 'cat_docs', '{id}', '{{body}}', 'e5_out', options => '{"embed": true, "input_type": "passage"}')$$);
SELECT opus_job_drop('cat_docs', drop_target => true);
DROP TABLE cat_docs;

DROP FUNCTION cosine(real[], real[]);
DROP FUNCTION norm(real[]);
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
