-- meter: an event's second settling waits as long as it must.
--
-- 0036 settles again after the event's update of the sandbox row, so that
-- a wake in flight on that row is settled too. Two holes in it:
-- - The update's test that no open hold began after the event ran on the
--   snapshot taken before it waited for the wake's row lock (PostgreSQL
--   re-reads only the row it updates), so a pause dated before a renewal
--   in flight set the state to paused while the renewal's hold stayed
--   open. The row is now locked in a statement of its own first, and the
--   update, a statement after it, sees the committed wake.
-- - The second settling gave way after a one-second lock timeout or a
--   deadlock and answered as if nothing were left: a writer holding the
--   key-day's ledger row a little longer (a check batch, ingestion, the
--   sweep) left a stopped sandbox with a wake's whole hold. It now waits
--   like the first; a deadlock fails the event's statement, which rolls
--   back whole (its record of the event too) and is run again by the
--   caller (db_checks_event, as for any deadlock).
-- As in 0036 otherwise.

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
		-- The row first, in a statement of its own: a wake in flight on it
		-- has committed once this returns, so the update's test of the
		-- holds below (a fresh snapshot) sees that wake's hold.
		PERFORM 1 FROM sandboxes s WHERE s.account_id = acc AND s.sandbox_id = p_sandbox
			FOR UPDATE;
		UPDATE sandboxes s SET state = p_type, state_since = GREATEST(s.state_since, eff)
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
