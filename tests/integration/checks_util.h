/* Helpers shared by the check engine's API tests (test_checks*.c,
 * test_webhook.c): requests as the control plane, SQL probes and the ledger
 * invariant. Header-only, file-local. */
#ifndef METER_TEST_CHECKS_UTIL_H
#define METER_TEST_CHECKS_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apitest.h"
#include "check.h"

/* POSTs body to path on server i as the control plane; out to release. */
static inline int cu_post(const struct apitest *t, int i, const char *path, const char *body,
			  struct apitest_resp *out)
{
	return apitest_call(t, i, "POST", path, t->control_plane_token, body, out);
}

/* A create check; returns the HTTP status (0 when no answer). */
static inline long cu_create(const struct apitest *t, int i, const char *key, const char *sandbox,
			     int vcpus, long memory_mib, long lease_s, const char *extra,
			     struct apitest_resp *out)
{
	char body[512];

	snprintf(body, sizeof(body),
		 "{\"key_id\":\"%s\",\"sandbox_id\":\"%s\",\"vcpus\":%d,\"memory_mib\":%ld,"
		 "\"lease_seconds\":%ld%s%s}",
		 key, sandbox, vcpus, memory_mib, lease_s, extra ? "," : "", extra ? extra : "");
	cu_post(t, i, "/v1/checks/create", body, out);
	return out->status;
}

static inline long cu_wake(const struct apitest *t, int i, const char *sandbox, long lease_s,
			   const char *extra, struct apitest_resp *out)
{
	char body[256];

	snprintf(body, sizeof(body), "{\"sandbox_id\":\"%s\",\"lease_seconds\":%ld%s%s}", sandbox,
		 lease_s, extra ? "," : "", extra ? extra : "");
	cu_post(t, i, "/v1/checks/wake", body, out);
	return out->status;
}

static inline long cu_event(const struct apitest *t, int i, const char *sandbox, const char *type,
			    const char *at, struct apitest_resp *out)
{
	char body[160], path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", sandbox);
	snprintf(body, sizeof(body), "{\"type\":\"%s\",\"at\":\"%s\"}", type, at);
	cu_post(t, i, path, body, out);
	return out->status;
}

/* Integer member of a JSON object; -1 absent, -2 null. */
static inline long long cu_jint(const json_t *o, const char *name)
{
	json_t *v = json_object_get(o, name);

	if (json_is_null(v))
		return -2;
	return json_is_integer(v) ? json_integer_value(v) : -1;
}

/* Integer member of the error object of an error response. */
static inline long long cu_errint(const struct apitest_resp *r, const char *name)
{
	return cu_jint(json_object_get(r->json, "error"), name);
}

/* The one integer of a one-row, one-column query; -1 on failure or NULL. */
static inline long long cu_sql_int(PGconn *conn, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline long long cu_sql_int(PGconn *conn, const char *fmt, ...)
{
	char sql[1024];
	va_list ap;
	PGresult *res;
	long long v = -1;

	va_start(ap, fmt);
	vsnprintf(sql, sizeof(sql), fmt, ap);
	va_end(ap);
	res = PQexec(conn, sql);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
	    !PQgetisnull(res, 0, 0))
		v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	else if (PQresultStatus(res) != PGRES_TUPLES_OK)
		fprintf(stderr, "sql failed: %s: %s", sql, PQerrorMessage(conn));
	PQclear(res);
	return v;
}

/* Runs SQL that must succeed. */
static inline void cu_sql(PGconn *conn, const char *sql)
{
	CHECK_STR(testdb_exec_state(conn, sql), "00000");
}

/* The ledger invariant over the whole database: every key-day's held equals
 * what its open holds have left. Returns the number of rows violating it. */
static inline long long cu_held_mismatches(PGconn *conn)
{
	return cu_sql_int(
	    conn, "SELECT count(*) FROM key_day_ledger l"
		  " WHERE l.held_micros <> (SELECT COALESCE(sum(GREATEST(h.amount_micros"
		  "   - h.consumed_micros, 0)), 0) FROM holds h WHERE h.account_id = l.account_id"
		  "   AND h.key_id = l.key_id AND h.day = l.day AND h.status = 'open')");
}

