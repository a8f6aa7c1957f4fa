/* meter API: keys and their daily limits (see h_keys.h). */
#include "h_keys.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "h_util.h"
#include "money.h"

#define KEYS_PAGE_DEFAULT 100  /* GET /v1/keys without a limit */
#define KEYS_PAGE_MAX	  1000 /* its largest limit */

json_t *h_key_json(const struct db_key *k)
{
	json_t *o = json_object();
	int64_t committed = db_key_committed(k);

	if (!o)
		return NULL;
	json_object_set_new(o, "key_id", json_string(k->key_id));
	json_object_set_new(o, "account_id", json_string(k->account_id));
	json_object_set_new(o, "role", json_string(k->role));
	json_object_set_new(o, "daily_limit_micros",
			    hutil_int_or_null(k->daily_limit_micros, !k->has_limit));
	json_object_set_new(o, "time_zone", json_string(k->time_zone));
	json_object_set_new(o, "created_at", hutil_time_json(k->created_at_usec));
	json_object_set_new(o, "revoked_at", hutil_time_json(k->revoked_at_usec));
	json_object_set_new(o, "day", json_string(k->day));
	json_object_set_new(o, "day_spent_micros", json_integer(k->day_spent_micros));
	json_object_set_new(o, "day_held_micros", json_integer(k->day_held_micros));
	json_object_set_new(o, "day_committed_micros", json_integer(committed));
	json_object_set_new(o, "day_remaining_micros",
			    hutil_int_or_null(db_key_remaining(k), !k->has_limit));
	return o;
}

void h_keys_list(struct http_req *req)
{
	static const char *const query[] = {"account_id", "limit", "cursor", NULL};
	char account[PARSE_ID_MAX + 1], cursor[PARSE_ID_MAX + 1];
	struct db_key *keys = NULL;
	size_t n = 0;
	int64_t limit = KEYS_PAGE_DEFAULT;
	bool present, has_cursor;
	PGconn *conn = NULL;
	json_t *items;
	enum meter_rc rc;

	if (!http_query_allowed(req, query) || !hutil_scope_account(req, true, account) ||
	    !hutil_query_int(req, "limit", 1, KEYS_PAGE_MAX, &limit, &present) ||
	    !hutil_query_id(req, "cursor", cursor, &has_cursor))
		return;
	if (!hutil_db_acquire(req, &conn))
		return;
	if (!hutil_account_known(req, conn, account))
		goto out;
	/* One more than the page tells whether there is a next one. */
	rc = db_key_list(conn, account, has_cursor ? cursor : NULL, (int)limit + 1, &keys, &n);
	if (rc == METER_ENOTFOUND) {
		hutil_bad(req, "cursor", "cursor must be a next_cursor of this account's keys");
		goto out;
	}
	if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "keys");
		goto out;
	}
	items = json_array();
	for (size_t i = 0; items && i < n && i < (size_t)limit; i++)
		json_array_append_new(items, h_key_json(&keys[i]));
	http_reply_json(req, 200,
			json_pack("{s:o*, s:s?}", "items", items, "next_cursor",
				  n > (size_t)limit ? keys[limit - 1].key_id : NULL));
out:
	free(keys);
	hutil_db_release(req, conn);
}

/* The account a key route is scoped to: a key's own, or any (NULL) for the
 * operator. */
static const char *key_scope(struct http_req *req)
{
	return req->auth->kind == AUTH_KEY ? req->auth->account_id : NULL;
}

void h_key_get(struct http_req *req)
{
	static const char *const query[] = {NULL};
	struct db_key key;
	PGconn *conn = NULL;
	enum meter_rc rc;

	if (!http_query_allowed(req, query) || !hutil_db_acquire(req, &conn))
		return;
	rc = db_key_get(conn, key_scope(req), req->params[0], &key);
	if (rc != METER_OK)
		hutil_reply_rc(req, conn, rc, "no such key");
	else
		http_reply_json(req, 200, h_key_json(&key));
	hutil_db_release(req, conn);
}

/* The members both key bodies may hold (the time zone's shape is checked
 * by the callers, each in its own order of checks). */
