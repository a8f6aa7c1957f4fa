-- meter: spend_limit_crossed once per crossing, not once per key-day.
--
-- 0005 keyed the event by key and day (dedup_key key_id/day, ON CONFLICT
-- DO NOTHING), so after the first event of a key-day nothing more was
-- sent: a limit of 10,000 passed at 12,000 was reported, the limit raised
-- to 50,000 and passed again at 57,000 was not.
--
-- The triggers are kept as 0005 made them: they fire when a key-day's
-- metered spend rises (or its row is made with spend) and is then at or
-- over its limit. What each firing means is now decided by what was
-- already reported: an event says "this key-day's spend reached limit L"
-- (data.limit_micros, with data.spent_micros at that moment), and one is
-- written unless the key-day already has an event for a limit of L or
-- more. Spend never falls within a day (amounts are never negative), so
-- having reached a limit of L or more it has reached L too, and:
--   - each crossing (spend going from under the limit to at or over it)
--     gets exactly one event: before it spend was under L, so every event
--     of the key-day so far was for a limit under L;
--   - more spend while still over the same limit gets none (nor after a
--     limit lowered below a limit already reported, or raised and lowered
--     back to one: that fact was told);
--   - a limit lowered below today's spend is reported at the next spend
--     (as 0005 did when nothing had been reported that day), unless a limit
--     at least as high was reported already.
-- The dedup key key_id/day/limit stays unique (one event per limit) and
-- backs the rule up should two writers of one key-day ever race; they do
-- not: the trigger runs under the ledger row's lock, held to commit. Events
-- of 0005 (key_id/day) carry the same day and limit in their payload, so a
-- crossing reported before this migration is not reported again.

-- The lookup of a key-day's events (once per spend over the limit).
CREATE INDEX webhook_outbox_spend_day_idx
	ON webhook_outbox (account_id, key_id, (payload->>'day'))
	WHERE type = 'spend_limit_crossed';

-- A key-day's metered spend reached its limit, not reached (reported)
-- before: once per crossing (see above).
CREATE OR REPLACE FUNCTION meter_outbox_spend() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
DECLARE
	d text := to_char(NEW.day, 'YYYY-MM-DD');
BEGIN
	IF EXISTS (SELECT 1 FROM webhook_outbox o
		   WHERE o.account_id = NEW.account_id AND o.key_id = NEW.key_id
		     AND o.payload->>'day' = d AND o.type = 'spend_limit_crossed'
		     AND (o.payload->>'limit_micros')::bigint >= NEW.limit_micros) THEN
		RETURN NULL;
	END IF;
	INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)
		VALUES (NEW.account_id, NEW.key_id, 'spend_limit_crossed',
			NEW.key_id || '/' || d || '/' || NEW.limit_micros::text,
			jsonb_build_object('key_id', NEW.key_id, 'day', d,
					   'spent_micros', NEW.spent_micros,
					   'held_micros', NEW.held_micros,
					   'limit_micros', NEW.limit_micros))
	ON CONFLICT (account_id, type, dedup_key) DO NOTHING;
	RETURN NULL;
END
$$;
