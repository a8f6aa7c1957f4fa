/* Integration: a check that read a key's old time zone and reaches its
 * ledger row after a change of the zone committed (PUT .../limits holds
 * the old zone's rows until it commits) is decided again on the new zone's
 * day: its hold lands there, not on the old zone's day where metering no
 * longer files the sandbox's spend. Both paths: the classic one (held up
 * here on the price book, after it read the key) and the fast path's
 * one-key branch (held up on its sandbox's id, after it checked the key;
 * sql/0032 reads the zone again after the ledger row). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks_util.h"

struct create_call {
	const struct apitest *t;
	const char *key;
	const char *sb;
	int vcpus;
	long mib;
	long lease;
	struct apitest_resp r;
};

static void *create_thread(void *arg)
{
	struct create_call *c = arg;

	cu_create(c->t, 0, c->key, c->sb, c->vcpus, c->mib, c->lease, NULL, &c->r);
	return NULL;
}

/* meter_check_batches_total{path="fast"} of server 0. */
static long long fast_batches(const struct apitest *t)
{
	return apitest_metric(t, 0, "meter_check_batches_total{path=\"fast\"}");
}

static long put_zone(const struct apitest *t, const char *key, const char *zone)
{
	struct apitest_resp r;
	char path[128], body[96];
	long st;

	snprintf(path, sizeof(path), "/v1/keys/%s/limits", key);
	snprintf(body, sizeof(body), "{\"time_zone\":\"%s\"}", zone);
	apitest_call(t, 1, "PUT", path, t->operator_token, body, &r);
	st = r.status;
	if (st != 200)
		fprintf(stderr, "PUT: %s\n", r.body ? r.body : "-");
	apitest_resp_release(&r);
	return st;
}

static void check_hold_day(PGconn *db, const char *sb, const char *zone)
{
	char sql[256], want[16], got[16];

	snprintf(sql, sizeof(sql), "SELECT meter_key_day('%s', now())::text", zone);
	testdb_query_text(db, sql, want, sizeof(want));
	snprintf(sql, sizeof(sql), "SELECT min(day)::text FROM holds WHERE sandbox_id = '%s'", sb);
	testdb_query_text(db, sql, got, sizeof(got));
	fprintf(stderr, "%s: hold day %s, new zone's day %s\n", sb, got, want);
	CHECK_STR(got, want);
}

/* Classic: the batch read the key (old zone) and waits for the price book
 * (locked here) while the change commits. */
static void test_classic(struct apitest *t, const char *acc)
{
	char key[65], token[APITEST_TOKEN_MAX];
	struct create_call c = {.t = t, .sb = "race-c", .vcpus = 1, .mib = 1024, .lease = 60};
	PGconn *x = PQconnectdb(t->db.url), *db = t->db.conn;
	char own[16], zone[16];
	int m = apitest_midday_offset();
	pthread_t th;

	/* The key at its midday, the new zone on another date. */
	apitest_fixed_zone(own, sizeof(own), m);
	cu_other_day_zone(zone, sizeof(zone), m);
	CHECK(apitest_create_key(t, acc, "full", 100000, own, key, token) == 0);
	c.key = key;
	{
		/* The engine's one connection made (it prepares chk_prices). */
		struct apitest_resp r;

		CHECK_I64(cu_create(t, 0, "no-such-key", "warm", 1, 1, 1, NULL, &r), 404);
		apitest_resp_release(&r);
	}
	cu_sql(x, "BEGIN");
	cu_sql(x, "LOCK TABLE price_book IN ACCESS EXCLUSIVE MODE");
	CHECK(pthread_create(&th, NULL, create_thread, &c) == 0);
	for (int i = 0; i < 500 && cu_sql_int(db, "SELECT count(*) FROM pg_stat_activity"
						  " WHERE datname = current_database()"
						  " AND wait_event_type = 'Lock'"
						  " AND query LIKE '%%effective_from <= $2%%'"
						  " AND xact_start < query_start") < 1;
	     i++)
		cu_sleep_ms(20);
	CHECK_I64(put_zone(t, key, zone), 200);
	cu_sql(x, "COMMIT");
	PQfinish(x);
	pthread_join(th, NULL);
	CHECK_I64(c.r.status, 200);
	apitest_resp_release(&c.r);
	check_hold_day(db, "race-c", zone);
}

/* Fast, one key: the batch checked the key (old zone) and waits for its
 * sandbox's id (inserted here, not committed) while the change commits. */
static void test_fast(struct apitest *t, const char *acc)
{
	char key[65], token[APITEST_TOKEN_MAX], sql[512], at[48];
	struct apitest_resp r;
	struct create_call c = {.t = t, .sb = "race-f", .vcpus = 2, .mib = 4096, .lease = 900};
	PGconn *y = PQconnectdb(t->db.url), *db = t->db.conn;
	char own[16], zone[16];
	int m = apitest_midday_offset();
	pthread_t th;
	long long n0;

	apitest_fixed_zone(own, sizeof(own), m);
	cu_other_day_zone(zone, sizeof(zone), m);
	CHECK(apitest_create_key(t, acc, "full", 20000, own, key, token) == 0);
	c.key = key;
	/* The engine learns the key and its row, then the row as it is after
	 * the stop (a refused create). */
	CHECK_I64(cu_create(t, 0, key, "race-f0", 2, 4096, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "race-f1", 1, 1, 1, NULL, &r), 402);
	apitest_resp_release(&r);
	testdb_query_text(db,
			  "SELECT to_char(min(lease_starts_at) AT TIME ZONE 'UTC',"
			  " 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM holds WHERE sandbox_id = "
			  "'race-f0'",
			  at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "race-f0", "stopped", at, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "race-f2", 2, 4096, 1000, NULL, &r), 402);
	apitest_resp_release(&r);
	n0 = fast_batches(t);

	cu_sql(y, "BEGIN");
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state)"
		 " VALUES ('%s', 'race-f', '%s', 1, 1, 'running')",
		 acc, key);
	cu_sql(y, sql);
	CHECK(pthread_create(&th, NULL, create_thread, &c) == 0);
	cu_await_lock_waiters(db, 1);
	CHECK_I64(put_zone(t, key, zone), 200);
	cu_sql(y, "ROLLBACK");
	PQfinish(y);
	pthread_join(th, NULL);
	fprintf(stderr, "fast batches committed during the race: %lld\n", fast_batches(t) - n0);
	CHECK_I64(c.r.status, 200);
	apitest_resp_release(&c.r);
	check_hold_day(db, "race-f", zone);
}

int main(void)
{
	struct apitest t;
	char acc[65];
	const char *args[] = {"--check-connections", "1", NULL};

	if (apitest_start(&t, "key_tz_race", 2, args, NULL) < 0)
		return 1;
	CHECK(apitest_create_account(&t, "Race", acc) == 0);
	test_classic(&t, acc);
	test_fast(&t, acc);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	return check_done();
}