static bool key_limit_fields(struct http_req *req, json_t *body, struct h_key_fields *out)
{
	bool limit_null = false;

	if (!hutil_body_int(req, body, "daily_limit_micros", 0, H_KEYS_LIMIT_MAX, false, true,
			    &out->daily_limit_micros, &limit_null, &out->limit_given) ||
	    !hutil_body_str(req, body, "time_zone", DB_KEY_TZ_MAX, false, &out->time_zone))
		return false;
	out->has_limit = out->limit_given && !limit_null;
	return true;
}

static bool key_tz_shape(struct http_req *req, const char *tz)
{
	if (tz && !keys_tz_shape_ok(tz)) {
		hutil_bad(req, "time_zone", "time_zone must be an IANA name such as Europe/Paris");
		return false;
	}
	return true;
}

bool h_key_limits_parse(struct http_req *req, json_t *body, struct h_key_fields *out)
{
	static const char *const fields[] = {"daily_limit_micros", "time_zone", NULL};

	memset(out, 0, sizeof(*out));
	if (!hutil_body_allowed(req, body, fields) || !key_limit_fields(req, body, out))
		return false;
	if (!out->limit_given && !out->time_zone) {
		hutil_bad(req, "daily_limit_micros",
			  "give daily_limit_micros (an integer or null), time_zone, or both");
		return false;
	}
	return key_tz_shape(req, out->time_zone);
}

bool h_key_create_parse(struct http_req *req, json_t *body, struct h_key_fields *out)
{
	static const char *const fields[] = {"role", "daily_limit_micros", "time_zone", NULL};

	memset(out, 0, sizeof(*out));
	if (!hutil_body_allowed(req, body, fields) ||
	    !hutil_body_str(req, body, "role", 16, true, &out->role) ||
	    !key_limit_fields(req, body, out))
		return false;
	if (strcmp(out->role, "full") != 0 && strcmp(out->role, "read_only") != 0) {
		hutil_bad(req, "role", "role must be full or read_only");
		return false;
	}
	return key_tz_shape(req, out->time_zone);
}

/* 409 for a change of time zone refused (see db_key_set_limits): the key
 * has open holds, with their number and the latest lease end; or another
 * change of its zone kept committing meanwhile. */
static void key_tz_busy(struct http_req *req, const struct db_key_tz_busy *busy)
{
	if (busy->open_holds <= 0) {
		http_reply_error(req, 409, "conflict",
				 "the key's time zone changed meanwhile; send the change again",
				 NULL);
		return;
	}
	http_reply_error(req, 409, "open_holds",
			 "the key has open holds: its time zone can change once their leases are"
			 " settled",
			 json_pack("{s:I,s:o}", "open_holds", (json_int_t)busy->open_holds,
				   "latest_lease_ends_at",
				   hutil_time_json(busy->latest_lease_end_usec)));
}

/* Query parameters are refused for every write route by the server. */
void h_key_limits(struct http_req *req)
{
	json_t *body = NULL;
	struct h_key_fields f;
	struct db_key key;
	struct db_key_tz_busy busy;
	PGconn *conn = NULL;
	enum meter_rc rc;

	body = http_json_body(req);
	if (!body)
		return;
	if (!h_key_limits_parse(req, body, &f) || !hutil_db_acquire(req, &conn))
		goto out;
	/* A full key sets its own limits (DESIGN.md §1): another key of its
	 * account is the operator's to change. */
	if (req->auth->kind == AUTH_KEY && strcmp(req->auth->key_id, req->params[0]) != 0) {
		rc = db_key_get(conn, key_scope(req), req->params[0], &key);
		if (rc != METER_OK)
			hutil_reply_rc(req, conn, rc, "no such key");
		else
			http_reply_error(
			    req, 403, "forbidden",
			    "a full key sets its own limits only; another key's are the"
			    " operator's to change",
			    NULL);
		goto out;
	}
	rc = db_key_set_limits(conn, key_scope(req), req->params[0], f.limit_given, f.has_limit,
			       f.daily_limit_micros, f.time_zone, &key, &busy);
	if (rc == METER_EINVAL)
		hutil_bad(
		    req, "time_zone",
		    "time_zone is not a known IANA time zone, or is an abbreviation (CET, EST:"
		    " read as fixed offsets): name a place's zone, such as Europe/Paris");
	else if (rc == METER_ECONFLICT)
		key_tz_busy(req, &busy);
	else if (rc != METER_OK)
		hutil_reply_rc(req, conn, rc, "no such key");
	else
		http_reply_json(req, 200, h_key_json(&key));
out:
	hutil_db_release(req, conn);
	json_decref(body);
}
