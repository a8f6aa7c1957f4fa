/* meter: helpers of the db_* query files (see db_util.h). */
#include "db_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "parse.h"

static _Thread_local char failed_state[6];

const char *db_util_failed_state(void)
{
	return failed_state;
}

void db_util_failed_clear(void)
{
	failed_state[0] = '\0';
}

void db_util_failed_note(const PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (state && strlen(state) == 5)
		memcpy(failed_state, state, 6);
	else
		failed_state[0] = '\0';
}

enum meter_rc db_util_exec(PGconn *conn, const char *what, const char *sql, int n,
			   const char *const *params, PGresult **res, char *sqlstate)
{
	PGresult *r = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(r);
	const char *state;

	if (res)
		*res = NULL;
	if (sqlstate)
		sqlstate[0] = '\0';
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
		if (res)
			*res = r;
		else
			PQclear(r);
		return METER_OK;
	}
	state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	if (sqlstate && state && strlen(state) == 5)
		memcpy(sqlstate, state, 6);
	db_util_failed_note(r);
	/* A constraint refusing a value is the caller's to judge; a data
	 * error usually comes from the client's input; the rest is news. */
	if (!state || strncmp(state, "23", 2) != 0)
		log_msg(state && strncmp(state, "22", 2) == 0 ? LOG_INFO : LOG_WARN, "db %s: %s %s",
			what, state ? state : "-",
			r && PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY)
			    ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY)
			    : PQerrorMessage(conn));
	PQclear(r);
	return METER_EDB;
}

enum meter_rc db_util_exists(PGconn *conn, const char *what, const char *sql, int n,
			     const char *const *params)
{
	PGresult *res = NULL;
	enum meter_rc rc = db_util_exec(conn, what, sql, n, params, &res, NULL);

	if (rc != METER_OK)
		return rc;
	rc = PQntuples(res) > 0 ? METER_OK : METER_ENOTFOUND;
	PQclear(res);
	return rc;
}

enum meter_rc db_util_i64(const PGresult *res, int row, int col, int64_t *out, bool *is_null)
{
	if (PQgetisnull(res, row, col)) {
		if (!is_null)
			return METER_EINVAL;
		*is_null = true;
		*out = 0;
		return METER_OK;
	}
	if (is_null)
		*is_null = false;
	if (parse_int64(PQgetvalue(res, row, col), INT64_MIN, INT64_MAX, out) != METER_OK)
		return METER_ERANGE;
	return METER_OK;
}

void db_util_str(const PGresult *res, int row, int col, char *out, size_t len)
{
	if (len == 0)
		return;
	if (PQgetisnull(res, row, col))
		out[0] = '\0';
	else
		snprintf(out, len, "%s", PQgetvalue(res, row, col));
}

bool db_util_bool(const PGresult *res, int row, int col)
{
	return !PQgetisnull(res, row, col) && strcmp(PQgetvalue(res, row, col), "t") == 0;
}

enum meter_rc db_util_begin(PGconn *conn)
{
	return db_util_exec(conn, "begin", "BEGIN", 0, NULL, NULL, NULL);
}

enum meter_rc db_util_commit(PGconn *conn)
{
	return db_util_exec(conn, "commit", "COMMIT", 0, NULL, NULL, NULL);
}

void db_util_rollback(PGconn *conn)
{
	PGresult *r = PQexec(conn, "ROLLBACK");

	PQclear(r);
}

void db_util_time_param(int64_t usec, char *buf, size_t len)
{
	time_t secs = (time_t)(usec / 1000000);
	int64_t frac = usec % 1000000;
	struct tm tm;

	if (frac < 0) {
		frac += 1000000;
		secs -= 1;
	}
	gmtime_r(&secs, &tm);
	snprintf(buf, len, "%04d-%02d-%02d %02d:%02d:%02d.%06" PRId64 "+00", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

void db_util_i64_param(int64_t v, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRId64, v);
}
