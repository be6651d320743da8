-- 0.1.0 -> 0.2.0: the request log's identity sequence is dumped with the
-- table, so a restored log goes on from its last id (docs/overload.md).
SELECT pg_catalog.pg_extension_config_dump('@extschema@.opus_requests_id_seq', '');

-- The request log keeps the role's name (username) and row-level security
-- matches rows to roles by it, not by oid: a dump restored into another
-- cluster shows each role only its own rows (docs/overload.md).
ALTER TABLE @extschema@.opus_requests ADD COLUMN username name;
UPDATE @extschema@.opus_requests q SET username = r.rolname
FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) q.userid;
DROP POLICY opus_requests_own ON @extschema@.opus_requests;
CREATE POLICY opus_requests_own ON @extschema@.opus_requests
    FOR SELECT
    USING (pg_catalog.pg_has_role(CURRENT_USER,
                                  pg_catalog.to_regrole(pg_catalog.quote_ident(username)), 'USAGE')
           OR pg_catalog.pg_has_role(CURRENT_USER, 'pg_read_all_stats', 'USAGE'));
