-- meter: a pause or stop keeps the hold of its unmetered tail until metered.
--
-- A pause or stop event settled the sandbox's holds to what was metered so
-- far and released the rest at once. But metering lags the event: the
-- running time from the sandbox's last sample to the event is metered only
-- when the next sample comes (a sampling interval later, or more). That
-- tail was then spent without a hold, so a check allowed in between on the
-- released budget could take the day past its limit; and the tail was
-- charged to whatever open hold the sandbox had next (a wake's new lease),
-- which could then be reported outrun although it was honoured.
--
-- Now the event keeps, of each hold it settles, the worst case of that
-- tail: the hold's amount becomes consumed + the tail's share of it
-- (amount x tail / the hold's day part, rounded up; the amount is the
-- part's worst case at a constant rate, so the share covers any usage of
-- the tail), the rest is released at once, and the hold stays open with
-- settles_at = the event's time. Ingestion consumes it like any open hold
-- (oldest first, so the tail lands on it, not on a newer lease's hold).
-- The sweeper closes it ('settled') once the sandbox's metering has passed
-- settles_at (sandbox_meter.last_sampled_at >= settles_at), or, if no
-- sample comes (a stopped sandbox reports none), lease_grace_s after
-- settles_at if the sandbox was never metered or its host has reported
-- past settles_at without it; a host behind or down keeps it held up to an
-- hour (meter_tail_done). A hold with nothing left to meter (last sample at or after
-- the event, or the event at or before the lease start) is closed at once,
-- as before. The lease-end sweep leaves settling holds alone.
--
-- A settling hold whose event came within its lease ended with that event,
-- so what metering puts on it beyond the kept amount is not a lease outrun:
-- storage billed after the pause, rounding of CPU and memory apart, or
-- running time ingestion billed past an event it had not seen yet. The
-- hold_outrun trigger skips such holds. An event after the lease end (the
-- hold was still open: the sweeper had not come yet) keeps only the tail up
-- to the lease end, and the running time from there to the event is an
-- outrun like any other: reported.

ALTER TABLE holds ADD COLUMN settles_at timestamptz,
	ADD COLUMN reserved_micros bigint CHECK (reserved_micros >= 0);
COMMENT ON COLUMN holds.settles_at IS 'Set by a pause or stop: the hold is kept for the tail metered up to this time, then closed (settled).';
COMMENT ON COLUMN holds.reserved_micros IS 'Set with settles_at: amount_micros as the check reserved it, before the event cut it to the tail.';
CREATE INDEX holds_settling_idx ON holds (settles_at)
	WHERE status = 'open' AND settles_at IS NOT NULL;

DROP TRIGGER holds_outrun ON holds;
CREATE TRIGGER holds_outrun AFTER UPDATE ON holds
	FOR EACH ROW
	WHEN (NEW.consumed_micros > NEW.amount_micros AND OLD.consumed_micros <= OLD.amount_micros
	      AND (NEW.settles_at IS NULL OR NEW.settles_at > NEW.lease_ends_at))
	EXECUTE FUNCTION meter_outbox_outrun();

-- Settles hold p_hold of p_account for an event at p_at: closes it when
-- nothing before p_at is left to meter, else keeps the tail's worst case
-- (see above). Takes the ledger row, then the hold (the caller may hold the
-- ledger row already). released: µ$ that left held now; kept: µ$ still
-- held for the tail. Both NULL when the hold was not open or was settling.
CREATE FUNCTION meter_hold_settle(p_account text, p_hold bigint, p_at timestamptz,
				  OUT released bigint, OUT kept bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	h holds%ROWTYPE;
	tz text;
	metered timestamptz;
	part_start timestamptz;
	part_end timestamptz;
	tail_start timestamptz;
	tail_end timestamptz;
	rem bigint;
	amount bigint;
BEGIN
	SELECT * INTO h FROM holds WHERE account_id = p_account AND hold_id = p_hold;
	IF NOT FOUND OR h.status <> 'open' OR h.settles_at IS NOT NULL THEN
		RETURN;
	END IF;
	PERFORM 1 FROM key_day_ledger
		WHERE account_id = h.account_id AND key_id = h.key_id AND day = h.day FOR UPDATE;
	SELECT * INTO h FROM holds WHERE account_id = p_account AND hold_id = p_hold FOR UPDATE;
	IF h.status <> 'open' OR h.settles_at IS NOT NULL THEN
		RETURN;
	END IF;
	SELECT k.time_zone INTO tz FROM api_keys k
		WHERE k.account_id = h.account_id AND k.key_id = h.key_id;
	SELECT m.last_sampled_at INTO metered FROM sandbox_meter m
		WHERE m.account_id = h.account_id AND m.sandbox_id = h.sandbox_id;
	part_start := GREATEST(h.lease_starts_at, meter_day_start(tz, h.day));
	part_end := LEAST(h.lease_ends_at, meter_day_start(tz, h.day + 1));
	tail_start := GREATEST(part_start, metered); -- GREATEST skips a NULL
	tail_end := LEAST(part_end, p_at);
	IF tail_end <= tail_start THEN
		released := meter_hold_close(p_account, p_hold, 'settled');
		kept := 0;
		RETURN;
	END IF;
	rem := GREATEST(h.amount_micros - h.consumed_micros, 0);
	IF part_end <= part_start THEN
		kept := rem;
	ELSE
		kept := LEAST(rem, ceil(h.amount_micros::numeric
					* (EXTRACT(EPOCH FROM tail_end - tail_start) * 1000000)
					/ (EXTRACT(EPOCH FROM part_end - part_start) * 1000000))::bigint);
	END IF;
	released := rem - kept;
	amount := CASE WHEN h.consumed_micros < h.amount_micros THEN h.consumed_micros + kept
		       ELSE h.amount_micros END;
	UPDATE holds SET amount_micros = amount, settles_at = p_at, reserved_micros = h.amount_micros
		WHERE account_id = p_account AND hold_id = p_hold;
	UPDATE key_day_ledger SET held_micros = held_micros - released, updated_at = now()
		WHERE account_id = h.account_id AND key_id = h.key_id AND day = h.day;
END
$$;

-- As in 0005, settling through meter_hold_settle; tail_held_micros: what
-- the settled holds still keep for the unmetered tail.
DROP FUNCTION meter_sandbox_event(text, text, timestamptz);
CREATE FUNCTION meter_sandbox_event(p_sandbox text, p_type text, p_at timestamptz)
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
		FOR r IN SELECT h.hold_id FROM holds h
			 WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
			   AND h.status = 'open' AND h.settles_at IS NULL
			   AND h.lease_starts_at <= p_at
			 ORDER BY h.key_id, h.day, h.hold_id LOOP
			st := meter_hold_settle(acc, r.hold_id, p_at);
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

-- As in 0005, and: a settling hold is not released at its lease end (the
-- settle sweep closes it); a released hold whose sandbox still runs on its
-- lease is noted in lease_watch (0013; the latest day part of the lease
-- wins). The sandbox row is read, not locked: the grace check reads it
-- again.
CREATE OR REPLACE FUNCTION meter_holds_expire(p_now timestamptz, p_max integer) RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	r record;
	h record;
	n integer := 0;
BEGIN
	FOR r IN
		SELECT l.account_id, l.key_id, l.day FROM key_day_ledger l
		WHERE (l.account_id, l.key_id, l.day) IN
			(SELECT d.account_id, d.key_id, d.day FROM holds d
			 WHERE d.status = 'open' AND d.lease_ends_at <= p_now
			   AND d.settles_at IS NULL
			 ORDER BY d.lease_ends_at LIMIT p_max)
		ORDER BY l.account_id, l.key_id, l.day
		FOR UPDATE OF l SKIP LOCKED
	LOOP
		FOR h IN SELECT d.hold_id, d.sandbox_id, d.day, d.lease_ends_at FROM holds d
			 WHERE d.account_id = r.account_id AND d.key_id = r.key_id AND d.day = r.day
			   AND d.status = 'open' AND d.lease_ends_at <= p_now
			   AND d.settles_at IS NULL
			 ORDER BY d.hold_id LOOP
			IF meter_hold_close(r.account_id, h.hold_id, 'released') IS NOT NULL THEN
				n := n + 1;
				INSERT INTO lease_watch AS w (account_id, sandbox_id, lease_ends_at,
							      hold_id, day)
					SELECT s.account_id, s.sandbox_id, h.lease_ends_at, h.hold_id,
					       h.day
					FROM sandboxes s
					WHERE s.account_id = r.account_id AND s.sandbox_id = h.sandbox_id
					  AND s.state = 'running' AND s.lease_ends_at = h.lease_ends_at
				ON CONFLICT ON CONSTRAINT lease_watch_pkey DO UPDATE
					SET hold_id = EXCLUDED.hold_id, day = EXCLUDED.day
					WHERE EXCLUDED.day > w.day;
			END IF;
		END LOOP;
	END LOOP;
	RETURN n;
END
$$;

-- Whether the tail of a hold settling at p_settles of sandbox p_sandbox is
-- done: metered (the sandbox's last sample at or after p_settles); or,
-- once the grace (p_grace_s) has passed, known never to come: the sandbox
-- was never metered, or the host that last reported it has reported past
-- p_settles without it (a stopped sandbox reports nothing). A host that is
-- behind or down keeps the tail held, up to an hour after p_settles.
CREATE FUNCTION meter_tail_done(p_account text, p_sandbox text, p_settles timestamptz,
				p_now timestamptz, p_grace_s integer)
	RETURNS boolean
	LANGUAGE sql STABLE
	AS $$
	SELECT p_settles <= p_now - interval '1 hour'
	    OR m.last_sampled_at >= p_settles
	    OR (p_settles <= p_now - make_interval(secs => p_grace_s)
		AND (m.last_sampled_at IS NULL
		     OR EXISTS (SELECT 1 FROM samples s
				JOIN ingest_watermarks w ON w.host_id = s.host_id
				WHERE s.account_id = p_account AND s.sandbox_id = p_sandbox
				  AND s.sampled_at = m.last_sampled_at
				  AND w.last_sampled_at >= p_settles)))
	FROM (SELECT (SELECT x.last_sampled_at FROM sandbox_meter x
		      WHERE x.account_id = p_account AND x.sandbox_id = p_sandbox)
		     AS last_sampled_at) m
	$$;

-- Closes ('settled') settling holds whose tail is done (meter_tail_done);
-- at most about p_max of them, ledger rows claimed with SKIP LOCKED as in
-- meter_holds_expire. Returns the number closed.
CREATE FUNCTION meter_holds_settle(p_now timestamptz, p_grace_s integer, p_max integer)
	RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	r record;
	h record;
	n integer := 0;
BEGIN
	FOR r IN
		SELECT l.account_id, l.key_id, l.day FROM key_day_ledger l
		WHERE (l.account_id, l.key_id, l.day) IN
			(SELECT d.account_id, d.key_id, d.day FROM holds d
			 WHERE d.status = 'open' AND d.settles_at IS NOT NULL
			   AND meter_tail_done(d.account_id, d.sandbox_id, d.settles_at, p_now,
					       p_grace_s)
			 ORDER BY d.settles_at LIMIT p_max)
		ORDER BY l.account_id, l.key_id, l.day
		FOR UPDATE OF l SKIP LOCKED
	LOOP
		FOR h IN SELECT d.hold_id FROM holds d
			 WHERE d.account_id = r.account_id AND d.key_id = r.key_id AND d.day = r.day
			   AND d.status = 'open' AND d.settles_at IS NOT NULL
			   AND meter_tail_done(d.account_id, d.sandbox_id, d.settles_at, p_now,
					       p_grace_s)
			 ORDER BY d.hold_id LOOP
			IF meter_hold_close(r.account_id, h.hold_id, 'settled') IS NOT NULL THEN
				n := n + 1;
			END IF;
		END LOOP;
	END LOOP;
	RETURN n;
END
$$;
