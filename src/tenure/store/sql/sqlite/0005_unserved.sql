-- How many times workers that lacked a run's model or tools handed it back unstarted: the
-- next such hand-back waits twice as long, so a run that no worker can serve is not claimed
-- and handed back in a loop.
ALTER TABLE tenure_runs ADD COLUMN unserved INTEGER NOT NULL DEFAULT 0;
