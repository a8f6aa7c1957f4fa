/* meter API: keys and their daily limits. */
#ifndef METER_H_KEYS_H
#define METER_H_KEYS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

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

/* The fields of a key's body (POST /v1/accounts/{id}/keys, PUT
 * /v1/keys/{id}/limits). Strings borrowed from the body. */
struct h_key_fields {
	const char *role;	    /* "full" or "read_only" (create only) */
	bool limit_given;	    /* daily_limit_micros was in the body */
	bool has_limit;		    /* ... and not null */
	int64_t daily_limit_micros; /* 0..H_KEYS_LIMIT_MAX when has_limit */
	const char *time_zone;	    /* NULL when not given; shape checked */
};

/* The body parsers of the limits route and of key creation (no I/O; the
 * fuzzers call them too). body borrowed. true when valid; false after
 * setting a 400 invalid_request reply on req. */
bool h_key_limits_parse(struct http_req *req, json_t *body, struct h_key_fields *out);
bool h_key_create_parse(struct http_req *req, json_t *body, struct h_key_fields *out);

#endif
