-- meter: the processes on one database sweep with the same lease_grace_s
-- and sample_retention_days: the most cautious of those running.
--
-- Every meterd runs a sweeper, each with its own settings, and an event
-- is settled with the grace of the process that received it. During a
-- rolling change of lease_grace_s the smallest one in use decided every
-- tail: a review ran one process with 0 beside one with 30 on a key's
-- last budget. A pause on the second kept a 1,224 µ$ tail hold for a
-- sandbox not sampled yet; the first's sweeper released it at once, a
-- create on the second took the budget, and the sandbox's sample then came
-- and was spent on no hold: the day ended at 37,886 µ$ committed against
-- a 37,000 limit. A process with a shorter sample_retention_days dropped
-- the raw samples another, keeping them longer, still needs for a stop's
-- last stretch. Neither happens with one process, or with one setting.
--
-- Now each sweeper records its settings here as it runs (every 10 s, and
-- as it stops it deletes its row), and every process sweeps and settles
-- events with the settings in force: the largest grace, and the longest
-- retention (0, for ever, the longest), of the rows here. A row lapses 15
-- minutes after its last record (a process gone without a clean stop:
-- until then its settings, the more cautious, still count), forgotten
-- only by a process that was itself recorded within those 15 minutes:
-- after an outage of the database, or at a process's start, every row
-- may be that old while their processes are alive (a review: after a 65 s
-- outage the first process back forgot the others and released a tail
-- under its grace of 0). And a process does not release tails or drop
-- samples until it has recorded its settings twice, 10 s apart
-- (meter/checks.c), so that processes started together see each other's.
CREATE TABLE meterd_sweepers (
	sweeper_id text PRIMARY KEY CHECK (sweeper_id ~ '^[0-9a-f]{32}$'),
	lease_grace_s integer NOT NULL CHECK (lease_grace_s BETWEEN 0 AND 86400),
	sample_retention_days integer NOT NULL CHECK (sample_retention_days >= 0),
	seen_at timestamptz NOT NULL
);
COMMENT ON TABLE meterd_sweepers IS
	'The sweep settings of each running meterd (a random id of its sweeper, new at each start), refreshed every 10 s; every process sweeps with the most cautious of those here, a row forgotten 15 minutes after its last refresh.';

-- Records p_id's settings as seen now; when p_id itself was recorded
-- within p_lapse_s before, forgets the rows not recorded within it (a row
-- its process is refreshing now is alive: skipped, not waited for); and
-- gives the settings in force: the largest grace, and the longest
-- retention (0 when any row keeps samples for ever). The clock is the
-- server's, the same for every process.
CREATE FUNCTION meter_sweeper_seen(p_id text, p_grace_s integer, p_retention_days integer,
				   p_lapse_s integer, OUT grace_s integer,
				   OUT retention_days integer)
	LANGUAGE plpgsql
	AS $$
DECLARE
	was timestamptz;
BEGIN
	SELECT w.seen_at INTO was FROM meterd_sweepers w WHERE w.sweeper_id = p_id;
	INSERT INTO meterd_sweepers AS w (sweeper_id, lease_grace_s, sample_retention_days, seen_at)
		VALUES (p_id, p_grace_s, p_retention_days, clock_timestamp())
	ON CONFLICT (sweeper_id) DO UPDATE
		SET lease_grace_s = EXCLUDED.lease_grace_s,
		    sample_retention_days = EXCLUDED.sample_retention_days,
		    seen_at = EXCLUDED.seen_at;
	IF was >= clock_timestamp() - make_interval(secs => p_lapse_s) THEN
		DELETE FROM meterd_sweepers w
			WHERE w.sweeper_id IN (
				SELECT x.sweeper_id FROM meterd_sweepers x
				WHERE x.seen_at < clock_timestamp() - make_interval(secs => p_lapse_s)
				FOR UPDATE SKIP LOCKED);
	END IF;
	SELECT max(w.lease_grace_s),
	       CASE WHEN bool_or(w.sample_retention_days = 0) THEN 0
		    ELSE max(w.sample_retention_days) END
		INTO grace_s, retention_days
		FROM meterd_sweepers w;
END
$$;
