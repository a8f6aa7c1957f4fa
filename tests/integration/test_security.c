/* Hostile input and secrets, against one real meterd, walking the routing
 * table (api/routes.c) and the OpenAPI document compiled beside it, so a
 * route, query parameter or body field added later is covered without
 * editing this test:
 *
 *   1. every path id, query parameter and JSON body field (nested ones of
 *      the agent document too) of every route is sent SQL metacharacters,
 *      path traversal (plain and percent-encoded), NUL bytes (%00, \u0000
 *      and raw), CR/LF aimed at response headers, format directives,
 *      control characters, invalid UTF-8, over-long values (65 bytes and
 *      1 MiB); request headers get the same (CR/LF folding, NUL, 1 MiB):
 *      each answer is a 4xx (a JSON error on the API, an HTML page on the
 *      dashboard, libmicrohttpd's own 400/413/414/431 when the request
 *      never reached us) or a correct 404, never a 5xx, never a header that
 *      was not ours; and the database is byte for byte what it was (a
 *      digest of every table before and after);
 *   2. the one free-text field (an account's name) stores SQL
 *      metacharacters exactly as sent;
 *   3. keys of another account, given this account's ids in query
 *      parameters, path ids or through a dashboard session, see none of
 *      it (404, or an answer without any of its ids);
 *   4. secrets (operator token, control-plane token, session secret,
 *      webhook secret, every key secret, session cookies) are sent where
 *      they do not belong in failing requests, then looked for in every
 *      response, in /metrics and in meterd's whole log: never found.
 *
 * Key comparison in constant time is checked statically
 * (scripts/checksrc.sh), not by timing. SECURITY_DEBUG=1 prints every
 * hostile request and its answer. */
#include <ctype.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "apitest.h"
#include "check.h"
#include "openapi.h"
#include "rawhttp.h"
#include "routes.h"
#include "session.h"

#define IO_TIMEOUT_MS 15000
#define MIB	      (1024 * 1024)

static struct apitest t;
static int port;
static char acc[65], accb[65], kf[65], kr[65], kbf[65], kbr[65];
/* A key of A that the route revoking keys is given: kf serves the rest. */
static char kv[65], tv[APITEST_TOKEN_MAX];
static char tf[APITEST_TOKEN_MAX], tr[APITEST_TOKEN_MAX], tbf[APITEST_TOKEN_MAX],
    tbr[APITEST_TOKEN_MAX];
static char session_secret[65], webhook_secret[65];
static char cookie_a[1024], cookie_b[1024], cookie_op[1024]; /* "meter_session=..." */
static const char sbx[] = "sbx_own";
static json_t *doc; /* the OpenAPI document */

/* Every response seen (heads and bodies) but the few that must carry a
 * secret (a new key's, a sign-in's Set-Cookie), to look for secrets. */
static char *seen;
static size_t seen_len, seen_cap;
static int requests, hostile_cases, libmhd_answers;

static void seen_add(const char *p, size_t n)
{
	if (seen_len + n + 2 > seen_cap) {
		size_t cap = seen_cap ? seen_cap : 1 << 20;
		char *g;

		while (seen_len + n + 2 > cap)
			cap *= 2;
		g = realloc(seen, cap);
		if (!g)
			return;
		seen = g;
		seen_cap = cap;
	}
	memcpy(seen + seen_len, p, n);
	seen_len += n;
	seen[seen_len++] = '\n';
	seen[seen_len] = '\0';
}

/* memmem for a NUL-terminated needle. */
static bool contains(const char *hay, size_t len, const char *needle)
{
	return hay && needle[0] && memmem(hay, len, needle, strlen(needle)) != NULL;
}

/* --- building requests ---------------------------------------------- */

/* A growable byte string. */
struct buf {
	char *p;
	size_t len, cap;
};

static void buf_add(struct buf *b, const void *p, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		char *g;

		while (b->len + n + 1 > cap)
			cap *= 2;
		g = realloc(b->p, cap);
		if (!g) {
			fprintf(stderr, "out of memory\n");
			exit(1);
		}
		b->p = g;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void buf_str(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

/* Percent-encodes n bytes of s (everything but unreserved characters). */
static void buf_pct(struct buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
			buf_add(b, &s[i], 1);
		} else {
			char e[3] = {'%', hex[c >> 4], hex[c & 15]};
			buf_add(b, e, 3);
		}
	}
}

/* Who calls. */
enum caller { C_NONE, C_OPERATOR, C_CONTROL_PLANE, C_FULL, C_READ_ONLY, C_B_FULL, C_B_READ_ONLY };

static const char *token_of(enum caller c)
{
	switch (c) {
	case C_OPERATOR:
		return t.operator_token;
	case C_CONTROL_PLANE:
		return t.control_plane_token;
	case C_FULL:
		return tf;
	case C_READ_ONLY:
		return tr;
	case C_B_FULL:
		return tbf;
	case C_B_READ_ONLY:
		return tbr;
	case C_NONE:
	default:
		return NULL;
	}
}

/* One request as raw bytes. target: path and query, as they go on the
 * wire. headers: extra raw header lines, each ending in CRLF (may be NULL).
 * body: body_len bytes or NULL; content_type NULL means JSON. */
struct req {
	const char *method;
	const char *target;
	size_t target_len; /* 0: strlen */
	enum caller caller;
	const char *headers;
	size_t headers_len; /* 0: strlen */
	const char *body;
	size_t body_len;
	const char *content_type;
};

/* A response, and what this test found wrong with its shape. */
struct resp {
	struct rawhttp_resp r;
	bool ours;	 /* carries our X-Request-Id: our code answered */
	bool json_error; /* {"error":{"code":"...","message":"..."}} */
	char code[64];	 /* the error code */
	bool injected;	 /* a header that was not ours */
};

/* Sends rq on a new connection. Bodies over 64 KiB ask first
 * (Expect: 100-continue) so a 413 can come before them. */
