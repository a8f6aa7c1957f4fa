/* Integration: the tail a settlement keeps is exactly amount * tail / part
 * rounded up (sql/0027), plus one micro (sql/0034), whatever the size of
 * the figures.
 *
 * ceil() of a numeric quotient, as 0014 to 0023 wrote it, loses the
 * fraction when the exact quotient is a whole number plus less than about
 * 1e-10: PostgreSQL rounds the quotient to about 16 significant digits
 * first. The adversarial tail is the one whose product with the amount
 * leaves a remainder of one over the part (the amount's inverse modulo the
 * part): its exact share is a whole number plus 1/part. For amounts of
 * 3e8 to 1.2e14 micros over a day part of 86,399,999,999 µs (a lease that
 * started a microsecond after midnight), meter_share_up() must give the
 * integer answer (worked out here with 128-bit integers). The one-hold
 * settlement (a pause at part start + tail) and the lease-end sweep (a
 * sandbox metered up to part end - tail) keep that answer plus one micro
 * (meter_tail_keep, sql/0034: metering rounds each resource on its own). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "migrate.h"
#include "testdb.h"

#define PART INT64_C(86399999999) /* µs: 2026-11-30 00:00:00.000001 to 12-01 00:00 */

static const int64_t amounts[] = {300000007, 614400001, 999999937, INT64_C(123456789012345)};

/* ceil(a * t / part), exactly. */
static int64_t share_up(int64_t a, int64_t t, int64_t part)
{
	__int128 p = (__int128)a * t;

	return (int64_t)((p + part - 1) / part);
}

/* The inverse of a modulo m (gcd 1), or -1. */
static int64_t inverse(int64_t a, int64_t m)
{
	__int128 r0 = m, r1 = a % m, t0 = 0, t1 = 1;

	while (r1 != 0) {
		__int128 q = r0 / r1, x;

		x = r0 - q * r1;
		r0 = r1;
		r1 = x;
		x = t0 - q * t1;
		t0 = t1;
		t1 = x;
	}
	if (r0 != 1)
		return -1;
	return (int64_t)(t0 < 0 ? t0 + m : t0);
}

