/* API: accounts, keys, limits and the price book against a real meterd
 * and PostgreSQL. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apitest.h"
#include "check.h"
#include "db.h"
#include "db_keys.h"
#include "keys.h"

static struct apitest t;

static void sql_exec(const char *sql)
{
	CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
}

/* Integer member name of r's JSON, or -1 when absent (null: -2). */
static long long jint(const json_t *o, const char *name)
{
	json_t *v = json_object_get(o, name);

	if (json_is_null(v))
		return -2;
	return json_is_integer(v) ? json_integer_value(v) : -1;
}

/* The limit on key's ledger row of its today, as text into buf. */
static const char *today_limit(const char *key, char *buf, size_t len)
{
	char sql[512];

	snprintf(sql, sizeof(sql),
		 "SELECT l.limit_micros FROM key_day_ledger l JOIN api_keys k USING (account_id,"
		 " key_id) WHERE l.key_id = '%s' AND l.day = meter_key_day(k.time_zone, now())",
		 key);
	testdb_query_text(t.db.conn, sql, buf, len);
	return buf;
}

static void test_accounts_and_keys(void)
{
	struct apitest_resp r;
	char acc[65], acc2[65], kf[65], kr[65], kx[65], path[256], sql[512], got[256];
	char tf[APITEST_TOKEN_MAX], tr[APITEST_TOKEN_MAX], tx[APITEST_TOKEN_MAX];
	char bad[APITEST_TOKEN_MAX];
	unsigned char hash[KEYS_HASH_LEN];
	char hex[2 * KEYS_HASH_LEN + 1];
	const char *secret;

	/* Accounts. */
	CHECK(apitest_call(&t, 0, "POST", "/v1/accounts", t.operator_token,
			   "{\"name\":\"Acme \\u00e9\"}", &r) == 0);
	CHECK_I64(r.status, 201);
	CHECK_STR(apitest_json_str(&r, "name"), "Acme \xc3\xa9");
	snprintf(acc, sizeof(acc), "%s", apitest_json_str(&r, "account_id") ?: "");
	CHECK(strncmp(acc, "acc_", 4) == 0 && strlen(acc) == 20);
	apitest_resp_release(&r);
	CHECK(apitest_create_account(&t, "Other", acc2) == 0);
	CHECK(strcmp(acc, acc2) != 0);

	/* Keys: the secret is the whole token, shown once. */
	snprintf(path, sizeof(path), "/v1/accounts/%s/keys", acc);
	CHECK(apitest_call(&t, 0, "POST", path, t.operator_token,
			   "{\"role\":\"full\",\"daily_limit_micros\":1000000,"
			   "\"time_zone\":\"Europe/Paris\"}",
			   &r) == 0);
	CHECK_I64(r.status, 201);
	CHECK_STR(apitest_json_str(&r, "role"), "full");
	CHECK_STR(apitest_json_str(&r, "time_zone"), "Europe/Paris");
	CHECK_I64(jint(r.json, "daily_limit_micros"), 1000000);
	CHECK_STR(apitest_json_str(&r, "account_id"), acc);
	snprintf(kf, sizeof(kf), "%s", apitest_json_str(&r, "key_id") ?: "");
	snprintf(tf, sizeof(tf), "%s", apitest_json_str(&r, "secret") ?: "");
	apitest_resp_release(&r);
	CHECK(strncmp(kf, "key_", 4) == 0 && strlen(kf) == 20);
	CHECK(strncmp(tf, kf, strlen(kf)) == 0 && tf[strlen(kf)] == '.');
	secret = tf + strlen(kf) + 1;
	CHECK_I64(strlen(secret), KEYS_SECRET_LEN);
	/* Stored: the SHA-256 of the secret, nothing else. */
	CHECK(keys_hash_secret(secret, strlen(secret), hash) == METER_OK);
	for (size_t i = 0; i < KEYS_HASH_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", hash[i]);
	snprintf(sql, sizeof(sql),
		 "SELECT encode(secret_hash, 'hex') FROM api_keys WHERE key_id = '%s'", kf);
	testdb_query_text(t.db.conn, sql, got, sizeof(got));
	CHECK_STR(got, hex);
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM api_keys k WHERE position('%s' in k::text) > 0", secret);
	testdb_query_text(t.db.conn, sql, got, sizeof(got));
	CHECK_STR(got, "0");

	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, kr, tr) == 0);
	CHECK(apitest_create_key(&t, acc2, "full", -1, NULL, kx, tx) == 0);

	/* Listing: own account, no secrets. */
	CHECK(apitest_call(&t, 0, "GET", "/v1/keys", tr, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK_I64(json_array_size(json_object_get(r.json, "items")), 2);
	CHECK(strstr(r.body, "secret") == NULL);
	CHECK(strstr(r.body, kx) == NULL);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "GET", "/v1/keys", t.operator_token, NULL, &r) == 0);
	CHECK_I64(r.status, 400);
	CHECK_STR(apitest_error_code(&r), "invalid_request");
	CHECK_STR(json_string_value(json_object_get(json_object_get(r.json, "error"), "field")),
		  "account_id");
	apitest_resp_release(&r);
	snprintf(path, sizeof(path), "/v1/keys?account_id=%s", acc2);
	CHECK(apitest_call(&t, 0, "GET", path, t.operator_token, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK_I64(json_array_size(json_object_get(r.json, "items")), 1);
	apitest_resp_release(&r);
	/* A key naming another account: not found, like any of its ids. */
	CHECK(apitest_call(&t, 0, "GET", path, tf, NULL, &r) == 0);
	CHECK_I64(r.status, 404);
	apitest_resp_release(&r);

	/* Today's figures from the ledger: zeros without a row, then the row. */
	snprintf(path, sizeof(path), "/v1/keys/%s", kf);
	CHECK(apitest_call(&t, 0, "GET", path, tf, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK_I64(jint(r.json, "day_spent_micros"), 0);
	CHECK_I64(jint(r.json, "day_held_micros"), 0);
	CHECK_I64(jint(r.json, "day_remaining_micros"), 1000000);
	testdb_query_text(t.db.conn, "SELECT meter_key_day('Europe/Paris', now())::text", got,
			  sizeof(got));
	CHECK_STR(apitest_json_str(&r, "day"), got);
	apitest_resp_release(&r);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, held_micros,"
		 " limit_micros) VALUES ('%s', '%s', meter_key_day('Europe/Paris', now()), 1234,"
		 " 5678, 1000000)",
		 acc, kf);
	sql_exec(sql);
	CHECK(apitest_call(&t, 0, "GET", path, tr, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK_I64(jint(r.json, "day_spent_micros"), 1234);
	CHECK_I64(jint(r.json, "day_held_micros"), 5678);
	CHECK_I64(jint(r.json, "day_committed_micros"), 1234 + 5678);
	CHECK_I64(jint(r.json, "day_remaining_micros"), 1000000 - 1234 - 5678);
	apitest_resp_release(&r);
	/* Another account's key: 404, not 403. */
	CHECK(apitest_call(&t, 0, "GET", path, tx, NULL, &r) == 0);
	CHECK_I64(r.status, 404);
	CHECK_STR(apitest_error_code(&r), "not_found");
	apitest_resp_release(&r);

	/* Limits: a full key of the account; today's ledger row follows. */
	snprintf(path, sizeof(path), "/v1/keys/%s/limits", kf);
	CHECK(apitest_call(&t, 0, "PUT", path, tf, "{\"daily_limit_micros\":2000000}", &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK_I64(jint(r.json, "daily_limit_micros"), 2000000);
	CHECK_STR(apitest_json_str(&r, "time_zone"), "Europe/Paris");
	apitest_resp_release(&r);
	snprintf(sql, sizeof(sql),
		 "SELECT limit_micros FROM key_day_ledger WHERE key_id = '%s'"
		 " AND day = meter_key_day('Europe/Paris', now())",
		 kf);
	testdb_query_text(t.db.conn, sql, got, sizeof(got));
	CHECK_STR(got, "2000000");
	CHECK(apitest_call(&t, 0, "PUT", path, t.operator_token, "{\"daily_limit_micros\":null}",
			   &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK_I64(jint(r.json, "daily_limit_micros"), -2);
	CHECK_I64(jint(r.json, "day_remaining_micros"), -2);
	apitest_resp_release(&r);
	testdb_query_text(t.db.conn,
			  "SELECT count(*) FROM key_day_ledger WHERE limit_micros IS NULL", got,
			  sizeof(got));
	CHECK_STR(got, "1");
	CHECK(apitest_call(&t, 0, "PUT", path, tf, "{\"time_zone\":\"Mars/Olympus_Mons\"}", &r) ==
	      0);
	CHECK_I64(r.status, 400);
	CHECK_STR(json_string_value(json_object_get(json_object_get(r.json, "error"), "field")),
		  "time_zone");
	apitest_resp_release(&r);
	/* A zone's name that PostgreSQL reads as an abbreviation, a fixed
	 * offset, first: CET's summer days would start an hour late. */
	CHECK(apitest_call(&t, 0, "PUT", path, tf, "{\"time_zone\":\"CET\"}", &r) == 0);
	CHECK_I64(r.status, 400);
	CHECK(
	    strstr(json_string_value(json_object_get(json_object_get(r.json, "error"), "message")),
		   "abbreviation") != NULL);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "PUT", path, tf,
			   "{\"time_zone\":\"Asia/Kolkata\",\"daily_limit_micros\":5}", &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK_STR(apitest_json_str(&r, "time_zone"), "Asia/Kolkata");
	CHECK_I64(jint(r.json, "daily_limit_micros"), 5);
	testdb_query_text(t.db.conn, "SELECT meter_key_day('Asia/Kolkata', now())::text", got,
			  sizeof(got));
	CHECK_STR(apitest_json_str(&r, "day"), got);
	apitest_resp_release(&r);
	/* Today's row is made when missing (a check that read the old limit
	 * then finds the new one), and a later day's (a lease crossing
	 * midnight) follows too; an earlier day keeps its limit. */
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM key_day_ledger WHERE key_id = '%s' AND limit_micros = 5"
		 " AND day = meter_key_day('Asia/Kolkata', now())",
		 kf);
	testdb_query_text(t.db.conn, sql, got, sizeof(got));
	CHECK_STR(got, "1");
	snprintf(sql, sizeof(sql),
		 "INSERT INTO key_day_ledger (account_id, key_id, day, held_micros, limit_micros)"
		 " SELECT '%s', '%s', meter_key_day('Asia/Kolkata', now()) + d, 10, 5"
		 " FROM unnest(ARRAY[-3, 1]) d",
		 acc, kf);
	sql_exec(sql);
	CHECK(apitest_call(&t, 0, "PUT", path, tf, "{\"daily_limit_micros\":7}", &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
	snprintf(sql, sizeof(sql),
		 "SELECT string_agg((day - meter_key_day('Asia/Kolkata', now())) || ':' ||"
		 " limit_micros, ',' ORDER BY day) FROM key_day_ledger WHERE key_id = '%s'"
		 " AND day - meter_key_day('Asia/Kolkata', now()) IN (-3, 0, 1)",
		 kf);
	testdb_query_text(t.db.conn, sql, got, sizeof(got));
	CHECK_STR(got, "-3:5,0:7,1:7");
	/* A key with no ledger row yet gets today's. */
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM key_day_ledger WHERE key_id = '%s'", kr);
	testdb_query_text(t.db.conn, sql, got, sizeof(got));
	CHECK_STR(got, "0");
	snprintf(sql, sizeof(sql), "/v1/keys/%s/limits", kr);
	CHECK(apitest_call(&t, 0, "PUT", sql, t.operator_token, "{\"daily_limit_micros\":9}", &r) ==
	      0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
	CHECK_STR(today_limit(kr, got, sizeof(got)), "9");
	CHECK(apitest_call(&t, 0, "PUT", path, tf, "{}", &r) == 0);
	CHECK_I64(r.status, 400);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "PUT", path, tr, "{\"daily_limit_micros\":1}", &r) == 0);
	CHECK_I64(r.status, 403);
	CHECK_STR(apitest_error_code(&r), "read_only_key");
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "PUT", path, tx, "{\"daily_limit_micros\":1}", &r) == 0);
	CHECK_I64(r.status, 404);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "PUT", path, t.control_plane_token, "{\"daily_limit_micros\":1}",
			   &r) == 0);
	CHECK_I64(r.status, 403);
	CHECK_STR(apitest_error_code(&r), "forbidden");
	apitest_resp_release(&r);
	/* A full key sets its own limits, not another key's of its account:
	 * nothing changes. */
	snprintf(path, sizeof(path), "/v1/keys/%s/limits", kr);
	CHECK(apitest_call(&t, 0, "PUT", path, tf, "{\"daily_limit_micros\":1}", &r) == 0);
	CHECK_I64(r.status, 403);
	CHECK_STR(apitest_error_code(&r), "forbidden");
	apitest_resp_release(&r);
	CHECK_STR(today_limit(kr, got, sizeof(got)), "9");

	/* Authentication: a wrong secret and an unknown key look alike. */
	snprintf(bad, sizeof(bad), "%s", tf);
	bad[strlen(bad) - 1] = bad[strlen(bad) - 1] == 'A' ? 'B' : 'A';
	CHECK(apitest_call(&t, 0, "GET", "/v1/keys", bad, NULL, &r) == 0);
	CHECK_I64(r.status, 401);
	CHECK_STR(apitest_error_code(&r), "unauthorized");
	snprintf(got, sizeof(got), "%s", r.body);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "GET", "/v1/keys", "key_0000000000000000.AAAA", NULL, &r) == 0);
	CHECK_I64(r.status, 401);
	CHECK_STR(r.body, got);
	apitest_resp_release(&r);
	/* A revoked key (never used, so not cached) is refused. */
	{
		char kv[65], tv[APITEST_TOKEN_MAX];

		CHECK(apitest_create_key(&t, acc, "full", -1, NULL, kv, tv) == 0);
		snprintf(sql, sizeof(sql),
			 "UPDATE api_keys SET revoked_at = now() WHERE key_id = '%s'", kv);
		sql_exec(sql);
		CHECK(apitest_call(&t, 0, "GET", "/v1/keys", tv, NULL, &r) == 0);
		CHECK_I64(r.status, 401);
		CHECK_STR(r.body, got);
		apitest_resp_release(&r);
	}

	/* Creation errors. */
	CHECK(apitest_call(&t, 0, "POST", "/v1/accounts/acc_nope/keys", t.operator_token,
			   "{\"role\":\"full\"}", &r) == 0);
	CHECK_I64(r.status, 404);
	apitest_resp_release(&r);
	snprintf(path, sizeof(path), "/v1/accounts/%s/keys", acc);
	CHECK(apitest_call(&t, 0, "POST", path, t.operator_token, "{\"role\":\"admin\"}", &r) == 0);
	CHECK_I64(r.status, 400);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "POST", path, t.operator_token,
			   "{\"role\":\"full\",\"time_zone\":\"utc\"}", &r) == 0);
	CHECK_I64(r.status, 400);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "POST", path, tf, "{\"role\":\"full\"}", &r) == 0);
	CHECK_I64(r.status, 403);
	CHECK_STR(apitest_error_code(&r), "forbidden");
	apitest_resp_release(&r);
}

