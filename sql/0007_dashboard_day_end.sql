-- meter: the instant a sandbox's rollup day ends (DESIGN.md §6), kept by
-- ingestion beside sandbox_meter.day, so the sandboxes page can rank an
-- account's sandboxes by today's money from their meter rows alone: the
-- rollup is today's while now() < day_ends_at. Without it, telling today
-- needs each sandbox's key (its time zone), a join of every sandbox of the
-- account on every page view. The end is that of the day in the zone the
-- day was metered in: after a key changes its time zone, the figure shown
-- as today's is the one of the day that is running, not of a day that never
-- began in the new zone.
ALTER TABLE sandbox_meter ADD COLUMN day_ends_at timestamptz;
COMMENT ON COLUMN sandbox_meter.day_ends_at IS 'When the rollup''s day (column day, in the zone it was metered in) ends: day_* are today''s while now() < day_ends_at.';

CREATE OR REPLACE FUNCTION meter_dashboard_rebuild() RETURNS void
	LANGUAGE sql
	AS $$
	DELETE FROM usage_account_hourly;
	INSERT INTO usage_account_hourly (account_id, hour, total_micros)
		SELECT account_id, hour, sum(total_micros) FROM usage_hourly GROUP BY account_id, hour;
	UPDATE sandbox_meter m SET day = x.day, day_running_usec = x.run,
		day_cpu_used_mcus = x.used, day_cpu_billed_mcus = x.billed, day_total_micros = x.dtot,
		month = x.month, month_total_micros = x.mtot,
		day_ends_at = meter_day_start(x.zone, x.day + 1)
	FROM (SELECT u.account_id, u.sandbox_id, l.day, l.month, l.zone,
		     COALESCE(sum(u.running_usec) FILTER (WHERE u.day = l.day), 0) AS run,
		     COALESCE(sum(u.cpu_used_mcus) FILTER (WHERE u.day = l.day), 0) AS used,
		     COALESCE(sum(u.cpu_billed_mcus) FILTER (WHERE u.day = l.day), 0) AS billed,
		     COALESCE(sum(u.total_micros) FILTER (WHERE u.day = l.day), 0) AS dtot,
		     COALESCE(sum(u.total_micros)
			      FILTER (WHERE (u.hour AT TIME ZONE 'UTC')::date >= l.month), 0) AS mtot
	      FROM (SELECT h.account_id, h.sandbox_id, max(h.day) AS day,
			   date_trunc('month', max(h.hour) AT TIME ZONE 'UTC')::date AS month,
			   min(COALESCE(k.time_zone, 'UTC')) AS zone
		    FROM usage_hourly h
		    JOIN sandboxes s ON s.account_id = h.account_id AND s.sandbox_id = h.sandbox_id
		    LEFT JOIN api_keys k ON k.account_id = s.account_id AND k.key_id = s.key_id
		    GROUP BY h.account_id, h.sandbox_id) l
	      JOIN usage_hourly u ON u.account_id = l.account_id AND u.sandbox_id = l.sandbox_id
	      GROUP BY u.account_id, u.sandbox_id, l.day, l.month, l.zone) x
	WHERE m.account_id = x.account_id AND m.sandbox_id = x.sandbox_id;
	$$;

SELECT meter_dashboard_rebuild();
