/* meter: small helpers shared by the db_* query files: run a parameterised
 * statement, read typed columns, transactions, and values in PostgreSQL's
 * binary forms (binary COPY, array parameters).
 *
 * Parameters are always sent separately from the SQL text (no quoting by
 * hand) and are never logged: they may hold names or hashes. Times cross
 * the boundary going in as text (RFC 3339, exact to the µs) or binary µs,
 * and coming out as bigint µs since the epoch (DB_USEC below), never as
 * floating point. */
#ifndef METER_DB_UTIL_H
#define METER_DB_UTIL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rc.h"

/* SQL expression: timestamptz x as bigint µs since the epoch (exact:
 * extract returns numeric). x must be a literal SQL fragment. */
#define DB_USEC(x) "(extract(epoch FROM " x ") * 1000000)::bigint"

/* The money of the CPU the usage rows x of relation ROWS used, without the
 * floor's top-up: each price version's used millicore-microseconds priced
 * at its CPU rate, rounded down, summed (the top-up is their cpu_micros
 * less this). One formula for every page that shows the split. */
#define DB_CPU_USED(ROWS)                                                                          \
	"(SELECT COALESCE(sum(v.used), 0) FROM (SELECT div(sum(x.cpu_used_mcus)"                   \
	" * p.cpu_micros_per_vcpu_hour, 3600000000000) AS used FROM " ROWS " x"                    \
	" JOIN price_book p ON p.version = x.price_version"                                        \
	" GROUP BY p.version, p.cpu_micros_per_vcpu_hour) v)"

/* An integer macro's value as a string literal, for SQL text. */
#define DB_STR_(x) #x
#define DB_STR(x)  DB_STR_(x)

/* The longest db_util_exec waits for an answer, in ms (0, the default:
 * as long as it takes). meterd sets it past the statement timeout, which
 * the server keeps: so a server that stopped answering (its process
 * stopped, a network that drops packets) fails the statement and drops
 * the connection (PQstatus bad), instead of holding the caller's thread
 * until it answers. Set once, before the threads that query start. */
void db_util_set_deadline_ms(int64_t ms);

/* How much longer than the statement timeout meter waits for an answer
 * before it gives the server up (requests, ingestion, checks). */
#define DB_UTIL_DEADLINE_SLACK_MS 2000

/* Sets conn's session up: statements cancelled by the server past
 * statement_timeout_ms (0: never), and a transaction left idle for
 * idle_tx_ms (0: no limit) ended by the server, with its connection. The
 * check engine's, the sweeper's and the webhook deliverer's connections
 * take db_util_idle_tx_ms() (their steps between two statements take
 * milliseconds): a meterd that stopped (SIGSTOP, a debugger, a paused VM)
 * while it held row locks, a key-day's ledger row say, does not hold
 * every other process's checks on them until it runs again. The request
 * pool's take none: ingestion of a big document works for seconds between
 * its statements. */
METER_MUSTCHECK enum meter_rc db_util_session_timeouts(PGconn *conn, const char *what,
						       int64_t statement_timeout_ms,
						       int64_t idle_tx_ms);

/* The idle-in-transaction limit for a statement timeout: half of it, so
 * that a statement waiting on the locks of a stopped process gets them
 * before its own timeout, and at least 1 s (no limit when the statement
 * timeout is 0). */
int64_t db_util_idle_tx_ms(int64_t statement_timeout_ms);

/* Waits at most ms (no limit when <= 0) until conn's answer can be read
 * without blocking. false when the time ran out: the socket is then shut
 * and the connection bad (what the statement did is unknown). */
bool db_util_await(PGconn *conn, int64_t ms);

/* PQexecParams waiting at most ms for the answer (no limit when <= 0).
 * NULL with *timed_out set when the time ran out (db_util_await). Not for
 * COPY. Like PQexecParams, the result is the last one, or the first
 * error. */
PGresult *db_util_exec_within(PGconn *conn, const char *sql, int n, const Oid *types,
			      const char *const *values, const int *lengths, const int *formats,
			      int result_format, int64_t ms, bool *timed_out);

