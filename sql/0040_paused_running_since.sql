-- meter: running_while_paused (0039) only when nothing since the sample
-- before explains the resume.
--
-- 0039 compared the sample that found the sandbox running with the one
-- before it, which found it not running, and looked only at the record as
-- it is now: paused, with no hold open. A wake between the two samples
-- (shorter than the agent's period), then a pause whose event came before
-- the agent saw it, looked the same, and a lease honoured was reported as
-- not. Now a hold that began after the sample before (a wake, or the
-- create) or a running event dated after it explains the resume, and
-- nothing is sent: a running event with no hold open is 0037's to report.

CREATE OR REPLACE FUNCTION meter_outbox_paused_running() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM sandboxes s
		       WHERE s.account_id = NEW.account_id AND s.sandbox_id = NEW.sandbox_id
			 AND s.state = 'paused' AND s.state_since < NEW.last_sampled_at)
	   OR EXISTS (SELECT 1 FROM holds o
		      WHERE o.account_id = NEW.account_id AND o.sandbox_id = NEW.sandbox_id
			AND (o.status = 'open' AND o.settles_at IS NULL
			     OR o.lease_starts_at > OLD.last_sampled_at))
	   OR EXISTS (SELECT 1 FROM lifecycle_events e
		      WHERE e.account_id = NEW.account_id AND e.sandbox_id = NEW.sandbox_id
			AND e.type = 'running' AND e.at > OLD.last_sampled_at) THEN
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
