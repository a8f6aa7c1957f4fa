-- meter: what ingestion's cache of sandbox_meter rows relies on (issue 3).
--
-- Ingestion keeps, per process, each sandbox's meter row as its last call
-- committed it, with the row version's xmin, so that the next call need not
-- read it again: the row's update applies only where xmin is still the one
-- kept (and a row the call does not update is checked for it), so a row
-- that any other transaction wrote since is caught, and the call is
-- retried, reading it. What the cache also
-- holds comes from other tables: the sandbox's key and sizes (sandboxes)
-- and its key's time zone (api_keys). The service never changes those
-- sandboxes columns and changes a zone rarely; every change to them moves
-- the account's generation here, in the same transaction, and ingestion
-- does not use what it cached under an older one.

CREATE TABLE ingest_generation (
	account_id meter_id PRIMARY KEY REFERENCES accounts (account_id),
	generation bigint NOT NULL DEFAULT 1 CHECK (generation > 0)
);
COMMENT ON TABLE ingest_generation IS 'Per account: moves on every change to the sandboxes and api_keys columns ingestion caches (key, sizes, time zone); no row is generation 0.';

CREATE FUNCTION meter_ingest_generation_bump() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ingest_generation AS g (account_id) VALUES (NEW.account_id)
	ON CONFLICT (account_id) DO UPDATE SET generation = g.generation + 1;
	RETURN NULL;
END
$$;

-- Rows are not deleted while a meter row refers to them (foreign keys), and
-- a meter row deleted fails the guard like one changed.
CREATE TRIGGER sandboxes_ingest_generation
	AFTER UPDATE OF key_id, vcpus, memory_mib, storage_mib ON sandboxes
	FOR EACH ROW WHEN (OLD.key_id IS DISTINCT FROM NEW.key_id OR OLD.vcpus <> NEW.vcpus
			   OR OLD.memory_mib <> NEW.memory_mib OR OLD.storage_mib <> NEW.storage_mib)
	EXECUTE FUNCTION meter_ingest_generation_bump();
CREATE TRIGGER api_keys_ingest_generation
	AFTER UPDATE OF time_zone ON api_keys
	FOR EACH ROW WHEN (OLD.time_zone IS DISTINCT FROM NEW.time_zone)
	EXECUTE FUNCTION meter_ingest_generation_bump();