/* Runs sql with n text parameters (NULL entries are SQL NULL). On METER_OK
 * *res (may be NULL to discard) is the result, caller PQclear()s. On
 * failure logs what plus the SQLSTATE and message, copies the SQLSTATE into
 * sqlstate (6 bytes, may be NULL; "" when there was no answer) and returns
 * METER_EDB. */
METER_MUSTCHECK enum meter_rc db_util_exec(PGconn *conn, const char *what, const char *sql, int n,
					   const char *const *params, PGresult **res,
					   char *sqlstate);

/* db_util_exec of a query whose rows say whether something exists:
 * METER_OK for a row, METER_ENOTFOUND for none, or the failure. */
METER_MUSTCHECK enum meter_rc db_util_exists(PGconn *conn, const char *what, const char *sql, int n,
					     const char *const *params);

/* The SQLSTATE of the latest statement db_util_exec saw fail on this
 * thread since db_util_failed_clear(), or "" (borrowed, thread-local). An
 * HTTP request runs on one thread from its pool connection to its answer,
 * so the answer can tell a statement timeout (57014) from other failures
 * without every query function passing the state up. */
const char *db_util_failed_state(void);
void db_util_failed_clear(void);

/* libpq grows a connection's output buffer to the largest message it sent
 * and keeps it for the connection's life: the pool closes a connection
 * that sent more than DB_POOL_KEEP_SENT_BYTES (dbpool.h). After
 * db_util_sent_track(conn) (false when out of memory: nothing is kept),
 * db_util_sent_most(conn) is the largest statement (its text and
 * parameters, in bytes) conn sent through db_util_exec_within; 0 for a
 * connection not tracked. */
METER_MUSTCHECK bool db_util_sent_track(PGconn *conn);
size_t db_util_sent_most(const PGconn *conn);

/* Records res (a failed result; NULL when none came back) as this thread's
 * latest failure, for db_util_failed_state(): for the code that runs its
 * statements itself rather than through db_util_exec (ingestion, the
 * statement, the export). */
void db_util_failed_note(const PGresult *res);

/* True when sqlstate is the database's lack of resources (class 53: disk
 * full, out of memory, too many connections, a configured limit). */
bool db_util_short_of_resources(const char *sqlstate);

/* True when sqlstate is a write refused for the database taking none
 * (25006 read_only_sql_transaction: a standby, or a session made while
 * default_transaction_read_only was on, which keeps it for life). */
bool db_util_read_only(const char *sqlstate);

/* Logs a statement's failure so (what failed, its SQLSTATE and message):
 * while it lasts every statement meets it, so at most one line every
 * DB_SHORT_LOG_MS for the process, counting the failures since the last;
 * db_util_exec logs its failures of class 53 so. */
#define DB_SHORT_LOG_MS 10000
void db_util_log_short(const char *what, const char *sqlstate, const char *msg);

/* The check engine's latest sight of that, for readiness (a check is what
 * readiness promises; a large read may run short of memory while writes
 * go on): it notes a batch of checks failing so (db_util_short_note) and
 * every batch it commits that held a check anew (db_util_wrote: the first
 * after a failure so is logged, with the failures the last line did not
 * count). db_util_short_lately: a failure so within the last within_ms,
 * and no check held since. */
void db_util_short_note(const char *sqlstate);
void db_util_wrote(void);
/* Whether a shortage is known and not yet ended by db_util_wrote: one
 * relaxed load, for the check engine's hot path. */
bool db_util_short_known(void);
bool db_util_short_lately(int64_t within_ms);

/* Column col of row as int64 into *out. METER_ERANGE when the text is not
 * an int64 (a bug in the query); NULL gives *is_null (may be NULL when the
 * column cannot be NULL: NULL is then METER_EINVAL). */
METER_MUSTCHECK enum meter_rc db_util_i64(const PGresult *res, int row, int col, int64_t *out,
					  bool *is_null);

/* Column col of row copied into out (len bytes, truncated); "" for NULL. */
void db_util_str(const PGresult *res, int row, int col, char *out, size_t len);

