/* API: GET /v1/sandboxes of an account with 10,000 sandboxes, sorted by cost
 * and by creation, answers within a bound well under meterd's statement
 * timeout (10 s), with exactly the figures and the order of a plain
 * reference query; so does GET /v1/usage of the account per sandbox.
 *
 * The sandboxes and their usage rows are inserted by SQL. Keys in UTC,
 * Asia/Kolkata (+05:30) and Asia/Kathmandu (+05:45): an hour that holds a
 * key's midnight is stored as two rows, one per key day, as metering stores
 * it, so the default range (each key's current day) and the explicit range
 * (from 18:10Z, inside the hour that holds both zones' midnights, to 01:35Z)
 * both cut through hours. Every eleventh sandbox has no usage (ties at zero);
 * creation times come in threes (ties broken by sandbox_id).
 *
 * The reference sums, for every sandbox, its rows whose meter_row_start
 * lies in the range (computed once per distinct time zone, hour and day).
 * Before the list queries picked their page first, both orders computed
 * every figure of every sandbox with dozens of SQL function calls per usage
 * row, and answered 503 metering_unavailable after the 10 s statement
 * timeout. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apitest.h"
#include "check.h"

#define SANDBOXES     10000
#define PAGE	      500
#define ANSWER_MS_MAX 3000 /* one request, well under the 10 s statement timeout */
#define BURST	      6	   /* concurrent requests: as many as hold every read worker */
#define BURST_MS_MAX  5000

struct ref {
	char id[16];
	long long total;
	long long running_s;
	long long month_total;
	long long created_usec;
};

static struct apitest t;
static char acc[65], tro[APITEST_TOKEN_MAX];
static char from[32], to[32]; /* the explicit range, RFC 3339 */
static long long slowest_ms;
static const struct ref *indexed; /* the rows ref_find has indexed */

