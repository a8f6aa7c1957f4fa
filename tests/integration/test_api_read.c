/* API: the read routes (sandboxes, their usage, usage) on usage_hourly rows
 * inserted by SQL with known quantities, so every figure is known exactly:
 * 2 vCPU / 4 GiB idle for an hour is 1,250 + 30,000 µ$, busy 50,000 +
 * 30,000 µ$ (DESIGN.md §1). */
#include <stdio.h>
#include <string.h>

#include "apitest.h"
#include "check.h"
#include "db_dashboard.h"
#include "db_sandboxes.h"
#include "db_usage.h"

static struct apitest t;
static char acc[65], accb[65], kf[65], kr[65], kp[65], kx[65];
static char tf[APITEST_TOKEN_MAX], tr[APITEST_TOKEN_MAX], tp[APITEST_TOKEN_MAX],
    tx[APITEST_TOKEN_MAX];

static void sql_exec(const char *sql)
{
	const char *st = testdb_exec_state(t.db.conn, sql);

	if (strcmp(st, "00000") != 0)
		fprintf(stderr, "sql failed (%s): %s\n", st, sql);
	CHECK_STR(st, "00000");
}

/* GET path with token; status into *status; returns the response (release). */
static struct apitest_resp get(const char *path, const char *token)
{
	struct apitest_resp r;

	if (apitest_call(&t, 0, "GET", path, token, NULL, &r) < 0)
		fprintf(stderr, "GET %s: %s\n", path, r.error);
	return r;
}

/* One usage_hourly row with cumulative money equal to the hour's. */
/* The sum of the items' cost.total_micros (the total they must add up to). */
static long long items_total(const json_t *items)
{
	long long sum = 0;

	for (size_t i = 0; i < json_array_size(items); i++)
		sum += apitest_jpath(json_array_get(items, i), "cost.total_micros");
	return sum;
}

static void usage_row(const char *account, const char *sandbox, const char *key, const char *hour,
		      const char *day, long long run, long long paused, long long used,
		      long long billed, long long mem, long long sto, long long cpu_m,
		      long long mem_m, long long sto_m)
{
	char sql[1024];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO usage_hourly (account_id, sandbox_id, key_id, hour, day,"
		 " price_version, running_usec, paused_usec, cpu_used_mcus, cpu_billed_mcus,"
		 " memory_mibus, storage_mibus, cpu_micros, memory_micros, storage_micros,"
		 " total_micros, cpu_cum_micros, memory_cum_micros, storage_cum_micros)"
		 " VALUES ('%s', '%s', '%s', '%s', '%s', 1, %lld, %lld, %lld, %lld, %lld, %lld,"
		 " %lld, %lld, %lld, %lld, %lld, %lld, %lld)",
		 account, sandbox, key, hour, day, run, paused, used, billed, mem, sto, cpu_m,
		 mem_m, sto_m, cpu_m + mem_m + sto_m, cpu_m, mem_m, sto_m);
	sql_exec(sql);
}

static void setup(void)
{
	char sql[1024], accz[65], name[64];

	CHECK(apitest_create_account(&t, "A", acc) == 0);
	CHECK(apitest_create_account(&t, "B", accb) == 0);
	/* A name past ASCII is stored as sent, whatever client encoding
	 * meterd's environment names (PGCLIENTENCODING, in main). */
	CHECK(apitest_create_account(&t, "Zoë Café ✓", accz) == 0);
	snprintf(sql, sizeof(sql), "SELECT name FROM accounts WHERE account_id = '%s'", accz);
	testdb_query_text(t.db.conn, sql, name, sizeof(name));
	CHECK_STR(name, "Zoë Café ✓");
	CHECK(apitest_create_key(&t, acc, "full", -1, NULL, kf, tf) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, kr, tr) == 0);
	CHECK(apitest_create_key(&t, acc, "full", -1, "Asia/Kolkata", kp, tp) == 0);
	CHECK(apitest_create_key(&t, accb, "full", -1, NULL, kx, tx) == 0);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		 " storage_mib, state, max_cost_micros, created_at) VALUES"
		 " ('%s', 'sbx_a1', '%s', 2, 4096, 0, 'running', 20000, '2026-01-10 09:00Z'),"
		 " ('%s', 'sbx_a2', '%s', 1, 1024, 5120, 'paused', NULL, '2026-01-10 09:30Z'),"
		 " ('%s', 'sbx_p', '%s', 1, 1024, 0, 'running', NULL, '2026-01-10 08:00Z'),"
		 " ('%s', 'sbx_b1', '%s', 1, 1024, 0, 'stopped', NULL, '2026-01-10 07:00Z')",
		 acc, kf, acc, kf, acc, kp, accb, kx);
	sql_exec(sql);
	/* sbx_a1: an idle hour, a busy hour, half an hour at 100 millicores. */
	usage_row(acc, "sbx_a1", kf, "2026-01-10 10:00Z", "2026-01-10", 3600000000, 0, 36000000000,
		  180000000000, 14745600000000, 0, 1250, 30000, 0);
	usage_row(acc, "sbx_a1", kf, "2026-01-10 11:00Z", "2026-01-10", 3600000000, 0,
		  7200000000000, 7200000000000, 14745600000000, 0, 50000, 30000, 0);
	usage_row(acc, "sbx_a1", kf, "2026-01-11 00:00Z", "2026-01-11", 1800000000, 0, 180000000000,
		  180000000000, 7372800000000, 0, 1250, 15000, 0);
	/* sbx_a2: paused an hour with a 5 GiB snapshot. */
	usage_row(acc, "sbx_a2", kf, "2026-01-10 10:00Z", "2026-01-10", 0, 3600000000, 0, 0, 0,
		  18432000000000, 0, 0, 500);
	/* sbx_p (key in Asia/Kolkata): the UTC hour 18:00 is cut at the key's
	 * midnight, 18:30Z, into two rows of two key days. */
	usage_row(acc, "sbx_p", kp, "2026-01-10 18:00Z", "2026-01-10", 1800000000, 0, 1800000000000,
		  1800000000000, 1843200000000, 0, 12500, 3750, 0);
	usage_row(acc, "sbx_p", kp, "2026-01-10 18:00Z", "2026-01-11", 1800000000, 0, 1800000000000,
		  1800000000000, 1843200000000, 0, 12500, 3750, 0);
	/* Another account's sandbox. */
	usage_row(accb, "sbx_b1", kx, "2026-01-10 10:00Z", "2026-01-10", 3600000000, 0, 0,
		  180000000000, 0, 0, 99999, 0, 0);
}

