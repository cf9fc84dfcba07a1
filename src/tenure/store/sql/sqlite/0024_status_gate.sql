-- A run with no parent, no child and no stream sets up one small trigger program when its
-- status changes, and runs none of the trigger statements (issue 31). SQLite evaluates a trigger's WHEN inside the trigger's own program,
-- whose frame it allocates and zeroes at each execution of the statement that fires it:
-- the four `AFTER UPDATE OF status` triggers (0015's deltas trigger, 0019's wake-up and
-- revival, 0022's end of children) cost a trivial run four programs at its claim and four
-- at its settle, each WHEN false or its body finding nothing. They become one trigger,
-- whose WHEN lets through only a run that has a parent, has had a child or has streamed.
--
-- `streamed` says that deltas of the run may exist: the store sets it in the transaction
-- that publishes the run's deltas (query mark_streamed), once, and never clears it. Runs
-- that hold deltas already get it here.
ALTER TABLE tenure_runs ADD COLUMN streamed INTEGER NOT NULL DEFAULT 0;
UPDATE tenure_runs SET streamed = 1
 WHERE EXISTS (SELECT 1 FROM tenure_deltas AS d WHERE d.run_id = tenure_runs.id);

DROP TRIGGER tenure_deltas_left_running;
DROP TRIGGER tenure_runs_wake_parent;
DROP TRIGGER tenure_runs_revived;
DROP TRIGGER tenure_runs_end_children;

-- The gate's own program is small: SQLite sizes a trigger's frame by the registers of its
-- whole body and zeroes it at every status change, WHEN false or not, so a body holding the
-- statements below (which update tenure_runs and its indexes) cost a trivial run as much as
-- the four triggers did. The statements live in a trigger on a view instead, whose program
-- is set up only when the gate's INSERT runs. The view never holds a row. The price: a
-- run's end now nests two triggers per generation of its tree where it nested one, and
-- SQLite allows 1,000, so one transaction ends a chain of at most 500 nested runs (was
-- 1,000).
CREATE VIEW tenure_status_changes AS
SELECT NULL AS id, NULL AS parent_id, NULL AS has_children, NULL AS streamed,
       NULL AS old_status, NULL AS status;

CREATE TRIGGER tenure_runs_status_gate AFTER UPDATE OF status ON tenure_runs
WHEN NEW.parent_id IS NOT NULL OR NEW.has_children OR NEW.streamed
BEGIN
    INSERT INTO tenure_status_changes (id, parent_id, has_children, streamed, old_status,
                                       status)
    VALUES (NEW.id, NEW.parent_id, NEW.has_children, NEW.streamed, OLD.status, NEW.status);
END;

-- What a status change of a run with a parent, a child or a stream does. NEW is the run
-- after the change, with its status before it in NEW.old_status. The statements run in the
-- order the four triggers fired (SQLite fires the trigger made last first): the end of the
-- run's children (0022), the revival of a child (0019), the wake-up of the parent (0019),
-- the deltas (0015). Each former trigger's WHEN is now in its statements' WHERE.
CREATE TRIGGER tenure_status_changes_apply INSTEAD OF INSERT ON tenure_status_changes
BEGIN
    -- A run that ends, however it ends, takes its children still going with it: they are
    -- cancelled, each with a `cancelled` event naming the parent, in the same transaction.
    -- Their own children follow through this same trigger (the store turns recursive
    -- triggers on).
    INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload,
                               created_at)
    SELECT id, last_sequence + 1, attempt, lease_token, 'cancelled',
           json_object('by', 'parent', 'parent_id', NEW.id),
           ((julianday('now') - 2440587.5) * 86400.0)
      FROM tenure_runs
     WHERE NEW.has_children
       AND (NEW.status = 'completed' OR NEW.status = 'failed' OR NEW.status = 'cancelled')
       AND NOT (NEW.old_status = 'completed' OR NEW.old_status = 'failed'
                OR NEW.old_status = 'cancelled')
       AND parent_id = NEW.id
       AND NOT (status = 'completed' OR status = 'failed' OR status = 'cancelled');
    UPDATE tenure_runs
       SET status = 'cancelled', termination_reason = 'cancelled', claimed_by = '',
           lease_expires = NULL, request = NULL, waiting = NULL, decision = NULL,
           wait_deadline = NULL, last_sequence = last_sequence + 1,
           finished_at = ((julianday('now') - 2440587.5) * 86400.0),
           updated_at = ((julianday('now') - 2440587.5) * 86400.0)
     WHERE NEW.has_children
       AND (NEW.status = 'completed' OR NEW.status = 'failed' OR NEW.status = 'cancelled')
       AND NOT (NEW.old_status = 'completed' OR NEW.old_status = 'failed'
                OR NEW.old_status = 'cancelled')
       AND parent_id = NEW.id
       AND NOT (status = 'completed' OR status = 'failed' OR status = 'cancelled');

    -- A child that goes on again after it ended (a redrive) may be one its waiting parent
    -- does not wait for: the parent then no longer waits for every child still going.
    UPDATE tenure_runs SET waits_for_all = 0
     WHERE NEW.parent_id IS NOT NULL
       AND (NEW.old_status = 'completed' OR NEW.old_status = 'failed'
            OR NEW.old_status = 'cancelled')
       AND NOT (NEW.status = 'completed' OR NEW.status = 'failed' OR NEW.status = 'cancelled')
       AND id = NEW.parent_id AND waits_for_all;

    -- A child that becomes terminal wakes its parent in the same transaction if the parent
    -- waits for children and every child it waits for is now terminal (SQLite runs one
    -- writer at a time: the parent's own write that sets it waiting re-checks its children
    -- under the same lock).
    UPDATE tenure_runs
       SET status = 'queued', waiting = NULL,
           available_at = ((julianday('now') - 2440587.5) * 86400.0),
           updated_at = ((julianday('now') - 2440587.5) * 86400.0)
     WHERE NEW.parent_id IS NOT NULL
       AND (NEW.status = 'completed' OR NEW.status = 'failed' OR NEW.status = 'cancelled')
       AND NOT (NEW.old_status = 'completed' OR NEW.old_status = 'failed'
                OR NEW.old_status = 'cancelled')
       AND id = NEW.parent_id AND status = 'waiting_for_children'
       AND NOT EXISTS (
           SELECT 1 FROM tenure_runs AS c
            WHERE c.parent_id = NEW.parent_id AND c.parent_id IS NOT NULL
              AND NOT (c.status = 'completed' OR c.status = 'failed'
                       OR c.status = 'cancelled')
              AND CASE WHEN tenure_runs.waits_for_all THEN 1
                       ELSE instr(tenure_runs.waiting, '"' || c.id || '"') > 0 END);

    -- A run out of `running` (settled, requeued, reaped, released, held for a person or its
    -- children, cancelled) has no call in flight: its deltas go (SPEC §18).
    DELETE FROM tenure_deltas
     WHERE NEW.streamed AND NEW.status <> 'running' AND run_id = NEW.id;
END;
