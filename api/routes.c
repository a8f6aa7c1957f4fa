/* meter API: the routing table and the handlers of the service itself. */
#include "routes.h"

#include <string.h>

#include "app.h"
#include "checks.h"
#include "dashboard.h"
#include "db.h"
#include "db_util.h"
#include "dbpool.h"
#include "h_accounts.h"
#include "h_checks.h"
#include "h_keys.h"
#include "h_metrics.h"
#include "h_prices.h"
#include "h_reports.h"
#include "h_samples.h"
#include "h_sandboxes.h"
#include "h_usage.h"
#include "h_util.h"
#include "openapi.h"
#include "schema_gate.h"

#define READY_TIMEOUT_MS 1000
#define READY_SHORT_MS	 10000 /* a check refused for lack of resources: not ready that long */

/* GET /healthz: the process is alive and serving. */
static void h_healthz(struct http_req *req)
{
	json_t *body = json_pack("{s:s}", "status", "ok");

	http_reply_json(req, 200, body);
}

enum meter_rc app_db_ping(const struct app *app, int timeout_ms)
{
	enum meter_rc rc;

	db_pool_retry_after(app->pool, checks_engine_connected_ms(app->checks));
	rc = db_pool_ping(app->pool, timeout_ms);
	if (rc == METER_OK)
		checks_engine_db_back(app->checks);
	return rc;
}

/* GET /readyz: 200 only when the database answers within a second
 * (app_db_ping: ready means the next check connects) and its schema is the
 * one this binary's migrations make (not yet migrated, migrated by a newer
 * binary or by another build whose migrations differ, routes would fail on
 * it, or run on SQL this binary was not tested with). */
static void h_readyz(struct http_req *req)
{
	struct schema_state st;
	bool read_only = false, db_answered;
	PGconn *conn = NULL;
	enum meter_rc rc;

	if (app_db_ping(req->app, READY_TIMEOUT_MS) != METER_OK) {
		http_reply_error(req, 503, "metering_unavailable", "database unreachable", NULL);
		return;
	}
	if (!hutil_db_acquire(req, &conn))
		return;
	rc = schema_read_briefly(conn, &st);
	db_answered = rc == METER_EDB && !db_conn_failed(conn);
	if (rc == METER_OK && st.matches) {
		/* A database that takes no writes (a standby, or
		 * default_transaction_read_only) would refuse every check. */
		PGresult *res = NULL;

		rc = db_util_exec(conn, "readyz", "SELECT current_setting('transaction_read_only')",
				  0, NULL, &res, NULL);
		read_only = rc == METER_OK && PQntuples(res) == 1 &&
			    strcmp(PQgetvalue(res, 0, 0), "on") == 0;
		PQclear(res);
	}
	/* A session that found the database read-only is made again next
	 * time: made while default_transaction_read_only was on, it keeps
	 * that for life. */
	db_pool_release(req->app->pool, conn, read_only || db_conn_failed(conn));
	if (rc == METER_ENOMEM) {
		http_reply_error(req, 503, "metering_unavailable", st.why, NULL);
		return;
	}
	if (rc != METER_OK) {
		/* The database answered, but not the reading (its lock wait
		 * given up, say): that is what is said. */
		http_reply_error(req, 503, "metering_unavailable",
				 db_answered ? st.why : "database unreachable", NULL);
		return;
	}
	/* The gate that holds the other routes back takes this reading as its
	 * newest: a schema put right is served from this answer on. */
	schema_gate_note(&st);
	if (!st.matches) {
		http_reply_error(
		    req, 503, "metering_unavailable", st.why,
		    st.versions ? json_pack("{s:I, s:I}", "schema_version", (json_int_t)st.have,
					    "binary_schema_version", (json_int_t)st.want)
				: NULL);
		return;
	}
	if (read_only) {
		http_reply_error(req, 503, "metering_unavailable",
				 "the database takes no writes (a standby, or"
				 " default_transaction_read_only on): no check can be held",
				 NULL);
		return;
	}
	if (db_util_short_lately(READY_SHORT_MS)) {
		http_reply_error(req, 503, "metering_unavailable",
				 "the database refused a check for lack of resources (disk space,"
				 " memory or the like) in the last 10 s, and no check has been held"
				 " since",
				 json_pack("{s:s}", "reason", "insufficient_resources"));
		return;
	}
	http_reply_json(req, 200, json_pack("{s:s}", "status", "ready"));
}

