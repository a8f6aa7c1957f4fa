/* meter: usage and cost from the hourly rollups (see db_usage.h). */
#include "db_usage.h"

#include <stdlib.h>
#include <string.h>

#include "db_util.h"

enum meter_rc db_usage_read(const PGresult *res, int row, int col, struct db_usage *out)
{
	int64_t *f[DB_USAGE_COLUMNS] = {
	    &out->running_seconds,
	    &out->paused_seconds,
	    &out->cpu_used_millicore_seconds,
	    &out->cpu_billed_millicore_seconds,
	    &out->memory_mib_seconds,
	    &out->storage_mib_seconds,
	    &out->cpu_micros,
	    &out->memory_micros,
	    &out->storage_micros,
	    &out->total_micros,
	    &out->cpu_used_millicores,
	    &out->cpu_billed_millicores,
	    &out->memory_mib,
	};
	enum meter_rc rc = METER_OK;

	for (int i = 0; i < DB_USAGE_COLUMNS && rc == METER_OK; i++)
		rc = db_util_i64(res, row, col + i, f[i], NULL);
	return rc;
}

/* $1 account or NULL, $2 sandbox or NULL, $3 time zone, $4 from, $5 to,
 * $6 window ('none', 'hour', 'day'), $7 group ('none', 'sandbox', 'key'),
 * $8 most rows returned. The total (the () grouping set, which exists even
 * without rows) comes first. */
/* clang-format off */
static const char sql_usage[] =
	"WITH r AS ("
	" SELECT u.*, " DB_ROW_START("COALESCE(k.time_zone, 'UTC')") " AS lo"
	" FROM usage_hourly u LEFT JOIN api_keys k"
	"  ON k.account_id = u.account_id AND k.key_id = u.key_id"
	" WHERE ($1::text IS NULL OR u.account_id = $1)"
	"  AND ($2::text IS NULL OR u.sandbox_id = $2)"
	"  AND u.hour > $4::timestamptz - interval '1 hour' AND u.hour < $5::timestamptz"
	"), x AS ("
	" SELECT r.*,"
	"  CASE $6 WHEN 'hour' THEN date_trunc('hour', r.lo)"
	"   WHEN 'day' THEN date_trunc('day', r.lo AT TIME ZONE $3) AT TIME ZONE $3"
	"   ELSE $4::timestamptz END AS b,"
	"  CASE $6 WHEN 'hour' THEN date_trunc('hour', r.lo) + interval '1 hour'"
	"   WHEN 'day' THEN (date_trunc('day', r.lo AT TIME ZONE $3) + interval '1 day')"
	"    AT TIME ZONE $3"
	"   ELSE $5::timestamptz END AS e,"
	"  CASE WHEN $7 <> 'none' THEN r.account_id END AS g_acc,"
	"  CASE WHEN $7 = 'sandbox' THEN r.sandbox_id END AS g_sb,"
	"  CASE WHEN $7 <> 'none' THEN r.key_id END AS g_key"
	" FROM r WHERE r.lo >= $4::timestamptz AND r.lo < $5::timestamptz"
	")"
	" SELECT GROUPING(x.b, x.e, x.g_acc, x.g_sb, x.g_key) <> 0,"
	"  " DB_USEC("GREATEST(x.b, $4::timestamptz)") ","
	"  " DB_USEC("LEAST(x.e, $5::timestamptz)") ", x.g_acc, x.g_sb, x.g_key,"
	"  " DB_USAGE_SUMS("") " FROM x"
	" GROUP BY GROUPING SETS ((x.b, x.e, x.g_acc, x.g_sb, x.g_key), ())"
	" ORDER BY 1 DESC, x.b, x.g_acc, x.g_sb, x.g_key"
	" LIMIT $8::bigint";
/* clang-format on */

static const char *const window_names[] = {"none", "hour", "day"};
static const char *const group_names[] = {"none", "sandbox", "key"};

enum meter_rc db_usage_query(PGconn *conn, const struct db_usage_query *q, struct db_usage *total,
			     struct db_usage_item **items, size_t *n)
{
	char from[40], to[40], lim[24];
	const char *params[] = {
	    q->account_id,	     q->sandbox_id,	    q->time_zone, from, to,
	    window_names[q->window], group_names[q->group], lim};
	struct db_usage_item *v = NULL;
	PGresult *res = NULL;
	enum meter_rc rc;
	int rows;

	*items = NULL;
	*n = 0;
	db_util_time_param(q->from_usec, from, sizeof(from));
	db_util_time_param(q->to_usec, to, sizeof(to));
	db_util_i64_param((int64_t)q->max_items + 2, lim, sizeof(lim));
	rc = db_util_exec(conn, "usage", sql_usage, 8, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	rows = PQntuples(res);
	if (rows < 1 || !db_util_bool(res, 0, 0)) {
		rc = METER_ERANGE; /* the total row is always there */
		goto out;
	}
	if ((size_t)(rows - 1) > q->max_items) {
		rc = METER_ERANGE;
		goto out;
	}
	rc = db_usage_read(res, 0, 6, total);
	if (rc != METER_OK)
		goto out;
	if (rows > 1) {
		v = calloc((size_t)rows - 1, sizeof(*v));
		if (!v) {
			rc = METER_ENOMEM;
			goto out;
		}
	}
	for (int i = 1; i < rows && rc == METER_OK; i++) {
		struct db_usage_item *it = &v[i - 1];

		rc = db_util_i64(res, i, 1, &it->period_start_usec, NULL);
		if (rc == METER_OK)
			rc = db_util_i64(res, i, 2, &it->period_end_usec, NULL);
		db_util_str(res, i, 3, it->account_id, sizeof(it->account_id));
		db_util_str(res, i, 4, it->sandbox_id, sizeof(it->sandbox_id));
		db_util_str(res, i, 5, it->key_id, sizeof(it->key_id));
		if (rc == METER_OK)
			rc = db_usage_read(res, i, 6, &it->u);
	}
	if (rc != METER_OK) {
		free(v);
		goto out;
	}
	*items = v;
	*n = (size_t)rows - 1;
out:
	PQclear(res);
	return rc;
}

enum meter_rc db_usage_today(PGconn *conn, const char *account_id, const char *key_id,
			     int64_t *from_usec, int64_t *to_usec, char *tz)
{
	const char *params[] = {account_id, key_id};
	PGresult *res = NULL;
	enum meter_rc rc;

	rc = db_util_exec(
	    conn, "today",
	    "SELECT " DB_USEC(
		"meter_day_start(z.tz, meter_key_day(z.tz, now()))") ","
								     " " DB_USEC(
									 "meter_day_start(z.tz, "
									 "meter_key_day(z.tz, "
									 "now()) + 1)") ", z.tz"
											" FROM "
											"(SELECT "
											"time_zone "
											"AS tz "
											"FROM "
											"api_keys"
											"  WHERE "
											"$2::text "
											"IS NOT "
											"NULL AND "
											"account_"
											"id = $1 "
											"AND "
											"key_id = "
											"$2"
											"  UNION "
											"ALL "
											"SELECT "
											"'UTC' "
											"WHERE "
											"$2::text "
											"IS NULL) "
											"z",
	    2, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	if (PQntuples(res) != 1) {
		rc = METER_ENOTFOUND;
		goto out;
	}
	rc = db_util_i64(res, 0, 0, from_usec, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, 0, 1, to_usec, NULL);
	db_util_str(res, 0, 2, tz, DB_TZ_MAX + 1);
out:
	PQclear(res);
	return rc;
}
