-- meter: two look-ups of open holds read the open holds, not every hold
-- ever made.
--
-- Open holds have two partial indexes between them: holds_due_idx (on
-- lease_ends_at, settles_at IS NULL) and holds_settling_idx (on
-- settles_at, settles_at IS NOT NULL). Two statements asked for status =
-- 'open' alone, which neither index's predicate implies, and PostgreSQL
-- read the table (with 320,000 settled holds: 110 to 250 ms), or, since
-- 0050, every hold of the account through holds_sandbox_idx:
-- - PUT /v1/prices (meter_price_add): the latest end of an open hold's
--   cover, read while price_book is locked ACCESS EXCLUSIVE, so every check
--   waited for it;
-- - PUT /v1/keys/{id}/limits changing the time zone: the key's open holds,
--   counted while the key's ledger rows are held, so every check on the
--   key waited for it.
-- Each now reads the two sets apart, each off its index: the price book's
-- bound is the later of the two sets' (the newest lease end is the first
-- entry of holds_due_idx read backwards), and the key's holds are
-- meter_key_open_holds below, which meter/db_keys.c calls. Both read at
-- most the holds open at the time, whatever the history. As in 0045
-- otherwise.

-- The open holds of a key: how many, and the latest lease end among them.
CREATE FUNCTION meter_key_open_holds(p_account text, p_key text,
				     OUT open_holds bigint, OUT latest_end timestamptz)
	LANGUAGE sql STABLE
	AS $$
	SELECT count(*), max(x.e)
	FROM (SELECT h.lease_ends_at AS e FROM holds h
	      WHERE h.account_id = p_account AND h.key_id = p_key
		AND h.status = 'open' AND h.settles_at IS NULL
	      UNION ALL
	      SELECT h.lease_ends_at FROM holds h
	      WHERE h.account_id = p_account AND h.key_id = p_key
		AND h.status = 'open' AND h.settles_at IS NOT NULL) x;
$$;

CREATE OR REPLACE FUNCTION meter_price_add(p_from timestamptz, p_cpu bigint, p_memory bigint,
					   p_storage bigint, p_floor bigint, p_free integer,
					   p_assumed boolean, p_lock_ms integer)
	RETURNS TABLE (earliest timestamptz, version integer, effective_from timestamptz,
		       cpu_micros_per_vcpu_hour bigint, memory_micros_per_gib_hour bigint,
		       storage_micros_per_gib_hour bigint, floor_millicores bigint,
		       free_sandbox_hours integer, storage_price_assumed boolean,
		       created_at timestamptz, in_force boolean)
	LANGUAGE plpgsql
	AS $$
DECLARE
	e timestamptz;
	t0 timestamptz := clock_timestamp();
BEGIN
	PERFORM set_config('lock_timeout', '50', true);
	LOOP
		BEGIN
			LOCK TABLE price_book IN ACCESS EXCLUSIVE MODE;
			EXIT;
		EXCEPTION WHEN lock_not_available THEN
			IF clock_timestamp() - t0 >= make_interval(secs => p_lock_ms / 1000.0) THEN
				RAISE;
			END IF;
		END;
		PERFORM pg_sleep(0.05);
	END LOOP;
	-- An open hold's cover ends at its lease's end, or at its event's
	-- time once a pause or stop keeps it for a tail (never after the
	-- lease's end): each set read off its own partial index.
	e := GREATEST(now(),
		      (SELECT max(h.lease_ends_at) FROM holds h
		       WHERE h.status = 'open' AND h.settles_at IS NULL),
		      (SELECT max(LEAST(h.lease_ends_at, h.settles_at)) FROM holds h
		       WHERE h.status = 'open' AND h.settles_at IS NOT NULL),
		      (SELECT max(w.last_sampled_at) FROM ingest_watermarks w));
	IF p_from < e THEN
		RETURN QUERY SELECT e, NULL::integer, NULL::timestamptz, NULL::bigint,
				    NULL::bigint, NULL::bigint, NULL::bigint, NULL::integer,
				    NULL::boolean, NULL::timestamptz, NULL::boolean;
		RETURN;
	END IF;
	RETURN QUERY
		INSERT INTO price_book AS p (effective_from, cpu_micros_per_vcpu_hour,
					     memory_micros_per_gib_hour,
					     storage_micros_per_gib_hour, floor_millicores,
					     free_sandbox_hours, storage_price_assumed)
		VALUES (p_from, p_cpu, p_memory, p_storage, p_floor, p_free, p_assumed)
		RETURNING e, p.version, p.effective_from, p.cpu_micros_per_vcpu_hour::bigint,
			  p.memory_micros_per_gib_hour::bigint,
			  p.storage_micros_per_gib_hour::bigint, p.floor_millicores,
			  p.free_sandbox_hours, p.storage_price_assumed, p.created_at,
			  p.effective_from <= now();
END
$$;
