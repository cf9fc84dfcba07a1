-- A parent is marked (`has_children`, 0022) by the store's own statement (query
-- mark_parent, run after the insert of each child row, in its transaction), no longer by a
-- trigger on tenure_runs. SQLite sets up a statement journal and a trigger frame for an
-- AFTER INSERT trigger at every insert, WHEN false or not: about 10,000 instructions for
-- each enqueue of a run without a parent, which is nearly every run. SQLite's writes are
-- serial, so the mark and the child commit together as before: a parent's end either comes
-- first (the child is inserted under an ended parent, as before the mark existed) or sees
-- the mark and cancels the child.
DROP TRIGGER tenure_runs_child_added;
