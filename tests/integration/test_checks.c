/* API: create and wake checks, holds and the day ledger (DESIGN.md §4)
 * against a real meterd and PostgreSQL: idempotent replay and conflict,
 * max_cost_micros boundaries, settlement on pause / stop and at lease end,
 * and keys whose day is not UTC's: across midnight and across daylight-
 * saving changes (a 25-hour and a 23-hour day, and a day whose midnight
 * comes twice) and a day a zone skipped, with the engine's clock moved there by the documented
 * test-only option clock_offset_s; and the day starts of every time zone
 * around every change of offset in 2026. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checks_util.h"

/* 2 vCPU / 4096 MiB for 900 s under the default book (DESIGN.md §2). */
#define LEASE_20000 "\"vcpus\":2,\"memory_mib\":4096,\"lease_seconds\":900"

/* The same create again: replayed, the first answer byte for byte (the
 * sandbox row keeps its numbers and the database writes the text back). */
static void check_replay(struct apitest *t, const char *key, const char *sandbox, int vcpus,
			 int memory_mib, int lease_s, const struct apitest_resp *first)
{
	struct apitest_resp r;

	CHECK_I64(cu_create(t, 0, key, sandbox, vcpus, memory_mib, lease_s, NULL, &r), 200);
	CHECK(r.headers && strstr(r.headers, "Idempotent-Replayed: true"));
	CHECK(r.body && first->body);
	if (r.body && first->body)
		CHECK_STR(r.body, first->body);
	apitest_resp_release(&r);
}

static void test_idempotency(struct apitest *t, const char *key)
{
	struct apitest_resp r, r2;
	PGconn *db = t->db.conn;

	/* The first answer, then the same request again: replayed. */
	CHECK_I64(cu_create(t, 0, key, "idem-1", 2, 4096, 900, NULL, &r), 200);
	CHECK(json_is_true(json_object_get(r.json, "allowed")));
	CHECK_I64(cu_jint(r.json, "hold_micros"), 20000);
	CHECK_I64(cu_jint(r.json, "lease_max_cost_micros"), 20000);
	CHECK(r.headers && !strstr(r.headers, "Idempotent-Replayed"));
	CHECK_I64(cu_create(t, 0, key, "idem-1", 2, 4096, 900, NULL, &r2), 200);
	CHECK(r2.headers && strstr(r2.headers, "Idempotent-Replayed: true"));
	CHECK(json_equal(r.json, r2.json));
	apitest_resp_release(&r2);
	check_replay(t, key, "idem-1", 2, 4096, 900, &r);
	/* A row from before sql/0025 keeps the answer's text: replayed too. */
	cu_sql(db, "UPDATE sandboxes SET create_response = meter_create_answer(sandbox_id, key_id,"
		   " create_answer), create_answer = NULL WHERE sandbox_id = 'idem-1'");
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM sandboxes WHERE sandbox_id = 'idem-1'"
				 " AND create_answer IS NULL AND create_response IS NOT NULL"),
		  1);
	check_replay(t, key, "idem-1", 2, 4096, 900, &r);
	/* Same key (the sandbox id by default), other parameters: 409. */
	CHECK_I64(cu_create(t, 0, key, "idem-1", 2, 4096, 901, NULL, &r2), 409);
	CHECK_STR(apitest_error_code(&r2), "idempotency_conflict");
	apitest_resp_release(&r2);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'idem-1'"), 1);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM check_answers WHERE idempotency_key = "
				 "'idem-1'"),
		  1);

	/* An explicit key: reused for another sandbox is a conflict. */
	CHECK_I64(cu_create(t, 0, key, "idem-2", 1, 1024, 60, "\"idempotency_key\":\"op-7\"", &r),
		  200);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "idem-3", 1, 1024, 60, "\"idempotency_key\":\"op-7\"", &r),
		  409);
	CHECK_STR(apitest_error_code(&r), "idempotency_conflict");
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM sandboxes WHERE sandbox_id = 'idem-3'"), 0);
	/* A sandbox id taken under another idempotency key. */
	CHECK_I64(cu_create(t, 0, key, "idem-2", 1, 1024, 60, "\"idempotency_key\":\"op-8\"", &r),
		  409);
	CHECK_STR(apitest_error_code(&r), "sandbox_exists");
	apitest_resp_release(&r);
	/* Refused on its own figures too (max cost, decided in the engine on
	 * a fast batch), a create of a sandbox id taken is 409 sandbox_exists,
	 * as the classic path answers: under the default key and another. */
	CHECK_I64(cu_create(t, 0, key, "idem-2", 1, 1024, 60, "\"max_cost_micros\":1", &r), 409);
	CHECK_STR(apitest_error_code(&r), "sandbox_exists");
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "idem-2", 1, 1024, 60,
			    "\"max_cost_micros\":1,\"idempotency_key\":\"op-9\"", &r),
		  409);
	CHECK_STR(apitest_error_code(&r), "sandbox_exists");
	apitest_resp_release(&r);

	/* Concurrent duplicates land in one batch or two: one hold either way. */
	CHECK_I64(cu_create(t, 0, key, "idem-4", 1, 1024, 60, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'idem-4'"), 1);
}

/* A revoked key: new checks are refused, a retry of one answered before
 * the revocation gets its stored answer (its hold stands). */
static void test_revoked(struct apitest *t, const char *acc)
{
	struct apitest_resp r;
	char key[65], token[APITEST_TOKEN_MAX], zone[16];

	CHECK(apitest_create_key(t, acc, "full", -1, apitest_midday_zone(zone, sizeof(zone)), key,
				 token) == 0);
	CHECK_I64(cu_create(t, 0, key, "rv-1", 1, 1024, 60, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(
	    cu_sql_int(t->db.conn,
		       "UPDATE api_keys SET revoked_at = now() WHERE key_id = '%s' RETURNING 1",
		       key),
	    1);
	CHECK_I64(cu_create(t, 0, key, "rv-1", 1, 1024, 60, NULL, &r), 200);
	CHECK(r.headers && strstr(r.headers, "Idempotent-Replayed: true"));
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "rv-2", 1, 1024, 60, NULL, &r), 403);
	CHECK_STR(apitest_error_code(&r), "key_revoked");
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "rv-1", 60, "\"idempotency_key\":\"rv-w\"", &r), 403);
	CHECK_STR(apitest_error_code(&r), "key_revoked");
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(t->db.conn, "SELECT count(*) FROM holds WHERE key_id = '%s'", key), 1);
}

/* A read_only key changes nothing: a create on it (twice: the second
 * would go the fast way were the key known to the engine), and a wake of a
 * sandbox metering found under it, are refused 403 read_only_key, with
 * nothing held or written. */
static void test_read_only(struct apitest *t, const char *acc)
{
	struct apitest_resp r;
	char key[65], token[APITEST_TOKEN_MAX];
	PGconn *db = t->db.conn;

	CHECK(apitest_create_key(t, acc, "read_only", 1000000, NULL, key, token) == 0);
	for (int i = 0; i < 2; i++) {
		CHECK_I64(cu_create(t, 0, key, "ro-1", 1, 1024, 60, NULL, &r), 403);
		CHECK_STR(apitest_error_code(&r), "read_only_key");
		CHECK_STR(
		    json_string_value(json_object_get(json_object_get(r.json, "error"), "key_id"))
			?: "",
		    key);
		apitest_resp_release(&r);
	}
	CHECK_I64(
	    cu_sql_int(db,
		       "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus,"
		       " memory_mib, state) VALUES ('%s', 'ro-found', '%s', 1, 1024, 'paused')"
		       " RETURNING 1",
		       acc, key),
	    1);
	CHECK_I64(cu_wake(t, 0, "ro-found", 60, NULL, &r), 403);
	CHECK_STR(apitest_error_code(&r), "read_only_key");
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM sandboxes WHERE key_id = '%s'", key), 1);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE key_id = '%s'", key), 0);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM key_day_ledger WHERE key_id = '%s'"
			     " AND held_micros <> 0",
			     key),
		  0);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM idempotency_keys WHERE account_id = '%s'"
			     " AND idempotency_key IN ('ro-1', 'ro-found')",
			     acc),
		  0);
}

static void test_max_cost(struct apitest *t, const char *key)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	long long held = cu_sql_int(db, "SELECT sum(held_micros) FROM key_day_ledger");

	/* Equal is allowed. */
	CHECK_I64(cu_create(t, 0, key, "mc-eq", 2, 4096, 900, "\"max_cost_micros\":20000", &r),
		  200);
	apitest_resp_release(&r);
	CHECK_I64(
	    cu_sql_int(db, "SELECT max_cost_micros FROM sandboxes WHERE sandbox_id = 'mc-eq'"),
	    20000);
	/* One micro less is refused, with the figures, and leaves nothing. */
	CHECK_I64(cu_create(t, 0, key, "mc-lt", 2, 4096, 900, "\"max_cost_micros\":19999", &r),
		  402);
	CHECK_STR(apitest_error_code(&r), "max_cost_exceeded");
	CHECK_I64(cu_errint(&r, "lease_max_cost_micros"), 20000);
	CHECK_I64(cu_errint(&r, "max_cost_micros"), 19999);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM sandboxes WHERE sandbox_id = 'mc-lt'"), 0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'mc-lt'"), 0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM check_answers WHERE idempotency_key = "
				 "'mc-lt'"),
		  0);
	CHECK_I64(cu_sql_int(db, "SELECT sum(held_micros) FROM key_day_ledger"), held + 20000);
	/* null is "no cap". */
	CHECK_I64(cu_create(t, 0, key, "mc-null", 1, 1, 1, "\"max_cost_micros\":null", &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM sandboxes WHERE sandbox_id = 'mc-null'"
				 " AND max_cost_micros IS NULL"),
		  1);
}

/* A key with a small limit: refusals leave nothing; a retry after the limit
 * is raised is decided afresh (refusals under the default key are not
 * stored). */
static void test_limit(struct apitest *t, const char *acc)
{
	struct apitest_resp r;
	char key[65], token[APITEST_TOKEN_MAX], sql[1024], zone[16];
	PGconn *db = t->db.conn;

	CHECK(apitest_create_key(t, acc, "full", 50000, apitest_midday_zone(zone, sizeof(zone)),
				 key, token) == 0);
	CHECK_I64(cu_create(t, 0, key, "lim-1", 2, 4096, 900, NULL, &r), 200); /* 20000 */
	CHECK_I64(cu_jint(r.json, "daily_limit_micros"), 50000);
	CHECK_I64(cu_jint(r.json, "day_held_micros"), 20000);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "lim-2", 2, 4096, 900, NULL, &r), 200); /* 40000 */
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "lim-3", 2, 4096, 900, NULL, &r), 402);
	CHECK_STR(apitest_error_code(&r), "spending_limit_reached");
	CHECK_I64(cu_errint(&r, "day_spent_micros"), 0);
	CHECK_I64(cu_errint(&r, "day_held_micros"), 40000);
	CHECK_I64(cu_errint(&r, "daily_limit_micros"), 50000);
	CHECK_I64(cu_errint(&r, "lease_max_cost_micros"), 20000);
	CHECK(json_is_string(json_object_get(json_object_get(r.json, "error"), "day")));
	apitest_resp_release(&r);
	/* The last 10,000 fit exactly (2 vCPU / 4 GiB for 450 s): committed =
	 * limit is allowed; then not one micro more. */
	CHECK_I64(cu_create(t, 0, key, "lim-4", 2, 4096, 450, NULL, &r), 200);
	CHECK_I64(cu_jint(r.json, "hold_micros"), 10000);
	CHECK_I64(cu_jint(r.json, "day_held_micros"), 50000);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "lim-5", 1, 1, 1, NULL, &r), 402); /* 8 µ$ */
	CHECK_I64(cu_errint(&r, "hold_micros"), 8);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT held_micros FROM key_day_ledger WHERE key_id = '%s'", key),
		  50000);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM sandboxes WHERE sandbox_id IN ('lim-3', "
				 "'lim-5')"),
		  0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM check_answers WHERE idempotency_key IN "
				 "('lim-3', 'lim-5')"),
		  0);
	/* Raise the limit: the same request is allowed now. */
	snprintf(sql, sizeof(sql),
		 "UPDATE api_keys SET daily_limit_micros = 100000 WHERE key_id = '%s'", key);
	cu_sql(db, sql);
	CHECK_I64(cu_create(t, 0, key, "lim-3", 2, 4096, 900, NULL, &r), 200);
	CHECK_I64(cu_jint(r.json, "daily_limit_micros"), 100000);
	apitest_resp_release(&r);
	CHECK_I64(
	    cu_sql_int(db, "SELECT limit_micros FROM key_day_ledger WHERE key_id = '%s'", key),
	    100000);
	/* Metered spend counts too: 25,000 on lim-1 (through the ledger's own
	 * rule: its 20,000 hold is consumed, 5,000 outrun it). */
	snprintf(sql, sizeof(sql),
		 "SELECT * FROM meter_ledger_spend(ARRAY[(SELECT account_id FROM api_keys WHERE"
		 " key_id = '%s')::text], ARRAY['%s'], ARRAY['lim-1'], ARRAY[(SELECT day FROM"
		 " key_day_ledger WHERE key_id = '%s')], ARRAY[25000::bigint])",
		 key, key, key);
	cu_sql(db, sql);
	CHECK_I64(cu_held_mismatches(db), 0);
	CHECK_I64(cu_sql_int(db,
			     "SELECT spent_micros + held_micros FROM key_day_ledger WHERE"
			     " key_id = '%s'",
			     key),
		  75000);
	CHECK_I64(cu_create(t, 0, key, "lim-7", 2, 4096, 900, NULL, &r), 200); /* 95,000 */
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "lim-8", 2, 4096, 900, NULL, &r), 402);
	CHECK_I64(cu_errint(&r, "day_spent_micros"), 25000);
	CHECK_I64(cu_errint(&r, "day_held_micros"), 70000);
	apitest_resp_release(&r);
	CHECK_I64(cu_over_limit(db), 0);
}

/* A create under the default key of a sandbox its account made under the
 * default key is that create's retry: with another key of the account it
 * is 409 idempotency_conflict, not sandbox_exists, and changes nothing. */
static void test_other_key_retry(struct apitest *t, const char *acc)
{
	struct apitest_resp r;
	char key[65], token[APITEST_TOKEN_MAX], zone[16];
	PGconn *db = t->db.conn;

	CHECK(apitest_create_key(t, acc, "full", -1, apitest_midday_zone(zone, sizeof(zone)), key,
				 token) == 0);
	CHECK_I64(cu_create(t, 0, key, "idem-1", 2, 4096, 900, NULL, &r), 409);
	CHECK_STR(apitest_error_code(&r), "idempotency_conflict");
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'idem-1'"), 1);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM sandboxes WHERE sandbox_id = 'idem-1'"
			     " AND key_id = '%s'",
			     key),
		  0);
}

/* An explicit idempotency key equal to the create's own sandbox id is the
 * default key: the same create without it is a retry (replayed, one hold),
 * and nothing is kept in idempotency_keys. */
