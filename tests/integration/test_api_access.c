/* API access rules, walking the routing table so that a route added later is
 * covered without editing this test:
 *   - a read_only key gets 403 read_only_key on every mutating route;
 *   - a key of another account gets 404 on every route with an id of this
 *     account that its role may call;
 *   - every role a route does not allow gets 403, and the roles it allows
 *     get past authorization;
 *   - no or a garbage Authorization header gets 401;
 *   - an account key's look-up never holds up an HTTP thread: with the
 *     keys' table locked, unknown keys on routes of every lane wait while
 *     the routes the HTTP threads answer alone still answer at once;
 *   - no token or secret appears in any response or in the access log. */
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "apitest.h"
#include "check.h"
#include "checks_util.h"
#include "rawhttp.h"
#include "routes.h"

static struct apitest t;
static char acc[65], accb[65], kf[65], kr[65], kbf[65], kbr[65];
static char tf[APITEST_TOKEN_MAX], tr[APITEST_TOKEN_MAX], tbf[APITEST_TOKEN_MAX],
    tbr[APITEST_TOKEN_MAX];
/* A key of account A that the route revoking keys is given (the roles'
 * walk revokes it): kf and kr serve every other route. */
static char kv[65], tv[APITEST_TOKEN_MAX];
static char sbx[] = "sbx_own";
static char checks_create_body[512], checks_wake_body[256];

/* Everything every response said, to look for leaked tokens at the end. */
static char *seen;
static size_t seen_len;

static void remember(const struct apitest_resp *r)
{
	size_t add = strlen(r->headers) + r->body_len + 2;
	char *g = realloc(seen, seen_len + add + 1);

	if (!g)
		return;
	seen = g;
	memcpy(seen + seen_len, r->headers, strlen(r->headers));
	seen_len += strlen(r->headers);
	seen[seen_len++] = '\n';
	/* Bodies may hold NUL bytes in theory; copy them as they are. */
	memcpy(seen + seen_len, r->body, r->body_len);
	seen_len += r->body_len;
	seen[seen_len++] = '\n';
	seen[seen_len] = '\0';
}

/* A concrete path of route: each {name} gets an id of account A. */
static void fill_path(const struct route *route, char *out, size_t len)
{
	const char *p = route->path;
	size_t n = 0;

	while (*p && n + 1 < len) {
		if (*p == '{') {
			const char *e = strchr(p, '}');
			size_t nl = e ? (size_t)(e - p - 1) : 0;
			const char *v = "own_id";
			int w;

			if (nl == 10 && strncmp(p + 1, "account_id", nl) == 0)
				v = acc;
			else if (nl == 6 && strncmp(p + 1, "key_id", nl) == 0)
				v = strcmp(route->method, "DELETE") == 0 ? kv : kf;
			else if (nl == 10 && strncmp(p + 1, "sandbox_id", nl) == 0)
				v = sbx;
			w = snprintf(out + n, len - n, "%s", v);
			if (w < 0 || (size_t)w >= len - n)
				break;
			n += (size_t)w;
			p = e ? e + 1 : p + strlen(p);
		} else {
			out[n++] = *p++;
		}
	}
	out[n] = '\0';
}

