-- meter: the day ledger's rules, shared by metering and by checks (DESIGN.md §4).
--
--   committed(key, day) = spent_micros + held_micros
--   held_micros         = Σ over the day's open holds of max(amount − consumed, 0)
--
-- Metering spends money on a key's day and consumes the sandbox's open holds
-- of that day (oldest first); checks place holds; pause, stop and lease end
-- close them. Every writer takes the key_day_ledger row(s) it touches FIRST,
-- in (account_id, key_id, day) order, and only then hold rows: one lock order
-- everywhere, so metering, checks and settlement never deadlock, and the holds
-- of a key's day cannot change under a writer that holds its ledger row.

-- Usage rows are split at the key's local midnight as well as at UTC hours, so
-- a key's day in any time zone (India's +05:30 included) sums exactly.
ALTER TABLE usage_hourly ADD COLUMN day date;
UPDATE usage_hourly SET day = (hour AT TIME ZONE 'UTC')::date;
ALTER TABLE usage_hourly ALTER COLUMN day SET NOT NULL;
ALTER TABLE usage_hourly DROP CONSTRAINT usage_hourly_pkey;
ALTER TABLE usage_hourly ADD PRIMARY KEY (account_id, sandbox_id, hour, price_version, day);
CREATE INDEX usage_hourly_account_key_day_idx ON usage_hourly (account_id, key_id, day);
COMMENT ON COLUMN usage_hourly.day IS 'The calendar day, in the key''s time zone when metered (UTC without a key), that this part of the hour belongs to.';

-- The calendar day of instant at in time zone tz.
CREATE FUNCTION meter_key_day(tz text, at timestamptz) RETURNS date
	LANGUAGE sql STABLE STRICT PARALLEL SAFE
	AS $$ SELECT (at AT TIME ZONE tz)::date $$;

-- The instant a calendar day begins in time zone tz.
CREATE FUNCTION meter_day_start(tz text, day date) RETURNS timestamptz
	LANGUAGE sql STABLE STRICT PARALLEL SAFE
	AS $$ SELECT day::timestamp AT TIME ZONE tz $$;