static void test_usage(void)
{
	struct apitest_resp r;
	json_t *items;

	r = get("/v1/usage?from=2026-01-10T00:00:00Z&to=2026-01-12T00:00:00Z", tf);
	CHECK_I64(r.status, 200);
	CHECK_I64(apitest_jpath(r.json, "cost.total_micros"), 160500);
	CHECK_I64(apitest_jpath(r.json, "cost.cpu_micros"), 77500);
	CHECK_I64(apitest_jpath(r.json, "cost.memory_micros"), 82500);
	CHECK_I64(apitest_jpath(r.json, "cost.storage_micros"), 500);
	CHECK_I64(apitest_jpath(r.json, "usage.running_seconds"), 12600);
	CHECK_I64(apitest_jpath(r.json, "usage.paused_seconds"), 3600);
	CHECK_I64(apitest_jpath(r.json, "usage.cpu_used_millicore_seconds"), 11016000);
	CHECK_I64(apitest_jpath(r.json, "usage.cpu_billed_millicore_seconds"), 11160000);
	CHECK_I64(apitest_jpath(r.json, "usage.memory_mib_seconds"), 40550400);
	CHECK_I64(apitest_jpath(r.json, "usage.storage_mib_seconds"), 18432000);
	CHECK_STR(apitest_jstr(r.json, "from"), "2026-01-10T00:00:00Z");
	CHECK_STR(apitest_jstr(r.json, "time_zone"), "UTC");
	CHECK_I64(json_array_size(json_object_get(r.json, "items")), 1);
	apitest_resp_release(&r);

	/* Per UTC day and sandbox; the items add up to the total. */
	r = get("/v1/usage?from=2026-01-10T00:00:00Z&to=2026-01-12T00:00:00Z&window=day"
		"&group_by=sandbox",
		tr);
	CHECK_I64(r.status, 200);
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 4);
	CHECK_I64(items_total(items), 160500);
	CHECK_STR(apitest_jstr(json_array_get(items, 0), "period_start"), "2026-01-10T00:00:00Z");
	CHECK_STR(apitest_jstr(json_array_get(items, 0), "period_end"), "2026-01-11T00:00:00Z");
	CHECK_STR(apitest_jstr(json_array_get(items, 0), "sandbox_id"), "sbx_a1");
	CHECK_I64(apitest_jpath(json_array_get(items, 0), "cost.total_micros"), 111250);
	CHECK_STR(apitest_jstr(json_array_get(items, 2), "sandbox_id"), "sbx_p");
	CHECK_I64(apitest_jpath(json_array_get(items, 2), "cost.total_micros"), 32500);
	CHECK_STR(apitest_jstr(json_array_get(items, 3), "period_start"), "2026-01-11T00:00:00Z");
	CHECK_I64(apitest_jpath(json_array_get(items, 3), "cost.total_micros"), 16250);
	apitest_resp_release(&r);

	/* Per key. */
	r = get("/v1/usage?from=2026-01-10T00:00:00Z&to=2026-01-12T00:00:00Z&group_by=key", tf);
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 2);
	for (size_t i = 0; i < json_array_size(items); i++) {
		const char *k = apitest_jstr(json_array_get(items, i), "key_id");
		long long v = apitest_jpath(json_array_get(items, i), "cost.total_micros");

		CHECK(strcmp(k, kf) == 0 ? v == 128000 : strcmp(k, kp) == 0 && v == 32500);
	}
	apitest_resp_release(&r);

	/* Days of the Kolkata key: split exactly at its midnight (18:30Z). */
	r = get("/v1/usage?from=2026-01-09T18:30:00Z&to=2026-01-11T18:30:00Z&window=day", tp);
	CHECK_I64(r.status, 200);
	CHECK_STR(apitest_jstr(r.json, "time_zone"), "Asia/Kolkata");
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 2);
	CHECK_STR(apitest_jstr(json_array_get(items, 0), "period_start"), "2026-01-09T18:30:00Z");
	CHECK_I64(apitest_jpath(json_array_get(items, 0), "cost.total_micros"), 128000);
	CHECK_STR(apitest_jstr(json_array_get(items, 1), "period_start"), "2026-01-10T18:30:00Z");
	CHECK_I64(apitest_jpath(json_array_get(items, 1), "cost.total_micros"), 32500);
	CHECK_I64(apitest_jpath(r.json, "cost.total_micros"), 160500);
	apitest_resp_release(&r);

	/* The operator sees every account, or one. */
	r = get("/v1/usage?from=2026-01-10T00:00:00Z&to=2026-01-12T00:00:00Z", t.operator_token);
	CHECK_I64(apitest_jpath(r.json, "cost.total_micros"), 160500 + 99999);
	apitest_resp_release(&r);
	{
		char path[256];

		snprintf(path, sizeof(path),
			 "/v1/usage?from=2026-01-10T00:00:00Z&to=2026-01-12T00:00:00Z"
			 "&account_id=%s",
			 accb);
		r = get(path, t.operator_token);
		CHECK_I64(apitest_jpath(r.json, "cost.total_micros"), 99999);
		apitest_resp_release(&r);
		r = get(path, tf); /* a key naming another account */
		CHECK_I64(r.status, 404);
		apitest_resp_release(&r);
	}
	/* Today (the default range) has nothing yet. */
	r = get("/v1/usage", tf);
	CHECK_I64(r.status, 200);
	CHECK_I64(apitest_jpath(r.json, "cost.total_micros"), 0);
	apitest_resp_release(&r);
}

