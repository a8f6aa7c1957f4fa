/* Integration: the connection pool against a real server, and against a
 * loopback port that takes connections and closes them at once (a server
 * that cannot be reached), counting the attempts that reach it.
 * - A connection lost in use (its backend terminated) is replaced by the
 *   next acquire at once: a lost connection is not an unreachable
 *   database, and no backoff refuses the requests meanwhile.
 * - An idle connection the server closed (a restart) is replaced at once.
 * - A failed attempt starts the backoff, doubling with each failure: an
 *   acquire within it fails without reaching the server; a connection of
 *   the process that reached the database since (db_pool_retry_after)
 *   ends it; once it has passed, the next acquire tries again.
 * - A connection that sent a statement larger than DB_POOL_KEEP_SENT_BYTES
 *   is closed when released (libpq would keep a buffer that large for its
 *   life); one that sent up to that is kept, and so is another connection
 *   held and used by the same thread meanwhile. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "clock.h"
#include "db_util.h"
#include "dbpool.h"
#include "testdb.h"

struct closer {
	int fd;
	atomic_int accepted;
	atomic_bool stop;
	pthread_t thread;
};

/* Accepts every connection and closes it at once, until stopped. */
static void *closer_main(void *arg)
{
	struct closer *c = arg;

	while (!atomic_load(&c->stop)) {
		struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
		int s;

		if (poll(&pfd, 1, 50) <= 0)
			continue;
		s = accept(c->fd, NULL, NULL);
		if (s >= 0) {
			atomic_fetch_add(&c->accepted, 1);
			close(s);
		}
	}
	return NULL;
}

/* A closer on a free loopback port; its port, or 0 on failure. */
static int closer_start(struct closer *c)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);

	atomic_init(&c->accepted, 0);
	atomic_init(&c->stop, false);
	c->fd = socket(AF_INET, SOCK_STREAM, 0);
	if (c->fd < 0 || bind(c->fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    listen(c->fd, 16) != 0 || getsockname(c->fd, (struct sockaddr *)&a, &len) != 0 ||
	    pthread_create(&c->thread, NULL, closer_main, c) != 0) {
		perror("closer");
		if (c->fd >= 0)
			close(c->fd);
		return 0;
	}
	return ntohs(a.sin_port);
}

static void closer_stop(struct closer *c)
{
	atomic_store(&c->stop, true);
	pthread_join(c->thread, NULL);
	close(c->fd);
}

static void sleep_ms(int ms)
{
	struct timespec d = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&d, NULL);
}

/* Terminates backend pid from admin and waits (up to 10 s) until it is
 * gone; true when it is. */
static bool terminate(PGconn *admin, int pid)
{
	char sql[128];

	snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%d)::int", pid);
	if (testdb_query_int(admin, sql) != 1)
		return false;
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM pg_stat_activity WHERE pid = %d", pid);
	for (int i = 0; i < 1000; i++) {
		if (testdb_query_int(admin, sql) == 0)
			return true;
		sleep_ms(10);
	}
	return false;
}

/* Waits (up to 10 s) until the server has closed conn's socket, without
 * reading from it; true when it has. */
static bool peer_closed(PGconn *conn)
{
	struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLRDHUP};

	return poll(&pfd, 1, 10000) == 1 && (pfd.revents & (POLLRDHUP | POLLHUP));
}

/* True when conn answers SELECT 1. */
static bool answers(PGconn *conn)
{
	PGresult *res = PQexec(conn, "SELECT 1");
	bool ok = PQresultStatus(res) == PGRES_TUPLES_OK;

	PQclear(res);
	return ok;
}

