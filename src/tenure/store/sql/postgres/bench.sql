-- Named queries for the benchmarks in bench/ only: filling a table fast, probing the commit
-- rate. The runtime never uses them.

-- name: seed_cache
-- Nothing to set: the server's shared buffers serve every connection.
SELECT 1;

-- name: seed_finished_runs
-- %(n)s completed runs with random ids, each with the four events of a one-step run
-- (request, claimed, llm, assembled), in one statement.
WITH runs AS (
    INSERT INTO tenure_runs (id, queue, status, termination_reason, claimed_by, lease_token,
                             available_at, output, last_sequence, created_at, started_at,
                             finished_at, updated_at)
    SELECT gen_random_uuid()::text, 'default', 'completed', 'completed', '', 1,
           {now}, 'ok', 3, {now}, {now}, {now}, {now}
      FROM generate_series(1, %(n)s)
    RETURNING id
)
INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload, created_at)
SELECT runs.id, e.sequence, 0, CASE WHEN e.sequence = 0 THEN 0 ELSE 1 END, e.kind, '{}', {now}
  FROM runs
 CROSS JOIN (VALUES (0, 'request'), (1, 'claimed'), (2, 'llm'), (3, 'assembled'))
       AS e (sequence, kind)
 ORDER BY runs.id, e.sequence;

-- name: seed_finished_events
-- Written with the runs above.
SELECT 1;

-- name: unmark_seeded
SELECT 1;

-- name: probe_table
CREATE TABLE IF NOT EXISTS tenure_bench_probe (id integer PRIMARY KEY, n bigint NOT NULL);

-- name: probe_row
INSERT INTO tenure_bench_probe (id, n) VALUES (%(id)s, 0) ON CONFLICT (id) DO NOTHING;

-- name: probe_update
-- The cheapest durable change: one statement, one row.
UPDATE tenure_bench_probe SET n = n + 1 WHERE id = %(id)s;

-- name: transactions
-- Transactions committed in this database so far (reads included); the statistics are
-- flushed by each backend at most once a second, so wait before reading a delta.
SELECT xact_commit FROM pg_stat_database WHERE datname = current_database();

-- name: quiesce
-- After a bulk fill: what autovacuum and the checkpointer would have done by the time a
-- table got that big, done now rather than in the middle of the measurement that follows.
VACUUM (ANALYZE) tenure_runs, tenure_events;

-- name: checkpoint
CHECKPOINT;
