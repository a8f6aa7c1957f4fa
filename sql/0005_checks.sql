-- meter: checks, settlement and the webhook outbox (DESIGN.md §4).
--
-- Checks are decided by meterd's check engine in batches (meter/checks.c):
-- one transaction locks the key_day_ledger rows of every key-day the batch
-- touches (meter_checks_lock, in (account_id, key_id, day) order: the lock
-- order of 0002), decides each check in C, and writes holds, ledger,
-- sandboxes and idempotency rows in one statement (meter_checks_apply).
-- Holds are closed only through meter_hold_close (0002), so
-- committed = spent + remaining holds stays true at all times.
--
-- Lock order of every writer here: key_day_ledger rows (ordered), then
-- idempotency_keys, then sandboxes, then holds -- except settlement, which
-- takes ledger rows, then holds (meter_hold_close), then the sandbox row.

-- Raised when a batch's writes meet a row another process wrote after the
-- batch read (a sandbox or idempotency key claimed concurrently): the batch
-- is rolled back and decided again. SQLSTATE MTR01.
CREATE FUNCTION meter_checks_conflict(what text) RETURNS integer
	LANGUAGE plpgsql
	AS $$
BEGIN
	RAISE EXCEPTION 'meter check batch: % changed concurrently', what USING ERRCODE = 'MTR01';
END
$$;

-- Creates the ledger rows of the given key-days if missing and locks them
-- all, in (account_id, key_id, day) order. p_limit: the key's current daily
-- limit (NULL: none), stored in a new row. Returns every row locked.
CREATE FUNCTION meter_checks_lock(p_account text[], p_key text[], p_day date[],
				  p_limit bigint[])
	RETURNS TABLE (account_id text, key_id text, day date, spent_micros bigint,
		       held_micros bigint, limit_micros bigint)
	LANGUAGE plpgsql
	AS $$
BEGIN
	INSERT INTO key_day_ledger AS l (account_id, key_id, day, limit_micros)
		SELECT v.a, v.k, v.d, v.m
		FROM unnest(p_account, p_key, p_day, p_limit) AS v(a, k, d, m)
		ORDER BY v.a, v.k, v.d
	ON CONFLICT ON CONSTRAINT key_day_ledger_pkey DO NOTHING;
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