/* Key-days whose committed = spent + held is above their limit (metering may
 * legitimately get there; checks never may). */
static inline long long cu_over_limit(PGconn *conn)
{
	return cu_sql_int(conn, "SELECT count(*) FROM key_day_ledger WHERE limit_micros IS NOT NULL"
				" AND spent_micros + held_micros > limit_micros");
}

/* Formats UTC seconds as RFC 3339. */
static inline void cu_rfc3339(time_t s, char *buf, size_t len)
{
	struct tm tm;

	gmtime_r(&s, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static inline void cu_sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* A connection of the test's own holding (BEGIN ... FOR UPDATE) the ledger
 * row of key on day ("YYYY-MM-DD"); COMMIT and PQfinish it to let go. */
static inline PGconn *cu_lock_day(const char *url, const char *acc, const char *key,
				  const char *day)
{
	PGconn *c = PQconnectdb(url);
	char sql[256];

	CHECK(PQstatus(c) == CONNECTION_OK);
	cu_sql(c, "BEGIN");
	snprintf(sql, sizeof(sql),
		 "SELECT 1 FROM key_day_ledger WHERE account_id = '%s' AND key_id = '%s'"
		 " AND day = '%s' FOR UPDATE",
		 acc, key, day);
	CHECK_STR(testdb_exec_state(c, sql), "00000");
	return c;
}

/* The sweeper's statements (meter/db_checks.c): each of its steps waits
 * (up to its 1 s lock_timeout) for a ledger row a test holds whenever its
 * round finds work on that key-day: the lease-end step once a lease of it
 * has ended (test_checks_race's one-second wake), the settling step once
 * a kept tail's grace has passed (test_checks' pauses, lease_grace_s 2),
 * the outrun and stop-tail steps alike. A condition on pg_stat_activity
 * that leaves them out. */
#define CU_NOT_SWEEPER                                                                             \
	" AND query NOT LIKE '%%meter_holds_expire%%' AND query NOT LIKE '%%meter_holds_settle%%'" \
	" AND query NOT LIKE '%%meter_leases_outrun%%' AND query NOT LIKE '%%meter_stop_tails%%'"

/* Waits (up to 10 s) until n backends of conn's database wait for a lock,
 * not counting the sweeper's (CU_NOT_SWEEPER), whose rounds fall whenever
 * they do: counted, a settling step that came in the same 20 ms as the
 * awaited waiter made 2 where 1 was wanted. */
static inline void cu_await_lock_waiters(PGconn *conn, int n)
{
	long long w = 0;

	for (int i = 0; i < 500; i++) {
		w = cu_sql_int(conn, "SELECT count(*) FROM pg_stat_activity"
				     " WHERE datname = current_database()"
				     " AND wait_event_type = 'Lock'" CU_NOT_SWEEPER);
		if (w >= n)
			break;
		cu_sleep_ms(20);
	}
	if (w != n) {
		/* Who waits, for the failure's report. */
		PGresult *res =
		    PQexec(conn, "SELECT application_name, left(query, 120)"
				 " FROM pg_stat_activity WHERE datname = current_database()"
				 " AND wait_event_type = 'Lock'");

		for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++)
			fprintf(stderr, "lock waiter: [%s] %s\n", PQgetvalue(res, i, 0),
				PQgetvalue(res, i, 1));
		PQclear(res);
	}
	CHECK_I64(w, n);
}

/* Seconds to add to now so that the clock reads target (UTC seconds). */
static inline long long cu_offset_to(time_t target)
{
	return (long long)target - (long long)apitest_now();
}

/* A fixed-offset zone whose date now is not the date of the zone m hours
 * ahead of UTC where it is midday (apitest_midday_offset): 13 hours further
 * ahead (01:00 to 02:00 the next day) or, where there is no such zone, 14
 * hours behind (22:00 to 23:00 the day before). Either is an hour or more
 * from its midnight. */
static inline const char *cu_other_day_zone(char *buf, size_t len, int m)
{
	return apitest_fixed_zone(buf, len, m + 13 <= 14 ? m + 13 : m - 14);
}

#endif
