-- Nothing on PostgreSQL: SQLite's 0026 drops its trigger that marked a child's parent
-- (`has_children`, 0022; the store's query mark_parent does it there), because SQLite sets up
-- an AFTER INSERT trigger's program at every insert, whatever its WHEN. PostgreSQL tests
-- tenure_runs_child_added's WHEN (the run has a parent) before it calls anything.
SELECT 1;
