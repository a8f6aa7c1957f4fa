-- meter: a sandbox's events and holds are placed in its line by index
-- look-ups at the line's ends, not by reading its whole history.
--
-- meter_sandbox_event (0049, 0051) ordered every hold and every running
-- and paused event of the sandbox to find where the line ends, the run of
-- one state it ends in, and the item next to the event just recorded. A
-- sandbox paused and woken every few minutes has tens of thousands of
-- them: with 30,000 pauses, 30,000 running events and 30,000 holds, each
-- pause or running event took 420 to 760 ms, holding the sandbox's row
-- (every wake of it and ingestion's update of its meter row wait) and
-- growing with every event the sandbox ever had. The reports of a resume
-- without a wake (meter_outbox_resumed_at) and of a paused sandbox its
-- samples find running (meter_outbox_paused_running) sorted all its holds
-- for the latest, and the lease-end sweep (meter_leases_outrun) and ingestion
-- (meter/ingest.c) read all its events for a pause or stop in a window.
--
-- The line is as before: the sandbox's creation and each hold's lease
-- start (running, rank 0), and each running or paused event (rank 1) at
-- the later of its time and the creation; ordered by that time, the rank,
-- the event's own time and its id. Events alone are in the order of their
-- time and id, since the later-of only merges times before the creation,
-- which keep their order after it. So each question is answered by a few
-- look-ups, each the first or last entry of a range of an index:
-- - the line's last item: the latest pause against the latest running
--   item (the latest running event, or the creation or latest lease start,
--   whichever is later in the line);
-- - the run it ends in: the first item of the other state after the last
--   item of the other state (for a running end, the first running event or
--   lease start after the latest pause; for a paused end, the first pause
--   after the latest running item);
-- - the item before a running event (is it a pause?) and the first running
--   item after a pause (is it a running event?), as 0051 asks.
-- Events by type and time are lifecycle_events' unique index. Holds by
-- lease start need holds_sandbox_idx to go on to lease_starts_at: the index
-- is now (account_id, sandbox_id, status, lease_starts_at), the same one
-- entry a check makes, and a sandbox's latest or next lease start is the
-- latest or earliest of three look-ups, one for each status
-- (meter_hold_status allows 'open', 'settled' and 'released' only). A
-- question of holds of any status asks each status apart: asked as a list
-- (status IN (...)), PostgreSQL left the status to a filter and read every
-- index entry of the sandbox. A late running event or pause also asks
-- whether a hold covered its time: holds_lease_day (below) bounds that to
-- a day of lease starts.
--
-- The same pause and running event above, with 2,000 other sandboxes
-- beside it, take 2 to 5 ms, and a late event that reports a resume
-- about 7 ms (a session's first event takes about 20 ms more, planning
-- the function's statements). test_event_line sends the same events to a
-- sandbox with 10,000 of each and to one with ten, their holds settled or
-- released, among 2,000 others: the first reads at most about 25 pages
-- more.
--
-- The answers are 0051's: in a dev database, 24,000 random histories
-- (holds of every status, some begun before the creation; events dated
-- before and after it, to the second, sent in random orders) gave the
-- same answers, rows, holds and reports from 0051's function and this
-- one; a review compared 8,300 more on this migration's first form, with
-- times to the microsecond and wakes between the events. test_event_line
-- holds the row to the whole line after every event of 600 such
-- histories.
--
-- The other reads of a sandbox's events by time ask for each type apart
-- too, so that each is a range of the unique index, not every event of
-- the sandbox: meter_leases_outrun's pause or stop before the grace's
-- end, here, and ingestion's reads (meter/ingest.c SQL_EVENTS,
-- SQL_EVENTS_AGAIN).

-- A hold's lease is at most a day (checks refuse a longer lease_seconds,
-- meter/checks.h CHECKS_LEASE_SECONDS_MAX), and holds_lease_day says so:
-- a hold that covers a time began less than a day before it, so the look-up
-- of one is a range of a day of lease starts.
ALTER TABLE holds ADD CONSTRAINT holds_lease_day
	CHECK (lease_ends_at - lease_starts_at <= interval '86400 s');

