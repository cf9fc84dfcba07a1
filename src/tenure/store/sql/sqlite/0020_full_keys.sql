-- Nothing on SQLite: PostgreSQL's claim reads the full concurrency keys through a function
-- (tenure_full_keys) from this version on; SQLite's claim keeps its subquery, which it
-- prepares once per connection.
SELECT 1;
