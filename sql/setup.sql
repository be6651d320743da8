-- setup: the extension, and helpers the other tests use.
CREATE EXTENSION opus_pg;

-- try(q): run q (OTHERS does not cover query_canceled, hence both); 'ok' or 'SQLSTATE: message' (the error a caller would get).
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN query_canceled OR OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- sqlstate_of(q): just the SQLSTATE (for errors whose text the engine writes).
CREATE FUNCTION sqlstate_of(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN query_canceled OR OTHERS THEN
    RETURN SQLSTATE;
END $$;

-- The supervisor shows up as its own backend type, with no database.
-- (The request logger, connected to opus.database, is checked in stats.)
SELECT backend_type, datname FROM pg_stat_activity WHERE backend_type = 'opus_pg supervisor';

-- The engine comes up with the default model (loading it takes a moment
-- on a busy machine: wait up to 60 s for it, then show the state).
DO $$ BEGIN FOR i IN 1 .. 600 LOOP EXIT WHEN (SELECT state = 'ready' FROM opus_engine); PERFORM pg_sleep(0.1); END LOOP; END $$;
SELECT state, restarts, busy_slots, max_requests FROM opus_engine;
SELECT count(*) FROM opus_model;
SELECT state, engine_pid IS NOT NULL AS has_engine FROM opus_engine;
