/* meter API: sandboxes with their usage and cost (see h_sandboxes.h).
 *
 * Without from and to, a sandbox's figures cover the current day of its key
 * (in the key's time zone; UTC for a sandbox without a key), and month_cost
 * the key's current calendar month. window=minute is refused: the finest
 * stored rollup is the hour, and a series computed from raw samples would
 * not carry the lifecycle corrections and money carries that make the hourly
 * figures reconcile to the microdollar. */
#include "h_sandboxes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "db_sandboxes.h"
#include "h_usage.h"
#include "h_util.h"

#define SANDBOXES_PAGE_DEFAULT 50
#define CURSOR_MAX	       128

static const char *const sorts[] = {"id", "created", "cost", NULL};

/* A new JSON object of a sandbox as §5 shapes it. */
static json_t *sandbox_json(const struct db_sandbox *s)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	json_object_set_new(o, "sandbox_id", json_string(s->sandbox_id));
	json_object_set_new(o, "account_id", json_string(s->account_id));
	json_object_set_new(o, "key_id", hutil_str_or_null(s->key_id));
	json_object_set_new(o, "state", json_string(s->state));
	json_object_set_new(o, "vcpus", json_integer(s->vcpus));
	json_object_set_new(o, "memory_mib", json_integer(s->memory_mib));
	json_object_set_new(o, "storage_mib", json_integer(s->storage_mib));
	json_object_set_new(o, "max_cost_micros",
			    hutil_int_or_null(s->max_cost_micros, !s->has_max_cost));
	json_object_set_new(o, "created_at", hutil_time_json(s->created_at_usec));
	json_object_set_new(o, "state_since", hutil_time_json(s->state_since_usec));
	json_object_set_new(o, "lease_ends_at", hutil_time_json(s->lease_ends_at_usec));
	json_object_set_new(o, "from", hutil_time_json(s->from_usec));
	json_object_set_new(o, "to", hutil_time_json(s->to_usec));
	json_object_set_new(o, "usage", h_usage_json(&s->usage));
	json_object_set_new(o, "cost", h_cost_json(&s->usage));
	json_object_set_new(o, "month_from", hutil_time_json(s->month_from_usec));
	json_object_set_new(o, "month_cost", h_cost_json(&s->month));
	return o;
}

/* Writes the cursor of the page after s under sort into buf. */
static void cursor_format(const struct db_sandbox *s, int sort, char *buf, size_t len)
{
	if (sort == DB_SORT_ID)
		snprintf(buf, len, "i.%s", s->sandbox_id);
	else if (sort == DB_SORT_CREATED)
		snprintf(buf, len, "c.%lld.%s", (long long)s->created_at_usec, s->sandbox_id);
	else
		snprintf(buf, len, "t.%lld.%s", (long long)s->usage.total_micros, s->sandbox_id);
}

/* Parses a cursor of cursor_format for sort into q. */
static bool cursor_parse(const char *c, int sort, struct db_sandbox_query *q, char *id)
{
	static const char tags[] = {'i', 'c', 't'};
	char num[24];
	const char *p;
	size_t n;

	if (strlen(c) > CURSOR_MAX || c[0] != tags[sort] || c[1] != '.')
		return false;
	p = c + 2;
	q->cursor_value = 0;
	if (sort != DB_SORT_ID) {
		n = strcspn(p, ".");
		if (n == 0 || n >= sizeof(num) || p[n] != '.')
			return false;
		memcpy(num, p, n);
		num[n] = '\0';
		if (parse_int64(num, 0, INT64_MAX, &q->cursor_value) != METER_OK)
			return false;
		p += n + 1;
	}
	if (!parse_is_id(p))
		return false;
	snprintf(id, PARSE_ID_MAX + 1, "%s", p);
	q->cursor_id = id;
	q->has_cursor = true;
	return true;
}

