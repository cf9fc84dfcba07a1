-- Named queries of the SQLite store. `{now}` is SQLite's own clock in epoch seconds and
-- `{run_columns}` the columns a Run is built from; the loader fills both in.
-- Every statement that changes a run names its guard in its WHERE clause and RETURNs what
-- it changed, so the caller learns whether it won. An owner's write is guarded by its lease:
-- owner, token, and a lease not yet expired by this clock (`lease_expires >= {now}`, the
-- reaper's `lease_expires < {now}` turned round): a worker frozen past its lease writes
-- nothing once it thaws, even before any reaper acted (SPEC §15).

-- name: now
-- The database's clock.
SELECT {now};

-- name: enqueue
-- A queued run; a taken idempotency key inserts nothing (the unique index on keys is
-- partial: the conflict target names its condition). The caller reads the count of rows
-- inserted.
INSERT INTO tenure_runs (id, queue, status, request, idempotency_key, available_at,
                         last_sequence, created_at, updated_at, priority, concurrency_key,
                         fair_round, parent_id, root_id)
VALUES (:id, :queue, 'queued', :request, :idempotency_key, {now} + :delay,
        :last_sequence, {now}, {now}, :priority, :concurrency_key, {_fair_round}, :parent_id,
        :root_id)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;

-- name: mark_parent
-- A child's parent has had a child (`has_children`, SPEC §21; 0026): run after the insert of
-- each child row, in its transaction. Its end then cancels the children still going.
UPDATE tenure_runs SET has_children = 1 WHERE id = :parent_id AND NOT has_children;

-- name: _fair_round
-- A new run's round (SPEC §22): the round the queue's head has reached at its priority, or,
-- when its key already has runs queued there, the round after its key's last one. So a key
-- takes one turn per round, and a key that comes to a long queue joins the current round
-- instead of waiting behind every round the queue holds. A run without a key joins the
-- current round.
max(COALESCE((SELECT fair_round FROM tenure_runs INDEXED BY tenure_runs_claim_order
               WHERE status = 'queued' AND priority = :priority
               ORDER BY priority DESC, fair_round LIMIT 1), 0),
    CASE WHEN :concurrency_key IS NULL THEN 0
         ELSE COALESCE((SELECT max(fair_round) + 1 FROM tenure_runs INDEXED BY tenure_runs_key
                         WHERE concurrency_key = :concurrency_key AND status = 'queued'
                           AND priority = :priority), 0) END)

-- name: find_by_idempotency_key
SELECT id FROM tenure_runs WHERE idempotency_key = :idempotency_key;

-- name: start
-- An interactive run, running from birth under its caller's lease (token 1).
INSERT INTO tenure_runs (id, queue, status, request, idempotency_key, claimed_by,
                         lease_expires, lease_token, available_at, last_sequence,
                         created_at, started_at, updated_at)
VALUES (:id, :queue, 'running', :request, :idempotency_key, :owner,
        {now} + :lease, 1, {now}, :last_sequence, {now}, {now}, {now});

-- name: insert_event
INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload, replay,
                           created_at)
VALUES (:run_id, :sequence, :attempt, :lease_token, :kind, :payload, :replay, {now});

-- name: insert_events
-- `insert_event` for several rows in one statement: the store writes the row of VALUES once
-- per event and binds the values by position, in the order the row names them. One
-- statement, not one per row: each execution costs a statement's setup and its binding
-- from Python. A row's replay is '' when it has none (the store binds no None): stored as
-- NULL.
INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload, replay,
                           created_at)
VALUES (:run_id, :sequence, :attempt, :lease_token, :kind, :payload, NULLIF(:replay, ''),
        {now});

-- name: any_deltas
-- Whether the table of deltas holds a row at all: it is empty unless some call is streaming.
SELECT 1 FROM tenure_deltas LIMIT 1;

-- name: delete_answered_deltas
-- SPEC §18: the deltas of a run whose call's `llm` event the same transaction has just
-- recorded.
DELETE FROM tenure_deltas WHERE run_id = :run_id;

-- name: _claim_set
-- What a claim does to each run it takes: the claim of the oldest runs and the claim of one
-- named run differ only in which rows they take.
   SET status = 'running', claimed_by = :owner, lease_expires = {now} + :lease,
       lease_token = lease_token + 1,
       attempt = CASE WHEN started_at IS NULL THEN 0 ELSE attempt + 1 END,
       started_at = COALESCE(started_at, {now}), updated_at = {now},
       last_sequence = last_sequence + :n

-- name: _claim_returning
RETURNING id, lease_token, attempt, request, requeue_count, last_sequence, decision,
          fence_call, concurrency_key, priority, available_at,
          concurrency_key IS NOT NULL
          AND EXISTS (SELECT 1 FROM tenure_concurrency_limits l
                       WHERE l.key = tenure_runs.concurrency_key),
          parent_id IS NOT NULL

-- name: _key_has_room
-- A run whose concurrency key has a limit is claimable while fewer than that many runs of
-- the key are running (SPEC §22). Read here to pass over the runs of a full key; the claim
-- then counts again (`concurrency_room`), because one claim may take several runs of a key.
(concurrency_key IS NULL
 OR NOT EXISTS (SELECT 1 FROM tenure_concurrency_limits l
                 WHERE l.key = tenure_runs.concurrency_key
                   AND l.max_running <= (SELECT count(*) FROM tenure_runs x
                                          WHERE x.concurrency_key = l.key
                                            AND x.status = 'running')))

-- name: claim
-- Claim up to :limit claimable runs, the highest priority first, then round-robin by
-- concurrency key (the lowest round, `_fair_round`), then the oldest. The
-- writer lock taken by BEGIN IMMEDIATE makes the subquery and the update one step: no other
-- claimer can see these rows as queued.
-- INDEXED BY: without statistics the planner picks the listing index (status = 'queued'),
-- which reads and sorts every queued row at each claim, so a drain of a backlog of N runs
-- costs N²; the claim-order index yields the rows in the claim's order and stops at :limit.
-- A run of a paused queue is passed over: the pause is read in this same statement, under
-- the same lock, so a claim that starts after a pause committed takes nothing of its queue.
-- NOT IN reads the paused queues once per statement; a correlated NOT EXISTS ran its
-- subquery for every row passed over, which made passing a paused backlog 4-5 times dearer.
UPDATE tenure_runs
{_claim_set}
 WHERE id IN (SELECT id FROM tenure_runs INDEXED BY tenure_runs_claim_order
               WHERE status = 'queued' AND available_at <= {now}
                 AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues)))
                 AND queue NOT IN (SELECT queue FROM tenure_paused_queues)
                 AND {_key_has_room}
               ORDER BY priority DESC, fair_round, available_at, id
               LIMIT :limit)
{_claim_returning};

-- name: claim_run
-- The claim filtered by id: one named run, if it is queued and claimable now (by its primary
-- key rather than the claim-order index, which would walk the backlog to find it). A paused
-- queue's run is not taken this way either.
UPDATE tenure_runs
{_claim_set}
 WHERE id = :id AND status = 'queued' AND available_at <= {now}
   AND NOT EXISTS (SELECT 1 FROM tenure_paused_queues p WHERE p.queue = tenure_runs.queue)
   AND {_key_has_room}
{_claim_returning};

