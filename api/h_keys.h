/* meter API: keys and their daily limits. */
#ifndef METER_H_KEYS_H
#define METER_H_KEYS_H

#include <jansson.h>

#include "db_keys.h"
#include "http.h"

#define H_KEYS_LIMIT_MAX INT64_C(1000000000000000) /* 10^15 µ$: a billion dollars a day */

/* GET /v1/keys[?account_id=] -> {items:[key...]} */
void h_keys_list(struct http_req *req);

/* GET /v1/keys/{id} -> key */
void h_key_get(struct http_req *req);

/* PUT /v1/keys/{id}/limits {daily_limit_micros (integer or null)?,
 * time_zone?} -> key */
void h_key_limits(struct http_req *req);

/* A new JSON object of k as the API shows a key (no secret, ever). */
json_t *h_key_json(const struct db_key *k);

#endif
