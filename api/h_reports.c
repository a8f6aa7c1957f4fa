/* meter API: GET /v1/reports/usage.{csv,ndjson} and
 * GET /v1/reports/statement.{csv,html} (DESIGN.md §7).
 *
 * Exports stream from the database through a connection of their own (so a
 * long export never holds a request connection of the pool) with constant
 * memory; at most REPORTS_CONCURRENT run at once per process (429 beyond).
 * A key sees its own account; the operator names one with account_id. */
#include "h_reports.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_doc.h"
#include "app.h"
#include "auth.h"
#include "db.h"
#include "export.h"
#include "log.h"
#include "statement.h"

#define REPORTS_CONCURRENT 4
#define STREAM_BUF	   (64 * 1024)

static atomic_int exports_running;

struct stream {
	PGconn *conn;
	struct export_cursor *cur;
	char buf[STREAM_BUF];
	size_t len, off;
	bool done;
};

/* Which account the caller may report on; false after setting a reply. */
static bool report_account(struct http_req *req, char *account, size_t len)
{
	const char *q = http_query(req, "account_id");

	if (req->auth->kind == AUTH_KEY) {
		if (q && strcmp(q, req->auth->account_id) != 0) {
			/* Another account's id: as if it did not exist. */
			http_reply_error(req, 404, "not_found", "no such account", NULL);
			return false;
		}
		snprintf(account, len, "%s", req->auth->account_id);
		return true;
	}
	if (!q && req->auth->account_id[0]) {
		/* An operator's dashboard session views one account. */
		snprintf(account, len, "%s", req->auth->account_id);
		return true;
	}
	if (!q || !parse_is_id(q)) {
		http_reply_error(req, 400, "invalid_request",
				 "account_id: required for the operator, 1 to 64 characters of "
				 "A-Z a-z 0-9 _ . -",
				 json_pack("{s:s}", "field", "account_id"));
		return false;
	}
	snprintf(account, len, "%s", q);
	return true;
}

/* Copies an optional id parameter; false after a 400 reply. */
static bool id_param(struct http_req *req, const char *name, char *out, size_t len)
{
	const char *v = http_query(req, name);
	char msg[128];

	out[0] = '\0';
	if (!v)
		return true;
	if (!parse_is_id(v)) {
		snprintf(msg, sizeof(msg), "%s: 1 to 64 characters of A-Z a-z 0-9 _ . -", name);
		http_reply_error(req, 400, "invalid_request", msg,
				 json_pack("{s:s}", "field", name));
		return false;
	}
	snprintf(out, len, "%s", v);
	return true;
}

/* A required RFC 3339 time parameter; false after a 400 reply. */
static bool time_param(struct http_req *req, const char *name, int64_t *out)
{
	const char *v = http_query(req, name);
	char msg[160];

	if (v && agent_doc_parse_time(v, out) == METER_OK)
		return true;
	snprintf(msg, sizeof(msg), "%s: %s RFC 3339 time on a whole UTC hour is required", name,
		 v ? "not an" : "an");
	http_reply_error(req, 400, "invalid_request", msg, json_pack("{s:s}", "field", name));
	return false;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *st = cls;
	size_t n;

	(void)pos;
	if (st->off == st->len) {
		if (st->done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		st->off = 0;
		if (export_next(st->cur, st->buf, sizeof(st->buf), &st->len) != METER_OK) {
			log_warn("export failed mid-stream; the transfer is aborted");
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (st->len == 0) {
			st->done = true;
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
	}
	n = st->len - st->off < max ? st->len - st->off : max;
	memcpy(buf, st->buf + st->off, n);
	st->off += n;
	return (ssize_t)n;
}

static void stream_free(void *cls)
{
	struct stream *st = cls;

	export_close(st->cur);
	if (st->conn)
		PQfinish(st->conn);
	free(st);
	atomic_fetch_sub(&exports_running, 1);
}

/* Starts a streamed usage export in format; every failure before the first
 * byte is a proper error reply. */
static void usage_export(struct http_req *req, enum export_format format)
{
	static const char *const allowed[] = {"from",	    "to",	  "granularity", "key_id",
					      "sandbox_id", "account_id", NULL};
	struct export_params p;
	struct stream *st = NULL;
	struct MHD_Response *resp;
	const char *g = http_query(req, "granularity");
	char err[512], disp[160], from[32], to[32];

	memset(&p, 0, sizeof(p));
	p.format = format;
	if (!http_query_allowed(req, allowed) ||
	    !report_account(req, p.account_id, sizeof(p.account_id)) ||
	    !id_param(req, "key_id", p.key_id, sizeof(p.key_id)) ||
	    !id_param(req, "sandbox_id", p.sandbox_id, sizeof(p.sandbox_id)) ||
	    !time_param(req, "from", &p.from_usec) || !time_param(req, "to", &p.to_usec))
		return;
	if (!g || strcmp(g, "hour") == 0) {
		p.granularity = EXPORT_HOUR;
	} else if (strcmp(g, "day") == 0) {
		p.granularity = EXPORT_DAY;
	} else {
		http_reply_error(req, 400, "invalid_request", "granularity: hour or day",
				 json_pack("{s:s}", "field", "granularity"));
		return;
	}
	if (export_params_check(&p, err, sizeof(err)) != METER_OK) {
		char field[32];
		size_t flen = strcspn(err, ":");
		snprintf(field, sizeof(field), "%.*s", (int)(flen < 31 ? flen : 31), err);
		http_reply_error(req, 400, "invalid_request", err,
				 json_pack("{s:s}", "field", field));
		return;
	}
	if (atomic_fetch_add(&exports_running, 1) >= REPORTS_CONCURRENT) {
		atomic_fetch_sub(&exports_running, 1);
		http_reply_error(req, 429, "too_many_exports",
				 "too many exports are running; retry shortly", NULL);
		return;
	}
	st = calloc(1, sizeof(*st));
	if (!st ||
	    db_connect(req->app->cfg->database_url, &st->conn, err, sizeof(err)) != METER_OK ||
	    export_open(st->conn, &p, &st->cur, err, sizeof(err)) != METER_OK) {
		if (st)
			log_warn("export could not start: %s", err);
		http_reply_error(req, 503, "metering_unavailable", "the database is unreachable",
				 NULL);
		if (st && st->conn)
			PQfinish(st->conn);
		free(st);
		atomic_fetch_sub(&exports_running, 1);
		return;
	}
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, stream_read, st,
						 stream_free);
	if (!resp) {
		stream_free(st);
		http_reply_error(req, 503, "metering_unavailable", "out of memory", NULL);
		return;
	}
	agent_doc_format_time(p.from_usec, from, sizeof(from));
	agent_doc_format_time(p.to_usec, to, sizeof(to));
	snprintf(disp, sizeof(disp), "attachment; filename=\"usage-%s-%.10s-%.10s.%s\"",
		 p.account_id, from, to, format == EXPORT_CSV ? "csv" : "ndjson");
	if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				    format == EXPORT_CSV ? "text/csv; charset=utf-8"
							 : "application/x-ndjson") != MHD_YES ||
	    MHD_add_response_header(resp, "Content-Disposition", disp) != MHD_YES)
		log_warn("could not add export headers");
	http_reply_response(req, 200, resp);
}

