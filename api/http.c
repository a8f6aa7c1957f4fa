/* meter API: request helpers (see http.h). */
#include "http.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "metrics.h"
#include "parse.h"

int64_t http_now_usec(void)
{
	return clock_mono_usec();
}

/* Bytes of built answers libmicrohttpd still holds (until each is sent or
 * its connection closes), and of those over HTTP_ANSWER_SMALL, with the
 * most those may hold together: a client that asks for a large answer and
 * never reads it holds that memory until its connection times out, and a
 * hundred of them must not take the process's memory. One large answer is
 * always let through when no other is held, so that one larger than the
 * limit can still be had. */
static _Atomic int64_t answers_held, answers_large_held;
static _Atomic int64_t answers_limit = (int64_t)256 << 20;
/* Of answers_large_held, the bytes of answers being built (http_answer_grow). */
static _Atomic int64_t answers_building;

void http_answers_limit_set(int64_t bytes)
{
	atomic_store(&answers_limit, bytes);
}

int64_t http_answers_held(void)
{
	return atomic_load(&answers_held);
}

int64_t http_answers_building(void)
{
	return atomic_load(&answers_building);
}

/* An answer's bytes, counted while libmicrohttpd has them. */
struct answer {
	int64_t len;
	char *text; /* owned; NULL when the text follows the struct */
	char data[];
};

static void answer_free(void *cls)
{
	struct answer *a = cls;

	atomic_fetch_sub(&answers_held, a->len);
	if (a->len > HTTP_ANSWER_SMALL)
		atomic_fetch_sub(&answers_large_held, a->len);
	free(a->text);
	free(a);
}

/* Counts len bytes as held, unless the answer is large and the large ones
 * held with it would pass the limit: then false, nothing counted. */
static bool answer_reserve(size_t len)
{
	int64_t n = (int64_t)len, large;

	if (len > HTTP_ANSWER_SMALL) {
		large = atomic_load(&answers_large_held);
		do {
			if (large > 0 && large + n > atomic_load(&answers_limit))
				return false;
		} while (!atomic_compare_exchange_weak(&answers_large_held, &large, large + n));
	}
	atomic_fetch_add(&answers_held, n);
	return true;
}

/* The answer of a large reply that would pass the limit: 503, to be asked
 * again shortly, when the clients that hold answers have read them and the
 * answers being built are done. */
void http_reply_answers_full(struct http_req *req)
{
	/* Written out, not built: http_reply_json, which may call this, is
	 * not called again from here. */
	static const char body[] =
	    "{\"error\":{\"code\":\"metering_unavailable\",\"message\":\"too many large answers "
	    "are being built or waiting for their clients to read them; retry shortly\","
	    "\"reason\":\"answers_memory\"}}";

	http_reply_static(req, 503, "application/json", body, sizeof(body) - 1);
	if (req->resp &&
	    MHD_add_response_header(req->resp, MHD_HTTP_HEADER_RETRY_AFTER, "1") != MHD_YES)
		log_warn("could not add Retry-After");
}

/* A built answer of len bytes that the limit refused. */
static void reply_answers_full(struct http_req *req, size_t len)
{
	metrics_counter_add("meter_http_answers_refused_total", NULL, 1);
	log_warn("request %s: an answer of %zu bytes would take the large answers held and being "
		 "built past answers_memory_mib; answered 503",
		 req->request_id, len);
	http_reply_answers_full(req);
}

/* The requests building answers (building != 0), oldest first: the oldest
 * is never refused for the others being built, so that builds started
 * together cannot refuse one another in turn for ever. */
static pthread_mutex_t building_lock = PTHREAD_MUTEX_INITIALIZER;
static struct http_req *building_first, *building_last;

/* Links req last (on), or unlinks it; under building_lock. */
static void building_link(struct http_req *req, bool on)
{
	if (on == req->building_linked)
		return;
	if (on) {
		req->building_prev = building_last;
		req->building_next = NULL;
		if (building_last)
			building_last->building_next = req;
		else
			building_first = req;
		building_last = req;
	} else {
		if (req->building_prev)
			req->building_prev->building_next = req->building_next;
		else
			building_first = req->building_next;
		if (req->building_next)
			req->building_next->building_prev = req->building_prev;
		else
			building_last = req->building_prev;
		req->building_prev = req->building_next = NULL;
	}
	req->building_linked = on;
}

