/* meter API: accounts and key creation (see h_accounts.h). */
#include "h_accounts.h"

#include <openssl/crypto.h>
#include <string.h>

#include "auth.h"
#include "db_accounts.h"
#include "db_keys.h"
#include "h_keys.h"
#include "h_util.h"
#include "keys.h"

bool h_account_create_parse(struct http_req *req, json_t *body, const char **name)
{
	static const char *const fields[] = {"name", NULL};

	*name = NULL;
	return hutil_body_allowed(req, body, fields) &&
	       hutil_body_str(req, body, "name", DB_ACCOUNT_NAME_MAX, true, name);
}

void h_account_create(struct http_req *req)
{
	json_t *body = http_json_body(req);
	const char *name = NULL;
	struct db_account acc;
	PGconn *conn = NULL;
	enum meter_rc rc;

	if (!body)
		return;
	if (!h_account_create_parse(req, body, &name))
		goto out;
	if (!hutil_db_acquire(req, &conn))
		goto out;
	rc = db_account_create(conn, name, &acc);
	if (rc == METER_EINVAL) {
		hutil_bad(req, "name", "name refused");
		goto out;
	}
	if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "account");
		goto out;
	}
	http_reply_json(req, 201,
			json_pack("{s:s, s:s, s:o}", "account_id", acc.account_id, "name", acc.name,
				  "created_at", hutil_time_json(acc.created_at_usec)));
out:
	hutil_db_release(req, conn);
	json_decref(body);
}

void h_account_key_create(struct http_req *req)
{
	json_t *body = http_json_body(req);
	struct h_key_fields f;
	char secret[KEYS_SECRET_LEN + 1] = "", token[KEYS_TOKEN_MAX + 1] = "";
	unsigned char hash[KEYS_HASH_LEN];
	struct db_key key;
	PGconn *conn = NULL;
	json_t *out = NULL;
	enum meter_rc rc;

	if (!body)
		return;
	if (!h_key_create_parse(req, body, &f))
		goto out;
	if (strcmp(req->params[0], DB_ACCOUNT_UNATTRIBUTED) == 0) {
		http_reply_error(req, 403, "forbidden",
				 "the unattributed account holds the usage of sandboxes no key"
				 " claims: it takes no keys",
				 NULL);
		goto out;
	}
	if (keys_new_secret(secret, sizeof(secret)) != METER_OK ||
	    keys_hash_secret(secret, strlen(secret), hash) != METER_OK) {
		hutil_reply_rc(req, NULL, METER_EIO, "secret");
		goto out;
	}
	if (!hutil_db_acquire(req, &conn))
		goto out;
	rc = db_key_create(conn, req->params[0], hash, f.role, f.has_limit, f.daily_limit_micros,
			   f.time_zone, &key);
	if (rc == METER_EINVAL) {
		hutil_bad(
		    req, "time_zone",
		    "time_zone is not a known IANA time zone, or is an abbreviation (CET, EST:"
		    " read as fixed offsets): name a place's zone, such as Europe/Paris");
		goto out;
	}
	if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "no such account");
		goto out;
	}
	if (keys_token_format(key.key_id, secret, token, sizeof(token)) != METER_OK) {
		hutil_reply_rc(req, conn, METER_EINVAL, "token");
		goto out;
	}
	out = h_key_json(&key);
	if (out)
		json_object_set_new(out, "secret", json_string(token));
	http_reply_json(req, 201, out);
out:
	OPENSSL_cleanse(secret, sizeof(secret));
	OPENSSL_cleanse(token, sizeof(token));
	hutil_db_release(req, conn);
	json_decref(body);
}

void h_account_key_revoke(struct http_req *req)
{
	struct db_key key;
	PGconn *conn = NULL;
	json_t *out;
	bool already = false;
	enum meter_rc rc;

	if (!hutil_db_acquire(req, &conn))
		return;
	rc = db_key_revoke(conn, req->params[0], req->params[1], &key, &already);
	/* Whatever the answer: the revocation may have committed before a
	 * later read failed. */
	auth_forget_key(req->params[1]);
	if (rc != METER_OK) {
		hutil_reply_rc(req, conn, rc, "no such key in this account");
		goto out;
	}
	out = h_key_json(&key);
	if (out)
		json_object_set_new(out, "already_revoked", json_boolean(already));
	http_reply_json(req, 200, out);
out:
	hutil_db_release(req, conn);
}