static void test_sandboxes(void)
{
	struct apitest_resp r;
	json_t *items, *o;
	char path[512];

	r = get("/v1/sandboxes/sbx_a1?from=2026-01-10T00:00:00Z&to=2026-01-11T00:00:00Z", tr);
	CHECK_I64(r.status, 200);
	o = r.json;
	CHECK_STR(apitest_jstr(o, "sandbox_id"), "sbx_a1");
	CHECK_STR(apitest_jstr(o, "key_id"), kf);
	CHECK_STR(apitest_jstr(o, "state"), "running");
	CHECK_I64(apitest_jpath(o, "vcpus"), 2);
	CHECK_I64(apitest_jpath(o, "memory_mib"), 4096);
	CHECK_I64(apitest_jpath(o, "max_cost_micros"), 20000);
	CHECK_STR(apitest_jstr(o, "created_at"), "2026-01-10T09:00:00Z");
	CHECK_I64(apitest_jpath(o, "cost.total_micros"), 111250);
	CHECK_I64(apitest_jpath(o, "cost.cpu_micros"), 51250);
	CHECK_I64(apitest_jpath(o, "cost.memory_micros"), 60000);
	CHECK_I64(apitest_jpath(o, "usage.running_seconds"), 7200);
	CHECK_I64(apitest_jpath(o, "breakdown.cpu.used_micros"), 50250);
	CHECK_I64(apitest_jpath(o, "breakdown.cpu.floor_topup_micros"), 1000);
	CHECK_I64(apitest_jpath(o, "breakdown.cpu.floor_topup_millicore_seconds"), 144000);
	CHECK_I64(apitest_jpath(o, "breakdown.cpu.micros"), 51250);
	CHECK_I64(apitest_jpath(o, "breakdown.memory.micros"), 60000);
	apitest_resp_release(&r);

	/* Sorted by cost over the range, paginated. */
	r = get("/v1/sandboxes?from=2026-01-10T00:00:00Z&to=2026-01-12T00:00:00Z&sort=cost"
		"&limit=2",
		tr);
	CHECK_I64(r.status, 200);
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 2);
	CHECK_STR(apitest_jstr(json_array_get(items, 0), "sandbox_id"), "sbx_a1");
	CHECK_I64(apitest_jpath(json_array_get(items, 0), "cost.total_micros"), 127500);
	CHECK_STR(apitest_jstr(json_array_get(items, 1), "sandbox_id"), "sbx_p");
	CHECK(json_is_string(json_object_get(r.json, "next_cursor")));
	snprintf(path, sizeof(path),
		 "/v1/sandboxes?from=2026-01-10T00:00:00Z&to=2026-01-12T00:00:00Z&sort=cost"
		 "&limit=2&cursor=%s",
		 apitest_jstr(r.json, "next_cursor"));
	apitest_resp_release(&r);
	r = get(path, tr);
	CHECK_I64(r.status, 200);
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 1);
	CHECK_STR(apitest_jstr(json_array_get(items, 0), "sandbox_id"), "sbx_a2");
	CHECK(json_is_null(json_object_get(r.json, "next_cursor")));
	apitest_resp_release(&r);

	r = get("/v1/sandboxes?sort=created", tf);
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 3);
	CHECK_STR(apitest_jstr(json_array_get(items, 0), "sandbox_id"), "sbx_a2");
	CHECK_STR(apitest_jstr(json_array_get(items, 2), "sandbox_id"), "sbx_p");
	/* Default range: each sandbox's key's current day. */
	CHECK_I64(apitest_jpath(json_array_get(items, 0), "cost.total_micros"), 0);
	apitest_resp_release(&r);
	r = get("/v1/sandboxes?state=paused", tf);
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 1);
	CHECK_STR(apitest_jstr(json_array_get(items, 0), "sandbox_id"), "sbx_a2");
	apitest_resp_release(&r);
	snprintf(path, sizeof(path), "/v1/sandboxes?key_id=%s", kp);
	r = get(path, tf);
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 1);
	CHECK_STR(apitest_jstr(json_array_get(items, 0), "sandbox_id"), "sbx_p");
	apitest_resp_release(&r);

	/* Another account sees only its own. */
	r = get("/v1/sandboxes", tx);
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 1);
	CHECK_STR(apitest_jstr(json_array_get(items, 0), "sandbox_id"), "sbx_b1");
	apitest_resp_release(&r);
	r = get("/v1/sandboxes/sbx_a1", tx);
	CHECK_I64(r.status, 404);
	CHECK_STR(apitest_error_code(&r), "not_found");
	apitest_resp_release(&r);
	r = get("/v1/sandboxes/sbx_a1/usage", tx);
	CHECK_I64(r.status, 404);
	apitest_resp_release(&r);
	r = get("/v1/sandboxes/sbx_a1", t.operator_token);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);

	/* The series of the Kolkata sandbox: both parts of the 18:00Z hour. */
	r = get("/v1/sandboxes/sbx_p/usage?from=2026-01-10T18:00:00Z&to=2026-01-10T19:00:00Z", tr);
	CHECK_I64(r.status, 200);
	CHECK_STR(apitest_jstr(r.json, "window"), "hour");
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 1);
	CHECK_I64(apitest_jpath(json_array_get(items, 0), "cost.total_micros"), 32500);
	CHECK_I64(apitest_jpath(json_array_get(items, 0), "cpu_used_millicores"), 1000);
	CHECK_I64(apitest_jpath(json_array_get(items, 0), "cpu_billed_millicores"), 1000);
	CHECK_I64(apitest_jpath(json_array_get(items, 0), "memory_mib"), 1024);
	apitest_resp_release(&r);
	r = get("/v1/sandboxes/sbx_a1/usage?from=2026-01-10T00:00:00Z&to=2026-01-12T00:00:00Z"
		"&window=hour",
		tr);
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 3);
	CHECK_I64(apitest_jpath(json_array_get(items, 0), "cpu_used_millicores"), 10);
	CHECK_I64(apitest_jpath(json_array_get(items, 0), "cpu_billed_millicores"), 50);
	CHECK_I64(apitest_jpath(json_array_get(items, 0), "cost.total_micros"), 31250);
	CHECK_I64(apitest_jpath(json_array_get(items, 1), "cost.total_micros"), 80000);
	CHECK_I64(apitest_jpath(r.json, "cost.total_micros"), 127500);
	apitest_resp_release(&r);
}

