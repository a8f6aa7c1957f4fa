/* Integration: the lease-end sweep settles many holds of one key-day as a
 * set, a bounded number per call, exactly as the per-hold settlement of a
 * lifecycle event at the lease end does.
 *
 * Two databases get the same fixture: one key (Europe/Paris) with 3,000
 * holds on one day whose leases ended a minute ago (the sandboxes still
 * running on them), a third of them metered past their end (closed at
 * once), a third metered half-way (the rest kept for the tail), a third
 * never metered (kept whole), and leases crossing the key's midnight (two
 * parts). In one, meter_holds_expire(now, 500) is called until it settles
 * nothing; in the other, every such hold goes through meter_hold_settle at
 * its lease end, one by one, as sql/0015 did it. Every hold, the ledger
 * and lease_watch must come out the same, each call must take at most 500
 * holds, and held must equal the open holds' remainders throughout. The
 * tail sweep (meter_holds_settle) then closes the kept holds of metered
 * sandboxes in both, 500 at most a call.
 *
 * A ledger row another transaction holds (a hot key's check batches hold
 * it nearly all the time) is waited for, not passed by: the first call
 * waits while a second connection holds the row and settles its 500 once
 * the row is let go; a row held past the sweep's lock timeout (1 s) makes
 * the call settle nothing and return 0, with nothing changed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "migrate.h"
#include "testdb.h"

#define HOLDS 3000
#define MAX   500
#define NOW   "timestamptz '2026-11-30 23:30:00+00'" /* the sweeps' time */

static const char fixture[] =
    "INSERT INTO accounts (account_id, name) VALUES ('acc', 'Sweep');"
    "INSERT INTO api_keys (account_id, key_id, secret_hash, role, daily_limit_micros, time_zone)"
    " VALUES ('acc', 'key', decode(repeat('ab', 32), 'hex'), 'full', NULL, 'Europe/Paris');"
    /* Leases of 10 minutes that ended before the sweep's time (NOW,
     * below); every tenth one crosses the key's midnight 2026-11-30/12-01
     * (Paris, 23:00 UTC). */
    "CREATE TEMP TABLE fx AS SELECT g,"
    "  CASE WHEN g % 10 = 0 THEN timestamptz '2026-11-30 22:55:00+00'"
    "       ELSE timestamptz '2026-11-30 23:15:00+00' + g % 60 * interval '1 s' END"
    "   AS starts,"
    "  CASE WHEN g % 10 = 0 THEN timestamptz '2026-11-30 23:05:00+00'"
    "       ELSE timestamptz '2026-11-30 23:25:00+00' + g % 60 * interval '1 s' END AS ends"
    "  FROM generate_series(1, 3000) g;"
    "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state,"
    "  created_at, state_since, lease_ends_at)"
    " SELECT 'acc', 's' || g, 'key', 2, 4096, 'running', starts, starts, ends FROM fx;"
    /* Metered past the end, half-way, or never. */
    "INSERT INTO sandbox_meter (account_id, sandbox_id, last_sampled_at, last_state,"
    "  last_cpu_usec, last_memory_mib, last_storage_mib, last_vcpus, price_version)"
    " SELECT 'acc', 's' || g, CASE WHEN g % 3 = 0 THEN ends + interval '5 s'"
    "  ELSE starts + (ends - starts) / 2 END, 'running', 0, 4096, 0, 2, 1"
    " FROM fx WHERE g % 3 <> 2;"
    /* One hold per day part, each the part's worst case as a check holds
     * it (2 vCPU + 4 GiB: 20,000 micros per 900 s); some consumed. */
    "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros, consumed_micros,"
    "  lease_starts_at, lease_ends_at, created_at)"
    " SELECT 'acc', 'key', 's' || g, meter_key_day('Europe/Paris', p.s),"
    "  ceil(20000 * extract(epoch FROM p.e - p.s) / 900)::bigint,"
    "  CASE WHEN g % 7 = 0 THEN 100 ELSE 0 END, starts, ends, starts"
    " FROM fx, LATERAL (SELECT starts AS s, LEAST(ends,"
    "   meter_day_start('Europe/Paris', meter_key_day('Europe/Paris', starts) + 1)) AS e"
    "  UNION ALL SELECT meter_day_start('Europe/Paris',"
    "   meter_key_day('Europe/Paris', starts) + 1), ends"
    "  WHERE meter_key_day('Europe/Paris', ends - interval '1 us')"
    "    > meter_key_day('Europe/Paris', starts)) p;"
    "INSERT INTO key_day_ledger (account_id, key_id, day, held_micros)"
    " SELECT account_id, key_id, day, sum(amount_micros - consumed_micros)"
    " FROM holds GROUP BY 1, 2, 3;";

