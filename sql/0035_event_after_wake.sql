-- meter: an event older than a wake's lease does not move the state.
--
-- A wake of a running sandbox (a renewal) keeps its state_since, so a
-- pause delivered late, dated before a wake that followed it, settled only
-- the holds begun before it (0033) and still set the state to paused
-- while the sandbox ran on the wake's lease: its lease end was then not
-- watched for hold_outrun (the sweep watches running sandboxes only), and
-- a retry of that wake under the default key found it paused and held
-- again. A paused or running event now moves the state only if no open
-- hold's lease began after it; the holds it leaves alone and the state it
-- leaves alone are the same wake's. A stop is final, as in 0033.
-- As in 0033 otherwise.

CREATE OR REPLACE FUNCTION meter_sandbox_event(p_sandbox text, p_type text, p_at timestamptz,
					       p_grace_s integer)
	RETURNS TABLE (known boolean, recorded boolean, state text, state_since timestamptz,
		       holds_settled integer, released_micros bigint, tail_held_micros bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	acc text;
	eff timestamptz;
	r record;
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
				   AND (p_type = 'stopped' OR h.lease_starts_at <= eff))
			ORDER BY l.account_id, l.key_id, l.day
			FOR UPDATE OF l;
		FOR r IN SELECT h.hold_id, h.lease_ends_at FROM holds h
			 WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
			   AND h.status = 'open' AND h.settles_at IS NULL
			   AND (p_type = 'stopped' OR h.lease_starts_at <= eff)
			 ORDER BY h.key_id, h.day, h.hold_id LOOP
			st := meter_hold_settle(acc, r.hold_id,
				CASE WHEN eff > r.lease_ends_at
					  AND eff <= r.lease_ends_at + make_interval(secs => p_grace_s)
				     THEN r.lease_ends_at ELSE eff END);
			IF st.released IS NOT NULL THEN
				n := n + 1;
				total := total + st.released;
				tail := tail + st.kept;
			END IF;
		END LOOP;
	END IF;
	IF rec THEN
		UPDATE sandboxes s SET state = p_type, state_since = GREATEST(s.state_since, eff)
		WHERE s.account_id = acc AND s.sandbox_id = p_sandbox AND s.state <> 'stopped'
		  AND (p_type = 'stopped'
		       OR (s.state_since <= eff
			   AND NOT EXISTS (SELECT 1 FROM holds h
					   WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
					     AND h.status = 'open' AND h.lease_starts_at > eff)));
	END IF;
	RETURN QUERY SELECT true, rec, s.state::text, s.state_since, n, total, tail
		FROM sandboxes s WHERE s.account_id = acc AND s.sandbox_id = p_sandbox;
END
$$;
