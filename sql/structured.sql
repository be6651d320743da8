-- structured: output constraints (docs/structured-output.md) become one
-- GBNF grammar, checked before any request is queued; every error with its
-- SQLSTATE.

-- No constraint: NULL.
SELECT opus_constraint_grammar() IS NULL AS unconstrained;
SELECT opus_constraint_grammar(response_format => '{"type": "text"}') IS NULL AS text_is_unconstrained;

-- A JSON Schema in OpenAI's shape.
SELECT opus_constraint_grammar(response_format => '{"type": "json_schema", "json_schema": {"name": "sentiment", "strict": true, "schema": {"type": "object", "properties": {"label": {"enum": ["positive", "negative"]}, "score": {"type": "integer", "minimum": 0, "maximum": 10}}, "required": ["label", "score"], "additionalProperties": false}}}');
-- Any JSON object.
SELECT split_part(opus_constraint_grammar(response_format => '{"type": "json_object"}'), E'\n', 1) AS json_object_root;
-- A regular expression, choices, and a GBNF grammar as given.
SELECT opus_constraint_grammar(regex => '[A-Z]{2}-\d{3,4}');
SELECT opus_constraint_grammar(choices => ARRAY['yes', 'no', 'say "maybe"']);
SELECT opus_constraint_grammar(grammar => E'root ::= "a" b*\nb ::= [0-9]');
-- $ref recursion.
SELECT opus_constraint_grammar(response_format => '{"type": "json_schema", "json_schema": {"name": "tree", "schema": {"$defs": {"n": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "required": ["v"], "additionalProperties": false}}, "$ref": "#/$defs/n"}}}') ~ 'n-kids ::= "\[" space \(n ' AS kids_refer_to_n;

-- At most one kind: 22023.
SELECT try($$SELECT opus_constraint_grammar(regex => 'a', choices => ARRAY['a'])$$);
SELECT try($$SELECT opus_constraint_grammar(response_format => '{"type": "json_object"}', grammar => 'root ::= "x"')$$);
-- response_format: 22023 when malformed.
SELECT try($$SELECT opus_constraint_grammar(response_format => '{"type": "xml"}')$$);
SELECT try($$SELECT opus_constraint_grammar(response_format => '{"type": "json_schema", "json_schema": {"name": "x"}}')$$);
SELECT try($$SELECT opus_constraint_grammar(response_format => '[1, 2]')$$);
-- JSON Schema: unsupported keywords and formats name the keyword and its path (0A000).
SELECT try($$SELECT opus_constraint_grammar(response_format => '{"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}}}')$$);
SELECT try($$SELECT opus_constraint_grammar(response_format => '{"type": "json_schema", "json_schema": {"schema": {"type": "array", "items": {"type": "string", "format": "ipv4"}}}}')$$);
SELECT try($$SELECT opus_constraint_grammar(response_format => '{"type": "json_schema", "json_schema": {"schema": {"$ref": "https://example.com/s.json"}}}')$$);
-- JSON Schema: unsatisfiable or malformed (22023), too large (54000).
SELECT try($$SELECT opus_constraint_grammar(response_format => '{"type": "json_schema", "json_schema": {"schema": {"type": "integer", "minimum": 5, "maximum": 1}}}')$$);
SELECT try($$SELECT opus_constraint_grammar(response_format => '{"type": "json_schema", "json_schema": {"schema": {"$ref": "#/$defs/missing"}}}')$$);
SELECT try($$SELECT opus_constraint_grammar(response_format => '{"type": "json_schema", "json_schema": {"schema": {"type": "array", "maxItems": 100000}}}')$$);
SELECT try(format($$SELECT opus_constraint_grammar(response_format => %L)$$,
    '{"type": "json_schema", "json_schema": {"schema": ' || repeat('{"type": "array", "items": ', 70) || '{}' || repeat('}', 70) || '}}'));
-- regex: malformed (22023 with the offset), unsupported (0A000), too large (54000).
SELECT try($$SELECT opus_constraint_grammar(regex => 'a(b')$$);
SELECT try($$SELECT opus_constraint_grammar(regex => '[z-a]')$$);
SELECT try($$SELECT opus_constraint_grammar(regex => 'a(?=b)')$$);
SELECT try($$SELECT opus_constraint_grammar(regex => '(a)\1')$$);
SELECT try($$SELECT opus_constraint_grammar(regex => 'a{5000}')$$);
-- choices: empty, duplicated, an empty string, a NULL.
SELECT try($$SELECT opus_constraint_grammar(choices => ARRAY[]::text[])$$);
SELECT try($$SELECT opus_constraint_grammar(choices => ARRAY['a', 'b', 'a'])$$);
SELECT try($$SELECT opus_constraint_grammar(choices => ARRAY['a', ''])$$);
SELECT try($$SELECT opus_constraint_grammar(choices => ARRAY['a', NULL])$$);
-- grammar: malformed (22023 with line and column), left recursion, only the
-- empty string, undefined rule.
SELECT try($$SELECT opus_constraint_grammar(grammar => E'root ::= "a" (\n')$$);
SELECT try($$SELECT opus_constraint_grammar(grammar => 'root ::= root "a" | "b"')$$);
SELECT try($$SELECT opus_constraint_grammar(grammar => 'root ::= ""')$$);
SELECT try($$SELECT opus_constraint_grammar(grammar => 'root ::= x')$$);

