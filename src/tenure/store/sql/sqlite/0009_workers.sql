-- A worker process's own row, beside the leases it holds: its id is the owner id it claims
-- under. The worker writes it when it starts, moves `last_seen` with a heartbeat of its own
-- (so a worker with nothing in flight is seen alive, and a dead one is seen dead before its
-- leases expire) and marks it stopped on a clean shutdown. `queues` is a JSON array, NULL
-- for every queue; `heartbeat_seconds` is its interval, so that any reader can tell a
-- missed heartbeat whatever lease that worker was started with.
CREATE TABLE tenure_workers (
    id                TEXT    PRIMARY KEY,
    host              TEXT    NOT NULL,
    pid               INTEGER NOT NULL,
    queues            TEXT,
    slots             INTEGER NOT NULL CHECK (slots >= 1),
    slots_in_use      INTEGER NOT NULL DEFAULT 0 CHECK (slots_in_use >= 0),
    heartbeat_seconds REAL    NOT NULL CHECK (heartbeat_seconds > 0),
    state             TEXT    NOT NULL DEFAULT 'running'
                          CHECK (state IN ('running', 'stopping', 'stopped')),
    started_at        REAL    NOT NULL,
    last_seen         REAL    NOT NULL,
    stopped_at        REAL,
    -- A stopped row says when it stopped, and only a stopped row does.
    CHECK ((state = 'stopped') = (stopped_at IS NOT NULL))
);

-- What the listing and the purge read: workers by the last time they were seen.
CREATE INDEX tenure_workers_last_seen ON tenure_workers (last_seen);
