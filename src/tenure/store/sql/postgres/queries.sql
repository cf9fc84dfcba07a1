-- Named queries of the PostgreSQL store. `{now}` is the server's wall clock at the moment the
-- expression is evaluated (clock_timestamp(), not the transaction's start: a transaction that
-- waited for a row lock must not hand out a lease that is already partly spent), and
-- `{run_columns}` the columns a Run is built from; the loader fills both in.
-- Every statement that changes a run names its guard in its WHERE clause and RETURNs what it
-- changed, so the caller learns whether it won. An owner's write is guarded by its lease:
-- owner, token, and a lease not yet expired by this clock (`lease_expires >= {now}`, the
-- reaper's `lease_expires < {now}` turned round): a worker frozen past its lease writes
-- nothing once it thaws, even before any reaper acted (SPEC §15). Statements that make a run
-- claimable now also pg_notify('tenure_runs', queue): delivered at commit, so a listener never
-- wakes for a run it cannot see yet, and never for a transaction that rolled back.

-- name: now
-- The database's clock.
SELECT {now};

-- name: listen
LISTEN tenure_runs;

-- name: migration_lock
-- Held until the migrating transaction ends: concurrent workers migrate once, in turn.
SELECT pg_advisory_xact_lock(7310028432409670245);

-- name: schema_version_table
CREATE TABLE IF NOT EXISTS tenure_schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL
);

-- name: schema_version
SELECT COALESCE(MAX(version), 0) FROM tenure_schema_version;

-- name: schema_version_exists
SELECT to_regclass('tenure_schema_version') IS NOT NULL;

-- name: record_schema_version
INSERT INTO tenure_schema_version (version, applied_at) VALUES (%(version)s, {now});

-- name: transaction_id
-- This transaction's id if it wrote anything: after a connection lost during COMMIT, the
-- server is asked whether this id committed instead of guessing.
SELECT pg_current_xact_id_if_assigned()::text;

-- name: transaction_status
-- 'committed', 'aborted', 'in progress', or NULL when it is too old to know.
SELECT pg_xact_status(%(xid)s::xid8);

-- name: enqueue
-- A queued run; a taken idempotency key inserts nothing.
INSERT INTO tenure_runs (id, queue, status, request, idempotency_key, available_at,
                         last_sequence, created_at, updated_at, priority, concurrency_key,
                         fair_round, parent_id, root_id)
VALUES (%(id)s, %(queue)s, 'queued', %(request)s, %(idempotency_key)s,
        {now} + make_interval(secs => %(delay)s), %(last_sequence)s, {now}, {now},
        %(priority)s, %(concurrency_key)s, {_fair_round}, %(parent_id)s, %(root_id)s)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, CASE WHEN %(delay)s <= 0 THEN pg_notify('tenure_runs', queue) END;

-- name: _fair_round
-- A new run's round (SPEC §22): the round the queue's head has reached at its priority, or,
-- when its key already has runs queued there, the round after its key's last one. So a key
-- takes one turn per round, and a key that comes to a long queue joins the current round
-- instead of waiting behind every round the queue holds. A run without a key joins the
-- current round. (Two enqueues of one key at the same instant may share a round.)
-- The key's last round is read from the top of its entries in `tenure_runs_key` at or below
-- (key, 'queued', priority), then checked to be one of them: written as the plain
-- `status = 'queued'` it was, the lookup could also be served by the claim-order index
-- (filtered by key), and statistics taken while no run was queued (the partial indexes then
-- look empty to the planner until the next ANALYZE) made it choose that index: every keyed
-- enqueue then read every queued run (bench/RESULTS.md). The row comparison is an index
-- condition of `tenure_runs_key` alone.
GREATEST(COALESCE((SELECT f.fair_round FROM tenure_runs f
                    WHERE f.status = 'queued' AND f.priority = %(priority)s
                    ORDER BY f.priority DESC, f.fair_round LIMIT 1), 0),
         CASE WHEN %(concurrency_key)s::text IS NULL THEN 0
              ELSE COALESCE((SELECT k.fair_round + 1
                               FROM (SELECT f.status, f.priority, f.fair_round
                                       FROM tenure_runs f
                                      WHERE f.concurrency_key = %(concurrency_key)s::text
                                        AND (f.concurrency_key, f.status, f.priority)
                                            <= (%(concurrency_key)s::text, 'queued',
                                                %(priority)s::integer)
                                      ORDER BY f.concurrency_key DESC, f.status DESC,
                                               f.priority DESC, f.fair_round DESC
                                      LIMIT 1) AS k
                              WHERE k.status = 'queued' AND k.priority = %(priority)s), 0) END)

-- name: find_by_idempotency_key
SELECT id FROM tenure_runs WHERE idempotency_key = %(idempotency_key)s;

-- name: start
-- An interactive run, running from birth under its caller's lease (token 1).
INSERT INTO tenure_runs (id, queue, status, request, idempotency_key, claimed_by,
                         lease_expires, lease_token, available_at, last_sequence,
                         created_at, started_at, updated_at)
VALUES (%(id)s, %(queue)s, 'running', %(request)s, %(idempotency_key)s, %(owner)s,
        {now} + make_interval(secs => %(lease)s), 1, {now}, %(last_sequence)s,
        {now}, {now}, {now});

-- name: insert_event
INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload, replay,
                           created_at)
VALUES (%(run_id)s, %(sequence)s, %(attempt)s, %(lease_token)s, %(kind)s, %(payload)s,
        %(replay)s, {now});

-- name: insert_events
-- The events of one transaction (%(events)s: a JSON array of the rows insert_event takes, the
-- payload as JSON text) in one statement: one execution on the server instead of one per
-- event, and one parameter to send (a claim and a settle of a batch of short runs write
-- three events a run).
INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload, replay,
                           created_at)
SELECT e.run_id, e.sequence, e.attempt, e.lease_token, e.kind, e.payload::json, e.replay, {now}
  FROM json_to_recordset(%(events)s::json) AS e(run_id text, sequence integer,
                                                attempt integer, lease_token bigint,
                                                kind text, payload text, replay text);

-- name: _claim_set
-- What a claim does to each run it takes: the claim of the oldest runs and the claim of one
-- named run differ only in which rows they take.
   SET status = 'running', claimed_by = %(owner)s,
       lease_expires = {now} + make_interval(secs => %(lease)s),
       lease_token = r.lease_token + 1,
       attempt = CASE WHEN r.started_at IS NULL THEN 0 ELSE r.attempt + 1 END,
       started_at = COALESCE(r.started_at, {now}), updated_at = {now},
       last_sequence = r.last_sequence + %(n)s

-- name: _claim_returning
RETURNING r.id, r.lease_token, r.attempt, r.request, r.requeue_count, r.last_sequence,
          r.decision, r.fence_call, r.concurrency_key, r.priority, r.available_at,
          r.concurrency_key IS NOT NULL
          AND EXISTS (SELECT 1 FROM tenure_concurrency_limits l
                       WHERE l.key = r.concurrency_key),
          r.parent_id IS NOT NULL

-- name: _key_has_room
-- A run whose concurrency key has a limit is claimable while fewer than that many runs of
-- the key are running (SPEC §22). Read here from this statement's snapshot to pass over the
-- runs of a full key (the full keys read once per statement, `tenure_full_keys`); two claims
-- may both see room for one more, so the claim then locks its keys and counts again
-- (`concurrency_lock`, `concurrency_room`).
(t.concurrency_key IS NULL
 OR t.concurrency_key <> ALL ((SELECT tenure_full_keys())::text[]))

-- name: claim
-- Claim up to %(limit)s claimable runs, the highest priority first, then round-robin by
-- concurrency key (the lowest round, `_fair_round`), then the oldest. SKIP LOCKED: rows
-- another claimer has locked are
-- passed over instead of waited for, and a row that stopped being queued while we looked is
-- re-checked under its lock and dropped, so every row goes to exactly one claimer.
-- "Available now" is the statement's start (stable, unlike clock_timestamp()), which lets
-- it bound the scan of the partial index; the lease is still timed by the clock.
-- A run of a paused queue is passed over; a pause committed before this statement started
-- is seen by it (a claim already under way when the pause commits may still take a run).
-- The paused queues are read once (an init plan) and filter the scan of the claim-order index.
-- `queue || ''`: the planner then costs the filter as passing most rows. Compared as the bare
-- column, the column's statistics (one queue, say) make it expect that the filter passes
-- almost nothing, and it sorts the whole backlog at each claim instead of reading the index
-- in order up to the limit; NOT EXISTS (an anti-join) and NOT IN (a hashed subplan, costed
-- as passing half) do the same.
WITH picked AS (
    SELECT t.id FROM tenure_runs t
     WHERE t.status = 'queued' AND t.available_at <= statement_timestamp()
       AND (%(queues)s::text[] IS NULL OR t.queue = ANY (%(queues)s::text[]))
       AND t.queue || '' <> ALL (ARRAY(SELECT queue FROM tenure_paused_queues))
       AND {_key_has_room}
     ORDER BY t.priority DESC, t.fair_round, t.available_at, t.id
     LIMIT %(limit)s
       FOR UPDATE OF t SKIP LOCKED
)
UPDATE tenure_runs r
{_claim_set}
  FROM picked
 WHERE r.id = picked.id
{_claim_returning};

