/* Unit: the embedded OpenAPI document against the routing table. Every
 * route is documented under its path and method with the same roles in
 * x-meter-roles; every documented operation is a route; path parameters
 * agree; every $ref resolves. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "http.h"
#include "openapi.h"
#include "openapi_check.h"
#include "routes.h"

static const struct {
	unsigned bit;
	const char *name;
} role_names[] = {
    {ROLE_OPERATOR, "operator"}, {ROLE_CONTROL_PLANE, "control_plane"},
    {ROLE_FULL, "full"},	 {ROLE_READ_ONLY, "read_only"},
    {ROLE_PUBLIC, "public"},	 {ROLE_AGENT, "agent"},
};

static const char *const methods[] = {"get", "put", "post", "delete", "patch", "head", NULL};

/* The role bits named by a JSON array of role names; ~0u when malformed. */
static unsigned roles_of(const json_t *arr)
{
	unsigned bits = 0;
	size_t i;
	json_t *v;

	if (!json_is_array(arr))
		return ~0u;
	json_array_foreach(arr, i, v)
	{
		size_t r;

		for (r = 0; r < sizeof(role_names) / sizeof(role_names[0]); r++)
			if (json_is_string(v) &&
			    strcmp(json_string_value(v), role_names[r].name) == 0)
				break;
		if (r == sizeof(role_names) / sizeof(role_names[0]) || (bits & role_names[r].bit))
			return ~0u; /* unknown or repeated */
		bits |= role_names[r].bit;
	}
	return bits;
}

/* method in lower case into out. */
static void lower(const char *s, char *out, size_t len)
{
	size_t n = 0;

	for (; *s && n + 1 < len; s++)
		out[n++] = (char)(*s >= 'A' && *s <= 'Z' ? *s - 'A' + 'a' : *s);
	out[n] = '\0';
}

/* True when op declares exactly the {…} parameters of path as path
 * parameters (required). */
static bool path_params_agree(const char *path, const json_t *op, const json_t *item)
{
	int want = 0, got = 0, declared = 0;
	const char *p = path;
	json_t *lists[2] = {json_object_get(op, "parameters"), json_object_get(item, "parameters")};

	while ((p = strchr(p, '{')) != NULL) {
		const char *e = strchr(p, '}');
		bool found = false;

		if (!e)
			return false;
		for (int l = 0; l < 2; l++) {
			size_t i;
			json_t *prm;

			json_array_foreach(lists[l], i, prm)
			{
				const char *name = json_string_value(json_object_get(prm, "name"));
				const char *in = json_string_value(json_object_get(prm, "in"));

				if (name && in && strcmp(in, "path") == 0 &&
				    strlen(name) == (size_t)(e - p - 1) &&
				    strncmp(name, p + 1, (size_t)(e - p - 1)) == 0 &&
				    json_is_true(json_object_get(prm, "required")))
					found = true;
			}
		}
		if (!found)
			fprintf(stderr, "%s: path parameter %.*s not declared\n", path,
				(int)(e - p - 1), p + 1);
		want++;
		got += found;
		p = e + 1;
	}
	for (int l = 0; l < 2; l++) {
		size_t i;
		json_t *prm;

		json_array_foreach(lists[l], i, prm)
		{
			const char *in = json_string_value(json_object_get(prm, "in"));

			if (in && strcmp(in, "path") == 0)
				declared++; /* no path parameter the path lacks */
		}
	}
	return want == got && declared == want;
}

/* The security schemes an operation lists: 1 bearer, 2 session. */
static int security_schemes(const json_t *security)
{
	size_t i;
	json_t *alt;
	int bits = 0;

	json_array_foreach(security, i, alt)
	{
		bits |= json_object_get(alt, "bearer") ? 1 : 0;
		bits |= json_object_get(alt, "session") ? 2 : 0;
	}
	return bits;
}

/* Every "$ref" under v resolves to a member of doc; and no member of an
 * "allOf" (itself or the schema its $ref names) closes its object with
 * "additionalProperties": false, which under JSON Schema 2020-12 refuses
 * the properties of the other members: every instance of the whole would
 * fail (close the whole with unevaluatedProperties instead). Recursive, as
 * deep as the checked-in document.
 * NOLINTNEXTLINE(misc-no-recursion) */
