-- meter: running_while_paused (0039, 0040) also for a resume that one
-- round of ingestion takes in whole.
--
-- The trigger compares the meter row before a round with the row after
-- it: the round's last sample against the one before the round. A round
-- that carries a sample finding the sandbox paused and a later one finding
-- it running (a collector catching up on its rounds) wrote
-- the row once, from running or to the paused sample's successor, and the
-- resume went unreported; the same samples taken in two rounds reported
-- it. Now the rule is meter_outbox_paused_running_at: for each resume, in
-- order, the sample before it (p_before) and the one that found the
-- sandbox running (p_at), with 0040's and 0054's conditions: the record
-- paused since before p_at, none of the sandbox's holds open, no hold
-- begun and no running event after p_before. The trigger calls it with its
-- own pair (the row's old and new sample); ingestion (meter/ingest.c)
-- with every resume it sees between two samples of one round, in time
-- order, before it writes the rows, so that of several resumes on one
-- hold the first is reported, as rounds of one sample each would. Once
-- per hold, whoever asks first: the dedup key is the trigger's. Returns
-- how many reports were added.

CREATE FUNCTION meter_outbox_paused_running_at(p_account text[], p_sandbox text[],
					       p_before timestamptz[], p_at timestamptz[])
	RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	acc text;
	sbx text;
	n integer := 0;
	added integer;
BEGIN
	FOR i IN 1 .. coalesce(array_length(p_at, 1), 0) LOOP
		acc := p_account[i];
		sbx := p_sandbox[i];
		IF NOT EXISTS (SELECT 1 FROM sandboxes s
			       WHERE s.account_id = acc AND s.sandbox_id = sbx
				 AND s.state = 'paused' AND s.state_since < p_at[i])
		   OR EXISTS (SELECT 1 FROM holds o
			      WHERE o.account_id = acc AND o.sandbox_id = sbx
				AND o.status = 'open' AND o.settles_at IS NULL)
		   OR meter_hold_start_next(acc, sbx, p_before[i]) IS NOT NULL
		   OR EXISTS (SELECT 1 FROM lifecycle_events e
			      WHERE e.account_id = acc AND e.sandbox_id = sbx
				AND e.type = 'running' AND e.at > p_before[i]) THEN
			CONTINUE;
		END IF;
		INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)
		SELECT h.account_id, h.key_id, 'hold_outrun',
		       'paused-running/' || h.hold_id::text,
		       meter_outrun_payload('running_while_paused', h, p_at[i])
		FROM holds h
		WHERE h.account_id = acc
		  AND h.hold_id = (SELECT meter_hold_latest(acc, sbx, 'infinity'))
		ON CONFLICT (account_id, type, dedup_key) DO NOTHING;
		GET DIAGNOSTICS added = ROW_COUNT;
		n := n + added;
	END LOOP;
	RETURN n;
END
$$;

-- The trigger's rule is the function's, with the row's sample before
-- (OLD) and the one that found the sandbox running (NEW).
CREATE OR REPLACE FUNCTION meter_outbox_paused_running() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	PERFORM meter_outbox_paused_running_at(ARRAY[NEW.account_id], ARRAY[NEW.sandbox_id],
					       ARRAY[OLD.last_sampled_at],
					       ARRAY[NEW.last_sampled_at]);
	RETURN NULL;
END
$$;