-- name: concurrency_room
-- The limit of each key of :keys that has one and how many of its runs are running now,
-- this claim's own included.
SELECT l.key, l.max_running,
       (SELECT count(*) FROM tenure_runs r
         WHERE r.concurrency_key = l.key AND r.status = 'running')
  FROM tenure_concurrency_limits l
 WHERE l.key IN (SELECT value FROM json_each(:keys));

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
       last_sequence = last_sequence - :n
 WHERE id = :id AND status = 'running' AND claimed_by = :owner AND lease_token = :token
RETURNING id;

-- name: record_step
-- Heartbeat: renew the lease of the owner, reserve :n event sequences, add usage.
UPDATE tenure_runs
   SET lease_expires = {now} + :lease, last_sequence = last_sequence + :n,
       input_tokens = input_tokens + :input_tokens,
       output_tokens = output_tokens + :output_tokens,
       cost = cost + :cost, updated_at = {now}
 WHERE id = :id AND status = 'running' AND claimed_by = :owner AND lease_token = :token
   AND lease_expires >= {now}
RETURNING last_sequence, attempt, lease_token;

-- name: renew_leases
-- The lease keeper's round: every lease of :batch (a JSON array of {id, owner, token,
-- lease}) renewed under its own ownership guard, in one statement. Only a lease that has
-- not expired is renewed (a worker that was frozen past its lease keeps nothing), and a
-- renewal never shortens a lease (a write's fence lease covers its tool's timeout).
UPDATE tenure_runs INDEXED BY sqlite_autoindex_tenure_runs_1
   SET lease_expires = MAX(lease_expires, {now} + json_extract(b.value, '$.lease'))
  FROM json_each(:batch) AS b
 WHERE tenure_runs.id = json_extract(b.value, '$.id') AND status = 'running'
   AND claimed_by = json_extract(b.value, '$.owner')
   AND lease_token = json_extract(b.value, '$.token') AND lease_expires >= {now}
RETURNING id;

-- name: mark_fence
-- Stamp the effect of the write about to run; the lease is renewed to cover the tool.
UPDATE tenure_runs
   SET pending_effect = :effect, fence_call = :call, fence_probe = :probe,
       lease_expires = {now} + :lease, updated_at = {now}
 WHERE id = :id AND status = 'running' AND claimed_by = :owner AND lease_token = :token
   AND lease_expires >= {now}
RETURNING last_sequence, attempt, lease_token;

-- name: clear_fence
UPDATE tenure_runs
   SET pending_effect = '', fence_call = NULL, fence_probe = 0, lease_expires = {now} + :lease,
       last_sequence = last_sequence + :n, updated_at = {now}
 WHERE id = :id AND status = 'running' AND claimed_by = :owner AND lease_token = :token
   AND lease_expires >= {now}
RETURNING last_sequence, attempt, lease_token;

-- name: mark_step_deadline
-- A worker gives up a step past its deadline (SPEC §15): its lease will lapse, and the
-- reaper is to say why. Guarded by the lease, refused once it expired (a reaper may be
-- acting on it already: its requeue, decided without the mark, must stand as written), and
-- by what the worker decided on: the step it saw in flight is still the last one (no event
-- recorded since) and the fence is the one it saw. The reason is shown at once.
UPDATE tenure_runs
   SET deadline_token = lease_token, error_class = 'timeout', error = :why,
       updated_at = {now}
 WHERE id = :id AND status = 'running' AND claimed_by = :owner
   AND lease_token = :token AND lease_expires >= {now}
   AND last_sequence = :last_sequence AND pending_effect = :fence
RETURNING last_sequence, attempt, lease_token;

-- name: requeue
-- A failed attempt goes back to the queue after its backoff, charging the budget.
UPDATE tenure_runs
   SET status = 'queued', requeue_count = requeue_count + 1,
       available_at = {now} + :delay, claimed_by = '', lease_expires = NULL,
       pending_effect = '', fence_call = NULL, fence_probe = 0, error_class = :error_class,
       error = :error,
       last_sequence = last_sequence + :n, updated_at = {now}
 WHERE id = :id AND status = 'running' AND claimed_by = :owner AND lease_token = :token
   AND lease_expires >= {now}
RETURNING last_sequence, attempt, lease_token;

