/* meter API: the price book (see h_prices.h). */
#include "h_prices.h"

#include <stdlib.h>
#include <string.h>

#include "db_prices.h"
#include "db_util.h"
#include "h_util.h"
#include "money.h"

#define PRICE_RATE_MAX	INT64_C(1000000000000) /* as price_rates_validate */
#define PRICE_FLOOR_MAX INT64_C(1000000)

/* A new JSON object of one price-book version. */
static json_t *price_json(const struct db_price *p)
{
	return json_pack(
	    "{s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:b, s:o, s:b}", "version", (json_int_t)p->version,
	    "effective_from", hutil_time_json(p->effective_from_usec), "cpu_micros_per_vcpu_hour",
	    (json_int_t)p->rates.cpu_micros_per_vcpu_hour, "memory_micros_per_gib_hour",
	    (json_int_t)p->rates.memory_micros_per_gib_hour, "storage_micros_per_gib_hour",
	    (json_int_t)p->rates.storage_micros_per_gib_hour, "floor_millicores",
	    (json_int_t)p->rates.floor_millicores, "free_sandbox_hours",
	    (json_int_t)p->free_sandbox_hours, "storage_price_assumed", p->storage_price_assumed,
	    "created_at", hutil_time_json(p->created_at_usec), "current", p->current);
}

void h_prices_get(struct http_req *req)
{
	static const char *const query[] = {NULL};
	struct db_price *v = NULL;
	size_t n = 0;
	PGconn *conn = NULL;
	json_t *versions = NULL, *current = NULL;
	enum meter_rc rc;

	if (!http_query_allowed(req, query) || !hutil_db_acquire(req, &conn))
		return;
	rc = db_prices_list(conn, &v, &n);
	if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "prices");
		goto out;
	}
	versions = json_array();
	for (size_t i = 0; versions && i < n; i++) {
		json_array_append_new(versions, price_json(&v[i]));
		if (v[i].current)
			current = price_json(&v[i]);
	}
	http_reply_json(req, 200,
			json_pack("{s:o, s:o*}", "current", current ? current : json_null(),
				  "versions", versions));
out:
	free(v);
	hutil_db_release(req, conn);
}

bool h_prices_parse(struct http_req *req, json_t *body, struct h_price_put *out)
{
	static const char *const fields[] = {"effective_from",
					     "cpu_micros_per_vcpu_hour",
					     "memory_micros_per_gib_hour",
					     "storage_micros_per_gib_hour",
					     "floor_millicores",
					     "free_sandbox_hours",
					     "storage_price_assumed",
					     NULL};
	const char *from_s = NULL;
	bool assumed_present;

	memset(out, 0, sizeof(*out));
	if (!hutil_body_allowed(req, body, fields) ||
	    !hutil_body_str(req, body, "effective_from", 64, true, &from_s) ||
	    !hutil_body_int(req, body, "cpu_micros_per_vcpu_hour", 0, PRICE_RATE_MAX, true, false,
			    &out->rates.cpu_micros_per_vcpu_hour, NULL, NULL) ||
	    !hutil_body_int(req, body, "memory_micros_per_gib_hour", 0, PRICE_RATE_MAX, true, false,
			    &out->rates.memory_micros_per_gib_hour, NULL, NULL) ||
	    !hutil_body_int(req, body, "storage_micros_per_gib_hour", 0, PRICE_RATE_MAX, true,
			    false, &out->rates.storage_micros_per_gib_hour, NULL, NULL) ||
	    !hutil_body_int(req, body, "floor_millicores", 0, PRICE_FLOOR_MAX, true, false,
			    &out->rates.floor_millicores, NULL, NULL) ||
	    !hutil_body_int(req, body, "free_sandbox_hours", 0, DB_PRICE_FREE_HOURS_MAX, true,
			    false, &out->free_sandbox_hours, NULL, NULL) ||
	    !hutil_body_bool(req, body, "storage_price_assumed", false, &out->storage_price_assumed,
			     &assumed_present))
		return false;
	if (hutil_time_parse(from_s, &out->effective_from_usec) != METER_OK) {
		hutil_bad(
		    req, "effective_from",
		    "effective_from must be an RFC 3339 time in the years 1970 to 9999 (UTC), no "
		    "leap second, e.g. 2026-12-01T00:00:00Z");
		return false;
	}
	if (price_rates_validate(&out->rates) != METER_OK) {
		hutil_bad(req, "cpu_micros_per_vcpu_hour", "rates out of range");
		return false;
	}
	return true;
}

/* Query parameters are refused for every write route by the server. */
void h_prices_put(struct http_req *req)
{
	json_t *body = NULL;
	struct h_price_put p;
	struct db_price out;
	PGconn *conn = NULL;
	int64_t earliest = 0;
	enum meter_rc rc;

	body = http_json_body(req);
	if (!body)
		return;
	if (!h_prices_parse(req, body, &p))
		goto out;
	if (!hutil_db_acquire(req, &conn))
		goto out;
	rc = db_prices_add(conn, p.effective_from_usec, &p.rates, p.free_sandbox_hours,
			   p.storage_price_assumed, &out, &earliest);
	if (rc == METER_EINVAL) {
		http_reply_error(req, 400, "invalid_request",
				 "effective_from is too early: a version never reprices the past,"
				 " a lease already held or usage already metered; the earliest is"
				 " earliest_effective_from (now, the end of the last open lease or"
				 " the last sample metered, whichever is latest)",
				 json_pack("{s:s, s:o}", "field", "effective_from",
					   "earliest_effective_from", hutil_time_json(earliest)));
	} else if (rc == METER_ECONFLICT) {
		http_reply_error(req, 409, "conflict", "a version already starts at effective_from",
				 json_pack("{s:s}", "field", "effective_from"));
	} else if (rc == METER_EDB && strcmp(db_util_failed_state(), "55P03") == 0) {
		db_util_failed_clear();
		http_reply_error(req, 503, "metering_unavailable",
				 "checks or metering read the price book for longer than the"
				 " lock timeout; nothing was added: retry",
				 json_pack("{s:s, s:i}", "reason", "lock_timeout", "timeout_ms",
					   DB_PRICES_LOCK_MS));
	} else if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "prices");
	} else {
		http_reply_json(req, 201, price_json(&out));
	}
out:
	hutil_db_release(req, conn);
	json_decref(body);
}
