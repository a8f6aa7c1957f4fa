/* meter reports: streamed usage exports (see export.h). */
#include "export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "csv.h"
#include "db.h"
#include "db_util.h"
#include "money.h"

#define ROW_MARGIN 2048 /* room kept for one formatted row */

enum { F_PERIOD, F_ACCOUNT, F_KEY, F_SANDBOX, F_USAGE0, F_COST0 = F_USAGE0 + 6, F_COUNT = 14 };

static const char *const columns[F_COUNT] = {
    "period_start",
    "account_id",
    "key_id",
    "sandbox_id",
    "running_seconds",
    "paused_seconds",
    "cpu_used_millicore_seconds",
    "cpu_billed_millicore_seconds",
    "memory_mib_seconds",
    "storage_mib_seconds",
    "cpu_micros",
    "memory_micros",
    "storage_micros",
    "total_micros",
};

struct export_cursor {
	PGconn *conn;
	enum export_format format;
	bool header_done;
	bool finished; /* the COPY ended (well or not) */
	bool failed;
	bool lock_set; /* the connection's lock_timeout is the export's */
	struct export_totals totals;
	char last_period[32];
};

/* Formats UTC µs (a whole second) as an RFC 3339 literal. */
static void format_ts(int64_t usec, char *buf, size_t len)
{
	time_t t = (time_t)(usec / 1000000);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

enum meter_rc export_params_check(const struct export_params *p, char *err, size_t errlen)
{
	if (!parse_is_id(p->account_id)) {
		snprintf(err, errlen,
			 "account_id: must be 1 to 64 characters of A-Z a-z 0-9 _ . -");
		return METER_EINVAL;
	}
	if (p->key_id[0] && !parse_is_id(p->key_id)) {
		snprintf(err, errlen, "key_id: must be 1 to 64 characters of A-Z a-z 0-9 _ . -");
		return METER_EINVAL;
	}
	if (p->sandbox_id[0] && !parse_is_id(p->sandbox_id)) {
		snprintf(err, errlen,
			 "sandbox_id: must be 1 to 64 characters of A-Z a-z 0-9 _ . -");
		return METER_EINVAL;
	}
	if (p->from_usec < 0) {
		snprintf(err, errlen, "from: must be 1970-01-01T00:00:00Z or later");
		return METER_EINVAL;
	}
	if (p->from_usec % MONEY_USEC_PER_HOUR != 0) {
		snprintf(err, errlen, "from: must be a whole hour (UTC)");
		return METER_EINVAL;
	}
	if (p->to_usec % MONEY_USEC_PER_HOUR != 0) {
		snprintf(err, errlen, "to: must be a whole hour (UTC)");
		return METER_EINVAL;
	}
	if (p->to_usec <= p->from_usec) {
		snprintf(err, errlen, "to: must be after from");
		return METER_EINVAL;
	}
	if (p->to_usec - p->from_usec > EXPORT_MAX_RANGE_USEC) {
		snprintf(err, errlen, "to: the range is limited to 400 days per export");
		return METER_ERANGE;
	}
	return METER_OK;
}

/* Appends a quoted SQL literal of s (an id or a timestamp) to sql. */
static enum meter_rc put_literal(PGconn *conn, char *sql, size_t cap, size_t *used, const char *s)
{
	char *lit = PQescapeLiteral(conn, s, strlen(s));
	int w;

	if (!lit)
		return METER_ENOMEM;
	w = snprintf(sql + *used, cap - *used, "%s", lit);
	PQfreemem(lit);
	if (w < 0 || (size_t)w >= cap - *used)
		return METER_ERANGE;
	*used += (size_t)w;
	return METER_OK;
}

/* Appends formatted text to sql. */
static enum meter_rc put_text(char *sql, size_t cap, size_t *used, const char *text)
{
	size_t n = strlen(text);

	if (n >= cap - *used)
		return METER_ERANGE;
	memcpy(sql + *used, text, n + 1);
	*used += n;
	return METER_OK;
}

/* Builds the COPY statement. Every value is a literal escaped by libpq
 * (the ids are also restricted to safe characters by export_params_check). */
static enum meter_rc build_sql(PGconn *conn, const struct export_params *p, char *sql, size_t cap)
{
	bool day = p->granularity == EXPORT_DAY;
	char from[32], to[32];
	size_t u = 0;
	enum meter_rc rc;

	format_ts(p->from_usec, from, sizeof(from));
	format_ts(p->to_usec, to, sizeof(to));
	rc = put_text(sql, cap, &u,
		      day ? "COPY (SELECT to_char(day, 'YYYY-MM-DD')"
			  : "COPY (SELECT to_char(hour AT TIME ZONE 'UTC', "
			    "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')");
	if (rc == METER_OK)
		rc = put_text(
		    sql, cap, &u,
		    ", account_id, key_id, sandbox_id,"
		    " div(sum(running_usec), 1000000), div(sum(paused_usec), 1000000),"
		    " div(sum(cpu_used_mcus), 1000000), div(sum(cpu_billed_mcus), 1000000),"
		    " div(sum(memory_mibus), 1000000), div(sum(storage_mibus), 1000000),"
		    " sum(cpu_micros), sum(memory_micros), sum(storage_micros),"
		    " sum(total_micros) FROM usage_hourly WHERE account_id = ");
	if (rc == METER_OK)
		rc = put_literal(conn, sql, cap, &u, p->account_id);
	if (rc == METER_OK)
		rc = put_text(sql, cap, &u, " AND hour >= ");
	if (rc == METER_OK)
		rc = put_literal(conn, sql, cap, &u, from);
	if (rc == METER_OK)
		rc = put_text(sql, cap, &u, " AND hour < ");
	if (rc == METER_OK)
		rc = put_literal(conn, sql, cap, &u, to);
	if (rc == METER_OK && p->key_id[0]) {
		rc = put_text(sql, cap, &u, " AND key_id = ");
		if (rc == METER_OK)
			rc = put_literal(conn, sql, cap, &u, p->key_id);
	}
	if (rc == METER_OK && p->sandbox_id[0]) {
		rc = put_text(sql, cap, &u, " AND sandbox_id = ");
		if (rc == METER_OK)
			rc = put_literal(conn, sql, cap, &u, p->sandbox_id);
	}
	if (rc == METER_OK)
		rc = put_text(sql, cap, &u,
			      day ? " GROUP BY day, account_id, key_id, sandbox_id"
				    " ORDER BY day, key_id NULLS FIRST, sandbox_id"
				  : " GROUP BY hour, account_id, key_id, sandbox_id"
				    " ORDER BY hour, key_id NULLS FIRST, sandbox_id");
	if (rc == METER_OK)
		rc = put_text(sql, cap, &u, ") TO STDOUT WITH (FORMAT csv)");
	return rc;
}

/* The connection's lock timeout back to none, as db_connect set it: the
 * export's would stay on a pooled connection and cut the lock waits of the
 * requests that take it next. */
static void export_lock_reset(PGconn *conn)
{
	PQclear(PQexec(conn, "SET lock_timeout = 0"));
}

enum meter_rc export_open(PGconn *conn, const struct export_params *p, struct export_cursor **out,
			  char *err, size_t errlen)
{
	struct export_cursor *c;
	char sql[2048];
	PGresult *res;
	enum meter_rc rc;

	rc = export_params_check(p, err, errlen);
	if (rc != METER_OK)
		return rc;
	rc = build_sql(conn, p, sql, sizeof(sql));
	if (rc != METER_OK) {
		snprintf(err, errlen, "cannot build the export query");
		return rc;
	}
	if (p->lock_timeout_ms > 0) {
		/* Not statement_timeout: the COPY may rightly stream for long;
		 * but it must not wait for ever behind a lock (DDL, a LOCK). */
		char set[64];
		snprintf(set, sizeof(set), "SET lock_timeout = %lld",
			 (long long)p->lock_timeout_ms);
		res = PQexec(conn, set);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			db_util_failed_note(res);
			snprintf(err, errlen, "export set-up failed: %s",
				 PQresultErrorMessage(res));
			PQclear(res);
			return METER_EDB;
		}
		PQclear(res);
	}
	res = PQexec(conn, sql);
	if (PQresultStatus(res) != PGRES_COPY_OUT) {
		db_util_failed_note(res); /* the answer tells a lock timeout */
		snprintf(err, errlen, "export query failed: %s", PQresultErrorMessage(res));
		PQclear(res);
		if (p->lock_timeout_ms > 0)
			export_lock_reset(conn);
		return METER_EDB;
	}
	PQclear(res);
	c = calloc(1, sizeof(*c));
	if (!c) {
		/* Leave the connection usable: read the COPY to its end. */
		char *row;
		while (PQgetCopyData(conn, &row, 0) > 0)
			PQfreemem(row);
		while ((res = PQgetResult(conn)) != NULL)
			PQclear(res);
		if (p->lock_timeout_ms > 0)
			export_lock_reset(conn);
		snprintf(err, errlen, "out of memory");
		return METER_ENOMEM;
	}
	c->conn = conn;
	c->format = p->format;
	c->lock_set = p->lock_timeout_ms > 0;
	*out = c;
	return METER_OK;
}

