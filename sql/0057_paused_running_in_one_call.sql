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
-- begun and no running event after p_before. Ingestion (meter/ingest.c)
-- calls it with every resume it sees between two adjacent samples (the
-- meter row's and the round's first among them), in time order, so that
-- of several resumes on one hold the first is reported, as rounds of one
-- sample each would. Once per hold: the dedup key is 0039's.
-- Returns how many reports were added.

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

-- The trigger is dropped: ingestion, the only writer of sandbox_meter,
-- sends every resume itself, the one between the row's sample and the
-- round's first included. The trigger compared the row's old sample with
-- its new one, the round's last: not two adjacent samples when the round
-- had several, so a round of a running sample dated before a pause event
-- and a running one after it, on a row left paused, was reported, though
-- no sample found the sandbox resuming after the pause (a review found
-- such rounds in about 1 of 80 random sequences).
DROP TRIGGER sandbox_meter_paused_running ON sandbox_meter;
DROP FUNCTION meter_outbox_paused_running();
