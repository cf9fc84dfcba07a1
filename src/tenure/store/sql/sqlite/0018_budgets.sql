-- One budget for a run tree (SPEC §21): the ledger of a root's `max_tokens` / `max_cost`,
-- shared by every run of the tree on every worker. `spent_*` is what settled calls used.
-- A row is written at the first model call of a run with a budget, seeded with what its
-- root had already used.
CREATE TABLE tenure_budgets (
    root_id      TEXT    PRIMARY KEY,
    max_tokens   INTEGER CHECK (max_tokens > 0),
    max_cost     REAL    CHECK (max_cost > 0),
    spent_tokens INTEGER NOT NULL DEFAULT 0,
    spent_cost   REAL    NOT NULL DEFAULT 0,
    updated_at   REAL    NOT NULL
);

-- A model call in flight on the tree's budget: its estimate, counted only while the run
-- that made it still holds the lease it was made under (a worker that dies leaks nothing
-- past its lease) and at most until `expires_at`. Settling the call deletes it.
CREATE TABLE tenure_budget_reservations (
    id          TEXT    PRIMARY KEY,
    root_id     TEXT    NOT NULL REFERENCES tenure_budgets (root_id) ON DELETE CASCADE,
    run_id      TEXT    NOT NULL,
    lease_token INTEGER NOT NULL,
    tokens      INTEGER NOT NULL,
    cost        REAL    NOT NULL,
    expires_at  REAL    NOT NULL,
    created_at  REAL    NOT NULL
);
CREATE INDEX tenure_budget_reservations_root ON tenure_budget_reservations (root_id);