/* Every hold, the ledger rows and lease_watch, as text to compare. */
static const char state_sql[] =
    "SELECT md5(string_agg(x, '|' ORDER BY x)) || ' ' || count(*) FROM ("
    " SELECT format('h %s %s %s %s %s %s %s %s', hold_id, sandbox_id, day, amount_micros,"
    "  consumed_micros, status, settles_at, reserved_micros) AS x FROM holds"
    " UNION ALL SELECT format('l %s %s %s', key_id, day, held_micros) FROM key_day_ledger"
    " UNION ALL SELECT format('w %s %s %s %s', sandbox_id, lease_ends_at, hold_id, day)"
    "  FROM lease_watch) d";

/* held = the open holds' remainders, on every key-day. */
static const char invariant_sql[] =
    "SELECT count(*) FROM key_day_ledger l WHERE l.held_micros <> (SELECT"
    " COALESCE(sum(GREATEST(h.amount_micros - h.consumed_micros, 0)), 0) FROM holds h"
    " WHERE h.account_id = l.account_id AND h.key_id = l.key_id AND h.day = l.day"
    " AND h.status = 'open')";

/* Milliseconds on the monotonic clock. */
static long long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sends meter_holds_expire(NOW, 500) on conn while locker holds the key's
 * ledger row for hold_ms, then lets it go: the call's count, and how long
 * it took (ms), or -1. */
static long long expire_while_locked(PGconn *conn, PGconn *locker, long long hold_ms,
				     long long *took_ms)
{
	struct timespec pause = {.tv_sec = hold_ms / 1000, .tv_nsec = hold_ms % 1000 * 1000000};
	long long t0, n = -1;
	PGresult *res;

	*took_ms = 0;
	CHECK_STR(testdb_exec_state(locker, "BEGIN; SELECT 1 FROM key_day_ledger FOR UPDATE"),
		  "00000");
	t0 = mono_ms();
	if (!PQsendQuery(conn, "SELECT meter_holds_expire(" NOW ", 500)")) {
		CHECK(0);
		return -1;
	}
	nanosleep(&pause, NULL);
	/* Still waiting for the row, or given up on it (past 1 s). */
	CHECK(PQconsumeInput(conn));
	if (hold_ms < 900)
		CHECK(PQisBusy(conn));
	CHECK_STR(testdb_exec_state(locker, "COMMIT"), "00000");
	while ((res = PQgetResult(conn)) != NULL) {
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
			n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		else
			fprintf(stderr, "expire: %s\n", PQresultErrorMessage(res));
		PQclear(res);
	}
	*took_ms = mono_ms() - t0;
	return n;
}

static int setup(struct testdb *db, const char *tag)
{
	char err[512] = "";
	int applied = 0;

	if (testdb_create(db, tag) != 0)
		return -1;
	if (migrate_apply(db->conn, &applied, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "migrate: %s\n", err);
		return -1;
	}
	if (strcmp(testdb_exec_state(db->conn, fixture), "00000") != 0) {
		fprintf(stderr, "fixture: %s\n", PQerrorMessage(db->conn));
		return -1;
	}
	return 0;
}

/* The outrun sweep on statistics taken while no hold was open and no lease
 * was watched (autovacuum not there yet since):
 * 3,000 watched leases that ended, each with its sandbox's hold open again
 * (so none is due), looked at in one call. Planned as an anti join, such
 * statistics made nested loops that scanned every open hold, and ran the
 * whole pick again, per watched lease (3,000 x 3,000: seconds); each
 * lease's hold is an index look-up by its keys, and the pick runs once
 * (sql/0041). Then the same leases with their holds closed: 100 a call,
 * each deleted once. */
