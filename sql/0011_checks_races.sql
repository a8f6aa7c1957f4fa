-- meter: two races of the check engine closed (issue 4).
--
-- 1. meter_checks_lock inserted the batch's missing ledger rows (ON
--    CONFLICT DO NOTHING, which leaves existing rows unlocked) and then
--    locked the rows that existed: a new row was locked before an existing
--    one that sorts before it, against the lock order of every writer. With
--    ingestion locking the same two rows in order, each waited for the
--    other (a deadlock, broken after deadlock_timeout with a retry). Now,
--    when a row is missing, all of them are created and locked in one
--    ordered pass (ON CONFLICT DO UPDATE locks an existing row where it
--    comes); when none is, they are locked in order as before.
--
-- 2. A stale default wake answer (its lease is over) is replaced by the
--    batch that allows the wake again. The batch read it before locking the
--    key's ledger rows; another meterd process could allow the same wake
--    and replace the row in between. Deleting by key would then delete the
--    other process's fresh answer, and one wake would get two holds and two
--    answers. meter_checks_apply now deletes only the row version read
--    (x_xmin: its xmin as read) and raises MTR01 when it is gone, so the
--    batch is decided again and replays the answer that won.

CREATE OR REPLACE FUNCTION meter_checks_lock(p_account text[], p_key text[], p_day date[],
					     p_limit bigint[])
	RETURNS TABLE (account_id text, key_id text, day date, spent_micros bigint,
		       held_micros bigint, limit_micros bigint)
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM unnest(p_account, p_key, p_day) AS v(a, k, d)
		   WHERE NOT EXISTS (SELECT 1 FROM key_day_ledger x
				     WHERE x.account_id = v.a AND x.key_id = v.k AND x.day = v.d)) THEN
		INSERT INTO key_day_ledger AS l (account_id, key_id, day, limit_micros)
			SELECT v.a, v.k, v.d, v.m
			FROM unnest(p_account, p_key, p_day, p_limit) AS v(a, k, d, m)
			ORDER BY v.a, v.k, v.d
		ON CONFLICT ON CONSTRAINT key_day_ledger_pkey DO UPDATE SET updated_at = l.updated_at;
	END IF;
	RETURN QUERY
		SELECT l.account_id::text, l.key_id::text, l.day, l.spent_micros::bigint,
		       l.held_micros::bigint, l.limit_micros::bigint
		FROM key_day_ledger l
		WHERE (l.account_id, l.key_id, l.day) IN
			(SELECT v.a, v.k, v.d FROM unnest(p_account, p_key, p_day) AS v(a, k, d))
		ORDER BY l.account_id, l.key_id, l.day
		FOR UPDATE OF l;
END
$$;

DROP FUNCTION meter_checks_apply(timestamptz, text[], text[], date[], bigint[], bigint[],
				 text[], text[], text[], text[], text[], text[], text[],
				 integer[], text[], text[], text[], text[], integer[], bigint[],
				 bigint[], timestamptz[], text[], text[], timestamptz[], text[],
				 text[], text[], date[], bigint[], timestamptz[]);

-- As in 0005, but a stale idempotency row is deleted only as read (x_xmin).
CREATE FUNCTION meter_checks_apply(
	p_now timestamptz,
	l_account text[], l_key text[], l_day date[], l_held bigint[], l_limit bigint[],
	x_account text[], x_op text[], x_key text[], x_xmin text[],
	i_account text[], i_op text[], i_key text[], i_sha text[], i_status integer[],
	i_response text[],
	c_account text[], c_sandbox text[], c_key text[], c_vcpus integer[], c_memory bigint[],
	c_max_cost bigint[], c_lease_end timestamptz[],
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
	IF cardinality(i_account) > 0 THEN
		INSERT INTO idempotency_keys (account_id, operation, idempotency_key, request_sha256,
					      status_code, response, created_at)
			SELECT v.a, v.o, v.k, decode(v.h, 'hex'), v.s, v.r::jsonb, p_now
			FROM unnest(i_account, i_op, i_key, i_sha, i_status, i_response)
				AS v(a, o, k, h, s, r)
			ORDER BY v.a, v.o, v.k
		ON CONFLICT ON CONSTRAINT idempotency_keys_pkey DO NOTHING;
		GET DIAGNOSTICS n = ROW_COUNT;
		IF n <> cardinality(i_account) THEN
			PERFORM meter_checks_conflict('idempotency key');
		END IF;
	END IF;
	IF cardinality(c_account) > 0 THEN
		INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state,
				       max_cost_micros, created_at, state_since, lease_ends_at)
			SELECT v.a, v.s, v.k, v.c, v.m, 'running', v.x, p_now, p_now, v.e
			FROM unnest(c_account, c_sandbox, c_key, c_vcpus, c_memory, c_max_cost,
				    c_lease_end) AS v(a, s, k, c, m, x, e)
			ORDER BY v.s
		ON CONFLICT DO NOTHING;
		GET DIAGNOSTICS n = ROW_COUNT;
		IF n <> cardinality(c_account) THEN
			PERFORM meter_checks_conflict('sandbox');
		END IF;
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
	RETURN 0;
END
$$;
