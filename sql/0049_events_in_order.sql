-- meter: a sandbox's running or paused state is the one its events give
-- in the order of their times, whatever order they came in.
--
-- 0042 moved the state at each event by comparing it with the state's
-- state_since only, and an event of the state a sandbox is in already
-- leaves state_since alone. So two events that came out of order could
-- leave another state than the same two in order:
-- - running (dated t2) then a pause dated t1 < t2: the sandbox was left
--   paused for good, though it ran on, its hold settled by the pause and
--   nothing said (in order: running since t2, and the resume without a
--   wake reported as hold_outrun resumed_without_wake);
-- - pauses at t1 and t3, then a running event at t2 in between: left
--   running (in order: paused since t3);
-- - a pause and a running event both dated before the create (both count
--   as at the create) took the order they came in, not their own.
-- Now every running or paused event, of a sandbox not stopped, sets the
-- state and state_since from the whole line of its sandbox: the create,
-- the starts of its open leases (a wake runs the sandbox from its check)
-- and its recorded running and paused events, ordered by time (an event
-- dated before the create as at it; at one time the create and lease
-- starts first, then events by their own at, then in the order they
-- came). The state is the last one's; state_since the first of the last
-- run of that state. A pause that ends up before a running event in that
-- line (the running one came first) moves the row to paused and back to
-- running, so that the resume is checked at commit as it is in order
-- (meter_outbox_resumed, 0037). Holds are settled as before, and a stop
-- is as before: final.

CREATE OR REPLACE FUNCTION meter_sandbox_event(p_sandbox text, p_type text, p_at timestamptz,
					       p_grace_s integer)
	RETURNS TABLE (known boolean, recorded boolean, state text, state_since timestamptz,
		       holds_settled integer, released_micros bigint, tail_held_micros bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	acc text;
	created timestamptz;
	eff timestamptz;
	st record;
	n integer := 0;
	total bigint := 0;
	tail bigint := 0;
	rec boolean;
	ev bigint;
	last_state text;
	run_since timestamptz;
	run_by_event boolean;
BEGIN
	SELECT s.account_id, s.created_at INTO acc, created
		FROM sandboxes s WHERE s.sandbox_id = p_sandbox;
	IF NOT FOUND THEN
		RETURN QUERY SELECT false, false, NULL::text, NULL::timestamptz, 0, 0::bigint,
				    0::bigint;
		RETURN;
	END IF;
	eff := GREATEST(p_at, created);
	-- Before anything of the event is written: ingestion locks these rows
	-- FOR UPDATE after a conflict, and updates them, before its last read
	-- of the events (meter/ingest.c).
	IF p_type IN ('paused', 'stopped') THEN
		PERFORM 1 FROM sandbox_meter m
			WHERE m.account_id = acc AND m.sandbox_id = p_sandbox FOR SHARE;
	END IF;
	INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)
		VALUES (acc, p_sandbox, p_type, p_at)
	ON CONFLICT (account_id, sandbox_id, type, at) DO NOTHING
	RETURNING event_id INTO ev;
	rec := ev IS NOT NULL;
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
		IF p_type = 'stopped' THEN
			UPDATE sandboxes s SET state = 'stopped',
				state_since = GREATEST(s.state_since, eff)
			WHERE s.account_id = acc AND s.sandbox_id = p_sandbox
			  AND s.state <> 'stopped';
		ELSE
			-- The line, as the header says; pos orders it.
			WITH line AS (
				SELECT created AS t, 0 AS rank, created AS at, 0::bigint AS id,
				       'running'::text AS kind
				UNION ALL
				SELECT h.lease_starts_at, 0, h.lease_starts_at, 0, 'running'
				FROM holds h
				WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
				  AND h.status = 'open'
				UNION ALL
				SELECT GREATEST(e.at, created), 1, e.at, e.event_id, e.type::text
				FROM lifecycle_events e
				WHERE e.account_id = acc AND e.sandbox_id = p_sandbox
				  AND e.type IN ('running', 'paused')),
			ordered AS (
				SELECT l.t, l.rank, l.kind,
				       row_number() OVER (ORDER BY l.t, l.rank, l.at, l.id) AS pos
				FROM line l),
			fin AS (
				SELECT o.kind, o.pos FROM ordered o ORDER BY o.pos DESC LIMIT 1),
			run AS (
				SELECT o.t, o.rank
				FROM ordered o, fin f
				WHERE o.pos = 1 + COALESCE((SELECT max(x.pos) FROM ordered x
							    WHERE x.kind <> f.kind), 0))
			SELECT f.kind, r.t, r.rank = 1 INTO last_state, run_since, run_by_event
			FROM fin f, run r;
			IF p_type = 'paused' AND last_state = 'running' AND run_by_event THEN
				-- The pause, then the running event after it: the
				-- update from paused to running checks the resume.
				UPDATE sandboxes s SET state = 'paused', state_since = eff
				WHERE s.account_id = acc AND s.sandbox_id = p_sandbox
				  AND s.state = 'running';
			END IF;
			UPDATE sandboxes s SET state = last_state, state_since = run_since
			WHERE s.account_id = acc AND s.sandbox_id = p_sandbox
			  AND s.state <> 'stopped'
			  AND (s.state <> last_state OR s.state_since <> run_since);
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