-- name: hand_back
-- A claimed run whose segment never started goes back untouched: no attempt counted (the
-- claim's increment is undone; a first claim also forgets its start), no budget charged.
-- `available_at` keeps its place at the head of the queue, unless the run is handed back
-- because this worker cannot serve it: then it waits :unserved_base * 2^n seconds (at most
-- :unserved_cap), n being how often that happened before.
-- The fence is never touched: the run goes back with the fence it came with, and only while
-- that fence is the one standing. :fence_call is the call of the in-doubt fence the claim
-- brought (SPEC §16), NULL when it brought none; a fence a write stamped since the claim (or
-- one cleared since) makes the hand-back match nothing, for its caller decided without it.
UPDATE tenure_runs
   SET status = 'queued', claimed_by = '', lease_expires = NULL,
       attempt = CASE WHEN attempt = 0 THEN 0 ELSE attempt - 1 END,
       started_at = CASE WHEN attempt = 0 THEN NULL ELSE started_at END,
       available_at = CASE WHEN :unserved
                           THEN {now} + MIN(:unserved_base * (1 << MIN(unserved, 30)),
                                            :unserved_cap)
                           ELSE available_at END,
       unserved = unserved + CASE WHEN :unserved THEN 1 ELSE 0 END,
       error_class = CASE WHEN :unserved THEN 'configuration' ELSE error_class END,
       error = CASE WHEN :unserved THEN :error ELSE error END,
       last_sequence = last_sequence + :n, updated_at = {now}
 WHERE id = :id AND status = 'running' AND claimed_by = :owner AND lease_token = :token
   AND lease_expires >= {now}
   AND CASE WHEN :fence_call IS NULL THEN pending_effect = ''
            ELSE pending_effect <> '' AND fence_probe AND fence_call = :fence_call END
RETURNING last_sequence, attempt, lease_token;

-- name: release
-- `available_at` keeps its (past) value: the run goes back to its old place at the
-- head of the queue instead of behind everything enqueued since it was claimed.
-- A draining worker hands the run back without charging the budget; never while a
-- non-idempotent write is in flight (that run is dead-lettered instead).
UPDATE tenure_runs
   SET status = 'queued', claimed_by = '', lease_expires = NULL,
       pending_effect = '', fence_call = NULL, fence_probe = 0,
       last_sequence = last_sequence + :n, updated_at = {now}
 WHERE id = :id AND status = 'running' AND claimed_by = :owner AND lease_token = :token
   AND lease_expires >= {now}
   AND pending_effect <> 'non_idempotent_write'
RETURNING last_sequence, attempt, lease_token;

-- name: settle_batch
-- Settle: a terminal state for each run of :batch (a JSON array of objects, one per run:
-- id, owner, token, status, reason, output, error_class, error, keep, keep_fence, fence, n,
-- usage), each under its owner's lease and, when `fence` is set, only while that fence
-- stands. A dead-letter keeps its request (for redrive); every failure keeps its fence as
-- evidence of a write that may have happened. One settle is a batch of one. (A run may
-- appear twice, under an old token and a new one: only the row whose token matches can
-- apply.) INDEXED BY: the planner would otherwise scan the running rows once per entry.
UPDATE tenure_runs INDEXED BY sqlite_autoindex_tenure_runs_1
   SET status = json_extract(b.value, '$.status'),
       termination_reason = json_extract(b.value, '$.reason'),
       output = json_extract(b.value, '$.output'),
       error_class = json_extract(b.value, '$.error_class'),
       error = json_extract(b.value, '$.error'), claimed_by = '', lease_expires = NULL,
       request = CASE WHEN json_extract(b.value, '$.keep') THEN request ELSE NULL END,
       pending_effect = CASE WHEN json_extract(b.value, '$.keep_fence') THEN pending_effect
                             ELSE '' END,
       fence_call = CASE WHEN json_extract(b.value, '$.keep_fence') THEN fence_call END,
       fence_probe = CASE WHEN json_extract(b.value, '$.keep_fence') THEN fence_probe
                          ELSE 0 END,
       decision = CASE WHEN json_extract(b.value, '$.keep') THEN decision ELSE NULL END,
       waiting = NULL, wait_deadline = NULL,
       input_tokens = input_tokens + json_extract(b.value, '$.input_tokens'),
       output_tokens = output_tokens + json_extract(b.value, '$.output_tokens'),
       cost = cost + json_extract(b.value, '$.cost'),
       last_sequence = last_sequence + json_extract(b.value, '$.n'),
       finished_at = {now}, updated_at = {now}
  FROM json_each(:batch) AS b
 WHERE tenure_runs.id = json_extract(b.value, '$.id') AND status = 'running'
   AND claimed_by = json_extract(b.value, '$.owner')
   AND lease_token = json_extract(b.value, '$.token') AND lease_expires >= {now}
   AND (json_extract(b.value, '$.fence') = ''
        OR pending_effect = json_extract(b.value, '$.fence'))
RETURNING id, lease_token, last_sequence;

-- name: settle_one
-- `settle_batch` for one run, its values bound as parameters: SQLite executes this once per
-- run of a batch (in the batch's one transaction). Reading each value out of the batch's
-- JSON cost more than the rest of the update (`json_each` renders a row's object anew at
-- every `json_extract`). The guard is `settle_batch`'s (tests/unit/test_guards.py).
-- No RETURNING: SQLite gathers a RETURNING's rows in a temporary table made at every
-- execution (a b-tree opened, filled, read back and freed). The row's new last sequence
-- goes to the store through `tenure_settled`, a function of the store's connection that
-- returns its argument: SET computes it only for the row the guard let through, and the
-- call costs about 2,700 instructions where the primary-key read that followed the settle
-- cost 14,000.
UPDATE tenure_runs
   SET status = :status, termination_reason = :reason, output = :output,
       error_class = :error_class, error = :error, claimed_by = '', lease_expires = NULL,
       request = CASE WHEN :keep THEN request ELSE NULL END,
       pending_effect = CASE WHEN :keep_fence THEN pending_effect ELSE '' END,
       fence_call = CASE WHEN :keep_fence THEN fence_call END,
       fence_probe = CASE WHEN :keep_fence THEN fence_probe ELSE 0 END,
       decision = CASE WHEN :keep THEN decision ELSE NULL END,
       waiting = NULL, wait_deadline = NULL,
       input_tokens = input_tokens + :input_tokens,
       output_tokens = output_tokens + :output_tokens,
       cost = cost + :cost,
       last_sequence = tenure_settled(last_sequence + :n),
       finished_at = {now}, updated_at = {now}
 WHERE id = :id AND status = 'running'
   AND claimed_by = :owner
   AND lease_token = :token AND lease_expires >= {now}
   AND (:fence = '' OR pending_effect = :fence);

-- name: cancel
-- Any non-terminal run; the fence stays as evidence of a write that may have happened.
-- With :expected, only while the run is still in that status: a bulk cancel of the runs a
-- listing found queued must not cancel one that a worker claimed since.
UPDATE tenure_runs
   SET status = 'cancelled', termination_reason = 'cancelled', claimed_by = '',
       lease_expires = NULL, request = NULL, waiting = NULL, decision = NULL,
       wait_deadline = NULL, last_sequence = last_sequence + :n,
       finished_at = {now}, updated_at = {now}
 WHERE id = :id AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (:expected IS NULL OR status = :expected)
RETURNING last_sequence, attempt, lease_token;

-- name: held_by
-- The runs an owner holds now (a worker checks its claims after a commit whose outcome it
-- could not learn), each with the call of the in-doubt fence it was claimed with (no write
-- of a claim that no slot runs can have stamped one since), which goes back with it.
-- (`status <> 'queued'` lets the planner use tenure_runs_listing_dequeued.)
SELECT id, claimed_by, lease_token, attempt, fence_call FROM tenure_runs
 WHERE status = 'running' AND status <> 'queued' AND claimed_by = :owner;

-- name: stale_runs
-- Running rows whose lease expired: candidates for the reaper.
-- A worker's mark under the lease that expired names the cause (a step past its deadline);
-- its reason is the row's error.
SELECT id, lease_token, pending_effect, request IS NOT NULL, requeue_count, fence_probe,
       deadline_token IS lease_token, error
  FROM tenure_runs
 WHERE status = 'running' AND status <> 'queued' AND lease_expires < {now}
 ORDER BY lease_expires
 LIMIT :limit;

-- name: requeue_stale
-- `available_at` keeps its (past) value: the run goes back to its old place at the
-- head of the queue instead of behind everything enqueued since it was claimed.
-- Everything the reaper decided on is re-checked here: staleness and the token (a
-- heartbeat that landed since wins), and the fence, budget and request it read (a fence
-- stamped since the read must never be cleared by a requeue decided without it).
UPDATE tenure_runs
   SET status = 'queued', requeue_count = requeue_count + 1,
       claimed_by = '', lease_expires = NULL, pending_effect = '', fence_call = NULL,
       fence_probe = 0,
       error_class = 'timeout', error = :error,
       last_sequence = last_sequence + :n, updated_at = {now}
 WHERE id = :id AND status = 'running' AND lease_expires < {now} AND lease_token = :token
   AND pending_effect = :fence AND fence_probe = :fence_probe AND requeue_count = :requeue_count
   AND (request IS NOT NULL) = :has_request
   AND (deadline_token IS lease_token) = :step_deadline
RETURNING last_sequence, attempt, lease_token;

-- name: dead_letter_stale
-- Guarded like requeue_stale: a fence cleared since the read is no reason to dead-letter.
UPDATE tenure_runs
   SET status = 'failed', termination_reason = :reason, error_class = 'timeout',
       error = :error, claimed_by = '', lease_expires = NULL,
       last_sequence = last_sequence + :n, finished_at = {now}, updated_at = {now}
 WHERE id = :id AND status = 'running' AND lease_expires < {now} AND lease_token = :token
   AND pending_effect = :fence AND fence_probe = :fence_probe AND requeue_count = :requeue_count
   AND (request IS NOT NULL) = :has_request
   AND (deadline_token IS lease_token) = :step_deadline
RETURNING last_sequence, attempt, lease_token;

-- name: fence_of
SELECT pending_effect, fence_probe FROM tenure_runs WHERE id = :id;

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
       output = NULL, last_sequence = last_sequence + :n, updated_at = {now}
 WHERE id = :id AND status = 'failed'
   AND termination_reason IN ('retries_exhausted', 'not_retryable')
   AND request IS NOT NULL
   AND (:force OR pending_effect <> 'non_idempotent_write' OR fence_probe)
   AND (parent_id IS NULL OR EXISTS (SELECT 1 FROM tenure_runs AS p
                                      WHERE p.id = tenure_runs.parent_id
                                        AND NOT (p.status = 'completed' OR p.status = 'failed' OR p.status = 'cancelled')))
RETURNING last_sequence, attempt, lease_token;

-- name: fork_state
-- What a fork's plan is decided on (SPEC §23), read in one statement: the status, the last
-- sequence (the journal it plans over ends there), the fence and the call it stands for.
SELECT status, last_sequence, pending_effect, fence_probe, fence_call
  FROM tenure_runs WHERE id = :id;

-- name: fork_run
-- A fork (SPEC §23): a new queued run made from a run that has ended or waits for a person,
-- guarded by everything its plan was decided on: the status, the last sequence (no event
-- was added since the plan read the journal), the fence and its probe. A run claimed (or
-- decided, cancelled, redriven) after the plan was read inserts nothing, and the caller
-- copies nothing. The original's row is only read.
INSERT INTO tenure_runs (id, queue, status, request, available_at, last_sequence,
                         pending_effect, fence_probe, fence_call, forked_from_id,
                         forked_from_sequence, created_at, updated_at)
SELECT :fork_id, queue, 'queued', :request, {now}, :at, :fence, :fence_probe, :fence_call,
       id, :at, {now}, {now}
  FROM tenure_runs
 WHERE id = :id
   AND status IN ('completed', 'failed', 'cancelled', 'waiting_for_approval',
                  'waiting_for_input')
   AND last_sequence = :last_sequence AND pending_effect = :seen_fence
   AND fence_probe = :seen_probe AND :at BETWEEN 1 AND last_sequence;

-- name: fork_events
-- The fork's journal: the original's events before the sequence it was forked at, as they
-- were recorded (attempt, token, time), in the same transaction as the fork's row.
INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload, replay,
                           created_at)
SELECT :fork_id, sequence, attempt, lease_token, kind, payload, replay, created_at
  FROM tenure_events
 WHERE run_id = :id AND sequence < :at;

-- name: purge_events
DELETE FROM tenure_events
 WHERE run_id IN (SELECT id FROM tenure_runs
                   WHERE status IN ('completed', 'failed', 'cancelled')
                     AND finished_at < :cutoff);

-- name: purge_budgets
-- The ledgers of the trees whose root is purged with it (its reservations go with them).
DELETE FROM tenure_budgets
 WHERE root_id IN (SELECT id FROM tenure_runs
                    WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at < :cutoff);

-- name: purge_runs
DELETE FROM tenure_runs
 WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at < :cutoff;

-- name: get_run
SELECT {run_columns}, request FROM tenure_runs WHERE id = :id;

-- name: run_status
SELECT status FROM tenure_runs WHERE id = :id;

-- name: events
SELECT run_id, sequence, attempt, kind, payload, created_at, lease_token
  FROM tenure_events
 WHERE run_id = :id AND sequence > :after
 ORDER BY sequence;

-- name: journal
-- An agent function's replay (SPEC §20): kinds and payloads only, in order, row by row (a
-- payload that is not JSON is one damaged event; see journal_text).
SELECT kind, payload
  FROM tenure_events
 WHERE run_id = :id
 ORDER BY sequence;

