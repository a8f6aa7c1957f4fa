-- meter: the start of a key's day where local midnight happens twice.
--
-- Where the clocks go back from 01:00 to 00:00 (Atlantic/Azores in late
-- October, America/Havana in November), the local times from 00:00 to
-- 01:00 come twice, and PostgreSQL reads such a time as the later one
-- (standard time). meter_day_start (0002) therefore put the start of that
-- day an hour late, while meter_key_day already called the first hour
-- part of it: the check engine found "now" before the start of its own day
-- and answered 503 for that hour, and usage of the hour was split against
-- the wrong bounds. The day now starts at the earlier midnight: the local
-- midnight read with the offset in force three hours before, when that is
-- earlier and still reads as the day's midnight. Everywhere else (no
-- change of offset at midnight, or a midnight that does not exist) the
-- answer is the one it was. One expression, no FROM: still inlined.

CREATE OR REPLACE FUNCTION meter_day_start(tz text, day date) RETURNS timestamptz
	LANGUAGE sql STABLE STRICT PARALLEL SAFE
	AS $$
	SELECT CASE
		WHEN (day::timestamp - (((day::timestamp AT TIME ZONE tz) - interval '3 hours')
					 AT TIME ZONE tz
				       - ((day::timestamp AT TIME ZONE tz) - interval '3 hours')
					 AT TIME ZONE 'UTC')) AT TIME ZONE 'UTC'
		     < day::timestamp AT TIME ZONE tz
		 AND ((day::timestamp - (((day::timestamp AT TIME ZONE tz) - interval '3 hours')
					  AT TIME ZONE tz
					- ((day::timestamp AT TIME ZONE tz) - interval '3 hours')
					  AT TIME ZONE 'UTC')) AT TIME ZONE 'UTC') AT TIME ZONE tz
		     = day::timestamp
		THEN (day::timestamp - (((day::timestamp AT TIME ZONE tz) - interval '3 hours')
					AT TIME ZONE tz
				      - ((day::timestamp AT TIME ZONE tz) - interval '3 hours')
					AT TIME ZONE 'UTC')) AT TIME ZONE 'UTC'
		ELSE day::timestamp AT TIME ZONE tz
	END
$$;