static void test_default_key_named(struct apitest *t, const char *key)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;

	CHECK_I64(cu_create(t, 0, key, "dk-1", 1, 1024, 60, "\"idempotency_key\":\"dk-1\"", &r),
		  200);
	CHECK(r.headers && !strstr(r.headers, "Idempotent-Replayed"));
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "dk-1", 1, 1024, 60, NULL, &r), 200);
	CHECK(r.headers && strstr(r.headers, "Idempotent-Replayed: true"));
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'dk-1'"), 1);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM idempotency_keys WHERE idempotency_key ="
				 " 'dk-1'"),
		  0);
}

/* Sets key's daily limit through the API, as the operator. */
static void put_limit(struct apitest *t, const char *key, long long limit)
{
	struct apitest_resp r;
	char path[128], body[64];

	snprintf(path, sizeof(path), "/v1/keys/%s/limits", key);
	snprintf(body, sizeof(body), "{\"daily_limit_micros\":%lld}", limit);
	CHECK_I64(apitest_call(t, 0, "PUT", path, t->operator_token, body, &r), 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
}

/* A limit changed by PUT /v1/keys/{id}/limits binds the next check, also on
 * a key whose checks the engine has taken on its fast path (with the limit
 * it read): lowered under what is held, a create is refused with the new
 * limit and leaves nothing; raised again, the same create fits exactly. */
static void test_limit_put(struct apitest *t, const char *acc)
{
	struct apitest_resp r;
	char key[65], token[APITEST_TOKEN_MAX], zone[16];
	PGconn *db = t->db.conn;

	CHECK(apitest_create_key(t, acc, "full", 100000, apitest_midday_zone(zone, sizeof(zone)),
				 key, token) == 0);
	CHECK_I64(cu_create(t, 0, key, "lp-1", 2, 4096, 900, NULL, &r), 200); /* 20000 */
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "lp-2", 2, 4096, 900, NULL, &r), 200); /* 40000 */
	CHECK_I64(cu_jint(r.json, "daily_limit_micros"), 100000);
	apitest_resp_release(&r);
	put_limit(t, key, 45000);
	CHECK_I64(cu_create(t, 0, key, "lp-3", 2, 4096, 900, NULL, &r), 402);
	CHECK_STR(apitest_error_code(&r), "spending_limit_reached");
	CHECK_I64(cu_errint(&r, "daily_limit_micros"), 45000);
	CHECK_I64(cu_errint(&r, "day_held_micros"), 40000);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM sandboxes WHERE sandbox_id = 'lp-3'"), 0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'lp-3'"), 0);
	CHECK_I64(cu_sql_int(db, "SELECT held_micros FROM key_day_ledger WHERE key_id = '%s'", key),
		  40000);
	put_limit(t, key, 60000);
	CHECK_I64(cu_create(t, 0, key, "lp-3", 2, 4096, 900, NULL, &r), 200);
	CHECK_I64(cu_jint(r.json, "daily_limit_micros"), 60000);
	CHECK_I64(cu_jint(r.json, "day_held_micros"), 60000);
	apitest_resp_release(&r);
	CHECK_I64(cu_held_mismatches(db), 0);
	CHECK_I64(cu_over_limit(db), 0);
}

/* A refusal under a key of the caller's own is that key's first answer: a
 * retry gets it again (replayed, also once budget is freed) and the key used
 * for other parameters is 409. Under the default key (the sandbox id) a
 * refusal is decided again. Neither leaves a hold. */
static void test_refusal_kept(struct apitest *t, const char *acc)
{
	struct apitest_resp r, first;
	char key[65], token[APITEST_TOKEN_MAX], zone[16], sql[256];
	PGconn *db = t->db.conn;

	CHECK(apitest_create_key(t, acc, "full", 30000, apitest_midday_zone(zone, sizeof(zone)),
				 key, token) == 0);
	CHECK_I64(cu_create(t, 0, key, "rk-1", 2, 4096, 900, NULL, &r), 200); /* 20000 */
	apitest_resp_release(&r);
	CHECK_I64(
	    cu_create(t, 0, key, "rk-2", 2, 4096, 900, "\"idempotency_key\":\"att-1\"", &first),
	    402);
	CHECK_STR(apitest_error_code(&first), "spending_limit_reached");
	CHECK(first.headers && !strstr(first.headers, "Idempotent-Replayed"));
	CHECK_I64(cu_create(t, 0, key, "rk-2", 2, 4096, 900, "\"idempotency_key\":\"att-1\"", &r),
		  402);
	CHECK(r.headers && strstr(r.headers, "Idempotent-Replayed: true"));
	CHECK(json_equal(r.json, first.json));
	apitest_resp_release(&r);
	/* The key is taken: another request under it is a conflict, even one
	 * that would fit. */
	CHECK_I64(cu_create(t, 0, key, "rk-3", 1, 1, 1, "\"idempotency_key\":\"att-1\"", &r), 409);
	CHECK_STR(apitest_error_code(&r), "idempotency_conflict");
	apitest_resp_release(&r);
	/* Under the default key. */
	CHECK_I64(cu_create(t, 0, key, "rk-4", 2, 4096, 900, NULL, &r), 402);
	apitest_resp_release(&r);
	/* Answers stored under keys of the callers' own that are other
	 * sandboxes' ids, a refusal and an allowed one (8 µ$), are not those
	 * sandboxes' creates' default keys: refused on their own figures, they
	 * are 402 (not a conflict on every attempt, 503). */
	CHECK_I64(cu_create(t, 0, key, "rk-9", 2, 4096, 900, "\"idempotency_key\":\"rk-8\"", &r),
		  402);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "rk-11", 1, 1, 1, "\"idempotency_key\":\"rk-10\"", &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "rk-8", 2, 4096, 900, NULL, &r), 402);
	CHECK_STR(apitest_error_code(&r), "spending_limit_reached");
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "rk-10", 2, 4096, 900, NULL, &r), 402);
	CHECK_STR(apitest_error_code(&r), "spending_limit_reached");
	apitest_resp_release(&r);
	/* max_cost_exceeded, decided before the ledger, is kept the same way. */
	CHECK_I64(cu_create(t, 0, key, "rk-5", 2, 4096, 900,
			    "\"max_cost_micros\":1,\"idempotency_key\":\"att-2\"", &r),
		  402);
	CHECK_STR(apitest_error_code(&r), "max_cost_exceeded");
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "rk-5", 2, 4096, 900,
			    "\"max_cost_micros\":20000,\"idempotency_key\":\"att-2\"", &r),
		  409);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM check_answers WHERE account_id = '%s'"
			     " AND idempotency_key IN ('att-1', 'att-2', 'rk-4', 'rk-8')"
			     " AND status_code = 402",
			     acc),
		  3);
	/* Budget freed: the own keys' retries are still their first answer,
	 * the default key's is decided again. */
	snprintf(sql, sizeof(sql),
		 "UPDATE api_keys SET daily_limit_micros = 100000 WHERE key_id = '%s'", key);
	cu_sql(db, sql);
	CHECK_I64(cu_create(t, 0, key, "rk-2", 2, 4096, 900, "\"idempotency_key\":\"att-1\"", &r),
		  402);
	CHECK(r.headers && strstr(r.headers, "Idempotent-Replayed: true"));
	CHECK(json_equal(r.json, first.json));
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "rk-5", 2, 4096, 900,
			    "\"max_cost_micros\":1,\"idempotency_key\":\"att-2\"", &r),
		  402);
	CHECK(r.headers && strstr(r.headers, "Idempotent-Replayed: true"));
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "rk-4", 2, 4096, 900, NULL, &r), 200);
	CHECK(r.headers && !strstr(r.headers, "Idempotent-Replayed"));
	apitest_resp_release(&r);
	/* A new attempt takes a new key. */
	CHECK_I64(cu_create(t, 0, key, "rk-2", 2, 4096, 900, "\"idempotency_key\":\"att-3\"", &r),
		  200);
	apitest_resp_release(&r);
	apitest_resp_release(&first);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id IN ('rk-3', 'rk-5')"),
		  0);
	CHECK_I64(cu_sql_int(db, "SELECT held_micros FROM key_day_ledger WHERE key_id = '%s'", key),
		  60008);
	CHECK_I64(cu_held_mismatches(db), 0);
	CHECK_I64(cu_over_limit(db), 0);
}

static void test_wake_and_events(struct apitest *t, const char *key)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	char at[40], before[40], later[40];
	time_t now = apitest_now();
	long long tail, pause_s;

	CHECK_I64(cu_create(t, 0, key, "ev-1", 2, 4096, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	/* A wake of a running sandbox renews its lease: a new hold. */
	CHECK_I64(cu_wake(t, 0, "ev-1", 900, NULL, &r), 200);
	CHECK_I64(cu_jint(r.json, "hold_micros"), 20000);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'ev-1' AND status"
				 " = 'open'"),
		  2);
	/* Retried (default key): the same answer, no new hold. */
	CHECK_I64(cu_wake(t, 0, "ev-1", 900, NULL, &r), 200);
	CHECK(r.headers && strstr(r.headers, "Idempotent-Replayed: true"));
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'ev-1'"), 2);

	/* Pause: both holds settled, held released but for the worst case of
	 * the time not metered (nothing was: from the create, at or after
	 * now, to the pause, a second after the wake; of 900 s each), state
	 * moved. No sample comes, so that tail is released lease_grace_s
	 * (2 s) after the pause. */
	pause_s = (long long)apitest_now() + 1;
	cu_rfc3339((time_t)pause_s, at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "ev-1", "paused", at, &r), 200);
	CHECK(json_is_true(json_object_get(r.json, "recorded")));
	CHECK_I64(cu_jint(r.json, "holds_settled"), 2);
	tail = cu_jint(r.json, "tail_held_micros");
	/* Each hold keeps its share of the tail rounded up plus a micro
	 * (sql/0034): up to floor(share) + 2, when its create or wake came in
	 * the first hundredth of a second after now. */
	CHECK(tail >= 2 && tail <= 2 * ((pause_s - (long long)now) * 20000 / 900 + 2));
	CHECK_I64(cu_jint(r.json, "released_micros"), 40000 - tail);
	CHECK_STR(apitest_json_str(&r, "state"), "paused");
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT sum(amount_micros) FROM holds WHERE sandbox_id = 'ev-1'"
				 " AND status = 'open' AND settles_at IS NOT NULL"),
		  tail);
	CHECK_I64(cu_held_mismatches(db), 0);
	for (int i = 0; i < 100 && cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id ="
						  " 'ev-1' AND status = 'settled'") < 2;
	     i++)
		cu_sleep_ms(100);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'ev-1' AND status"
				 " = 'settled'"),
		  2);
	CHECK_I64(cu_held_mismatches(db), 0);
	/* Re-sent: changes nothing. */
	CHECK_I64(cu_event(t, 0, "ev-1", "paused", at, &r), 200);
	CHECK(json_is_false(json_object_get(r.json, "recorded")));
	CHECK_I64(cu_jint(r.json, "holds_settled"), 0);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM lifecycle_events WHERE sandbox_id = 'ev-1'"),
		  1);
	/* A later pause of the paused sandbox: recorded, and it has been
	 * paused since the first one. */
	cu_rfc3339((time_t)pause_s + 1, later, sizeof(later));
	CHECK_I64(cu_event(t, 0, "ev-1", "paused", later, &r), 200);
	CHECK(json_is_true(json_object_get(r.json, "recorded")));
	CHECK_STR(apitest_json_str(&r, "state"), "paused");
	CHECK_STR(apitest_json_str(&r, "state_since"), at);
	apitest_resp_release(&r);
	/* Older than the state: recorded, the state does not move back. */
	cu_rfc3339(now - 100, before, sizeof(before));
	CHECK_I64(cu_event(t, 0, "ev-1", "running", before, &r), 200);
	CHECK(json_is_true(json_object_get(r.json, "recorded")));
	CHECK_STR(apitest_json_str(&r, "state"), "paused");
	apitest_resp_release(&r);

	/* Woken after the pause: the old default-key answer is stale, a new
	 * hold is placed. */
	CHECK_I64(cu_wake(t, 0, "ev-1", 900, NULL, &r), 200);
	CHECK(r.headers && !strstr(r.headers, "Idempotent-Replayed"));
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'ev-1' AND status"
				 " = 'open'"),
		  1);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM sandboxes WHERE sandbox_id = 'ev-1' AND"
				 " state = 'running'"),
		  1);
	/* Stop settles; a stopped sandbox cannot be woken. */
	cu_rfc3339(apitest_now() + 2, at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "ev-1", "stopped", at, &r), 200);
	CHECK_I64(cu_jint(r.json, "holds_settled"), 1);
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "ev-1", 60, "\"idempotency_key\":\"w-after-stop\"", &r), 409);
	CHECK_STR(apitest_error_code(&r), "sandbox_stopped");
	apitest_resp_release(&r);
	/* Unknown sandboxes. */
	CHECK_I64(cu_wake(t, 0, "no-such", 60, NULL, &r), 404);
	CHECK_STR(apitest_error_code(&r), "sandbox_not_found");
	apitest_resp_release(&r);
	CHECK_I64(cu_event(t, 0, "no-such", "paused", at, &r), 404);
	CHECK_STR(apitest_error_code(&r), "sandbox_not_found");
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, "no-such-key", "x-1", 1, 1, 1, NULL, &r), 404);
	CHECK_STR(apitest_error_code(&r), "key_not_found");
	apitest_resp_release(&r);
	/* Bad event input. */
	CHECK_I64(cu_event(t, 0, "ev-1", "exploded", at, &r), 400);
	apitest_resp_release(&r);
	CHECK_I64(cu_event(t, 0, "ev-1", "paused", "yesterday", &r), 400);
	CHECK_STR(apitest_error_code(&r), "invalid_request");
	apitest_resp_release(&r);
	CHECK_I64(cu_held_mismatches(db), 0);
}

/* Adds a price-book version from UTC second from with the default book's
 * rates but cpu_micros_per_vcpu_hour, straight into the book: PUT
 * /v1/prices takes none that starts inside an open lease
 * (test_price_after_leases), and these start inside the test's. */
static void put_price(struct apitest *t, time_t from, long long cpu)
{
	CHECK_I64(cu_sql_int(t->db.conn,
			     "WITH v AS (INSERT INTO price_book (effective_from,"
			     " cpu_micros_per_vcpu_hour, memory_micros_per_gib_hour,"
			     " storage_micros_per_gib_hour, floor_millicores, free_sandbox_hours)"
			     " VALUES (to_timestamp(%lld), %lld, 7500, 100, 50, 0) RETURNING 1)"
			     " SELECT count(*) FROM v",
			     (long long)from, cpu),
		  1);
}

/* PUTs a version from at (RFC 3339) with the default book's rates; the
 * answer's status, and its earliest_effective_from into earliest. */
