/* API: no overshoot under concurrency (DESIGN.md §4). Two meterd processes
 * on one database; 64 concurrent checks split over both.
 *
 * 1. A key whose remaining budget fits exactly K leases: exactly K of 64
 *    creates are allowed, committed stays within the limit, and every
 *    refused check left no hold, no sandbox and no idempotency row. A
 *    create on each process first makes both know the key and its day, so
 *    the burst goes the fast way (one round trip a batch, on figures the
 *    other process makes stale), which /metrics shows.
 * 2. Plain creates, one at a time on one process: each goes the short
 *    fast way (sql/0024), none the classic way, rows as the general way
 *    leaves them.
 * 3. Mixed: creates, wakes and pause events (settlements) at once: the
 *    ledger's held equals what the open holds have left, committed stays
 *    within the limit, and every allowed check has exactly its hold.
 * 4. Two races made certain by holding the key's ledger row from a third
 *    connection while the checks wait for it:
 *    - a wake retried on the other process while its stored default-key
 *      answer is stale: one hold, one answer, replayed to the other;
 *    - a create retried on the other process while its first attempt is
 *      in flight, with room for one lease: the attempt that takes the row
 *      second does not refuse for want of the budget the first one took,
 *      it replays the first one's answer (under the default key, and under
 *      a key of the caller's own, where a refusal would be stored);
 *    - a limit lowered (the ledger row, then the key, as PUT .../limits
 *      does) while a create waits: the create is decided against the new
 *      limit, and the day's row keeps it;
 *    - a batch that needs a new ledger row and an existing one sorting
 *      before it, while another writer (as ingestion does) holds the
 *      existing row and then creates the new one: both in the one lock
 *      order, so no deadlock.
 *
 * The engine's clock is pinned at noon UTC (test-only clock_offset_s) so no
 * lease crosses the key's midnight while the test runs. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checks_util.h"

#define NTHREADS     64
#define K	     10
#define LEASE_MICROS 32500 /* 1 vCPU + 1 GiB for 3600 s */
#define PRIMES	     2	   /* creates before the burst, one per process */

static struct apitest t;
static pthread_barrier_t barrier;
static char today[16];
static time_t noon;

enum op { OP_CREATE, OP_WAKE, OP_PAUSE };

struct job {
	int i;
	enum op op;
	char key[65];
	char sandbox[65];
	char idem[65];
	long status;
	char code[64];
};

static void *run_job(void *arg)
{
	struct job *j = arg;
	struct apitest_resp r;
	char extra[128], at[40];

	pthread_barrier_wait(&barrier);
	switch (j->op) {
	case OP_CREATE:
		snprintf(extra, sizeof(extra), "\"idempotency_key\":\"%s\"", j->idem);
		cu_create(&t, j->i % 2, j->key, j->sandbox, 1, 1024, 3600,
			  j->idem[0] ? extra : NULL, &r);
		break;
	case OP_WAKE:
		snprintf(extra, sizeof(extra), "\"idempotency_key\":\"%s\"", j->idem);
		cu_wake(&t, j->i % 2, j->sandbox, 3600, extra, &r);
		break;
	case OP_PAUSE:
		cu_rfc3339(noon + 600, at, sizeof(at)); /* after every lease start */
		cu_event(&t, j->i % 2, j->sandbox, "paused", at, &r);
		break;
	}
	j->status = r.status;
	snprintf(j->code, sizeof(j->code), "%s", apitest_error_code(&r));
	apitest_resp_release(&r);
	return NULL;
}

/* Runs jobs[0..NTHREADS) at once. */
static void run_all(struct job *jobs)
{
	pthread_t th[NTHREADS];

	pthread_barrier_init(&barrier, NULL, NTHREADS);
	for (int i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, run_job, &jobs[i]);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&barrier);
}

/* The fast check batches both processes sent so far, from their /metrics
 * (meter_check_batches_total, paths fast and fast_differed). */