-- name: journal_text
-- The same journal as one row: its payloads as one JSON array (decoded by one call, not one
-- per event), its kinds and sequences as comma-separated lists. The order of group_concat
-- follows the ordered subquery (an aggregate's subquery with ORDER BY is not flattened);
-- the sequences are read back to check it. A payload that is not JSON makes the array
-- unreadable: the journal is then read row by row.
SELECT '[' || group_concat(payload, ',') || ']', group_concat(kind, ','),
       group_concat(sequence, ',')
  FROM (SELECT payload, kind, sequence FROM tenure_events
         WHERE run_id = :id ORDER BY sequence);

-- name: replay_journal
-- What a replay reads (SPEC §20), as two texts: the replay forms of the steps that have one,
-- as one flat JSON array (four values a step), and every other event as
-- `[sequence, kind, payload]` in a second array. Only the short form of a step is read
-- and decoded. Both follow the ordered subquery's order (an aggregate's subquery with
-- ORDER BY is not flattened); the positions in the first are checked by the reader.
SELECT '[' || group_concat(step, ',') || ']', '[' || group_concat(other, ',') || ']'
  FROM (SELECT replay AS step,
               iif(replay IS NULL, '[' || sequence || ',"' || kind || '",' || payload || ']',
                   NULL) AS other
          FROM tenure_events WHERE run_id = :id ORDER BY sequence);

-- name: last_event
-- A run's latest event: a running run's step in flight is the one after it.
SELECT run_id, sequence, attempt, kind, payload, created_at, lease_token
  FROM tenure_events
 WHERE run_id = :id
 ORDER BY sequence DESC
 LIMIT 1;

-- name: request_event
-- A run's first event, its request: what it was asked to do (an agent function's name and
-- input), read without the rest of its journal.
SELECT run_id, sequence, attempt, kind, payload, created_at, lease_token
  FROM tenure_events
 WHERE run_id = :id
 ORDER BY sequence
 LIMIT 1;

-- name: runs
SELECT {run_columns}, NULL FROM tenure_runs
 WHERE (:status IS NULL OR status = :status)
   AND (:reason IS NULL OR termination_reason = :reason)
   AND (:queue IS NULL OR queue = :queue)
   AND (:parent IS NULL OR parent_id = :parent)
   AND (NOT :roots OR parent_id IS NULL)
 ORDER BY created_at DESC, id
 LIMIT :limit;

