/* meter: a fixed-size pool of PostgreSQL connections that survives outages.
 *
 * Connections are opened lazily. While the database is down, attempts are
 * spaced by an exponential backoff with jitter (100 ms doubling to 5 s), and
 * callers get METER_EDB at once instead of waiting on a dead server: a check
 * fails closed, fast. A connection found broken is dropped when released and
 * reopened on a later acquire, so service recovers by itself. */
#ifndef METER_DBPOOL_H
#define METER_DBPOOL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "rc.h"

struct db_pool;

/* A new pool of size connections to url; statement_timeout_ms is set on each
 * connection. NULL when out of memory. Nothing is connected yet. */
struct db_pool *db_pool_new(const char *url, int size, int64_t statement_timeout_ms);

/* Closes every connection and frees the pool. No connection may be out. */
void db_pool_free(struct db_pool *pool);

/* Borrows a connection, waiting up to wait_ms for a free one. Connects if
 * the slot has none (subject to the backoff), or if the server has closed
 * its idle one (a restart: replaced at once, not failed). On METER_OK *out
 * is borrowed until db_pool_release(). METER_EDB when the database cannot
 * be reached now, METER_EIO when every connection stayed busy for wait_ms.
 * Clears this thread's db_util_failed_state(): a request starts with no
 * failure seen. */
METER_MUSTCHECK enum meter_rc db_pool_acquire(struct db_pool *pool, int wait_ms, PGconn **out);

/* A connection that sent a statement larger than this (db_util_sent_most)
 * is closed when released: libpq would keep a buffer that large. One kept
 * has at most twice this in that buffer (a power of two above the
 * statement and its protocol's framing). */
#define DB_POOL_KEEP_SENT_BYTES (4 * 1024 * 1024)

/* Returns a borrowed connection. broken: the caller saw it fail (a
 * connection-level error); it is closed, and the slot's next borrower
 * connects again (at once: only a failed attempt to connect starts the
 * backoff). A connection left inside a transaction is treated as broken,
 * and one that ever sent more than DB_POOL_KEEP_SENT_BYTES is closed too. */
void db_pool_release(struct db_pool *pool, PGconn *conn, bool broken);

/* Runs "SELECT 1" on a pooled connection within timeout_ms.
 * METER_OK when the database answered. */
METER_MUSTCHECK enum meter_rc db_pool_ping(struct db_pool *pool, int timeout_ms);

/* Another connection of the process reached the database at reached_ms
 * (clock_mono_ms; 0: none has): if that was after the pool's last failed
 * attempt, its backoff ends and the next acquire that needs a connection
 * tries at once (a failure backs off from where it was). */
void db_pool_retry_after(struct db_pool *pool, int64_t reached_ms);

/* Whether the last attempt to reach the database worked. */
bool db_pool_up(struct db_pool *pool);

/* True when the connection itself failed, rather than the statement, or
 * the session cannot write (the thread's last failure was 25006): either
 * way it is to be made again. */
bool db_conn_failed(PGconn *conn);

#endif
