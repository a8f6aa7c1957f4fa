/* meter API: the dashboard pages (see dashboard.h). */
#include "dashboard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_doc.h"
#include "app.h"
#include "auth.h"
#include "clock.h"
#include "db_accounts.h"
#include "db_dashboard.h"
#include "db_keys.h"
#include "db_sandboxes.h"
#include "html.h"
#include "log.h"
#include "money.h"
#include "session.h"

#define HOURS_OVERVIEW (7 * 24)
#define HOURS_SANDBOX  48
#define TOP_SANDBOXES  10
#define EVENTS_MAX     50

static const char csp[] = "default-src 'none'; style-src 'self'; img-src 'self';"
			  " form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

static const char stylesheet[] =
    "body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}"
    "header{display:flex;gap:1.5em;align-items:center;padding:.6em 1.5em;background:#1b1f24;"
    "color:#fff}header a{color:#cfe3ff;text-decoration:none}header a:hover{text-decoration:"
    "underline}header .who{margin-left:auto;color:#aab}header form{margin:0}"
    "main{padding:1em 1.5em;max-width:1200px}h1{font-size:1.4em}h2{font-size:1.1em;"
    "margin-top:1.6em}table{border-collapse:collapse;width:100%;background:#fff}"
    "th,td{padding:4px 8px;border-bottom:1px solid #dde;text-align:left}"
    "td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}"
    ".chart{background:#fff;border:1px solid #dde}.chart .bar{fill:#3d7bd9}"
    ".chart .line{fill:none;stroke:#3d7bd9;stroke-width:2}.chart .floor{stroke:#d9483d;"
    "stroke-dasharray:6 4}.chart .axis{stroke:#889}.chart .label{font-size:11px;fill:#556}"
    ".gauge .track{fill:#e4e7ec}.gauge .spent{fill:#3d7bd9}.gauge .held{fill:#f0b84a}"
    ".gauge .limit{stroke:#d9483d;stroke-width:2}.legend span{margin-right:1em}"
    ".sw{display:inline-block;width:10px;height:10px;margin-right:4px}"
    ".sw.spent{background:#3d7bd9}.sw.held{background:#f0b84a}"
    ".state-running{color:#176b2c}.state-paused{color:#8a5a00}.state-stopped{color:#666}"
    "form.filters{display:flex;gap:1em;align-items:end;margin:1em 0}label{display:block;"
    "font-size:.9em;color:#445}.card{background:#fff;border:1px solid #dde;padding:1em;"
    "margin:1em 0;max-width:420px}.error{color:#a1261b}.muted{color:#667}";

/* The account a page shows: the key's own, or the operator's chosen one. */
static const char *page_account(struct http_req *req)
{
	return req->auth->account_id;
}

/* Sends page (taken over) with the dashboard's headers. */
static void send_page(struct http_req *req, unsigned status, struct html *page)
{
	size_t len;
	char *text;

	if (page->failed) {
		html_release(page);
		http_reply_error(req, 503, "metering_unavailable", "page too large", NULL);
		return;
	}
	text = html_steal(page, &len);
	if (text)
		http_reply_owned(req, status, "text/html; charset=utf-8", text, len);
	else
		http_reply_static(req, status, "text/html; charset=utf-8", "", 0);
	if (req->resp &&
	    (MHD_add_response_header(req->resp, "Content-Security-Policy", csp) != MHD_YES ||
	     MHD_add_response_header(req->resp, "X-Content-Type-Options", "nosniff") != MHD_YES ||
	     MHD_add_response_header(req->resp, "Referrer-Policy", "same-origin") != MHD_YES ||
	     MHD_add_response_header(req->resp, "X-Frame-Options", "DENY") != MHD_YES))
		log_warn("could not add dashboard headers");
}

/* A 303 to location. */
static void redirect(struct http_req *req, const char *location)
{
	http_reply_text(req, 303, "text/plain; charset=utf-8", "", 0);
	if (req->resp &&
	    MHD_add_response_header(req->resp, MHD_HTTP_HEADER_LOCATION, location) != MHD_YES)
		log_warn("could not add Location");
}

static void page_start(struct html *h, struct http_req *req, const char *title)
{
	html_init(h);
	html_printf(
	    h,
	    "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
	    "<meta name=\"viewport\" content=\"width=device-width\">"
	    "<title>%s · meter</title><link rel=\"stylesheet\" href=\"/dashboard/style.css\">"
	    "</head><body><header><strong>meter</strong>",
	    title);
	if (req && req->auth && req->auth->kind != AUTH_NONE) {
		html_raw(h, "<a href=\"/dashboard/\">Overview</a>"
			    "<a href=\"/dashboard/sandboxes\">Sandboxes</a>"
			    "<a href=\"/dashboard/keys\">Keys and limits</a>"
			    "<a href=\"/dashboard/exports\">Exports</a>");
		html_printf(h, "<span class=\"who\">account %s", req->auth->account_id);
		if (req->auth->kind == AUTH_KEY)
			html_printf(h, " · %s key %s",
				    req->auth->role == ROLE_FULL ? "full" : "read-only",
				    req->auth->key_id);
		else
			html_raw(h, " · operator");
		html_raw(h, "</span><form method=\"post\" action=\"/dashboard/sign-out\">"
			    "<button type=\"submit\">Sign out</button></form>");
	}
	html_printf(h, "</header><main><h1>%s</h1>", title);
}

