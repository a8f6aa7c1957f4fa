/* meter API: who is calling (Authorization: Bearer <token>).
 *
 * Three kinds of caller: the operator and the control plane, each with a
 * token from configuration (METER_OPERATOR_TOKEN, METER_CONTROL_PLANE_TOKEN),
 * and account keys. An account key's token is "<key_id>.<secret>": the key id
 * finds the row, the secret's SHA-256 is compared with the stored hash in
 * constant time. Secrets are never logged, echoed or stored. */
#ifndef METER_AUTH_H
#define METER_AUTH_H

#include <stdbool.h>

#include "http.h"
#include "parse.h"
#include "rc.h"

enum auth_kind {
	AUTH_NONE, /* no credentials (public routes only) */
	AUTH_OPERATOR,
	AUTH_CONTROL_PLANE,
	AUTH_AGENT, /* a host agent pushing samples */
	AUTH_KEY,   /* an account key; role ROLE_FULL or ROLE_READ_ONLY */
};

struct auth {
	enum auth_kind kind;
	unsigned role;			   /* exactly one enum http_role bit */
	char account_id[PARSE_ID_MAX + 1]; /* AUTH_KEY: the key's account */
	char key_id[PARSE_ID_MAX + 1];	   /* AUTH_KEY: the key */
};

enum auth_step {
	AUTH_ALLOWED, /* go on to the handler */
	AUTH_REFUSED, /* the reply is set */
	AUTH_LOOKUP,  /* an account key to look up: auth_finish() on a worker */
};

/* Decides whether req (already routed) may call its route, filling
 * req->auth, as far as it can without the database (it never waits, so
 * an HTTP thread calls it): public routes, the service tokens, malformed
 * credentials, sessions' signatures and account keys found in the cache
 * of recent lookups. AUTH_REFUSED after setting the reply: 401
 * unauthorized (no, malformed or unknown credentials), 403 read_only_key
 * (a read_only key on a route that read_only may not call), 403 forbidden
 * (any other role not allowed), 503 metering_unavailable (out of memory).
 * AUTH_LOOKUP: an account key (or a key's session) that only the database
 * can settle; nothing is replied. */
enum auth_step auth_begin(struct http_req *req);

/* The whole decision of auth_begin, looking the key up when it must: on a
 * thread that may wait on PostgreSQL. True to go on to the handler; false
 * after setting the reply (auth_begin's, or 503 metering_unavailable when
 * the key could not be looked up). */
bool auth_finish(struct http_req *req);

struct app;

/* Resolves a bearer token (the operator's, the control plane's, or an
 * account key "<key_id>.<secret>") into *out, as auth_finish does.
 * METER_OK; METER_ENOTFOUND for anything not accepted (unknown, revoked,
 * wrong secret: all alike); METER_EDB when the key could not be looked up. */
METER_MUSTCHECK enum meter_rc auth_verify_token(struct app *app, const char *token,
						struct auth *out);

/* Forgets this process's cached lookup of key_id (a key just revoked here),
 * so that its token is refused from the next request on; other meterd
 * processes forget theirs within the cache's 5 s. */
void auth_forget_key(const char *key_id);

#endif
