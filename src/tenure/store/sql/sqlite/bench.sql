-- Named queries for the benchmarks in bench/ only: filling a table fast, probing the commit
-- rate. The runtime never uses them.

-- name: seed_cache
-- A large page cache for this connection while it fills the table.
PRAGMA cache_size = -262144;

-- name: seed_finished_runs
-- :n completed runs with random ids, marked by their output so their events can follow.
WITH RECURSIVE k(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM k WHERE x < :n)
INSERT INTO tenure_runs (id, queue, status, termination_reason, claimed_by, lease_token,
                         available_at, output, last_sequence, created_at, started_at,
                         finished_at, updated_at)
SELECT id, 'default', 'completed', 'completed', '', 1,
       {now}, 'seeded', 3, {now}, {now}, {now}, {now}
  FROM (SELECT lower(hex(randomblob(16))) AS id FROM k)
 ORDER BY id;

-- name: seed_finished_events
-- The four events of every run seeded since the last call: request, claimed, llm, assembled.
INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload, created_at)
SELECT r.id, e.sequence, 0, CASE WHEN e.sequence = 0 THEN 0 ELSE 1 END, e.kind, '{}', {now}
  FROM tenure_runs r
  JOIN (SELECT 0 AS sequence, 'request' AS kind UNION ALL SELECT 1, 'claimed'
        UNION ALL SELECT 2, 'llm' UNION ALL SELECT 3, 'assembled') e
 WHERE r.output = 'seeded'
 ORDER BY r.id, e.sequence;

-- name: unmark_seeded
UPDATE tenure_runs SET output = 'ok' WHERE output = 'seeded';

-- name: probe_table
CREATE TABLE IF NOT EXISTS tenure_bench_probe (id INTEGER PRIMARY KEY, n INTEGER NOT NULL);

-- name: probe_row
INSERT OR IGNORE INTO tenure_bench_probe (id, n) VALUES (:id, 0);

-- name: probe_update
-- The cheapest durable change: one statement, one row.
UPDATE tenure_bench_probe SET n = n + 1 WHERE id = :id;

-- name: transactions
-- SQLite keeps no such count.
SELECT -1;

-- name: quiesce
-- After a bulk fill: write the WAL back into the database file and empty it, so that the
-- fill's checkpoint does not land in the middle of the measurement that follows.
PRAGMA wal_checkpoint(TRUNCATE);
