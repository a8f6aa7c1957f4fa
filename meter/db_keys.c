/* meter: account keys (see db_keys.h). */
#include "db_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_util.h"
#include "money.h"

#define DB_KEY_ID_TRIES	    4
#define DB_KEY_LIMITS_TRIES 4 /* attempts while the zone changes under a change */

/* The columns of struct db_key, from api_keys k with today's ledger row. */
/* clang-format off */
#define KEY_COLUMNS \
	"k.account_id, k.key_id, k.role, k.daily_limit_micros, k.time_zone," \
	" " DB_USEC("k.created_at") ", " DB_USEC("k.revoked_at") ", d.day::text," \
	" COALESCE(l.spent_micros, 0), COALESCE(l.held_micros, 0)"
#define KEY_DAY_JOIN \
	" CROSS JOIN LATERAL (SELECT meter_key_day(k.time_zone, now()) AS day) d" \
	" LEFT JOIN key_day_ledger l ON l.account_id = k.account_id AND l.key_id = k.key_id" \
	" AND l.day = d.day"
/* clang-format on */

/* Reads row of res (KEY_COLUMNS) into *out. */
static enum meter_rc key_row(const PGresult *res, int row, struct db_key *out)
{
	bool null_limit, null_revoked;
	enum meter_rc rc;

	memset(out, 0, sizeof(*out));
	db_util_str(res, row, 0, out->account_id, sizeof(out->account_id));
	db_util_str(res, row, 1, out->key_id, sizeof(out->key_id));
	db_util_str(res, row, 2, out->role, sizeof(out->role));
	rc = db_util_i64(res, row, 3, &out->daily_limit_micros, &null_limit);
	if (rc != METER_OK)
		return rc;
	out->has_limit = !null_limit;
	db_util_str(res, row, 4, out->time_zone, sizeof(out->time_zone));
	rc = db_util_i64(res, row, 5, &out->created_at_usec, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, row, 6, &out->revoked_at_usec, &null_revoked);
	if (rc != METER_OK)
		return rc;
	if (null_revoked)
		out->revoked_at_usec = INT64_MIN;
	db_util_str(res, row, 7, out->day, sizeof(out->day));
	rc = db_util_i64(res, row, 8, &out->day_spent_micros, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, row, 9, &out->day_held_micros, NULL);
	return rc;
}

/* Two hex digits per byte of text into hash; false when malformed. */
static bool hex_hash(const char *text, unsigned char hash[KEYS_HASH_LEN])
{
	if (strlen(text) != 2 * KEYS_HASH_LEN)
		return false;
	for (size_t i = 0; i < KEYS_HASH_LEN; i++) {
		unsigned v = 0;

		for (int j = 0; j < 2; j++) {
			char c = text[2 * i + (size_t)j];

			v <<= 4;
			if (c >= '0' && c <= '9')
				v |= (unsigned)(c - '0');
			else if (c >= 'a' && c <= 'f')
				v |= (unsigned)(c - 'a' + 10);
			else
				return false;
		}
		hash[i] = (unsigned char)v;
	}
	return true;
}

enum meter_rc db_key_auth_get(PGconn *conn, const char *key_id, struct db_key_auth *out)
{
	const char *params[] = {key_id};
	PGresult *res = NULL;
	enum meter_rc rc;

