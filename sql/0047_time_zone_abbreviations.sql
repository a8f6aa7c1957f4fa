-- meter: a key's time zone is never a name PostgreSQL reads as an
-- abbreviation.
--
-- AT TIME ZONE, which cuts every key's day (meter_key_day,
-- meter_day_start and the queries of usage by day), looks a name up in
-- the abbreviations (timezone_abbreviations, the "Default" set) before
-- the zone files. CET, EET, MET and WET are names of both: as zones of
-- the IANA database they keep summer time (they are links to
-- Europe/Brussels, Europe/Athens, Europe/Brussels and Europe/Lisbon
-- since 2024b), as abbreviations they are fixed offsets. A key in CET was
-- accepted by meter_is_time_zone (0031) and then had every summer day
-- start an hour late: from the last Sunday of March to the last of
-- October, the hour from 22:00 to 23:00 UTC was filed on the day before,
-- for its limit, its holds, its ledger, /v1/usage and the exports.
--
-- The other names of both (EST, GMT, HST, MST, UCT, Zulu) are fixed
-- offsets either way, so their days were right; but a key set to EST
-- most likely means New York's time, which keeps summer time and EST does
-- not. Every name PostgreSQL reads as an abbreviation is now refused but
-- UTC (the default), so that the zone a key names is the zone its days
-- are cut in; the API's message says to name a place (Europe/Paris).
-- (meterd's sessions use the Default abbreviations whatever the server's
-- or database's setting: see db_connect.)
--
-- Keys stored before in CET, EET, MET or WET are moved to the zone each
-- name links to, which has the same rules since 1977: their days are cut
-- with summer time from now on. Keys in the other names keep them (a
-- domain check runs when a value is stored, and their days are right).

CREATE OR REPLACE FUNCTION meter_is_time_zone(tz text) RETURNS boolean
	LANGUAGE sql STABLE STRICT PARALLEL SAFE
	AS $$
	SELECT tz = 'UTC'
	    OR (tz NOT IN ('localtime', 'posixrules', 'Factory')
		AND tz NOT LIKE 'posix/%' AND tz NOT LIKE 'right/%'
		AND EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names WHERE name = tz)
		AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_abbrevs
				WHERE lower(abbrev) = lower(tz)))
$$;

UPDATE api_keys
SET time_zone = CASE time_zone
		WHEN 'CET' THEN 'Europe/Brussels'
		WHEN 'MET' THEN 'Europe/Brussels'
		WHEN 'EET' THEN 'Europe/Athens'
		ELSE 'Europe/Lisbon'
	END
WHERE time_zone IN ('CET', 'EET', 'MET', 'WET');
