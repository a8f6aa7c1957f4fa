/* meter: PostgreSQL connection pool (see dbpool.h). */
#include "dbpool.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "db.h"
#include "db_util.h"
#include "log.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

struct db_slot {
	PGconn *conn;
	bool busy;
};

struct db_pool {
	pthread_mutex_t mu;
	pthread_cond_t freed;
	char *url;
	int size;
	int64_t statement_timeout_ms;
	struct db_slot *slots;
	/* Backoff while the database is unreachable. */
	int failures;
	int64_t next_attempt_ms;
	int64_t failed_ms; /* when the last attempt failed (monotonic) */
	bool up;
	bool reported_down;
	unsigned seed;
};

struct db_pool *db_pool_new(const char *url, int size, int64_t statement_timeout_ms)
{
	struct db_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->url = strdup(url);
	p->slots = calloc((size_t)size, sizeof(*p->slots));
	if (!p->url || !p->slots) {
		free(p->url);
		free(p->slots);
		free(p);
		return NULL;
	}
	p->size = size;
	p->statement_timeout_ms = statement_timeout_ms;
	p->seed = (unsigned)clock_mono_ms();
	if (clock_mono_cond_init(&p->freed) != 0) {
		free(p->url);
		free(p->slots);
		free(p);
		return NULL;
	}
	pthread_mutex_init(&p->mu, NULL);
	return p;
}

void db_pool_free(struct db_pool *pool)
{
	if (!pool)
		return;
	for (int i = 0; i < pool->size; i++)
		if (pool->slots[i].conn)
			PQfinish(pool->slots[i].conn);
	pthread_mutex_destroy(&pool->mu);
	pthread_cond_destroy(&pool->freed);
	free(pool->slots);
	free(pool->url);
	free(pool);
}

/* Called with the lock held after a failed connection attempt. */
static void backoff_failed(struct db_pool *p, const char *why)
{
	int64_t delay = BACKOFF_MIN_MS;

	for (int i = 0; i < p->failures && delay < BACKOFF_MAX_MS; i++)
		delay *= 2;
	if (delay > BACKOFF_MAX_MS)
		delay = BACKOFF_MAX_MS;
	/* Jitter: 75% to 100% of the delay, so replicas do not retry in step. */
	delay = delay * 3 / 4 + rand_r(&p->seed) % (delay / 4 + 1);
	p->failures++;
	p->failed_ms = clock_mono_ms();
	p->next_attempt_ms = p->failed_ms + delay;
	if (p->up || !p->reported_down)
		log_warn("database unreachable, retrying with backoff: %s", why);
	p->up = false;
	p->reported_down = true;
}

/* Called with the lock held after a successful connection attempt. */
static void backoff_ok(struct db_pool *p)
{
	if (!p->up)
		log_info("database connected");
	p->failures = 0;
	p->next_attempt_ms = 0;
	p->up = true;
	p->reported_down = false;
}

/* Opens a connection for a slot and sets the session up. Lock not held. */
static enum meter_rc slot_connect(struct db_pool *p, PGconn **out, char *err, size_t errlen)
{
	PGconn *conn = NULL;
	enum meter_rc rc;

	rc = db_connect(p->url, &conn, err, errlen);
	if (rc != METER_OK)
		return rc;
	/* No idle limit: ingestion of a big document works for seconds
	 * between its statements (db_util_session_timeouts). */
	if (db_util_session_timeouts(conn, "pool session", p->statement_timeout_ms, 0) !=
	    METER_OK) {
		snprintf(err, errlen, "%s", PQerrorMessage(conn));
		PQfinish(conn);
		return METER_EDB;
	}
	if (!db_util_sent_track(conn))
		log_warn("db pool: out of memory: a connection's largest statement is not kept");
	*out = conn;
	return METER_OK;
}

enum meter_rc db_pool_acquire(struct db_pool *pool, int wait_ms, PGconn **out)
{
	struct timespec deadline = clock_mono_after_ms(wait_ms);
	struct db_slot *slot = NULL;
	char err[256];
	PGconn *conn = NULL;
	enum meter_rc rc;

	/* What this thread last saw fail belongs to its last borrower. */
	db_util_failed_clear();
	pthread_mutex_lock(&pool->mu);
	for (;;) {
		/* Prefer a slot that is already connected. */
		for (int i = 0; i < pool->size && !slot; i++)
			if (!pool->slots[i].busy && pool->slots[i].conn)
				slot = &pool->slots[i];
		for (int i = 0; i < pool->size && !slot; i++)
			if (!pool->slots[i].busy)
				slot = &pool->slots[i];
		if (slot)
			break;
		if (pthread_cond_timedwait(&pool->freed, &pool->mu, &deadline) == ETIMEDOUT) {
			pthread_mutex_unlock(&pool->mu);
			return METER_EIO;
		}
	}
	if (slot->conn && db_idle_closed(slot->conn)) {
		/* Replaced below, at once: the server may be back already. */
		PQfinish(slot->conn);
		slot->conn = NULL;
	}
	if (slot->conn) {
		slot->busy = true;
		*out = slot->conn;
		pthread_mutex_unlock(&pool->mu);
		return METER_OK;
	}
	if (pool->failures > 0 && clock_mono_ms() < pool->next_attempt_ms) {
		pthread_mutex_unlock(&pool->mu);
		return METER_EDB;
	}
	slot->busy = true;
	pthread_mutex_unlock(&pool->mu);