/* A valid-looking body for a mutating route ("{}" for one not listed). */
static const char *body_for(const struct route *route)
{
	static const struct {
		const char *method, *path, *body;
	} bodies[] = {
	    {"POST", "/v1/accounts", "{\"name\":\"access test\"}"},
	    {"POST", "/v1/accounts/{account_id}/keys", "{\"role\":\"read_only\"}"},
	    {"PUT", "/v1/keys/{key_id}/limits", "{\"daily_limit_micros\":1000000}"},
	    {"PUT", "/v1/prices",
	     "{\"effective_from\":\"2999-01-01T00:00:00Z\",\"cpu_micros_per_vcpu_hour\":25000,"
	     "\"memory_micros_per_gib_hour\":7500,\"storage_micros_per_gib_hour\":100,"
	     "\"floor_millicores\":50,\"free_sandbox_hours\":50}"},
	    {"POST", "/v1/checks/create", checks_create_body},
	    {"POST", "/v1/checks/wake", checks_wake_body},
	    {"POST", "/v1/sandboxes/{sandbox_id}/events",
	     "{\"type\":\"paused\",\"at\":\"2026-01-01T00:00:00Z\"}"},
	    {"POST", "/v1/samples",
	     "{\"host_id\":\"h1\",\"sampled_at\":\"2026-01-01T00:00:00Z\",\"sandboxes\":[]}"},
	};

	if (strcmp(route->method, "GET") == 0 || strcmp(route->method, "HEAD") == 0 ||
	    route->max_body == 0)
		return NULL; /* a route with no body cap takes no body */
	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
		if (strcmp(bodies[i].method, route->method) == 0 &&
		    strcmp(bodies[i].path, route->path) == 0)
			return bodies[i].body;
	return "{}";
}

static bool mutating(const struct route *route)
{
	return strcmp(route->method, "GET") != 0 && strcmp(route->method, "HEAD") != 0;
}

/* Calls route (path filled, body as body_for) with token; remembers it. */
static struct apitest_resp call_route(const struct route *route, const char *token)
{
	char path[512];
	struct apitest_resp r;

	fill_path(route, path, sizeof(path));
	apitest_call(&t, 0, route->method, path, token, body_for(route), &r);
	remember(&r);
	return r;
}

static void setup(void)
{
	char sql[512];

	CHECK(apitest_create_account(&t, "A", acc) == 0);
	CHECK(apitest_create_account(&t, "B", accb) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 10000000, NULL, kf, tf) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, kr, tr) == 0);
	CHECK(apitest_create_key(&t, accb, "full", -1, NULL, kbf, tbf) == 0);
	CHECK(apitest_create_key(&t, accb, "read_only", -1, NULL, kbr, tbr) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, kv, tv) == 0);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state)"
		 " VALUES ('%s', '%s', '%s', 1, 512, 'paused')",
		 acc, sbx, kf);
	CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
	snprintf(checks_create_body, sizeof(checks_create_body),
		 "{\"key_id\":\"%s\",\"sandbox_id\":\"sbx_new\",\"vcpus\":1,\"memory_mib\":512,"
		 "\"lease_seconds\":60}",
		 kf);
	snprintf(checks_wake_body, sizeof(checks_wake_body),
		 "{\"sandbox_id\":\"%s\",\"lease_seconds\":60}", sbx);
}

/* A read_only key: 403 read_only_key on every mutating route. */
static void test_read_only_mutations(void)
{
	int mutating_routes = 0;

	for (size_t i = 0; i < routes_count; i++) {
		struct apitest_resp r;

		if (!mutating(&routes[i]) || routes[i].roles == ROLE_PUBLIC)
			continue;
		mutating_routes++;
		r = call_route(&routes[i], tr);
		if (r.status != 403 || strcmp(apitest_error_code(&r), "read_only_key") != 0)
			fprintf(stderr, "read_only on %s %s: %ld %s\n", routes[i].method,
				routes[i].path, r.status, r.body);
		CHECK_I64(r.status, 403);
		CHECK_STR(apitest_error_code(&r), "read_only_key");
		apitest_resp_release(&r);
	}
	CHECK(mutating_routes >= 4); /* accounts, keys, limits, prices at least */
}

/* Keys of account B: 404 on every route with an id of account A. */
static void test_other_account(void)
{
	const struct {
		unsigned role;
		const char *token;
	} keys[] = {{ROLE_FULL, tbf}, {ROLE_READ_ONLY, tbr}};
	int covered = 0;

	for (size_t i = 0; i < routes_count; i++) {
		if (!strchr(routes[i].path, '{'))
			continue;
		for (size_t k = 0; k < 2; k++) {
			struct apitest_resp r;

			if (!(routes[i].roles & keys[k].role))
				continue;
			covered++;
			r = call_route(&routes[i], keys[k].token);
			if (r.status != 404)
				fprintf(stderr, "other account's %s key on %s %s: %ld %s\n",
					k ? "read_only" : "full", routes[i].method, routes[i].path,
					r.status, r.body);
			CHECK_I64(r.status, 404);
			apitest_resp_release(&r);
		}
	}
	CHECK(covered >= 4); /* keys/{id}, limits, sandboxes/{id}, .../usage */
}

