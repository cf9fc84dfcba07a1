-- SPEC §18: PostgreSQL carries the deltas of a streaming model call by NOTIFY (see
-- `publish_deltas`) and keeps none, so it needs no table; SQLite's 0008 adds one. This
-- version exists so that both dialects stay at the same schema version.
SELECT 1;
