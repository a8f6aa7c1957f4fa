/* meter API: handler helpers (see h_util.h). */
#include "h_util.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "agent_doc.h"
#include "app.h"
#include "auth.h"
#include "db_accounts.h"
#include "db_keys.h"
#include "db_sandboxes.h"
#include "db_util.h"
#include "dbpool.h"
#include "log.h"

bool hutil_db_acquire(struct http_req *req, PGconn **conn)
{
	*conn = NULL;
	if (db_pool_acquire(req->app->pool, HUTIL_DB_WAIT_MS, conn) != METER_OK) {
		http_reply_error(req, 503, "metering_unavailable", "database unreachable", NULL);
		return false;
	}
	return true;
}

void hutil_db_release(struct http_req *req, PGconn *conn)
{
	if (conn)
		db_pool_release(req->app->pool, conn, db_conn_failed(conn));
}

void hutil_reply_rc(struct http_req *req, PGconn *conn, enum meter_rc rc, const char *what)
{
	switch (rc) {
	case METER_ENOTFOUND:
		http_reply_error(req, 404, "not_found", what, NULL);
		return;
	case METER_EDB:
		/* The database answered, and said why (a timeout, its lack
		 * of resources, or that it takes no writes): that is said. */
		if (conn && PQstatus(conn) == CONNECTION_OK &&
		    hutil_reply_db_cause(req, req->app->cfg->db_statement_timeout_ms,
					 "retry, or ask for less (a shorter from..to, a coarser"
					 " window)"))
			return;
		/* A write whose connection broke while it was in the database
		 * may have committed before the break: say so, not
		 * "unreachable", which reads as not done. */
		if (conn && db_conn_failed(conn) && strcmp(req->method, "GET") != 0 &&
		    strcmp(req->method, "HEAD") != 0) {
			http_reply_error(req, 503, "metering_unavailable",
					 "the connection to the database broke while the request"
					 " was in it, so it may have been done: read what it"
					 " changes before sending it again",
					 json_pack("{s:s}", "reason", "outcome_unknown"));
			return;
		}
		if (!conn || db_conn_failed(conn)) {
			http_reply_error(req, 503, "metering_unavailable", "database unreachable",
					 NULL);
			return;
		}
		/* Anything else is a fault of ours, logged by the db layer. */
		http_reply_error(req, 503, "metering_unavailable", "database error", NULL);
		return;
	default:
		log_error("request %s: %s", req->request_id, meter_rc_str(rc));
		http_reply_error(req, 500, "internal", "internal error", NULL);
		return;
	}
}

bool hutil_reply_db_cause(struct http_req *req, int64_t timeout_ms, const char *advice)
{
	const char *state = db_util_failed_state();
	bool lock = strcmp(state, "55P03") == 0;
	char msg[256];

	if (db_util_read_only(state)) {
		/* A standby, or default_transaction_read_only on: the
		 * transaction was refused whole. The state is kept, so that the
		 * session is made again when released (db_conn_failed). */
		http_reply_error(req, 503, "metering_unavailable",
				 "the database takes no writes (a standby, or"
				 " default_transaction_read_only on), so nothing was done:"
				 " send the request again once it does",
				 json_pack("{s:s}", "reason", "read_only_database"));
		return true;
	}
	if (db_util_short_of_resources(state)) {
		/* Not the caller's advice, which is for a timeout (a read's:
		 * ask for less): the request was right, the database was not. */
		snprintf(msg, sizeof(msg),
			 "the database is short of resources (disk space, memory or the like;"
			 " SQLSTATE %s): send the request again later",
			 state);
		http_reply_error(
		    req, 503, "metering_unavailable", msg,
		    json_pack("{s:s,s:s}", "reason", "insufficient_resources", "sqlstate", state));
		db_util_failed_clear();
		return true;
	}
	if (!lock && strcmp(state, "57014") != 0)
		return false;
	db_util_failed_clear();
	snprintf(msg, sizeof(msg),
		 "the database did not answer within the %s timeout (%lld ms): %s",
		 lock ? "lock" : "statement", (long long)timeout_ms, advice);
	http_reply_error(req, 503, "metering_unavailable", msg,
			 json_pack("{s:s,s:I}", "reason",
				   lock ? "lock_timeout" : "statement_timeout", "timeout_ms",
				   (json_int_t)timeout_ms));
	return true;
}

bool hutil_account_known(struct http_req *req, PGconn *conn, const char *account)
{
	return hutil_filters_known(req, conn, account, NULL, NULL);
}

bool hutil_filters_known(struct http_req *req, PGconn *conn, const char *account, const char *key,
			 const char *sandbox)
{
	const bool by_key = req->auth->kind == AUTH_KEY;
	const char *scope = by_key ? req->auth->account_id : account && account[0] ? account : NULL;
	PGconn *own = NULL;
	enum meter_rc rc = METER_OK;
	const char *what = NULL;

	if ((by_key || !account || !account[0]) && (!key || !key[0]) && (!sandbox || !sandbox[0]))
		return true;
	if (!conn) {
		if (!hutil_db_acquire(req, &own))
			return false;
		conn = own;
	}
	if (!by_key && account && account[0]) {
		rc = db_account_exists(conn, account);
		what = "no such account";
	}
	if (rc == METER_OK)
		rc = hutil_filters_lookup(conn, scope, key, sandbox, &what);
	if (rc != METER_OK)
		hutil_reply_rc(req, conn, rc, what);
	hutil_db_release(req, own);
	return rc == METER_OK;
}