static void lost_connections(const struct testdb *db)
{
	struct db_pool *pool = db_pool_new(db->url, 1, 5000);
	PGconn *conn = NULL;
	int pid;

	CHECK(pool != NULL);
	if (!pool)
		return;
	CHECK_I64(db_pool_acquire(pool, 1000, &conn), METER_OK);
	if (!conn) {
		db_pool_free(pool);
		return;
	}
	pid = PQbackendPID(conn);

	/* Lost in use: the statement fails, the caller releases it broken,
	 * and the next acquire (well within the backoff's 75 ms) connects. */
	CHECK(terminate(db->conn, pid));
	CHECK(!answers(conn));
	CHECK(db_conn_failed(conn));
	db_pool_release(pool, conn, true);
	conn = NULL;
	CHECK_I64(db_pool_acquire(pool, 0, &conn), METER_OK);
	CHECK(db_pool_up(pool));
	if (conn) {
		CHECK(PQbackendPID(conn) != pid);
		CHECK(answers(conn));
		pid = PQbackendPID(conn);
		db_pool_release(pool, conn, false);
	}

	/* Closed by the server while idle in the pool: replaced at once.
	 * (Once its socket is closed: the backend leaves pg_stat_activity
	 * before it exits, and a connection that has only sent its last
	 * error is not yet seen closed.) */
	CHECK(terminate(db->conn, pid));
	CHECK(peer_closed(conn));
	conn = NULL;
	CHECK_I64(db_pool_acquire(pool, 0, &conn), METER_OK);
	if (conn) {
		CHECK(PQbackendPID(conn) != pid);
		CHECK(answers(conn));
		db_pool_release(pool, conn, false);
	}
	CHECK_I64(db_pool_ping(pool, 1000), METER_OK);
	db_pool_free(pool);
}

/* Sends a binary parameter of len bytes on conn; true when the server
 * counted them all. */
static bool send_bytes(PGconn *conn, const char *bytes, size_t len)
{
	const char *values[1] = {bytes};
	const int lengths[1] = {(int)len}, formats[1] = {1};
	char want[32];
	bool timed_out, ok;
	PGresult *res = db_util_exec_within(conn, "SELECT octet_length($1::bytea)", 1, NULL, values,
					    lengths, formats, 0, 10000, &timed_out);

	snprintf(want, sizeof(want), "%zu", len);
	ok = !timed_out && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
	     strcmp(PQgetvalue(res, 0, 0), want) == 0;
	PQclear(res);
	return ok;
}

static void large_statements(const struct testdb *db)
{
	const size_t keep = DB_POOL_KEEP_SENT_BYTES;
	const size_t text = strlen("SELECT octet_length($1::bytea)");
	struct db_pool *pool = db_pool_new(db->url, 2, 5000);
	char *bytes = calloc(1, keep + 1);
	PGconn *a = NULL, *b = NULL, *other = NULL;
	int pid_a, pid_b;

	CHECK(pool != NULL && bytes != NULL);
	if (!pool || !bytes)
		goto out;
	CHECK_I64(db_pool_acquire(pool, 1000, &a), METER_OK);
	CHECK_I64(db_pool_acquire(pool, 1000, &b), METER_OK);
	if (!a || !b)
		goto out;
	pid_a = PQbackendPID(a);
	pid_b = PQbackendPID(b);
	CHECK_I64(db_util_sent_most(a), 0);

	/* Up to the bound, text and parameter together: kept, and what it
	 * sent is the connection's, whoever borrows it next. */
	CHECK(send_bytes(a, bytes, keep - text));
	CHECK_I64(db_util_sent_most(a), keep);
	db_pool_release(pool, a, false);
	a = NULL;
	CHECK_I64(db_pool_acquire(pool, 0, &a), METER_OK);
	if (!a)
		goto out;
	CHECK_I64(PQbackendPID(a), pid_a);
	CHECK_I64(db_util_sent_most(a), keep);

	/* One byte more on a, while b is held and used too: a is closed when
	 * released, b is kept, and a's slot connects again at once. */
	CHECK(send_bytes(a, bytes, keep + 1 - text));
	CHECK(send_bytes(b, bytes, 1));
	CHECK(send_bytes(a, bytes, 1));
	CHECK_I64(db_util_sent_most(a), keep + 1);
	CHECK_I64(db_util_sent_most(b), text + 1);
	db_pool_release(pool, b, false);
	db_pool_release(pool, a, false);
	a = b = NULL;
	CHECK_I64(db_pool_acquire(pool, 0, &a), METER_OK);
	CHECK_I64(db_pool_acquire(pool, 0, &b), METER_OK);
	CHECK(db_pool_up(pool));
	if (!a || !b)
		goto out;
	if (PQbackendPID(a) == pid_b) {
		PGconn *t = a;

		a = b;
		b = t;
	}
	CHECK_I64(PQbackendPID(b), pid_b);
	CHECK(PQbackendPID(a) != pid_a);
	CHECK_I64(db_util_sent_most(a), 0);
	CHECK(send_bytes(a, bytes, 1));

	/* A connection outside the pool is not tracked: its statements,
	 * however large, close no pooled connection. */
	other = PQconnectdb(db->url);
	CHECK(PQstatus(other) == CONNECTION_OK);
	if (PQstatus(other) == CONNECTION_OK) {
		CHECK(send_bytes(other, bytes, keep + 1));
		CHECK_I64(db_util_sent_most(other), 0);
	}
	pid_a = PQbackendPID(a);
	db_pool_release(pool, a, false);
	a = NULL;
	CHECK_I64(db_pool_acquire(pool, 0, &a), METER_OK);
	CHECK(a && PQbackendPID(a) == pid_a); /* b is still held */
out:
	if (other)
		PQfinish(other);
	if (a)
		db_pool_release(pool, a, false);
	if (b)
		db_pool_release(pool, b, false);
	free(bytes);
	if (pool)
		db_pool_free(pool);
}