static void do_req(const struct req *rq, struct resp *out, bool remember)
{
	struct buf b = {0};
	const char *tok = token_of(rq->caller);
	const char *target = rq->target ? rq->target : "/";
	char cl[64], rid[64];
	bool expect = rq->body && rq->body_len > 65536;
	int fd;

	memset(out, 0, sizeof(*out));
	requests++;
	buf_str(&b, rq->method);
	buf_str(&b, " ");
	buf_add(&b, target, rq->target_len ? rq->target_len : strlen(target));
	buf_str(&b, " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
	if (tok) {
		buf_str(&b, "Authorization: Bearer ");
		buf_str(&b, tok);
		buf_str(&b, "\r\n");
	}
	if (rq->headers)
		buf_add(&b, rq->headers, rq->headers_len ? rq->headers_len : strlen(rq->headers));
	if (rq->body) {
		buf_str(&b, "Content-Type: ");
		buf_str(&b, rq->content_type ? rq->content_type : "application/json");
		snprintf(cl, sizeof(cl), "\r\nContent-Length: %zu\r\n", rq->body_len);
		buf_str(&b, cl);
		if (expect)
			buf_str(&b, "Expect: 100-continue\r\n");
	}
	buf_str(&b, "\r\n");
	fd = rawhttp_connect(port);
	if (fd >= 0 && rawhttp_send(fd, b.p, b.len, IO_TIMEOUT_MS) == 0 && rq->body) {
		if (expect) {
			/* 100 Continue, or the final answer at once. */
			char peek[16];
			struct pollfd pfd = {.fd = fd, .events = POLLIN};
			ssize_t n = 0;

			if (poll(&pfd, 1, IO_TIMEOUT_MS) == 1)
				n = recv(fd, peek, sizeof(peek) - 1, MSG_PEEK);
			if (n >= 12 && memcmp(peek, "HTTP/1.1 100", 12) == 0)
				(void)rawhttp_send(fd, rq->body, rq->body_len, IO_TIMEOUT_MS);
		} else {
			(void)rawhttp_send(fd, rq->body, rq->body_len, IO_TIMEOUT_MS);
		}
	}
	if (fd >= 0) {
		(void)rawhttp_read(fd, IO_TIMEOUT_MS, 64u * MIB, &out->r);
		close(fd);
	}
	free(b.p);
	out->ours = rawhttp_header(&out->r, "X-Request-Id", rid, sizeof(rid)) != NULL;
	if (out->ours) {
		/* Ours: 16 hex digits, nothing taken from the request. */
		size_t n = strlen(rid);
		bool hex = n == 16;
		for (size_t i = 0; hex && i < n; i++)
			hex = isxdigit((unsigned char)rid[i]) != 0;
		CHECK(hex);
	}
	if (out->r.body && out->r.body_len) {
		json_t *j = json_loadb(out->r.body, out->r.body_len, 0, NULL);
		json_t *e = json_object_get(j, "error");
		const char *c = json_string_value(json_object_get(e, "code"));

		out->json_error = c && json_is_string(json_object_get(e, "message"));
		snprintf(out->code, sizeof(out->code), "%s", c ? c : "");
		json_decref(j);
	}
	out->injected = out->r.head && (strcasestr(out->r.head, "\r\nX-Injected") ||
					strcasestr(out->r.head, "\nX-Injected"));
	if (!out->ours && out->r.status)
		libmhd_answers++;
	if (remember) {
		if (out->r.head)
			seen_add(out->r.head, strlen(out->r.head));
		if (out->r.body)
			seen_add(out->r.body, out->r.body_len);
	}
}

static void resp_release(struct resp *r)
{
	rawhttp_resp_release(&r->r);
}

/* --- the routing table and the OpenAPI document ----------------------- */

static bool mutating(const struct route *r)
{
	return strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0;
}

static bool is_dashboard(const struct route *r)
{
	return strncmp(r->path, "/dashboard", 10) == 0 || strcmp(r->path, "/favicon.ico") == 0;
}

/* The caller used for route r: the most privileged role it allows. */
static enum caller caller_for(const struct route *r)
{
	/* The dashboard's pages show one account: a key's (the operator
	 * would need a session naming one). */
	if (r->session && strncmp(r->path, "/dashboard/", 11) == 0 && (r->roles & ROLE_FULL))
		return C_FULL;
	if (r->roles & ROLE_OPERATOR)
		return C_OPERATOR;
	if (r->roles & ROLE_CONTROL_PLANE)
		return C_CONTROL_PLANE;
	if (r->roles & ROLE_FULL)
		return C_FULL;
	if (r->roles & ROLE_READ_ONLY)
		return C_READ_ONLY;
	return C_NONE;
}

/* The OpenAPI operation of r, borrowed, or NULL. */
static json_t *operation(const struct route *r)
{
	char m[8];
	size_t i;

	for (i = 0; i < sizeof(m) - 1 && r->method[i]; i++)
		m[i] = (char)tolower((unsigned char)r->method[i]);
	m[i] = '\0';
	return json_object_get(json_object_get(json_object_get(doc, "paths"), r->path), m);
}

/* The schema of the JSON request body of r (a $ref resolved), or NULL. */
static json_t *body_schema(const struct route *r)
{
	json_t *s = json_object_get(
	    json_object_get(
		json_object_get(json_object_get(operation(r), "requestBody"), "content"),
		"application/json"),
	    "schema");
	const char *ref = json_string_value(json_object_get(s, "$ref"));

	if (ref && strncmp(ref, "#/components/schemas/", 21) == 0)
		s = json_object_get(json_object_get(json_object_get(doc, "components"), "schemas"),
				    ref + 21);
	return s;
}

/* The value for id parameter name: this account's. */
static const char *id_value(const char *name, size_t n)
{
	if (n == 10 && strncmp(name, "account_id", n) == 0)
		return acc;
	if (n == 6 && strncmp(name, "key_id", n) == 0)
		return kf;
	if (n == 10 && strncmp(name, "sandbox_id", n) == 0)
		return sbx;
	return "own_id";
}

/* The path of r with ids filled in, except parameter number hostile_idx
 * (-1: none), which gets the bytes hv (hn bytes) percent-encoded, or as
 * they are when raw. */
static void fill_path(const struct route *r, struct buf *b, int hostile_idx, const char *hv,
		      size_t hn, bool raw)
{
	const char *p = r->path;
	int idx = 0;

	while (*p) {
		if (*p == '{') {
			const char *e = strchr(p, '}');
			size_t nl = e ? (size_t)(e - p - 1) : 0;

			if (idx == hostile_idx) {
				if (raw)
					buf_add(b, hv, hn);
				else
					buf_pct(b, hv, hn);
			} else if (strcmp(r->method, "DELETE") == 0 && nl == 6 &&
				   strncmp(p + 1, "key_id", nl) == 0) {
				buf_str(b, kv);
			} else {
				buf_str(b, id_value(p + 1, nl));
			}
			idx++;
			p = e ? e + 1 : p + strlen(p);
		} else {
			buf_add(b, p, 1);
			p++;
		}
	}
}

static int path_params(const struct route *r)
{
	int n = 0;

	for (const char *p = r->path; (p = strchr(p, '{')) != NULL; p++)
		n++;
	return n;
}

/* The query parameters r declares, borrowed names into names (max n). */
static int query_params(const struct route *r, const char **names, int n)
{
	json_t *params = json_object_get(operation(r), "parameters"), *prm;
	size_t i;
	int k = 0;

	json_array_foreach(params, i, prm)
	{
		const char *in = json_string_value(json_object_get(prm, "in"));
		const char *name = json_string_value(json_object_get(prm, "name"));

		if (in && name && strcmp(in, "query") == 0 && k < n)
			names[k++] = name;
	}
	return k;
}

/* A valid value of query parameter name of route r (for the base query). */
static const char *base_query_value(const struct route *r, const char *name)
{
	if (strcmp(name, "from") == 0)
		return "2026-01-01T00:00:00Z";
	if (strcmp(name, "to") == 0)
		return "2026-01-02T00:00:00Z";
	if (strcmp(name, "month") == 0)
		return "2026-01";
	if (strcmp(name, "account_id") == 0 && caller_for(r) == C_OPERATOR)
		return acc;
	return NULL; /* left out */
}

/* The base query of r ("?a=b&c=d" or ""), with parameter skip left out. */
static void base_query(const struct route *r, struct buf *b, const char *skip)
{
	const char *names[32];
	int n = query_params(r, names, 32);
	bool first = true;

	for (int i = 0; i < n; i++) {
		const char *v = base_query_value(r, names[i]);

		if (!v || (skip && strcmp(names[i], skip) == 0))
			continue;
		buf_str(b, first ? "?" : "&");
		buf_str(b, names[i]);
		buf_str(b, "=");
		buf_str(b, v);
		first = false;
	}
}

/* A valid body of r, as JSON (NULL for none). New reference. */
static json_t *base_body(const struct route *r)
{
	if (!mutating(r) || is_dashboard(r) || r->max_body == 0)
		return NULL; /* a route with no body cap takes no body */
	if (strcmp(r->path, "/v1/accounts") == 0)
		return json_pack("{s:s}", "name", "security base");
	if (strcmp(r->path, "/v1/accounts/{account_id}/keys") == 0)
		return json_pack("{s:s, s:I, s:s}", "role", "read_only", "daily_limit_micros",
				 (json_int_t)1000, "time_zone", "UTC");
	if (strcmp(r->path, "/v1/keys/{key_id}/limits") == 0)
		return json_pack("{s:I, s:s}", "daily_limit_micros", (json_int_t)100000000,
				 "time_zone", "UTC");
	if (strcmp(r->path, "/v1/prices") == 0)
		return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:b}", "effective_from",
				 "2999-01-01T00:00:00Z", "cpu_micros_per_vcpu_hour", 25000,
				 "memory_micros_per_gib_hour", 7500, "storage_micros_per_gib_hour",
				 100, "floor_millicores", 50, "free_sandbox_hours", 50,
				 "storage_price_assumed", 1);
	if (strcmp(r->path, "/v1/checks/create") == 0)
		return json_pack("{s:s, s:s, s:i, s:i, s:i, s:I, s:s}", "key_id", kf, "sandbox_id",
				 "sbx_sec", "vcpus", 1, "memory_mib", 512, "lease_seconds", 3600,
				 "max_cost_micros", (json_int_t)100000000, "idempotency_key",
				 "sec-create-1");
	if (strcmp(r->path, "/v1/checks/wake") == 0)
		return json_pack("{s:s, s:i, s:s}", "sandbox_id", sbx, "lease_seconds", 3600,
				 "idempotency_key", "sec-wake-1");
	if (strcmp(r->path, "/v1/sandboxes/{sandbox_id}/events") == 0)
		return json_pack("{s:s, s:s}", "type", "paused", "at", "2026-01-01T00:00:00Z");
	if (strcmp(r->path, "/v1/samples") == 0)
		return json_pack("{s:s, s:s, s:[{s:s, s:s, s:s, s:i, s:i, s:i, s:I}]}", "host_id",
				 "h1", "sampled_at", "2026-01-01T00:00:00Z", "sandboxes",
				 "sandbox_id", sbx, "key_id", kf, "state", "paused", "vcpus", 1,
				 "memory_mib", 512, "storage_mib", 100, "cpu_usec", (json_int_t)0);
	return json_object();
}

