-- meter: a resume is reported whenever its events come, and a wake whose
-- hold has closed still runs its sandbox in the line.
--
-- 0049 put a sandbox's running and paused state in the order of its events'
-- times, and reported a resume without a wake (hold_outrun
-- "resumed_without_wake") only through the sandbox row's move from paused
-- to running (meter_outbox_resumed, 0037), or the two-step move a late
-- pause made for it. A stretch of running between two pauses, or between
-- a pause and a stop or a wake, whose events came out of order moved the
-- row nowhere, and was not reported:
-- - pauses at t1 and t3, then the running event at t2 between them;
-- - a pause at t1 and a stop at t3, then the running event at t2;
-- - a pause at t1, a wake, then a running event dated between them.
-- In order, each of these reports the resume at t2: the sandbox ran with
-- its holds settled by the pause and no lease begun since. Now a recorded
-- running event right after a pause in the line is reported by the hold
-- that was the sandbox's latest at its time (lease begun at or before it),
-- unless a stop comes at or before it or a hold covered that time as the
-- holds record it: begun by then, its lease not ended, and cut by an
-- event only after it or not at all. (A pause recorded before a wake it
-- is dated after leaves the wake's hold whole; a pause at t1 that comes
-- after a pause at t3 leaves the hold's tail to t3, as before, so a
-- running event at t2 between them is not reported: the hold covers it.)
-- A recorded pause checks the first running item after it in the same
-- way, when that is a running event (only pauses between), since it may
-- have cut the hold that held that report back. The dedup key is the
-- hold's, as in 0037, so a resume the row's move reports too is sent
-- once. The row's move still reports a plain resume in order (unchanged),
-- and the two-step move of 0049 is no longer needed for a late pause: the
-- running event after it is reported by the rule above.
--
-- The line also takes the starts of every hold of the sandbox, not only
-- its open ones: a wake runs the sandbox from its check whether or not its
-- hold has closed since (released at its lease's end, or settled by a later
-- pause). In 0049 a pause dated before a wake whose hold had been released
-- came later and left the sandbox paused, though it was woken after it.
-- holds_sandbox_idx (0050) finds a sandbox's holds of any status.