static void sql_exec(const char *sql)
{
	const char *st = testdb_exec_state(t.db.conn, sql);

	if (strcmp(st, "00000") != 0)
		fprintf(stderr, "sql failed (%s): %.300s\n", st, sql);
	CHECK_STR(st, "00000");
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* GET path with the read-only key; checks 200 within ANSWER_MS_MAX. */
static struct apitest_resp get(const char *path)
{
	struct apitest_resp r;
	long long t0 = now_ms(), ms;

	if (apitest_call(&t, 0, "GET", path, tro, NULL, &r) < 0)
		fprintf(stderr, "GET %s: %s\n", path, r.error);
	ms = now_ms() - t0;
	if (ms > slowest_ms)
		slowest_ms = ms;
	if (r.status != 200 || ms > ANSWER_MS_MAX)
		fprintf(stderr, "GET %s: %ld in %lld ms: %.200s\n", path, r.status, ms,
			r.body ? r.body : "");
	CHECK_I64(r.status, 200);
	CHECK(ms <= ANSWER_MS_MAX);
	return r;
}

/* Every sandbox of the account in the reference's cost order (total over
 * the range, then sandbox_id, both descending) into v (SANDBOXES). range:
 * the explicit range, else each key's current day. */
static int ref_by_cost(bool range, struct ref *v)
{
	/* clang-format off */
	static const char sql[] =
		"WITH b AS MATERIALIZED ("
		" SELECT s.sandbox_id, s.created_at, z.tz,"
		"  COALESCE($2::timestamptz, meter_day_start(z.tz, meter_key_day(z.tz, now()))) AS f,"
		"  COALESCE($3::timestamptz, meter_day_start(z.tz, meter_key_day(z.tz, now()) + 1)) AS t,"
		"  date_trunc('month', now() AT TIME ZONE z.tz) AT TIME ZONE z.tz AS mf,"
		"  (date_trunc('month', now() AT TIME ZONE z.tz) + interval '1 month')"
		"   AT TIME ZONE z.tz AS mt"
		" FROM sandboxes s LEFT JOIN api_keys k"
		"  ON k.account_id = s.account_id AND k.key_id = s.key_id"
		" CROSS JOIN LATERAL (SELECT COALESCE(k.time_zone, 'UTC')::text AS tz) z"
		" WHERE s.account_id = $1"
		"), r AS MATERIALIZED ("
		" SELECT u.sandbox_id, u.total_micros, u.running_usec, b.tz, u.hour, u.day"
		" FROM usage_hourly u JOIN b ON b.sandbox_id = u.sandbox_id WHERE u.account_id = $1"
		"), i AS MATERIALIZED ("
		" SELECT x.*, meter_row_start(x.tz, x.hour, x.day) AS lo"
		" FROM (SELECT DISTINCT r.tz, r.hour, r.day FROM r) x"
		")"
		" SELECT b.sandbox_id,"
		"  COALESCE(sum(r.total_micros) FILTER (WHERE i.lo >= b.f AND i.lo < b.t), 0),"
		"  div(COALESCE(sum(r.running_usec) FILTER (WHERE i.lo >= b.f AND i.lo < b.t), 0),"
		"   1000000),"
		"  COALESCE(sum(r.total_micros) FILTER (WHERE i.lo >= b.mf AND i.lo < b.mt), 0),"
		"  (extract(epoch FROM b.created_at) * 1000000)::bigint"
		" FROM b LEFT JOIN (r JOIN i ON i.tz = r.tz AND i.hour = r.hour AND i.day = r.day)"
		"  ON r.sandbox_id = b.sandbox_id"
		" GROUP BY b.sandbox_id, b.created_at"
		" ORDER BY 2 DESC, b.sandbox_id DESC";
	/* clang-format on */
	const char *params[] = {acc, range ? from : NULL, range ? to : NULL};
	PGresult *res;
	int ok;

	indexed = NULL;
	res = PQexecParams(t.db.conn, sql, 3, NULL, params, NULL, NULL, 0);
	ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == SANDBOXES;
	if (!ok)
		fprintf(stderr, "reference: %s (%d rows)\n", PQresultErrorMessage(res),
			PQntuples(res));
	for (int i = 0; ok && i < SANDBOXES; i++) {
		snprintf(v[i].id, sizeof(v[i].id), "%s", PQgetvalue(res, i, 0));
		v[i].total = strtoll(PQgetvalue(res, i, 1), NULL, 10);
		v[i].running_s = strtoll(PQgetvalue(res, i, 2), NULL, 10);
		v[i].month_total = strtoll(PQgetvalue(res, i, 3), NULL, 10);
		v[i].created_usec = strtoll(PQgetvalue(res, i, 4), NULL, 10);
	}
	PQclear(res);
	CHECK(ok);
	return ok ? 0 : -1;
}

static int ref_cmp_created(const void *a, const void *b)
{
	const struct ref *x = a, *y = b;

	if (x->created_usec != y->created_usec)
		return x->created_usec > y->created_usec ? -1 : 1;
	return -strcmp(x->id, y->id);
}

/* The row of sandbox id ("sbx_NNNNN") in v (SANDBOXES rows), or NULL. */
static const struct ref *ref_find(const struct ref *v, const char *id)
{
	static const struct ref *idx[SANDBOXES];
	char *end;
	long n = strtol(id + (strlen(id) > 4 ? 4 : strlen(id)), &end, 10);

	if (indexed != v) {
		memset(idx, 0, sizeof(idx));
		for (int i = 0; i < SANDBOXES; i++) {
			long m = strtol(v[i].id + 4, NULL, 10);

			if (m >= 0 && m < SANDBOXES)
				idx[m] = &v[i];
		}
		indexed = v;
	}
	if (*end != '\0' || n < 0 || n >= SANDBOXES || !idx[n] || strcmp(idx[n]->id, id) != 0)
		return NULL;
	return idx[n];
}

static bool refs_equal(const struct ref *a, const struct ref *b)
{
	for (int i = 0; i < SANDBOXES; i++)
		if (strcmp(a[i].id, b[i].id) != 0 || a[i].total != b[i].total ||
		    a[i].running_s != b[i].running_s || a[i].month_total != b[i].month_total)
			return false;
	return true;
}

/* Item i of a page against the reference row want, the range's figures and
 * (month: the default range) the month's. */
static void check_item(json_t *it, const struct ref *want, bool month)
{
	if (!want) {
		CHECK(want != NULL);
		return;
	}
	CHECK_STR(apitest_jstr(it, "sandbox_id"), want->id);
	CHECK_I64(apitest_jpath(it, "cost.total_micros"), want->total);
	CHECK_I64(apitest_jpath(it, "usage.running_seconds"), want->running_s);
	if (month)
		CHECK_I64(apitest_jpath(it, "month_cost.total_micros"), want->month_total);
}

static void setup(void)
{
	char keys[3][65], tok[APITEST_TOKEN_MAX], ro[65], sql[4096];
	static const char *const zones[] = {"UTC", "Asia/Kolkata", "Asia/Kathmandu"};
	PGresult *res;

	CHECK(apitest_create_account(&t, "scale", acc) == 0);
	for (int i = 0; i < 3; i++)
		CHECK(apitest_create_key(&t, acc, "full", -1, zones[i], keys[i], tok) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, ro, tro) == 0);
	/* Creation times: a permutation of the numbers, in threes. */
	snprintf(
	    sql, sizeof(sql),
	    "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
	    " storage_mib, state, created_at)"
	    " SELECT '%s', 'sbx_' || lpad(i::text, 5, '0'), (ARRAY['%s', '%s', '%s'])[i %% 3 + 1],"
	    "  1 + i %% 4, 1024, 0, (ARRAY['running', 'paused', 'stopped'])[i / 7 %% 3 + 1],"
	    "  timestamptz '2026-01-01 00:00Z' + (i * 7919 %% %d / 3) * interval '1 second'"
	    " FROM generate_series(0, %d) i",
	    acc, keys[0], keys[1], keys[2], SANDBOXES, SANDBOXES - 1);
	sql_exec(sql);
	/* Up to ten hours of the last thirty per sandbox; an hour holding the
	 * key's midnight is two rows, one per key day. */
	snprintf(
	    sql, sizeof(sql),
	    "INSERT INTO usage_hourly (account_id, sandbox_id, key_id, hour, day,"
	    " price_version, running_usec, paused_usec, cpu_used_mcus, cpu_billed_mcus,"
	    " memory_mibus, storage_mibus, cpu_micros, memory_micros, storage_micros,"
	    " total_micros, cpu_cum_micros, memory_cum_micros, storage_cum_micros)"
	    " SELECT s.account_id, s.sandbox_id, s.key_id, h.hour, d.day, 1,"
	    "  1000000 * (1 + c.n %% 1800), 0, 1000, 2000, 3000, 0, c.cpu, c.mem, 0,"
	    "  c.cpu + c.mem, c.cpu, c.mem, 0"
	    " FROM sandboxes s JOIN api_keys k"
	    "  ON k.account_id = s.account_id AND k.key_id = s.key_id"
	    " CROSS JOIN LATERAL (SELECT substr(s.sandbox_id, 5)::integer AS n) x"
	    " CROSS JOIN LATERAL (SELECT DISTINCT date_trunc('hour', now())"
	    "  - (x.n * (2 * g + 1) + 13 * g) %% 30 * interval '1 hour' AS hour"
	    "  FROM generate_series(0, 9) g) h"
	    " CROSS JOIN LATERAL (SELECT DISTINCT ((h.hour + o) AT TIME ZONE k.time_zone)::date"
	    "  AS day FROM unnest(ARRAY[interval '0', interval '1 hour' - interval '1 us']) o) d"
	    " CROSS JOIN LATERAL (SELECT x.n * 31 + extract(epoch FROM h.hour)::bigint / 3600"
	    "  + extract(day FROM d.day)::bigint AS n) y"
	    " CROSS JOIN LATERAL (SELECT y.n, y.n * 7 %% 997 * 10 AS cpu,"
	    "  x.n %% 13 * 100 AS mem) c"
	    " WHERE s.account_id = '%s' AND x.n %% 11 <> 0",
	    acc);
	sql_exec(sql);
	sql_exec("ANALYZE sandboxes; ANALYZE usage_hourly");
	/* The fixture has what it is for: hours cut at a key's midnight. */
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) > 100 FROM (SELECT 1 FROM usage_hourly WHERE account_id = '%s'"
		 " GROUP BY sandbox_id, hour HAVING count(*) = 2) x",
		 acc);
	testdb_query_text(t.db.conn, sql, sql, sizeof(sql));
	CHECK_STR(sql, "t");
	/* The explicit range: from the latest 18:10Z at least 4 hours ago (the
	 * hour of 18:00Z holds the midnight of Kolkata, 18:30Z, and of
	 * Kathmandu, 18:15Z), for 7 h 25 min. */
	res =
	    PQexec(t.db.conn,
		   "WITH f AS (SELECT (date_trunc('day', (now() - interval '22 hours 10 minutes')"
		   " AT TIME ZONE 'UTC') + interval '18 hours 10 minutes') AT TIME ZONE 'UTC' AS f)"
		   " SELECT to_char(f AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),"
		   " to_char((f + interval '7 hours 25 minutes') AT TIME ZONE 'UTC',"
		   " 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM f");
	CHECK(PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
		snprintf(from, sizeof(from), "%s", PQgetvalue(res, 0, 0));
		snprintf(to, sizeof(to), "%s", PQgetvalue(res, 0, 1));
	}
	PQclear(res);
	fprintf(stderr, "explicit range %s .. %s\n", from, to);
}

