/* Fuzzer: the body of PUT /v1/prices (h_prices_parse, after http_json_body
 * as the handler calls it).
 *
 * Invariants: accepted exactly when no reply was set, refused with a 400;
 * an accepted body has only known members, rates that price_rates_validate
 * accepts and that are the body's, a time within 1970..9999; written back
 * as JSON (the time as the API prints times) it parses to the same
 * version. */
#include <string.h>

#include "db_prices.h"
#include "fuzz.h"
#include "h_prices.h"
#include "h_util.h"

#define YEAR_10000_USEC INT64_C(253402300800000000) /* 10000-01-01T00:00:00Z */

static const char *const known[] = {"effective_from",
				    "cpu_micros_per_vcpu_hour",
				    "memory_micros_per_gib_hour",
				    "storage_micros_per_gib_hour",
				    "floor_millicores",
				    "free_sandbox_hours",
				    "storage_price_assumed",
				    NULL};

static json_t *to_json(const struct h_price_put *p)
{
	char from[HUTIL_TIME_MAX];
	json_t *o;

	hutil_time_format(p->effective_from_usec, from, sizeof(from));
	o = json_pack(
	    "{s:s, s:I, s:I, s:I, s:I, s:I, s:b}", "effective_from", from,
	    "cpu_micros_per_vcpu_hour", (json_int_t)p->rates.cpu_micros_per_vcpu_hour,
	    "memory_micros_per_gib_hour", (json_int_t)p->rates.memory_micros_per_gib_hour,
	    "storage_micros_per_gib_hour", (json_int_t)p->rates.storage_micros_per_gib_hour,
	    "floor_millicores", (json_int_t)p->rates.floor_millicores, "free_sandbox_hours",
	    (json_int_t)p->free_sandbox_hours, "storage_price_assumed", p->storage_price_assumed);
	FUZZ_CHECK(o != NULL);
	return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_req req, req2;
	struct h_price_put p, p2;
	json_t *body = fuzz_req_body(&req, data, size), *again;
	bool ok;

	if (!body)
		goto out;
	ok = h_prices_parse(&req, body, &p);
	fuzz_req_verdict(&req, ok);
	if (!ok)
		goto out;
	fuzz_only_members(body, known);
	FUZZ_CHECK(price_rates_validate(&p.rates) == METER_OK);
	FUZZ_CHECK(p.rates.cpu_micros_per_vcpu_hour ==
		   json_integer_value(json_object_get(body, "cpu_micros_per_vcpu_hour")));
	FUZZ_CHECK(p.rates.floor_millicores ==
		   json_integer_value(json_object_get(body, "floor_millicores")));
	FUZZ_CHECK(p.free_sandbox_hours >= 0 && p.free_sandbox_hours <= DB_PRICE_FREE_HOURS_MAX);
	FUZZ_CHECK(p.storage_price_assumed ==
		   json_is_true(json_object_get(body, "storage_price_assumed")));
	FUZZ_CHECK(p.effective_from_usec >= 0 && p.effective_from_usec < YEAR_10000_USEC);
	again = fuzz_req_reparse(&req2, to_json(&p));
	FUZZ_CHECK(again != NULL);
	FUZZ_CHECK(h_prices_parse(&req2, again, &p2));
	FUZZ_CHECK(p.effective_from_usec == p2.effective_from_usec);
	FUZZ_CHECK(p.rates.cpu_micros_per_vcpu_hour == p2.rates.cpu_micros_per_vcpu_hour);
	FUZZ_CHECK(p.rates.memory_micros_per_gib_hour == p2.rates.memory_micros_per_gib_hour);
	FUZZ_CHECK(p.rates.storage_micros_per_gib_hour == p2.rates.storage_micros_per_gib_hour);
	FUZZ_CHECK(p.rates.floor_millicores == p2.rates.floor_millicores);
	FUZZ_CHECK(p.free_sandbox_hours == p2.free_sandbox_hours);
	FUZZ_CHECK(p.storage_price_assumed == p2.storage_price_assumed);
	json_decref(again);
	fuzz_req_release(&req2);
out:
	json_decref(body);
	fuzz_req_release(&req);
	return 0;
}
