-- A queue shared by many tenants (SPEC §22).
-- `priority`: a higher one is claimed first within a queue (then available_at, then id).
-- `concurrency_key`: the runs of one key (a tenant, a user) are held to the key's limit in
-- tenure_concurrency_limits, if it has one, inside the claim.
ALTER TABLE tenure_runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tenure_runs ADD COLUMN concurrency_key TEXT;
-- The claim reads the queued runs in the order it takes them and stops at its limit.
CREATE INDEX tenure_runs_claim_order ON tenure_runs (priority DESC, available_at, id)
    WHERE status = 'queued';
-- The runs of a key by status: its running runs are counted by the claim, its running and
-- queued ones by `tenure concurrency`. Runs without a key are not in it.
CREATE INDEX tenure_runs_key ON tenure_runs (concurrency_key, status)
    WHERE concurrency_key IS NOT NULL;
-- At most max_running runs of a key run at once; a key without a row is not limited.
CREATE TABLE tenure_concurrency_limits (
    key         TEXT PRIMARY KEY,
    max_running INTEGER NOT NULL CHECK (max_running >= 0),
    updated_at  REAL NOT NULL
);
