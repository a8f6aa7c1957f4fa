/* meter API: the price book. */
#ifndef METER_H_PRICES_H
#define METER_H_PRICES_H

#include "http.h"

/* GET /v1/prices -> {current:version, versions:[version...]} */
void h_prices_get(struct http_req *req);

/* PUT /v1/prices {effective_from, cpu_micros_per_vcpu_hour,
 * memory_micros_per_gib_hour, storage_micros_per_gib_hour,
 * floor_millicores, free_sandbox_hours, storage_price_assumed?}
 * -> 201 version */
void h_prices_put(struct http_req *req);

#endif
