-- meter: a renewal never shortens a sandbox's lease, and a stop ends
-- every hold of its sandbox, whatever the two clocks say.
--
-- The sandbox row's lease_ends_at is the end of the lease it runs on: the
-- lease-end sweep watches a lease for hold_outrun only while it is the
-- sandbox's, and a default-key wake is replayed only while the lease it
-- granted runs. A wake wrote its own lease end there, so a renewal
-- shorter than what was left of the lease before it moved the end back:
-- at the short lease's end the sweep watched it while the longer hold
-- still ran, and reported a lease_ended outrun that was not one. A wake of
-- a running sandbox now keeps the later of the two ends (its holds run to
-- the later one anyway); a wake of a paused sandbox starts a lease of its
-- own, as before.
--
-- An event's time is the control plane's clock, a check's the engine's. A
-- pause or stop settles the holds whose lease began at or before it, so
-- that a pause delivered late, after the wake that followed it, leaves the
-- wake's lease alone. Two exceptions, where that reading cannot be right:
-- - Nothing of a sandbox happens before its create check, so an event
--   dated before the sandbox was made is the clocks' difference, and
--   counts as at the create (it is recorded as sent). A stop sent a moment
--   after a create, dated a moment before it, left the create's hold open
--   for its whole lease and the sandbox running in meter's view.
-- - A stop is final: it settles every open hold of the sandbox (one whose
--   lease began after the stop's time is closed whole: nothing of it was
--   metered before the stop), and the state becomes and stays stopped. A
--   stop dated a moment before a wake's check used to leave that wake's
--   hold open, the sandbox running and wakeable; and a later-dated
--   running or paused event used to bring a stopped sandbox back.
-- - A pause or running event moves the state only if no open hold's lease
--   began after it: a pause delivered late, dated before a renewal (which
--   keeps state_since), would otherwise pause a sandbox that runs on the
--   renewal, whose lease end the sweep then did not watch.
--
-- A wake decided at the same moment as an event may have written its hold
-- and updated the sandbox row without having committed: the event's read
-- of the holds does not see that hold. So the event settles what it sees,
-- locks the sandbox row in a statement of its own (waiting for such a
-- wake), sets the state in the next (whose snapshot sees the wake's hold),
-- and settles again. That second settling takes ledger rows while holding
-- the sandbox row, the other order from a check batch: a deadlock fails
-- the event's statement whole (its record of the event too), and the
-- caller runs it again (db_checks_event, as for any deadlock).
-- As in 0025 and 0016 otherwise.

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

-- Settles the open holds of p_sandbox that an event of p_type at p_eff
-- ends (a stop: all of them; a pause: those begun at or before it), ledger
-- rows first, in order, then each hold (meter_hold_settle); an event
-- within p_grace_s after a hold's lease end settles it as at that end.
CREATE FUNCTION meter_event_settle(p_account text, p_sandbox text, p_type text,
				   p_eff timestamptz, p_grace_s integer,
				   OUT settled integer, OUT released bigint, OUT kept bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	r record;
	st record;
BEGIN
	settled := 0;
	released := 0;
	kept := 0;
	PERFORM 1 FROM key_day_ledger l
		WHERE (l.account_id, l.key_id, l.day) IN
			(SELECT h.account_id, h.key_id, h.day FROM holds h
			 WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
			   AND h.status = 'open' AND h.settles_at IS NULL
			   AND (p_type = 'stopped' OR h.lease_starts_at <= p_eff))
		ORDER BY l.account_id, l.key_id, l.day
		FOR UPDATE OF l;
	FOR r IN SELECT h.hold_id, h.lease_ends_at FROM holds h
		 WHERE h.account_id = p_account AND h.sandbox_id = p_sandbox
		   AND h.status = 'open' AND h.settles_at IS NULL
		   AND (p_type = 'stopped' OR h.lease_starts_at <= p_eff)
		 ORDER BY h.key_id, h.day, h.hold_id LOOP
		st := meter_hold_settle(p_account, r.hold_id,
			CASE WHEN p_eff > r.lease_ends_at
				  AND p_eff <= r.lease_ends_at + make_interval(secs => p_grace_s)
			     THEN r.lease_ends_at ELSE p_eff END);
		IF st.released IS NOT NULL THEN
			settled := settled + 1;
			released := released + st.released;
			kept := kept + st.kept;
		END IF;
	END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION meter_sandbox_event(p_sandbox text, p_type text, p_at timestamptz,
					       p_grace_s integer)
	RETURNS TABLE (known boolean, recorded boolean, state text, state_since timestamptz,
		       holds_settled integer, released_micros bigint, tail_held_micros bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	acc text;
	eff timestamptz;
	st record;
	n integer := 0;
	total bigint := 0;
	tail bigint := 0;
	rec boolean;
BEGIN
	SELECT s.account_id, GREATEST(p_at, s.created_at) INTO acc, eff
		FROM sandboxes s WHERE s.sandbox_id = p_sandbox;
	IF NOT FOUND THEN
		RETURN QUERY SELECT false, false, NULL::text, NULL::timestamptz, 0, 0::bigint,
				    0::bigint;
		RETURN;
	END IF;
	INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)
		VALUES (acc, p_sandbox, p_type, p_at)
	ON CONFLICT (account_id, sandbox_id, type, at) DO NOTHING;
	rec := FOUND;
	IF rec AND p_type IN ('paused', 'stopped') THEN
		st := meter_event_settle(acc, p_sandbox, p_type, eff, p_grace_s);
		n := st.settled;
		total := st.released;
		tail := st.kept;
	END IF;
	IF rec THEN
		-- The row first, in a statement of its own: a wake in flight on it
		-- has committed once this returns, so the update's test of the
		-- holds below (a fresh snapshot) sees that wake's hold.
		PERFORM 1 FROM sandboxes s WHERE s.account_id = acc AND s.sandbox_id = p_sandbox
			FOR UPDATE;
		UPDATE sandboxes s SET state = p_type, state_since = GREATEST(s.state_since, eff)
		WHERE s.account_id = acc AND s.sandbox_id = p_sandbox AND s.state <> 'stopped'
		  AND (p_type = 'stopped'
		       OR (s.state_since <= eff
			   AND NOT EXISTS (SELECT 1 FROM holds h
					   WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
					     AND h.status = 'open' AND h.lease_starts_at > eff)));
	END IF;
	IF rec AND p_type IN ('paused', 'stopped') THEN
		st := meter_event_settle(acc, p_sandbox, p_type, eff, p_grace_s);
		n := n + st.settled;
		total := total + st.released;
		tail := tail + st.kept;
	END IF;
	RETURN QUERY SELECT true, rec, s.state::text, s.state_since, n, total, tail
		FROM sandboxes s WHERE s.account_id = acc AND s.sandbox_id = p_sandbox;
END
$$;
