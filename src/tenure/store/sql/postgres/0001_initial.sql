-- The first schema. Times are timestamptz from the server's clock.
--
-- fillfactor leaves room in every page so that the updates a running run makes at each step
-- boundary (lease_expires, last_sequence, usage, pending_effect) are HOT: none of those
-- columns is indexed, so the new row version stays in its page and no index is touched.
CREATE TABLE tenure_runs (
    id                 text PRIMARY KEY,
    queue              text             NOT NULL,
    status             text             NOT NULL CHECK (status IN ('queued', 'running',
                           'waiting_for_approval', 'waiting_for_input',
                           'completed', 'failed', 'cancelled')),
    termination_reason text             NOT NULL DEFAULT '' CHECK (termination_reason IN ('',
                           'completed', 'max_iterations', 'budget_exhausted', 'policy_denied',
                           'approval_denied', 'provider_failed', 'cancelled',
                           'retries_exhausted', 'not_retryable')),
    request            text,
    idempotency_key    text UNIQUE,
    claimed_by         text             NOT NULL DEFAULT '',
    lease_expires      timestamptz,
    lease_token        bigint           NOT NULL DEFAULT 0,
    requeue_count      integer          NOT NULL DEFAULT 0,
    available_at       timestamptz      NOT NULL,
    pending_effect     text             NOT NULL DEFAULT '' CHECK (pending_effect IN ('',
                           'read_only', 'idempotent_write', 'non_idempotent_write')),
    attempt            integer          NOT NULL DEFAULT 0,
    error_class        text             NOT NULL DEFAULT '',
    error              text             NOT NULL DEFAULT '',
    output             text,
    input_tokens       bigint           NOT NULL DEFAULT 0,
    output_tokens      bigint           NOT NULL DEFAULT 0,
    cost               double precision NOT NULL DEFAULT 0,
    last_sequence      integer          NOT NULL DEFAULT -1,
    created_at         timestamptz      NOT NULL,
    started_at         timestamptz,
    finished_at        timestamptz,
    updated_at         timestamptz      NOT NULL,
    -- A finished row says why it finished, and only a finished row does.
    CHECK ((status IN ('completed', 'failed', 'cancelled')) = (termination_reason <> '')),
    CHECK ((status IN ('completed', 'failed', 'cancelled')) = (finished_at IS NOT NULL)),
    -- Only a running row holds a lease, and every running row holds one.
    CHECK ((status = 'running') = (lease_expires IS NOT NULL)),
    CHECK (status <> 'running' OR claimed_by <> '')
) WITH (fillfactor = 70);

-- What a claimer scans: only queued rows, in the order they become available. Finished runs
-- are not in it, so the cost of a claim does not grow with history.
CREATE INDEX tenure_runs_claimable ON tenure_runs (available_at, queue) WHERE status = 'queued';
-- What the reaper scans: only running rows. Not keyed on lease_expires, which every heartbeat
-- changes: an indexed lease would make each heartbeat a non-HOT update.
CREATE INDEX tenure_runs_running ON tenure_runs (id) WHERE status = 'running';
CREATE INDEX tenure_runs_listing ON tenure_runs (status, termination_reason, created_at);
CREATE INDEX tenure_runs_finished ON tenure_runs (finished_at) WHERE finished_at IS NOT NULL;

-- `json` (not jsonb) keeps a payload exactly as it was written.
CREATE TABLE tenure_events (
    run_id     text        NOT NULL,
    sequence   integer     NOT NULL,
    attempt    integer     NOT NULL,
    kind       text        NOT NULL,
    payload    json        NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, sequence)
);