/* Query parameters are validated strictly: 400 naming the parameter. */
static void test_bad_queries(void)
{
	static const struct {
		const char *path;
		const char *field;
	} cases[] = {
	    {"/v1/sandboxes/sbx_a1/usage?window=minute", "window"},
	    {"/v1/sandboxes/sbx_a1/usage?window=week", "window"},
	    {"/v1/usage?from=2026-01-10T00:00:00Z", "to"},
	    {"/v1/usage?to=2026-01-10T00:00:00Z", "from"},
	    {"/v1/usage?from=2026-01-11T00:00:00Z&to=2026-01-10T00:00:00Z", "from"},
	    {"/v1/usage?from=2026-01-10T00:00:00Z&to=2026-01-10T00:00:00Z", "from"},
	    {"/v1/usage?from=2026-13-01T00:00:00Z&to=2026-01-10T00:00:00Z", "from"},
	    {"/v1/usage?from=2026-02-29T00:00:00Z&to=2026-03-10T00:00:00Z", "from"},
	    {"/v1/usage?from=2026-01-10&to=2026-01-11", "from"},
	    {"/v1/usage?from=2026-01-10T00:00:00Z&to=2026-03-10T00:00:00Z&window=hour", "to"},
	    {"/v1/usage?from=2020-01-10T00:00:00Z&to=2026-03-10T00:00:00Z", "to"},
	    {"/v1/usage?group_by=account", "group_by"},
	    {"/v1/usage?window=day&window=hour", "window"},
	    {"/v1/usage?bogus=1", "bogus"},
	    {"/v1/usage?window", "window"},
	    {"/v1/sandboxes?limit=0", "limit"},
	    {"/v1/sandboxes?limit=501", "limit"},
	    {"/v1/sandboxes?limit=9223372036854775808", "limit"},
	    {"/v1/sandboxes?state=dead", "state"},
	    {"/v1/sandboxes?sort=price", "sort"},
	    {"/v1/sandboxes?key_id=a%20b", "key_id"},
	    {"/v1/sandboxes?cursor=zzz", "cursor"},
	    {"/v1/sandboxes?sort=cost&cursor=i.sbx_a1", "cursor"},
	    {"/v1/sandboxes?from=2026-01-10T00:00:00Z%00&to=2026-01-11T00:00:00Z", "from"},
	    {"/v1/keys?account_id=", "account_id"},
	    /* The dashboard's pages alike (taken with a key's token). */
	    {"/dashboard/?bogus=1", "bogus"},
	    {"/dashboard/keys?key_id=x", "key_id"},
	    {"/dashboard/exports?month=2026-01", "month"},
	    {"/dashboard/sandboxes/sbx_a1?window=day", "window"},
	    {"/dashboard/sandboxes?bogus=1", "bogus"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct apitest_resp r = get(cases[i].path, tf);
		const char *field =
		    json_string_value(json_object_get(json_object_get(r.json, "error"), "field"));

		if (r.status != 400 || !field || strcmp(field, cases[i].field) != 0)
			fprintf(stderr, "case %s: %ld %s\n", cases[i].path, r.status, r.body);
		CHECK_I64(r.status, 400);
		CHECK_STR(apitest_error_code(&r), "invalid_request");
		CHECK_STR(field ? field : "", cases[i].field);
		apitest_resp_release(&r);
	}
	/* A window not offered is told the ones that are (minute, refused
	 * with a message of its own, is not one). */
	{
		struct apitest_resp r = get("/v1/sandboxes/sbx_a1/usage?window=week", tf);
		const char *msg =
		    json_string_value(json_object_get(json_object_get(r.json, "error"), "message"));

		CHECK_STR(msg ? msg : "", "window must be one of hour, day");
		apitest_resp_release(&r);
	}
}

/* The operator naming an account that does not exist gets 404 not_found
 * on every read of one account, as a key naming another account's id
 * does, not an empty answer; the same reads of a real account answer
 * 200. */
static void test_unknown_account(void)
{
	static const char *const reads[] = {
	    "/v1/keys?account_id=",
	    "/v1/sandboxes?account_id=",
	    "/v1/usage?account_id=",
	    "/v1/usage?from=2026-01-10T00:00:00Z&to=2026-01-12T00:00:00Z&group_by=key&account_id=",
	    "/v1/reports/usage.csv?from=2026-01-10T00:00:00Z&to=2026-01-12T00:00:00Z&account_id=",
	    ("/v1/reports/usage.ndjson?from=2026-01-10T00:00:00Z&to=2026-01-12T00:00:00Z"
	     "&account_id="),
	    "/v1/reports/statement.csv?month=2026-01&account_id=",
	};

	for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
		char path[512];
		struct apitest_resp r;

		snprintf(path, sizeof(path), "%s%s", reads[i], "acc_0000000000000000");
		r = get(path, t.operator_token);
		if (r.status != 404)
			fprintf(stderr, "unknown account, %s: %ld %s\n", path, r.status, r.body);
		CHECK_I64(r.status, 404);
		CHECK_STR(apitest_error_code(&r), "not_found");
		apitest_resp_release(&r);
		snprintf(path, sizeof(path), "%s%s", reads[i], acc);
		r = get(path, t.operator_token);
		if (r.status != 200)
			fprintf(stderr, "account, %s: %ld %s\n", path, r.status, r.body);
		CHECK_I64(r.status, 200);
		apitest_resp_release(&r);
	}
}

