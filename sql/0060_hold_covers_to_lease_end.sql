-- meter: a hold consumes no usage from after its lease's end.
--
-- 0056 gives a stretch of usage to the open holds whose lease had started
-- by its start and that were not a kept tail whose event came by then. A
-- hold no event has settled (settles_at NULL) was eligible with no end, so
-- running time past its lease's end, taken in before the lease-end sweep
-- (about once a second) settled it, went onto the hold: a review saw
-- consumed_micros 32 of an amount of 28 in three of six runs of one script
-- and 26 in the other three, the sweep first (settles_at = the lease end),
-- and that figure in the lease_ended event; with the agent's clock a
-- second ahead, the same sample came while the lease still ran, and
-- hold_outrun "hold_consumed" was sent for a sandbox that stayed within
-- its size through its lease. Now a hold covers usage up to its settles_at
-- or, when nothing has settled it, its lease's end: the moment before the
-- sweep is treated as the sweep treats it, as 0044 does for the report.
-- A hold settled by an event dated after its lease's end and grace
-- (settles_at > lease_ends_at) still covers up to that event, unless a
-- later lease had begun by then (meter_hold_covers_to). Ingestion's C path
-- (SQL_HOLDS_OPEN, SQL_HOLD_CUTS) reads the same function. Spent is
-- unchanged: only which hold a micro lands on, if any, moves. The
-- function is 0058's otherwise, restated whole, as a function is replaced.

-- The end of the time a hold covers: its settles_at, or its lease's end
-- while nothing has settled it; and its lease's end as well when it was
-- settled past that end and a later lease of the sandbox had begun by its
-- settles_at (a wake, a renewal: the sandbox ran on that one), whichever
-- came first, the event or the later lease's check (0061).
CREATE FUNCTION meter_hold_covers_to(p_account text, p_sandbox text, p_starts timestamptz,
				     p_ends timestamptz, p_settles timestamptz)
	RETURNS timestamptz
	LANGUAGE sql STABLE
	AS $$
	SELECT CASE WHEN p_settles IS NULL THEN p_ends
		    WHEN p_settles > p_ends
			 AND meter_hold_start_next(p_account, p_sandbox, p_starts) <= p_settles
			THEN p_ends
		    ELSE p_settles END
$$;

CREATE OR REPLACE FUNCTION meter_ledger_spend(p_account text[], p_key text[], p_sandbox text[],
				   p_day date[], p_from timestamptz[], p_to timestamptz[],
				   p_micros bigint[])
	RETURNS TABLE (account_id text, key_id text, sandbox_id text, day date,
		       spent_micros bigint, outrun_micros bigint)
	LANGUAGE plpgsql
	AS $$
DECLARE
	n integer := COALESCE(cardinality(p_micros), 0);
	pa text[];
	pk text[];
	ps text[];
	pd date[];
	pf timestamptz[];
	pt timestamptz[];
	pm bigint[];
	hid bigint[];
	hrem bigint[];
	hstart timestamptz[];
	hsettles timestamptz[];
	hadd bigint[];
	i integer := 1;
	j integer;
	nh integer;
	newest integer;
	v_spent bigint;
	v_covered bigint;
	v_left bigint;
	v_take bigint;
	v_part bigint;
	v_a timestamptz;
	v_b timestamptz;
	v_to numeric;
