-- meter: every hold of a sandbox found by an index, not only its open ones.
--
-- The only index of holds by sandbox was holds_open_sandbox_idx, partial
-- on status = 'open'. Two reports look further than the open holds: a
-- resume without a wake (meter_outbox_resumed, 0037) and a sample that
-- finds a paused sandbox running (meter_outbox_paused_running, 0040) each
-- name the sandbox's latest hold, whatever its status, and the second also
-- looks for a hold begun after the sample before. With no index for that,
-- PostgreSQL read the whole table: with 500,000 settled holds of other
-- sandboxes, the running event that made a resume report took 199 ms
-- (18 ms for the pause before it), and the time grows with every check the
-- service has ever held.
--
-- The index now holds every hold by (account_id, sandbox_id, status): an
-- open hold's look-up is the same three-column match as before, and a
-- sandbox's holds of any status are a range of it. A check inserts one
-- entry into it, as it did into the partial index; a hold that closes adds
-- one more (the partial index took none for the closed row), which is the
-- sweeper's and the events' work, not a check's.

CREATE INDEX holds_sandbox_idx ON holds (account_id, sandbox_id, status);
DROP INDEX holds_open_sandbox_idx;
