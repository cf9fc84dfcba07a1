-- PostgreSQL's 0010 adds the column its one-statement step stores a per-step nonce in, to
-- tell a retry of a step whose commit it did not see. A SQLite commit is never in flight
-- on a network, so nothing here writes it; the column exists so that both dialects keep
-- one schema (the same columns at the same version).
ALTER TABLE tenure_runs ADD COLUMN step_nonce INTEGER;
