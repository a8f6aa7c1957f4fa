/* API: a database short of resources (disk full, out of memory: SQLSTATE
 * class 53). A trigger of the test's database raises disk_full (53100),
 * as the server does when it cannot extend a table's file, on every new
 * sandbox, and then on every new account:
 *
 * - create checks, sent concurrently, are each answered 503
 *   metering_unavailable with reason insufficient_resources and the
 *   SQLSTATE, leave no sandbox and no hold, and are logged a line at most
 *   every 10 s (not one per check, which the server would make: each
 *   batch was decided again one check at a time);
 * - /readyz answers 503 with the same reason, since no check could be held;
 * - a check that holds nothing is still answered: a replay of one allowed
 *   before, its stored answer; another with a new idempotency key, 409
 *   sandbox_exists; one over its key's limit, 402; and /readyz stays 503;
 * - another write (an account) is answered 503 with that reason too, and
 *   its failure is logged in the same few lines;
 * - once the database takes writes again, the next check is allowed and
 *   /readyz is 200 at once: a check held ends the state, and says so in
 *   the log. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks_util.h"

#define CLIENTS 8
#define CHECKS	25 /* each */
#define HELD	"SELECT sum(held_micros) FROM key_day_ledger WHERE key_id = '%s'"

static struct apitest t;
static char acc[65], key[65], tight[65], token[APITEST_TOKEN_MAX];

struct client {
	pthread_t thread;
	int id, short_503, other;
};

static void *client_main(void *arg)
{
	struct client *c = arg;

	for (int i = 0; i < CHECKS; i++) {
		struct apitest_resp r;
		char sbx[64];
		json_t *err;

		snprintf(sbx, sizeof(sbx), "sbx_short_%d_%d", c->id, i);
		cu_create(&t, 0, key, sbx, 1, 512, 60, NULL, &r);
		err = r.json ? json_object_get(r.json, "error") : NULL;
		if (r.status == 503 &&
		    strcmp(apitest_jstr(err, "reason"), "insufficient_resources") == 0 &&
		    strcmp(apitest_jstr(err, "sqlstate"), "53100") == 0)
			c->short_503++;
		else
			c->other++;
		apitest_resp_release(&r);
	}
	return NULL;
}

/* GET /readyz: its status, and its error's reason into reason. */
static long readyz(char *reason, size_t len)
{
	struct apitest_resp r;
	long status;

	apitest_call(&t, 0, "GET", "/readyz", NULL, NULL, &r);
	status = r.status;
	snprintf(reason, len, "%s",
		 r.json ? apitest_jstr(json_object_get(r.json, "error"), "reason") : "");
	apitest_resp_release(&r);
	return status;
}

