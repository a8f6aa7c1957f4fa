/* API: meterd's sweeper takes its three steps in turn, a bounded sweep of
 * each at a time, so that a step with much to do does not hold the others
 * back until it is done.
 *
 * One running meterd, and then, in one transaction, one key's day with
 * 1,500 leases that ended yesterday with no event (never metered: the
 * lease-end step's work, 100 holds a sweep, so 15 sweeps) and 50 holds
 * kept for the tail of a pause yesterday (the settling step's work: one
 * sweep closes them all, being settled more than an hour ago and the
 * oldest). The lease-end step goes first. Taken in turn, the 50 are closed
 * after its first sweep, and the leases it has settled are looked at for
 * hold_outrun (the third step) after that, each while most of the 1,500
 * still wait. Taken each to its end, they would be closed only once all
 * 1,500 were settled. At the end none of the 1,500 waits, the 50 are
 * closed, and the ledger row's held equals what its open holds have
 * left. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checks_util.h"

#define ENDED	 1500 /* the lease-end step's work: 15 of its sweeps */
#define SETTLING 50   /* the settling step's: one of its sweeps */

/* Yesterday's leases (UTC), far from both of its midnights; the two counts
 * are ENDED and SETTLING. */
static const char fixture_fmt[] =
    "INSERT INTO accounts (account_id, name) VALUES ('acc', 'Turns');"
    "INSERT INTO api_keys (account_id, key_id, secret_hash, role, daily_limit_micros, time_zone)"
    " VALUES ('acc', 'key', decode(repeat('ab', 32), 'hex'), 'full', NULL, 'UTC');"
    "CREATE TEMP TABLE y AS SELECT d AS day,"
    "  (d + time '09:00') AT TIME ZONE 'UTC' AS t0900,"
    "  (d + time '09:30') AT TIME ZONE 'UTC' AS t0930,"
    "  (d + time '10:00') AT TIME ZONE 'UTC' AS t1000,"
    "  (d + time '11:00') AT TIME ZONE 'UTC' AS t1100"
    " FROM (SELECT (now() AT TIME ZONE 'UTC')::date - 1 AS d) x;"
    /* Leases 10:00 to 11:00 that ended with the sandbox still running. */
    "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state,"
    "  created_at, state_since, lease_ends_at)"
    " SELECT 'acc', 'e' || g, 'key', 1, 1024, 'running', t1000, t1000, t1100"
    " FROM y, generate_series(1, %d) g;"
    "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
    "  lease_starts_at, lease_ends_at, created_at)"
    " SELECT 'acc', 'key', 'e' || g, day, 1000, t1000, t1100, t1000"
    " FROM y, generate_series(1, %d) g;"
    /* Leases 09:00 to 11:00 paused at 09:30: each hold cut to the pause's
     * tail and kept for it, settled more than the hour a tail is waited
     * for. */
    "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state,"
    "  created_at, state_since, lease_ends_at)"
    " SELECT 'acc', 's' || g, 'key', 1, 1024, 'paused', t0900, t0930, t1100"
    " FROM y, generate_series(1, %d) g;"
    "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
    "  lease_starts_at, lease_ends_at, created_at, settles_at, reserved_micros)"
    " SELECT 'acc', 'key', 's' || g, day, 250, t0900, t1100, t0900, t0930, 2000"
    " FROM y, generate_series(1, %d) g;"
    "INSERT INTO key_day_ledger (account_id, key_id, day, held_micros)"
    " SELECT account_id, key_id, day, sum(amount_micros) FROM holds GROUP BY 1, 2, 3;";

/* The lease-end step's holds not yet settled. */
static long long ended_waiting(PGconn *db)
{
	return cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id LIKE 'e%%'"
			      " AND status = 'open' AND settles_at IS NULL");
}

int main(void)
{
	struct apitest t;
	PGconn *db;
	char fixture[sizeof(fixture_fmt) + 64];
	long long at_closed = -1, at_outrun = -1;

	if (apitest_start(&t, "sweepturns", 1, NULL, NULL) < 0)
		return 1;
	db = t.db.conn;
	snprintf(fixture, sizeof(fixture), fixture_fmt, ENDED, ENDED, SETTLING, SETTLING);
	cu_sql(db, fixture);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE status = 'open'"),
		  ENDED + SETTLING);
	CHECK_I64(cu_held_mismatches(db), 0);

	/* Sampled every 5 ms for up to 60 s, each sample one snapshot: how
	 * many of the 1,500 still waited when the 50 were first seen closed,
	 * and when the first hold_outrun was first seen. */
	for (int i = 0; i < 12000 && (at_closed < 0 || at_outrun < 0); i++) {
		char v[96] = "";
		long long open = -1, outrun = -1, waiting = -1;

		testdb_query_text(
		    db,
		    "SELECT format('%s %s %s', (SELECT count(*) FROM holds WHERE sandbox_id"
		    " LIKE 's%' AND status = 'open'), (SELECT count(*) FROM webhook_outbox"
		    " WHERE type = 'hold_outrun'), (SELECT count(*) FROM holds WHERE sandbox_id"
		    " LIKE 'e%' AND status = 'open' AND settles_at IS NULL))",
		    v, sizeof(v));
		if (sscanf(v, "%lld %lld %lld", &open, &outrun, &waiting) != 3) {
			CHECK(!"the sample was read");
			break;
		}
		if (at_closed < 0 && open == 0)
			at_closed = waiting;
		if (at_outrun < 0 && outrun > 0)
			at_outrun = waiting;
		cu_sleep_ms(5);
	}
	printf("lease ends still waiting when the settling holds were closed: %lld;"
	       " at the first hold_outrun: %lld\n",
	       at_closed, at_outrun);
	/* One sweep of 100 came before either (1,400 wait then); a sample
	 * comes within a few ms, while each sweep of 100 takes tens. */
	CHECK(at_closed >= ENDED / 2 && at_closed < ENDED);
	CHECK(at_outrun >= ENDED / 2 && at_outrun < ENDED);

	/* Then the rest: every lease settled at its end, none left open and
	 * unsettled, and held what the open holds have left. */
	for (int i = 0; i < 600 && ended_waiting(db) > 0; i++)
		cu_sleep_ms(100);
	CHECK_I64(ended_waiting(db), 0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id LIKE 's%%'"
				 " AND status <> 'settled'"),
		  0);
	CHECK_I64(cu_held_mismatches(db), 0);

	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	return check_done();
}
