-- meter: the initial schema (DESIGN.md). PostgreSQL 15.
--
-- The migration runner wraps this file in one transaction: no BEGIN/COMMIT here.
--
-- Conventions:
-- * Every table carries account_id as the first column of its primary key, so
--   the schema can be sharded by account (Citus) later. The exceptions are
--   schema_migrations (the runner's own record), price_book (a global
--   reference table) and ingest_watermarks (per collector host, not per account).
-- * Money is integer microdollars in bigint columns named *_micros, never
--   negative; quantities are exact integers (µs, millicore-µs, MiB-µs).
-- * All times are timestamptz; sessions run with TimeZone=UTC, but nothing
--   here depends on the session's time zone.
-- * What must never be stored cannot be: domains and CHECKs reject it.

-- Ids: 1 to 64 characters of A-Z a-z 0-9 _ . - (the API's rule).
CREATE DOMAIN meter_id AS text
	CHECK (VALUE ~ '^[A-Za-z0-9_.-]{1,64}$');

-- Money in microdollars and exact quantities: never negative.
CREATE DOMAIN meter_micros AS bigint
	CHECK (VALUE >= 0);
CREATE DOMAIN meter_qty AS bigint
	CHECK (VALUE >= 0);

CREATE DOMAIN meter_state AS text
	CHECK (VALUE IN ('running', 'paused', 'stopped'));
CREATE DOMAIN meter_role AS text
	CHECK (VALUE IN ('full', 'read_only'));
CREATE DOMAIN meter_hold_status AS text
	CHECK (VALUE IN ('open', 'settled', 'released'));
CREATE DOMAIN meter_operation AS text
	CHECK (VALUE IN ('create', 'wake'));
CREATE DOMAIN meter_vcpus AS integer
	CHECK (VALUE BETWEEN 1 AND 1024);
CREATE DOMAIN meter_sha256 AS bytea
	CHECK (octet_length(VALUE) = 32);

-- True when tz is a time zone name PostgreSQL knows from the IANA database
-- (exact spelling: 'Europe/Paris', 'UTC'; not 'utc', '+05:00' or 'CET-1').
CREATE FUNCTION meter_is_time_zone(tz text) RETURNS boolean
	LANGUAGE sql STABLE STRICT PARALLEL SAFE
	AS $$ SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names WHERE name = tz) $$;

-- A domain check runs only when a value is stored, not on every UPDATE of the row.
CREATE DOMAIN meter_time_zone AS text
	CHECK (meter_is_time_zone(VALUE));

COMMENT ON TABLE schema_migrations IS 'Applied migrations (version, file name, sha256 of the text); not keyed by account: the runner''s own record.';

-- Accounts -----------------------------------------------------------------

CREATE TABLE accounts (
	account_id meter_id NOT NULL,
	name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (account_id)
);
COMMENT ON TABLE accounts IS 'Customer accounts; ''unattributed'' (seeded) holds sandboxes the collector sees without any key.';

INSERT INTO accounts (account_id, name)
	VALUES ('unattributed', 'Sandboxes metered without an API key');

-- API keys -----------------------------------------------------------------

CREATE TABLE api_keys (
	account_id meter_id NOT NULL REFERENCES accounts (account_id),
	key_id meter_id NOT NULL UNIQUE,
	secret_hash meter_sha256 NOT NULL,       -- SHA-256 of the secret; the secret is never stored
	role meter_role NOT NULL,
	daily_limit_micros meter_micros,         -- NULL: no daily limit
	time_zone meter_time_zone NOT NULL DEFAULT 'UTC', -- the key's day is a calendar day here
	created_at timestamptz NOT NULL DEFAULT now(),
	revoked_at timestamptz CHECK (revoked_at >= created_at),
	PRIMARY KEY (account_id, key_id)
);
COMMENT ON TABLE api_keys IS 'Account API keys: role, hashed secret, daily spending limit and the time zone of its day.';

-- Price book ---------------------------------------------------------------

