-- Provider capacity (SPEC §17): one row per model, shared by every worker on the database.
-- `requests` and `tokens` are the levels of its buckets as of `refilled_at` (NULL: no such
-- limit); each bucket refills at limit / 60 per second up to limit / 10 and may owe (go
-- below zero) after a call larger than itself. `circuit_open_until`: nobody calls the model
-- before then (a rate limit with Retry-After).
CREATE TABLE tenure_models (
    name                text PRIMARY KEY,
    requests_per_minute double precision CHECK (requests_per_minute > 0),
    tokens_per_minute   double precision CHECK (tokens_per_minute > 0),
    concurrency         integer          CHECK (concurrency > 0),
    requests            double precision,
    tokens              double precision,
    refilled_at         timestamptz      NOT NULL,
    circuit_open_until  timestamptz,
    updated_at          timestamptz      NOT NULL,
    CHECK ((requests_per_minute IS NULL) = (requests IS NULL)),
    CHECK ((tokens_per_minute IS NULL) = (tokens IS NULL))
);

-- A call in flight. It holds its model's concurrency only while the run that made it still
-- holds the lease it was made under: a worker that dies leaks nothing past its lease, and
-- `expires_at` bounds even that. Rows past either are swept by the next reservation.
CREATE TABLE tenure_model_reservations (
    id          text PRIMARY KEY,
    model       text             NOT NULL REFERENCES tenure_models (name) ON DELETE CASCADE,
    run_id      text             NOT NULL,
    lease_token bigint           NOT NULL,
    tokens      double precision NOT NULL,
    expires_at  timestamptz      NOT NULL,
    created_at  timestamptz      NOT NULL
);
CREATE INDEX tenure_model_reservations_model ON tenure_model_reservations (model);
