/* API: the read routes that wait on PostgreSQL run on the request workers,
 * not on an HTTP thread. With one HTTP thread, a read stuck behind a table
 * lock must not hold up other clients (health, a check), and it answers once
 * the lock goes. Two stuck reads wait side by side on two workers while a
 * third worker serves a pooled read that needs no lock. */
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

int main(void)
{
	static const char *const env[] = {"METER_HTTP_THREADS=1", "METER_DB_POOL_SIZE=3", NULL};
	struct slow a = {0}, b = {0};
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
	{
		/* Both reads are waiting on the lock in PostgreSQL. */
		int waiting = 0;
		for (int i = 0; i < 100 && waiting < 2; i++) {
			struct timespec d = {0, 50 * 1000000L};
			PGresult *res =
			    PQexec(watch, "SELECT count(*) FROM pg_locks WHERE NOT granted"
					  " AND relation = 'sandboxes'::regclass");
			waiting = PQresultStatus(res) == PGRES_TUPLES_OK
				      ? (int)strtol(PQgetvalue(res, 0, 0), NULL, 10)
				      : 0;
			PQclear(res);
			nanosleep(&d, NULL);
		}
		CHECK_I64(waiting, 2);
	}

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

	/* The lock goes: both stuck reads answer. */
	CHECK_STR(testdb_exec_state(t.db.conn, "COMMIT"), "00000");
	pthread_join(a.thread, NULL);
	pthread_join(b.thread, NULL);
	CHECK_I64(a.status, 200);
	CHECK_I64(b.status, 200);
	CHECK(a.seconds > quick && b.seconds > quick);

	PQfinish(watch);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	return check_done();
}