/* Roles a route does not allow get 403; those it allows get past auth. */
static void test_roles(void)
{
	const struct {
		unsigned role;
		const char *token;
	} callers[] = {
	    {ROLE_OPERATOR, t.operator_token},
	    {ROLE_CONTROL_PLANE, t.control_plane_token},
	    {ROLE_AGENT, t.agent_token},
	    {ROLE_FULL, tf},
	    {ROLE_READ_ONLY, tr},
	};

	for (size_t i = 0; i < routes_count; i++) {
		for (size_t c = 0; c < sizeof(callers) / sizeof(callers[0]); c++) {
			struct apitest_resp r;
			bool allowed = (routes[i].roles & (callers[c].role | ROLE_PUBLIC)) != 0;

			r = call_route(&routes[i], callers[c].token);
			if (allowed) {
				if (r.status == 401 || r.status == 403 || r.status == 0)
					fprintf(stderr, "allowed role %u on %s %s: %ld %s\n",
						callers[c].role, routes[i].method, routes[i].path,
						r.status, r.body);
				CHECK(r.status != 401 && r.status != 403 && r.status != 0);
			} else {
				const char *want =
				    callers[c].role == ROLE_READ_ONLY && mutating(&routes[i])
					? "read_only_key"
					: "forbidden";
				if (r.status != 403)
					fprintf(stderr, "role %u on %s %s: %ld %s\n",
						callers[c].role, routes[i].method, routes[i].path,
						r.status, r.body);
				CHECK_I64(r.status, 403);
				CHECK_STR(apitest_error_code(&r), want);
			}
			CHECK(r.status < 500 || r.status == 503);
			apitest_resp_release(&r);
		}
	}
}

/* A token the route takes (none on a public one). */
static const char *token_for(const struct route *route)
{
	if (route->roles & ROLE_PUBLIC)
		return NULL;
	if (route->roles & ROLE_FULL)
		return tf;
	if (route->roles & ROLE_READ_ONLY)
		return tr;
	if (route->roles & ROLE_OPERATOR)
		return t.operator_token;
	if (route->roles & ROLE_CONTROL_PLANE)
		return t.control_plane_token;
	return t.agent_token;
}

/* A query parameter on a route that changes anything is refused (400
 * naming it), but only once the credentials are taken: none is 401 and a
 * read_only key 403 read_only_key, as without the parameter. */
static void test_query_after_credentials(void)
{
	int covered = 0;

	for (size_t i = 0; i < routes_count; i++) {
		const struct {
			const char *token;
			long status;
			const char *code;
		} calls[] = {
		    {NULL, 401, "unauthorized"},
		    {tr, 403, "read_only_key"},
		    {token_for(&routes[i]), 400, "invalid_request"},
		};
		char path[512];

		if (!mutating(&routes[i]) || routes[i].roles == ROLE_PUBLIC)
			continue;
		covered++;
		fill_path(&routes[i], path, sizeof(path));
		snprintf(path + strlen(path), sizeof(path) - strlen(path), "?x=1");
		for (size_t c = 0; c < sizeof(calls) / sizeof(calls[0]); c++) {
			struct apitest_resp r;

			apitest_call(&t, 0, routes[i].method, path, calls[c].token,
				     body_for(&routes[i]), &r);
			remember(&r);
			if (r.status != calls[c].status)
				fprintf(stderr, "%s %s (call %zu): %ld %s\n", routes[i].method,
					path, c, r.status, r.body);
			CHECK_I64(r.status, calls[c].status);
			CHECK_STR(apitest_error_code(&r), calls[c].code);
			if (c == 2)
				CHECK(r.body && strstr(r.body, "\"field\":\"x\"") != NULL);
			apitest_resp_release(&r);
		}
	}
	CHECK(covered >= 4);
}

