/* The dashboard in a real headless Chromium (through chromedriver): sign in
 * with a read-only key, open every page, check the figures shown against
 * usage inserted with known money, find no console errors, save screenshots
 * (artifacts). Then, with the session cookie the browser holds: no mutating
 * route of the routing table can be reached, and an XSS payload shows as
 * text. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apitest.h"
#include "check.h"
#include "routes.h"
#include "webdriver.h"

static char artifacts[512];

/* Exact dollars of µ$, as the pages print them. */
static void dollars(int64_t micros, char *buf, size_t len)
{
	snprintf(buf, len, "$%lld.%06lld", (long long)(micros / 1000000),
		 (long long)(micros % 1000000));
}

/* Checks the browser console is clean and saves a screenshot. */
static void page_done(struct webdriver *wd, const char *name)
{
	char path[640];
	json_t *errors = wd_console_errors(wd);

	CHECK(errors != NULL);
	if (errors && json_array_size(errors) > 0) {
		char *dump = json_dumps(errors, 0);
		fprintf(stderr, "console errors on %s: %s\n", name, dump);
		free(dump);
	}
	CHECK_I64(errors ? (int64_t)json_array_size(errors) : -1, 0);
	json_decref(errors);
	snprintf(path, sizeof(path), "%s/dashboard-%s.png", artifacts, name);
	CHECK(wd_screenshot(wd, path) == 0);
}

/* The text of the page's first element matching css is want. */
static void text_is(struct webdriver *wd, const char *css, const char *want)
{
	char *text = wd_text(wd, css);

	CHECK_STR(text, want);
	free(text);
}

/* Inserts an hour of usage `ago` hours before the current UTC hour, with
 * the given money; returns 1 when that hour is in the current UTC month. */
static int usage(PGconn *c, const char *acc, const char *key, const char *sbx, int ago, int64_t cpu,
		 int64_t mem, int64_t sto)
{
	char sql[1400];
	PGresult *r;
	int in_month;

	snprintf(sql, sizeof(sql),
		 "INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_version, key_id,"
		 " day, running_usec, paused_usec, cpu_used_mcus, cpu_billed_mcus, memory_mibus,"
		 " storage_mibus, cpu_micros, memory_micros, storage_micros, total_micros,"
		 " cpu_cum_micros, memory_cum_micros, storage_cum_micros)"
		 " SELECT '%s', '%s', h, 1, '%s', (h AT TIME ZONE 'UTC')::date, 3000000000,"
		 " 600000000, 30000000000, 150000000000, 1000, 2000, %lld, %lld, %lld, %lld,"
		 " 10000000, 10000000, 10000000 FROM (SELECT date_trunc('hour', now())"
		 " - interval '%d hours' AS h) x"
		 " RETURNING date_trunc('month', hour AT TIME ZONE 'UTC')"
		 " = date_trunc('month', now() AT TIME ZONE 'UTC')",
		 acc, sbx, key, (long long)cpu, (long long)mem, (long long)sto,
		 (long long)cpu + mem + sto, ago);
	r = PQexec(c, sql);
	CHECK(PQresultStatus(r) == PGRES_TUPLES_OK);
	in_month = PQresultStatus(r) == PGRES_TUPLES_OK && PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);
	return in_month;
}

/* Writes key's ledger row of today (in its time zone): spent and held. */
static void today_row(PGconn *c, const char *key, int64_t spent, int64_t held)
{
	char sql[512];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, held_micros,"
		 " limit_micros) SELECT account_id, key_id, (now() AT TIME ZONE time_zone)::date,"
		 " %lld, %lld, daily_limit_micros FROM api_keys WHERE key_id = '%s'",
		 (long long)spent, (long long)held, key);
	CHECK_STR(testdb_exec_state(c, sql), "00000");
}

