/* API: a check batch that runs into the statement timeout fails as a
 * whole, at once. The key's ledger row is held by a transaction of the
 * test's own for longer than meterd's db_statement_timeout_ms (500 ms):
 * eight concurrent creates on that key all answer 503
 * metering_unavailable, with the reason statement_timeout as other routes
 * give it, within about two timeouts (the batch that waited
 * first, then the one queued behind it), not one timeout per check as when
 * such a batch was rerun check by check while every other key's checks
 * queued behind it. Once the row is let go, checks are decided again by
 * the same process, and the refused ones left nothing behind. A read, a
 * push of samples, a statement and an export that run into the timeout
 * answer 503 with the timeout as their reason, and answer again once the
 * tables they waited for are free. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checks_util.h"

#define NCALLS 8

static struct apitest t;
static char key[65];

/* One create of sandbox "to-<i>" (or sb), on a thread of its own. */
struct call {
	int i;
	const char *sb;
	long status;
	char code[64], reason[64];
};

static void *run_call(void *arg)
{
	struct call *c = arg;
	struct apitest_resp r;
	char sb[32];

	snprintf(sb, sizeof(sb), "to-%d", c->i);
	c->status = cu_create(&t, 0, key, c->sb ? c->sb : sb, 1, 1024, 600, NULL, &r);
	snprintf(c->code, sizeof(c->code), "%s", apitest_error_code(&r));
	snprintf(c->reason, sizeof(c->reason), "%s",
		 apitest_jstr(json_object_get(r.json, "error"), "reason"));
	apitest_resp_release(&r);
	return NULL;
}

/* A write on a thread of its own (run_event, run_put_limit): what it
 * sends, and what it got. */
struct write_call {
	const char *sb, *type, *at; /* run_event: the event */
	const char *token;	    /* run_put_limit: whose */
	long status;
	char reason[64];
	bool recorded;
};

/* A lifecycle event, type at at, of sandbox sb. */
static void *run_event(void *arg)
{
	struct write_call *c = arg;
	struct apitest_resp r;

	c->status = cu_event(&t, 0, c->sb, c->type, c->at, &r);
	snprintf(c->reason, sizeof(c->reason), "%s",
		 apitest_jstr(json_object_get(r.json, "error"), "reason"));
	c->recorded = json_is_true(json_object_get(r.json, "recorded"));
	apitest_resp_release(&r);
	return NULL;
}

/* PUT /v1/keys/{key}/limits (a new daily limit) with token. */
static void *run_put_limit(void *arg)
{
	struct write_call *c = arg;
	struct apitest_resp r;
	char path[128];

	snprintf(path, sizeof(path), "/v1/keys/%s/limits", key);
	CHECK(apitest_call(&t, 0, "PUT", path, c->token, "{\"daily_limit_micros\":20000000}", &r) ==
	      0);
	c->status = r.status;
	snprintf(c->reason, sizeof(c->reason), "%s",
		 apitest_jstr(json_object_get(r.json, "error"), "reason"));
	apitest_resp_release(&r);
	return NULL;
}

/* Waits for the one backend of t's database that waits for a lock (a
 * check batch at the ledger row the test holds) and terminates it;
 * returns its pid. */
static long long terminate_lock_waiter(void)
{
	long long pid;

	cu_await_lock_waiters(t.db.conn, 1);
	pid = cu_sql_int(t.db.conn, "SELECT pid FROM pg_stat_activity"
				    " WHERE datname = current_database()"
				    " AND wait_event_type = 'Lock'" CU_NOT_SWEEPER " LIMIT 1");
	CHECK(cu_sql_int(t.db.conn, "SELECT count(*) FROM pg_terminate_backend(%lld) x WHERE x",
			 pid) == 1);
	return pid;
}

/* Write c (run) waits for a row that lock holds, and its backend is
 * terminated: the answer is 503 outcome_unknown. Then lock lets go. */
static void write_broken(void *(*run)(void *), struct write_call *c, PGconn *lock)
{
	pthread_t th;

	pthread_create(&th, NULL, run, c);
	(void)terminate_lock_waiter();
	pthread_join(th, NULL);
	CHECK_I64(c->status, 503);
	CHECK_STR(c->reason, "outcome_unknown");
	cu_sql(lock, "COMMIT");
	PQfinish(lock);
}