static long long put_price_at(struct apitest *t, const char *at, char *earliest, size_t len)
{
	struct apitest_resp r;
	char body[400];
	long long status;
	const json_t *e;

	snprintf(body, sizeof(body),
		 "{\"effective_from\":\"%s\",\"cpu_micros_per_vcpu_hour\":25000,"
		 "\"memory_micros_per_gib_hour\":7500,\"storage_micros_per_gib_hour\":100,"
		 "\"floor_millicores\":50,\"free_sandbox_hours\":0}",
		 at);
	CHECK(apitest_call(t, 0, "PUT", "/v1/prices", t->operator_token, body, &r) == 0);
	status = r.status;
	e = json_object_get(json_object_get(r.json, "error"), "earliest_effective_from");
	snprintf(earliest, len, "%s", json_is_string(e) ? json_string_value(e) : "");
	if (status == 400)
		CHECK_STR(apitest_error_code(&r), "invalid_request");
	apitest_resp_release(&r);
	return status;
}

struct put_arg {
	struct apitest *t;
	long long status;
};

/* PUTs a version of 2999 (struct put_arg); its status into status. */
static void *put_later(void *arg)
{
	struct put_arg *pa = arg;
	char earliest[64];

	pa->status = put_price_at(pa->t, "2999-06-01T00:00:00Z", earliest, sizeof(earliest));
	return NULL;
}

/* Ends the transaction of the connection arg after 300 ms. */
static void *commit_later(void *arg)
{
	struct timespec d = {0, 300 * 1000 * 1000};

	nanosleep(&d, NULL);
	PQclear(PQexec(arg, "COMMIT"));
	return NULL;
}

/* A version starts after every open lease and every sample metered, or is
 * refused (400, field effective_from) with the earliest it can start: the
 * end of the last open lease here, then a host's watermark beyond it. At
 * that instant it is taken. Run after test_price_versions, whose day-long
 * leases are open. */
static void test_price_after_leases(struct apitest *t, const char *key)
{
	PGconn *db = t->db.conn;
	char at[64], earliest[64], before[64], sql[256];
	struct put_arg pa = {0};
	long long slowest = 0;
	PGconn *reader;
	pthread_t th;

	cu_rfc3339(apitest_now() + 60, at, sizeof(at));
	CHECK_I64(put_price_at(t, at, earliest, sizeof(earliest)), 400);
	CHECK_I64(cu_sql_int(db,
			     "SELECT ('%s'::timestamptz = max(lease_ends_at)"
			     " AND max(lease_ends_at) > now() + interval '23 hours')::int"
			     " FROM holds WHERE status = 'open'",
			     earliest),
		  1);
	snprintf(sql, sizeof(sql),
		 "SELECT to_char(('%s'::timestamptz - interval '1 microsecond')"
		 " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
		 earliest);
	testdb_query_text(db, sql, before, sizeof(before));
	CHECK_I64(put_price_at(t, before, at, sizeof(at)), 400);
	CHECK_STR(at, earliest);
	/* A host that has reported a day past the leases. */
	CHECK_I64(cu_sql_int(db,
			     "WITH w AS (INSERT INTO ingest_watermarks (host_id, last_sampled_at)"
			     " SELECT 'pa-host', max(lease_ends_at) + interval '1 day' FROM holds"
			     " WHERE status = 'open' RETURNING 1) SELECT count(*) FROM w"),
		  1);
	CHECK_I64(put_price_at(t, earliest, at, sizeof(at)), 400);
	CHECK_I64(
	    cu_sql_int(db,
		       "SELECT ('%s'::timestamptz = last_sampled_at)::int FROM ingest_watermarks"
		       " WHERE host_id = 'pa-host'",
		       at),
	    1);
	CHECK_I64(cu_sql_int(db, "WITH w AS (DELETE FROM ingest_watermarks WHERE host_id ="
				 " 'pa-host' RETURNING 1) SELECT count(*) FROM w"),
		  1);
	CHECK_I64(put_price_at(t, earliest, at, sizeof(at)), 201);
	CHECK_I64(
	    cu_sql_int(db, "SELECT count(*) FROM price_book WHERE effective_from = '%s'", earliest),
	    1);

	/* It waits for what read the book as it was: a transaction that read
	 * it and stays open past the lock timeout fails the PUT (503, nothing
	 * added); one that ends within it lets the PUT through. */
	reader = PQconnectdb(t->db.url);
	CHECK(PQstatus(reader) == CONNECTION_OK);
	PQclear(PQexec(reader, "BEGIN"));
	CHECK_I64(cu_sql_int(reader, "SELECT count(*) FROM price_book") > 0, 1);
	/* Checks meanwhile wait behind it 50 ms at a time, not the 2 s. */
	pa.t = t;
	CHECK(pthread_create(&th, NULL, put_later, &pa) == 0);
	for (int i = 0; i < 10; i++) {
		struct apitest_resp r;
		struct timespec a, b, d = {0, 100 * 1000 * 1000};
		char name[32];
		long long ms;

		nanosleep(&d, NULL);
		snprintf(name, sizeof(name), "pl-%d", i);
		clock_gettime(CLOCK_MONOTONIC, &a);
		CHECK_I64(cu_create(t, 0, key, name, 1, 1024, 60, NULL, &r), 200);
		clock_gettime(CLOCK_MONOTONIC, &b);
		apitest_resp_release(&r);
		ms = (b.tv_sec - a.tv_sec) * 1000LL + (b.tv_nsec - a.tv_nsec) / 1000000;
		if (ms > slowest)
			slowest = ms;
	}
	pthread_join(th, NULL);
	fprintf(stderr, "slowest check beside a waiting price change: %lld ms\n", slowest);
	CHECK(slowest < 1000);
	CHECK_I64(pa.status, 503);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM price_book"
				 " WHERE effective_from = '2999-06-01T00:00:00Z'"),
		  0);
	PQclear(PQexec(reader, "COMMIT"));
	PQclear(PQexec(reader, "BEGIN"));
	CHECK_I64(cu_sql_int(reader, "SELECT count(*) FROM price_book") > 0, 1);
	CHECK(pthread_create(&th, NULL, commit_later, reader) == 0);
	CHECK_I64(put_price_at(t, "2999-06-01T00:00:00Z", at, sizeof(at)), 201);
	pthread_join(th, NULL);
	PQfinish(reader);
}

/* A lease's worst case takes every price-book version in force during it,
 * however many: a version a hundred times dearer 3 h ahead, with 63 more
 * before it (65 in a day's span, more than the engine reads a row of
 * each), still prices a day's lease of 1 vCPU and 1 GiB at its CPU rate:
 * 24 x (2,500,000 + 7,500) = 60,180,000 µ$. A lease that ends before the
 * first of them is priced at the rates in force: 3,000 s of 25,000 and
 * 7,500 an hour, each rounded up, 20,834 + 6,250.
 * Leaves those versions in the book. */
static void test_price_versions(struct apitest *t, const char *key)
{
	struct apitest_resp r;
	time_t now = apitest_now();
	char name[32];

	put_price(t, now + 3 * 3600, 2500000);
	CHECK_I64(cu_create(t, 0, key, "pv-0", 1, 1024, 86400, NULL, &r), 200);
	CHECK_I64(cu_jint(r.json, "lease_max_cost_micros"), 60180000);
	apitest_resp_release(&r);
	for (int i = 1; i <= 63; i++)
		put_price(t, now + 3600 + i * 30, 25000);
	for (int i = 1; i <= 2; i++) {
		snprintf(name, sizeof(name), "pv-%d", i);
		CHECK_I64(cu_create(t, 0, key, name, 1, 1024, 86400, NULL, &r), 200);
		CHECK_I64(cu_jint(r.json, "lease_max_cost_micros"), 60180000);
		apitest_resp_release(&r);
	}
	CHECK_I64(cu_create(t, 0, key, "pv-3", 1, 1024, 86400, "\"max_cost_micros\":60179999", &r),
		  402);
	CHECK_STR(apitest_error_code(&r), "max_cost_exceeded");
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "pv-4", 1, 1024, 3000, NULL, &r), 200);
	CHECK_I64(cu_jint(r.json, "lease_max_cost_micros"), 27084);
	apitest_resp_release(&r);
}

/* Formats UTC microseconds as RFC 3339 with six decimals. */
static void rfc3339_usec(long long usec, char *buf, size_t len)
{
	char s[32];

	cu_rfc3339((time_t)(usec / 1000000), s, sizeof(s));
	s[strlen(s) - 1] = '\0'; /* the Z */
	snprintf(buf, len, "%s.%06lldZ", s, usec % 1000000);
}

/* The sandbox row's lease end against its latest open hold's (µs apart). */
static long long lease_end_gap(PGconn *db, const char *sb)
{
	return cu_sql_int(
	    db,
	    "SELECT (EXTRACT(EPOCH FROM (SELECT max(lease_ends_at) FROM holds WHERE"
	    " sandbox_id = '%s' AND status = 'open') - lease_ends_at) * 1000000)::bigint"
	    " FROM sandboxes WHERE sandbox_id = '%s'",
	    sb, sb);
}

/* Formats the latest lease start of sb's holds plus offset_usec. */
static void lease_start_at(PGconn *db, const char *sb, long long offset_usec, char *at, size_t len)
{
	rfc3339_usec(
	    cu_sql_int(db,
		       "SELECT (EXTRACT(EPOCH FROM max(lease_starts_at)) * 1000000)::bigint"
		       " FROM holds WHERE sandbox_id = '%s'",
		       sb) +
		offset_usec,
	    at, len);
}

/* Creates sb and, 20 ms later, wakes it under the key "<sb>-1" (a
 * renewal); at: that wake's lease start less 1 ms. */
static void create_then_renew(struct apitest *t, const char *key, const char *sb, char *at,
			      size_t len)
{
	struct apitest_resp r;
	char extra[96];

	CHECK_I64(cu_create(t, 0, key, sb, 2, 4096, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	cu_sleep_ms(20);
	snprintf(extra, sizeof(extra), "\"idempotency_key\":\"%s-1\"", sb);
	CHECK_I64(cu_wake(t, 0, sb, 900, extra, &r), 200);
	apitest_resp_release(&r);
	lease_start_at(t->db.conn, sb, -1000, at, len);
}

/* A retry of a default-key wake after a renewal under a key of its own is
 * still that wake's answer (no second hold), and a shorter renewal does
 * not move the sandbox's lease end before its holds'. An event's time is
 * the control plane's clock: one dated before the sandbox's create counts
 * as at the create, and a stop dated before a wake's check still settles
 * that wake's hold; a stopped sandbox stays stopped. */
static void test_renewal_and_skew(struct apitest *t, const char *key)
{
	struct apitest_resp r, first;
	PGconn *db = t->db.conn;
	char at[48];

	CHECK_I64(cu_create(t, 0, key, "rn-1", 2, 4096, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "rn-1", 600, NULL, &first), 200);
	CHECK(first.headers && !strstr(first.headers, "Idempotent-Replayed"));
	CHECK_I64(cu_wake(t, 0, "rn-1", 60, "\"idempotency_key\":\"rn-1-renew\"", &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(lease_end_gap(db, "rn-1"), 0);
	CHECK_I64(cu_wake(t, 0, "rn-1", 600, NULL, &r), 200);
	CHECK(r.headers && strstr(r.headers, "Idempotent-Replayed: true"));
	CHECK(r.body && first.body);
	if (r.body && first.body)
		CHECK_STR(r.body, first.body);
	apitest_resp_release(&r);
	apitest_resp_release(&first);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'rn-1'"), 3);
	CHECK_I64(lease_end_gap(db, "rn-1"), 0);

	/* A stop and a pause dated 5 s before their sandbox's create. */
	cu_rfc3339(apitest_now() - 5, at, sizeof(at));
	CHECK_I64(cu_create(t, 0, key, "sk-stop", 2, 4096, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_event(t, 0, "sk-stop", "stopped", at, &r), 200);
	CHECK_I64(cu_jint(r.json, "holds_settled"), 1);
	CHECK_I64(cu_jint(r.json, "released_micros"), 20000);
	CHECK_STR(apitest_json_str(&r, "state"), "stopped");
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "sk-pause", 2, 4096, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_event(t, 0, "sk-pause", "paused", at, &r), 200);
	CHECK_I64(cu_jint(r.json, "holds_settled"), 1);
	CHECK_I64(cu_jint(r.json, "released_micros"), 20000);
	CHECK_STR(apitest_json_str(&r, "state"), "paused");
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM lifecycle_events WHERE sandbox_id IN"
				 " ('sk-stop', 'sk-pause') AND at < (SELECT created_at FROM"
				 " sandboxes WHERE sandbox_id = 'sk-stop')"),
		  2);

	/* A pause delivered late, dated 1 ms before a renewal that followed
	 * it: it settles the create's hold, not the renewal's, and leaves the
	 * sandbox running on the renewal's lease. */
	create_then_renew(t, key, "sk-late", at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "sk-late", "paused", at, &r), 200);
	CHECK(json_is_true(json_object_get(r.json, "recorded")));
	CHECK_I64(cu_jint(r.json, "holds_settled"), 1);
	CHECK_STR(apitest_json_str(&r, "state"), "running");
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'sk-late' AND"
				 " status = 'open' AND settles_at IS NULL"),
		  1);

	/* A stop dated 1 ms before a wake's check (after the create). */
	create_then_renew(t, key, "sk-wake", at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "sk-wake", "stopped", at, &r), 200);
	CHECK_I64(cu_jint(r.json, "holds_settled"), 2);
	CHECK_STR(apitest_json_str(&r, "state"), "stopped");
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'sk-wake' AND"
				 " status = 'open' AND settles_at IS NULL"),
		  0);
	CHECK_I64(cu_wake(t, 0, "sk-wake", 60, "\"idempotency_key\":\"sk-wake-2\"", &r), 409);
	CHECK_STR(apitest_error_code(&r), "sandbox_stopped");
	apitest_resp_release(&r);
	/* Later-dated events are recorded; the sandbox stays stopped. */
	cu_rfc3339(apitest_now() + 60, at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "sk-wake", "running", at, &r), 200);
	CHECK(json_is_true(json_object_get(r.json, "recorded")));
	CHECK_STR(apitest_json_str(&r, "state"), "stopped");
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "sk-wake", 60, "\"idempotency_key\":\"sk-wake-3\"", &r), 409);
	CHECK_STR(apitest_error_code(&r), "sandbox_stopped");
	apitest_resp_release(&r);
	CHECK_I64(cu_held_mismatches(db), 0);
}

/* The sandbox row's state, since when and lease end, as text. */
static void sandbox_state(PGconn *db, const char *sb, char *out, size_t len)
{
	char sql[256];

	snprintf(sql, sizeof(sql),
		 "SELECT format('%%s %%s %%s', state, state_since, lease_ends_at) FROM sandboxes"
		 " WHERE sandbox_id = '%s'",
		 sb);
	testdb_query_text(db, sql, out, len);
}

/* A wake refused for the key's limit holds, charges and changes nothing:
 * the sandbox stays paused since its pause with its lease as it was, no
 * hold is made, and the refusal is not kept (the default key): a smaller
 * wake right after is decided afresh and allowed. */