-- name: search_runs
-- Runs by the metadata of their request (every key of the JSON object :meta, with that
-- value) and by when they were created (:since / :until seconds ago; NULL: unbounded),
-- newest first. The request event (sequence 0) holds the metadata of every run, ended ones
-- included (a settled run's row keeps no request). An operator's search: it reads runs
-- newest first until :limit match.
SELECT {run_columns}, NULL FROM tenure_runs
 WHERE (:status IS NULL OR status = :status)
   AND (:reason IS NULL OR termination_reason = :reason)
   AND (:queue IS NULL OR queue = :queue)
   AND (:parent IS NULL OR parent_id = :parent)
   AND (NOT :roots OR parent_id IS NULL)
   AND (:since IS NULL OR created_at >= {now} - :since)
   AND (:until IS NULL OR created_at < {now} - :until)
   AND (:meta IS NULL OR EXISTS (
        SELECT 1 FROM tenure_events AS e
         WHERE e.run_id = tenure_runs.id AND e.sequence = 0
           AND NOT EXISTS (
               SELECT 1 FROM json_each(:meta) AS m
                WHERE json_extract(e.payload, '$.metadata.' || json_quote(m.key))
                      IS NOT m.value)))
 ORDER BY created_at DESC, id
 LIMIT :limit;

-- name: purge_cutoff
SELECT {now} - :age;

-- name: suspend
-- The owner holds the run for a person: no lease while it waits (the reaper ignores it). An
-- interactive run stores its request now, so that any worker can continue it.
UPDATE tenure_runs
   SET status = :status, claimed_by = '', lease_expires = NULL, pending_effect = '',
       fence_call = NULL, fence_probe = 0,
       request = COALESCE(request, :request), waiting = :waiting, decision = NULL,
       wait_deadline = CASE WHEN :timeout IS NULL THEN NULL
                            ELSE {now} + :timeout END,
       input_tokens = input_tokens + :input_tokens,
       output_tokens = output_tokens + :output_tokens, cost = cost + :cost,
       last_sequence = last_sequence + :n, updated_at = {now}
 WHERE id = :id AND status = 'running' AND claimed_by = :owner
   AND lease_token = :token AND lease_expires >= {now}
RETURNING last_sequence, attempt, lease_token;

-- name: decide_queued
-- A person's decision on a waiting run; the continuation goes to the queue. Two decisions
-- race on the status: one applies, the other matches nothing. The decision names the turn
-- it was decided on, and applies only while the run still waits at that turn: a decision
-- read for one hold never answers the next (the status is the same again).
UPDATE tenure_runs
   SET status = 'queued', available_at = {now}, decision = :decision, waiting = NULL,
       wait_deadline = NULL, last_sequence = last_sequence + :n, updated_at = {now}
 WHERE id = :id AND status = :expected
   AND (waiting ->> 'turn') IS (:decision ->> 'turn')
RETURNING last_sequence, attempt, lease_token;

-- name: decide_inline
-- A person's decision, continued by the deciding process under a lease of its own (only
-- while the run still waits at the turn decided, as decide_queued).
UPDATE tenure_runs
   SET status = 'running', claimed_by = :owner, lease_expires = {now} + :lease,
       lease_token = lease_token + 1, attempt = attempt + 1, decision = :decision,
       waiting = NULL, wait_deadline = NULL, last_sequence = last_sequence + :n,
       updated_at = {now}
 WHERE id = :id AND status = :expected
   AND (waiting ->> 'turn') IS (:decision ->> 'turn')
RETURNING id, lease_token, attempt, request, requeue_count, last_sequence, decision,
          fence_call;

-- name: expire_waits
-- Runs that waited past their deadline are settled approval_denied (deadline and status
-- re-checked in the same statement, so a decision that landed first wins).
UPDATE tenure_runs
   SET status = 'failed', termination_reason = 'approval_denied',
       error = 'no decision before the approval timeout', waiting = NULL, decision = NULL,
       request = NULL, wait_deadline = NULL, last_sequence = last_sequence + :n,
       finished_at = {now}, updated_at = {now}
 WHERE id IN (SELECT id FROM tenure_runs
               WHERE status IN ('waiting_for_approval', 'waiting_for_input')
                 AND wait_deadline < {now}
               ORDER BY wait_deadline
               LIMIT :limit)
   AND status IN ('waiting_for_approval', 'waiting_for_input') AND wait_deadline < {now}
RETURNING id, last_sequence, attempt, lease_token;

-- name: waiting_of
SELECT status, waiting FROM tenure_runs WHERE id = :id;

-- name: runs_after
-- The page of `runs` that follows the run :after (the cursor), in the same order. The
-- cursor's own created_at is compared as stored, so a page boundary is exact.
SELECT {run_columns}, NULL FROM tenure_runs
 WHERE (:status IS NULL OR status = :status)
   AND (:reason IS NULL OR termination_reason = :reason)
   AND (:queue IS NULL OR queue = :queue)
   AND (:parent IS NULL OR parent_id = :parent)
   AND (NOT :roots OR parent_id IS NULL)
   AND EXISTS (SELECT 1 FROM tenure_runs AS cursor_run
                WHERE cursor_run.id = :after
                  AND (tenure_runs.created_at < cursor_run.created_at
                       OR (tenure_runs.created_at = cursor_run.created_at
                           AND tenure_runs.id > cursor_run.id)))
 ORDER BY created_at DESC, id
 LIMIT :limit;

