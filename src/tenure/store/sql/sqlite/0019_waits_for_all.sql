-- A parent's wake-up at the cost of one index probe (SPEC §21): `waits_for_all` says that
-- the run, waiting for children, waits for every child of its that has not ended (what
-- ctx.gather of everything ctx.map made is). It is set by the write that makes the run wait
-- and read only while the run waits. Then a child's end need not find itself and its
-- siblings in the parent's list of awaited ids (some 40 kB for a thousand children):
-- "no child still going" is the same question, answered by the index of children still
-- going.
ALTER TABLE tenure_runs ADD COLUMN waits_for_all INTEGER NOT NULL DEFAULT 0;

-- As in 0015, with the list searched only when the parent waits for some of its children.
DROP TRIGGER tenure_runs_wake_parent;
CREATE TRIGGER tenure_runs_wake_parent AFTER UPDATE OF status ON tenure_runs
WHEN NEW.parent_id IS NOT NULL
 AND (NEW.status = 'completed' OR NEW.status = 'failed' OR NEW.status = 'cancelled')
 AND NOT (OLD.status = 'completed' OR OLD.status = 'failed' OR OLD.status = 'cancelled')
BEGIN
    UPDATE tenure_runs
       SET status = 'queued', waiting = NULL,
           available_at = ((julianday('now') - 2440587.5) * 86400.0),
           updated_at = ((julianday('now') - 2440587.5) * 86400.0)
     WHERE id = NEW.parent_id AND status = 'waiting_for_children'
       AND NOT EXISTS (
           SELECT 1 FROM tenure_runs AS c
            WHERE c.parent_id = NEW.parent_id AND c.parent_id IS NOT NULL
              AND NOT (c.status = 'completed' OR c.status = 'failed'
                       OR c.status = 'cancelled')
              AND CASE WHEN tenure_runs.waits_for_all THEN 1
                       ELSE instr(tenure_runs.waiting, '"' || c.id || '"') > 0 END);
END;

-- A child that goes on again after it ended (a redrive) may be one its waiting parent does
-- not wait for: the parent then no longer waits for every child still going, and its
-- children's ends go back to looking themselves up in its list.
CREATE TRIGGER tenure_runs_revived AFTER UPDATE OF status ON tenure_runs
WHEN NEW.parent_id IS NOT NULL
 AND (OLD.status = 'completed' OR OLD.status = 'failed' OR OLD.status = 'cancelled')
 AND NOT (NEW.status = 'completed' OR NEW.status = 'failed' OR NEW.status = 'cancelled')
BEGIN
    UPDATE tenure_runs SET waits_for_all = 0 WHERE id = NEW.parent_id AND waits_for_all;
END;
