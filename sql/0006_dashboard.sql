-- meter: rollups for the dashboard (DESIGN.md §6), written by ingestion in
-- the same transaction as usage_hourly, so pages over a whole fleet read a
-- row per sandbox or per hour instead of summing millions of hourly rows.
-- They hold the same money as usage_hourly, exactly: ingestion adds each
-- priced piece to both.

-- A sandbox's money and CPU on its key's current day (the latest day it was
-- metered on, in the key's time zone, UTC without a key) and in the UTC month
-- of its latest usage. A page compares day / month with today / this month:
-- an older value means nothing was metered since, so the figure is zero.
ALTER TABLE sandbox_meter
	ADD COLUMN day date,
	ADD COLUMN day_running_usec meter_qty NOT NULL DEFAULT 0,
	ADD COLUMN day_cpu_used_mcus meter_qty NOT NULL DEFAULT 0,
	ADD COLUMN day_cpu_billed_mcus meter_qty NOT NULL DEFAULT 0,
	ADD COLUMN day_total_micros meter_micros NOT NULL DEFAULT 0,
	ADD COLUMN month date CHECK (month = date_trunc('month', month)::date),
	ADD COLUMN month_total_micros meter_micros NOT NULL DEFAULT 0;
COMMENT ON COLUMN sandbox_meter.day IS 'The key''s calendar day of the latest usage metered; day_* hold that day''s sums.';
COMMENT ON COLUMN sandbox_meter.month IS 'First day of the UTC month of the latest usage metered; month_total_micros is that month''s money.';

-- Money per account and UTC hour: the overview's chart.
CREATE TABLE usage_account_hourly (
	account_id meter_id NOT NULL REFERENCES accounts (account_id),
	hour timestamptz NOT NULL,
	total_micros meter_micros NOT NULL DEFAULT 0,
	PRIMARY KEY (account_id, hour)
);
COMMENT ON TABLE usage_account_hourly IS 'Sum of usage_hourly.total_micros per account and UTC hour, kept by ingestion.';

-- Recomputes both rollups from usage_hourly: for this migration, and for
-- loading data that did not come through ingestion (benchmarks).
CREATE FUNCTION meter_dashboard_rebuild() RETURNS void
	LANGUAGE sql
	AS $$
	DELETE FROM usage_account_hourly;
	INSERT INTO usage_account_hourly (account_id, hour, total_micros)
		SELECT account_id, hour, sum(total_micros) FROM usage_hourly GROUP BY account_id, hour;
	UPDATE sandbox_meter m SET day = x.day, day_running_usec = x.run,
		day_cpu_used_mcus = x.used, day_cpu_billed_mcus = x.billed, day_total_micros = x.dtot,
		month = x.month, month_total_micros = x.mtot
	FROM (SELECT u.account_id, u.sandbox_id, l.day, l.month,
		     COALESCE(sum(u.running_usec) FILTER (WHERE u.day = l.day), 0) AS run,
		     COALESCE(sum(u.cpu_used_mcus) FILTER (WHERE u.day = l.day), 0) AS used,
		     COALESCE(sum(u.cpu_billed_mcus) FILTER (WHERE u.day = l.day), 0) AS billed,
		     COALESCE(sum(u.total_micros) FILTER (WHERE u.day = l.day), 0) AS dtot,
		     COALESCE(sum(u.total_micros)
			      FILTER (WHERE (u.hour AT TIME ZONE 'UTC')::date >= l.month), 0) AS mtot
	      FROM (SELECT account_id, sandbox_id, max(day) AS day,
			   date_trunc('month', max(hour) AT TIME ZONE 'UTC')::date AS month
		    FROM usage_hourly GROUP BY account_id, sandbox_id) l
	      JOIN usage_hourly u ON u.account_id = l.account_id AND u.sandbox_id = l.sandbox_id
	      GROUP BY u.account_id, u.sandbox_id, l.day, l.month) x
	WHERE m.account_id = x.account_id AND m.sandbox_id = x.sandbox_id;
	$$;

SELECT meter_dashboard_rebuild();
