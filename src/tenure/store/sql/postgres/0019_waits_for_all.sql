-- A parent's wake-up at the cost of one index probe (SPEC §21): `waits_for_all` says that
-- the run, waiting for children, waits for every child of its that has not ended (what
-- ctx.gather of everything ctx.map made is). It is set by the write that makes the run wait
-- and read only while the run waits. Then a child's end need not find itself and its
-- siblings in the parent's list of awaited ids (some 40 kB for a thousand children, read
-- out of TOAST and searched again at each child's end): "no child still going" is the same
-- question, answered by the index of children still going.
ALTER TABLE tenure_runs ADD COLUMN waits_for_all boolean NOT NULL DEFAULT false;

-- As in 0015; the parent's status and flag are read with its lock, and a parent that does
-- not wait for children costs the child's end nothing more. The lock is still taken at
-- every child's end: it is what makes two last children ending at once take turns (the
-- second then sees the first ended and wakes the parent; without it each could see the
-- other still going and neither wake it).
CREATE OR REPLACE FUNCTION tenure_runs_ended() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    woken text;
    parent_status text;
    all_children boolean;
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
        SELECT status, waits_for_all INTO parent_status, all_children
          FROM tenure_runs WHERE id = NEW.parent_id FOR UPDATE;
        IF parent_status = 'waiting_for_children' THEN
            -- Later statements than the lock: their snapshots see every sibling whose end
            -- committed before the lock was granted. Waiting for all its children, the
            -- parent is woken when none is going, which the first one the index gives
            -- tells (a plain index scan, stopped there: a bitmap scan of the parent's
            -- entries would visit the heap for every dead version of its children).
            IF all_children THEN
                PERFORM 1 FROM tenure_runs c
                  WHERE c.parent_id = NEW.parent_id AND c.parent_id IS NOT NULL
                    AND c.status NOT IN ('completed', 'failed', 'cancelled')
                  LIMIT 1;
                IF FOUND THEN
                    RETURN NULL;
                END IF;
            END IF;
            UPDATE tenure_runs p
               SET status = 'queued', waiting = NULL, available_at = clock_timestamp(),
                   updated_at = clock_timestamp()
             WHERE p.id = NEW.parent_id AND p.status = 'waiting_for_children'
               AND (all_children OR NOT EXISTS (
                   SELECT 1 FROM tenure_runs c
                    WHERE c.parent_id = NEW.parent_id AND c.parent_id IS NOT NULL
                      AND c.status NOT IN ('completed', 'failed', 'cancelled')
                      AND strpos(p.waiting, '"' || c.id || '"') > 0))
            RETURNING p.queue INTO woken;
            IF woken IS NOT NULL THEN
                PERFORM pg_notify('tenure_runs', woken);
            END IF;
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

-- A child that goes on again after it ended (a redrive) may be one its waiting parent does
-- not wait for: the parent then no longer waits for every child still going, and its
-- children's ends go back to looking themselves up in its list.
CREATE FUNCTION tenure_runs_revived() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE tenure_runs SET waits_for_all = false
     WHERE id = NEW.parent_id AND waits_for_all;
    RETURN NULL;
END;
$$;

CREATE TRIGGER tenure_runs_revived AFTER UPDATE OF status ON tenure_runs
FOR EACH ROW
WHEN (NEW.parent_id IS NOT NULL
      AND OLD.status IN ('completed', 'failed', 'cancelled')
      AND NEW.status NOT IN ('completed', 'failed', 'cancelled'))
EXECUTE FUNCTION tenure_runs_revived();