-- name: run_counts
-- How many runs are in each status, by termination reason (the dashboard's counts).
-- Queued runs are counted in the claim-order index, the others in the listing index.
SELECT status, termination_reason, COUNT(*) FROM tenure_runs
 WHERE status <> 'queued'
 GROUP BY status, termination_reason
UNION ALL
SELECT 'queued', '', COUNT(*) FROM tenure_runs WHERE status = 'queued' HAVING COUNT(*) > 0;

-- name: requeue_in_doubt
-- SPEC §16: a run whose non-idempotent write may have happened goes back to the queue with
-- its fence standing, because its tool has a probe: the next segment asks the probe before
-- anything else. Charged to the budget like a stale requeue. Applies only while that fence
-- (and its probe) still stands.
UPDATE tenure_runs
   SET status = 'queued', requeue_count = requeue_count + 1,
       available_at = {now} + :delay, claimed_by = '', lease_expires = NULL,
       error_class = :error_class, error = :error,
       last_sequence = last_sequence + :n, updated_at = {now}
 WHERE id = :id AND status = 'running' AND claimed_by = :owner AND lease_token = :token
   AND lease_expires >= {now}
   AND pending_effect = 'non_idempotent_write' AND fence_probe
RETURNING last_sequence, attempt, lease_token;

-- name: requeue_in_doubt_stale
-- The reaper's in-doubt requeue: guarded, like requeue_stale, by everything it read.
UPDATE tenure_runs
   SET status = 'queued', requeue_count = requeue_count + 1,
       claimed_by = '', lease_expires = NULL, error_class = 'timeout', error = :error,
       last_sequence = last_sequence + :n, updated_at = {now}
 WHERE id = :id AND status = 'running' AND lease_expires < {now} AND lease_token = :token
   AND pending_effect = :fence AND fence_probe = :fence_probe AND requeue_count = :requeue_count
   AND (request IS NOT NULL) = :has_request
   AND (deadline_token IS lease_token) = :step_deadline
RETURNING last_sequence, attempt, lease_token;

-- name: fence_call_of
-- The call an in-doubt fence stands for.
SELECT pending_effect, fence_call, fence_probe FROM tenure_runs WHERE id = :id;

-- name: register_worker
-- A worker starts (or comes back after its row was purged while it was cut off): running,
-- seen now (one reading of the clock: started and seen at the same instant).
INSERT INTO tenure_workers (id, host, pid, queues, slots, slots_in_use, heartbeat_seconds,
                            state, started_at, last_seen)
SELECT :id, :host, :pid, :queues, :slots, 0, :heartbeat_seconds, 'running', t, t
  FROM (SELECT {now} AS t)
 -- SQLite's parser needs a WHERE between an INSERT's SELECT and its ON CONFLICT.
 WHERE true
ON CONFLICT (id) DO NOTHING;

-- name: beat_worker
-- A worker's own heartbeat: seen now, with the slots it uses and whether it drains. A stopped
-- row stays stopped (a late beat from a stopping thread must not revive it).
UPDATE tenure_workers
   SET last_seen = {now}, slots_in_use = :slots_in_use,
       state = CASE WHEN :stopping THEN 'stopping' ELSE state END
 WHERE id = :id AND state <> 'stopped'
RETURNING id;

-- name: stop_worker
-- A clean shutdown: the worker's row says it stopped, and when.
UPDATE tenure_workers
   SET state = 'stopped', stopped_at = clock.t, last_seen = clock.t, slots_in_use = 0
  FROM (SELECT {now} AS t) AS clock
 WHERE id = :id AND state <> 'stopped'
RETURNING id;

-- name: workers
-- Worker rows, the most recently seen first.
SELECT id, host, pid, queues, slots, slots_in_use, heartbeat_seconds, state, started_at,
       last_seen, stopped_at
  FROM tenure_workers
 ORDER BY last_seen DESC, id
 LIMIT :limit;

-- name: purge_workers
-- Retention: rows of workers that stopped, or died (no heartbeat for `dead_beats` of their
-- intervals), last seen before the cutoff. A live worker's row stays whatever the cutoff.
DELETE FROM tenure_workers
 WHERE last_seen < :cutoff
   AND (state = 'stopped' OR last_seen < {now} - :dead_beats * heartbeat_seconds);

-- name: publish_delta
-- SPEC §18: a piece of the answer text of the model call in flight, under the segment's
-- lease (a segment that lost its run publishes nothing). The piece names its call by the
-- sequence the call's `llm` event will take; the rows go when that event is recorded
-- (delete_answered_deltas) or the run leaves `running` (0024's gate). Refused once any
-- event holds that sequence: a publication that stalled past its call's end (its `llm`
-- event, then a tool's, then the next call streaming) must not land among the next call's
-- pieces. The run's last event is read in this statement, inside the write transaction,
-- so no event can be recorded between the check and the row.
INSERT INTO tenure_deltas (run_id, sequence, chunk, text)
SELECT id, :sequence, :chunk, :text FROM tenure_runs
 WHERE id = :id AND status = 'running' AND claimed_by = :owner AND lease_token = :token
   AND lease_expires >= {now} AND last_sequence + 1 = :sequence;

-- name: mark_streamed
-- In the transaction that publishes a run's deltas: the run may hold deltas from now on, so
-- its status changes run the trigger that clears them (0024's tenure_runs_status_gate; a
-- run never marked runs none). Written once per run, never cleared. Not an UPDATE OF
-- status: it fires no trigger.
UPDATE tenure_runs SET streamed = 1 WHERE id = :id AND NOT streamed;

-- name: deltas_after
-- The deltas of a run published after delta `after` (a row id), in the order published.
SELECT id, sequence, chunk, text FROM tenure_deltas
 WHERE run_id = :id AND id > :after
 ORDER BY id;

-- name: run_progress
-- What a reader following a run polls: its status and the sequence of its last event.
SELECT status, last_sequence FROM tenure_runs WHERE id = :id;

-- name: deltas_since
-- Every run's deltas published after delta `after` (a row id): what one poller per process
-- reads for all the runs followed there.
SELECT id, run_id, sequence, chunk, text FROM tenure_deltas
 WHERE id > :after
 ORDER BY id;

-- Provider capacity (SPEC §17). A bucket's level now: its stored level refilled at
-- limit / 60 per second since `refilled_at`, up to limit / 10 (at least 1); NULL when the
-- model has no such limit. Every statement below runs inside BEGIN IMMEDIATE.

-- name: set_model_limits
-- Register (or change) a model's limits. A new row starts with full buckets; a changed limit
-- keeps what its bucket holds, up to the new capacity; the circuit is left as it is.
INSERT INTO tenure_models (name, requests_per_minute, tokens_per_minute, concurrency,
                           requests, tokens, refilled_at, updated_at)
VALUES (:model, :rpm, :tpm, :concurrency, :requests, :tokens, {now}, {now})
ON CONFLICT (name) DO UPDATE
   SET requests = CASE WHEN excluded.requests IS NULL THEN NULL
                       WHEN tenure_models.requests IS NULL THEN excluded.requests
                       ELSE MIN(tenure_models.requests, excluded.requests) END,
       tokens = CASE WHEN excluded.tokens IS NULL THEN NULL
                     WHEN tenure_models.tokens IS NULL THEN excluded.tokens
                     ELSE MIN(tenure_models.tokens, excluded.tokens) END,
       requests_per_minute = excluded.requests_per_minute,
       tokens_per_minute = excluded.tokens_per_minute,
       concurrency = excluded.concurrency, updated_at = {now};

-- name: lock_model
-- The model's row, before a reservation or a settlement changes it (BEGIN IMMEDIATE
-- already serializes writers here).
SELECT name FROM tenure_models WHERE name = :model;

-- name: sweep_reservations
-- Forget the calls in flight whose run no longer holds the lease they were made under (the
-- worker died, the run was reaped or cancelled) or that outlived their hold: their
-- concurrency is free again.
DELETE FROM tenure_model_reservations
 WHERE model = :model
   AND (expires_at <= {now} OR NOT EXISTS (
        SELECT 1 FROM tenure_runs r
         WHERE r.id = tenure_model_reservations.run_id AND r.status = 'running'
           AND r.lease_token = tenure_model_reservations.lease_token
           AND r.lease_expires > {now}));

-- name: _requests_level
-- A bucket's level now (SPEC §17): refilled at limit/60 a second since `refilled_at`, holding
-- at most limit/10 (at least one call).
MIN(MAX(requests_per_minute / 10.0, 1.0),
    requests + ({now} - refilled_at) * requests_per_minute / 60.0)

-- name: _tokens_level
MIN(MAX(tokens_per_minute / 10.0, 1.0), tokens + ({now} - refilled_at) * tokens_per_minute / 60.0)

-- name: reserve_capacity
-- Compare-and-set: take one request and :tokens from the buckets only while the circuit is
-- closed, each bucket can pay and keep :headroom seconds of its refill (a call larger than
-- its bucket waits for a full one, then owes the rest) and fewer than `concurrency` calls
-- are in flight.
UPDATE tenure_models
   SET requests = {_requests_level} - 1,
       tokens = {_tokens_level} - :tokens,
       refilled_at = {now}, updated_at = {now}
 WHERE name = :model
   AND (circuit_open_until IS NULL OR circuit_open_until <= {now})
   AND (requests_per_minute IS NULL
        OR {_requests_level}
           >= MIN(1 + :headroom * requests_per_minute / 60.0,
                  MAX(requests_per_minute / 10.0, 1.0)))
   AND (tokens_per_minute IS NULL
        OR {_tokens_level}
           >= MIN(:tokens + :headroom * tokens_per_minute / 60.0,
                  MAX(tokens_per_minute / 10.0, 1.0)))
   AND (concurrency IS NULL OR concurrency > (
        SELECT count(*) FROM tenure_model_reservations WHERE model = :model))
RETURNING name;

-- name: add_reservation
-- The call just granted, held for its run's lease (and at most :hold seconds).
INSERT INTO tenure_model_reservations (id, model, run_id, lease_token, tokens, expires_at,
                                       created_at)
VALUES (:id, :model, :run_id, :token, :tokens, {now} + :hold, {now});

-- name: settle_capacity
-- After the call: the buckets refilled to now, the tokens bucket given back :refund (the
-- estimate minus what the call really used; negative when it used more).
UPDATE tenure_models
   SET requests = MIN(MAX(requests_per_minute / 10.0, 1.0),
                      requests + ({now} - refilled_at) * requests_per_minute / 60.0),
       tokens = MIN(MAX(tokens_per_minute / 10.0, 1.0),
                    tokens + ({now} - refilled_at) * tokens_per_minute / 60.0 + :refund),
       refilled_at = {now}, updated_at = {now}
 WHERE name = :model;

-- name: drop_reservation
DELETE FROM tenure_model_reservations WHERE id = :id;

-- name: open_circuit
-- A rate limit with Retry-After: nobody calls the model for :seconds (never shortened). A
-- model without limits gets its row here, at its first throttle: no limits, only a circuit.
INSERT INTO tenure_models (name, refilled_at, circuit_open_until, updated_at)
VALUES (:model, {now}, {now} + :seconds, {now})
ON CONFLICT (name) DO UPDATE
   SET circuit_open_until = MAX(COALESCE(tenure_models.circuit_open_until, {now}),
                                {now} + :seconds),
       updated_at = {now};

-- name: open_circuits
-- Every circuit open now and the seconds until it closes, by the database's clock: what a
-- worker checks before calling a model without limits (a small table: one row per model).
SELECT name, circuit_open_until - {now}
  FROM tenure_models
 WHERE circuit_open_until > {now};

-- name: model_capacity
-- Each model's limits, its buckets' levels now, its calls in flight (only those whose run
-- still holds the lease they were made under) and its circuit while open; one model, or all.
SELECT m.name, m.requests_per_minute, m.tokens_per_minute, m.concurrency,
       {_requests_level},
       {_tokens_level},
       (SELECT count(*) FROM tenure_model_reservations s
          JOIN tenure_runs r ON r.id = s.run_id AND r.lease_token = s.lease_token
         WHERE s.model = m.name AND s.expires_at > {now} AND r.status = 'running'
           AND r.lease_expires > {now}),
       CASE WHEN m.circuit_open_until > {now} THEN m.circuit_open_until END,
       {now}
  FROM tenure_models m
 WHERE :model IS NULL OR m.name = :model
 ORDER BY m.name;

-- name: park
-- Throttled (SPEC §17): the run waits for its model's capacity in the queue, claimable at
-- the time capacity is expected back. Not charged: `requeue_count` is untouched. Never
-- while a non-idempotent write is in flight (a model call never runs under one).
UPDATE tenure_runs
   SET status = 'queued', available_at = {now} + :delay, claimed_by = '',
       lease_expires = NULL, pending_effect = '', fence_call = NULL, fence_probe = 0,
       last_sequence = last_sequence + :n, updated_at = {now}
 WHERE id = :id AND status = 'running' AND claimed_by = :owner AND lease_token = :token
   AND lease_expires >= {now}
   AND pending_effect <> 'non_idempotent_write'
RETURNING last_sequence, attempt, lease_token;

-- name: pause_queue
-- Pause a queue: claims pass its runs over from the next claim on. Nothing when it is
-- paused already (the first pause, and who made it, are kept).
INSERT INTO tenure_paused_queues (queue, paused_at, paused_by)
VALUES (:queue, {now}, :by)
ON CONFLICT (queue) DO NOTHING
RETURNING queue;

-- name: resume_queue
DELETE FROM tenure_paused_queues WHERE queue = :queue RETURNING queue;

-- name: paused_queues
SELECT queue, paused_at, paused_by FROM tenure_paused_queues ORDER BY queue;

-- name: queue_counts
-- Runs not yet ended, per queue and status: queued runs counted in the claim-order index
-- (which holds the queue), the others through the listing index.
SELECT queue, 'queued', COUNT(*) FROM tenure_runs INDEXED BY tenure_runs_claim_order
 WHERE status = 'queued'
 GROUP BY queue
UNION ALL
SELECT queue, status, COUNT(*) FROM tenure_runs
 WHERE status <> 'queued'
   AND status IN ('running', 'waiting_for_approval', 'waiting_for_input',
                  'waiting_for_children')
 GROUP BY queue, status;

-- name: ensure_budget
-- The ledger of a tree's budget (SPEC §21), written at its first model call: seeded with
-- what its root had used before there was a ledger (a run from an older tenure).
INSERT INTO tenure_budgets (root_id, max_tokens, max_cost, spent_tokens, spent_cost, updated_at)
SELECT r.id, :max_tokens, :max_cost, r.input_tokens + r.output_tokens, r.cost, {now}
  FROM tenure_runs r
 WHERE r.id = :root
ON CONFLICT (root_id) DO NOTHING;

-- name: lock_budget
-- The ledger's row, before a reservation or a settlement changes it (BEGIN IMMEDIATE
-- already serializes writers here).
SELECT root_id FROM tenure_budgets WHERE root_id = :root;

