-- meter: a price-book version may start once a stopped or paused lease's
-- unmetered tail ends, not only at the lease's end.
--
-- 0035 starts a version only after the end of every open hold's lease. A
-- pause or stop keeps its hold open for the unmetered tail (the usage up to
-- the event that samples have not reached yet), with settles_at the
-- event's time, but lease_ends_at as the check set it: after every sandbox
-- of a day-long lease was stopped, PUT /v1/prices still could not start a
-- version before that lease's original end, a day ahead, until the sweeper
-- settled the tails. What such a hold still covers ends at settles_at: the
-- usage before the event, priced at the versions in force then, which a
-- version starting at or after it never touches. The bound is now the
-- earlier of the two. As in 0035 otherwise.

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
	e := GREATEST(now(),
		      (SELECT max(LEAST(h.lease_ends_at, COALESCE(h.settles_at, h.lease_ends_at)))
		       FROM holds h WHERE h.status = 'open'),
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