/* Whether delta more bytes for req's answer must be refused: it would take
 * the large answers past the limit, and it is not small, and something
 * else is counted: for the oldest build, answers held for their clients
 * (which go by themselves); for a younger one, anything. Under
 * building_lock. */
static bool building_refuse(const struct http_req *req, int64_t large, int64_t delta)
{
	bool oldest = req->building_linked ? building_first == req : building_first == NULL;
	int64_t held = large - atomic_load(&answers_building);

	if (req->building + delta <= HTTP_ANSWER_SMALL ||
	    large + delta <= atomic_load(&answers_limit))
		return false;
	return oldest ? held > 0 : true;
}

bool http_answer_grow(struct http_req *req, int64_t delta)
{
	int64_t large;

	pthread_mutex_lock(&building_lock);
	large = atomic_load(&answers_large_held);
	if (delta > 0) {
		do {
			if (building_refuse(req, large, delta)) {
				if (!req->building_refused) {
					metrics_counter_add("meter_http_answers_refused_total",
							    NULL, 1);
					log_warn("request %s: building its answer (%lld bytes so "
						 "far, %lld more asked) would take the large "
						 "answers held and being built past "
						 "answers_memory_mib; answered 503",
						 req->request_id, (long long)req->building,
						 (long long)delta);
				}
				req->building_refused = true;
				pthread_mutex_unlock(&building_lock);
				return false;
			}
		} while (!atomic_compare_exchange_weak(&answers_large_held, &large, large + delta));
	} else {
		atomic_fetch_add(&answers_large_held, delta);
	}
	atomic_fetch_add(&answers_building, delta);
	req->building += delta;
	if (req->building > req->building_most)
		req->building_most = req->building;
	building_link(req, req->building != 0);
	pthread_mutex_unlock(&building_lock);
	return true;
}

/* A stream's first buffer, doubled as needed: small, so that a short
 * statement's text and lines stay under HTTP_ANSWER_SMALL together. */
#define STREAM_FIRST (8 * 1024)

/* A growing buffer written through a FILE: its capacity counted for its
 * request by http_answer_grow before it is allocated. */
struct answer_stream {
	struct http_req *req; /* borrowed */
	FILE *f;	      /* NULL once closed */
	char *buf;	      /* owned */
	size_t len, cap;
	bool refused; /* http_answer_grow said no */
	bool no_memory;
};

static ssize_t answer_stream_write(void *cookie, const char *data, size_t n)
{
	struct answer_stream *st = cookie;
	size_t cap = st->cap ? st->cap : STREAM_FIRST;
	char *buf;

	if (st->refused || st->no_memory)
		return 0;
	while (cap - st->len < n) {
		if (cap > SIZE_MAX / 4) {
			st->no_memory = true;
			return 0;
		}
		cap *= 2;
	}
	if (cap != st->cap) {
		/* The old buffer and the new one live together while realloc
		 * copies: both are counted until it is done. */
		if (!http_answer_grow(st->req, (int64_t)cap)) {
			st->refused = true;
			return 0;
		}
		buf = realloc(st->buf, cap);
		if (!buf) {
			(void)http_answer_grow(st->req, -(int64_t)cap);
			st->no_memory = true;
			return 0;
		}
		(void)http_answer_grow(st->req, -(int64_t)st->cap);
		st->buf = buf;
		st->cap = cap;
	}
	memcpy(st->buf + st->len, data, n);
	st->len += n;
	return (ssize_t)n;
}

FILE *http_answer_stream(struct http_req *req)
{
	static const cookie_io_functions_t io = {.write = answer_stream_write};
	struct answer_stream *st;

	if (req->stream)
		return NULL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	st->req = req;
	st->f = fopencookie(st, "w", io);
	if (!st->f) {
		free(st);
		return NULL;
	}
	req->stream = st;
	return st->f;
}

/* Frees req's stream (closing it if still open), giving back its count. */
static void answer_stream_free(struct http_req *req)
{
	struct answer_stream *st = req->stream;

	if (!st)
		return;
	if (st->f && fclose(st->f) != 0)
		st->no_memory = true;
	(void)http_answer_grow(req, -(int64_t)st->cap);
	free(st->buf);
	free(st);
	req->stream = NULL;
}