-- name: sweep_budget_reservations
-- Reservations past their hold: never settled (their worker died), counted by nobody.
DELETE FROM tenure_budget_reservations WHERE root_id = :root AND expires_at <= {now};

-- name: _held_budget
-- What the calls in flight on a tree's budget reserved: only those whose run still holds
-- the lease they were made under.
SELECT COALESCE(SUM(s.tokens), 0) AS tokens, COALESCE(SUM(s.cost), 0) AS cost
  FROM tenure_budget_reservations s
  JOIN tenure_runs r ON r.id = s.run_id AND r.lease_token = s.lease_token
 WHERE s.root_id = :root AND s.expires_at > {now}
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
SELECT :id, b.root_id, :run_id, :token, :tokens, :cost, {now} + :hold, {now}
  FROM tenure_budgets b, held h
 WHERE b.root_id = :root
   AND (b.max_tokens IS NULL OR b.spent_tokens + h.tokens < b.max_tokens)
   AND (b.max_cost IS NULL OR b.spent_cost + h.cost < b.max_cost)
   AND EXISTS (SELECT 1 FROM tenure_runs r
                WHERE r.id = :run_id AND r.status = 'running'
                  AND r.claimed_by = :owner AND r.lease_token = :token
                  AND r.lease_expires >= {now})
RETURNING id;

-- name: budget
-- A tree's ledger as it is now: its limits, what was spent, what the calls in flight hold.
WITH held AS ({_held_budget})
SELECT b.root_id, b.max_tokens, b.max_cost, b.spent_tokens, b.spent_cost, h.tokens, h.cost
  FROM tenure_budgets b, held h
 WHERE b.root_id = :root;

-- name: settle_budget
-- After the call: what it used is spent (nothing, for a call that failed), once: only while
-- its reservation stands (a retried settlement finds it gone).
UPDATE tenure_budgets
   SET spent_tokens = spent_tokens + :tokens, spent_cost = spent_cost + :cost,
       updated_at = {now}
 WHERE root_id = :root
   AND EXISTS (SELECT 1 FROM tenure_budget_reservations WHERE id = :id);

