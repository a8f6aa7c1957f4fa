-- meter: a pause or stop shortly after the lease end is not an outrun.
--
-- An event after a hold's lease end keeps the tail only up to the lease
-- end, and 0014 left such a hold's outrun trigger armed (settles_at after
-- lease_ends_at), so metering the running time from the lease end to the
-- event reported hold_outrun. A control plane that honours its lease
-- pauses a moment after it ends (the lease starts when the check is
-- decided, before the control plane has the answer), so an event that came
-- before the sweeper (every second) raised an outrun for a fraction of a
-- second, while the same pause after the sweep raised none; lease_ended
-- (0013) allows lease_grace_s. Now an event within lease_grace_s after
-- the lease end settles the hold as at the lease end (settles_at =
-- lease_ends_at, as the sweeper does, 0015): the running time from there
-- to the event is spent without a hold and not reported. An event later
-- than that is still an outrun, reported as before.

DROP FUNCTION meter_sandbox_event(text, text, timestamptz);

-- As in 0014; p_grace_s: lease_grace_s.
CREATE FUNCTION meter_sandbox_event(p_sandbox text, p_type text, p_at timestamptz,
				    p_grace_s integer)
	RETURNS TABLE (known boolean, recorded boolean, state text, state_since timestamptz,
		       holds_settled integer, released_micros bigint, tail_held_micros bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	acc text;
	r record;
	st record;
	n integer := 0;
	total bigint := 0;
	tail bigint := 0;
	rec boolean;
BEGIN
	SELECT s.account_id INTO acc FROM sandboxes s WHERE s.sandbox_id = p_sandbox;
	IF NOT FOUND THEN
		RETURN QUERY SELECT false, false, NULL::text, NULL::timestamptz, 0, 0::bigint,
				    0::bigint;
		RETURN;
	END IF;
	INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)
		VALUES (acc, p_sandbox, p_type, p_at)
	ON CONFLICT (account_id, sandbox_id, type, at) DO NOTHING;
	rec := FOUND;
	IF rec AND p_type IN ('paused', 'stopped') THEN
		-- Ledger rows first, in order; then each hold (meter_hold_settle).
		PERFORM 1 FROM key_day_ledger l
			WHERE (l.account_id, l.key_id, l.day) IN
				(SELECT h.account_id, h.key_id, h.day FROM holds h
				 WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
				   AND h.status = 'open' AND h.settles_at IS NULL
				   AND h.lease_starts_at <= p_at)
			ORDER BY l.account_id, l.key_id, l.day
			FOR UPDATE OF l;
		FOR r IN SELECT h.hold_id, h.lease_ends_at FROM holds h
			 WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
			   AND h.status = 'open' AND h.settles_at IS NULL
			   AND h.lease_starts_at <= p_at
			 ORDER BY h.key_id, h.day, h.hold_id LOOP
			st := meter_hold_settle(acc, r.hold_id,
				CASE WHEN p_at > r.lease_ends_at
					  AND p_at <= r.lease_ends_at + make_interval(secs => p_grace_s)
				     THEN r.lease_ends_at ELSE p_at END);
			IF st.released IS NOT NULL THEN
				n := n + 1;
				total := total + st.released;
				tail := tail + st.kept;
			END IF;
		END LOOP;
	END IF;
	IF rec THEN
		UPDATE sandboxes s SET state = p_type, state_since = p_at
		WHERE s.account_id = acc AND s.sandbox_id = p_sandbox AND s.state_since <= p_at;
	END IF;
	RETURN QUERY SELECT true, rec, s.state::text, s.state_since, n, total, tail
		FROM sandboxes s WHERE s.account_id = acc AND s.sandbox_id = p_sandbox;
END
$$;
