-- meter: a check batch decided on what the engine already knows, in one
-- round trip (issue 4's throughput).
--
-- A batch used to read the keys, sandboxes, stored answers and prices, then
-- lock the key-day ledger rows, then write and commit: three round trips,
-- the last two while holding the ledger rows, so a hot key's batches
-- queued behind each other's round trips and its throughput was bound to
-- them. The engine now keeps what its last batches read and wrote (each
-- key's account, time zone and limit, each key-day's spent, held and
-- limit, the price book) and decides a batch of creates on those figures
-- before it talks to the database. meter_checks_fast then locks the
-- ledger rows in the one lock order and holds the batch to what it
-- assumed:
--   * every ledger row is as the engine expected (spent, held, limit);
--     otherwise nothing is written and the rows as they are come back, so
--     the engine decides again on them;
--   * every key is unrevoked, with the limit and time zone assumed, and
--     the price book has no version the engine has not seen; otherwise
--     MTR01 (the engine reads everything and decides again);
--   * no sandbox, and no stored answer, exists for any check of the batch
--     (a retry or a duplicate): the writes raise MTR01 as they always did,
--     and the refused checks' idempotency keys are looked up too, since a
--     retry of an allowed check must replay its answer, not be refused.
-- Only then does it write the batch with meter_checks_apply, in the same
-- transaction. Every decision is thus made on the ledger rows as they
-- stand under the lock, as before: committed never passes a limit through
-- a check, with any number of meterd processes. A batch sent while an
-- earlier one is still in flight is decided on the figures the earlier
-- one will leave; if that one does not commit, the rows differ and the
-- later one is decided again.

CREATE FUNCTION meter_checks_fast(
	p_now timestamptz, p_price_version integer,
	p_engine integer, p_ticket integer, p_after integer[],
	e_spent bigint[], e_held bigint[], e_limit bigint[],
	k_account text[], k_key text[], k_limit bigint[], k_tz text[],
	r_account text[], r_op text[], r_key text[],
	l_account text[], l_key text[], l_day date[], l_held bigint[], l_limit bigint[],
	x_account text[], x_op text[], x_key text[], x_xmin text[],
	i_account text[], i_op text[], i_key text[], i_sha text[], i_status integer[],
	i_response text[],
	c_account text[], c_sandbox text[], c_key text[], c_vcpus integer[], c_memory bigint[],
	c_max_cost bigint[], c_lease_end timestamptz[], c_sha text[], c_response text[],
	w_account text[], w_sandbox text[], w_lease_end timestamptz[],
	h_account text[], h_key text[], h_sandbox text[], h_day date[], h_amount bigint[],
	h_lease_end timestamptz[])
	RETURNS TABLE (account_id text, key_id text, day date, spent_micros bigint,
		       held_micros bigint, limit_micros bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	n integer;
	differs boolean;
BEGIN
	-- This batch's ticket, held to its end: a batch the engine sent after
	-- it on the same rows waits for it below.
	PERFORM pg_advisory_xact_lock(p_engine, p_ticket);
	BEGIN
		-- The new rows first, before the ledger rows are locked: a
		-- batch in flight behind another one writes them while the
		-- first one commits, and holds the rows only to compare and
		-- update them. (The ledger rows are updated below.)
		PERFORM meter_checks_apply(p_now, '{}', '{}', '{}', '{}', '{}',
					   x_account, x_op, x_key, x_xmin,
					   i_account, i_op, i_key, i_sha, i_status, i_response,
					   c_account, c_sandbox, c_key, c_vcpus, c_memory,
					   c_max_cost, c_lease_end, c_sha, c_response,
					   w_account, w_sandbox, w_lease_end, h_account, h_key,
					   h_sandbox, h_day, h_amount, h_lease_end);
		-- The batches in flight before this one on its rows, which it
		-- was decided after: their ends (the row locks alone would let
		-- this batch take a row first when its writes were quicker).
		PERFORM pg_advisory_xact_lock_shared(p_engine, t) FROM unnest(p_after) AS t;
		-- The ledger rows, locked in (account_id, key_id, day) order,
		-- against what the engine expected of them (a missing row
		-- differs too).
		WITH locked AS (
			SELECT l.account_id, l.key_id, l.day, l.spent_micros, l.held_micros,
			       l.limit_micros
			FROM key_day_ledger l
			JOIN unnest(l_account, l_key, l_day) AS v(a, k, d)
			  ON l.account_id = v.a AND l.key_id = v.k AND l.day = v.d
			ORDER BY l.account_id, l.key_id, l.day
			FOR UPDATE OF l)
		SELECT count(*) > 0 INTO differs
		FROM unnest(l_account, l_key, l_day, e_spent, e_held, e_limit) AS v(a, k, d, s, h, m)
		LEFT JOIN locked x ON x.account_id = v.a AND x.key_id = v.k AND x.day = v.d
		WHERE x.account_id IS NULL OR x.spent_micros <> v.s OR x.held_micros <> v.h
		   OR x.limit_micros IS DISTINCT FROM v.m;
		IF differs THEN
			-- Undoes the rows written above, and releases the locks.
			RAISE EXCEPTION 'meter check batch: ledger rows differ' USING ERRCODE = 'MTR02';
		END IF;
		SELECT count(*) INTO n
			FROM unnest(k_account, k_key, k_limit, k_tz) AS v(a, k, m, t)
			JOIN api_keys x ON x.account_id = v.a AND x.key_id = v.k
			WHERE x.revoked_at IS NULL AND x.time_zone = v.t
			  AND x.daily_limit_micros IS NOT DISTINCT FROM v.m;
		IF n <> cardinality(k_account) THEN
			PERFORM meter_checks_conflict('key');
		END IF;
		IF (SELECT max(version) FROM price_book) IS DISTINCT FROM p_price_version THEN
			PERFORM meter_checks_conflict('price book');
		END IF;
		IF EXISTS (SELECT 1 FROM unnest(r_account, r_op, r_key) AS v(a, o, k)
			   JOIN idempotency_keys i ON i.account_id = v.a AND i.operation = v.o
			    AND i.idempotency_key = v.k)
		   OR EXISTS (SELECT 1 FROM unnest(r_account, r_op, r_key) AS v(a, o, k)
			      JOIN sandboxes s ON s.sandbox_id = v.k AND s.account_id = v.a
			      WHERE v.o = 'create' AND s.create_response IS NOT NULL) THEN
			PERFORM meter_checks_conflict('answer of a refused check');
		END IF;
		UPDATE key_day_ledger l SET held_micros = v.h, limit_micros = v.m, updated_at = now()
		FROM unnest(l_account, l_key, l_day, l_held, l_limit) AS v(a, k, d, h, m)
		WHERE l.account_id = v.a AND l.key_id = v.k AND l.day = v.d;
		RETURN;
	EXCEPTION WHEN SQLSTATE 'MTR02' THEN
		NULL;
	END;
	-- Nothing written: the rows that differ, as they are now.
	RETURN QUERY
		SELECT v.a, v.k, v.d, x.spent_micros::bigint, x.held_micros::bigint,
		       x.limit_micros::bigint
		FROM unnest(l_account, l_key, l_day, e_spent, e_held, e_limit) AS v(a, k, d, s, h, m)
		LEFT JOIN key_day_ledger x ON x.account_id = v.a AND x.key_id = v.k AND x.day = v.d
		WHERE x.account_id IS NULL OR x.spent_micros <> v.s OR x.held_micros <> v.h
		   OR x.limit_micros IS DISTINCT FROM v.m;
END
$$;