-- The constraint as arguments of opus_generate and opus_chat (greedy, the
-- default model): the output matches it.
SELECT g ~ '^[A-Z]{2}-[0-9]{3}$' AS matches_regex
FROM (SELECT opus_generate('Your ticket number is', max_tokens => 16, temperature => 0,
    regex => '[A-Z]{2}-\d{3}') AS g) s;
SELECT g IN ('yes', 'no', 'maybe') AS is_a_choice
FROM (SELECT opus_generate('Is the sky blue? Answer:', max_tokens => 8, temperature => 0,
    choices => ARRAY['yes', 'no', 'maybe']) AS g) s;
SELECT g ~ '^(red|green|blue)!$' AS matches_grammar
FROM (SELECT opus_generate('My favourite colour is', max_tokens => 8, temperature => 0,
    grammar => E'root ::= colour "!"\ncolour ::= "red" | "green" | "blue"') AS g) s;
SELECT jsonb_typeof(j) AS type, jsonb_typeof(j->'name') AS name_type, jsonb_typeof(j->'age') AS age_type,
       (j->>'age')::int BETWEEN 0 AND 150 AS age_in_range,
       (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(j) k) AS keys
FROM (SELECT opus_generate('Alice is 30 years old. As JSON:', max_tokens => 64, temperature => 0,
    response_format => '{"type": "json_schema", "json_schema": {"name": "person", "schema": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 150}}, "required": ["name", "age"], "additionalProperties": false}}}')::jsonb AS j) s;
SELECT jsonb_typeof(opus_generate('A JSON object:', max_tokens => 64, temperature => 0,
    response_format => '{"type": "json_object"}')::jsonb) AS json_object;
SELECT c IN ('positive', 'negative') AS chat_is_a_choice
FROM (SELECT opus_chat('[{"role": "user", "content": "I love it! Positive or negative?"}]', max_tokens => 8,
    temperature => 0, choices => ARRAY['positive', 'negative']) AS c) s;
SELECT c ~ '^[0-9]{1,3}$' AS chat_matches_regex
FROM (SELECT opus_chat('[{"role": "user", "content": "How many legs does a spider have?"}]', max_tokens => 8,
    temperature => 0, regex => '[0-9]{1,3}') AS c) s;
-- opus_completion and opus_chat_completion: the same, in the OpenAI object.
SELECT r->'choices'->0->>'text' IN ('yes', 'no') AS completion_is_a_choice,
       r->'choices'->0->>'finish_reason' AS finish_reason
FROM (SELECT opus_completion('Is water wet? Answer:', max_tokens => 8, temperature => 0,
    choices => ARRAY['yes', 'no']) AS r) s;
SELECT jsonb_typeof(((r->'choices'->0->'message'->>'content')::jsonb)->'ok') AS chat_completion_ok_type
FROM (SELECT opus_chat_completion('[{"role": "user", "content": "Is the sky blue? Reply in JSON."}]', max_tokens => 32,
    temperature => 0, response_format => '{"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false}}}') AS r) s;
SELECT try($$SELECT opus_chat_completion('[{"role": "user", "content": "x"}]', regex => 'a', grammar => 'root ::= "a"')$$);
SELECT try($$SELECT opus_completion('x', grammar => 'root ::= ""')$$);
-- The streaming functions: the chunks together match the constraint.
SELECT string_agg(chunk, '') ~ '^[A-Z]{2}-[0-9]{3}$' AS stream_matches_regex
FROM opus_generate_stream('Your ticket number is', max_tokens => 16, temperature => 0,
    regex => '[A-Z]{2}-\d{3}') AS chunk;
SELECT string_agg(chunk, '') IN ('positive', 'negative') AS chat_stream_is_a_choice
FROM opus_chat_stream('[{"role": "user", "content": "I love it! Positive or negative?"}]', max_tokens => 8,
    temperature => 0, choices => ARRAY['positive', 'negative']) AS chunk;
