-- The first schema. Times are seconds since the Unix epoch (REAL), read from SQLite's clock.
CREATE TABLE tenure_runs (
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
    idempotency_key    TEXT UNIQUE,
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
    -- A finished row says why it finished, and only a finished row does.
    CHECK ((status IN ('completed', 'failed', 'cancelled')) = (termination_reason <> '')),
    CHECK ((status IN ('completed', 'failed', 'cancelled')) = (finished_at IS NOT NULL)),
    -- Only a running row holds a lease, and every running row holds one.
    CHECK ((status = 'running') = (lease_expires IS NOT NULL)),
    CHECK (status <> 'running' OR claimed_by <> '')
);

-- What a claimer scans: only queued rows, in the order they become available.
CREATE INDEX tenure_runs_claimable ON tenure_runs (available_at, queue) WHERE status = 'queued';
-- What the reaper scans: only running rows, by lease expiry.
CREATE INDEX tenure_runs_leases ON tenure_runs (lease_expires) WHERE status = 'running';
CREATE INDEX tenure_runs_listing ON tenure_runs (status, termination_reason, created_at);
CREATE INDEX tenure_runs_finished ON tenure_runs (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE tenure_events (
    run_id     TEXT    NOT NULL,
    sequence   INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    created_at REAL    NOT NULL,
    PRIMARY KEY (run_id, sequence)
) WITHOUT ROWID;