enum meter_rc hutil_filters_lookup(PGconn *conn, const char *account, const char *key,
				   const char *sandbox, const char **what)
{
	enum meter_rc rc = METER_OK;

	if (key && key[0]) {
		rc = db_key_exists(conn, account, key);
		*what = "no such key";
	}
	if (rc == METER_OK && sandbox && sandbox[0]) {
		rc = db_sandbox_exists(conn, account, sandbox);
		*what = "no such sandbox";
	}
	return rc;
}

void hutil_bad(struct http_req *req, const char *field, const char *message)
{
	http_reply_error(req, 400, "invalid_request", message, json_pack("{s:s}", "field", field));
}

/* The query value of name, or NULL (then *present is false). An empty
 * value counts as given and is judged by the caller's parser. */
static const char *query_value(struct http_req *req, const char *name, bool *present)
{
	const char *v = http_query(req, name);

	*present = v != NULL;
	return v;
}

bool hutil_query_time(struct http_req *req, const char *name, int64_t *usec, bool *present)
{
	const char *v = query_value(req, name, present);
	char msg[256];

	if (!v)
		return true;
	if (hutil_time_parse(v, usec) != METER_OK) {
		/* A '+' of an offset sent unescaped arrives as a space (a query
		 * is form-encoded): say so, since curl and browsers send it so. */
		snprintf(msg, sizeof(msg),
			 "%s must be an RFC 3339 time in the years 1970 to 9999 (UTC), no leap "
			 "second, e.g. 2026-11-30T00:00:00Z%s",
			 name,
			 strchr(v, ' ')
			     ? "; a + in a query reads as a space: send an offset's + as "
			       "%2B (2026-11-30T00:00:00%2B01:00)"
			     : "");
		hutil_bad(req, name, msg);
		return false;
	}
	return true;
}

bool hutil_query_id(struct http_req *req, const char *name, char *out, bool *present)
{
	const char *v = query_value(req, name, present);
	char msg[160];

	if (!v)
		return true;
	if (!parse_is_id(v)) {
		snprintf(msg, sizeof(msg), "%s must be 1 to 64 characters of A-Z a-z 0-9 _ . -",
			 name);
		hutil_bad(req, name, msg);
		return false;
	}
	snprintf(out, PARSE_ID_MAX + 1, "%s", v);
	return true;
}

bool hutil_query_enum(struct http_req *req, const char *name, const char *const *values, int *index,
		      bool *present)
{
	const char *v = query_value(req, name, present);
	char msg[200];
	size_t used;

	if (!v)
		return true;
	for (int i = 0; values[i]; i++) {
		if (strcmp(values[i], v) == 0) {
			*index = i;
			return true;
		}
	}
	used = (size_t)snprintf(msg, sizeof(msg), "%s must be one of", name);
	for (int i = 0; values[i] && used < sizeof(msg); i++)
		used += (size_t)snprintf(msg + used, sizeof(msg) - used, "%s %s", i ? "," : "",
					 values[i]);
	hutil_bad(req, name, msg);
	return false;
}

bool hutil_query_int(struct http_req *req, const char *name, int64_t min, int64_t max, int64_t *out,
		     bool *present)
{
	const char *v = query_value(req, name, present);
	char msg[160];

	if (!v)
		return true;
	if (parse_int64(v, min, max, out) != METER_OK) {
		snprintf(msg, sizeof(msg), "%s must be a whole number from %lld to %lld", name,
			 (long long)min, (long long)max);
		hutil_bad(req, name, msg);
		return false;
	}
	return true;
}

bool hutil_body_allowed(struct http_req *req, json_t *body, const char *const *allowed)
{
	const char *key;
	json_t *value;
	char msg[160];

	json_object_foreach(body, key, value)
	{
		size_t i;

		for (i = 0; allowed[i]; i++)
			if (strcmp(allowed[i], key) == 0)
				break;
		if (!allowed[i]) {
			char name[PARSE_ID_MAX + 1];

			http_safe_name(key, name);
			snprintf(msg, sizeof(msg), "unknown field: %s", name);
			hutil_bad(req, name, msg);
			return false;
		}
	}
	return true;
}