static void test_wake_refused(struct apitest *t, const char *acc)
{
	struct apitest_resp r;
	char key[65], token[APITEST_TOKEN_MAX], zone[16], at[40], before[128], after[128];
	PGconn *db = t->db.conn;

	CHECK(apitest_create_key(t, acc, "full", 25000, apitest_midday_zone(zone, sizeof(zone)),
				 key, token) == 0);
	CHECK_I64(cu_create(t, 0, key, "wf-1", 2, 4096, 900, NULL, &r), 200); /* 20000 */
	apitest_resp_release(&r);
	/* Paused now (a pause stamped before the create counts as at it). */
	cu_rfc3339(apitest_now(), at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "wf-1", "paused", at, &r), 200);
	apitest_resp_release(&r);
	sandbox_state(db, "wf-1", before, sizeof(before));
	CHECK(strncmp(before, "paused ", 7) == 0);
	/* An hour is 80,000 µ$: over the 25,000 limit whatever the tail. */
	CHECK_I64(cu_wake(t, 0, "wf-1", 3600, NULL, &r), 402);
	CHECK_STR(apitest_error_code(&r), "spending_limit_reached");
	CHECK_I64(cu_errint(&r, "hold_micros"), 80000);
	apitest_resp_release(&r);
	sandbox_state(db, "wf-1", after, sizeof(after));
	CHECK_STR(after, before);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'wf-1'"), 1);
	CHECK_I64(cu_held_mismatches(db), 0);
	/* A minute (1,334 µ$) fits: decided afresh, not the refusal again. */
	CHECK_I64(cu_wake(t, 0, "wf-1", 60, NULL, &r), 200);
	CHECK(r.headers && !strstr(r.headers, "Idempotent-Replayed"));
	CHECK_I64(cu_jint(r.json, "hold_micros"), 1334);
	apitest_resp_release(&r);
	sandbox_state(db, "wf-1", after, sizeof(after));
	CHECK(strncmp(after, "running ", 8) == 0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'wf-1'"), 2);
	CHECK_I64(cu_over_limit(db), 0);
}

/* An event's at may be up to 10 minutes ahead of the server's clock:
 * 11 minutes ahead is 400 on at and records nothing; 9 minutes ahead is
 * taken. */
static void test_event_ahead(struct apitest *t, const char *key)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	char at[40];

	CHECK_I64(cu_create(t, 0, key, "fa-1", 1, 1024, 3600, NULL, &r), 200);
	apitest_resp_release(&r);
	cu_rfc3339(apitest_now() + 11 * 60, at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "fa-1", "paused", at, &r), 400);
	CHECK_STR(apitest_error_code(&r), "invalid_request");
	CHECK_STR(json_string_value(json_object_get(json_object_get(r.json, "error"), "field")),
		  "at");
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM lifecycle_events WHERE sandbox_id = 'fa-1'"),
		  0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'fa-1' AND status"
				 " = 'open' AND settles_at IS NULL"),
		  1);
	cu_rfc3339(apitest_now() + 9 * 60, at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "fa-1", "paused", at, &r), 200);
	CHECK(json_is_true(json_object_get(r.json, "recorded")));
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM lifecycle_events WHERE sandbox_id = 'fa-1'"),
		  1);
	CHECK_I64(cu_held_mismatches(db), 0);
}

/* Errors other than a refusal are not kept under a key of the caller's
 * own: a wake of a sandbox not yet made (404) and a create of a sandbox id
 * taken (409) leave their keys free for the next request. */
static void test_errors_not_kept(struct apitest *t, const char *key)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;

	CHECK_I64(cu_wake(t, 0, "nk-1", 60, "\"idempotency_key\":\"own-404\"", &r), 404);
	CHECK_STR(apitest_error_code(&r), "sandbox_not_found");
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "nk-1", 1, 1024, 60, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "nk-1", 60, "\"idempotency_key\":\"own-404\"", &r), 200);
	CHECK(r.headers && !strstr(r.headers, "Idempotent-Replayed"));
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "nk-1", 1, 1024, 60, "\"idempotency_key\":\"own-409\"", &r),
		  409);
	CHECK_STR(apitest_error_code(&r), "sandbox_exists");
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM check_answers WHERE idempotency_key ="
				 " 'own-409'"),
		  0);
	CHECK_I64(cu_create(t, 0, key, "nk-2", 1, 1024, 60, "\"idempotency_key\":\"own-409\"", &r),
		  200);
	CHECK(r.headers && !strstr(r.headers, "Idempotent-Replayed"));
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id IN ('nk-1', 'nk-2')"),
		  3);
}

/* A default-key wake is replayed while its own hold is open and unsettled,
 * whatever the clocks say: a pause dated 5 s ahead of the engine, then a
 * wake, then that wake again (replayed: one new hold). And not once a pause
 * dated after it settled that hold, even with the sandbox running again on
 * a wake of its own key: the retry is decided again. */
static void test_wake_replay_holds(struct apitest *t, const char *key)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	char at[48];

	CHECK_I64(cu_create(t, 0, key, "wr-1", 2, 4096, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	cu_rfc3339(apitest_now() + 5, at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "wr-1", "paused", at, &r), 200);
	CHECK_STR(apitest_json_str(&r, "state"), "paused");
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "wr-1", 600, NULL, &r), 200);
	CHECK(r.headers && !strstr(r.headers, "Idempotent-Replayed"));
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "wr-1", 600, NULL, &r), 200);
	CHECK(r.headers && strstr(r.headers, "Idempotent-Replayed: true"));
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'wr-1' AND"
				 " status = 'open' AND settles_at IS NULL"),
		  1);

	CHECK_I64(cu_create(t, 0, key, "wr-2", 2, 4096, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "wr-2", 600, NULL, &r), 200);
	apitest_resp_release(&r);
	cu_sleep_ms(20);
	lease_start_at(db, "wr-2", 1000, at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "wr-2", "paused", at, &r), 200);
	CHECK_I64(cu_jint(r.json, "holds_settled"), 2);
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "wr-2", 600, "\"idempotency_key\":\"wr-2-own\"", &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "wr-2", 600, NULL, &r), 200);
	CHECK(r.headers && !strstr(r.headers, "Idempotent-Replayed"));
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'wr-2' AND"
				 " status = 'open' AND settles_at IS NULL"),
		  2);

	/* A wake of wr-4 under a key of its caller's own that is wr-3's id:
	 * wr-3's default wake is its conflict, not a new decision that drops
	 * it (wr-3 is paused, so such a stored answer of its own would be
	 * stale), and wr-4's retry is still replayed. */
	CHECK_I64(cu_create(t, 0, key, "wr-3", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "wr-4", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	cu_rfc3339(apitest_now() + 5, at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "wr-3", "paused", at, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_event(t, 0, "wr-4", "paused", at, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "wr-4", 600, "\"idempotency_key\":\"wr-3\"", &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "wr-3", 600, NULL, &r), 409);
	CHECK_STR(apitest_error_code(&r), "idempotency_conflict");
	/* The caller sent no key: the message names the wake that holds it. */
	CHECK(strstr(r.body, "a wake of sandbox wr-4 was sent with this key") != NULL);
	apitest_resp_release(&r);
	/* A wake of the same sandbox with other parameters: the plain message. */
	CHECK_I64(cu_wake(t, 0, "wr-4", 300, "\"idempotency_key\":\"wr-3\"", &r), 409);
	CHECK(strstr(r.body, "already used with other parameters") != NULL);
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "wr-4", 600, "\"idempotency_key\":\"wr-3\"", &r), 200);
	CHECK(r.headers && strstr(r.headers, "Idempotent-Replayed: true"));
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id IN ('wr-3', 'wr-4')"
				 " AND status = 'open' AND settles_at IS NULL"),
		  1);
	CHECK_I64(cu_held_mismatches(db), 0);
}

struct event_call {
	struct apitest *t;
	const char *sandbox, *type;
	char at[48];
	long status;
	long long settled;
	char state[16];
};

static void *event_main(void *arg)
{
	struct event_call *c = arg;
	struct apitest_resp r;

	c->status = cu_event(c->t, 0, c->sandbox, c->type, c->at, &r);
	c->settled = cu_jint(r.json, "holds_settled");
	snprintf(c->state, sizeof(c->state), "%s", apitest_json_str(&r, "state"));
	apitest_resp_release(&r);
	return NULL;
}

/* A connection of the test's own that writes what a wake of sb writes, in
 * the engine's order (the key-day's ledger row locked, a hold of 5,000 µ$
 * for an hour from now, the ledger's held, the sandbox row), and leaves it
 * uncommitted: COMMIT and PQfinish it to let it in. *now_usec: its now. */
static PGconn *wake_in_flight(struct apitest *t, const char *sb, long long *now_usec)
{
	PGconn *w = PQconnectdb(t->db.url);
	char sql[1024];

	CHECK(PQstatus(w) == CONNECTION_OK);
	cu_sql(w, "BEGIN");
	snprintf(sql, sizeof(sql),
		 "SELECT 1 FROM key_day_ledger l WHERE (l.account_id, l.key_id, l.day) IN"
		 " (SELECT account_id, key_id, day FROM holds WHERE sandbox_id = '%s') FOR UPDATE",
		 sb);
	cu_sql(w, sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
		 " lease_starts_at, lease_ends_at, created_at)"
		 " SELECT account_id, key_id, sandbox_id, day, 5000, now(),"
		 " now() + interval '1 hour', now() FROM holds WHERE sandbox_id = '%s' LIMIT 1",
		 sb);
	cu_sql(w, sql);
	snprintf(
	    sql, sizeof(sql),
	    "UPDATE key_day_ledger l SET held_micros = held_micros + 5000"
	    " FROM (SELECT account_id, key_id, day FROM holds WHERE sandbox_id = '%s'"
	    " LIMIT 1) h WHERE (l.account_id, l.key_id, l.day) = (h.account_id, h.key_id, h.day)",
	    sb);
	cu_sql(w, sql);
	snprintf(sql, sizeof(sql),
		 "UPDATE sandboxes SET state = 'running', state_since = CASE WHEN state ="
		 " 'running' THEN state_since ELSE now() END, lease_ends_at = GREATEST("
		 " lease_ends_at, now() + interval '1 hour') WHERE sandbox_id = '%s'",
		 sb);
	cu_sql(w, sql);
	*now_usec = cu_sql_int(w, "SELECT (EXTRACT(EPOCH FROM now()) * 1000000)::bigint");
	return w;
}

/* An event that comes while a wake of its sandbox is written but not yet
 * committed waits for the sandbox row and then takes that wake into
 * account:
 * - a stop settles the wake's hold too (it left a stopped sandbox with an
 *   open, whole hold until its lease end);
 * - still so when another writer has the key-day's ledger row for 1.5 s
 *   after the wake commits (the second settling gave way after 1 s);
 * - a pause delivered late, dated before a renewal in flight, leaves the
 *   sandbox running on it (it tested the holds on a snapshot from before
 *   the renewal committed, and paused the sandbox). */
static void test_events_during_wake(struct apitest *t, const char *key)
{
	static const char *const sbs[] = {"sw-1", "sw-2", "sw-3"};
	PGconn *db = t->db.conn;

	for (int way = 0; way < 3; way++) {
		struct apitest_resp r;
		struct event_call c = {.t = t, .sandbox = sbs[way]};
		PGconn *w, *x = NULL;
		pthread_t th;
		long long born, now_usec;
		char at[48], sql[512];

		CHECK_I64(cu_create(t, 0, key, sbs[way], 2, 4096, 900, NULL, &r), 200);
		apitest_resp_release(&r);
		born = cu_sql_int(db,
				  "SELECT (EXTRACT(EPOCH FROM created_at) * 1000000)::bigint FROM"
				  " sandboxes WHERE sandbox_id = '%s'",
				  sbs[way]);
		/* Paused (its holds settled); the third running again, with
		 * no open hold, as after a lease-end sweep. */
		rfc3339_usec(born + 1000, at, sizeof(at));
		CHECK_I64(cu_event(t, 0, sbs[way], "paused", at, &r), 200);
		apitest_resp_release(&r);
		if (way == 2) {
			rfc3339_usec(born + 2000, at, sizeof(at));
			CHECK_I64(cu_event(t, 0, sbs[way], "running", at, &r), 200);
			CHECK_STR(apitest_json_str(&r, "state"), "running");
			apitest_resp_release(&r);
		}
		w = wake_in_flight(t, sbs[way], &now_usec);
		if (way == 1) {
			x = PQconnectdb(t->db.url);
			CHECK(PQstatus(x) == CONNECTION_OK);
			cu_sql(x, "BEGIN");
			snprintf(sql, sizeof(sql),
				 "SELECT 1 FROM key_day_ledger l WHERE (l.account_id, l.key_id,"
				 " l.day) IN (SELECT account_id, key_id, day FROM holds WHERE"
				 " sandbox_id = '%s') FOR UPDATE",
				 sbs[way]);
			CHECK(PQsendQuery(x, sql) == 1);
			cu_await_lock_waiters(db, 1);
		}
		c.type = way == 2 ? "paused" : "stopped";
		if (way == 2)
			rfc3339_usec(now_usec - 1000, c.at, sizeof(c.at));
		else
			cu_rfc3339(apitest_now() + 1, c.at, sizeof(c.at));
		CHECK(pthread_create(&th, NULL, event_main, &c) == 0);
		cu_await_lock_waiters(db, way == 1 ? 2 : 1);
		cu_sql(w, "COMMIT");
		PQfinish(w);
		if (x) {
			PGresult *res;

			cu_sleep_ms(1500);
			while ((res = PQgetResult(x)))
				PQclear(res);
			cu_sql(x, "COMMIT");
			PQfinish(x);
		}
		pthread_join(th, NULL);
		CHECK_I64(c.status, 200);
		CHECK_STR(c.state, way == 2 ? "running" : "stopped");
		CHECK_I64(c.settled, way == 2 ? 0 : 1);
		CHECK_I64(cu_sql_int(db,
				     "SELECT count(*) FROM holds WHERE sandbox_id = '%s' AND"
				     " status = 'open' AND settles_at IS NULL",
				     sbs[way]),
			  way == 2 ? 1 : 0);
		CHECK_I64(cu_held_mismatches(db), 0);
	}
}

struct event_done {
	struct event_call c;
	atomic_bool done;
};

static void *event_done_main(void *arg)
{
	struct event_done *d = arg;

	event_main(&d->c);
	atomic_store(&d->done, true);
	return NULL;
}

/* An event beside ingestion of its sandbox: a sample push in flight has
 * inserted rows naming the sandbox (a key-share lock on its row, as any
 * reference takes) and next wants the key-day's ledger row, which a pause
 * holds once it has settled. The pause took the sandbox row FOR UPDATE,
 * which waits for key-share locks: the two waited on each other until
 * PostgreSQL broke the deadlock (about a second), and two events on one
 * sandbox at once did the same to each other, answering 503 after five
 * tries. The pause is now answered while the push is still open, and the
 * push goes on. Then rounds of four events at once on one sandbox: every
 * one answered 200. */