/* Writes the header into buf. */
static size_t write_header(enum export_format format, char *buf, size_t cap)
{
	size_t used = 0;

	if (format == EXPORT_NDJSON)
		return 0; /* NDJSON has no header: every line names its fields */
	for (int i = 0; i < F_COUNT; i++) {
		if (i)
			buf[used++] = ',';
		if (csv_put_field(buf, cap, &used, columns[i], strlen(columns[i])) != METER_OK)
			return 0;
	}
	buf[used++] = '\r';
	buf[used++] = '\n';
	return used;
}

/* Adds the row's money to the totals (one past INT64_MAX stays there, and
 * sets overflow). METER_EINVAL for a field that is not an integer (a
 * schema change this code does not know). */
static enum meter_rc add_totals(struct export_totals *t, char **f)
{
	int64_t v[4];
	int64_t *sum[4] = {&t->cpu_micros, &t->memory_micros, &t->storage_micros, &t->total_micros};

	for (int i = 0; i < 4; i++)
		if (parse_int64(f[F_COST0 + i], 0, INT64_MAX, &v[i]) != METER_OK)
			return METER_EINVAL;
	for (int i = 0; i < 4; i++)
		if (money_add(*sum[i], v[i], sum[i]) != METER_OK) {
			*sum[i] = INT64_MAX;
			t->overflow = true;
		}
	t->rows++;
	return METER_OK;
}

