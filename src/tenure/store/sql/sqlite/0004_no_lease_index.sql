-- The reaper finds running rows through tenure_runs_listing (status first): there are only
-- as many as the workers' slots. An index on lease_expires was rewritten by every claim,
-- heartbeat and settle for no gain.
DROP INDEX IF EXISTS tenure_runs_leases;
