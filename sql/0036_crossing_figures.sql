-- meter: spend_limit_crossed tells the key-day's figures as committed.
--
-- The event was written by a row trigger on the ledger row's update of
-- spent, with the row as that update left it. Metering adds the spend
-- first and then takes the holds' consumption off held, in the same
-- transaction (meter_ledger_spend, and ingestion's ledger step): the
-- event's held_micros was the held before the consumption, so spent + held
-- told a committed figure that never was (held 5,417 where the ledger
-- committed 417).
--
-- The triggers now fire at commit (deferred constraint triggers, still
-- under the ledger row's lock, which is held to commit) and read the row
-- as the transaction leaves it. They fire on the same changes as before
-- (0005); the rule of what to report is 0028's, on the final figures.

CREATE OR REPLACE FUNCTION meter_outbox_spend() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
DECLARE
	d text := to_char(NEW.day, 'YYYY-MM-DD');
	r record;
BEGIN
	SELECT l.spent_micros, l.held_micros, l.limit_micros INTO r
		FROM key_day_ledger l
		WHERE l.account_id = NEW.account_id AND l.key_id = NEW.key_id AND l.day = NEW.day;
	IF NOT FOUND OR r.limit_micros IS NULL OR r.spent_micros < r.limit_micros THEN
		RETURN NULL;
	END IF;
	IF EXISTS (SELECT 1 FROM webhook_outbox o
		   WHERE o.account_id = NEW.account_id AND o.key_id = NEW.key_id
		     AND o.payload->>'day' = d AND o.type = 'spend_limit_crossed'
		     AND (o.payload->>'limit_micros')::bigint >= r.limit_micros) THEN
		RETURN NULL;
	END IF;
	INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload)
		VALUES (NEW.account_id, NEW.key_id, 'spend_limit_crossed',
			NEW.key_id || '/' || d || '/' || r.limit_micros::text,
			jsonb_build_object('key_id', NEW.key_id, 'day', d,
					   'spent_micros', r.spent_micros,
					   'held_micros', r.held_micros,
					   'limit_micros', r.limit_micros))
	ON CONFLICT (account_id, type, dedup_key) DO NOTHING;
	RETURN NULL;
END
$$;

DROP TRIGGER key_day_ledger_spend_insert ON key_day_ledger;
DROP TRIGGER key_day_ledger_spend_update ON key_day_ledger;
CREATE CONSTRAINT TRIGGER key_day_ledger_spend_insert AFTER INSERT ON key_day_ledger
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW
	WHEN (NEW.limit_micros IS NOT NULL AND NEW.spent_micros > 0
	      AND NEW.spent_micros >= NEW.limit_micros)
	EXECUTE FUNCTION meter_outbox_spend();
CREATE CONSTRAINT TRIGGER key_day_ledger_spend_update AFTER UPDATE ON key_day_ledger
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW
	WHEN (NEW.limit_micros IS NOT NULL AND NEW.spent_micros > OLD.spent_micros
	      AND NEW.spent_micros >= NEW.limit_micros)
	EXECUTE FUNCTION meter_outbox_spend();