-- name: drop_budget_reservation
DELETE FROM tenure_budget_reservations WHERE id = :id;

-- name: held
-- Whether the owner still holds the run under its lease (after a guarded write matched no
-- row: was it the guard's lease, or another of its conditions?).
SELECT 1 FROM tenure_runs
 WHERE id = :id AND status = 'running' AND claimed_by = :owner AND lease_token = :token
   AND lease_expires >= {now};

-- name: wait_for_children
-- SPEC §21: the owner's agent function waits for children (:children, a JSON array; also
-- in :waiting, what the row shows and its children's trigger reads): no lease
-- and no slot while it waits. Only while one of them is not terminal yet: the child that
-- settles last wakes the parent (triggers of 0024) in its own transaction,
-- and a child that settled before this write leaves the parent running, so that it goes
-- on at once; never a parent asleep with nothing left to wake it. (SQLite has one writer at
-- a time: the children read here cannot change before this commits.) An interactive run
-- stores its request now, so that any worker can continue it.
-- `waits_for_all`: no child of the run still going is left out of :children (a child that
-- goes on again later clears it, triggers of 0024), so that a child's end can
-- tell by the index alone whether it was the last (0019).
UPDATE tenure_runs
   SET status = 'waiting_for_children', claimed_by = '', lease_expires = NULL,
       pending_effect = '', fence_call = NULL, fence_probe = 0,
       request = COALESCE(request, :request), waiting = :waiting, decision = NULL,
       wait_deadline = NULL, last_sequence = last_sequence + :n, updated_at = {now},
       waits_for_all = NOT EXISTS (
           SELECT o.id FROM tenure_runs AS o
            WHERE o.parent_id = :id
              AND NOT (o.status = 'completed' OR o.status = 'failed'
                       OR o.status = 'cancelled')
           EXCEPT
           SELECT value FROM json_each(:children))
 WHERE id = :id AND status = 'running' AND claimed_by = :owner
   AND lease_token = :token AND lease_expires >= {now}
   AND EXISTS (SELECT 1 FROM json_each(:children) AS w
                 JOIN tenure_runs AS c ON c.id = w.value
                WHERE c.parent_id = :id
                  AND NOT (c.status = 'completed' OR c.status = 'failed'
                           OR c.status = 'cancelled'))
RETURNING last_sequence, attempt, lease_token;

-- name: children_of
-- What a parent reads of the children it waits for (:ids, a JSON array), only its own.
-- CROSS JOIN: the ids first, each child by its key; joined the other way round SQLite reads
-- the parent's children by parent_id and scans the whole list for each (N² for N children).
SELECT c.id, c.status, c.termination_reason, c.error, c.output
  FROM json_each(:ids) AS w
 CROSS JOIN tenure_runs AS c ON c.id = w.value
 WHERE c.parent_id = :parent;

-- name: tree
-- A run and all its descendants (SPEC §21), parents before children.
WITH RECURSIVE tree(id, depth) AS (
    SELECT id, 0 FROM tenure_runs WHERE id = :id
    UNION ALL
    SELECT c.id, tree.depth + 1 FROM tenure_runs AS c JOIN tree ON c.parent_id = tree.id
     WHERE tree.depth < :max_depth
)
SELECT {run_columns}, NULL FROM tenure_runs JOIN tree USING (id)
 ORDER BY tree.depth, created_at, id
 LIMIT :limit;

-- name: lock_parent
-- The parent of run :id, read (on PostgreSQL locked) before a redrive of that run decides on
-- it: the parent's own end, which cancels its children, then waits for the redrive and
-- finds the child queued again, or the redrive waits and finds the parent ended.
SELECT p.id FROM tenure_runs AS p
 WHERE p.id = (SELECT c.parent_id FROM tenure_runs AS c WHERE c.id = :id);

-- name: queue_totals
-- Tokens and cost per queue of the runs that ended in the last :window seconds and of the
-- runs not yet ended (their spending so far). Bounded: ended runs are read through the
-- index on finished_at from the window's start only, the others as queue_counts reads them,
-- so a long history costs nothing here; nothing is added to the writes of a run's steps or
-- of its settle. A redriven run has no finished_at again: it is counted once.
SELECT queue, SUM(input_tokens), SUM(output_tokens), SUM(cost) FROM (
    SELECT queue, input_tokens, output_tokens, cost
      FROM tenure_runs INDEXED BY tenure_runs_finished
     WHERE finished_at IS NOT NULL AND finished_at >= {now} - :window
    UNION ALL
    SELECT queue, input_tokens, output_tokens, cost
      FROM tenure_runs INDEXED BY tenure_runs_claim_order
     WHERE status = 'queued'
    UNION ALL
    SELECT queue, input_tokens, output_tokens, cost FROM tenure_runs
     WHERE status <> 'queued'
       AND status IN ('running', 'waiting_for_approval', 'waiting_for_input',
                      'waiting_for_children'))
 GROUP BY queue;

-- name: set_concurrency_limit
-- At most :max_running runs of the key run at once, from the next claim on.
INSERT INTO tenure_concurrency_limits (key, max_running, updated_at)
VALUES (:key, :max_running, {now})
ON CONFLICT (key) DO UPDATE SET max_running = excluded.max_running,
                                updated_at = excluded.updated_at;

-- name: clear_concurrency_limit
DELETE FROM tenure_concurrency_limits WHERE key = :key RETURNING key;

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
VALUES (:name, :cron, :timezone, :request, 0, :next_fire, 0,
        {now}, {now})
ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, timezone = excluded.timezone,
                                 request = excluded.request, next_fire = excluded.next_fire,
                                 updated_at = excluded.updated_at;

-- name: schedules
SELECT name, cron, timezone, request, paused, next_fire, last_fire, last_run_id, fired, created_at FROM tenure_schedules ORDER BY name;

-- name: due_schedules
-- Schedules whose next tick has come, the most overdue first.
SELECT name, cron, timezone, request, paused, next_fire, last_fire, last_run_id, fired, created_at FROM tenure_schedules
 WHERE paused = 0 AND next_fire <= {now}
 ORDER BY next_fire
 LIMIT :limit;

-- name: advance_schedule
-- A tick fired: only by the firing that read this next tick, while the schedule is not
-- paused (another worker that fired it first, a pause, a change or a delete since the read
-- make this match nothing, and the firing enqueues nothing).
UPDATE tenure_schedules
   SET next_fire = :next_fire, last_fire = :tick, last_run_id = :run_id,
       fired = fired + 1, updated_at = {now}
 WHERE name = :name AND next_fire = :seen AND paused = 0
RETURNING name;

-- name: pause_schedule
UPDATE tenure_schedules SET paused = 1, updated_at = {now}
 WHERE name = :name AND paused = 0
RETURNING name;

-- name: resume_schedule
-- Resumed: it fires from its next tick after now on (ticks that fell while it was paused do
-- not fire).
UPDATE tenure_schedules SET paused = 0, next_fire = :next_fire, updated_at = {now}
 WHERE name = :name AND paused = 1
RETURNING name;

-- name: delete_schedule
DELETE FROM tenure_schedules WHERE name = :name RETURNING name;