-- name: claim_plan
-- Sent with each claim, in its transaction: the claim's plan reads the claim-order index up
-- to its limit, never the whole backlog sorted. A table without statistics yet (a new
-- database before autovacuum's first ANALYZE of it, a burst of runs into an empty queue)
-- made the planner expect a handful of queued runs and sort them: every claim then read
-- and sorted the whole backlog (2 ms for 2,000 runs; bench/RESULTS.md). The index gives
-- the claim's order, so a plan without a sort always exists.
SET LOCAL enable_sort = off;

-- name: claim_run
-- The claim filtered by id: one named run, if it is queued and claimable now (by its primary
-- key rather than the claim-order partial index, which would walk the backlog to find it). A
-- paused queue's run is not taken this way either.
UPDATE tenure_runs r
{_claim_set}
  FROM tenure_runs t
 WHERE r.id = %(id)s AND r.status = 'queued' AND r.available_at <= {now}
   AND NOT EXISTS (SELECT 1 FROM tenure_paused_queues p WHERE p.queue = r.queue)
   AND t.id = r.id AND {_key_has_room}
{_claim_returning};

-- name: concurrency_lock
-- Taken by a claim that took runs of these keys, before it counts them again: a claim of a
-- key waits for the one before it to commit, and its next statement's snapshot sees what that
-- one took (under READ COMMITTED two claims could otherwise both see room for the last
-- slot). Locks are taken in one order (hash order), so two claims never wait for each other.
SELECT count(pg_advisory_xact_lock(1952804718, h))
  FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest(%(keys)s::text[]) AS k ORDER BY h) AS s;

-- name: concurrency_room
-- The limit of each key of %(keys)s that has one and how many of its runs are running now,
-- this claim's own included.
SELECT l.key, l.max_running,
       (SELECT count(*) FROM tenure_runs r
         WHERE r.concurrency_key = l.key AND r.status = 'running')
  FROM tenure_concurrency_limits l
 WHERE l.key = ANY (%(keys)s::text[]);

-- name: unclaim
-- A run this claim took beyond its key's limit goes back as if it had not been taken, in the
-- claim's own transaction (nobody saw the claim): the token, the attempt, the start and the
-- sequence the claim reserved are given back. No live-lease condition: the row is this
-- transaction's own (it holds its lock), and a lease that ran out while the claim waited
-- for its keys' locks must still be given back.
UPDATE tenure_runs
   SET status = 'queued', claimed_by = '', lease_expires = NULL,
       lease_token = lease_token - 1,
       attempt = CASE WHEN attempt = 0 THEN 0 ELSE attempt - 1 END,
       started_at = CASE WHEN attempt = 0 THEN NULL ELSE started_at END,
       last_sequence = last_sequence - %(n)s
 WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
   AND lease_token = %(token)s
RETURNING id;

-- name: record_step
-- Heartbeat: renew the lease of the owner, reserve %(n)s event sequences, add usage, and insert
-- the step's events (%(events)s: a JSON array of {i, kind, payload}, i counting from 0, the
-- payload as JSON text), in one statement. The events carry the owner's lease (%(attempt)s,
-- %(token)s); none is inserted when the guard fails.
--
-- It runs as a transaction of its own (autocommit: one round trip), which a retry cannot
-- apply twice. %(nonce)s is drawn by the client for this one step and stored on the run with
-- it. A try that finds its nonce already there, under the same lease, learns that an earlier
-- try of this step committed and answers with that try's last sequence instead of appending
-- its events again; under another lease or status it matches nothing: lost, as any step.
-- The replay's read locks the row under the lease guard alone and compares the nonce only
-- after: a retry that arrives while the first try is still committing waits for it and then
-- reads the row as that try left it, where a plain read (or a lock taken only on rows that
-- already carry the nonce) would see the row as it was before and report a lease it holds
-- as lost.
WITH moved AS (
    UPDATE tenure_runs
       SET lease_expires = {now} + make_interval(secs => %(lease)s),
           last_sequence = last_sequence + %(n)s,
           input_tokens = input_tokens + %(input_tokens)s,
           output_tokens = output_tokens + %(output_tokens)s,
           cost = cost + %(cost)s, step_nonce = %(nonce)s, updated_at = {now}
     WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
       AND lease_token = %(token)s AND lease_expires >= {now}
       AND step_nonce IS DISTINCT FROM %(nonce)s
    RETURNING last_sequence
), added AS (
    INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload,
                               replay, created_at)
    SELECT %(id)s, moved.last_sequence - %(n)s + 1 + e.i, %(attempt)s, %(token)s, e.kind,
           e.payload::json, e.replay, {now}
      FROM moved, json_to_recordset(%(events)s::json) AS e(i integer, kind text,
                                                           payload text, replay text)
), held AS (
    SELECT last_sequence, step_nonce FROM tenure_runs
     WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
       AND lease_token = %(token)s AND lease_expires >= {now}
       AND NOT EXISTS (SELECT FROM moved)
       FOR NO KEY UPDATE
)
SELECT last_sequence FROM moved
UNION ALL
SELECT last_sequence FROM held WHERE step_nonce = %(nonce)s;

-- name: renew_leases
-- The lease keeper's round: every lease of %(batch)s (a JSON array of {id, owner, token,
-- lease}) renewed under its own ownership guard, in one statement. Only a lease that has
-- not expired is renewed (a worker that was frozen past its lease keeps nothing), and a
-- renewal never shortens a lease (a write's fence lease covers its tool's timeout).
-- It never waits for a row lock: a multi-row statement that waited could deadlock with a
-- group settle. A row locked this instant is being written by its segment, a settle or a
-- cancel; its id is returned as kept, and the next round renews it or finds it lost.
WITH b AS (
    SELECT * FROM json_to_recordset(%(batch)s::json) AS b(id text, owner text, token bigint,
                                                           lease double precision)
), free AS (
    SELECT r.id FROM tenure_runs r JOIN b ON r.id = b.id FOR UPDATE OF r SKIP LOCKED
), renewed AS (
    UPDATE tenure_runs r
       SET lease_expires = GREATEST(r.lease_expires, {now} + make_interval(secs => b.lease))
      FROM b
     WHERE r.id = b.id AND r.id IN (SELECT id FROM free) AND r.status = 'running'
       AND r.claimed_by = b.owner AND r.lease_token = b.token AND r.lease_expires >= {now}
    RETURNING r.id
)
SELECT id FROM renewed
UNION ALL
SELECT b.id FROM b JOIN tenure_runs r ON r.id = b.id WHERE b.id NOT IN (SELECT id FROM free);

-- name: mark_fence
-- Stamp the effect of the write about to run; the lease is renewed to cover the tool.
UPDATE tenure_runs
   SET pending_effect = %(effect)s, fence_call = %(call)s, fence_probe = %(probe)s,
       lease_expires = {now} + make_interval(secs => %(lease)s), updated_at = {now}
 WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
   AND lease_token = %(token)s AND lease_expires >= {now}
RETURNING last_sequence, attempt, lease_token;

-- name: clear_fence
UPDATE tenure_runs
   SET pending_effect = '', fence_call = NULL, fence_probe = false,
       lease_expires = {now} + make_interval(secs => %(lease)s),
       last_sequence = last_sequence + %(n)s, updated_at = {now}
 WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
   AND lease_token = %(token)s AND lease_expires >= {now}
RETURNING last_sequence, attempt, lease_token;

-- name: mark_step_deadline
-- A worker gives up a step past its deadline (SPEC §15): its lease will lapse, and the
-- reaper is to say why. Guarded by the lease, refused once it expired (a reaper may be
-- acting on it already: its requeue, decided without the mark, must stand as written), and
-- by what the worker decided on: the step it saw in flight is still the last one (no event
-- recorded since) and the fence is the one it saw. The reason is shown at once.
UPDATE tenure_runs
   SET deadline_token = lease_token, error_class = 'timeout', error = %(why)s,
       updated_at = {now}
 WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
   AND lease_token = %(token)s AND lease_expires >= {now}
   AND last_sequence = %(last_sequence)s AND pending_effect = %(fence)s
RETURNING last_sequence, attempt, lease_token;

-- name: requeue
-- A failed attempt goes back to the queue after its backoff, charging the budget. A run
-- that backs off is claimable only later: polling finds it, no notification is sent.
UPDATE tenure_runs
   SET status = 'queued', requeue_count = requeue_count + 1,
       available_at = {now} + make_interval(secs => %(delay)s), claimed_by = '',
       lease_expires = NULL, pending_effect = '', fence_call = NULL, fence_probe = false,
       error_class = %(error_class)s,
       error = %(error)s, last_sequence = last_sequence + %(n)s, updated_at = {now}
 WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
   AND lease_token = %(token)s AND lease_expires >= {now}