/* GET /v1/usage answers at most 10,000 items: an account with exactly that
 * many sandbox-hours in the range gets them all (adding up to the total),
 * one more is 400 on `to` and names the narrower queries and the export. */
static void test_usage_items_cap(void)
{
	char accc[65], kc[65], tc[APITEST_TOKEN_MAX], sql[1400];
	struct apitest_resp r;
	json_t *items;
	const char *msg;

	CHECK(apitest_create_account(&t, "C", accc) == 0);
	CHECK(apitest_create_key(&t, accc, "read_only", -1, NULL, kc, tc) == 0);
	/* 20 sandboxes with an hour each of 2026-02-01's first 500, and a
	 * 21st with the 501st hour alone: 1 µ$ a sandbox-hour. */
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		 " storage_mib, state, created_at)"
		 " SELECT '%s', 'cap_' || s, '%s', 1, 512, 0, 'running', '2026-02-01 00:00Z'"
		 " FROM generate_series(1, 21) s;"
		 "INSERT INTO usage_hourly (account_id, sandbox_id, key_id, hour, day,"
		 " price_version, running_usec, paused_usec, cpu_used_mcus, cpu_billed_mcus,"
		 " memory_mibus, storage_mibus, cpu_micros, memory_micros, storage_micros,"
		 " total_micros, cpu_cum_micros, memory_cum_micros, storage_cum_micros)"
		 " SELECT '%s', 'cap_' || s, '%s', x.hour, (x.hour AT TIME ZONE 'UTC')::date, 1,"
		 " 3600000000, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0"
		 " FROM generate_series(1, 21) s, LATERAL (SELECT timestamptz '2026-02-01 00:00Z'"
		 " + h * interval '1 hour' AS hour FROM generate_series(0, 500) h"
		 " WHERE (s <= 20 AND h < 500) OR (s = 21 AND h = 500)) x",
		 accc, kc, accc, kc);
	sql_exec(sql);

	r = get("/v1/usage?from=2026-02-01T00:00:00Z&to=2026-02-21T20:00:00Z&window=hour"
		"&group_by=sandbox",
		tc);
	CHECK_I64(r.status, 200);
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 10000);
	CHECK_I64(items_total(items), 10000);
	CHECK_I64(apitest_jpath(r.json, "cost.total_micros"), 10000);
	apitest_resp_release(&r);

	r = get("/v1/usage?from=2026-02-01T00:00:00Z&to=2026-02-21T21:00:00Z&window=hour"
		"&group_by=sandbox",
		tc);
	CHECK_I64(r.status, 400);
	CHECK_STR(apitest_error_code(&r), "invalid_request");
	CHECK_STR(json_string_value(json_object_get(json_object_get(r.json, "error"), "field")),
		  "to");
	msg = json_string_value(json_object_get(json_object_get(r.json, "error"), "message"));
	CHECK(msg && strstr(msg, "10000") && strstr(msg, "/v1/reports/usage.csv"));
	apitest_resp_release(&r);

	/* The same range a day at a time: 21 days of 20 or 21 sandboxes. */
	r = get("/v1/usage?from=2026-02-01T00:00:00Z&to=2026-02-21T21:00:00Z&window=day"
		"&group_by=sandbox",
		tc);
	CHECK_I64(r.status, 200);
	CHECK_I64(json_array_size(json_object_get(r.json, "items")), 21 * 20 + 1);
	CHECK_I64(apitest_jpath(r.json, "cost.total_micros"), 10001);
	apitest_resp_release(&r);
}