	rc = db_util_exec(conn, "key auth",
			  "SELECT account_id, role, revoked_at IS NOT NULL,"
			  " encode(secret_hash, 'hex') FROM api_keys WHERE key_id = $1",
			  1, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	if (PQntuples(res) != 1) {
		rc = METER_ENOTFOUND;
		goto out;
	}
	db_util_str(res, 0, 0, out->account_id, sizeof(out->account_id));
	out->read_only = strcmp(PQgetvalue(res, 0, 1), "read_only") == 0;
	out->revoked = db_util_bool(res, 0, 2);
	if (!hex_hash(PQgetvalue(res, 0, 3), out->secret_hash))
		rc = METER_ERANGE;
out:
	PQclear(res);
	return rc;
}

static const char sql_key_insert[] =
    "WITH k AS (INSERT INTO api_keys (account_id, key_id, secret_hash, role,"
    " daily_limit_micros, time_zone)"
    " VALUES ($1, $2, decode($3, 'hex'), $4, $5::bigint, COALESCE($6, 'UTC'))"
    " ON CONFLICT (key_id) DO NOTHING RETURNING *)"
    " SELECT " KEY_COLUMNS " FROM k" KEY_DAY_JOIN;

enum meter_rc db_key_create(PGconn *conn, const char *account_id,
			    const unsigned char hash[KEYS_HASH_LEN], const char *role,
			    bool has_limit, int64_t limit_micros, const char *time_zone,
			    struct db_key *out)
{
	char id[KEYS_GEN_ID_LEN + 1], hex[2 * KEYS_HASH_LEN + 1], limit[24], state[6];
	PGresult *res = NULL;
	enum meter_rc rc = METER_EDB;

	keys_hex(hash, KEYS_HASH_LEN, hex);
	db_util_i64_param(limit_micros, limit, sizeof(limit));
	for (int i = 0; i < DB_KEY_ID_TRIES; i++) {
		const char *params[] = {account_id, id, hex, role, has_limit ? limit : NULL,
					time_zone};

		rc = keys_new_key_id(id, sizeof(id));
		if (rc != METER_OK)
			return rc;
		rc = db_util_exec(conn, "key create", sql_key_insert, 6, params, &res, state);
		if (rc != METER_OK) {
			if (strcmp(state, "23503") == 0)
				return METER_ENOTFOUND; /* no such account */
			if (strncmp(state, "23", 2) == 0 || strncmp(state, "22", 2) == 0)
				return METER_EINVAL; /* the time zone */
			return rc;
		}
		if (PQntuples(res) == 1)
			break;
		PQclear(res);
		res = NULL;
	}
	if (!res)
		return METER_ECONFLICT;
	rc = key_row(res, 0, out);
	PQclear(res);
	return rc;
}

static const char sql_key_get[] =
    "SELECT " KEY_COLUMNS " FROM api_keys k" KEY_DAY_JOIN
    " WHERE k.key_id = $2 AND ($1::text IS NULL OR k.account_id = $1)";

enum meter_rc db_key_get(PGconn *conn, const char *account_id, const char *key_id,
			 struct db_key *out)
{
	const char *params[] = {account_id, key_id};
	PGresult *res = NULL;
	enum meter_rc rc;

	rc = db_util_exec(conn, "key get", sql_key_get, 2, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	rc = PQntuples(res) == 1 ? key_row(res, 0, out) : METER_ENOTFOUND;
	PQclear(res);
	return rc;
}

enum meter_rc db_key_exists(PGconn *conn, const char *account_id, const char *key_id)
{
	const char *params[] = {account_id, key_id};

	return db_util_exists(conn, "key exists",
			      "SELECT 1 FROM api_keys WHERE ($1::text IS NULL OR account_id = $1)"
			      " AND key_id = $2 LIMIT 1",
			      2, params);
}

enum meter_rc db_key_revoke(PGconn *conn, const char *account_id, const char *key_id,
			    struct db_key *out, bool *already)
{
	const char *params[] = {account_id, key_id};
	PGresult *res = NULL;
	enum meter_rc rc;
	bool now;

