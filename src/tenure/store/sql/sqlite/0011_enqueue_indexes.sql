-- Fewer index pages written by every enqueue.
--
-- 1. Every enqueue wrote an entry into tenure_runs_listing that no query needed: queued runs
-- are found through tenure_runs_claimable, and the listing of runs scans the table. The
-- listing index now holds only runs that have left the queue (running, waiting, finished):
-- what the reaper, a worker's check of its claims and the counts read. A query names
-- `status <> 'queued'` for the planner to use it.
--
-- 2. `idempotency_key TEXT UNIQUE` kept an index entry for every run, key or none (NULL
-- entries too). A partial unique index holds only the runs that have a key. A column's
-- UNIQUE cannot be dropped in SQLite: the table is rebuilt with the same columns, in the
-- same order, and the same checks (SELECT *: a column this copy does not know fails the
-- migration instead of being lost), then its indexes and trigger are made again. Its
-- primary key index keeps its name (sqlite_autoindex_tenure_runs_1), which queries name.
DROP INDEX IF EXISTS tenure_runs_listing;

CREATE TABLE tenure_runs_rebuilt (
    id                 TEXT PRIMARY KEY,
    queue              TEXT    NOT NULL,
    status             TEXT    NOT NULL CHECK (status IN ('queued', 'running',
                           'waiting_for_approval', 'waiting_for_input',
                           'completed', 'failed', 'cancelled')),
    termination_reason TEXT    NOT NULL DEFAULT '' CHECK (termination_reason IN ('',
                           'completed', 'max_iterations', 'budget_exhausted', 'policy_denied',
                           'approval_denied', 'provider_failed', 'cancelled',
                           'retries_exhausted', 'not_retryable')),
    request            TEXT,
    idempotency_key    TEXT,
    claimed_by         TEXT    NOT NULL DEFAULT '',
    lease_expires      REAL,
    lease_token        INTEGER NOT NULL DEFAULT 0,
    requeue_count      INTEGER NOT NULL DEFAULT 0,
    available_at       REAL    NOT NULL,
    pending_effect     TEXT    NOT NULL DEFAULT '' CHECK (pending_effect IN ('',
                           'read_only', 'idempotent_write', 'non_idempotent_write')),
    attempt            INTEGER NOT NULL DEFAULT 0,
    error_class        TEXT    NOT NULL DEFAULT '',
    error              TEXT    NOT NULL DEFAULT '',
    output             TEXT,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cost               REAL    NOT NULL DEFAULT 0,
    last_sequence      INTEGER NOT NULL DEFAULT -1,
    created_at         REAL    NOT NULL,
    started_at         REAL,
    finished_at        REAL,
    updated_at         REAL    NOT NULL,
    waiting            TEXT,
    decision           TEXT,
    wait_deadline      REAL,
    unserved           INTEGER NOT NULL DEFAULT 0,
    fence_call         TEXT,
    fence_probe        INTEGER NOT NULL DEFAULT 0,
    step_nonce         INTEGER,
    -- A finished row says why it finished, and only a finished row does.
    CHECK ((status IN ('completed', 'failed', 'cancelled')) = (termination_reason <> '')),
    CHECK ((status IN ('completed', 'failed', 'cancelled')) = (finished_at IS NOT NULL)),
    -- Only a running row holds a lease, and every running row holds one.
    CHECK ((status = 'running') = (lease_expires IS NOT NULL)),
    CHECK (status <> 'running' OR claimed_by <> '')
);
INSERT INTO tenure_runs_rebuilt SELECT * FROM tenure_runs;
DROP TABLE tenure_runs;
ALTER TABLE tenure_runs_rebuilt RENAME TO tenure_runs;

CREATE UNIQUE INDEX tenure_runs_idempotency ON tenure_runs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX tenure_runs_claimable ON tenure_runs (available_at, queue) WHERE status = 'queued';
CREATE INDEX tenure_runs_listing_dequeued ON tenure_runs (status, termination_reason, created_at)
    WHERE status <> 'queued';
CREATE INDEX tenure_runs_finished ON tenure_runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX tenure_runs_waiting ON tenure_runs (wait_deadline)
    WHERE status IN ('waiting_for_approval', 'waiting_for_input');

CREATE TRIGGER tenure_deltas_left_running AFTER UPDATE OF status ON tenure_runs
WHEN NEW.status <> 'running'
BEGIN
    DELETE FROM tenure_deltas WHERE run_id = NEW.id;
END;
