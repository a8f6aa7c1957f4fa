-- meter: the rows a check writes, made cheaper to write (issue 4's
-- throughput), with the same guarantees.
--
-- An allowed create writes a sandbox, a hold and its stored answer. Most of
-- PostgreSQL's time on them went to checks that repeat what is already
-- known: five foreign keys, each a query of its own per row with a row
-- lock on the key, account or sandbox it names (the hot key's row locked by
-- every one of its checks), eight id domains matched against a regular
-- expression (values copied from rows already checked), and the answer
-- parsed into jsonb although it is only ever read back as text. The batch
-- statement of a check batch measured about 100 µs a check this way and
-- about 55 without them.
--
-- So, on holds, sandboxes and idempotency_keys:
--   * the foreign keys to accounts, api_keys and sandboxes become one check
--     per statement over the rows it inserted (a transition table): every
--     referenced row must exist, as before, with the same SQLSTATE (23503),
--     but in one query a statement and without locking the rows named;
--     an update of a referencing column is checked per row, and the rows
--     referred to are never deleted nor their ids changed (accounts, keys
--     and sandboxes never were; now the database refuses it), which is
--     what the row locks were for;
--   * an id column that names another row is plain text: it can only hold
--     an id that exists there, already checked by that row's domain. The
--     ids a check brings (sandbox_id, idempotency_key) keep theirs;
--   * the stored answer is text, replayed byte for byte as first sent;
--   * a create's answer under the default idempotency key (the sandbox id,
--     unique already) is kept on the sandbox row it made instead of in a
--     row and index of its own; idempotency_keys keeps the answers under
--     other keys, and of wakes. check_answers shows them all as one.
-- The foreign keys of samples, sandbox_meter, usage_hourly,
-- key_day_ledger, lifecycle_events and api_keys are unchanged.

ALTER TABLE holds DROP CONSTRAINT holds_account_id_key_id_fkey,
	DROP CONSTRAINT holds_account_id_sandbox_id_fkey,
	ALTER COLUMN account_id TYPE text, ALTER COLUMN key_id TYPE text,
	ALTER COLUMN sandbox_id TYPE text;
-- (The trigger of 0010 names key_id: made again as it was.)
DROP TRIGGER sandboxes_ingest_generation ON sandboxes;
ALTER TABLE sandboxes DROP CONSTRAINT sandboxes_account_id_fkey,
	DROP CONSTRAINT sandboxes_account_id_key_id_fkey,
	ALTER COLUMN account_id TYPE text, ALTER COLUMN key_id TYPE text;
CREATE TRIGGER sandboxes_ingest_generation
	AFTER UPDATE OF key_id, vcpus, memory_mib, storage_mib ON sandboxes
	FOR EACH ROW WHEN (OLD.key_id IS DISTINCT FROM NEW.key_id OR OLD.vcpus <> NEW.vcpus
			   OR OLD.memory_mib <> NEW.memory_mib OR OLD.storage_mib <> NEW.storage_mib)
	EXECUTE FUNCTION meter_ingest_generation_bump();
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_account_id_fkey,
	ALTER COLUMN account_id TYPE text,
	ALTER COLUMN response TYPE text USING response::text;
-- Nothing reads the answers by age.
DROP INDEX idempotency_keys_created_idx;

ALTER TABLE sandboxes ADD COLUMN create_request_sha256 meter_sha256,
	ADD COLUMN create_response text,
	ADD CONSTRAINT sandboxes_create_answer
		CHECK ((create_request_sha256 IS NULL) = (create_response IS NULL));
COMMENT ON COLUMN sandboxes.create_response IS 'The first answer to its create under the default idempotency key (the sandbox id), replayed to retries; NULL when it was made under another key (idempotency_keys) or by metering.';
UPDATE sandboxes s SET create_request_sha256 = i.request_sha256, create_response = i.response
	FROM idempotency_keys i
	WHERE i.account_id = s.account_id AND i.operation = 'create'
	  AND i.idempotency_key = s.sandbox_id;
DELETE FROM idempotency_keys i USING sandboxes s
	WHERE i.account_id = s.account_id AND i.operation = 'create'
	  AND i.idempotency_key = s.sandbox_id;

