/* meter API: the price book. */
#ifndef METER_H_PRICES_H
#define METER_H_PRICES_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "http.h"
#include "money.h"

/* GET /v1/prices -> {current:version, versions:[version...]} */
void h_prices_get(struct http_req *req);

/* PUT /v1/prices {effective_from, cpu_micros_per_vcpu_hour,
 * memory_micros_per_gib_hour, storage_micros_per_gib_hour,
 * floor_millicores, free_sandbox_hours, storage_price_assumed?}
 * -> 201 version */
void h_prices_put(struct http_req *req);

/* A price-book version as PUT /v1/prices gives it. */
struct h_price_put {
	int64_t effective_from_usec; /* UTC µs */
	struct price_rates rates;    /* price_rates_validate passed */
	int64_t free_sandbox_hours;
	bool storage_price_assumed; /* false when not given */
};

/* The body parser of PUT /v1/prices (no I/O; the fuzzers call it too).
 * body borrowed. true when valid; false after setting a 400
 * invalid_request reply on req. */
bool h_prices_parse(struct http_req *req, json_t *body, struct h_price_put *out);

#endif
