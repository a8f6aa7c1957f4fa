-- meter: a price-book version starts after every lease held and every
-- sample metered.
--
-- A check holds a lease's worst case at the versions in force during the
-- lease as the book stood when it was decided (up to 64 of them). A
-- version added later that starts inside an open lease was never held
-- for: a CPU rate raised there let the lease's metered spend pass its
-- hold, and the key's day pass its limit, with the lease honoured. And a
-- version that starts before a time metering has already passed (agents'
-- samples may be dated up to ten minutes ahead) was never applied to that
-- time: the past it should have priced had been priced at the old rates.
--
-- meter_price_add() adds a version only from the end of the last open
-- lease and the last sample metered (any host's watermark, which is at
-- least every sample it metered) onwards, and otherwise adds nothing and
-- says from when it can. It first waits for every transaction that read
-- the book to end (the lock below conflicts with their reads), so no
-- check decided on the book as it was, and no metering priced on it, is
-- still uncommitted when it looks; and every one after it reads the new
-- version. A check that meets the new version differs from what the
-- engine assumed and is decided again. Checks that come while it waits
-- for the lock queue behind it, so it waits at most 50 ms at a time (a
-- check batch reads the book for a millisecond or two; a long reader, an
-- ingestion call or a statement's export, lets the checks through again
-- after 50 ms), and tries again 50 ms later, for p_lock_ms in all: past
-- that the statement fails (55P03) and nothing is added.

CREATE FUNCTION meter_price_add(p_from timestamptz, p_cpu bigint, p_memory bigint,
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
		      (SELECT max(h.lease_ends_at) FROM holds h WHERE h.status = 'open'),
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
