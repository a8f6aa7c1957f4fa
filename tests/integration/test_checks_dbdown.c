/* API: the database stopped in the middle of serving checks. A cluster of
 * the test's own (scripts/pg.sh with METER_PG_DIR / METER_PG_PORT) is
 * stopped under a running meterd: checks fail closed with 503
 * metering_unavailable, quickly and without a hold; once the cluster is back
 * the same meterd process decides checks again by itself, and /readyz and
 * the checks agree: ready means the next check is decided, and a decided
 * check means ready, and the other routes follow within a second; the
 * webhook's backlog gauges are counted again. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "checks_util.h"

#define CLASSIC "meter_check_batches_total{path=\"classic\"}"

static char pg_dir[512];
static int pg_port;

/* A port nothing listens on now (the kernel's pick). */
static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* scripts/pg.sh ACTION for the test's cluster; its stdout to out_path
 * (or /dev/null). Returns the exit status. */
static int pg(const char *action, const char *out_path)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "METER_PG_DIR='%s' METER_PG_PORT=%d bash '%s/scripts/pg.sh' %s >'%s'", pg_dir,
		 pg_port, METER_SOURCE_DIR, action, out_path ? out_path : "/dev/null");
	return system(cmd);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* GET /readyz's status. */
static long readyz(struct apitest *t)
{
	struct apitest_resp r;
	long status;

	apitest_call(t, 0, "GET", "/readyz", NULL, NULL, &r);
	status = r.status;
	apitest_resp_release(&r);
	return status;
}

/* GET /readyz until it answers want or secs pass; its last status. */
static long readyz_within(struct apitest *t, long want, double secs)
{
	double t0 = now_s();
	long got = readyz(t);

	while (got != want && now_s() - t0 < secs) {
		cu_sleep_ms(100);
		got = readyz(t);
	}
	return got;
}

