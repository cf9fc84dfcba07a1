-- A step is one statement that commits on its own (one round trip), so a connection lost
-- while it ran leaves its outcome unknown, and no transaction id was learnt beforehand to
-- ask the server about. `step_nonce` is drawn by the client for each step and stored by
-- the step's own UPDATE: a retry of that step that finds it on the row, under the same
-- lease, knows its first try committed and appends nothing again. Not indexed: a step's
-- update stays HOT.
ALTER TABLE tenure_runs ADD COLUMN step_nonce bigint;

-- The value lists of status, termination_reason and pending_effect move from CHECK
-- constraints of the table to domains, with the same lists. Why: PostgreSQL reads a table's
-- CHECK constraints back from their stored text at the start of every INSERT and UPDATE of
-- the table (their IN lists are long arrays there, parsed byte by byte), and evaluates every
-- one of them on every UPDATE, whichever columns it sets; that was about a seventh of the
-- server's work for an enqueue. A domain's check is kept compiled for the session and runs
-- only where a value is assigned to that column: an enqueue, a claim, a settle, but not a
-- step, which sets none of them. Text to a domain over text needs no table rewrite (the
-- rows are checked once, under the lock ALTER TABLE takes).
CREATE DOMAIN tenure_run_status AS text CHECK (VALUE IN ('queued', 'running',
    'waiting_for_approval', 'waiting_for_input', 'completed', 'failed', 'cancelled'));
CREATE DOMAIN tenure_termination_reason AS text CHECK (VALUE IN ('', 'completed',
    'max_iterations', 'budget_exhausted', 'policy_denied', 'approval_denied',
    'provider_failed', 'cancelled', 'retries_exhausted', 'not_retryable'));
CREATE DOMAIN tenure_effect AS text CHECK (VALUE IN ('', 'read_only', 'idempotent_write',
    'non_idempotent_write'));
ALTER TABLE tenure_runs
    DROP CONSTRAINT tenure_runs_status_check,
    DROP CONSTRAINT tenure_runs_termination_reason_check,
    DROP CONSTRAINT tenure_runs_pending_effect_check,
    ALTER COLUMN status TYPE tenure_run_status,
    ALTER COLUMN termination_reason TYPE tenure_termination_reason,
    ALTER COLUMN pending_effect TYPE tenure_effect;
