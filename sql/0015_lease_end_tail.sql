-- meter: lease end keeps the hold of the unmetered tail, as a pause does.
--
-- 0014 made a pause or stop keep, of each hold it settles, the worst case
-- of the running time from the sandbox's last sample to the event, until
-- metering passes the event. The lease-end sweep still released the whole
-- remainder of a hold at once, the stretch from the last sample to the
-- lease end included: a check could take that budget, and the tail,
-- metered at the next sample, then took the day past its limit; or, with a
-- renewal, it landed on the new lease's hold. Which of the two paths a
-- hold took depended on whether the sweeper (every second) or the control
-- plane's pause at the lease end came first.
--
-- Now the sweep settles a hold at its lease end like an event at that
-- time (meter_hold_settle with p_at = lease_ends_at): closed at once
-- ('released', as before) when metering has already passed the end of its
-- day part; otherwise the tail's worst case stays held with settles_at =
-- lease_ends_at, closed by the settle sweep as 0014's are (metering past
-- it, or lease_grace_s after it when no sample will come). A sandbox never
-- metered keeps its whole hold that long: its samples may yet come.
-- settles_at is then not after lease_ends_at, so the hold_outrun trigger
-- leaves the hold alone; a sandbox left running on the ended lease is
-- reported by lease_watch (0013) once its holds are closed and the grace
-- has passed.

DROP FUNCTION meter_hold_settle(text, bigint, timestamptz);

-- As in 0014; p_status: how a hold with nothing left to meter is closed.
CREATE FUNCTION meter_hold_settle(p_account text, p_hold bigint, p_at timestamptz,
				  p_status text DEFAULT 'settled',
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
		released := meter_hold_close(p_account, p_hold, p_status);
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

-- As in 0014, but each hold is settled at its lease end (above) instead of
-- released whole; the lease is noted in lease_watch either way.
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
			IF (meter_hold_settle(r.account_id, h.hold_id, h.lease_ends_at,
					      'released')).released IS NOT NULL THEN
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
