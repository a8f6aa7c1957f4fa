/* meter API: accounts and key creation (see h_accounts.h). */
#include "h_accounts.h"

#include <openssl/crypto.h>
#include <string.h>

#include "db_accounts.h"
#include "db_keys.h"
#include "h_keys.h"
#include "h_util.h"
#include "keys.h"

void h_account_create(struct http_req *req)
{
	static const char *const fields[] = {"name", NULL};
	json_t *body = http_json_body(req);
	const char *name = NULL;
	struct db_account acc;
	PGconn *conn = NULL;
	enum meter_rc rc;

	if (!body)
		return;
	if (!hutil_body_allowed(req, body, fields) ||
	    !hutil_body_str(req, body, "name", DB_ACCOUNT_NAME_MAX, true, &name))
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
	static const char *const fields[] = {"role", "daily_limit_micros", "time_zone", NULL};
	static const char *const roles[] = {"full", "read_only", NULL};
	json_t *body = http_json_body(req);
	const char *role = NULL, *tz = NULL;
	char secret[KEYS_SECRET_LEN + 1] = "", token[KEYS_TOKEN_MAX + 1] = "";
	unsigned char hash[KEYS_HASH_LEN];
	int64_t limit = 0;
	bool limit_null = true, limit_present = false;
	struct db_key key;
	PGconn *conn = NULL;
	json_t *out = NULL;
	enum meter_rc rc;

	if (!body)
		return;
	if (!hutil_body_allowed(req, body, fields) ||
	    !hutil_body_str(req, body, "role", 16, true, &role) ||
	    !hutil_body_int(req, body, "daily_limit_micros", 0, H_KEYS_LIMIT_MAX, false, true,
			    &limit, &limit_null, &limit_present) ||
	    !hutil_body_str(req, body, "time_zone", DB_KEY_TZ_MAX, false, &tz))
		goto out;
	if (strcmp(role, roles[0]) != 0 && strcmp(role, roles[1]) != 0) {
		hutil_bad(req, "role", "role must be full or read_only");
		goto out;
	}
	if (tz && !keys_tz_shape_ok(tz)) {
		hutil_bad(req, "time_zone", "time_zone must be an IANA name such as Europe/Paris");
		goto out;
	}
	if (keys_new_secret(secret, sizeof(secret)) != METER_OK ||
	    keys_hash_secret(secret, strlen(secret), hash) != METER_OK) {
		hutil_reply_rc(req, NULL, METER_EIO, "secret");
		goto out;
	}
	if (!hutil_db_acquire(req, &conn))
		goto out;
	rc = db_key_create(conn, req->params[0], hash, role, limit_present && !limit_null, limit,
			   tz, &key);
	if (rc == METER_EINVAL) {
		hutil_bad(req, "time_zone", "time_zone is not a known IANA time zone");
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
