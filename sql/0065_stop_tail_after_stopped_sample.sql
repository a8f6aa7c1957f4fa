-- meter: the stretch to a stop is metered after a stopped sample too.
--
-- meter_stop_tail (0048) left out a sandbox whose last sample was stopped:
-- nothing after a stopped sample was billed then, so there was nothing to
-- meter. A stopped sample is now a reading as any (only a stop event is
-- final), and an event after it bills from its time: a sandbox reported
-- stopped by its host, woken (a running event) and stopped again by the
-- control plane had the woken stretch to the stop unbilled, and its tail
-- hold closed with nothing consumed (a review: 2 s billed of 9). The
-- reading at the stop is now made whatever the last sample's state: a
-- stretch with no event in it after a stopped sample bills nothing from
-- it, as the interval would.

CREATE OR REPLACE FUNCTION meter_stop_tail(p_account text, p_sandbox text, p_now timestamptz,
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
	       OR m.last_sampled_at < GREATEST(e.at, s.created_at))
	  AND (p_grace_s IS NULL
	       OR (s.state_since <= p_now - make_interval(secs => p_grace_s)
		   AND e.at <= p_now - make_interval(secs => p_grace_s)
		   AND (m.last_sampled_at IS NULL
			OR meter_host_past(s.account_id, s.sandbox_id, m.last_sampled_at,
					   e.at))))
	$$;
