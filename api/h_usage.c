/* meter API: usage and cost (see h_usage.h). */
#include "h_usage.h"

#include <stdio.h>
#include <stdlib.h>

#include "auth.h"
#include "h_util.h"

json_t *h_usage_json(const struct db_usage *u)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "running_seconds",
			 (json_int_t)u->running_seconds, "paused_seconds",
			 (json_int_t)u->paused_seconds, "cpu_used_millicore_seconds",
			 (json_int_t)u->cpu_used_millicore_seconds, "cpu_billed_millicore_seconds",
			 (json_int_t)u->cpu_billed_millicore_seconds, "memory_mib_seconds",
			 (json_int_t)u->memory_mib_seconds, "storage_mib_seconds",
			 (json_int_t)u->storage_mib_seconds);
}

json_t *h_cost_json(const struct db_usage *u)
{
	return json_pack("{s:I, s:I, s:I, s:I}", "cpu_micros", (json_int_t)u->cpu_micros,
			 "memory_micros", (json_int_t)u->memory_micros, "storage_micros",
			 (json_int_t)u->storage_micros, "total_micros",
			 (json_int_t)u->total_micros);
}

bool h_usage_range(struct http_req *req, int64_t max_usec, bool *has, int64_t *from_usec,
		   int64_t *to_usec)
{
	bool has_from = false, has_to = false;
	char msg[160];

	if (!hutil_query_time(req, "from", from_usec, &has_from) ||
	    !hutil_query_time(req, "to", to_usec, &has_to))
		return false;
	if (has_from != has_to) {
		hutil_bad(req, has_from ? "to" : "from", "give from and to together, or neither");
		return false;
	}
	*has = has_from;
	if (!*has)
		return true;
	if (*from_usec >= *to_usec) {
		hutil_bad(req, "from", "from must be before to");
		return false;
	}
	if (*to_usec - *from_usec > max_usec) {
		snprintf(msg, sizeof(msg), "from and to may be at most %lld days apart here",
			 (long long)(max_usec / H_USAGE_DAY_USEC));
		hutil_bad(req, "to", msg);
		return false;
	}
	return true;
}

void h_usage_get(struct http_req *req)
{
	static const char *const query[] = {"from", "to", "window", "group_by", "account_id", NULL};
	static const char *const windows[] = {"hour", "day", NULL};
	static const char *const groups[] = {"sandbox", "key", NULL};
	char account[PARSE_ID_MAX + 1], tz[DB_TZ_MAX + 1];
	struct db_usage_query q = {.max_items = H_USAGE_ITEMS_MAX};
	struct db_usage total;
	struct db_usage_item *items = NULL;
	size_t n = 0;
	int window = -1, group = -1;
	bool has_window, has_group, has_range;
	int64_t from = 0, to = 0, today_from, today_to;
	PGconn *conn = NULL;
	json_t *arr, *out;
	int64_t counted;
	enum meter_rc rc;

	if (!http_query_allowed(req, query) || !hutil_scope_account(req, false, account) ||
	    !hutil_query_enum(req, "window", windows, &window, &has_window) ||
	    !hutil_query_enum(req, "group_by", groups, &group, &has_group) ||
	    !h_usage_range(req, window == 0 ? H_USAGE_HOURLY_RANGE_MAX : H_USAGE_RANGE_MAX,
			   &has_range, &from, &to))
		return;
	if (!hutil_db_acquire(req, &conn))
		return;
	if (!hutil_account_known(req, conn, account))
		goto out;
	/* The caller's day and time zone (the operator's: UTC). */
	rc = db_usage_today(conn, req->auth->kind == AUTH_KEY ? req->auth->account_id : NULL,
			    req->auth->kind == AUTH_KEY ? req->auth->key_id : NULL, &today_from,
			    &today_to, tz);
	if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "no such key");
		goto out;
	}
	q.account_id = account[0] ? account : NULL;
	q.time_zone = tz;
	q.from_usec = has_range ? from : today_from;
	q.to_usec = has_range ? to : today_to;
	q.window = !has_window ? DB_WINDOW_NONE : window == 0 ? DB_WINDOW_HOUR : DB_WINDOW_DAY;
	q.group = !has_group ? DB_GROUP_NONE : group == 0 ? DB_GROUP_SANDBOX : DB_GROUP_KEY;
	rc = db_usage_query(conn, &q, &total, &items, &n);
	if (rc == METER_ERANGE) {
		hutil_bad(req, "to",
			  "more than 10000 items: narrow from and to, use a coarser window, or"
			  " stream every item from /v1/reports/usage.csv (or .ndjson)");
		goto out;
	}
	if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "usage");
		goto out;
	}
	/* Up to 10,000 items, each a tree of jansson objects before it is
	 * text: counted with the large answers, as a statement is, so that
	 * many asked for at once cannot take more than answers_memory_mib. */
	counted = (int64_t)n * (int64_t)(sizeof(*items) + H_USAGE_ITEM_TREE_BYTES);
	if (!http_answer_grow(req, counted)) {
		http_reply_answers_full(req);
		goto out;
	}
	arr = json_array();
	for (size_t i = 0; arr && i < n; i++) {
		json_t *it = json_object();

		if (!it)
			break;
		if (q.window != DB_WINDOW_NONE) {
			json_object_set_new(it, "period_start",
					    hutil_time_json(items[i].period_start_usec));
			json_object_set_new(it, "period_end",
					    hutil_time_json(items[i].period_end_usec));
		}
		if (q.group != DB_GROUP_NONE) {
			json_object_set_new(it, "account_id", json_string(items[i].account_id));
			json_object_set_new(it, "key_id", hutil_str_or_null(items[i].key_id));
		}
		if (q.group == DB_GROUP_SANDBOX)
			json_object_set_new(it, "sandbox_id", json_string(items[i].sandbox_id));
		json_object_set_new(it, "usage", h_usage_json(&items[i].u));
		json_object_set_new(it, "cost", h_cost_json(&items[i].u));
		json_array_append_new(arr, it);
	}
	out = json_pack("{s:o, s:o, s:s?, s:s?, s:s, s:o, s:o, s:o*}", "from",
			hutil_time_json(q.from_usec), "to", hutil_time_json(q.to_usec), "window",
			has_window ? windows[window] : NULL, "group_by",
			has_group ? groups[group] : NULL, "time_zone", tz, "usage",
			h_usage_json(&total), "cost", h_cost_json(&total), "items", arr);
	free(items);
	items = NULL;
	http_reply_json_counted(req, 200, out, counted);
out:
	free(items);
	hutil_db_release(req, conn);
}
