-- meter: a create's stored answer kept as its numbers (issue 4's
-- throughput, and the sandboxes table's size).
--
-- A create under the default idempotency key kept its whole first answer
-- on the sandbox row (0017) for replay: about 440 bytes of JSON text in a
-- row of about 630. On a hot key that text was more than a quarter of the
-- WAL a check writes, and most of why the sandboxes table took a new page
-- every dozen checks. Everything in the answer but its numbers is on the
-- row already (the sandbox and key ids), and its layout is fixed
-- (meter/check_answer.c), so a new row keeps only the numbers:
--
--   create_answer = {lease start, lease end (both microseconds since
--     1970-01-01 UTC), lease_max_cost_micros, then per day part: the day
--     as yyyymmdd, hold_micros, day_spent_micros, day_held_micros,
--     daily_limit_micros (NULL: no limit)}
--
-- and meter_create_answer() writes the answer's text back from them, byte
-- for byte what the engine answered (tests/integration/test_checks.c
-- compares replays with first answers, and test_answer_sql.c the function
-- with the engine's writer over random answers). Rows written
-- before keep their text in create_response; a row has one or the other.

-- The constraints are written small: every INSERT statement reads its
-- table's CHECK expressions anew from their stored node trees, and a
-- check batch inserts sandboxes in one statement. (One sandbox, three
-- columns: exactly one kept answer when the request's hash is kept, none
-- otherwise; the numbers one-dimensional from 1, of one to four parts: an
-- empty array, which has no dimensions, is its text '{}' and fails.)
ALTER TABLE sandboxes ADD COLUMN create_answer bigint[],
	DROP CONSTRAINT sandboxes_create_answer,
	ADD CONSTRAINT sandboxes_create_answer
		CHECK (num_nonnulls(create_response, create_answer)
		       = (create_request_sha256 IS NOT NULL)::integer),
	ADD CONSTRAINT sandboxes_create_answer_shape
		CHECK (COALESCE(array_dims(create_answer), create_answer::text)
		       IN ('[1:8]', '[1:13]', '[1:18]', '[1:23]'));
COMMENT ON COLUMN sandboxes.create_response IS 'The first answer to its create under the default idempotency key, as text, for sandboxes created before 0025; see create_answer.';
COMMENT ON COLUMN sandboxes.create_answer IS 'The numbers of the first answer to its create under the default idempotency key (the sandbox id), replayed to retries as meter_create_answer() writes them; NULL when it was made under another key (idempotency_keys), by metering, or before 0025 (create_response).';

-- A time of the answer, microseconds since 1970-01-01 UTC (the engine's
-- clock: never before it), as the engine writes it:
-- 2026-12-02T13:20:11.000000Z (integer arithmetic only; STABLE as
-- to_char is, though this pattern depends on no setting).
CREATE FUNCTION meter_answer_time(u bigint) RETURNS text
	LANGUAGE sql STABLE STRICT PARALLEL SAFE
	AS $$
	SELECT to_char(date '1970-01-01' + (u / 86400000000)::integer, 'YYYY-MM-DD')
	       || 'T' || lpad((u % 86400000000 / 3600000000)::text, 2, '0')
	       || ':' || lpad((u % 3600000000 / 60000000)::text, 2, '0')
	       || ':' || lpad((u % 60000000 / 1000000)::text, 2, '0')
	       || '.' || lpad((u % 1000000)::text, 6, '0') || 'Z'
$$;

-- A day of the answer, yyyymmdd, as the engine writes it: 2026-12-02.
CREATE FUNCTION meter_answer_day(d bigint) RETURNS text
	LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
	AS $$
	SELECT lpad((d / 10000)::text, 4, '0') || '-' || lpad((d / 100 % 100)::text, 2, '0')
	       || '-' || lpad((d % 100)::text, 2, '0')
$$;

-- The allowed answer of a create from its numbers (create_answer): the
-- same text as check_answer_allowed() in meter/check_answer.c. Ids are
-- meter_ids, which need no escaping in JSON.
CREATE FUNCTION meter_create_answer(p_sandbox text, p_key text, a bigint[]) RETURNS text
	LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
	AS $$
DECLARE
	hold bigint := 0;
	parts text := '';
BEGIN
	FOR p IN 0 .. (cardinality(a) - 3) / 5 - 1 LOOP
		hold := hold + a[5 + 5 * p];
		parts := parts || CASE WHEN p > 0 THEN ',' ELSE '' END
			 || '{"day":"' || meter_answer_day(a[4 + 5 * p])
			 || '","hold_micros":' || a[5 + 5 * p]
			 || ',"day_spent_micros":' || a[6 + 5 * p]
			 || ',"day_held_micros":' || a[7 + 5 * p]
			 || ',"daily_limit_micros":' || COALESCE(a[8 + 5 * p]::text, 'null') || '}';
	END LOOP;
	RETURN '{"allowed":true,"sandbox_id":"' || p_sandbox || '","key_id":"' || p_key
	       || '","hold_micros":' || hold || ',"lease_max_cost_micros":' || a[3]
	       || ',"day":"' || meter_answer_day(a[4]) || '","day_spent_micros":' || a[6]
	       || ',"day_held_micros":' || a[7]
	       || ',"daily_limit_micros":' || COALESCE(a[8]::text, 'null')
	       || ',"lease_starts_at":"' || meter_answer_time(a[1])
	       || '","lease_ends_at":"' || meter_answer_time(a[2]) || '","parts":[' || parts
	       || ']}';
END
$$;

CREATE OR REPLACE VIEW check_answers AS
	SELECT account_id, operation::text AS operation, idempotency_key::text AS idempotency_key,
	       request_sha256, status_code, response, created_at
	FROM idempotency_keys
	UNION ALL
	SELECT account_id, 'create', sandbox_id::text, create_request_sha256, 200,
	       COALESCE(create_response, meter_create_answer(sandbox_id, key_id, create_answer)),
	       created_at
	FROM sandboxes WHERE create_request_sha256 IS NOT NULL;

-- The check batch's writers as in 0020 and 0024, writing the numbers
-- (c_answer: each a bigint[] literal) where they wrote the text.
DROP FUNCTION meter_checks_fast;
DROP FUNCTION meter_checks_apply;

CREATE FUNCTION meter_checks_apply(
	p_now timestamptz,
	l_account text[], l_key text[], l_day date[], l_held bigint[], l_limit bigint[],
	x_account text[], x_op text[], x_key text[], x_xmin text[],
	i_account text[], i_op text[], i_key text[], i_sha text[], i_status integer[],
	i_response text[],
	c_account text[], c_sandbox text[], c_key text[], c_vcpus integer[], c_memory bigint[],
	c_max_cost bigint[], c_lease_end timestamptz[], c_sha text[], c_answer text[],
	w_account text[], w_sandbox text[], w_lease_end timestamptz[],
	h_account text[], h_key text[], h_sandbox text[], h_day date[], h_amount bigint[],
	h_lease_end timestamptz[])
	RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	n integer;
BEGIN
	IF cardinality(l_account) > 0 THEN
		UPDATE key_day_ledger l SET held_micros = v.h, limit_micros = v.m, updated_at = now()
		FROM unnest(l_account, l_key, l_day, l_held, l_limit) AS v(a, k, d, h, m)
		WHERE l.account_id = v.a AND l.key_id = v.k AND l.day = v.d;
	END IF;
	IF cardinality(x_account) > 0 THEN
		-- Only the row version the batch read: one that another
		-- process put in its place since is the first answer now.
		DELETE FROM idempotency_keys i
		USING unnest(x_account, x_op, x_key, x_xmin) AS v(a, o, k, x)
		WHERE i.account_id = v.a AND i.operation = v.o AND i.idempotency_key = v.k
		  AND i.xmin::text = v.x;
		GET DIAGNOSTICS n = ROW_COUNT;
		IF n <> cardinality(x_account) THEN
			PERFORM meter_checks_conflict('stale idempotency key');
		END IF;
	END IF;
	-- The references of the rows written below, checked here once for
	-- the batch: every key named is one of its account's (so the account
	-- exists), every hold is of a sandbox the batch creates or wakes (the
	-- wake's update below finds it or raises), and every stored answer's
	-- account exists. The reference triggers of 0017 then pass over these
	-- statements.
	IF EXISTS (SELECT 1 FROM (SELECT DISTINCT v.a, v.k
				  FROM unnest(c_account || h_account, c_key || h_key) AS v(a, k)) v
		   WHERE (SELECT x.account_id FROM api_keys x WHERE x.key_id = v.k)
			 IS DISTINCT FROM v.a)
	   OR EXISTS (SELECT * FROM unnest(h_account, h_sandbox)
		      EXCEPT SELECT * FROM unnest(c_account || w_account, c_sandbox || w_sandbox))
	   OR EXISTS (SELECT 1 FROM (SELECT DISTINCT v.a FROM unnest(i_account) AS v(a)) v
		      WHERE NOT EXISTS (SELECT 1 FROM accounts x WHERE x.account_id = v.a)) THEN
		PERFORM meter_reference_missing('a checked row''s account, key or sandbox');
	END IF;
	PERFORM set_config('meter.references_checked', 'on', true);
	IF cardinality(i_account) > 0 THEN
		INSERT INTO idempotency_keys (account_id, operation, idempotency_key, request_sha256,
					      status_code, response, created_at)
			SELECT v.a, v.o, v.k, decode(v.h, 'hex'), v.s, v.r, p_now
			FROM unnest(i_account, i_op, i_key, i_sha, i_status, i_response)
				AS v(a, o, k, h, s, r)
			ORDER BY v.a, v.o, v.k;
	END IF;
	IF cardinality(c_account) > 0 THEN
		INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state,
				       max_cost_micros, created_at, state_since, lease_ends_at,
				       create_request_sha256, create_answer)
			SELECT v.a, v.s, v.k, v.c, v.m, 'running', v.x, p_now, p_now, v.e,
			       decode(v.h, 'hex'), v.r::bigint[]
			FROM unnest(c_account, c_sandbox, c_key, c_vcpus, c_memory, c_max_cost,
				    c_lease_end, c_sha, c_answer) AS v(a, s, k, c, m, x, e, h, r)
			ORDER BY v.s;
	END IF;
	IF cardinality(w_account) > 0 THEN
		UPDATE sandboxes s
		SET state = 'running',
		    state_since = CASE WHEN s.state = 'running' THEN s.state_since ELSE p_now END,
		    lease_ends_at = v.e
		FROM unnest(w_account, w_sandbox, w_lease_end) AS v(a, sb, e)
		WHERE s.account_id = v.a AND s.sandbox_id = v.sb AND s.state <> 'stopped';
		GET DIAGNOSTICS n = ROW_COUNT;
		IF n <> cardinality(w_account) THEN
			PERFORM meter_checks_conflict('sandbox state');
		END IF;
	END IF;
	IF cardinality(h_account) > 0 THEN
		INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,
				   lease_starts_at, lease_ends_at, created_at)
			SELECT v.a, v.k, v.s, v.d, v.m, p_now, v.e, p_now
			FROM unnest(h_account, h_key, h_sandbox, h_day, h_amount, h_lease_end)
				AS v(a, k, s, d, m, e);
	END IF;
	PERFORM set_config('meter.references_checked', 'off', true);
	RETURN 0;
