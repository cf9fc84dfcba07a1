-- Nothing on SQLite: PostgreSQL's 0021 numbers the `cancelled` events of an ending run's
-- children from the rows it locks, where its trigger had numbered them from a snapshot
-- read before it locked them. SQLite's trigger (tenure_runs_end_children) reads and
-- writes inside one write transaction, and SQLite lets one writer in at a time: no child
-- step can commit between its read and its write.
SELECT 1;
