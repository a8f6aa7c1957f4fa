-- meter: hold_outrun for a sandbox its agent finds running again while the
-- service has it paused.
--
-- A pause settles a lease's holds; the sandbox may run again only on a
-- wake's new hold. 0037 reports a running event for a paused sandbox with
-- no hold open (resumed_without_wake). A sandbox the control plane paused
-- and then resumed with neither a wake nor an event was not reported at
-- all: its record stays paused, no lease is watched, and the consumption
-- trigger passes over the settled hold its running time lands on (that
-- hold may take more than its tail for other reasons, see 0014). Its
-- running time was billed, as the samples say, on no hold: only the key's
-- spend_limit_crossed, at the limit, would ever tell.
--
-- Now a sample that finds the sandbox running after one that found it not
-- running (the agent saw it resume), dated after the pause the record
-- holds, with none of its holds open, sends hold_outrun with reason
-- "running_while_paused" by its latest hold (the one the pause settled),
-- with the sample's time in "at"; once per hold, as resumed_without_wake.
-- A wake puts the record back to running with its hold, and a running
-- event is 0037's to report: neither sends this. The trigger's condition
-- is the meter row's own columns, so the rounds of ingestion that change
-- no state (nearly all) call nothing.

CREATE FUNCTION meter_outbox_paused_running() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM sandboxes s
		       WHERE s.account_id = NEW.account_id AND s.sandbox_id = NEW.sandbox_id
			 AND s.state = 'paused' AND s.state_since < NEW.last_sampled_at)
	   OR EXISTS (SELECT 1 FROM holds o
		      WHERE o.account_id = NEW.account_id AND o.sandbox_id = NEW.sandbox_id
			AND o.status = 'open' AND o.settles_at IS NULL) THEN
		RETURN NULL;
	END IF;
	INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)
	SELECT h.account_id, h.key_id, 'hold_outrun', 'paused-running/' || h.hold_id::text,
	       jsonb_build_object('reason', 'running_while_paused',
				  'key_id', h.key_id, 'sandbox_id', h.sandbox_id,
				  'hold_id', h.hold_id, 'day', h.day::text,
				  'amount_micros', h.amount_micros,
				  'consumed_micros', h.consumed_micros,
				  'lease_ends_at',
				  to_char(h.lease_ends_at AT TIME ZONE 'UTC',
					  'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
				  'at', to_char(NEW.last_sampled_at AT TIME ZONE 'UTC',
						'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
	FROM holds h
	WHERE h.account_id = NEW.account_id AND h.sandbox_id = NEW.sandbox_id
	ORDER BY h.lease_starts_at DESC, h.day DESC, h.hold_id DESC
	LIMIT 1
	ON CONFLICT (account_id, type, dedup_key) DO NOTHING;
	RETURN NULL;
END
$$;

CREATE TRIGGER sandbox_meter_paused_running AFTER UPDATE OF last_state ON sandbox_meter
	FOR EACH ROW
	WHEN (OLD.last_state <> 'running' AND NEW.last_state = 'running')
	EXECUTE FUNCTION meter_outbox_paused_running();
