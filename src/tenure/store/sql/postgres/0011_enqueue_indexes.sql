-- Keeps the versions of both dialects in step: SQLite's 0011 takes queued runs out of its
-- listing index and runs without a key out of its idempotency index, so that an enqueue
-- writes fewer index pages. PostgreSQL's enqueue is bound by its round trips, not by pages
-- (and its unique index already leaves NULL keys to the table), so it changes nothing.
SELECT 1;