/* A day where midnight comes twice (America/Havana, 2026-11-01: at 01:00
 * local the clocks go back to 00:00) starts at the first one, 04:00Z, as
 * the key's day does everywhere else, and ends at the next day's, 05:00Z.
 * An hour of usage from 04:00Z lies inside its own day's period. */
static void test_usage_repeated_midnight(void)
{
	char acch[65], kh[65], th[APITEST_TOKEN_MAX], sql[512];
	struct apitest_resp r;
	json_t *items;

	CHECK(apitest_create_account(&t, "Havana", acch) == 0);
	CHECK(apitest_create_key(&t, acch, "full", -1, "America/Havana", kh, th) == 0);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		 " storage_mib, state, created_at) VALUES"
		 " ('%s', 'sbx_h', '%s', 1, 1024, 0, 'running', '2026-11-01 03:00Z')",
		 acch, kh);
	sql_exec(sql);
	usage_row(acch, "sbx_h", kh, "2026-11-01 04:00Z", "2026-11-01", 3600000000, 0, 180000000000,
		  180000000000, 3686400000000, 0, 1250, 7500, 0);
	r = get("/v1/usage?from=2026-10-31T12:00:00Z&to=2026-11-02T12:00:00Z&window=day", th);
	CHECK_I64(r.status, 200);
	items = json_object_get(r.json, "items");
	CHECK_I64(json_array_size(items), 1);
	CHECK_STR(apitest_jstr(json_array_get(items, 0), "period_start"), "2026-11-01T04:00:00Z");
	CHECK_STR(apitest_jstr(json_array_get(items, 0), "period_end"), "2026-11-02T05:00:00Z");
	CHECK_I64(apitest_jpath(json_array_get(items, 0), "cost.total_micros"), 8750);
	apitest_resp_release(&r);
}

