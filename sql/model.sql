-- model: what the engine has loaded, and its status.
SELECT name, architecture, parameters, tensor_type, context_length, vocab_size, n_layer, n_embd,
       path LIKE '%/extension/opus_pg/models/SmolLM2-135M-Instruct.Q4_1.gguf' AS default_path
FROM opus_model;
SELECT state, starts, restarts, last_error, busy_slots, engine_requests, max_requests,
       engine_pid <> supervisor_pid AS separate_process,
       ready_at >= started_at AS ready_after_start
FROM opus_engine;
-- The engine is a child of the supervisor, not of the postmaster.
SELECT count(*) FROM pg_stat_activity a, opus_engine e WHERE a.pid = e.engine_pid;