const struct route routes[] = {
    {.method = "GET",
     .path = "/healthz",
     .roles = ROLE_PUBLIC,
     .handler = h_healthz,
     .any_schema = true},
    {.method = "GET",
     .path = "/readyz",
     .roles = ROLE_PUBLIC,
     .handler = h_readyz,
     .lane = ROUTE_LANE_WRITE,
     .any_schema = true},
    {.method = "GET",
     .path = "/v1/openapi.json",
     .roles = ROLE_PUBLIC,
     .handler = h_openapi,
     .any_schema = true},
    {.method = "GET",
     .path = "/metrics",
     .roles = ROLE_PUBLIC,
     .handler = h_metrics,
     .any_schema = true},
    /* Push ingestion: an agent document can be far above 64 KiB. */
    {.method = "POST",
     .path = "/v1/samples",
     .roles = ROLE_AGENT | ROLE_CONTROL_PLANE | ROLE_OPERATOR,
     .max_body = H_SAMPLES_MAX_BODY,
     .handler = h_samples_push,
     .lane = ROUTE_LANE_WRITE},
    /* The dashboard: pages a signed-in browser opens with its session. */
    {.method = "GET",
     .path = "/dashboard",
     .roles = ROLE_PUBLIC,
     .handler = h_dash_root,
     .any_schema = true},
    {.method = "GET",
     .path = "/dashboard/style.css",
     .roles = ROLE_PUBLIC,
     .handler = h_dash_style,
     .any_schema = true},
    {.method = "GET",
     .path = "/favicon.ico",
     .roles = ROLE_PUBLIC,
     .handler = h_dash_favicon,
     .any_schema = true},
    {.method = "GET",
     .path = "/dashboard/sign-in",
     .roles = ROLE_PUBLIC,
     .handler = h_dash_sign_in_form,
     .any_schema = true},
    {.method = "POST",
     .path = "/dashboard/sign-in",
     .roles = ROLE_PUBLIC,
     .max_body = 4096,
     .handler = h_dash_sign_in,
     .lane = ROUTE_LANE_READ},
    {.method = "POST",
     .path = "/dashboard/sign-out",
     .roles = ROLE_PUBLIC,
     .handler = h_dash_sign_out,
     .any_schema = true},
    {.method = "GET",
     .path = "/dashboard/",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_dash_overview,
     .session = true,
     .lane = ROUTE_LANE_READ},
    {.method = "GET",
     .path = "/dashboard/sandboxes",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_dash_sandboxes,
     .session = true,
     .lane = ROUTE_LANE_READ},
    {.method = "GET",
     .path = "/dashboard/sandboxes/{sandbox_id}",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_dash_sandbox,
     .session = true,
     .lane = ROUTE_LANE_READ},
    {.method = "GET",
     .path = "/dashboard/keys",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_dash_keys,
     .session = true,
     .lane = ROUTE_LANE_READ},
    {.method = "GET",
     .path = "/dashboard/exports",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_dash_exports,
     .session = true,
     .lane = ROUTE_LANE_READ},
    {.method = "POST",
     .path = "/v1/accounts",
     .roles = ROLE_OPERATOR,
     .max_body = HTTP_BODY_MAX,
     .handler = h_account_create,
     .lane = ROUTE_LANE_WRITE},
    {.method = "POST",
     .path = "/v1/accounts/{account_id}/keys",
     .roles = ROLE_OPERATOR,
     .max_body = HTTP_BODY_MAX,
     .handler = h_account_key_create,
     .lane = ROUTE_LANE_WRITE},
    {.method = "DELETE",
     .path = "/v1/accounts/{account_id}/keys/{key_id}",
     .roles = ROLE_OPERATOR,
     .handler = h_account_key_revoke,
     .lane = ROUTE_LANE_WRITE},
    {.method = "GET",
     .path = "/v1/keys",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_keys_list,
     .lane = ROUTE_LANE_READ},
    {.method = "GET",
     .path = "/v1/keys/{key_id}",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_key_get,
     .lane = ROUTE_LANE_READ},
    {.method = "PUT",
     .path = "/v1/keys/{key_id}/limits",
     .roles = ROLE_FULL | ROLE_OPERATOR,
     .max_body = HTTP_BODY_MAX,
     .handler = h_key_limits,
     .lane = ROUTE_LANE_WRITE},
    {.method = "GET",
     .path = "/v1/sandboxes",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_sandboxes_list,
     .lane = ROUTE_LANE_READ},
    {.method = "GET",
     .path = "/v1/sandboxes/{sandbox_id}",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_sandbox_get,
     .lane = ROUTE_LANE_READ},
    {.method = "GET",
     .path = "/v1/sandboxes/{sandbox_id}/usage",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_sandbox_usage,
     .lane = ROUTE_LANE_READ},
    {.method = "GET",
     .path = "/v1/usage",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_usage_get,
     .lane = ROUTE_LANE_READ},
    {.method = "GET",
     .path = "/v1/prices",
     .roles = ROLE_OPERATOR | ROLE_CONTROL_PLANE | ROLE_FULL | ROLE_READ_ONLY,
     .handler = h_prices_get,
     .lane = ROUTE_LANE_READ},
    {.method = "PUT",
     .path = "/v1/prices",
     .roles = ROLE_OPERATOR,
     .max_body = HTTP_BODY_MAX,
     .handler = h_prices_put,
     .lane = ROUTE_LANE_WRITE},
    {.method = "GET",
     .path = "/v1/reports/usage.csv",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_report_usage_csv,
     .session = true,
     .lane = ROUTE_LANE_READ},
    {.method = "GET",
     .path = "/v1/reports/usage.ndjson",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_report_usage_ndjson,
     .session = true,
     .lane = ROUTE_LANE_READ},
    {.method = "GET",
     .path = "/v1/reports/statement.csv",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_report_statement_csv,
     .session = true,
     .lane = ROUTE_LANE_READ},
    {.method = "GET",
     .path = "/v1/reports/statement.html",
     .roles = ROLE_FULL | ROLE_READ_ONLY | ROLE_OPERATOR,
     .handler = h_report_statement_html,
     .session = true,
     .lane = ROUTE_LANE_READ},
    {.method = "POST",
     .path = "/v1/checks/create",
     .roles = ROLE_CONTROL_PLANE,
     .max_body = HTTP_BODY_MAX,
     .handler = h_checks_create},
    {.method = "POST",
     .path = "/v1/checks/wake",
     .roles = ROLE_CONTROL_PLANE,
     .max_body = HTTP_BODY_MAX,
     .handler = h_checks_wake},
    {.method = "POST",
     .path = "/v1/sandboxes/{sandbox_id}/events",
     .roles = ROLE_CONTROL_PLANE,
     .max_body = HTTP_BODY_MAX,
     .handler = h_sandbox_event,
     .lane = ROUTE_LANE_WRITE},
};