static long long log_lines(const char *needle)
{
	char *log = apitest_read_log(&t, 0);
	long long n = 0;

	for (const char *p = log; p && (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	free(log);
	return n;
}

int main(void)
{
	struct client c[CLIENTS];
	struct apitest_resp r;
	char reason[64];
	int short_503 = 0, other = 0;
	long long held_before;

	if (apitest_start(&t, "db_short", 1, NULL, NULL) < 0)
		return 1;
	CHECK(apitest_create_account(&t, "Short", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", -1, NULL, key, token) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 1, NULL, tight, token) == 0);
	CHECK_I64(cu_create(&t, 0, tight, "sbx_tight_0", 1, 512, 60, NULL, &r), 402);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(&t, 0, key, "sbx_before", 1, 512, 60, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(readyz(reason, sizeof(reason)), 200);
	held_before = cu_sql_int(t.db.conn, HELD, key);
	CHECK(held_before > 0);

	cu_sql(t.db.conn,
	       "CREATE FUNCTION t_disk_full() RETURNS trigger LANGUAGE plpgsql AS"
	       " $$BEGIN RAISE EXCEPTION 'could not extend file: No space left on device'"
	       " USING ERRCODE = 'disk_full'; END$$;"
	       "CREATE TRIGGER t_disk_full BEFORE INSERT ON sandboxes"
	       " FOR EACH ROW EXECUTE FUNCTION t_disk_full()");
	memset(c, 0, sizeof(c));
	for (int i = 0; i < CLIENTS; i++) {
		c[i].id = i;
		CHECK(pthread_create(&c[i].thread, NULL, client_main, &c[i]) == 0);
	}
	for (int i = 0; i < CLIENTS; i++) {
		pthread_join(c[i].thread, NULL);
		short_503 += c[i].short_503;
		other += c[i].other;
	}
	printf("db_short: %d checks on a full disk: %d answered 503 insufficient_resources, %d "
	       "otherwise\n",
	       CLIENTS * CHECKS, short_503, other);
	CHECK_I64(short_503, CLIENTS * CHECKS);
	CHECK_I64(other, 0);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM sandboxes WHERE sandbox_id LIKE "
					"'sbx_short_%%'"),
		  0);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK_I64(cu_sql_int(t.db.conn, HELD, key), held_before);
	printf("db_short: %lld log lines for them\n", log_lines("short of resources"));
	CHECK(log_lines("short of resources") >= 1);
	CHECK(log_lines("short of resources") <= 2);
	CHECK_I64(log_lines("batch of 1 failed"), 0);
	CHECK_I64(readyz(reason, sizeof(reason)), 503);
	CHECK_STR(reason, "insufficient_resources");

	/* A check that writes nothing is still answered: the one allowed
	 * before, sent again, is its stored answer; with another idempotency
	 * key, the sandbox it made exists. */
	CHECK_I64(cu_create(&t, 0, key, "sbx_before", 1, 512, 60, NULL, &r), 200);
	CHECK(r.json && json_is_true(json_object_get(r.json, "allowed")));
	apitest_resp_release(&r);
	CHECK_I64(
	    cu_create(&t, 0, key, "sbx_before", 1, 512, 60, "\"idempotency_key\":\"other\"", &r),
	    409);
	CHECK_STR(apitest_error_code(&r), "sandbox_exists");
	apitest_resp_release(&r);
	/* A refusal (a key whose limit is 1 µ$) writes no hold either. */
	CHECK_I64(cu_create(&t, 0, tight, "sbx_tight_1", 1, 512, 60, NULL, &r), 402);
	apitest_resp_release(&r);
	/* None of them held anything: still not ready. */
	CHECK_I64(readyz(reason, sizeof(reason)), 503);

	/* Another write: an account, its table full too. */
	cu_sql(t.db.conn, "CREATE TRIGGER t_disk_full BEFORE INSERT ON accounts"
			  " FOR EACH ROW EXECUTE FUNCTION t_disk_full()");
	CHECK(apitest_call(&t, 0, "POST", "/v1/accounts", t.operator_token, "{\"name\":\"Full\"}",
			   &r) == 0);
	CHECK_I64(r.status, 503);
	CHECK_STR(apitest_error_code(&r), "metering_unavailable");
	CHECK_STR(apitest_jstr(json_object_get(r.json, "error"), "reason"),
		  "insufficient_resources");
	apitest_resp_release(&r);
	/* Every failure so is in the few lines that count them (the
	 * sweeper's, once a second, included), none on a line of its own. */
	CHECK(log_lines("short of resources") <= 2);
	CHECK_I64(log_lines("53100"), log_lines("short of resources"));

	/* Space again: the next check is held, and ready at once. */
	cu_sql(t.db.conn, "DROP TRIGGER t_disk_full ON sandboxes;"
			  "DROP TRIGGER t_disk_full ON accounts");
	CHECK_I64(cu_create(&t, 0, key, "sbx_after", 1, 512, 60, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(readyz(reason, sizeof(reason)), 200);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	/* And the end is logged, with what the last line did not count. */
	CHECK_I64(log_lines("checks are held again"), 1);

	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	return check_done();
}
