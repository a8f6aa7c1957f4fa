/* meter API: authentication and role checks (see auth.h).
 *
 * Service tokens are compared with the configured ones in constant time.
 * Account keys: "<key_id>.<secret>", split at the last '.'; the key row is
 * looked up by id and SHA-256 of the secret compared with the stored hash in
 * constant time. A small cache of recent successful lookups (AUTH_CACHE_TTL)
 * spares the hot path a database round trip; it holds hashes, never
 * secrets, and an entry only matches the exact secret that was verified.
 * An HTTP thread never waits for a lookup: auth_begin decides what it can
 * without the database and leaves the rest to a request worker's
 * auth_finish, so that a flood of unknown keys (or a slow database) holds
 * up no other request's reading, checks and answers. */
#include "auth.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "app.h"
#include "db_keys.h"
#include "dbpool.h"
#include "h_util.h"
#include "keys.h"
#include "log.h"
#include "routes.h"
#include "schema_gate.h"
#include "session.h"

#define AUTH_CACHE_SLOTS    512		     /* direct-mapped by key id */
#define AUTH_CACHE_TTL_USEC INT64_C(5000000) /* a revoked key lives on this long at most */
#define AUTH_DB_WAIT_MS	    1000

struct auth_cache_slot {
	char key_id[PARSE_ID_MAX + 1];
	unsigned char hash[KEYS_HASH_LEN]; /* of the secret that was verified */
	char account_id[PARSE_ID_MAX + 1];
	bool read_only;
	int64_t expires_usec; /* monotonic; 0 = empty */
};

static struct auth_cache_slot auth_cache[AUTH_CACHE_SLOTS];
static pthread_mutex_t auth_cache_lock = PTHREAD_MUTEX_INITIALIZER;
/* Counts auth_forget_key calls: a lookup that began before one (it may have
 * read the key before its revocation) is not cached. */
static uint64_t auth_cache_forgets;