RETURNING last_sequence, attempt, lease_token,
          CASE WHEN %(delay)s <= 0 THEN pg_notify('tenure_runs', queue) END;

-- name: hand_back
-- A claimed run whose segment never started goes back untouched: no attempt counted (the
-- claim's increment is undone; a first claim also forgets its start), no budget charged.
-- `available_at` keeps its place at the head of the queue, unless the run is handed back
-- because this worker cannot serve it: then it waits %(unserved_base)s * 2^n seconds (at
-- most %(unserved_cap)s), n being how often that happened before.
-- The fence is never touched: the run goes back with the fence it came with, and only while
-- that fence is the one standing. %(fence_call)s is the call of the in-doubt fence the claim
-- brought (SPEC §16), NULL when it brought none; a fence a write stamped since the claim (or
-- one cleared since) makes the hand-back match nothing, for its caller decided without it.
UPDATE tenure_runs
   SET status = 'queued', claimed_by = '', lease_expires = NULL,
       attempt = CASE WHEN attempt = 0 THEN 0 ELSE attempt - 1 END,
       started_at = CASE WHEN attempt = 0 THEN NULL ELSE started_at END,
       available_at = CASE WHEN %(unserved)s
                           THEN {now} + make_interval(secs => LEAST(
                                %(unserved_base)s * power(2, LEAST(unserved, 30)),
                                %(unserved_cap)s))
                           ELSE available_at END,
       unserved = unserved + CASE WHEN %(unserved)s THEN 1 ELSE 0 END,
       error_class = CASE WHEN %(unserved)s THEN 'configuration' ELSE error_class END,
       error = CASE WHEN %(unserved)s THEN %(error)s ELSE error END,
       last_sequence = last_sequence + %(n)s, updated_at = {now}
 WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
   AND lease_token = %(token)s AND lease_expires >= {now}
   AND CASE WHEN %(fence_call)s::text IS NULL THEN pending_effect = ''
            ELSE pending_effect <> '' AND fence_probe AND fence_call = %(fence_call)s::text END
RETURNING last_sequence, attempt, lease_token,
          CASE WHEN NOT %(unserved)s THEN pg_notify('tenure_runs', queue) END;

-- name: release
-- `available_at` keeps its (past) value: the run goes back to its old place at the
-- head of the queue instead of behind everything enqueued since it was claimed.
-- A draining worker hands the run back without charging the budget; never while a
-- non-idempotent write is in flight (that run is dead-lettered instead).
UPDATE tenure_runs
   SET status = 'queued', claimed_by = '', lease_expires = NULL,
       pending_effect = '', fence_call = NULL, fence_probe = false,
       last_sequence = last_sequence + %(n)s, updated_at = {now}
 WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
   AND lease_token = %(token)s AND lease_expires >= {now}
   AND pending_effect <> 'non_idempotent_write'
RETURNING last_sequence, attempt, lease_token, pg_notify('tenure_runs', queue);

-- name: settle_batch
-- Settle: a terminal state for each run of %(batch)s (a JSON array of objects, one per run:
-- id, owner, token, status, reason, output, error_class, error, keep, keep_fence, fence, n,
-- usage), each under its owner's lease and, when `fence` is set, only while that fence
-- stands. A dead-letter keeps its request (for redrive); every failure keeps its fence as
-- evidence of a write that may have happened. One settle is a batch of one. (A run may
-- appear twice, under an old token and a new one: only the row whose token matches can
-- apply.) For runs without a parent; `settle_batch_parents_first` for a batch with one.
{_settle_batch}
RETURNING r.id, r.lease_token, r.last_sequence;

-- name: settle_batch_parents_first
-- `settle_batch` for a batch of which a run may have a parent (its claim said so, or did
-- not say): their ids also as %(ids)s, whose parents are locked first (`_parents_first`).
-- A batch of runs without parents does without: the lookup of each run's parent was a
-- tenth of a lone settle's time on the server.
{_settle_batch}
   AND {_parents_first}
RETURNING r.id, r.lease_token, r.last_sequence;

-- name: _settle_batch
UPDATE tenure_runs r
   SET status = b.status, termination_reason = b.reason, output = b.output,
       error_class = b.error_class, error = b.error, claimed_by = '',
       lease_expires = NULL,
       request = CASE WHEN b.keep THEN r.request ELSE NULL END,
       pending_effect = CASE WHEN b.keep_fence THEN r.pending_effect ELSE '' END,
       fence_call = CASE WHEN b.keep_fence THEN r.fence_call END,
       fence_probe = b.keep_fence AND r.fence_probe,
       decision = CASE WHEN b.keep THEN r.decision ELSE NULL END, waiting = NULL,
       wait_deadline = NULL,
       input_tokens = r.input_tokens + b.input_tokens,
       output_tokens = r.output_tokens + b.output_tokens, cost = r.cost + b.cost,
       last_sequence = r.last_sequence + b.n, finished_at = {now}, updated_at = {now}
  FROM json_to_recordset(%(batch)s::json) AS b(
           id text, owner text, token bigint, status text, reason text, output text,
           error_class text, error text, keep boolean, keep_fence boolean, fence text,
           n integer,
           input_tokens bigint, output_tokens bigint, cost double precision)
 WHERE r.id = b.id AND r.status = 'running' AND r.claimed_by = b.owner
   AND r.lease_token = b.token AND r.lease_expires >= {now}
   AND (b.fence = '' OR r.pending_effect = b.fence)

-- name: cancel
-- Any non-terminal run; the fence stays as evidence of a write that may have happened.
-- With %(expected)s, only while the run is still in that status: a bulk cancel of the runs a
-- listing found queued must not cancel one that a worker claimed since.
UPDATE tenure_runs
   SET status = 'cancelled', termination_reason = 'cancelled', claimed_by = '',
       lease_expires = NULL, request = NULL, waiting = NULL, decision = NULL,
       wait_deadline = NULL, last_sequence = last_sequence + %(n)s,
       finished_at = {now}, updated_at = {now}
 WHERE id = %(id)s AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (%(expected)s::text IS NULL OR status = %(expected)s::text)
   AND {_parent_first}
RETURNING last_sequence, attempt, lease_token;

-- name: held_by
-- The runs an owner holds now (a worker checks its claims after a commit whose outcome it
-- could not learn), each with the call of the in-doubt fence it was claimed with (no write
-- of a claim that no slot runs can have stamped one since), which goes back with it.
SELECT id, claimed_by, lease_token, attempt, fence_call FROM tenure_runs
 WHERE status = 'running' AND claimed_by = %(owner)s;

-- name: stale_runs
-- Running rows whose lease expired: candidates for the reaper.
-- A worker's mark under the lease that expired names the cause (a step past its deadline);
-- its reason is the row's error.
SELECT id, lease_token, pending_effect, request IS NOT NULL, requeue_count, fence_probe,
       deadline_token IS NOT DISTINCT FROM lease_token, error
  FROM tenure_runs
 WHERE status = 'running' AND lease_expires < {now}
 ORDER BY lease_expires
 LIMIT %(limit)s;

-- name: requeue_stale
-- `available_at` keeps its (past) value: the run goes back to its old place at the
-- head of the queue instead of behind everything enqueued since it was claimed.
-- Everything the reaper decided on is re-checked here: staleness and the token (a
-- heartbeat that landed since wins; if it holds the row lock, this statement waits and
-- re-checks the renewed row), and the fence, budget and request it read (a fence stamped
-- since the read must never be cleared by a requeue decided without it).
UPDATE tenure_runs
   SET status = 'queued', requeue_count = requeue_count + 1,
       claimed_by = '', lease_expires = NULL, pending_effect = '', fence_call = NULL,
       fence_probe = false,
       error_class = 'timeout', error = %(error)s,
       last_sequence = last_sequence + %(n)s, updated_at = {now}
 WHERE id = %(id)s AND status = 'running' AND lease_expires < {now}
   AND lease_token = %(token)s AND pending_effect = %(fence)s
   AND fence_probe = %(fence_probe)s
   AND requeue_count = %(requeue_count)s AND (request IS NOT NULL) = %(has_request)s
   AND (deadline_token IS NOT DISTINCT FROM lease_token) = %(step_deadline)s
RETURNING last_sequence, attempt, lease_token, pg_notify('tenure_runs', queue);

-- name: dead_letter_stale
-- Guarded like requeue_stale: a fence cleared since the read is no reason to dead-letter.
UPDATE tenure_runs
   SET status = 'failed', termination_reason = %(reason)s, error_class = 'timeout',
       error = %(error)s, claimed_by = '', lease_expires = NULL,
       last_sequence = last_sequence + %(n)s, finished_at = {now}, updated_at = {now}
 WHERE id = %(id)s AND status = 'running' AND lease_expires < {now}
   AND lease_token = %(token)s AND pending_effect = %(fence)s
   AND fence_probe = %(fence_probe)s
   AND requeue_count = %(requeue_count)s AND (request IS NOT NULL) = %(has_request)s
   AND (deadline_token IS NOT DISTINCT FROM lease_token) = %(step_deadline)s
   AND {_parent_first}
RETURNING last_sequence, attempt, lease_token;

-- name: fence_of
-- Locks the row so that the fence read is the one the redrive below replaces.
SELECT pending_effect, fence_probe FROM tenure_runs WHERE id = %(id)s FOR UPDATE;

-- name: redrive
-- A dead-letter with its request back to the queue, with a fresh budget. A child run only
-- while its parent has not ended (SPEC §21: a child never runs on under an ended parent;
-- the parent is locked first, by lock_parent). A standing
-- non-idempotent fence refuses unless forced: resuming would repeat that write.
UPDATE tenure_runs
   SET status = 'queued', termination_reason = '', requeue_count = 0,
       pending_effect = CASE WHEN fence_probe THEN pending_effect ELSE '' END,
       fence_call = CASE WHEN fence_probe THEN fence_call END,
       available_at = {now}, finished_at = NULL, error_class = '', error = '',
       output = NULL, last_sequence = last_sequence + %(n)s, updated_at = {now}
 WHERE id = %(id)s AND status = 'failed'
   AND termination_reason IN ('retries_exhausted', 'not_retryable')
   AND request IS NOT NULL
   AND (%(force)s OR pending_effect <> 'non_idempotent_write' OR fence_probe)
   AND (parent_id IS NULL OR EXISTS (SELECT 1 FROM tenure_runs AS p
                                      WHERE p.id = tenure_runs.parent_id
                                        AND p.status NOT IN ('completed', 'failed', 'cancelled')))
RETURNING last_sequence, attempt, lease_token, pg_notify('tenure_runs', queue);

-- name: fork_state
-- What a fork's plan is decided on (SPEC §23), read in one statement: the status, the last
-- sequence (the journal it plans over ends there), the fence and the call it stands for.
SELECT status, last_sequence, pending_effect, fence_probe, fence_call
  FROM tenure_runs WHERE id = %(id)s;

-- name: fork_run
-- A fork (SPEC §23): a new queued run made from a run that has ended or waits for a person,
-- guarded by everything its plan was decided on: the status, the last sequence (no event
-- was added since the plan read the journal), the fence and its probe. The original's row
-- is locked (FOR SHARE) until the fork commits, so no claim, decision, cancel or redrive
-- changes it between this guard and the copy of its events; one that committed after the
-- plan read it fails the guard (re-read on the newest row version), and nothing is copied.
INSERT INTO tenure_runs (id, queue, status, request, available_at, last_sequence,
                         pending_effect, fence_probe, fence_call, forked_from_id,
                         forked_from_sequence, created_at, updated_at)
SELECT %(fork_id)s, queue, 'queued', %(request)s, {now}, %(at)s, %(fence)s, %(fence_probe)s,
       %(fence_call)s, id, %(at)s, {now}, {now}
  FROM tenure_runs
 WHERE id = %(id)s
   AND status IN ('completed', 'failed', 'cancelled', 'waiting_for_approval',
                  'waiting_for_input')
   AND last_sequence = %(last_sequence)s AND pending_effect = %(seen_fence)s
   AND fence_probe = %(seen_probe)s AND %(at)s BETWEEN 1 AND last_sequence
   FOR SHARE
RETURNING id, pg_notify('tenure_runs', queue);

-- name: fork_events
-- The fork's journal: the original's events before the sequence it was forked at, as they
-- were recorded (attempt, token, time), in the same transaction as the fork's row.
INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload, replay,
                           created_at)