void http_answer_end(struct http_req *req)
{
	answer_stream_free(req);
	if (req->building != 0)
		(void)http_answer_grow(req, -req->building);
}

/* A response of len bytes: text's copy (own false) or text itself (own
 * true: freed here, whatever happens), counted in answers_held. NULL when
 * memory ran out; *full when the limit refused it. */
static struct MHD_Response *answer_response(const char *text, size_t len, bool own, bool *full)
{
	struct answer *a;
	struct MHD_Response *resp;

	*full = false;
	a = malloc(sizeof(*a) + (own ? 0 : len));
	if (!a) {
		if (own)
			free((void *)text);
		return NULL;
	}
	a->len = (int64_t)len;
	a->text = own ? (char *)text : NULL;
	if (!answer_reserve(len)) {
		*full = true;
		free(a->text);
		free(a);
		return NULL;
	}
	if (!own)
		memcpy(a->data, text, len);
	resp = MHD_create_response_from_buffer_with_free_callback_cls(len, own ? a->text : a->data,
								      answer_free, a);
	if (!resp)
		answer_free(a);
	return resp;
}

/* Replaces any response already set (a handler may change its mind). */
static void set_response(struct http_req *req, unsigned status, struct MHD_Response *resp)
{
	if (req->resp)
		MHD_destroy_response(req->resp);
	/* A 401 names the scheme that would be accepted (RFC 9110, 15.5.2). */
	if (status == 401 && resp &&
	    MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
				    "Bearer realm=\"meter\"") != MHD_YES)
		log_warn("could not add WWW-Authenticate");
	req->resp = resp;
	req->status = status;
}

void http_reply_response(struct http_req *req, unsigned status, struct MHD_Response *resp)
{
	set_response(req, status, resp);
}

void http_safe_name(const char *s, char *out)
{
	size_t n = 0;

	for (; n < PARSE_ID_MAX && s[n]; n++) {
		if ((unsigned char)s[n] >= 0x20 && (unsigned char)s[n] < 0x7f)
			out[n] = s[n];
		else
			out[n] = '?';
	}
	out[n] = '\0';
}

struct query_check {
	const char *const *allowed;
	const char *bad; /* the first name refused, borrowed */
	const char *why; /* static reason */
	uint64_t seen;	 /* bit i: allowed[i] seen */
};

/* libmicrohttpd iterator over query arguments: stops at an unknown name,
 * a name given twice (which of the values was meant?), or a NUL byte (a C
 * string would silently cut the value there). */
static enum MHD_Result query_check_one(void *cls, enum MHD_ValueKind kind, const char *key,
				       size_t key_size, const char *value, size_t value_size)
{
	struct query_check *qc = cls;
	size_t i;

	(void)kind;
	qc->bad = key;
	if (strlen(key) != key_size || (value && strlen(value) != value_size)) {
		qc->why = "a NUL byte in query parameter";
		return MHD_NO;
	}
	if (key_size == 0) {
		/* "?=x", "?a=1&&b=2": nothing to name but the query. */
		qc->why = "a query parameter without a name";
		return MHD_NO;
	}
	for (i = 0; qc->allowed[i]; i++)
		if (strcmp(qc->allowed[i], key) == 0)
			break;
	if (!qc->allowed[i]) {
		qc->why = "unknown query parameter";
		return MHD_NO;
	}
	if (i < 64 && (qc->seen & (UINT64_C(1) << i))) {
		qc->why = "query parameter given twice";
		return MHD_NO;
	}
	if (i < 64)
		qc->seen |= UINT64_C(1) << i;
	qc->bad = NULL;
	return MHD_YES;
}

bool http_query_allowed(struct http_req *req, const char *const *allowed)
{
	struct query_check qc = {.allowed = allowed};
	char msg[128], name[PARSE_ID_MAX + 1];

	MHD_get_connection_values_n(req->conn, MHD_GET_ARGUMENT_KIND, query_check_one, &qc);
	if (!qc.why)
		return true;
	http_safe_name(qc.bad, name);
	if (!name[0]) {
		http_reply_error(req, 400, "invalid_request", qc.why,
				 json_pack("{s:s}", "field", "query"));
		return false;
	}
	snprintf(msg, sizeof(msg), "%s \"%s\"", qc.why, name);
	http_reply_error(req, 400, "invalid_request", msg, json_pack("{s:s}", "field", name));
	return false;
}

