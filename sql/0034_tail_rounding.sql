-- meter: the tail a settlement keeps covers each resource's rounding.
--
-- A hold's amount is its part's CPU and memory worst cases, each rounded
-- up, and a settlement keeps amount * tail / part of it, rounded up, for
-- the tail not metered yet (0027). Metering charges each resource on its
-- own, as the difference of its rounded-down running totals, so each
-- resource's share of the tail can come to its exact cost rounded up: a
-- tail metered at its worst case (every vCPU busy throughout) could come
-- to ceil(cpu) + ceil(memory), one micro more than ceil(cpu + memory),
-- after the rest of the hold was released and perhaps taken by a check:
-- the day's committed one micro past its limit, with the lease honoured.
-- The kept tail is now that share rounded up plus one micro (never more
-- than what the hold has left), which covers two resources' roundings;
-- the micro is released with the rest once metering has passed the tail.
-- As in 0027 otherwise.

-- ceil(p_amount * p_part / p_whole) + 1: the worst case of a tail of
-- p_part of a part of p_whole whose worst case is p_amount, metered a
-- resource at a time.
CREATE FUNCTION meter_tail_keep(p_amount bigint, p_part interval, p_whole interval)
	RETURNS bigint
	LANGUAGE sql IMMUTABLE STRICT
	AS $$
	SELECT meter_share_up(p_amount, p_part, p_whole) + 1
$$;

-- As in 0027, keeping meter_tail_keep().
CREATE OR REPLACE FUNCTION meter_hold_settle(p_account text, p_hold bigint, p_at timestamptz,
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
		kept := LEAST(rem, meter_tail_keep(h.amount_micros, tail_end - tail_start,
						       part_end - part_start));
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

-- As in 0027, keeping meter_tail_keep().
CREATE OR REPLACE FUNCTION meter_holds_expire(p_now timestamptz, p_max integer) RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	n integer;
BEGIN
	PERFORM set_config('lock_timeout', '1s', true);
	WITH due AS (
		SELECT d.account_id, d.hold_id, d.key_id, d.day
		FROM holds d
		WHERE d.status = 'open' AND d.lease_ends_at <= p_now AND d.settles_at IS NULL
		ORDER BY d.lease_ends_at
		LIMIT p_max
	), rows AS (
		SELECT l.account_id, l.key_id, l.day
		FROM key_day_ledger l
		WHERE (l.account_id, l.key_id, l.day) IN (SELECT account_id, key_id, day FROM due)
		ORDER BY l.account_id, l.key_id, l.day
		FOR UPDATE OF l
	), locked AS (
		-- The due holds by their key, locked and read as they are now:
		-- one settled since is passed over below. (Tested here, the
		-- state would match the due index's predicate, and a planner
		-- short of statistics has scanned that whole index per hold.)
		SELECT x.account_id, x.hold_id, x.key_id, x.sandbox_id, x.day, x.amount_micros,
		       x.consumed_micros, x.lease_starts_at, x.lease_ends_at, x.status,
		       x.settles_at
		FROM holds x
		JOIN due ON due.account_id = x.account_id AND due.hold_id = x.hold_id
		JOIN rows r ON r.account_id = x.account_id AND r.key_id = x.key_id AND r.day = x.day
		FOR UPDATE OF x
	), h AS (
		SELECT t.account_id, t.hold_id, t.key_id, t.sandbox_id, t.day, t.amount_micros,
		       t.consumed_micros, t.lease_starts_at, t.lease_ends_at
		FROM locked t
		WHERE t.status = 'open' AND t.settles_at IS NULL
	), bounds AS MATERIALIZED (
		-- Each key-day's start and end in the key's time zone, once.
		SELECT r.account_id, r.key_id, r.day,
		       meter_day_start(k.time_zone, r.day) AS day_start,
		       meter_day_start(k.time_zone, r.day + 1) AS day_end
		FROM rows r
		JOIN api_keys k ON k.account_id = r.account_id AND k.key_id = r.key_id
	), part AS (
		-- The hold's day part of its lease, and the tail of it not metered
		-- yet: from the sandbox's last sample (or the part's start) to the
		-- part's end (the lease end or the day's).
		SELECT h.*,
		       GREATEST(h.lease_starts_at, b.day_start) AS part_start,
		       LEAST(h.lease_ends_at, b.day_end) AS part_end,
		       m.last_sampled_at AS metered
		FROM h
		JOIN bounds b ON b.account_id = h.account_id AND b.key_id = h.key_id
		 AND b.day = h.day
		LEFT JOIN sandbox_meter m ON m.account_id = h.account_id
		 AND m.sandbox_id = h.sandbox_id
	), tail AS (
		SELECT p.*, GREATEST(p.part_start, p.metered) AS tail_start,
		       GREATEST(p.amount_micros - p.consumed_micros, 0) AS rem
		FROM part p
	), calc AS (
		SELECT t.*, t.part_end <= t.tail_start AS closes,
		       CASE WHEN t.part_end <= t.tail_start THEN 0
			    WHEN t.part_end <= t.part_start THEN t.rem
			    ELSE LEAST(t.rem, meter_tail_keep(t.amount_micros,
							     t.part_end - t.tail_start,
							     t.part_end - t.part_start))
		       END AS kept
		FROM tail t
	), upd AS (
		UPDATE holds x
		SET status = CASE WHEN c.closes THEN 'released' ELSE x.status END,
		    settled_at = CASE WHEN c.closes THEN now() ELSE x.settled_at END,
		    amount_micros = CASE WHEN c.closes OR c.consumed_micros >= c.amount_micros
					 THEN x.amount_micros ELSE c.consumed_micros + c.kept END,
		    settles_at = CASE WHEN c.closes THEN x.settles_at ELSE c.lease_ends_at END,
		    reserved_micros = CASE WHEN c.closes THEN x.reserved_micros
					   ELSE c.amount_micros END
		FROM calc c
		WHERE x.account_id = c.account_id AND x.hold_id = c.hold_id
		RETURNING x.account_id, x.key_id, x.day, x.sandbox_id, x.hold_id, x.lease_ends_at,
			  c.rem - c.kept AS released
	), ledger AS (
		UPDATE key_day_ledger l SET held_micros = l.held_micros - s.released,
					    updated_at = now()
		FROM (SELECT account_id, key_id, day, sum(released)::bigint AS released
		      FROM upd GROUP BY account_id, key_id, day) s
		WHERE l.account_id = s.account_id AND l.key_id = s.key_id AND l.day = s.day
	), watch AS (
		-- A lease released while its sandbox still runs on it: watched for
		-- hold_outrun (0013), by the hold of its latest day part.
		INSERT INTO lease_watch AS w (account_id, sandbox_id, lease_ends_at, hold_id, day)
		SELECT DISTINCT ON (u.account_id, u.sandbox_id, u.lease_ends_at)
		       s.account_id, s.sandbox_id, u.lease_ends_at, u.hold_id, u.day
		FROM upd u
		JOIN sandboxes s ON s.account_id = u.account_id AND s.sandbox_id = u.sandbox_id
		WHERE s.state = 'running' AND s.lease_ends_at = u.lease_ends_at
		ORDER BY u.account_id, u.sandbox_id, u.lease_ends_at, u.day DESC
		ON CONFLICT ON CONSTRAINT lease_watch_pkey DO UPDATE
			SET hold_id = EXCLUDED.hold_id, day = EXCLUDED.day
			WHERE EXCLUDED.day > w.day
	)
	SELECT count(*) INTO n FROM upd;
	RETURN n;
EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
	-- A row held too long: nothing settled, tried again next round.
	RETURN 0;
END
$$;
