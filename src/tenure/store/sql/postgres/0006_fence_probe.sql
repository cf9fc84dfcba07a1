-- An in-doubt write (SPEC §16): the call a non-idempotent fence stands for (JSON: tool name,
-- arguments, idempotency key, its model turn and position), and whether its tool has a probe
-- that can tell whether the write happened. Any process can then decide, without the app.
ALTER TABLE tenure_runs ADD COLUMN fence_call text;
ALTER TABLE tenure_runs ADD COLUMN fence_probe boolean NOT NULL DEFAULT false;