	rc = slot_connect(pool, &conn, err, sizeof(err));

	pthread_mutex_lock(&pool->mu);
	if (rc == METER_OK) {
		backoff_ok(pool);
		slot->conn = conn;
		*out = conn;
	} else {
		backoff_failed(pool, err);
		slot->busy = false;
		pthread_cond_signal(&pool->freed);
	}
	pthread_mutex_unlock(&pool->mu);
	return rc;
}

void db_pool_release(struct db_pool *pool, PGconn *conn, bool broken)
{
	if (!conn)
		return;
	if (PQstatus(conn) != CONNECTION_OK || PQtransactionStatus(conn) != PQTRANS_IDLE)
		broken = true;
	/* libpq keeps the output buffer a large statement grew (a call
	 * ingesting 100,000 sandboxes: 64 MB) for the connection's life, and
	 * each pooled connection would keep its own: such a connection is
	 * closed and the slot's next borrower connects again. */
	if (!broken && db_util_sent_most(conn) > DB_POOL_KEEP_SENT_BYTES) {
		log_debug("db pool: closing a connection that sent a statement of %zu bytes",
			  db_util_sent_most(conn));
		broken = true;
	}
	pthread_mutex_lock(&pool->mu);
	for (int i = 0; i < pool->size; i++) {
		struct db_slot *s = &pool->slots[i];
		if (s->conn != conn)
			continue;
		/* A lost connection is not an unreachable database (one
		 * backend terminated, or a server restarted since): the next
		 * borrower of the slot connects again at once, and only a
		 * connection attempt that fails starts the backoff. Before, the
		 * loss started it, and for 75 to 100 ms every request that found
		 * no open connection was refused 503 while the server was up. */
		if (broken) {
			PQfinish(conn);
			s->conn = NULL;
		}
		s->busy = false;
		break;
	}
	pthread_cond_signal(&pool->freed);
	pthread_mutex_unlock(&pool->mu);
}

bool db_conn_failed(PGconn *conn)
{
	/* A session made while the database's default_transaction_read_only
	 * was on keeps it for life: once a statement of it was refused for
	 * that (25006), it is made again, with the default as it is then. */
	return PQstatus(conn) != CONNECTION_OK || db_util_read_only(db_util_failed_state());
}

/* Waits for the result of a sent query for at most timeout_ms.
 * METER_OK when it completed with status want. */
static enum meter_rc wait_result(PGconn *conn, int timeout_ms, ExecStatusType want)
{
	int64_t deadline = clock_mono_ms() + timeout_ms;
	enum meter_rc rc = METER_EDB;
	PGresult *res;

	while (PQisBusy(conn)) {
		struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLIN};
		int64_t left = deadline - clock_mono_ms();

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			return METER_EIO;
		if (!PQconsumeInput(conn))
			return METER_EDB;
	}
	while ((res = PQgetResult(conn)) != NULL) {
		if (PQresultStatus(res) == want)
			rc = METER_OK;
		PQclear(res);
	}
	return rc;
}

enum meter_rc db_pool_ping(struct db_pool *pool, int timeout_ms)
{
	PGconn *conn;
	enum meter_rc rc;

	rc = db_pool_acquire(pool, timeout_ms, &conn);
	if (rc != METER_OK)
		return rc;
	if (!PQsendQuery(conn, "SELECT 1")) {
		db_pool_release(pool, conn, true);
		return METER_EDB;
	}
	rc = wait_result(conn, timeout_ms, PGRES_TUPLES_OK);
	/* A server that does not answer in time is treated as gone: the
	 * connection is dropped (closing it abandons the query). */
	db_pool_release(pool, conn, rc != METER_OK);
	return rc;
}

void db_pool_retry_after(struct db_pool *pool, int64_t reached_ms)
{
	pthread_mutex_lock(&pool->mu);
	if (pool->failures > 0 && reached_ms > pool->failed_ms)
		pool->next_attempt_ms = 0;
	pthread_mutex_unlock(&pool->mu);
}

bool db_pool_up(struct db_pool *pool)
{
	bool up;

	pthread_mutex_lock(&pool->mu);
	up = pool->up;
	pthread_mutex_unlock(&pool->mu);
	return up;
}
