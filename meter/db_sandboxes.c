/* meter: sandboxes with usage and cost (see db_sandboxes.h). */
#include "db_sandboxes.h"

#include <stdlib.h>
#include <string.h>

#include "db_util.h"

/* $1 account, $2 sandbox, $3 state, $4 key, $5 from, $6 to (all may be
 * NULL), $7 limit, then the cursor: $8 id, $9 sort value. Each sandbox's
 * range and month are in its key's time zone.
 *
 * A list query first picks its page (at most $7 sandboxes: an index walk
 * for the id and created orders, a ranking of every matching sandbox by its
 * range's total for the cost order), and only then sums the usage of the
 * page's sandboxes. What keeps the sums cheap:
 * - the bounds of a range and of a month are computed once per time zone
 *   (SANDBOX_ZONES), not per sandbox or per usage row;
 * - a usage row belongs to a period [F, T) when the instant it begins,
 *   meter_row_start(tz, hour, day) (0004_keys.sql), is in it. That instant
 *   is the row's hour, or the start of its day, ds = meter_day_start(tz,
 *   day), when that falls inside the hour: always within [hour, hour + 1
 *   hour). So a row whose hour lies inside [F, T) or wholly outside it is
 *   decided by its hour alone; for a row whose hour straddles F (or T), the
 *   instant is >= F (or < T) exactly when ds is (SANDBOX_IN). The same rows
 *   as comparing meter_row_start itself, with ds worked out for a
 *   straddling row only: before, every row paid dozens of calls of that
 *   function, which the planner did not inline until sql/0043 (some 50 µs
 *   a call), and a list sorted by cost or creation over 10,000 sandboxes
 *   ran into the statement timeout. */
/* clang-format off */
#define SANDBOX_IN(F, T) \
	"CASE WHEN u.hour >= " F " AND u.hour + interval '1 hour' <= " T " THEN true" \
	" WHEN u.hour + interval '1 hour' <= " F " OR u.hour >= " T " THEN false" \
	" ELSE (u.hour >= " F " OR meter_day_start(z.tz, u.day) >= " F ")" \
	"  AND (u.hour + interval '1 hour' <= " T " OR meter_day_start(z.tz, u.day) < " T ") END"

/* Matching sandboxes with the time zone of their key, as "s" and "tz". */
#define SANDBOX_MATCH \
	" FROM sandboxes s LEFT JOIN api_keys k" \
	"  ON k.account_id = s.account_id AND k.key_id = s.key_id" \
	" WHERE ($1::text IS NULL OR s.account_id = $1)" \
	"  AND ($2::text IS NULL OR s.sandbox_id = $2)" \
	"  AND ($3::text IS NULL OR s.state = $3)" \
	"  AND ($4::text IS NULL OR s.key_id = $4)"
#define SANDBOX_TZ "COALESCE(k.time_zone, 'UTC')::text AS tz"

/* Per time zone tz of the rows of SRC: the range [f, t) (from and to, or the
 * key's current day) and the current calendar month [mf, mt). */
#define SANDBOX_ZONES(SRC) \
	" SELECT z.tz," \
	"  COALESCE($5::timestamptz, meter_day_start(z.tz, meter_key_day(z.tz, now()))) AS f," \
	"  COALESCE($6::timestamptz, meter_day_start(z.tz, meter_key_day(z.tz, now()) + 1))" \
	"   AS t," \
	"  meter_day_start(z.tz, date_trunc('month', now() AT TIME ZONE z.tz)::date) AS mf," \
	"  meter_day_start(z.tz," \
	"   (date_trunc('month', now() AT TIME ZONE z.tz) + interval '1 month')::date) AS mt" \
	" FROM (SELECT DISTINCT tz FROM " SRC ") z"

/* The rest of a list query after its CTE "page" (the page's sandboxes: s.*
 * and tz): their range's usage and cost and their month's cost, in ORDER.
 * OFFSET 0 keeps each usage row's two memberships computed once, not once
 * per aggregate. */