static void test_outrun_stale_statistics(void)
{
	struct testdb db = {0};
	char err[512] = "";
	int applied = 0;
	long long t0, n, took;

	if (testdb_create(&db, "sweepstale") != 0 ||
	    migrate_apply(db.conn, &applied, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "sweepstale: %s\n", err);
		CHECK(0);
		return;
	}
	CHECK_STR(
	    testdb_exec_state(
		db.conn,
		"INSERT INTO accounts (account_id, name) VALUES ('acc', 'Stale');"
		"INSERT INTO api_keys (account_id, key_id, secret_hash, role)"
		" VALUES ('acc', 'key', decode(repeat('ab', 32), 'hex'), 'full');"
		"INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		"  state, created_at, state_since, lease_ends_at)"
		" SELECT 'acc', 'w' || g, 'key', 1, 1024, 'running', " NOW " - interval '1 h',"
		"  " NOW " - interval '1 h', " NOW " - g * interval '1 s'"
		" FROM generate_series(1, 3000) g;"
		"INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
		"  lease_starts_at, lease_ends_at, created_at, status, settled_at)"
		" SELECT 'acc', 'key', 'w' || g, date '2026-11-30', 1000,"
		"  " NOW " - interval '1 h', " NOW " - g * interval '1 s', " NOW
		" - interval '1 h',"
		"  'released', " NOW " FROM generate_series(1, 3000) g;"
		/* Watched leases once, all swept since: the table has pages
		 * and no row when it is analysed. */
		"INSERT INTO lease_watch (account_id, sandbox_id, lease_ends_at, hold_id, day)"
		" SELECT account_id, sandbox_id, lease_ends_at, hold_id, day FROM holds;"
		"DELETE FROM lease_watch;"
		"ANALYZE;"
		"UPDATE holds SET status = 'open', settled_at = NULL;"
		"INSERT INTO lease_watch (account_id, sandbox_id, lease_ends_at, hold_id, day)"
		" SELECT account_id, sandbox_id, lease_ends_at, hold_id, day FROM holds;"),
	    "00000");
	/* The old plans ran for seconds to minutes: given up at 5 s. */
	CHECK_STR(testdb_exec_state(db.conn, "SET statement_timeout = 5000"), "00000");
	t0 = mono_ms();
	n = testdb_query_int(db.conn,
			     "SELECT meter_leases_outrun(" NOW " + interval '1 h', 0, 100)");
	took = mono_ms() - t0;
	fprintf(stderr, "outrun over 3,000 watched leases on stale statistics: %lld ms\n", took);
	CHECK_I64(n, 0);
	CHECK_I64(testdb_query_int(db.conn, "SELECT count(*) FROM lease_watch"), 3000);
	CHECK(took < 400); /* about 10 ms; the scans per lease took seconds */
	CHECK_STR(
	    testdb_exec_state(db.conn, "UPDATE holds SET status = 'released', settled_at = " NOW),
	    "00000");
	CHECK_I64(testdb_query_int(db.conn,
				   "SELECT meter_leases_outrun(" NOW " + interval '1 h', 0, 100)"),
		  100);
	CHECK_I64(testdb_query_int(db.conn, "SELECT count(*) FROM lease_watch"), 2900);
	CHECK_I64(testdb_query_int(db.conn,
				   "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
				   " AND payload->>'reason' = 'lease_ended'"),
		  100);
	testdb_drop(&db);
}

/* Whether a host has reported past a time (meter_host_past, which the
 * sweeper asks for each tail it waits on) plans, locks and reads the one
 * partition of samples that holds the sample's time, however many days are
 * kept: asked with the time from a sandbox_meter row, as its callers ask,
 * with 200 daily partitions. (As a SQL function inlined into its callers,
 * the time was no constant where it was planned, and every partition was
 * planned and locked at each call: a sweeper round grew with every day
 * kept.) Its answers: true once the sample's host has reported at or after
 * the time, false before, and false for a time with no sample. */
