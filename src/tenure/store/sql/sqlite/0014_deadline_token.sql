-- A step past its deadline (SPEC §15): the lease token under which the worker gave the step
-- up. Its lease then lapses, and the reaper records that cause (`step_deadline`) instead of
-- a dead worker's, but only for the lease it was marked under: a token, not a flag, so that
-- no later claim has to clear it. The reason the worker gave is the row's `error`.
ALTER TABLE tenure_runs ADD COLUMN deadline_token INTEGER;