SELECT %(fork_id)s, sequence, attempt, lease_token, kind, payload, replay, created_at
  FROM tenure_events
 WHERE run_id = %(id)s AND sequence < %(at)s;

-- name: purge_events
-- The runs are locked until the purge commits: a redrive cannot take back a run whose
-- events are going.
DELETE FROM tenure_events
 WHERE run_id IN (SELECT id FROM tenure_runs
                   WHERE status IN ('completed', 'failed', 'cancelled')
                     AND finished_at < %(cutoff)s
                     FOR UPDATE);

-- name: purge_budgets
-- The ledgers of the trees whose root is purged with it (its reservations go with them).
DELETE FROM tenure_budgets
 WHERE root_id IN (SELECT id FROM tenure_runs
                    WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at < %(cutoff)s);

-- name: purge_runs
DELETE FROM tenure_runs
 WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at < %(cutoff)s;

-- name: get_run
SELECT {run_columns}, request FROM tenure_runs WHERE id = %(id)s;

-- name: run_status
SELECT status FROM tenure_runs WHERE id = %(id)s;

-- name: events
SELECT run_id, sequence, attempt, kind, payload, created_at, lease_token
  FROM tenure_events
 WHERE run_id = %(id)s AND sequence > %(after)s
 ORDER BY sequence;

-- name: journal
-- An agent function's replay (SPEC §20): kinds and payloads only, in order, row by row
-- (see journal_text).
SELECT kind, payload
  FROM tenure_events
 WHERE run_id = %(id)s
 ORDER BY sequence;

-- name: journal_text
-- The same journal as one row: its payloads as one JSON array, as text (decoded by one
-- call in the client, not one json.loads per event by the driver), its kinds and sequences
-- as comma-separated lists.
SELECT '[' || string_agg(payload::text, ',' ORDER BY sequence) || ']',
       string_agg(kind, ',' ORDER BY sequence),
       string_agg(sequence::text, ',' ORDER BY sequence)
  FROM tenure_events
 WHERE run_id = %(id)s;

-- name: replay_journal
-- What a replay reads (SPEC §20), as two texts: the replay forms of the steps that have one,
-- as one flat JSON array (four values a step), and every other event as
-- `[sequence, kind, payload]` in a second array. Only the short form of a step is read
-- and decoded; the positions in the first are checked by the reader.
SELECT '[' || string_agg(replay, ',' ORDER BY sequence) || ']',
       '[' || string_agg(CASE WHEN replay IS NULL
                              THEN '[' || sequence || ',' || to_json(kind)::text || ','
                                   || payload::text || ']' END,
                         ',' ORDER BY sequence) || ']'
  FROM tenure_events
 WHERE run_id = %(id)s;

-- name: last_event
-- A run's latest event: a running run's step in flight is the one after it.
SELECT run_id, sequence, attempt, kind, payload, created_at, lease_token
  FROM tenure_events
 WHERE run_id = %(id)s
 ORDER BY sequence DESC
 LIMIT 1;

-- name: request_event
-- A run's first event, its request: what it was asked to do (an agent function's name and
-- input), read without the rest of its journal.
SELECT run_id, sequence, attempt, kind, payload, created_at, lease_token
  FROM tenure_events
 WHERE run_id = %(id)s
 ORDER BY sequence
 LIMIT 1;

-- name: runs
SELECT {run_columns}, NULL FROM tenure_runs
 WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
   AND (%(reason)s::text IS NULL OR termination_reason = %(reason)s::text)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
   AND (%(parent)s::text IS NULL OR parent_id = %(parent)s::text)
   AND (NOT %(roots)s OR parent_id IS NULL)
 ORDER BY created_at DESC, id
 LIMIT %(limit)s;