/* Formats one row from PostgreSQL's CSV record (len bytes, '\n' included)
 * into out. Returns bytes written, or 0 when it does not fit. */
static enum meter_rc format_row(struct export_cursor *c, char *rec, int len, char *out, size_t cap,
				size_t *written)
{
	char copy[ROW_MARGIN];
	char *f[CSV_FIELDS_MAX];
	size_t n, used = 0;
	int w;

	if (len < 1 || rec[len - 1] != '\n' || (size_t)len > sizeof(copy))
		return METER_EINVAL;
	memcpy(copy, rec, (size_t)len - 1);
	if (csv_split(copy, (size_t)len - 1, f, CSV_FIELDS_MAX, &n) != METER_OK || n != F_COUNT)
		return METER_EINVAL;
	if (add_totals(&c->totals, f) != METER_OK)
		return METER_EINVAL;
	snprintf(c->last_period, sizeof(c->last_period), "%s", f[F_PERIOD]);
	if (c->format == EXPORT_CSV) {
		/* PostgreSQL already quoted as RFC 4180 wants; only CRLF differs. */
		if ((size_t)len + 1 > cap)
			return METER_ERANGE;
		memcpy(out, rec, (size_t)len - 1);
		out[len - 1] = '\r';
		out[len] = '\n';
		*written = (size_t)len + 1;
		return METER_OK;
	}
	w = snprintf(out, cap,
		     "{\"period_start\":\"%s\",\"account_id\":\"%s\",\"key_id\":%s%s%s,"
		     "\"sandbox_id\":\"%s\",\"usage\":{\"running_seconds\":%s,"
		     "\"paused_seconds\":%s,\"cpu_used_millicore_seconds\":%s,"
		     "\"cpu_billed_millicore_seconds\":%s,\"memory_mib_seconds\":%s,"
		     "\"storage_mib_seconds\":%s},\"cost\":{\"cpu_micros\":%s,"
		     "\"memory_micros\":%s,\"storage_micros\":%s,\"total_micros\":%s}}\n",
		     f[F_PERIOD], f[F_ACCOUNT], f[F_KEY][0] ? "\"" : "null", f[F_KEY],
		     f[F_KEY][0] ? "\"" : "", f[F_SANDBOX], f[F_USAGE0], f[F_USAGE0 + 1],
		     f[F_USAGE0 + 2], f[F_USAGE0 + 3], f[F_USAGE0 + 4], f[F_USAGE0 + 5], f[F_COST0],
		     f[F_COST0 + 1], f[F_COST0 + 2], f[F_COST0 + 3]);
	if (w < 0 || (size_t)w >= cap)
		return METER_ERANGE;
	used = (size_t)w;
	*written = used;
	return METER_OK;
}