static void page_end(struct html *h)
{
	html_raw(
	    h,
	    "<p class=\"muted\">Amounts are exact to the microdollar. Usage is metered "
	    "as used, with the price book's CPU floor while running.</p></main></body></html>\n");
}

/* Start of the current UTC hour / day / month. */
static int64_t hour_start(int64_t usec)
{
	return usec - usec % MONEY_USEC_PER_HOUR;
}

static void month_bounds(int64_t usec, int64_t *start, int64_t *end)
{
	time_t t = (time_t)(usec / 1000000);
	struct tm tm;

	gmtime_r(&t, &tm);
	tm.tm_mday = 1;
	tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
	*start = (int64_t)timegm(&tm) * 1000000;
	tm.tm_mon++;
	*end = (int64_t)timegm(&tm) * 1000000;
}

/* True when the page has an account to show; else answers 400. The
 * operator's bearer token (not a session, which names one) names none:
 * shown as an idle account it would read as one with nothing metered. */
static bool page_has_account(struct http_req *req)
{
	if (page_account(req) && page_account(req)[0])
		return true;
	http_reply_error(req, 400, "invalid_request",
			 "the operator's token names no account: sign in at /dashboard/sign-in "
			 "naming one",
			 NULL);
	return false;
}

/* A connection for the page (NULL after an answer: no account to show, or
 * the database unreachable). */
static PGconn *page_db(struct http_req *req)
{
	PGconn *conn = NULL;

	if (!page_has_account(req))
		return NULL;
	if (db_pool_acquire(req->app->pool, 2000, &conn) != METER_OK) {
		http_reply_error(req, 503, "metering_unavailable", "the database is unreachable",
				 NULL);
		return NULL;
	}
	return conn;
}

static void page_db_done(struct http_req *req, PGconn *conn, enum meter_rc rc)
{
	db_pool_release(req->app->pool, conn, rc == METER_EDB && db_conn_failed(conn));
}

void h_dash_root(struct http_req *req)
{
	redirect(req, "/dashboard/");
}

void h_dash_favicon(struct http_req *req)
{
	/* Browsers ask for it on every page: an empty answer, not a 404 in
	 * their console. */
	http_reply_text(req, 204, "image/x-icon", "", 0);
}

void h_dash_style(struct http_req *req)
{
	http_reply_static(req, 200, "text/css; charset=utf-8", stylesheet, sizeof(stylesheet) - 1);
}

/* The sign-in page; error (may be NULL) is shown above the form. */
static void sign_in_page(struct http_req *req, unsigned status, const char *error)
{
	struct html h;

	page_start(&h, NULL, "Sign in");
	if (error)
		html_printf(&h, "<p class=\"error\" role=\"alert\">%s</p>", error);
	html_raw(&h, "<form class=\"card\" method=\"post\" action=\"/dashboard/sign-in\">"
		     "<label for=\"key\">API key (read-only, full) or operator token</label>"
		     "<input id=\"key\" name=\"key\" type=\"password\" autocomplete=\"off\" "
		     "required size=\"48\"><label for=\"account\">Account (operator only)</label>"
		     "<input id=\"account\" name=\"account\" size=\"24\">"
		     "<p><button type=\"submit\">Sign in</button></p></form>"
		     "<p class=\"muted\">The key is sent once, in this form's body, and kept only "
		     "as a signed session cookie naming the key, never the key itself.</p>");
	page_end(&h);
	send_page(req, status, &h);
}

void h_dash_sign_in_form(struct http_req *req)
{
	sign_in_page(req, 200, NULL);
}

