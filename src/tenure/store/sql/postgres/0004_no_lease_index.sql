-- Keeps the versions of both dialects in step: SQLite drops its lease_expires index in
-- version 4; PostgreSQL never had one (tenure_runs_running serves the reaper).
COMMENT ON INDEX tenure_runs_running IS
    'The reaper''s scan: running rows only. No index on lease_expires: heartbeats stay HOT.';