/* The CPU money's split into what the CPU used and the floor's top-up is
 * the same on the dashboard's sandbox page as in GET /v1/sandboxes/{id}:
 * the used millicore-microseconds priced per version. An hour billed
 * 400,000,000 mcus at 25,000 µ$ a vCPU-hour whose carry made 3 µ$, of
 * which 270,000,000 were used (1.875 µ$): 1 used, 2 top-up (in proportion
 * the dashboard said 2 and 1). */
static void test_cpu_split_agrees(void)
{
	struct db_dash_breakdown bd;
	struct db_sandbox sb;
	int64_t used = -1, topup = -1, topup_ms = -1;

	sql_exec("INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,"
		 " storage_mib, state) SELECT account_id, 'sbx_split', key_id, 1, 1024, 0,"
		 " 'running' FROM sandboxes WHERE sandbox_id = 'sbx_a1'");
	sql_exec("INSERT INTO usage_hourly (account_id, sandbox_id, key_id, hour, day,"
		 " price_version, running_usec, cpu_used_mcus, cpu_billed_mcus, cpu_micros,"
		 " total_micros, cpu_cum_micros) SELECT account_id, 'sbx_split', key_id,"
		 " '2026-01-12 10:00Z', '2026-01-12', 1, 400000000, 270000000, 400000000, 3, 3, 3"
		 " FROM sandboxes WHERE sandbox_id = 'sbx_a1'");
	memset(&sb, 0, sizeof(sb));
	snprintf(sb.account_id, sizeof(sb.account_id), "%s", acc);
	snprintf(sb.sandbox_id, sizeof(sb.sandbox_id), "sbx_split");
	snprintf(sb.time_zone, sizeof(sb.time_zone), "UTC");
	sb.from_usec = INT64_C(1768176000000000); /* 2026-01-12T00:00:00Z */
	sb.to_usec = sb.from_usec + INT64_C(86400000000);
	CHECK_I64(db_sandbox_cpu_split(t.db.conn, &sb, &used, &topup, &topup_ms), METER_OK);
	CHECK_I64(db_dash_breakdown(t.db.conn, acc, "sbx_split", sb.from_usec, sb.to_usec, &bd),
		  METER_OK);
	CHECK_I64(used, 1);
	CHECK_I64(topup, 2);
	CHECK_I64(bd.cpu_used_micros, used);
	CHECK_I64(bd.cpu_floor_micros, topup);
}

/* The reads place a usage row with DB_ROW_START, which calls
 * meter_row_start only for an hour before its day's midnight as PostgreSQL
 * reads it. Both agree on every hour next to a midnight, 2025 and 2026, in
 * zones whose midnight cuts an hour (+05:30, +05:45, +12:45, -03:30) and in
 * zones whose clocks change at midnight (forward: Santiago, Beirut; back:
 * Azores, Havana), where the day's start differs from that reading. */
static void test_row_start_zones(void)
{
	/* clang-format off */
	static const char sql[] =
		"SELECT count(*) || '|' || count(*) FILTER (WHERE u.lo IS DISTINCT FROM"
		"  meter_row_start(u.tz, u.hour, u.day))"
		" || '|' || count(*) FILTER (WHERE u.lo <> u.hour)"
		" FROM (SELECT u.*, " DB_ROW_START("u.tz") " AS lo"
		"  FROM (SELECT z.tz, d.day, date_trunc('hour', d.day::timestamp AT TIME ZONE z.tz)"
		"    + h * interval '1 hour' AS hour"
		"   FROM unnest(ARRAY['UTC', 'Asia/Kolkata', 'Asia/Kathmandu', 'Pacific/Chatham',"
		"    'America/St_Johns', 'America/Santiago', 'Asia/Beirut', 'Atlantic/Azores',"
		"    'America/Havana', 'Europe/Paris', 'Australia/Lord_Howe']) z(tz),"
		"    generate_series(date '2025-01-01', date '2026-12-31', interval '1 day') g,"
		"    LATERAL (SELECT g::date AS day) d, generate_series(-1, 1) h) u) u";
	/* clang-format on */
	char got[128];

	testdb_query_text(t.db.conn, sql, got, sizeof(got));
	fprintf(stderr, "row starts near midnight (hours, differing, cut): %s\n", got);
	/* 11 zones, 730 days, 3 hours; none differs; some begin inside
	 * their hour (the cut ones). */
	CHECK(strncmp(got, "24090|0|", 8) == 0);
	CHECK(strcmp(got + 8, "0") != 0);
}

