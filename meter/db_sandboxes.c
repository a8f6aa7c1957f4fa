/* meter: sandboxes with usage and cost (see db_sandboxes.h). */
#include "db_sandboxes.h"

#include <stdlib.h>
#include <string.h>

#include "db_util.h"

/* $1 account, $2 sandbox, $3 state, $4 key, $5 from, $6 to (all may be
 * NULL), $7 limit, then the cursor: $8 id, $9 sort value. Each sandbox's
 * range and month are in its key's time zone. */
/* clang-format off */
#define SANDBOX_BASE \
	"WITH sb AS (" \
	" SELECT s.*, COALESCE(k.time_zone, 'UTC') AS tz" \
	" FROM sandboxes s LEFT JOIN api_keys k" \
	"  ON k.account_id = s.account_id AND k.key_id = s.key_id" \
	" WHERE ($1::text IS NULL OR s.account_id = $1)" \
	"  AND ($2::text IS NULL OR s.sandbox_id = $2)" \
	"  AND ($3::text IS NULL OR s.state = $3)" \
	"  AND ($4::text IS NULL OR s.key_id = $4)" \
	"), rng AS (" \
	" SELECT sb.*," \
	"  COALESCE($5::timestamptz, meter_day_start(sb.tz, meter_key_day(sb.tz, now()))) AS f," \
	"  COALESCE($6::timestamptz, meter_day_start(sb.tz, meter_key_day(sb.tz, now()) + 1))" \
	"   AS t," \
	"  date_trunc('month', now() AT TIME ZONE sb.tz) AT TIME ZONE sb.tz AS mf," \
	"  (date_trunc('month', now() AT TIME ZONE sb.tz) + interval '1 month')" \
	"   AT TIME ZONE sb.tz AS mt" \
	" FROM sb" \
	"), a AS (" \
	" SELECT rng.*, agg.* FROM rng CROSS JOIN LATERAL (" \
	"  SELECT " DB_USAGE_SUMS(" FILTER (WHERE x.lo >= rng.f AND x.lo < rng.t)") "," \
	"   COALESCE(sum(x.cpu_micros) FILTER (WHERE x.lo >= rng.mf AND x.lo < rng.mt), 0)" \
	"    ::bigint AS m_cpu," \
	"   COALESCE(sum(x.memory_micros) FILTER (WHERE x.lo >= rng.mf AND x.lo < rng.mt), 0)" \
	"    ::bigint AS m_mem," \
	"   COALESCE(sum(x.storage_micros) FILTER (WHERE x.lo >= rng.mf AND x.lo < rng.mt), 0)" \
	"    ::bigint AS m_sto," \
	"   COALESCE(sum(x.total_micros) FILTER (WHERE x.lo >= rng.mf AND x.lo < rng.mt), 0)" \
	"    ::bigint AS m_total" \
	"  FROM (SELECT u.*, meter_row_start(rng.tz, u.hour, u.day) AS lo" \
	"   FROM usage_hourly u WHERE u.account_id = rng.account_id" \
	"   AND u.sandbox_id = rng.sandbox_id" \
	"   AND u.hour > LEAST(rng.f, rng.mf) - interval '1 hour'" \
	"   AND u.hour < GREATEST(rng.t, rng.mt)) x" \
	" ) agg" \
	")" \
	" SELECT a.account_id, a.sandbox_id, a.key_id, a.state, a.vcpus, a.memory_mib," \
	"  a.storage_mib, a.max_cost_micros, " DB_USEC("a.created_at") "," \
	"  " DB_USEC("a.state_since") ", " DB_USEC("a.lease_ends_at") ", a.tz," \
	"  " DB_USEC("a.f") ", " DB_USEC("a.t") ", " DB_USEC("a.mf") ", " DB_USEC("a.mt") "," \
	"  a.m_cpu, a.m_mem, a.m_sto, a.m_total, " DB_USAGE_NAMES("a.") " FROM a"
