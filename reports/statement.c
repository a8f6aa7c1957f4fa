/* meter reports: the monthly statement (see statement.h). */
#include "statement.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_accounts.h"
#include "db_util.h"
#include "money.h"

enum meter_rc statement_parse_month(const char *s, int *year, int *month)
{
	static const int digits[] = {0, 1, 2, 3, 5, 6};
	int y, m;

	if (!s || strlen(s) != 7 || s[4] != '-')
		return METER_EINVAL;
	for (size_t i = 0; i < sizeof(digits) / sizeof(digits[0]); i++)
		if (s[digits[i]] < '0' || s[digits[i]] > '9')
			return METER_EINVAL;
	y = (s[0] - '0') * 1000 + (s[1] - '0') * 100 + (s[2] - '0') * 10 + (s[3] - '0');
	m = (s[5] - '0') * 10 + (s[6] - '0');
	if (y < 2000 || m < 1 || m > 12)
		return METER_EINVAL;
	*year = y;
	*month = m;
	return METER_OK;
}

void statement_release(struct statement *s)
{
	free(s->lines);
	if (s->memory && s->cap)
		(void)s->memory->charge(s->memory->ctx, -(int64_t)(s->cap * sizeof(*s->lines)));
	memset(s, 0, sizeof(*s));
}

/* Reads column col of row r as a non-negative int64. */
static enum meter_rc get_i64(PGresult *res, int r, int col, int64_t *out)
{
	return parse_int64(PQgetvalue(res, r, col), 0, INT64_MAX, out);
}

/* Reads the six usage columns starting at col. */
static enum meter_rc get_usage(PGresult *res, int r, int col, struct statement_usage *u)
{
	int64_t *f[6] = {&u->running_seconds,
			 &u->paused_seconds,
			 &u->cpu_used_millicore_seconds,
			 &u->cpu_billed_millicore_seconds,
			 &u->memory_mib_seconds,
			 &u->storage_mib_seconds};

	for (int i = 0; i < 6; i++)
		if (get_i64(res, r, col + i, f[i]) != METER_OK)
			return METER_EDB;
	return METER_OK;
}

/* Lines allocated first, doubled as needed: a short statement stays a small
 * answer. */
#define LINES_FIRST 64

/* Makes room for want lines, asking s->memory first: the old lines and the
 * new are both counted while realloc copies. METER_ENOMEM when refused
 * (err says so) or when memory ran out. */
static enum meter_rc lines_reserve(struct statement *s, size_t want, char *err, size_t errlen)
{
	size_t cap = s->cap ? s->cap : LINES_FIRST;
	struct statement_line *lines;

	while (cap < want) {
		if (cap > SIZE_MAX / 4 / sizeof(*lines))
			goto no_memory;
		cap *= 2;
	}
	if (cap == s->cap)
		return METER_OK;
	if (s->memory && !s->memory->charge(s->memory->ctx, (int64_t)(cap * sizeof(*lines)))) {
		snprintf(err, errlen, "refused: the lines' memory is not to be had now");
		return METER_ENOMEM;
	}
	lines = realloc(s->lines, cap * sizeof(*lines));
	if (!lines) {
		if (s->memory)
			(void)s->memory->charge(s->memory->ctx, -(int64_t)(cap * sizeof(*lines)));
		goto no_memory;
	}
	if (s->memory && s->cap)
		(void)s->memory->charge(s->memory->ctx, -(int64_t)(s->cap * sizeof(*lines)));
	s->lines = lines;
	s->cap = cap;
	return METER_OK;
no_memory:
	snprintf(err, errlen, "out of memory");
	return METER_ENOMEM;
}

/* Reads the lines of the FETCH result res into s, after those it has. */
static enum meter_rc read_lines(PGresult *res, struct statement *s, char *err, size_t errlen)
{
	size_t rows = (size_t)PQntuples(res);
	enum meter_rc rc = lines_reserve(s, s->n + rows, err, errlen);

	if (rc != METER_OK)
		return rc;
	for (size_t i = 0; i < rows; i++) {
		struct statement_line *l = &s->lines[s->n];
		int r = (int)i;

		memset(l, 0, sizeof(*l));
		snprintf(l->sandbox_id, sizeof(l->sandbox_id), "%s", PQgetvalue(res, r, 0));
		snprintf(l->key_id, sizeof(l->key_id), "%s", PQgetvalue(res, r, 1));
		if (get_usage(res, r, 2, &l->usage) != METER_OK ||
		    get_i64(res, r, 8, &l->cpu_micros) != METER_OK ||
		    get_i64(res, r, 9, &l->memory_micros) != METER_OK ||
		    get_i64(res, r, 10, &l->storage_micros) != METER_OK ||
		    get_i64(res, r, 11, &l->total_micros) != METER_OK) {
			snprintf(err, errlen, "statement query failed: a line out of range");
			return METER_EDB;
		}
		s->n++;
	}
	return METER_OK;
}

