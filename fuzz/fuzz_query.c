/* Fuzzer: query strings, as libmicrohttpd splits and decodes them and the
 * handlers read them (hutil_query_* in api/h_util.c, http_query_allowed and
 * http_query in api/http.c, h_usage_range in api/h_usage.c).
 *
 * The input is the query string of a GET request (a space, CR, LF or NUL
 * in it is sent percent-encoded: a request line cannot hold them). The
 * request goes through a real libmicrohttpd daemon in this process over a
 * socket pair, and the handler here reads it as the API's handlers do:
 * first the check of the names, then each value.
 *
 * Invariants: http_query_allowed (every route's check) accepts exactly
 * when every name is known, given once and free of NUL bytes (and values
 * too), as read here straight from libmicrohttpd; an accepted id
 * is valid and the value given; an accepted integer is in range and its
 * decimal text; an accepted time prints and parses back; a from/to range is
 * ordered and within its cap; every refusal is a 400 whose body, read back
 * from the socket, is a well-formed error with a code, a message and the
 * field. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "h_usage.h"
#include "h_util.h"

#define QUERY_MAX    4096	 /* input bytes used */
#define RUNS_MAX     64		 /* MHD_run rounds for one request */
#define RESPONSE_MAX (64 * 1024) /* bytes of the response read back */
/* The server refuses a query of more parameters before any handler reads
 * it (api/server.c, query_cut; test_api_badinput), and libmicrohttpd alone
 * leaves a request of about 900 unanswered: such input is not fuzzed. */
#define PARAMS_MAX 64

static const char *const allowed[] = {"from",  "to",	"account_id", "key_id",
				      "state", "limit", "window",     NULL};
static const char *const states[] = {"running", "paused", "stopped", NULL};

static struct MHD_Daemon *daemon_;

/* One request's outcome: the handler ran; the first refusal's reply, which
 * is the one sent (the rest are dropped), and its status. */
static bool handled;
static struct MHD_Response *kept;
static unsigned kept_status;

/* What libmicrohttpd holds, read directly: the independent view. */
struct scan {
	bool unknown, twice, nul;
	unsigned seen;
};

static enum MHD_Result scan_one(void *cls, enum MHD_ValueKind kind, const char *key,
				size_t key_size, const char *value, size_t value_size)
{
	struct scan *s = cls;
	size_t i;

	(void)kind;
	if (memchr(key, '\0', key_size) || (value && memchr(value, '\0', value_size)))
		s->nul = true;
	for (i = 0; allowed[i]; i++)
		if (strlen(allowed[i]) == key_size && memcmp(allowed[i], key, key_size) == 0)
			break;
	if (!allowed[i])
		s->unknown = true;
	else if (s->seen & (1u << i))
		s->twice = true;
	else
		s->seen |= 1u << i;
	return MHD_YES;
}

/* Takes the reply a refusal left, checking it was a 400: the first is
 * sent, to check its body; later ones are dropped. */
static void refused(struct http_req *req)
{
	fuzz_req_verdict(req, false);
	if (!kept) {
		kept = req->resp;
		kept_status = req->status;
	} else {
		MHD_destroy_response(req->resp);
	}
	req->resp = NULL;
	req->status = 0;
}

/* The value of name as libmicrohttpd has it, or NULL. */
static const char *raw(struct http_req *req, const char *name)
{
	const char *v = NULL;
	size_t len = 0;

	if (MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v,
					  &len) != MHD_YES)
		return NULL;
	return v ? v : "";
}

