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
 * without rows) comes first.
 *
 * Over a month of a large fleet this reads millions of rows, so the shape
 * is the one that reads them once, cheaply:
 * - The rows are summed per period and group first (x), and the grouping
 *   sets (the items and the total) are made over those sums: over the rows
 *   themselves they made PostgreSQL sort every row. The sums are integers,
 *   so the total over the groups is the total over the rows, exactly.
 * - A period is keyed by its hour, or by its local date in $3, and its
 *   bounds are worked out once a group instead of once a row.
 * - A row whose whole hour lies in the range needs no placing: saying so
 *   first lets the planner count the rows the range keeps (on the placed
 *   start alone it guessed a ninth), and so size the grouping right. */
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
	" SELECT CASE WHEN $6 = 'hour' THEN date_trunc('hour', r.lo) END AS hb,"
	"  CASE WHEN $6 = 'day' THEN (r.lo AT TIME ZONE $3)::date END AS ld,"
	"  CASE WHEN $7 <> 'none' THEN r.account_id END AS g_acc,"
	"  CASE WHEN $7 = 'sandbox' THEN r.sandbox_id END AS g_sb,"
	"  CASE WHEN $7 <> 'none' THEN r.key_id END AS g_key,"
	"  sum(r.running_usec) AS running_usec, sum(r.paused_usec) AS paused_usec,"
	"  sum(r.cpu_used_mcus) AS cpu_used_mcus, sum(r.cpu_billed_mcus) AS cpu_billed_mcus,"
	"  sum(r.memory_mibus) AS memory_mibus, sum(r.storage_mibus) AS storage_mibus,"
	"  sum(r.cpu_micros) AS cpu_micros, sum(r.memory_micros) AS memory_micros,"
	"  sum(r.storage_micros) AS storage_micros, sum(r.total_micros) AS total_micros"
	" FROM r"
	" WHERE (r.hour >= $4::timestamptz AND r.hour <= $5::timestamptz - interval '1 hour')"
	"  OR (r.lo >= $4::timestamptz AND r.lo < $5::timestamptz)"
	" GROUP BY 1, 2, 3, 4, 5"
	")"
	" SELECT GROUPING(x.hb, x.ld, x.g_acc, x.g_sb, x.g_key) <> 0,"
	"  " DB_USEC("GREATEST(CASE $6 WHEN 'hour' THEN x.hb"
		     " WHEN 'day' THEN meter_day_start($3, x.ld)"
		     " ELSE $4::timestamptz END, $4::timestamptz)") ","
	"  " DB_USEC("LEAST(CASE $6 WHEN 'hour' THEN x.hb + interval '1 hour'"
		     " WHEN 'day' THEN meter_day_start($3, x.ld + 1)"
		     " ELSE $5::timestamptz END, $5::timestamptz)") ","
	"  x.g_acc, x.g_sb, x.g_key,"
	"  " DB_USAGE_SUMS("") " FROM x"
	" GROUP BY GROUPING SETS ((x.hb, x.ld, x.g_acc, x.g_sb, x.g_key), ())"
	" ORDER BY 1 DESC, x.hb, x.ld, x.g_acc, x.g_sb, x.g_key"
	" LIMIT $8::bigint";

/* For this query only (SET LOCAL, so the pool's connections keep their
 * defaults): no JIT, which compiled for 1 to 2 s a query over a large
 * fleet and saved less; memory to hash the groups of a large fleet (about
 * 20 MB for 10,000 sandboxes); and no sorts but the last one, which the
 * planner picked when it overestimated the groups (sorting every row, and
 * spilling it to disk), where a hash spills only what does not fit. */
static const char sql_usage_settings[] =
	"SELECT set_config('jit', 'off', true), set_config('work_mem', '32MB', true),"
	" set_config('enable_sort', 'off', true)";
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
	rc = db_util_begin(conn);
	if (rc == METER_OK)
		rc = db_util_exec(conn, "usage settings", sql_usage_settings, 0, NULL, NULL, NULL);
	if (rc == METER_OK)
		rc = db_util_exec(conn, "usage", sql_usage, 8, params, &res, NULL);
	if (rc == METER_OK)
		rc = db_util_commit(conn);
	if (rc != METER_OK) {
		db_util_rollback(conn);
		PQclear(res);
		return rc;
	}
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

/* db_usage_today: $1 account, $2 key or NULL (UTC's day). */
/* clang-format off */
static const char sql_today[] =
	"SELECT " DB_USEC("meter_day_start(z.tz, meter_key_day(z.tz, now()))") ","
	" " DB_USEC("meter_day_start(z.tz, meter_key_day(z.tz, now()) + 1)") ", z.tz"
	" FROM (SELECT time_zone AS tz FROM api_keys"
	"  WHERE $2::text IS NOT NULL AND account_id = $1 AND key_id = $2"
	"  UNION ALL SELECT 'UTC' WHERE $2::text IS NULL) z";
/* clang-format on */

enum meter_rc db_usage_today(PGconn *conn, const char *account_id, const char *key_id,
			     int64_t *from_usec, int64_t *to_usec, char *tz)
{
	const char *params[] = {account_id, key_id};
	PGresult *res = NULL;
	enum meter_rc rc;

	rc = db_util_exec(conn, "today", sql_today, 2, params, &res, NULL);
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
