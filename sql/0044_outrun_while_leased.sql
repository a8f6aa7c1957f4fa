-- meter: a hold's consumption reports hold_outrun only while its lease runs.
--
-- The consumption trigger (0014) sent hold_outrun "hold_consumed" whenever
-- metering took an open hold past its amount. A hold's amount is its day
-- part's worst case, so usage within the lease stays within it (unless the
-- sandbox is larger than it was checked for); what outruns it is running
-- time past the lease's end. How that time was treated hung on the
-- lease-end sweep, which runs about once a second: a sample past the end
-- taken in after the sweep met a hold that was only keeping its tail
-- (settles_at = lease end, skipped by the trigger) and sent nothing, and
-- the lease_ended report (0037) waited out lease_grace_s for a pause or
-- stop; the same sample taken in a moment before the sweep met the hold
-- still open and sent hold_consumed at once, though a stop dated within
-- the grace came after it. Of four runs of one script a review made, three
-- sent the event and one did not. 0016 closed the same race for a pause or
-- stop that came before the sweep; this closes it for a sample.
--
-- Now a hold no event has settled reports its consumption only while its
-- lease has not ended (now(), the ingesting transaction's time, before
-- lease_ends_at): the moment before the sweep is treated as the sweep
-- would have treated it, and running past the end is lease_ended's to
-- report, after the grace. lease_ends_at is meterd's clock and now() the
-- database's: the two are taken to agree (clock_offset_s, for tests only,
-- sets them apart on purpose). A hold settled by an event dated after its
-- lease's end and grace (settles_at > lease_ends_at: the event came before
-- the sweep) reports the running time up to that event as before, whenever
-- it is metered.

DROP TRIGGER holds_outrun ON holds;
CREATE TRIGGER holds_outrun AFTER UPDATE ON holds
	FOR EACH ROW
	WHEN (NEW.consumed_micros > NEW.amount_micros AND OLD.consumed_micros <= OLD.amount_micros
	      AND ((NEW.settles_at IS NULL AND NEW.lease_ends_at > now())
		   OR NEW.settles_at > NEW.lease_ends_at))
	EXECUTE FUNCTION meter_outbox_outrun();
