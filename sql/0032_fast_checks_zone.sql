-- meter: a fast batch of plain creates reads its key's time zone again
-- once its ledger row is held.
--
-- 0026's one-key branch checks the key (unrevoked, its limit and time
-- zone as the engine assumed) in a plain SELECT before it writes, and only
-- then takes the key-day's ledger row (the compare-and-set UPDATE). A
-- change of the key's time zone (PUT /v1/keys/{id}/limits) that commits
-- in between holds the old zone's ledger rows until it commits and counts
-- the key's open holds after taking them; the batch's UPDATE waits for
-- it, finds the row's figures unchanged, and committed a hold on the old
-- zone's day after the zone changed: metering then files the sandbox's
-- spend on the new zone's day, where no hold covers it. The branch now
-- reads the zone again after the UPDATE, in a statement of its own (a
-- snapshot taken once the row is held), and raises MTR01 when it is not
-- the one assumed: the engine then reads everything again (the classic
-- path) on the new zone's days. The general branch already read the keys
-- after its locks.
--
-- Also: a create refused on a fast batch whose sandbox exists goes the
-- classic way, which answers 409 sandbox_exists, as it does for the same
-- request on its own.
--
-- The classic path checks that a create's sandbox id is free before it
-- looks at the create's worst case or the key's budget, so a create of a
-- sandbox that exists is 409 sandbox_exists whatever its figures. The fast
-- path decides max_cost_exceeded and spending_limit_reached in the engine,
-- and its guard for a refused create (0018 to 0026) only looked for a
-- sandbox of that id made under the default key in the same account (its
-- stored answer): a sandbox made under a key of the caller's own, by
-- metering, or in another account slipped through, and the same request
-- was 402 on a fast batch and 409 on a classic one. Nothing was written
-- either way.
--
-- The engine now lists a refused create under its sandbox id too (besides
-- its idempotency key), and the guard takes any sandbox of a listed id,
-- made however and in whatever account (sandbox ids are unique across
-- accounts, so this is the unique index's look-up): MTR01, and the batch
-- is read and decided again on the classic path. A listed idempotency key
-- that happens to name a sandbox does the same, which costs that batch a
-- classic round and changes no answer. As in 0026 otherwise.

CREATE OR REPLACE FUNCTION meter_checks_fast(
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
	c_max_cost bigint[], c_lease_end timestamptz[], c_sha text[], c_answer text[],
	w_account text[], w_sandbox text[], w_lease_end timestamptz[],
	h_account text[], h_key text[], h_sandbox text[], h_day date[], h_amount bigint[],
	h_lease_end timestamptz[])
	RETURNS TABLE (account_id text, key_id text, day date, spent_micros bigint,
		       held_micros bigint, limit_micros bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	n integer;
	found_key boolean;
	pv integer;
	differs boolean;
BEGIN
	-- This batch's ticket, held to its end: a batch the engine sent after
	-- it on the same rows waits for it below.
	PERFORM pg_advisory_xact_lock(p_engine, p_ticket);
	BEGIN
		IF cardinality(l_account) = 1 AND cardinality(k_account) = 1
		   AND cardinality(x_account) = 0 AND cardinality(i_account) = 0
		   AND cardinality(w_account) = 0 AND cardinality(r_account) = 0 THEN
			-- Plain creates on one key's ledger row. Every sandbox and
			-- hold names that key and its account, and every hold a
			-- sandbox of the batch: so the key's row, looked up below,
			-- proves every reference, and the inserts after it (each
			-- sandbox inserted or an error) make the holds' sandboxes.
			IF NOT (c_account <@ k_account AND c_key <@ k_key
				AND h_account <@ k_account AND h_key <@ k_key
				AND h_sandbox <@ c_sandbox) THEN
				PERFORM meter_reference_missing(
					'a checked row''s account, key or sandbox');
			END IF;
			SELECT EXISTS (SELECT 1 FROM api_keys x
				       WHERE x.account_id = k_account[1] AND x.key_id = k_key[1]
					 AND x.revoked_at IS NULL AND x.time_zone = k_tz[1]
					 AND x.daily_limit_micros IS NOT DISTINCT FROM k_limit[1]),
			       (SELECT max(version) FROM price_book)
			INTO found_key, pv;
			IF NOT found_key THEN
				PERFORM meter_checks_conflict('key');
			END IF;
			IF pv IS DISTINCT FROM p_price_version THEN
				PERFORM meter_checks_conflict('price book');
			END IF;
			PERFORM set_config('meter.references_checked', 'on', true);
			INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,
					       state, max_cost_micros, created_at, state_since,
					       lease_ends_at, create_request_sha256, create_answer)
			SELECT v.a, v.s, v.k, v.c, v.m, 'running', v.x, p_now, p_now, v.e,
			       decode(v.h, 'hex'), v.r::bigint[]
			FROM unnest(c_account, c_sandbox, c_key, c_vcpus, c_memory,
				    c_max_cost, c_lease_end, c_sha, c_answer)
				AS v(a, s, k, c, m, x, e, h, r)
			ORDER BY v.s;
			INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,
					   lease_starts_at, lease_ends_at, created_at)
			SELECT v.a, v.k, v.s, v.d, v.m, p_now, v.e, p_now
			FROM unnest(h_account, h_key, h_sandbox, h_day, h_amount, h_lease_end)
				AS v(a, k, s, d, m, e);
			PERFORM set_config('meter.references_checked', 'off', true);
			IF cardinality(p_after) > 0 THEN
				PERFORM pg_advisory_xact_lock_shared(p_engine, t)
				FROM unnest(p_after) AS t;
			END IF;
			UPDATE key_day_ledger l
			SET held_micros = l_held[1], limit_micros = l_limit[1], updated_at = now()
			WHERE l.account_id = l_account[1] AND l.key_id = l_key[1]
			  AND l.day = l_day[1] AND l.spent_micros = e_spent[1]
			  AND l.held_micros = e_held[1]
			  AND l.limit_micros IS NOT DISTINCT FROM e_limit[1];
			GET DIAGNOSTICS n = ROW_COUNT;
			IF n <> 1 THEN
				-- Undoes the rows written above.
				RAISE EXCEPTION 'meter check batch: ledger rows differ'
					USING ERRCODE = 'MTR02';
			END IF;
			-- The key's zone again, now that its day's row is held: a
			-- change committed while the row was awaited (PUT
			-- .../limits holds the old zone's rows until it commits)
			-- makes this batch's day another zone's.
			IF NOT EXISTS (SELECT 1 FROM api_keys x
				       WHERE x.account_id = k_account[1] AND x.key_id = k_key[1]
					 AND x.time_zone = k_tz[1]) THEN
				PERFORM meter_checks_conflict('key');
			END IF;
			RETURN;
		END IF;
		-- The new rows first, before the ledger rows are locked: a
		-- batch in flight behind another one writes them while the
		-- first one commits, and holds the rows only to compare and
		-- update them. (The ledger rows are updated below.)
		PERFORM meter_checks_apply(p_now, '{}', '{}', '{}', '{}', '{}',
					   x_account, x_op, x_key, x_xmin,
					   i_account, i_op, i_key, i_sha, i_status, i_response,
					   c_account, c_sandbox, c_key, c_vcpus, c_memory,
					   c_max_cost, c_lease_end, c_sha, c_answer,
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
			      JOIN sandboxes s ON s.sandbox_id = v.k
			      WHERE v.o = 'create') THEN
			PERFORM meter_checks_conflict('answer of a refused check or its sandbox');
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