-- Adds metered money to the ledger. Element i: p_micros[i] µ$ of sandbox
-- p_sandbox[i] (key p_key[i] of account p_account[i]) spent on the key's day
-- p_day[i]. Each key-day's spent grows by its total; the sandbox's open holds
-- of that day are consumed oldest first and held shrinks by what they
-- covered. Money beyond the holds ("outrun": the lease was not honoured, or
-- there was no hold) is added to the newest open hold's consumed when there
-- is one, and returned per sandbox and day so the caller can warn the
-- control plane. Elements with p_key NULL (unattributed) are ignored here.
CREATE FUNCTION meter_ledger_spend(p_account text[], p_key text[], p_sandbox text[],
				   p_day date[], p_micros bigint[])
	RETURNS TABLE (account_id text, key_id text, sandbox_id text, day date,
		       spent_micros bigint, outrun_micros bigint)
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM unnest(p_micros) m WHERE m < 0 OR m IS NULL) THEN
		RAISE EXCEPTION 'meter_ledger_spend: negative or NULL amount' USING ERRCODE = '22023';
	END IF;

	IF to_regclass('pg_temp.meter_spend_in') IS NULL THEN
		CREATE TEMP TABLE meter_spend_in (
			a text, k text, s text, d date, m bigint, covered bigint
		) ON COMMIT DELETE ROWS;
	END IF;
	DELETE FROM meter_spend_in;
	INSERT INTO meter_spend_in
		SELECT t.a, t.k, t.s, t.d, sum(t.m)::bigint, 0
		FROM unnest(p_account, p_key, p_sandbox, p_day, p_micros) AS t(a, k, s, d, m)
		WHERE t.k IS NOT NULL AND t.m > 0
		GROUP BY t.a, t.k, t.s, t.d;

	-- 1. The ledger rows first, in order: spent grows.
	INSERT INTO key_day_ledger AS l (account_id, key_id, day, spent_micros, limit_micros)
		SELECT i.a, i.k, i.d, sum(i.m)::bigint,
		       (SELECT kk.daily_limit_micros FROM api_keys kk
			WHERE kk.account_id = i.a AND kk.key_id = i.k)
		FROM meter_spend_in i
		GROUP BY i.a, i.k, i.d
		ORDER BY i.a, i.k, i.d
	ON CONFLICT ON CONSTRAINT key_day_ledger_pkey DO UPDATE
		SET spent_micros = l.spent_micros + EXCLUDED.spent_micros, updated_at = now();

	-- 2. Consume the open holds of each sandbox's day, oldest first.
	WITH h AS (
		SELECT ho.account_id, ho.hold_id, i.a, i.s, i.d, i.m,
		       GREATEST(ho.amount_micros - ho.consumed_micros, 0) AS rem,
		       COALESCE(sum(GREATEST(ho.amount_micros - ho.consumed_micros, 0)) OVER (
				PARTITION BY ho.account_id, ho.sandbox_id, ho.day ORDER BY ho.hold_id
				ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before,
		       row_number() OVER (PARTITION BY ho.account_id, ho.sandbox_id, ho.day
					  ORDER BY ho.hold_id DESC) AS newest,
		       sum(GREATEST(ho.amount_micros - ho.consumed_micros, 0)) OVER (
				PARTITION BY ho.account_id, ho.sandbox_id, ho.day) AS total_rem
		FROM holds ho
		JOIN meter_spend_in i ON ho.account_id = i.a AND ho.sandbox_id = i.s AND ho.day = i.d
		WHERE ho.status = 'open'
	), take AS (
		SELECT h.account_id, h.hold_id, h.a, h.s, h.d,
		       LEAST(h.rem, GREATEST(h.m - h.before, 0)) AS covered,
		       LEAST(h.rem, GREATEST(h.m - h.before, 0))
			+ CASE WHEN h.newest = 1 THEN GREATEST(h.m - h.total_rem, 0) ELSE 0 END AS add
		FROM h
	), upd AS (
		UPDATE holds ho SET consumed_micros = ho.consumed_micros + take.add
		FROM take
		WHERE ho.account_id = take.account_id AND ho.hold_id = take.hold_id AND take.add > 0
		RETURNING take.a, take.s, take.d, take.covered
	)
	UPDATE meter_spend_in i SET covered = c.covered
	FROM (SELECT upd.a, upd.s, upd.d, sum(upd.covered)::bigint AS covered
	      FROM upd GROUP BY upd.a, upd.s, upd.d) c
	WHERE i.a = c.a AND i.s = c.s AND i.d = c.d;

	-- 3. held shrinks by what the holds covered.
	UPDATE key_day_ledger l SET held_micros = l.held_micros - c.covered, updated_at = now()
	FROM (SELECT i.a, i.k, i.d, sum(i.covered)::bigint AS covered
	      FROM meter_spend_in i GROUP BY i.a, i.k, i.d) c
	WHERE l.account_id = c.a AND l.key_id = c.k AND l.day = c.d AND c.covered > 0;

	RETURN QUERY SELECT i.a, i.k, i.s, i.d, i.m, i.m - i.covered FROM meter_spend_in i;
END
$$;

-- Closes an open hold: p_status 'settled' (pause, stop: what was metered is
-- kept) or 'released' (lease end, nothing more to come). What remains of it
-- leaves held. Takes the ledger row, then the hold. Returns the µ$ released,
-- or NULL when the hold was not open (closing twice changes nothing).
CREATE FUNCTION meter_hold_close(p_account text, p_hold bigint, p_status text)
	RETURNS bigint
	LANGUAGE plpgsql
	AS $$
DECLARE
	h holds%ROWTYPE;
	rem bigint;
BEGIN
	IF p_status NOT IN ('settled', 'released') THEN
		RAISE EXCEPTION 'meter_hold_close: status must be settled or released'
			USING ERRCODE = '22023';
	END IF;
	SELECT * INTO h FROM holds WHERE account_id = p_account AND hold_id = p_hold;
	IF NOT FOUND OR h.status <> 'open' THEN
		RETURN NULL;
	END IF;
	PERFORM 1 FROM key_day_ledger
		WHERE account_id = h.account_id AND key_id = h.key_id AND day = h.day FOR UPDATE;
	SELECT * INTO h FROM holds WHERE account_id = p_account AND hold_id = p_hold FOR UPDATE;
	IF h.status <> 'open' THEN
		RETURN NULL;
	END IF;
	rem := GREATEST(h.amount_micros - h.consumed_micros, 0);
	UPDATE holds SET status = p_status, settled_at = now()
		WHERE account_id = p_account AND hold_id = p_hold;
	UPDATE key_day_ledger SET held_micros = held_micros - rem, updated_at = now()
		WHERE account_id = h.account_id AND key_id = h.key_id AND day = h.day;
	RETURN rem;
END
$$;