/* An Idempotency-Key header, which no route reads (a check's key is in its
 * body), is refused on every route that changes anything, by a caller it
 * allows: a client that sends one believes its retries safe. Nothing is
 * made: the same request without it is then answered as a first one. */
static void test_idempotency_header(void)
{
	static const char *const header[] = {"Idempotency-Key: retry-1", NULL};
	int covered = 0;

	for (size_t i = 0; i < routes_count; i++) {
		struct apitest_resp r;
		struct apitest_req rq = {.method = routes[i].method,
					 .token = token_for(&routes[i]),
					 .body = body_for(&routes[i]),
					 .headers = header};
		char path[512];

		if (!mutating(&routes[i]) || routes[i].roles == ROLE_PUBLIC)
			continue;
		covered++;
		fill_path(&routes[i], path, sizeof(path));
		rq.path = path;
		rq.body_len = rq.body ? strlen(rq.body) : 0;
		apitest_do(&t, 0, &rq, &r);
		remember(&r);
		if (r.status != 400)
			fprintf(stderr, "Idempotency-Key on %s %s: %ld %s\n", routes[i].method,
				path, r.status, r.body);
		CHECK_I64(r.status, 400);
		CHECK_STR(apitest_error_code(&r), "invalid_request");
		CHECK(r.body && strstr(r.body, "\"field\":\"Idempotency-Key\"") != NULL);
		apitest_resp_release(&r);
	}
	CHECK(covered >= 4);
	/* The create it refused made no sandbox. */
	{
		char sql[256];

		snprintf(sql, sizeof(sql),
			 "SELECT count(*) FROM sandboxes WHERE account_id = '%s'"
			 " AND sandbox_id = 'sbx_new'",
			 acc);
		CHECK_I64(testdb_query_int(t.db.conn, sql), 0);
	}
}

/* Every route, walked from the routing table: a method its path does not
 * take is 405 with Allow naming the route's, before any credentials; a
 * body over its cap (any body where it takes none) is 413 naming the cap,
 * whoever sends it, and nothing runs. (The API harness holds each answer
 * to the OpenAPI document too.) */
static void test_method_and_body_caps(void)
{
	size_t big_len = 0;
	char *big;

	for (size_t i = 0; i < routes_count; i++)
		if (routes[i].max_body > big_len)
			big_len = routes[i].max_body;
	big = malloc(big_len + 2);
	CHECK(big != NULL);
	if (!big)
		return;
	memset(big, ' ', big_len + 1);
	big[big_len + 1] = '\0';
	for (size_t i = 0; i < routes_count; i++) {
		const struct route *rt = &routes[i];
		char path[512];
		const char *allow;
		struct apitest_resp r;
		struct apitest_req rq = {.path = path};

		fill_path(rt, path, sizeof(path));
		CHECK(apitest_call(&t, 0, "PATCH", path, NULL, NULL, &r) == 0);
		if (r.status != 405)
			fprintf(stderr, "PATCH %s: %ld %s\n", rt->path, r.status, r.body);
		CHECK_I64(r.status, 405);
		CHECK_STR(apitest_error_code(&r), "method_not_allowed");
		allow = apitest_jstr(json_object_get(r.json, "error"), "allow");
		CHECK(strstr(allow, rt->method) != NULL);
		apitest_resp_release(&r);

		rq.method = rt->method;
		rq.token = token_for(rt);
		rq.body = big;
		rq.body_len = rt->max_body ? rt->max_body + 1 : 2;
		CHECK(apitest_do(&t, 0, &rq, &r) == 0);
		if (r.status != 413)
			fprintf(stderr, "%s %s with %zu bytes: %ld %s\n", rt->method, rt->path,
				rq.body_len, r.status, r.body);
		CHECK_I64(r.status, 413);
		CHECK_STR(apitest_error_code(&r), "payload_too_large");
		CHECK_I64(apitest_jpath(r.json, "error.max_bytes"), (long long)rt->max_body);
		apitest_resp_release(&r);
	}
	free(big);
}

