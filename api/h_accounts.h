/* meter API: accounts and key creation (operator). */
#ifndef METER_H_ACCOUNTS_H
#define METER_H_ACCOUNTS_H

#include <jansson.h>
#include <stdbool.h>

#include "http.h"

/* POST /v1/accounts {name} -> 201 {account_id, name, created_at} */
void h_account_create(struct http_req *req);

/* POST /v1/accounts/{id}/keys {role, daily_limit_micros?, time_zone?}
 * -> 201 {key_id, secret, role, daily_limit_micros, time_zone, ...}; secret
 * is the whole bearer token, shown this once. */
void h_account_key_create(struct http_req *req);

/* DELETE /v1/accounts/{id}/keys/{key_id} -> 200 {the key as GET
 * /v1/keys/{key_id} shows it, with revoked_at, and already_revoked}.
 * Revokes the key for good (db_key_revoke): idempotent, a second call
 * answers the first revocation's time with already_revoked true. 404 when
 * the account has no such key. */
void h_account_key_revoke(struct http_req *req);

/* The body parser of POST /v1/accounts (no I/O; the fuzzers call it too):
 * *name borrowed from body. true when valid; false after setting a 400
 * invalid_request reply on req. Key creation's is h_key_create_parse
 * (h_keys.h). */
bool h_account_create_parse(struct http_req *req, json_t *body, const char **name);

#endif