/* In the meterd started: an account named name and a full key of its own
 * (key, token), one create (sandbox first) on server maker making the
 * key's day row, that row held by a connection of the test's (*lk), and
 * c, a create on server 0 on its thread *th, waiting at it while its
 * backend is terminated. Returns that backend's pid. */
static long long held_check_broken(const char *name, int maker, const char *first,
				   const char *today, char *acc, char *token, struct call *c,
				   pthread_t *th, PGconn **lk)
{
	struct apitest_resp r;

	CHECK(apitest_create_account(&t, name, acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 10000000, NULL, key, token) == 0);
	CHECK_I64(cu_create(&t, maker, key, first, 1, 1024, 600, NULL, &r), 200);
	apitest_resp_release(&r);
	*lk = cu_lock_day(t.db.url, acc, key, today);
	pthread_create(th, NULL, run_call, c);
	return terminate_lock_waiter();
}

/* The key's holds are want, each day's held figure is its open holds';
 * then the meterd set stops. */
static void stop_with_holds(long long want)
{
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds WHERE key_id = '%s'", key),
		  want);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Signals every backend of t's database but the test's own connection. */
static void signal_backends(struct apitest *at, int sig)
{
	PGresult *pids = PQexec(at->db.conn, "SELECT pid FROM pg_stat_activity"
					     " WHERE datname = current_database()"
					     " AND backend_type = 'client backend'"
					     " AND pid <> pg_backend_pid()");

	CHECK(PQresultStatus(pids) == PGRES_TUPLES_OK && PQntuples(pids) > 0);
	for (int i = 0; i < PQntuples(pids); i++)
		CHECK_I64(kill((pid_t)strtoll(PQgetvalue(pids, i, 0), NULL, 10), sig), 0);
	PQclear(pids);
}

/* With meterd's backends stopped, one request (what) answers 503
 * metering_unavailable once meterd's deadline (500 ms and 2 s) has passed,
 * not when they go on; they go on after it. */
static void frozen_request(struct apitest *at, const char *what, const char *method,
			   const char *path, const char *token, const char *body)
{
	struct apitest_resp r;
	double t0, took;

	signal_backends(at, SIGSTOP);
	t0 = mono_s();
	CHECK(apitest_call(at, 0, method, path, token, body, &r) == 0);
	took = mono_s() - t0;
	CHECK_I64(r.status, 503);
	CHECK_STR(apitest_error_code(&r), "metering_unavailable");
	apitest_resp_release(&r);
	printf("frozen database: %s answered 503 after %.2f s\n", what, took);
	CHECK(took >= 2.4 && took < 6.0);
	signal_backends(at, SIGCONT);
}

