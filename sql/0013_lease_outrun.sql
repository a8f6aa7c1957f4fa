-- meter: hold_outrun for a lease that ran past its end without an event.
--
-- The sweeper (meter_holds_expire) releases a lease's holds at lease end.
-- A sandbox the control plane left running has no open hold from then on,
-- so its usage is spent without one and the hold_outrun trigger (0005),
-- which watches a hold's consumption, never fires for it: the lease was not
-- honoured and nobody was told. Now the sweeper notes each lease it
-- releases while the sandbox still runs on it (lease_watch, written by
-- meter_holds_expire as 0014 restates it); once the grace
-- has passed (meterd's lease_grace_s: time for a pause, stop or renewal
-- sent at lease end to arrive), a sandbox still running on that same lease
-- gets a hold_outrun event with reason "lease_ended". A pause, stop or wake
-- in the meantime (any of which changes state or lease_ends_at) sends
-- nothing. The event's dedup key is the hold id of the lease's last day
-- part, the same key as the consumption trigger's: a hold that was already
-- outrun by consumption is not reported twice.

CREATE TABLE lease_watch (
	account_id meter_id NOT NULL,
	sandbox_id meter_id NOT NULL,
	lease_ends_at timestamptz NOT NULL,
	hold_id bigint NOT NULL, -- the released hold of the lease's last day part
	day date NOT NULL,       -- that hold's day
	PRIMARY KEY (account_id, sandbox_id, lease_ends_at),
	FOREIGN KEY (account_id, sandbox_id) REFERENCES sandboxes (account_id, sandbox_id)
		ON DELETE CASCADE
);
CREATE INDEX lease_watch_end_idx ON lease_watch (lease_ends_at);
COMMENT ON TABLE lease_watch IS 'Leases released at their end while the sandbox still ran: checked for hold_outrun once the grace has passed.';

-- The consumption trigger's events now say why they were sent.
CREATE OR REPLACE FUNCTION meter_outbox_outrun() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)
		VALUES (NEW.account_id, NEW.key_id, 'hold_outrun', NEW.hold_id::text,
			jsonb_build_object('reason', 'hold_consumed',
					   'key_id', NEW.key_id, 'sandbox_id', NEW.sandbox_id,
					   'hold_id', NEW.hold_id, 'day', NEW.day::text,
					   'amount_micros', NEW.amount_micros,
					   'consumed_micros', NEW.consumed_micros,
					   'outrun_micros', NEW.consumed_micros - NEW.amount_micros,
					   'lease_ends_at',
					   to_char(NEW.lease_ends_at AT TIME ZONE 'UTC',
						   'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')))
	ON CONFLICT (account_id, type, dedup_key) DO NOTHING;
	RETURN NULL;
END
$$;

-- Takes up to p_max watched leases that ended at least p_grace_s seconds
-- before p_now and have no part still open (a lease crossing midnight is
-- taken once its last part is released, so it is reported once, by the
-- hold of its latest day; SKIP LOCKED: several sweepers side by side) and
-- sends hold_outrun for each whose sandbox still runs on that lease.
-- Returns the number of watched leases taken (sent or not).
CREATE FUNCTION meter_leases_outrun(p_now timestamptz, p_grace_s integer, p_max integer)
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
					     AND o.status = 'open'
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
		WHERE s.state = 'running' AND s.lease_ends_at = due.lease_ends_at
		ORDER BY due.lease_ends_at
		ON CONFLICT (account_id, type, dedup_key) DO NOTHING
	)
	SELECT count(*) INTO n FROM due;
	RETURN n;
END
$$;
