/* meter: PostgreSQL connections. */
#ifndef METER_DB_H
#define METER_DB_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "rc.h"

/* The longest schema name (PostgreSQL's NAMEDATALEN less one). */
#define DB_SCHEMA_MAX 63

/* True when name can be meter's schema (database_schema): 1 to 63 of
 * a-z, 0-9 and _, not starting with a digit (an unquoted identifier, so
 * that it means the same quoted or not), and not pg_... (PostgreSQL's). */
bool db_schema_name_ok(const char *name);

/* Sets the schema every connection db_connect opens from then on works in
 * (its search_path; "public" until set). Call before any thread connects.
 * False, changing nothing, when !db_schema_name_ok(name). */
METER_MUSTCHECK bool db_set_schema(const char *name);

/* The schema db_connect's sessions work in. */
const char *db_schema(void);

/* Opens a connection to url (a libpq URI or key=value string) with a
 * connect timeout of 5 s, its search_path the schema of db_set_schema
 * alone (the server's, the database's, the role's or the URL's
 * search_path is not used), the session time zone set to UTC, dates written
 * as YYYY-MM-DD (DateStyle ISO) and the client encoding UTF-8, whatever
 * PGTZ, PGDATESTYLE and PGCLIENTENCODING say; no statement, lock or
 * idle-transaction timeout, read committed, no JIT and synchronous_commit
 * at least on, whatever the database's or the role's defaults say; and
 * application_name "meter" unless the URL names one (its connect_timeout
 * and options are replaced by these); the server's notices go to the log (a WARNING
 * at warn, the rest at debug), not raw to stderr. On METER_OK *out is a new connection (caller
 * PQfinish()es it); on METER_EDB *out is NULL and err holds libpq's reason
 * (never the password). */
METER_MUSTCHECK enum meter_rc db_connect(const char *url, PGconn **out, char *err, size_t errlen);

/* True when the server has closed connection c while nothing was asked on
 * it (a restart, which libpq sees only once it reads): reads what came (a
 * shutdown's FATAL message) without waiting, then, on a second read, its
 * end. */
bool db_idle_closed(PGconn *c);

/* Stops what another thread is doing on a connection, at once, for a
 * shut-down: asks the server to cancel it (cancel, taken over: NULL for
 * none) on a thread of its own, and shuts the connection's socket sock
 * (-1: none) down, so that the thread waiting on it fails now. libpq's
 * PQcancel has no timeout: a server that takes connections and never
 * answers (stopped, hung) would hold its caller for ever, and would not
 * end the query being waited for. sock is the caller's own copy of the
 * connection's socket (dup): libpq closes its descriptor when the
 * connection breaks, and the number may then be another's. */
void db_cancel_now(PGcancel *cancel, int sock);

/* True when libpq can read url and every value it holds (its syntax, its
 * port numbers and the values of sslmode and the like: nothing is
 * connected). Otherwise false, with err naming the option at fault (never
 * its value or the URL: either may hold a password). */
bool db_url_ok(const char *url, char *err, size_t errlen);

#endif
