-- Keeps the versions of both dialects in step: SQLite's 0012 writes its run table's checks
-- as comparisons joined by OR instead of IN lists, which SQLite tested by building a
-- temporary table at every INSERT. PostgreSQL tests an IN list in place, and the same
-- checks written with OR made its enqueue and step statements slower (a longer expression
-- to read back at each statement; measured in bench/RESULTS.md), so it changes nothing.
SELECT 1;