static void check_refs(const json_t *doc, const json_t *v, int *bad)
{
	const char *key;
	json_t *child;
	size_t i;

	if (json_is_object(v)) {
		json_object_foreach((json_t *)v, key, child)
		{
			if (strcmp(key, "$ref") == 0 && json_is_string(child)) {
				const char *ref = json_string_value(child);

				if (!openapi_check_resolve(doc, ref)) {
					fprintf(stderr, "unresolved $ref %s\n", ref);
					(*bad)++;
				}
				continue;
			}
			if (strcmp(key, "allOf") == 0 && json_is_array(child)) {
				size_t k;
				json_t *m;

				json_array_foreach(child, k, m)
				{
					const json_t *r = json_object_get(m, "$ref");
					const json_t *s =
					    r ? openapi_check_resolve(doc, json_string_value(r))
					      : m;

					if (json_is_false(
						json_object_get(s, "additionalProperties"))) {
						fprintf(stderr, "allOf member %zu is closed\n", k);
						(*bad)++;
					}
				}
			}
			check_refs(doc, child, bad);
		}
	} else if (json_is_array(v)) {
		json_array_foreach((json_t *)v, i, child) check_refs(doc, child, bad);
	}
}

/* The checker the API tests hold every answer to (openapi_check.h), held
 * to cases of its own against this document: it must pass what conforms
 * and catch each way of not conforming. */
static void test_checker(const json_t *doc)
{
	static const struct {
		const char *schema; /* a component schema's name */
		const char *json;
		bool ok;
	} cases[] = {
	    {"Error", "{\"error\":{\"code\":\"not_found\",\"message\":\"m\"}}", true},
	    {"Error", "{\"error\":{\"code\":\"no_such_code\",\"message\":\"m\"}}", false},
	    {"Error", "{\"error\":{\"code\":\"not_found\"}}", false},
	    {"Error", "{\"error\":{\"code\":\"not_found\",\"message\":\"m\",\"extra\":1}}", false},
	    {"Error", "{\"error\":{\"code\":\"not_found\",\"message\":\"m\"},\"x\":1}", false},
	    {"Error", "{\"error\":{\"code\":\"conflict\",\"message\":\"m\",\"max_bytes\":-1}}",
	     false},
	    {"Error",
	     "{\"error\":{\"code\":\"conflict\",\"message\":\"m\",\"day\":\"05/12/2026\"}}", false},
	    {"Error",
	     "{\"error\":{\"code\":\"conflict\",\"message\":\"m\",\"day\":\"2026-12-05\"}}", true},
	    {"Error", "{\"error\":{\"code\":\"conflict\",\"message\":\"m\",\"key_id\":\"a/b\"}}",
	     false},
	    {"Error", "{\"error\":{\"code\":\"conflict\",\"message\":\"m\",\"timeout_ms\":1.5}}",
	     false},
	    {"Error",
	     "{\"error\":{\"code\":\"conflict\",\"message\":\"m\",\"latest_lease_ends_at\":"
	     "\"2026-12-05T10:00:00.5+01:00\"}}",
	     true},
	    {"Error",
	     "{\"error\":{\"code\":\"conflict\",\"message\":\"m\",\"latest_lease_ends_at\":"
	     "\"2026-12-05 10:00:00\"}}",
	     false},
	    {"Status", "{\"status\":\"ok\"}", true},
	    {"Status", "[]", false},
	};
	char err[512];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char ref[128];
		json_t *schema, *x = json_loads(cases[i].json, 0, NULL);
		bool ok;

		snprintf(ref, sizeof(ref), "#/components/schemas/%s", cases[i].schema);
		schema = json_pack("{s:s}", "$ref", ref);
		ok = x && schema && openapi_check_schema(doc, schema, x, err, sizeof(err));
		if (ok != cases[i].ok)
			fprintf(stderr, "checker case %zu (%s %s): %s, want %s: %s\n", i,
				cases[i].schema, cases[i].json, ok ? "valid" : "invalid",
				cases[i].ok ? "valid" : "invalid", err);
		CHECK_I64(ok, cases[i].ok);
		json_decref(schema);
		json_decref(x);
	}

	/* Whole answers: status, media type, headers, body. */
	{
		static const char hdr_json[] =
		    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: r1\r\n\r\n";
		static const char hdr_noid[] =
		    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n";
		static const char hdr_text[] =
		    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Request-Id: r1\r\n\r\n";
		static const char hdr_405[] = "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: "
					      "application/json\r\nX-Request-Id: r1\r\n\r\n";
		static const char body[] = "{\"status\":\"ok\"}";
		static const char e405[] = "{\"error\":{\"code\":\"method_not_allowed\","
					   "\"message\":\"m\",\"allow\":\"GET\"}}";
		json_t *ok_json = json_loads(body, 0, NULL), *j405 = json_loads(e405, 0, NULL);

		CHECK(openapi_check_response(doc, "GET", "/healthz", 200, hdr_json, body,
					     strlen(body), ok_json, err, sizeof(err)));
		CHECK(openapi_check_response(doc, "HEAD", "/healthz?x=1", 200, hdr_json, "", 0,
					     NULL, err, sizeof(err)));
		CHECK(!openapi_check_response(doc, "GET", "/healthz", 418, hdr_json, body,
					      strlen(body), ok_json, err, sizeof(err)));
		CHECK(!openapi_check_response(doc, "GET", "/healthz", 200, hdr_noid, body,
					      strlen(body), ok_json, err, sizeof(err)));
		CHECK(!openapi_check_response(doc, "GET", "/healthz", 200, hdr_text, body,
					      strlen(body), ok_json, err, sizeof(err)));
		CHECK(!openapi_check_response(doc, "GET", "/healthz", 200, hdr_json, "x", 1, NULL,
					      err, sizeof(err)));
		/* An undocumented method's 405 is held to MethodNotAllowed:
		 * which carries Allow. */
		CHECK(!openapi_check_response(doc, "PATCH", "/healthz", 405, hdr_405, e405,
					      strlen(e405), j405, err, sizeof(err)));
		/* A path the document does not have is not judged. */
		CHECK(openapi_check_response(doc, "GET", "/nowhere/at/all", 404, hdr_text, "x", 1,
					     NULL, err, sizeof(err)));
		json_decref(ok_json);
		json_decref(j405);
	}
}