/* meter_row_start and meter_day_start are inlined (sql/0043): placing the
 * usage rows shows neither name in the plan, only their expression (a call
 * cost about 50 µs when they were not). A null argument still gives null. */
static void test_row_start_inlined(void)
{
	static const char plan[] =
	    "EXPLAIN (VERBOSE, COSTS OFF) SELECT meter_row_start(k.time_zone, u.hour, u.day),"
	    " meter_day_start(k.time_zone, u.day)"
	    " FROM usage_hourly u JOIN api_keys k"
	    "  ON k.account_id = u.account_id AND k.key_id = u.key_id";
	static const char nulls[] =
	    "SELECT meter_row_start(NULL, now(), current_date) IS NULL"
	    " AND meter_row_start('UTC', NULL, current_date) IS NULL"
	    " AND meter_row_start('UTC', now(), NULL) IS NULL"
	    " AND meter_day_start(NULL, current_date) IS NULL"
	    " AND meter_day_start('UTC', NULL) IS NULL"
	    " AND meter_row_start('Asia/Kolkata', '2026-03-01 18:00Z', '2026-03-02')"
	    "  = '2026-03-01 18:30Z'";
	PGresult *res = PQexec(t.db.conn, plan);
	bool inlined = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0;
	char got[16];

	for (int i = 0; inlined && i < PQntuples(res); i++)
		if (strstr(PQgetvalue(res, i, 0), "meter_row_start(") ||
		    strstr(PQgetvalue(res, i, 0), "meter_day_start("))
			inlined = false;
	if (!inlined)
		for (int i = 0; i < PQntuples(res); i++)
			fprintf(stderr, "plan: %.300s\n", PQgetvalue(res, i, 0));
	PQclear(res);
	CHECK(inlined);
	testdb_query_text(t.db.conn, nulls, got, sizeof(got));
	CHECK_STR(got, "t");
}

/* Sandboxes named "." and "..", which metering may meet though no create
 * makes them: the dashboard's list shows them without a link (a browser
 * would read the path's dot segments and open another page), and links
 * the rest. */
static void test_dot_ids_on_dashboard(void)
{
	char accd[65], kd[65], td[APITEST_TOKEN_MAX], sql[1024], hdr[512];
	const char *cookies[] = {hdr, NULL};
	struct apitest_req rq = {
	    .method = "GET", .path = "/dashboard/sandboxes?sort=id", .headers = cookies};
	struct apitest_resp r;

	CHECK(apitest_create_account(&t, "Dots", accd) == 0);
	CHECK(apitest_create_key(&t, accd, "read_only", -1, NULL, kd, td) == 0);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state)"
		 " VALUES ('%s', '.', '%s', 1, 512, 'running'), ('%s', '..', '%s', 1, 512,"
		 " 'running'), ('%s', 'sbx_d', '%s', 1, 512, 'running')",
		 accd, kd, accd, kd, accd, kd);
	sql_exec(sql);
	CHECK(apitest_sign_in(&t, td, hdr, sizeof(hdr)) == 0);
	CHECK(apitest_do(&t, 0, &rq, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK(r.body && strstr(r.body, "href=\"/dashboard/sandboxes/sbx_d\">sbx_d</a>") != NULL);
	CHECK(r.body && strstr(r.body, "href=\"/dashboard/sandboxes/.\"") == NULL);
	CHECK(r.body && strstr(r.body, "href=\"/dashboard/sandboxes/..\"") == NULL);
	CHECK(r.body && strstr(r.body, "GET /v1/sandboxes/..,") != NULL);
	CHECK(r.body && strstr(r.body, "GET /v1/sandboxes/.,") != NULL);
	apitest_resp_release(&r);
}

int main(void)
{
	/* libpq sends the first two after the options meterd connects with,
	 * and takes the third for the client encoding: its sessions must still
	 * count hours and write days as UTC and ISO do (a zone half an hour off
	 * UTC shifts every hour's bucket), and read its text as UTF-8. */
	static const char *const env[] = {"PGTZ=Asia/Kolkata", "PGDATESTYLE=SQL, DMY",
					  "PGCLIENTENCODING=LATIN1", NULL};

	if (apitest_start(&t, "api_read", 1, NULL, env) < 0)
		return 1;
	setup();
	test_usage();
	test_sandboxes();
	test_bad_queries();
	test_unknown_account();
	test_usage_items_cap();
	test_row_start_zones();
	test_row_start_inlined();
	test_usage_repeated_midnight();
	test_cpu_split_agrees();
	test_dot_ids_on_dashboard();
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	return check_done();
}
