-- A step's replay form (SPEC §20): for the event of an agent function's tool or step-function
-- step, the values a replay checks and returns — `position,"step:digest:name",result,error`,
-- four JSON values without brackets — so that a replay reads one short text per step and
-- decodes the whole journal's steps as one flat array (no object per step), instead of every
-- payload. Written with each such event from now on; NULL for every other event and for the
-- events written before this version, which are replayed from their payloads as before.
ALTER TABLE tenure_events ADD COLUMN replay TEXT;