static void test_events_beside_references(struct apitest *t, const char *key)
{
	struct event_done d = {.c = {.t = t, .sandbox = "sk-1", .type = "paused"}};
	PGconn *db = t->db.conn, *x;
	struct apitest_resp r;
	pthread_t th;
	char sql[512];
	int waited = 0;

	CHECK_I64(cu_create(t, 0, key, "sk-1", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	x = PQconnectdb(t->db.url);
	CHECK(PQstatus(x) == CONNECTION_OK);
	cu_sql(x, "BEGIN");
	cu_sql(x, "SELECT 1 FROM sandboxes WHERE sandbox_id = 'sk-1' FOR KEY SHARE");
	cu_rfc3339(apitest_now(), d.c.at, sizeof(d.c.at));
	atomic_init(&d.done, false);
	CHECK(pthread_create(&th, NULL, event_done_main, &d) == 0);
	while (!atomic_load(&d.done) && waited < 3000) {
		cu_sleep_ms(20);
		waited += 20;
	}
	CHECK(atomic_load(&d.done)); /* answered while the push is open */
	snprintf(sql, sizeof(sql),
		 "SELECT 1 FROM key_day_ledger l WHERE (l.account_id, l.key_id, l.day) IN"
		 " (SELECT account_id, key_id, day FROM holds WHERE sandbox_id = 'sk-1')"
		 " FOR UPDATE");
	CHECK_STR(testdb_exec_state(x, sql), "00000"); /* no deadlock */
	cu_sql(x, "COMMIT");
	PQfinish(x);
	pthread_join(th, NULL);
	CHECK_I64(d.c.status, 200);
	CHECK_STR(d.c.state, "paused");
	CHECK_I64(d.c.settled, 1);

	for (int round = 0; round < 5; round++) {
		struct event_call c[4];
		pthread_t ths[4];
		long long base = (long long)apitest_now() * 1000000 - 2000000;

		for (int i = 0; i < 4; i++) {
			c[i] = (struct event_call){.t = t,
						   .sandbox = "sk-1",
						   .type = (round + i) % 2 ? "running" : "paused"};
			rfc3339_usec(base + round * 10 + i, c[i].at, sizeof(c[i].at));
			CHECK(pthread_create(&ths[i], NULL, event_main, &c[i]) == 0);
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(ths[i], NULL);
			CHECK_I64(c[i].status, 200);
		}
	}
	CHECK_I64(cu_held_mismatches(db), 0);
}

/* Pushes one sample of sandbox sb (1 vCPU, 1 GiB) taken at UTC second at,
 * from host; under key, or with no key_id when key is NULL. */
static void push_sample_from(struct apitest *t, const char *host, const char *key, const char *sb,
			     long long at, const char *state, long long cpu_usec,
			     long long storage_mib)
{
	struct apitest_resp r;
	char body[512], when[40], key_member[96] = "";

	cu_rfc3339((time_t)at, when, sizeof(when));
	if (key)
		snprintf(key_member, sizeof(key_member), "\"key_id\":\"%s\",", key);
	snprintf(body, sizeof(body),
		 "{\"host_id\":\"%s\",\"sampled_at\":\"%s\",\"sandboxes\":[{\"sandbox_id\":"
		 "\"%s\",%s\"state\":\"%s\",\"vcpus\":1,\"memory_mib\":1024,"
		 "\"storage_mib\":%lld,\"cpu_usec\":%lld}]}",
		 host, when, sb, key_member, state, storage_mib, cpu_usec);
	CHECK(cu_post(t, 0, "/v1/samples", body, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
}

/* The same, from host h-tail. */
static void push_sample(struct apitest *t, const char *key, const char *sb, long long at,
			const char *state, long long cpu_usec, long long storage_mib)
{
	push_sample_from(t, "h-tail", key, sb, at, state, cpu_usec, storage_mib);
}

/* A document of host at time at that lists no sandbox: the host has
 * reported past at without the ones it sampled before. */
static void push_empty(struct apitest *t, const char *host, long long at)
{
	struct apitest_resp r;
	char body[256], when[40];

	cu_rfc3339((time_t)at, when, sizeof(when));
	snprintf(body, sizeof(body), "{\"host_id\":\"%s\",\"sampled_at\":\"%s\",\"sandboxes\":[]}",
		 host, when);
	CHECK(cu_post(t, 0, "/v1/samples", body, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
}

/* Host host's two samples of sb: running at at (CPU counter 0), then
 * stopped a second later, having run that second on its one vCPU. */
static void push_ran_then_stopped(struct apitest *t, const char *host, const char *key,
				  const char *sb, long long at)
{
	push_sample_from(t, host, key, sb, at, "running", 0, 0);
	push_sample_from(t, host, key, sb, at + 1, "stopped", 1000000, 0);
}

/* A stopped sample is its host's reading, not a stop of the sandbox (only
 * a stop event is): the record stays running, a wake of it is allowed, and
 * what the host then finds running is billed. The interval from the
 * stopped sample to the next bills nothing (no event in it says it ran). */
static void test_wake_after_stopped_sample(struct apitest *t, const char *key)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	char state[128];
	time_t t0;

	CHECK_I64(cu_create(t, 0, key, "ss-1", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	t0 = apitest_now() + 1; /* after the create */
	push_ran_then_stopped(t, "h-ss", key, "ss-1", t0);
	sandbox_state(db, "ss-1", state, sizeof(state));
	CHECK(strncmp(state, "running ", 8) == 0);
	CHECK_I64(cu_wake(t, 0, "ss-1", 60, NULL, &r), 200);
	apitest_resp_release(&r);
	push_sample_from(t, "h-ss", key, "ss-1", t0 + 3, "running", 2000000, 0);
	push_sample_from(t, "h-ss", key, "ss-1", t0 + 5, "running", 4000000, 0);
	CHECK_I64(cu_sql_int(db, "SELECT sum(running_usec) FROM usage_hourly"
				 " WHERE sandbox_id = 'ss-1'"),
		  3000000);
	CHECK_I64(cu_sql_int(db, "SELECT sum(cpu_used_mcus) FROM usage_hourly"
				 " WHERE sandbox_id = 'ss-1'"),
		  3000000000LL);
}

/* A sandbox metering found with no key (filed under `unattributed`) is not
 * the caller's to wake (404, by the default key and by one of its own),
 * while its id is taken for a create (409); nothing is held for it. */
static void test_unattributed(struct apitest *t, const char *key)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;

	push_sample_from(t, "h-ua", NULL, "ua-1", (long long)apitest_now(), "running", 0, 0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM sandboxes WHERE sandbox_id = 'ua-1'"
				 " AND account_id = 'unattributed' AND key_id IS NULL"),
		  1);
	CHECK_I64(cu_wake(t, 0, "ua-1", 60, NULL, &r), 404);
	CHECK_STR(apitest_error_code(&r), "sandbox_not_found");
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(t, 0, "ua-1", 60, "\"idempotency_key\":\"ua-own\"", &r), 404);
	CHECK_STR(apitest_error_code(&r), "sandbox_not_found");
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "ua-1", 1, 1024, 60, NULL, &r), 409);
	CHECK_STR(apitest_error_code(&r), "sandbox_exists");
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'ua-1'"), 0);
}

/* Waits (up to 10 s) until the hold of sb placed first is closed. */
static void wait_first_hold_closed(PGconn *db, const char *sb)
{
	for (int i = 0; i < 100; i++) {
		if (cu_sql_int(db,
			       "SELECT count(*) FROM holds WHERE sandbox_id = '%s' AND status <>"
			       " 'open' AND hold_id = (SELECT min(hold_id) FROM holds WHERE"
			       " sandbox_id = '%s')",
			       sb, sb) == 1)
			return;
		cu_sleep_ms(100);
	}
	CHECK(!"the settling hold was closed");
}

/* Waits (up to 10 s) until the sweeper has come to sandbox sb's first hold:
 * closed, or kept for its tail (settles_at). */
static void wait_first_hold_swept(PGconn *db, const char *sb)
{
	for (int i = 0; i < 100; i++) {
		if (cu_sql_int(
			db,
			"SELECT count(*) FROM holds WHERE sandbox_id = '%s' AND (status <>"
			" 'open' OR settles_at IS NOT NULL) AND hold_id = (SELECT min(hold_id)"
			" FROM holds WHERE sandbox_id = '%s')",
			sb, sb) == 1)
			return;
		cu_sleep_ms(100);
	}
	CHECK(!"the sweeper came to the hold");
}

/* A sandbox its host reported stopped, then woken (a running event) and
 * stopped by the control plane, with no sample after the stop: the
 * sweeper's reading at the stop meters the woken stretch, at the floor,
 * as after a running sample, and the tail hold closes with it consumed.
 * 1 s running before the stopped sample, 2 s from the running event to
 * the stop. */
static void test_tail_after_stopped_sample(struct apitest *t, const char *key)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	char at[40];
	time_t n;

	CHECK_I64(cu_create(t, 0, key, "gs-1", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	cu_sleep_ms(3100);
	n = apitest_now(); /* n - 2 is after the create */
	push_ran_then_stopped(t, "h-gs", key, "gs-1", n - 2);
	CHECK_I64(cu_wake(t, 0, "gs-1", 60, NULL, &r), 200);
	apitest_resp_release(&r);
	cu_rfc3339(n + 1, at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "gs-1", "running", at, &r), 200);
	apitest_resp_release(&r);
	cu_rfc3339(n + 3, at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "gs-1", "stopped", at, &r), 200);
	apitest_resp_release(&r);
	push_empty(t, "h-gs", n + 4);
	/* The stop is 2 s (the grace) old 5 s from now; the sweeper's round. */
	for (int i = 0; i < 150 && cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id ="
						  " 'gs-1' AND status = 'open'") > 0;
	     i++)
		cu_sleep_ms(100);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'gs-1' AND status"
				 " = 'open'"),
		  0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM samples WHERE sandbox_id = 'gs-1' AND"
				 " host_id = 'lifecycle.stop' AND state = 'stopped'"),
		  1);
	CHECK_I64(cu_sql_int(db, "SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id ="
				 " 'gs-1'"),
		  3000000);
	CHECK_I64(cu_sql_int(db, "SELECT sum(cpu_billed_mcus) FROM usage_hourly WHERE sandbox_id"
				 " = 'gs-1'"),
		  1000000000LL + 50 * 2000000LL);
	CHECK_I64(cu_sql_int(db, "SELECT (SELECT sum(consumed_micros) FROM holds WHERE sandbox_id"
				 " = 'gs-1') - (SELECT sum(total_micros) FROM usage_hourly WHERE"
				 " sandbox_id = 'gs-1')"),
		  0);
	CHECK_I64(cu_held_mismatches(db), 0);
}

/* Lease end without an event: the sweeper settles each hold at its lease
 * end like a pause there. Metering already past the end: released at
 * once. Never metered: the whole hold is kept (its samples may yet come)
 * until lease_grace_s (2 s) later. Metered up to before the end: the
 * worst case of that tail is kept until metering passes the end, and a
 * check in between cannot take it (it used to be released at once, and
 * the tail, metered later, took the day past its limit). */
static void test_lease_end(struct apitest *t, const char *acc)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	char key[65], token[APITEST_TOKEN_MAX], zone[16];
	const long long hold = 37; /* 1 vCPU + 1 GiB for 4 s, rounded up */
	time_t t0;

	CHECK(apitest_create_key(t, acc, "full", 2 * hold - 1,
				 apitest_midday_zone(zone, sizeof(zone)), key, token) == 0);
	CHECK_I64(cu_create(t, 0, key, "le-1", 1, 1024, 2, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "le-2", 1, 1024, 2, NULL, &r), 200);
	apitest_resp_release(&r);
	/* Ahead of the lease end (before the sweeper comes to it): dated from
	 * after the create, so that past the end however long the key and the
	 * creates took (a 1.2 s key creation left t0 + 4 before it). */
	t0 = apitest_now();
	push_sample_from(t, "h-lease", key, "le-2", (long long)t0 + 4, "running", 0, 0);
	wait_first_hold_swept(db, "le-1");
	wait_first_hold_swept(db, "le-2");
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'le-2' AND status"
				 " = 'released'"),
		  1);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'le-1' AND status"
				 " = 'open' AND settles_at = lease_ends_at AND amount_micros ="
				 " reserved_micros"),
		  1);
	CHECK_I64(cu_held_mismatches(db), 0);
	wait_first_hold_closed(db, "le-1");
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'le-1' AND status"
				 " = 'settled'"),
		  1);

	/* Room for two 4 s leases but one micro. */
	CHECK_I64(cu_create(t, 0, key, "lt-1", 1, 1024, 4, NULL, &r), 200);
	CHECK_I64(cu_jint(r.json, "hold_micros"), hold);
	apitest_resp_release(&r);
	t0 = apitest_now();
	push_sample_from(t, "h-lease", key, "lt-1", (long long)t0, "running", 0, 0);
	wait_first_hold_swept(db, "lt-1");
	CHECK_I64(cu_sql_int(db, "SELECT amount_micros FROM holds WHERE sandbox_id = 'lt-1' AND"
				 " status = 'open' AND settles_at = lease_ends_at"),
		  hold);
	CHECK_I64(cu_create(t, 0, key, "lt-2", 1, 1024, 4, NULL, &r), 402);
	CHECK_STR(apitest_error_code(&r), "spending_limit_reached");
	CHECK_I64(cu_errint(&r, "day_held_micros"), hold);
	apitest_resp_release(&r);
	/* Metered past the lease end: the tail is spent, the rest let go. */
	push_sample_from(t, "h-lease", key, "lt-1", (long long)t0 + 6, "running", 0, 0);
	wait_first_hold_closed(db, "lt-1");
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'lt-1' AND status"
				 " = 'settled'"),
		  1);
	CHECK_I64(cu_create(t, 0, key, "lt-2", 1, 1024, 4, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_held_mismatches(db), 0);
	CHECK_I64(cu_over_limit(db), 0);
}

/* A lease crossing midnight left running: reported once, by its last day's
 * hold, even when one sweep releases the first part and finds the second's
 * ledger row busy (as under another meterd). Driven through the sweeper's
 * functions at a time in 2100, which the running meterd's sweeper (at the
 * real time) leaves alone; run last, since it also releases every other
 * open hold. */
