-- meter: a pause or stop also settles what a wake in flight held.
--
-- An event settles the sandbox's open holds it can see, then sets the
-- sandbox's state. A wake decided at the same moment may have written its
-- hold and updated the sandbox row without having committed: the event's
-- read of the holds did not see that hold, and its update of the sandbox
-- row waited for the wake's commit, then went on. A stop then left a
-- stopped sandbox with an open, whole hold until its lease ended (up to a
-- day, and not watched for an outrun, the sandbox not running), and a
-- pause dated after the wake's check did the same to a paused one. The
-- event now settles again after its update of the row: by then such a
-- wake has committed (its hold is seen) and any later one finds the
-- sandbox stopped or paused as of the event. That second pass takes
-- ledger rows while holding the sandbox row, the other order from a check
-- batch (ledger rows, then the sandbox row): it runs in a block of its own
-- that gives way on a deadlock or a lock timeout, leaving such a hold to
-- its lease end as before, rather than fail the event.
-- The settling itself as in 0035.

-- Settles the open holds of p_sandbox that an event of p_type at p_eff
-- ends (a stop: all of them; a pause: those begun at or before it), ledger
-- rows first, in order, then each hold (meter_hold_settle); an event
-- within p_grace_s after a hold's lease end settles it as at that end.
CREATE FUNCTION meter_event_settle(p_account text, p_sandbox text, p_type text,
				   p_eff timestamptz, p_grace_s integer,
				   OUT settled integer, OUT released bigint, OUT kept bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	r record;
	st record;
BEGIN
	settled := 0;
	released := 0;
	kept := 0;
	PERFORM 1 FROM key_day_ledger l
		WHERE (l.account_id, l.key_id, l.day) IN
			(SELECT h.account_id, h.key_id, h.day FROM holds h
			 WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
			   AND h.status = 'open' AND h.settles_at IS NULL
			   AND (p_type = 'stopped' OR h.lease_starts_at <= p_eff))
		ORDER BY l.account_id, l.key_id, l.day
		FOR UPDATE OF l;
	FOR r IN SELECT h.hold_id, h.lease_ends_at FROM holds h
		 WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
		   AND h.status = 'open' AND h.settles_at IS NULL
		   AND (p_type = 'stopped' OR h.lease_starts_at <= p_eff)
		 ORDER BY h.key_id, h.day, h.hold_id LOOP
		st := meter_hold_settle(p_account, r.hold_id,
			CASE WHEN p_eff > r.lease_ends_at
				  AND p_eff <= r.lease_ends_at + make_interval(secs => p_grace_s)
			     THEN r.lease_ends_at ELSE p_eff END);
		IF st.released IS NOT NULL THEN
			settled := settled + 1;
			released := released + st.released;
			kept := kept + st.kept;
		END IF;
	END LOOP;
END
$$;

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
		UPDATE sandboxes s SET state = p_type, state_since = GREATEST(s.state_since, eff)
		WHERE s.account_id = acc AND s.sandbox_id = p_sandbox AND s.state <> 'stopped'
		  AND (p_type = 'stopped'
		       OR (s.state_since <= eff
			   AND NOT EXISTS (SELECT 1 FROM holds h
					   WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
					     AND h.status = 'open' AND h.lease_starts_at > eff)));
	END IF;
	IF rec AND p_type IN ('paused', 'stopped') THEN
		BEGIN
			PERFORM set_config('lock_timeout', '1s', true);
			st := meter_event_settle(acc, p_sandbox, p_type, eff, p_grace_s);
			n := n + st.settled;
			total := total + st.released;
			tail := tail + st.kept;
		EXCEPTION WHEN deadlock_detected OR lock_not_available THEN
			NULL;
		END;
	END IF;
	RETURN QUERY SELECT true, rec, s.state::text, s.state_since, n, total, tail
		FROM sandboxes s WHERE s.account_id = acc AND s.sandbox_id = p_sandbox;
END
$$;
