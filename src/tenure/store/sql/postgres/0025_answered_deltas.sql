-- Nothing on PostgreSQL: SQLite's 0025 drops its trigger that deleted a run's deltas when its
-- `llm` event was inserted (the store deletes them itself). PostgreSQL keeps no deltas in a
-- table (they go by NOTIFY).
SELECT 1;
