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