static void test_watch_midnight(struct apitest *t, const char *acc, const char *key)
{
	PGconn *db = t->db.conn, *other = PQconnectdb(t->db.url);
	long long h2;
	char sql[2048];

	CHECK(PQstatus(other) == CONNECTION_OK);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state,"
		 " lease_ends_at) VALUES ('%s', 'mx-1', '%s', 1, 1024, 'running',"
		 " '2099-12-31 00:00:05+00');"
		 "INSERT INTO key_day_ledger (account_id, key_id, day, held_micros) VALUES"
		 " ('%s', '%s', '2099-12-30', 100), ('%s', '%s', '2099-12-31', 50);"
		 "INSERT INTO holds (account_id, key_id, sandbox_id, day, amount_micros,"
		 " lease_starts_at, lease_ends_at) VALUES"
		 " ('%s', '%s', 'mx-1', '2099-12-30', 100, '2099-12-30 23:59:00+00',"
		 " '2099-12-31 00:00:05+00'),"
		 " ('%s', '%s', 'mx-1', '2099-12-31', 50, '2099-12-30 23:59:00+00',"
		 " '2099-12-31 00:00:05+00')",
		 acc, key, acc, key, acc, key, acc, key, acc, key);
	cu_sql(db, sql);
	h2 = cu_sql_int(db, "SELECT hold_id FROM holds WHERE sandbox_id = 'mx-1' AND day ="
			    " '2099-12-31'");
	snprintf(sql, sizeof(sql),
		 "BEGIN; SELECT 1 FROM key_day_ledger WHERE account_id = '%s' AND key_id = '%s'"
		 " AND day = '2099-12-31' FOR UPDATE",
		 acc, key);
	cu_sql(other, sql);
	/* Never metered: each part is kept for its tail until the grace
	 * (0 here) has passed, then closed by the settle sweep. */
	cu_sql(db, "SELECT meter_holds_expire('2100-01-01', 1000)");
	cu_sql(db, "SELECT meter_holds_settle('2100-01-01', 0, 1000)");
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'mx-1' AND"
				 " status = 'open' AND day = '2099-12-31'"),
		  1);
	cu_sql(db, "SELECT meter_leases_outrun('2100-01-01', 0, 1000)");
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE payload->>'sandbox_id'"
				 " = 'mx-1'"),
		  0);
	cu_sql(other, "COMMIT");
	cu_sql(db, "SELECT meter_holds_expire('2100-01-01', 1000)");
	cu_sql(db, "SELECT meter_holds_settle('2100-01-01', 0, 1000)");
	cu_sql(db, "SELECT meter_leases_outrun('2100-01-01', 0, 1000)");
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'mx-1' AND status ="
				 " 'settled'"),
		  2);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE payload->>'sandbox_id'"
				 " = 'mx-1'"),
		  1);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM webhook_outbox WHERE payload->>'sandbox_id'"
			     " = 'mx-1' AND dedup_key = '%lld' AND payload->>'reason' ="
			     " 'lease_ended'",
			     h2),
		  1);
	CHECK_I64(cu_held_mismatches(db), 0);
	PQfinish(other);
}

/* Validation: each bad field named, nothing queued. */
static void test_validation(struct apitest *t, const char *key)
{
	static const struct {
		const char *path, *body, *field;
	} cases[] = {
	    {"/v1/checks/create",
	     "{\"sandbox_id\":\"v\",\"vcpus\":1,\"memory_mib\":1,\"lease_seconds\":1}", "key_id"},
	    {"/v1/checks/create",
	     "{\"key_id\":\"K\",\"sandbox_id\":\"v\",\"vcpus\":1025,\"memory_mib\":1,\"lease_"
	     "seconds\":1}",
	     "vcpus"},
	    {"/v1/checks/create",
	     "{\"key_id\":\"K\",\"sandbox_id\":\"v\",\"vcpus\":1,\"memory_mib\":0,\"lease_"
	     "seconds\":1}",
	     "memory_mib"},
	    {"/v1/checks/create",
	     "{\"key_id\":\"K\",\"sandbox_id\":\"v\",\"vcpus\":1,\"memory_mib\":1,\"lease_"
	     "seconds\":86401}",
	     "lease_seconds"},
	    {"/v1/checks/create",
	     "{\"key_id\":\"K\",\"sandbox_id\":\"v\",\"vcpus\":1,\"memory_mib\":1,\"lease_"
	     "seconds\":1,\"max_cost_micros\":-1}",
	     "max_cost_micros"},
	    {"/v1/checks/create",
	     "{\"key_id\":\"K\",\"sandbox_id\":\"a "
	     "b\",\"vcpus\":1,\"memory_mib\":1,\"lease_seconds\":1}",
	     "sandbox_id"},
	    {"/v1/checks/create",
	     "{\"key_id\":\"K\",\"sandbox_id\":\"v\",\"vcpus\":\"1\",\"memory_mib\":1,\"lease_"
	     "seconds\":1}",
	     "vcpus"},
	    {"/v1/checks/create",
	     "{\"key_id\":\"K\",\"sandbox_id\":\"v\",\"vcpus\":1,\"memory_mib\":1,\"lease_"
	     "seconds\":1,\"idempotency_key\":\"\"}",
	     "idempotency_key"},
	    {"/v1/checks/wake", "{\"sandbox_id\":\"v\",\"lease_seconds\":0}", "lease_seconds"},
	    {"/v1/checks/wake", "{\"sandbox_id\":\"v\",\"lease_seconds\":1,\"vcpus\":2}", "vcpus"},
	};
	struct apitest_resp r;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char body[512];
		const char *k = strstr(cases[i].body, "\"K\"");

		if (k)
			snprintf(body, sizeof(body), "%.*s\"%s\"%s", (int)(k - cases[i].body),
				 cases[i].body, key, k + 3);
		else
			snprintf(body, sizeof(body), "%s", cases[i].body);
		cu_post(t, 0, cases[i].path, body, &r);
		CHECK_I64(r.status, 400);
		CHECK_STR(apitest_error_code(&r), "invalid_request");
		CHECK_STR(
		    json_string_value(json_object_get(json_object_get(r.json, "error"), "field")),
		    cases[i].field);
		apitest_resp_release(&r);
	}
	/* Only the control plane may call checks. */
	CHECK(apitest_call(t, 0, "POST", "/v1/checks/create", t->operator_token, "{}", &r) == 0);
	CHECK_I64(r.status, 403);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(t->db.conn, "SELECT count(*) FROM sandboxes WHERE sandbox_id = 'v'"),
		  0);
}

/* Starts one meterd whose check engine reads target as "now". */
static int start_at_env(struct apitest *t, const char *tag, time_t target, const char *const *env)
{
	char off[32];
	const char *args[] = {"--clock-offset-s", off, NULL};

	snprintf(off, sizeof(off), "%lld", cu_offset_to(target));
	return apitest_start(t, tag, 1, args, env);
}

static int start_at(struct apitest *t, const char *tag, time_t target)
{
	return start_at_env(t, tag, target, NULL);
}

/* UTC seconds of a civil UTC time. */
static time_t utc(int y, int mo, int d, int h, int mi)
{
	struct tm tm = {
	    .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi};
	return timegm(&tm);
}

/* Europe/Berlin, 2026-10-24 23:30 local (21:30Z): a 24 h lease holds about
 * 30 min against the 24th and the rest against the 25th, a 25-hour day
 * (clocks go back at 03:00 CEST). 1 vCPU + 1 GiB = 32,500 µ$/h. meterd's
 * sessions start in another date style (libpq's PGDATESTYLE): the days
 * are YYYY-MM-DD all the same. */
/* GET /v1/sandboxes/{sb} as token into *r (release it): the HTTP status. */
static long sandbox_get(struct apitest *t, const char *token, const char *sb,
			struct apitest_resp *r)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", sb);
	if (apitest_call(t, 0, "GET", path, token, NULL, r) != 0)
		return 0;
	return r->status;
}

/* Member name of the i-th of the holds a sandbox's detail r lists. */
static const json_t *hold_field(const struct apitest_resp *r, size_t i, const char *name)
{
	return json_object_get(json_array_get(json_object_get(r->json, "holds"), i), name);
}

static void test_berlin(void)
{
	static const char *const env[] = {"PGDATESTYLE=SQL, DMY", NULL};
	struct apitest t;
	struct apitest_resp r;
	char acc[65], key[65], token[APITEST_TOKEN_MAX], path[128];
	const char *day;
	json_t *parts;
	long long p0, p1;

	if (start_at_env(&t, "chk_berlin", utc(2026, 10, 24, 21, 30), env) < 0) {
		CHECK(0);
		return;
	}
	CHECK(apitest_create_account(&t, "Berlin", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 10000000, "Europe/Berlin", key, token) == 0);
	/* The key's own day too (read by a pooled connection, not the
	 * engine's). */
	snprintf(path, sizeof(path), "/v1/keys/%s", key);
	CHECK(apitest_call(&t, 0, "GET", path, token, NULL, &r) == 0);
	day = apitest_json_str(&r, "day");
	CHECK(day && strlen(day) == 10 && day[4] == '-' && day[7] == '-');
	apitest_resp_release(&r);
	CHECK_I64(cu_create(&t, 0, key, "be-1", 1, 1024, 86400, NULL, &r), 200);
	CHECK_STR(apitest_json_str(&r, "day"), "2026-10-24");
	parts = json_object_get(r.json, "parts");
	CHECK_I64(json_array_size(parts), 2);
	CHECK_STR(json_string_value(json_object_get(json_array_get(parts, 0), "day")),
		  "2026-10-24");
	CHECK_STR(json_string_value(json_object_get(json_array_get(parts, 1), "day")),
		  "2026-10-25");
	p0 = cu_jint(json_array_get(parts, 0), "hold_micros");
	p1 = cu_jint(json_array_get(parts, 1), "hold_micros");
	/* 30 min = 16,250 µ$ less the seconds the test took to get here. */
	CHECK(p0 <= 16250 && p0 >= 16250 - 600);
	CHECK(p1 >= 763750 && p1 <= 763750 + 600);
	CHECK(p0 + p1 >= 780000 && p0 + p1 <= 780002);
	CHECK_I64(cu_jint(r.json, "lease_max_cost_micros"), 780000);
	CHECK_I64(cu_jint(r.json, "hold_micros"), p0 + p1);
	check_replay(&t, key, "be-1", 1, 1024, 86400, &r);
	apitest_resp_release(&r);
	/* Each part held on its own day. */
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT held_micros FROM key_day_ledger WHERE day ="
					" '2026-10-24'"),
		  p0);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT held_micros FROM key_day_ledger WHERE day ="
					" '2026-10-25'"),
		  p1);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds WHERE sandbox_id = 'be-1'"), 2);
	/* The sandbox's detail lists both parts, each on its own day. */
	CHECK_I64(sandbox_get(&t, token, "be-1", &r), 200);
	CHECK_I64(cu_jint(r.json, "held_micros"), p0 + p1);
	CHECK_I64(cu_jint(r.json, "open_holds"), 2);
	CHECK_I64(json_array_size(json_object_get(r.json, "holds")), 2);
	CHECK_STR(json_string_value(hold_field(&r, 0, "day")), "2026-10-24");
	CHECK_STR(json_string_value(hold_field(&r, 1, "day")), "2026-10-25");
	CHECK_I64(json_integer_value(hold_field(&r, 0, "amount_micros")), p0);
	CHECK_I64(json_integer_value(hold_field(&r, 1, "amount_micros")), p1);
	CHECK_I64(json_integer_value(hold_field(&r, 1, "consumed_micros")), 0);
	CHECK_I64(json_integer_value(hold_field(&r, 1, "remaining_micros")), p1);
	CHECK(json_is_null(hold_field(&r, 0, "settles_at")));
	CHECK_STR(json_string_value(hold_field(&r, 1, "lease_ends_at")),
		  apitest_json_str(&r, "lease_ends_at"));
	apitest_resp_release(&r);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
}

/* A pause keeps the hold of its unmetered tail (the running time from the
 * last sample to the event) until metering passes the event. The check
 * engine's clock is yesterday 01:00 UTC, so samples and events of the
 * lease are all in the past; lease_grace_s is 60 s, so only metering
 * closes these holds. 1 vCPU + 1 GiB = 32,500 µ$/h.
 *   1. Limit 20,000: a 1,000 s lease (hold H), metered for 300 s, paused
 *      240 s later. The tail's share of H stays held, so a check for
 *      16,250 (1,800 s), which fits only if the tail is released, is
 *      refused; once the tail is metered the day is within its limit. Its
 *      snapshot is 1 TiB, billed from the pause on, on no hold: a kept
 *      tail takes nothing after its event (sql/0056). No hold_outrun.
 *   2. A sandbox paused and woken again before its tail is metered: the
 *      tail lands on the paused lease's hold, not on the new lease's.
 *   3. A pause after the lease end (not yet swept) by more than the grace:
 *      the time past the end is an outrun and is reported.
 *   4. One within the grace: settled as at the lease end, not reported.
 *   5. A sample past the lease end taken in before the sweep (its clock,
 *      the engine's, is still within the lease; the database's is a day
 *      past it) outruns the still open hold: not reported either, as the
 *      sweep would have had it (sql/0044). */
