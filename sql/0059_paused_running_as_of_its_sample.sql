-- meter: running_while_paused judged as things stood at its sample.
--
-- 0057 judged a resume (a sample p_at finding a sandbox running after one,
-- p_before, finding it not) by the database as it is when the samples are
-- taken in: the record paused now, none of the sandbox's holds open now,
-- no hold begun and no running event after p_before, ever. A collector
-- catching up after a later wake (or a late push) found the wake's hold
-- open, its lease begun after p_before, and the record running, and the
-- resume went unreported, in one call or several (a review: 14 of 300
-- random sequences taken in after the fact differed from the same taken
-- in on time). Now each condition is read as of p_at:
-- - paused since before p_at: a pause dated before p_at and after the
--   latest running item by p_before (a lease start, which at the same
--   time comes first, or a running event), none of them dated before the
--   create counting as earlier than it; and no stop by p_at;
-- - no hold covering p_at: none whose lease had begun and not ended by
--   then that is still open and not kept for a tail, or was cut later
--   (settles_at), or released whole at its end after p_at (as 0054 tests
--   a resume's cover; a day back at most, as hold parts are);
-- - no hold begun and no running event in (p_before, p_at];
-- - reported by the latest hold begun by p_at, not the latest ever.
-- Taken in on time, with nothing recorded after p_at, the answer is 0057's
-- but for an open hold whose lease ended before p_at (not swept yet): it
-- no longer counts as covering p_at, as it does not taken in later.

CREATE OR REPLACE FUNCTION meter_outbox_paused_running_at(p_account text[], p_sandbox text[],
							  p_before timestamptz[], p_at timestamptz[])
	RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	acc text;
	sbx text;
	b timestamptz;
	t timestamptz;
	created timestamptz;
	r_hold timestamptz;
	r_ev timestamptz;
	p_last timestamptz;
	n integer := 0;
	added integer;
BEGIN
	FOR i IN 1 .. coalesce(array_length(p_at, 1), 0) LOOP
		acc := p_account[i];
		sbx := p_sandbox[i];
		b := p_before[i];
		t := p_at[i];
		SELECT s.created_at INTO created FROM sandboxes s
			WHERE s.account_id = acc AND s.sandbox_id = sbx;
		IF created IS NULL THEN
			CONTINUE;
		END IF;
		r_hold := meter_hold_start_last(acc, sbx, b);
		SELECT GREATEST(e.at, created) INTO r_ev FROM lifecycle_events e
			WHERE e.account_id = acc AND e.sandbox_id = sbx AND e.type = 'running'
			  AND e.at <= b
			ORDER BY e.at DESC LIMIT 1;
		-- The latest pause dated before t (each look-up a range of the
		-- (account, sandbox, type, at) index, read from its end).
		SELECT GREATEST(e.at, created) INTO p_last FROM lifecycle_events e
			WHERE e.account_id = acc AND e.sandbox_id = sbx AND e.type = 'paused'
			  AND e.at < t
			ORDER BY e.at DESC LIMIT 1;
		IF p_last IS NULL OR p_last >= t OR p_last < r_hold OR p_last <= r_ev
		   OR (created <= t
		       AND EXISTS (SELECT 1 FROM lifecycle_events e
				   WHERE e.account_id = acc AND e.sandbox_id = sbx
				     AND e.type = 'stopped' AND e.at <= t))
		   OR EXISTS (SELECT 1 FROM holds o
			      WHERE o.account_id = acc AND o.sandbox_id = sbx
				AND o.status = 'open' AND o.settles_at IS NULL
				AND o.lease_starts_at <= t AND o.lease_ends_at > t)
		   OR EXISTS (SELECT 1 FROM (VALUES ('open'), ('settled'), ('released')) AS hs(status)
			      CROSS JOIN LATERAL (
				SELECT 1 FROM holds o
				WHERE o.account_id = acc AND o.sandbox_id = sbx
				  AND o.status = hs.status
				  AND o.lease_starts_at <= t
				  AND o.lease_starts_at > t - interval '86400 s'
				  AND o.lease_ends_at > t
				  AND (o.settles_at > t
				       OR (o.settles_at IS NULL AND o.status = 'released'
					   AND o.settled_at > t))
				LIMIT 1) x)
		   OR meter_hold_start_next(acc, sbx, b) <= t
		   OR EXISTS (SELECT 1 FROM lifecycle_events e
			      WHERE e.account_id = acc AND e.sandbox_id = sbx
				AND e.type = 'running' AND e.at > b AND e.at <= t) THEN
			CONTINUE;
		END IF;
		INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)
		SELECT h.account_id, h.key_id, 'hold_outrun',
		       'paused-running/' || h.hold_id::text,
		       meter_outrun_payload('running_while_paused', h, t)
		FROM holds h
		WHERE h.account_id = acc
		  AND h.hold_id = (SELECT meter_hold_latest(acc, sbx, t))
		ON CONFLICT (account_id, type, dedup_key) DO NOTHING;
		GET DIAGNOSTICS added = ROW_COUNT;
		n := n + added;
	END LOOP;
	RETURN n;
END
$$;
