-- Every event records the fencing token it was written under: the owner's token for a
-- segment's own writes, the row's token for lifecycle changes made by others. An audit can
-- then prove that no event was written under a stale lease.
ALTER TABLE tenure_events ADD COLUMN lease_token bigint NOT NULL DEFAULT 0;