SELECT try($$SELECT * FROM opus_generate_stream('x', regex => 'a', choices => ARRAY['a'])$$);
-- Asynchronous: opus_submit / opus_submit_chat take the constraint; the
-- result satisfies it.
SELECT opus_result(opus_submit('Your ticket number is', max_tokens => 16, temperature => 0,
    regex => '[A-Z]{2}-\d{3}')) ~ '^[A-Z]{2}-[0-9]{3}$' AS submit_matches_regex;
SELECT r->'choices'->0->'message'->>'content' IN ('positive', 'negative') AS submit_chat_is_a_choice,
       r->'choices'->0->>'finish_reason' AS finish_reason
FROM (SELECT opus_result_completion(opus_submit_chat('[{"role": "user", "content": "I love it! Positive or negative?"}]',
    max_tokens => 8, temperature => 0, choices => ARRAY['positive', 'negative'])) AS r) s;
SELECT jsonb_typeof((opus_result(opus_submit('A JSON object:', max_tokens => 64, temperature => 0,
    response_format => '{"type": "json_object"}')))::jsonb) AS submit_json_object;
SELECT try($$SELECT opus_submit('x', regex => 'a', choices => ARRAY['a'])$$);
SELECT try($$SELECT opus_submit_chat('[{"role": "user", "content": "x"}]', grammar => E'root ::= "a" (\n')$$);
SELECT count(*) AS nothing_queued FROM opus_async;
-- Set-based: every row satisfies the constraint.
SELECT count(*) AS rows, bool_and(output IN ('yes', 'no')) AS each_a_choice,
       bool_and(finish_reason = 'stop') AS each_stopped
FROM opus_generate_many(ARRAY['Is the sky blue? Answer:', 'Is fire cold? Answer:', 'Is water wet? Answer:'],
    max_tokens => 8, temperature => 0, choices => ARRAY['yes', 'no']);
SELECT ordinal, jsonb_typeof(output::jsonb -> 'ok') AS ok_type,
       (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(output::jsonb) k) AS keys
FROM opus_chat_many(ARRAY['[{"role": "user", "content": "Is the sky blue? Reply in JSON."}]',
                          '[{"role": "user", "content": "Is fire cold? Reply in JSON."}]']::jsonb[],
    max_tokens => 32, temperature => 0,
    response_format => '{"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false}}}')
ORDER BY ordinal;
SELECT key, output ~ '^[0-9]{1,3}$' AS matches_regex
FROM opus_generate_keyed('[{"key": "a", "prompt": "One plus one is"}, {"key": "b", "prompt": "Ten times ten is"}]',
    max_tokens => 8, temperature => 0, regex => '[0-9]{1,3}')
ORDER BY key;
-- the same prompt gives the same constrained output alone and in a set
SELECT (SELECT output FROM opus_generate_many(ARRAY['Your ticket number is', 'Is fire cold? Answer:', 'Your ticket number is'],
            max_tokens => 16, temperature => 0, regex => '[A-Z]{2}-\d{3}') WHERE ordinal = 3) =
       opus_generate('Your ticket number is', max_tokens => 16, temperature => 0, regex => '[A-Z]{2}-\d{3}') AS same_in_a_set;
SELECT try($$SELECT * FROM opus_generate_many(ARRAY['x'], regex => 'a', grammar => 'root ::= "a"')$$);
SELECT try($$SELECT * FROM opus_chat_many(ARRAY['[{"role": "user", "content": "x"}]']::jsonb[], choices => ARRAY['a', 'a'])$$);
SELECT try($$SELECT * FROM opus_generate_keyed('[{"key": 1, "prompt": "x"}]', regex => 'a(b')$$);
-- Jobs: the constraint as options ("choices" a JSON array); every row's
-- output satisfies it; a bad constraint is refused when the job is created.
CREATE TABLE structured_questions (id int PRIMARY KEY, q text);
INSERT INTO structured_questions VALUES (1, 'Is the sky blue?'), (2, 'Is fire cold?'), (3, 'Do fish swim?');
SELECT opus_job_create('structured_yes_no', 'structured_questions', '{id}', '{{q}} Answer:', 'structured_answers',
    options => '{"max_tokens": 8, "temperature": 0, "choices": ["yes", "no"]}') > 0 AS created;
CALL opus_job_run('structured_yes_no');
SELECT count(*) AS answers, bool_and(output IN ('yes', 'no')) AS each_a_choice FROM structured_answers;
SELECT opus_job_create('structured_json', 'structured_questions', '{id}', '{{q}} Reply in JSON.', 'structured_json_answers',
    options => '{"max_tokens": 32, "temperature": 0, "chat": true, "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false}}}}') > 0 AS created;