	*already = false;
	rc = db_util_exec(conn, "key revoke",
			  "UPDATE api_keys SET revoked_at = GREATEST(now(), created_at)"
			  " WHERE account_id = $1 AND key_id = $2 AND revoked_at IS NULL"
			  " RETURNING 1",
			  2, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	now = PQntuples(res) == 1;
	PQclear(res);
	rc = db_key_get(conn, account_id, key_id, out);
	if (rc == METER_OK && out->revoked_at_usec == INT64_MIN)
		rc = METER_EDB; /* revoked above, yet read as not: cannot be */
	if (rc == METER_OK)
		*already = !now;
	return rc;
}

static const char sql_key_list[] =
    "SELECT " KEY_COLUMNS " FROM api_keys k" KEY_DAY_JOIN " WHERE k.account_id = $1"
    " AND ($2::text IS NULL OR (k.created_at, k.key_id)"
    "  > (SELECT c.created_at, c.key_id FROM api_keys c"
    "     WHERE c.account_id = $1 AND c.key_id = $2))"
    " ORDER BY k.created_at, k.key_id LIMIT $3";

enum meter_rc db_key_list(PGconn *conn, const char *account_id, const char *after, int limit,
			  struct db_key **out, size_t *n)
{
	char lim[16];
	const char *params[] = {account_id, after, lim};
	PGresult *res = NULL;
	struct db_key *keys = NULL;
	enum meter_rc rc;
	int rows;