/* Sets resp (NULL: memory ran out, a 500) with its Content-Type. */
static void set_typed(struct http_req *req, unsigned status, const char *content_type,
		      struct MHD_Response *resp)
{
	if (!resp) {
		log_error("out of memory building a response");
		set_response(req, 500, NULL);
		return;
	}
	if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type) != MHD_YES)
		log_warn("could not add Content-Type");
	set_response(req, status, resp);
}

/* http_reply_text (own false) and http_reply_owned (own true). */
static void reply_counted(struct http_req *req, unsigned status, const char *content_type,
			  const char *text, size_t len, bool own)
{
	bool full;
	struct MHD_Response *resp = answer_response(text, len, own, &full);

	if (full)
		reply_answers_full(req, len);
	else
		set_typed(req, status, content_type, resp);
}

void http_reply_stream(struct http_req *req, unsigned status, const char *content_type, FILE *f,
		       bool complete)
{
	struct answer_stream *st = req->stream;
	struct MHD_Response *resp;
	struct answer *a;
	char *text;

	if (!st || st->f != f) {
		log_error("request %s: an answer's stream that is not its own", req->request_id);
		set_response(req, 500, NULL);
		return;
	}
	/* The last flush happens here, and may be refused too. */
	st->f = NULL;
	if (fclose(f) != 0 && !st->refused)
		st->no_memory = true;
	if (st->refused) {
		answer_stream_free(req);
		http_reply_answers_full(req);
		return;
	}
	if (!complete || st->no_memory) {
		/* Memory that ran out is the server's fault, as anywhere. */
		log_error("request %s: out of memory building its answer", req->request_id);
		answer_stream_free(req);
		http_reply_error(req, 500, "internal", "internal error", NULL);
		return;
	}
	a = malloc(sizeof(*a));
	if (!a) {
		answer_stream_free(req);
		set_typed(req, status, content_type, NULL);
		return;
	}
	/* Held from now on as any built answer is, counted before the
	 * bytes counted while it was built are given back: the limit never
	 * sees room that is not there. */
	text = st->len ? realloc(st->buf, st->len) : NULL;
	if (text)
		st->buf = text;
	a->len = (int64_t)st->len;
	a->text = st->buf;
	atomic_fetch_add(&answers_held, a->len);
	if (a->len > HTTP_ANSWER_SMALL)
		atomic_fetch_add(&answers_large_held, a->len);
	st->buf = NULL;
	answer_stream_free(req);
	/* What built a large answer (a statement's lines, the JSON objects
	 * of usage items: many small blocks, several times its text) is free
	 * now; glibc's heaps keep such memory, whose pages are returned to the
	 * system here. */
	if (req->building_most > HTTP_TRIM_BYTES)
		malloc_trim(0);
	resp = MHD_create_response_from_buffer_with_free_callback_cls(
	    (size_t)a->len, a->text ? a->text : (char *)"", answer_free, a);
	if (!resp)
		answer_free(a);
	set_typed(req, status, content_type, resp);
}

void http_reply_text(struct http_req *req, unsigned status, const char *content_type,
		     const char *text, size_t len)
{
	reply_counted(req, status, content_type, text, len, false);
}

void http_reply_owned(struct http_req *req, unsigned status, const char *content_type, char *text,
		      size_t len)
{
	reply_counted(req, status, content_type, text, len, true);
}

void http_reply_static(struct http_req *req, unsigned status, const char *content_type,
		       const char *text, size_t len)
{
	set_typed(req, status, content_type,
		  MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_PERSISTENT));
}

void http_reply_json(struct http_req *req, unsigned status, json_t *body)
{
	char *text = body ? json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;

	json_decref(body);
	if (!text) {
		static const char oom[] =
		    "{\"error\":{\"code\":\"internal\",\"message\":\"response too large\"}}";
		http_reply_static(req, 500, "application/json", oom, sizeof(oom) - 1);
		return;
	}
	reply_counted(req, status, "application/json", text, strlen(text), true);
}

