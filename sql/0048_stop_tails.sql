-- meter: the stretch from a stopped sandbox's last sample to its stop.
--
-- Billing ran between samples, so the stretch from a sandbox's last sample
-- to its stop event went unbilled when no sample came after the stop (the
-- usual case: the VM is gone, and its host lists it no more), and a
-- sandbox stopped before its first sample was not billed at all. The
-- sweeper now meters that stretch once the stop is final for billing as
-- meter_tail_done decides it without a sample (the grace has passed and the
-- host of the last sample has reported since without it, or there is no
-- sample), by ingesting a reading at the stop made from the last one: the
-- same sizes and CPU counter (no reading says what CPU the stretch used,
-- so it is billed at the floor), state stopped. Ingestion then bills it as
-- any interval, events and all, and the hold the stop kept for its tail is
-- consumed before it is closed (meter_tail_done waits for it). The stops
-- looked at are those that kept such a hold.

-- Whether the host of a sandbox's sample at p_sampled has reported at or
-- after p_at since (a document without the sandbox counts): no sample of
-- it dated before p_at is to come. As meter_tail_done (0014) asked it.
CREATE FUNCTION meter_host_past(p_account text, p_sandbox text, p_sampled timestamptz,
				p_at timestamptz)
	RETURNS boolean
	LANGUAGE sql STABLE
	AS $$
	SELECT EXISTS (SELECT 1 FROM samples s
		       JOIN ingest_watermarks w ON w.host_id = s.host_id
		       WHERE s.account_id = p_account AND s.sandbox_id = p_sandbox
			 AND s.sampled_at = p_sampled AND w.last_sampled_at >= p_at)
	$$;

-- Of a sandbox, when its stretch to the stop is still to be metered:
-- stopped in the hour before p_now and not metered up to the stop (one
-- never sampled only with a running event before the stop: without one,
-- there is nothing to bill, ingest_batches's rule of a first sample). With
-- p_grace_s, only when it is to be metered now: at least p_grace_s after
-- the stop, with no sample to come as in meter_tail_done (its host has
-- reported past the stop without it, or it was never sampled); with NULL,
-- whenever it is still to be (meter_tail_done keeps every hold of the
-- sandbox open until then). at: the first stop (the one billing ends at),
-- or the create for one dated before it; cpu_usec and sizes: the last
-- sample's, or the record's with no sample.
CREATE FUNCTION meter_stop_tail(p_account text, p_sandbox text, p_now timestamptz,
				p_grace_s integer)
	RETURNS TABLE (at bigint, cpu_usec bigint, memory_mib bigint, storage_mib bigint,
		       vcpus integer)
	LANGUAGE sql STABLE
	AS $$
	SELECT (extract(epoch FROM GREATEST(e.at, s.created_at)) * 1000000)::bigint,
	       COALESCE(m.last_cpu_usec, 0), COALESCE(m.last_memory_mib, s.memory_mib),
	       COALESCE(m.last_storage_mib, s.storage_mib), COALESCE(m.last_vcpus, s.vcpus)
	FROM sandboxes s
	CROSS JOIN LATERAL (SELECT min(x.at) AS at FROM lifecycle_events x
			    WHERE x.account_id = s.account_id AND x.sandbox_id = s.sandbox_id
			      AND x.type = 'stopped') e
	LEFT JOIN sandbox_meter m ON m.account_id = s.account_id AND m.sandbox_id = s.sandbox_id
	WHERE s.account_id = p_account AND s.sandbox_id = p_sandbox
	  AND s.state = 'stopped'
	  AND s.state_since > p_now - interval '1 hour'
	  AND ((m.last_sampled_at IS NULL
		AND EXISTS (SELECT 1 FROM lifecycle_events x
			    WHERE x.account_id = s.account_id AND x.sandbox_id = s.sandbox_id
			      AND x.type = 'running' AND x.at < GREATEST(e.at, s.created_at)))
	       OR (m.last_sampled_at < GREATEST(e.at, s.created_at)
		   AND m.last_state <> 'stopped'))
	  AND (p_grace_s IS NULL
	       OR (s.state_since <= p_now - make_interval(secs => p_grace_s)
		   AND e.at <= p_now - make_interval(secs => p_grace_s)
		   AND (m.last_sampled_at IS NULL
			OR meter_host_past(s.account_id, s.sandbox_id, m.last_sampled_at,
					   e.at))))
	$$;

-- The sandboxes of meter_stop_tail among those whose stop left a hold
-- kept for its tail (settling, the grace past): the set the sweeper's
-- settling step looks at anyway, which the close of that hold ends, so
-- the sweep costs no more than that step (a stop of a sandbox with no open
-- hold, a lease outrun, is not metered to the stop). At most p_max, the
-- earliest first.
CREATE FUNCTION meter_stop_tails(p_now timestamptz, p_grace_s integer, p_max integer)
	RETURNS TABLE (account_id text, sandbox_id text, at bigint, cpu_usec bigint,
		       memory_mib bigint, storage_mib bigint, vcpus integer)
	LANGUAGE sql STABLE
	AS $$
	SELECT d.account_id, d.sandbox_id, t.at, t.cpu_usec, t.memory_mib, t.storage_mib, t.vcpus
	FROM (SELECT h.account_id, h.sandbox_id, min(h.settles_at) AS settles_at
	      FROM holds h
	      WHERE h.status = 'open' AND h.settles_at IS NOT NULL
		AND h.settles_at > p_now - interval '1 hour'
		AND h.settles_at <= p_now - make_interval(secs => p_grace_s)
	      GROUP BY h.account_id, h.sandbox_id) d
	CROSS JOIN LATERAL meter_stop_tail(d.account_id, d.sandbox_id, p_now, p_grace_s) t
	ORDER BY d.settles_at, d.account_id, d.sandbox_id
	LIMIT p_max
	$$;

-- A stopped sandbox's holds kept for a tail are closed once its stretch to
-- the stop is metered (by meter_stop_tails's reading, or a sample), not
-- before: closed as soon as their grace passed, their budget could go to
-- a check before the stretch's spend lands on the day. That is the stop's
-- own hold, and as well one an earlier pause or lease end kept (its
-- settles_at before the stop: its grace may pass first, or a sample after
-- it meter past it, a paused one), which is then the hold the sweeper
-- finds the stop by. One the sweeper cannot meter is closed an hour
-- after, as any.
CREATE OR REPLACE FUNCTION meter_tail_done(p_account text, p_sandbox text, p_settles timestamptz,
					   p_now timestamptz, p_grace_s integer)
	RETURNS boolean
	LANGUAGE sql STABLE
	AS $$
	SELECT p_settles <= p_now - interval '1 hour'
	    OR ((m.last_sampled_at >= p_settles
		 OR (p_settles <= p_now - make_interval(secs => p_grace_s)
		     AND (m.last_sampled_at IS NULL
			  OR meter_host_past(p_account, p_sandbox, m.last_sampled_at,
					     p_settles))))
		AND NOT EXISTS (SELECT 1 FROM meter_stop_tail(p_account, p_sandbox, p_now, NULL)))
	FROM (SELECT (SELECT x.last_sampled_at FROM sandbox_meter x
		      WHERE x.account_id = p_account AND x.sandbox_id = p_sandbox)
		     AS last_sampled_at) m
	$$;