void h_sandboxes_list(struct http_req *req)
{
	static const char *const query[] = {"state", "key_id", "sort",	     "limit", "cursor",
					    "from",  "to",     "account_id", NULL};
	static const char *const states[] = {"running", "paused", "stopped", NULL};
	char account[PARSE_ID_MAX + 1], key[PARSE_ID_MAX + 1], cid[PARSE_ID_MAX + 1];
	char next[CURSOR_MAX + 8];
	struct db_sandbox_query q = {.sort = DB_SORT_ID};
	struct db_sandbox *v = NULL;
	size_t n = 0;
	int state = -1, sort = DB_SORT_ID;
	int64_t limit = SANDBOXES_PAGE_DEFAULT;
	bool present;
	const char *cursor;
	PGconn *conn = NULL;
	json_t *items;
	enum meter_rc rc;

	if (!http_query_allowed(req, query) || !hutil_scope_account(req, false, account) ||
	    !hutil_query_enum(req, "state", states, &state, &present) ||
	    !hutil_query_id(req, "key_id", key, &present))
		return;
	q.key_id = present ? key : NULL;
	if (!hutil_query_enum(req, "sort", sorts, &sort, &present) ||
	    !hutil_query_int(req, "limit", 1, DB_SANDBOXES_PAGE_MAX, &limit, &present) ||
	    !h_usage_range(req, H_USAGE_RANGE_MAX, &q.has_range, &q.from_usec, &q.to_usec))
		return;
	q.sort = (enum db_sandbox_sort)sort;
	cursor = http_query(req, "cursor");
	if (cursor && !cursor_parse(cursor, sort, &q, cid)) {
		hutil_bad(req, "cursor", "cursor must be a next_cursor of this sort");
		return;
	}
	q.account_id = account[0] ? account : NULL;
	q.state = state >= 0 ? states[state] : NULL;
	q.limit = (int)limit + 1; /* one more tells whether there is a next page */
	if (!hutil_db_acquire(req, &conn))
		return;
	if (!hutil_filters_known(req, conn, account, q.key_id, NULL))
		goto out;
	rc = db_sandbox_list(conn, &q, &v, &n);
	if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "sandboxes");
		goto out;
	}
	items = json_array();
	for (size_t i = 0; items && i < n && i < (size_t)limit; i++)
		json_array_append_new(items, sandbox_json(&v[i]));
	if (n > (size_t)limit)
		cursor_format(&v[limit - 1], sort, next, sizeof(next));
	http_reply_json(req, 200,
			json_pack("{s:o*, s:s?}", "items", items, "next_cursor",
				  n > (size_t)limit ? next : NULL));
out:
	free(v);
	hutil_db_release(req, conn);
}

/* Reads the sandbox of the path (req->params[0]) within the caller's
 * account (any account for the operator) into *sb; replies on failure. */
static bool sandbox_load(struct http_req *req, PGconn *conn, bool has_range, int64_t from,
			 int64_t to, struct db_sandbox *sb)
{
	struct db_sandbox_query q = {
	    .account_id = req->auth->kind == AUTH_KEY ? req->auth->account_id : NULL,
	    .sandbox_id = req->params[0],
	    .has_range = has_range,
	    .from_usec = from,
	    .to_usec = to,
	};
	enum meter_rc rc = db_sandbox_get(conn, &q, sb);

	if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "no such sandbox");
		return false;
	}
	return true;
}

/* Adds the sandbox's open holds to its object o: held_micros and
 * open_holds over all of them, holds the first DB_SANDBOX_HOLDS_MAX. */
static void holds_json(json_t *o, const struct db_sandbox_hold *v, size_t n, int64_t total,
		       int64_t held)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(
		    a, json_pack("{s:s, s:I, s:I, s:I, s:o, s:o, s:o}", "day", v[i].day,
				 "amount_micros", (json_int_t)v[i].amount_micros, "consumed_micros",
				 (json_int_t)v[i].consumed_micros, "remaining_micros",
				 (json_int_t)v[i].remaining_micros, "lease_starts_at",
				 hutil_time_json(v[i].lease_starts_at_usec), "lease_ends_at",
				 hutil_time_json(v[i].lease_ends_at_usec), "settles_at",
				 hutil_time_json(v[i].settles_at_usec)));
	json_object_set_new(o, "held_micros", json_integer(held));
	json_object_set_new(o, "open_holds", json_integer(total));
	json_object_set_new(o, "holds", a);
}