static long long fast_batches(const struct apitest *tt)
{
	static const char *const names[] = {"meter_check_batches_total{path=\"fast\"}",
					    "meter_check_batches_total{path=\"fast_differed\"}"};
	long long n = 0;

	for (int i = 0; i < 2; i++)
		for (size_t j = 0; j < sizeof(names) / sizeof(names[0]); j++) {
			long long v = apitest_metric(tt, i, names[j]);

			CHECK(v >= 0);
			n += v;
		}
	return n;
}

/* Plain creates (no idempotency key, every one allowed) on a key the
 * process knows: each is a fast batch of its own, decided on the short
 * way of sql/0024, none goes the classic way, and every row and figure is
 * as the general way leaves it. */
static void test_plain_creates(const char *acc)
{
	static const char fast[] = "meter_check_batches_total{path=\"fast\"}";
	static const char classic[] = "meter_check_batches_total{path=\"classic\"}";
	char key[65], token[APITEST_TOKEN_MAX];
	long long fast0, classic0;
	struct apitest_resp r;

	CHECK(apitest_create_key(&t, acc, "full", 1000000000, NULL, key, token) == 0);
	CHECK_I64(cu_create(&t, 0, key, "plain-0", 1, 1024, 3600, NULL, &r), 200);
	apitest_resp_release(&r);
	fast0 = apitest_metric(&t, 0, fast);
	classic0 = apitest_metric(&t, 0, classic);
	for (int i = 1; i <= 5; i++) {
		char sb[32];

		snprintf(sb, sizeof(sb), "plain-%d", i);
		CHECK_I64(cu_create(&t, 0, key, sb, 1 + i % 2, 1024, 3600, NULL, &r), 200);
		apitest_resp_release(&r);
	}
	CHECK_I64(apitest_metric(&t, 0, fast) - fast0, 5);
	CHECK_I64(apitest_metric(&t, 0, classic) - classic0, 0);
	CHECK_I64(cu_sql_int(t.db.conn,
			     "SELECT count(*) FROM sandboxes s JOIN holds h USING (account_id,"
			     " sandbox_id) WHERE s.key_id = '%s' AND h.key_id = '%s'"
			     " AND s.create_answer IS NOT NULL",
			     key, key),
		  6);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK_I64(cu_over_limit(t.db.conn), 0);
}