/* The dashboard's forms (application/x-www-form-urlencoded). */
static const char *form_body(const struct route *r)
{
	static char sign_in[APITEST_TOKEN_MAX + 16];

	if (strcmp(r->path, "/dashboard/sign-in") == 0 && strcmp(r->method, "POST") == 0) {
		snprintf(sign_in, sizeof(sign_in), "key=%s", tr);
		return sign_in;
	}
	return NULL;
}

/* --- hostile values --------------------------------------------------- */

struct hostile {
	const char *name;
	const char *v;
	size_t n;
};

static char *one_mib;

#define H(name, s)                                                                                 \
	{                                                                                          \
		name, s, sizeof(s) - 1                                                             \
	}
static struct hostile hostile[] = {
    H("SQL quote", "' OR 1=1--"),
    H("SQL statement", "\"; DROP TABLE accounts; --"),
    H("SQL in parentheses", "x'); DELETE FROM api_keys; --"),
    H("backslashes", "a\\'b\\\\c\\"),
    H("path traversal", "../../../etc/passwd"),
    H("encoded traversal", "%2e%2e%2f%2e%2e%2fetc%2fpasswd"),
    H("NUL byte", "a\0b"),
    H("CR LF header", "a\r\nX-Injected: yes"),
    H("LF header", "a\nX-Injected: yes"),
    H("format directives", "%s%s%s%n%x%p"),
    H("control characters", "\x01\x1b[2J\x7f"),
    H("invalid UTF-8", "\xff\xfe\xc0\xaf"),
    /* NOLINTNEXTLINE(misc-misleading-bidirectional): the point of the value */
    H("bidi override", "\xe2\x80\xaex"),
    H("markup", "<script>alert(1)</script>"),
    H("65 characters", "a1234567890123456789012345678901234567890123456789012345678901234"),
    {"1 MiB", NULL, MIB},
};
#define NHOSTILE (sizeof(hostile) / sizeof(hostile[0]))

/* --- judging answers -------------------------------------------------- */

/* The rules every hostile request must pass; want_2xx_ok allows a success
 * (only for a value that is valid where it went). Returns false when the
 * answer is wrong (after saying why). */
static bool judge(const struct route *r, const char *what, const struct resp *x, bool allow_2xx)
{
	char ctype[128] = "";
	int st = x->r.status;
	bool ok = true;

	rawhttp_header(&x->r, "Content-Type", ctype, sizeof(ctype));
	if (st == 0 || st >= 500 || x->injected || (st < 400 && !allow_2xx))
		ok = false;
	else if (!x->ours)
		/* libmicrohttpd answered before our code ran: a request it
		 * could not take (bad request line, header or URI too big). */
		ok = st == 400 || st == 413 || st == 414 || st == 431;
	else if (st >= 400 && !is_dashboard(r))
		ok = x->json_error && strncmp(ctype, "application/json", 16) == 0;
	else if (st >= 400)
		ok = x->json_error || strncmp(ctype, "text/html", 9) == 0 ||
		     strncmp(ctype, "text/plain", 10) == 0;
	if (!ok || getenv("SECURITY_DEBUG"))
		fprintf(stderr, "%s %s, %s: %d%s%s %.200s\n", r->method, r->path, what, st,
			x->ours ? "" : " (not ours)", x->injected ? " INJECTED HEADER" : "",
			x->r.body ? x->r.body : "");
	hostile_cases++;
	return ok;
}

/* --- the database digest ---------------------------------------------- */

/* Row counts and an md5 of every row of every table, one string: but
 * meterd_sweepers, whose rows each sweeper refreshes as time passes
 * (sql/0063), not as requests come, and the partitions of samples (read
 * through it), of which the sweeper makes tomorrow's as time passes. */
static char *db_digest(void)
{
	PGresult *res;
	char *out = NULL;

	res = PQexec(t.db.conn, "SELECT pg_temp.meter_digest()");
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		out = strdup(PQgetvalue(res, 0, 0));
	else
		fprintf(stderr, "digest: %s\n", PQerrorMessage(t.db.conn));
	PQclear(res);
	return out;
}

static void db_digest_setup(void)
{
	CHECK_STR(
	    testdb_exec_state(
		t.db.conn,
		"CREATE FUNCTION pg_temp.meter_digest() RETURNS text LANGUAGE plpgsql AS $$"
		" DECLARE r record; part text; acc text := '';"
		" BEGIN"
		"  FOR r IN SELECT c.oid::regclass AS t FROM pg_class c"
		"   JOIN pg_namespace n ON n.oid = c.relnamespace"
		"   WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')"
		"   AND c.relname <> 'meterd_sweepers'" /* its sweeper's every 10 s */
		"   AND NOT c.relispartition"		/* their rows are read through samples */
		"   ORDER BY 1::text LOOP"
		"   EXECUTE format('SELECT count(*) || '':'' || coalesce(md5(string_agg(x::text,"
		" ''|'' ORDER BY x::text)), '''') FROM %s x', r.t) INTO part;"
		"   acc := acc || r.t::text || '=' || part || ';';"
		"  END LOOP;"
		"  RETURN acc;"
		" END $$"),
	    "00000");
}

/* --- 1. the walk ------------------------------------------------------- */

