-- Sentence embeddings from an embedding (encoder) model declared in
-- opus.models (docs/embeddings.md).  input_type ('query' or 'document')
-- puts the prefix the model's declaration gives (query_prefix,
-- document_prefix) before the input; it is required when there is one.
CREATE FUNCTION @extschema@.opus_embed(
    input text,
    model text DEFAULT NULL,
    "normalize" boolean DEFAULT true,
    truncate boolean DEFAULT false,
    input_type text DEFAULT NULL)
RETURNS real[]
AS 'MODULE_PATHNAME', 'opus_embed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_embed(text, text, boolean, boolean, text)
IS 'the sentence embedding of input from an embedding model (L2-normalised unless normalize is false); 54000 for an input longer than the model''s context unless truncate; input_type (query or document) picks the prefix the model declares, required when it declares one';

-- opus_embed_many: every input's embedding, "window" requests in flight so
-- the engine encodes them together; one row per input, in input order.
CREATE FUNCTION @extschema@.opus_embed_many(
    inputs text[],
    model text DEFAULT NULL,
    "normalize" boolean DEFAULT true,
    truncate boolean DEFAULT false,
    "window" integer DEFAULT NULL,
    input_type text DEFAULT NULL)
RETURNS TABLE(ordinal integer, embedding real[])
AS 'MODULE_PATHNAME', 'opus_embed_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_embed_many(text[], text, boolean, boolean, integer, text)
IS 'the embedding of every input (as opus_embed), keeping "window" requests in flight so the engine encodes them in one batch (NULL: up to 16); one row per input, in input order; any failure raises and cancels the rest';

-- Asynchronous embeddings (src/pg/async.c): opus_submit_embed queues the
-- request opus_embed would make and returns its id at once; the vector is
-- read with opus_result_embedding (or, as the OpenAI embeddings object with
-- usage and the model, opus_result_completion).
CREATE FUNCTION @extschema@.opus_submit_embed(
    input text,
    model text DEFAULT NULL,
    "normalize" boolean DEFAULT true,
    truncate boolean DEFAULT false,
    detached boolean DEFAULT true,
    input_type text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'opus_submit_embed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_submit_embed(text, text, boolean, boolean, boolean, text)
IS 'queue the embedding of input (as opus_embed) and return its request id at once; read it with opus_result_embedding or opus_result_completion';

CREATE FUNCTION @extschema@.opus_result_embedding(
    id bigint,
    wait boolean DEFAULT true,
    timeout interval DEFAULT NULL)
RETURNS real[]
AS 'MODULE_PATHNAME', 'opus_result_embedding'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_result_embedding(bigint, boolean, interval)
IS 'the vector of an asynchronous embedding request (opus_submit_embed), which is then forgotten; raises the request''s error; NULL if it has not finished (wait false, or timeout passed)';