CREATE INDEX holds_sandbox_start_idx ON holds (account_id, sandbox_id, status, lease_starts_at);
DROP INDEX holds_sandbox_idx;
ALTER INDEX holds_sandbox_start_idx RENAME TO holds_sandbox_idx;

-- The latest lease start of the sandbox's holds at or before p_at; NULL
-- when none. Each status's look-up is ordered and limited, not max(): for
-- a status that the statistics take for rare, PostgreSQL planned max() as
-- an aggregate over the sandbox's whole range of that status (a review
-- measured 111 pages for a sandbox with 10,000 released holds, against 4).
CREATE FUNCTION meter_hold_start_last(p_account text, p_sandbox text, p_at timestamptz)
	RETURNS timestamptz
	LANGUAGE sql STABLE
	AS $$
	SELECT GREATEST(
		(SELECT h.lease_starts_at FROM holds h
		 WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
		   AND h.status = 'open' AND h.lease_starts_at <= p_at
		 ORDER BY h.lease_starts_at DESC LIMIT 1),
		(SELECT h.lease_starts_at FROM holds h
		 WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
		   AND h.status = 'settled' AND h.lease_starts_at <= p_at
		 ORDER BY h.lease_starts_at DESC LIMIT 1),
		(SELECT h.lease_starts_at FROM holds h
		 WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
		   AND h.status = 'released' AND h.lease_starts_at <= p_at
		 ORDER BY h.lease_starts_at DESC LIMIT 1));
$$;

-- The earliest lease start of the sandbox's holds after p_after; NULL when
-- none. As above.
CREATE FUNCTION meter_hold_start_next(p_account text, p_sandbox text, p_after timestamptz)
	RETURNS timestamptz
	LANGUAGE sql STABLE
	AS $$
	SELECT LEAST(
		(SELECT h.lease_starts_at FROM holds h
		 WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
		   AND h.status = 'open' AND h.lease_starts_at > p_after
		 ORDER BY h.lease_starts_at LIMIT 1),
		(SELECT h.lease_starts_at FROM holds h
		 WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
		   AND h.status = 'settled' AND h.lease_starts_at > p_after
		 ORDER BY h.lease_starts_at LIMIT 1),
		(SELECT h.lease_starts_at FROM holds h
		 WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
		   AND h.status = 'released' AND h.lease_starts_at > p_after
		 ORDER BY h.lease_starts_at LIMIT 1));
$$;

-- The sandbox's latest hold at p_at, in 0037's order: of the holds whose
-- lease began latest at or before p_at, the latest day part, then the
-- latest hold; NULL when none. One look-up for each status, each a match
-- of the whole index key: asked as a list of statuses (status IN (...)),
-- PostgreSQL left the status to a filter and read every index entry of the
-- sandbox.
CREATE FUNCTION meter_hold_latest(p_account text, p_sandbox text, p_at timestamptz)
	RETURNS bigint
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	latest timestamptz := meter_hold_start_last(p_account, p_sandbox, p_at);
	id bigint;
BEGIN
	SELECT x.hold_id INTO id
	FROM (VALUES ('open'), ('settled'), ('released')) AS hs(status)
	CROSS JOIN LATERAL (SELECT h.hold_id, h.day FROM holds h
			    WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
			      AND h.status = hs.status AND h.lease_starts_at = latest
			    ORDER BY h.day DESC, h.hold_id DESC
			    LIMIT 1) x
	ORDER BY x.day DESC, x.hold_id DESC
	LIMIT 1;
	RETURN id;
END
$$;

