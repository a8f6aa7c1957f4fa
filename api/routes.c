/* meter API: the routing table and the handlers of the service itself. */
#include "routes.h"

#include <string.h>

#include "app.h"
#include "dbpool.h"

#define READY_TIMEOUT_MS 1000

/* GET /healthz: the process is alive and serving. */
static void h_healthz(struct http_req *req)
{
	json_t *body = json_pack("{s:s}", "status", "ok");

	http_reply_json(req, 200, body);
}

/* GET /readyz: 200 only when the database answers within a second. */
static void h_readyz(struct http_req *req)
{
	if (db_pool_ping(req->app->pool, READY_TIMEOUT_MS) != METER_OK) {
		http_reply_error(req, 503, "metering_unavailable", "database unreachable", NULL);
		return;
	}
	http_reply_json(req, 200, json_pack("{s:s}", "status", "ready"));
}

const struct route routes[] = {
    {.method = "GET", .path = "/healthz", .roles = ROLE_PUBLIC, .handler = h_healthz},
    {.method = "GET", .path = "/readyz", .roles = ROLE_PUBLIC, .handler = h_readyz},
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

enum route_match routes_match(const char *method, const char *path, struct http_req *req,
			      const struct route **out, char *allow, size_t allowlen)
{
	enum route_match result = ROUTE_NO_PATH;
	size_t used = 0;
	char bad[64] = "";

	if (allowlen)
		allow[0] = '\0';
	for (size_t i = 0; i < routes_count; i++) {
		int m = pattern_match(routes[i].path, path, req, bad, sizeof(bad));

		if (m == 0)
			continue;
		if (m < 0) {
			if (result == ROUTE_NO_PATH)
				result = ROUTE_BAD_ID;
			continue;
		}
		if (strcmp(routes[i].method, method) == 0) {
			*out = &routes[i];
			return ROUTE_FOUND;
		}
		result = ROUTE_NO_METHOD;
		if (!strstr(allow, routes[i].method) && used + 8 < allowlen) {
			int w = snprintf(allow + used, allowlen - used, "%s%s", used ? ", " : "",
					 routes[i].method);
			if (w > 0)
				used += (size_t)w;
		}
	}
	if (result == ROUTE_BAD_ID)
		snprintf(allow, allowlen, "%s", bad);
	return result;
}
