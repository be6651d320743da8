-- Sentence embeddings from an embedding (encoder) model declared in
-- opus.models (docs/embeddings.md).
CREATE FUNCTION @extschema@.opus_embed(
    input text,
    model text DEFAULT NULL,
    "normalize" boolean DEFAULT true,
    truncate boolean DEFAULT false)
RETURNS real[]
AS 'MODULE_PATHNAME', 'opus_embed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.opus_embed(text, text, boolean, boolean)
IS 'the sentence embedding of input from an embedding model (L2-normalised unless normalize is false); 54000 for an input longer than the model''s context unless truncate';