/* JSON text of body with the field at path (a top-level name, or
 * "sandboxes.0.<name>" inside the first sample) replaced by tok (tn bytes
 * of raw JSON text). */
static void body_with(json_t *body, const char *path, const char *tok, size_t tn, struct buf *out)
{
	static const char ph[] = "\"__HOSTILE__\"";
	json_t *copy = json_deep_copy(body), *obj = copy;
	const char *name = path;
	char *text, *at;

	if (strncmp(path, "sandboxes.0.", 12) == 0) {
		obj = json_array_get(json_object_get(copy, "sandboxes"), 0);
		name = path + 12;
	}
	json_object_set_new(obj, name, json_string("__HOSTILE__"));
	text = json_dumps(copy, JSON_COMPACT);
	json_decref(copy);
	at = text ? strstr(text, ph) : NULL;
	if (!at) {
		free(text);
		return;
	}
	buf_add(out, text, (size_t)(at - text));
	buf_add(out, tok, tn);
	buf_str(out, at + sizeof(ph) - 1);
	free(text);
}

/* The JSON string token of a hostile value: escaped (as a JSON encoder
 * writes it), or raw (its bytes between quotes, which is not JSON when
 * they hold control bytes or invalid UTF-8). false when there is none. */
static bool json_token(const struct hostile *h, bool raw, struct buf *out)
{
	json_t *s;
	char *text;

	if (raw) {
		bool odd = false;
		for (size_t i = 0; i < h->n; i++)
			odd |= (unsigned char)h->v[i] < 0x20 || (unsigned char)h->v[i] >= 0x80;
		if (!odd)
			return false;
		buf_str(out, "\"");
		buf_add(out, h->v, h->n);
		buf_str(out, "\"");
		return true;
	}
	s = json_stringn(h->v, h->n);
	text = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
	json_decref(s);
	if (!text)
		return false;
	buf_str(out, text);
	free(text);
	return true;
}

/* The properties of a JSON body schema: top-level names, and for the
 * agent document the fields of its first sample. */
static int body_fields(json_t *schema, char names[][96], int max)
{
	const char *k;
	json_t *v;
	int n = 0;

	json_object_foreach(json_object_get(schema, "properties"), k, v)
	{
		if (n < max)
			snprintf(names[n++], 96, "%s", k);
		if (strcmp(k, "sandboxes") == 0) {
			json_t *items = json_object_get(v, "items");
			const char *ref = json_string_value(json_object_get(items, "$ref"));
			json_t *sample =
			    ref ? json_object_get(
				      json_object_get(json_object_get(doc, "components"),
						      "schemas"),
				      ref + 21)
				: items;
			const char *k2;
			json_t *v2;

			json_object_foreach(json_object_get(sample, "properties"), k2, v2)
			{
				if (n < max)
					snprintf(names[n++], 96, "sandboxes.0.%s", k2);
			}
		}
	}
	return n;
}

/* Sends the base request of r; returns its status. */
static int send_base(const struct route *r)
{
	struct buf path = {0};
	json_t *body = base_body(r);
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	const char *form = form_body(r);
	struct req rq = {.method = r->method, .caller = caller_for(r)};
	struct resp x;
	int st;

	fill_path(r, &path, -1, NULL, 0, false);
	base_query(r, &path, NULL);
	rq.target = path.p;
	if (text) {
		rq.body = text;
		rq.body_len = strlen(text);
	} else if (form) {
		rq.body = form;
		rq.body_len = strlen(form);
		rq.content_type = "application/x-www-form-urlencoded";
	}
	/* A new key's secret and a sign-in's cookie are meant to be in these. */
	do_req(&rq, &x,
	       !(strcmp(r->path, "/v1/accounts/{account_id}/keys") == 0 ||
		 strcmp(r->path, "/dashboard/sign-in") == 0));
	st = x.r.status;
	if (st >= 400)
		fprintf(stderr, "note: base request %s %s: %d %.200s\n", r->method, path.p, st,
			x.r.body ? x.r.body : "");
	CHECK(st > 0 && st < 500);
	resp_release(&x);
	json_decref(body);
	free(text);
	free(path.p);
	return st;
}

/* Every hostile value in every position of route r. */
static void walk_route(const struct route *r)
{
	const char *qnames[32];
	char fields[64][96];
	int nq = query_params(r, qnames, 32), np = path_params(r), nf = 0;
	json_t *body = base_body(r), *schema = body_schema(r);
	char *base_text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	const char *form = form_body(r);
	enum caller who = caller_for(r);

	if (body && schema)
		nf = body_fields(schema, fields, 64);
	for (size_t h = 0; h < NHOSTILE; h++) {
		const struct hostile *hv = &hostile[h];
		char what[256];

		/* Path ids: percent-encoded, then raw (traversal only: raw
		 * bytes of the others would not be one request line). */
		for (int i = 0; i < np; i++) {
			for (int raw = 0; raw < 2; raw++) {
				struct buf path = {0};
				struct req rq = {.method = r->method, .caller = who};
				struct resp x;

				if (raw && !strstr(hv->name, "traversal"))
					continue;
				fill_path(r, &path, i, hv->v, hv->n, raw);
				base_query(r, &path, NULL);
				rq.target = path.p;
				rq.body = base_text ? base_text : form;
				rq.body_len = rq.body ? strlen(rq.body) : 0;
				if (form && !base_text)
					rq.content_type = "application/x-www-form-urlencoded";
				snprintf(what, sizeof(what), "path id %d = %s%s", i, hv->name,
					 raw ? " (raw)" : "");
				do_req(&rq, &x, true);
				CHECK(judge(r, what, &x, false));
				resp_release(&x);
				free(path.p);
			}
		}
		/* Query parameters: each declared one, and one not declared. */
		for (int i = 0; i <= nq; i++) {
			const char *name = i < nq ? qnames[i] : "x_undeclared";
			struct buf path = {0};
			struct req rq = {.method = r->method, .caller = who};
			struct resp x;

			fill_path(r, &path, -1, NULL, 0, false);
			base_query(r, &path, name);
			buf_str(&path, strchr(path.p, '?') ? "&" : "?");
			buf_str(&path, name);
			buf_str(&path, "=");
			buf_pct(&path, hv->v, hv->n);
			rq.target = path.p;
			rq.body = base_text ? base_text : form;
			rq.body_len = rq.body ? strlen(rq.body) : 0;
			if (form && !base_text)
				rq.content_type = "application/x-www-form-urlencoded";
			snprintf(what, sizeof(what), "query %s = %s", name, hv->name);
			do_req(&rq, &x, true);
			/* A route that takes no query may ignore one (the
			 * operational and dashboard pages): it must still not
			 * fail or echo it. */
			CHECK(judge(r, what, &x, i == nq && strncmp(r->path, "/v1/", 4) != 0));
			resp_release(&x);
			free(path.p);
		}
		/* Body fields, escaped and raw. The account's name is free
		 * text: phase 2. */
		for (int i = 0; i < nf; i++) {
			for (int raw = 0; raw < 2; raw++) {
				struct buf tok = {0}, text = {0}, path = {0};
				struct req rq = {.method = r->method, .caller = who};
				struct resp x;

				if (strcmp(fields[i], "name") == 0 ||
				    !json_token(hv, raw != 0, &tok))
					continue;
				body_with(body, fields[i], tok.p, tok.len, &text);
				fill_path(r, &path, -1, NULL, 0, false);
				base_query(r, &path, NULL);
				rq.target = path.p;
				rq.body = text.p;
				rq.body_len = text.len;
				snprintf(what, sizeof(what), "body %.96s = %s%s", fields[i],
					 hv->name, raw ? " (raw)" : "");
				do_req(&rq, &x, true);
				CHECK(judge(r, what, &x, false));
				resp_release(&x);
				free(tok.p);
				free(text.p);
				free(path.p);
			}
		}
	}
	json_decref(body);
	free(base_text);
}