/* The first page of each order over each key's current day: the figures
 * depend on now(), so the reference is taken before and after the requests
 * and the round is repeated when a key's day turned in between. */
static void test_default_range(struct ref *before, struct ref *after, struct ref *created)
{
	for (int attempt = 0; attempt < 3; attempt++) {
		struct apitest_resp rc, rd;
		json_t *ic, *id;
		bool stable;

		if (ref_by_cost(false, before) < 0)
			return;
		rc = get("/v1/sandboxes?sort=cost&limit=20");
		rd = get("/v1/sandboxes?sort=created&limit=20");
		if (ref_by_cost(false, after) < 0) {
			apitest_resp_release(&rc);
			apitest_resp_release(&rd);
			return;
		}
		stable = refs_equal(before, after);
		if (stable || attempt == 2) {
			ic = json_object_get(rc.json, "items");
			id = json_object_get(rd.json, "items");
			CHECK_I64(json_array_size(ic), 20);
			CHECK_I64(json_array_size(id), 20);
			CHECK(before[0].total > 0);
			for (size_t i = 0; i < json_array_size(ic); i++)
				check_item(json_array_get(ic, i), &before[i], true);
			memcpy(created, before, sizeof(*created) * SANDBOXES);
			qsort(created, SANDBOXES, sizeof(*created), ref_cmp_created);
			for (size_t i = 0; i < json_array_size(id); i++) {
				json_t *it = json_array_get(id, i);

				CHECK_STR(apitest_jstr(it, "sandbox_id"), created[i].id);
				check_item(it, ref_find(before, created[i].id), true);
			}
			CHECK(json_is_string(json_object_get(rc.json, "next_cursor")));
			CHECK(json_is_string(json_object_get(rd.json, "next_cursor")));
		}
		apitest_resp_release(&rc);
		apitest_resp_release(&rd);
		if (stable)
			return;
		fprintf(stderr, "a key's day turned during the round: again\n");
	}
}

