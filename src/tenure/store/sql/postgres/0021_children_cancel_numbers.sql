-- A run that ends cancels its children still going (SPEC §21), each with a `cancelled`
-- event. Until this version the trigger numbered those events from the children's rows as
-- its INSERT's snapshot saw them, and locked the children only afterwards, in a second
-- statement: a step that a child committed in between took that number first, and the
-- end failed on `tenure_events_pkey`. Now one statement locks each child, moves its
-- `last_sequence` on and numbers its event from the row it locked (a row that changed
-- since the snapshot is read again, as it is locked: PostgreSQL's UPDATE in READ
-- COMMITTED), so a child's step either committed before and is counted, or waits for the
-- child's lock and then finds the child cancelled. Each child's own children follow
-- through this same trigger, fired by that UPDATE at the end of the statement, after the
-- child's event is written. The parent's wake-up is as in 0019.
CREATE OR REPLACE FUNCTION tenure_runs_ended() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    woken text;
    parent_status text;
    all_children boolean;
BEGIN
    WITH cancelled AS (
        UPDATE tenure_runs
           SET status = 'cancelled', termination_reason = 'cancelled', claimed_by = '',
               lease_expires = NULL, request = NULL, waiting = NULL, decision = NULL,
               wait_deadline = NULL, last_sequence = last_sequence + 1,
               finished_at = clock_timestamp(), updated_at = clock_timestamp()
         WHERE parent_id = NEW.id AND status NOT IN ('completed', 'failed', 'cancelled')
        RETURNING id, last_sequence, attempt, lease_token)
    INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload,
                               created_at)
    SELECT id, last_sequence, attempt, lease_token, 'cancelled',
           json_build_object('by', 'parent', 'parent_id', NEW.id), clock_timestamp()
      FROM cancelled;
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
