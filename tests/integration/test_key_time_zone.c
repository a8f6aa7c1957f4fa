/* API: changing a key's time zone (PUT /v1/keys/{id}/limits) against two
 * real meterd processes and PostgreSQL. A key's holds and ledger rows are
 * on the days of the zone they were made in, and metering files spend
 * under the key's zone, so the zone changes only while the key has no open
 * hold: otherwise 409 open_holds with the figures, and nothing changes
 * (not the limit sent with it either). Sending the key's own zone changes
 * the limit as before. Once the holds are settled the zone changes and the
 * next check holds against the new zone's day. A hold a check commits
 * while the change waits for the old zone's ledger row is counted. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks_util.h"

/* What a PUT of the key's limits answers, from a thread of its own. */
struct put_call {
	const struct apitest *t;
	int server;
	char path[128];
	const char *token;
	char body[160];
	struct apitest_resp r;
};

static void *put_thread(void *arg)
{
	struct put_call *c = arg;

	apitest_call(c->t, c->server, "PUT", c->path, c->token, c->body, &c->r);
	return NULL;
}

/* PUT body to the key's limits on server i; returns the HTTP status. */
static long put_limits(const struct apitest *t, int i, const char *key, const char *token,
		       const char *body, struct apitest_resp *out)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/keys/%s/limits", key);
	apitest_call(t, i, "PUT", path, token, body, out);
	return out->status;
}

/* The key's ledger rows and its own row as text, to tell that nothing
 * changed. */
static void key_state(PGconn *db, const char *key, char *out, size_t len)
{
	char sql[768];

	snprintf(
	    sql, sizeof(sql),
	    "SELECT k.time_zone || '/' || COALESCE(k.daily_limit_micros::text, '-') || '/'"
	    " || COALESCE((SELECT g.generation FROM ingest_generation g"
	    "  WHERE g.account_id = k.account_id), 0) || '/' || COALESCE((SELECT"
	    "  string_agg(l.day || ':' || l.spent_micros || ':' || l.held_micros || ':'"
	    "  || COALESCE(l.limit_micros::text, '-') || ':' || l.updated_at, ',' ORDER BY l.day)"
	    "  FROM key_day_ledger l WHERE l.account_id = k.account_id AND l.key_id = k.key_id),"
	    "  '') FROM api_keys k WHERE k.key_id = '%s'",
	    key);
	testdb_query_text(db, sql, out, len);
}

/* True when r's open_holds counts key's open holds, one a sandbox of
 * nsandboxes (the keys' zones keep every lease here off a midnight). */
static bool open_holds_ok(PGconn *db, const struct apitest_resp *r, const char *key,
			  long long nsandboxes)
{
	long long n = cu_errint(r, "open_holds");

	return n == cu_sql_int(db,
			       "SELECT count(*) FROM holds WHERE key_id = '%s' AND status = 'open'",
			       key) &&
	       n == nsandboxes;
}

/* True when the error's latest_lease_ends_at is the latest lease end of
 * the key's open holds. */
static bool latest_end_ok(PGconn *db, const struct apitest_resp *r, const char *key)
{
	const char *at = json_string_value(
	    json_object_get(json_object_get(r->json, "error"), "latest_lease_ends_at"));
	char sql[256];

	if (!at || strlen(at) > 40)
		return false;
	snprintf(sql, sizeof(sql),
		 "SELECT ('%s'::timestamptz = max(lease_ends_at))::int FROM holds"
		 " WHERE key_id = '%s' AND status = 'open'",
		 at, key);
	return cu_sql_int(db, "%s", sql) == 1;
}

/* Stops sandbox sb at its lease's start: nothing of it is left to meter,
 * so its holds are settled at once. */