static void test_host_past_partitions(void)
{
	struct testdb db = {0};
	char err[512] = "";
	int applied = 0;
	static const char ask[] =
	    "SELECT meter_host_past(m.account_id, m.sandbox_id, m.last_sampled_at, %s)::int"
	    " FROM sandbox_meter m WHERE m.sandbox_id = 'p1'";
	char sql[512];

	if (testdb_create(&db, "sweepparts") != 0 ||
	    migrate_apply(db.conn, &applied, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "sweepparts: %s\n", err);
		CHECK(0);
		return;
	}
	CHECK_STR(
	    testdb_exec_state(
		db.conn,
		"SELECT meter_ensure_sample_partitions(date '2026-05-15', date '2026-11-30');"
		"INSERT INTO accounts (account_id, name) VALUES ('acc', 'Parts');"
		"INSERT INTO api_keys (account_id, key_id, secret_hash, role)"
		" VALUES ('acc', 'key', decode(repeat('ab', 32), 'hex'), 'full');"
		"INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		"  state, created_at, state_since, lease_ends_at)"
		" VALUES ('acc', 'p1', 'key', 1, 1024, 'stopped', " NOW " - interval '1 h',"
		"  " NOW " - interval '1 h', " NOW ");"
		"INSERT INTO samples (account_id, sandbox_id, sampled_at, state, cpu_usec,"
		"  memory_mib, storage_mib, vcpus, host_id)"
		" VALUES ('acc', 'p1', " NOW
		" - interval '10 min', 'running', 0, 1024, 0, 1, 'h1');"
		"INSERT INTO sandbox_meter (account_id, sandbox_id, last_sampled_at, last_state,"
		"  last_cpu_usec, last_memory_mib, last_storage_mib, last_vcpus, price_version)"
		" VALUES ('acc', 'p1', " NOW " - interval '10 min', 'running', 0, 1024, 0, 1, 1);"
		"INSERT INTO ingest_watermarks (host_id, last_sampled_at)"
		" VALUES ('h1', " NOW " - interval '1 min');"
		"ANALYZE;"),
	    "00000");
	CHECK(testdb_query_int(db.conn, "SELECT count(*) FROM pg_inherits"
					" WHERE inhparent = 'samples'::regclass") >= 200);
	CHECK_STR(testdb_exec_state(db.conn, "BEGIN"), "00000");
	snprintf(sql, sizeof(sql), ask, NOW " - interval '5 min'");
	CHECK_I64(testdb_query_int(db.conn, sql), 1);
	/* The partitions of samples this transaction has locked: the day's
	 * (and none other). */
	CHECK(testdb_query_int(db.conn, "SELECT count(*) FROM pg_locks l JOIN pg_inherits i"
					" ON i.inhrelid = l.relation WHERE l.pid = pg_backend_pid()"
					" AND i.inhparent = 'samples'::regclass") <= 1);
	CHECK_STR(testdb_exec_state(db.conn, "COMMIT"), "00000");
	snprintf(sql, sizeof(sql), ask, NOW);
	CHECK_I64(testdb_query_int(db.conn, sql), 0);
	CHECK_I64(testdb_query_int(db.conn,
				   "SELECT meter_host_past('acc', 'p1', " NOW
				   " - interval '9 min', " NOW " - interval '5 min')::int"),
		  0);
	testdb_drop(&db);
}

