/* The API's answers held to its OpenAPI document (see openapi_check.h). */
#include "openapi_check.h"

#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static pthread_mutex_t doc_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *doc_loaded;

const json_t *openapi_check_doc(const char *path)
{
	json_error_t e;

	pthread_mutex_lock(&doc_lock);
	if (!doc_loaded) {
		doc_loaded = json_load_file(path, 0, &e);
		if (!doc_loaded)
			fprintf(stderr, "openapi_check: %s:%d: %s\n", path, e.line, e.text);
	}
	pthread_mutex_unlock(&doc_lock);
	return doc_loaded;
}

/* One validation: the document, the first failure. */
struct vctx {
	const json_t *doc;
	char *err;
	size_t errlen;
	int depth;
};

__attribute__((format(printf, 3, 4))) static bool fail(struct vctx *v, const char *where,
						       const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(v->err, v->errlen, "at %s: %s", where, msg);
	return false;
}

const json_t *openapi_check_resolve(const json_t *doc, const char *ref)
{
	const json_t *node = doc;
	const char *p;

	if (strncmp(ref, "#/", 2) != 0)
		return NULL;
	p = ref + 2;
	while (node && *p) {
		char name[128];
		size_t n = 0;

		for (; *p && *p != '/'; p++) {
			char ch = *p;

			if (ch == '~' && (p[1] == '0' || p[1] == '1'))
				ch = *++p == '0' ? '~' : '/';
			if (n + 1 >= sizeof(name))
				return NULL;
			name[n++] = ch;
		}
		name[n] = '\0';
		if (*p == '/')
			p++;
		node = json_object_get(node, name);
	}
	return node;
}

static bool type_is(const char *type, const json_t *x)
{
	if (strcmp(type, "object") == 0)
		return json_is_object(x);
	if (strcmp(type, "array") == 0)
		return json_is_array(x);
	if (strcmp(type, "string") == 0)
		return json_is_string(x);
	if (strcmp(type, "integer") == 0)
		return json_is_integer(x);
	if (strcmp(type, "number") == 0)
		return json_is_number(x);
	if (strcmp(type, "boolean") == 0)
		return json_is_boolean(x);
	if (strcmp(type, "null") == 0)
		return json_is_null(x);
	return false;
}

static size_t utf8_chars(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xC0) != 0x80)
			n++;
	return n;
}