-- The report of a resume without a wake at p_at: by the hold that was
-- the sandbox's latest then (its lease begun at or before p_at), once per
-- hold.
CREATE FUNCTION meter_outbox_resumed_at(p_account text, p_sandbox text, p_at timestamptz)
	RETURNS void
	LANGUAGE sql
	AS $$
	INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)
	SELECT h.account_id, h.key_id, 'hold_outrun', 'resumed/' || h.hold_id::text,
	       jsonb_build_object('reason', 'resumed_without_wake',
				  'key_id', h.key_id, 'sandbox_id', h.sandbox_id,
				  'hold_id', h.hold_id, 'day', h.day::text,
				  'amount_micros', h.amount_micros,
				  'consumed_micros', h.consumed_micros,
				  'lease_ends_at',
				  to_char(h.lease_ends_at AT TIME ZONE 'UTC',
					  'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
				  'at', to_char(p_at AT TIME ZONE 'UTC',
						'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
	FROM holds h
	WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox AND h.lease_starts_at <= p_at
	ORDER BY h.lease_starts_at DESC, h.day DESC, h.hold_id DESC
	LIMIT 1
	ON CONFLICT (account_id, type, dedup_key) DO NOTHING;
$$;

-- As in 0037, through the function above: the row's state_since is the
-- resume's time.
CREATE OR REPLACE FUNCTION meter_outbox_resumed() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM sandboxes s
		       WHERE s.account_id = NEW.account_id AND s.sandbox_id = NEW.sandbox_id
			 AND s.state = 'running')
	   OR EXISTS (SELECT 1 FROM holds o
		      WHERE o.account_id = NEW.account_id AND o.sandbox_id = NEW.sandbox_id
			AND o.status = 'open' AND o.settles_at IS NULL) THEN
		RETURN NULL;
	END IF;
	PERFORM meter_outbox_resumed_at(NEW.account_id, NEW.sandbox_id, NEW.state_since);
	RETURN NULL;
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
	old_state text;
	resumed_at timestamptz;
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
		SELECT s.state INTO old_state FROM sandboxes s
			WHERE s.account_id = acc AND s.sandbox_id = p_sandbox
			FOR NO KEY UPDATE;
		IF p_type = 'stopped' THEN
			UPDATE sandboxes s SET state = 'stopped',
				state_since = GREATEST(s.state_since, eff)
			WHERE s.account_id = acc AND s.sandbox_id = p_sandbox
			  AND s.state <> 'stopped';
		ELSE
			-- The line, as the header says; pos orders it. resumed_at:
			-- the running event this event may make the resume of:
			-- this one, after a pause; or, for a pause, the first
			-- running item after it when that is a running event (only
			-- pauses between: the pause may have settled the hold that
			-- kept it from being one).
			WITH line AS (
				SELECT created AS t, 0 AS rank, created AS at, 0::bigint AS id,
				       'running'::text AS kind
				UNION ALL
				SELECT h.lease_starts_at, 0, h.lease_starts_at, 0, 'running'
				FROM holds h
				WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
				UNION ALL
				SELECT GREATEST(e.at, created), 1, e.at, e.event_id, e.type::text
				FROM lifecycle_events e
				WHERE e.account_id = acc AND e.sandbox_id = p_sandbox
				  AND e.type IN ('running', 'paused')),
			ordered AS (
				SELECT l.t, l.rank, l.kind, l.id,
				       row_number() OVER w AS pos,
				       lag(l.kind) OVER w AS prev_kind
				FROM line l
				WINDOW w AS (ORDER BY l.t, l.rank, l.at, l.id)),
			fin AS (
				SELECT o.kind, o.pos FROM ordered o ORDER BY o.pos DESC LIMIT 1),
			run AS (
				SELECT o.t
				FROM ordered o, fin f
				WHERE o.pos = 1 + COALESCE((SELECT max(x.pos) FROM ordered x
							    WHERE x.kind <> f.kind), 0))
			SELECT f.kind, r.t,
			       CASE WHEN p_type = 'running' THEN
				       (SELECT o.t FROM ordered o
					WHERE o.rank = 1 AND o.id = ev AND o.prev_kind = 'paused')
			       ELSE
				       (SELECT CASE WHEN o.rank = 1 THEN o.t END FROM ordered o
					WHERE o.kind = 'running'
					  AND o.pos > (SELECT x.pos FROM ordered x
						       WHERE x.rank = 1 AND x.id = ev)
					ORDER BY o.pos LIMIT 1)
			       END
			INTO last_state, run_since, resumed_at
			FROM fin f, run r;
			UPDATE sandboxes s SET state = last_state, state_since = run_since
			WHERE s.account_id = acc AND s.sandbox_id = p_sandbox
			  AND s.state <> 'stopped'
			  AND (s.state <> last_state OR s.state_since <> run_since);
			-- The resume, unless the row's move from paused to running
			-- reports it at commit (0037), a stop came before it, or a
			-- hold covered its time as the holds record it: begun by
			-- then, its lease not ended, and not cut by then (cut later,
			-- at settles_at; whole, still open or released at its lease's
			-- end). A pause recorded before a wake it is dated after
			-- leaves that wake's hold whole, and a pause that comes after
			-- a later one leaves the tail the later one kept.
			IF resumed_at IS NOT NULL
			   AND NOT (p_type = 'running' AND old_state = 'paused'
				    AND last_state = 'running')
			   AND NOT EXISTS (SELECT 1 FROM lifecycle_events e
					   WHERE e.account_id = acc AND e.sandbox_id = p_sandbox
					     AND e.type = 'stopped'
					     AND GREATEST(e.at, created) <= resumed_at)
			   AND NOT EXISTS (SELECT 1 FROM holds h
					   WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
					     AND h.lease_starts_at <= resumed_at
					     AND h.lease_ends_at > resumed_at
					     AND (h.settles_at > resumed_at
						  OR (h.settles_at IS NULL
						      AND h.status IN ('open', 'released')))) THEN
				PERFORM meter_outbox_resumed_at(acc, p_sandbox, resumed_at);
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