END
$$;

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
	nk bigint;
	ns bigint;
	nh bigint;
	pv integer;
	differs boolean;
BEGIN
	-- This batch's ticket, held to its end: a batch the engine sent after
	-- it on the same rows waits for it below.
	PERFORM pg_advisory_xact_lock(p_engine, p_ticket);
	BEGIN
		IF cardinality(l_account) = 1 AND cardinality(x_account) = 0
		   AND cardinality(i_account) = 0 AND cardinality(w_account) = 0
		   AND cardinality(r_account) = 0 THEN
			-- Plain creates on one ledger row: the references are
			-- checked by the counts below.
			PERFORM set_config('meter.references_checked', 'on', true);
			WITH k AS MATERIALIZED (
				SELECT x.account_id, x.key_id
				FROM unnest(k_account, k_key, k_limit, k_tz) AS v(a, k, m, t)
				JOIN api_keys x ON x.account_id = v.a AND x.key_id = v.k
				WHERE x.revoked_at IS NULL AND x.time_zone = v.t
				  AND x.daily_limit_micros IS NOT DISTINCT FROM v.m
			), s AS (
				INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus,
						       memory_mib, state, max_cost_micros, created_at,
						       state_since, lease_ends_at,
						       create_request_sha256, create_answer)
				SELECT v.a, v.s, v.k, v.c, v.m, 'running', v.x, p_now, p_now, v.e,
				       decode(v.h, 'hex'), v.r::bigint[]
				FROM unnest(c_account, c_sandbox, c_key, c_vcpus, c_memory,
					    c_max_cost, c_lease_end, c_sha, c_answer)
					AS v(a, s, k, c, m, x, e, h, r)
				WHERE EXISTS (SELECT 1 FROM k WHERE k.account_id = v.a
					      AND k.key_id = v.k)
				ORDER BY v.s
				RETURNING sandboxes.account_id, sandboxes.sandbox_id
			), h AS (
				INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,
						   lease_starts_at, lease_ends_at, created_at)
				SELECT v.a, v.k, v.s, v.d, v.m, p_now, v.e, p_now
				FROM unnest(h_account, h_key, h_sandbox, h_day, h_amount,
					    h_lease_end) AS v(a, k, s, d, m, e)
				WHERE EXISTS (SELECT 1 FROM k WHERE k.account_id = v.a
					      AND k.key_id = v.k)
				RETURNING holds.account_id, holds.sandbox_id
			)
			SELECT (SELECT count(*) FROM k), (SELECT count(*) FROM s),
			       (SELECT count(*) FROM h
				WHERE EXISTS (SELECT 1 FROM s WHERE s.account_id = h.account_id
					      AND s.sandbox_id = h.sandbox_id)),
			       (SELECT max(version) FROM price_book)
			INTO nk, ns, nh, pv;
			PERFORM set_config('meter.references_checked', 'off', true);
			IF nk <> cardinality(k_account) THEN
				PERFORM meter_checks_conflict('key');
			END IF;
			IF pv IS DISTINCT FROM p_price_version THEN
				PERFORM meter_checks_conflict('price book');
			END IF;
			IF ns <> cardinality(c_account) OR nh <> cardinality(h_account) THEN
				PERFORM meter_reference_missing(
					'a checked row''s account, key or sandbox');
			END IF;
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
			      JOIN sandboxes s ON s.sandbox_id = v.k AND s.account_id = v.a
			      WHERE v.o = 'create' AND s.create_request_sha256 IS NOT NULL) THEN
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