CREATE TABLE price_book (
	version integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	effective_from timestamptz NOT NULL UNIQUE,
	-- Same bounds as price_rates_validate() in meter/money.h.
	cpu_micros_per_vcpu_hour meter_micros NOT NULL CHECK (cpu_micros_per_vcpu_hour <= 1000000000000),
	memory_micros_per_gib_hour meter_micros NOT NULL CHECK (memory_micros_per_gib_hour <= 1000000000000),
	storage_micros_per_gib_hour meter_micros NOT NULL CHECK (storage_micros_per_gib_hour <= 1000000000000),
	floor_millicores bigint NOT NULL CHECK (floor_millicores BETWEEN 0 AND 1000000),
	free_sandbox_hours integer NOT NULL DEFAULT 50 CHECK (free_sandbox_hours >= 0),
	storage_price_assumed boolean NOT NULL DEFAULT false, -- true: the storage rate is our assumption, not a documented price
	created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE price_book IS 'Versioned global price book (not keyed by account): a version applies from effective_from on and never rewrites the past.';

INSERT INTO price_book (effective_from, cpu_micros_per_vcpu_hour, memory_micros_per_gib_hour,
			storage_micros_per_gib_hour, floor_millicores, free_sandbox_hours,
			storage_price_assumed)
	VALUES ('1970-01-01 00:00:00+00', 25000, 7500, 100, 50, 50, true);

-- Sandboxes ----------------------------------------------------------------

CREATE TABLE sandboxes (
	account_id meter_id NOT NULL REFERENCES accounts (account_id),
	sandbox_id meter_id NOT NULL UNIQUE,
	key_id meter_id,                          -- NULL only in the 'unattributed' account
	vcpus meter_vcpus NOT NULL,
	memory_mib meter_qty NOT NULL,            -- reserved memory
	storage_mib meter_qty NOT NULL DEFAULT 0, -- snapshot size, billed while paused
	state meter_state NOT NULL,
	max_cost_micros meter_micros,             -- maxCostMicros given at create; NULL: none
	created_at timestamptz NOT NULL DEFAULT now(),
	state_since timestamptz NOT NULL DEFAULT now(),
	lease_ends_at timestamptz,
	PRIMARY KEY (account_id, sandbox_id),
	FOREIGN KEY (account_id, key_id) REFERENCES api_keys (account_id, key_id),
	CONSTRAINT sandboxes_key_required CHECK (key_id IS NOT NULL OR account_id = 'unattributed')
);
CREATE INDEX sandboxes_account_key_idx ON sandboxes (account_id, key_id);
COMMENT ON TABLE sandboxes IS 'Every sandbox known to the service: owner key, size, state and since when, lease end, maxCostMicros.';

-- Raw samples, partitioned by day --------------------------------------------

CREATE TABLE samples (
	account_id meter_id NOT NULL,
	sandbox_id meter_id NOT NULL,
	sampled_at timestamptz NOT NULL,
	state meter_state NOT NULL,
	cpu_usec meter_qty NOT NULL,     -- cumulative CPU time since the VM booted
	memory_mib meter_qty NOT NULL,   -- reserved
	storage_mib meter_qty NOT NULL,  -- snapshot size
	vcpus meter_vcpus NOT NULL,
	host_id meter_id NOT NULL,       -- the host (agent or cgroup collector) that reported it
	PRIMARY KEY (account_id, sandbox_id, sampled_at),
	FOREIGN KEY (account_id, sandbox_id) REFERENCES sandboxes (account_id, sandbox_id)
) PARTITION BY RANGE (sampled_at);
CREATE INDEX samples_account_time_idx ON samples (account_id, sampled_at);
CREATE TABLE samples_default PARTITION OF samples DEFAULT;
COMMENT ON TABLE samples IS 'Raw samples as received, one daily partition samples_YYYYMMDD (UTC days) each, kept for the retention period.';
COMMENT ON TABLE samples_default IS 'Samples outside every daily partition; meter_ensure_sample_partitions moves them out.';

-- Creates the daily partitions samples_YYYYMMDD for every UTC day from
-- from_day to to_day, both included (at most 1000 days in one call), and
-- returns how many it created. Idempotent, safe to call concurrently. Rows
-- already in the default partition for a new day are moved into it.
CREATE FUNCTION meter_ensure_sample_partitions(from_day date, to_day date) RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	d date;
	part text;
	lo timestamptz;
	hi timestamptz;
	created integer := 0;
	locked boolean := false;
BEGIN
	IF from_day IS NULL OR to_day IS NULL THEN
		RAISE EXCEPTION 'meter_ensure_sample_partitions: NULL day' USING ERRCODE = '22004';
	END IF;
	IF to_day - from_day >= 1000 THEN
		RAISE EXCEPTION 'meter_ensure_sample_partitions: more than 1000 days at once'
			USING ERRCODE = '22023';
	END IF;
	d := from_day;
	WHILE d <= to_day LOOP
		part := 'samples_' || to_char(d, 'YYYYMMDD');
		IF NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			       WHERE i.inhparent = 'samples'::regclass AND c.relname = part) THEN
			IF NOT locked THEN
				-- Serialises creators; re-check under the lock.
				PERFORM pg_advisory_xact_lock(7882834701841298288); -- "meter_sp" in ASCII
				locked := true;
				CONTINUE;
			END IF;
			lo := d::timestamp AT TIME ZONE 'UTC';
			hi := (d + 1)::timestamp AT TIME ZONE 'UTC';
			IF EXISTS (SELECT 1 FROM samples_default WHERE sampled_at >= lo AND sampled_at < hi) THEN
				CREATE TEMP TABLE meter_samples_moving ON COMMIT DROP AS
					SELECT * FROM samples_default WHERE sampled_at >= lo AND sampled_at < hi;
				DELETE FROM samples_default WHERE sampled_at >= lo AND sampled_at < hi;
				EXECUTE format('CREATE TABLE %I PARTITION OF samples FOR VALUES FROM (%L) TO (%L)',
					       part, lo, hi);
				INSERT INTO samples SELECT * FROM meter_samples_moving;
				DROP TABLE meter_samples_moving;
			ELSE
				EXECUTE format('CREATE TABLE %I PARTITION OF samples FOR VALUES FROM (%L) TO (%L)',
					       part, lo, hi);
			END IF;
			EXECUTE format('COMMENT ON TABLE %I IS %L', part,
				       'Samples of ' || to_char(d, 'YYYY-MM-DD') || ' (UTC).');
			created := created + 1;
		END IF;
		d := d + 1;
	END LOOP;
	RETURN created;