CALL opus_job_run('structured_json');
SELECT count(*) AS answers, bool_and(jsonb_typeof(output::jsonb -> 'ok') = 'boolean') AS each_valid FROM structured_json_answers;
SELECT try($$SELECT opus_job_create('structured_bad', 'structured_questions', '{id}', '{{q}}', 'structured_bad_answers',
    options => '{"regex": "a(b"}')$$);
SELECT try($$SELECT opus_job_create('structured_bad', 'structured_questions', '{id}', '{{q}}', 'structured_bad_answers',
    options => '{"regex": "a", "choices": ["a"]}')$$);
SELECT try($$SELECT opus_job_alter('structured_yes_no', options => '{"choices": []}')$$);
SELECT opus_job_drop('structured_yes_no', drop_target => true);
SELECT opus_job_drop('structured_json', drop_target => true);
DROP TABLE structured_questions;
-- {"type": "text"} and all NULL: no constraint.
SELECT length(opus_generate('Hello', max_tokens => 4, temperature => 0,
    response_format => '{"type": "text"}')) > 0 AS text_unconstrained;
-- Two kinds at once, a bad grammar (line:col), a bad regex, bad choices,
-- an unsupported schema keyword: refused before anything is queued.
SELECT try($$SELECT opus_generate('x', regex => 'a', choices => ARRAY['a'])$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "x"}]', grammar => 'root ::= "a"', response_format => '{"type": "json_object"}')$$);
SELECT try($$SELECT opus_generate('x', grammar => E'root ::= "a" (\n')$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "x"}]', grammar => 'root ::= x')$$);
SELECT try($$SELECT opus_generate('x', regex => 'a(b')$$);
SELECT try($$SELECT opus_chat('[{"role": "user", "content": "x"}]', choices => ARRAY['a', 'a'])$$);
SELECT try($$SELECT opus_generate('x', response_format => '{"type": "json_schema", "json_schema": {"schema": {"not": {}}}}')$$);

-- opus_classify: the output held to the labels (greedy), into text or an enum.
SELECT opus_classify('I love this product, it works great!', ARRAY['positive', 'negative']) IN ('positive', 'negative') AS is_a_label;
CREATE TYPE structured_mood AS ENUM ('happy', 'sad', 'angry');
SELECT pg_typeof(opus_classify('What a wonderful sunny day, I feel great.', NULL::structured_mood)) AS enum_type;
SELECT opus_classify('What a wonderful sunny day, I feel great.', NULL::structured_mood) IN ('happy', 'sad', 'angry') AS is_an_enum_label;
-- the same input, the same answer (greedy)
SELECT opus_classify('The package arrived broken.', ARRAY['refund', 'replacement', 'other']) =
       opus_classify('The package arrived broken.', ARRAY['refund', 'replacement', 'other']) AS greedy;
CREATE TEMP TABLE structured_reviews (id int, body text, mood structured_mood);
INSERT INTO structured_reviews VALUES (1, 'Terrible service, I am furious.', NULL), (2, 'I cried all day.', NULL);
UPDATE structured_reviews SET mood = opus_classify(body, NULL::structured_mood);
SELECT id, mood IS NOT NULL AS classified FROM structured_reviews ORDER BY id;
SELECT opus_classify(NULL, ARRAY['a', 'b']) IS NULL AS null_input;
-- opus_extract: JSON that parses and matches the schema.
SELECT jsonb_typeof(j) AS type, j ? 'name' AS has_name, jsonb_typeof(j->'age') AS age_type
FROM (SELECT opus_extract('Alice is 30 years old and lives in Paris.',
    '{"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 150}}, "required": ["name", "age"], "additionalProperties": false}',
    max_tokens => 64) AS j) s;
SELECT jsonb_typeof(opus_extract('Yes, it is.', '{"type": "boolean"}')) AS boolean_schema;
-- errors: labels empty, duplicated, with a NULL (22023 / 22004); a bad
-- schema (0A000 / 22023); output cut at max_tokens (22P02).
SELECT try($$SELECT opus_classify('x', ARRAY[]::text[])$$);
SELECT try($$SELECT opus_classify('x', ARRAY['a', 'a'])$$);
SELECT try($$SELECT opus_classify('x', ARRAY['a', NULL])$$);
SELECT try($$SELECT opus_classify('x', ARRAY[['a'], ['b']])$$);
SELECT try($$SELECT opus_extract('x', '{"type": "object", "properties": {"a": {"not": {}}}}')$$);
SELECT try($$SELECT opus_extract('x', '{"type": "integer", "minimum": 5, "maximum": 1}')$$);
SELECT try($$SELECT opus_extract('Alice is 30.', '{"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}', max_tokens => 2)$$);
SELECT try($$SELECT opus_extract('x', '{"type": "object"}', max_tokens => 0)$$);
DROP TABLE structured_reviews;
DROP TYPE structured_mood;