-- The payload of a hold_outrun report on hold p_hold: its reason, the
-- hold's figures, and at (when the outrun was seen) unless p_at is NULL.
-- The three reports restated below build it here.
CREATE FUNCTION meter_outrun_payload(p_reason text, p_hold holds, p_at timestamptz)
	RETURNS jsonb
	LANGUAGE sql STABLE
	AS $$
	SELECT jsonb_build_object('reason', p_reason,
				  'key_id', p_hold.key_id, 'sandbox_id', p_hold.sandbox_id,
				  'hold_id', p_hold.hold_id, 'day', p_hold.day::text,
				  'amount_micros', p_hold.amount_micros,
				  'consumed_micros', p_hold.consumed_micros,
				  'lease_ends_at',
				  to_char(p_hold.lease_ends_at AT TIME ZONE 'UTC',
					  'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
	       || CASE WHEN p_at IS NULL THEN '{}'::jsonb
		       ELSE jsonb_build_object('at', to_char(p_at AT TIME ZONE 'UTC',
							    'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
		  END;
$$;

-- As in 0051: the hold that was the sandbox's latest at p_at, now found
-- by meter_hold_latest.
CREATE OR REPLACE FUNCTION meter_outbox_resumed_at(p_account text, p_sandbox text, p_at timestamptz)
	RETURNS void
	LANGUAGE sql
	AS $$
	INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)
	SELECT h.account_id, h.key_id, 'hold_outrun', 'resumed/' || h.hold_id::text,
	       meter_outrun_payload('resumed_without_wake', h, p_at)
	FROM holds h
	WHERE h.account_id = p_account
	  AND h.hold_id = (SELECT meter_hold_latest(p_account, p_sandbox, p_at))
	ON CONFLICT (account_id, type, dedup_key) DO NOTHING;
$$;

-- As in 0051, with the line found from its ends (above).
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
	p_last timestamptz;
	p_id bigint;
	r_last timestamptz;
	r_id bigint;
	r0 timestamptz;
	t_ev timestamptz;
	b_last timestamptz;
	b_id bigint;
	rb_last timestamptz;
	rb_id bigint;
	next_run timestamptz;
	next_start timestamptz;
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
			-- The line, as the header says, from its ends. p_*: the
			-- latest pause; r_*: the latest running event; r0: the
			-- latest creation or lease start (rank 0).
			SELECT e.at, e.event_id INTO p_last, p_id FROM lifecycle_events e
				WHERE e.account_id = acc AND e.sandbox_id = p_sandbox
				  AND e.type = 'paused'
				ORDER BY e.at DESC LIMIT 1;
			SELECT e.at, e.event_id INTO r_last, r_id FROM lifecycle_events e
				WHERE e.account_id = acc AND e.sandbox_id = p_sandbox
				  AND e.type = 'running'
				ORDER BY e.at DESC LIMIT 1;
			r0 := GREATEST(created, meter_hold_start_last(acc, p_sandbox, 'infinity'));
			IF p_last IS NOT NULL AND GREATEST(p_last, created) >= r0
			   AND (r_last IS NULL OR (p_last, p_id) > (r_last, r_id)) THEN
				-- Paused since the first pause after the latest
				-- running item: the running event if it is the
				-- later in the line, else the rank-0 item at r0
				-- (every pause is after it when r0 is the creation).
				last_state := 'paused';
				IF r_last IS NOT NULL AND GREATEST(r_last, created) >= r0 THEN
					SELECT GREATEST(e.at, created) INTO run_since
						FROM lifecycle_events e
						WHERE e.account_id = acc AND e.sandbox_id = p_sandbox
						  AND e.type = 'paused' AND e.at >= r_last
						  AND (e.at > r_last OR e.event_id > r_id)
						ORDER BY e.at LIMIT 1;
				ELSE
					SELECT GREATEST(e.at, created) INTO run_since
						FROM lifecycle_events e
						WHERE e.account_id = acc AND e.sandbox_id = p_sandbox
						  AND e.type = 'paused'
						  AND e.at >= CASE WHEN r0 > created THEN r0
								   ELSE '-infinity' END
						ORDER BY e.at LIMIT 1;
				END IF;
			ELSE
				-- Running since the first running item after the
				-- latest pause (a lease start after its time, or a
				-- running event after it), or since the line's first
				-- item when there is no pause.
				last_state := 'running';
				IF p_last IS NULL THEN
					run_since := LEAST(created,
							   meter_hold_start_next(acc, p_sandbox,
										 '-infinity'));
				ELSE
					run_since := LEAST(
						meter_hold_start_next(acc, p_sandbox,
								      GREATEST(p_last, created)),
						(SELECT GREATEST(e.at, created) FROM lifecycle_events e
						 WHERE e.account_id = acc AND e.sandbox_id = p_sandbox
						   AND e.type = 'running' AND e.at >= p_last
						   AND (e.at > p_last OR e.event_id > p_id)
						 ORDER BY e.at LIMIT 1));
				END IF;
			END IF;
			-- resumed_at: the running event this event may make the
			-- resume of: this one, when the item before it is a pause
			-- (the latest event before it, a pause, at or after the
			-- latest rank-0 item at or before its time); or, for a
			-- pause, the first running item after it when that is a
			-- running event (only pauses between: the pause may have
			-- settled the hold that kept it from being one), not a
			-- lease start (at the same time a lease start comes first).
			t_ev := GREATEST(p_at, created);
			IF p_type = 'running' THEN
				SELECT e.at, e.event_id INTO b_last, b_id FROM lifecycle_events e
					WHERE e.account_id = acc AND e.sandbox_id = p_sandbox
					  AND e.type = 'paused' AND e.at <= p_at
					  AND (e.at < p_at OR e.event_id < ev)
					ORDER BY e.at DESC LIMIT 1;
				SELECT e.at, e.event_id INTO rb_last, rb_id FROM lifecycle_events e
					WHERE e.account_id = acc AND e.sandbox_id = p_sandbox
					  AND e.type = 'running' AND e.at <= p_at
					  AND (e.at < p_at OR e.event_id < ev)
					ORDER BY e.at DESC LIMIT 1;
				IF b_last IS NOT NULL
				   AND (rb_last IS NULL OR (b_last, b_id) > (rb_last, rb_id))
				   AND GREATEST(b_last, created)
				       >= GREATEST(created, meter_hold_start_last(acc, p_sandbox, t_ev)) THEN
					resumed_at := t_ev;
				END IF;
			ELSE
				SELECT GREATEST(e.at, created) INTO next_run FROM lifecycle_events e
					WHERE e.account_id = acc AND e.sandbox_id = p_sandbox
					  AND e.type = 'running' AND e.at >= p_at
					  AND (e.at > p_at OR e.event_id > ev)
					ORDER BY e.at LIMIT 1;
				next_start := meter_hold_start_next(acc, p_sandbox, t_ev);
				IF next_run IS NOT NULL
				   AND (next_start IS NULL OR next_run < next_start) THEN
					resumed_at := next_run;
				END IF;
			END IF;
			UPDATE sandboxes s SET state = last_state, state_since = run_since
			WHERE s.account_id = acc AND s.sandbox_id = p_sandbox
			  AND s.state <> 'stopped'
			  AND (s.state <> last_state OR s.state_since <> run_since);
			-- The resume, unless the row's move from paused to running
			-- reports it at commit (0037), a stop came before it, or a
			-- hold covered its time as the holds record it: begun by
			-- then (and less than a day before, by holds_lease_day),
			-- its lease not ended, and not cut by then (cut later,
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
			   AND NOT EXISTS (SELECT 1
					   FROM (VALUES ('open'), ('settled'), ('released'))
						AS hs(status)
					   CROSS JOIN LATERAL (
						SELECT 1 FROM holds h
						WHERE h.account_id = acc
						  AND h.sandbox_id = p_sandbox
						  AND h.status = hs.status
						  AND h.lease_starts_at <= resumed_at
						  AND h.lease_starts_at
						      > resumed_at - interval '86400 s'
						  AND h.lease_ends_at > resumed_at
						  AND (h.settles_at > resumed_at
						       OR (h.settles_at IS NULL
							   AND h.status IN ('open', 'released')))
						LIMIT 1) x) THEN
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

-- As in 0041, with a stop and a pause each looked up by its type.
CREATE OR REPLACE FUNCTION meter_leases_outrun(p_now timestamptz, p_grace_s integer, p_max integer)
	RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	n integer;
BEGIN
	WITH picked AS MATERIALIZED (
		SELECT d.account_id, d.sandbox_id, d.lease_ends_at FROM lease_watch d
		WHERE d.lease_ends_at <= p_now - make_interval(secs => p_grace_s)
		  AND (SELECT count(*) FROM (SELECT FROM holds o
					     WHERE o.account_id = d.account_id
					       AND o.sandbox_id = d.sandbox_id
					       AND o.status = 'open' AND o.settles_at IS NULL
					       AND o.lease_ends_at = d.lease_ends_at
					     LIMIT 1) x) = 0
		ORDER BY d.lease_ends_at LIMIT p_max
		FOR UPDATE SKIP LOCKED
	), due AS (
		DELETE FROM lease_watch w USING picked p
		WHERE w.account_id = p.account_id AND w.sandbox_id = p.sandbox_id
		  AND w.lease_ends_at = p.lease_ends_at
		RETURNING w.account_id, w.sandbox_id, w.lease_ends_at, w.hold_id
	), sent AS (
		INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)
		SELECT h.account_id, h.key_id, 'hold_outrun', h.hold_id::text,
		       meter_outrun_payload('lease_ended', h, NULL)
		FROM due
		JOIN sandboxes s ON s.account_id = due.account_id AND s.sandbox_id = due.sandbox_id
		JOIN holds h ON h.account_id = due.account_id AND h.hold_id = due.hold_id
		WHERE s.lease_ends_at = due.lease_ends_at
		  AND NOT EXISTS (SELECT 1 FROM lifecycle_events e
				  WHERE e.account_id = due.account_id
				    AND e.sandbox_id = due.sandbox_id
				    AND e.type = 'stopped'
				    AND e.at <= due.lease_ends_at
						+ make_interval(secs => p_grace_s))
		  AND NOT EXISTS (SELECT 1 FROM lifecycle_events e
				  WHERE e.account_id = due.account_id
				    AND e.sandbox_id = due.sandbox_id
				    AND e.type = 'paused'
				    AND e.at >= h.lease_starts_at
				    AND e.at <= due.lease_ends_at
						+ make_interval(secs => p_grace_s))
		ORDER BY due.lease_ends_at
		ON CONFLICT (account_id, type, dedup_key) DO NOTHING
	)
	SELECT count(*) INTO n FROM due;
	RETURN n;
END
$$;

-- As in 0040, with a hold begun after the sample before and the latest
-- hold each found by its lease start (above), not by reading every hold
-- of the sandbox.
CREATE OR REPLACE FUNCTION meter_outbox_paused_running() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM sandboxes s
		       WHERE s.account_id = NEW.account_id AND s.sandbox_id = NEW.sandbox_id
			 AND s.state = 'paused' AND s.state_since < NEW.last_sampled_at)
	   OR EXISTS (SELECT 1 FROM holds o
		      WHERE o.account_id = NEW.account_id AND o.sandbox_id = NEW.sandbox_id
			AND o.status = 'open' AND o.settles_at IS NULL)
	   OR meter_hold_start_next(NEW.account_id, NEW.sandbox_id, OLD.last_sampled_at) IS NOT NULL
	   OR EXISTS (SELECT 1 FROM lifecycle_events e
		      WHERE e.account_id = NEW.account_id AND e.sandbox_id = NEW.sandbox_id
			AND e.type = 'running' AND e.at > OLD.last_sampled_at) THEN
		RETURN NULL;
	END IF;
	INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)
	SELECT h.account_id, h.key_id, 'hold_outrun', 'paused-running/' || h.hold_id::text,
	       meter_outrun_payload('running_while_paused', h, NEW.last_sampled_at)
	FROM holds h
	WHERE h.account_id = NEW.account_id
	  AND h.hold_id = (SELECT meter_hold_latest(NEW.account_id, NEW.sandbox_id, 'infinity'))
	ON CONFLICT (account_id, type, dedup_key) DO NOTHING;
	RETURN NULL;
END
$$;
