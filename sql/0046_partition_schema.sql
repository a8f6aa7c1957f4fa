-- meter: a day's samples partition is made beside samples, in its schema,
-- and retention drops each partition by its own name, schema included.
--
-- 0001 made a partition with an unqualified CREATE TABLE: in the first
-- schema of the session's search_path, not necessarily the one samples
-- lives in. PostgreSQL's default search_path begins with "$user": once a
-- schema named after the connecting role exists (an operator's habit on
-- some databases), every new day's partition went there, beside nothing
-- of meter's; retention's DROP TABLE, also unqualified, found a partition
-- only through the search_path, and failed on one outside it. Both now
-- name the schema: the one samples is in. As in 0001 otherwise.

CREATE OR REPLACE FUNCTION meter_ensure_sample_partitions(from_day date, to_day date) RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	d date;
	part text;
	lo timestamptz;
	hi timestamptz;
	created integer := 0;
	locked boolean := false;
	-- The schema samples lives in: its partitions go beside it.
	ns text := (SELECT c.relnamespace::regnamespace::text FROM pg_class c
		    WHERE c.oid = 'samples'::regclass);
BEGIN
	IF from_day IS NULL OR to_day IS NULL THEN
		RAISE EXCEPTION 'meter_ensure_sample_partitions: NULL day' USING ERRCODE = '22004';
	END IF;
	IF to_day - from_day >= 1000 THEN
		RAISE EXCEPTION 'meter_ensure_sample_partitions: more than 1000 days at once'
			USING ERRCODE = '22023';
	END IF;
	d := from_day;
	WHILE d <= to_day LOOP
		part := 'samples_' || to_char(d, 'YYYYMMDD');
		IF NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			       WHERE i.inhparent = 'samples'::regclass AND c.relname = part) THEN
			IF NOT locked THEN
				-- Serialises creators; re-check under the lock.
				PERFORM pg_advisory_xact_lock(7882834701841298288); -- "meter_sp" in ASCII
				locked := true;
				CONTINUE;
			END IF;
			lo := d::timestamp AT TIME ZONE 'UTC';
			hi := (d + 1)::timestamp AT TIME ZONE 'UTC';
			IF EXISTS (SELECT 1 FROM samples_default WHERE sampled_at >= lo AND sampled_at < hi) THEN
				CREATE TEMP TABLE meter_samples_moving ON COMMIT DROP AS
					SELECT * FROM samples_default WHERE sampled_at >= lo AND sampled_at < hi;
				DELETE FROM samples_default WHERE sampled_at >= lo AND sampled_at < hi;
				EXECUTE format('CREATE TABLE %s.%I PARTITION OF %s FOR VALUES FROM (%L) TO (%L)',
					       ns, part, 'samples'::regclass, lo, hi);
				INSERT INTO samples SELECT * FROM meter_samples_moving;
				DROP TABLE meter_samples_moving;
			ELSE
				EXECUTE format('CREATE TABLE %s.%I PARTITION OF %s FOR VALUES FROM (%L) TO (%L)',
					       ns, part, 'samples'::regclass, lo, hi);
			END IF;
			EXECUTE format('COMMENT ON TABLE %s.%I IS %L', ns, part,
				       'Samples of ' || to_char(d, 'YYYY-MM-DD') || ' (UTC).');
			created := created + 1;
		END IF;
		d := d + 1;
	END LOOP;
	RETURN created;
END
$$;

CREATE OR REPLACE FUNCTION meter_drop_sample_partitions(before_day date) RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	r record;
	dropped integer := 0;
BEGIN
	IF before_day IS NULL THEN
		RAISE EXCEPTION 'meter_drop_sample_partitions: NULL day' USING ERRCODE = '22004';
	END IF;
	FOR r IN SELECT c.oid, c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		 WHERE i.inhparent = 'samples'::regclass AND c.relname ~ '^samples_[0-9]{8}$'
		 ORDER BY c.relname LOOP
		IF to_date(substr(r.relname, 9), 'YYYYMMDD') < before_day THEN
			EXECUTE format('DROP TABLE %s', r.oid::regclass);
			dropped := dropped + 1;
		END IF;
	END LOOP;
	DELETE FROM samples_default WHERE sampled_at < before_day::timestamp AT TIME ZONE 'UTC';
	RETURN dropped;
END
$$;