static void test_exact_k(const char *acc)
{
	static struct job jobs[NTHREADS];
	char key[65], token[APITEST_TOKEN_MAX], sql[512];
	const long long spent = 123457;
	const long long limit = spent + K * LEASE_MICROS + LEASE_MICROS - 1;
	int allowed = 0, refused = 0;
	long long fast0;

	CHECK(apitest_create_key(&t, acc, "full", limit, NULL, key, token) == 0);
	/* Metered spend already on the day: the remaining budget fits K leases. */
	snprintf(sql, sizeof(sql),
		 "INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, limit_micros)"
		 " VALUES ('%s', '%s', '%s', %lld, %lld)",
		 acc, key, today, spent - PRIMES * LEASE_MICROS, limit);
	cu_sql(t.db.conn, sql);
	/* One create on each process first, so that both know the key and its
	 * day: the burst is then decided the fast way, each process on figures
	 * the other one's batches make stale. */
	for (int i = 0; i < PRIMES; i++) {
		struct apitest_resp r;
		char sb[32];

		snprintf(sb, sizeof(sb), "prime-%d", i);
		CHECK_I64(cu_create(&t, i % 2, key, sb, 1, 1024, 3600, NULL, &r), 200);
		apitest_resp_release(&r);
	}
	fast0 = fast_batches(&t);
	for (int i = 0; i < NTHREADS; i++) {
		jobs[i] = (struct job){.i = i, .op = OP_CREATE};
		snprintf(jobs[i].key, sizeof(jobs[i].key), "%s", key);
		snprintf(jobs[i].sandbox, sizeof(jobs[i].sandbox), "race-%d", i);
	}
	run_all(jobs);
	for (int i = 0; i < NTHREADS; i++) {
		if (jobs[i].status == 200) {
			allowed++;
		} else if (jobs[i].status == 402 &&
			   strcmp(jobs[i].code, "spending_limit_reached") == 0) {
			refused++;
			/* Nothing left behind. */
			CHECK_I64(cu_sql_int(t.db.conn,
					     "SELECT (SELECT count(*) FROM holds WHERE sandbox_id ="
					     " '%s') + (SELECT count(*) FROM sandboxes WHERE"
					     " sandbox_id = '%s') + (SELECT count(*) FROM"
					     " check_answers WHERE idempotency_key = '%s')",
					     jobs[i].sandbox, jobs[i].sandbox, jobs[i].sandbox),
				  0);
		} else {
			fprintf(stderr, "job %d: status %ld %s\n", i, jobs[i].status, jobs[i].code);
		}
	}
	CHECK_I64(allowed, K);
	CHECK_I64(refused, NTHREADS - K);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds WHERE key_id = '%s'", key),
		  K + PRIMES);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM sandboxes WHERE key_id = '%s'", key),
		  K + PRIMES);
	CHECK_I64(
	    cu_sql_int(t.db.conn,
		       "SELECT count(*) FROM check_answers WHERE idempotency_key LIKE 'race-%%'"),
	    K);
	CHECK_I64(cu_sql_int(t.db.conn,
			     "SELECT held_micros FROM key_day_ledger WHERE key_id = '%s'", key),
		  (long long)(K + PRIMES) * LEASE_MICROS);
	CHECK_I64(cu_sql_int(t.db.conn,
			     "SELECT (spent_micros + held_micros <= limit_micros)::int FROM"
			     " key_day_ledger WHERE key_id = '%s'",
			     key),
		  1);
	CHECK_I64(cu_over_limit(t.db.conn), 0);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	/* The fast way was taken (committed or met a row the other process
	 * changed), not only the classic one. */
	CHECK(fast_batches(&t) > fast0);
	/* Both processes decided some (the split really was over two). */
	{
		char *l0 = apitest_read_log(&t, 0), *l1 = apitest_read_log(&t, 1);
		CHECK(l0 && strstr(l0, "path=\"/v1/checks/create\""));
		CHECK(l1 && strstr(l1, "path=\"/v1/checks/create\""));
		free(l0);
		free(l1);
	}
}

