-- The run table's seven checks become one, a call of the function below; what it accepts is
-- what they accepted. PostgreSQL keeps a check as the text of its expression tree and reads
-- that text back at every statement that writes the table (ExecConstraints: stringToNode,
-- then planning each expression): 9,455 characters for these seven, about 42 µs of a
-- one-row UPDATE in its own transaction (12 µs without them), which every claim, settle,
-- step record and lease renewal paid. A function call is a few nodes to read; the function
-- is compiled once per connection and costs about 0.7 µs a row (bench/RESULTS.md).
--
-- Changing what a run may hold: CREATE OR REPLACE this function in a migration. Rows
-- already stored are not checked again then (as with ADD CONSTRAINT ... NOT VALID): a
-- narrower rule must check them itself.
-- (SQLite's 0026 drops its trigger that marked a child's parent; SQLite compiles a check
-- into each prepared statement once.)
CREATE FUNCTION tenure_run_row_ok(status text, reason text, effect text, finished boolean,
                                  leased boolean, claimed boolean)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN status IN ('queued', 'running', 'waiting_for_approval', 'waiting_for_input',
                      'waiting_for_children', 'completed', 'failed', 'cancelled')
       AND reason IN ('', 'completed', 'max_iterations', 'budget_exhausted', 'policy_denied',
                      'approval_denied', 'provider_failed', 'cancelled', 'retries_exhausted',
                      'not_retryable')
       AND effect IN ('', 'read_only', 'idempotent_write', 'non_idempotent_write')
       -- A finished row says why it finished, and only a finished row does.
       AND (status IN ('completed', 'failed', 'cancelled')) = (reason <> '')
       AND (status IN ('completed', 'failed', 'cancelled')) = finished
       -- Only a running row holds a lease, and every running row holds one.
       AND (status = 'running') = leased
       AND (status <> 'running' OR claimed);
END;
$$;

ALTER TABLE tenure_runs
    DROP CONSTRAINT tenure_runs_status_check,
    DROP CONSTRAINT tenure_runs_termination_reason_check,
    DROP CONSTRAINT tenure_runs_pending_effect_check,
    DROP CONSTRAINT tenure_runs_check,
    DROP CONSTRAINT tenure_runs_check1,
    DROP CONSTRAINT tenure_runs_check2,
    DROP CONSTRAINT tenure_runs_check3,
    ADD CONSTRAINT tenure_runs_row_check
        CHECK (tenure_run_row_ok(status, termination_reason, pending_effect,
                                 finished_at IS NOT NULL, lease_expires IS NOT NULL,
                                 claimed_by <> ''));