-- name: search_runs
-- Runs by the metadata of their request (every key of the JSON object %(meta)s, with that
-- value) and by when they were created (%(since)s / %(until)s seconds ago; NULL:
-- unbounded), newest first. The request event (sequence 0) holds the metadata of every
-- run, ended ones included (a settled run's row keeps no request). An operator's search:
-- it reads runs newest first until %(limit)s match.
SELECT {run_columns}, NULL FROM tenure_runs
 WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
   AND (%(reason)s::text IS NULL OR termination_reason = %(reason)s::text)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
   AND (%(parent)s::text IS NULL OR parent_id = %(parent)s::text)
   AND (NOT %(roots)s OR parent_id IS NULL)
   AND (%(since)s::float8 IS NULL
        OR created_at >= {now} - make_interval(secs => %(since)s::float8))
   AND (%(until)s::float8 IS NULL
        OR created_at < {now} - make_interval(secs => %(until)s::float8))
   AND (%(meta)s::jsonb IS NULL OR EXISTS (
        SELECT 1 FROM tenure_events AS e
         WHERE e.run_id = tenure_runs.id AND e.sequence = 0
           AND (e.payload::jsonb -> 'metadata') @> %(meta)s::jsonb))
 ORDER BY created_at DESC, id
 LIMIT %(limit)s;

-- name: purge_cutoff
SELECT {now} - make_interval(secs => %(age)s);

-- name: suspend
-- The owner holds the run for a person: no lease while it waits (the reaper ignores it). An
-- interactive run stores its request now, so that any worker can continue it.
UPDATE tenure_runs
   SET status = %(status)s, claimed_by = '', lease_expires = NULL, pending_effect = '',
       fence_call = NULL, fence_probe = false,
       request = COALESCE(request, %(request)s::text), waiting = %(waiting)s, decision = NULL,
       wait_deadline = CASE WHEN %(timeout)s::float8 IS NULL THEN NULL
                            ELSE {now} + make_interval(secs => %(timeout)s::float8) END,
       input_tokens = input_tokens + %(input_tokens)s,
       output_tokens = output_tokens + %(output_tokens)s, cost = cost + %(cost)s,
       last_sequence = last_sequence + %(n)s, updated_at = {now}
 WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
   AND lease_token = %(token)s AND lease_expires >= {now}
RETURNING last_sequence, attempt, lease_token;

-- name: decide_queued
-- A person's decision on a waiting run; the continuation goes to the queue. Two decisions
-- race on the status: one applies, the other matches nothing. The decision names the turn
-- it was decided on, and applies only while the run still waits at that turn: a decision
-- read for one hold never answers the next (the status is the same again).
UPDATE tenure_runs
   SET status = 'queued', available_at = {now}, decision = %(decision)s, waiting = NULL,
       wait_deadline = NULL, last_sequence = last_sequence + %(n)s, updated_at = {now}
 WHERE id = %(id)s AND status = %(expected)s
   AND (waiting::jsonb -> 'turn') IS NOT DISTINCT FROM (%(decision)s::jsonb -> 'turn')
RETURNING last_sequence, attempt, lease_token, pg_notify('tenure_runs', queue);

-- name: decide_inline
-- A person's decision, continued by the deciding process under a lease of its own (only
-- while the run still waits at the turn decided, as decide_queued).
UPDATE tenure_runs
   SET status = 'running', claimed_by = %(owner)s, lease_expires = {now} + make_interval(secs => %(lease)s),
       lease_token = lease_token + 1, attempt = attempt + 1, decision = %(decision)s,
       waiting = NULL, wait_deadline = NULL, last_sequence = last_sequence + %(n)s,
       updated_at = {now}
 WHERE id = %(id)s AND status = %(expected)s
   AND (waiting::jsonb -> 'turn') IS NOT DISTINCT FROM (%(decision)s::jsonb -> 'turn')
RETURNING id, lease_token, attempt, request, requeue_count, last_sequence, decision,
          fence_call;

-- name: expire_waits
-- Runs that waited past their deadline are settled approval_denied (deadline and status
-- re-checked in the same statement, so a decision that landed first wins). Their parents
-- are locked first (as in `_parents_first`), those of the runs `expired` picked.
WITH expired AS MATERIALIZED (
    SELECT id, parent_id FROM tenure_runs
     WHERE status IN ('waiting_for_approval', 'waiting_for_input') AND wait_deadline < {now}
     ORDER BY wait_deadline
     LIMIT %(limit)s)
UPDATE tenure_runs
   SET status = 'failed', termination_reason = 'approval_denied',
       error = 'no decision before the approval timeout', waiting = NULL, decision = NULL,
       request = NULL, wait_deadline = NULL, last_sequence = last_sequence + %(n)s,
       finished_at = {now}, updated_at = {now}
 WHERE id IN (SELECT id FROM expired)
   AND status IN ('waiting_for_approval', 'waiting_for_input') AND wait_deadline < {now}
   AND (SELECT count(*) FROM (SELECT p.id FROM tenure_runs AS p
                               WHERE p.id = ANY (ARRAY(SELECT parent_id FROM expired
                                                        WHERE parent_id IS NOT NULL))
                               ORDER BY p.id
                                 FOR UPDATE OF p) AS parents) >= 0
RETURNING id, last_sequence, attempt, lease_token;

-- name: waiting_of
SELECT status, waiting FROM tenure_runs WHERE id = %(id)s;

-- name: runs_after
-- The page of `runs` that follows the run %(after)s (the cursor), in the same order. The
-- cursor's own created_at is compared as stored, so a page boundary is exact.
SELECT {run_columns}, NULL FROM tenure_runs
 WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
   AND (%(reason)s::text IS NULL OR termination_reason = %(reason)s::text)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
   AND (%(parent)s::text IS NULL OR parent_id = %(parent)s::text)
   AND (NOT %(roots)s OR parent_id IS NULL)
   AND EXISTS (SELECT 1 FROM tenure_runs AS cursor_run
                WHERE cursor_run.id = %(after)s
                  AND (tenure_runs.created_at < cursor_run.created_at
                       OR (tenure_runs.created_at = cursor_run.created_at
                           AND tenure_runs.id > cursor_run.id)))
 ORDER BY created_at DESC, id
 LIMIT %(limit)s;

-- name: run_counts
-- How many runs are in each status, by termination reason (the dashboard's counts).
SELECT status, termination_reason, COUNT(*) FROM tenure_runs
 GROUP BY status, termination_reason;

-- name: requeue_in_doubt
-- SPEC §16: a run whose non-idempotent write may have happened goes back to the queue with
-- its fence standing, because its tool has a probe: the next segment asks the probe before
-- anything else. Charged to the budget like a stale requeue. Applies only while that fence
-- (and its probe) still stands.
UPDATE tenure_runs
   SET status = 'queued', requeue_count = requeue_count + 1,
       available_at = {now} + make_interval(secs => %(delay)s), claimed_by = '',
       lease_expires = NULL, error_class = %(error_class)s, error = %(error)s,
       last_sequence = last_sequence + %(n)s, updated_at = {now}
 WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
   AND lease_token = %(token)s AND lease_expires >= {now}
   AND pending_effect = 'non_idempotent_write' AND fence_probe
RETURNING last_sequence, attempt, lease_token,
          CASE WHEN %(delay)s <= 0 THEN pg_notify('tenure_runs', queue) END;

-- name: requeue_in_doubt_stale
-- The reaper's in-doubt requeue: guarded, like requeue_stale, by everything it read.
UPDATE tenure_runs
   SET status = 'queued', requeue_count = requeue_count + 1,
       claimed_by = '', lease_expires = NULL, error_class = 'timeout', error = %(error)s,
       last_sequence = last_sequence + %(n)s, updated_at = {now}
 WHERE id = %(id)s AND status = 'running' AND lease_expires < {now}
   AND lease_token = %(token)s AND pending_effect = %(fence)s
   AND fence_probe = %(fence_probe)s
   AND requeue_count = %(requeue_count)s AND (request IS NOT NULL) = %(has_request)s
   AND (deadline_token IS NOT DISTINCT FROM lease_token) = %(step_deadline)s
RETURNING last_sequence, attempt, lease_token, pg_notify('tenure_runs', queue);

-- name: fence_call_of
-- The call an in-doubt fence stands for.
SELECT pending_effect, fence_call, fence_probe FROM tenure_runs WHERE id = %(id)s;
-- name: _enqueued_run
-- The run of a one-statement enqueue, for the event inserts below to follow. It inserts
-- nothing, events included, when the idempotency key is taken or the id is already there (an
-- earlier try of this same statement committed and its answer was lost).
WITH run AS (
    INSERT INTO tenure_runs (id, queue, status, request, idempotency_key, available_at,
                             last_sequence, created_at, updated_at, priority,
                             concurrency_key, fair_round, parent_id, root_id)
    VALUES (%(id)s, %(queue)s, 'queued', %(request)s, %(idempotency_key)s,
            {now} + make_interval(secs => %(delay)s), %(last_sequence)s, {now}, {now},
            %(priority)s, %(concurrency_key)s, {_fair_round}, %(parent_id)s, %(root_id)s)
    ON CONFLICT DO NOTHING
    RETURNING id, queue
)

-- name: _enqueued_notify
SELECT id, CASE WHEN %(delay)s <= 0 THEN pg_notify('tenure_runs', queue) END FROM run

-- name: enqueue_with_events
-- One queued run and its events (%(events)s: a JSON array of {sequence, kind, payload}, the
-- payload as JSON text) in one statement, which commits on its own: one round trip.
{_enqueued_run}, added AS (
    INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload,
                               created_at)
    SELECT run.id, e.sequence, 0, 0, e.kind, e.payload::json, {now}
      FROM run, json_to_recordset(%(events)s::json) AS e(sequence integer, kind text,
                                                          payload text)
)
{_enqueued_notify};

-- name: enqueue_with_request
-- The same for the usual run, whose one event is its `request` with the request's own text
-- as payload: the text is sent and parsed once, not a second time inside %(events)s (for a
-- request of 50 kB, a third of the statement's time).
{_enqueued_run}, added AS (
    INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload,
                               created_at)
    SELECT run.id, 0, 0, 0, 'request', %(request)s::json, {now} FROM run
)
{_enqueued_notify};

-- name: enqueued_as
-- After an `enqueue_with_…` inserted nothing: the run it had inserted itself on an earlier
-- try (its id first), else the run that holds the idempotency key.
SELECT id FROM tenure_runs
 WHERE id = %(id)s OR idempotency_key = %(idempotency_key)s
 ORDER BY id = %(id)s DESC
 LIMIT 1;

-- name: register_worker
-- A worker starts (or comes back after its row was purged while it was cut off): running,
-- seen now (one reading of the clock: started and seen at the same instant).
INSERT INTO tenure_workers (id, host, pid, queues, slots, slots_in_use, heartbeat_seconds,
                            state, started_at, last_seen)