/* Column col of row is "t". */
bool db_util_bool(const PGresult *res, int row, int col);

/* BEGIN, COMMIT, ROLLBACK (the last never fails visibly: a broken
 * connection is dropped by the pool). */
METER_MUSTCHECK enum meter_rc db_util_begin(PGconn *conn);
METER_MUSTCHECK enum meter_rc db_util_commit(PGconn *conn);
void db_util_rollback(PGconn *conn);

/* Formats usec (UTC µs since the epoch) as text PostgreSQL reads as a
 * timestamptz exactly: "2026-11-30T01:02:03.456789Z". buf: 40 bytes. */
void db_util_time_param(int64_t usec, char *buf, size_t len);

/* Formats v as decimal text into buf (24 bytes). */
void db_util_i64_param(int64_t v, char *buf, size_t len);

/* Binary values ----------------------------------------------------------
 * PostgreSQL's binary forms (its types' send and receive functions), for
 * binary COPY and for array parameters the server reads without parsing
 * text: integers big-endian, timestamptz as µs and date as days since
 * 2000-01-01. */

#define DB_PG_EPOCH_USEC INT64_C(946684800000000) /* 2000-01-01 in Unix µs */
#define DB_PG_EPOCH_DAYS 10957			  /* 2000-01-01 in Unix days */

#define DB_OID_INT8	       20
#define DB_OID_INT2	       21
#define DB_OID_INT4	       23
#define DB_OID_TEXT	       25
#define DB_OID_DATE	       1082
#define DB_OID_TIMESTAMPTZ     1184
#define DB_OID_TID	       27
#define DB_OID_XID	       28
#define DB_OID_INT4_ARR	       1007
#define DB_OID_TEXT_ARR	       1009
#define DB_OID_INT8_ARR	       1016
#define DB_OID_DATE_ARR	       1182
#define DB_OID_TIMESTAMPTZ_ARR 1185

/* A growable byte buffer, kept NUL-terminated; oom latches. */
struct db_bin {
	char *p;
	size_t n, cap;
	bool oom;
};

void db_bin_put(struct db_bin *b, const void *data, size_t len);
void db_bin_str(struct db_bin *b, const char *s); /* without its NUL */
void db_bin_reset(struct db_bin *b);		  /* empty, memory kept */
void db_bin_release(struct db_bin *b);		  /* empty, memory freed */
void db_bin_be16(struct db_bin *b, int16_t v);
void db_bin_be32(struct db_bin *b, int32_t v);
void db_bin_be64(struct db_bin *b, int64_t v);

/* One value as binary COPY and binary arrays hold it: its length, then its
 * binary form (a NULL is the length -1 alone). A time is UTC µs since
 * 1970, a day days since 1970-01-01. */
void db_bin_text(struct db_bin *b, const char *s);
void db_bin_null(struct db_bin *b);
void db_bin_i64(struct db_bin *b, int64_t v);
void db_bin_i32(struct db_bin *b, int32_t v);
void db_bin_ts(struct db_bin *b, int64_t usec);
void db_bin_date(struct db_bin *b, int32_t day);

/* A one-dimensional array in array_recv's form: ndim, a has-null flag and
 * the element type, the dimension's length and lower bound, then the
 * elements as above. db_barr_start, the elements (each counted in n; set
 * nulls for a NULL one), then db_barr_finish, which writes the count and
 * the flag into the header. array_type is the array's own type, for a
 * caller that names its parameters' types. */
struct db_barr {
	struct db_bin b;
	Oid array_type;
	int32_t n;
	bool nulls;
};

void db_barr_start(struct db_barr *a, Oid array_type, Oid elem);
void db_barr_finish(struct db_barr *a);
void db_barr_text(struct db_barr *a, const char *s);
void db_barr_null(struct db_barr *a);
void db_barr_i64(struct db_barr *a, int64_t v);
void db_barr_i32(struct db_barr *a, int32_t v);
void db_barr_ts(struct db_barr *a, int64_t usec);
void db_barr_date(struct db_barr *a, int32_t day);

#endif
