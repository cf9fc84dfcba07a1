-- The same checks, written so that SQLite does not build a table to test them.
--
-- SQLite evaluates `x IN (a, b, c)` over three or more constants by filling a temporary
-- b-tree with the constants, once per execution of each statement that checks it. The run
-- table's checks held four such lists (status, termination reason, effect, and the finished
-- statuses, twice), so every INSERT of a run, and every UPDATE that set one of those
-- columns (a claim, a fence, a settle), built up to five of them before it wrote a row:
-- measured, more than half of the work of an enqueue's INSERT. As `x = a OR x = b OR …`
-- the same checks are a few comparisons. They accept and refuse exactly the same rows (each
-- column is NOT NULL; where it were NULL both forms give NULL, which a check lets pass).
--
-- A check cannot be changed in place: both tables are rebuilt as in 0011, with the same
-- columns in the same order (SELECT *: a column this copy does not know fails the migration
-- instead of being lost), then their indexes and trigger are made again.
CREATE TABLE tenure_runs_rebuilt (
    id                 TEXT PRIMARY KEY,
    queue              TEXT    NOT NULL,
    status             TEXT    NOT NULL CHECK (status = 'queued' OR status = 'running'
                           OR status = 'waiting_for_approval' OR status = 'waiting_for_input'
                           OR status = 'completed' OR status = 'failed'
                           OR status = 'cancelled'),
    termination_reason TEXT    NOT NULL DEFAULT '' CHECK (termination_reason = ''
                           OR termination_reason = 'completed'
                           OR termination_reason = 'max_iterations'
                           OR termination_reason = 'budget_exhausted'
                           OR termination_reason = 'policy_denied'
                           OR termination_reason = 'approval_denied'
                           OR termination_reason = 'provider_failed'
                           OR termination_reason = 'cancelled'
                           OR termination_reason = 'retries_exhausted'
                           OR termination_reason = 'not_retryable'),
    request            TEXT,
    idempotency_key    TEXT,
    claimed_by         TEXT    NOT NULL DEFAULT '',
    lease_expires      REAL,
    lease_token        INTEGER NOT NULL DEFAULT 0,
    requeue_count      INTEGER NOT NULL DEFAULT 0,
    available_at       REAL    NOT NULL,
    pending_effect     TEXT    NOT NULL DEFAULT '' CHECK (pending_effect = ''
                           OR pending_effect = 'read_only'
                           OR pending_effect = 'idempotent_write'
                           OR pending_effect = 'non_idempotent_write'),
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
    CHECK ((status = 'completed' OR status = 'failed' OR status = 'cancelled')
           = (termination_reason <> '')),
    CHECK ((status = 'completed' OR status = 'failed' OR status = 'cancelled')
           = (finished_at IS NOT NULL)),
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

CREATE TABLE tenure_workers_rebuilt (
    id                TEXT    PRIMARY KEY,
    host              TEXT    NOT NULL,
    pid               INTEGER NOT NULL,
    queues            TEXT,
    slots             INTEGER NOT NULL CHECK (slots >= 1),
    slots_in_use      INTEGER NOT NULL DEFAULT 0 CHECK (slots_in_use >= 0),
    heartbeat_seconds REAL    NOT NULL CHECK (heartbeat_seconds > 0),
    state             TEXT    NOT NULL DEFAULT 'running'
                          CHECK (state = 'running' OR state = 'stopping' OR state = 'stopped'),
    started_at        REAL    NOT NULL,
    last_seen         REAL    NOT NULL,
    stopped_at        REAL,
    -- A stopped row says when it stopped, and only a stopped row does.
    CHECK ((state = 'stopped') = (stopped_at IS NOT NULL))
);
INSERT INTO tenure_workers_rebuilt SELECT * FROM tenure_workers;
DROP TABLE tenure_workers;
ALTER TABLE tenure_workers_rebuilt RENAME TO tenure_workers;

CREATE INDEX tenure_workers_last_seen ON tenure_workers (last_seen);