/* FNV-1a of the key id: its cache slot. */
static size_t auth_cache_slot_of(const char *key_id)
{
	uint32_t h = 2166136261u;

	for (const char *p = key_id; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return h % AUTH_CACHE_SLOTS;
}

/* True when key_id with a secret hashing to hash was verified less than
 * AUTH_CACHE_TTL_USEC ago; fills a. */
static bool auth_cache_get(const char *key_id, const unsigned char *hash, struct auth *a,
			   uint64_t *forgets)
{
	struct auth_cache_slot *s = &auth_cache[auth_cache_slot_of(key_id)];
	bool hit = false;

	pthread_mutex_lock(&auth_cache_lock);
	*forgets = auth_cache_forgets;
	if (s->expires_usec > http_now_usec() && strcmp(s->key_id, key_id) == 0 &&
	    keys_hash_equal(s->hash, hash)) {
		memcpy(a->account_id, s->account_id, sizeof(a->account_id));
		a->role = s->read_only ? ROLE_READ_ONLY : ROLE_FULL;
		hit = true;
	}
	pthread_mutex_unlock(&auth_cache_lock);
	return hit;
}

/* Caches a lookup that began when auth_cache_get gave forgets: not when a
 * key was forgotten since (the lookup may predate its revocation). */
static void auth_cache_put(const char *key_id, const unsigned char *hash, const struct auth *a,
			   uint64_t forgets)
{
	struct auth_cache_slot *s = &auth_cache[auth_cache_slot_of(key_id)];

	pthread_mutex_lock(&auth_cache_lock);
	if (forgets != auth_cache_forgets) {
		pthread_mutex_unlock(&auth_cache_lock);
		return;
	}
	snprintf(s->key_id, sizeof(s->key_id), "%s", key_id);
	memcpy(s->hash, hash, KEYS_HASH_LEN);
	memcpy(s->account_id, a->account_id, sizeof(s->account_id));
	s->read_only = a->role == ROLE_READ_ONLY;
	s->expires_usec = http_now_usec() + AUTH_CACHE_TTL_USEC;
	pthread_mutex_unlock(&auth_cache_lock);
}

void auth_forget_key(const char *key_id)
{
	struct auth_cache_slot *s = &auth_cache[auth_cache_slot_of(key_id)];

	pthread_mutex_lock(&auth_cache_lock);
	auth_cache_forgets++;
	if (strcmp(s->key_id, key_id) == 0)
		s->expires_usec = 0;
	pthread_mutex_unlock(&auth_cache_lock);
}

enum auth_key_result {
	AUTH_KEY_OK,
	AUTH_KEY_UNKNOWN, /* malformed, unknown, revoked, or a wrong secret: all alike */
	AUTH_KEY_DOWN,	  /* the database could not say */
	AUTH_KEY_LOOKUP,  /* not cached, and the caller may not wait for the database */
};

/* Authenticates token as an account key, filling a on AUTH_KEY_OK; asks
 * the database (on a cache miss) only when may_wait. */
static enum auth_key_result auth_key(struct app *app, const char *token, bool may_wait,
				     struct auth *a)
{
	char key_id[PARSE_ID_MAX + 1];
	const char *secret;
	unsigned char hash[KEYS_HASH_LEN];
	struct db_key_auth row = {0};
	enum auth_key_result result = AUTH_KEY_UNKNOWN;
	PGconn *conn = NULL;
	uint64_t forgets;
	enum meter_rc rc;

	if (keys_token_split(token, key_id, &secret) != METER_OK)
		return AUTH_KEY_UNKNOWN;
	if (keys_hash_secret(secret, strlen(secret), hash) != METER_OK)
		return AUTH_KEY_DOWN;
	snprintf(a->key_id, sizeof(a->key_id), "%s", key_id);
	if (auth_cache_get(key_id, hash, a, &forgets))
		return AUTH_KEY_OK;
	if (!may_wait)
		return AUTH_KEY_LOOKUP;
	/* Not looked up on a schema not this binary's (reply_down). */
	if (!schema_gate_open(NULL, 0) ||
	    db_pool_acquire(app->pool, AUTH_DB_WAIT_MS, &conn) != METER_OK)
		return AUTH_KEY_DOWN;
	rc = db_key_auth_get(conn, key_id, &row);
	db_pool_release(app->pool, conn, db_conn_failed(conn));
	if (rc == METER_ENOTFOUND)
		goto out;
	if (rc != METER_OK) {
		result = AUTH_KEY_DOWN;
		goto out;
	}
	/* Compare even for a revoked key, so both take the same time. */
	if (!keys_hash_equal(row.secret_hash, hash) || row.revoked)
		goto out;
	memcpy(a->account_id, row.account_id, sizeof(a->account_id));
	a->role = row.read_only ? ROLE_READ_ONLY : ROLE_FULL;
	auth_cache_put(key_id, hash, a, forgets);
	result = AUTH_KEY_OK;
out:
	OPENSSL_cleanse(&row, sizeof(row));
	return result;
}

/* GET and HEAD change nothing; every other method may. */
static bool auth_route_mutates(const struct route *route)
{
	return strcmp(route->method, "GET") != 0 && strcmp(route->method, "HEAD") != 0;
}

/* Configured tokens are shorter than this (meter/config.h). */
#define TOKEN_CMP_MAX 256
_Static_assert(sizeof(((struct meter_config *)0)->operator_token) <= TOKEN_CMP_MAX &&
		   sizeof(((struct meter_config *)0)->control_plane_token) <= TOKEN_CMP_MAX &&
		   sizeof(((struct meter_config *)0)->agent_token) <= TOKEN_CMP_MAX,
	       "a configured token fits the comparison's buffer");

/* Equality of a presented token and a configured one in a time that
 * tells nothing of the configured one, its length included: both are
 * compared zero-padded to TOKEN_CMP_MAX bytes. (A presented token too long
 * for that is unequal at once: that says only what the caller sent.) */
static bool token_equal(const char *presented, const char *configured)
{
	unsigned char a[TOKEN_CMP_MAX] = {0}, b[TOKEN_CMP_MAX] = {0};
	size_t n = strlen(presented), m = strlen(configured);
	bool same;

	if (m == 0 || m >= TOKEN_CMP_MAX || n >= TOKEN_CMP_MAX)
		return false;
	memcpy(a, presented, n);
	memcpy(b, configured, m);
	same = CRYPTO_memcmp(a, b, sizeof(a)) == 0 && n == m;
	OPENSSL_cleanse(b, sizeof(b)); /* no copy of a secret left on the stack */
	OPENSSL_cleanse(a, sizeof(a));
	return same;
}

/* Resolves a bearer token into *a (see auth_verify_token); an account
 * key's lookup only when may_wait. */
static enum auth_key_result verify_token(struct app *app, const char *token, bool may_wait,
					 struct auth *a)
{
	const struct meter_config *cfg = app->cfg;
	enum auth_key_result r;

	memset(a, 0, sizeof(*a));
	if (token_equal(token, cfg->operator_token)) {
		a->kind = AUTH_OPERATOR;
		a->role = ROLE_OPERATOR;
		return AUTH_KEY_OK;
	}
	if (token_equal(token, cfg->control_plane_token)) {
		a->kind = AUTH_CONTROL_PLANE;
		a->role = ROLE_CONTROL_PLANE;
		return AUTH_KEY_OK;
	}
	if (token_equal(token, cfg->agent_token)) {
		a->kind = AUTH_AGENT;
		a->role = ROLE_AGENT;
		return AUTH_KEY_OK;
	}
	r = auth_key(app, token, may_wait, a);
	if (r == AUTH_KEY_OK)
		a->kind = AUTH_KEY;
	else
		memset(a, 0, sizeof(*a));
	return r;
}

enum meter_rc auth_verify_token(struct app *app, const char *token, struct auth *a)
{
	switch (verify_token(app, token, true, a)) {
	case AUTH_KEY_OK:
		return METER_OK;
	case AUTH_KEY_DOWN:
		return METER_EDB;
	case AUTH_KEY_UNKNOWN:
	case AUTH_KEY_LOOKUP:
	default:
		return METER_ENOTFOUND;
	}
}

/* A dashboard session from the request's cookie: signature and expiry, and
 * for a key, that the key still exists, is not revoked and has the role the
 * session says (the database's answer, asked only when may_wait). */
static enum auth_key_result auth_session(struct http_req *req, bool may_wait, struct auth *a)
{
	const char *cookie =
	    MHD_lookup_connection_value(req->conn, MHD_COOKIE_KIND, SESSION_COOKIE);
	struct db_key_auth row = {0};
	PGconn *conn = NULL;
	enum meter_rc rc;

	if (!cookie || session_verify(cookie, time(NULL), a) != METER_OK)
		return AUTH_KEY_UNKNOWN;
	if (a->kind == AUTH_OPERATOR) {
		/* Only while the token it was issued under is still the one. */
		char fp[17];
		const char *token = req->app->cfg->operator_token;

		session_operator_fingerprint(token, fp, sizeof(fp));
		if (!token[0] || strlen(a->key_id) != 16 || CRYPTO_memcmp(fp, a->key_id, 16) != 0)
			return AUTH_KEY_UNKNOWN;
		a->key_id[0] = '\0';
		return AUTH_KEY_OK;
	}
	if (a->kind != AUTH_KEY)
		return AUTH_KEY_UNKNOWN;
	if (!may_wait)
		return AUTH_KEY_LOOKUP;
	if (!schema_gate_open(NULL, 0) ||
	    db_pool_acquire(req->app->pool, AUTH_DB_WAIT_MS, &conn) != METER_OK)
		return AUTH_KEY_DOWN;
	rc = db_key_auth_get(conn, a->key_id, &row);
	db_pool_release(req->app->pool, conn, db_conn_failed(conn));
	OPENSSL_cleanse(&row.secret_hash, sizeof(row.secret_hash));
	if (rc == METER_ENOTFOUND ||
	    (rc == METER_OK && (row.revoked || strcmp(row.account_id, a->account_id) != 0 ||
				row.read_only != (a->role == ROLE_READ_ONLY))))
		return AUTH_KEY_UNKNOWN;
	return rc == METER_OK ? AUTH_KEY_OK : AUTH_KEY_DOWN;
}

/* 503: a key or session could not be looked up. While the schema is not
 * this binary's (schema_gate.h), that is why, and what to do is said; a
 * lookup that ran past the statement timeout (on this thread, which ran
 * it) says so, as any request's statement does. */
static void reply_down(struct http_req *req)
{
	char why[SCHEMA_WHY_MAX], msg[SCHEMA_WHY_MAX + 64];

	if (schema_gate_open(why, sizeof(why))) {
		if (hutil_reply_db_cause(req, req->app->cfg->db_statement_timeout_ms,
					 "the credentials could not be looked up in time; retry"))
			return;
		snprintf(msg, sizeof(msg), "credentials cannot be checked now");
	} else
		snprintf(msg, sizeof(msg), "credentials cannot be checked now: %s", why);
	http_reply_error(req, 503, "metering_unavailable", msg, NULL);
}

/* Decides req's credentials (auth_begin, auth_finish); may_wait: the
 * database may be asked. */
static enum auth_step auth_run(struct http_req *req, bool may_wait)
{
	const char *h = http_header(req, MHD_HTTP_HEADER_AUTHORIZATION);
	struct auth *a = req->auth ? req->auth : calloc(1, sizeof(*a));
	enum auth_key_result rc;

	if (!a) {
		http_reply_error(req, 503, "metering_unavailable", "out of memory", NULL);
		return AUTH_REFUSED;
	}
	req->auth = a;
	memset(a, 0, sizeof(*a));
	a->kind = AUTH_NONE;
	a->role = ROLE_PUBLIC;
	if (req->route->roles & ROLE_PUBLIC)
		return AUTH_ALLOWED;
	if (!h && req->route->session) {
		/* Pages and exports a signed-in browser opens: the session cookie. */
		rc = auth_session(req, may_wait, a);
		if (rc == AUTH_KEY_LOOKUP) {
			memset(a, 0, sizeof(*a)); /* no role until decided */
			return AUTH_LOOKUP;
		}
		if (rc == AUTH_KEY_DOWN) {
			memset(a, 0, sizeof(*a));
			reply_down(req);
			return AUTH_REFUSED;
		}
		if (rc != AUTH_KEY_OK) {
			memset(a, 0, sizeof(*a));
			if (strncmp(req->path, "/dashboard/", 11) == 0) {
				http_reply_text(req, 303, "text/plain; charset=utf-8", "", 0);
				if (req->resp &&
				    MHD_add_response_header(req->resp, MHD_HTTP_HEADER_LOCATION,
							    "/dashboard/sign-in") != MHD_YES)
					log_warn("could not add Location");
				return AUTH_REFUSED;
			}
			http_reply_error(req, 401, "unauthorized", "missing or expired session",
					 NULL);
			return AUTH_REFUSED;
		}
	} else {
		const char *tok = h ? h + 7 : NULL;
		size_t n = 0;
		char *trimmed = NULL;

		/* The scheme's name is case-insensitive and one or more spaces
		 * part it from the token (RFC 9110, 11.1 and 11.4); whitespace
		 * after the token is not part of the field's value (5.5). */
		if (h && strncasecmp(h, "Bearer ", 7) == 0) {
			tok += strspn(tok, " ");
			n = strlen(tok);
			while (n > 0 && (tok[n - 1] == ' ' || tok[n - 1] == '\t'))
				n--;
		}
		if (n == 0) {
			http_reply_error(req, 401, "unauthorized",
					 "missing or malformed bearer token", NULL);
			return AUTH_REFUSED;
		}
		if (tok[n] != '\0') {
			trimmed = strndup(tok, n);
			if (!trimmed) {
				http_reply_error(req, 503, "metering_unavailable", "out of memory",
						 NULL);
				return AUTH_REFUSED;
			}
			tok = trimmed;
		}
		rc = verify_token(req->app, tok, may_wait, a);
		free(trimmed);
		if (rc == AUTH_KEY_LOOKUP)
			return AUTH_LOOKUP; /* a was cleared: no role until decided */
		if (rc == AUTH_KEY_DOWN) {
			reply_down(req);
			return AUTH_REFUSED;
		}
		if (rc != AUTH_KEY_OK) {
			http_reply_error(req, 401, "unauthorized", "unknown credentials", NULL);
			return AUTH_REFUSED;
		}
	}
	if (!(req->route->roles & a->role)) {
		if (a->role == ROLE_READ_ONLY && auth_route_mutates(req->route))
			http_reply_error(req, 403, "read_only_key",
					 "a read_only key cannot change anything", NULL);
		else
			http_reply_error(req, 403, "forbidden",
					 "this credential may not call this route", NULL);
		return AUTH_REFUSED;
	}
	return AUTH_ALLOWED;
}

enum auth_step auth_begin(struct http_req *req)
{
	return auth_run(req, false);
}

bool auth_finish(struct http_req *req)
{
	return auth_run(req, true) == AUTH_ALLOWED;
}