int main(void)
{
	struct testdb db = {0};
	char err[512] = "", sql[4096];
	int applied = 0;

	if (testdb_create(&db, "settleexact") != 0 ||
	    migrate_apply(db.conn, &applied, err, sizeof(err)) != METER_OK) {
		fprintf(stderr, "setup: %s\n", err);
		CHECK(0);
		testdb_drop(&db);
		return check_done();
	}
	CHECK_STR(testdb_exec_state(
		      db.conn,
		      "INSERT INTO accounts (account_id, name) VALUES ('acc', 'Exact');"
		      "INSERT INTO api_keys (account_id, key_id, secret_hash, role, time_zone)"
		      " VALUES ('acc', 'key', decode(repeat('ab', 32), 'hex'), 'full', 'UTC')"),
		  "00000");
	for (size_t i = 0; i < sizeof(amounts) / sizeof(amounts[0]); i++) {
		int64_t a = amounts[i], t = inverse(a, PART), want;
		char got_ceil[48];

		CHECK(t > 0);
		if (t <= 0)
			continue;
		want = share_up(a, t, PART);
		/* The case is adversarial: the exact quotient is want - 1 plus
		 * 1/part, which ceil() of the numeric quotient rounds away. */
		CHECK_I64((int64_t)(((__int128)a * t) % PART), 1);
		snprintf(sql, sizeof(sql), "SELECT ceil(%lld::numeric * %lld / %lld)::bigint",
			 (long long)a, (long long)t, (long long)PART);
		testdb_query_text(db.conn, sql, got_ceil, sizeof(got_ceil));
		CHECK_I64(strtoll(got_ceil, NULL, 10), want - 1);

		snprintf(
		    sql, sizeof(sql),
		    "SELECT meter_share_up(%lld, %lld * interval '1 us', %lld * interval '1 us')",
		    (long long)a, (long long)t, (long long)PART);
		CHECK_I64(testdb_query_int(db.conn, sql), want);
		snprintf(
		    sql, sizeof(sql),
		    "SELECT meter_tail_keep(%lld, %lld * interval '1 us', %lld * interval '1 us')",
		    (long long)a, (long long)t, (long long)PART);
		CHECK_I64(testdb_query_int(db.conn, sql), want + 1);

		/* A pause at part start + t: the one-hold settlement keeps the
		 * share of the unmetered tail (nothing metered), and a micro. */
		snprintf(
		    sql, sizeof(sql),
		    "DELETE FROM holds; DELETE FROM key_day_ledger;"
		    "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		    "  state, created_at, state_since, lease_ends_at)"
		    " VALUES ('acc', 'p%zu', 'key', 1, 1024, 'running',"
		    "  '2026-11-30 00:00:00.000001+00', '2026-11-30 00:00:00.000001+00',"
		    "  '2026-12-01 00:00:00+00'),"
		    " ('acc', 'e%zu', 'key', 1, 1024, 'running',"
		    "  '2026-11-30 00:00:00.000001+00', '2026-11-30 00:00:00.000001+00',"
		    "  '2026-12-01 00:00:00+00');"
		    "INSERT INTO sandbox_meter (account_id, sandbox_id, last_sampled_at,"
		    "  last_state, last_cpu_usec, last_memory_mib, last_storage_mib, last_vcpus,"
		    "  price_version)"
		    " VALUES ('acc', 'e%zu', timestamptz '2026-12-01 00:00:00+00'"
		    "  - %lld * interval '1 us', 'running', 0, 1024, 0, 1, 1);"
		    "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
		    "  lease_starts_at, lease_ends_at, created_at)"
		    " SELECT 'acc', 'key', s, '2026-11-30', %lld, '2026-11-30 00:00:00.000001+00',"
		    "  '2026-12-01 00:00:00+00', '2026-11-30 00:00:00.000001+00'"
		    " FROM unnest(ARRAY['p%zu', 'e%zu']) s;"
		    "INSERT INTO key_day_ledger (account_id, key_id, day, held_micros)"
		    " VALUES ('acc', 'key', '2026-11-30', 2 * %lld::bigint)",
		    i, i, i, (long long)t, (long long)a, i, i, (long long)a);
		CHECK_STR(testdb_exec_state(db.conn, sql), "00000");
		snprintf(
		    sql, sizeof(sql),
		    "SELECT (meter_hold_settle('acc', hold_id, timestamptz"
		    " '2026-11-30 00:00:00.000001+00' + %lld * interval '1 us', 'settled')).kept"
		    " FROM holds WHERE sandbox_id = 'p%zu'",
		    (long long)t, i);
		CHECK_I64(testdb_query_int(db.conn, sql), want + 1);
		snprintf(sql, sizeof(sql),
			 "SELECT amount_micros FROM holds WHERE sandbox_id = 'p%zu'", i);
		CHECK_I64(testdb_query_int(db.conn, sql), want + 1);

		/* The lease-end sweep: metered up to part end - t, so t is
		 * the tail. */
		CHECK_I64(testdb_query_int(db.conn, "SELECT meter_holds_expire("
						    "'2026-12-01 00:00:01+00', 10)"),
			  1);
		snprintf(sql, sizeof(sql),
			 "SELECT amount_micros FROM holds WHERE sandbox_id = 'e%zu'", i);
		CHECK_I64(testdb_query_int(db.conn, sql), want + 1);
		/* held is the two holds' remainders. */
		CHECK_I64(testdb_query_int(db.conn,
					   "SELECT held_micros - (SELECT sum(amount_micros"
					   " - consumed_micros) FROM holds WHERE status = 'open')"
					   " FROM key_day_ledger"),
			  0);
	}
	testdb_drop(&db);
	return check_done();
}
