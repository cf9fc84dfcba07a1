-- SPEC §18: the text deltas of the model call in flight, readable by any process on this
-- machine while the call streams. Never part of the journal: a run's deltas are deleted in
-- the transaction that records its next `llm` event (the call's answer) and in the one that
-- takes the run out of `running` (settled, requeued, reaped, released, held for a person),
-- so a worker killed mid-stream leaves none behind once its run moves on. AUTOINCREMENT:
-- a reader asks for the rows after the last id it saw, and an id must never come back.
CREATE TABLE tenure_deltas (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id   TEXT    NOT NULL,
    sequence INTEGER NOT NULL,
    chunk    INTEGER NOT NULL,
    text     TEXT    NOT NULL
);
CREATE INDEX tenure_deltas_run ON tenure_deltas (run_id, id);

CREATE TRIGGER tenure_deltas_answered AFTER INSERT ON tenure_events
WHEN NEW.kind = 'llm'
BEGIN
    DELETE FROM tenure_deltas WHERE run_id = NEW.run_id;
END;

CREATE TRIGGER tenure_deltas_left_running AFTER UPDATE OF status ON tenure_runs
WHEN NEW.status <> 'running'
BEGIN
    DELETE FROM tenure_deltas WHERE run_id = NEW.id;
END;
