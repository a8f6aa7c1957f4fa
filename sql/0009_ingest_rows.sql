-- meter: the row types ingestion sends its per-sandbox rows in (issue 3).
--
-- Ingestion wrote sandbox_meter and usage_hourly from one array parameter
-- per column, expanded by unnest($1, $2, ...). PostgreSQL runs such an
-- unnest as one set-returning function per array, each materialized on its
-- own: 25 arrays of 10,000 rows cost about 70 ms per statement before a row
-- was written. One array of rows of these types is expanded in one pass
-- (about 5 ms for the same rows). The columns are named as the statements
-- use them; the arithmetic behind each is in meter/ingest.c.

-- A sandbox_meter row as ingestion writes it, with the identity (ctid, xmin)
-- of the version it read: the update only changes that version.
CREATE TYPE meter_ingest_meter AS (
	a text,            -- account_id
	sb text,           -- sandbox_id
	at timestamptz,    -- last_sampled_at
	state text,        -- last_state
	cpu bigint,        -- last_cpu_usec
	mem bigint,        -- last_memory_mib
	sto bigint,        -- last_storage_mib
	vcpus integer,     -- last_vcpus
	ver integer,       -- price_version
	cr bigint,         -- cpu_rem
	mr bigint,         -- memory_rem
	sr bigint,         -- storage_rem
	cc bigint,         -- cpu_cum_micros
	mc bigint,         -- memory_cum_micros
	sc bigint,         -- storage_cum_micros
	tid tid,           -- ctid of the version read (updates only)
	d date,            -- day
	dru bigint,        -- day_running_usec
	dcu bigint,        -- day_cpu_used_mcus
	dcb bigint,        -- day_cpu_billed_mcus
	dtm bigint,        -- day_total_micros
	mo date,           -- month
	mtm bigint,        -- month_total_micros
	de timestamptz,    -- day_ends_at
	xm xid             -- xmin of the version read (updates only)
);

-- What ingestion adds to one usage_hourly row.
CREATE TYPE meter_ingest_usage AS (
	a text,            -- account_id
	sb text,           -- sandbox_id
	hour timestamptz,
	ver integer,       -- price_version
	k text,            -- key_id; NULL when unattributed
	day date,
	ru bigint,         -- running_usec
	pu bigint,         -- paused_usec
	cu bigint,         -- cpu_used_mcus
	cb bigint,         -- cpu_billed_mcus
	mm bigint,         -- memory_mibus
	sm bigint,         -- storage_mibus
	cm bigint,         -- cpu_micros
	mmi bigint,        -- memory_micros
	smi bigint,        -- storage_micros
	tm bigint,         -- total_micros
	cc bigint,         -- cpu_cum_micros
	mc bigint,         -- memory_cum_micros
	sc bigint          -- storage_cum_micros
);