int main(void)
{
	struct testdb set = {0}, one = {0};
	char a[128], b[128];
	long long n, total = 0, most = 0, calls = 0, kept, open_before, took;
	PGconn *locker;

	if (setup(&set, "sweepset") != 0 || setup(&one, "sweepone") != 0) {
		CHECK(0);
		return check_done();
	}
	open_before =
	    testdb_query_int(set.conn, "SELECT count(*) FROM holds WHERE status = 'open'");
	CHECK(open_before > HOLDS); /* the day parts */
	testdb_query_text(set.conn, state_sql, a, sizeof(a));
	testdb_query_text(one.conn, state_sql, b, sizeof(b));
	CHECK_STR(a, b);

	/* A row held past the lock timeout: nothing settled, nothing
	 * changed, no error. Then one held for 300 ms: waited for, and its
	 * holds settled once it is let go. */
	locker = PQconnectdb(set.url);
	CHECK(PQstatus(locker) == CONNECTION_OK);
	n = expire_while_locked(set.conn, locker, 1500, &took);
	CHECK_I64(n, 0);
	CHECK(took >= 1000);
	testdb_query_text(set.conn, state_sql, a, sizeof(a));
	CHECK_STR(a, b);
	n = expire_while_locked(set.conn, locker, 300, &took);
	CHECK_I64(n, MAX);
	CHECK(took >= 300);
	CHECK_I64(testdb_query_int(set.conn, invariant_sql), 0);
	total = most = n;
	calls = 1;
	PQfinish(locker);

	/* The set: bounded calls until nothing is due. */
	do {
		n = testdb_query_int(set.conn, "SELECT meter_holds_expire(" NOW ", 500)");
		CHECK(n >= 0 && n <= MAX);
		if (n > most)
			most = n;
		total += n > 0 ? n : 0;
		calls++;
		CHECK_I64(testdb_query_int(set.conn, invariant_sql), 0);
	} while (n > 0 && calls < 100);
	CHECK_I64(total, open_before);
	CHECK_I64(most, MAX);
	CHECK(calls >= open_before / MAX);

	/* One by one, as an event at each lease end, and noted as 0015 did. */
	CHECK_STR(testdb_exec_state(
		      one.conn,
		      "DO $$ DECLARE h record; BEGIN"
		      " FOR h IN SELECT * FROM holds WHERE status = 'open' AND settles_at IS NULL"
		      "  AND lease_ends_at <= " NOW " ORDER BY key_id, day, hold_id LOOP"
		      "  IF (meter_hold_settle(h.account_id, h.hold_id, h.lease_ends_at,"
		      "   'released')).released IS NOT NULL THEN"
		      "   INSERT INTO lease_watch AS w (account_id, sandbox_id, lease_ends_at,"
		      "    hold_id, day) SELECT s.account_id, s.sandbox_id, h.lease_ends_at,"
		      "    h.hold_id, h.day FROM sandboxes s WHERE s.account_id = h.account_id"
		      "    AND s.sandbox_id = h.sandbox_id AND s.state = 'running'"
		      "    AND s.lease_ends_at = h.lease_ends_at"
		      "   ON CONFLICT ON CONSTRAINT lease_watch_pkey DO UPDATE"
		      "    SET hold_id = EXCLUDED.hold_id, day = EXCLUDED.day"
		      "    WHERE EXCLUDED.day > w.day;"
		      "  END IF; END LOOP; END $$"),
		  "00000");
	CHECK_I64(testdb_query_int(one.conn, invariant_sql), 0);
	/* settled_at is now() of each transaction: compared apart. */
	testdb_query_text(set.conn, state_sql, a, sizeof(a));
	testdb_query_text(one.conn, state_sql, b, sizeof(b));
	CHECK_STR(a, b);
	CHECK_I64(
	    testdb_query_int(set.conn, "SELECT count(*) FROM holds WHERE status = 'released'"
				       " AND settled_at IS NOT NULL"),
	    testdb_query_int(one.conn, "SELECT count(*) FROM holds WHERE status = 'released'"));
	/* The three kinds all happened. */
	kept = testdb_query_int(set.conn, "SELECT count(*) FROM holds WHERE status = 'open'"
					  " AND settles_at IS NOT NULL");
	CHECK(kept > HOLDS / 2);
	CHECK(testdb_query_int(set.conn, "SELECT count(*) FROM holds WHERE status = 'released'") >
	      HOLDS / 4);
	CHECK(testdb_query_int(set.conn, "SELECT count(*) FROM lease_watch") >= HOLDS);

	/* The tail sweep: metered sandboxes' kept holds close once metering
	 * passes their end; the never metered ones wait for the grace. */
	CHECK_STR(testdb_exec_state(set.conn, "UPDATE sandbox_meter SET last_sampled_at = " NOW),
		  "00000");
	CHECK_STR(testdb_exec_state(one.conn, "UPDATE sandbox_meter SET last_sampled_at = " NOW),
		  "00000");
	total = 0;
	calls = 0;
	do {
		n = testdb_query_int(set.conn, "SELECT meter_holds_settle(" NOW ", 3600, 500)");
		CHECK(n >= 0 && n <= MAX);
		total += n > 0 ? n : 0;
		calls++;
		CHECK_I64(testdb_query_int(set.conn, invariant_sql), 0);
	} while (n > 0 && calls < 100);
	CHECK(total > MAX);
	CHECK_STR(testdb_exec_state(
		      one.conn, "DO $$ DECLARE h record; BEGIN"
				" FOR h IN SELECT * FROM holds WHERE status = 'open'"
				"  AND settles_at IS NOT NULL AND meter_tail_done(account_id,"
				"  sandbox_id, settles_at, " NOW ", 3600) ORDER BY hold_id LOOP"
				"  PERFORM meter_hold_close(h.account_id, h.hold_id, 'settled');"
				" END LOOP; END $$"),
		  "00000");
	testdb_query_text(set.conn, state_sql, a, sizeof(a));
	testdb_query_text(one.conn, state_sql, b, sizeof(b));
	CHECK_STR(a, b);
	CHECK_I64(total, testdb_query_int(one.conn,
					  "SELECT count(*) FROM holds WHERE status = 'settled'"));
	/* The never metered keep their whole remainder, as held. */
	CHECK(testdb_query_int(set.conn, "SELECT count(*) FROM holds WHERE status = 'open'") > 0);

	testdb_drop(&set);
	testdb_drop(&one);
	test_outrun_stale_statistics();
	test_host_past_partitions();
	return check_done();
}
