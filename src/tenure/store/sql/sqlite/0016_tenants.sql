-- A queue shared by many tenants (SPEC §22).
-- `priority`: a higher one is claimed first within a queue (then available_at, then id).
-- `concurrency_key`: the runs of one key (a tenant, a user) are held to the key's limit in
-- tenure_concurrency_limits, if it has one, inside the claim.
ALTER TABLE tenure_runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tenure_runs ADD COLUMN concurrency_key TEXT;
-- `fair_round`: the run's turn among the queued runs of its key at its priority, counted
-- from the round the queue had reached when it came (SPEC §22: runs of equal priority are
-- claimed round-robin by key; a key with ten thousand queued runs does not starve a key with
-- one). Set at enqueue, never changed.
ALTER TABLE tenure_runs ADD COLUMN fair_round INTEGER NOT NULL DEFAULT 0;
-- The claim reads the queued runs in the order it takes them and stops at its limit. It
-- replaces the index of queued runs by available_at (one index less for every claim and
-- enqueue to keep); `queue` at its end lets the count of queued runs per queue read it alone.
DROP INDEX IF EXISTS tenure_runs_claimable;
CREATE INDEX tenure_runs_claim_order
    ON tenure_runs (priority DESC, fair_round, available_at, id, queue) WHERE status = 'queued';
-- The runs of a key by status: its running runs are counted by the claim, its running and
-- queued ones by `tenure concurrency`, and an enqueue reads its key's last round. Runs
-- without a key are not in it.
CREATE INDEX tenure_runs_key ON tenure_runs (concurrency_key, status, priority, fair_round)
    WHERE concurrency_key IS NOT NULL;
-- At most max_running runs of a key run at once; a key without a row is not limited.
CREATE TABLE tenure_concurrency_limits (
    key         TEXT PRIMARY KEY,
    max_running INTEGER NOT NULL CHECK (max_running >= 0),
    updated_at  REAL NOT NULL
);
-- Cron schedules: each tick of a schedule that is not paused enqueues its request once.
-- `next_fire` is the next tick (the compare-and-set of a firing names the one it read);
-- `last_fire` the last tick fired, `last_run_id` its run, `fired` how many ticks fired.
CREATE TABLE tenure_schedules (
    name        TEXT PRIMARY KEY,
    cron        TEXT NOT NULL,
    timezone    TEXT NOT NULL,
    request     TEXT NOT NULL,
    paused      INTEGER NOT NULL DEFAULT 0,
    next_fire   REAL NOT NULL,
    last_fire   REAL,
    last_run_id TEXT,
    fired       INTEGER NOT NULL DEFAULT 0,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE INDEX tenure_schedules_due ON tenure_schedules (next_fire) WHERE paused = 0;
