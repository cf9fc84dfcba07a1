-- Nothing on PostgreSQL: SQLite's 0024 merges its four `AFTER UPDATE OF status` triggers
-- into one whose WHEN lets through only a run with a parent, a child or a stream, because
-- SQLite evaluates a trigger's WHEN inside the trigger's program, which it sets up at each
-- statement that fires it. PostgreSQL evaluates a row trigger's WHEN before it calls the
-- trigger's function (tenure_runs_ended's WHEN, 0022), and keeps no deltas in a table
-- (they go by NOTIFY): a trivial run calls no function there already.
SELECT 1;
