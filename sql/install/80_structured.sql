-- Structured output (docs/structured-output.md): the grammar a constraint
-- becomes.

CREATE FUNCTION @extschema@.opus_constraint_grammar(
    response_format jsonb DEFAULT NULL,
    grammar text DEFAULT NULL,
    regex text DEFAULT NULL,
    choices text[] DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'opus_constraint_grammar'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.opus_constraint_grammar(jsonb, text, text, text[])
IS 'the GBNF grammar (llama.cpp dialect) an output constraint becomes: response_format (OpenAI shape, JSON Schema), grammar, regex or choices, at most one; NULL when unconstrained';