static void test_mixed(const char *acc)
{
	static struct job jobs[NTHREADS];
	char key[65], token[APITEST_TOKEN_MAX], sb[65];
	const long long limit = 24LL * LEASE_MICROS + 100;
	int creates_ok = 0, wakes_ok = 0, pauses_ok = 0, other = 0;
	struct apitest_resp r;
	const int pre = 16;

	CHECK(apitest_create_key(&t, acc, "full", limit, NULL, key, token) == 0);
	for (int i = 0; i < pre; i++) {
		snprintf(sb, sizeof(sb), "mix-pre-%d", i);
		CHECK_I64(cu_create(&t, i % 2, key, sb, 1, 1024, 3600, NULL, &r), 200);
		apitest_resp_release(&r);
	}
	for (int i = 0; i < NTHREADS; i++) {
		jobs[i] = (struct job){.i = i};
		snprintf(jobs[i].key, sizeof(jobs[i].key), "%s", key);
		switch (i % 4) {
		case 0:
		case 3:
			jobs[i].op = OP_CREATE;
			snprintf(jobs[i].sandbox, sizeof(jobs[i].sandbox), "mix-new-%d", i);
			break;
		case 1:
			jobs[i].op = OP_WAKE;
			snprintf(jobs[i].sandbox, sizeof(jobs[i].sandbox), "mix-pre-%d", i % pre);
			snprintf(jobs[i].idem, sizeof(jobs[i].idem), "wk-%d", i);
			break;
		case 2:
			jobs[i].op = OP_PAUSE;
			snprintf(jobs[i].sandbox, sizeof(jobs[i].sandbox), "mix-pre-%d",
				 (i + 7) % pre);
			break;
		}
	}
	run_all(jobs);
	for (int i = 0; i < NTHREADS; i++) {
		struct job *j = &jobs[i];

		if (j->status == 200) {
			if (j->op == OP_CREATE)
				creates_ok++;
			else if (j->op == OP_WAKE)
				wakes_ok++;
			else
				pauses_ok++;
			continue;
		}
		if (j->status != 402 || strcmp(j->code, "spending_limit_reached") != 0) {
			fprintf(stderr, "mixed job %d (op %d): status %ld %s\n", i, j->op,
				j->status, j->code);
			other++;
			continue;
		}
		/* A refusal left nothing. */
		if (j->op == OP_CREATE)
			CHECK_I64(cu_sql_int(t.db.conn,
					     "SELECT (SELECT count(*) FROM holds WHERE sandbox_id ="
					     " '%s') + (SELECT count(*) FROM sandboxes WHERE"
					     " sandbox_id = '%s')",
					     j->sandbox, j->sandbox),
				  0);
		CHECK_I64(cu_sql_int(t.db.conn,
				     "SELECT count(*) FROM check_answers WHERE idempotency_key"
				     " IN ('%s', '%s')",
				     j->sandbox, j->idem[0] ? j->idem : "-"),
			  /* A wake: the pre-created sandbox's create row, and the
			   * refusal stored under the wake's own key. */
			  j->op == OP_CREATE ? 0 : 2);
		if (j->op == OP_WAKE)
			CHECK_I64(
			    cu_sql_int(t.db.conn,
				       "SELECT count(*) FROM check_answers WHERE idempotency_key"
				       " = '%s' AND operation = 'wake' AND status_code = 402",
				       j->idem),
			    1);
	}
	CHECK_I64(other, 0);
	CHECK_I64(pauses_ok, NTHREADS / 4);
	CHECK(creates_ok + wakes_ok > 0);
	/* Every allowed check has exactly one hold (no lease crosses midnight). */
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds WHERE key_id = '%s'", key),
		  pre + creates_ok + wakes_ok);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM sandboxes WHERE key_id = '%s'", key),
		  pre + creates_ok);
	CHECK_I64(cu_over_limit(t.db.conn), 0);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	printf("mixed: %d creates and %d wakes allowed, %d pauses\n", creates_ok, wakes_ok,
	       pauses_ok);
}

/* One check sent from a thread of its own. */
struct call {
	int server;
	const char *path;
	char body[256];
	long status;
	char code[64];
	char lease_ends_at[40];
	long long hold_micros;
	long long daily_limit;
};

static void *run_call(void *arg)
{
	struct call *c = arg;
	struct apitest_resp r;
	const char *end;

	cu_post(&t, c->server, c->path, c->body, &r);
	c->status = r.status;
	snprintf(c->code, sizeof(c->code), "%s", apitest_error_code(&r));
	end = apitest_json_str(&r, "lease_ends_at");
	snprintf(c->lease_ends_at, sizeof(c->lease_ends_at), "%s", end ? end : "");
	c->hold_micros = cu_jint(r.json, "hold_micros");
	c->daily_limit = cu_errint(&r, "daily_limit_micros");
	apitest_resp_release(&r);
	return NULL;
}