SELECT %(id)s, %(host)s, %(pid)s, %(queues)s, %(slots)s, 0, %(heartbeat_seconds)s,
       'running', t, t
  FROM (SELECT {now} AS t) AS clock
ON CONFLICT (id) DO NOTHING;

-- name: beat_worker
-- A worker's own heartbeat: seen now, with the slots it uses and whether it drains. A stopped
-- row stays stopped (a late beat from a stopping thread must not revive it).
UPDATE tenure_workers
   SET last_seen = {now}, slots_in_use = %(slots_in_use)s,
       state = CASE WHEN %(stopping)s::boolean THEN 'stopping' ELSE state END
 WHERE id = %(id)s AND state <> 'stopped'
RETURNING id;

-- name: stop_worker
-- A clean shutdown: the worker's row says it stopped, and when.
UPDATE tenure_workers
   SET state = 'stopped', stopped_at = clock.t, last_seen = clock.t, slots_in_use = 0
  FROM (SELECT {now} AS t) AS clock
 WHERE id = %(id)s AND state <> 'stopped'
RETURNING id;

-- name: workers
-- Worker rows, the most recently seen first.
SELECT id, host, pid, queues, slots, slots_in_use, heartbeat_seconds, state, started_at,
       last_seen, stopped_at
  FROM tenure_workers
 ORDER BY last_seen DESC, id
 LIMIT %(limit)s;

-- name: purge_workers
-- Retention: rows of workers that stopped, or died (no heartbeat for `dead_beats` of their
-- intervals), last seen before the cutoff. A live worker's row stays whatever the cutoff.
DELETE FROM tenure_workers
 WHERE last_seen < %(cutoff)s
   AND (state = 'stopped'
        OR last_seen < {now} - make_interval(secs => %(dead_beats)s * heartbeat_seconds));

-- name: publish_delta
-- SPEC §18: pieces of the answer text of model calls in flight, one NOTIFY each on the
-- run's own channel, each under its segment's lease (a segment that lost its run publishes
-- nothing). Payload: the call's sequence (the one its `llm` event will take, named by the
-- publisher), the piece's number within the call and its text, tab-separated; pieces are
-- cut small enough for the 8,000-byte payload limit. Notifications are delivered at commit
-- and keep their order. A piece is refused once any event holds its call's sequence: a
-- publication that stalled past its call's end (its `llm` event, then a tool's, then the
-- next call streaming) must not land among the next call's pieces. The check reads the
-- run's last committed event in this statement; an event committed while it runs leaves
-- the piece under its own call's sequence, which a reader drops once it has that event.
-- A delta is worth nothing after a crash, so its commit does not wait for the WAL to reach
-- the disk (synchronous_commit off for this transaction alone): the wait would be the
-- largest part of a delta's latency on a durable server.
SELECT pg_notify(d.channel, d.sequence::text || E'\t' || d.chunk::text || E'\t' || d.text)
  FROM (SELECT set_config('synchronous_commit', 'off', true)) AS no_wait,
       (SELECT * FROM unnest(%(ids)s::text[], %(owners)s::text[], %(tokens)s::bigint[],
                             %(sequences)s::bigint[], %(channels)s::text[],
                             %(chunks)s::integer[], %(texts)s::text[])
                      WITH ORDINALITY AS p(id, owner, token, sequence, channel, chunk, text, n)
         ORDER BY n) AS d
  JOIN tenure_runs r
    ON r.id = d.id AND r.status = 'running' AND r.claimed_by = d.owner
   AND r.lease_token = d.token AND r.lease_expires >= {now}
   AND r.last_sequence + 1 = d.sequence;

-- name: listen_deltas
-- A reader of one run's deltas (`{channel}` is filled in as a quoted identifier).
LISTEN {channel};

-- name: deltas_after
-- PostgreSQL keeps no deltas (they travel by NOTIFY): nothing to read. Here so that both
-- dialects name the same queries.
SELECT NULL::bigint, NULL::integer, NULL::integer, NULL::text WHERE false;

-- name: run_progress
-- What a reader following a run polls: its status and the sequence of its last event.
SELECT status, last_sequence FROM tenure_runs WHERE id = %(id)s;

-- name: deltas_since
-- PostgreSQL keeps no deltas: nothing to read (see deltas_after).
SELECT NULL::bigint, NULL::text, NULL::integer, NULL::integer, NULL::text WHERE false;

-- name: set_model_limits
-- Register (or change) a model's limits. A new row starts with full buckets; a changed limit
-- keeps what its bucket holds, up to the new capacity; the circuit is left as it is.
INSERT INTO tenure_models AS m (name, requests_per_minute, tokens_per_minute, concurrency,
                                requests, tokens, refilled_at, updated_at)
VALUES (%(model)s, %(rpm)s, %(tpm)s, %(concurrency)s, %(requests)s, %(tokens)s, {now},
        {now})
ON CONFLICT (name) DO UPDATE
   SET requests = CASE WHEN excluded.requests IS NULL THEN NULL
                       WHEN m.requests IS NULL THEN excluded.requests
                       ELSE LEAST(m.requests, excluded.requests) END,
       tokens = CASE WHEN excluded.tokens IS NULL THEN NULL
                     WHEN m.tokens IS NULL THEN excluded.tokens
                     ELSE LEAST(m.tokens, excluded.tokens) END,
       requests_per_minute = excluded.requests_per_minute,
       tokens_per_minute = excluded.tokens_per_minute,
       concurrency = excluded.concurrency, updated_at = {now};

-- name: lock_model
-- The model's row, locked before a reservation or a settlement changes it: the statements
-- after it in the transaction then see every earlier writer's reservations and levels.
SELECT name FROM tenure_models WHERE name = %(model)s FOR UPDATE;

-- name: sweep_reservations
-- Forget the calls in flight whose run no longer holds the lease they were made under (the
-- worker died, the run was reaped or cancelled) or that outlived their hold: their
-- concurrency is free again.
DELETE FROM tenure_model_reservations s
 WHERE s.model = %(model)s
   AND (s.expires_at <= {now} OR NOT EXISTS (
        SELECT 1 FROM tenure_runs r
         WHERE r.id = s.run_id AND r.status = 'running' AND r.lease_token = s.lease_token
           AND r.lease_expires > {now}));

-- name: _requests_level
-- A bucket's level at t.now (SPEC §17): refilled at limit/60 a second since `refilled_at`,
-- holding at most limit/10 (at least one call).
LEAST(GREATEST(requests_per_minute / 10, 1),
      requests + EXTRACT(EPOCH FROM t.now - refilled_at)::float8 * requests_per_minute / 60)

-- name: _tokens_level
LEAST(GREATEST(tokens_per_minute / 10, 1),
      tokens + EXTRACT(EPOCH FROM t.now - refilled_at)::float8 * tokens_per_minute / 60)

-- name: reserve_capacity
-- Compare-and-set: take one request and %(tokens)s from the buckets only while the circuit
-- is closed, each bucket can pay and keep %(headroom)s seconds of its refill (a call larger
-- than its bucket waits for a full one, then owes the rest) and fewer than `concurrency`
-- calls are in flight.
WITH t AS (SELECT {now} AS now),
m AS (
    SELECT m.name, m.circuit_open_until, m.concurrency,
           CASE WHEN m.requests_per_minute IS NOT NULL THEN
               {_requests_level} END AS requests,
           CASE WHEN m.tokens_per_minute IS NOT NULL THEN
               {_tokens_level} END AS tokens,
           GREATEST(m.requests_per_minute / 10, 1) AS request_capacity,
           GREATEST(m.tokens_per_minute / 10, 1) AS token_capacity,
           m.requests_per_minute, m.tokens_per_minute
      FROM tenure_models m, t
     WHERE m.name = %(model)s
)
UPDATE tenure_models x
   SET requests = m.requests - 1, tokens = m.tokens - %(tokens)s, refilled_at = t.now,
       updated_at = t.now
  FROM m, t
 WHERE x.name = m.name
   AND (m.circuit_open_until IS NULL OR m.circuit_open_until <= t.now)
   AND (m.requests IS NULL OR m.requests >= LEAST(
        1 + %(headroom)s * m.requests_per_minute / 60, m.request_capacity))
   AND (m.tokens IS NULL OR m.tokens >= LEAST(
        %(tokens)s + %(headroom)s * m.tokens_per_minute / 60, m.token_capacity))
   AND (m.concurrency IS NULL OR m.concurrency > (
        SELECT count(*) FROM tenure_model_reservations s WHERE s.model = m.name))
RETURNING x.name;

-- name: add_reservation
-- The call just granted, held for its run's lease (and at most %(hold)s seconds).
INSERT INTO tenure_model_reservations (id, model, run_id, lease_token, tokens, expires_at,
                                       created_at)
VALUES (%(id)s, %(model)s, %(run_id)s, %(token)s, %(tokens)s,
        {now} + make_interval(secs => %(hold)s), {now});