END
$$;

-- Retention: drops every daily partition of a UTC day before before_day and
-- deletes the default partition's rows before it. Returns the number of
-- partitions dropped.
CREATE FUNCTION meter_drop_sample_partitions(before_day date) RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	r record;
	dropped integer := 0;
BEGIN
	IF before_day IS NULL THEN
		RAISE EXCEPTION 'meter_drop_sample_partitions: NULL day' USING ERRCODE = '22004';
	END IF;
	FOR r IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		 WHERE i.inhparent = 'samples'::regclass AND c.relname ~ '^samples_[0-9]{8}$'
		 ORDER BY c.relname LOOP
		IF to_date(substr(r.relname, 9), 'YYYYMMDD') < before_day THEN
			EXECUTE format('DROP TABLE %I', r.relname);
			dropped := dropped + 1;
		END IF;
	END LOOP;
	DELETE FROM samples_default WHERE sampled_at < before_day::timestamp AT TIME ZONE 'UTC';
	RETURN dropped;
END
$$;

-- Collector state per sandbox ------------------------------------------------

CREATE TABLE sandbox_meter (
	account_id meter_id NOT NULL,
	sandbox_id meter_id NOT NULL,
	-- The last sample taken into account.
	last_sampled_at timestamptz NOT NULL,
	last_state meter_state NOT NULL,
	last_cpu_usec meter_qty NOT NULL,
	last_memory_mib meter_qty NOT NULL,
	last_storage_mib meter_qty NOT NULL,
	last_vcpus meter_vcpus NOT NULL,
	-- The price-book version the carries below belong to.
	price_version integer NOT NULL REFERENCES price_book (version),
	-- Money carries (struct money_carry in meter/money.h): (Q × rate) mod divisor,
	-- divisor = unit × 3,600,000,000 (1000 millicores per vCPU, 1024 MiB per GiB).
	cpu_rem bigint NOT NULL DEFAULT 0 CHECK (cpu_rem >= 0 AND cpu_rem < 3600000000000),
	memory_rem bigint NOT NULL DEFAULT 0 CHECK (memory_rem >= 0 AND memory_rem < 3686400000000),
	storage_rem bigint NOT NULL DEFAULT 0 CHECK (storage_rem >= 0 AND storage_rem < 3686400000000),
	-- Money accrued since the sandbox was first metered, all versions together.
	cpu_cum_micros meter_micros NOT NULL DEFAULT 0,
	memory_cum_micros meter_micros NOT NULL DEFAULT 0,
	storage_cum_micros meter_micros NOT NULL DEFAULT 0,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (account_id, sandbox_id),
	FOREIGN KEY (account_id, sandbox_id) REFERENCES sandboxes (account_id, sandbox_id)
);
COMMENT ON TABLE sandbox_meter IS 'Collector state per sandbox: last sample, current price version, money carries and cumulative micros.';

