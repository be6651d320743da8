-- Expert load of a Mixture-of-Experts model (src/pg/experts.c): tokens the
-- engine's routers sent to each (layer, expert), totals since the last reset
-- or since another model was loaded.  Empty for a dense model.

CREATE FUNCTION @extschema@.opus_stat_experts_v1(
    OUT layer integer,
    OUT expert integer,
    OUT tokens bigint,
    OUT share double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'opus_stat_experts_v1'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.opus_stat_experts_v1()
IS 'tokens routed to each (layer, expert) of a Mixture-of-Experts model (API version 1 of pg_stat_opus_experts)';

CREATE VIEW @extschema@.pg_stat_opus_experts AS
    SELECT * FROM @extschema@.opus_stat_experts_v1();

GRANT SELECT ON @extschema@.pg_stat_opus_experts TO PUBLIC;

COMMENT ON VIEW @extschema@.pg_stat_opus_experts
IS 'expert load of a Mixture-of-Experts model: per layer and expert, the tokens routed to it and its share of the layer''s tokens (each token goes to top-k experts per layer); empty for a dense model';

CREATE FUNCTION @extschema@.pg_stat_opus_experts_reset()
RETURNS timestamp with time zone
AS 'MODULE_PATHNAME', 'opus_stat_experts_reset'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pg_stat_opus_experts_reset()
IS 'set the pg_stat_opus_experts totals to zero; returns the reset time';

REVOKE ALL ON FUNCTION @extschema@.pg_stat_opus_experts_reset() FROM PUBLIC;
