/* meter API: dashboard sessions in a signed cookie.
 *
 * After sign-in with a key (or the operator token), the browser holds
 *   meter_session=<payload>.<mac>; HttpOnly; SameSite=Strict; Path=/
 * where payload is base64url("v1|<kind>|<account>|<key_id>|<expires>") and
 * mac is base64url(HMAC-SHA256(secret, payload)). Nothing secret is inside:
 * the key's secret never reaches the cookie or a URL. The server keeps no
 * session state, so any meterd sharing the configured session_secret
 * accepts it; a key revoked after sign-in is refused on the next request
 * (auth looks the key up each time). */
#ifndef METER_SESSION_H
#define METER_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "rc.h"

#define SESSION_COOKIE	   "meter_session"
#define SESSION_TTL_S	   (12 * 3600)
#define SESSION_SECRET_LEN 32

/* Sets the process's signing secret: the configured text (hashed to 32
 * bytes) or, when empty, 32 random bytes (sessions then last as long as
 * the process, and are not shared between processes). */
METER_MUSTCHECK enum meter_rc session_init(const char *configured);

/* A short fingerprint (16 hex digits of SHA-256) of the operator token, kept
 * in an operator's session in place of a key id: rotating or removing the
 * token ends every operator session issued under it. */
void session_operator_fingerprint(const char *operator_token, char *out, size_t len);

/* Formats the cookie value for a (a key or the operator, with the account
 * it views) valid until now_s + SESSION_TTL_S, into buf. */
METER_MUSTCHECK enum meter_rc session_issue(const struct auth *a, int64_t now_s, char *buf,
					    size_t len);

/* Checks a cookie value: signature, version, expiry. Fills *a with kind,
 * role, account and key (a key's role is confirmed by the caller against
 * the database). METER_EINVAL for anything not valid now. */
METER_MUSTCHECK enum meter_rc session_verify(const char *cookie, int64_t now_s, struct auth *a);

#endif
