/* API: the read routes that wait on PostgreSQL run on the request workers,
 * not on an HTTP thread. With one HTTP thread, a read stuck behind a table
 * lock must not hold up other clients (health, a check), and it answers once
 * the lock goes. A pool of 4 connections has 3 workers: two stuck reads wait
 * side by side on two of them while the third serves a pooled read that
 * needs no lock. With every worker stuck (and a read queued behind them),
 * the connection kept from the workers still serves what runs on the HTTP
 * thread: a write, and the key lookup of a token not seen before. An
 * export's start (the operator's account, a HEAD's filter) waits on a
 * worker too, never on the HTTP thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apitest.h"
#include "check.h"

static struct apitest t;
static char acc[65], key[65], token[APITEST_TOKEN_MAX];

struct slow {
	pthread_t thread;
	long status;
	double seconds;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* GET /v1/sandboxes: reads the sandboxes table, locked by the test. */
static void *slow_read(void *arg)
{
	struct slow *s = arg;
	struct apitest_resp r;
	double t0 = now_s();

	apitest_call(&t, 0, "GET", "/v1/sandboxes", token, NULL, &r);
	s->status = r.status;
	s->seconds = now_s() - t0;
	apitest_resp_release(&r);
	return NULL;
}

/* An export whose start looks up what it names (its path): the
 * operator's account, a HEAD's sandbox filter. */
struct export
{
	pthread_t thread;
	const char *method, *path, *token;
	long status;
};

static void *export_start(void *arg)
{
	struct export *e = arg;
	struct apitest_req rq = {.method = e->method, .path = e->path, .token = e->token};
	struct apitest_resp r;

	apitest_do(&t, 0, &rq, &r);
	e->status = r.status;
	apitest_resp_release(&r);
	return NULL;
}

static void sleep_ms(int ms)
{
	struct timespec d = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&d, NULL);
}

/* Waits (up to 5 s) until want reads wait for the lock on table; returns
 * how many do. */
static int lock_waiters(PGconn *watch, const char *table, int want)
{
	const char *params[1] = {table};
	int waiting = 0;

	for (int i = 0; i < 100 && waiting < want; i++) {
		/* Not the check engine's sweeper, which waits on it too (a
		 * partition of samples, which names sandboxes, as well). */
		PGresult *res =
		    PQexecParams(watch,
				 "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a"
				 " ON a.pid = l.pid WHERE NOT l.granted"
				 " AND l.relation = $1::regclass"
				 " AND a.query NOT LIKE '%meter_holds_%'"
				 " AND a.query NOT LIKE '%meter_leases_%'"
				 " AND a.query NOT LIKE '%meter_stop_tails%'"
				 " AND a.query NOT LIKE '%meter_ensure_sample_partitions%'",
				 1, NULL, params, NULL, NULL, 0);
		waiting = PQresultStatus(res) == PGRES_TUPLES_OK
			      ? (int)strtol(PQgetvalue(res, 0, 0), NULL, 10)
			      : 0;
		PQclear(res);
		if (waiting < want)
			sleep_ms(50);
	}
	return waiting;
}

