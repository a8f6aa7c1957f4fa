/* Integration: SIGTERM under load on connections kept alive. Clients post
 * create checks back to back, each on a connection of its own that it keeps
 * while the answers let it; meterd is stopped in the middle. Every request
 * that meterd took must be answered: no access line of an answer that was
 * queued and never sent (status set, aborted=1), no connection kept alive
 * after an answer that is cut with a request on it, and every 200 has its
 * sandbox in the database. Once stopping, answers close their connections
 * and new connections are refused at once, while a check under way is
 * still decided and answered. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "apitest.h"
#include "check.h"
#include "checks_util.h"
#include "rawhttp.h"

#define CLIENTS 16

static struct apitest t;
static char key[65];
static int port;
static atomic_bool done;
static atomic_long allowed, refused_503, cut_kept_alive, closed_answers;

/* One client: a connection kept alive while its answers allow, checks back
 * to back, until meterd no longer takes connections (or 20 s). */
static void *client(void *arg)
{
	int id = *(const int *)arg, fd = -1, n = 0;
	bool answered_here = false; /* the connection has carried an answer */
	long long t0 = rawhttp_now_ms();

	while (!atomic_load(&done) && rawhttp_now_ms() - t0 < 20000) {
		char body[256], req[768], conn_hdr[32];
		struct rawhttp_resp r;
		int len, blen;

		if (fd < 0) {
			fd = rawhttp_connect(port);
			if (fd < 0)
				break; /* refused: meterd has stopped */
			answered_here = false;
		}
		blen = snprintf(body, sizeof(body),
				"{\"key_id\":\"%s\",\"sandbox_id\":\"sd-%d-%d\",\"vcpus\":1,"
				"\"memory_mib\":512,\"lease_seconds\":60}",
				key, id, n++);
		len = snprintf(req, sizeof(req),
			       "POST /v1/checks/create HTTP/1.1\r\nHost: x\r\n"
			       "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
			       "Content-Length: %d\r\n\r\n%s",
			       t.control_plane_token, blen, body);
		if (rawhttp_send(fd, req, (size_t)len, 5000) != 0 ||
		    rawhttp_read(fd, 15000, 1 << 20, &r) != 0) {
			/* Cut with a request on it: on a connection meterd had
			 * answered and kept open, that request was taken and
			 * never answered. (A connection made after the stop
			 * began is never taken: not counted.) */
			if (answered_here)
				atomic_fetch_add(&cut_kept_alive, 1);
			rawhttp_resp_release(&r);
			close(fd);
			fd = -1;
			continue;
		}
		answered_here = true;
		if (r.status == 200)
			atomic_fetch_add(&allowed, 1);
		else if (r.status == 503)
			atomic_fetch_add(&refused_503, 1);
		else
			fprintf(stderr, "client %d: status %d %s\n", id, r.status,
				r.body ? r.body : "");
		if (r.closed || (rawhttp_header(&r, "Connection", conn_hdr, sizeof(conn_hdr)) &&
				 strcasecmp(conn_hdr, "close") == 0)) {
			atomic_fetch_add(&closed_answers, 1);
			close(fd);
			fd = -1;
		}
		rawhttp_resp_release(&r);
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* Server i stopping while a check waits for its key-day's ledger row,
 * which the test holds: a connection attempt meanwhile is refused at once
 * (not taken into the kernel's queue and reset at the exit, which a
 * caller could not tell from a lost answer); the check waiting is decided
 * and answered once the row is let go, and meterd exits with status 0. */
static void test_refused_while_draining(int i, const char *acc)
{
	struct apitest_resp r;
	struct rawhttp_resp rr;
	char day[16] = "", body[256], req[768];
	PGconn *lock;
	pid_t pid = t.servers[i].pid;
	int fd, late, late_errno, blen, len, status = -1;

	CHECK_I64(cu_create(&t, i, key, "drain-first", 1, 512, 60, NULL, &r), 200);
	snprintf(day, sizeof(day), "%.10s", apitest_json_str(&r, "day") ?: "");
	apitest_resp_release(&r);
	lock = cu_lock_day(t.db.url, acc, key, day);
	fd = rawhttp_connect(t.servers[i].port);
	CHECK(fd >= 0);
	blen = snprintf(body, sizeof(body),
			"{\"key_id\":\"%s\",\"sandbox_id\":\"drain-held\",\"vcpus\":1,"
			"\"memory_mib\":512,\"lease_seconds\":60}",
			key);
	len = snprintf(req, sizeof(req),
		       "POST /v1/checks/create HTTP/1.1\r\nHost: x\r\n"
		       "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
		       "Content-Length: %d\r\n\r\n%s",
		       t.control_plane_token, blen, body);
	CHECK(rawhttp_send(fd, req, (size_t)len, 5000) == 0);
	cu_await_lock_waiters(t.db.conn, 1);
	CHECK(kill(pid, SIGTERM) == 0);
	/* Until the signal is taken a connection may still be made (and is
	 * closed here); from then on, while the check still waits, none. */
	for (int w = 0; w < 100; w++) {
		late = rawhttp_connect(t.servers[i].port);
		late_errno = errno;
		if (late < 0)
			break;
		close(late);
		cu_sleep_ms(50);
	}
	CHECK(late < 0);
	CHECK_I64(late_errno, ECONNREFUSED);
	CHECK(waitpid(pid, &status, WNOHANG) == 0); /* still draining */
	cu_sql(lock, "ROLLBACK");
	PQfinish(lock);
	CHECK(rawhttp_read(fd, 15000, 1 << 20, &rr) == 0);
	CHECK_I64(rr.status, 200);
	rawhttp_resp_release(&rr);
	close(fd);
	for (int w = 0; w < 500 && waitpid(pid, &status, WNOHANG) == 0; w++)
		cu_sleep_ms(20);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	t.servers[i].pid = 0;
	CHECK_I64(cu_sql_int(t.db.conn, "SELECT count(*) FROM sandboxes"
					" WHERE sandbox_id = 'drain-held'"),
		  1);
}

int main(void)
{
	static int ids[CLIENTS];
	pthread_t th[CLIENTS];
	char acc[65], token[APITEST_TOKEN_MAX], sql[256], v[32];
	char *log;
	long aborted_answers = 0;

	if (apitest_start(&t, "shutdown", 2, NULL, NULL) < 0) {
		CHECK(0);
		return check_done();
	}
	port = t.servers[0].port;
	CHECK(apitest_create_account(&t, "Shutdown", acc) == 0);
	CHECK(apitest_create_key(&t, acc, "full", -1, NULL, key, token) == 0);
	for (int i = 0; i < CLIENTS; i++) {
		ids[i] = i;
		CHECK(pthread_create(&th[i], NULL, client, &ids[i]) == 0);
	}
	{
		const struct timespec load = {.tv_sec = 1, .tv_nsec = 500 * 1000000L};

		nanosleep(&load, NULL);
	}
	CHECK_I64(apitest_stop_one(&t, 0), 0);
	atomic_store(&done, true);
	for (int i = 0; i < CLIENTS; i++)
		pthread_join(th[i], NULL);
	fprintf(stderr,
		"allowed %ld, 503 %ld, answers that closed their connection %ld,"
		" kept-alive connections cut with a request on them %ld\n",
		atomic_load(&allowed), atomic_load(&refused_503), atomic_load(&closed_answers),
		atomic_load(&cut_kept_alive));
	CHECK(atomic_load(&allowed) > 100); /* the load was real */
	CHECK_I64(atomic_load(&cut_kept_alive), 0);
	/* meterd's side: no answer queued and never sent. */
	log = apitest_read_log(&t, 0);
	CHECK(log != NULL);
	for (const char *p = log; p && (p = strstr(p, "access rid=")) != NULL; p++) {
		const char *end = strchr(p, '\n');
		const char *st = strstr(p, " status=");

		if (st && (!end || st < end) && strncmp(st, " status=0 ", 10) != 0) {
			const char *ab = strstr(p, " aborted=1");

			if (ab && (!end || ab < end))
				aborted_answers++;
		}
	}
	free(log);
	CHECK_I64(aborted_answers, 0);
	/* Every 200 is durable: its sandbox is there (and no other). */
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM sandboxes WHERE sandbox_id LIKE 'sd-%%'");
	testdb_query_text(t.db.conn, sql, v, sizeof(v));
	CHECK_I64(strtoll(v, NULL, 10), atomic_load(&allowed));
	test_refused_while_draining(1, acc);
	apitest_drop(&t);
	return check_done();
}