static void test_tail(void)
{
	struct apitest t;
	struct apitest_resp r;
	char acc[65], key[65], key2[65], token[APITEST_TOKEN_MAX], off[32], at[40];
	const char *args[] = {"--clock-offset-s", off, "--lease-grace-s", "60", NULL};
	time_t now = apitest_now();
	long long h, l0, spent1, tail, spent2, snapshot;
	PGconn *db;

	snprintf(off, sizeof(off), "%lld", cu_offset_to(now - now % 86400 - 86400 + 3600));
	if (apitest_start(&t, "chk_tail", 1, args, NULL) < 0) {
		CHECK(0);
		return;
	}
	db = t.db.conn;
	CHECK(apitest_create_account(&t, "Tail", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 20000, NULL, key, token) == 0);
	CHECK(apitest_create_key(&t, acc, "full", -1, NULL, key2, token) == 0);

	CHECK_I64(cu_create(&t, 0, key, "tl-1", 1, 1024, 1000, NULL, &r), 200);
	h = cu_jint(r.json, "hold_micros");
	apitest_resp_release(&r);
	CHECK_I64(h, 9029); /* ceil(6,944.4) CPU + ceil(2,083.3) memory */
	l0 = cu_sql_int(db, "SELECT floor(extract(epoch FROM lease_starts_at)) FROM holds WHERE"
			    " sandbox_id = 'tl-1'");
	push_sample(&t, key, "tl-1", l0 + 1, "running", 0, 1048576);
	push_sample(&t, key, "tl-1", l0 + 301, "running", 300000000, 1048576);
	spent1 = cu_sql_int(db, "SELECT spent_micros FROM key_day_ledger WHERE key_id = '%s'", key);
	CHECK(spent1 > 2650 && spent1 < 2750);
	CHECK_I64(cu_sql_int(db, "SELECT consumed_micros FROM holds WHERE sandbox_id = 'tl-1'"),
		  spent1);

	/* Paused 240 s after the last sample: 24% of the lease's hold kept,
	 * rounded up, and a micro more for metering's per-resource rounding
	 * (sql/0034). */
	cu_rfc3339((time_t)(l0 + 541), at, sizeof(at));
	CHECK_I64(cu_event(&t, 0, "tl-1", "paused", at, &r), 200);
	CHECK_I64(cu_jint(r.json, "holds_settled"), 1);
	tail = cu_jint(r.json, "tail_held_micros");
	CHECK_I64(tail, (h * 240 + 999) / 1000 + 1);
	CHECK_I64(cu_jint(r.json, "released_micros"), h - spent1 - tail);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT held_micros FROM key_day_ledger WHERE key_id = '%s'", key),
		  tail);
	CHECK_I64(cu_held_mismatches(db), 0);
	/* The sandbox's detail shows the hold kept for the tail, settling at
	 * the pause. */
	CHECK_I64(sandbox_get(&t, token, "tl-1", &r), 200);
	CHECK_I64(cu_jint(r.json, "held_micros"), tail);
	CHECK_I64(cu_jint(r.json, "open_holds"), 1);
	CHECK_I64(json_integer_value(hold_field(&r, 0, "amount_micros")), spent1 + tail);
	CHECK_I64(json_integer_value(hold_field(&r, 0, "consumed_micros")), spent1);
	CHECK_I64(json_integer_value(hold_field(&r, 0, "remaining_micros")), tail);
	CHECK_STR(json_string_value(hold_field(&r, 0, "settles_at")), at);
	apitest_resp_release(&r);
	/* The budget the tail may still take is not free. */
	CHECK_I64(cu_create(&t, 0, key, "tl-2", 1, 1024, 1800, NULL, &r), 402);
	CHECK_STR(apitest_error_code(&r), "spending_limit_reached");
	apitest_resp_release(&r);
	CHECK_I64(cu_create(&t, 0, key, "tl-3", 1, 1024, 1000, NULL, &r), 200);
	apitest_resp_release(&r);
	/* The tail is metered (240 s at full CPU, then paused with a 1 TiB
	 * snapshot): the hold takes it all and closes; the day stays within
	 * its limit. */
	push_sample(&t, key, "tl-1", l0 + 551, "paused", 540000000, 1048576);
	wait_first_hold_closed(db, "tl-1");
	CHECK_I64(sandbox_get(&t, token, "tl-1", &r), 200);
	CHECK_I64(cu_jint(r.json, "held_micros"), 0);
	CHECK_I64(cu_jint(r.json, "open_holds"), 0);
	CHECK_I64(json_array_size(json_object_get(r.json, "holds")), 0);
	CHECK(json_is_array(json_object_get(r.json, "holds")));
	apitest_resp_release(&r);
	spent2 = cu_sql_int(db, "SELECT spent_micros FROM key_day_ledger WHERE key_id = '%s'", key);
	CHECK(spent2 - spent1 > tail + 200); /* the tail and about 284 of storage */
	/* The storage, the paused stretch's only money, is not the tail's. */
	snapshot = cu_sql_int(db, "SELECT sum(storage_micros) FROM usage_hourly"
				  " WHERE sandbox_id = 'tl-1'");
	CHECK(snapshot > 200);
	CHECK_I64(cu_sql_int(db,
			     "SELECT count(*) FROM holds WHERE sandbox_id = 'tl-1' AND status ="
			     " 'settled' AND consumed_micros = %lld AND amount_micros = %lld AND"
			     " reserved_micros = %lld",
			     spent2 - snapshot, spent1 + tail, h),
		  1);
	CHECK_I64(cu_sql_int(db, "SELECT held_micros FROM key_day_ledger WHERE key_id = '%s'", key),
		  h);
	CHECK_I64(cu_over_limit(db), 0);
	CHECK_I64(cu_held_mismatches(db), 0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox"), 0);

	/* 2. Paused 2 s after its first sample, woken, then metered. */
	CHECK_I64(cu_create(&t, 0, key2, "tw-1", 1, 1024, 600, NULL, &r), 200);
	apitest_resp_release(&r);
	l0 = cu_sql_int(db, "SELECT floor(extract(epoch FROM lease_starts_at)) FROM holds WHERE"
			    " sandbox_id = 'tw-1'");
	push_sample(&t, key2, "tw-1", l0 + 1, "running", 0, 0);
	while (cu_sql_int(db,
			  "SELECT count(*) FROM holds WHERE sandbox_id = 'tw-1' AND"
			  " extract(epoch FROM lease_starts_at) + 3.5 < extract(epoch FROM"
			  " now() + make_interval(secs => %s))",
			  off) == 0)
		cu_sleep_ms(100);
	cu_rfc3339((time_t)(l0 + 3), at, sizeof(at));
	CHECK_I64(cu_event(&t, 0, "tw-1", "paused", at, &r), 200);
	CHECK(cu_jint(r.json, "tail_held_micros") > 0);
	apitest_resp_release(&r);
	CHECK_I64(cu_wake(&t, 0, "tw-1", 600, "\"idempotency_key\":\"tw-wake\"", &r), 200);
	apitest_resp_release(&r);
	push_sample(&t, key2, "tw-1", l0 + 4, "paused", 2000000, 0);
	wait_first_hold_closed(db, "tw-1");
	spent2 =
	    cu_sql_int(db, "SELECT spent_micros FROM key_day_ledger WHERE key_id = '%s'", key2);
	CHECK(spent2 > 0);
	CHECK_I64(cu_sql_int(db, "SELECT consumed_micros FROM holds WHERE sandbox_id = 'tw-1'"
				 " ORDER BY hold_id LIMIT 1"),
		  spent2);
	CHECK_I64(cu_sql_int(db, "SELECT consumed_micros FROM holds WHERE sandbox_id = 'tw-1'"
				 " ORDER BY hold_id DESC LIMIT 1"),
		  0);
	CHECK_I64(cu_held_mismatches(db), 0);

	/* 3. A 60 s lease paused 150 s in, before the sweeper came to it
	 * (90 s past the lease end, more than the 60 s grace): only the tail
	 * up to the lease end is kept, and the running time after it outruns
	 * the hold, which is reported. */
	CHECK_I64(cu_create(&t, 0, key2, "tl-4", 1, 1024, 60, NULL, &r), 200);
	apitest_resp_release(&r);
	l0 = cu_sql_int(db, "SELECT floor(extract(epoch FROM lease_starts_at)) FROM holds WHERE"
			    " sandbox_id = 'tl-4'");
	push_sample(&t, key2, "tl-4", l0 + 1, "running", 0, 0);
	cu_rfc3339((time_t)(l0 + 150), at, sizeof(at));
	CHECK_I64(cu_event(&t, 0, "tl-4", "paused", at, &r), 200);
	CHECK_I64(cu_jint(r.json, "tail_held_micros"),
		  cu_sql_int(db, "SELECT amount_micros FROM holds WHERE sandbox_id = 'tl-4'"));
	apitest_resp_release(&r);
	push_sample(&t, key2, "tl-4", l0 + 160, "paused", 149000000, 0);
	wait_first_hold_closed(db, "tl-4");
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
				 " AND payload->>'sandbox_id' = 'tl-4' AND payload->>'reason' ="
				 " 'hold_consumed' AND (payload->>'outrun_micros')::bigint > 500"),
		  1);

	/* 4. The same, paused 30 s past the lease end (within the grace): a
	 * control plane a moment late, not an outrun. The hold is settled as
	 * at the lease end (as the sweeper would have), and the running time
	 * after it is spent without a hold and not reported. */
	CHECK_I64(cu_create(&t, 0, key2, "tl-5", 1, 1024, 60, NULL, &r), 200);
	apitest_resp_release(&r);
	l0 = cu_sql_int(db, "SELECT floor(extract(epoch FROM lease_starts_at)) FROM holds WHERE"
			    " sandbox_id = 'tl-5'");
	push_sample(&t, key2, "tl-5", l0 + 1, "running", 0, 0);
	cu_rfc3339((time_t)(l0 + 90), at, sizeof(at));
	CHECK_I64(cu_event(&t, 0, "tl-5", "paused", at, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'tl-5' AND"
				 " settles_at = lease_ends_at"),
		  1);
	push_sample(&t, key2, "tl-5", l0 + 100, "paused", 89000000, 0);
	wait_first_hold_closed(db, "tl-5");
	/* The piece from l0 + 1 to the event is cut at the lease end: the
	 * hold takes its share up to there, within its amount. */
	CHECK(cu_sql_int(db, "SELECT amount_micros - consumed_micros FROM holds WHERE sandbox_id ="
			     " 'tl-5' AND consumed_micros > 0") >= 0);
	CHECK(cu_sql_int(db, "SELECT (SELECT sum(total_micros) FROM usage_hourly WHERE"
			     " sandbox_id = 'tl-5') - consumed_micros FROM holds WHERE sandbox_id ="
			     " 'tl-5'") > 0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
				 " AND payload->>'sandbox_id' = 'tl-5'"),
		  0);
	CHECK_I64(cu_held_mismatches(db), 0);

	/* 5. A 60 s lease metered 100 s at full CPU before the sweep: the
	 * open hold covers its lease's time only, and the running time past
	 * the end is spent on no hold (sql/0060), as after the sweep; no
	 * event is sent for it. */
	CHECK_I64(cu_create(&t, 0, key2, "tl-6", 1, 1024, 60, NULL, &r), 200);
	CHECK_I64(cu_jint(r.json, "hold_micros"), 542); /* 417 CPU + 125 memory */
	apitest_resp_release(&r);
	l0 = cu_sql_int(db, "SELECT floor(extract(epoch FROM lease_starts_at)) FROM holds WHERE"
			    " sandbox_id = 'tl-6'");
	push_sample(&t, key2, "tl-6", l0 + 1, "running", 0, 0);
	push_sample(&t, key2, "tl-6", l0 + 100, "running", 99000000, 0);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'tl-6' AND"
				 " status = 'open' AND settles_at IS NULL AND consumed_micros > 0"
				 " AND consumed_micros <= amount_micros"),
		  1);
	CHECK(cu_sql_int(db, "SELECT (SELECT sum(total_micros) FROM usage_hourly WHERE"
			     " sandbox_id = 'tl-6') - consumed_micros FROM holds WHERE sandbox_id ="
			     " 'tl-6'") > 300);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
				 " AND payload->>'sandbox_id' = 'tl-6'"),
		  0);
	CHECK_I64(cu_held_mismatches(db), 0);

	/* 6. A 60 s lease sampled past its end and grace while it ran (a
	 * collector catching up, or an agent's clock ahead), then paused
	 * there before the sweep: the running time past the end is on no
	 * hold (5.), the pause closes the hold, its tail all metered, and the
	 * lease is watched as the sweep would have (sql/0061): once the grace
	 * has passed, the outrun step reports it as lease_ended. */
	CHECK_I64(cu_create(&t, 0, key2, "tl-7", 1, 1024, 60, NULL, &r), 200);
	apitest_resp_release(&r);
	l0 = cu_sql_int(db, "SELECT floor(extract(epoch FROM lease_starts_at)) FROM holds WHERE"
			    " sandbox_id = 'tl-7'");
	push_sample(&t, key2, "tl-7", l0 + 1, "running", 0, 0);
	push_sample(&t, key2, "tl-7", l0 + 150, "running", 149000000, 0);
	cu_rfc3339((time_t)(l0 + 150), at, sizeof(at));
	CHECK_I64(cu_event(&t, 0, "tl-7", "paused", at, &r), 200);
	CHECK_I64(cu_jint(r.json, "tail_held_micros"), 0);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'tl-7' AND"
				 " status <> 'open' AND consumed_micros <= amount_micros"),
		  1);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
				 " AND payload->>'sandbox_id' = 'tl-7'"),
		  0);
	/* The sweeper's outrun step, as at the grace's end: meterd's own
	 * sweeper, on the check engine's clock, is seconds past l0, and comes
	 * to this lease only 120 s after it starts. */
	CHECK(cu_sql_int(db, "SELECT meter_leases_outrun(to_timestamp(%lld), 60, 1000)",
			 l0 + 200) >= 1);
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
				 " AND payload->>'sandbox_id' = 'tl-7'"
				 " AND payload->>'reason' = 'lease_ended'"),
		  1);
	/* 3.'s lease, watched by its late pause too, was reported as
	 * hold_consumed: not again. */
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM webhook_outbox WHERE type = 'hold_outrun'"
				 " AND payload->>'sandbox_id' = 'tl-4'"),
		  1);
	CHECK_I64(cu_held_mismatches(db), 0);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
}

/* A stopped sandbox reports no more samples: its tail's hold is released
 * lease_grace_s (2 s) after the stop only once its host has reported past
 * the stop without it (a sample of another sandbox, or a document with
 * none: the host has nothing left running); until then (the host may be
 * behind) it stays. */
static void test_tail_host(struct apitest *t, const char *key)
{
	struct apitest_resp r;
	PGconn *db = t->db.conn;
	time_t t0;
	char at[40];

	CHECK_I64(cu_create(t, 0, key, "gw-1", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "gw-2", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(t, 0, key, "gw-3", 1, 1024, 900, NULL, &r), 200);
	apitest_resp_release(&r);
	/* After the creates: the stop (t0 + 1) comes after the leases start. */
	t0 = apitest_now();
	push_sample(t, key, "gw-1", t0, "running", 0, 0);
	push_sample_from(t, "h-empty", key, "gw-3", t0, "running", 0, 0);
	cu_rfc3339(t0 + 1, at, sizeof(at));
	CHECK_I64(cu_event(t, 0, "gw-1", "stopped", at, &r), 200);
	CHECK(cu_jint(r.json, "tail_held_micros") > 0);
	apitest_resp_release(&r);
	CHECK_I64(cu_event(t, 0, "gw-3", "stopped", at, &r), 200);
	CHECK(cu_jint(r.json, "tail_held_micros") > 0);
	apitest_resp_release(&r);
	cu_sleep_ms(4500); /* the grace and more: the hosts are still at t0 */
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id IN ('gw-1', 'gw-3')"
				 " AND status = 'open' AND settles_at IS NOT NULL"),
		  2);
	push_sample(t, key, "gw-2", t0 + 2, "running", 0, 0);
	wait_first_hold_closed(db, "gw-1");
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'gw-1' AND status"
				 " = 'settled'"),
		  1);
	push_empty(t, "h-empty", t0 + 2);
	wait_first_hold_closed(db, "gw-3");
	CHECK_I64(cu_sql_int(db, "SELECT count(*) FROM holds WHERE sandbox_id = 'gw-3' AND status"
				 " = 'settled'"),
		  1);
	/* Their stretches to the stop, from the create (after t0) or t0, were
	 * metered by the sweeper before the holds closed: at the floor, and
	 * on the holds. */
	for (int i = 0; i < 2; i++) {
		const char *sb = i == 0 ? "gw-1" : "gw-3";
		long long run = cu_sql_int(
		    db,
		    "SELECT %lld - (extract(epoch FROM GREATEST(created_at, to_timestamp(%lld)))"
		    " * 1000000)::bigint FROM sandboxes WHERE sandbox_id = '%s'",
		    (long long)(t0 + 1) * 1000000, (long long)t0, sb);

		CHECK(run > 0);
		CHECK_I64(cu_sql_int(db,
				     "SELECT sum(running_usec) FROM usage_hourly WHERE sandbox_id"
				     " = '%s' AND cpu_billed_mcus = 50 * running_usec AND"
				     " memory_mibus = 1024 * running_usec",
				     sb),
			  run);
		CHECK_I64(cu_sql_int(db,
				     "SELECT count(*) FROM samples WHERE sandbox_id = '%s' AND"
				     " host_id = 'lifecycle.stop' AND state = 'stopped'",
				     sb),
			  1);
		CHECK_I64(cu_sql_int(db,
				     "SELECT (SELECT sum(consumed_micros) FROM holds WHERE"
				     " sandbox_id = '%s') - (SELECT sum(total_micros) FROM"
				     " usage_hourly WHERE sandbox_id = '%s')",
				     sb, sb),
			  0);
	}
	CHECK_I64(cu_held_mismatches(db), 0);
}