#define SANDBOX_PAGE(ORDER) \
	", zones AS MATERIALIZED (" SANDBOX_ZONES("page") ")," \
	" a AS (" \
	" SELECT page.*, z.f, z.t, z.mf, z.mt, agg.* FROM page JOIN zones z ON z.tz = page.tz" \
	" CROSS JOIN LATERAL (" \
	"  SELECT " DB_USAGE_SUMS(" FILTER (WHERE x.in_range)") "," \
	"   COALESCE(sum(x.cpu_micros) FILTER (WHERE x.in_month), 0)::bigint AS m_cpu," \
	"   COALESCE(sum(x.memory_micros) FILTER (WHERE x.in_month), 0)::bigint AS m_mem," \
	"   COALESCE(sum(x.storage_micros) FILTER (WHERE x.in_month), 0)::bigint AS m_sto," \
	"   COALESCE(sum(x.total_micros) FILTER (WHERE x.in_month), 0)::bigint AS m_total" \
	"  FROM (SELECT u.*, " SANDBOX_IN("z.f", "z.t") " AS in_range," \
	"    " SANDBOX_IN("z.mf", "z.mt") " AS in_month" \
	"   FROM usage_hourly u WHERE u.account_id = page.account_id" \
	"   AND u.sandbox_id = page.sandbox_id" \
	"   AND u.hour > LEAST(z.f, z.mf) - interval '1 hour'" \
	"   AND u.hour < GREATEST(z.t, z.mt) OFFSET 0) x" \
	" ) agg" \
	")" \
	" SELECT a.account_id, a.sandbox_id, a.key_id, a.state, a.vcpus, a.memory_mib," \
	"  a.storage_mib, a.max_cost_micros, " DB_USEC("a.created_at") "," \
	"  " DB_USEC("a.state_since") ", " DB_USEC("a.lease_ends_at") ", a.tz," \
	"  " DB_USEC("a.f") ", " DB_USEC("a.t") ", " DB_USEC("a.mf") ", " DB_USEC("a.mt") "," \
	"  a.m_cpu, a.m_mem, a.m_sto, a.m_total, " DB_USAGE_NAMES("a.") " FROM a" \
	" ORDER BY " ORDER

static const char sql_list_id[] =
	"WITH page AS MATERIALIZED (SELECT s.*, " SANDBOX_TZ SANDBOX_MATCH
	"  AND ($8::text IS NULL OR s.sandbox_id > $8)"
	" ORDER BY s.sandbox_id LIMIT $7::integer)"
	SANDBOX_PAGE("a.sandbox_id");
static const char sql_list_created[] =
	"WITH page AS MATERIALIZED (SELECT s.*, " SANDBOX_TZ SANDBOX_MATCH
	"  AND ($8::text IS NULL OR (s.created_at, s.sandbox_id) < ($9::timestamptz, $8))"
	" ORDER BY s.created_at DESC, s.sandbox_id DESC LIMIT $7::integer)"
	SANDBOX_PAGE("a.created_at DESC, a.sandbox_id DESC");
/* The cost order ranks every matching sandbox by its range's total alone
 * (the sum of total_micros SANDBOX_PAGE gives as c_total), read per sandbox
 * from the primary key of usage_hourly over the range's hours only: about
 * 30 µs a sandbox, so 0.2 to 0.7 s for 10,000. One grouped pass over the
 * account's rows of the range (hash-joined to the sandboxes) was as fast
 * when the planner chose well, but its estimates over the CTEs were poor
 * and some runs took minutes; for the operator's list of every account it
 * had no index to read the range by. */
static const char sql_list_cost[] =
	"WITH sb AS MATERIALIZED (SELECT s.account_id, s.sandbox_id, " SANDBOX_TZ SANDBOX_MATCH "),"
	" rz AS MATERIALIZED (" SANDBOX_ZONES("sb") "),"
	" ranked AS (SELECT sb.account_id, sb.sandbox_id, sb.tz,"
	"  (SELECT COALESCE(sum(u.total_micros), 0) FROM usage_hourly u"
	"   WHERE u.account_id = sb.account_id AND u.sandbox_id = sb.sandbox_id"
	"   AND u.hour > z.f - interval '1 hour' AND u.hour < z.t"
	"   AND " SANDBOX_IN("z.f", "z.t") ")::bigint AS rank_total"
	" FROM sb JOIN rz z ON z.tz = sb.tz),"
	" top AS (SELECT * FROM ranked"
	"  WHERE ($8::text IS NULL OR (ranked.rank_total, ranked.sandbox_id) < ($9::bigint, $8))"
	"  ORDER BY ranked.rank_total DESC, ranked.sandbox_id DESC LIMIT $7::integer),"
	" page AS MATERIALIZED (SELECT s.*, top.tz, top.rank_total FROM top JOIN sandboxes s"
	"  ON s.account_id = top.account_id AND s.sandbox_id = top.sandbox_id)"
	SANDBOX_PAGE("a.rank_total DESC, a.sandbox_id DESC");
/* clang-format on */

#define SANDBOX_SUMS_COL 20 /* the first of DB_USAGE_NAMES in the select list */

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