/* Every operation, of the paths and of the webhooks, has an operationId
 * (what a client generator names its functions by): lower camel case, and
 * no two alike. */
static void test_operation_ids(const json_t *doc)
{
	const char *const groups[] = {"paths", "webhooks"};
	const char *seen[128];
	size_t nseen = 0;

	for (size_t g = 0; g < 2; g++) {
		const char *name, *m;
		json_t *item, *op;

		CHECK(json_is_object(json_object_get(doc, groups[g])));
		json_object_foreach(json_object_get(doc, groups[g]), name, item)
		{
			json_object_foreach(item, m, op)
			{
				const char *id;
				bool is_method = false, shaped;

				for (int k = 0; methods[k]; k++)
					is_method |= strcmp(methods[k], m) == 0;
				if (!is_method)
					continue;
				id = json_string_value(json_object_get(op, "operationId"));
				shaped = id && id[0] >= 'a' && id[0] <= 'z';
				for (const char *c = id; shaped && *c; c++)
					shaped = (*c >= 'a' && *c <= 'z') ||
						 (*c >= 'A' && *c <= 'Z') ||
						 (*c >= '0' && *c <= '9');
				if (!shaped)
					fprintf(stderr, "%s %s %s: operationId %s\n", groups[g], m,
						name, id ? id : "missing");
				CHECK(shaped);
				for (size_t i = 0; id && i < nseen; i++)
					if (strcmp(seen[i], id) == 0) {
						fprintf(stderr, "operationId %s given twice\n", id);
						CHECK(false);
					}
				if (id && nseen < sizeof(seen) / sizeof(seen[0]))
					seen[nseen++] = id;
			}
		}
	}
	CHECK(nseen >= 2);
}

