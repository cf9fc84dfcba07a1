-- Child runs (SPEC §21): a run knows its parent and the root of its tree, and a parent may
-- wait for its children without a lease or a slot (`waiting_for_children`).
--
-- The status check gains the new status; a check cannot be changed in place, so the run
-- table is rebuilt as in 0012, with the same columns in the same order (SELECT *: a column
-- this copy does not know fails the migration instead of being lost) and the two new ones
-- last, then its indexes and trigger are made again. `root_id` is NULL for a run without a
-- parent (read as its own id): no existing row has to be rewritten for it.
CREATE TABLE tenure_runs_rebuilt (
    id                 TEXT PRIMARY KEY,
    queue              TEXT    NOT NULL,
    status             TEXT    NOT NULL CHECK (status = 'queued' OR status = 'running'
                           OR status = 'waiting_for_approval' OR status = 'waiting_for_input'
                           OR status = 'waiting_for_children'
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
    deadline_token     INTEGER,
    parent_id          TEXT,
    root_id            TEXT,
    -- A finished row says why it finished, and only a finished row does.
    CHECK ((status = 'completed' OR status = 'failed' OR status = 'cancelled')
           = (termination_reason <> '')),
    CHECK ((status = 'completed' OR status = 'failed' OR status = 'cancelled')
           = (finished_at IS NOT NULL)),
    -- Only a running row holds a lease, and every running row holds one.
    CHECK ((status = 'running') = (lease_expires IS NOT NULL)),
    CHECK (status <> 'running' OR claimed_by <> '')
);
INSERT INTO tenure_runs_rebuilt SELECT *, NULL, NULL FROM tenure_runs;
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
CREATE INDEX tenure_runs_parent ON tenure_runs (parent_id) WHERE parent_id IS NOT NULL;
-- The children still going, by parent: what a settling child's trigger reads to learn
-- whether its parent still waits for one (it shrinks as they end, so that the last of a
-- thousand children does not read the 999 that ended before it).
CREATE INDEX tenure_runs_children_going ON tenure_runs (parent_id)
    WHERE parent_id IS NOT NULL
      AND NOT (status = 'completed' OR status = 'failed' OR status = 'cancelled');

CREATE TRIGGER tenure_deltas_left_running AFTER UPDATE OF status ON tenure_runs
WHEN NEW.status <> 'running'
BEGIN
    DELETE FROM tenure_deltas WHERE run_id = NEW.id;
END;

-- A child that becomes terminal, by whatever statement (a worker's settle, the reaper's
-- dead-letter, a cancel, an expired wait, ...), wakes its parent in that same transaction
-- if the parent waits for children and every child it waits for is now terminal. A
-- trigger, so that no transition can forget it. (SQLite runs one writer at a time: the
-- parent's own write that sets it waiting re-checks its children under the same lock.)
-- A child is looked up in the parent's `waiting` as its quoted id (a run id is a UUID,
-- which JSON writes as it is): parsing the whole list at every child's end cost more than
-- the child.
CREATE TRIGGER tenure_runs_wake_parent AFTER UPDATE OF status ON tenure_runs
WHEN NEW.parent_id IS NOT NULL
 AND (NEW.status = 'completed' OR NEW.status = 'failed' OR NEW.status = 'cancelled')
 AND NOT (OLD.status = 'completed' OR OLD.status = 'failed' OR OLD.status = 'cancelled')
BEGIN
    UPDATE tenure_runs
       SET status = 'queued', waiting = NULL,
           available_at = ((julianday('now') - 2440587.5) * 86400.0),
           updated_at = ((julianday('now') - 2440587.5) * 86400.0)
     WHERE id = NEW.parent_id AND status = 'waiting_for_children'
       AND NOT EXISTS (
           SELECT 1 FROM tenure_runs AS c
            WHERE c.parent_id = NEW.parent_id AND c.parent_id IS NOT NULL
              AND NOT (c.status = 'completed' OR c.status = 'failed'
                       OR c.status = 'cancelled')
              AND instr(tenure_runs.waiting, '"' || c.id || '"') > 0);
END;

-- A run that ends, however it ends, takes its children still going with it: they are
-- cancelled, each with a `cancelled` event naming the parent, in the same transaction.
-- Their own children follow through this same trigger (the store turns recursive triggers
-- on).
CREATE TRIGGER tenure_runs_end_children AFTER UPDATE OF status ON tenure_runs
WHEN (NEW.status = 'completed' OR NEW.status = 'failed' OR NEW.status = 'cancelled')
 AND NOT (OLD.status = 'completed' OR OLD.status = 'failed' OR OLD.status = 'cancelled')
BEGIN
    INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload,
                               created_at)
    SELECT id, last_sequence + 1, attempt, lease_token, 'cancelled',
           json_object('by', 'parent', 'parent_id', NEW.id),
           ((julianday('now') - 2440587.5) * 86400.0)
      FROM tenure_runs
     WHERE parent_id = NEW.id
       AND NOT (status = 'completed' OR status = 'failed' OR status = 'cancelled');
    UPDATE tenure_runs
       SET status = 'cancelled', termination_reason = 'cancelled', claimed_by = '',
           lease_expires = NULL, request = NULL, waiting = NULL, decision = NULL,
           wait_deadline = NULL, last_sequence = last_sequence + 1,
           finished_at = ((julianday('now') - 2440587.5) * 86400.0),
           updated_at = ((julianday('now') - 2440587.5) * 86400.0)
     WHERE parent_id = NEW.id
       AND NOT (status = 'completed' OR status = 'failed' OR status = 'cancelled');
END;