/* America/New_York, 2026-03-07 23:30 EST (04:30Z on the 8th): the 8th has
 * 23 hours (clocks go forward at 02:00), so a 24 h lease touches three days:
 * ~30 min, 23 h, ~30 min. A limit that fits the first two days but not the
 * third refuses the whole check. */
static void test_new_york(void)
{
	struct apitest t;
	struct apitest_resp r;
	char acc[65], key[65], token[APITEST_TOKEN_MAX], sql[256];
	json_t *parts;

	if (start_at(&t, "chk_newyork", utc(2026, 3, 8, 4, 30)) < 0) {
		CHECK(0);
		return;
	}
	CHECK(apitest_create_account(&t, "NY", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 800000, "America/New_York", key, token) == 0);
	CHECK_I64(cu_create(&t, 0, key, "ny-1", 1, 1024, 86400, NULL, &r), 200);
	parts = json_object_get(r.json, "parts");
	CHECK_I64(json_array_size(parts), 3);
	CHECK_STR(json_string_value(json_object_get(json_array_get(parts, 0), "day")),
		  "2026-03-07");
	CHECK_STR(json_string_value(json_object_get(json_array_get(parts, 1), "day")),
		  "2026-03-08");
	CHECK_STR(json_string_value(json_object_get(json_array_get(parts, 2), "day")),
		  "2026-03-09");
	CHECK_I64(cu_jint(json_array_get(parts, 1), "hold_micros"), 747500); /* 23 h exactly */
	check_replay(&t, key, "ny-1", 1, 1024, 86400, &r);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(DISTINCT day) FROM holds"), 3);
	/* Meter 792,500 on the 8th (the 747,500 hold consumed, 45,000 beyond
	 * it): a 1 h lease from 23:30 on the 7th fits the 7th but not the 8th
	 * (792,500 committed of 800,000), so it is refused whole. */
	snprintf(sql, sizeof(sql),
		 "SELECT * FROM meter_ledger_spend(ARRAY['%s'], ARRAY['%s'], ARRAY['ny-1'],"
		 " ARRAY['2026-03-08'::date], ARRAY[792500::bigint])",
		 acc, key);
	cu_sql(t.db.conn, sql);
	CHECK_I64(cu_create(&t, 0, key, "ny-2", 1, 1, 3600, NULL, &r), 402);
	CHECK_STR(apitest_error_code(&r), "spending_limit_reached");
	CHECK_STR(json_string_value(json_object_get(json_object_get(r.json, "error"), "day")),
		  "2026-03-08");
	/* The refusal's figures are that day's: hold_micros the lease's part
	 * on the 8th (half an hour and the seconds the test has run since the
	 * engine's clock was set), not the whole hour. */
	{
		long long part = cu_errint(&r, "hold_micros"),
			  whole = cu_errint(&r, "lease_max_cost_micros");

		printf("ny-2 refused: the 8th's part %lld of %lld\n", part, whole);
		CHECK(part < whole && 2 * part >= whole);
		CHECK_I64(cu_errint(&r, "day_spent_micros"), 792500);
		CHECK_I64(cu_errint(&r, "daily_limit_micros"), 800000);
	}
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds WHERE sandbox_id = 'ny-2'"), 0);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT held_micros FROM key_day_ledger WHERE day ="
					" '2026-03-08'"),
		  0);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
}

/* Atlantic/Azores, 2026-10-25 00:30Z: 00:30 local, summer time. At 01:00
 * the clocks go back to 00:00, so the 25th (local) has 25 hours, from
 * 00:00Z to 01:00Z on the 26th, and "now" is in its first hour, which
 * comes twice. A 24 h lease from now fits in the 25th alone. */
static void test_azores(void)
{
	struct apitest t;
	struct apitest_resp r;
	char acc[65], key[65], token[APITEST_TOKEN_MAX];

	if (start_at(&t, "chk_azores", utc(2026, 10, 25, 0, 30)) < 0) {
		CHECK(0);
		return;
	}
	CHECK(apitest_create_account(&t, "Azores", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 10000000, "Atlantic/Azores", key, token) == 0);
	CHECK_I64(cu_create(&t, 0, key, "az-1", 1, 1024, 86400, NULL, &r), 200);
	CHECK_STR(apitest_json_str(&r, "day"), "2026-10-25");
	CHECK_I64(json_array_size(json_object_get(r.json, "parts")), 1);
	CHECK_I64(cu_jint(r.json, "hold_micros"), 780000);
	apitest_resp_release(&r);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
}

/* Pacific/Apia, 2011-12-29 22:30 local (-10, 08:30Z on the 30th): at
 * midnight the zone went to +14, straight to the 31st, so the 30th has no
 * start of its own (the same as the 31st's). A 4 h lease holds 1.5 h
 * against the 29th and 2.5 h against the 31st, nothing against the 30th;
 * every check of the days before it was once refused 400 "lease cannot be
 * split into days". */
static void test_apia(void)
{
	struct apitest t;
	struct apitest_resp r;
	char acc[65], key[65], token[APITEST_TOKEN_MAX];
	json_t *parts;

	if (start_at(&t, "chk_apia", utc(2011, 12, 30, 8, 30)) < 0) {
		CHECK(0);
		return;
	}
	CHECK(apitest_create_account(&t, "Apia", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 10000000, "Pacific/Apia", key, token) == 0);
	CHECK_I64(cu_create(&t, 0, key, "apia-1", 1, 1024, 4 * 3600, NULL, &r), 200);
	CHECK_STR(apitest_json_str(&r, "day"), "2011-12-29");
	parts = json_object_get(r.json, "parts");
	CHECK_I64(json_array_size(parts), 2);
	CHECK_STR(json_string_value(json_object_get(json_array_get(parts, 0), "day")),
		  "2011-12-29");
	CHECK_STR(json_string_value(json_object_get(json_array_get(parts, 1), "day")),
		  "2011-12-31");
	{
		/* The seconds since the clock was set move the cut, not the sum. */
		long long first = cu_jint(json_array_get(parts, 0), "hold_micros"),
			  second = cu_jint(json_array_get(parts, 1), "hold_micros");

		printf("apia: %lld on the 29th, %lld on the 31st\n", first, second);
		CHECK(first <= 48750 && second >= 81250);
		CHECK(first + second >= 130000 && first + second <= 130002); /* each rounded up */
	}
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds WHERE day = '2011-12-30'"), 0);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(DISTINCT day) FROM holds"), 2);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
}

/* In every time zone PostgreSQL knows, around every change of offset in
 * 2026: the instant meter_day_start gives is on the day (meter_key_day),
 * and the instant before it is not. */
static void test_day_starts(PGconn *conn)
{
	static const char sql[] =
	    "WITH zd AS (SELECT z.name AS z, g::date AS d"
	    "  FROM pg_timezone_names z,"
	    "   generate_series('2026-01-01'::date, '2026-12-31'::date, '1 day') g"
	    "  WHERE z.name NOT LIKE 'posix/%' AND z.name NOT LIKE 'right/%'"
	    /* Days within a day of a change (a naive 72 h window is not 72 h). */
	    "   AND ((g::date + 2)::timestamp AT TIME ZONE z.name)"
	    "     - ((g::date - 1)::timestamp AT TIME ZONE z.name) <> interval '72 hours')"
	    " SELECT count(*) * 1000000 + count(*) FILTER ("
	    "  WHERE meter_key_day(z, meter_day_start(z, d)) <> d"
	    "   OR meter_key_day(z, meter_day_start(z, d) - interval '1 microsecond') >= d)"
	    " FROM zd";
	long long v = cu_sql_int(conn, "%s", sql);

	printf("day starts: %lld zone-days around a change of offset checked\n", v / 1000000);
	CHECK(v / 1000000 > 100);
	CHECK_I64(v % 1000000, 0);
}

/* A stopped lease's open tail hold bounds a new price version only up to
 * its stop (what it still covers), not to the lease's end: a day-long
 * lease stopped at once lets a version start a minute ahead while its
 * tail is still held (a grace of an hour keeps the sweeper off it). */
static void test_price_after_tails(void)
{
	static const char *const env[] = {"METER_LEASE_GRACE_S=3600", NULL};
	struct apitest t;
	struct apitest_resp r;
	char acc[65], key[65], token[APITEST_TOKEN_MAX], at[64], earliest[64];

	if (apitest_start(&t, "chk_pricetail", 1, NULL, env) < 0) {
		CHECK(0);
		return;
	}
	CHECK(apitest_create_account(&t, "Price tail", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", -1, NULL, key, token) == 0);
	CHECK_I64(cu_create(&t, 0, key, "pt-1", 1, 1024, 86400, NULL, &r), 200);
	apitest_resp_release(&r);
	cu_rfc3339(apitest_now() + 60, at, sizeof(at));
	CHECK_I64(put_price_at(&t, at, earliest, sizeof(earliest)), 400); /* the lease is on */
	cu_rfc3339(apitest_now() + 2, at, sizeof(at)); /* after the lease's start */
	CHECK_I64(cu_event(&t, 0, "pt-1", "stopped", at, &r), 200);
	CHECK(cu_jint(r.json, "tail_held_micros") > 0);
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds WHERE sandbox_id = 'pt-1'"
					" AND status = 'open' AND settles_at IS NOT NULL"
					" AND lease_ends_at > now() + interval '23 hours'"),
		  1);
	cu_rfc3339(apitest_now() + 60, at, sizeof(at));
	CHECK_I64(put_price_at(&t, at, earliest, sizeof(earliest)), 201);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
}

/* A key without a limit is refused only when a day's held total would
 * pass 64 bits: at the price book's highest rates, day-long leases of the
 * largest size (each 417,792,000,000,000,000 micros) fill it, and the next
 * is refused as such, naming no limit, with nothing held. Each lease is cut
 * at the key's midnight, the larger part (half a day to all of it, by the
 * hour the test runs) on the day that fills first: 22 to 44 leases. */
static void test_held_overflow(void)
{
	struct apitest t;
	struct apitest_resp r;
	char acc[65], key[65], token[APITEST_TOKEN_MAX], sb[32];
	int allowed = 0;
	long long held;

	if (apitest_start(&t, "chk_overflow", 1, NULL, NULL) < 0) {
		CHECK(0);
		return;
	}
	CHECK(apitest_create_account(&t, "Overflow", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", -1, "UTC", key, token) == 0);
	CHECK_I64(cu_sql_int(t.db.conn,
			     "WITH v AS (INSERT INTO price_book (effective_from,"
			     " cpu_micros_per_vcpu_hour, memory_micros_per_gib_hour,"
			     " storage_micros_per_gib_hour, floor_millicores, free_sandbox_hours)"
			     " VALUES (now() - interval '1 second', 1000000000000, 1000000000000,"
			     " 1000000000000, 1000000, 0) RETURNING 1) SELECT count(*) FROM v"),
		  1);
	for (int i = 0; i < 64; i++) {
		snprintf(sb, sizeof(sb), "ov-%d", i);
		if (cu_create(&t, 0, key, sb, 1024, 16777216, 86400, NULL, &r) != 200) {
			apitest_resp_release(&r);
			break;
		}
		allowed++;
		apitest_resp_release(&r);
	}
	if (allowed < 22 || allowed > 44)
		fprintf(stderr, "held overflow: %d leases allowed\n", allowed);
	CHECK(allowed >= 22 && allowed <= 44);
	held = cu_sql_int(t.db.conn, "SELECT max(held_micros) FROM key_day_ledger");
	snprintf(sb, sizeof(sb), "ov-%d", allowed);
	CHECK_I64(cu_create(&t, 0, key, sb, 1024, 16777216, 86400, NULL, &r), 402);
	CHECK_STR(apitest_error_code(&r), "spending_limit_reached");
	CHECK(strstr(r.body, "the key has no daily limit") != NULL);
	CHECK(
	    json_is_null(json_object_get(json_object_get(r.json, "error"), "daily_limit_micros")));
	apitest_resp_release(&r);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT max(held_micros) FROM key_day_ledger"), held);
	CHECK_I64(
	    cu_sql_int(t.db.conn, "SELECT count(*) FROM sandboxes WHERE sandbox_id = '%s'", sb), 0);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
}

int main(void)
{
	struct apitest t;
	char acc[65], key[65], token[APITEST_TOKEN_MAX], zone[16];
	const char *env[] = {"METER_LEASE_GRACE_S=2", NULL};

	if (apitest_start(&t, "checks", 1, NULL, env) < 0)
		return 1;
	CHECK(apitest_create_account(&t, "Checks", acc) == 0);
	/* Keys at their midday: no lease of this part crosses a midnight,
	 * whenever it runs (the tests of other zones below pin the engine's
	 * clock instead). */
	CHECK(apitest_create_key(&t, acc, "full", -1, apitest_midday_zone(zone, sizeof(zone)), key,
				 token) == 0);
	test_idempotency(&t, key);
	test_other_key_retry(&t, acc);
	test_max_cost(&t, key);
	test_revoked(&t, acc);
	test_read_only(&t, acc);
	test_limit(&t, acc);
	test_limit_put(&t, acc);
	test_refusal_kept(&t, acc);
	test_wake_and_events(&t, key);
	test_wake_refused(&t, acc);
	test_errors_not_kept(&t, key);
	test_event_ahead(&t, key);
	test_default_key_named(&t, key);
	test_unattributed(&t, key);
	test_wake_after_stopped_sample(&t, key);
	test_renewal_and_skew(&t, key);
	test_wake_replay_holds(&t, key);
	test_events_during_wake(&t, key);
	test_events_beside_references(&t, key);
	test_lease_end(&t, acc);
	test_validation(&t, key);
	test_day_starts(t.db.conn);
	test_tail_host(&t, key);
	test_tail_after_stopped_sample(&t, key);
	/* Its holds are split at UTC's midnight: a key of the default zone. */
	CHECK(apitest_create_key(&t, acc, "full", -1, NULL, key, token) == 0);
	test_watch_midnight(&t, acc, key);
	test_price_versions(&t, key);
	test_price_after_leases(&t, key);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	test_berlin();
	test_new_york();
	test_azores();
	test_apia();
	test_tail();
	test_price_after_tails();
	test_held_overflow();
	return check_done();
}