/* clang-format on */

#define SANDBOX_SUMS_COL 20 /* the first of DB_USAGE_NAMES in the select list */

static const char sql_list_id[] = SANDBOX_BASE " WHERE ($8::text IS NULL OR a.sandbox_id > $8)"
					       " ORDER BY a.sandbox_id LIMIT $7::integer";
static const char sql_list_created[] =
    SANDBOX_BASE " WHERE ($8::text IS NULL OR (a.created_at, a.sandbox_id) < ($9::timestamptz, $8))"
		 " ORDER BY a.created_at DESC, a.sandbox_id DESC LIMIT $7::integer";
static const char sql_list_cost[] =
    SANDBOX_BASE " WHERE ($8::text IS NULL OR (a.c_total, a.sandbox_id) < ($9::bigint, $8))"
		 " ORDER BY a.c_total DESC, a.sandbox_id DESC LIMIT $7::integer";

/* Reads one row of a list query into *out. */
static enum meter_rc sandbox_row(const PGresult *res, int row, struct db_sandbox *out)
{
	bool is_null;
	enum meter_rc rc;
	int64_t *ints[] = {&out->vcpus, &out->memory_mib, &out->storage_mib};

	memset(out, 0, sizeof(*out));
	db_util_str(res, row, 0, out->account_id, sizeof(out->account_id));
	db_util_str(res, row, 1, out->sandbox_id, sizeof(out->sandbox_id));
	db_util_str(res, row, 2, out->key_id, sizeof(out->key_id));
	db_util_str(res, row, 3, out->state, sizeof(out->state));
	for (int i = 0; i < 3; i++) {
		rc = db_util_i64(res, row, 4 + i, ints[i], NULL);
		if (rc != METER_OK)
			return rc;
	}
	rc = db_util_i64(res, row, 7, &out->max_cost_micros, &is_null);
	out->has_max_cost = !is_null;
	if (rc == METER_OK)
		rc = db_util_i64(res, row, 8, &out->created_at_usec, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, row, 9, &out->state_since_usec, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, row, 10, &out->lease_ends_at_usec, &is_null);
	if (rc != METER_OK)
		return rc;
	if (is_null)
		out->lease_ends_at_usec = INT64_MIN;
	db_util_str(res, row, 11, out->time_zone, sizeof(out->time_zone));
	rc = db_util_i64(res, row, 12, &out->from_usec, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, row, 13, &out->to_usec, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, row, 14, &out->month_from_usec, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, row, 15, &out->month_to_usec, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, row, 16, &out->month.cpu_micros, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, row, 17, &out->month.memory_micros, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, row, 18, &out->month.storage_micros, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, row, 19, &out->month.total_micros, NULL);
	if (rc == METER_OK)
		rc = db_usage_read(res, row, SANDBOX_SUMS_COL, &out->usage);
	return rc;
}

/* Runs the list query of q; *res on METER_OK. */
static enum meter_rc sandbox_query(PGconn *conn, const struct db_sandbox_query *q, PGresult **res)
{
	char from[40], to[40], lim[24], cur[40];
	const char *params[9] = {q->account_id, q->sandbox_id, q->state, q->key_id};
	const char *sql = sql_list_id;
	int n = 8;

	if (q->has_range) {
		db_util_time_param(q->from_usec, from, sizeof(from));
		db_util_time_param(q->to_usec, to, sizeof(to));
		params[4] = from;
		params[5] = to;
	}
	db_util_i64_param(q->limit, lim, sizeof(lim));
	params[6] = lim;
	params[7] = q->has_cursor ? q->cursor_id : NULL;
	if (q->sort != DB_SORT_ID) {
		sql = q->sort == DB_SORT_CREATED ? sql_list_created : sql_list_cost;
		n = 9;
		if (q->sort == DB_SORT_CREATED)
			db_util_time_param(q->cursor_value, cur, sizeof(cur));
		else
			db_util_i64_param(q->cursor_value, cur, sizeof(cur));
		params[8] = q->has_cursor ? cur : NULL;
	}
	return db_util_exec(conn, "sandboxes", sql, n, params, res, NULL);
}

