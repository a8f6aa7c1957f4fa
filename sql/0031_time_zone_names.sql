-- meter: a key's time zone is a zone of the IANA database, not one of the
-- names the server's zone directory also holds.
--
-- meter_is_time_zone (0001, 0021) accepted every name in
-- pg_timezone_names, which lists every file under the server's zone
-- directory, so these were taken too:
--   * 'localtime': whatever zone the database server's host is set to, so
--     a key's day would move with that machine's configuration;
--   * 'posixrules' and 'Factory': the zone compiler's rule template and a
--     placeholder zone ("-00"), neither a place's time;
--   * 'posix/...' and 'right/...': copies of every zone under a prefix
--     ('right/' counting leap seconds, which PostgreSQL's times do not).
-- They are refused now, as any name outside the database is. Keys stored
-- before keep their zone (a domain check runs when a value is stored).

CREATE OR REPLACE FUNCTION meter_is_time_zone(tz text) RETURNS boolean
	LANGUAGE sql STABLE STRICT PARALLEL SAFE
	AS $$
	SELECT tz = 'UTC'
	    OR (tz NOT IN ('localtime', 'posixrules', 'Factory')
		AND tz NOT LIKE 'posix/%' AND tz NOT LIKE 'right/%'
		AND EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names WHERE name = tz))
$$;