/* A 401 names the scheme it takes (RFC 9110, 15.5.2). */
static bool challenged(const struct apitest_resp *r)
{
	return r->headers && strstr(r->headers, "WWW-Authenticate: Bearer realm=\"meter\"\r\n");
}

/* No credentials, or garbage ones: 401 on every route that needs them,
 * with the scheme they need. */
static void test_unauthenticated(void)
{
	char wrong[APITEST_TOKEN_MAX + 32], nosecret[96];
	/* The configured tokens off by their last byte, one byte short, one
	 * byte long. */
	char op_wrong[128], op_short[128], op_long[128], cp_wrong[128];
	const char *garbage[] = {
	    "Authorization: Bearer",
	    "Authorization: Bearer ",
	    "Authorization: bearer x",
	    "Authorization: Basic dXNlcjpwYXNz",
	    "Authorization: Bearer garbage",
	    "Authorization: Bearer a.b.c.d",
	    /* One header split over two lines, not a missing comma.
	     * NOLINTNEXTLINE(bugprone-suspicious-missing-comma) */
	    "Authorization: Bearer "
	    "key_0000000000000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    wrong,
	    nosecret,
	    op_wrong,
	    op_short,
	    op_long,
	    cp_wrong,
	    "Authorization: Bearer \x01\x02",
	    NULL,
	};
	char path[512];

	snprintf(wrong, sizeof(wrong), "Authorization: Bearer %s", tf);
	wrong[strlen(wrong) - 1] = wrong[strlen(wrong) - 1] == 'A' ? 'B' : 'A';
	snprintf(nosecret, sizeof(nosecret), "Authorization: Bearer %s.", kf);
	snprintf(op_wrong, sizeof(op_wrong), "Authorization: Bearer %s", t.operator_token);
	op_wrong[strlen(op_wrong) - 1] = op_wrong[strlen(op_wrong) - 1] == 'a' ? 'b' : 'a';
	snprintf(op_short, sizeof(op_short), "Authorization: Bearer %s", t.operator_token);
	op_short[strlen(op_short) - 1] = '\0';
	snprintf(op_long, sizeof(op_long), "Authorization: Bearer %sa", t.operator_token);
	snprintf(cp_wrong, sizeof(cp_wrong), "Authorization: Bearer %s", t.control_plane_token);
	cp_wrong[strlen(cp_wrong) - 1] = cp_wrong[strlen(cp_wrong) - 1] == 'a' ? 'b' : 'a';
	for (size_t i = 0; i < routes_count; i++) {
		struct apitest_resp r;

		if (routes[i].roles & ROLE_PUBLIC)
			continue;
		r = call_route(&routes[i], NULL);
		if (routes[i].session && strncmp(routes[i].path, "/dashboard/", 11) == 0) {
			/* A page opened without a session goes to the sign-in page. */
			CHECK_I64(r.status, 303);
			CHECK(r.headers && strstr(r.headers, "Location: /dashboard/sign-in"));
		} else {
			CHECK_I64(r.status, 401);
			CHECK_STR(apitest_error_code(&r), "unauthorized");
			CHECK(challenged(&r));
		}
		apitest_resp_release(&r);
		fill_path(&routes[i], path, sizeof(path));
		for (size_t g = 0; garbage[g]; g++) {
			const char *hdrs[] = {garbage[g], NULL};
			struct apitest_req rq = {.method = routes[i].method,
						 .path = path,
						 .body = body_for(&routes[i]),
						 .headers = hdrs};

			rq.body_len = rq.body ? strlen(rq.body) : 0;
			apitest_do(&t, 0, &rq, &r);
			remember(&r);
			if (r.status != 401)
				fprintf(stderr, "%s on %s %s: %ld\n", garbage[g], routes[i].method,
					routes[i].path, r.status);
			CHECK_I64(r.status, 401);
			CHECK(challenged(&r));
			apitest_resp_release(&r);
		}
	}
}

