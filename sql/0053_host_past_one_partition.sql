-- meter: whether a host has reported past a time reads one day's partition
-- of samples, however many days are kept.
--
-- meter_host_past (0048) is a SQL function, inlined into its callers
-- (meter_tail_done for each tail hold the sweeper settles, meter_stop_tail
-- and meter_stop_tails for each stopped sandbox it meters) with the
-- sample's time coming from sandbox_meter's row. Not a constant where it
-- was planned, so PostgreSQL could not choose the day's partition then: it
-- planned and locked every partition of samples, one a day, at each call.
-- A review measured a sweeper round with 13 waiting tails at 23 ms with 65
-- days of partitions and 475 to 508 ms with 369 (a call 1.8 ms, then 28 to
-- 33 ms), growing with every day kept.
--
-- The function is now PL/pgSQL with a custom plan at each call: the time
-- is a constant when its statement is planned, and only the partition that
-- holds it is planned, locked and read (0.1 to 1 ms with 372 partitions).
-- The same question, the same answer.

CREATE OR REPLACE FUNCTION meter_host_past(p_account text, p_sandbox text, p_sampled timestamptz,
					   p_at timestamptz)
	RETURNS boolean
	LANGUAGE plpgsql STABLE
	SET plan_cache_mode = force_custom_plan
	AS $$
BEGIN
	RETURN EXISTS (SELECT 1 FROM samples s
		       JOIN ingest_watermarks w ON w.host_id = s.host_id
		       WHERE s.account_id = p_account AND s.sandbox_id = p_sandbox
			 AND s.sampled_at = p_sampled AND w.last_sampled_at >= p_at);
END
$$;