int main(void)
{
	static const char *const env[] = {
	    "METER_SESSION_SECRET=browser-test-secret-at-least-32-characters", NULL};
	struct apitest t;
	struct webdriver wd;
	bool missing;
	char remaining_css[96], gone_css[96], gone_cell[96], gone_key[65],
	    gone_token[APITEST_TOKEN_MAX], idle_key[65], idle_token[APITEST_TOKEN_MAX];
	char acc[65], ro_key[65], ro_token[APITEST_TOKEN_MAX], full_key[65],
	    full_token[APITEST_TOKEN_MAX], url[512], want[64], sql[1024];
	char *text, *cookie, *src;
	int64_t week = 0, busy_month = 0;
	const char *bin = getenv("METER_BIN_DIR");

	snprintf(artifacts, sizeof(artifacts), "%s/artifacts", bin ? bin : ".");
	{
		char cmd[600];
		snprintf(cmd, sizeof(cmd), "mkdir -p '%.500s'", artifacts);
		if (system(cmd) != 0)
			return 1;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (wd_start(&wd, &missing) != 0) {
		wd_stop(&wd);
		if (missing) {
			printf("SKIP: chromium and chromedriver are needed (scripts/setup.sh "
			       "browser)\n");
			return 77;
		}
		return 1;
	}
	if (apitest_start(&t, "dash", 1, NULL, env) < 0) {
		wd_stop(&wd);
		return 1;
	}
	CHECK(apitest_create_account(&t, "<script>alert(1)</script> & Co", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, ro_key, ro_token) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 5000000, NULL, full_key, full_token) == 0);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state)"
		 " VALUES ('%s', 'sbx_busy', '%s', 2, 4096, 'running'),"
		 " ('%s', 'sbx_idle', '%s', 1, 1024, 'paused')",
		 acc, full_key, acc, full_key);
	CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
	/* This hour (today) and 30 hours ago (this week, not today). */
	busy_month += usage(t.db.conn, acc, full_key, "sbx_busy", 0, 50000, 30000, 0) * 80000;
	busy_month += usage(t.db.conn, acc, full_key, "sbx_busy", 30, 1250, 30000, 0) * 31250;
	usage(t.db.conn, acc, full_key, "sbx_idle", 0, 625, 3750, 11);
	week = 80000 + 31250 + 625 + 3750 + 11;
	/* sbx_busy's holds: one open, $0.500000 of it remaining, and one
	 * settled, which its page does not list. */
	snprintf(sql, sizeof(sql),
		 "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
		 " consumed_micros, status, settled_at, lease_starts_at, lease_ends_at)"
		 " VALUES ('%s', '%s', 'sbx_busy', current_date, 700000, 200000, 'open', NULL,"
		 " now(), now() + interval '1 hour'), ('%s', '%s', 'sbx_busy', current_date,"
		 " 900000, 100000, 'settled', now(), now() - interval '2 hours',"
		 " now() - interval '1 hour')",
		 acc, full_key, acc, full_key);
	CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
	/* Rows written here, not by ingestion: the dashboard's rollups are
	 * recomputed from them as the migration does. */
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandbox_meter (account_id, sandbox_id, last_sampled_at, last_state,"
		 " last_cpu_usec, last_memory_mib, last_storage_mib, last_vcpus, price_version)"
		 " SELECT account_id, sandbox_id, now(), state, 0, memory_mib, 0, vcpus, 1"
		 " FROM sandboxes WHERE account_id = '%s'",
		 acc);
	CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
	CHECK_STR(testdb_exec_state(t.db.conn, "SELECT meter_dashboard_rebuild()"), "00000");
	/* The full key's day: $5 less 1,234,567 spent and 765,433 held
	 * leaves $3.000000, on the overview and the keys page. */
	today_row(t.db.conn, full_key, 1234567, 765433);
	snprintf(remaining_css, sizeof(remaining_css), "#remaining-%s", full_key);
	/* Two keys revoked today: one whose day has spend shows on the
	 * overview (its sandboxes may run on), one whose day is empty does
	 * not. */
	CHECK(apitest_create_key(&t, acc, "full", 9000000, NULL, gone_key, gone_token) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 9000000, NULL, idle_key, idle_token) == 0);
	today_row(t.db.conn, gone_key, 4321, 0);
	snprintf(sql, sizeof(sql),
		 "UPDATE api_keys SET revoked_at = now() WHERE key_id IN ('%s', '%s')", gone_key,
		 idle_key);
	CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
	snprintf(gone_css, sizeof(gone_css), "#remaining-%s", gone_key);

	/* Not signed in: the dashboard sends the browser to the sign-in page. */
	snprintf(url, sizeof(url), "%s/dashboard/", t.servers[0].base);
	CHECK(wd_get(&wd, url) == 0);
	text = wd_url(&wd);
	CHECK(text && strstr(text, "/dashboard/sign-in") != NULL);
	free(text);
	page_done(&wd, "sign-in");
	/* A wrong key is refused, with the form shown again. */
	CHECK(wd_type(&wd, "#key", "key_nope.not-a-secret") == 0);
	CHECK(wd_click(&wd, "button[type=submit]") == 0);
	wd_wait_source(&wd, "class=\"error\"", 10000);
	text = wd_text(&wd, ".error");
	CHECK(text && strstr(text, "not accepted") != NULL);
	free(text);
	{
		/* The refusal is a 401, which the console reports: that one only. */
		json_t *e = wd_console_errors(&wd);
		CHECK_I64(e ? (int64_t)json_array_size(e) : -1, 1);
		CHECK(e &&
		      strstr(json_string_value(json_object_get(json_array_get(e, 0), "message"))
				 ?: "",
			     "401") != NULL);
		json_decref(e);
	}
	/* The read-only key signs in. */
	CHECK(wd_type(&wd, "#key", ro_token) == 0);
	CHECK(wd_click(&wd, "button[type=submit]") == 0);
	wd_wait_url(&wd, "/dashboard/", "sign-in", 10000);
	text = wd_url(&wd);
	CHECK(text && strstr(text, "/dashboard/") != NULL && !strstr(text, "sign-in"));
	free(text);

	/* Overview: the week's spend, this hour's most expensive sandbox. */
	dollars(week, want, sizeof(want));
	text_is(&wd, "#week-total", want);
	src = wd_source(&wd);
	CHECK(src && strstr(src, "sbx_busy") != NULL);
	CHECK(src && strstr(src, "$0.080000") != NULL); /* sbx_busy today */
	CHECK(src && strstr(src, "<svg") != NULL);
	CHECK(src && strstr(src, ro_token) == NULL); /* the key never appears */
	free(src);
	text_is(&wd, remaining_css, "$3.000000");
	text_is(&wd, gone_css, "none (revoked)");
	src = wd_source(&wd);
	snprintf(gone_cell, sizeof(gone_cell), "%s (revoked)", gone_key);
	CHECK(src && strstr(src, gone_cell) != NULL);
	CHECK(src && strstr(src, "$0.004321") != NULL);
	CHECK(src && strstr(src, idle_key) == NULL);
	free(src);
	page_done(&wd, "overview");

	/* Sandboxes: both, with today's and the month's cost. */
	snprintf(url, sizeof(url), "%s/dashboard/sandboxes", t.servers[0].base);
	CHECK(wd_get(&wd, url) == 0);
	text_is(&wd, "#sandbox-count", "2");
	src = wd_source(&wd);
	dollars(busy_month, want, sizeof(want));
	CHECK(src && strstr(src, want) != NULL);
	/* 30,000,000,000 mc-µs used over 3,000 s running: 10 m average; billed 50. */
	CHECK(src && strstr(src, "<td class=\"n\">10</td><td class=\"n\">50</td>") != NULL);
	free(src);
	page_done(&wd, "sandboxes");
	snprintf(url, sizeof(url), "%s/dashboard/sandboxes?state=paused", t.servers[0].base);
	CHECK(wd_get(&wd, url) == 0);
	text_is(&wd, "#sandbox-count", "1");
	page_done(&wd, "sandboxes-paused");
	/* A key of the account with no sandbox: none here; a key filter
	 * naming no key of the account says so (a 404 page, in the console). */
	snprintf(url, sizeof(url), "%s/dashboard/sandboxes?key_id=%s", t.servers[0].base, ro_key);
	CHECK(wd_get(&wd, url) == 0);
	text_is(&wd, "tbody", "No sandboxes here.");
	page_done(&wd, "sandboxes-idle-key");
	snprintf(url, sizeof(url), "%s/dashboard/sandboxes?key_id=key_none", t.servers[0].base);
	CHECK(wd_get(&wd, url) == 0);
	text_is(&wd, "tbody", "No key key_none in this account.");
	text_is(&wd, "#sandbox-count", "0");
	json_decref(wd_console_errors(&wd)); /* the 404 is expected there */

	/* Never metered (no meter row), and metered on an earlier day only:
	 * both on the unfiltered list, which ranks the meter rows alone, after
	 * the sandboxes with money today, by id. A page past the end still
	 * counts them all. */
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state)"
		 " VALUES ('%s', 'sbx_new', '%s', 1, 1024, 'running'),"
		 " ('%s', 'sbx_old', '%s', 1, 1024, 'stopped')",
		 acc, full_key, acc, full_key);
	CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
	usage(t.db.conn, acc, full_key, "sbx_old", 30, 7000000, 0, 0);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandbox_meter (account_id, sandbox_id, last_sampled_at, last_state,"
		 " last_cpu_usec, last_memory_mib, last_storage_mib, last_vcpus, price_version)"
		 " VALUES ('%s', 'sbx_old', now(), 'stopped', 0, 1024, 0, 1, 1)",
		 acc);
	CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
	CHECK_STR(testdb_exec_state(t.db.conn, "SELECT meter_dashboard_rebuild()"), "00000");
	{
		static const char *const order[] = {"sbx_busy", "sbx_idle", "sbx_new", "sbx_old"};
		const char *at = NULL;

		snprintf(url, sizeof(url), "%s/dashboard/sandboxes", t.servers[0].base);
		CHECK(wd_get(&wd, url) == 0);
		text_is(&wd, "#sandbox-count", "4");
		src = wd_source(&wd);
		at = src;
		for (size_t i = 0; at && i < sizeof(order) / sizeof(order[0]); i++) {
			char href[64];
			snprintf(href, sizeof(href), "href=\"/dashboard/sandboxes/%s\"", order[i]);
			at = strstr(at, href);
			if (!at)
				fprintf(stderr, "sandboxes list: %s missing or out of order\n",
					order[i]);
		}
		CHECK(at != NULL);
		free(src);
		snprintf(url, sizeof(url), "%s/dashboard/sandboxes?page=1", t.servers[0].base);
		CHECK(wd_get(&wd, url) == 0);
		text_is(&wd, "#sandbox-count", "4");
		src = wd_source(&wd);
		CHECK(src && strstr(src, "href=\"/dashboard/sandboxes/sbx_") == NULL);
		free(src);
	}

	/* A sandbox: the month's breakdown adds up to its total, and the CPU
	 * chart's floor is the price book's now: a version in force from a
	 * second ago raised it to 75 millicores. */
	CHECK_STR(testdb_exec_state(
		      t.db.conn, "INSERT INTO price_book (effective_from, cpu_micros_per_vcpu_hour,"
				 " memory_micros_per_gib_hour, storage_micros_per_gib_hour,"
				 " floor_millicores) VALUES (now() - interval '1 second', 25000,"
				 " 7500, 100, 75)"),
		  "00000");
	snprintf(url, sizeof(url), "%s/dashboard/sandboxes/sbx_busy", t.servers[0].base);
	CHECK(wd_get(&wd, url) == 0);
	text_is(&wd, "#cost-4", want);
	text_is(&wd, "#floor", "75");
	src = wd_source(&wd);
	CHECK(src && strstr(src, "class=\"floor\"") != NULL);
	CHECK(src && strstr(src, ">floor 75 m</text>") != NULL);
	CHECK(src && strstr(src, "$0.700000") != NULL && strstr(src, "$0.200000") != NULL);
	CHECK(src && strstr(src, "$0.900000") == NULL);
	free(src);
	text_is(&wd, "#held", "$0.500000");
	page_done(&wd, "sandbox");

	snprintf(url, sizeof(url), "%s/dashboard/keys", t.servers[0].base);
	CHECK(wd_get(&wd, url) == 0);
	src = wd_source(&wd);
	CHECK(src && strstr(src, full_key) != NULL && strstr(src, "$5.000000") != NULL);
	free(src);
	text_is(&wd, remaining_css, "$3.000000");
	page_done(&wd, "keys");
	snprintf(url, sizeof(url), "%s/dashboard/exports", t.servers[0].base);
	CHECK(wd_get(&wd, url) == 0);
	page_done(&wd, "exports");
	/* The printable statement, through the same session: the account's
	 * name, an XSS payload, is text. */
	CHECK(wd_click(&wd, "a[href^=\"/v1/reports/statement.html\"]") == 0);
	wd_wait_url(&wd, "statement.html", NULL, 10000);
	src = wd_source(&wd);
	CHECK(src && strstr(src, "&lt;script&gt;alert(1)&lt;/script&gt; &amp; Co") != NULL);
	free(src);
	text = wd_text(&wd, "p");
	CHECK(text && strstr(text, "<script>alert(1)</script> & Co") != NULL);
	free(text);
	page_done(&wd, "statement");

	/* With the browser's session cookie, no mutating route answers 2xx. */
	cookie = wd_cookie(&wd, "meter_session");
	CHECK(cookie != NULL);
	for (size_t i = 0; cookie && i < routes_count; i++) {
		const struct route *r = &routes[i];
		char path[256], hdr[700], *q;
		const char *headers[] = {hdr, NULL};
		struct apitest_req rq = {.method = r->method,
					 .path = path,
					 .headers = headers,
					 .body = "{}",
					 .body_len = 2};
		struct apitest_resp resp;

		if (strcmp(r->method, "GET") == 0 || (r->roles & ROLE_PUBLIC))
			continue;
		snprintf(path, sizeof(path), "%s", r->path);
		while ((q = strchr(path, '{')) != NULL) {
			char *close = strchr(q, '}');
			memmove(q + 8, close + 1, strlen(close + 1) + 1);
			memcpy(q, "sbx_busy", 8);
		}
		snprintf(hdr, sizeof(hdr), "Cookie: meter_session=%s", cookie);
		CHECK(apitest_do(&t, 0, &rq, &resp) == 0);
		if (resp.status >= 200 && resp.status < 300)
			fprintf(stderr, "%s %s answered %ld to a session\n", r->method, path,
				resp.status);
		CHECK(resp.status == 401 || resp.status == 403);
		apitest_resp_release(&resp);
	}
	free(cookie);

	/* XSS in a path or a filter is refused before any page is built. */
	snprintf(url, sizeof(url),
		 "%s/dashboard/sandboxes/%%3Cscript%%3Ealert(1)%%3C%%2Fscript%%3E",
		 t.servers[0].base);
	CHECK(wd_get(&wd, url) == 0);
	src = wd_source(&wd);
	CHECK(src && strstr(src, "<script>alert") == NULL);
	free(src);
	snprintf(url, sizeof(url), "%s/dashboard/sandboxes?key_id=%%3Cimg%%20src%%3Dx%%3E",
		 t.servers[0].base);
	CHECK(wd_get(&wd, url) == 0);
	src = wd_source(&wd);
	CHECK(src && strstr(src, "<img src=x>") == NULL && strstr(src, "invalid_request"));
	free(src);
	json_decref(wd_console_errors(&wd)); /* the 400s above are expected there */

	/* Sign out: the session is gone. */
	snprintf(url, sizeof(url), "%s/dashboard/keys", t.servers[0].base);
	CHECK(wd_get(&wd, url) == 0);
	CHECK(wd_click(&wd, "header form button") == 0);
	wd_wait_url(&wd, "/dashboard/sign-in", NULL, 10000);
	CHECK(wd_get(&wd, url) == 0);
	text = wd_url(&wd);
	CHECK(text && strstr(text, "/dashboard/sign-in") != NULL);
	free(text);

	wd_stop(&wd);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	return check_done();
}