/* No token or secret of this test in any response or in the log. */
static void test_no_leaks(void)
{
	const char *tokens[] = {t.operator_token, t.control_plane_token, tf, tr, tbf, tbr, tv};
	char *log;

	apitest_stop(&t); /* the whole log is written */
	log = apitest_read_log(&t, 0);
	CHECK(log != NULL);
	CHECK(log && strstr(log, "access rid=") != NULL);
	for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
		const char *secret = strrchr(tokens[i], '.');

		secret = secret ? secret + 1 : tokens[i];
		CHECK(seen && strstr(seen, secret) == NULL);
		CHECK(log && strstr(log, secret) == NULL);
	}
	free(log);
}

/* One request with an unknown key, on a thread of its own. */
struct lookup {
	pthread_t thread;
	bool started;
	const char *method, *path, *body;
	char token[APITEST_TOKEN_MAX];
	long status;
	char code[32];
	atomic_int done;
};

static void *lookup_main(void *arg)
{
	struct lookup *l = arg;
	struct apitest_resp r;
	const char *code;

	apitest_call(&t, 0, l->method, l->path, l->token, l->body, &r);
	l->status = r.status;
	code = apitest_error_code(&r);
	snprintf(l->code, sizeof(l->code), "%s", code ? code : "");
	apitest_resp_release(&r);
	atomic_store(&l->done, 1);
	return NULL;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Look-ups of the keys' table waiting for a lock, as PostgreSQL sees them
 * now (pg_locks is read afresh on every call, even in a transaction). */
static long long waiting_lookups(void)
{
	return cu_sql_int(t.db.conn, "SELECT count(*) FROM pg_locks"
				     " WHERE relation = 'api_keys'::regclass AND NOT granted");
}

/* A key look-up waits on a request worker, never on an HTTP thread: with
 * the keys' table locked, requests with keys no cache holds, on routes of
 * the read lane, the write lane and the HTTP threads (checks, a streamed
 * export), all wait, and meanwhile the routes the HTTP threads answer
 * without the database answer at once. Then the lock goes and each of the
 * waiting requests gets its 401. (Before, every HTTP thread waited in such
 * a look-up, and with it every request it would have read next.) */
static void test_lookups_off_http_threads(void)
{
	enum { LOOKUPS = 12 };
	static const struct {
		const char *method, *path;
	} targets[] = {
	    {"GET", "/v1/keys"},
	    {"PUT", "/v1/keys/own_id/limits"},
	    {"POST", "/v1/checks/create"},
	    {"GET", "/v1/reports/usage.csv?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z"},
	};
	static const char *const quick[] = {"/healthz", "/metrics", "/v1/openapi.json"};
	static struct lookup l[LOOKUPS], ex[2];
	static char ex_path[256];
	struct apitest_resp er;
	PGresult *res;

	/* Exports of a known key (its look-up cached first) filtered by key:
	 * the filter's look-up waits on the lock too, on the export's own
	 * thread, never on one of the two HTTP threads. */
	snprintf(ex_path, sizeof(ex_path),
		 "/v1/reports/usage.csv?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z"
		 "&key_id=%s",
		 kf);
	apitest_call(&t, 0, "GET", "/v1/keys", tf, NULL, &er);
	CHECK_I64(er.status, 200);
	apitest_resp_release(&er);
	res = PQexec(t.db.conn, "BEGIN");
	int64_t until, worst = 0;
	long long waiting = 0;
	int done = 0;

	CHECK(PQresultStatus(res) == PGRES_COMMAND_OK);
	PQclear(res);
	res = PQexec(t.db.conn, "LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE");
	CHECK(PQresultStatus(res) == PGRES_COMMAND_OK);
	PQclear(res);
	for (int i = 0; i < LOOKUPS; i++) {
		const size_t k = (size_t)i % (sizeof(targets) / sizeof(targets[0]));

		l[i].method = targets[k].method;
		l[i].path = targets[k].path;
		l[i].body = strcmp(l[i].method, "PUT") == 0    ? "{\"daily_limit_micros\":1}"
			    : strcmp(l[i].method, "POST") == 0 ? checks_create_body
							       : NULL;
		/* Unknown ids, so that no cache can answer. */
		snprintf(l[i].token, sizeof(l[i].token),
			 "key_00000000000000%02d.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", i);
		atomic_init(&l[i].done, 0);
		l[i].started = pthread_create(&l[i].thread, NULL, lookup_main, &l[i]) == 0;
		CHECK(l[i].started);
	}
	for (int i = 0; i < 2; i++) {
		ex[i].method = "GET";
		ex[i].path = ex_path;
		snprintf(ex[i].token, sizeof(ex[i].token), "%s", tf);
		atomic_init(&ex[i].done, 0);
		ex[i].started = pthread_create(&ex[i].thread, NULL, lookup_main, &ex[i]) == 0;
		CHECK(ex[i].started);
	}
	/* Until look-ups are seen waiting on the lock (at most 10 s): as many
	 * as there are HTTP threads, which is all that waited before. */
	until = now_ms() + 10000;
	while (now_ms() < until && (waiting = waiting_lookups()) < 2) {
		struct timespec nap = {0, 20 * 1000 * 1000};

		nanosleep(&nap, NULL);
	}
	CHECK(waiting >= 2);
	for (int round = 0; round < 5; round++) {
		for (size_t q = 0; q < sizeof(quick) / sizeof(quick[0]); q++) {
			struct apitest_resp r;
			int64_t t0 = now_ms();

			apitest_call(&t, 0, "GET", quick[q], NULL, NULL, &r);
			CHECK_I64(r.status, 200);
			if (now_ms() - t0 > worst)
				worst = now_ms() - t0;
			apitest_resp_release(&r);
		}
	}
	/* Answered while every look-up still waited: within a second. */
	if (worst > 1000)
		fprintf(stderr, "a public route took %lld ms while keys were looked up\n",
			(long long)worst);
	CHECK(worst <= 1000);
	for (int i = 0; i < LOOKUPS; i++)
		done += atomic_load(&l[i].done);
	CHECK_I64(done, 0);
	res = PQexec(t.db.conn, "ROLLBACK");
	CHECK(PQresultStatus(res) == PGRES_COMMAND_OK);
	PQclear(res);
	for (int i = 0; i < LOOKUPS; i++) {
		if (!l[i].started)
			continue;
		pthread_join(l[i].thread, NULL);
		if (l[i].status != 401)
			fprintf(stderr, "unknown key on %s %s: %ld %s\n", l[i].method, l[i].path,
				l[i].status, l[i].code);
		CHECK_I64(l[i].status, 401);
		CHECK_STR(l[i].code, "unauthorized");
	}
	for (int i = 0; i < 2; i++) {
		if (!ex[i].started)
			continue;
		pthread_join(ex[i].thread, NULL);
		CHECK_I64(ex[i].status, 200);
	}
}

/* Sends "HEAD target" and then a GET of /healthz on one connection and
 * reads to its close: the HEAD answer must be headers only, so the bytes
 * after its blank line are the next answer's status line, or nothing when
 * the HEAD answer closed the connection (and said so). Its header lines go
 * to head (len bytes). */
static void head_then_get(const char *target, const char *token, char *head, size_t len)
{
	char req[1024], buf[16384];
	size_t got = 0;
	int fd, n;
	long long until = rawhttp_now_ms() + 10000;
	const char *end;
	bool closes;

	head[0] = '\0';
	n = snprintf(req, sizeof(req),
		     "HEAD %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
		     "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		     target, token);
	fd = rawhttp_connect(t.servers[0].port);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK(rawhttp_send(fd, req, (size_t)n, 5000) == 0);
	while (got + 1 < sizeof(buf) && rawhttp_now_ms() < until) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t r;

		if (poll(&pfd, 1, 100) <= 0)
			continue;
		r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	buf[got] = '\0';
	end = strstr(buf, "\r\n\r\n");
	CHECK(strncmp(buf, "HTTP/1.1 ", 9) == 0);
	CHECK(end != NULL);
	if (!end)
		return;
	snprintf(head, len, "%.*s", (int)(end + 2 - buf), buf);
	closes = strcasestr(head, "\r\nConnection: close\r\n") != NULL;
	if (closes ? end[4] != '\0' : strncmp(end + 4, "HTTP/1.1 200 ", 13) != 0)
		fprintf(stderr, "HEAD %s then GET /healthz: %s\n", target, buf);
	if (closes)
		CHECK(end[4] == '\0');
	else
		CHECK(strncmp(end + 4, "HTTP/1.1 200 ", 13) == 0);
}

/* HEAD on every GET route answers headers only (a body, even an empty
 * chunked one, would be read as the start of the next answer): each route
 * as the walk fills it, and the exports with a range, so that they pass
 * their checks. An export's HEAD runs no export, so it cannot know the
 * length a GET would have: it says none (not Content-Length: 0). */
static void test_head_no_body(void)
{
	char path[600], head[4096];
	int covered = 0;

	for (size_t i = 0; i < routes_count; i++) {
		if (strcmp(routes[i].method, "GET") != 0)
			continue;
		fill_path(&routes[i], path, sizeof(path));
		head_then_get(path, routes[i].roles & ROLE_FULL ? tf : t.operator_token, head,
			      sizeof(head));
		if (strncmp(routes[i].path, "/v1/reports/usage.", 18) == 0) {
			size_t l = strlen(path);
			snprintf(path + l, sizeof(path) - l,
				 "?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z");
			head_then_get(path, tf, head, sizeof(head));
			CHECK(strncmp(head, "HTTP/1.1 200 ", 13) == 0);
			CHECK(strcasestr(head, "\r\nContent-Disposition: attachment") != NULL);
			CHECK(strcasestr(head, "\r\nContent-Length:") == NULL);
			covered++;
		}
	}
	CHECK_I64(covered, 2);
}

/* The sign-in form takes its own fields, key and account, each once:
 * another field, or one twice, is 400 with no session, as an unknown
 * field of a JSON body is. */
static void test_sign_in_form(void)
{
	const char *form[] = {"Content-Type: application/x-www-form-urlencoded", NULL};
	/* $ stands for the key's token. */
	static const char *const shapes[] = {
	    "key=$",	   "key=$&account=",  "account=&key=$",
	    "key=$&foo=1", "key=$&key=$",     "key=$&account=&account=",
	    "key=$&",	   "key=$&&account=", "key"};
	static const long want[] = {303, 303, 303, 400, 400, 400, 303, 303, 400};

	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		char body[2 * APITEST_TOKEN_MAX + 64] = "";
		struct apitest_req rq = {
		    .method = "POST", .path = "/dashboard/sign-in", .headers = form, .body = body};
		struct apitest_resp r;

		for (const char *c = shapes[i]; *c; c++)
			if (*c == '$')
				strncat(body, tr, sizeof(body) - strlen(body) - 1);
			else
				strncat(body, c, 1);
		rq.body_len = strlen(body);
		apitest_do(&t, 0, &rq, &r);
		if (r.status != want[i])
			fprintf(stderr, "sign-in form %s: %ld\n", shapes[i], r.status);
		CHECK_I64(r.status, want[i]);
		CHECK(r.headers &&
		      (strstr(r.headers, "meter_session=") != NULL) == (want[i] == 303));
		apitest_resp_release(&r);
	}
}

int main(void)
{
	if (apitest_start(&t, "api_access", 1, NULL, NULL) < 0)
		return 1;
	setup();
	test_read_only_mutations();
	test_query_after_credentials();
	test_idempotency_header();
	test_other_account();
	test_unauthenticated();
	test_roles();
	test_method_and_body_caps();
	test_head_no_body();
	test_lookups_off_http_threads();
	test_sign_in_form();
	test_no_leaks();
	apitest_drop(&t);
	free(seen);
	return check_done();
}
