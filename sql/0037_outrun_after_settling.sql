-- meter: hold_outrun for a sandbox resumed without a wake, and a lease that
-- ran past its grace reported whatever came after.
--
-- A pause settles a lease's holds; the sandbox may run again only on a
-- wake's new hold. A running event for a paused sandbox with no hold open
-- (the control plane resumed it without a wake) put it back to running on
-- nothing, and nobody was told: the sweeper watches only the leases it
-- releases itself, and the consumption trigger only open holds. Now a
-- trigger on the sandbox's state, like the outbox's other triggers, sends
-- hold_outrun with reason "resumed_without_wake" when a paused sandbox is
-- running again at commit with no hold open, by its latest hold (the one
-- the pause settled), once per hold. A wake commits its hold with the
-- state and sends nothing; a sandbox with no hold ever (metered only,
-- never checked) has no lease to outrun and sends nothing.
--
-- A lease the sweeper released while its sandbox ran was reported only
-- once no hold of it was open, and a hold that keeps its unmetered tail
-- stays open until metering passes the lease end (an hour at most when no
-- sample comes): the event came that much late, and by then a pause or
-- stop sent after the grace had set the sandbox's state, so it was not
-- sent at all though the sandbox had run on past the grace. Now a hold
-- that is only keeping its tail (settles_at set) does not hold the report
-- back, and whether the sandbox still ran at the grace's end is read from
-- its events: no wake since (its lease end unchanged), and no pause dated
-- within the lease up to the grace's end nor any stop dated before then.

CREATE OR REPLACE FUNCTION meter_leases_outrun(p_now timestamptz, p_grace_s integer, p_max integer)
	RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	n integer;
BEGIN
	WITH due AS (
		DELETE FROM lease_watch w
		WHERE (w.account_id, w.sandbox_id, w.lease_ends_at) IN
			(SELECT d.account_id, d.sandbox_id, d.lease_ends_at FROM lease_watch d
			 WHERE d.lease_ends_at <= p_now - make_interval(secs => p_grace_s)
			   AND NOT EXISTS (SELECT 1 FROM holds o
					   WHERE o.account_id = d.account_id
					     AND o.sandbox_id = d.sandbox_id
					     AND o.status = 'open' AND o.settles_at IS NULL
					     AND o.lease_ends_at = d.lease_ends_at)
			 ORDER BY d.lease_ends_at LIMIT p_max
			 FOR UPDATE SKIP LOCKED)
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

-- A sandbox put back from paused to running, checked as its transaction
-- commits (a wake's hold is inserted in the same transaction, before or
-- after the row): still running with none of its holds open, it is
-- reported by its latest hold.
CREATE FUNCTION meter_outbox_resumed() RETURNS trigger
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
				  'at', to_char(NEW.state_since AT TIME ZONE 'UTC',
						'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
	FROM holds h
	WHERE h.account_id = NEW.account_id AND h.sandbox_id = NEW.sandbox_id
	ORDER BY h.lease_starts_at DESC, h.day DESC, h.hold_id DESC
	LIMIT 1
	ON CONFLICT (account_id, type, dedup_key) DO NOTHING;
	RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER sandboxes_resumed AFTER UPDATE OF state ON sandboxes
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW
	WHEN (OLD.state = 'paused' AND NEW.state = 'running')
	EXECUTE FUNCTION meter_outbox_resumed();