-- Hourly rollups -------------------------------------------------------------

CREATE TABLE usage_hourly (
	account_id meter_id NOT NULL,
	sandbox_id meter_id NOT NULL,
	hour timestamptz NOT NULL,          -- start of the UTC hour
	price_version integer NOT NULL REFERENCES price_book (version),
	key_id meter_id,                    -- NULL only in the 'unattributed' account
	-- Exact quantities of the hour.
	running_usec meter_qty NOT NULL DEFAULT 0,
	paused_usec meter_qty NOT NULL DEFAULT 0,
	cpu_used_mcus meter_qty NOT NULL DEFAULT 0,   -- millicore-µs used
	cpu_billed_mcus meter_qty NOT NULL DEFAULT 0, -- millicore-µs billed (floor applied)
	memory_mibus meter_qty NOT NULL DEFAULT 0,    -- MiB-µs reserved while running
	storage_mibus meter_qty NOT NULL DEFAULT 0,   -- MiB-µs of snapshot while paused
	-- Money of the hour.
	cpu_micros meter_micros NOT NULL DEFAULT 0,
	memory_micros meter_micros NOT NULL DEFAULT 0,
	storage_micros meter_micros NOT NULL DEFAULT 0,
	total_micros meter_micros NOT NULL DEFAULT 0,
	-- The sandbox's cumulative money (as sandbox_meter) at the end of this row.
	cpu_cum_micros meter_micros NOT NULL DEFAULT 0,
	memory_cum_micros meter_micros NOT NULL DEFAULT 0,
	storage_cum_micros meter_micros NOT NULL DEFAULT 0,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (account_id, sandbox_id, hour, price_version),
	FOREIGN KEY (account_id, sandbox_id) REFERENCES sandboxes (account_id, sandbox_id),
	FOREIGN KEY (account_id, key_id) REFERENCES api_keys (account_id, key_id),
	CONSTRAINT usage_hourly_key_required CHECK (key_id IS NOT NULL OR account_id = 'unattributed'),
	CONSTRAINT usage_hourly_hour_aligned
		CHECK (date_trunc('hour', hour AT TIME ZONE 'UTC') = hour AT TIME ZONE 'UTC'),
	CONSTRAINT usage_hourly_within_hour CHECK (running_usec + paused_usec <= 3600000000),
	CONSTRAINT usage_hourly_billed_ge_used CHECK (cpu_billed_mcus >= cpu_used_mcus),
	CONSTRAINT usage_hourly_total CHECK (total_micros = cpu_micros + memory_micros + storage_micros),
	CONSTRAINT usage_hourly_cum_ge_hour CHECK (cpu_cum_micros >= cpu_micros
						   AND memory_cum_micros >= memory_micros
						   AND storage_cum_micros >= storage_micros)
);
CREATE INDEX usage_hourly_account_hour_idx ON usage_hourly (account_id, hour);
CREATE INDEX usage_hourly_account_key_hour_idx ON usage_hourly (account_id, key_id, hour);
COMMENT ON TABLE usage_hourly IS 'Hourly rollup per sandbox and price version: exact quantities, money of the hour, cumulative money at its end.';