/* Request headers: CR/LF folding, NUL, 1 MiB, in the headers a proxy or
 * this service might look at or echo. */
static void walk_headers(void)
{
	static const char *const names[] = {"X-Request-Id",  "Idempotency-Key", "Cookie",
					    "Authorization", "Origin",		"X-Forwarded-For",
					    "Content-Type"};
	const struct route *keys = NULL;
	char target[160];

	for (size_t i = 0; i < routes_count; i++)
		if (strcmp(routes[i].path, "/v1/keys/{key_id}") == 0)
			keys = &routes[i];
	CHECK(keys != NULL);
	if (!keys)
		return;
	snprintf(target, sizeof(target), "/v1/keys/%s", kf);
	for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
		for (size_t h = 0; h < NHOSTILE; h++) {
			struct buf hd = {0};
			struct req rq = {.method = "GET", .target = target, .caller = C_READ_ONLY};
			struct resp x;
			char what[256];

			/* A value with CR/LF is sent as a folded line; the
			 * server must not turn it into a header of its answer. */
			buf_str(&hd, names[n]);
			buf_str(&hd, ": v");
			for (size_t k = 0; k < hostile[h].n; k++) {
				char c = hostile[h].v[k];
				if (c == '\n')
					buf_str(&hd, "\r\n ");
				else if (c != '\r')
					buf_add(&hd, &c, 1);
			}
			buf_str(&hd, "\r\n");
			rq.headers = hd.p;
			rq.headers_len = hd.len;
			if (strcmp(names[n], "Authorization") == 0)
				rq.caller = C_NONE;
			snprintf(what, sizeof(what), "header %s = %s", names[n], hostile[h].name);
			do_req(&rq, &x, true);
			/* Extra headers are ignored: 200 is right, as is a 4xx
			 * for a header that cannot be taken. */
			CHECK(judge(keys, what, &x, strcmp(names[n], "Authorization") != 0));
			if (strcmp(names[n], "Authorization") == 0)
				CHECK(x.r.status == 401 || x.r.status == 400 || x.r.status == 431);
			resp_release(&x);
			free(hd.p);
		}
	}
	/* Raw CR/LF and NUL in the request line itself. */
	{
		static const char *const targets[] = {"/v1/keys/a\r\nX-Injected: yes",
						      "/v1/keys/a\rb",
						      "/v1/keys/a b",
						      "/v1/keys/' OR 1=1--",
						      "/v1/keys/..%2f..%2fetc%2fpasswd",
						      "/v1/keys/%",
						      "/v1/keys/%zz",
						      "/v1/keys?account_id=%",
						      "//v1//keys",
						      "/v1/./keys",
						      "/v1/keys/../prices",
						      "*",
						      "http://127.0.0.1/v1/keys",
						      "/v1/keys#frag"};

		for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
			struct req rq = {
			    .method = "GET", .target = targets[i], .caller = C_READ_ONLY};
			struct resp x;

			do_req(&rq, &x, true);
			/* Some of these are fine requests for another route
			 * (/v1/keys/../prices is /v1/prices to nobody: 404). */
			CHECK(x.r.status != 0 && x.r.status < 500 && !x.injected);
			resp_release(&x);
		}
		{
			static const char nul_target[] = "/v1/keys/a\0b";
			struct req rq = {.method = "GET",
					 .target = nul_target,
					 .target_len = sizeof(nul_target) - 1,
					 .caller = C_READ_ONLY};
			struct resp x;

			do_req(&rq, &x, true);
			CHECK(x.r.status >= 400 && x.r.status < 500 && !x.injected);
			resp_release(&x);
		}
	}
}

/* --- 2. free text: stored exactly ------------------------------------- */

static void free_text(void)
{
	int stored = 0;

	for (size_t h = 0; h < NHOSTILE; h++) {
		struct buf tok = {0}, body = {0};
		struct req rq = {.method = "POST", .target = "/v1/accounts", .caller = C_OPERATOR};
		struct resp x;
		json_t *j;

		if (!json_token(&hostile[h], false, &tok)) {
			free(tok.p);
			continue;
		}
		buf_str(&body, "{\"name\":");
		buf_add(&body, tok.p, tok.len);
		buf_str(&body, "}");
		rq.body = body.p;
		rq.body_len = body.len;
		do_req(&rq, &x, true);
		j = x.r.body ? json_loadb(x.r.body, x.r.body_len, 0, NULL) : NULL;
		if (x.r.status == 201) {
			/* Stored byte for byte: the value went in as a parameter. */
			const char *id = json_string_value(json_object_get(j, "account_id"));
			const char *params[1] = {id};
			PGresult *res = PQexecParams(
			    t.db.conn, "SELECT name FROM accounts WHERE account_id = $1", 1, NULL,
			    params, NULL, NULL, 0);

			CHECK(id && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1);
			if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
				CHECK((size_t)PQgetlength(res, 0, 0) == hostile[h].n &&
				      memcmp(PQgetvalue(res, 0, 0), hostile[h].v, hostile[h].n) ==
					  0);
				stored++;
			}
			PQclear(res);
		} else {
			/* Refused: a 4xx naming the field (control bytes, NUL,
			 * over 200 bytes, or over the body cap). */
			struct route fake = {.method = "POST", .path = "/v1/accounts"};
			CHECK(judge(&fake, hostile[h].name, &x, false));
		}
		json_decref(j);
		resp_release(&x);
		free(tok.p);
		free(body.p);
	}
	printf("security: %d hostile account names stored byte for byte\n", stored);
	CHECK(stored >= 6); /* the SQL, backslash, traversal, format, markup ones */
}

/* --- 3. other accounts ------------------------------------------------ */

/* True when text holds an id of account A. */
/* True when the answer holds an id of account A other than sent (the
 * value the caller gave, which a page may show back in its filter form). */
static bool shows_a(const struct resp *x, const char *sent)
{
	const char *ids[] = {acc, kf, kr, sbx};
	size_t n = x->r.body_len;

	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
		if ((!sent || strcmp(ids[i], sent) != 0) && contains(x->r.body, n, ids[i]))
			return true;
	return false;
}

