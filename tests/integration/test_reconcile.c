/* Reconciliation (DESIGN.md §2): a seeded simulated fleet metered for a
 * simulated day through the real push route, then every figure the service
 * shows compared to the microdollar, for the account, each key and each
 * sandbox: the ledger, the hourly rollups, the CSV and NDJSON exports,
 * GET /v1/usage, the monthly statement and the dashboard. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "apitest.h"
#include "check.h"
#include "csv.h"

#define MAX_ITEMS 1024

/* Totals by name: an account-wide one and one per key or sandbox. */
struct tally {
	int64_t total;
	int n;
	char name[MAX_ITEMS][65];
	int64_t v[MAX_ITEMS];
};

static void tally_add(struct tally *t, const char *name, int64_t v)
{
	t->total += v;
	for (int i = 0; i < t->n; i++) {
		if (strcmp(t->name[i], name) == 0) {
			t->v[i] += v;
			return;
		}
	}
	CHECK(t->n < MAX_ITEMS);
	if (t->n < MAX_ITEMS) {
		snprintf(t->name[t->n], sizeof(t->name[t->n]), "%s", name);
		t->v[t->n++] = v;
	}
}

static int64_t tally_get(const struct tally *t, const char *name)
{
	for (int i = 0; i < t->n; i++)
		if (strcmp(t->name[i], name) == 0)
			return t->v[i];
	return -1;
}

/* Checks that b has exactly a's names and values. */
static void tally_same(const char *what, const struct tally *a, const struct tally *b)
{
	if (a->total != b->total || a->n != b->n)
		fprintf(stderr, "%s: total %lld (%d items) against %lld (%d items)\n", what,
			(long long)a->total, a->n, (long long)b->total, b->n);
	CHECK_I64(b->total, a->total);
	CHECK_I64(b->n, a->n);
	for (int i = 0; i < a->n; i++) {
		if (tally_get(b, a->name[i]) != a->v[i])
			fprintf(stderr, "%s: %s is %lld, want %lld\n", what, a->name[i],
				(long long)tally_get(b, a->name[i]), (long long)a->v[i]);
		CHECK_I64(tally_get(b, a->name[i]), a->v[i]);
	}
}

/* Rows of a SQL query (name, value) into a tally. */
static void sql_tally(PGconn *c, const char *sql, struct tally *t)
{
	PGresult *r = PQexec(c, sql);

	memset(t, 0, sizeof(*t));
	CHECK(PQresultStatus(r) == PGRES_TUPLES_OK);
	for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++)
		tally_add(t, PQgetvalue(r, i, 0), strtoll(PQgetvalue(r, i, 1), NULL, 10));
	PQclear(r);
}