static bool digits(const char *s, int n)
{
	for (int i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/* RFC 3339: full-date ("YYYY-MM-DD"), and date-time (full-date "T"
 * HH:MM:SS, a fraction, then "Z" or an offset). */
static bool is_date(const char *s)
{
	return digits(s, 4) && s[4] == '-' && digits(s + 5, 2) && s[7] == '-' && digits(s + 8, 2);
}

static bool is_date_time(const char *s)
{
	const char *p = s + 10;

	if (strlen(s) < 20 || !is_date(s) || (*p != 'T' && *p != 't') || !digits(p + 1, 2) ||
	    p[3] != ':' || !digits(p + 4, 2) || p[6] != ':' || !digits(p + 7, 2))
		return false;
	p += 9;
	if (*p == '.') {
		if (!digits(p + 1, 1))
			return false;
		for (p++; *p >= '0' && *p <= '9'; p++)
			;
	}
	if (*p == 'Z' || *p == 'z')
		return p[1] == '\0';
	return (*p == '+' || *p == '-') && digits(p + 1, 2) && p[3] == ':' && digits(p + 4, 2) &&
	       p[6] == '\0';
}

/* The document's patterns, each compiled once (a page of a list holds
 * thousands of ids); kept until the process ends. */
#define PATTERNS_MAX 32
static struct {
	const char *pattern; /* borrowed from the document, loaded for good */
	regex_t re;
} patterns[PATTERNS_MAX];
static int npatterns;
static pthread_mutex_t patterns_lock = PTHREAD_MUTEX_INITIALIZER;

static bool matches(const char *pattern, const char *s, bool *ok)
{
	regex_t *re = NULL;

	pthread_mutex_lock(&patterns_lock);
	for (int i = 0; i < npatterns && !re; i++)
		if (strcmp(patterns[i].pattern, pattern) == 0)
			re = &patterns[i].re;
	if (!re && npatterns < PATTERNS_MAX &&
	    regcomp(&patterns[npatterns].re, pattern, REG_EXTENDED | REG_NOSUB) == 0) {
		patterns[npatterns].pattern = pattern;
		re = &patterns[npatterns++].re;
	}
	pthread_mutex_unlock(&patterns_lock);
	*ok = re != NULL;
	return re && regexec(re, s, 0, NULL, 0) == 0;
}

/* Schemas nest (properties, items, allOf, oneOf, $ref), and so does the
 * walk, bounded by vctx.depth.
 * NOLINTNEXTLINE(misc-no-recursion) */
static bool validate(struct vctx *v, const json_t *schema, const json_t *x, const char *where,
		     json_t *evaluated);

/* The keywords validate() knows; any other one (but annotations) is a
 * failure, so that the document cannot lean on one it does not check. */
static bool known_keyword(const char *k)
{
	static const char *const known[] = {"$ref",
					    "type",
					    "enum",
					    "const",
					    "minimum",
					    "maximum",
					    "minLength",
					    "maxLength",
					    "pattern",
					    "format",
					    "properties",
					    "required",
					    "additionalProperties",
					    "unevaluatedProperties",
					    "minProperties",
					    "items",
					    "maxItems",
					    "allOf",
					    "oneOf",
					    "description",
					    "title",
					    "examples",
					    "example",
					    "default",
					    "deprecated",
					    "readOnly",
					    "writeOnly",
					    NULL};

	if (strncmp(k, "x-", 2) == 0)
		return true;
	for (int i = 0; known[i]; i++)
		if (strcmp(k, known[i]) == 0)
			return true;
	return false;
}

/* NOLINTNEXTLINE(misc-no-recursion): see validate */
static bool validate_object(struct vctx *v, const json_t *schema, const json_t *x,
			    const char *where, json_t *evaluated)
{
	const json_t *props = json_object_get(schema, "properties");
	const json_t *addl = json_object_get(schema, "additionalProperties");
	const json_t *req = json_object_get(schema, "required");
	const json_t *minp = json_object_get(schema, "minProperties");
	const char *name;
	json_t *val, *r;
	size_t i;
	char sub[512];

	json_array_foreach(req, i, r)
	{
		if (json_is_string(r) && !json_object_get(x, json_string_value(r)))
			return fail(v, where, "\"%s\" is required", json_string_value(r));
	}
	if (json_is_integer(minp) && (json_int_t)json_object_size(x) < json_integer_value(minp))
		return fail(v, where, "fewer than %lld members",
			    (long long)json_integer_value(minp));
	json_object_foreach((json_t *)x, name, val)
	{
		const json_t *ps = json_object_get(props, name);

		snprintf(sub, sizeof(sub), "%s.%s", where, name);
		if (ps) {
			if (!validate(v, ps, val, sub, NULL))
				return false;
		} else if (json_is_false(addl)) {
			return fail(v, where, "\"%s\" is not a listed member", name);
		} else if (json_is_object(addl) && !validate(v, addl, val, sub, NULL)) {
			return false;
		}
		if (evaluated && (ps || addl))
			json_object_set_new(evaluated, name, json_true());
	}
	return true;
}

static bool validate_string(struct vctx *v, const json_t *schema, const char *s, const char *where)
{
	const json_t *minl = json_object_get(schema, "minLength");
	const json_t *maxl = json_object_get(schema, "maxLength");
	const char *pattern = json_string_value(json_object_get(schema, "pattern"));
	const char *format = json_string_value(json_object_get(schema, "format"));
	size_t n = utf8_chars(s);
	bool ok;

	if (json_is_integer(minl) && (json_int_t)n < json_integer_value(minl))
		return fail(v, where, "\"%s\" is shorter than %lld", s,
			    (long long)json_integer_value(minl));
	if (json_is_integer(maxl) && (json_int_t)n > json_integer_value(maxl))
		return fail(v, where, "\"%.64s...\" is longer than %lld", s,
			    (long long)json_integer_value(maxl));
	if (pattern && !matches(pattern, s, &ok))
		return ok ? fail(v, where, "\"%s\" does not match %s", s, pattern)
			  : fail(v, where, "pattern %s does not compile", pattern);
	if (format && strcmp(format, "date-time") == 0 && !is_date_time(s))
		return fail(v, where, "\"%s\" is not an RFC 3339 date-time", s);
	if (format && strcmp(format, "date") == 0 && !is_date(s))
		return fail(v, where, "\"%s\" is not an RFC 3339 date", s);
	return true;
}

/* NOLINTNEXTLINE(misc-no-recursion): see its declaration */
static bool validate(struct vctx *v, const json_t *schema, const json_t *x, const char *where,
		     json_t *evaluated)
{
	const json_t *ref = json_object_get(schema, "$ref");
	const json_t *type = json_object_get(schema, "type");
	const json_t *en = json_object_get(schema, "enum");
	const json_t *cn = json_object_get(schema, "const");
	const json_t *all = json_object_get(schema, "allOf");
	const json_t *one = json_object_get(schema, "oneOf");
	const json_t *uneval = json_object_get(schema, "unevaluatedProperties");
	json_t *mine = NULL, *sub;
	const char *k;
	json_t *kv;
	size_t i;
	bool ok = false;

	if (json_is_true(schema))
		return true;
	if (!json_is_object(schema))
		return fail(v, where, "the schema is not an object");
	if (++v->depth > 64) {
		v->depth--;
		return fail(v, where, "schemas nest too deep");
	}
	json_object_foreach((json_t *)schema, k, kv)
	{
		if (!known_keyword(k)) {
			fail(v, where, "the check does not know the keyword %s", k);
			goto out;
		}
	}
	/* Members that this schema, its $ref, allOf and oneOf evaluate, for
	 * unevaluatedProperties here and for the schema above. */
	mine = json_object();
	if (!mine) {
		fail(v, where, "out of memory");
		goto out;
	}
	if (json_is_string(ref)) {
		const json_t *target = openapi_check_resolve(v->doc, json_string_value(ref));

		if (!target) {
			fail(v, where, "%s resolves to nothing", json_string_value(ref));
			goto out;
		}
		if (!validate(v, target, x, where, mine))
			goto out;
	}
	if (type) {
		bool any = false;

		if (json_is_string(type))
			any = type_is(json_string_value(type), x);
		json_array_foreach(type, i, sub) any = any || type_is(json_string_value(sub), x);
		if (!any) {
			char *t = json_dumps(type, JSON_ENCODE_ANY | JSON_COMPACT);

			fail(v, where, "not of type %s", t ? t : "?");
			free(t);
			goto out;
		}
	}
	if (en) {
		bool found = false;

		json_array_foreach(en, i, sub) found = found || json_equal(sub, (json_t *)x);
		if (!found) {
			char *t = json_dumps(x, JSON_ENCODE_ANY | JSON_COMPACT);

			fail(v, where, "%.80s is not in the enum", t ? t : "?");
			free(t);
			goto out;
		}
	}
	if (cn && !json_equal((json_t *)cn, (json_t *)x)) {
		fail(v, where, "not the const value");
		goto out;
	}
	if (json_is_integer(x)) {
		const json_t *mn = json_object_get(schema, "minimum");
		const json_t *mx = json_object_get(schema, "maximum");

		if (json_is_integer(mn) && json_integer_value(x) < json_integer_value(mn)) {
			fail(v, where, "%lld is below %lld", (long long)json_integer_value(x),
			     (long long)json_integer_value(mn));
			goto out;
		}
		if (json_is_integer(mx) && json_integer_value(x) > json_integer_value(mx)) {
			fail(v, where, "%lld is above %lld", (long long)json_integer_value(x),
			     (long long)json_integer_value(mx));
			goto out;
		}
	}
	if (json_is_string(x) && !validate_string(v, schema, json_string_value(x), where))
		goto out;
	if (json_is_object(x) && !validate_object(v, schema, x, where, mine))
		goto out;
	if (json_is_array(x)) {
		const json_t *items = json_object_get(schema, "items");
		const json_t *maxi = json_object_get(schema, "maxItems");
		char at[512];

		if (json_is_integer(maxi) &&
		    (json_int_t)json_array_size(x) > json_integer_value(maxi)) {
			fail(v, where, "more than %lld items", (long long)json_integer_value(maxi));
			goto out;
		}
		json_array_foreach((json_t *)x, i, sub)
		{
			snprintf(at, sizeof(at), "%s[%zu]", where, i);
			if (items && !validate(v, items, sub, at, NULL))
				goto out;
		}
	}
	json_array_foreach(all, i, sub)
	{
		if (!validate(v, sub, x, where, mine))
			goto out;
	}
	if (one) {
		size_t passed = 0;
		json_t *hit = NULL;

		json_array_foreach(one, i, sub)
		{
			json_t *seen = json_object();

			if (seen && validate(v, sub, x, where, seen)) {
				passed++;
				json_decref(hit);
				hit = seen;
			} else {
				json_decref(seen);
			}
		}
		if (passed != 1) {
			json_decref(hit);
			if (passed > 1)
				fail(v, where, "valid against %zu of oneOf's schemas, not one",
				     passed);
			else /* the last schema's failure stays in err */
				snprintf(v->err + strlen(v->err), v->errlen - strlen(v->err),
					 " (no schema of oneOf fits)");
			goto out;
		}
		json_object_update(mine, hit);
		json_decref(hit);
	}
	if (json_is_false(uneval) && json_is_object(x)) {
		json_object_foreach((json_t *)x, k, kv)
		{
			if (!json_object_get(mine, k)) {
				fail(v, where, "\"%s\" is not a member any of its schemas lists",
				     k);
				goto out;
			}
		}
	}
	if (evaluated)
		json_object_update(evaluated, mine);
	ok = true;
out:
	json_decref(mine);
	v->depth--;
	return ok;
}

bool openapi_check_schema(const json_t *doc, const json_t *schema, const json_t *instance,
			  char *err, size_t errlen)
{
	struct vctx v = {.doc = doc, .err = err, .errlen = errlen};

	err[0] = '\0';
	return validate(&v, schema, instance, "$", NULL);
}

/* The number of leading literal segments path shares with template, or -1
 * when they do not match ({name} matches any one non-empty segment). */
static int path_match(const char *tmpl, const char *path, size_t plen)
{
	const char *t = tmpl, *p = path, *pend = path + plen;
	int literal = 0;

	while (*t && p < pend) {
		const char *te = strchr(t, '/'), *pe = memchr(p, '/', (size_t)(pend - p));
		size_t tl = te ? (size_t)(te - t) : strlen(t);
		size_t pl = pe ? (size_t)(pe - p) : (size_t)(pend - p);

		if (tl > 1 && t[0] == '{' && t[tl - 1] == '}') {
			if (pl == 0)
				return -1;
		} else if (tl != pl || memcmp(t, p, tl) != 0) {
			return -1;
		} else {
			literal++;
		}
		if (!te || !pe)
			return te || pe ? -1 : literal;
		t = te + 1;
		p = pe + 1;
	}
	return *t == '\0' && p == pend ? literal : -1;
}

/* The value of header name in the last block of headers, into out. */
static bool header_value(const char *headers, const char *name, char *out, size_t len)
{
	const char *block = headers, *p, *line;
	size_t nl = strlen(name);

	for (p = headers; (p = strstr(p, "HTTP/")) != NULL; p++)
		if (p == headers || p[-1] == '\n')
			block = p;
	for (line = block; line && *line;
	     line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
			const char *s = line + nl + 1;
			size_t n = 0;

			while (*s == ' ' || *s == '\t')
				s++;
			while (s[n] && s[n] != '\r' && s[n] != '\n')
				n++;
			while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
				n--;
			snprintf(out, len, "%.*s", (int)n, s);
			return true;
		}
	}
	return false;
}

static const json_t *deref(const json_t *doc, const json_t *node)
{
	const char *ref = json_string_value(json_object_get(node, "$ref"));

	return ref ? openapi_check_resolve(doc, ref) : node;
}

/* Header name of the raw headers against its description h (a header
 * object or a header parameter): false, and why, when h marks it required
 * and it is missing, or when its value is not valid against h's schema. */
static bool header_conforms(const json_t *doc, const json_t *h, const char *headers,
			    const char *name, char *why, size_t whylen)
{
	char value[256], sub[256];
	json_t *hv;
	bool ok;

	if (!header_value(headers, name, value, sizeof(value))) {
		if (!json_is_true(json_object_get(h, "required")))
			return true;
		snprintf(why, whylen, "the required header %s is missing", name);
		return false;
	}
	hv = json_string(value);
	ok = hv && openapi_check_schema(doc, json_object_get(h, "schema"), hv, sub, sizeof(sub));
	json_decref(hv);
	if (!ok)
		snprintf(why, whylen, "header %s: %s", name, hv ? sub : "out of memory");
	return ok;
}

bool openapi_check_response(const json_t *doc, const char *method, const char *path, long status,
			    const char *headers, const char *body, size_t body_len,
			    const json_t *json, char *err, size_t errlen)
{
	const json_t *paths = json_object_get(doc, "paths"), *item = NULL, *op, *resp, *content;
	const json_t *hdrs, *media, *h;
	const char *tmpl, *best = NULL, *name;
	size_t plen = strcspn(path, "?#");
	char m[16], st[8], ctype[128] = "", mtype[128], value[256];
	bool head = strcasecmp(method, "HEAD") == 0;
	int best_lit = -1;
	json_t *it;

	err[0] = '\0';
	json_object_foreach((json_t *)paths, tmpl, it)
	{
		int lit = path_match(tmpl, path, plen);

		if (lit > best_lit) {
			best_lit = lit;
			best = tmpl;
			item = it;
		}
	}
	if (!best)
		return true;
	snprintf(m, sizeof(m), "%s", head ? "get" : method);
	for (char *c = m; *c; c++)
		*c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
	op = json_object_get(item, m);
	if (head && json_object_get(item, "head"))
		op = json_object_get(item, "head");
	snprintf(st, sizeof(st), "%ld", status);
	if (!op) {
		if (status != 405)
			return true;
		resp = openapi_check_resolve(doc, "#/components/responses/MethodNotAllowed");
	} else {
		resp = json_object_get(json_object_get(op, "responses"), st);
		if (!resp)
			resp = json_object_get(json_object_get(op, "responses"), "default");
		if (!resp) {
			snprintf(err, errlen, "%s %s: status %ld is not documented", method, best,
				 status);
			return false;
		}
		resp = deref(doc, resp);
	}
	if (!resp) {
		snprintf(err, errlen, "%s %s %ld: the response's $ref resolves to nothing", method,
			 best, status);
		return false;
	}
	hdrs = json_object_get(resp, "headers");
	json_object_foreach((json_t *)hdrs, name, it)
	{
		char why[320];

		h = deref(doc, it);
		if (!header_conforms(doc, h, headers, name, why, sizeof(why))) {
			snprintf(err, errlen, "%s %s %ld: %s", method, best, status, why);
			return false;
		}
	}
	content = json_object_get(resp, "content");
	header_value(headers, "Content-Type", ctype, sizeof(ctype));
	snprintf(mtype, sizeof(mtype), "%.*s", (int)strcspn(ctype, "; "), ctype);
	if (!content || json_object_size(content) == 0) {
		if (!head && body_len > 0) {
			snprintf(err, errlen, "%s %s %ld: a body (%s) where the document has none",
				 method, best, status, ctype);
			return false;
		}
		return true;
	}
	media = NULL;
	json_object_foreach((json_t *)content, name, it)
	{
		if (strcasecmp(name, mtype) == 0)
			media = it;
	}
	if (!media) {
		snprintf(err, errlen, "%s %s %ld: Content-Type \"%s\" is not documented", method,
			 best, status, ctype);
		return false;
	}
	if (head || strcasecmp(mtype, "application/json") != 0 || !json_object_get(media, "schema"))
		return true;
	if (!json) {
		snprintf(err, errlen, "%s %s %ld: the body is not JSON: %.80s", method, best,
			 status, body ? body : "");
		return false;
	}
	if (!openapi_check_schema(doc, json_object_get(media, "schema"), json, value,
				  sizeof(value))) {
		snprintf(err, errlen, "%s %s %ld: %s", method, best, status, value);
		return false;
	}
	return true;
}

bool openapi_check_webhook(const json_t *doc, const char *headers, const json_t *body, char *err,
			   size_t errlen)
{
	const char *type = json_string_value(json_object_get(body, "type"));
	const json_t *op, *schema, *prm;
	char why[320];
	size_t i;

	err[0] = '\0';
	op = type ? json_object_get(json_object_get(json_object_get(doc, "webhooks"), type), "post")
		  : NULL;
	if (!op) {
		snprintf(err, errlen, "no webhook \"%s\" in the document",
			 type ? type : "(no type)");
		return false;
	}
	json_array_foreach(json_object_get(op, "parameters"), i, prm)
	{
		const json_t *p = deref(doc, prm);
		const char *name = json_string_value(json_object_get(p, "name"));

		if (!name ||
		    strcmp(json_string_value(json_object_get(p, "in")) ?: "", "header") != 0)
			continue;
		if (!header_conforms(doc, p, headers, name, why, sizeof(why))) {
			snprintf(err, errlen, "webhook %s: %s", type, why);
			return false;
		}
	}
	schema = json_object_get(
	    json_object_get(json_object_get(json_object_get(op, "requestBody"), "content"),
			    "application/json"),
	    "schema");
	if (!schema) {
		snprintf(err, errlen, "webhook %s has no JSON request body", type);
		return false;
	}
	if (!openapi_check_schema(doc, schema, body, why, sizeof(why))) {
		snprintf(err, errlen, "webhook %s: %s", type, why);
		return false;
	}
	return true;
}
