-- meter: what the API's key and read routes need (DESIGN.md §5).
--
-- Usage is stored per UTC hour and sandbox, split at the key's local
-- midnight (0002_ledger.sql), so a row covers the part of its hour that
-- falls in its key day. The API places each row at the instant that part
-- begins: a time range or a period (hour, day in a time zone) holds the rows
-- that begin inside it. Every figure is then a sum over a set of whole rows,
-- and any split of a range into periods adds up to the range exactly.

-- The instant a usage row begins: its hour, or its key day's midnight (in
-- the key's time zone tz) when that falls inside the hour. Kept within the
-- hour even if the key's time zone changed since the row was written.
CREATE FUNCTION meter_row_start(tz text, hour timestamptz, day date) RETURNS timestamptz
	LANGUAGE sql STABLE STRICT PARALLEL SAFE
	AS $$ SELECT LEAST(GREATEST(hour, meter_day_start(tz, day)),
			   hour + interval '1 hour' - interval '1 microsecond') $$;

-- Listing an account's keys, oldest first.
CREATE INDEX api_keys_account_created_idx ON api_keys (account_id, created_at);
