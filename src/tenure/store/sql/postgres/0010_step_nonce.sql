-- A step is one statement that commits on its own (one round trip), so a connection lost
-- while it ran leaves its outcome unknown, and no transaction id was learnt beforehand to
-- ask the server about. `step_nonce` is drawn by the client for each step and stored by
-- the step's own UPDATE: a retry of that step that finds it on the row, under the same
-- lease, knows its first try committed and appends nothing again. Not indexed: a step's
-- update stays HOT.
ALTER TABLE tenure_runs ADD COLUMN step_nonce bigint;