void http_reply_json_counted(struct http_req *req, unsigned status, json_t *body, int64_t counted)
{
	FILE *f = http_answer_stream(req);
	bool ok = f && json_dumpf(body, f, JSON_COMPACT | JSON_PRESERVE_ORDER) == 0;

	json_decref(body);
	(void)http_answer_grow(req, -counted);
	if (!f) {
		log_error("request %s: out of memory building its answer", req->request_id);
		http_reply_json(req, 500, NULL);
		return;
	}
	http_reply_stream(req, status, "application/json", f, ok);
}

void http_reply_error(struct http_req *req, unsigned status, const char *code, const char *message,
		      json_t *extra)
{
	json_t *err = json_object(), *body = json_object();

	if (!err || !body) {
		json_decref(err);
		json_decref(body);
		json_decref(extra);
		http_reply_json(req, 500, NULL);
		return;
	}
	json_object_set_new(err, "code", json_string(code));
	json_object_set_new(err, "message", json_string(message));
	if (extra) {
		json_object_update(err, extra);
		json_decref(extra);
	}
	json_object_set_new(body, "error", err);
	http_reply_json(req, status, body);
}

json_t *http_json_body(struct http_req *req)
{
	json_error_t jerr;
	json_t *root;
	const char *nul;
	char msg[320], field[PARSE_ID_MAX + 1];

	if (!req->body || req->body_len == 0) {
		http_reply_error(req, 400, "invalid_request", "request body must be a JSON object",
				 json_pack("{s:s}", "field", "body"));
		return NULL;
	}
	if (parse_json_depth(req->body, req->body_len) > HTTP_JSON_DEPTH_MAX) {
		http_reply_error(req, 400, "invalid_request", "JSON nested too deeply",
				 json_pack("{s:s}", "field", "body"));
		return NULL;
	}
	/* A raw NUL byte is never JSON (inside a string it is written
	 * \u0000), and jansson took one before a closing bracket for the end
	 * of the text and parsed what came before it. */
	nul = memchr(req->body, '\0', req->body_len);
	if (nul) {
		snprintf(msg, sizeof(msg), "malformed JSON at byte %zu: a NUL byte",
			 (size_t)(nul - req->body));
		http_reply_error(req, 400, "invalid_request", msg,
				 json_pack("{s:s}", "field", "body"));
		return NULL;
	}
	/* No JSON_ALLOW_NUL: an escaped NUL inside a string is rejected by
	 * the parser, as is invalid UTF-8. */
	root = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		/* jansson refuses a JSON integer outside 64 bits as it parses,
		 * so the handler that would name the field never sees it: name
		 * the member the parser stopped in. */
		if (strncmp(jerr.text, "too big", 7) == 0 && jerr.position > 0 &&
		    parse_json_member_at(req->body, req->body_len, (size_t)jerr.position - 1, field,
					 sizeof(field))) {
			snprintf(msg, sizeof(msg), "%s: a JSON integer past 64 bits (%s)", field,
				 jerr.text);
			http_reply_error(req, 400, "invalid_request", msg,
					 json_pack("{s:s}", "field", field));
			return NULL;
		}
		/* Likewise a string value holding an escaped NUL: the member
		 * it is in. */
		if (parse_json_error_is_nul(jerr.text) && jerr.position > 0 &&
		    parse_json_member_at(req->body, req->body_len, (size_t)jerr.position - 1, field,
					 sizeof(field))) {
			snprintf(msg, sizeof(msg), "%s: %s", field, PARSE_JSON_NUL_TEXT);
			http_reply_error(req, 400, "invalid_request", msg,
					 json_pack("{s:s}", "field", field));
			return NULL;
		}
		snprintf(msg, sizeof(msg), "malformed JSON at byte %d: %s", jerr.position,
			 parse_json_error_is_nul(jerr.text) ? PARSE_JSON_NUL_TEXT : jerr.text);
		http_reply_error(req, 400, "invalid_request", msg,
				 json_pack("{s:s}", "field", "body"));
		return NULL;
	}
	if (!json_is_object(root)) {
		json_decref(root);
		http_reply_error(req, 400, "invalid_request", "request body must be a JSON object",
				 json_pack("{s:s}", "field", "body"));
		return NULL;
	}
	return root;
}

const char *http_query(struct http_req *req, const char *name)
{
	const char *v = NULL;
	size_t vlen = 0;

	if (MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v,
					  &vlen) != MHD_YES)
		return NULL;
	return v ? v : ""; /* "?name" without '=' is an empty value */
}

const char *http_header(struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}
