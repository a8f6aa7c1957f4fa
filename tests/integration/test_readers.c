/* API: readers that ask for much and read slowly or not at all.
 *
 * - Large answers a client never reads: a statement of 40,000 sandboxes
 *   (megabytes, more than the sockets take) asked for by a client that
 *   reads nothing holds its memory until its connection goes. With
 *   answers_memory_mib = 1, a second large answer meanwhile is 503 (reason
 *   answers_memory, Retry-After), a small one (a price list) is still
 *   served, and once the first client has gone the statement is served
 *   again: the memory was given back.
 * - Statements asked for at once (six, each larger than the limit): built
 *   one after another, the others refused (503) as their lines grow, never
 *   built whole; every one is served, byte for byte, when asked again.
 * - Exports asked for one after another: four clients, each asking for its
 *   next (short) export as soon as its last one ended, never hold more than
 *   four at once, so none is refused 429 (at most four run at once),
 *   however long the server takes to close the ended ones' database
 *   connections.
 * - A stop while an export waits for its first rows (behind a lock): the
 *   export is cancelled and answered 503 within the stop's grace.
 * - An export read steadily but slowly: a meterd whose connection_timeout_s
 *   is 2 s streams a 10 MB export to a client that reads 256 KiB every
 *   half second (the kernel's buffers fill, and the socket takes nothing
 *   for seconds at a time), to its end: a connection is idle when its
 *   client takes nothing, not while the client works through what it
 *   was sent. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "apitest.h"
#include "check.h"

#define SANDBOXES 40000
#define EXPORTERS 4
#define EXPORTS	  25 /* each */

static struct apitest t;
static char acc[65], key[65], token[APITEST_TOKEN_MAX];
static char small_acc[65], small_key[65], small_token[APITEST_TOKEN_MAX]; /* 60 sandboxes */

static void sleep_ms(int ms)
{
	struct timespec d = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&d, NULL);
}

/* n sandboxes of account a (key k) in db, named prefix1 ... prefixN, each
 * with usage in the first hours hours of 2026-03. */
static void fill(PGconn *db, const char *a, const char *k, const char *prefix, int n, int hours)
{
	char sql[2048];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state)"
		 " SELECT '%s', '%s' || i, '%s', 1, 512, 'running'"
		 " FROM generate_series(1, %d) i;"
		 "INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_version, key_id,"
		 " day, running_usec, paused_usec, cpu_used_mcus, cpu_billed_mcus, memory_mibus,"
		 " storage_mibus, cpu_micros, memory_micros, storage_micros, total_micros,"
		 " cpu_cum_micros, memory_cum_micros, storage_cum_micros)"
		 " SELECT '%s', '%s' || i, timestamptz '2026-03-01 00:00Z' + h * interval"
		 " '1 hour', 1, '%s', '2026-03-01', 3600000000, 0, 0, 0, 0, 0, 7, 0, 0, 7,"
		 " 7 * (h + 1), 0, 0 FROM generate_series(1, %d) i, generate_series(0, %d) h",
		 a, prefix, k, n, a, prefix, k, n, hours - 1);
	CHECK_STR(testdb_exec_state(db, sql), "00000");
}

/* A connection that asks for path and never reads: its receive buffer is
 * kept small, so the answer stays in meterd. Returns the socket. */
static int ask_and_never_read(const char *path)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)t.servers[0].port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0), small = 4096;
	char req[1024];
	int n;

	CHECK(fd >= 0);
	CHECK(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) == 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	n = snprintf(req, sizeof(req),
		     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n", path,
		     token);
	CHECK(write(fd, req, (size_t)n) == n);
	return fd;
}