void h_sandbox_get(struct http_req *req)
{
	static const char *const query[] = {"from", "to", NULL};
	struct db_sandbox sb;
	int64_t from = 0, to = 0, used, topup, topup_mcs, holds_total, held;
	struct db_sandbox_hold *holds = NULL;
	size_t n_holds = 0;
	bool has_range;
	PGconn *conn = NULL;
	json_t *o;
	enum meter_rc rc;

	if (!http_query_allowed(req, query) ||
	    !h_usage_range(req, H_USAGE_RANGE_MAX, &has_range, &from, &to) ||
	    !hutil_db_acquire(req, &conn))
		return;
	if (!sandbox_load(req, conn, has_range, from, to, &sb))
		goto out;
	rc = db_sandbox_cpu_split(conn, &sb, &used, &topup, &topup_mcs);
	if (rc == METER_OK)
		rc = db_sandbox_holds(conn, sb.account_id, sb.sandbox_id, &holds, &n_holds,
				      &holds_total, &held);
	if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "sandbox");
		goto out;
	}
	o = sandbox_json(&sb);
	if (o)
		json_object_set_new(
		    o, "breakdown",
		    json_pack("{s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:{s:I, s:I}, s:{s:I, s:I}}",
			      "cpu", "used_millicore_seconds",
			      (json_int_t)sb.usage.cpu_used_millicore_seconds,
			      "floor_topup_millicore_seconds", (json_int_t)topup_mcs,
			      "billed_millicore_seconds",
			      (json_int_t)sb.usage.cpu_billed_millicore_seconds, "used_micros",
			      (json_int_t)used, "floor_topup_micros", (json_int_t)topup, "micros",
			      (json_int_t)sb.usage.cpu_micros, "memory", "mib_seconds",
			      (json_int_t)sb.usage.memory_mib_seconds, "micros",
			      (json_int_t)sb.usage.memory_micros, "storage", "mib_seconds",
			      (json_int_t)sb.usage.storage_mib_seconds, "micros",
			      (json_int_t)sb.usage.storage_micros));
	if (o)
		holds_json(o, holds, n_holds, holds_total, held);
	http_reply_json(req, 200, o);
out:
	free(holds);
	hutil_db_release(req, conn);
}

void h_sandbox_usage(struct http_req *req)
{
	static const char *const query[] = {"from", "to", "window", NULL};
	static const char *const windows[] = {"hour", "day", NULL};
	const char *w = http_query(req, "window");
	struct db_sandbox sb;
	struct db_usage_query q = {.max_items = H_USAGE_ITEMS_MAX};
	struct db_usage total;
	struct db_usage_item *items = NULL;
	size_t n = 0;
	int window = 0;
	int64_t from = 0, to = 0;
	bool has_range, present;
	PGconn *conn = NULL;
	json_t *arr;
	enum meter_rc rc;

	if (!http_query_allowed(req, query))
		return;
	if (w && strcmp(w, "minute") == 0) {
		hutil_bad(req, "window",
			  "window=minute is not offered: usage is kept per hour; use hour or day");
		return;
	}
	if (!hutil_query_enum(req, "window", windows, &window, &present))
		return;
	if (!h_usage_range(req, window == 0 ? H_USAGE_HOURLY_RANGE_MAX : H_USAGE_RANGE_MAX,
			   &has_range, &from, &to) ||
	    !hutil_db_acquire(req, &conn))
		return;
	if (!sandbox_load(req, conn, has_range, from, to, &sb))
		goto out;
	q.account_id = sb.account_id;
	q.sandbox_id = sb.sandbox_id;
	q.time_zone = sb.time_zone;
	q.from_usec = sb.from_usec;
	q.to_usec = sb.to_usec;
	q.window = window == 0 ? DB_WINDOW_HOUR : DB_WINDOW_DAY;
	q.group = DB_GROUP_NONE;
	rc = db_usage_query(conn, &q, &total, &items, &n);
	if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "usage");
		goto out;
	}
	arr = json_array();
	for (size_t i = 0; arr && i < n; i++) {
		const struct db_usage *u = &items[i].u;

		json_array_append_new(
		    arr, json_pack("{s:o, s:o, s:I, s:I, s:I, s:o, s:o}", "period_start",
				   hutil_time_json(items[i].period_start_usec), "period_end",
				   hutil_time_json(items[i].period_end_usec), "cpu_used_millicores",
				   (json_int_t)u->cpu_used_millicores, "cpu_billed_millicores",
				   (json_int_t)u->cpu_billed_millicores, "memory_mib",
				   (json_int_t)u->memory_mib, "usage", h_usage_json(u), "cost",
				   h_cost_json(u)));
	}
	http_reply_json(req, 200,
			json_pack("{s:s, s:o, s:o, s:s, s:s, s:o, s:o, s:o*}", "sandbox_id",
				  sb.sandbox_id, "from", hutil_time_json(q.from_usec), "to",
				  hutil_time_json(q.to_usec), "window", windows[window],
				  "time_zone", sb.time_zone, "usage", h_usage_json(&total), "cost",
				  h_cost_json(&total), "items", arr));
out:
	free(items);
	hutil_db_release(req, conn);
}