int main(void)
{
	json_error_t jerr;
	json_t *doc = json_loadb(openapi_json, openapi_json_len, JSON_REJECT_DUPLICATES, &jerr);
	json_t *paths, *item;
	const char *path;
	int bad_refs = 0;

	if (!doc) {
		fprintf(stderr, "openapi.json: line %d: %s\n", jerr.line, jerr.text);
		CHECK(doc != NULL);
		return check_done();
	}
	CHECK_I64(strlen(openapi_json), openapi_json_len);
	CHECK_STR(json_string_value(json_object_get(doc, "openapi")), "3.1.0");
	paths = json_object_get(doc, "paths");
	CHECK(json_is_object(paths));

	/* Every route is documented with the same roles. */
	for (size_t i = 0; i < routes_count; i++) {
		char m[16];
		json_t *op;

		lower(routes[i].method, m, sizeof(m));
		item = json_object_get(paths, routes[i].path);
		op = json_object_get(item, m);
		if (!op)
			fprintf(stderr, "route %s %s is not documented\n", routes[i].method,
				routes[i].path);
		CHECK(op != NULL);
		if (!op)
			continue;
		if (roles_of(json_object_get(op, "x-meter-roles")) != routes[i].roles)
			fprintf(stderr, "route %s %s: x-meter-roles differ from the table\n",
				routes[i].method, routes[i].path);
		CHECK_I64(roles_of(json_object_get(op, "x-meter-roles")), routes[i].roles);
		CHECK(json_is_object(json_object_get(op, "responses")));
		CHECK(path_params_agree(routes[i].path, op, item));
		/* A public route needs no credentials; others a bearer token. */
		CHECK(json_is_array(json_object_get(op, "security")));
		CHECK_I64(json_array_size(json_object_get(op, "security")) == 0,
			  routes[i].roles == ROLE_PUBLIC);
		/* A route that takes a body documents it. */
		CHECK_I64(json_object_get(op, "requestBody") != NULL, routes[i].max_body > 0);
		/* The server answers a wrong method (405) and a body over the
		 * cap, or any body where none is taken (413), on every route. */
		CHECK(json_object_get(json_object_get(op, "responses"), "405") != NULL);
		CHECK(json_object_get(json_object_get(op, "responses"), "413") != NULL);
		/* Nor any request while it shuts down (503). */
		CHECK(json_object_get(json_object_get(op, "responses"), "503") != NULL);
		/* And a fault of its own on any (500 internal). */
		CHECK(json_object_get(json_object_get(op, "responses"), "500") != NULL);
		/* Every answer carries its request's id. */
		{
			const char *st;
			json_t *resp;

			json_object_foreach(json_object_get(op, "responses"), st, resp)
			{
				const char *ref = json_string_value(json_object_get(resp, "$ref"));
				const json_t *r = ref ? openapi_check_resolve(doc, ref) : resp;

				if (!json_object_get(json_object_get(r, "headers"), "X-Request-Id"))
					fprintf(stderr, "%s %s %s: no X-Request-Id\n",
						routes[i].method, routes[i].path, st);
				CHECK(json_object_get(json_object_get(r, "headers"),
						      "X-Request-Id") != NULL);
			}
		}
		/* A route a session may call takes the bearer token too (the
		 * cookie stands for it only when no Authorization is sent). */
		if (routes[i].session && routes[i].roles != ROLE_PUBLIC) {
			if (security_schemes(json_object_get(op, "security")) != 3)
				fprintf(stderr, "route %s %s: session and bearer not both listed\n",
					routes[i].method, routes[i].path);
			CHECK_I64(security_schemes(json_object_get(op, "security")), 3);
		}
	}

	/* Every documented operation is served. */
	json_object_foreach(paths, path, item)
	{
		const char *m;
		json_t *op;

		json_object_foreach(item, m, op)
		{
			size_t i;
			char rm[16];
			bool is_method = false;

			for (int k = 0; methods[k]; k++)
				is_method |= strcmp(methods[k], m) == 0;
			if (!is_method)
				continue; /* "parameters", "summary", ... */
			for (i = 0; i < routes_count; i++) {
				lower(routes[i].method, rm, sizeof(rm));
				if (strcmp(routes[i].path, path) == 0 && strcmp(rm, m) == 0)
					break;
			}
			if (i == routes_count)
				fprintf(stderr, "documented %s %s is not a route\n", m, path);
			CHECK(i < routes_count);
		}
	}

	check_refs(doc, doc, &bad_refs);
	CHECK_I64(bad_refs, 0);
	test_operation_ids(doc);
	test_checker(doc);
	json_decref(doc);
	return check_done();
}
