-- meter: meter_ledger_spend (sql/0002_ledger.sql) without its temporary
-- table, in two statements; ingestion calls it on every call for every
-- metered sandbox. The first version's scratch table, three sorts for its
-- window functions and numeric arithmetic cost more than the hold updates
-- themselves. The rules are unchanged:
--   1. the key-day ledger rows first, in (account, key, day) order: spent
--      grows by the day's total;
--   2. each sandbox's open holds of that day are consumed oldest first,
--      money beyond them ("outrun") is added to the newest open hold's
--      consumed, and held shrinks by what the holds covered.
-- Step 2 is one statement: holds and the ledger's held are written in it
-- after the ledger rows were taken in step 1, so the lock order (ledger rows,
-- then holds) is kept. A sandbox-day with one open hold (nearly always) needs
-- no ordering: the hold covers what it can and takes the whole amount; only
-- days with several open holds go through the window functions.
CREATE OR REPLACE FUNCTION meter_ledger_spend(p_account text[], p_key text[], p_sandbox text[],
					      p_day date[], p_micros bigint[])
	RETURNS TABLE (account_id text, key_id text, sandbox_id text, day date,
		       spent_micros bigint, outrun_micros bigint)
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM unnest(p_micros) m WHERE m < 0 OR m IS NULL) THEN
		RAISE EXCEPTION 'meter_ledger_spend: negative or NULL amount' USING ERRCODE = '22023';
	END IF;
	-- 1. The ledger rows first, in order: spent grows.
	INSERT INTO key_day_ledger AS l (account_id, key_id, day, spent_micros, limit_micros)
		SELECT t.a, t.k, t.d, sum(t.m)::bigint,
		       (SELECT kk.daily_limit_micros FROM api_keys kk
			WHERE kk.account_id = t.a AND kk.key_id = t.k)
		FROM unnest(p_account, p_key, p_day, p_micros) AS t(a, k, d, m)
		WHERE t.k IS NOT NULL AND t.m > 0
		GROUP BY t.a, t.k, t.d
		ORDER BY t.a, t.k, t.d
	ON CONFLICT ON CONSTRAINT key_day_ledger_pkey DO UPDATE
		SET spent_micros = l.spent_micros + EXCLUDED.spent_micros, updated_at = now();
	-- 2. Consume the open holds of each sandbox's day, oldest first; held
	-- shrinks by what they covered.
	RETURN QUERY
	WITH i AS (
		SELECT t.a, t.k, t.s, t.d, sum(t.m)::bigint AS m
		FROM unnest(p_account, p_key, p_sandbox, p_day, p_micros) AS t(a, k, s, d, m)
		WHERE t.k IS NOT NULL AND t.m > 0
		GROUP BY t.a, t.k, t.s, t.d
	), h AS MATERIALIZED (
		SELECT ho.account_id AS ha, ho.hold_id, i.a, i.k, i.s, i.d, i.m,
		       GREATEST(ho.amount_micros - ho.consumed_micros, 0)::bigint AS rem
		FROM i
		JOIN holds ho ON ho.account_id = i.a AND ho.sandbox_id = i.s AND ho.day = i.d
		WHERE ho.status = 'open'
	), multi AS (
		SELECT h.a, h.s, h.d FROM h GROUP BY h.a, h.s, h.d HAVING count(*) > 1
	), take AS (
		SELECT h.ha, h.hold_id, h.a, h.k, h.s, h.d, LEAST(h.rem, h.m) AS covered, h.m AS add
		FROM h
		WHERE NOT EXISTS (SELECT 1 FROM multi
				  WHERE multi.a = h.a AND multi.s = h.s AND multi.d = h.d)
		UNION ALL
		SELECT w.ha, w.hold_id, w.a, w.k, w.s, w.d, c.covered,
		       c.covered + CASE WHEN w.hold_id = w.newest
					THEN GREATEST(w.m - w.total_rem, 0) ELSE 0 END
		FROM (SELECT h.*, COALESCE(sum(h.rem) OVER w_before, 0)::bigint AS before,
			     max(h.hold_id) OVER w_all AS newest,
			     (sum(h.rem) OVER w_all)::bigint AS total_rem
		      FROM h JOIN multi ON multi.a = h.a AND multi.s = h.s AND multi.d = h.d
		      WINDOW w_all AS (PARTITION BY h.a, h.s, h.d),
			     w_before AS (w_all ORDER BY h.hold_id
					  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) w
		CROSS JOIN LATERAL (SELECT LEAST(w.rem, GREATEST(w.m - w.before, 0)) AS covered) c
	), upd AS (
		UPDATE holds ho SET consumed_micros = ho.consumed_micros + take.add
		FROM take
		WHERE ho.account_id = take.ha AND ho.hold_id = take.hold_id AND take.add > 0
		RETURNING take.a, take.k, take.s, take.d, take.covered
	), cov AS (
		SELECT upd.a, upd.k, upd.s, upd.d, sum(upd.covered)::bigint AS covered
		FROM upd GROUP BY upd.a, upd.k, upd.s, upd.d
	), held AS (
		UPDATE key_day_ledger l SET held_micros = l.held_micros - c.covered, updated_at = now()
		FROM (SELECT cov.a, cov.k, cov.d, sum(cov.covered)::bigint AS covered
		      FROM cov GROUP BY cov.a, cov.k, cov.d) c
		WHERE l.account_id = c.a AND l.key_id = c.k AND l.day = c.d AND c.covered > 0
	)
	SELECT i.a, i.k, i.s, i.d, i.m, i.m - COALESCE(cov.covered, 0)
	FROM i LEFT JOIN cov ON cov.a = i.a AND cov.k = i.k AND cov.s = i.s AND cov.d = i.d;
END
$$;