static void other_accounts(void)
{
	static const char *const id_params[] = {"account_id", "key_id", "sandbox_id"};
	int covered = 0;

	/* Keys of B, given A's ids in every id query parameter. */
	for (size_t i = 0; i < routes_count; i++) {
		const struct route *r = &routes[i];
		const char *qnames[32];
		int nq = query_params(r, qnames, 32);

		if (mutating(r) || !(r->roles & (ROLE_FULL | ROLE_READ_ONLY)) || path_params(r))
			continue;
		for (int q = 0; q < nq; q++) {
			const char *v = NULL;

			for (size_t k = 0; k < 3; k++)
				if (strcmp(qnames[q], id_params[k]) == 0)
					v = id_value(qnames[q], strlen(qnames[q]));
			if (!v)
				continue;
			for (int who = C_B_FULL; who <= C_B_READ_ONLY; who++) {
				struct buf path = {0};
				struct req rq = {.method = "GET", .caller = (enum caller)who};
				struct resp x;

				fill_path(r, &path, -1, NULL, 0, false);
				base_query(r, &path, qnames[q]);
				buf_str(&path, strchr(path.p, '?') ? "&" : "?");
				buf_str(&path, qnames[q]);
				buf_str(&path, "=");
				buf_str(&path, v);
				rq.target = path.p;
				do_req(&rq, &x, true);
				if (shows_a(&x, v) || (x.r.status != 200 && x.r.status != 404))
					fprintf(stderr, "B on %s: %d %.300s\n", path.p, x.r.status,
						x.r.body ? x.r.body : "");
				CHECK(x.r.status == 200 || x.r.status == 404);
				CHECK(!shows_a(&x, v));
				covered++;
				resp_release(&x);
				free(path.p);
			}
		}
	}
	printf("security: %d requests by another account's keys with this account's ids in"
	       " query parameters: none saw anything of it\n",
	       covered);
	CHECK(covered >= 8);

	/* A dashboard session of B: A's sandbox page and exports. */
	for (int i = 0; i < 4; i++) {
		char target[256], hdr[1100];
		struct req rq = {.method = "GET", .target = target, .headers = hdr};
		struct resp x;

		snprintf(hdr, sizeof(hdr), "Cookie: %s\r\n", cookie_b);
		if (i == 0)
			snprintf(target, sizeof(target), "/dashboard/sandboxes/%s", sbx);
		else if (i == 1)
			snprintf(target, sizeof(target), "/dashboard/sandboxes?key_id=%s", kf);
		else if (i == 2)
			snprintf(target, sizeof(target),
				 "/v1/reports/usage.csv?from=2026-01-01T00:00:00Z&to="
				 "2026-01-02T00:00:00Z&account_id=%s",
				 acc);
		else
			snprintf(target, sizeof(target),
				 "/v1/reports/statement.html?month=2026-01&account_id=%s", acc);
		do_req(&rq, &x, true);
		if (x.r.status != 404 || shows_a(&x, i == 1 ? kf : NULL))
			fprintf(stderr, "B's session on %s: %d\n", target, x.r.status);
		/* A's key is no key of B's account: the filter says so. */
		CHECK_I64(x.r.status, 404);
		CHECK(!shows_a(&x, i == 1 ? kf : NULL));
		/* The dashboard's answers that are not its pages (here a JSON
		 * 404) may not be framed or run anything either. */
		if (i == 0)
			CHECK(x.r.head &&
			      strstr(x.r.head, "Content-Security-Policy: default-src 'none'; "
					       "frame-ancestors 'none'\r\n") &&
			      strstr(x.r.head, "X-Frame-Options: DENY\r\n") &&
			      strstr(x.r.head, "X-Content-Type-Options: nosniff\r\n"));
		/* Nor may an API answer, which may quote the request, be taken
		 * for a page: nosniff on every answer, once. */
		if (i == 2) {
			const char *n =
			    x.r.head ? strstr(x.r.head, "X-Content-Type-Options: nosniff\r\n")
				     : NULL;

			CHECK(n != NULL);
			CHECK(n == NULL || strstr(n + 1, "X-Content-Type-Options") == NULL);
		}
		resp_release(&x);
	}
	/* The operator's bearer token on a page names no account: refused,
	 * not shown as an idle account with nothing metered. */
	{
		static const char *const pages[] = {"/dashboard/", "/dashboard/sandboxes",
						    "/dashboard/keys", "/dashboard/exports"};

		for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
			char hdr[200];
			struct req rq = {.method = "GET", .target = pages[i], .headers = hdr};
			struct resp x;

			snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s\r\n",
				 t.operator_token);
			do_req(&rq, &x, true);
			CHECK_I64(x.r.status, 400);
			CHECK_STR(x.code, "invalid_request");
			resp_release(&x);
		}
	}
	/* A session stands for a key only on the pages and exports: not on the
	 * API, and never for a change. */
	for (size_t i = 0; i < routes_count; i++) {
		const struct route *r = &routes[i];
		struct buf path = {0};
		char hdr[1100];
		json_t *body;
		char *text;
		struct req rq = {.method = r->method, .headers = hdr};
		struct resp x;

		if (r->session || (r->roles & ROLE_PUBLIC))
			continue;
		body = base_body(r);
		text = body ? json_dumps(body, JSON_COMPACT) : NULL;
		snprintf(hdr, sizeof(hdr), "Cookie: %s\r\n", cookie_op);
		fill_path(r, &path, -1, NULL, 0, false);
		base_query(r, &path, NULL);
		rq.target = path.p;
		rq.body = text;
		rq.body_len = text ? strlen(text) : 0;
		do_req(&rq, &x, true);
		if (x.r.status != 401)
			fprintf(stderr, "operator session on %s %s: %d\n", r->method, r->path,
				x.r.status);
		CHECK_I64(x.r.status, 401);
		resp_release(&x);
		json_decref(body);
		free(text);
		free(path.p);
	}
	/* A session cookie altered in any character is refused. (The last
	 * character of each base64url part also carries padding bits that
	 * decoding drops, so changing those bits alone would change nothing:
	 * it is not altered there.) */
	{
		const char *eq = strchr(cookie_a, '=');
		size_t len = strlen(cookie_a);

		for (size_t pos = eq ? (size_t)(eq - cookie_a) + 1 : len; pos < len; pos++) {
			char bad[1024], hdr[1100];
			struct req rq = {
			    .method = "GET", .target = "/dashboard/keys", .headers = hdr};
			struct resp x;

			if (pos + 1 == len || cookie_a[pos + 1] == '.' || cookie_a[pos] == '.')
				continue;
			snprintf(bad, sizeof(bad), "%s", cookie_a);
			bad[pos] = bad[pos] == 'A' ? '_' : 'A';
			snprintf(hdr, sizeof(hdr), "Cookie: %s\r\n", bad);
			do_req(&rq, &x, true);
			CHECK_I64(x.r.status, 303); /* back to the sign-in page */
			resp_release(&x);
		}
	}
}

/* Sign-in and sign-out forms posted from another site are refused (login
 * and logout CSRF). This server runs behind "HTTPS" (session_cookie_secure
 * = 1): an Origin of plain http:// on our own host is another site too. */
static void forms_from_other_sites(void)
{
	static const struct {
		const char *headers;
		int status; /* of a sign-in with a good key; sign-out alike */
	} cases[] = {
	    {"", 303}, /* not a browser: nothing to forge */
	    {"Origin: https://127.0.0.1\r\n", 303},
	    {"Sec-Fetch-Site: same-origin\r\nOrigin: https://127.0.0.1\r\n", 303},
	    {"Sec-Fetch-Site: none\r\n", 303},
	    {"Origin: http://127.0.0.1\r\n", 403},
	    {"Origin: https://evil.example\r\n", 403},
	    {"Origin: https://127.0.0.1.evil.example\r\n", 403},
	    {"Origin: null\r\n", 403},
	    {"Sec-Fetch-Site: cross-site\r\nOrigin: https://127.0.0.1\r\n", 403},
	    {"Sec-Fetch-Site: same-site\r\n", 403},
	};
	struct buf form = {0};

	buf_str(&form, "key=");
	buf_pct(&form, tr, strlen(tr));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		static const char *const targets[] = {"/dashboard/sign-in", "/dashboard/sign-out"};

		for (size_t w = 0; w < 2; w++) {
			struct req rq = {.method = "POST",
					 .target = targets[w],
					 .headers = cases[i].headers,
					 .content_type = "application/x-www-form-urlencoded",
					 .body = w == 0 ? form.p : NULL, /* sign-out: none */
					 .body_len = w == 0 ? form.len : 0};
			struct resp x;
			char sc[1024];
			const char *cookie;

			do_req(&rq, &x, false);
			if (x.r.status != cases[i].status)
				fprintf(stderr, "%s with %s: %d\n", targets[w], cases[i].headers,
					x.r.status);
			CHECK_I64(x.r.status, cases[i].status);
			cookie = rawhttp_header(&x.r, "Set-Cookie", sc, sizeof(sc));
			/* A refused form sets no cookie; an accepted one sets
			 * (or deletes) it Secure. */
			CHECK(cases[i].status == 403
				  ? cookie == NULL
				  : cookie && strstr(cookie, "; Secure") != NULL);
			if (w == 1 && cookie)
				CHECK(strstr(cookie, "Max-Age=0") != NULL);
			resp_release(&x);
		}
	}
	free(form.p);
}