/* Walks every page of sort over the explicit range and compares the whole
 * order, and each item's figures, with the reference. */
static void test_walk(const char *sort, const struct ref *by_cost, const struct ref *order)
{
	char path[512], cursor[160] = "";
	int n = 0, pages = 0;

	for (;;) {
		struct apitest_resp r;
		json_t *items;
		const char *next;

		snprintf(path, sizeof(path), "/v1/sandboxes?sort=%s&limit=%d&from=%s&to=%s%s%s",
			 sort, PAGE, from, to, cursor[0] ? "&cursor=" : "", cursor);
		r = get(path);
		items = json_object_get(r.json, "items");
		pages++;
		for (size_t i = 0; i < json_array_size(items) && n < SANDBOXES; i++, n++) {
			json_t *it = json_array_get(items, i);

			if (strcmp(apitest_jstr(it, "sandbox_id"), order[n].id) != 0) {
				fprintf(stderr, "sort=%s item %d: %s, want %s\n", sort, n,
					apitest_jstr(it, "sandbox_id"), order[n].id);
				CHECK_STR(apitest_jstr(it, "sandbox_id"), order[n].id);
				apitest_resp_release(&r);
				return;
			}
			check_item(it, ref_find(by_cost, order[n].id), false);
		}
		next = json_string_value(json_object_get(r.json, "next_cursor"));
		if (!next || r.status != 200 || pages > SANDBOXES / PAGE + 1) {
			CHECK(next == NULL);
			apitest_resp_release(&r);
			break;
		}
		snprintf(cursor, sizeof(cursor), "%s", next);
		apitest_resp_release(&r);
	}
	CHECK_I64(n, SANDBOXES);
	CHECK_I64(pages, SANDBOXES / PAGE);
}