-- Every stored first answer, wherever it is kept.
CREATE VIEW check_answers AS
	SELECT account_id, operation::text AS operation, idempotency_key::text AS idempotency_key,
	       request_sha256, status_code, response, created_at
	FROM idempotency_keys
	UNION ALL
	SELECT account_id, 'create', sandbox_id::text, create_request_sha256, 200, create_response,
	       created_at
	FROM sandboxes WHERE create_response IS NOT NULL;
COMMENT ON VIEW check_answers IS 'Every first answer stored under an idempotency key: idempotency_keys, and creates under the default key on their sandbox row.';

-- Raised for a row naming a key, account or sandbox that does not exist.
CREATE FUNCTION meter_reference_missing(what text) RETURNS integer
	LANGUAGE plpgsql
	AS $$
BEGIN
	RAISE EXCEPTION 'insert or update violates a reference: %', what
		USING ERRCODE = 'foreign_key_violation';
END
$$;

-- Inserted rows: one query per statement. Each reference is looked up by
-- the unique id alone (key ids and sandbox ids are unique across accounts)
-- and its account compared: one index probe per row whatever the
-- statistics say, where a join on (account, id) can be planned over an
-- index of the account alone.
CREATE FUNCTION meter_holds_refs() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM meter_new n
		   WHERE (SELECT k.account_id FROM api_keys k WHERE k.key_id = n.key_id)
			 IS DISTINCT FROM n.account_id
		      OR (SELECT s.account_id FROM sandboxes s WHERE s.sandbox_id = n.sandbox_id)
			 IS DISTINCT FROM n.account_id) THEN
		PERFORM meter_reference_missing('a hold''s key or sandbox');
	END IF;
	RETURN NULL;
END
$$;
CREATE TRIGGER holds_refs AFTER INSERT ON holds REFERENCING NEW TABLE AS meter_new
	FOR EACH STATEMENT EXECUTE FUNCTION meter_holds_refs();

CREATE FUNCTION meter_sandboxes_refs() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM meter_new n
		   WHERE NOT EXISTS (SELECT 1 FROM accounts a WHERE a.account_id = n.account_id)
		      OR (n.key_id IS NOT NULL
			  AND (SELECT k.account_id FROM api_keys k WHERE k.key_id = n.key_id)
			      IS DISTINCT FROM n.account_id)) THEN
		PERFORM meter_reference_missing('a sandbox''s account or key');
	END IF;
	RETURN NULL;
END
$$;
CREATE TRIGGER sandboxes_refs AFTER INSERT ON sandboxes REFERENCING NEW TABLE AS meter_new
	FOR EACH STATEMENT EXECUTE FUNCTION meter_sandboxes_refs();

CREATE FUNCTION meter_idempotency_refs() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM meter_new n
		   WHERE NOT EXISTS (SELECT 1 FROM accounts a WHERE a.account_id = n.account_id)) THEN
		PERFORM meter_reference_missing('a stored answer''s account');
	END IF;
	RETURN NULL;
END
$$;
CREATE TRIGGER idempotency_keys_refs AFTER INSERT ON idempotency_keys
	REFERENCING NEW TABLE AS meter_new
	FOR EACH STATEMENT EXECUTE FUNCTION meter_idempotency_refs();

-- An update of a referencing column (the service makes none): per row,
-- the same checks. Triggers with column lists fire only when a statement
-- sets one of them, so consumption and settlement pay nothing.
CREATE FUNCTION meter_refs_row() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF TG_TABLE_NAME = 'holds' THEN
		IF (SELECT k.account_id FROM api_keys k WHERE k.key_id = NEW.key_id)
		       IS DISTINCT FROM NEW.account_id
		   OR (SELECT s.account_id FROM sandboxes s WHERE s.sandbox_id = NEW.sandbox_id)
		       IS DISTINCT FROM NEW.account_id THEN
			PERFORM meter_reference_missing('a hold''s key or sandbox');
		END IF;
	ELSIF TG_TABLE_NAME = 'sandboxes' THEN
		IF NOT EXISTS (SELECT 1 FROM accounts a WHERE a.account_id = NEW.account_id)
		   OR (NEW.key_id IS NOT NULL
		       AND (SELECT k.account_id FROM api_keys k WHERE k.key_id = NEW.key_id)
			   IS DISTINCT FROM NEW.account_id) THEN
			PERFORM meter_reference_missing('a sandbox''s account or key');
		END IF;
	ELSIF NOT EXISTS (SELECT 1 FROM accounts a WHERE a.account_id = NEW.account_id) THEN
		PERFORM meter_reference_missing('a stored answer''s account');
	END IF;
	RETURN NULL;
