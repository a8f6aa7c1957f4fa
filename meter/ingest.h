/* meter: ingestion of sample batches (DESIGN.md §2-§3).
 *
 * One call to ingest_batches() writes, in ONE transaction: the raw samples
 * (partitioned table samples), the sandboxes' hourly usage and money
 * (usage_hourly), the key-day spend with consumption of open holds
 * (meter_ledger_spend's rules, sql/0056_hold_usage_times.sql, applied in C
 * by ledger_consume; the function itself after a conflict: a hold takes
 * only usage from its lease's time), each sandbox's collector state
 * (sandbox_meter: last sample = the dedupe watermark, price version, money
 * carries, cumulative money) and the per-host watermark (ingest_watermarks).
 * Rows go in batched: binary COPY into the samples table, binary array
 * parameters expanded by unnest() for the rest (the meter and usage rows as
 * arrays of row types, sql/0009_ingest_rows.sql); never a round trip per
 * row. A call that writes more than 10,000 rows (a long gap is a row for
 * every hour of it) gives each statement 0.1 ms a row beyond the
 * connection's statement timeout, 300 s at most.
 *
 * Rules:
 * - Per sandbox, samples are taken in time order; one at or before
 *   sandbox_meter.last_sampled_at (or a second one at the same instant) is a
 *   duplicate or out of order and ignored. Re-sending a batch, or re-running
 *   after a crash, changes nothing: the watermark is written in the same
 *   transaction as what it covers.
 * - A sandbox's first sample is its baseline: usage starts there, unless a
 *   create check made its record and its first lifecycle event, before
 *   that sample, is a running one: then usage starts at that event (at the
 *   create, for one before it) as from a reading of the VM's CPU counter
 *   at 0 (it starts at the boot) in that sample's sizes.
 * - Interval prev → cur: usage_interval() (counter reset, CPU cap: counted
 *   as anomalies), billed in prev's state, except that the lifecycle events
 *   recorded in (prev.at, cur.at] are authoritative: the interval is split at
 *   each event time and each piece takes its event's state. CPU is attributed
 *   to the running pieces in proportion to their wall time (exact integer
 *   split); CPU beyond vcpus × the running time is capped (an anomaly). So
 *   billing stops exactly at a pause or stop event.
 * - Pieces are split at price_book.effective_from (a new version starts a
 *   fresh money carry; its floor applies to its part) and where one of the
 *   sandbox's open holds (read before, unlocked) has its lease start or
 *   its kept tail end, so that a hold's usage is priced apart from the
 *   usage before it (ledger_consume then cuts no money), then at UTC hours
 *   (usage_hourly.hour) and at the key's local midnight (usage_hourly.day;
 *   the key's IANA zone, UTC without a key) with usage_wide_split(), and
 *   priced in time order with usage_price() and the sandbox's carries, so
 *   money is exact and never drifts. Day starts come from PostgreSQL
 *   (meter_day_start) and are cached per zone: no DST rule lives in C.
 * - Attribution: the sandbox row decides account and key; else the sample's
 *   key_id when that key exists (the sandbox row is then created in the
 *   key's account: INSERT ... ON CONFLICT DO NOTHING; ingestion never changes
 *   an existing sandboxes row); else the 'unattributed' account with no key:
 *   still metered and stored, never dropped.
 * - vcpus, memory_mib, storage_mib a source did not know (cgroups) come from
 *   the sandbox row; a row created by ingestion gets vcpus =
 *   opts.default_vcpus (the host's CPU count) when unknown, memory and
 *   storage 0.
 * - Lock order: sandbox_meter rows, then the key-day ledger rows (in
 *   (account, key, day) order), then holds. api_keys and sandboxes rows are
 *   never locked FOR UPDATE. The open holds are read under their key-day's
 *   ledger lock (every writer of holds takes it first) and each hold's
 *   update is guarded by the consumption read: a short count rolls back and
 *   retries, spending through meter_ledger_spend.
 *   The meter rows are read without a lock (or taken from the cache, below)
 *   and updated only where the version read (xmin, and ctid when read) is
 *   still current; a row another
 *   transaction metered meanwhile makes the count short, and the call is
 *   rolled back and retried reading them FOR UPDATE, in (account, sandbox)
 *   order. Their update locks them before the usage rows, the ledger and
 *   the holds are written (the samples' COPY comes before it and is rolled
 *   back with the rest). The update locks rows in its plan's order, so two
 *   unlocked calls over the same sandboxes can deadlock: PostgreSQL detects
 *   it and the call it chooses is retried, locking.
 * - The meter rows are cached between calls (opts.cache_sandboxes): a
 *   committed call keeps each sandbox's row as it left it, with that
 *   version's xmin, and the next call takes it instead of reading it. The
 *   update's xmin guard catches a row written since by anyone else (another
 *   process, a push, a rebuild): the call is retried as above, reading. A
 *   cached row the call does not update (every sample ignored) is checked
 *   for its xmin the same way. What the cache holds from sandboxes and
 *   api_keys (key, sizes, zone) is used only while the account's
 *   ingest_generation is unchanged (triggers move it,
 *   sql/0010_ingest_cache.sql). Entries are used for an hour at most, and
 *   all are dropped when the server's start time changes (a promoted
 *   standby or a restored backup may hand out the same transaction ids
 *   again).
 * - A deadlock, a meter row changed since it was read, or a concurrent first
 *   sample of the same new sandbox rolls the transaction back and retries
 *   it (up to 3 times; the retries lock the meter rows).
 *
 * Known limit: a lifecycle event recorded after the samples past its time
 * were ingested does not re-rate them (usage already billed stays billed).
 *
 * Thread safety: one struct ingest may be shared by threads (its caches are
 * locked); each call needs its own connection. */
