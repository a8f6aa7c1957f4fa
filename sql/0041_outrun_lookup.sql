-- meter: the outrun sweep looks each watched lease's open hold up by its
-- keys, and takes the leases it picked once, whatever the statistics say.
--
-- meter_leases_outrun (0037) deletes the watched leases that ended with no
-- open hold of theirs: DELETE ... WHERE (keys) IN (SELECT ... WHERE NOT
-- EXISTS (open hold) ... LIMIT p_max FOR UPDATE SKIP LOCKED). On
-- statistics taken while no hold was open and no lease was watched (both
-- happen: a sweep drains lease_watch, and holds close), PostgreSQL took
-- both tables for nearly empty and made two nested loops of it:
-- - the NOT EXISTS, an anti join whose inner side read the whole partial
--   index of open holds, with no key, for each watched lease: with 5,000
--   watched leases and 5,000 open holds one call of 100 took 3.5 s (21.5 s
--   with 23,000 watched), and over ten minutes with 164,000 holds of which
--   5,000 open;
-- - the IN, a semi join that ran the whole subquery again for each row of
--   lease_watch: with 3,000 watched leases whose holds were open, 7.8 s
--   for a call that found nothing due.
-- Past the statement timeout the call was cancelled and tried again, and
-- the sweeper's other steps (ending leases, closing settled holds) waited
-- behind it: budget that a lease's end frees was freed late, and checks
-- were refused meanwhile.
--
-- Now the open hold is a scalar subquery (a count of at most one row),
-- which the planner cannot turn into a join: run for each watched lease
-- with its keys, an index look-up. And the leases are picked once, in a
-- materialized CTE, then deleted by their keys. Both cases above take
-- 7 to 15 ms. As in 0037 otherwise.

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
		       jsonb_build_object('reason', 'lease_ended',
					  'key_id', h.key_id, 'sandbox_id', h.sandbox_id,
					  'hold_id', h.hold_id, 'day', h.day::text,
					  'amount_micros', h.amount_micros,
					  'consumed_micros', h.consumed_micros,
					  'lease_ends_at',
					  to_char(h.lease_ends_at AT TIME ZONE 'UTC',
						  'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
		FROM due
		JOIN sandboxes s ON s.account_id = due.account_id AND s.sandbox_id = due.sandbox_id
		JOIN holds h ON h.account_id = due.account_id AND h.hold_id = due.hold_id
		WHERE s.lease_ends_at = due.lease_ends_at
		  AND NOT EXISTS (SELECT 1 FROM lifecycle_events e
				  WHERE e.account_id = due.account_id
				    AND e.sandbox_id = due.sandbox_id
				    AND e.at <= due.lease_ends_at
						+ make_interval(secs => p_grace_s)
				    AND (e.type = 'stopped'
					 OR (e.type = 'paused'
					     AND e.at >= h.lease_starts_at)))
		ORDER BY due.lease_ends_at
		ON CONFLICT (account_id, type, dedup_key) DO NOTHING
	)
	SELECT count(*) INTO n FROM due;
	RETURN n;
END
$$;
