-- experts: pg_stat_opus_experts, the expert load of a Mixture-of-Experts
-- model.  The default model is dense: the view exists with its columns and
-- stays empty after generating.  (A MoE model: test/t/050_moe_experts.pl.)
SELECT opus_generate('The capital of France is', max_tokens => 3, temperature => 0) <> '' AS generated;
SELECT count(*) AS rows FROM pg_stat_opus_experts;
SELECT attname, format_type(atttypid, atttypmod) AS type
FROM pg_attribute
WHERE attrelid = 'pg_stat_opus_experts'::regclass AND attnum > 0
ORDER BY attnum;
SELECT has_table_privilege('public', 'pg_stat_opus_experts', 'SELECT') AS public_may_read,
       has_function_privilege('public', 'pg_stat_opus_experts_reset()', 'EXECUTE') AS public_may_reset;
SELECT pg_stat_opus_experts_reset() <= now() + interval '1 s' AS reset;
SELECT count(*) AS rows_after_reset FROM opus_stat_experts_v1();