#define USAGE_SUMS                                                                                 \
	"div(sum(running_usec), 1000000), div(sum(paused_usec), 1000000),"                         \
	" div(sum(cpu_used_mcus), 1000000), div(sum(cpu_billed_mcus), 1000000),"                   \
	" div(sum(memory_mibus), 1000000), div(sum(storage_mibus), 1000000),"                      \
	" COALESCE(sum(cpu_micros), 0), COALESCE(sum(memory_micros), 0),"                          \
	" COALESCE(sum(storage_micros), 0), COALESCE(sum(total_micros), 0)"

/* Compares lines by (sandbox_id, key_id). */
static int line_cmp(const void *a, const void *b)
{
	const struct statement_line *x = a, *y = b;
	int c = strcmp(x->sandbox_id, y->sandbox_id);

	return c ? c : strcmp(x->key_id, y->key_id);
}

/* err <- why the query that gave res (NULL: none came back) failed. */
static void query_failed(PGconn *conn, const PGresult *res, char *err, size_t errlen)
{
	db_util_failed_note(res); /* the answer tells a timeout from the rest */
	snprintf(err, errlen, "statement query failed: %s",
		 res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
}

/* Credits the rows of the FETCH result res (those inside the month) until
 * *left, the free running time still to give, is used up. */
static enum meter_rc credit_rows(PGresult *res, struct statement *s, __int128 *left)
{
	for (int r = 0; r < PQntuples(res) && *left > 0; r++) {
		struct statement_line key, *line;
		int64_t running, money, credit;

		if (get_i64(res, r, 3, &running) != METER_OK ||
		    get_i64(res, r, 4, &money) != METER_OK || running == 0)
			return METER_EDB;
		if ((__int128)running <= *left) {
			credit = money;
			*left -= running;
		} else {
			credit = (int64_t)((__int128)money * *left / running);
			*left = 0;
		}
		if (PQgetvalue(res, r, 0)[0] != 't')
			continue;
		memset(&key, 0, sizeof(key));
		snprintf(key.sandbox_id, sizeof(key.sandbox_id), "%s", PQgetvalue(res, r, 1));
		snprintf(key.key_id, sizeof(key.key_id), "%s", PQgetvalue(res, r, 2));
		line = s->n ? bsearch(&key, s->lines, s->n, sizeof(*s->lines), line_cmp) : NULL;
		if (line) {
			line->credit_micros += credit;
			s->total.credit_micros += credit;
		}
	}
	return METER_OK;
}

/* Applies the free-hours credit: walks the account's running usage from its
 * first hour, in (hour, sandbox_id) order, the ids compared byte by byte
 * whatever the database's collation (the same usage gets the same credit
 * on a database restored under another locale), crediting the rows inside the
 * month, and stops as soon as the free running time is used up or the
 * month is over. A cursor read a page at a time: the rows after the credit
 * (an account's whole history, for a late month) are never read. Runs in
 * statement_build's transaction. */
static enum meter_rc apply_credit(PGconn *conn, struct statement *s, const char *start,
				  const char *end, char *err, size_t errlen)
{
	const char *params[3] = {s->account_id, start, end};
	__int128 left = (__int128)s->free_sandbox_hours * MONEY_USEC_PER_HOUR;
	PGresult *res;

	if (left <= 0)
		return METER_OK;
	res = PQexecParams(conn,
			   "DECLARE meter_credit NO SCROLL CURSOR FOR"
			   " SELECT hour >= $2::timestamptz, sandbox_id, COALESCE(key_id, ''),"
			   " running_usec, cpu_micros + memory_micros FROM usage_hourly"
			   " WHERE account_id = $1 AND running_usec > 0 AND hour < $3"
			   " ORDER BY hour, sandbox_id COLLATE \"C\", price_version, day",
			   3, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		goto failed;
	while (left > 0) {
		PQclear(res);
		res = PQexec(conn, "FETCH 1000 FROM meter_credit");
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			goto failed;
		if (PQntuples(res) == 0)
			break;
		if (credit_rows(res, s, &left) != METER_OK) {
			snprintf(err, errlen,
				 "statement query failed: a usage row without running"
				 " time");
			PQclear(res);
			return METER_EDB;
		}
	}
	PQclear(res);
	return METER_OK;
failed:
	query_failed(conn, res, err, errlen);
	PQclear(res);
	return METER_EDB;
}

enum meter_rc statement_build(PGconn *conn, const char *account_id, int year, int month,
			      struct statement *out, char *err, size_t errlen)
{
	return statement_build_counted(conn, account_id, year, month, NULL, out, err, errlen);
}

enum meter_rc statement_build_counted(PGconn *conn, const char *account_id, int year, int month,
				      const struct statement_memory *memory, struct statement *out,
				      char *err, size_t errlen)
{
	char start[32], end[32];
	const char *params[3];
	PGresult *res = NULL;
	enum meter_rc rc = METER_EDB;
	struct statement s;
	const char *end_sql = NULL; /* what ends the snapshot, once begun */

	memset(&s, 0, sizeof(s));
	if (!parse_is_id(account_id) || month < 1 || month > 12 || year < 2000 || year > 9999) {
		snprintf(err, errlen, "bad account or month");
		return METER_EINVAL;
	}
	snprintf(s.account_id, sizeof(s.account_id), "%s", account_id);
	s.memory = memory;
	s.year = year;
	s.month = month;
	snprintf(start, sizeof(start), "%04d-%02d-01T00:00:00Z", year, month);
	snprintf(end, sizeof(end), "%04d-%02d-01T00:00:00Z", month == 12 ? year + 1 : year,
		 month == 12 ? 1 : month + 1);
	params[0] = account_id;
	params[1] = start;
	params[2] = end;

	/* One snapshot for every query: the lines, the totals and the credit
	 * read the same rows while metering writes the month's (the credit's
	 * cursor needs a transaction too). Ended below, whatever happens. In
	 * a caller's transaction, a savepoint instead, undone at the end (which
	 * closes the cursor): the caller's transaction goes on as it was, with
	 * its own snapshots. */
	switch (PQtransactionStatus(conn)) {
	case PQTRANS_IDLE:
		res = PQexec(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY");
		end_sql = "ROLLBACK"; /* read only: as a commit would */
		break;
	case PQTRANS_INTRANS:
		res = PQexec(conn, "SAVEPOINT meter_statement");
		end_sql =
		    "ROLLBACK TO SAVEPOINT meter_statement; RELEASE SAVEPOINT meter_statement";
		break;
	default:
		snprintf(err, errlen, "the connection is busy or in a failed transaction");
		return METER_EINVAL;
	}
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		end_sql = NULL;
		goto db_error;
	}
	PQclear(res);

	res = PQexecParams(conn,
			   "SELECT a.name, COALESCE((SELECT p.free_sandbox_hours FROM price_book p"
			   " WHERE p.effective_from <= a.created_at ORDER BY p.effective_from DESC"
			   " LIMIT 1), 0) FROM accounts a WHERE a.account_id = $1",
			   1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		goto db_error;
	if (PQntuples(res) == 0) {
		snprintf(err, errlen, "account not found");
		rc = METER_ENOTFOUND;
		goto out;
	}
	snprintf(s.account_name, sizeof(s.account_name), "%s", PQgetvalue(res, 0, 0));
	if (get_i64(res, 0, 1, &s.free_sandbox_hours) != METER_OK)
		goto db_error;
	/* The usage no key claims is no customer's: the free hours are a new
	 * account's, and its statement shows the operator the whole of it as
	 * due. */
	if (strcmp(account_id, DB_ACCOUNT_UNATTRIBUTED) == 0)
		s.free_sandbox_hours = 0;
	PQclear(res);

	/* A page at a time: the database's answer for a month of many
	 * sandboxes is never held whole beside the lines made of it. */
	res = PQexecParams(conn,
			   "DECLARE meter_lines NO SCROLL CURSOR FOR"
			   " SELECT sandbox_id, COALESCE(key_id, ''), " USAGE_SUMS
			   " FROM usage_hourly WHERE account_id = $1 AND hour >= $2 AND hour < $3"
			   " GROUP BY sandbox_id, key_id ORDER BY sandbox_id, COALESCE(key_id, '')",
			   3, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		goto db_error;
	for (;;) {
		PQclear(res);
		res = PQexec(conn, "FETCH 1000 FROM meter_lines");
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			goto db_error;
		if (PQntuples(res) == 0)
			break;
		rc = read_lines(res, &s, err, errlen);
		if (rc != METER_OK)
			goto out;
	}
	PQclear(res);
	/* The database sorts by its collation; the credit's bsearch needs
	 * byte order (strcmp), so sort here rather than trust the server. */
	if (s.n > 1)
		qsort(s.lines, s.n, sizeof(*s.lines), line_cmp);

	/* Totals from the exact sums (not from the rounded lines). */
	res = PQexecParams(conn,
			   "SELECT " USAGE_SUMS " FROM usage_hourly"
			   " WHERE account_id = $1 AND hour >= $2 AND hour < $3",
			   3, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		goto db_error;
	if (PQgetisnull(res, 0, 0)) {
		memset(&s.total.usage, 0, sizeof(s.total.usage));
	} else if (get_usage(res, 0, 0, &s.total.usage) != METER_OK) {
		goto db_error;
	}
	if (get_i64(res, 0, 6, &s.total.cpu_micros) != METER_OK ||
	    get_i64(res, 0, 7, &s.total.memory_micros) != METER_OK ||
	    get_i64(res, 0, 8, &s.total.storage_micros) != METER_OK ||
	    get_i64(res, 0, 9, &s.total.total_micros) != METER_OK)
		goto db_error;
	PQclear(res);
	res = NULL;

	rc = apply_credit(conn, &s, start, end, err, errlen);
	if (rc != METER_OK)
		goto out;
	for (size_t i = 0; i < s.n; i++)
		s.lines[i].due_micros = s.lines[i].total_micros - s.lines[i].credit_micros;
	s.total.due_micros = s.total.total_micros - s.total.credit_micros;
	*out = s;
	memset(&s, 0, sizeof(s));
	rc = METER_OK;
	goto out;

db_error:
	query_failed(conn, res, err, errlen);
	rc = METER_EDB;
out:
	PQclear(res);
	statement_release(&s);
	/* Leaves the connection as it came. */
	if (end_sql)
		PQclear(PQexec(conn, end_sql));
	return rc;
}

/* Writes one CSV record of a line. */
static int write_line_csv(FILE *f, const char *kind, const struct statement_line *l)
{
	const struct statement_usage *u = &l->usage;

	return fprintf(
	    f, "%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld\r\n", kind,
	    l->sandbox_id, l->key_id, (long long)u->running_seconds, (long long)u->paused_seconds,
	    (long long)u->cpu_used_millicore_seconds, (long long)u->cpu_billed_millicore_seconds,
	    (long long)u->memory_mib_seconds, (long long)u->storage_mib_seconds,
	    (long long)l->cpu_micros, (long long)l->memory_micros, (long long)l->storage_micros,
	    (long long)l->total_micros, (long long)l->credit_micros, (long long)l->due_micros);
}

enum meter_rc statement_write_csv(const struct statement *s, FILE *f)
{
	/* Ids are restricted to A-Z a-z 0-9 _ . - : no field needs quoting. */
	if (fprintf(f, "line,sandbox_id,key_id,running_seconds,paused_seconds,"
		       "cpu_used_millicore_seconds,cpu_billed_millicore_seconds,"
		       "memory_mib_seconds,storage_mib_seconds,cpu_micros,memory_micros,"
		       "storage_micros,total_micros,credit_micros,due_micros\r\n") < 0)
		return METER_EIO;
	for (size_t i = 0; i < s->n; i++)
		if (write_line_csv(f, "sandbox", &s->lines[i]) < 0)
			return METER_EIO;
	if (write_line_csv(f, "total", &s->total) < 0)
		return METER_EIO;
	return ferror(f) ? METER_EIO : METER_OK;
}

/* The HTML page's output: every write checked, since a stream that can no
 * longer grow (glibc's open_memstream out of memory) may fail a write and
 * then report no error on ferror or fclose; one failed write fails the
 * page, never a page with rows missing. */
struct html_out {
	FILE *f;
	bool failed;
};

static void out_puts(struct html_out *o, const char *text)
{
	if (!o->failed && fputs(text, o->f) == EOF)
		o->failed = true;
}

static void out_printf(struct html_out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void out_printf(struct html_out *o, const char *fmt, ...)
{
	va_list ap;

	if (o->failed)
		return;
	va_start(ap, fmt);
	if (vfprintf(o->f, fmt, ap) < 0)
		o->failed = true;
	va_end(ap);
}

/* Writes text with HTML's special characters escaped. */
static void put_html(struct html_out *o, const char *text)
{
	for (; *text && !o->failed; text++) {
		switch (*text) {
		case '&':
			out_puts(o, "&amp;");
			break;
		case '<':
			out_puts(o, "&lt;");
			break;
		case '>':
			out_puts(o, "&gt;");
			break;
		case '"':
			out_puts(o, "&quot;");
			break;
		case '\'':
			out_puts(o, "&#39;");
			break;
		default:
			if (fputc(*text, o->f) == EOF)
				o->failed = true;
		}
	}
}

/* Writes µ$ as dollars with six decimals, exactly (integer arithmetic). */
static void put_dollars(struct html_out *o, int64_t micros)
{
	out_printf(o, "%s$%lld.%06lld", micros < 0 ? "-" : "",
		   (long long)((micros < 0 ? -micros : micros) / 1000000),
		   (long long)((micros < 0 ? -micros : micros) % 1000000));
}

static void html_row(struct html_out *o, const struct statement_line *l, bool total)
{
	out_puts(o,
		 total ? "<tr class=\"total\"><th scope=\"row\">Total</th><td></td>" : "<tr><td>");
	if (!total) {
		put_html(o, l->sandbox_id);
		out_puts(o, "</td><td>");
		put_html(o, l->key_id[0] ? l->key_id : "(unattributed)");
		out_puts(o, "</td>");
	}
	out_printf(o, "<td class=\"n\">%lld</td><td class=\"n\">%lld</td>",
		   (long long)l->usage.running_seconds, (long long)l->usage.paused_seconds);
	const int64_t money[6] = {l->cpu_micros,   l->memory_micros, l->storage_micros,
				  l->total_micros, l->credit_micros, l->due_micros};
	for (int i = 0; i < 6; i++) {
		out_puts(o, "<td class=\"n\">");
		put_dollars(o, money[i]);
		out_puts(o, "</td>");
	}
	out_puts(o, "</tr>\n");
}

enum meter_rc statement_write_html(const struct statement *s, FILE *f)
{
	struct html_out o = {.f = f};

	out_puts(&o, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
		     "<title>Statement</title><style>"
		     "body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#111}"
		     "table{border-collapse:collapse;width:100%}"
		     "th,td{border-bottom:1px solid #ccc;padding:4px 8px;text-align:left}"
		     "td.n{text-align:right;font-variant-numeric:tabular-nums}"
		     "tr.total th,tr.total td{font-weight:bold;border-top:2px solid #111}"
		     "dl{display:grid;grid-template-columns:max-content auto;gap:2px 1em}"
		     "@media print{body{margin:0}}</style></head><body>\n<h1>Statement ");
	/* The name is free text: isolated (<bdi>), so that a right-to-left
	 * mark in it reorders nothing around it, the account's id included. */
	out_printf(&o, "%04d-%02d</h1>\n<p>Account <bdi>", s->year, s->month);
	put_html(&o, s->account_name);
	out_puts(&o, "</bdi> (<code>");
	put_html(&o, s->account_id);
	out_puts(&o, "</code>)</p>\n<dl><dt>Gross cost</dt><dd>");
	put_dollars(&o, s->total.total_micros);
	out_printf(&o, "</dd><dt>Free sandbox-hours credit (%lld h for a new account)</dt><dd>-",
		   (long long)s->free_sandbox_hours);
	put_dollars(&o, s->total.credit_micros);
	out_puts(&o, "</dd><dt>Amount due</dt><dd>");
	put_dollars(&o, s->total.due_micros);
	out_puts(&o, "</dd></dl>\n<table><thead><tr><th>Sandbox</th><th>Key</th>"
		     "<th>Running s</th><th>Paused s</th><th>CPU</th><th>Memory</th>"
		     "<th>Storage</th><th>Gross</th><th>Credit</th><th>Due</th></tr></thead>"
		     "<tbody>\n");
	for (size_t i = 0; i < s->n && !o.failed; i++)
		html_row(&o, &s->lines[i], false);
	html_row(&o, &s->total, true);
	out_puts(&o, "</tbody></table>\n<p>Amounts are exact to the microdollar; usage is rounded "
		     "down to whole seconds. Storage is billed while a sandbox is paused.</p>\n"
		     "</body></html>\n");
	return o.failed || ferror(f) ? METER_EIO : METER_OK;
}
