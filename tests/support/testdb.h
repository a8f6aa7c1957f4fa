/* Throwaway databases for integration tests, in the cluster the pg fixture
 * started (its admin URL is in the file named by METER_TEST_PG_URL_FILE). */
#ifndef METER_TEST_TESTDB_H
#define METER_TEST_TESTDB_H

#include <stddef.h>

#include <libpq-fe.h>

struct testdb {
	char name[64]; /* database name, unique to this process */
	char *url;     /* URL of the new database (owned) */
	PGconn *conn;  /* a connection to it (owned) */
};

/* Creates an empty database named after tag and the pid, connects to it.
 * Returns 0 on success; on failure prints why and returns -1. */
int testdb_create(struct testdb *db, const char *tag);

/* Closes the connection, drops the database, frees the URL. */
void testdb_drop(struct testdb *db);

/* Runs sql; returns its SQLSTATE ("00000" on success) in a static buffer. */
const char *testdb_exec_state(PGconn *conn, const char *sql);

/* The one value of a one-row query into out: "" when it is NULL, or when
 * the query fails or returns another number of rows (then printed). */
void testdb_query_text(PGconn *conn, const char *sql, char *out, size_t len);

/* The value of a one-row integer query; -1 when NULL or on failure. */
long long testdb_query_int(PGconn *conn, const char *sql);

#endif
