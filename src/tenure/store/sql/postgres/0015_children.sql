-- Child runs (SPEC §21): a run knows its parent and the root of its tree, and a parent may
-- wait for its children without a lease or a slot (`waiting_for_children`). `root_id` is
-- NULL for a run without a parent (read as its own id): no existing row is rewritten.
ALTER TABLE tenure_runs DROP CONSTRAINT tenure_runs_status_check;
ALTER TABLE tenure_runs ADD CONSTRAINT tenure_runs_status_check CHECK (status IN ('queued',
    'running', 'waiting_for_approval', 'waiting_for_input', 'waiting_for_children',
    'completed', 'failed', 'cancelled'));
ALTER TABLE tenure_runs ADD COLUMN parent_id text;
ALTER TABLE tenure_runs ADD COLUMN root_id text;
CREATE INDEX tenure_runs_parent ON tenure_runs (parent_id) WHERE parent_id IS NOT NULL;
-- The children still going, by parent: what a settling child's trigger reads to learn
-- whether its parent still waits for one (it shrinks as they end, so that the last of a
-- thousand children does not read the 999 that ended before it).
CREATE INDEX tenure_runs_children_going ON tenure_runs (parent_id)
    WHERE parent_id IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled');

-- A child that becomes terminal, by whatever statement (a worker's settle, the reaper's
-- dead-letter, a cancel, an expired wait, ...), wakes its parent in that same transaction
-- if the parent waits for children and every child it waits for is now terminal; the
-- NOTIFY lets an idle worker claim it at once. The parent's row is locked first, and the
-- children are read by a later statement (a fresh snapshot): two children settling at once
-- take turns, and the second sees the first; the parent's own write that sets it waiting
-- locks its row before it reads its children too, so neither side decides on a read the
-- other is about to change. A child is looked up in the parent's `waiting` as its quoted
-- id (a run id is a UUID, which JSON writes as it is): parsing the whole list at every
-- child's end cost more than the child.
--
-- A run that ends, however it ends, takes its children still going with it: they are
-- cancelled, each with a `cancelled` event naming the parent; their own children follow
-- through this same trigger.
CREATE FUNCTION tenure_runs_ended() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    woken text;
BEGIN
    INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload,
                               created_at)
    SELECT id, last_sequence + 1, attempt, lease_token, 'cancelled',
           json_build_object('by', 'parent', 'parent_id', NEW.id), clock_timestamp()
      FROM tenure_runs
     WHERE parent_id = NEW.id AND status NOT IN ('completed', 'failed', 'cancelled');
    UPDATE tenure_runs
       SET status = 'cancelled', termination_reason = 'cancelled', claimed_by = '',
           lease_expires = NULL, request = NULL, waiting = NULL, decision = NULL,
           wait_deadline = NULL, last_sequence = last_sequence + 1,
           finished_at = clock_timestamp(), updated_at = clock_timestamp()
     WHERE parent_id = NEW.id AND status NOT IN ('completed', 'failed', 'cancelled');
    IF NEW.parent_id IS NOT NULL THEN
        PERFORM 1 FROM tenure_runs WHERE id = NEW.parent_id FOR UPDATE;
        UPDATE tenure_runs p
           SET status = 'queued', waiting = NULL, available_at = clock_timestamp(),
               updated_at = clock_timestamp()
         WHERE p.id = NEW.parent_id AND p.status = 'waiting_for_children'
           AND NOT EXISTS (
               SELECT 1 FROM tenure_runs c
                WHERE c.parent_id = NEW.parent_id AND c.parent_id IS NOT NULL
                  AND c.status NOT IN ('completed', 'failed', 'cancelled')
                  AND strpos(p.waiting, '"' || c.id || '"') > 0)
        RETURNING p.queue INTO woken;
        IF woken IS NOT NULL THEN
            PERFORM pg_notify('tenure_runs', woken);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER tenure_runs_ended AFTER UPDATE OF status ON tenure_runs
FOR EACH ROW
WHEN (NEW.status IN ('completed', 'failed', 'cancelled')
      AND OLD.status NOT IN ('completed', 'failed', 'cancelled'))
EXECUTE FUNCTION tenure_runs_ended();