-- name: settle_capacity
-- After the call: the buckets refilled to now, the tokens bucket given back %(refund)s (the
-- estimate minus what the call really used; negative when it used more).
WITH t AS (SELECT {now} AS now)
UPDATE tenure_models m
   SET requests = CASE WHEN m.requests_per_minute IS NOT NULL THEN
                      LEAST(GREATEST(m.requests_per_minute / 10, 1),
                            m.requests + EXTRACT(EPOCH FROM t.now - m.refilled_at)::float8
                                         * m.requests_per_minute / 60) END,
       tokens = CASE WHEN m.tokens_per_minute IS NOT NULL THEN
                    LEAST(GREATEST(m.tokens_per_minute / 10, 1),
                          m.tokens + EXTRACT(EPOCH FROM t.now - m.refilled_at)::float8
                                     * m.tokens_per_minute / 60 + %(refund)s) END,
       refilled_at = t.now, updated_at = t.now
  FROM t
 WHERE m.name = %(model)s;

-- name: drop_reservation
DELETE FROM tenure_model_reservations WHERE id = %(id)s;

-- name: open_circuit
-- A rate limit with Retry-After: nobody calls the model for %(seconds)s (never shortened). A
-- model without limits gets its row here, at its first throttle: no limits, only a circuit.
INSERT INTO tenure_models AS m (name, refilled_at, circuit_open_until, updated_at)
VALUES (%(model)s, {now}, {now} + make_interval(secs => %(seconds)s), {now})
ON CONFLICT (name) DO UPDATE
   SET circuit_open_until = GREATEST(COALESCE(m.circuit_open_until, {now}),
                                     {now} + make_interval(secs => %(seconds)s)),
       updated_at = {now};

-- name: open_circuits
-- Every circuit open now and the seconds until it closes, by the database's clock: what a
-- worker checks before calling a model without limits (a small table: one row per model).
WITH t AS (SELECT {now} AS now)
SELECT m.name, EXTRACT(EPOCH FROM m.circuit_open_until - t.now)::double precision
  FROM tenure_models m, t
 WHERE m.circuit_open_until > t.now;

-- name: model_capacity
-- Each model's limits, its buckets' levels now, its calls in flight (only those whose run
-- still holds the lease they were made under) and its circuit while open; one model, or all.
WITH t AS (SELECT {now} AS now)
SELECT m.name, m.requests_per_minute, m.tokens_per_minute, m.concurrency,
       CASE WHEN m.requests_per_minute IS NOT NULL THEN
           {_requests_level} END,
       CASE WHEN m.tokens_per_minute IS NOT NULL THEN
           {_tokens_level} END,
       (SELECT count(*) FROM tenure_model_reservations s
          JOIN tenure_runs r ON r.id = s.run_id AND r.lease_token = s.lease_token
         WHERE s.model = m.name AND s.expires_at > t.now AND r.status = 'running'
           AND r.lease_expires > t.now),
       CASE WHEN m.circuit_open_until > t.now THEN m.circuit_open_until END,
       t.now
  FROM tenure_models m, t
 WHERE %(model)s::text IS NULL OR m.name = %(model)s
 ORDER BY m.name;

-- name: park
-- Throttled (SPEC §17): the run waits for its model's capacity in the queue, claimable at
-- the time capacity is expected back. Not charged: `requeue_count` is untouched. Never
-- while a non-idempotent write is in flight (a model call never runs under one).
UPDATE tenure_runs
   SET status = 'queued', available_at = {now} + make_interval(secs => %(delay)s),
       claimed_by = '', lease_expires = NULL, pending_effect = '', fence_call = NULL,
       fence_probe = false, last_sequence = last_sequence + %(n)s, updated_at = {now}
 WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
   AND lease_token = %(token)s AND lease_expires >= {now}
   AND pending_effect <> 'non_idempotent_write'
RETURNING last_sequence, attempt, lease_token;

-- name: pause_queue
-- Pause a queue: claims pass its runs over from the next claim on. Nothing when it is
-- paused already (the first pause, and who made it, are kept).
INSERT INTO tenure_paused_queues (queue, paused_at, paused_by)
VALUES (%(queue)s, {now}, %(by)s)
ON CONFLICT (queue) DO NOTHING
RETURNING queue;

-- name: resume_queue
-- Resume a queue; idle workers are woken (at commit) to claim its runs.
DELETE FROM tenure_paused_queues WHERE queue = %(queue)s
RETURNING queue, pg_notify('tenure_runs', queue);

-- name: paused_queues
SELECT queue, paused_at, paused_by FROM tenure_paused_queues ORDER BY queue;

-- name: queue_counts
-- Runs not yet ended, per queue and status.
SELECT queue, status, COUNT(*) FROM tenure_runs
 WHERE status IN ('queued', 'running', 'waiting_for_approval', 'waiting_for_input',
                  'waiting_for_children')
 GROUP BY queue, status;

-- name: ensure_budget
-- The ledger of a tree's budget (SPEC §21), written at its first model call: seeded with
-- what its root had used before there was a ledger (a run from an older tenure).
INSERT INTO tenure_budgets (root_id, max_tokens, max_cost, spent_tokens, spent_cost, updated_at)
SELECT r.id, %(max_tokens)s, %(max_cost)s, r.input_tokens + r.output_tokens, r.cost, {now}
  FROM tenure_runs r
 WHERE r.id = %(root)s
ON CONFLICT (root_id) DO NOTHING;

-- name: lock_budget
-- The ledger's row, locked before a reservation or a settlement changes it: the statements
-- after it in the transaction then see every earlier writer's reservations and spending.
SELECT root_id FROM tenure_budgets WHERE root_id = %(root)s FOR UPDATE;

-- name: sweep_budget_reservations
-- Reservations past their hold: never settled (their worker died), counted by nobody.
DELETE FROM tenure_budget_reservations WHERE root_id = %(root)s AND expires_at <= {now};

-- name: _held_budget
-- What the calls in flight on a tree's budget reserved: only those whose run still holds
-- the lease they were made under.
SELECT COALESCE(SUM(s.tokens), 0) AS tokens, COALESCE(SUM(s.cost), 0) AS cost
  FROM tenure_budget_reservations s
  JOIN tenure_runs r ON r.id = s.run_id AND r.lease_token = s.lease_token
 WHERE s.root_id = %(root)s AND s.expires_at > {now}
   AND r.status = 'running' AND r.lease_expires > {now}

-- name: reserve_budget
-- Compare-and-set on the tree's ledger: the call's estimate is reserved only while what
-- was spent plus what the calls in flight reserved leaves some of each limit, and only
-- for a run that holds its lease. A lone run is admitted exactly while it has not spent
-- its budget (as before there was a ledger); the calls of a tree never overspend by more
-- than the estimates of the calls in flight.
WITH held AS ({_held_budget})
INSERT INTO tenure_budget_reservations (id, root_id, run_id, lease_token, tokens, cost,
                                        expires_at, created_at)
SELECT %(id)s, b.root_id, %(run_id)s, %(token)s, %(tokens)s, %(cost)s,
       {now} + make_interval(secs => %(hold)s), {now}
  FROM tenure_budgets b, held h
 WHERE b.root_id = %(root)s
   AND (b.max_tokens IS NULL OR b.spent_tokens + h.tokens < b.max_tokens)
   AND (b.max_cost IS NULL OR b.spent_cost + h.cost < b.max_cost)
   AND EXISTS (SELECT 1 FROM tenure_runs r
                WHERE r.id = %(run_id)s AND r.status = 'running'
                  AND r.claimed_by = %(owner)s AND r.lease_token = %(token)s
                  AND r.lease_expires >= {now})
RETURNING id;

-- name: budget
-- A tree's ledger as it is now: its limits, what was spent, what the calls in flight hold.
WITH held AS ({_held_budget})
SELECT b.root_id, b.max_tokens, b.max_cost, b.spent_tokens, b.spent_cost, h.tokens, h.cost
  FROM tenure_budgets b, held h
 WHERE b.root_id = %(root)s;

-- name: settle_budget
-- After the call: what it used is spent (nothing, for a call that failed), once: only while
-- its reservation stands (a retried settlement finds it gone).
UPDATE tenure_budgets
   SET spent_tokens = spent_tokens + %(tokens)s, spent_cost = spent_cost + %(cost)s,
       updated_at = {now}
 WHERE root_id = %(root)s
   AND EXISTS (SELECT 1 FROM tenure_budget_reservations WHERE id = %(id)s);

-- name: drop_budget_reservation
DELETE FROM tenure_budget_reservations WHERE id = %(id)s;

-- name: held
-- Whether the owner still holds the run under its lease; locks its row until the
-- transaction ends (the wait below reads the children only after this lock is held: a
-- child settling now either locked the parent first, and this transaction then reads it
-- settled, or waits for this one, and then finds the parent waiting and wakes it).
SELECT 1 FROM tenure_runs
 WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
   AND lease_token = %(token)s AND lease_expires >= {now}
   FOR UPDATE;