static void failed_attempts(void)
{
	struct closer c;
	int port = closer_start(&c);
	char url[160];
	struct db_pool *pool;
	PGconn *conn = NULL;
	int seen;

	CHECK(port != 0);
	if (!port)
		return;
	snprintf(url, sizeof(url), "postgresql://meter@127.0.0.1:%d/meter?sslmode=disable", port);
	pool = db_pool_new(url, 2, 5000);
	CHECK(pool != NULL);
	if (!pool) {
		closer_stop(&c);
		return;
	}

	CHECK_I64(db_pool_acquire(pool, 0, &conn), METER_EDB);
	CHECK(conn == NULL);
	CHECK(!db_pool_up(pool));
	seen = atomic_load(&c.accepted);
	CHECK(seen >= 1);

	/* Another connection of the process reached the database since the
	 * last failure: the next acquire tries at once. Three more failures
	 * make the backoff 600 to 800 ms. */
	for (int i = 0; i < 3; i++) {
		db_pool_retry_after(pool, clock_mono_ms() + 1);
		CHECK_I64(db_pool_acquire(pool, 0, &conn), METER_EDB);
		CHECK(atomic_load(&c.accepted) > seen);
		seen = atomic_load(&c.accepted);
	}

	/* Within the backoff: no attempt, on either slot, nor for a reach
	 * of the database before the last failure. */
	CHECK_I64(db_pool_acquire(pool, 0, &conn), METER_EDB);
	CHECK_I64(db_pool_acquire(pool, 0, &conn), METER_EDB);
	CHECK_I64(db_pool_ping(pool, 100), METER_EDB);
	db_pool_retry_after(pool, 1);
	CHECK_I64(db_pool_acquire(pool, 0, &conn), METER_EDB);
	CHECK_I64(atomic_load(&c.accepted), seen);
	CHECK(!db_pool_up(pool));

	/* Once it has passed, the next acquire tries again. */
	sleep_ms(900);
	CHECK_I64(db_pool_acquire(pool, 0, &conn), METER_EDB);
	CHECK(atomic_load(&c.accepted) > seen);

	db_pool_free(pool);
	closer_stop(&c);
}

int main(void)
{
	struct testdb db;

	if (testdb_create(&db, "dbpool") != 0) {
		CHECK(0);
		return check_done();
	}
	lost_connections(&db);
	large_statements(&db);
	failed_attempts();
	testdb_drop(&db);
	return check_done();
}