BEGIN
	IF COALESCE(cardinality(p_account), 0) <> n OR COALESCE(cardinality(p_key), 0) <> n
	   OR COALESCE(cardinality(p_sandbox), 0) <> n OR COALESCE(cardinality(p_day), 0) <> n
	   OR COALESCE(cardinality(p_from), 0) <> n OR COALESCE(cardinality(p_to), 0) <> n THEN
		RAISE EXCEPTION 'meter_ledger_spend: arrays of different lengths' USING ERRCODE = '22023';
	END IF;
	IF EXISTS (SELECT 1 FROM unnest(p_micros) m WHERE m < 0 OR m IS NULL) THEN
		RAISE EXCEPTION 'meter_ledger_spend: negative or NULL amount' USING ERRCODE = '22023';
	END IF;
	IF EXISTS (SELECT 1 FROM unnest(p_from, p_to) AS t(f, e)
		   WHERE t.f IS NULL OR t.e IS NULL OR t.f > t.e) THEN
		RAISE EXCEPTION 'meter_ledger_spend: a piece without its time' USING ERRCODE = '22023';
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
	-- 2. The pieces by sandbox-day, each day's in time order.
	SELECT array_agg(t.a ORDER BY t.a, t.s, t.d, t.k, t.f, t.e, t.i),
	       array_agg(t.k ORDER BY t.a, t.s, t.d, t.k, t.f, t.e, t.i),
	       array_agg(t.s ORDER BY t.a, t.s, t.d, t.k, t.f, t.e, t.i),
	       array_agg(t.d ORDER BY t.a, t.s, t.d, t.k, t.f, t.e, t.i),
	       array_agg(t.f ORDER BY t.a, t.s, t.d, t.k, t.f, t.e, t.i),
	       array_agg(t.e ORDER BY t.a, t.s, t.d, t.k, t.f, t.e, t.i),
	       array_agg(t.m ORDER BY t.a, t.s, t.d, t.k, t.f, t.e, t.i)
		INTO pa, pk, ps, pd, pf, pt, pm
		FROM unnest(p_account, p_key, p_sandbox, p_day, p_from, p_to, p_micros)
			WITH ORDINALITY AS t(a, k, s, d, f, e, m, i)
		WHERE t.k IS NOT NULL AND t.m > 0;
	n := COALESCE(cardinality(pm), 0);
	WHILE i <= n LOOP
		-- 3. The sandbox-day's open holds, oldest first, locked.
		SELECT array_agg(x.hold_id ORDER BY x.hold_id), array_agg(x.rem ORDER BY x.hold_id),
		       array_agg(x.lease_starts_at ORDER BY x.hold_id),
		       array_agg(x.covers_to ORDER BY x.hold_id)
			INTO hid, hrem, hstart, hsettles
			FROM (SELECT ho.hold_id, ho.lease_starts_at,
				     meter_hold_covers_to(ho.account_id, ho.sandbox_id,
							  ho.lease_starts_at, ho.lease_ends_at,
							  ho.settles_at) AS covers_to,
				     GREATEST(ho.amount_micros - ho.consumed_micros, 0)::bigint AS rem
			      FROM holds ho
			      WHERE ho.account_id = pa[i] AND ho.sandbox_id = ps[i] AND ho.day = pd[i]
				    AND ho.status = 'open'
			      ORDER BY ho.hold_id
			      FOR UPDATE) x;
		nh := COALESCE(cardinality(hid), 0);
		hadd := array_fill(0::bigint, ARRAY[nh]);
		v_spent := 0;
		v_covered := 0;
		-- 4. Each piece by the holds eligible for it, oldest first, the
		-- rest to the newest of them.
		j := i;
		LOOP
			v_spent := v_spent + pm[j];
			v_left := pm[j];
			v_a := pf[j];
			v_to := meter_usec(pt[j]);
			-- Cut where a hold's lease starts or its cover ends,
			-- each stretch's share floor(what is left × its time /
			-- the time left), but where a lease starts the time after
			-- the cut floor(what is left × that time / the time left)
			-- and the stretch before it the rest, as ledger_consume does.
			LOOP
				v_b := pt[j];
				FOR h IN 1 .. nh LOOP
					IF hstart[h] > v_a AND hstart[h] < v_b THEN
						v_b := hstart[h];
					END IF;
					IF hsettles[h] > v_a AND hsettles[h] < v_b THEN
						v_b := hsettles[h];
					END IF;
				END LOOP;
				IF v_b >= pt[j] THEN
					v_part := v_left;
				ELSIF v_b = ANY (hstart) THEN
					v_part := v_left - div(v_left::numeric * (v_to - meter_usec(v_b)),
							       v_to - meter_usec(v_a))::bigint;
				ELSE
					v_part := div(v_left::numeric * (meter_usec(v_b) - meter_usec(v_a)),
						      v_to - meter_usec(v_a))::bigint;
				END IF;
				v_left := v_left - v_part;
				newest := 0;
				FOR h IN 1 .. nh LOOP
					IF hstart[h] < v_b AND v_a < hsettles[h] THEN
						v_take := LEAST(GREATEST(hrem[h] - hadd[h], 0), v_part);
						hadd[h] := hadd[h] + v_take;
						v_part := v_part - v_take;
						v_covered := v_covered + v_take;
						newest := h;
					END IF;
				END LOOP;
				IF newest > 0 THEN
					hadd[newest] := hadd[newest] + v_part;
				END IF;
				EXIT WHEN v_b >= pt[j];
				v_a := v_b;
			END LOOP;
			j := j + 1;
			EXIT WHEN j > n OR pa[j] <> pa[i] OR pk[j] <> pk[i] OR ps[j] <> ps[i]
				  OR pd[j] <> pd[i];
		END LOOP;
		-- 5. Their consumption, and held shrinks by what they covered.
		UPDATE holds ho SET consumed_micros = ho.consumed_micros + u.add
			FROM unnest(hid, hadd) AS u(id, add)
			WHERE ho.account_id = pa[i] AND ho.hold_id = u.id AND u.add > 0;
		IF v_covered > 0 THEN
			UPDATE key_day_ledger l SET held_micros = l.held_micros - v_covered,
						    updated_at = now()
				WHERE l.account_id = pa[i] AND l.key_id = pk[i] AND l.day = pd[i];
		END IF;
		account_id := pa[i];
		key_id := pk[i];
		sandbox_id := ps[i];
		day := pd[i];
		spent_micros := v_spent;
		outrun_micros := v_spent - v_covered;
		RETURN NEXT;
		i := j;
	END LOOP;
END
$$;