-- Spending ledger and holds ---------------------------------------------------

CREATE TABLE key_day_ledger (
	account_id meter_id NOT NULL,
	key_id meter_id NOT NULL,
	day date NOT NULL,                      -- calendar day in the key's time zone
	spent_micros meter_micros NOT NULL DEFAULT 0,
	held_micros meter_micros NOT NULL DEFAULT 0, -- remaining open holds of the day
	limit_micros meter_micros,              -- the key's limit for the day; NULL: none
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (account_id, key_id, day),
	FOREIGN KEY (account_id, key_id) REFERENCES api_keys (account_id, key_id)
);
COMMENT ON TABLE key_day_ledger IS 'Per key and day (key''s time zone): metered spend and open holds, checked against the daily limit.';

CREATE TABLE holds (
	account_id meter_id NOT NULL,
	hold_id bigint GENERATED ALWAYS AS IDENTITY,
	key_id meter_id NOT NULL,
	sandbox_id meter_id NOT NULL,
	day date NOT NULL,                    -- the key's day this part of the lease is held against
	amount_micros meter_micros NOT NULL,  -- worst case reserved
	consumed_micros meter_micros NOT NULL DEFAULT 0, -- metered so far; may exceed amount (lease not honoured)
	status meter_hold_status NOT NULL DEFAULT 'open',
	lease_starts_at timestamptz NOT NULL,
	lease_ends_at timestamptz NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	settled_at timestamptz,               -- set exactly when status leaves 'open'
	PRIMARY KEY (account_id, hold_id),
	FOREIGN KEY (account_id, key_id) REFERENCES api_keys (account_id, key_id),
	FOREIGN KEY (account_id, sandbox_id) REFERENCES sandboxes (account_id, sandbox_id),
	CONSTRAINT holds_lease_order CHECK (lease_ends_at >= lease_starts_at),
	CONSTRAINT holds_settled_iff_closed CHECK ((status = 'open') = (settled_at IS NULL))
);
CREATE INDEX holds_open_lease_end_idx ON holds (lease_ends_at) WHERE status = 'open';
CREATE INDEX holds_open_sandbox_idx ON holds (account_id, sandbox_id) WHERE status = 'open';
COMMENT ON TABLE holds IS 'Worst-case reservations of a lease against a key''s day, consumed by metering, settled at pause, stop or lease end.';

-- Idempotent checks -----------------------------------------------------------

CREATE TABLE idempotency_keys (
	account_id meter_id NOT NULL REFERENCES accounts (account_id),
	operation meter_operation NOT NULL,
	idempotency_key meter_id NOT NULL,
	request_sha256 meter_sha256 NOT NULL, -- of the request's canonical parameters
	status_code integer NOT NULL CHECK (status_code BETWEEN 100 AND 599),
	response jsonb NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (account_id, operation, idempotency_key)
);
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
COMMENT ON TABLE idempotency_keys IS 'First answer to each create/wake check by idempotency key, replayed to retries.';

-- Lifecycle events --------------------------------------------------------------

CREATE TABLE lifecycle_events (
	account_id meter_id NOT NULL,
	event_id bigint GENERATED ALWAYS AS IDENTITY,
	sandbox_id meter_id NOT NULL,
	type meter_state NOT NULL,
	at timestamptz NOT NULL,              -- when the state changed (control plane's clock)
	received_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (account_id, event_id),
	UNIQUE (account_id, sandbox_id, type, at),
	FOREIGN KEY (account_id, sandbox_id) REFERENCES sandboxes (account_id, sandbox_id)
);
COMMENT ON TABLE lifecycle_events IS 'State changes reported by the control plane, recorded once each; authoritative for when a state changed.';

-- Collector watermarks ------------------------------------------------------------

CREATE TABLE ingest_watermarks (
	host_id meter_id NOT NULL PRIMARY KEY,
	last_sampled_at timestamptz NOT NULL,
	batches meter_qty NOT NULL DEFAULT 0,
	updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE ingest_watermarks IS 'Per host (not per account): the latest sample batch ingested, written in the same transaction as its samples.';
