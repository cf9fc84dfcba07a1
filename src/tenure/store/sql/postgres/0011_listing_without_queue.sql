-- Keeps the versions of both dialects in step: SQLite's 0011 takes queued runs out of its
-- listing index, so that an enqueue writes one index page fewer. PostgreSQL's enqueue is
-- bound by its round trips, not by pages, and keeps its listing index whole.
SELECT 1;