int main(void)
{
	char off[32], acc[65], token[APITEST_TOKEN_MAX], today[16];
	const char *args[] = {"--clock-offset-s", off, "--db-statement-timeout-ms", "500", NULL};
	struct call calls[NCALLS];
	pthread_t th[NCALLS];
	struct apitest_resp r;
	time_t now = apitest_now(), noon;
	struct tm tm;
	double t0, took;
	PGconn *lk;
	char when[40], samples[512], statement[64], export[96];
	const struct {
		const char *path, *body, *reason, *message;
	} held[] = {
	    {"/v1/usage", NULL, "statement_timeout",
	     "statement timeout (500 ms): retry, or ask for less"},
	    {"/v1/samples", samples, "statement_timeout",
	     "statement timeout (500 ms): nothing of the document was ingested"},
	    {statement, NULL, "statement_timeout", "statement timeout (500 ms): retry"},
	    {export, NULL, "lock_timeout", "lock timeout (500 ms): retry"},
	};

	/* Tomorrow, 12:00 UTC: no lease crosses the key's midnight. */
	noon = now - now % 86400 + 86400 + 12 * 3600;
	gmtime_r(&noon, &tm);
	strftime(today, sizeof(today), "%Y-%m-%d", &tm);
	snprintf(off, sizeof(off), "%lld", cu_offset_to(noon));
	if (apitest_start(&t, "checks_timeout", 1, args, NULL) < 0)
		return 1;
	CHECK(apitest_create_account(&t, "Timeout", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 10000000, NULL, key, token) == 0);
	CHECK_I64(cu_create(&t, 0, key, "to-first", 1, 1024, 600, NULL, &r), 200);
	apitest_resp_release(&r);

	lk = cu_lock_day(t.db.url, acc, key, today);
	t0 = mono_s();
	for (int i = 0; i < NCALLS; i++) {
		calls[i] = (struct call){.i = i};
		pthread_create(&th[i], NULL, run_call, &calls[i]);
	}
	for (int i = 0; i < NCALLS; i++)
		pthread_join(th[i], NULL);
	took = mono_s() - t0;
	for (int i = 0; i < NCALLS; i++) {
		CHECK_I64(calls[i].status, 503);
		CHECK_STR(calls[i].code, "metering_unavailable");
		CHECK_STR(calls[i].reason, "statement_timeout");
	}
	/* Two timeouts and some; check by check it was over four seconds. */
	printf("8 checks on a held row answered in %.2f s\n", took);
	CHECK(took < 2.5);
	cu_sql(lk, "COMMIT");
	PQfinish(lk);

	CHECK_I64(cu_create(&t, 0, key, "to-after", 1, 1024, 600, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(
	    cu_sql_int(t.db.conn, "SELECT count(*) FROM sandboxes WHERE sandbox_id LIKE 'to-_'"),
	    0);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds WHERE key_id = '%s'", key), 2);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);

	/* A read, a push of samples, a statement and an export that run into
	 * the database's timeout say so: 503 with the reason and the timeout,
	 * not a bare "database error" or "unreachable". The usage and meter
	 * tables are held by a transaction of the test's own. */
	cu_rfc3339(now, when, sizeof(when)); /* samples are checked against the real clock */
	snprintf(samples, sizeof(samples),
		 "{\"host_id\":\"h-to\",\"sampled_at\":\"%s\",\"sandboxes\":[{\"sandbox_id\":"
		 "\"to-first\",\"key_id\":\"%s\",\"state\":\"running\",\"vcpus\":1,"
		 "\"memory_mib\":1024,\"storage_mib\":0,\"cpu_usec\":1000}]}",
		 when, key);
	snprintf(statement, sizeof(statement), "/v1/reports/statement.csv?month=%.7s", today);
	snprintf(export, sizeof(export),
		 "/v1/reports/usage.csv?from=%.10sT00:00:00Z&to=%.10sT12:00:00Z", today, today);
	lk = PQconnectdb(t.db.url);
	CHECK(PQstatus(lk) == CONNECTION_OK);
	cu_sql(lk, "BEGIN");
	cu_sql(lk, "LOCK TABLE usage_hourly, sandbox_meter IN ACCESS EXCLUSIVE MODE");
	for (size_t i = 0; i < sizeof(held) / sizeof(held[0]); i++) {
		json_t *e;

		if (held[i].body)
			CHECK(cu_post(&t, 0, held[i].path, held[i].body, &r) == 0);
		else
			CHECK(apitest_call(&t, 0, "GET", held[i].path, token, NULL, &r) == 0);
		e = json_object_get(r.json, "error");
		printf("%s: %ld %s\n", held[i].path, r.status, apitest_jstr(e, "message"));
		CHECK_I64(r.status, 503);
		CHECK_STR(apitest_error_code(&r), "metering_unavailable");
		CHECK_STR(apitest_jstr(e, "reason"), held[i].reason);
		CHECK_I64(apitest_jpath(r.json, "error.timeout_ms"), 500);
		CHECK(strstr(apitest_jstr(e, "message"), held[i].message) != NULL);
		apitest_resp_release(&r);
	}
	cu_sql(lk, "ROLLBACK");
	PQfinish(lk);
	/* The same process answers once the tables are free, and the pushed
	 * document goes in whole. */
	for (size_t i = 0; i < sizeof(held) / sizeof(held[0]); i++) {
		if (held[i].body)
			CHECK(cu_post(&t, 0, held[i].path, held[i].body, &r) == 0);
		else
			CHECK(apitest_call(&t, 0, "GET", held[i].path, token, NULL, &r) == 0);
		CHECK_I64(r.status, 200);
		if (held[i].body)
			CHECK_I64(apitest_jpath(r.json, "accepted"), 1);
		apitest_resp_release(&r);
	}
	/* A key's lookup (one not in the cache: made and never used) that
	 * runs into the timeout says so too, then the key works. */
	{
		char key2[65], token2[APITEST_TOKEN_MAX];
		json_t *e;

		CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, key2, token2) == 0);
		lk = PQconnectdb(t.db.url);
		CHECK(PQstatus(lk) == CONNECTION_OK);
		cu_sql(lk, "BEGIN");
		cu_sql(lk, "LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE");
		CHECK(apitest_call(&t, 0, "GET", "/v1/keys", token2, NULL, &r) == 0);
		e = json_object_get(r.json, "error");
		CHECK_I64(r.status, 503);
		CHECK_STR(apitest_error_code(&r), "metering_unavailable");
		CHECK_STR(apitest_jstr(e, "reason"), "statement_timeout");
		CHECK_I64(apitest_jpath(r.json, "error.timeout_ms"), 500);
		CHECK(strstr(apitest_jstr(e, "message"), "credentials could not be looked up") !=
		      NULL);
		apitest_resp_release(&r);
		cu_sql(lk, "ROLLBACK");
		PQfinish(lk);
		CHECK(apitest_call(&t, 0, "GET", "/v1/keys", token2, NULL, &r) == 0);
		CHECK_I64(r.status, 200);
		apitest_resp_release(&r);
	}
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);

	/* The connection breaks while a batch is in the database (here held
	 * at the ledger row, then its backend terminated; as well after its
	 * COMMIT was sent): the check may have been allowed, so its 503 says
	 * the outcome is unknown, never a bare "unreachable" that reads as a
	 * refusal. The same request again gets the decision. The statement
	 * timeout is the default (10 s) so that the termination comes first. */
	{
		const char *args2[] = {"--clock-offset-s", off, NULL};
		struct call c = {.sb = "to-doubt"};
		pthread_t th1;

		if (apitest_start(&t, "checks_doubt", 1, args2, NULL) < 0)
			return 1;
		(void)held_check_broken("Doubt", 0, "to-first", today, acc, token, &c, &th1, &lk);
		pthread_join(th1, NULL);
		CHECK_I64(c.status, 503);
		CHECK_STR(c.reason, "outcome_unknown");
		cu_sql(lk, "COMMIT");
		PQfinish(lk);
		/* Here the batch was rolled back: the retry decides it anew,
		 * at once. Only the session ended, and the engine connects
		 * again for the next check rather than failing it closed for
		 * a backoff as if the database could not be reached. */
		CHECK_I64(cu_create(&t, 0, key, "to-doubt", 1, 1024, 600, NULL, &r), 200);
		CHECK(!r.headers || !strstr(r.headers, "Idempotent-Replayed"));
		apitest_resp_release(&r);
		CHECK_I64(cu_create(&t, 0, key, "to-doubt", 1, 1024, 600, NULL, &r), 200);
		CHECK(r.headers && strstr(r.headers, "Idempotent-Replayed: true"));
		apitest_resp_release(&r);
		/* A lifecycle event alike: one statement that commits itself,
		 * so a break while it is in the database (here waiting for
		 * the sandbox's row, which the test holds) leaves it unknown
		 * whether it was recorded. Before, that 503 said "database
		 * unreachable", with no reason. The same event again records
		 * it, and then answers that it was. */
		{
			char at[40];
			time_t at_t = noon + 60;
			struct tm at_tm;
			struct write_call e = {.sb = "to-doubt", .type = "paused", .at = at};
			PGconn *rowlock = PQconnectdb(t.db.url);

			gmtime_r(&at_t, &at_tm);
			strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &at_tm);
			CHECK(PQstatus(rowlock) == CONNECTION_OK);
			cu_sql(rowlock, "BEGIN");
			CHECK_STR(testdb_exec_state(rowlock, "SELECT 1 FROM sandboxes"
							     " WHERE sandbox_id = 'to-doubt'"
							     " FOR UPDATE"),
				  "00000");
			write_broken(run_event, &e, rowlock);
			run_event(&e);
			CHECK_I64(e.status, 200);
			CHECK(e.recorded);
			run_event(&e);
			CHECK_I64(e.status, 200);
			CHECK(!e.recorded);
		}
		/* Any other write alike: a change of the key's limit waiting for
		 * its day's row, which the test holds. */
		{
			struct write_call p = {.token = token};

			write_broken(run_put_limit, &p, cu_lock_day(t.db.url, acc, key, today));
			run_put_limit(&p);
			CHECK_I64(p.status, 200);
		}
		stop_with_holds(2);
	}

	/* The connection breaks while a classic batch waits for the ledger
	 * row, before anything of it was written: the batch is decided again
	 * on a new connection and its check answered, not refused 503 as if
	 * the database were down. Server 1 makes the key's day row; server 0
	 * knows nothing of the key yet, so its first check reads everything
	 * (the classic path) and locks the row itself. */
	{
		const char *args2[] = {"--clock-offset-s", off, NULL};
		struct call c = {.sb = "to-redo"};
		pthread_t th1;
		long long pid, waiting = 0;

		if (apitest_start(&t, "checks_redo", 2, args2, NULL) < 0)
			return 1;
		pid = held_check_broken("Redo", 1, "to-made", today, acc, token, &c, &th1, &lk);
		/* The batch again, on a backend of its own, at the same row
		 * (the terminated one may still be listed a moment). */
		for (int i = 0; i < 500; i++) {
			waiting = cu_sql_int(
			    t.db.conn,
			    "SELECT count(*) FROM pg_stat_activity"
			    " WHERE datname = current_database()"
			    " AND wait_event_type = 'Lock' AND pid <> %lld" CU_NOT_SWEEPER,
			    pid);
			if (waiting > 0)
				break;
			cu_sleep_ms(20);
		}
		CHECK_I64(waiting, 1);
		cu_sql(lk, "COMMIT");
		PQfinish(lk);
		pthread_join(th1, NULL);
		CHECK_I64(c.status, 200);
		stop_with_holds(2);
	}

	/* The database stops answering without a word (every backend of
	 * meterd's stopped, as behind a network that drops packets): the
	 * statement timeout is the server's and cannot fire. A read answers
	 * 503 once meterd's own deadline (the timeout and 2 s) has passed,
	 * not when the server answers again, and the same process answers
	 * once it does. */
	{
		const char *args3[] = {"--db-statement-timeout-ms", "500", NULL};
		char path[160];

		if (apitest_start(&t, "checks_frozen", 1, args3, NULL) < 0)
			return 1;
		CHECK(apitest_create_account(&t, "Frozen", acc) == 0);
		snprintf(path, sizeof(path), "/v1/keys?account_id=%s", acc);
		CHECK(apitest_call(&t, 0, "GET", path, t.operator_token, NULL, &r) == 0);
		CHECK_I64(r.status, 200);
		apitest_resp_release(&r);
		frozen_request(&t, "a read", "GET", path, t.operator_token, NULL);
		for (int i = 0; i < 100; i++) {
			CHECK(apitest_call(&t, 0, "GET", path, t.operator_token, NULL, &r) == 0);
			if (r.status == 200)
				break;
			apitest_resp_release(&r);
			cu_sleep_ms(100);
		}
		CHECK_I64(r.status, 200);
		apitest_resp_release(&r);
		/* Again, for a push of samples (ingestion's own statements):
		 * 503 past the deadline, nothing of the document ingested. */
		{
			char doc[256], at[40];

			cu_rfc3339(apitest_now(), at, sizeof(at));
			snprintf(doc, sizeof(doc),
				 "{\"host_id\":\"h-frozen\",\"sampled_at\":\"%s\","
				 "\"sandboxes\":[{\"sandbox_id\":\"fz-1\",\"state\":\"running\","
				 "\"vcpus\":1,\"memory_mib\":512,\"cpu_usec\":0}]}",
				 at);
			frozen_request(&t, "a push", "POST", "/v1/samples", t.agent_token, doc);
		}
		CHECK(apitest_stop(&t) == 0);
		apitest_drop(&t);
	}
	return check_done();
}