enum meter_rc db_sandbox_exists(PGconn *conn, const char *account_id, const char *sandbox_id)
{
	const char *params[] = {account_id, sandbox_id};

	return db_util_exists(conn, "sandbox exists",
			      "SELECT 1 FROM sandboxes WHERE ($1::text IS NULL OR account_id = $1)"
			      " AND sandbox_id = $2",
			      2, params);
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

/* One sandbox's CPU money over [$4, $5) in its key's zone $3: the part of
 * it the CPU used, the floor's top-up, and the millicore-seconds of that
 * top-up. */
/* clang-format off */
static const char sql_cpu_split[] =
	"WITH x AS (SELECT u.* FROM usage_hourly u"
	" WHERE u.account_id = $1 AND u.sandbox_id = $2"
	"  AND u.hour > $4::timestamptz - interval '1 hour' AND u.hour < $5::timestamptz"
	"  AND " DB_ROW_START("$3::text") " >= $4::timestamptz"
	"  AND " DB_ROW_START("$3::text") " < $5::timestamptz)"
	" SELECT " DB_CPU_USED("x") "::bigint,"
	" (SELECT COALESCE(sum(x.cpu_micros), 0) FROM x)::bigint,"
	" (SELECT div(COALESCE(sum(x.cpu_billed_mcus - x.cpu_used_mcus), 0), 1000000)"
	"  FROM x)::bigint";
/* clang-format on */

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
	rc = db_util_exec(conn, "sandbox cpu split", sql_cpu_split, 5, params, &res, NULL);
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

/* A sandbox's open holds ($1 account, $2 sandbox; the partial index on
 * open holds), with the count and remaining sum of all of them on every
 * row. */
/* clang-format off */
static const char sql_holds[] =
	"SELECT h.day::text, h.amount_micros, h.consumed_micros,"
	" GREATEST(h.amount_micros - h.consumed_micros, 0),"
	" " DB_USEC("h.lease_starts_at") ", " DB_USEC("h.lease_ends_at") ","
	" " DB_USEC("h.settles_at") ", count(*) OVER (),"
	" sum(GREATEST(h.amount_micros - h.consumed_micros, 0)) OVER ()::bigint"
	" FROM holds h WHERE h.account_id = $1 AND h.sandbox_id = $2 AND h.status = 'open'"
	" ORDER BY h.lease_starts_at, h.day, h.hold_id LIMIT " DB_STR(DB_SANDBOX_HOLDS_MAX);
/* clang-format on */

enum meter_rc db_sandbox_holds(PGconn *conn, const char *account_id, const char *sandbox_id,
			       struct db_sandbox_hold **out, size_t *n, int64_t *total,
			       int64_t *held_micros)
{
	const char *params[] = {account_id, sandbox_id};
	struct db_sandbox_hold *v = NULL;
	PGresult *res = NULL;
	enum meter_rc rc;
	int rows;
	bool null_settles;

	*out = NULL;
	*n = 0;
	*total = 0;
	*held_micros = 0;
	rc = db_util_exec(conn, "sandbox holds", sql_holds, 2, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	rows = PQntuples(res);
	if (rows > 0) {
		v = calloc((size_t)rows, sizeof(*v));
		if (!v)
			rc = METER_ENOMEM;
	}
	for (int i = 0; rc == METER_OK && i < rows; i++) {
		db_util_str(res, i, 0, v[i].day, sizeof(v[i].day));
		rc = db_util_i64(res, i, 1, &v[i].amount_micros, NULL);
		if (rc == METER_OK)
			rc = db_util_i64(res, i, 2, &v[i].consumed_micros, NULL);
		if (rc == METER_OK)
			rc = db_util_i64(res, i, 3, &v[i].remaining_micros, NULL);
		if (rc == METER_OK)
			rc = db_util_i64(res, i, 4, &v[i].lease_starts_at_usec, NULL);
		if (rc == METER_OK)
			rc = db_util_i64(res, i, 5, &v[i].lease_ends_at_usec, NULL);
		if (rc == METER_OK)
			rc = db_util_i64(res, i, 6, &v[i].settles_at_usec, &null_settles);
		if (rc == METER_OK && null_settles)
			v[i].settles_at_usec = INT64_MIN;
		if (rc == METER_OK && i == 0)
			rc = db_util_i64(res, 0, 7, total, NULL);
		if (rc == METER_OK && i == 0)
			rc = db_util_i64(res, 0, 8, held_micros, NULL);
	}
	PQclear(res);
	if (rc != METER_OK) {
		free(v);
		*total = 0;
		*held_micros = 0;
		return rc;
	}
	*out = v;
	*n = (size_t)rows;
	return METER_OK;
}