int main(void)
{
	struct apitest t;
	struct apitest_resp r;
	char url_file[600], acc[65], key[65], token[APITEST_TOKEN_MAX], sb[64], zone[16];
	const char *bin = getenv("METER_BIN_DIR");
	double t0;
	int recovered = 0;
	long long classic;

	snprintf(pg_dir, sizeof(pg_dir), "%s/test-dbdown-pg-%d", bin ? bin : "/tmp", (int)getpid());
	snprintf(url_file, sizeof(url_file), "%s.url", pg_dir);
	pg_port = free_port();
	if (pg_port < 0 || pg("start", url_file) != 0) {
		fprintf(stderr, "cannot start a cluster of our own\n");
		return 1;
	}
	setenv("METER_TEST_PG_URL_FILE", url_file, 1);
	if (apitest_start(&t, "dbdown", 1, NULL, NULL) < 0) {
		pg("destroy", NULL);
		return 1;
	}
	CHECK(apitest_create_account(&t, "Outage", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 10000000, apitest_midday_zone(zone, sizeof(zone)),
				 key, token) == 0);
	CHECK_I64(cu_create(&t, 0, key, "up-1", 1, 1024, 600, NULL, &r), 200);
	apitest_resp_release(&r);

	/* Stop the database under the running server. */
	classic = apitest_metric(&t, 0, CLASSIC);
	CHECK(pg("stop", NULL) == 0);
	for (int i = 0; i < 5; i++) {
		/* The wake first: the check that comes after a backoff is
		 * the one that reaches the engine's batcher, and a wake goes
		 * the classic way. */
		CHECK_I64(cu_wake(&t, 0, "up-1", 60, NULL, &r), 503);
		apitest_resp_release(&r);
		snprintf(sb, sizeof(sb), "down-%d", i);
		t0 = now_s();
		CHECK_I64(cu_create(&t, 0, key, sb, 1, 1024, 600, NULL, &r), 503);
		CHECK_STR(apitest_error_code(&r), "metering_unavailable");
		CHECK(now_s() - t0 < 6.0); /* fails fast, never hangs */
		apitest_resp_release(&r);
		cu_sleep_ms(250);
	}
	/* Classic batches met the database down, and none was decided: none
	 * counted. The engine's gauge is down, and its log says why. */
	CHECK_I64(apitest_metric(&t, 0, CLASSIC), classic);
	CHECK_I64(apitest_metric(&t, 0, "meter_checks_db_up"), 0);
	{
		char *log = apitest_read_log(&t, 0);

		CHECK(log && strstr(log, "checks: database connection lost (") &&
		      strstr(log, "); checks fail closed until it is back"));
		free(log);
	}

	/* Back: the same process recovers on its own (backoff at most 5 s). */
	CHECK(pg("start", "/dev/null") == 0);
	t0 = now_s();
	for (int i = 0; i < 200 && now_s() - t0 < 30.0; i++) {
		snprintf(sb, sizeof(sb), "back-%d", i);
		cu_create(&t, 0, key, sb, 1, 1024, 600, NULL, &r);
		if (r.status == 200)
			recovered = 1;
		else
			CHECK_I64(r.status, 503);
		apitest_resp_release(&r);
		if (recovered)
			break;
		cu_sleep_ms(250);
	}
	CHECK(recovered);
	CHECK_I64(apitest_metric(&t, 0, "meter_checks_db_up"), 1);

	/* A restart while no check runs: the engine's connection closed
	 * while idle is replaced at the next check, which is decided (not
	 * 503 until a backoff ends), and so are the pool's, which the
	 * account and key above used: /readyz says so at once. */
	CHECK_I64(readyz(&t), 200); /* the pool holds a connection */
	CHECK(pg("stop", NULL) == 0);
	CHECK(pg("start", "/dev/null") == 0);
	CHECK_I64(readyz(&t), 200);
	cu_sleep_ms(500);
	CHECK_I64(cu_create(&t, 0, key, "restarted-1", 1, 1024, 600, NULL, &r), 200);
	apitest_resp_release(&r);
	classic = apitest_metric(&t, 0, CLASSIC);
	CHECK_I64(cu_wake(&t, 0, "restarted-1", 600, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(apitest_metric(&t, 0, CLASSIC), classic + 1); /* one decided */

	/* Down for 4 s with checks and /readyz asked all along: the engine
	 * and the pool each back off for seconds, out of step. Once the
	 * database is back, whichever of the two finds it first, the other
	 * follows at once: /readyz 200, then the next check decided; a check
	 * decided, then /readyz 200. */
	for (int round = 0; round < 2; round++) {
		bool ready_first = round == 0;
		long got = 0;

		CHECK(pg("stop", NULL) == 0);
		for (int i = 0; i < 16; i++) {
			snprintf(sb, sizeof(sb), "gone-%d-%d", round, i);
			CHECK_I64(cu_create(&t, 0, key, sb, 1, 1024, 600, NULL, &r), 503);
			apitest_resp_release(&r);
			CHECK_I64(readyz(&t), 503);
			cu_sleep_ms(250);
		}
		CHECK(pg("start", "/dev/null") == 0);
		t0 = now_s();
		for (int i = 0; got != 200 && now_s() - t0 < 30.0; i++) {
			if (ready_first) {
				got = readyz(&t);
			} else {
				snprintf(sb, sizeof(sb), "again-%d-%d", round, i);
				got = cu_create(&t, 0, key, sb, 1, 1024, 600, NULL, &r);
				apitest_resp_release(&r);
			}
			if (got != 200)
				cu_sleep_ms(50);
		}
		CHECK_I64(got, 200);
		if (ready_first) {
			snprintf(sb, sizeof(sb), "ready-%d", round);
			CHECK_I64(cu_create(&t, 0, key, sb, 1, 1024, 600, NULL, &r), 200);
			apitest_resp_release(&r);
		} else {
			/* The pool's other users too, within the daemon's
			 * one-second watch, with no /readyz asked. */
			cu_sleep_ms(1500);
			apitest_call(&t, 0, "GET", "/v1/prices", t.control_plane_token, NULL, &r);
			CHECK_I64(r.status, 200);
			apitest_resp_release(&r);
			CHECK_I64(readyz(&t), 200);
		}
	}

	/* Back with no check and no /readyz asked: the engine connects again
	 * by itself within its backoff (at most 5 s), and its gauge says so. */
	CHECK(pg("stop", NULL) == 0);
	CHECK_I64(cu_create(&t, 0, key, "unseen-1", 1, 1024, 600, NULL, &r), 503);
	apitest_resp_release(&r);
	CHECK_I64(apitest_metric(&t, 0, "meter_checks_db_up"), 0);
	cu_sleep_ms(3000); /* a backoff or two spent on a database still down */
	CHECK_I64(apitest_metric(&t, 0, "meter_checks_db_up"), 0);
	CHECK(pg("start", "/dev/null") == 0);
	t0 = now_s();
	while (apitest_metric(&t, 0, "meter_checks_db_up") != 1 && now_s() - t0 < 15.0)
		cu_sleep_ms(100);
	printf("the engine was back %.1f s after the database, with no check\n", now_s() - t0);
	CHECK_I64(apitest_metric(&t, 0, "meter_checks_db_up"), 1);
	CHECK(now_s() - t0 < 8.0);
	CHECK_I64(cu_create(&t, 0, key, "unseen-2", 1, 1024, 600, NULL, &r), 200);
	apitest_resp_release(&r);

	/* A database that takes no writes (here default_transaction_read_only,
	 * as on a standby): /readyz says so, a check is 503 and holds
	 * nothing; writable again, both come back. */
	for (int on = 1; on >= 0; on--) {
		char sql[256];

		PQreset(t.db.conn);
		/* (A statement of its own: a transaction begun read-only
		 * stays so.) */
		CHECK_STR(testdb_exec_state(t.db.conn, "SET default_transaction_read_only = off"),
			  "00000");
		snprintf(sql, sizeof(sql),
			 on ? "ALTER DATABASE \"%s\" SET default_transaction_read_only = on"
			    : "ALTER DATABASE \"%s\" RESET default_transaction_read_only",
			 t.db.name);
		CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
		/* A restart, so that meterd's sessions start anew. */
		CHECK(pg("stop", NULL) == 0);
		CHECK(pg("start", "/dev/null") == 0);
		CHECK_I64(readyz_within(&t, on ? 503 : 200, 30.0), on ? 503 : 200);
		if (!on)
			cu_sleep_ms(500);
		CHECK_I64(cu_create(&t, 0, key, on ? "read-only-1" : "read-only-2", 1, 1024, 600,
				    NULL, &r),
			  on ? 503 : 200);
		/* Said as what it is: nothing held, not "unreachable". */
		if (on)
			CHECK_STR(apitest_jstr(json_object_get(r.json, "error"), "reason"),
				  "read_only_database");
		apitest_resp_release(&r);
		/* Any other write too: refused whole, so nothing was done; not
		 * "outcome_unknown" (it may have been), which leaves a client
		 * of an account, which has no read, no safe way to retry. */
		{
			long long accounts;

			PQreset(t.db.conn); /* the restart ended its session */
			accounts = testdb_query_int(t.db.conn, "SELECT count(*) FROM accounts");

			apitest_call(&t, 0, "POST", "/v1/accounts", t.operator_token,
				     "{\"name\":\"read-only\"}", &r);
			CHECK_I64(r.status, on ? 503 : 201);
			if (on) {
				CHECK_STR(apitest_error_code(&r), "metering_unavailable");
				CHECK_STR(apitest_jstr(json_object_get(r.json, "error"), "reason"),
					  "read_only_database");
			}
			CHECK_I64(testdb_query_int(t.db.conn, "SELECT count(*) FROM accounts"),
				  accounts + (on ? 0 : 1));
			apitest_resp_release(&r);
		}
	}

	PQreset(t.db.conn);
	/* The webhook's backlog gauges of this meterd, which has no webhook
	 * URL and counts the outbox on a connection of its own, come back
	 * after the restarts: an event made 100 s ago shows as pending, with
	 * its age (they stayed as before the first restart, for good, when
	 * the count was the one statement that found its connection lost). */
	{
		char sql[512];
		long long pending = -1, oldest = -1;

		snprintf(sql, sizeof(sql),
			 "INSERT INTO webhook_outbox (account_id, key_id, type, dedup_key, payload,"
			 " created_at) VALUES ('%s', '%s', 'spend_limit_crossed', 'dbdown-1', '{}',"
			 " now() - interval '100 seconds')",
			 acc, key);
		CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
		for (int waited = 0; waited <= 20000 && (pending != 1 || oldest < 100);
		     waited += 200) {
			cu_sleep_ms(200);
			pending = apitest_metric(&t, 0, "meter_webhook_pending_events");
			oldest = apitest_metric(&t, 0, "meter_webhook_oldest_pending_seconds");
		}
		CHECK_I64(pending, 1);
		CHECK(oldest >= 100 && oldest < 200);
	}
	/* up-1 and its wake, back-N, restarted-1 and its wake, one a round,
	 * unseen-2, read-only-2. */
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds"), 8);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM sandboxes WHERE sandbox_id LIKE "
					"'down-%%' OR sandbox_id LIKE 'gone-%%'"
					" OR sandbox_id IN ('read-only-1', 'unseen-1')"),
		  0);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	pg("destroy", NULL);
	unlink(url_file);
	return check_done();
}