	*out = NULL;
	*n = 0;
	if (limit < 1 || limit > DB_KEYS_LIST_MAX)
		return METER_EINVAL;
	snprintf(lim, sizeof(lim), "%d", limit);
	if (after) {
		rc = db_util_exec(conn, "key list",
				  "SELECT 1 FROM api_keys WHERE account_id = $1 AND key_id = $2", 2,
				  params, &res, NULL);
		if (rc != METER_OK)
			return rc;
		rows = PQntuples(res);
		PQclear(res);
		res = NULL;
		if (rows != 1)
			return METER_ENOTFOUND;
	}
	rc = db_util_exec(conn, "key list", sql_key_list, 3, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	rows = PQntuples(res);
	if (rows > 0) {
		keys = calloc((size_t)rows, sizeof(*keys));
		if (!keys) {
			rc = METER_ENOMEM;
			goto out;
		}
	}
	for (int i = 0; i < rows && rc == METER_OK; i++)
		rc = key_row(res, i, &keys[i]);
	if (rc != METER_OK) {
		free(keys);
		goto out;
	}
	*out = keys;
	*n = (size_t)rows;
out:
	PQclear(res);
	return rc;
}

/* The key's ledger rows a change of its limits holds until it commits,
 * made when missing and locked in day order in one statement (the order
 * of every ledger writer):
 *   - when the limit ($6) or the zone ($7) changes: today's in the
 *     resulting zone ($3) and every later one (the part of a lease
 *     crossing midnight, whose limit the spend_limit_crossed trigger
 *     compares with); these get the limit the key will have (the new one,
 *     $5, or the key's). A zone's change alone must set them too: a day
 *     of the new zone may have a row made under another limit (yesterday's
 *     in a zone ahead), whose crossing the trigger would then miss;
 *   - when the zone changes ($7): the old zone's ($4) days from an hour
 *     ago to an hour ahead, locked as they are. A check that read the old
 *     zone holds against one of them first (its day at its own clock,
 *     within a statement timeout or two of now), and holds that row from
 *     before its holds can commit until they do.
 * A row made here gets the limit the key will have. */
static const char sql_limits_rows[] =
    "INSERT INTO key_day_ledger AS l (account_id, key_id, day, limit_micros)"
    " SELECT $1, $2, d.day, CASE WHEN $6::boolean THEN $5::bigint"
    "  ELSE (SELECT k.daily_limit_micros FROM api_keys k"
    "   WHERE k.account_id = $1 AND k.key_id = $2) END"
    " FROM (SELECT meter_key_day($3, now()) AS day WHERE $6::boolean OR $7::boolean"
    "  UNION SELECT x.day FROM key_day_ledger x WHERE ($6::boolean OR $7::boolean)"
    "  AND x.account_id = $1 AND x.key_id = $2 AND x.day > meter_key_day($3, now())"
    "  UNION SELECT w.lo + g FROM"
    "   (SELECT meter_key_day($4, now() - interval '1 hour') AS lo,"
    "    meter_key_day($4, now() + interval '1 hour') AS hi) w,"
    "   generate_series(0, w.hi - w.lo) g WHERE $7::boolean) d"
    " ORDER BY d.day"
    " ON CONFLICT ON CONSTRAINT key_day_ledger_pkey DO UPDATE"
    " SET limit_micros = CASE WHEN l.day >= meter_key_day($3, now())"
    "  THEN EXCLUDED.limit_micros ELSE l.limit_micros END,"
    " updated_at = CASE WHEN l.day >= meter_key_day($3, now())"
    "  THEN now() ELSE l.updated_at END";

/* The key row, after the ledger rows, while its zone is still the one read
 * ($6): no row when another change of the zone committed meanwhile. The
 * zone is written only when it changes ($7): a key kept in a name the zone
 * domain no longer takes (EST, which sql/0047 left) still has its limit
 * changed by a request that names no zone. */
static const char sql_limits_key[] =
    "UPDATE api_keys SET time_zone = $3,"
    " daily_limit_micros = CASE WHEN $4::boolean THEN $5::bigint ELSE daily_limit_micros END"
    " WHERE account_id = $1 AND key_id = $2 AND time_zone = $6 AND $7::boolean RETURNING 1";
static const char sql_limits_key_same_zone[] =
    "UPDATE api_keys SET"
    " daily_limit_micros = CASE WHEN $4::boolean THEN $5::bigint ELSE daily_limit_micros END"
    " WHERE account_id = $1 AND key_id = $2 AND time_zone = $6 AND $3::text = $6::text"
    " AND NOT $7::boolean RETURNING 1";

/* The key's open holds, read after the ledger rows are held: every hold of
 * a check that took one of them first has committed. (meter_key_open_holds
 * reads the open holds alone, off their partial indexes.) */
static const char sql_limits_holds[] =
    "SELECT open_holds, " DB_USEC("latest_end") " FROM meter_key_open_holds($1, $2)";

/* What one attempt of db_key_set_limits found. */
enum limits_step { LIMITS_DONE, LIMITS_AGAIN, LIMITS_BUSY };

/* One attempt of db_key_set_limits in a transaction of its own: committed
 * when *step is LIMITS_DONE, rolled back otherwise (and on an error). acc
 * (PARSE_ID_MAX + 1 bytes) gets the key's account. */
static enum meter_rc limits_attempt(PGconn *conn, const char *account_id, const char *key_id,
				    bool set_limit, const char *limit, const char *time_zone,
				    char *acc, struct db_key_tz_busy *busy, enum limits_step *step)
{
	char old_tz[DB_KEY_TZ_MAX + 1], tz[DB_KEY_TZ_MAX + 1], state[6] = "";
	const char *p1[] = {account_id, key_id};
	PGresult *res = NULL;
	bool changing;
	enum meter_rc rc;

	*step = LIMITS_AGAIN;
	rc = db_util_begin(conn);
	if (rc != METER_OK)
		return rc;
	rc = db_util_exec(conn, "key limits",
			  "SELECT account_id, time_zone FROM api_keys"
			  " WHERE key_id = $2 AND ($1::text IS NULL OR account_id = $1)",
			  2, p1, &res, state);
	if (rc != METER_OK)
		goto out;
	if (PQntuples(res) != 1) {
		rc = METER_ENOTFOUND;
		goto out;
	}
	db_util_str(res, 0, 0, acc, PARSE_ID_MAX + 1);
	db_util_str(res, 0, 1, old_tz, sizeof(old_tz));
	PQclear(res);
	res = NULL;
	snprintf(tz, sizeof(tz), "%s", time_zone ? time_zone : old_tz);
	changing = strcmp(tz, old_tz) != 0;
	if (set_limit || changing) {
		const char *p[] = {
		    acc, key_id, tz, old_tz, limit, set_limit ? "t" : "f", changing ? "t" : "f"};

		rc = db_util_exec(conn, "key limits", sql_limits_rows, 7, p, NULL, state);
		if (rc != METER_OK)
			goto out;
	}
	{
		const char *p[] = {
		    acc, key_id, tz, set_limit ? "t" : "f", limit, old_tz, changing ? "t" : "f"};

		rc = db_util_exec(conn, "key limits",
				  changing ? sql_limits_key : sql_limits_key_same_zone, 7, p, &res,
				  state);
		if (rc != METER_OK) {
			if (strncmp(state, "23", 2) == 0 || strncmp(state, "22", 2) == 0)
				rc = METER_EINVAL;
			goto out;
		}
		if (PQntuples(res) != 1)
			goto out; /* the zone changed meanwhile (or the key went): again */
		PQclear(res);
		res = NULL;
	}
	if (changing) {
		const char *p[] = {acc, key_id};
		bool no_end; /* no open hold */

		rc = db_util_exec(conn, "key limits", sql_limits_holds, 2, p, &res, state);
		if (rc != METER_OK)
			goto out;
		rc = db_util_i64(res, 0, 0, &busy->open_holds, NULL);
		if (rc == METER_OK)
			rc = db_util_i64(res, 0, 1, &busy->latest_lease_end_usec, &no_end);
		if (rc != METER_OK)
			goto out;
		PQclear(res);
		res = NULL;
		if (busy->open_holds > 0) {
			*step = LIMITS_BUSY;
			goto out;
		}
	}
	rc = db_util_commit(conn);
	if (rc != METER_OK)
		goto out;
	*step = LIMITS_DONE;
	return METER_OK;
out:
	PQclear(res);
	db_util_rollback(conn);
	/* A deadlock with another writer of the rows: again. */
	if (rc == METER_EDB && strcmp(state, "40P01") == 0) {
		rc = METER_OK;
		*step = LIMITS_AGAIN;
	}
	return rc;
}

enum meter_rc db_key_set_limits(PGconn *conn, const char *account_id, const char *key_id,
				bool set_limit, bool has_limit, int64_t limit_micros,
				const char *time_zone, struct db_key *out,
				struct db_key_tz_busy *busy)
{
	char acc[PARSE_ID_MAX + 1], limit[24];
	enum limits_step step = LIMITS_AGAIN;
	enum meter_rc rc;