static void test_answers_memory(void)
{
	const char *path = "/v1/reports/statement.html?month=2026-03";
	const char *usage_path = "/v1/usage?from=2026-03-01T00:00:00Z&to=2026-03-02T00:00:00Z"
				 "&window=day&group_by=sandbox";
	struct apitest_resp r;
	long long held = 0;
	char *log;
	int fd, i;

	CHECK(apitest_call(&t, 0, "GET", path, token, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	printf("readers: a statement of %d sandboxes is %zu bytes\n", SANDBOXES, r.body_len);
	CHECK(r.body_len > 8u << 20); /* more than both sockets' buffers take */
	apitest_resp_release(&r);

	fd = ask_and_never_read(path);
	for (i = 0; i < 200 && held <= 8LL << 20; i++) {
		held = apitest_metric(&t, 0, "meter_http_answers_held_bytes");
		if (held <= 8LL << 20)
			sleep_ms(50);
	}
	CHECK(held > 8LL << 20);

	/* Another large answer meanwhile: refused, to be asked again. */
	CHECK(apitest_call(&t, 0, "GET", path, token, NULL, &r) == 0);
	CHECK_I64(r.status, 503);
	CHECK_STR(apitest_error_code(&r), "metering_unavailable");
	CHECK(r.json && strcmp(apitest_jstr(json_object_get(r.json, "error"), "reason"),
			       "answers_memory") == 0);
	CHECK(r.headers && strstr(r.headers, "Retry-After: 1") != NULL);
	apitest_resp_release(&r);
	CHECK_I64(apitest_metric(&t, 0, "meter_http_answers_refused_total"), 1);
	/* Refused as its lines grew, not once built whole, and what it had
	 * counted is given back. */
	log = apitest_read_log(&t, 0);
	CHECK(log && strstr(log, "building its answer (0 bytes so far") != NULL);
	free(log);
	CHECK_I64(apitest_metric(&t, 0, "meter_http_answers_building_bytes"), 0);
	/* A small one is served: a price list, and a short statement, whose
	 * build stays small too. */
	CHECK(apitest_call(&t, 0, "GET", "/v1/prices", token, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "GET", path, small_token, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK(r.body && strstr(r.body, "small_60") != NULL);
	CHECK(r.body_len > 8192); /* more than a stream's own buffer */
	apitest_resp_release(&r);
	/* Usage items are counted as they are built (each a tree of JSON
	 * objects before it is text): 60 of them (28 KB of text) are refused
	 * meanwhile, the account's one sum is served. */
	CHECK(apitest_call(&t, 0, "GET", usage_path, small_token, NULL, &r) == 0);
	CHECK_I64(r.status, 503);
	CHECK(r.json && strcmp(apitest_jstr(json_object_get(r.json, "error"), "reason"),
			       "answers_memory") == 0);
	apitest_resp_release(&r);
	CHECK_I64(apitest_metric(&t, 0, "meter_http_answers_building_bytes"), 0);
	CHECK(apitest_call(&t, 0, "GET",
			   "/v1/usage?from=2026-03-01T00:00:00Z&to=2026-03-02T00:00:00Z",
			   small_token, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);

	/* The client goes: its answer's memory is given back, and the
	 * statement is served again, and the usage items. */
	close(fd);
	for (i = 0; i < 100; i++) {
		CHECK(apitest_call(&t, 0, "GET", path, token, NULL, &r) == 0);
		if (r.status == 200)
			break;
		CHECK_I64(r.status, 503);
		apitest_resp_release(&r);
		sleep_ms(100);
	}
	CHECK_I64(r.status, 200);
	apitest_resp_release(&r);
	CHECK(apitest_call(&t, 0, "GET", usage_path, small_token, NULL, &r) == 0);
	CHECK_I64(r.status, 200);
	CHECK_I64((long long)json_array_size(json_object_get(r.json, "items")), 60);
	apitest_resp_release(&r);
	CHECK(apitest_metric(&t, 0, "meter_http_answers_held_bytes") < 1 << 20);
}

#define STATEMENTS 6 /* asked for at once */

struct statement_asker {
	pthread_t thread;
	const char *want; /* the statement, as asked for alone */
	size_t want_len;
	int refused, other;
	bool served; /* byte for byte as asked for alone */
	atomic_bool done;
};

/* Asks for the statement until it is served, as a client told to retry
 * does, for at most 30 s. */
static void *statement_loop(void *arg)
{
	struct statement_asker *a = arg;

	for (int i = 0; i < 150 && !a->served; i++) {
		struct apitest_resp r;

		apitest_call(&t, 0, "GET", "/v1/reports/statement.csv?month=2026-03", token, NULL,
			     &r);
		if (r.status == 200)
			a->served =
			    r.body_len == a->want_len && memcmp(r.body, a->want, a->want_len) == 0;
		else if (r.status == 503 && r.json &&
			 strcmp(apitest_jstr(json_object_get(r.json, "error"), "reason"),
				"answers_memory") == 0)
			a->refused++;
		else
			a->other++;
		apitest_resp_release(&r);
		if (r.status == 200)
			break;
		sleep_ms(200);
	}
	atomic_store(&a->done, true);
	return NULL;
}

/* Statements asked for at once are built one after another, not all at
 * once: each, larger than answers_memory_mib alone, is counted as its lines
 * and text grow, and the others are refused meanwhile (503, to be asked
 * again) before they are built whole. Every one is served in the end: the
 * oldest build is never refused for the younger ones, so that they cannot
 * refuse one another in turn for ever. */
static void test_statements_at_once(void)
{
	struct statement_asker a[STATEMENTS];
	long long refused0 = apitest_metric(&t, 0, "meter_http_answers_refused_total");
	long long building, most = 0;
	struct apitest_resp want;
	int refused = 0, i;
	bool running;

	CHECK(apitest_call(&t, 0, "GET", "/v1/reports/statement.csv?month=2026-03", token, NULL,
			   &want) == 0);
	CHECK_I64(want.status, 200);
	CHECK(want.body_len > 2u << 20);
	for (i = 0; i < STATEMENTS; i++) {
		memset(&a[i], 0, sizeof(a[i]));
		atomic_init(&a[i].done, false);
		a[i].want = want.body;
		a[i].want_len = want.body_len;
		CHECK(pthread_create(&a[i].thread, NULL, statement_loop, &a[i]) == 0);
	}
	/* What is counted as being built, seen meanwhile. */
	do {
		building = apitest_metric(&t, 0, "meter_http_answers_building_bytes");
		if (building > most)
			most = building;
		sleep_ms(20);
		running = false;
		for (i = 0; i < STATEMENTS; i++)
			running |= !atomic_load(&a[i].done);
	} while (running);
	for (i = 0; i < STATEMENTS; i++) {
		pthread_join(a[i].thread, NULL);
		CHECK(a[i].served);
		CHECK_I64(a[i].other, 0);
		refused += a[i].refused;
	}
	printf("readers: %d statements at once: %d refusals before all were served; at most "
	       "%lld bytes counted as being built\n",
	       STATEMENTS, refused, most);
	CHECK(refused > 0);
	CHECK_I64(apitest_metric(&t, 0, "meter_http_answers_refused_total") - refused0, refused);
	CHECK(most > 0);
	CHECK_I64(apitest_metric(&t, 0, "meter_http_answers_building_bytes"), 0);
	apitest_resp_release(&want);
}

struct exporter {
	pthread_t thread;
	int ok, refused, other;
};

static void *export_loop(void *arg)
{
	struct exporter *e = arg;

	for (int i = 0; i < EXPORTS; i++) {
		struct apitest_resp r;

		apitest_call(&t, 0, "GET",
			     "/v1/reports/usage.csv?from=2026-04-01T00:00:00Z"
			     "&to=2026-04-01T01:00:00Z",
			     token, NULL, &r);
		if (r.status == 200)
			e->ok++;
		else if (r.status == 429)
			e->refused++;
		else
			e->other++;
		apitest_resp_release(&r);
	}
	return NULL;
}

static void test_exports_in_turn(void)
{
	struct exporter e[EXPORTERS];
	int ok = 0, refused = 0, other = 0;

	memset(e, 0, sizeof(e));
	for (int i = 0; i < EXPORTERS; i++)
		CHECK(pthread_create(&e[i].thread, NULL, export_loop, &e[i]) == 0);
	for (int i = 0; i < EXPORTERS; i++) {
		pthread_join(e[i].thread, NULL);
		ok += e[i].ok;
		refused += e[i].refused;
		other += e[i].other;
	}
	printf("readers: %d exports in turn by %d clients: %d answered, %d refused 429, %d "
	       "other\n",
	       EXPORTERS * EXPORTS, EXPORTERS, ok, refused, other);
	CHECK_I64(ok, EXPORTERS * EXPORTS);
	CHECK_I64(refused, 0);
	CHECK_I64(other, 0);
}

/* Reads the whole answer on fd, chunk bytes every pause_ms; returns the
 * bytes read, and whether it ended with the last chunk ("0\r\n\r\n"). */
static size_t read_slowly(int fd, size_t chunk, int pause_ms, bool *whole)
{
	char *buf = malloc(chunk), tail[8] = {0};
	size_t total = 0;
	ssize_t n;

	*whole = false;
	for (;;) {
		size_t got = 0;

		while (got < chunk && (n = read(fd, buf + got, chunk - got)) > 0)
			got += (size_t)n;
		total += got;
		if (got >= 5)
			memcpy(tail, buf + got - 5, 5);
		else if (got > 0) {
			memmove(tail, tail + got, 5 - got);
			memcpy(tail + 5 - got, buf, got);
		}
		if (got < chunk)
			break;
		sleep_ms(pause_ms);
	}
	free(buf);
	*whole = memcmp(tail, "0\r\n\r\n", 5) == 0;
	return total;
}

static void test_slow_export(void)
{
	static const char *const env[] = {"METER_CONNECTION_TIMEOUT_S=2", NULL};
	struct apitest t2;
	char acc2[65], key2[65], token2[APITEST_TOKEN_MAX];
	struct sockaddr_in sa = {.sin_family = AF_INET};
	char req[1024];
	size_t got;
	bool whole;
	int fd, n;

	if (apitest_start(&t2, "readers_slow", 1, NULL, env) < 0) {
		CHECK(0);
		return;
	}
	sa.sin_port = htons((uint16_t)t2.servers[0].port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(apitest_create_account(&t2, "Slow", acc2) == 0);
	CHECK(apitest_create_key(&t2, acc2, "read_only", -1, NULL, key2, token2) == 0);
	fill(t2.db.conn, acc2, key2, "sbx_", SANDBOXES, 3);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	n = snprintf(req, sizeof(req),
		     "GET /v1/reports/usage.csv?account_id=%s&from=2026-03-01T00:00:00Z"
		     "&to=2026-03-01T06:00:00Z HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		     "Authorization: Bearer %s\r\nConnection: close\r\n\r\n",
		     acc2, t2.operator_token);
	CHECK(write(fd, req, (size_t)n) == n);
	got = read_slowly(fd, 256 * 1024, 500, &whole);
	close(fd);
	printf("readers: a slow reader took %zu bytes of the export, %s\n", got,
	       whole ? "to its end" : "CUT SHORT");
	CHECK(got > 10u << 20);
	CHECK(whole);
	CHECK(apitest_stop(&t2) == 0);
	apitest_drop(&t2);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Stops t's meterd while an export waits for its first rows behind a lock
 * the test holds: after the grace every request under way has, the
 * export's query is cancelled and its client answered 503, and meterd
 * exits, not waiting for the export's thread as well. */
static void test_stop_waiting_export(void)
{
	PGconn *lock = PQconnectdb(t.db.url);
	char got[4096], *log;
	long long t0, stop_ms;
	size_t len = 0;
	ssize_t n;
	int fd, i;

	CHECK(PQstatus(lock) == CONNECTION_OK);
	CHECK_STR(
	    testdb_exec_state(lock, "BEGIN; LOCK TABLE usage_hourly IN ACCESS EXCLUSIVE MODE"),
	    "00000");
	fd = ask_and_never_read("/v1/reports/usage.csv?from=2026-03-01T00:00:00Z"
				"&to=2026-03-01T01:00:00Z");
	/* Until the export waits for the lock. */
	for (i = 0; i < 100; i++) {
		if (testdb_query_int(t.db.conn, "SELECT count(*) FROM pg_locks WHERE NOT granted"
						" AND relation = 'usage_hourly'::regclass") > 0)
			break;
		sleep_ms(50);
	}
	CHECK(i < 100);
	t0 = now_ms();
	CHECK(apitest_stop(&t) == 0);
	stop_ms = now_ms() - t0;
	printf("readers: stopped in %lld ms with an export waiting for a lock\n", stop_ms);
	/* The 2 s every request under way is given, and no more: the export's
	 * thread was not waited for (3 s more, and said so) at its first
	 * query. (The time is only printed: a loaded machine and the
	 * sanitizers' exit add their own.) */
	log = apitest_read_log(&t, 0);
	CHECK(log && !strstr(log, "exports still stopping"));
	free(log);
	CHECK_STR(testdb_exec_state(lock, "ROLLBACK"), "00000");
	PQfinish(lock);
	while (len < sizeof(got) - 1 && (n = read(fd, got + len, sizeof(got) - 1 - len)) > 0)
		len += (size_t)n;
	got[len] = '\0';
	close(fd);
	CHECK(strncmp(got, "HTTP/1.1 503", 12) == 0);
	CHECK(strstr(got, "the service is stopping") != NULL);
}

int main(void)
{
	static const char *const env[] = {"METER_ANSWERS_MEMORY_MIB=1", NULL};

	if (apitest_start(&t, "readers", 1, NULL, env) < 0)
		return 1;
	CHECK(apitest_create_account(&t, "Readers", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, key, token) == 0);
	CHECK(apitest_create_account(&t, "Small", small_acc) == 0);
	CHECK(apitest_create_key(&t, small_acc, "read_only", -1, NULL, small_key, small_token) ==
	      0);
	fill(t.db.conn, acc, key, "sbx_", SANDBOXES, 1);
	fill(t.db.conn, small_acc, small_key, "small_", 60, 1);
	test_answers_memory();
	test_statements_at_once();
	test_exports_in_turn();
	test_slow_export();
	test_stop_waiting_export();
	apitest_drop(&t);
	return check_done();
}
