-- meter: a lease a late pause or stop settles before the sweep is watched
-- for lease_ended as the sweep's are.
--
-- The lease-end sweep notes a lease it releases while the sandbox still
-- runs on it in lease_watch (0014), and once the grace has passed the
-- sweeper sends hold_outrun "lease_ended" unless a pause or stop dated by
-- the grace's end came (0054). A pause or stop dated past the lease's end
-- and grace that came before the sweep (the sweep behind, as while meterd
-- is down, or the control plane's clock ahead) settled the hold itself,
-- and its lease was noted nowhere. Its running time past the end was
-- reported only as hold_consumed, when samples taken in after the event
-- put it on the hold; since 0060 a hold covers no usage past its lease's
-- end but up to such an event, so samples taken in before the event (a
-- collector catching up) left it on no hold and the lease reported by
-- nothing (a review: 3 runs of 3). Now such an event notes the lease in
-- lease_watch, as the sweep would have, while the sandbox's lease end is
-- still that lease's (no wake since): the sweeper's outrun step then
-- reports it as lease_ended, once the grace has passed, unless the hold
-- was reported as hold_consumed first (one dedup key for both).
--
-- And such an event settled a lease's hold at its own time even when a
-- later lease of the sandbox (a wake, a renewal) had begun by then: the
-- hold then covered the running time up to the event, past its end and
-- past the later lease's end, and sent hold_consumed for a sandbox running
-- on the later lease, or not, as samples came before or after the event (a
-- review: 3 of 3 runs one way, 0 the other). Now the hold is settled as at
-- its lease's end then, as within the grace and as the sweep does; where
-- the later lease's check comes after the event, the hold keeps the
-- event's settles_at, but covers usage only to its lease's end all the
-- same (meter_hold_covers_to, 0060). The function is 0033's otherwise,
-- restated whole, as a function is replaced.

CREATE OR REPLACE FUNCTION meter_event_settle(p_account text, p_sandbox text, p_type text,
					      p_eff timestamptz, p_grace_s integer,
					      OUT settled integer, OUT released bigint,
					      OUT kept bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	r record;
	st record;
	succeeded boolean;
BEGIN
	settled := 0;
	released := 0;
	kept := 0;
	PERFORM 1 FROM key_day_ledger l
		WHERE (l.account_id, l.key_id, l.day) IN
			(SELECT h.account_id, h.key_id, h.day FROM holds h
			 WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
			   AND h.status = 'open' AND h.settles_at IS NULL
			   AND (p_type = 'stopped' OR h.lease_starts_at <= p_eff))
		ORDER BY l.account_id, l.key_id, l.day
		FOR UPDATE OF l;
	FOR r IN SELECT h.hold_id, h.day, h.lease_starts_at, h.lease_ends_at FROM holds h
		 WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
		   AND h.status = 'open' AND h.settles_at IS NULL
		   AND (p_type = 'stopped' OR h.lease_starts_at <= p_eff)
		 ORDER BY h.key_id, h.day, h.hold_id LOOP
		-- Past the lease's end, the hold is settled as at that end when
		-- the event is within the grace, or when a later lease of the
		-- sandbox had begun by the event (a wake or a renewal: the
		-- sandbox ran on that one, and the time past this end is not
		-- this lease's); else at the event, which keeps the running
		-- time up to it on the hold, reported.
		succeeded := p_eff > r.lease_ends_at
			     AND (p_eff <= r.lease_ends_at + make_interval(secs => p_grace_s)
				  OR COALESCE(meter_hold_start_next(p_account, p_sandbox,
								    r.lease_starts_at) <= p_eff,
					      false));
		st := meter_hold_settle(p_account, r.hold_id,
			CASE WHEN succeeded THEN r.lease_ends_at ELSE p_eff END);
		IF st.released IS NOT NULL THEN
			settled := settled + 1;
			released := released + st.released;
			kept := kept + st.kept;
			IF p_eff > r.lease_ends_at AND NOT succeeded THEN
				INSERT INTO lease_watch AS w (account_id, sandbox_id, lease_ends_at,
							      hold_id, day)
					SELECT s.account_id, s.sandbox_id, r.lease_ends_at, r.hold_id,
					       r.day
					FROM sandboxes s
					WHERE s.account_id = p_account AND s.sandbox_id = p_sandbox
					  AND s.lease_ends_at = r.lease_ends_at
				ON CONFLICT ON CONSTRAINT lease_watch_pkey DO UPDATE
					SET hold_id = EXCLUDED.hold_id, day = EXCLUDED.day
					WHERE EXCLUDED.day > w.day;
			END IF;
		END IF;
	END LOOP;
END
$$;