/* Decodes one application/x-www-form-urlencoded value in place. */
static bool form_decode(char *s)
{
	char *w = s;

	for (char *r = s; *r; r++) {
		if (*r == '+') {
			*w++ = ' ';
		} else if (*r == '%') {
			int v = 0;
			for (int i = 1; i <= 2; i++) {
				char c = r[i];
				v <<= 4;
				if (c >= '0' && c <= '9')
					v |= c - '0';
				else if (c >= 'a' && c <= 'f')
					v |= c - 'a' + 10;
				else if (c >= 'A' && c <= 'F')
					v |= c - 'A' + 10;
				else
					return false;
			}
			if (v == 0)
				return false;
			*w++ = (char)v;
			r += 2;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
	return true;
}

/* Finds field name in the form body (modified in place); NULL if absent. */
static char *form_field(char *body, const char *name)
{
	size_t n = strlen(name);

	for (char *p = body; p && *p;) {
		char *amp = strchr(p, '&');
		if (amp)
			*amp = '\0';
		if (strncmp(p, name, n) == 0 && p[n] == '=') {
			if (!form_decode(p + n + 1))
				return NULL;
			return p + n + 1;
		}
		p = amp ? amp + 1 : NULL;
	}
	return NULL;
}

/* False for a form posted from another site (login and logout CSRF): the
 * browser says so in Sec-Fetch-Site, or in an Origin that is not ours. Behind
 * HTTPS (session_cookie_secure) ours is https:// alone: a page served over
 * plain http:// on the same host is anyone's on the network path. */
static bool same_site_form(struct http_req *req)
{
	const char *site = http_header(req, "Sec-Fetch-Site");
	const char *origin = http_header(req, "Origin");
	const char *host = http_header(req, MHD_HTTP_HEADER_HOST);
	bool https_only = req->app->cfg->session_cookie_secure;
	const char *o;

	if (site)
		return strcmp(site, "same-origin") == 0 || strcmp(site, "none") == 0;
	if (!origin)
		return true; /* not a browser's form: nothing to forge */
	if (strncmp(origin, "https://", 8) == 0)
		o = origin + 8;
	else if (!https_only && strncmp(origin, "http://", 7) == 0)
		o = origin + 7;
	else
		return false;
	return host && strcmp(o, host) == 0;
}

/* The Set-Cookie line of the session cookie: value for max_age seconds
 * (an empty value and 0 delete it). */
static void session_cookie_line(struct http_req *req, const char *value, int max_age, char *out,
				size_t len)
{
	snprintf(out, len, "%s=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%d%s", SESSION_COOKIE,
		 value, max_age, req->app->cfg->session_cookie_secure ? "; Secure" : "");
}

/* NULL when the form body holds only this page's fields, key and
 * account, each at most once (unknown fields are refused, as in every
 * JSON body); else what is wrong, for the page. */
static const char *form_unexpected(const char *body)
{
	bool key = false, account = false;

	for (const char *p = body; *p;) {
		size_t len = strcspn(p, "&");
		bool *seen = len >= 4 && strncmp(p, "key=", 4) == 0	  ? &key
			     : len >= 8 && strncmp(p, "account=", 8) == 0 ? &account
									  : NULL;

		if (len == 0) { /* "a&&b", a trailing "&": nothing, as browsers read it */
			p++;
			continue;
		}
		if (!seen)
			return "The form had a field this page does not send.";
		if (*seen)
			return "The form had a field twice.";
		*seen = true;
		p += len;
		if (*p == '&')
			p++;
	}
	return NULL;
}

void h_dash_sign_in(struct http_req *req)
{
	char body[4096], copy[4096], cookie[600], header[800];
	const char *token, *account;
	struct auth a;
	enum meter_rc rc;

	if (!same_site_form(req)) {
		sign_in_page(req, 403, "Sign in from this site's own page.");
		return;
	}
	if (!req->body || req->body_len >= sizeof(body)) {
		sign_in_page(req, 400, "Enter a key.");
		return;
	}
	if (form_unexpected(req->body)) {
		sign_in_page(req, 400, form_unexpected(req->body));
		return;
	}
	memcpy(body, req->body, req->body_len + 1);
	memcpy(copy, req->body, req->body_len + 1);
	token = form_field(body, "key");
	account = form_field(copy, "account");
	if (!token || !*token) {
		sign_in_page(req, 400, "Enter a key.");
		return;
	}
	rc = auth_verify_token(req->app, token, &a);
	if (rc == METER_EDB) {
		sign_in_page(req, 503, "The service cannot reach its database; try again shortly.");
		return;
	}
	if (rc != METER_OK || (a.kind != AUTH_KEY && a.kind != AUTH_OPERATOR)) {
		sign_in_page(req, 401, "That key was not accepted.");
		return;
	}
	if (a.kind == AUTH_OPERATOR) {
		PGconn *conn = NULL;

		if (!account || !parse_is_id(account)) {
			sign_in_page(req, 400, "As the operator, name the account to view.");
			return;
		}
		/* No session for an account that does not exist: its pages
		 * would show an idle account where there is none. */
		rc = db_pool_acquire(req->app->pool, 2000, &conn);
		if (rc == METER_OK) {
			rc = db_account_exists(conn, account);
			db_pool_release(req->app->pool, conn,
					rc == METER_EDB && db_conn_failed(conn));
		}
		if (rc == METER_ENOTFOUND) {
			sign_in_page(req, 404, "There is no account with that id.");
			return;
		}
		if (rc != METER_OK) {
			sign_in_page(req, 503,
				     "The service cannot reach its database; try again shortly.");
			return;
		}
		snprintf(a.account_id, sizeof(a.account_id), "%s", account);
		session_operator_fingerprint(req->app->cfg->operator_token, a.key_id,
					     sizeof(a.key_id));
	}
	if (session_issue(&a, clock_real_usec() / 1000000, cookie, sizeof(cookie)) != METER_OK) {
		sign_in_page(req, 503, "Could not start a session.");
		return;
	}
	session_cookie_line(req, cookie, SESSION_TTL_S, header, sizeof(header));
	redirect(req, "/dashboard/");
	if (req->resp &&
	    MHD_add_response_header(req->resp, MHD_HTTP_HEADER_SET_COOKIE, header) != MHD_YES)
		log_warn("could not set the session cookie");
}

void h_dash_sign_out(struct http_req *req)
{
	char header[200];

	if (!same_site_form(req)) {
		http_reply_error(req, 403, "forbidden", "sign out from this site's own page", NULL);
		return;
	}
	redirect(req, "/dashboard/sign-in");
	/* With the attributes it was set with (Secure too, behind HTTPS). */
	session_cookie_line(req, "", 0, header, sizeof(header));
	if (req->resp &&
	    MHD_add_response_header(req->resp, MHD_HTTP_HEADER_SET_COOKIE, header) != MHD_YES)
		log_warn("could not clear the session cookie");
}

/* A sandbox's id in a table cell, linked to its page: "." and "..", ids
 * metering may meet though no create makes them, are not, since a browser
 * reads them in a path as dot segments (escaped too) and opens another
 * page; the title says where to read them instead. */
static void sandbox_cell(struct html *h, const char *sandbox_id)
{
	if (strcmp(sandbox_id, ".") == 0 || strcmp(sandbox_id, "..") == 0) {
		html_printf(h,
			    "<td><span title=\"a browser cannot open this id's page: read it with "
			    "GET /v1/sandboxes/%s, its path sent as it is\">%s</span></td>",
			    sandbox_id, sandbox_id);
		return;
	}
	html_raw(h, "<td><a href=\"/dashboard/sandboxes/");
	html_url_component(h, sandbox_id);
	html_printf(h, "\">%s</a></td>", sandbox_id);
}

/* The cell of what k's limit leaves of its day (GET /v1/keys's
 * day_remaining_micros), with an id a test can find; for a revoked key,
 * none: its checks are refused whatever its limit leaves. */
static void key_remaining(struct html *h, const struct db_key *k)
{
	html_printf(h, "<td class=\"n\" id=\"remaining-%s\">", k->key_id);
	if (k->revoked_at_usec != INT64_MIN)
		html_raw(h, "none (revoked)");
	else if (k->has_limit)
		html_dollars(h, db_key_remaining(k));
	else
		html_raw(h, "no limit");
	html_raw(h, "</td>");
}

/* Under a table of the account's keys: a word when it holds as many as a
 * page reads (DB_KEYS_LIST_MAX), the oldest, so that the rest are not
 * missed without one. */
static void keys_cut_note(struct html *h, size_t n)
{
	if (n >= DB_KEYS_LIST_MAX)
		html_printf(h,
			    "<p class=\"muted\">The account's first %d keys only (the oldest);"
			    " <code>GET /v1/keys</code> lists every one.</p>",
			    DB_KEYS_LIST_MAX);
}

/* The gauges of the account's keys: today's spent and held against the
 * daily limit of each key, in its own time zone. A revoked key shows while
 * its day has spend or holds (its sandboxes may run on, and they rank
 * below), so that the day's spend is all here. */
static enum meter_rc overview_keys(struct html *h, PGconn *conn, const char *account)
{
	struct db_key *keys = NULL;
	size_t n = 0;
	enum meter_rc rc = db_key_list(conn, account, NULL, DB_KEYS_LIST_MAX, &keys, &n);

	if (rc != METER_OK)
		return rc;
	html_raw(h, "<h2>Today against the daily limits</h2><p class=\"legend\"><span><i "
		    "class=\"sw spent\"></i>spent</span><span><i class=\"sw held\"></i>held for "
		    "running leases</span></p><table><thead><tr><th>Key</th><th>Day</th>"
		    "<th class=\"n\">Spent</th><th class=\"n\">Held</th><th class=\"n\">Limit</th>"
		    "<th class=\"n\">Remaining</th><th></th></tr></thead><tbody>");
	for (size_t i = 0; i < n; i++) {
		const struct db_key *k = &keys[i];
		bool revoked = k->revoked_at_usec != INT64_MIN;

		if (revoked && k->day_spent_micros == 0 && k->day_held_micros == 0)
			continue;
		html_printf(h, "<tr><td>%s%s</td><td>%s (%s)</td><td class=\"n\">", k->key_id,
			    revoked ? " (revoked)" : "", k->day, k->time_zone);
		html_dollars(h, k->day_spent_micros);
		html_raw(h, "</td><td class=\"n\">");
		html_dollars(h, k->day_held_micros);
		html_raw(h, "</td><td class=\"n\">");
		if (k->has_limit)
			html_dollars(h, k->daily_limit_micros);
		else
			html_raw(h, "no limit");
		html_raw(h, "</td>");
		key_remaining(h, k);
		html_raw(h, "<td>");
		html_gauge(h, k->day_spent_micros, k->day_held_micros,
			   k->has_limit ? k->daily_limit_micros : -1);
		html_raw(h, "</td></tr>");
	}
	if (n == 0)
		html_raw(h, "<tr><td colspan=\"7\">No keys yet.</td></tr>");
	html_raw(h, "</tbody></table>");
	keys_cut_note(h, n);
	free(keys);
	return METER_OK;
}

/* The query of a page that takes none: a parameter there was meant for
 * another page (400, as the API's routes answer). */
static const char *const no_query[] = {NULL};

void h_dash_overview(struct http_req *req)
{
	const char *account = page_account(req);
	int64_t now = clock_real_usec(),
		from = hour_start(now) - (HOURS_OVERVIEW - 1) * MONEY_USEC_PER_HOUR;
	int64_t spend[HOURS_OVERVIEW], total = 0;
	struct html_series s = {spend, HOURS_OVERVIEW};
	struct db_dash_top top[TOP_SANDBOXES];
	size_t ntop = 0;
	struct html h;
	PGconn *conn;
	enum meter_rc rc;

	if (!http_query_allowed(req, no_query))
		return;
	conn = page_db(req);
	if (!conn)
		return;
	page_start(&h, req, "Overview");
	rc = overview_keys(&h, conn, account);
	if (rc == METER_OK)
		rc = db_dash_hourly_spend(conn, account, from, HOURS_OVERVIEW, spend);
	if (rc == METER_OK)
		rc = db_dash_top_sandboxes(conn, account, top, TOP_SANDBOXES, &ntop);
	page_db_done(req, conn, rc);
	if (rc != METER_OK) {
		html_release(&h);
		http_reply_error(req, 503, "metering_unavailable", "the database is unreachable",
				 NULL);
		return;
	}
	for (int i = 0; i < HOURS_OVERVIEW; i++)
		total += spend[i];
	html_raw(&h, "<h2>Spend per hour, last 7 days (UTC)</h2>");
	html_bar_chart(&h, "spend per hour over the last 7 days", &s, 1008, 160, true);
	html_raw(&h, "<p>Total over the 7 days: <strong id=\"week-total\">");
	html_dollars(&h, total);
	html_raw(&h, "</strong></p><h2>Most expensive sandboxes today</h2><table><thead>"
		     "<tr><th>Sandbox</th><th>Key</th><th>State</th><th class=\"n\">Cost today</th>"
		     "</tr></thead><tbody>");
	for (size_t i = 0; i < ntop; i++) {
		html_raw(&h, "<tr>");
		sandbox_cell(&h, top[i].sandbox_id);
		html_printf(&h, "<td>%s</td><td class=\"state-%s\">%s</td><td class=\"n\">",
			    top[i].key_id[0] ? top[i].key_id : "—", top[i].state, top[i].state);
		html_dollars(&h, top[i].total_micros);
		html_raw(&h, "</td></tr>");
	}
	if (ntop == 0)
		html_raw(&h, "<tr><td colspan=\"4\">Nothing metered today yet.</td></tr>");
	html_raw(&h, "</tbody></table>");
	page_end(&h);
	send_page(req, 200, &h);
}

/* A link to the sandboxes page with the given filters and page. */
static void sandboxes_link(struct html *h, const char *state, const char *key, const char *sort,
			   int64_t page)
{
	html_raw(h, "/dashboard/sandboxes?state=");
	html_url_component(h, state);
	html_raw(h, "&amp;key_id=");
	html_url_component(h, key);
	html_raw(h, "&amp;sort=");
	html_url_component(h, sort);
	html_printf(h, "&amp;page=%lld", (long long)page);
}

void h_dash_sandboxes(struct http_req *req)
{
	static const char *const allowed[] = {"state", "key_id", "sort", "page", NULL};
	const char *state = http_query(req, "state"), *key = http_query(req, "key_id");
	const char *sort_s = http_query(req, "sort"), *page_s = http_query(req, "page");
	struct db_dash_sandbox rows[DB_DASH_PAGE];
	enum db_dash_sort sort = DB_DASH_SORT_COST_TODAY;
	int64_t page = 0, total = 0, mstart, mend;
	size_t n = 0;
	struct html h;
	PGconn *conn;
	enum meter_rc rc;
	bool no_key = false;

	if (!http_query_allowed(req, allowed))
		return;
	state = state ? state : "";
	key = key ? key : "";
	sort_s = sort_s && *sort_s ? sort_s : "cost_today";
	if (*state && strcmp(state, "running") != 0 && strcmp(state, "paused") != 0 &&
	    strcmp(state, "stopped") != 0) {
		http_reply_error(req, 400, "invalid_request", "state: running, paused or stopped",
				 json_pack("{s:s}", "field", "state"));
		return;
	}
	if (*key && !parse_is_id(key)) {
		http_reply_error(req, 400, "invalid_request", "key_id: not a valid id",
				 json_pack("{s:s}", "field", "key_id"));
		return;
	}
	if (strcmp(sort_s, "cost_month") == 0) {
		sort = DB_DASH_SORT_COST_MONTH;
	} else if (strcmp(sort_s, "id") == 0) {
		sort = DB_DASH_SORT_ID;
	} else if (strcmp(sort_s, "cost_today") != 0) {
		http_reply_error(req, 400, "invalid_request", "sort: cost_today, cost_month or id",
				 json_pack("{s:s}", "field", "sort"));
		return;
	}
	if (page_s && *page_s && parse_int64(page_s, 0, 100000, &page) != METER_OK) {
		http_reply_error(req, 400, "invalid_request",
				 "page: a whole number from 0 to 100000",
				 json_pack("{s:s}", "field", "page"));
		return;
	}
	conn = page_db(req);
	if (!conn)
		return;
	month_bounds(clock_real_usec(), &mstart, &mend);
	rc = db_dash_sandboxes(conn, page_account(req), state, key, "", sort, page * DB_DASH_PAGE,
			       mstart, rows, &n, &total);
	/* A key filter naming no key of the account is said to be one (and
	 * the page is a 404, as the API's filter is), not an idle key. */
	if (rc == METER_OK && total == 0 && *key) {
		rc = db_key_exists(conn, page_account(req), key);
		no_key = rc == METER_ENOTFOUND;
		if (no_key)
			rc = METER_OK;
	}
	page_db_done(req, conn, rc);
	if (rc != METER_OK) {
		http_reply_error(req, 503, "metering_unavailable", "the database is unreachable",
				 NULL);
		return;
	}
	page_start(&h, req, "Sandboxes");
	html_raw(&h, "<form class=\"filters\" method=\"get\" action=\"/dashboard/sandboxes\">"
		     "<div><label for=\"state\">State</label><select id=\"state\" name=\"state\">");
	{
		static const char *const states[] = {"", "running", "paused", "stopped"};
		for (size_t i = 0; i < 4; i++)
			html_printf(&h, "<option value=\"%s\"%s>%s</option>", states[i],
				    strcmp(states[i], state) == 0 ? " selected" : "",
				    *states[i] ? states[i] : "any");
	}
	html_printf(&h,
		    "</select></div><div><label for=\"key_id\">Key</label><input id=\"key_id\" "
		    "name=\"key_id\" value=\"%s\" size=\"20\"></div><div><label for=\"sort\">Sort"
		    "</label><select id=\"sort\" name=\"sort\"><option value=\"cost_today\"%s>cost "
		    "today</option><option value=\"cost_month\"%s>cost this month</option><option "
		    "value=\"id\"%s>id</option></select></div><div><button type=\"submit\">Show"
		    "</button></div></form>",
		    key, sort == DB_DASH_SORT_COST_TODAY ? " selected" : "",
		    sort == DB_DASH_SORT_COST_MONTH ? " selected" : "",
		    sort == DB_DASH_SORT_ID ? " selected" : "");
	html_printf(&h,
		    "<p><span id=\"sandbox-count\">%lld</span> sandboxes. Today is each key's "
		    "own day; the month is UTC.</p><table><thead><tr><th>Sandbox</th><th>Key</th>"
		    "<th>State</th><th class=\"n\">vCPUs</th><th class=\"n\">Memory MiB</th>"
		    "<th class=\"n\">Avg used m</th><th class=\"n\">Avg billed m</th>"
		    "<th class=\"n\">Cost today</th><th class=\"n\">Cost this month</th></tr>"
		    "</thead><tbody>",
		    (long long)total);
	for (size_t i = 0; i < n; i++) {
		const struct db_dash_sandbox *r = &rows[i];
		html_raw(&h, "<tr>");
		sandbox_cell(&h, r->sandbox_id);
		html_printf(
		    &h,
		    "<td>%s</td><td class=\"state-%s\">%s</td><td "
		    "class=\"n\">%lld</td><td class=\"n\">%lld</td><td class=\"n\">%lld</td>"
		    "<td class=\"n\">%lld</td><td class=\"n\">",
		    r->key_id[0] ? r->key_id : "—", r->state, r->state, (long long)r->vcpus,
		    (long long)r->memory_mib, (long long)r->used_millicores_today,
		    (long long)r->billed_millicores_today);
		html_dollars(&h, r->cost_today_micros);
		html_raw(&h, "</td><td class=\"n\">");
		html_dollars(&h, r->cost_month_micros);
		html_raw(&h, "</td></tr>");
	}
	if (no_key)
		html_printf(&h, "<tr><td colspan=\"9\">No key %s in this account.</td></tr>", key);
	else if (n == 0)
		html_raw(&h, "<tr><td colspan=\"9\">No sandboxes here.</td></tr>");
	html_raw(&h, "</tbody></table><p>");
	if (page > 0) {
		html_raw(&h, "<a rel=\"prev\" href=\"");
		sandboxes_link(&h, state, key, sort_s, page - 1);
		html_raw(&h, "\">Previous</a> ");
	}
	if ((page + 1) * DB_DASH_PAGE < total) {
		html_raw(&h, "<a rel=\"next\" href=\"");
		sandboxes_link(&h, state, key, sort_s, page + 1);
		html_raw(&h, "\">Next</a>");
	}
	html_raw(&h, "</p>");
	page_end(&h);
	send_page(req, no_key ? 404 : 200, &h);
}

/* The sandbox's open holds: what they still reserve of its key's days. */
static void holds_table(struct html *h, const struct db_sandbox_hold *v, size_t n, int64_t total,
			int64_t held)
{
	char from[40], to[40], settles[40];

	html_raw(h, "<h2>Open holds now</h2><p>Held against its key's days: <span id=\"held\">");
	html_dollars(h, held);
	html_printf(h, "</span> in %lld open hold%s%s.</p>", (long long)total,
		    total == 1 ? "" : "s", (size_t)total > n ? " (the oldest shown)" : "");
	if (n == 0)
		return;
	html_raw(h, "<table><thead><tr><th>Day</th><th>Lease (UTC)</th>"
		    "<th class=\"n\">Reserved</th><th class=\"n\">Consumed</th>"
		    "<th class=\"n\">Remaining</th><th>Settles at (UTC)</th></tr></thead><tbody>");
	for (size_t i = 0; i < n; i++) {
		agent_doc_format_time(v[i].lease_starts_at_usec, from, sizeof(from));
		agent_doc_format_time(v[i].lease_ends_at_usec, to, sizeof(to));
		if (v[i].settles_at_usec == INT64_MIN)
			snprintf(settles, sizeof(settles), "while the lease runs");
		else
			agent_doc_format_time(v[i].settles_at_usec, settles, sizeof(settles));
		html_printf(h, "<tr><td>%s</td><td>%s to %s</td><td class=\"n\">", v[i].day, from,
			    to);
		html_dollars(h, v[i].amount_micros);
		html_raw(h, "</td><td class=\"n\">");
		html_dollars(h, v[i].consumed_micros);
		html_raw(h, "</td><td class=\"n\">");
		html_dollars(h, v[i].remaining_micros);
		html_printf(h, "</td><td>%s</td></tr>", settles);
	}
	html_raw(h, "</tbody></table>");
}

void h_dash_sandbox(struct http_req *req)
{
	const char *account = page_account(req), *sandbox = req->params[0];
	int64_t now = clock_real_usec(),
		from = hour_start(now) - (HOURS_SANDBOX - 1) * MONEY_USEC_PER_HOUR;
	int64_t used[HOURS_SANDBOX], mstart, mend, floor_mc = 0;
	struct db_dash_point pts[HOURS_SANDBOX];
	struct html_series s = {used, HOURS_SANDBOX};
	struct db_dash_breakdown b;
	struct db_dash_event ev[EVENTS_MAX];
	struct db_dash_sandbox rows[DB_DASH_PAGE];
	struct db_sandbox_hold *holds = NULL;
	size_t nev = 0, n = 0, nholds = 0;
	int64_t total = 0, holds_total = 0, held = 0;
	struct html h;
	PGconn *conn;
	enum meter_rc rc;
	char at[40], floor_label[40];

	if (!http_query_allowed(req, no_query))
		return;
	conn = page_db(req);
	if (!conn)
		return;
	month_bounds(now, &mstart, &mend);
	rc = db_dash_sandbox_series(conn, account, sandbox, from, HOURS_SANDBOX, pts);
	if (rc == METER_OK)
		rc = db_dash_floor(conn, now, &floor_mc);
	if (rc == METER_OK)
		rc = db_dash_breakdown(conn, account, sandbox, mstart, mend, &b);
	if (rc == METER_OK)
		rc = db_dash_events(conn, account, sandbox, now - 7 * 24 * MONEY_USEC_PER_HOUR,
				    now + MONEY_USEC_PER_HOUR, ev, EVENTS_MAX, &nev);
	/* The sandbox row itself (and whether it is this account's). */
	if (rc == METER_OK)
		rc = db_dash_sandboxes(conn, account, "", "", sandbox, DB_DASH_SORT_ID, 0, mstart,
				       rows, &n, &total);
	if (rc == METER_OK)
		rc = db_sandbox_holds(conn, account, sandbox, &holds, &nholds, &holds_total, &held);
	page_db_done(req, conn, rc);
	if (rc != METER_OK) {
		http_reply_error(req, 503, "metering_unavailable", "the database is unreachable",
				 NULL);
		return;
	}
	(void)total;
	{
		const struct db_dash_sandbox *found = NULL;
		for (size_t i = 0; i < n; i++)
			if (strcmp(rows[i].sandbox_id, sandbox) == 0)
				found = &rows[i];
		if (!found) {
			/* Unknown here, or another account's: the same 404. */
			http_reply_error(req, 404, "not_found", "no such sandbox", NULL);
			free(holds);
			return;
		}
		page_start(&h, req, "Sandbox");
		html_printf(&h, "<p>Sandbox <strong id=\"sandbox-id\">%s</strong>", sandbox);
		if (found)
			html_printf(&h,
				    " · key %s · <span class=\"state-%s\">%s</span> · %lld vCPU · "
				    "%lld MiB reserved",
				    found->key_id[0] ? found->key_id : "—", found->state,
				    found->state, (long long)found->vcpus,
				    (long long)found->memory_mib);
		html_raw(&h, "</p>");
	}
	for (int i = 0; i < HOURS_SANDBOX; i++)
		used[i] = pts[i].used_millicores;
	/* The floor in force now: the price book's, which a new version may
	 * have changed within the 48 hours (each hour is billed at its own). */
	html_printf(&h,
		    "<h2>CPU used against the <span id=\"floor\">%lld</span>-millicore floor, "
		    "last 48 hours (average millicores while running)</h2>",
		    (long long)floor_mc);
	snprintf(floor_label, sizeof(floor_label), "floor %lld m", (long long)floor_mc);
	html_line_chart(&h, "CPU used per hour in millicores, with the floor", &s, floor_mc,
			floor_label, 960, 180);
	html_raw(&h, "<h2>Cost this month (UTC)</h2><table><tbody>");
	{
		static const char *const labels[] = {"CPU used", "CPU floor top-up", "Memory",
						     "Storage (paused)", "Total"};
		const int64_t v[] = {b.cpu_used_micros, b.cpu_floor_micros, b.memory_micros,
				     b.storage_micros, b.total_micros};
		for (int i = 0; i < 5; i++) {
			html_printf(&h, "<tr><th>%s</th><td class=\"n\" id=\"cost-%d\">", labels[i],
				    i);
			html_dollars(&h, v[i]);
			html_raw(&h, "</td></tr>");
		}
	}
	html_printf(&h,
		    "<tr><th>Running</th><td class=\"n\">%lld s</td></tr><tr><th>Paused</th>"
		    "<td class=\"n\">%lld s</td></tr></tbody></table>",
		    (long long)b.running_seconds, (long long)b.paused_seconds);
	holds_table(&h, holds, nholds, holds_total, held);
	free(holds);
	html_raw(&h, "<h2>State changes, last 7 days</h2><table><thead><tr><th>When (UTC)</th>"
		     "<th>State</th></tr></thead><tbody>");
	for (size_t i = 0; i < nev; i++) {
		agent_doc_format_time(ev[i].at_usec, at, sizeof(at));
		html_printf(&h, "<tr><td>%s</td><td class=\"state-%s\">%s</td></tr>", at,
			    ev[i].type, ev[i].type);
	}
	if (nev == 0)
		html_raw(&h, "<tr><td colspan=\"2\">No state changes reported.</td></tr>");
	html_raw(&h, "</tbody></table>");
	page_end(&h);
	send_page(req, 200, &h);
}

void h_dash_keys(struct http_req *req)
{
	struct db_key *keys = NULL;
	size_t n = 0;
	struct html h;
	PGconn *conn;
	enum meter_rc rc;

	if (!http_query_allowed(req, no_query))
		return;
	conn = page_db(req);
	if (!conn)
		return;
	rc = db_key_list(conn, page_account(req), NULL, DB_KEYS_LIST_MAX, &keys, &n);
	page_db_done(req, conn, rc);
	if (rc != METER_OK) {
		http_reply_error(req, 503, "metering_unavailable", "the database is unreachable",
				 NULL);
		return;
	}
	page_start(&h, req, "Keys and limits");
	html_raw(&h, "<table><thead><tr><th>Key</th><th>Role</th><th>Time zone</th>"
		     "<th class=\"n\">Daily limit</th><th>Today</th><th class=\"n\">Spent</th>"
		     "<th class=\"n\">Held</th><th class=\"n\">Remaining</th><th>Status</th></tr>"
		     "</thead><tbody>");
	for (size_t i = 0; i < n; i++) {
		const struct db_key *k = &keys[i];
		html_printf(&h, "<tr><td>%s</td><td>%s</td><td>%s</td><td class=\"n\">", k->key_id,
			    k->role, k->time_zone);
		if (k->has_limit)
			html_dollars(&h, k->daily_limit_micros);
		else
			html_raw(&h, "none");
		html_printf(&h, "</td><td>%s</td><td class=\"n\">", k->day);
		html_dollars(&h, k->day_spent_micros);
		html_raw(&h, "</td><td class=\"n\">");
		html_dollars(&h, k->day_held_micros);
		html_raw(&h, "</td>");
		key_remaining(&h, k);
		html_printf(&h, "<td>%s</td></tr>",
			    k->revoked_at_usec != INT64_MIN ? "revoked" : "active");
	}
	if (n == 0)
		html_raw(&h, "<tr><td colspan=\"9\">No keys.</td></tr>");
	html_raw(&h, "</tbody></table><p class=\"muted\">A full key changes its own limits "
		     "through the API, the operator any key's; this page only shows them.</p>");
	keys_cut_note(&h, n);
	free(keys);
	page_end(&h);
	send_page(req, 200, &h);
}

void h_dash_exports(struct http_req *req)
{
	int64_t now = clock_real_usec(), mstart, mend;
	char from[40], to[40], month[8];
	struct html h;

	if (!http_query_allowed(req, no_query) || !page_has_account(req))
		return;
	month_bounds(now, &mstart, &mend);
	agent_doc_format_time(mstart, from, sizeof(from));
	agent_doc_format_time(hour_start(now) + MONEY_USEC_PER_HOUR, to, sizeof(to));
	/* RFC 3339 seconds only: drop the fraction for readable links. */
	snprintf(from + 19, sizeof(from) - 19, "Z");
	snprintf(to + 19, sizeof(to) - 19, "Z");
	snprintf(month, sizeof(month), "%.7s", from);
	page_start(&h, req, "Exports");
	html_raw(&h, "<p>Downloads of this month so far, straight from the database. The same "
		     "reports come from <code>meterctl report</code>; every total equals the "
		     "ledger's.</p><ul>");
	html_printf(&h,
		    "<li><a href=\"/v1/reports/usage.csv?from=%s&amp;to=%s&amp;granularity=hour\">"
		    "Usage per sandbox per hour (CSV)</a></li>"
		    "<li><a href=\"/v1/reports/usage.csv?from=%s&amp;to=%s&amp;granularity=day\">"
		    "Usage per sandbox per day (CSV)</a></li>"
		    "<li><a href=\"/v1/reports/usage.ndjson?from=%s&amp;to=%s&amp;granularity=hour"
		    "\">Usage per sandbox per hour (NDJSON)</a></li>"
		    "<li><a href=\"/v1/reports/statement.html?month=%s\">Statement %s "
		    "(printable)</a></li><li><a href=\"/v1/reports/statement.csv?month=%s\">"
		    "Statement %s (CSV)</a></li></ul>",
		    from, to, from, to, from, to, month, month, month, month);
	page_end(&h);
	send_page(req, 200, &h);
}
