-- A paused queue: one row per queue an operator paused. The claim takes no run of a queue
-- that has a row here (runs already claimed go on to their end); resuming deletes the row.
-- A row may name a queue that has no run yet: pausing it before work arrives is allowed.
CREATE TABLE tenure_paused_queues (
    queue     TEXT PRIMARY KEY,
    paused_at REAL NOT NULL,
    paused_by TEXT NOT NULL DEFAULT ''
);