	memset(busy, 0, sizeof(*busy));
	db_util_i64_param(limit_micros, limit, sizeof(limit));
	if (time_zone) {
		const char *p[] = {time_zone};
		PGresult *res = NULL;
		bool known;

		rc = db_util_exec(conn, "key limits", "SELECT meter_is_time_zone($1)", 1, p, &res,
				  NULL);
		if (rc != METER_OK)
			return rc;
		known = db_util_bool(res, 0, 0);
		PQclear(res);
		if (!known)
			return METER_EINVAL;
	}
	for (int i = 0; i < DB_KEY_LIMITS_TRIES && step == LIMITS_AGAIN; i++) {
		memset(busy, 0, sizeof(*busy));
		rc = limits_attempt(conn, account_id, key_id, set_limit,
				    set_limit && has_limit ? limit : NULL, time_zone, acc, busy,
				    &step);
		if (rc != METER_OK)
			return rc;
	}
	if (step != LIMITS_DONE) {
		if (step == LIMITS_AGAIN)
			memset(busy, 0, sizeof(*busy));
		return METER_ECONFLICT;
	}
	return db_key_get(conn, acc, key_id, out);
}

int64_t db_key_committed(const struct db_key *k)
{
	int64_t committed;

	if (money_add(k->day_spent_micros, k->day_held_micros, &committed) != METER_OK)
		committed = INT64_MAX;
	return committed;
}

int64_t db_key_remaining(const struct db_key *k)
{
	int64_t committed = db_key_committed(k);

	if (!k->has_limit)
		return -1;
	return k->daily_limit_micros > committed ? k->daily_limit_micros - committed : 0;
}
