-- meter: lifecycle events take their sandbox's meter row first, and an
-- event of the state a sandbox is in leaves its state_since alone.
--
-- 1. Ingestion counts the pauses and stops of its sandboxes again once it
--    holds its key-days' ledger rows, and retries when one came meanwhile
--    (an event settles holds under those rows). An event with no unsettled
--    hold (a stop after a pause, a second pause) takes no ledger row, so it
--    could come between a retry's read and its commit, and a busy host's
--    document ran out of tries (503). Every pause and stop now first takes
--    its sandbox's meter row FOR SHARE, which waits for ingestion's update
--    or lock of that row and holds both off until it commits: a retry,
--    which locks its meter rows before it reads the events, meets no event
--    it did not read. A running event settles nothing and takes no lock.
-- 2. meter_sandbox_event (0038) moved state_since to every event it took,
--    so a second pause of a paused sandbox (a later retry of the control
--    plane's, with a new at) said the sandbox had been paused only since
--    then: GET /v1/sandboxes showed the later time, and
--    running_while_paused (0040), which looks for samples that found the
--    sandbox running after state_since, missed those between the two
--    pauses. Only a change of state moves state_since now.
-- Otherwise as in 0038.

CREATE OR REPLACE FUNCTION meter_sandbox_event(p_sandbox text, p_type text, p_at timestamptz,
					       p_grace_s integer)
	RETURNS TABLE (known boolean, recorded boolean, state text, state_since timestamptz,
		       holds_settled integer, released_micros bigint, tail_held_micros bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	acc text;
	eff timestamptz;
	st record;
	n integer := 0;
	total bigint := 0;
	tail bigint := 0;
	rec boolean;
BEGIN
	SELECT s.account_id, GREATEST(p_at, s.created_at) INTO acc, eff
		FROM sandboxes s WHERE s.sandbox_id = p_sandbox;
	IF NOT FOUND THEN
		RETURN QUERY SELECT false, false, NULL::text, NULL::timestamptz, 0, 0::bigint,
				    0::bigint;
		RETURN;
	END IF;
	-- Before anything of the event is written: ingestion locks these rows
	-- FOR UPDATE after a conflict, and updates them, before its last read
	-- of the events (meter/ingest.c).
	IF p_type IN ('paused', 'stopped') THEN
		PERFORM 1 FROM sandbox_meter m
			WHERE m.account_id = acc AND m.sandbox_id = p_sandbox FOR SHARE;
	END IF;
	INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)
		VALUES (acc, p_sandbox, p_type, p_at)
	ON CONFLICT (account_id, sandbox_id, type, at) DO NOTHING;
	rec := FOUND;
	IF rec AND p_type IN ('paused', 'stopped') THEN
		st := meter_event_settle(acc, p_sandbox, p_type, eff, p_grace_s);
		n := st.settled;
		total := st.released;
		tail := st.kept;
	END IF;
	IF rec THEN
		-- The row first, in a statement of its own: a wake in flight on it
		-- (whose batch updates the row) has committed once this returns,
		-- so the update's test of the holds below (a fresh snapshot) sees
		-- that wake's hold. FOR NO KEY UPDATE, the lock the UPDATE takes:
		-- it waits for a wake's update as FOR UPDATE did, but not for the
		-- key-share locks that this event's own insert above, another
		-- event's or ingestion's inserts take on the row.
		PERFORM 1 FROM sandboxes s WHERE s.account_id = acc AND s.sandbox_id = p_sandbox
			FOR NO KEY UPDATE;
		UPDATE sandboxes s SET state = p_type,
			state_since = CASE WHEN s.state = p_type THEN s.state_since
					   ELSE GREATEST(s.state_since, eff) END
		WHERE s.account_id = acc AND s.sandbox_id = p_sandbox AND s.state <> 'stopped'
		  AND (p_type = 'stopped'
		       OR (s.state_since <= eff
			   AND NOT EXISTS (SELECT 1 FROM holds h
					   WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
					     AND h.status = 'open' AND h.lease_starts_at > eff)));
	END IF;
	IF rec AND p_type IN ('paused', 'stopped') THEN
		st := meter_event_settle(acc, p_sandbox, p_type, eff, p_grace_s);
		n := n + st.settled;
		total := total + st.released;
		tail := tail + st.kept;
	END IF;
	RETURN QUERY SELECT true, rec, s.state::text, s.state_since, n, total, tail
		FROM sandboxes s WHERE s.account_id = acc AND s.sandbox_id = p_sandbox;
END
$$;
