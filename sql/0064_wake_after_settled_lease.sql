-- meter: a wake keeps the later lease end only while the sandbox still
-- runs on that lease.
--
-- 0033 made a wake of a running sandbox keep the later of its lease's end
-- and the wake's: its holds run to the later one anyway. But a running
-- sandbox need not run on a lease at all: a pause settles the lease's
-- holds, and a running event that follows it (a resume the control plane
-- made without a wake check: resumed_without_wake) leaves the sandbox
-- running on none. A wake then kept the settled lease's later end as the
-- sandbox's, so the lease-end sweep, which watches a released lease for
-- hold_outrun only while it is the sandbox's, never watched the wake's:
-- the sandbox ran past the wake's lease with no lease_ended sent, and its
-- lease_ends_at showed the settled lease's end. The later end is now kept
-- only while an open hold of the sandbox, not yet settled, still ends at
-- it; otherwise the wake's lease is the sandbox's own. The rest is 0033's.
CREATE OR REPLACE FUNCTION meter_checks_apply(
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
		    lease_ends_at = CASE WHEN s.state = 'running'
					       AND EXISTS (SELECT 1 FROM holds o
							   WHERE o.account_id = s.account_id
							     AND o.sandbox_id = s.sandbox_id
							     AND o.status = 'open'
							     AND o.settles_at IS NULL
							     AND o.lease_ends_at = s.lease_ends_at)
					 THEN GREATEST(s.lease_ends_at, v.e) ELSE v.e END
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
