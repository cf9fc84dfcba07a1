-- A run that has never had a child pays nothing at its end for the children it might have
-- (SPEC §21): `has_children` is set on a parent by the insert of its first child, in the
-- child's transaction (trigger tenure_runs_child_added), and tenure_runs_end_children runs
-- only for a run that has had a child. Before, every run's end ran its INSERT and UPDATE,
-- each a probe of the parent index that found nothing. The flag is never cleared.
ALTER TABLE tenure_runs ADD COLUMN has_children INTEGER NOT NULL DEFAULT 0;
UPDATE tenure_runs SET has_children = 1
 WHERE EXISTS (SELECT 1 FROM tenure_runs AS c WHERE c.parent_id = tenure_runs.id);

CREATE TRIGGER tenure_runs_child_added AFTER INSERT ON tenure_runs
WHEN NEW.parent_id IS NOT NULL
BEGIN
    UPDATE tenure_runs SET has_children = 1 WHERE id = NEW.parent_id AND NOT has_children;
END;

-- As in 0015, called only for a run that has had a child.
DROP TRIGGER tenure_runs_end_children;
CREATE TRIGGER tenure_runs_end_children AFTER UPDATE OF status ON tenure_runs
WHEN NEW.has_children
 AND (NEW.status = 'completed' OR NEW.status = 'failed' OR NEW.status = 'cancelled')
 AND NOT (OLD.status = 'completed' OR OLD.status = 'failed' OR OLD.status = 'cancelled')
BEGIN
    INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload,
                               created_at)
    SELECT id, last_sequence + 1, attempt, lease_token, 'cancelled',
           json_object('by', 'parent', 'parent_id', NEW.id),
           ((julianday('now') - 2440587.5) * 86400.0)
      FROM tenure_runs
     WHERE parent_id = NEW.id
       AND NOT (status = 'completed' OR status = 'failed' OR status = 'cancelled');
    UPDATE tenure_runs
       SET status = 'cancelled', termination_reason = 'cancelled', claimed_by = '',
           lease_expires = NULL, request = NULL, waiting = NULL, decision = NULL,
           wait_deadline = NULL, last_sequence = last_sequence + 1,
           finished_at = ((julianday('now') - 2440587.5) * 86400.0),
           updated_at = ((julianday('now') - 2440587.5) * 86400.0)
     WHERE parent_id = NEW.id
       AND NOT (status = 'completed' OR status = 'failed' OR status = 'cancelled');
END;