/* --- 4. secrets ------------------------------------------------------- */

/* The secret part of a bearer token: after its last '.', or all of it. */
static const char *secret_of(const char *token)
{
	const char *dot = strrchr(token, '.');

	return dot ? dot + 1 : token;
}

/* Signs in to the dashboard with key (and account, for the operator);
 * the session cookie "meter_session=..." goes to out. */
static int sign_in_status; /* the last sign-in's answer */

static int sign_in(const char *key, const char *account, char *out, size_t len)
{
	struct buf form = {0};
	struct req rq = {.method = "POST",
			 .target = "/dashboard/sign-in",
			 .content_type = "application/x-www-form-urlencoded"};
	struct resp x;
	char sc[1024];
	int ret = -1;

	buf_str(&form, "key=");
	buf_pct(&form, key, strlen(key));
	if (account) {
		buf_str(&form, "&account=");
		buf_str(&form, account);
	}
	rq.body = form.p;
	rq.body_len = form.len;
	do_req(&rq, &x, false); /* its Set-Cookie is meant to hold the cookie */
	sign_in_status = x.r.status;
	if (x.r.status == 303 && rawhttp_header(&x.r, "Set-Cookie", sc, sizeof(sc))) {
		size_t n = strcspn(sc, ";");
		snprintf(out, len, "%.*s", (int)n, sc);
		ret = strncmp(out, SESSION_COOKIE "=", sizeof(SESSION_COOKIE)) == 0 ? 0 : -1;
	}
	resp_release(&x);
	free(form.p);
	return ret;
}

/* True when secret is in x anywhere but as the value of an id member the
 * request itself sent (key_id, sandbox_id, idempotency_key). */
static bool leaks_beyond_echo(const struct resp *x, const char *secret)
{
	static const char *const echoed[] = {"key_id", "sandbox_id", "idempotency_key"};
	json_t *j = x->r.body ? json_loadb(x->r.body, x->r.body_len, 0, NULL) : NULL;
	json_t *objs[2] = {j, json_object_get(j, "error")};
	char *text;
	bool leak;

	if (x->r.head && strstr(x->r.head, secret))
		return true;
	if (!j)
		return contains(x->r.body, x->r.body_len, secret);
	for (int o = 0; o < 2; o++)
		for (size_t k = 0; k < sizeof(echoed) / sizeof(echoed[0]); k++) {
			const char *v = json_string_value(json_object_get(objs[o], echoed[k]));
			if (v && strcmp(v, secret) == 0)
				json_object_del(objs[o], echoed[k]);
		}
	text = json_dumps(j, JSON_COMPACT);
	leak = !text || strstr(text, secret) != NULL;
	free(text);
	json_decref(j);
	return leak;
}

/* Failing requests carrying each secret where it does not belong. */
static void carry_secrets(const char *const *secrets, size_t n)
{
	char target[1024], hdr[1024], body[1024];

	for (size_t i = 0; i < n; i++) {
		const char *s = secrets[i];
		struct {
			const char *method, *target, *headers, *body, *ctype;
		} cases[] = {
		    {"GET", "/v1/keys", hdr, NULL, NULL},
		    {"GET", target, NULL, NULL, NULL},
		    {"POST", "/v1/checks/create", NULL, body, NULL},
		    {"POST", "/dashboard/sign-in", NULL, body + 512,
		     "application/x-www-form-urlencoded"},
		};

		/* Authorization without a key id, with a wrong scheme, with a
		 * byte more; the secret in a query value, a JSON field, a
		 * form, a cookie and a request id. */
		for (int variant = 0; variant < 6; variant++) {
			struct req rq;
			struct resp x;
			int c = variant < 3 ? 0 : variant - 2;

			switch (variant) {
			case 0:
				snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s\r\n", s);
				break;
			case 1:
				snprintf(hdr, sizeof(hdr),
					 "Authorization: Basic %s\r\nX-Request-Id: %s\r\n", s, s);
				break;
			case 2:
				snprintf(hdr, sizeof(hdr),
					 "Authorization: Bearer %s.%sx\r\nCookie: %s=%s\r\n", kf, s,
					 SESSION_COOKIE, s);
				break;
			default:
				break;
			}
			snprintf(target, sizeof(target),
				 "/v1/sandboxes?account_id=%s&key_id=%s&cursor=%s", s, s, s);
			snprintf(
			    body, 512,
			    "{\"key_id\":\"%s\",\"sandbox_id\":\"%s\",\"vcpus\":1,"
			    "\"memory_mib\":512,\"lease_seconds\":60,\"idempotency_key\":\"%s\"}",
			    s, s, s);
			snprintf(body + 512, 512, "key=%s&account=%%20", s);
			memset(&rq, 0, sizeof(rq));
			rq.method = cases[c].method;
			rq.target = cases[c].target;
			rq.headers = cases[c].headers;
			rq.body = cases[c].body;
			rq.body_len = rq.body ? strlen(rq.body) : 0;
			rq.content_type = cases[c].ctype;
			rq.caller = c == 1 ? C_READ_ONLY : c == 2 ? C_CONTROL_PLANE : C_NONE;
			if (c == 1)
				rq.caller = C_B_READ_ONLY;
			/* An id the caller sent may come back in the error that
			 * explains it (key_not_found names the key_id): that is
			 * its own input, checked apart from everything else. */
			do_req(&rq, &x, c != 2);
			if (c == 2)
				CHECK(!leaks_beyond_echo(&x, s));
			/* Each of these fails (the sign-in: not a key of ours). */
			if (x.r.status < 400 || x.r.status >= 500)
				fprintf(stderr, "secret %zu, variant %d: %d %.200s\n", i, variant,
					x.r.status, x.r.body ? x.r.body : "");
			CHECK(x.r.status >= 400 && x.r.status < 500);
			resp_release(&x);
		}
	}
}

/* A key's whole token where its id belongs, as an operator pasting a new
 * key's secret (the whole token) for its key_id might: a 4xx, and the
 * secret kept out of the log (secrets_check looks; the line keeps
 * "<key_id>.[redacted]"). The answer may name the id sent: not kept. */
static void token_in_path(const char *token)
{
	/* As pasted: alone, with a blank or a line end after it, with a
	 * suffix, or as a segment's middle. */
	static const char *const after[] = {"", "%20", "%0A", ".json", "/x"};
	char target[512];
	struct req rq = {.method = "GET", .target = target, .caller = C_OPERATOR};
	struct resp x;

	for (size_t i = 0; i < sizeof(after) / sizeof(after[0]); i++) {
		snprintf(target, sizeof(target), "/v1/keys/%s%s", token, after[i]);
		do_req(&rq, &x, false);
		CHECK(x.r.status >= 400 && x.r.status < 500);
		resp_release(&x);
	}
	rq.method = "DELETE";
	snprintf(target, sizeof(target), "/v1/accounts/%s/keys/%s", acc, token);
	do_req(&rq, &x, false);
	CHECK(x.r.status >= 400 && x.r.status < 500);
	resp_release(&x);
}