-- name: wait_for_children
-- SPEC §21: the owner's agent function waits for children (%(children)s, a JSON array;
-- also in %(waiting)s, what the row shows and its children's trigger reads): no
-- lease and no slot while it waits. Only while one of them is not terminal yet: the child
-- that settles last wakes the parent (trigger tenure_runs_ended) in its own transaction,
-- and a child that settled before this write leaves the parent running, so that it goes
-- on at once; never a parent asleep with nothing left to wake it. Run after `held` in the
-- same transaction, as its own statement: it reads the children with a snapshot taken
-- after the parent's row was locked. An interactive run stores its request now.
-- `waits_for_all`: no child of the run still going is left out of %(children)s (read
-- under the same lock; a child that goes on again later clears it, trigger
-- tenure_runs_revived), so that a child's end can tell by the index alone whether it was
-- the last (0019).
UPDATE tenure_runs
   SET status = 'waiting_for_children', claimed_by = '', lease_expires = NULL,
       pending_effect = '', fence_call = NULL, fence_probe = false,
       request = COALESCE(request, %(request)s::text), waiting = %(waiting)s, decision = NULL,
       wait_deadline = NULL, last_sequence = last_sequence + %(n)s, updated_at = {now},
       waits_for_all = NOT EXISTS (
           SELECT o.id FROM tenure_runs AS o
            WHERE o.parent_id = %(id)s
              AND o.status NOT IN ('completed', 'failed', 'cancelled')
           EXCEPT
           SELECT json_array_elements_text(%(children)s::json))
 WHERE id = %(id)s AND status = 'running' AND claimed_by = %(owner)s
   AND lease_token = %(token)s AND lease_expires >= {now}
   AND EXISTS (SELECT 1 FROM json_array_elements_text(%(children)s::json) AS w(id)
                 JOIN tenure_runs AS c ON c.id = w.id
                WHERE c.parent_id = %(id)s
                  AND c.status NOT IN ('completed', 'failed', 'cancelled'))
RETURNING last_sequence, attempt, lease_token;

-- name: children_of
-- What a parent reads of the children it waits for (%(ids)s, a JSON array), only its own.
SELECT c.id, c.status, c.termination_reason, c.error, c.output
  FROM json_array_elements_text(%(ids)s::json) AS w(id)
  JOIN tenure_runs AS c ON c.id = w.id
 WHERE c.parent_id = %(parent)s;

-- name: tree
-- A run and all its descendants (SPEC §21), parents before children.
WITH RECURSIVE tree(id, depth) AS (
    SELECT id, 0 FROM tenure_runs WHERE id = %(id)s
    UNION ALL
    SELECT c.id, tree.depth + 1 FROM tenure_runs AS c JOIN tree ON c.parent_id = tree.id
     WHERE tree.depth < %(max_depth)s
)
SELECT {run_columns}, NULL FROM tenure_runs JOIN tree USING (id)
 ORDER BY tree.depth, created_at, id
 LIMIT %(limit)s;

-- name: lock_parent
-- The parent of run %(id)s, read (on PostgreSQL locked) before a redrive of that run decides on
-- it: the parent's own end, which cancels its children, then waits for the redrive and
-- finds the child queued again, or the redrive waits and finds the parent ended.
SELECT p.id FROM tenure_runs AS p
 WHERE p.id = (SELECT c.parent_id FROM tenure_runs AS c WHERE c.id = %(id)s)
   FOR UPDATE;

-- name: _parents_first
-- The parents first (SPEC §21): every statement that ends runs locks their parents before
-- their own rows. A run's end locks its parent (trigger tenure_runs_ended wakes it) and its
-- children (the same trigger cancels them). Locking its own row first, a child's end and
-- its parent's end took the two rows in opposite orders and deadlocked: the server broke
-- that after deadlock_timeout (a second of both stalled) by aborting one, which the store
-- ran again. Now a tree is locked from the top down whichever run ends, and the trigger
-- finds the parent locked by its own transaction already. Several parents are locked in id
-- order: two batches never wait for each other on them, and ids grow with time, so a
-- parent's id sorts before its children's (a batch that ends a run and its parent still
-- takes the parent first). The condition is an init plan (it names no column of the row):
-- a one-time filter, run before the scan that finds the rows to end; its value decides
-- nothing. A sub-select here costs a run without a parent less than a CTE would.
(SELECT count(*) FROM (SELECT p.id FROM tenure_runs AS p
                        WHERE p.id = ANY (ARRAY(SELECT c.parent_id FROM tenure_runs AS c
                                                 WHERE c.id = ANY (%(ids)s::text[])
                                                   AND c.parent_id IS NOT NULL))
                        ORDER BY p.id
                          FOR UPDATE OF p) AS parents) >= 0

-- name: _parent_first
-- `_parents_first` for the one run %(id)s.
(SELECT count(*) FROM (SELECT p.id FROM tenure_runs AS p
                        WHERE p.id = (SELECT c.parent_id FROM tenure_runs AS c
                                       WHERE c.id = %(id)s)
                          FOR UPDATE OF p) AS parent) >= 0

-- name: queue_totals
-- Tokens and cost per queue of the runs that ended in the last %(window)s seconds and of
-- the runs not yet ended (their spending so far). Bounded: ended runs are read through the
-- index on finished_at from the window's start only, the others as queue_counts reads them,
-- so a long history costs nothing here; nothing is added to the writes of a run's steps or
-- of its settle. A redriven run has no finished_at again: it is counted once.
SELECT queue, SUM(input_tokens), SUM(output_tokens), SUM(cost) FROM (
    SELECT queue, input_tokens, output_tokens, cost FROM tenure_runs
     WHERE finished_at IS NOT NULL
       AND finished_at >= {now} - make_interval(secs => %(window)s::float8)
    UNION ALL
    SELECT queue, input_tokens, output_tokens, cost FROM tenure_runs
     WHERE status IN ('queued', 'running', 'waiting_for_approval', 'waiting_for_input',
                      'waiting_for_children'))
    AS spent
 GROUP BY queue;

-- name: set_concurrency_limit
-- At most %(max_running)s runs of the key run at once, from the next claim on.
INSERT INTO tenure_concurrency_limits (key, max_running, updated_at)
VALUES (%(key)s, %(max_running)s, {now})
ON CONFLICT (key) DO UPDATE SET max_running = excluded.max_running,
                                updated_at = excluded.updated_at;

-- name: clear_concurrency_limit
DELETE FROM tenure_concurrency_limits WHERE key = %(key)s RETURNING key;

-- name: concurrency_limits
SELECT key, max_running FROM tenure_concurrency_limits ORDER BY key;

-- name: concurrency_counts
-- The running and queued runs of every key that has any (read from the key index alone).
SELECT concurrency_key, status, count(*) FROM tenure_runs
 WHERE concurrency_key IS NOT NULL AND status IN ('queued', 'running')
 GROUP BY concurrency_key, status;

-- name: put_schedule
-- A new schedule, or a schedule changed (its cron, zone, request and next tick); whether it
-- is paused and what it fired so far are kept.
INSERT INTO tenure_schedules (name, cron, timezone, request, paused, next_fire, fired,
                              created_at, updated_at)
VALUES (%(name)s, %(cron)s, %(timezone)s, %(request)s, false, %(next_fire)s, 0,
        {now}, {now})
ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, timezone = excluded.timezone,
                                 request = excluded.request, next_fire = excluded.next_fire,
                                 updated_at = excluded.updated_at;

-- name: schedules
SELECT name, cron, timezone, request, paused, next_fire, last_fire, last_run_id, fired, created_at FROM tenure_schedules ORDER BY name;

-- name: due_schedules
-- Schedules whose next tick has come, the most overdue first.
SELECT name, cron, timezone, request, paused, next_fire, last_fire, last_run_id, fired, created_at FROM tenure_schedules
 WHERE NOT paused AND next_fire <= {now}
 ORDER BY next_fire
 LIMIT %(limit)s;

-- name: advance_schedule
-- A tick fired: only by the firing that read this next tick, while the schedule is not
-- paused (another worker that fired it first, a pause, a change or a delete since the read
-- make this match nothing, and the firing enqueues nothing).
UPDATE tenure_schedules
   SET next_fire = %(next_fire)s, last_fire = %(tick)s, last_run_id = %(run_id)s,
       fired = fired + 1, updated_at = {now}
 WHERE name = %(name)s AND next_fire = %(seen)s AND NOT paused
RETURNING name;

-- name: pause_schedule
UPDATE tenure_schedules SET paused = true, updated_at = {now}
 WHERE name = %(name)s AND NOT paused
RETURNING name;

-- name: resume_schedule
-- Resumed: it fires from its next tick after now on (ticks that fell while it was paused do
-- not fire).
UPDATE tenure_schedules SET paused = false, next_fire = %(next_fire)s, updated_at = {now}
 WHERE name = %(name)s AND paused
RETURNING name;

-- name: delete_schedule
DELETE FROM tenure_schedules WHERE name = %(name)s RETURNING name;