/* Reads every value the way the handlers do, once the names passed. */
static void read_values(struct http_req *req)
{
	char id[PARSE_ID_MAX + 1], text[HUTIL_TIME_MAX], dec[32];
	int64_t usec = -1, back = -1, n = 0, from = 0, to = 0;
	bool present = false, has = false;
	const char *v;
	int index = -1;

	v = raw(req, "account_id");
	if (hutil_query_id(req, "account_id", id, &present)) {
		FUZZ_CHECK(present == (v != NULL));
		FUZZ_CHECK(!present || (parse_is_id(id) && strcmp(id, v) == 0));
	} else {
		FUZZ_CHECK(v && !parse_is_id(v));
		refused(req);
	}
	v = raw(req, "state");
	if (hutil_query_enum(req, "state", states, &index, &present)) {
		FUZZ_CHECK(present == (v != NULL));
		FUZZ_CHECK(!present || (index >= 0 && index < 3 && strcmp(states[index], v) == 0));
	} else {
		refused(req);
	}
	v = raw(req, "limit");
	if (hutil_query_int(req, "limit", 1, 1000, &n, &present)) {
		FUZZ_CHECK(present == (v != NULL));
		if (present) {
			FUZZ_CHECK(n >= 1 && n <= 1000);
			snprintf(dec, sizeof(dec), "%lld", (long long)n);
			FUZZ_CHECK(strcmp(dec, v) == 0);
		}
	} else {
		refused(req);
	}
	v = raw(req, "from");
	if (hutil_query_time(req, "from", &usec, &present)) {
		FUZZ_CHECK(present == (v != NULL));
		if (present) {
			FUZZ_CHECK(usec >= 0);
			hutil_time_format(usec, text, sizeof(text));
			FUZZ_CHECK(hutil_time_parse(text, &back) == METER_OK && back == usec);
		}
	} else {
		FUZZ_CHECK(v && hutil_time_parse(v, &back) != METER_OK);
		refused(req);
	}
	if (h_usage_range(req, H_USAGE_HOURLY_RANGE_MAX, &has, &from, &to)) {
		FUZZ_CHECK(has == (raw(req, "from") != NULL));
		FUZZ_CHECK(has == (raw(req, "to") != NULL));
		FUZZ_CHECK(!has || (from < to && to - from <= H_USAGE_HOURLY_RANGE_MAX));
	} else {
		refused(req);
	}
	/* http_query gives libmicrohttpd's own first value. */
	FUZZ_CHECK(http_query(req, "key_id") ==
		   MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "key_id"));
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **req_cls)
{
	static int marker;
	static const char ok_body[] = "{}";
	struct http_req req;
	struct scan s = {0};
	struct MHD_Response *resp;
	enum MHD_Result r;
	bool ok;

	(void)cls;
	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	if (*req_cls != &marker) {
		*req_cls = &marker;
		return MHD_YES;
	}
	memset(&req, 0, sizeof(req));
	req.conn = conn;
	req.method = method;
	req.path = url;
	MHD_get_connection_values_n(conn, MHD_GET_ARGUMENT_KIND, scan_one, &s);

	ok = http_query_allowed(&req, allowed);
	FUZZ_CHECK(ok == (!s.unknown && !s.twice && !s.nul));
	if (ok)
		read_values(&req);
	else
		refused(&req);
	FUZZ_CHECK(req.resp == NULL);

	handled = true;
	if (kept) {
		r = MHD_queue_response(conn, kept_status, kept);
		MHD_destroy_response(kept);
		kept = NULL;
		return r;
	}
	kept_status = MHD_HTTP_OK;
	resp = MHD_create_response_from_buffer(sizeof(ok_body) - 1, (void *)ok_body,
					       MHD_RESPMEM_PERSISTENT);
	FUZZ_CHECK(resp != NULL);
	r = MHD_queue_response(conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return r;
}

/* The response the handler sent (len bytes of HTTP): its status, and for a
 * refusal a well-formed error body {"error":{"code","message"[,"field"]}}. */
static void check_response(const char *text, size_t len)
{
	const char *body = memmem(text, len, "\r\n\r\n", 4);
	json_t *doc, *err, *field;
	unsigned status = 0;

	FUZZ_CHECK(len > 12 && memcmp(text, "HTTP/1.1 ", 9) == 0 && body != NULL);
	for (int i = 9; i < 12; i++)
		status = status * 10 + (unsigned)(text[i] - '0');
	FUZZ_CHECK(status == kept_status);
	if (status == MHD_HTTP_OK)
		return;
	body += 4;
	doc = json_loadb(body, len - (size_t)(body - text), 0, NULL);
	FUZZ_CHECK(doc != NULL);
	err = json_object_get(doc, "error");
	FUZZ_CHECK(json_is_object(err));
	FUZZ_CHECK(json_is_string(json_object_get(err, "code")));
	FUZZ_CHECK(strcmp(json_string_value(json_object_get(err, "code")), "invalid_request") == 0);
	FUZZ_CHECK(json_is_string(json_object_get(err, "message")));
	FUZZ_CHECK(json_string_length(json_object_get(err, "message")) > 0);
	field = json_object_get(err, "field"); /* every refusal here names one ("" too) */
	FUZZ_CHECK(json_is_string(field));
	json_decref(doc);
}

static void stop(void)
{
	MHD_stop_daemon(daemon_);
}

/* The request for the query data (size bytes): a new string. */
static char *request_text(const uint8_t *data, size_t size)
{
	static const char head[] = "GET /q?", tail[] = " HTTP/1.1\r\nHost: f\r\n"
						       "Connection: close\r\n\r\n";
	char *out = malloc(sizeof(head) + 3 * size + sizeof(tail));
	size_t n = sizeof(head) - 1;

	FUZZ_CHECK(out != NULL);
	memcpy(out, head, n);
	for (size_t i = 0; i < size; i++) {
		unsigned char c = data[i];

		if (c == ' ' || c == '\r' || c == '\n' || c == '\0') {
			n += (size_t)snprintf(out + n, 4, "%%%02X", c);
		} else {
			out[n++] = (char)c;
		}
	}
	memcpy(out + n, tail, sizeof(tail));
	return out;
}

/* More parameters than the server lets a handler see. */
static bool params_over(const uint8_t *data, size_t size)
{
	size_t n = 1;

	for (size_t i = 0; i < size; i++)
		if (data[i] == '&' && ++n > PARAMS_MAX)
			return true;
	return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_in addr = {.sin_family = AF_INET,
				   .sin_port = htons(40000),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	char buf[4096];
	char *text, *got;
	size_t len, off = 0, got_len = 0;
	bool eof = false;
	int sv[2];

	if (size > QUERY_MAX || params_over(data, size))
		return 0;
	if (!daemon_) {
		daemon_ = MHD_start_daemon(MHD_USE_NO_LISTEN_SOCKET, 0, NULL, NULL, on_request,
					   NULL, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
					   (size_t)(64 * 1024), MHD_OPTION_END);
		FUZZ_CHECK(daemon_ != NULL);
		FUZZ_CHECK(atexit(stop) == 0);
	}
	text = request_text(data, size);
	len = strlen(text);
	got = malloc(RESPONSE_MAX);
	FUZZ_CHECK(got != NULL);
	handled = false;
	kept = NULL;
	kept_status = 0;
	FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
	FUZZ_CHECK(MHD_add_connection(daemon_, sv[0], (struct sockaddr *)&addr, sizeof(addr)) ==
		   MHD_YES);
	for (int round = 0; round < RUNS_MAX && !eof; round++) {
		ssize_t n;

		if (off < len) {
			n = write(sv[1], text + off, len - off);
			if (n > 0)
				off += (size_t)n;
			if (off == len)
				FUZZ_CHECK(shutdown(sv[1], SHUT_WR) == 0);
		}
		FUZZ_CHECK(MHD_run(daemon_) == MHD_YES);
		while ((n = read(sv[1], buf, sizeof(buf))) > 0) {
			FUZZ_CHECK(got_len + (size_t)n <= RESPONSE_MAX);
			memcpy(got + got_len, buf, (size_t)n);
			got_len += (size_t)n;
		}
		eof = n == 0;
	}
	FUZZ_CHECK(eof);
	if (handled)
		check_response(got, got_len);
	close(sv[1]);
	free(got);
	free(text);
	return 0;
}
