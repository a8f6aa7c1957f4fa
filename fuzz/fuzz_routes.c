/* Fuzzer: path routing (api/routes.c routes_match).
 *
 * Input: "METHOD PATH" (the method is what comes before the first space;
 * the path stops at a NUL, as libmicrohttpd hands it over). The first byte
 * of the input, when it is '!', runs with the API off (a collector-only
 * process: operational routes only).
 *
 * Invariants: routes_match agrees with an independent matcher written here
 * (segment by segment); a found route has the method asked for (or is
 * the GET route a HEAD asks for), and its path rebuilt from the pattern
 * and the captured parameters is the path given, each parameter a valid
 * id; a 405's Allow lists only methods that do route that path; a 400
 * names a parameter of some pattern. */
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "fuzz.h"
#include "routes.h"

/* The independent matcher: 1 match, 0 no match, -1 when the path matches
 * the pattern up to a parameter segment that is not an id (the rest of the
 * path is then not looked at: a bad id is a 400 however the path goes on).
 * Segments are compared whole: "/a/{x}" against "/a/b". */
static int oracle_match(const char *pattern, const char *path)
{
	while (*pattern == '/' && *path == '/') {
		size_t plen = strcspn(pattern + 1, "/"), slen = strcspn(path + 1, "/");

		if (pattern[1] == '{') {
			char seg[PARSE_ID_MAX + 1];

			if (slen == 0)
				return 0;
			if (slen > PARSE_ID_MAX)
				return -1;
			memcpy(seg, path + 1, slen);
			seg[slen] = '\0';
			if (!parse_is_id(seg))
				return -1;
		} else if (plen != slen || memcmp(pattern + 1, path + 1, plen) != 0) {
			return 0;
		}
		pattern += 1 + plen;
		path += 1 + slen;
	}
	return *pattern == '\0' && *path == '\0';
}

/* A request's method takes a route of route_method: the same, or HEAD on a
 * GET route (a GET without the body). */
static bool method_takes(const char *route_method, const char *method)
{
	return strcmp(route_method, method) == 0 ||
	       (strcmp(method, "HEAD") == 0 && strcmp(route_method, "GET") == 0);
}

static bool enabled(const struct route *r, bool api)
{
	return api || strcmp(r->path, "/healthz") == 0 || strcmp(r->path, "/readyz") == 0 ||
	       strcmp(r->path, "/metrics") == 0;
}

/* The pattern with the captured parameters put back. */
static void rebuild(const struct route *r, const struct http_req *req, char *out, size_t len)
{
	size_t used = 0;
	int n = 0;

	for (const char *p = r->path; *p && used + 1 < len;) {
		if (*p == '{') {
			const char *v = req->params[n++];
			size_t vl = strlen(v);

			FUZZ_CHECK(used + vl < len);
			memcpy(out + used, v, vl);
			used += vl;
			p = strchr(p, '}') + 1;
		} else {
			out[used++] = *p++;
		}
	}
	out[used] = '\0';
	FUZZ_CHECK(n == req->nparams);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct meter_config cfg;
	struct app app = {.cfg = &cfg};
	struct http_req req;
	const struct route *route = NULL;
	char allow[64], rebuilt[8192];
	char *text, *space, *method, *path;
	bool api = true;
	int oracle_found = 0, oracle_methods = 0, oracle_bad = 0;
	enum route_match m;

	if (size > 4096)
		return 0;
	text = fuzz_strndup(data, size);
	method = text;
	if (*method == '!') {
		api = false;
		method++;
	}
	space = strchr(method, ' ');
	if (!space) {
		free(text);
		return 0;
	}
	*space = '\0';
	path = space + 1;
	memset(&cfg, 0, sizeof(cfg));
	cfg.api = api;
	memset(&req, 0, sizeof(req));
	req.app = &app;
	m = routes_match(method, path, &req, &route, allow, sizeof(allow));

	for (size_t i = 0; i < routes_count; i++) {
		int o;

		if (!enabled(&routes[i], api))
			continue;
		o = oracle_match(routes[i].path, path);
		if (o > 0 && method_takes(routes[i].method, method))
			oracle_found++;
		else if (o > 0)
			oracle_methods++;
		else if (o < 0)
			oracle_bad++;
	}
	switch (m) {
	case ROUTE_FOUND:
		FUZZ_CHECK(oracle_found > 0);
		FUZZ_CHECK(route != NULL && method_takes(route->method, method));
		FUZZ_CHECK(enabled(route, api));
		for (int i = 0; i < req.nparams; i++)
			FUZZ_CHECK(parse_is_id(req.params[i]));
		rebuild(route, &req, rebuilt, sizeof(rebuilt));
		FUZZ_CHECK(strcmp(rebuilt, path) == 0);
		break;
	case ROUTE_NO_METHOD:
		FUZZ_CHECK(oracle_found == 0 && oracle_methods > 0);
		FUZZ_CHECK(allow[0] != '\0');
		/* Every method listed routes this very path. */
		for (char *tok = allow; *tok;) {
			size_t len = strcspn(tok, ",");
			char other[16];
			const struct route *r2 = NULL;
			struct http_req req2;
			char allow2[64];

			FUZZ_CHECK(len > 0 && len < sizeof(other));
			memcpy(other, tok, len);
			other[len] = '\0';
			FUZZ_CHECK(strcmp(other, method) != 0);
			memset(&req2, 0, sizeof(req2));
			req2.app = &app;
			FUZZ_CHECK(routes_match(other, path, &req2, &r2, allow2, sizeof(allow2)) ==
				   ROUTE_FOUND);
			tok += len;
			if (*tok == ',')
				tok += 2; /* ", " */
		}
		break;
	case ROUTE_BAD_ID: {
		bool named = false;
		char brace[80];

		FUZZ_CHECK(oracle_found == 0 && oracle_methods == 0 && oracle_bad > 0);
		snprintf(brace, sizeof(brace), "{%s}", allow);
		for (size_t i = 0; i < routes_count; i++)
			if (strstr(routes[i].path, brace))
				named = true;
		FUZZ_CHECK(allow[0] != '\0' && named);
		break;
	}
	case ROUTE_NO_PATH:
		FUZZ_CHECK(oracle_found == 0 && oracle_methods == 0 && oracle_bad == 0);
		break;
	default:
		FUZZ_CHECK(!"unknown route_match");
	}
	free(text);
	return 0;
}
