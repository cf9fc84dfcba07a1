-- A run that has never had a child pays nothing at its end for the children it might have
-- (SPEC §21): `has_children` is set on a parent by the insert of its first child, in the
-- child's transaction (trigger tenure_runs_child_added, below), and tenure_runs_ended runs
-- only for a run that has a parent or has had a child. Before, every run's end called the
-- trigger function, which looked for children to cancel (an INSERT and an UPDATE, each an
-- index probe that found nothing): most of the ends of a flat drain. The flag is never
-- cleared: a run that had children keeps the check.
--
-- A parent that ends while a child is being inserted: the child's transaction locks the
-- parent's row to set the flag. Either the end waits for that lock and then, its trigger's
-- statements reading after the child's commit, cancels the child; or the end came first,
-- and the child is inserted under an ended parent, as it was before this flag (the end's
-- statements could not see a child not yet committed either).
ALTER TABLE tenure_runs ADD COLUMN has_children boolean NOT NULL DEFAULT false;
UPDATE tenure_runs p SET has_children = true
 WHERE EXISTS (SELECT 1 FROM tenure_runs c WHERE c.parent_id = p.id);

CREATE FUNCTION tenure_runs_child_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE tenure_runs SET has_children = true WHERE id = NEW.parent_id AND NOT has_children;
    RETURN NULL;
END;
$$;

CREATE TRIGGER tenure_runs_child_added AFTER INSERT ON tenure_runs
FOR EACH ROW
WHEN (NEW.parent_id IS NOT NULL)
EXECUTE FUNCTION tenure_runs_child_added();

-- The function is 0021's, unchanged; only when it is called changes.
DROP TRIGGER tenure_runs_ended ON tenure_runs;
CREATE TRIGGER tenure_runs_ended AFTER UPDATE OF status ON tenure_runs
FOR EACH ROW
WHEN (NEW.status IN ('completed', 'failed', 'cancelled')
      AND OLD.status NOT IN ('completed', 'failed', 'cancelled')
      AND (NEW.parent_id IS NOT NULL OR NEW.has_children))
EXECUTE FUNCTION tenure_runs_ended();
