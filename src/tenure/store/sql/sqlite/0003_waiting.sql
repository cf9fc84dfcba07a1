-- Human in the loop: a run waiting for a person holds no lease. `waiting` is what it waits
-- for (JSON: kind, the held turn and its calls), `decision` what the person decided or
-- submitted (JSON, read by the segment that continues the run), `wait_deadline` when the
-- reaper gives up waiting (approval_timeout).
ALTER TABLE tenure_runs ADD COLUMN waiting TEXT;
ALTER TABLE tenure_runs ADD COLUMN decision TEXT;
ALTER TABLE tenure_runs ADD COLUMN wait_deadline REAL;
CREATE INDEX tenure_runs_waiting ON tenure_runs (wait_deadline)
    WHERE status IN ('waiting_for_approval', 'waiting_for_input');