void h_report_usage_csv(struct http_req *req)
{
	usage_export(req, EXPORT_CSV);
}

void h_report_usage_ndjson(struct http_req *req)
{
	usage_export(req, EXPORT_NDJSON);
}

/* The statement of a month, small enough to build whole. */
static void statement_reply(struct http_req *req, bool html)
{
	static const char *const allowed[] = {"month", "account_id", NULL};
	char account[PARSE_ID_MAX + 1], err[512];
	const char *m = http_query(req, "month");
	struct statement s;
	PGconn *conn = NULL;
	char *text = NULL;
	size_t len = 0;
	FILE *mem;
	int year, month;
	enum meter_rc rc;

	if (!http_query_allowed(req, allowed) || !report_account(req, account, sizeof(account)))
		return;
	if (statement_parse_month(m, &year, &month) != METER_OK) {
		http_reply_error(req, 400, "invalid_request", "month: YYYY-MM is required",
				 json_pack("{s:s}", "field", "month"));
		return;
	}
	if (db_pool_acquire(req->app->pool, 2000, &conn) != METER_OK) {
		http_reply_error(req, 503, "metering_unavailable", "the database is unreachable",
				 NULL);
		return;
	}
	rc = statement_build(conn, account, year, month, &s, err, sizeof(err));
	db_pool_release(req->app->pool, conn, rc == METER_EDB && db_conn_failed(conn));
	if (rc == METER_ENOTFOUND) {
		http_reply_error(req, 404, "not_found", "no such account", NULL);
		return;
	}
	if (rc != METER_OK) {
		log_warn("statement failed: %s", err);
		http_reply_error(req, 503, "metering_unavailable", "the database is unreachable",
				 NULL);
		return;
	}
	mem = open_memstream(&text, &len);
	if (!mem ||
	    (html ? statement_write_html(&s, mem) : statement_write_csv(&s, mem)) != METER_OK) {
		if (mem)
			fclose(mem);
		free(text);
		statement_release(&s);
		http_reply_error(req, 503, "metering_unavailable", "out of memory", NULL);
		return;
	}
	fclose(mem);
	statement_release(&s);
	http_reply_text(req, 200, html ? "text/html; charset=utf-8" : "text/csv; charset=utf-8",
			text, len);
	free(text);
	if (html && req->resp &&
	    MHD_add_response_header(req->resp, "Content-Security-Policy",
				    "default-src 'none'; style-src 'unsafe-inline'") != MHD_YES)
		log_warn("could not add Content-Security-Policy");
}

void h_report_statement_csv(struct http_req *req)
{
	statement_reply(req, false);
}

void h_report_statement_html(struct http_req *req)
{
	statement_reply(req, true);
}