/* Revocation over the API (DELETE /v1/accounts/{id}/keys/{key_id}, the
 * operator's): who may not, another account's key, a body or a query
 * refused with nothing revoked; then the answer, the token refused by this
 * meterd from the next request on (its cached lookup forgotten), a check
 * naming the key refused, and a second call answering the first
 * revocation. */
/* A key with no limit may hold and spend up to the largest bigint each:
 * their sum, the day's committed figure, stops at the largest instead of
 * wrapping (or stopping the server), and the dashboard's gauge of them is
 * drawn. */
static void test_key_committed_overflow(void)
{
	char acc[65], k[65], tok[APITEST_TOKEN_MAX], sql[512], path[128], hdr[720];
	const char *cookies[] = {hdr, NULL};
	struct apitest_req rq;
	struct apitest_resp r;

	CHECK(apitest_create_account(&t, "Overflow", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, k, tok) == 0);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, held_micros,"
		 " limit_micros) VALUES ('%s', '%s', meter_key_day('UTC', now()),"
		 " 9000000000000000000, 9000000000000000000, NULL)",
		 acc, k);
	sql_exec(sql);
	snprintf(path, sizeof(path), "/v1/keys/%s", k);
	CHECK(apitest_call(&t, 0, "GET", path, tok, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK_I64(jint(r.json, "day_spent_micros"), 9000000000000000000LL);
	CHECK_I64(jint(r.json, "day_committed_micros"), INT64_MAX);
	CHECK_I64(jint(r.json, "day_remaining_micros"), -2);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "GET", "/v1/keys", tok, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
	CHECK(apitest_sign_in(&t, tok, hdr, sizeof(hdr)) == 0);
	rq = (struct apitest_req){.method = "GET", .path = "/dashboard/", .headers = cookies};
	CHECK(apitest_do(&t, 0, &rq, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK(r.body && strstr(r.body, "class=\"gauge\"") != NULL);
	apitest_resp_release(&r);
}

/* A change of a key's zone alone sets the limit on the new zone's days:
 * today's there may be a row made under another limit (yesterday's of a
 * zone ahead), and the spend_limit_crossed trigger compares with the row's.
 * Before, a key moved back from Kiritimati to Pago Pago (25 hours apart,
 * so their days always differ) kept a NULL limit on today's row after its
 * limit was set while it was ahead, and its crossing was never sent. */
static void test_zone_change_limits(void)
{
	char acc[65], k[65], tok[APITEST_TOKEN_MAX], sql[512], path[128], got[64];
	static const char *const puts[] = {"{\"time_zone\":\"Pacific/Kiritimati\"}",
					   "{\"daily_limit_micros\":1000}",
					   "{\"time_zone\":\"Pacific/Pago_Pago\"}", NULL};
	struct apitest_resp r;

	CHECK(apitest_create_account(&t, "Zones", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", -1, "Pacific/Pago_Pago", k, tok) == 0);
	snprintf(path, sizeof(path), "/v1/keys/%s/limits", k);
	for (int i = 0; puts[i]; i++) {
		CHECK(apitest_call(&t, 0, "PUT", path, t.operator_token, puts[i], &r) == 0);
		CHECK_I64(r.status, 200);
		apitest_resp_release(&r);
	}
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FILTER (WHERE day = meter_key_day('Pacific/Pago_Pago', now()))"
		 " || ' ' || count(*) FILTER (WHERE limit_micros IS DISTINCT FROM 1000)"
		 " FROM key_day_ledger WHERE key_id = '%s'"
		 " AND day >= meter_key_day('Pacific/Pago_Pago', now())",
		 k);
	testdb_query_text(t.db.conn, sql, got, sizeof(got));
	CHECK_STR(got, "1 0");
	/* Spend past the limit on today's row: the crossing is queued. */
	snprintf(sql, sizeof(sql),
		 "UPDATE key_day_ledger SET spent_micros = 1500 WHERE key_id = '%s'"
		 " AND day = meter_key_day('Pacific/Pago_Pago', now())",
		 k);
	sql_exec(sql);
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM webhook_outbox WHERE type = 'spend_limit_crossed'"
		 " AND key_id = '%s'",
		 k);
	testdb_query_text(t.db.conn, sql, got, sizeof(got));
	CHECK_STR(got, "1");
}

/* GET /v1/keys in pages: every key once, oldest first, next_cursor null on
 * the last page; a cursor of no key of the account, or a limit out of
 * range, is 400. Before, the list stopped at 10,000 keys without a word. */
/* The unattributed account takes no keys: a key of it would read every
 * sandbox no key claims, an operator's view. */
static void test_unattributed_keys(void)
{
	struct apitest_resp r;
	char n[32];

	CHECK(apitest_call(&t, 0, "POST", "/v1/accounts/unattributed/keys", t.operator_token,
			   "{\"role\":\"read_only\"}", &r) == 0);
	CHECK_I64(r.status, 403);
	CHECK_STR(apitest_error_code(&r), "forbidden");
	apitest_resp_release(&r);
	testdb_query_text(t.db.conn,
			  "SELECT count(*) FROM api_keys WHERE account_id = 'unattributed'", n,
			  sizeof(n));
	CHECK_STR(n, "0");
}

static void test_key_pages(void)
{
	char acc[65], other[65], keys[5][65], tok[APITEST_TOKEN_MAX], otok[APITEST_TOKEN_MAX];
	char path[256], cursor[65] = "";
	struct apitest_resp r;
	size_t seen = 0;
	int pages = 0;

	CHECK(apitest_create_account(&t, "Pages", acc) == 0);
	CHECK(apitest_create_account(&t, "Pages other", other) == 0);
	for (int i = 0; i < 5; i++)
		CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, keys[i], tok) == 0);
	CHECK(apitest_create_key(&t, other, "read_only", -1, NULL, path, otok) == 0);
	do {
		snprintf(path, sizeof(path), "/v1/keys?limit=2%s%s", cursor[0] ? "&cursor=" : "",
			 cursor);
		CHECK(apitest_call(&t, 0, "GET", path, tok, NULL, &r) == 0);
		CHECK_I64(r.status, 200);
		for (size_t i = 0; i < json_array_size(json_object_get(r.json, "items")); i++) {
			json_t *k = json_array_get(json_object_get(r.json, "items"), i);

			CHECK(seen < 5);
			if (seen < 5)
				CHECK_STR(json_string_value(json_object_get(k, "key_id")),
					  keys[seen]);
			seen++;
		}
		cursor[0] = '\0';
		if (json_is_string(json_object_get(r.json, "next_cursor")))
			snprintf(cursor, sizeof(cursor), "%s",
				 json_string_value(json_object_get(r.json, "next_cursor")));
		else
			CHECK(json_is_null(json_object_get(r.json, "next_cursor")));
		apitest_resp_release(&r);
		pages++;
	} while (cursor[0] && pages < 10);
	CHECK_I64((long long)seen, 5);
	CHECK_I64(pages, 3);
	/* The default page holds them all. */
	CHECK(apitest_call(&t, 0, "GET", "/v1/keys", tok, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK_I64((long long)json_array_size(json_object_get(r.json, "items")), 5);
	CHECK(json_is_null(json_object_get(r.json, "next_cursor")));
	apitest_resp_release(&r);
	/* Another account's key, no key, a limit out of range: 400. */
	{
		static const char *const bad[] = {"cursor=nokey", "limit=0", "limit=1001",
						  "cursor=", NULL};
		char q[160];
		json_t *k0;

		CHECK(apitest_call(&t, 0, "GET", "/v1/keys", otok, NULL, &r) == 0);
		k0 = json_array_get(json_object_get(r.json, "items"), 0);
		snprintf(q, sizeof(q), "/v1/keys?cursor=%s",
			 k0 ? json_string_value(json_object_get(k0, "key_id")) : "none");
		apitest_resp_release(&r);
		CHECK(apitest_call(&t, 0, "GET", q, tok, NULL, &r) == 0);
		CHECK_I64(r.status, 400);
		CHECK_STR(apitest_error_code(&r), "invalid_request");
		apitest_resp_release(&r);
		for (int i = 0; bad[i]; i++) {
			snprintf(q, sizeof(q), "/v1/keys?%s", bad[i]);
			CHECK(apitest_call(&t, 0, "GET", q, tok, NULL, &r) == 0);
			CHECK_I64(r.status, 400);
			CHECK_STR(json_string_value(
				      json_object_get(json_object_get(r.json, "error"), "field")),
				  bad[i][0] == 'c' ? "cursor" : "limit");
			apitest_resp_release(&r);
		}
	}
}

/* The dashboard reads at most DB_KEYS_LIST_MAX keys of an account, and says
 * so when it has that many; GET /v1/keys pages through every one. */
static void test_many_keys(void)
{
	char acc[65], k[65], tok[APITEST_TOKEN_MAX], sql[512], path[128], hdr[720];
	char cursor[65] = "";
	const char *cookies[] = {hdr, NULL};
	static const char *const pages[] = {"/dashboard/", "/dashboard/keys", NULL};
	struct apitest_req rq;
	struct apitest_resp r;
	size_t seen = 0;

	CHECK(apitest_create_account(&t, "Many keys", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, k, tok) == 0);
	CHECK(apitest_sign_in(&t, tok, hdr, sizeof(hdr)) == 0);
	for (int i = 0; pages[i]; i++) {
		rq = (struct apitest_req){.method = "GET", .path = pages[i], .headers = cookies};
		CHECK(apitest_do(&t, 0, &rq, &r) == 0);
		CHECK_I64(r.status, 200);
		CHECK(r.body && strstr(r.body, "first 10000 keys") == NULL);
		apitest_resp_release(&r);
	}
	snprintf(sql, sizeof(sql),
		 "INSERT INTO api_keys (account_id, key_id, secret_hash, role, created_at)"
		 " SELECT '%s', 'key_many_' || g, sha256(g::text::bytea), 'read_only',"
		 " now() + g * interval '1 microsecond' FROM generate_series(1, %d) g",
		 acc, DB_KEYS_LIST_MAX);
	sql_exec(sql);
	for (int i = 0; pages[i]; i++) {
		rq = (struct apitest_req){.method = "GET", .path = pages[i], .headers = cookies};
		CHECK(apitest_do(&t, 0, &rq, &r) == 0);
		CHECK_I64(r.status, 200);
		CHECK(r.body && strstr(r.body, "first 10000 keys only") != NULL);
		apitest_resp_release(&r);
	}
	do {
		snprintf(path, sizeof(path), "/v1/keys?limit=1000%s%s", cursor[0] ? "&cursor=" : "",
			 cursor);
		CHECK(apitest_call(&t, 0, "GET", path, tok, NULL, &r) == 0);
		CHECK_I64(r.status, 200);
		seen += json_array_size(json_object_get(r.json, "items"));
		cursor[0] = '\0';
		if (json_is_string(json_object_get(r.json, "next_cursor")))
			snprintf(cursor, sizeof(cursor), "%s",
				 json_string_value(json_object_get(r.json, "next_cursor")));
		apitest_resp_release(&r);
	} while (cursor[0] && seen <= DB_KEYS_LIST_MAX + 1);
	CHECK_I64((long long)seen, DB_KEYS_LIST_MAX + 1);
}

static void test_key_revoke(void)
{
	struct apitest_resp r;
	char acc[65], acc2[65], kv[65], kw[65], path[160], target[256], body[256], sql[256];
	char first[64] = "", got[64], tv[APITEST_TOKEN_MAX], tw[APITEST_TOKEN_MAX];
	const char *const not_allowed[] = {tv, tw, t.control_plane_token};
	const char *const missing[][2] = {{acc, kw}, {"acc_nope", kv}, {acc, "key_nope"}};

	CHECK(apitest_create_account(&t, "Revoking", acc) == 0);
	CHECK(apitest_create_account(&t, "Bystander", acc2) == 0);
	CHECK(apitest_create_key(&t, acc, "full", -1, NULL, kv, tv) == 0);
	CHECK(apitest_create_key(&t, acc2, "full", -1, NULL, kw, tw) == 0);
	/* The token used once, so this meterd has its lookup cached. */
	CHECK(apitest_call(&t, 0, "GET", "/v1/keys", tv, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);

	snprintf(path, sizeof(path), "/v1/accounts/%s/keys/%s", acc, kv);
	for (size_t i = 0; i < sizeof(not_allowed) / sizeof(not_allowed[0]); i++) {
		CHECK(apitest_call(&t, 0, "DELETE", path, not_allowed[i], NULL, &r) == 0);
		CHECK_I64(r.status, 403);
		CHECK_STR(apitest_error_code(&r), "forbidden");
		apitest_resp_release(&r);
	}
	/* Another account's key under this account's id, an unknown account,
	 * an unknown key: 404. */
	for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
		snprintf(target, sizeof(target), "/v1/accounts/%s/keys/%s", missing[i][0],
			 missing[i][1]);
		CHECK(apitest_call(&t, 0, "DELETE", target, t.operator_token, NULL, &r) == 0);
		CHECK_I64(r.status, 404);
		CHECK_STR(apitest_error_code(&r), "not_found");
		apitest_resp_release(&r);
	}
	/* It takes no body and no query. */
	CHECK(apitest_call(&t, 0, "DELETE", path, t.operator_token, "{}", &r) == 0);
	CHECK_I64(r.status, 413);
	CHECK_STR(apitest_error_code(&r), "payload_too_large");
	apitest_resp_release(&r);
	snprintf(target, sizeof(target), "%s?force=true", path);
	CHECK(apitest_call(&t, 0, "DELETE", target, t.operator_token, NULL, &r) == 0);
	CHECK_I64(r.status, 400);
	CHECK_STR(apitest_error_code(&r), "invalid_request");
	apitest_resp_release(&r);
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM api_keys WHERE key_id IN ('%s', '%s')"
		 " AND revoked_at IS NOT NULL",
		 kv, kw);
	testdb_query_text(t.db.conn, sql, got, sizeof(got));
	CHECK_STR(got, "0");
	CHECK(apitest_call(&t, 0, "GET", "/v1/keys", tv, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);

	/* Revoked. */
	CHECK(apitest_call(&t, 0, "DELETE", path, t.operator_token, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK_STR(apitest_json_str(&r, "key_id"), kv);
	CHECK_STR(apitest_json_str(&r, "account_id"), acc);
	CHECK_STR(apitest_json_str(&r, "role"), "full");
	CHECK(json_is_false(json_object_get(r.json, "already_revoked")));
	CHECK(strstr(r.body, "secret") == NULL);
	snprintf(first, sizeof(first), "%s", apitest_json_str(&r, "revoked_at") ?: "");
	apitest_resp_release(&r);
	CHECK(strlen(first) >= 20);
	snprintf(sql, sizeof(sql),
		 "SELECT to_char(revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS')"
		 " FROM api_keys WHERE key_id = '%s'",
		 kv);
	testdb_query_text(t.db.conn, sql, got, sizeof(got));
	CHECK(got[0] && strncmp(first, got, strlen(got)) == 0);
	/* This meterd had the token cached: refused from the next request. */
	CHECK(apitest_call(&t, 0, "GET", "/v1/keys", tv, NULL, &r) == 0);
	CHECK_I64(r.status, 401);
	CHECK_STR(apitest_error_code(&r), "unauthorized");
	apitest_resp_release(&r);
	snprintf(body, sizeof(body),
		 "{\"key_id\":\"%s\",\"sandbox_id\":\"rk-1\",\"vcpus\":1,\"memory_mib\":512,"
		 "\"lease_seconds\":60}",
		 kv);
	CHECK(apitest_call(&t, 0, "POST", "/v1/checks/create", t.control_plane_token, body, &r) ==
	      0);
	CHECK_I64(r.status, 403);
	CHECK_STR(apitest_error_code(&r), "key_revoked");
	apitest_resp_release(&r);
	/* Again: the first revocation stands; the other account's key is
	 * untouched. */
	CHECK(apitest_call(&t, 0, "DELETE", path, t.operator_token, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK(json_is_true(json_object_get(r.json, "already_revoked")));
	CHECK_STR(apitest_json_str(&r, "revoked_at"), first);
	apitest_resp_release(&r);
	snprintf(target, sizeof(target), "/v1/keys/%s", kv);
	CHECK(apitest_call(&t, 0, "GET", target, t.operator_token, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK_STR(apitest_json_str(&r, "revoked_at"), first);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "GET", "/v1/keys", tw, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
}

static void test_prices(void)
{
	struct apitest_resp r;
	json_t *cur;
	char body[512];

	CHECK(apitest_call(&t, 0, "GET", "/v1/prices", t.control_plane_token, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	cur = json_object_get(r.json, "current");
	CHECK_I64(jint(cur, "version"), 1);
	CHECK_I64(jint(cur, "cpu_micros_per_vcpu_hour"), 25000);
	CHECK_I64(jint(cur, "memory_micros_per_gib_hour"), 7500);
	CHECK_I64(jint(cur, "storage_micros_per_gib_hour"), 100);
	CHECK_I64(jint(cur, "floor_millicores"), 50);
	CHECK_I64(jint(cur, "free_sandbox_hours"), 50);
	CHECK(json_is_true(json_object_get(cur, "storage_price_assumed")));
	CHECK_STR(json_string_value(json_object_get(cur, "effective_from")),
		  "1970-01-01T00:00:00Z");
	apitest_resp_release(&r);

	snprintf(body, sizeof(body),
		 "{\"effective_from\":\"2999-01-01T00:00:00+01:00\","
		 "\"cpu_micros_per_vcpu_hour\":30000,\"memory_micros_per_gib_hour\":8000,"
		 "\"storage_micros_per_gib_hour\":120,\"floor_millicores\":25,"
		 "\"free_sandbox_hours\":10}");
	CHECK(apitest_call(&t, 0, "PUT", "/v1/prices", t.operator_token, body, &r) == 0);
	CHECK_I64(r.status, 201);
	CHECK_I64(jint(r.json, "version"), 2);
	CHECK_STR(apitest_json_str(&r, "effective_from"), "2998-12-31T23:00:00Z");
	CHECK(json_is_false(json_object_get(r.json, "current")));
	apitest_resp_release(&r);
	/* The same instant again: a conflict. */
	CHECK(apitest_call(&t, 0, "PUT", "/v1/prices", t.operator_token, body, &r) == 0);
	CHECK_I64(r.status, 409);
	CHECK_STR(apitest_error_code(&r), "conflict");
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "GET", "/v1/prices", t.operator_token, NULL, &r) == 0);
	CHECK_I64(json_array_size(json_object_get(r.json, "versions")), 2);
	CHECK_I64(jint(json_object_get(r.json, "current"), "version"), 1);
	apitest_resp_release(&r);
	/* The past is never rewritten. */
	CHECK(apitest_call(&t, 0, "PUT", "/v1/prices", t.operator_token,
			   "{\"effective_from\":\"2020-01-01T00:00:00Z\","
			   "\"cpu_micros_per_vcpu_hour\":1,\"memory_micros_per_gib_hour\":1,"
			   "\"storage_micros_per_gib_hour\":1,\"floor_millicores\":1,"
			   "\"free_sandbox_hours\":1}",
			   &r) == 0);
	CHECK_I64(r.status, 400);
	CHECK_STR(json_string_value(json_object_get(json_object_get(r.json, "error"), "field")),
		  "effective_from");
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "PUT", "/v1/prices", t.operator_token,
			   "{\"effective_from\":\"2999-02-01T00:00:00Z\","
			   "\"cpu_micros_per_vcpu_hour\":1000000000001,"
			   "\"memory_micros_per_gib_hour\":1,"
			   "\"storage_micros_per_gib_hour\":1,\"floor_millicores\":1,"
			   "\"free_sandbox_hours\":1}",
			   &r) == 0);
	CHECK_I64(r.status, 400);
	apitest_resp_release(&r);
	/* Every role reads it; only the operator writes it. */
	CHECK(apitest_call(&t, 0, "PUT", "/v1/prices", t.control_plane_token, body, &r) == 0);
	CHECK_I64(r.status, 403);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "GET", "/v1/prices", NULL, NULL, &r) == 0);
	CHECK_I64(r.status, 401);
	apitest_resp_release(&r);
}

/* The database unreachable: a key cannot be checked, 503; then recovery
 * without restarting meterd. */
static void test_database_down(void)
{
	char acc[65], key[65], tok[APITEST_TOKEN_MAX], sql[256];
	struct apitest_resp r;
	long status = 0;

	char url[1024] = "", err[256];
	FILE *f = fopen(getenv("METER_TEST_PG_URL_FILE"), "r");
	PGconn *admin = NULL;

	CHECK(f && fgets(url, sizeof(url), f));
	if (f)
		fclose(f);
	url[strcspn(url, "\n")] = '\0';
	CHECK(db_connect(url, &admin, err, sizeof(err)) == METER_OK);
	if (!admin)
		return;
	CHECK(apitest_create_account(&t, "down", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, key, tok) == 0);
	snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" ALLOW_CONNECTIONS false", t.db.name);
	CHECK_STR(testdb_exec_state(admin, sql), "00000");
	snprintf(sql, sizeof(sql),
		 "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s'",
		 t.db.name);
	CHECK_STR(testdb_exec_state(admin, sql), "00000");
	CHECK(apitest_call(&t, 0, "GET", "/v1/keys", tok, NULL, &r) == 0);
	CHECK_I64(r.status, 503);
	CHECK_STR(apitest_error_code(&r), "metering_unavailable");
	apitest_resp_release(&r);
	snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" ALLOW_CONNECTIONS true", t.db.name);
	CHECK_STR(testdb_exec_state(admin, sql), "00000");
	PQfinish(admin);
	for (int i = 0; i < 200 && status != 200; i++) {
		struct timespec ts = {.tv_nsec = 100000000};

		CHECK(apitest_call(&t, 0, "GET", "/v1/keys", tok, NULL, &r) == 0);
		status = r.status;
		apitest_resp_release(&r);
		if (status != 200)
			nanosleep(&ts, NULL);
	}
	CHECK_I64(status, 200);
}

int main(void)
{
	if (apitest_start(&t, "api_keys", 1, NULL, NULL) < 0)
		return 1;
	test_accounts_and_keys();
	test_key_revoke();
	test_key_committed_overflow();
	test_zone_change_limits();
	test_key_pages();
	test_unattributed_keys();
	test_many_keys();
	test_prices();
	test_database_down();
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	return check_done();
}
