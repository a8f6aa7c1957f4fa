-- meter: the lease-end and tail sweeps wait for a busy ledger row instead
-- of passing it by, and work out each key-day's bounds once.
--
-- The sweeps (0019) took the ledger rows of their due holds FOR UPDATE
-- SKIP LOCKED. A key whose checks never pause (a batch committing on its
-- row every millisecond or so) nearly always has its row locked, so the
-- sweep skipped it every second: in an 8 s run of one hot key with 5 s
-- leases, none of its 47,550 ended leases was released while it ran, and
-- its checks were refused early on holds that should have gone. Worse,
-- the sweep takes the p_max holds that ended first, whoever's they are:
-- while a hot key's backlog was first in line, every call took only its
-- holds, skipped them all and settled nothing, so no other key's ended
-- leases were released either.
--
-- Now a sweep waits for the rows it needs. Check batches hold a row only
-- from their lock to their commit, and row-lock waiters are served in
-- turn, so the sweep gets the row after the batch in front of it. It
-- waits at most a second (a long writer: the classic path under load, an
-- operator's transaction): then, or when a deadlock is detected, the call
-- settles nothing and returns 0, and the sweeper tries again at its next
-- round. Several sweepers side by side now queue on a row instead of
-- passing it: the second finds the holds the first settled no longer due
-- (FOR UPDATE re-reads them) and leaves them.
--
-- What a sweep costs matters more now that it holds a busy row while it
-- works (the engine also takes fewer holds a call, and rests between
-- calls):
--   * each hold's day part needs its key-day's start and end in the key's
--     time zone; those were worked out twice per hold (about 0.1 ms a
--     hold, half of a sweep). They are now worked out once per key-day;
--   * the due holds were found through an index of every open hold by
--     lease end, whose first entries, once leases end faster than their
--     tails are metered, are the holds already settling: a call walked
--     past 47,000 of them to find its 500 (140 ms of a 200 ms call). The
--     index now holds only the holds not settled at all, which are the
--     ones the sweep looks for: a hold leaves it when its lease end is
--     settled, and a new hold costs the same one entry as before.
-- What a hold keeps or releases is as before.

CREATE INDEX holds_due_idx ON holds (lease_ends_at)
	WHERE status = 'open' AND settles_at IS NULL;
DROP INDEX holds_open_lease_end_idx;

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
EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
	-- A row held too long: nothing settled, tried again next round.
	RETURN 0;
END
$$;

-- As 0019, waiting for the ledger rows as meter_holds_expire does.
CREATE OR REPLACE FUNCTION meter_holds_settle(p_now timestamptz, p_grace_s integer,
					      p_max integer)
	RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	n integer;
BEGIN
	PERFORM set_config('lock_timeout', '1s', true);
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
		FOR UPDATE OF l
	), locked AS (
		SELECT x.account_id, x.hold_id, x.status, x.settles_at
		FROM holds x
		JOIN due ON due.account_id = x.account_id AND due.hold_id = x.hold_id
		JOIN rows r ON r.account_id = x.account_id AND r.key_id = x.key_id AND r.day = x.day
		FOR UPDATE OF x
	), h AS (
		SELECT t.account_id, t.hold_id FROM locked t
		WHERE t.status = 'open' AND t.settles_at IS NOT NULL
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
EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
	RETURN 0;
END
$$;