int main(void)
{
	static const char *const env[] = {"METER_HTTP_THREADS=1", "METER_DB_POOL_SIZE=4", NULL};
	struct slow a = {0}, b = {0}, c = {0}, d = {0};
	char key2[65], token2[APITEST_TOKEN_MAX];
	struct apitest_resp r;
	double t0, quick;
	PGconn *watch;

	if (apitest_start(&t, "pooled", 1, NULL, env) < 0)
		return 1;
	CHECK(apitest_create_account(&t, "Pooled", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, key, token) == 0);

	watch = PQconnectdb(t.db.url);
	CHECK(PQstatus(watch) == CONNECTION_OK);
	/* Hold a lock every read of sandboxes waits on. */
	CHECK_STR(testdb_exec_state(t.db.conn, "BEGIN"), "00000");
	CHECK_STR(testdb_exec_state(t.db.conn, "LOCK TABLE sandboxes IN ACCESS EXCLUSIVE MODE"),
		  "00000");
	CHECK(pthread_create(&a.thread, NULL, slow_read, &a) == 0);
	CHECK(pthread_create(&b.thread, NULL, slow_read, &b) == 0);
	/* Both reads are waiting on the lock in PostgreSQL. */
	CHECK_I64(lock_waiters(watch, "sandboxes", 2), 2);

	/* The only HTTP thread still answers everyone else at once. */
	t0 = now_s();
	CHECK(apitest_call(&t, 0, "GET", "/healthz", NULL, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "GET", "/v1/prices", token, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
	quick = now_s() - t0;
	if (quick >= 1.0)
		fprintf(stderr, "other clients waited %.3f s behind the stuck reads\n", quick);
	CHECK(quick < 1.0);

	/* Two more: the third worker is stuck too, the fourth read queued. */
	CHECK(pthread_create(&c.thread, NULL, slow_read, &c) == 0);
	CHECK_I64(lock_waiters(watch, "sandboxes", 3), 3);
	CHECK(pthread_create(&d.thread, NULL, slow_read, &d) == 0);
	sleep_ms(200);
	CHECK_I64(lock_waiters(watch, "sandboxes", 4), 3);
	/* A write on the HTTP thread (a new key) and the new key's first
	 * lookup still find a connection at once. */
	t0 = now_s();
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, key2, token2) == 0);
	CHECK(apitest_call(&t, 0, "PUT", "/v1/keys/x/limits", token2, "{}", &r) == 0);
	CHECK_I64(r.status, 403); /* authenticated (a read-only key), then refused */
	CHECK_STR(apitest_error_code(&r), "read_only_key");
	apitest_resp_release(&r);
	quick = now_s() - t0;
	if (quick >= 1.0)
		fprintf(stderr, "the write and the lookup waited %.3f s for a connection\n", quick);
	CHECK(quick < 1.0);

	/* The lock goes: every stuck read answers. */
	CHECK_STR(testdb_exec_state(t.db.conn, "COMMIT"), "00000");
	pthread_join(a.thread, NULL);
	pthread_join(b.thread, NULL);
	pthread_join(c.thread, NULL);
	pthread_join(d.thread, NULL);
	CHECK_I64(a.status, 200);
	CHECK_I64(b.status, 200);
	CHECK_I64(c.status, 200);
	CHECK_I64(d.status, 200);
	CHECK(a.seconds > quick && b.seconds > quick);

	/* An export's start waits on the read lane too: the operator's export
	 * looks its account up, a HEAD its sandbox filter, and with both
	 * tables locked the only HTTP thread still answers at once. */
	{
		char path_op[256];
		struct export op = {.method = "GET", .path = path_op, .token = t.operator_token};
		struct export head = {
		    .method = "HEAD",
		    .path =
			"/v1/reports/usage.csv?from=2026-11-01T00:00:00Z&to=2026-11-02T00:00:00Z"
			"&sandbox_id=sbx_none",
		    .token = token};

		snprintf(path_op, sizeof(path_op),
			 "/v1/reports/usage.ndjson?account_id=%s&from=2026-11-01T00:00:00Z"
			 "&to=2026-11-02T00:00:00Z",
			 acc);
		CHECK_STR(testdb_exec_state(t.db.conn, "BEGIN"), "00000");
		CHECK_STR(testdb_exec_state(t.db.conn, "LOCK TABLE accounts, sandboxes"
						       " IN ACCESS EXCLUSIVE MODE"),
			  "00000");
		CHECK(pthread_create(&op.thread, NULL, export_start, &op) == 0);
		CHECK(pthread_create(&head.thread, NULL, export_start, &head) == 0);
		CHECK_I64(lock_waiters(watch, "accounts", 1), 1);
		CHECK_I64(lock_waiters(watch, "sandboxes", 1), 1);
		t0 = now_s();
		CHECK(apitest_call(&t, 0, "GET", "/healthz", NULL, NULL, &r) == 0);
		CHECK_I64(r.status, 200);
		apitest_resp_release(&r);
		quick = now_s() - t0;
		if (quick >= 1.0)
			fprintf(stderr, "health waited %.3f s behind the exports' look-ups\n",
				quick);
		CHECK(quick < 1.0);
		CHECK_STR(testdb_exec_state(t.db.conn, "COMMIT"), "00000");
		pthread_join(op.thread, NULL);
		pthread_join(head.thread, NULL);
		CHECK_I64(op.status, 200);
		CHECK_I64(head.status, 404); /* no such sandbox */
	}

	PQfinish(watch);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	return check_done();
}