enum meter_rc export_next(struct export_cursor *c, char *buf, size_t cap, size_t *len)
{
	size_t used = 0;

	*len = 0;
	if (!c->header_done) {
		c->header_done = true;
		used = write_header(c->format, buf, cap);
	}
	while (!c->finished && cap - used >= ROW_MARGIN) {
		char *row;
		int n;
		size_t w;

		n = PQgetCopyData(c->conn, &row, 0);
		if (n == -1) {
			PGresult *res = PQgetResult(c->conn);
			c->finished = true;
			if (PQresultStatus(res) != PGRES_COMMAND_OK)
				c->failed = true;
			PQclear(res);
			while ((res = PQgetResult(c->conn)) != NULL)
				PQclear(res);
			break;
		}
		if (n < 0) {
			c->finished = true;
			c->failed = true;
			break;
		}
		if (format_row(c, row, n, buf + used, cap - used, &w) != METER_OK) {
			PQfreemem(row);
			c->failed = true;
			return METER_EDB;
		}
		PQfreemem(row);
		used += w;
	}
	*len = used;
	return c->failed ? METER_EDB : METER_OK;
}

void export_totals_get(const struct export_cursor *c, struct export_totals *out)
{
	*out = c->totals;
}

int64_t export_rows(const struct export_cursor *c)
{
	return c->totals.rows;
}

const char *export_last_period(const struct export_cursor *c)
{
	return c->last_period;
}

void export_close(struct export_cursor *c)
{
	PGresult *res;

	if (!c)
		return;
	if (!c->finished) {
		char *row;

		/* Sent on a thread of its own: a server that never answers
		 * does not hold this one in the cancel, and a shut-down cuts
		 * the connection it drains (h_reports_stop). */
		db_cancel_now(PQgetCancel(c->conn), -1);
		while (PQgetCopyData(c->conn, &row, 0) > 0)
			PQfreemem(row);
	}
	while ((res = PQgetResult(c->conn)) != NULL)
		PQclear(res);
	if (c->lock_set)
		export_lock_reset(c->conn);
	free(c);
}
