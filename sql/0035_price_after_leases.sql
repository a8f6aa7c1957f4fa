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
-- wait behind it, so the wait is bounded: past p_lock_ms the statement
-- fails (55P03) and nothing is added.

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
BEGIN
	PERFORM set_config('lock_timeout', p_lock_ms::text, true);
	LOCK TABLE price_book IN ACCESS EXCLUSIVE MODE;
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
