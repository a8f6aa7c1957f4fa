/* meter: the dashboard's queries (see db_dashboard.h). */
#include "db_dashboard.h"

#include <string.h>

#include "db_util.h"
#include "money.h"

enum meter_rc db_dash_hourly_spend(PGconn *conn, const char *account_id, int64_t from_usec,
				   int n_hours, int64_t *out)
{
	char from[40], to[40];
	const char *params[3] = {account_id, from, to};
	PGresult *res = NULL;
	enum meter_rc rc;

	if (n_hours < 1 || n_hours > DB_DASH_HOURS_MAX)
		return METER_EINVAL;
	memset(out, 0, sizeof(*out) * (size_t)n_hours);
	db_util_time_param(from_usec, from, sizeof(from));
	db_util_time_param(from_usec + n_hours * MONEY_USEC_PER_HOUR, to, sizeof(to));
	rc = db_util_exec(
	    conn, "dashboard hourly spend",
	    "SELECT (" DB_USEC("hour") " - " DB_USEC(
		"$2::timestamptz") ")"
				   " / 3600000000, total_micros FROM usage_account_hourly"
				   " WHERE account_id = $1 AND hour >= $2 AND hour < $3",
	    3, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	for (int r = 0; r < PQntuples(res); r++) {
		int64_t i, v;
		if (db_util_i64(res, r, 0, &i, NULL) != METER_OK ||
		    db_util_i64(res, r, 1, &v, NULL) != METER_OK || i < 0 || i >= n_hours) {
			rc = METER_EDB;
			break;
		}
		out[i] = v;
	}
	PQclear(res);
	return rc;
}

/* A sandbox's rollup (sql/0006_dashboard.sql) is today's while its day
 * has not ended (day_ends_at, sql/0007_dashboard_day_end.sql): no page needs
 * the sandbox's key to tell. */
enum meter_rc db_dash_top_sandboxes(PGconn *conn, const char *account_id, struct db_dash_top *out,
				    size_t max, size_t *n)
{
	char lim[24];
	const char *params[2] = {account_id, lim};
	PGresult *res = NULL;
	enum meter_rc rc;

	*n = 0;
	db_util_i64_param((int64_t)max, lim, sizeof(lim));
	rc = db_util_exec(conn, "dashboard top sandboxes",
			  "SELECT s.sandbox_id, COALESCE(s.key_id, ''), s.state, t.total FROM"
			  " (SELECT m.sandbox_id, m.day_total_micros AS total FROM sandbox_meter m"
			  " WHERE m.account_id = $1 AND m.day_total_micros > 0"
			  " AND now() < m.day_ends_at ORDER BY total DESC, m.sandbox_id LIMIT $2) t"
			  " JOIN sandboxes s ON s.account_id = $1 AND s.sandbox_id = t.sandbox_id"
			  " ORDER BY t.total DESC, s.sandbox_id",
			  2, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	for (int r = 0; r < PQntuples(res) && (size_t)r < max; r++) {
		struct db_dash_top *t = &out[r];
		db_util_str(res, r, 0, t->sandbox_id, sizeof(t->sandbox_id));
		db_util_str(res, r, 1, t->key_id, sizeof(t->key_id));
		db_util_str(res, r, 2, t->state, sizeof(t->state));
		if (db_util_i64(res, r, 3, &t->total_micros, NULL) != METER_OK) {
			rc = METER_EDB;
			break;
		}
		(*n)++;
	}
	PQclear(res);
	return rc;
}

enum meter_rc db_dash_sandbox_series(PGconn *conn, const char *account_id, const char *sandbox_id,
				     int64_t from_usec, int n_hours, struct db_dash_point *out)
{
	char from[40], to[40];
	const char *params[4] = {account_id, sandbox_id, from, to};
	PGresult *res = NULL;
	enum meter_rc rc;

	if (n_hours < 1 || n_hours > DB_DASH_HOURS_MAX)
		return METER_EINVAL;
	memset(out, 0, sizeof(*out) * (size_t)n_hours);
	db_util_time_param(from_usec, from, sizeof(from));
	db_util_time_param(from_usec + n_hours * MONEY_USEC_PER_HOUR, to, sizeof(to));
	/* millicore-µs / running µs = average millicores while running. */
	rc = db_util_exec(conn, "dashboard sandbox series",
			  "SELECT (" DB_USEC("hour") " - " DB_USEC(
			      "$3::timestamptz") ")"
						 " / 3600000000,"
						 " COALESCE(div(sum(cpu_used_mcus), "
						 "NULLIF(sum(running_usec), 0)), 0),"
						 " COALESCE(div(sum(cpu_billed_mcus), "
						 "NULLIF(sum(running_usec), 0)), 0),"
						 " sum(total_micros)::bigint FROM usage_hourly"
						 " WHERE account_id = $1 AND sandbox_id = $2 AND "
						 "hour >= $3 AND hour < $4"
						 " GROUP BY hour",
			  4, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	for (int r = 0; r < PQntuples(res); r++) {
		int64_t i;
		struct db_dash_point p;
		if (db_util_i64(res, r, 0, &i, NULL) != METER_OK || i < 0 || i >= n_hours ||
		    db_util_i64(res, r, 1, &p.used_millicores, NULL) != METER_OK ||
		    db_util_i64(res, r, 2, &p.billed_millicores, NULL) != METER_OK ||
		    db_util_i64(res, r, 3, &p.total_micros, NULL) != METER_OK) {
			rc = METER_EDB;
			break;
		}
		out[i] = p;
	}
	PQclear(res);
	return rc;
}

enum meter_rc db_dash_floor(PGconn *conn, int64_t at_usec, int64_t *floor_millicores)
{
	char at[40];
	const char *params[1] = {at};
	PGresult *res = NULL;
	enum meter_rc rc;

	db_util_time_param(at_usec, at, sizeof(at));
	rc = db_util_exec(conn, "dashboard floor",
			  "SELECT floor_millicores FROM price_book WHERE effective_from <= $1"
			  " ORDER BY effective_from DESC LIMIT 1",
			  1, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	if (PQntuples(res) != 1)
		rc = METER_ENOTFOUND;
	else if (db_util_i64(res, 0, 0, floor_millicores, NULL) != METER_OK)
		rc = METER_EDB;
	PQclear(res);
	return rc;
}

enum meter_rc db_dash_breakdown(PGconn *conn, const char *account_id, const char *sandbox_id,
				int64_t from_usec, int64_t to_usec, struct db_dash_breakdown *out)
{
	char from[40], to[40];
	const char *params[4] = {account_id, sandbox_id, from, to};
	PGresult *res = NULL;
	int64_t *f[7] = {&out->running_seconds,	 &out->paused_seconds, &out->cpu_used_micros,
			 &out->cpu_floor_micros, &out->memory_micros,  &out->storage_micros,
			 &out->total_micros};
	enum meter_rc rc;

	memset(out, 0, sizeof(*out));
	db_util_time_param(from_usec, from, sizeof(from));
	db_util_time_param(to_usec, to, sizeof(to));
	rc = db_util_exec(
	    conn, "dashboard breakdown",
	    "WITH u AS (SELECT * FROM usage_hourly"
	    " WHERE account_id = $1 AND sandbox_id = $2 AND hour >= $3 AND hour < $4)"
	    " SELECT div(COALESCE(r, 0), 1000000)::bigint,"
	    " div(COALESCE(p, 0), 1000000)::bigint, LEAST(used, cpu)::bigint,"
	    " (cpu - LEAST(used, cpu))::bigint,"
	    " mem::bigint, sto::bigint, tot::bigint FROM (SELECT sum(running_usec) AS r,"
	    " sum(paused_usec) AS p, COALESCE(sum(cpu_micros), 0) AS cpu,"
	    " " DB_CPU_USED("u") " AS used,"
				 " COALESCE(sum(memory_micros), 0) AS mem,"
				 " COALESCE(sum(storage_micros), 0) AS sto,"
				 " COALESCE(sum(total_micros), 0) AS tot FROM u) x",
	    4, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	for (int i = 0; i < 7 && PQntuples(res) == 1; i++)
		if (db_util_i64(res, 0, i, f[i], NULL) != METER_OK)
			rc = METER_EDB;
	PQclear(res);
	return rc;
}

enum meter_rc db_dash_events(PGconn *conn, const char *account_id, const char *sandbox_id,
			     int64_t from_usec, int64_t to_usec, struct db_dash_event *out,
			     size_t max, size_t *n)
{
	char from[40], to[40], lim[24];
	const char *params[5] = {account_id, sandbox_id, from, to, lim};
	PGresult *res = NULL;
	enum meter_rc rc;

	*n = 0;
	db_util_time_param(from_usec, from, sizeof(from));
	db_util_time_param(to_usec, to, sizeof(to));
	db_util_i64_param((int64_t)max, lim, sizeof(lim));
	rc = db_util_exec(
	    conn, "dashboard events",
	    "SELECT type, " DB_USEC(
		"at") " FROM lifecycle_events"
		      " WHERE account_id = $1 AND sandbox_id = $2 AND at >= $3 AND at < $4"
		      " ORDER BY at, event_id LIMIT $5",
	    5, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	for (int r = 0; r < PQntuples(res) && (size_t)r < max; r++) {
		db_util_str(res, r, 0, out[r].type, sizeof(out[r].type));
		if (db_util_i64(res, r, 1, &out[r].at_usec, NULL) != METER_OK) {
			rc = METER_EDB;
			break;
		}
		(*n)++;
	}
	PQclear(res);
	return rc;
}

/* The sandboxes list. The page is picked first from the narrowest rows that
 * can order it (the sort key and id; for the id order no meter row at all,
 * so an index serves it), and only its rows are joined for their figures;
 * the total is counted apart, over the sandboxes alone. Unfiltered, a cost
 * order ranks the account's meter rows alone (their day_ends_at tells
 * today without the sandbox's key), adding the sandboxes never metered only
 * when there are any (counted, not joined; the count of all is the total). */
#define DASH_COST_TODAY "CASE WHEN now() < m.day_ends_at THEN m.day_total_micros ELSE 0 END"
#define DASH_COST_MONTH                                                                            \
	"CASE WHEN m.month = ($4::timestamptz AT TIME ZONE 'UTC')::date"                           \
	" THEN m.month_total_micros ELSE 0 END"
#define DASH_FILTER                                                                                \
	" WHERE s.account_id = $1 AND ($2 = '' OR s.state = $2)"                                   \
	" AND ($3 = '' OR s.key_id = $3) AND ($6 = '' OR s.sandbox_id = $6)"
#define DASH_RANK_FILTERED(cost)                                                                   \
	"SELECT s.sandbox_id, " cost " AS sk FROM sandboxes s LEFT JOIN sandbox_meter m"           \
	" ON m.account_id = $1 AND m.sandbox_id = s.sandbox_id" DASH_FILTER                        \
	" ORDER BY sk DESC, s.sandbox_id"
#define DASH_RANK_ALL(cost)                                                                        \
	"SELECT u.sandbox_id, u.sk FROM (SELECT m.sandbox_id, " cost " AS sk"                      \
	" FROM sandbox_meter m WHERE m.account_id = $1"                                            \
	" UNION ALL SELECT s.sandbox_id, 0 FROM sandboxes s WHERE s.account_id = $1"               \
	" AND (SELECT c.total FROM c)"                                                             \
	" <> (SELECT count(*) FROM sandbox_meter x WHERE x.account_id = $1)"                       \
	" AND NOT EXISTS (SELECT 1 FROM sandbox_meter m WHERE m.account_id = $1"                   \
	" AND m.sandbox_id = s.sandbox_id)) u ORDER BY u.sk DESC, u.sandbox_id"

enum meter_rc db_dash_sandboxes(PGconn *conn, const char *account_id, const char *state,
				const char *key_id, const char *sandbox_id, enum db_dash_sort sort,
				int64_t offset, int64_t month_start_usec,
				struct db_dash_sandbox *out, size_t *n, int64_t *total)
{
	static const char *const rank_filtered[] = {
	    [DB_DASH_SORT_COST_TODAY] = DASH_RANK_FILTERED(DASH_COST_TODAY),
	    [DB_DASH_SORT_COST_MONTH] = DASH_RANK_FILTERED(DASH_COST_MONTH),
	    [DB_DASH_SORT_ID] = "SELECT s.sandbox_id, 0::bigint AS sk FROM sandboxes s" DASH_FILTER
				" ORDER BY s.sandbox_id",
	};
	/* Unfiltered cost orders: the meter rows alone (the id order is the
	 * same either way). */
	static const char *const rank_all[] = {
	    [DB_DASH_SORT_COST_TODAY] = DASH_RANK_ALL(DASH_COST_TODAY),
	    [DB_DASH_SORT_COST_MONTH] = DASH_RANK_ALL(DASH_COST_MONTH),
	};
	bool all = !*state && !*key_id && !*sandbox_id && sort != DB_DASH_SORT_ID;
	char from[40], off[24], sql[4096];
	const char *params[6] = {account_id, state, key_id, from, off, sandbox_id};
	PGresult *res = NULL;
	enum meter_rc rc;

	*n = 0;
	*total = 0;
	db_util_time_param(month_start_usec, from, sizeof(from));
	db_util_i64_param(offset, off, sizeof(off));
	/* One row with the total and no sandbox when the page is past the end. */
	snprintf(sql, sizeof(sql),
		 "WITH c AS MATERIALIZED (SELECT count(*) AS total FROM sandboxes s" DASH_FILTER
		 "),"
		 " pg AS MATERIALIZED (%s LIMIT %d OFFSET $5)"
		 " SELECT c.total, x.sandbox_id, x.key_id, x.state, x.vcpus, x.memory_mib, x.used,"
		 " x.billed, x.cost_today, x.cost_month"
		 " FROM c"
		 " LEFT JOIN LATERAL (SELECT s.sandbox_id, COALESCE(s.key_id, '') AS key_id,"
		 " s.state::text AS state, s.vcpus, s.memory_mib,"
		 " CASE WHEN t.today THEN COALESCE(div(m.day_cpu_used_mcus,"
		 " NULLIF(m.day_running_usec, 0)), 0) ELSE 0 END::bigint AS used,"
		 " CASE WHEN t.today THEN COALESCE(div(m.day_cpu_billed_mcus,"
		 " NULLIF(m.day_running_usec, 0)), 0) ELSE 0 END::bigint AS billed,"
		 " (" DASH_COST_TODAY ")::bigint AS cost_today,"
		 " (" DASH_COST_MONTH ")::bigint AS cost_month, pg.sk"
		 /* A look-up per row of the page (OFFSET 0 keeps the planner
		  * from hashing all of the account's sandboxes instead). */
		 " FROM pg CROSS JOIN LATERAL (SELECT * FROM sandboxes s1 WHERE s1.account_id = $1"
		 " AND s1.sandbox_id = pg.sandbox_id OFFSET 0) s"
		 " LEFT JOIN sandbox_meter m ON m.account_id = s.account_id"
		 " AND m.sandbox_id = s.sandbox_id"
		 " CROSS JOIN LATERAL (SELECT COALESCE(now() < m.day_ends_at, false) AS today) t) x"
		 " ON true ORDER BY x.sk DESC, x.sandbox_id",
		 (all ? rank_all : rank_filtered)[sort], DB_DASH_PAGE);
	rc = db_util_exec(conn, "dashboard sandboxes", sql, 6, params, &res, NULL);
	if (rc != METER_OK)
		return rc;
	if (PQntuples(res) < 1 || db_util_i64(res, 0, 0, total, NULL) != METER_OK) {
		PQclear(res);
		return METER_EDB;
	}
	for (int r = 0; r < PQntuples(res) && r < DB_DASH_PAGE; r++) {
		struct db_dash_sandbox *d = &out[*n];
		if (PQgetisnull(res, r, 1))
			continue;
		db_util_str(res, r, 1, d->sandbox_id, sizeof(d->sandbox_id));
		db_util_str(res, r, 2, d->key_id, sizeof(d->key_id));
		db_util_str(res, r, 3, d->state, sizeof(d->state));
		if (db_util_i64(res, r, 4, &d->vcpus, NULL) != METER_OK ||
		    db_util_i64(res, r, 5, &d->memory_mib, NULL) != METER_OK ||
		    db_util_i64(res, r, 6, &d->used_millicores_today, NULL) != METER_OK ||
		    db_util_i64(res, r, 7, &d->billed_millicores_today, NULL) != METER_OK ||
		    db_util_i64(res, r, 8, &d->cost_today_micros, NULL) != METER_OK ||
		    db_util_i64(res, r, 9, &d->cost_month_micros, NULL) != METER_OK) {
			rc = METER_EDB;
			break;
		}
		(*n)++;
	}
	PQclear(res);
	return rc;
}
