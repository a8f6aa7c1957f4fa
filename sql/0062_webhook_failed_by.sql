-- meter: a webhook event due again goes first to another process than the
-- one that failed it.
--
-- A failed POST is retried after 1, 2, 4, ... seconds, by whichever process
-- claims the event first once it is due. That was most often the process
-- that failed it, whose next round came right as the retry fell due, so a
-- process that cannot deliver (a webhook_secret the receiver refuses, no
-- route to it) kept the events it had claimed, failing each again on its
-- backoff, while another could have delivered them (a review: 5 events
-- held for minutes, until that process stopped). Now the retry records
-- which process failed (a random id of its deliverer, new at each start),
-- and that process claims the event only a while after it is due
-- (meter/webhook.c), so another one's round takes it first; alone, it
-- takes it then.
ALTER TABLE webhook_outbox ADD COLUMN failed_by text;
COMMENT ON COLUMN webhook_outbox.failed_by IS
	'The deliverer whose attempt failed last (its random id), which waits a while past next_attempt_at before claiming the event again; NULL before any failure.';