END
$$;
CREATE TRIGGER holds_refs_update AFTER UPDATE OF account_id, key_id, sandbox_id ON holds
	FOR EACH ROW EXECUTE FUNCTION meter_refs_row();
CREATE TRIGGER sandboxes_refs_update AFTER UPDATE OF account_id, key_id ON sandboxes
	FOR EACH ROW EXECUTE FUNCTION meter_refs_row();
CREATE TRIGGER idempotency_keys_refs_update AFTER UPDATE OF account_id ON idempotency_keys
	FOR EACH ROW EXECUTE FUNCTION meter_refs_row();

-- The rows referred to keep their ids and are never deleted (a key is
-- revoked, a sandbox stopped; the ledger is an audit trail): what the
-- foreign keys' row locks guarded, without a lock per referring row.
CREATE FUNCTION meter_referred() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		RAISE EXCEPTION '% rows are never deleted', TG_TABLE_NAME
			USING ERRCODE = 'foreign_key_violation';
	END IF;
	IF OLD.account_id IS DISTINCT FROM NEW.account_id
	   OR (TG_TABLE_NAME = 'api_keys' AND OLD.key_id IS DISTINCT FROM NEW.key_id)
	   OR (TG_TABLE_NAME = 'sandboxes' AND OLD.sandbox_id IS DISTINCT FROM NEW.sandbox_id) THEN
		RAISE EXCEPTION 'the ids of % rows never change', TG_TABLE_NAME
			USING ERRCODE = 'foreign_key_violation';
	END IF;
	RETURN NULL;
END
$$;
CREATE TRIGGER accounts_referred AFTER DELETE OR UPDATE OF account_id ON accounts
	FOR EACH ROW EXECUTE FUNCTION meter_referred();
CREATE TRIGGER api_keys_referred AFTER DELETE OR UPDATE OF account_id, key_id ON api_keys
	FOR EACH ROW EXECUTE FUNCTION meter_referred();
CREATE TRIGGER sandboxes_referred AFTER DELETE OR UPDATE OF account_id, sandbox_id ON sandboxes
	FOR EACH ROW EXECUTE FUNCTION meter_referred();

-- As in 0011, with the answer stored as the text it was sent as (c_sha and
-- c_response: a create's under the default key, on its sandbox row; NULL
-- when i_* has it), and the new rows inserted plainly: one another process
-- inserted since the batch read is a unique violation (23505), which has
-- the batch decided again as MTR01 did, without the cost of a speculative
-- insertion per row.
DROP FUNCTION meter_checks_apply(timestamptz, text[], text[], date[], bigint[], bigint[],
				 text[], text[], text[], text[], text[], text[], text[], text[],
				 integer[], text[], text[], text[], text[], integer[], bigint[],
				 bigint[], timestamptz[], text[], text[], timestamptz[], text[],
				 text[], text[], date[], bigint[], timestamptz[]);
CREATE FUNCTION meter_checks_apply(
	p_now timestamptz,
	l_account text[], l_key text[], l_day date[], l_held bigint[], l_limit bigint[],
	x_account text[], x_op text[], x_key text[], x_xmin text[],
	i_account text[], i_op text[], i_key text[], i_sha text[], i_status integer[],
	i_response text[],
	c_account text[], c_sandbox text[], c_key text[], c_vcpus integer[], c_memory bigint[],
	c_max_cost bigint[], c_lease_end timestamptz[], c_sha text[], c_response text[],
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
			SELECT v.a, v.o, v.k, decode(v.h, 'hex'), v.s, v.r, p_now
			FROM unnest(i_account, i_op, i_key, i_sha, i_status, i_response)
				AS v(a, o, k, h, s, r)
			ORDER BY v.a, v.o, v.k;
	END IF;
	IF cardinality(c_account) > 0 THEN
		INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state,
				       max_cost_micros, created_at, state_since, lease_ends_at,
				       create_request_sha256, create_response)
			SELECT v.a, v.s, v.k, v.c, v.m, 'running', v.x, p_now, p_now, v.e,
			       decode(v.h, 'hex'), v.r
			FROM unnest(c_account, c_sandbox, c_key, c_vcpus, c_memory, c_max_cost,
				    c_lease_end, c_sha, c_response) AS v(a, s, k, c, m, x, e, h, r)
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
	RETURN 0;
END
$$;
