-- meter: a pause that arrives after a later running event is taken in
-- their order, not in the order they came.
--
-- A running event of a sandbox that is running already is recorded and
-- leaves state_since alone (0042). A pause dated before it but sent after
-- it then found state_since older than itself, and moved the sandbox to
-- paused for good: the sandbox ran on, its hold settled by the pause, and
-- nothing said so. Sent in their order, the same two events leave it
-- running since the running event, and that resume without a wake is
-- reported (hold_outrun resumed_without_wake). Now a pause that moves the
-- state, when a running event dated after it is recorded, puts the sandbox
-- back to running as of the earliest such event, in the same transaction:
-- the same state, state_since, settled holds and report as in order.
-- Otherwise as in 0042.

CREATE OR REPLACE FUNCTION meter_sandbox_event(p_sandbox text, p_type text, p_at timestamptz,
					       p_grace_s integer)
	RETURNS TABLE (known boolean, recorded boolean, state text, state_since timestamptz,
		       holds_settled integer, released_micros bigint, tail_held_micros bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	acc text;
	eff timestamptz;
	resumed timestamptz;
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
		IF FOUND AND p_type = 'paused' THEN
			-- A running event dated after this pause, recorded before
			-- it came (one dated before the create counts as at the
			-- create): the sandbox resumed. Back to running as of the
			-- earliest, as if the two had come in their order; the
			-- update from paused to running reports a resume with no
			-- hold open at commit (meter_outbox_resumed).
			SELECT min(GREATEST(e.at, s.created_at)) INTO resumed
			FROM lifecycle_events e
			JOIN sandboxes s ON s.account_id = e.account_id AND s.sandbox_id = e.sandbox_id
			WHERE e.account_id = acc AND e.sandbox_id = p_sandbox AND e.type = 'running'
			  AND GREATEST(e.at, s.created_at) > eff;
			IF resumed IS NOT NULL THEN
				UPDATE sandboxes s SET state = 'running', state_since = resumed
				WHERE s.account_id = acc AND s.sandbox_id = p_sandbox
				  AND s.state = 'paused';
			END IF;
		END IF;
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