bool hutil_body_int(struct http_req *req, json_t *body, const char *name, int64_t min, int64_t max,
		    bool required, bool nullable, int64_t *out, bool *is_null, bool *present)
{
	json_t *v = json_object_get(body, name);
	char msg[200];

	if (is_null)
		*is_null = false;
	if (present)
		*present = v != NULL;
	if (!v) {
		if (!required)
			return true;
		snprintf(msg, sizeof(msg), "missing field: %s", name);
		hutil_bad(req, name, msg);
		return false;
	}
	if (json_is_null(v) && nullable) {
		if (is_null)
			*is_null = true;
		return true;
	}
	if (!json_is_integer(v)) {
		snprintf(msg, sizeof(msg), "%s must be an integer%s", name,
			 nullable ? " or null" : "");
		hutil_bad(req, name, msg);
		return false;
	}
	if (json_integer_value(v) < min || json_integer_value(v) > max) {
		snprintf(msg, sizeof(msg), "%s must be from %lld to %lld", name, (long long)min,
			 (long long)max);
		hutil_bad(req, name, msg);
		return false;
	}
	*out = json_integer_value(v);
	return true;
}

bool hutil_body_str(struct http_req *req, json_t *body, const char *name, size_t maxlen,
		    bool required, const char **out)
{
	json_t *v = json_object_get(body, name);
	const char *s;
	size_t len, chars;
	char msg[200];

	if (!v) {
		if (!required)
			return true;
		snprintf(msg, sizeof(msg), "missing field: %s", name);
		hutil_bad(req, name, msg);
		return false;
	}
	if (!json_is_string(v)) {
		snprintf(msg, sizeof(msg), "%s must be a string", name);
		hutil_bad(req, name, msg);
		return false;
	}
	s = json_string_value(v);
	len = json_string_length(v);
	if (strlen(s) != len) {
		snprintf(msg, sizeof(msg), "%s holds a NUL character", name);
		hutil_bad(req, name, msg);
		return false;
	}
	/* Characters, as the schema's maxLength and the table's length()
	 * count them; no control character, C1 (U+0080 to U+009F)
	 * included. (jansson hands over valid UTF-8.) */
	if (parse_plain_text(s, len, &chars) != METER_OK) {
		snprintf(msg, sizeof(msg), "%s holds a control character", name);
		hutil_bad(req, name, msg);
		return false;
	}
	if (chars == 0 || chars > maxlen) {
		snprintf(msg, sizeof(msg), "%s must be 1 to %zu characters", name, maxlen);
		hutil_bad(req, name, msg);
		return false;
	}
	*out = s;
	return true;
}

bool hutil_body_bool(struct http_req *req, json_t *body, const char *name, bool required, bool *out,
		     bool *present)
{
	json_t *v = json_object_get(body, name);
	char msg[160];

	*present = v != NULL;
	if (!v) {
		if (!required)
			return true;
		snprintf(msg, sizeof(msg), "missing field: %s", name);
		hutil_bad(req, name, msg);
		return false;
	}
	if (!json_is_boolean(v)) {
		snprintf(msg, sizeof(msg), "%s must be true or false", name);
		hutil_bad(req, name, msg);
		return false;
	}
	*out = json_is_true(v);
	return true;
}

enum meter_rc hutil_time_parse(const char *s, int64_t *usec)
{
	/* 10000-01-01T00:00:00Z in µs: the first instant past year 9999. */
	static const int64_t end = INT64_C(253402300800) * 1000000;
	int64_t t;

	/* The instant itself in 1970..9999 UTC: an offset may carry the
	 * written date out of it (9999-12-31T23:59:59-23:59 is in 10000). */
	if (agent_doc_parse_time(s, &t) != METER_OK || t < 0 || t >= end)
		return METER_EINVAL;
	*usec = t;
	return METER_OK;
}

void hutil_time_format(int64_t usec, char *buf, size_t len)
{
	char *frac;

	agent_doc_format_time(usec < 0 ? 0 : usec, buf, len);
	/* Whole seconds print without a fraction. */
	frac = strstr(buf, ".000000Z");
	if (frac)
		memcpy(frac, "Z", 2);
}

json_t *hutil_time_json(int64_t usec)
{
	char buf[HUTIL_TIME_MAX];

	if (usec == HUTIL_TIME_NULL)
		return json_null();
	hutil_time_format(usec, buf, sizeof(buf));
	return json_string(buf);
}

json_t *hutil_int_or_null(int64_t v, bool is_null)
{
	return is_null ? json_null() : json_integer((json_int_t)v);
}

json_t *hutil_str_or_null(const char *s)
{
	return s && *s ? json_string(s) : json_null();
}

bool hutil_scope_account(struct http_req *req, bool required, char *out)
{
	char asked[PARSE_ID_MAX + 1] = "";
	bool present = false;

	if (!hutil_query_id(req, "account_id", asked, &present))
		return false;
	if (req->auth->kind == AUTH_KEY) {
		if (present && strcmp(asked, req->auth->account_id) != 0) {
			/* Another account: as if it did not exist. */
			http_reply_error(req, 404, "not_found", "no such account", NULL);
			return false;
		}
		snprintf(out, PARSE_ID_MAX + 1, "%s", req->auth->account_id);
		return true;
	}
	if (!present && required) {
		hutil_bad(req, "account_id", "account_id is required for the operator");
		return false;
	}
	snprintf(out, PARSE_ID_MAX + 1, "%s", present ? asked : "");
	return true;
}

const char *hutil_caller_key(struct http_req *req)
{
	return req->auth->kind == AUTH_KEY ? req->auth->key_id : "";
}