-- Writes a decided batch (the ledger rows are locked by meter_checks_lock in
-- the same transaction). Arrays of equal length per group:
--   ledger: new held figure and the key's current limit per key-day;
--   stale idempotency rows to delete (expired default wake keys);
--   idempotency rows to insert (first answers);
--   sandboxes to create; sandboxes to wake (state running, lease end);
--   holds to insert (one per day part).
-- p_now is the engine's clock: the lease start, created_at and state_since.
-- Any row found claimed by another process raises MTR01 (redo the batch).
CREATE FUNCTION meter_checks_apply(
	p_now timestamptz,
	l_account text[], l_key text[], l_day date[], l_held bigint[], l_limit bigint[],
	x_account text[], x_op text[], x_key text[],
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
		DELETE FROM idempotency_keys i
		USING unnest(x_account, x_op, x_key) AS v(a, o, k)
		WHERE i.account_id = v.a AND i.operation = v.o AND i.idempotency_key = v.k;
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

-- A lifecycle event of a sandbox from the control plane. Records it once
-- (a re-sent identical event changes nothing); moves the sandbox's state
-- unless the event is older than the state it has; a pause or stop
-- settles the sandbox's open holds of leases that started at or before
-- the event (meter_hold_close, 'settled'). known is false for an unknown
-- sandbox (nothing done).
CREATE FUNCTION meter_sandbox_event(p_sandbox text, p_type text, p_at timestamptz)
	RETURNS TABLE (known boolean, recorded boolean, state text, state_since timestamptz,
		       holds_settled integer, released_micros bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	acc text;
	r record;
	rel bigint;
	n integer := 0;
	total bigint := 0;
	rec boolean;
BEGIN
	SELECT s.account_id INTO acc FROM sandboxes s WHERE s.sandbox_id = p_sandbox;
	IF NOT FOUND THEN
		RETURN QUERY SELECT false, false, NULL::text, NULL::timestamptz, 0, 0::bigint;
		RETURN;
	END IF;
	INSERT INTO lifecycle_events (account_id, sandbox_id, type, at)
		VALUES (acc, p_sandbox, p_type, p_at)
	ON CONFLICT (account_id, sandbox_id, type, at) DO NOTHING;
	rec := FOUND;
	IF rec AND p_type IN ('paused', 'stopped') THEN
		-- Ledger rows first, in order; then each hold (meter_hold_close).
		PERFORM 1 FROM key_day_ledger l
			WHERE (l.account_id, l.key_id, l.day) IN
				(SELECT h.account_id, h.key_id, h.day FROM holds h
				 WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
				   AND h.status = 'open' AND h.lease_starts_at <= p_at)
			ORDER BY l.account_id, l.key_id, l.day
			FOR UPDATE OF l;
		FOR r IN SELECT h.hold_id FROM holds h
			 WHERE h.account_id = acc AND h.sandbox_id = p_sandbox
			   AND h.status = 'open' AND h.lease_starts_at <= p_at
			 ORDER BY h.key_id, h.day, h.hold_id LOOP
			rel := meter_hold_close(acc, r.hold_id, 'settled');
			IF rel IS NOT NULL THEN
				n := n + 1;
				total := total + rel;
			END IF;
		END LOOP;
	END IF;
	IF rec THEN
		UPDATE sandboxes s SET state = p_type, state_since = p_at
		WHERE s.account_id = acc AND s.sandbox_id = p_sandbox AND s.state_since <= p_at;
	END IF;
	RETURN QUERY SELECT true, rec, s.state::text, s.state_since, n, total
		FROM sandboxes s WHERE s.account_id = acc AND s.sandbox_id = p_sandbox;
END
$$;

-- Lease end without an event: closes ('released') the open holds whose
-- lease ended at or before p_now, at most about p_max of them. Ledger rows
-- are claimed with SKIP LOCKED, so several meterd processes sweep side by
-- side without waiting on each other (a row busy now is swept next time).
-- Returns the number of holds closed.
CREATE FUNCTION meter_holds_expire(p_now timestamptz, p_max integer) RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	r record;
	h record;
	n integer := 0;
BEGIN
	FOR r IN
		SELECT l.account_id, l.key_id, l.day FROM key_day_ledger l
		WHERE (l.account_id, l.key_id, l.day) IN
			(SELECT d.account_id, d.key_id, d.day FROM holds d
			 WHERE d.status = 'open' AND d.lease_ends_at <= p_now
			 ORDER BY d.lease_ends_at LIMIT p_max)
		ORDER BY l.account_id, l.key_id, l.day
		FOR UPDATE OF l SKIP LOCKED
	LOOP
		FOR h IN SELECT d.hold_id FROM holds d
			 WHERE d.account_id = r.account_id AND d.key_id = r.key_id AND d.day = r.day
			   AND d.status = 'open' AND d.lease_ends_at <= p_now
			 ORDER BY d.hold_id LOOP
			IF meter_hold_close(r.account_id, h.hold_id, 'released') IS NOT NULL THEN
				n := n + 1;
			END IF;
		END LOOP;
	END LOOP;
	RETURN n;
END
$$;
CREATE INDEX holds_open_key_day_idx ON holds (account_id, key_id, day) WHERE status = 'open';

-- Webhook outbox -----------------------------------------------------------------

CREATE TABLE webhook_outbox (
	account_id meter_id NOT NULL,
	event_id uuid NOT NULL DEFAULT gen_random_uuid(),
	key_id meter_id,
	type text NOT NULL CHECK (type IN ('spend_limit_crossed', 'hold_outrun')),
	dedup_key text NOT NULL,              -- once per key-day / per hold
	payload jsonb NOT NULL,
	attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
	next_attempt_at timestamptz NOT NULL DEFAULT now(),
	last_error text,
	delivered_at timestamptz,             -- set after a 2xx answer
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (account_id, event_id),
	UNIQUE (account_id, type, dedup_key)
);
CREATE INDEX webhook_outbox_due_idx ON webhook_outbox (next_attempt_at) WHERE delivered_at IS NULL;
COMMENT ON TABLE webhook_outbox IS 'Events for the control plane''s webhook, filled by triggers (whoever writes the ledger or holds), delivered at least once with retries.';

-- A key-day's metered spend reached its limit: once per key-day.
CREATE FUNCTION meter_outbox_spend() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)
		VALUES (NEW.account_id, NEW.key_id, 'spend_limit_crossed',
			NEW.key_id || '/' || NEW.day::text,
			jsonb_build_object('key_id', NEW.key_id, 'day', NEW.day::text,
					   'spent_micros', NEW.spent_micros,
					   'held_micros', NEW.held_micros,
					   'limit_micros', NEW.limit_micros))
	ON CONFLICT (account_id, type, dedup_key) DO NOTHING;
	RETURN NULL;
END
$$;
CREATE TRIGGER key_day_ledger_spend_insert AFTER INSERT ON key_day_ledger
	FOR EACH ROW
	WHEN (NEW.limit_micros IS NOT NULL AND NEW.spent_micros > 0
	      AND NEW.spent_micros >= NEW.limit_micros)
	EXECUTE FUNCTION meter_outbox_spend();
CREATE TRIGGER key_day_ledger_spend_update AFTER UPDATE ON key_day_ledger
	FOR EACH ROW
	WHEN (NEW.limit_micros IS NOT NULL AND NEW.spent_micros > OLD.spent_micros
	      AND NEW.spent_micros >= NEW.limit_micros)
	EXECUTE FUNCTION meter_outbox_spend();

-- A hold's consumption went past its amount (the lease was not honoured):
-- once per hold.
CREATE FUNCTION meter_outbox_outrun() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)
		VALUES (NEW.account_id, NEW.key_id, 'hold_outrun', NEW.hold_id::text,
			jsonb_build_object('key_id', NEW.key_id, 'sandbox_id', NEW.sandbox_id,
					   'hold_id', NEW.hold_id, 'day', NEW.day::text,
					   'amount_micros', NEW.amount_micros,
					   'consumed_micros', NEW.consumed_micros,
					   'outrun_micros', NEW.consumed_micros - NEW.amount_micros,
					   'lease_ends_at',
					   to_char(NEW.lease_ends_at AT TIME ZONE 'UTC',
						   'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')))
	ON CONFLICT (account_id, type, dedup_key) DO NOTHING;
	RETURN NULL;
END
$$;
CREATE TRIGGER holds_outrun AFTER UPDATE ON holds
	FOR EACH ROW
	WHEN (NEW.consumed_micros > NEW.amount_micros AND OLD.consumed_micros <= OLD.amount_micros)
	EXECUTE FUNCTION meter_outbox_outrun();
