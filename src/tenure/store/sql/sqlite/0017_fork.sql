-- A fork (SPEC §23): the run it was forked from and the sequence it was forked at. Its
-- journal holds a copy of that run's events before the sequence, then its `forked` event.
-- Both are NULL for every other run; the original's row is never changed by a fork.
ALTER TABLE tenure_runs ADD COLUMN forked_from_id TEXT;
ALTER TABLE tenure_runs ADD COLUMN forked_from_sequence INTEGER;
