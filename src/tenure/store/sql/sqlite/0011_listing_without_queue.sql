-- Every enqueue wrote an entry into tenure_runs_listing (one more page per commit) that no
-- query needed: queued runs are found through tenure_runs_claimable, and the listing of
-- runs scans the table. The listing index now holds only runs that have left the queue
-- (running, waiting, finished): what the reaper, a worker's check of its claims and the
-- counts read. A query names `status <> 'queued'` for the planner to use it.
DROP INDEX IF EXISTS tenure_runs_listing;
CREATE INDEX tenure_runs_listing_dequeued ON tenure_runs (status, termination_reason, created_at)
    WHERE status <> 'queued';
