-- meter: retention deletes samples_default's old rows apart from dropping
-- the old partitions, in batches, so the samples table is locked only for
-- the drops.
--
-- meter_drop_sample_partitions (0046) dropped the partitions and then
-- deleted samples_default's rows before the day in the same transaction.
-- Dropping a partition locks the samples table ACCESS EXCLUSIVE until the
-- transaction ends, so every ingestion waited for that DELETE too: with
-- 3,000,000 old rows in samples_default a review measured pushes stalled
-- 1.8 s, and at a 1 s statement timeout the DELETE never finished and no
-- partition was ever dropped. Rows fall into samples_default only when
-- dated outside every partition (a reading of a clock far behind), so it
-- is small; but nothing bounds it.
--
-- Now the function drops partitions only, and meter_drop_default_samples
-- deletes up to max_rows of the old rows at a time, in a statement of its
-- own that locks samples_default's rows, not the table, found by an index
-- on their time (meter_ensure_sample_partitions's move of a day's rows out
-- of samples_default reads them by time too).

CREATE INDEX samples_default_sampled_at ON samples_default (sampled_at);

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
	RETURN dropped;
END
$$;

-- Deletes up to max_rows of samples_default's rows dated before before_day
-- (UTC); returns how many. Fewer than max_rows: none is left.
CREATE FUNCTION meter_drop_default_samples(before_day date, max_rows integer) RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	n integer;
BEGIN
	IF before_day IS NULL OR max_rows IS NULL OR max_rows < 1 THEN
		RAISE EXCEPTION 'meter_drop_default_samples: bad arguments' USING ERRCODE = '22023';
	END IF;
	DELETE FROM samples_default
	WHERE ctid = ANY (ARRAY(SELECT ctid FROM samples_default
				WHERE sampled_at < before_day::timestamp AT TIME ZONE 'UTC'
				ORDER BY sampled_at LIMIT max_rows));
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;