enum meter_rc db_sandbox_list(PGconn *conn, const struct db_sandbox_query *q,
			      struct db_sandbox **out, size_t *n)
{
	PGresult *res = NULL;
	struct db_sandbox *v = NULL;
	enum meter_rc rc;
	int rows;

	*out = NULL;
	*n = 0;
	rc = sandbox_query(conn, q, &res);
	if (rc != METER_OK)
		return rc;
	rows = PQntuples(res);
	if (rows > 0) {
		v = calloc((size_t)rows, sizeof(*v));
		if (!v) {
			rc = METER_ENOMEM;
			goto out;
		}
	}
	for (int i = 0; i < rows && rc == METER_OK; i++)
		rc = sandbox_row(res, i, &v[i]);
	if (rc != METER_OK) {
		free(v);
		goto out;
	}
	*out = v;
	*n = (size_t)rows;
out:
	PQclear(res);
	return rc;
}

enum meter_rc db_sandbox_get(PGconn *conn, const struct db_sandbox_query *q, struct db_sandbox *out)
{
	struct db_sandbox_query one = *q;
	struct db_sandbox *v = NULL;
	size_t n = 0;
	enum meter_rc rc;

	one.sort = DB_SORT_ID;
	one.has_cursor = false;
	one.limit = 1;
	rc = db_sandbox_list(conn, &one, &v, &n);
	if (rc == METER_OK) {
		if (n == 1)
			*out = v[0];
		else
			rc = METER_ENOTFOUND;
	}
	free(v);
	return rc;
}

enum meter_rc db_sandbox_cpu_split(PGconn *conn, const struct db_sandbox *sb, int64_t *used_micros,
				   int64_t *topup_micros, int64_t *topup_millicore_seconds)
{
	char from[40], to[40];
	const char *params[] = {sb->account_id, sb->sandbox_id, sb->time_zone, from, to};
	PGresult *res = NULL;
	int64_t used, cpu;
	enum meter_rc rc;

	db_util_time_param(sb->from_usec, from, sizeof(from));
	db_util_time_param(sb->to_usec, to, sizeof(to));
	rc = db_util_exec(
	    conn, "sandbox cpu split",
	    "WITH x AS (SELECT u.* FROM usage_hourly u"
	    " WHERE u.account_id = $1 AND u.sandbox_id = $2"
	    "  AND u.hour > $4::timestamptz - interval '1 hour' AND u.hour < $5::timestamptz"
	    "  AND meter_row_start($3, u.hour, u.day) >= $4::timestamptz"
	    "  AND meter_row_start($3, u.hour, u.day) < $5::timestamptz)"
	    " SELECT COALESCE((SELECT sum(v.used) FROM (SELECT div(sum(x.cpu_used_mcus)"
	    "   * p.cpu_micros_per_vcpu_hour, 3600000000000) AS used"
	    "   FROM x JOIN price_book p ON p.version = x.price_version"
	    "   GROUP BY p.version, p.cpu_micros_per_vcpu_hour) v), 0)::bigint,"
	    " (SELECT COALESCE(sum(x.cpu_micros), 0) FROM x)::bigint,"
	    " (SELECT div(COALESCE(sum(x.cpu_billed_mcus - x.cpu_used_mcus), 0), 1000000)"
	    "  FROM x)::bigint",
	    5, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	rc = db_util_i64(res, 0, 0, &used, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, 0, 1, &cpu, NULL);
	if (rc == METER_OK)
		rc = db_util_i64(res, 0, 2, topup_millicore_seconds, NULL);
	if (rc == METER_OK) {
		*used_micros = used < cpu ? used : cpu;
		*topup_micros = cpu - *used_micros;
	}
	PQclear(res);
	return rc;
}