static void secrets_check(void)
{
	const char *secrets[16];
	size_t n = 0;
	char cookies[3][1024], redacted[256];
	struct resp m;
	struct req rq = {.method = "GET", .target = "/metrics"};
	char *log;

	secrets[n++] = t.operator_token;
	secrets[n++] = t.control_plane_token;
	secrets[n++] = t.agent_token;
	secrets[n++] = session_secret;
	secrets[n++] = webhook_secret;
	secrets[n++] = secret_of(tf);
	secrets[n++] = secret_of(tr);
	secrets[n++] = secret_of(tbf);
	secrets[n++] = secret_of(tbr);
	secrets[n++] = secret_of(tv);
	snprintf(cookies[0], sizeof(cookies[0]), "%s", strchr(cookie_a, '=') + 1);
	snprintf(cookies[1], sizeof(cookies[1]), "%s", strchr(cookie_b, '=') + 1);
	snprintf(cookies[2], sizeof(cookies[2]), "%s", strchr(cookie_op, '=') + 1);
	for (int i = 0; i < 3; i++)
		secrets[n++] = cookies[i];
	carry_secrets(secrets, n);
	token_in_path(tf);
	token_in_path(tr);
	token_in_path(tbf);
	token_in_path(tbr);
	token_in_path(tv);

	do_req(&rq, &m, false);
	CHECK_I64(m.r.status, 200);
	CHECK(apitest_stop(&t) == 0); /* the whole log is written */
	log = apitest_read_log(&t, 0);
	CHECK(log && strstr(log, "access rid=") != NULL);
	snprintf(redacted, sizeof(redacted), "path=\"/v1/keys/%.*s.[redacted]\"",
		 (int)(secret_of(tf) - 1 - tf), tf);
	CHECK(log && strstr(log, redacted) != NULL);
	for (size_t i = 0; i < n; i++) {
		bool in_seen = contains(seen, seen_len, secrets[i]);
		bool in_metrics = contains(m.r.body, m.r.body_len, secrets[i]);
		bool in_log = log && contains(log, strlen(log), secrets[i]);

		if (in_seen || in_metrics || in_log)
			fprintf(stderr, "secret %zu found in:%s%s%s\n", i,
				in_seen ? " responses" : "", in_metrics ? " /metrics" : "",
				in_log ? " the log" : "");
		if (in_seen) {
			const char *at = memmem(seen, seen_len, secrets[i], strlen(secrets[i]));
			const char *from = at - seen > 300 ? at - 300 : seen;
			fprintf(stderr, "  ...%.*s...\n", (int)(at - from + 80), from);
		}
		if (in_log) {
			const char *at = strstr(log, secrets[i]);
			const char *from = at - log > 300 ? at - 300 : log;
			fprintf(stderr, "  log: ...%.*s...\n", (int)(at - from + 80), from);
		}
		CHECK(!in_seen && !in_metrics && !in_log);
	}
	printf("security: %zu secrets (tokens, session and webhook secrets, key secrets,"
	       " session cookies) in none of %d responses (%zu bytes), /metrics or the log"
	       " (%zu bytes)\n",
	       n, requests, seen_len, log ? strlen(log) : 0);
	free(log);
	resp_release(&m);
}

/* --- main ------------------------------------------------------------- */

static int random_hex(char *out)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char b[32];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return -1;
	for (size_t i = 0; i < sizeof(b); i++) {
		out[2 * i] = hex[b[i] >> 4];
		out[2 * i + 1] = hex[b[i] & 15];
	}
	out[64] = '\0';
	return 0;
}

int main(void)
{
	const char *args[] = {"--collector", "off", NULL};
	char env_session[128], env_webhook[128], sql[512];
	const char *env[] = {env_session, env_webhook, "METER_SESSION_COOKIE_SECURE=1", NULL};
	char *before, *again, *after;
	int walked = 0;

	if (random_hex(session_secret) < 0 || random_hex(webhook_secret) < 0)
		return 1;
	snprintf(env_session, sizeof(env_session), "METER_SESSION_SECRET=%s", session_secret);
	snprintf(env_webhook, sizeof(env_webhook), "METER_WEBHOOK_SECRET=%s", webhook_secret);
	one_mib = malloc(MIB);
	doc = json_loadb(openapi_json, openapi_json_len, 0, NULL);
	if (!one_mib || !doc)
		return 1;
	memset(one_mib, 'a', MIB);
	hostile[NHOSTILE - 1].v = one_mib;
	if (apitest_start(&t, "security", 1, args, env) < 0)
		return 1;
	port = t.servers[0].port;
	CHECK(apitest_create_account(&t, "A", acc) == 0);
	CHECK(apitest_create_account(&t, "B", accb) == 0);
	CHECK(apitest_create_key(&t, acc, "full", 100000000, NULL, kf, tf) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, kr, tr) == 0);
	CHECK(apitest_create_key(&t, accb, "full", -1, NULL, kbf, tbf) == 0);
	CHECK(apitest_create_key(&t, accb, "read_only", -1, NULL, kbr, tbr) == 0);
	CHECK(apitest_create_key(&t, acc, "read_only", -1, NULL, kv, tv) == 0);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state)"
		 " VALUES ('%s', '%s', '%s', 1, 512, 'paused')",
		 acc, sbx, kf);
	CHECK_STR(testdb_exec_state(t.db.conn, sql), "00000");
	CHECK(sign_in(tr, NULL, cookie_a, sizeof(cookie_a)) == 0);
	CHECK(sign_in(tbr, NULL, cookie_b, sizeof(cookie_b)) == 0);
	CHECK(sign_in(t.operator_token, acc, cookie_op, sizeof(cookie_op)) == 0);
	{
		/* No session for an account that does not exist (its pages
		 * would show an idle account). */
		char none[sizeof(cookie_op)];
		CHECK(sign_in(t.operator_token, "acc_nope", none, sizeof(none)) == -1);
		CHECK_I64(sign_in_status, 404);
	}

	/* Every route once as it should be called (changes what it changes). */
	for (size_t i = 0; i < routes_count; i++)
		send_base(&routes[i]);

	/* 1. The walk; the database must not change. */
	db_digest_setup();
	before = db_digest();
	sleep(1);
	again = db_digest();
	CHECK(before && again && strcmp(before, again) == 0); /* nothing changes by itself */
	for (size_t i = 0; i < routes_count; i++) {
		walk_route(&routes[i]);
		walked++;
	}
	walk_headers();
	after = db_digest();
	CHECK(before && after);
	if (before && after && strcmp(before, after) != 0) {
		fprintf(stderr, "the database changed:\n before %s\n after  %s\n", before, after);
		CHECK(false);
	}
	printf("security: %d routes walked, %d hostile requests (%zu kinds of value in every"
	       " path id, query parameter, body field and header), %d answered by"
	       " libmicrohttpd itself; none a 5xx, no header injected, the database unchanged\n",
	       walked, hostile_cases, NHOSTILE, libmhd_answers);
	free(before);
	free(again);
	free(after);

	/* 2-4. */
	free_text();
	other_accounts();
	forms_from_other_sites();
	secrets_check();

	apitest_drop(&t);
	json_decref(doc);
	free(one_mib);
	free(seen);
	return check_done();
}