static void test_stale_wake_race(const char *acc)
{
	char key[65], token[APITEST_TOKEN_MAX];
	struct call calls[2];
	pthread_t th[2];
	struct apitest_resp r;
	PGconn *lk;

	CHECK(apitest_create_key(&t, acc, "full", -1, NULL, key, token) == 0);
	CHECK_I64(cu_create(&t, 0, key, "stale-1", 1, 1024, 3600, NULL, &r), 200);
	apitest_resp_release(&r);
	/* The default wake key's answer, stale once its one-second lease is over. */
	CHECK_I64(cu_wake(&t, 0, "stale-1", 1, NULL, &r), 200);
	apitest_resp_release(&r);
	cu_sleep_ms(1300);
	lk = cu_lock_day(t.db.url, acc, key, today);
	for (int i = 0; i < 2; i++) {
		calls[i] = (struct call){.server = i, .path = "/v1/checks/wake"};
		snprintf(calls[i].body, sizeof(calls[i].body),
			 "{\"sandbox_id\":\"stale-1\",\"lease_seconds\":600}");
		pthread_create(&th[i], NULL, run_call, &calls[i]);
	}
	/* Both processes read the stale answer and wait for the row. */
	cu_await_lock_waiters(t.db.conn, 2);
	cu_sql(lk, "COMMIT");
	PQfinish(lk);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK_I64(calls[0].status, 200);
	CHECK_I64(calls[1].status, 200);
	CHECK(calls[0].lease_ends_at[0] != '\0');
	CHECK_STR(calls[0].lease_ends_at, calls[1].lease_ends_at);
	CHECK_I64(calls[0].hold_micros, calls[1].hold_micros);
	/* The create's hold, the one-second wake's and ONE for the retried wake. */
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds WHERE sandbox_id = 'stale-1'"),
		  3);
	CHECK_I64(cu_sql_int(t.db.conn,
			     "SELECT count(*) FROM check_answers WHERE operation = 'wake'"
			     " AND idempotency_key = 'stale-1'"),
		  1);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
}

/* The default key of a create (its sandbox id) and an explicit key of the
 * same text are separate keys, in one batch as across batches: a create
 * of "ns-b" under the explicit key "ns-a" is allowed beside "ns-a"'s own
 * create under its default key, whichever batch each lands in. Here both
 * go in one: they queue behind a check waiting for the key's ledger row. */
