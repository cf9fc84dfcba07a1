-- The concurrency keys at their limit (SPEC §22), as the claim reads them: once per claim
-- statement (an init plan), then one lookup per candidate run with a key. A function so that
-- the claim's plan, made afresh at each claim (a generic plan would sort the backlog), does
-- not have to plan this count over tenure_runs too: planning it made a claim about 1.3x as
-- costly as before keys existed, for every claim, keys or not. STABLE: it reads with the
-- calling statement's snapshot, as the subquery it replaces did.
CREATE FUNCTION tenure_full_keys() RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN ARRAY(SELECT l.key FROM tenure_concurrency_limits l
                  WHERE l.max_running <= (SELECT count(*) FROM tenure_runs x
                                           WHERE x.concurrency_key = l.key
                                             AND x.status = 'running'));
END
$$;
