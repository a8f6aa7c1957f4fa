-- meter: storage settings for ingestion (issue 3).
--
-- Metering rewrites the same rows on every interval: each sandbox's
-- sandbox_meter row, its current usage_hourly row and its open holds'
-- consumed_micros. None of the columns it changes is indexed, so with free
-- room left in each page PostgreSQL updates them in place (HOT updates: no
-- new index entries, dead versions pruned on the page), instead of growing
-- every index and the table on each interval. fillfactor only shapes pages
-- written from now on; it changes no data.
ALTER TABLE sandbox_meter SET (fillfactor = 50);
ALTER TABLE usage_hourly SET (fillfactor = 70);
ALTER TABLE holds SET (fillfactor = 70);