/* GET /v1/usage of the account over the explicit range, per sandbox: every
 * sandbox with usage in the range, each with the reference's figures, and
 * the total theirs. It used to place every usage row with a call of
 * meter_row_start (about 50 µs, several times a row) and took seconds for
 * 10,000 rows. */
static void test_usage(const struct ref *by_cost)
{
	char path[512];
	struct apitest_resp r;
	json_t *items;
	long long total = 0;
	size_t with_usage = 0;

	for (int i = 0; i < SANDBOXES; i++) {
		total += by_cost[i].total;
		with_usage += by_cost[i].running_s > 0; /* every row runs a second or more */
	}
	CHECK(total > 0 && with_usage > 1000);
	snprintf(path, sizeof(path), "/v1/usage?from=%s&to=%s&group_by=sandbox", from, to);
	r = get(path);
	CHECK_I64(apitest_jpath(r.json, "cost.total_micros"), total);
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), with_usage);
	for (size_t i = 0; i < json_array_size(items); i++) {
		json_t *it = json_array_get(items, i);
		const struct ref *want = ref_find(by_cost, apitest_jstr(it, "sandbox_id"));

		CHECK(want != NULL);
		if (!want)
			break;
		CHECK_I64(apitest_jpath(it, "cost.total_micros"), want->total);
		CHECK_I64(apitest_jpath(it, "usage.running_seconds"), want->running_s);
	}
	apitest_resp_release(&r);
}

struct burst_call {
	long status;
	long long ms;
};

static void *burst_thread(void *arg)
{
	struct burst_call *c = arg;
	struct apitest_resp r;
	long long t0 = now_ms();

	apitest_call(&t, 0, "GET", "/v1/sandboxes?sort=cost&limit=1", tro, NULL, &r);
	c->ms = now_ms() - t0;
	c->status = r.status;
	apitest_resp_release(&r);
	return NULL;
}

/* BURST dearest-first lists at once (they used to hold every read worker
 * until the timeout): each answers, and a read behind them does too. */
static void test_burst(void)
{
	pthread_t th[BURST];
	struct burst_call calls[BURST];
	struct apitest_resp r;
	long long t0;

	memset(calls, 0, sizeof(calls));
	for (int i = 0; i < BURST; i++)
		CHECK(pthread_create(&th[i], NULL, burst_thread, &calls[i]) == 0);
	t0 = now_ms();
	apitest_call(&t, 0, "GET", "/v1/keys", tro, NULL, &r);
	CHECK_I64(r.status, 200);
	CHECK(now_ms() - t0 <= BURST_MS_MAX);
	apitest_resp_release(&r);
	for (int i = 0; i < BURST; i++) {
		pthread_join(th[i], NULL);
		if (calls[i].status != 200 || calls[i].ms > BURST_MS_MAX)
			fprintf(stderr, "burst %d: %ld in %lld ms\n", i, calls[i].status,
				calls[i].ms);
		CHECK_I64(calls[i].status, 200);
		CHECK(calls[i].ms <= BURST_MS_MAX);
	}
}

int main(void)
{
	struct ref *a = calloc(SANDBOXES, sizeof(*a)), *b = calloc(SANDBOXES, sizeof(*b)),
		   *c = calloc(SANDBOXES, sizeof(*c));

	if (!a || !b || !c || apitest_start(&t, "sandbox_list_scale", 1, NULL, NULL) < 0) {
		free(a);
		free(b);
		free(c);
		return 1;
	}
	setup();
	test_default_range(a, b, c);
	if (ref_by_cost(true, a) == 0) {
		memcpy(c, a, sizeof(*c) * SANDBOXES);
		qsort(c, SANDBOXES, sizeof(*c), ref_cmp_created);
		test_walk("cost", a, a);
		test_walk("created", a, c);
		test_usage(a);
	}
	test_burst();
	fprintf(stderr, "slowest request: %lld ms\n", slowest_ms);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	free(a);
	free(b);
	free(c);
	return check_done();
}