static void fmt_time(time_t t, char *buf, size_t len)
{
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Runs the simulator in push mode; 0 when it exited 0. */
static int push_fleet(const struct apitest *t, const char *keys, const char *start)
{
	char url[128], bin[600];
	const char *dir = getenv("METER_BIN_DIR");
	pid_t pid;
	int status;

	snprintf(url, sizeof(url), "%s/v1/samples", t->servers[0].base);
	snprintf(bin, sizeof(bin), "%s/meterctl", dir ? dir : ".");
	pid = fork();
	if (pid == 0) {
		execl(bin, "meterctl", "simulate", "--push", url, "--token", t->agent_token,
		      "--hosts", "3", "--sandboxes-per-host", "8", "--seed", "42", "--key-ids",
		      keys, "--start", start, "--speed", "0", "--period-s", "120", "--steps", "721",
		      (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int main(void)
{
	struct apitest t;
	struct apitest_resp r;
	char acc[65], k1[65], k2[65], ro[65], tk1[APITEST_TOKEN_MAX], tk2[APITEST_TOKEN_MAX],
	    tro[APITEST_TOKEN_MAX], keys[160], from[32], to[32], path[512], sql[512];
	struct tally ledger_key, rollup_key, rollup_sbx, csv_key, csv_sbx, nd_sbx, api_key, api_sbx,
	    stmt_sbx;
	time_t now = apitest_now(), day = now - now % 86400 - 86400;
	int64_t stmt_total = -1, dash_total = -1;

	if (apitest_start(&t, "reconcile", 1, NULL, NULL) < 0)
		return 1;
	CHECK(apitest_create_account(&t, "Reconcile", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 2000000, NULL, k1, tk1) == 0);
	CHECK(apitest_create_key(&t, acc, "full", -1, "Asia/Kolkata", k2, tk2) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, ro, tro) == 0);
	snprintf(keys, sizeof(keys), "%s,%s", k1, k2);
	fmt_time(day, from, sizeof(from));
	fmt_time(day + 86400, to, sizeof(to));
	/* Yesterday (UTC), a sample every 2 minutes, 24 sandboxes on 3 hosts. */
	CHECK(push_fleet(&t, keys, from) == 0);

	/* The ground truth: the ledger and the hourly rollups. */
	snprintf(sql, sizeof(sql),
		 "SELECT key_id, sum(spent_micros) FROM key_day_ledger WHERE account_id = '%s'"
		 " GROUP BY key_id",
		 acc);
	sql_tally(t.db.conn, sql, &ledger_key);
	snprintf(sql, sizeof(sql),
		 "SELECT key_id, sum(total_micros) FROM usage_hourly WHERE account_id = '%s'"
		 " GROUP BY key_id",
		 acc);
	sql_tally(t.db.conn, sql, &rollup_key);
	snprintf(sql, sizeof(sql),
		 "SELECT sandbox_id, sum(total_micros) FROM usage_hourly WHERE account_id = '%s'"
		 " GROUP BY sandbox_id",
		 acc);
	sql_tally(t.db.conn, sql, &rollup_sbx);
	CHECK(rollup_key.total > 0);
	CHECK_I64(rollup_key.n, 2);
	CHECK(rollup_sbx.n >= 20);
	tally_same("ledger by key", &rollup_key, &ledger_key);

	/* CSV export, read-only key. */
	memset(&csv_key, 0, sizeof(csv_key));
	memset(&csv_sbx, 0, sizeof(csv_sbx));
	snprintf(path, sizeof(path), "/v1/reports/usage.csv?from=%s&to=%s&granularity=hour", from,
		 to);
	CHECK(apitest_call(&t, 0, "GET", path, tro, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	for (char *line = r.body ? strstr(r.body, "\r\n") : NULL; line && line[2];) {
		char *end = strstr(line + 2, "\r\n"), *f[CSV_FIELDS_MAX];
		size_t n;
		if (!end)
			break;
		*end = '\0';
		if (csv_split(line + 2, strlen(line + 2), f, CSV_FIELDS_MAX, &n) == METER_OK &&
		    n == 14) {
			tally_add(&csv_key, f[2], strtoll(f[13], NULL, 10));
			tally_add(&csv_sbx, f[3], strtoll(f[13], NULL, 10));
		}
		line = end;
		*line = '\r';
	}
	apitest_resp_release(&r);
	tally_same("CSV by key", &rollup_key, &csv_key);
	tally_same("CSV by sandbox", &rollup_sbx, &csv_sbx);

	/* NDJSON export, days of the keys. */
	memset(&nd_sbx, 0, sizeof(nd_sbx));
	snprintf(path, sizeof(path), "/v1/reports/usage.ndjson?from=%s&to=%s&granularity=day", from,
		 to);
	CHECK(apitest_call(&t, 0, "GET", path, tro, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	for (char *line = r.body; line && *line;) {
		char *end = strchr(line, '\n');
		json_t *o;
		if (end)
			*end = '\0';
		o = json_loads(line, 0, NULL);
		CHECK(o != NULL);
		tally_add(&nd_sbx, json_string_value(json_object_get(o, "sandbox_id")) ?: "",
			  json_integer_value(
			      json_object_get(json_object_get(o, "cost"), "total_micros")));
		json_decref(o);
		line = end ? end + 1 : NULL;
	}
	apitest_resp_release(&r);
	tally_same("NDJSON by sandbox", &rollup_sbx, &nd_sbx);

	/* GET /v1/usage, by key and by sandbox. */
	memset(&api_key, 0, sizeof(api_key));
	memset(&api_sbx, 0, sizeof(api_sbx));
	for (int g = 0; g < 2; g++) {
		json_t *items;
		snprintf(path, sizeof(path), "/v1/usage?from=%s&to=%s&group_by=%s", from, to,
			 g ? "sandbox" : "key");
		CHECK(apitest_call(&t, 0, "GET", path, tro, NULL, &r) == 0);
		CHECK_I64(r.status, 200);
		CHECK_I64(json_integer_value(
			      json_object_get(json_object_get(r.json, "cost"), "total_micros")),
			  rollup_key.total);
		items = json_object_get(r.json, "items");
		for (size_t i = 0; i < json_array_size(items); i++) {
			json_t *it = json_array_get(items, i);
			tally_add(
			    g ? &api_sbx : &api_key,
			    json_string_value(json_object_get(it, g ? "sandbox_id" : "key_id"))
				?: "",
			    json_integer_value(
				json_object_get(json_object_get(it, "cost"), "total_micros")));
		}
		apitest_resp_release(&r);
	}
	tally_same("API by key", &rollup_key, &api_key);
	tally_same("API by sandbox", &rollup_sbx, &api_sbx);

	/* The statement of the day's month: gross per sandbox and in total. */
	memset(&stmt_sbx, 0, sizeof(stmt_sbx));
	snprintf(path, sizeof(path), "/v1/reports/statement.csv?month=%.7s", from);
	CHECK(apitest_call(&t, 0, "GET", path, tro, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	for (char *line = r.body; line && *line;) {
		char *end = strstr(line, "\r\n"), *f[CSV_FIELDS_MAX];
		size_t n;
		if (end)
			*end = '\0';
		if (csv_split(line, strlen(line), f, CSV_FIELDS_MAX, &n) == METER_OK && n == 15) {
			if (strcmp(f[0], "sandbox") == 0)
				tally_add(&stmt_sbx, f[1], strtoll(f[12], NULL, 10));
			else if (strcmp(f[0], "total") == 0)
				stmt_total = strtoll(f[12], NULL, 10);
		}
		line = end ? end + 2 : NULL;
	}
	apitest_resp_release(&r);
	tally_same("statement by sandbox", &rollup_sbx, &stmt_sbx);
	CHECK_I64(stmt_total, rollup_key.total);

	/* The dashboard's rollups, kept by ingestion, equal the same rollups
	 * recomputed from usage_hourly by the migration's definition. */
	{
		static const char rollups[] =
		    "SELECT m.sandbox_id || ' ' || x.c, x.v FROM sandbox_meter m CROSS JOIN LATERAL"
		    " (VALUES ('day', m.day - DATE '1970-01-01'), ('run', m.day_running_usec),"
		    " ('used', m.day_cpu_used_mcus), ('billed', m.day_cpu_billed_mcus),"
		    " ('total', m.day_total_micros), ('month', m.month - DATE '1970-01-01'),"
		    " ('mtotal', m.month_total_micros),"
		    " ('dend', (extract(epoch FROM m.day_ends_at) * 1000000)::bigint))"
		    " x(c, v) WHERE m.account_id = '%s'"
		    " UNION ALL SELECT hour::text, total_micros FROM usage_account_hourly"
		    " WHERE account_id = '%s'";
		static struct tally kept, rebuilt;
		char q[sizeof(rollups) + 160];

		snprintf(q, sizeof(q), rollups, acc, acc);
		sql_tally(t.db.conn, q, &kept);
		CHECK(kept.n > 7 * rollup_sbx.n);
		CHECK_STR(testdb_exec_state(t.db.conn, "SELECT meter_dashboard_rebuild()"),
			  "00000");
		sql_tally(t.db.conn, q, &rebuilt);
		tally_same("dashboard rollups", &rebuilt, &kept);
	}

	/* The dashboard, signed in as a person would: the week's spend. */
	{
		char hdr[720];
		const char *p;
		const char *cookies[] = {hdr, NULL};
		struct apitest_req rq;

		CHECK(apitest_sign_in(&t, tro, hdr, sizeof(hdr)) == 0);
		rq = (struct apitest_req){
		    .method = "GET", .path = "/dashboard/", .headers = cookies};
		CHECK(apitest_do(&t, 0, &rq, &r) == 0);
		CHECK_I64(r.status, 200);
		p = r.body ? strstr(r.body, "id=\"week-total\">$") : NULL;
		if (p) {
			long long d = 0, m = 0;
			if (sscanf(p + strlen("id=\"week-total\">$"), "%lld.%6lld", &d, &m) == 2)
				dash_total = d * 1000000 + m;
		}
		apitest_resp_release(&r);
		CHECK_I64(dash_total, rollup_key.total);
	}

	printf("reconciled %lld micros over %d sandboxes and %d keys\n",
	       (long long)rollup_key.total, rollup_sbx.n, rollup_key.n);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	return check_done();
}