#ifndef METER_INGEST_H
#define METER_INGEST_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rc.h"
#include "sample.h"

struct ingest_opts {
	int32_t default_vcpus; /* vcpus of a new sandbox whose source did not say; >= 1 */
	/* Sandboxes whose meter row is cached between calls (0: no cache); the
	 * cache starts over when full. About 460 bytes each. */
	size_t cache_sandboxes;
	/* The statement timeout of the connections calls are given (ms; 0:
	 * none or unknown). A call waits for an answer at most 2 s past it
	 * (and past what it adds for a big call), then drops the connection
	 * and fails: a server that stopped answering does not hold it. */
	int64_t statement_timeout_ms;
	/* The batches are readings the service makes itself (a stop's, by
	 * the checks' sweeper), not a host's: meter_ingest_lag_seconds,
	 * which tells how far behind the hosts ingestion is, is left alone. */
	bool own_readings;
};

/* Defaults: default_vcpus = the number of online CPUs of this machine;
 * cache_sandboxes = INGEST_CACHE_DEFAULT. */
#define INGEST_CACHE_DEFAULT 131072
void ingest_opts_init(struct ingest_opts *o);

struct ingest;

/* A new ingest object (caches: day starts per zone, sample partitions, meter
 * rows).
 * NULL when out of memory. */
struct ingest *ingest_new(const struct ingest_opts *o);
void ingest_free(struct ingest *ing);

/* What one call did (all counts of this call only). */
struct ingest_stats {
	uint64_t batches;	/* batches given */
	uint64_t samples;	/* samples given */
	uint64_t accepted;	/* stored and accounted (baselines included) */
	uint64_t ignored;	/* duplicates, out of order */
	uint64_t intervals;	/* intervals accounted */
	uint64_t anomalies;	/* resets + cpu_capped + overflows + unknown_keys */
	uint64_t resets;	/* CPU counter went down */
	uint64_t cpu_capped;	/* CPU above vcpus × wall time, capped */
	uint64_t overflows;	/* interval too large to compute: re-baselined, not billed */
	uint64_t new_sandboxes; /* sandboxes rows created by ingestion */
	uint64_t unattributed;	/* accepted samples of sandboxes without a key */
	uint64_t unknown_keys;	/* new sandboxes whose samples named no key: unattributed */
	uint64_t usage_rows;	/* usage_hourly rows written (inserted or added to) */
	uint64_t cached;	/* sandboxes whose meter row came from the cache, not a read */
	int64_t micros;		/* money accounted, µ$ */
	int64_t outrun_micros;	/* money no open hold of its time had room for, µ$ */
	int64_t newest_sampled_at_usec; /* newest batch's sampled_at, 0 when none */
	int retries;			/* transactions rolled back and retried */
	/* Wall time of each phase of the last try, µs (for benchmarks): reads
	 * (meter rows, events, days), arithmetic in C, the raw samples' COPY,
	 * sandbox_meter and usage_hourly, the key-day ledger with the holds and
	 * the watermarks, COMMIT. */
	int64_t usec_read, usec_compute, usec_samples, usec_state, usec_ledger, usec_commit;
};

/* Ingests n batches (borrowed, unchanged) on conn (borrowed, idle: not in a
 * transaction) in one transaction, as described above. Also updates the
 * collector metrics (samples ingested/ignored, batches, anomalies by kind,
 * ingest errors, ingest lag). On METER_OK *stats (may be NULL) tells what
 * was done. Errors: METER_EDB (the database failed or is unreachable; the
 * transaction is rolled back and nothing was written; the connection may be
 * broken: see db_conn_failed), METER_ECONFLICT (rows of its sandboxes, or
 * their pauses and stops, changed under it at every try: nothing was
 * written, it may be sent again), METER_ENOMEM, METER_EINVAL (a batch the
 * database refused as data). err gets one line. */
METER_MUSTCHECK enum meter_rc ingest_batches(struct ingest *ing, PGconn *conn,
					     const struct sample_batch *batches, size_t n,
					     struct ingest_stats *stats, char *err, size_t errlen);

/* Makes the samples partitions of the database's UTC today and tomorrow
 * that do not exist yet, on conn (idle), in a transaction of its own that
 * waits at most 1 s for samples' lock (a long reader such as pg_dump holds
 * it off): the sweeper's, once an hour, so that the first call of a day
 * finds its partition made. METER_EDB when it could not (nothing made). */
METER_MUSTCHECK enum meter_rc ingest_make_partitions_ahead(PGconn *conn);

/* Retention: drops the raw samples of the UTC days more than keep_days
 * before today's (the database's clock) on conn (idle). The usage they
 * were metered into is kept. First samples_default's old rows (those dated
 * outside every partition), INGEST_RETAIN_BATCH a statement and at most
 * INGEST_RETAIN_BATCHES statements (*more: some are left); then the old
 * daily partitions whole (meter_drop_sample_partitions), in a transaction
 * of their own. Dropping a partition locks the samples table until that
 * commits, so it waits for the lock at most 1 s (an ingestion writing
 * samples), and it takes the lock that makes partitions: *dropped is -1
 * when another process held it (doing the same, or making a day's
 * partition), else how many were dropped. METER_EDB when a step failed (a
 * lock not had in time included); no partition is dropped then. */
#define INGEST_RETAIN_BATCH   10000
#define INGEST_RETAIN_BATCHES 20
METER_MUSTCHECK enum meter_rc ingest_drop_old_samples(PGconn *conn, int64_t keep_days,
						      int64_t *dropped, bool *more);

#endif