static void test_key_spaces(const char *acc)
{
	char key[65], token[APITEST_TOKEN_MAX];
	struct call first, calls[2];
	pthread_t th0, th[2];
	struct apitest_resp r;
	PGconn *lk;

	CHECK(apitest_create_key(&t, acc, "full", -1, NULL, key, token) == 0);
	CHECK_I64(cu_create(&t, 0, key, "ns-0", 1, 1024, 3600, NULL, &r), 200);
	apitest_resp_release(&r);
	/* Across batches: the default key of ns-1, then ns-2 under "ns-1". */
	CHECK_I64(cu_create(&t, 0, key, "ns-1", 1, 1024, 3600, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(&t, 0, key, "ns-2", 1, 1024, 3600, "\"idempotency_key\":\"ns-1\"", &r),
		  200);
	apitest_resp_release(&r);
	/* In one batch. */
	lk = cu_lock_day(t.db.url, acc, key, today);
	first = (struct call){.server = 0, .path = "/v1/checks/create"};
	snprintf(first.body, sizeof(first.body),
		 "{\"key_id\":\"%s\",\"sandbox_id\":\"ns-w\",\"vcpus\":1,\"memory_mib\":1024,"
		 "\"lease_seconds\":3600}",
		 key);
	pthread_create(&th0, NULL, run_call, &first);
	cu_await_lock_waiters(t.db.conn, 1);
	for (int i = 0; i < 2; i++) {
		calls[i] = (struct call){.server = 0, .path = "/v1/checks/create"};
		snprintf(calls[i].body, sizeof(calls[i].body),
			 "{\"key_id\":\"%s\",\"sandbox_id\":\"ns-%c\",\"vcpus\":1,"
			 "\"memory_mib\":1024,\"lease_seconds\":3600%s}",
			 key, i == 0 ? 'a' : 'b', i == 0 ? "" : ",\"idempotency_key\":\"ns-a\"");
		pthread_create(&th[i], NULL, run_call, &calls[i]);
		cu_sleep_ms(100); /* queued in this order, behind the waiting batch */
	}
	cu_sql(lk, "COMMIT");
	PQfinish(lk);
	pthread_join(th0, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK_I64(first.status, 200);
	CHECK_I64(calls[0].status, 200);
	CHECK_I64(calls[1].status, 200);
	CHECK_STR(calls[1].code, "");
	CHECK_I64(cu_sql_int(t.db.conn,
			     "SELECT count(*) FROM sandboxes WHERE sandbox_id IN ('ns-a', 'ns-b')"),
		  2);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
}

static void test_retry_race(const char *acc, bool own)
{
	const char *sb = own ? "retry-2" : "retry-1";
	char key[65], token[APITEST_TOKEN_MAX], first[16];
	struct call calls[2];
	pthread_t th[2];
	struct apitest_resp r;
	PGconn *lk;

	/* Room for the first create and one more lease. */
	CHECK(apitest_create_key(&t, acc, "full", 2 * LEASE_MICROS, NULL, key, token) == 0);
	snprintf(first, sizeof(first), "retry-0%s", own ? "o" : "");
	CHECK_I64(cu_create(&t, 0, key, first, 1, 1024, 3600, NULL, &r), 200);
	apitest_resp_release(&r);
	lk = cu_lock_day(t.db.url, acc, key, today);
	for (int i = 0; i < 2; i++) {
		calls[i] = (struct call){.server = i, .path = "/v1/checks/create"};
		snprintf(calls[i].body, sizeof(calls[i].body),
			 "{\"key_id\":\"%s\",\"sandbox_id\":\"%s\",\"vcpus\":1,"
			 "\"memory_mib\":1024,\"lease_seconds\":3600%s}",
			 key, sb, own ? ",\"idempotency_key\":\"retry-own\"" : "");
		pthread_create(&th[i], NULL, run_call, &calls[i]);
	}
	/* Both processes read no answer and no sandbox, and wait for the row. */
	cu_await_lock_waiters(t.db.conn, 2);
	cu_sql(lk, "COMMIT");
	PQfinish(lk);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK_I64(calls[0].status, 200);
	CHECK_I64(calls[1].status, 200);
	CHECK(calls[0].lease_ends_at[0] != '\0');
	CHECK_STR(calls[0].lease_ends_at, calls[1].lease_ends_at);
	CHECK_I64(calls[0].hold_micros, LEASE_MICROS);
	CHECK_I64(calls[1].hold_micros, LEASE_MICROS);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds WHERE sandbox_id = '%s'", sb),
		  1);
	CHECK_I64(cu_sql_int(t.db.conn,
			     "SELECT held_micros FROM key_day_ledger WHERE key_id = '%s'"
			     " AND day = '%s'",
			     key, today),
		  2 * LEASE_MICROS);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
	CHECK_I64(cu_over_limit(t.db.conn), 0);
}

static void test_limit_race(const char *acc)
{
	char key[65], token[APITEST_TOKEN_MAX], sql[256];
	struct call c = {.server = 1, .path = "/v1/checks/create"};
	const long long lowered = LEASE_MICROS + 7500;
	pthread_t th;
	struct apitest_resp r;
	PGconn *lk;

	CHECK(apitest_create_key(&t, acc, "full", 4 * LEASE_MICROS, NULL, key, token) == 0);
	CHECK_I64(cu_create(&t, 1, key, "lim-0", 1, 1024, 3600, NULL, &r), 200);
	apitest_resp_release(&r);
	/* What PUT /v1/keys/{id}/limits does: the day's row first... */
	lk = cu_lock_day(t.db.url, acc, key, today);
	snprintf(sql, sizeof(sql),
		 "UPDATE key_day_ledger SET limit_micros = %lld WHERE account_id = '%s'"
		 " AND key_id = '%s' AND day = '%s'",
		 lowered, acc, key, today);
	cu_sql(lk, sql);
	snprintf(c.body, sizeof(c.body),
		 "{\"key_id\":\"%s\",\"sandbox_id\":\"lim-1\",\"vcpus\":1,"
		 "\"memory_mib\":1024,\"lease_seconds\":3600}",
		 key);
	pthread_create(&th, NULL, run_call, &c);
	/* ...while the create (which read the old limit) waits for it... */
	cu_await_lock_waiters(t.db.conn, 1);
	/* ...then the key, and both commit together. */
	snprintf(sql, sizeof(sql),
		 "UPDATE api_keys SET daily_limit_micros = %lld WHERE account_id = '%s'"
		 " AND key_id = '%s'",
		 lowered, acc, key);
	cu_sql(lk, sql);
	cu_sql(lk, "COMMIT");
	PQfinish(lk);
	pthread_join(th, NULL);
	CHECK_I64(c.status, 402);
	CHECK_STR(c.code, "spending_limit_reached");
	CHECK_I64(c.daily_limit, lowered);
	CHECK_I64(cu_sql_int(t.db.conn,
			     "SELECT limit_micros FROM key_day_ledger WHERE key_id = '%s'"
			     " AND day = '%s'",
			     key, today),
		  lowered);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds WHERE key_id = '%s'", key), 1);
	CHECK_I64(cu_over_limit(t.db.conn), 0);
}

/* PostgreSQL's count of deadlocks in the test's database, once its
 * statistics have caught up (they are flushed within about a second). */
static long long deadlocks(void)
{
	long long v = -1;

	for (int i = 0; i < 3; i++) {
		cu_sql(t.db.conn, "SELECT pg_stat_clear_snapshot()");
		v = cu_sql_int(t.db.conn, "SELECT deadlocks FROM pg_stat_database"
					  " WHERE datname = current_database()");
		cu_sleep_ms(700);
	}
	return v;
}

static void test_new_row_order(const char *acc)
{
	char k[3][65], tok[APITEST_TOKEN_MAX], sql[512];
	const char *lo, *hi, *other;
	struct call c[3];
	pthread_t th[3];
	struct apitest_resp r;
	PGconn *hold, *writer;
	PGresult *res;
	long long before;

	for (int i = 0; i < 3; i++)
		CHECK(apitest_create_key(&t, acc, "full", -1, NULL, k[i], tok) == 0);
	/* lo sorts before hi; lo and other get today's row now, hi does not. */
	lo = strcmp(k[0], k[1]) < 0 ? k[0] : k[1];
	hi = lo == k[0] ? k[1] : k[0];
	other = k[2];
	CHECK_I64(cu_create(&t, 0, lo, "ord-lo-0", 1, 1024, 60, NULL, &r), 200);
	apitest_resp_release(&r);
	CHECK_I64(cu_create(&t, 0, other, "ord-other-0", 1, 1024, 60, NULL, &r), 200);
	apitest_resp_release(&r);
	before = deadlocks();
	/* A first batch waits on other's row, so the next two checks queue
	 * up and are decided together. */
	hold = cu_lock_day(t.db.url, acc, other, today);
	writer = cu_lock_day(t.db.url, acc, lo, today); /* the other writer holds lo's row */
	c[0] = (struct call){.server = 0, .path = "/v1/checks/create"};
	snprintf(c[0].body, sizeof(c[0].body),
		 "{\"key_id\":\"%s\",\"sandbox_id\":\"ord-other-1\",\"vcpus\":1,"
		 "\"memory_mib\":1024,\"lease_seconds\":60}",
		 other);
	pthread_create(&th[0], NULL, run_call, &c[0]);
	cu_await_lock_waiters(t.db.conn, 1);
	for (int i = 1; i < 3; i++) {
		c[i] = (struct call){.server = 0, .path = "/v1/checks/create"};
		snprintf(c[i].body, sizeof(c[i].body),
			 "{\"key_id\":\"%s\",\"sandbox_id\":\"ord-%d\",\"vcpus\":1,"
			 "\"memory_mib\":1024,\"lease_seconds\":60}",
			 i == 1 ? lo : hi, i);
		pthread_create(&th[i], NULL, run_call, &c[i]);
	}
	cu_sleep_ms(300); /* both queued behind the first batch */
	cu_sql(hold, "COMMIT");
	PQfinish(hold);
	pthread_join(th[0], NULL);
	CHECK_I64(c[0].status, 200);
	/* The batch of lo and hi now waits for lo's row... */
	cu_await_lock_waiters(t.db.conn, 1);
	/* ...while the writer creates hi's row, as ingestion would. */
	snprintf(
	    sql, sizeof(sql),
	    "INSERT INTO key_day_ledger AS l (account_id, key_id, day) VALUES ('%s', '%s', '%s')"
	    " ON CONFLICT ON CONSTRAINT key_day_ledger_pkey DO UPDATE SET updated_at = now()",
	    acc, hi, today);
	res = PQexec(writer, sql);
	CHECK_STR(PQresStatus(PQresultStatus(res)), "PGRES_COMMAND_OK");
	PQclear(res);
	cu_sql(writer, "COMMIT");
	PQfinish(writer);
	for (int i = 1; i < 3; i++) {
		pthread_join(th[i], NULL);
		CHECK_I64(c[i].status, 200);
	}
	CHECK_I64(deadlocks(), before);
	CHECK_I64(cu_held_mismatches(t.db.conn), 0);
}

/* The same refusal under a key of the caller's own sent to both processes
 * at once, 32 pairs, six times: one stored answer each, replayed to the
 * other attempt, and no deadlock (a refusal to store goes the full path,
 * which locks the ledger row before it writes, as the other attempt's). */
static void test_refusal_pairs(const char *acc)
{
	char key[65], token[APITEST_TOKEN_MAX];
	struct job jobs[NTHREADS];
	struct apitest_resp r;
	long long before;
	int refused = 0, stored = 0;

	CHECK(apitest_create_key(&t, acc, "full", 10, NULL, key, token) == 0);
	/* Both processes meet the key and its day (the fast path's facts). */
	for (int i = 0; i < 2; i++) {
		CHECK_I64(
		    cu_create(&t, i, key, i == 0 ? "rp-prime-0" : "rp-prime-1", 1, 1, 1, NULL, &r),
		    i == 0 ? 200 : 402);
		apitest_resp_release(&r);
	}
	before = deadlocks();
	for (int round = 0; round < 6; round++) {
		for (int i = 0; i < NTHREADS; i++) {
			jobs[i] = (struct job){.i = i, .op = OP_CREATE};
			snprintf(jobs[i].key, sizeof(jobs[i].key), "%s", key);
			snprintf(jobs[i].sandbox, sizeof(jobs[i].sandbox), "rp-%d-%d", round,
				 i / 2);
			snprintf(jobs[i].idem, sizeof(jobs[i].idem), "rp-own-%d-%d", round, i / 2);
		}
		run_all(jobs);
		for (int i = 0; i < NTHREADS; i++)
			if (jobs[i].status == 402 &&
			    strcmp(jobs[i].code, "spending_limit_reached") == 0)
				refused++;
	}
	CHECK_I64(refused, 6 * NTHREADS);
	stored =
	    (int)cu_sql_int(t.db.conn, "SELECT count(*) FROM check_answers WHERE idempotency_key"
				       " LIKE 'rp-own-%%' AND status_code = 402");
	CHECK_I64(stored, 6 * NTHREADS / 2);
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM holds WHERE key_id = '%s'", key), 1);
	CHECK_I64(deadlocks(), before);
	CHECK_I64(cu_over_limit(t.db.conn), 0);
}

int main(void)
{
	char off[32], acc[65];
	const char *args[] = {"--clock-offset-s", off, NULL};
	time_t now = apitest_now();
	struct tm tm;

	/* Tomorrow, 12:00 UTC. */
	noon = now - now % 86400 + 86400 + 12 * 3600;
	gmtime_r(&noon, &tm);
	strftime(today, sizeof(today), "%Y-%m-%d", &tm);
	snprintf(off, sizeof(off), "%lld", cu_offset_to(noon));
	if (apitest_start(&t, "checks_race", 2, args, NULL) < 0)
		return 1;
	CHECK(apitest_create_account(&t, "Race", acc) == 0);
	test_plain_creates(acc);
	test_exact_k(acc);
	test_mixed(acc);
	test_stale_wake_race(acc);
	test_key_spaces(acc);
	test_retry_race(acc, false);
	test_retry_race(acc, true);
	test_limit_race(acc);
	test_new_row_order(acc);
	test_refusal_pairs(acc);
	CHECK(apitest_stop(&t) == 0);
	apitest_drop(&t);
	return check_done();
}
