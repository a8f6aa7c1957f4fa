-- meter: the lease-end and tail sweeps settle their holds as sets.
--
-- meter_holds_expire and meter_holds_settle (0014, 0015) took the ledger
-- rows of up to p_max due holds, then, for each row, every due hold of it
-- (not only the p_max), one at a time through meter_hold_settle or
-- meter_hold_close, each updating the ledger row again. A key-day with many
-- leases ending together (a hot key: tens of thousands of creates a
-- minute) made one sweep transaction of all its holds, each update of the
-- row leaving one more version of it for the next to walk past: minutes
-- of work, with the key's ledger row locked throughout, so its checks
-- timed out. Now each sweep takes at most p_max holds, computes what each
-- keeps or releases in one statement, and updates each ledger row once.
-- What a hold keeps is as before (meter_hold_settle: the worst case of
-- the unmetered tail up to the lease end, or nothing when metering has
-- passed it), and so are lease_watch and the lock order (ledger rows in
-- order, SKIP LOCKED, then the holds).

CREATE OR REPLACE FUNCTION meter_holds_expire(p_now timestamptz, p_max integer) RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	n integer;
BEGIN
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
		FOR UPDATE OF l SKIP LOCKED
	), h AS (
		SELECT x.account_id, x.hold_id, x.key_id, x.sandbox_id, x.day, x.amount_micros,
		       x.consumed_micros, x.lease_starts_at, x.lease_ends_at
		FROM holds x
		JOIN due ON due.account_id = x.account_id AND due.hold_id = x.hold_id
		JOIN rows r ON r.account_id = x.account_id AND r.key_id = x.key_id AND r.day = x.day
		WHERE x.status = 'open' AND x.settles_at IS NULL
		FOR UPDATE OF x
	), part AS (
		-- The hold's day part of its lease, and the tail of it not metered
		-- yet: from the sandbox's last sample (or the part's start) to the
		-- part's end (the lease end or the day's).
		SELECT h.*,
		       GREATEST(h.lease_starts_at, meter_day_start(k.time_zone, h.day)) AS part_start,
		       LEAST(h.lease_ends_at, meter_day_start(k.time_zone, h.day + 1)) AS part_end,
		       m.last_sampled_at AS metered
		FROM h
		JOIN api_keys k ON k.account_id = h.account_id AND k.key_id = h.key_id
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
			    ELSE LEAST(t.rem, ceil(t.amount_micros::numeric
				       * (EXTRACT(EPOCH FROM t.part_end - t.tail_start) * 1000000)
				       / (EXTRACT(EPOCH FROM t.part_end - t.part_start) * 1000000))::bigint)
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
END
$$;

-- Closes ('settled') up to p_max settling holds whose tail is done
-- (meter_tail_done, 0014), each ledger row updated once.
CREATE OR REPLACE FUNCTION meter_holds_settle(p_now timestamptz, p_grace_s integer,
					      p_max integer)
	RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	n integer;
BEGIN
	WITH due AS (
		SELECT d.account_id, d.hold_id, d.key_id, d.day
		FROM holds d
		WHERE d.status = 'open' AND d.settles_at IS NOT NULL
		  AND meter_tail_done(d.account_id, d.sandbox_id, d.settles_at, p_now, p_grace_s)
		ORDER BY d.settles_at
		LIMIT p_max
	), rows AS (
		SELECT l.account_id, l.key_id, l.day
		FROM key_day_ledger l
		WHERE (l.account_id, l.key_id, l.day) IN (SELECT account_id, key_id, day FROM due)
		ORDER BY l.account_id, l.key_id, l.day
		FOR UPDATE OF l SKIP LOCKED
	), h AS (
		SELECT x.account_id, x.hold_id
		FROM holds x
		JOIN due ON due.account_id = x.account_id AND due.hold_id = x.hold_id
		JOIN rows r ON r.account_id = x.account_id AND r.key_id = x.key_id AND r.day = x.day
		WHERE x.status = 'open' AND x.settles_at IS NOT NULL
		FOR UPDATE OF x
	), upd AS (
		UPDATE holds x SET status = 'settled', settled_at = now()
		FROM h
		WHERE x.account_id = h.account_id AND x.hold_id = h.hold_id
		RETURNING x.account_id, x.key_id, x.day,
			  GREATEST(x.amount_micros - x.consumed_micros, 0) AS released
	), ledger AS (
		UPDATE key_day_ledger l SET held_micros = l.held_micros - s.released,
					    updated_at = now()
		FROM (SELECT account_id, key_id, day, sum(released)::bigint AS released
		      FROM upd GROUP BY account_id, key_id, day) s
		WHERE l.account_id = s.account_id AND l.key_id = s.key_id AND l.day = s.day
	)
	SELECT count(*) INTO n FROM upd;
	RETURN n;
END
$$;

-- No sweep looks holds up by key-day any more: each insert of a hold
-- pays one index fewer.
DROP INDEX holds_open_key_day_idx;
