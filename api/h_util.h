/* meter API: helpers shared by the handlers of the keys, prices and read
 * routes: database connections, strict query-string and JSON-body fields,
 * RFC 3339 times, and the account a caller may see.
 *
 * Every hutil_* function that returns bool returns true when the caller may
 * go on; false after setting the error reply (the handler then returns). */
#ifndef METER_H_UTIL_H
#define METER_H_UTIL_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "http.h"
#include "parse.h"
#include "rc.h"

#define HUTIL_DB_WAIT_MS 1000	   /* longest wait for a pooled connection */
#define HUTIL_TIME_MAX	 40	   /* buffer for a formatted RFC 3339 time */
#define HUTIL_TIME_NULL	 INT64_MIN /* "no time" (SQL NULL) */

/* Borrows a connection from the daemon's pool into *conn; on failure replies
 * 503 metering_unavailable. */
bool hutil_db_acquire(struct http_req *req, PGconn **conn);

/* Returns conn to the pool (NULL is fine), dropping it when it failed. */
void hutil_db_release(struct http_req *req, PGconn *conn);

/* Replies to a failed db_* call: METER_ENOTFOUND 404 not_found (with what,
 * e.g. "no such key"), METER_EDB 503 metering_unavailable when the
 * connection failed (for a write, "reason": "outcome_unknown") or the
 * database said why (hutil_reply_db_cause), anything else 500 internal. */
void hutil_reply_rc(struct http_req *req, PGconn *conn, enum meter_rc rc, const char *what);

/* When this thread's latest failed statement (db_util_failed_state) ran
 * into the statement timeout, or a lock timeout: replies 503
 * metering_unavailable saying which, with reason ("statement_timeout" or
 * "lock_timeout") and timeout_ms, and a message ending in advice (what the
 * caller can do, e.g. "retry"), and returns true; when the database was
 * short of resources for it (disk full, out of memory: SQLSTATE class 53),
 * 503 with reason "insufficient_resources" and the SQLSTATE, saying to
 * send the request again later; when it takes no writes (SQLSTATE 25006:
 * a standby, or default_transaction_read_only on), 503 with reason
 * "read_only_database", saying nothing was done (the state is kept, for
 * db_conn_failed to have the session made again). Else replies nothing
 * and returns false. */
bool hutil_reply_db_cause(struct http_req *req, int64_t timeout_ms, const char *advice);

/* For the operator, who names the account of a read (account non-empty):
 * 404 not_found when there is no such account, as for a key naming
 * another account's id, instead of an empty answer. A key's own account,
 * or no account named, passes. conn may be NULL (one is taken from the
 * pool for the look-up). False after a reply. */
bool hutil_account_known(struct http_req *req, PGconn *conn, const char *account);

/* hutil_account_known, then the same for a read's key and sandbox
 * filters (each NULL or "" when not given): 404 not_found when the key
 * or the sandbox is not of the account read (the caller's own for a key;
 * any account for the operator who names none), instead of an empty
 * answer that looks like an idle key or sandbox. */
bool hutil_filters_known(struct http_req *req, PGconn *conn, const char *account, const char *key,
			 const char *sandbox);

/* The look-ups of hutil_filters_known's key and sandbox (each NULL or ""
 * when not given) in account (NULL: any) on conn: METER_ENOTFOUND with
 * *what naming the one missing, or the failure. */
METER_MUSTCHECK enum meter_rc hutil_filters_lookup(PGconn *conn, const char *account,
						   const char *key, const char *sandbox,
						   const char **what);

/* 400 invalid_request naming field, with message. */
void hutil_bad(struct http_req *req, const char *field, const char *message);

/* Query argument name: absent leaves *present false. An RFC 3339 time
 * (hutil_time_parse) into *usec. */
bool hutil_query_time(struct http_req *req, const char *name, int64_t *usec, bool *present);

/* An id (parse_is_id) copied into out (PARSE_ID_MAX + 1 bytes). */
bool hutil_query_id(struct http_req *req, const char *name, char *out, bool *present);

/* One of values (NULL-terminated): *index gets its position. */
bool hutil_query_enum(struct http_req *req, const char *name, const char *const *values, int *index,
		      bool *present);

/* A whole decimal number in [min, max]. */
bool hutil_query_int(struct http_req *req, const char *name, int64_t min, int64_t max, int64_t *out,
		     bool *present);

/* Rejects a body member whose name is not in allowed (NULL-terminated). */
bool hutil_body_allowed(struct http_req *req, json_t *body, const char *const *allowed);

/* Body member name as an integer in [min, max]. required: absence is an
 * error. nullable: JSON null is accepted and sets *is_null (otherwise null
 * is a type error). *present tells whether the member was there. */
bool hutil_body_int(struct http_req *req, json_t *body, const char *name, int64_t min, int64_t max,
		    bool required, bool nullable, int64_t *out, bool *is_null, bool *present);

/* Body member name as a string of 1..maxlen characters (UTF-8 code
 * points, so up to 4 * maxlen bytes) without control characters; *out
 * borrowed from body. required: absence is an error. */
bool hutil_body_str(struct http_req *req, json_t *body, const char *name, size_t maxlen,
		    bool required, const char **out);

/* Body member name as a boolean. */
bool hutil_body_bool(struct http_req *req, json_t *body, const char *name, bool required, bool *out,
		     bool *present);

/* Parses an RFC 3339 time "YYYY-MM-DDTHH:MM:SS[.f+](Z|±HH:MM)" (T and Z
 * in either case; agent_doc_parse_time) between 1970 and 9999 into UTC µs
 * since the epoch, fraction digits past the microsecond dropped.
 * METER_EINVAL when malformed or not a real date and time. */
METER_MUSTCHECK enum meter_rc hutil_time_parse(const char *s, int64_t *usec);

/* Formats usec (>= 0) as RFC 3339 UTC, "2026-11-30T01:02:03Z", with
 * ".ffffff" only when there are microseconds. buf: HUTIL_TIME_MAX bytes. */
void hutil_time_format(int64_t usec, char *buf, size_t len);

/* A new JSON string of usec formatted, or JSON null for HUTIL_TIME_NULL. */
json_t *hutil_time_json(int64_t usec);

/* A new JSON integer, or null when is_null. */
json_t *hutil_int_or_null(int64_t v, bool is_null);

/* A new JSON string, or null for NULL or "". */
json_t *hutil_str_or_null(const char *s);

/* The account a request reads: an account key reads its own account (the
 * query may not name another: account_id is then rejected); the operator
 * names one with ?account_id=, which it must give when required (else
 * out = "" means every account). out: PARSE_ID_MAX + 1 bytes. */
bool hutil_scope_account(struct http_req *req, bool required, char *out);

/* The key whose time zone sets default days: the caller's key id, or ""
 * for the operator. Borrowed. */
const char *hutil_caller_key(struct http_req *req);

#endif