static void stop_at_start(struct apitest *t, const char *sb)
{
	struct apitest_resp r;
	char sql[256], at[48];

	snprintf(sql, sizeof(sql),
		 "SELECT to_char(min(lease_starts_at) AT TIME ZONE 'UTC',"
		 " 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM holds WHERE sandbox_id = '%s'",
		 sb);
	testdb_query_text(t->db.conn, sql, at, sizeof(at));
	CHECK_I64(cu_event(t, 0, sb, "stopped", at, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(
		      t->db.conn,
		      "SELECT count(*) FROM holds WHERE sandbox_id = '%s' AND status = 'open'", sb),
		  0);
}

static void test_open_holds(struct apitest *t, const char *acc)
{
	struct apitest_resp r;
	char key[65], token[APITEST_TOKEN_MAX], before[4096], after[4096], body[160], day[16];
	char old_day[16], new_day[16], sql[256], own[16], zone[16];
	PGconn *db = t->db.conn;
	int m = apitest_midday_offset();

	/* The key at its midday; the other zone on another date. */
	apitest_fixed_zone(own, sizeof(own), m);
	cu_other_day_zone(zone, sizeof(zone), m);
	CHECK(apitest_create_key(t, acc, "full", 100000, own, key, token) == 0);
	CHECK_I64(cu_create(t, 0, key, "tz-1", 2, 4096, 900, NULL, &r), 200);
	CHECK_I64(cu_jint(r.json, "hold_micros"), 20000);
	apitest_resp_release(&r);

	/* An open hold: refused with the figures, by the key itself and by the
	 * operator, on either process; nothing changed, not the limit sent
	 * with the zone. */
	key_state(db, key, before, sizeof(before));
	snprintf(body, sizeof(body), "{\"time_zone\":\"%s\",\"daily_limit_micros\":50000}", zone);
	CHECK_I64(put_limits(t, 1, key, token, body, &r), 409);
	CHECK_STR(apitest_error_code(&r), "open_holds");
	CHECK(open_holds_ok(db, &r, key, 1));
	CHECK(latest_end_ok(db, &r, key));
	CHECK(strstr(r.body ? r.body : "", "settled") != NULL);
	apitest_resp_release(&r);
	snprintf(body, sizeof(body), "{\"time_zone\":\"%s\"}", zone);
	CHECK_I64(put_limits(t, 0, key, t->operator_token, body, &r), 409);
	CHECK_STR(apitest_error_code(&r), "open_holds");
	apitest_resp_release(&r);
	key_state(db, key, after, sizeof(after));
	CHECK_STR(after, before);
	snprintf(sql, sizeof(sql), "/v1/keys/%s", key);
	CHECK(apitest_call(t, 0, "GET", sql, token, NULL, &r) == 0);
	CHECK_STR(apitest_json_str(&r, "time_zone"), own);
	CHECK_I64(cu_jint(r.json, "daily_limit_micros"), 100000);
	apitest_resp_release(&r);

	/* The key's own zone: the limit changes as before, holds or not. */
	snprintf(body, sizeof(body), "{\"time_zone\":\"%s\",\"daily_limit_micros\":90000}", own);
	CHECK_I64(put_limits(t, 1, key, token, body, &r), 200);
	CHECK_STR(apitest_json_str(&r, "time_zone"), own);
	CHECK_I64(cu_jint(r.json, "daily_limit_micros"), 90000);
	CHECK_I64(cu_jint(r.json, "day_held_micros"), 20000);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db,
			     "SELECT limit_micros FROM key_day_ledger WHERE key_id = '%s'"
			     " AND day = meter_key_day('%s', now())",
			     key, own),
		  90000);
	snprintf(body, sizeof(body), "{\"time_zone\":\"%s\"}", zone);
	CHECK_I64(put_limits(t, 0, key, token, "{\"daily_limit_micros\":100000}", &r), 200);
	CHECK_I64(cu_jint(r.json, "daily_limit_micros"), 100000);
	apitest_resp_release(&r);

	/* Two open holds: the latest lease end is the longer lease's. */
	CHECK_I64(cu_create(t, 1, key, "tz-2", 1, 1024, 1800, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(put_limits(t, 0, key, token, body, &r), 409);
	CHECK(open_holds_ok(db, &r, key, 2));
	CHECK(latest_end_ok(db, &r, key));
	/* The latest lease end is tz-2's (a lease's parts share its end). */
	CHECK(cu_sql_int(db,
			 "SELECT count(*) FROM holds WHERE sandbox_id <> 'tz-2' AND lease_ends_at ="
			 " (SELECT max(lease_ends_at) FROM holds WHERE key_id = '%s')",
			 key) == 0);
	apitest_resp_release(&r);

	/* Settled (stopped): the zone changes, and the next check, on either
	 * process, holds against the new zone's day. */
	stop_at_start(t, "tz-1");
	CHECK_I64(put_limits(t, 0, key, token, body, &r), 409);
	CHECK(open_holds_ok(db, &r, key, 1));
	apitest_resp_release(&r);
	stop_at_start(t, "tz-2");
	CHECK_I64(put_limits(t, 1, key, token, body, &r), 200);
	CHECK_STR(apitest_json_str(&r, "time_zone"), zone);
	CHECK_I64(cu_jint(r.json, "daily_limit_micros"), 100000);
	snprintf(sql, sizeof(sql), "SELECT meter_key_day('%s', now())::text", zone);
	testdb_query_text(db, sql, new_day, sizeof(new_day));
	CHECK_STR(apitest_json_str(&r, "day"), new_day);
	apitest_resp_release(&r);
	snprintf(sql, sizeof(sql), "SELECT meter_key_day('%s', now())::text", own);
	testdb_query_text(db, sql, old_day, sizeof(old_day));
	CHECK(strcmp(new_day, old_day) != 0);
	for (int server = 0; server < 2; server++) {
		char sb[16];

		snprintf(sb, sizeof(sb), "tz-%d", 3 + server);
		CHECK_I64(cu_create(t, server, key, sb, 2, 4096, 900, NULL, &r), 200);
		snprintf(day, sizeof(day), "%s",
			 apitest_json_str(&r, "day") ? apitest_json_str(&r, "day") : "");
		CHECK_STR(day, new_day);
		CHECK_I64(cu_jint(r.json, "daily_limit_micros"), 100000);
		apitest_resp_release(&r);
		CHECK_I64(cu_sql_int(db,
				     "SELECT count(*) FROM holds WHERE sandbox_id = '%s'"
				     " AND day = '%s' AND status = 'open'",
				     sb, day),
			  1);
	}
	CHECK_I64(cu_held_mismatches(db), 0);
	CHECK_I64(cu_over_limit(db), 0);
}

/* The change waits for the old zone's ledger row while a check holds it:
 * the hold that check commits meanwhile is counted (409), and once it is
 * settled the change goes through. */
static void test_waits_for_check(struct apitest *t, const char *acc)
{
	struct apitest_resp r;
	struct put_call call = {.t = t, .server = 1};
	char key[65], token[APITEST_TOKEN_MAX], today[16], sql[512], after[4096], own[16], zone[16];
	PGconn *db = t->db.conn, *lock;
	int m = apitest_midday_offset();
	pthread_t th;
	long long hold;

	apitest_fixed_zone(own, sizeof(own), m);
	cu_other_day_zone(zone, sizeof(zone), m);
	CHECK(apitest_create_key(t, acc, "full", 100000, own, key, token) == 0);
	CHECK_I64(cu_create(t, 0, key, "tzw-1", 1, 1024, 60, NULL, &r), 200);
	snprintf(today, sizeof(today), "%s",
		 apitest_json_str(&r, "day") ? apitest_json_str(&r, "day") : "");
	apitest_resp_release(&r);
	stop_at_start(t, "tzw-1");

	/* A writer of the old zone's day holds its row, as a check does from
	 * its lock to its commit. */
	lock = cu_lock_day(t->db.url, acc, key, today);
	snprintf(call.path, sizeof(call.path), "/v1/keys/%s/limits", key);
	call.token = token;
	snprintf(call.body, sizeof(call.body), "{\"time_zone\":\"%s\"}", zone);
	CHECK(pthread_create(&th, NULL, put_thread, &call) == 0);
	cu_await_lock_waiters(db, 1);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
		 " lease_starts_at, lease_ends_at) VALUES ('%s', '%s', 'tzw-1', '%s', 1000,"
		 " now(), now() + interval '10 minutes')",
		 acc, key, today);
	cu_sql(lock, sql);
	snprintf(sql, sizeof(sql),
		 "UPDATE key_day_ledger SET held_micros = held_micros + 1000 WHERE key_id = '%s'"
		 " AND day = '%s'",
		 key, today);
	cu_sql(lock, sql);
	cu_sql(lock, "COMMIT");
	PQfinish(lock);
	pthread_join(th, NULL);
	CHECK_I64(call.r.status, 409);
	CHECK_STR(apitest_error_code(&call.r), "open_holds");
	CHECK_I64(cu_errint(&call.r, "open_holds"), 1);
	apitest_resp_release(&call.r);
	key_state(db, key, after, sizeof(after));
	CHECK(strncmp(after, own, strlen(own)) == 0 && after[strlen(own)] == '/');

	/* Settled: it goes through. */
	hold = cu_sql_int(db,
			  "SELECT meter_hold_close(account_id, hold_id, 'released') FROM holds"
			  " WHERE key_id = '%s' AND status = 'open'",
			  key);
	CHECK_I64(hold, 1000);
	CHECK_I64(put_limits(t, 1, key, token, call.body, &r), 200);
	CHECK_STR(apitest_json_str(&r, "time_zone"), zone);
	apitest_resp_release(&r);
	CHECK_I64(cu_held_mismatches(db), 0);
}

int main(void)
{
	struct apitest t;
	char acc[65];
	const char *env[] = {"METER_LEASE_GRACE_S=2", NULL};

	if (apitest_start(&t, "key_tz", 2, NULL, env) < 0)
		return 1;
	CHECK(apitest_create_account(&t, "Zones", acc) == 0);
	test_open_holds(&t, acc);
	test_waits_for_check(&t, acc);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	return check_done();
}