const size_t routes_count = sizeof(routes) / sizeof(routes[0]);

/* Compares one path against one pattern. 1 = match, 0 = no match,
 * -1 = the shape matches but a parameter is not a valid id (its name is
 * copied to bad). Parameters go to req->params. */
static int pattern_match(const char *pattern, const char *path, struct http_req *req, char *bad,
			 size_t badlen)
{
	int n = 0;

	while (*pattern && *path) {
		if (*pattern != '/' || *path != '/')
			return 0;
		pattern++;
		path++;
		if (*pattern == '{') {
			const char *pend = strchr(pattern, '}');
			size_t seglen = strcspn(path, "/");

			if (!pend || n >= HTTP_PARAMS_MAX)
				return 0;
			if (seglen == 0)
				return 0;
			if (seglen > PARSE_ID_MAX) {
				snprintf(bad, badlen, "%.*s", (int)(pend - pattern - 1),
					 pattern + 1);
				return -1;
			}
			memcpy(req->params[n], path, seglen);
			req->params[n][seglen] = '\0';
			if (!parse_is_id(req->params[n])) {
				snprintf(bad, badlen, "%.*s", (int)(pend - pattern - 1),
					 pattern + 1);
				return -1;
			}
			n++;
			pattern = pend + 1;
			path += seglen;
		} else {
			size_t plen = strcspn(pattern, "/");
			if (strncmp(pattern, path, plen) != 0 || (path[plen] != '/' && path[plen]))
				return 0;
			pattern += plen;
			path += plen;
		}
	}
	if (*pattern || *path)
		return 0;
	req->nparams = n;
	return 1;
}

/* With api off (a collector-only process), only the operational routes are
 * served; every other path is 404. */
static bool route_enabled(const struct http_req *req, const struct route *r)
{
	if (!req->app || !req->app->cfg || req->app->cfg->api)
		return true;
	return strcmp(r->path, "/healthz") == 0 || strcmp(r->path, "/readyz") == 0 ||
	       strcmp(r->path, "/metrics") == 0;
}

enum route_match routes_match(const char *method, const char *path, struct http_req *req,
			      const struct route **out, char *allow, size_t allowlen)
{
	enum route_match result = ROUTE_NO_PATH;
	size_t used = 0;
	char bad[64] = "";

	if (allowlen)
		allow[0] = '\0';
	for (size_t i = 0; i < routes_count; i++) {
		int m;

		if (!route_enabled(req, &routes[i]))
			continue;
		m = pattern_match(routes[i].path, path, req, bad, sizeof(bad));

		if (m == 0)
			continue;
		if (m < 0) {
			if (result == ROUTE_NO_PATH)
				result = ROUTE_BAD_ID;
			continue;
		}
		/* HEAD is a GET without the body (which the server does not
		 * send for it). */
		if (strcmp(routes[i].method, method) == 0 ||
		    (strcmp(method, "HEAD") == 0 && strcmp(routes[i].method, "GET") == 0)) {
			*out = &routes[i];
			return ROUTE_FOUND;
		}
		result = ROUTE_NO_METHOD;
		if (!strstr(allow, routes[i].method) && used + 14 < allowlen) {
			int w = snprintf(allow + used, allowlen - used, "%s%s%s", used ? ", " : "",
					 routes[i].method,
					 strcmp(routes[i].method, "GET") == 0 ? ", HEAD" : "");
			if (w > 0)
				used += (size_t)w;
		}
	}
	if (result == ROUTE_BAD_ID)
		snprintf(allow, allowlen, "%s", bad);
	return result;
}
