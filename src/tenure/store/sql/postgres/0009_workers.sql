-- A worker process's own row, beside the leases it holds: its id is the owner id it claims
-- under. The worker writes it when it starts, moves `last_seen` with a heartbeat of its own
-- (so a worker with nothing in flight is seen alive, and a dead one is seen dead before its
-- leases expire) and marks it stopped on a clean shutdown. `queues` is a JSON array, NULL
-- for every queue; `heartbeat_seconds` is its interval, so that any reader can tell a
-- missed heartbeat whatever lease that worker was started with.
CREATE TABLE tenure_workers (
    id                text             PRIMARY KEY,
    host              text             NOT NULL,
    pid               integer          NOT NULL,
    queues            text,
    slots             integer          NOT NULL CHECK (slots >= 1),
    slots_in_use      integer          NOT NULL DEFAULT 0 CHECK (slots_in_use >= 0),
    heartbeat_seconds double precision NOT NULL CHECK (heartbeat_seconds > 0),
    state             text             NOT NULL DEFAULT 'running'
                          CHECK (state IN ('running', 'stopping', 'stopped')),
    started_at        timestamptz      NOT NULL,
    last_seen         timestamptz      NOT NULL,
    stopped_at        timestamptz,
    -- A stopped row says when it stopped, and only a stopped row does.
    CHECK ((state = 'stopped') = (stopped_at IS NOT NULL))
);

-- What the listing and the purge read: workers by the last time they were seen.
CREATE INDEX tenure_workers_last_seen ON tenure_workers (last_seen);
