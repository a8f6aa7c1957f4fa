/* meter API: the libmicrohttpd server (see server.h). */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "h_reports.h"
#include "http.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "routes.h"
#include "schema_gate.h"

#define CONNECTION_MEMORY_LIMIT (64 * 1024) /* headers and MHD's buffers */
#define SWEEP_INTERVAL_MS	250
#define SLOW_CUT		"meter_http_slow_requests_cut_total" /* counter */
/* No route takes more than a few query parameters. */
#define QUERY_PARAMS_MAX 64

/* One open connection, as the slow-client sweeper sees it. libmicrohttpd's
 * idle timeout alone lets a client that trickles a byte now and then hold a
 * connection for ever (slowloris): the sweeper gives each request
 * request_timeout_s to arrive whole. Lives from libmicrohttpd's "started"
 * to its "closed" notification (the connection's socket_context). */
struct conn_watch {
	struct conn_watch *prev, *next;
	int fd;
	int64_t since_usec; /* monotonic: the request has been awaited since */
	bool receiving;	    /* awaiting or reading a request, not handled yet */
	/* The request on_uri made and on_completed has not freed yet. When
	 * libmicrohttpd refuses a request before any handler saw it (headers
	 * or query over the connection's memory: 431 or 414), it never calls
	 * on_completed; the connection's close frees it instead. Only the
	 * connection's own thread touches it. */
	struct http_req *req;
};

/* One lane of request workers: a queue and the threads that empty it. */
struct lane {
	const char *name;
	pthread_mutex_t lock; /* the queue, stopping */
	pthread_cond_t cond;
	struct http_req *head, *tail;
	bool stopping;
	bool ready; /* lock and cond made */
	pthread_t *workers;
	int nworkers; /* started */
};

struct http_server {
	struct MHD_Daemon *daemon;
	struct app *app;
	int port;
	uint64_t rid_prefix;
	atomic_uint_fast64_t rid_next;
	atomic_int live;      /* requests made (on_uri) and not finished */
	atomic_bool draining; /* http_server_quiesce was called */
	MHD_socket quiesced;  /* the listening socket once quiesced, closed after the stop */
	int64_t request_timeout_usec; /* 0: no sweeper */
	pthread_mutex_t watch_lock;   /* the list, every entry's fields, stopping */
	pthread_cond_t watch_cond;    /* signalled to stop the sweeper */
	struct conn_watch *watch_head;
	bool stopping;
	bool sweeper_started;
	pthread_t sweeper;
	/* Request workers: the handlers that wait on PostgreSQL run here in
	 * arrival order instead of on libmicrohttpd's threads, so a slow page
	 * or a large push never holds up the other connections of the thread
	 * that took it, and one thread's clients never wait behind each other
	 * while another thread idles. Reads and writes have lanes of their
	 * own, so slow reads never hold up a write. */
	struct lane lanes[ROUTE_LANES];
};

static void req_finish(struct MHD_Connection *conn, struct http_req *req, bool aborted);

/* conn's watch, or NULL (not watched: out of memory). */
static struct conn_watch *conn_watch_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

/* Marks conn's request as awaited from now (receiving) or as received. */
static void conn_watch_mark(struct http_server *srv, struct MHD_Connection *conn, bool receiving)
{
	struct conn_watch *w = conn_watch_of(conn);

	if (!w)
		return;
	pthread_mutex_lock(&srv->watch_lock);
	w->receiving = receiving;
	if (receiving)
		w->since_usec = http_now_usec();
	pthread_mutex_unlock(&srv->watch_lock);
}

/* libmicrohttpd's connection notifications: watch every connection from
 * its start to its close. A connection that cannot be watched (out of
 * memory) is still served, under the idle timeout only. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	struct http_server *srv = cls;
	struct conn_watch *w;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
		    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

		*socket_context = NULL;
		w = ci ? calloc(1, sizeof(*w)) : NULL;
		if (!w)
			return;
		w->fd = ci->connect_fd;
		w->since_usec = http_now_usec();
		w->receiving = true;
		pthread_mutex_lock(&srv->watch_lock);
		w->next = srv->watch_head;
		if (w->next)
			w->next->prev = w;
		srv->watch_head = w;
		pthread_mutex_unlock(&srv->watch_lock);
		*socket_context = w;
		return;
	}
	w = *socket_context;
	if (!w)
		return;
	if (w->req)
		req_finish(conn, w->req, true);
	/* libmicrohttpd closes the socket only after this returns: while the
	 * sweeper holds the lock, every listed descriptor is still ours. */
	pthread_mutex_lock(&srv->watch_lock);
	if (w->prev)
		w->prev->next = w->next;
	else
		srv->watch_head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	pthread_mutex_unlock(&srv->watch_lock);
	free(w);
	*socket_context = NULL;
}

/* The sweeper: every SWEEP_INTERVAL_MS, connections whose request has not
 * arrived whole within request_timeout_usec are shut down (shutdown(2):
 * libmicrohttpd then reads the end of the stream and closes and frees the
 * connection in its own thread, as if the client had gone). */
static void *sweeper_main(void *arg)
{
	struct http_server *srv = arg;

	pthread_mutex_lock(&srv->watch_lock);
	while (!srv->stopping) {
		int64_t now = http_now_usec();
		struct timespec until;
		unsigned cut = 0;

		for (struct conn_watch *w = srv->watch_head; w; w = w->next) {
			if (!w->receiving || now - w->since_usec <= srv->request_timeout_usec)
				continue;
			w->receiving = false;
			if (shutdown(w->fd, SHUT_RDWR) == 0)
				cut++;
		}
		if (cut) {
			metrics_counter_add(SLOW_CUT, NULL, cut);
			log_info("http: %u connections cut off: no whole request within %lld s "
				 "(request_timeout_s)",
				 cut, (long long)(srv->request_timeout_usec / 1000000));
		}
		until = clock_mono_after_ms(SWEEP_INTERVAL_MS);
		(void)pthread_cond_timedwait(&srv->watch_cond, &srv->watch_lock, &until);
	}
	pthread_mutex_unlock(&srv->watch_lock);
	return NULL;
}

/* Sets up the sweeper's lock and condition (on the monotonic clock). */
static enum meter_rc watch_init(struct http_server *srv)
{
	if (pthread_mutex_init(&srv->watch_lock, NULL) != 0)
		return METER_ENOMEM;
	if (clock_mono_cond_init(&srv->watch_cond) != 0) {
		pthread_mutex_destroy(&srv->watch_lock);
		return METER_ENOMEM;
	}
	return METER_OK;
}

/* libmicrohttpd's diagnostics, each kind (its format string, a literal)
 * logged at most once every MHD_LOG_EVERY_USEC: a client can make one a
 * connection (each refused over the per-IP limit, each gone before its
 * answer), thousands a second. Kinds past MHD_LOG_KINDS are not limited. */
#define MHD_LOG_KINDS	   32
#define MHD_LOG_EVERY_USEC (10 * 1000000LL)

static struct {
	pthread_mutex_t lock;
	struct {
		const char *fmt;
		int64_t logged_usec;
		unsigned long long more; /* not logged since */
	} kind[MHD_LOG_KINDS];
} mhd_log = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Whether a diagnostic of format fmt is logged now; *more gets how many
 * of it were not logged since the last one that was. */
static bool mhd_log_take(const char *fmt, int64_t now, unsigned long long *more)
{
	bool take = true;

	*more = 0;
	pthread_mutex_lock(&mhd_log.lock);
	for (size_t i = 0; i < MHD_LOG_KINDS; i++) {
		if (mhd_log.kind[i].fmt && mhd_log.kind[i].fmt != fmt)
			continue;
		if (!mhd_log.kind[i].fmt) {
			mhd_log.kind[i].fmt = fmt;
		} else if (now - mhd_log.kind[i].logged_usec < MHD_LOG_EVERY_USEC) {
			mhd_log.kind[i].more++;
			take = false;
			break;
		}
		mhd_log.kind[i].logged_usec = now;
		*more = mhd_log.kind[i].more;
		mhd_log.kind[i].more = 0;
		break;
	}
	pthread_mutex_unlock(&mhd_log.lock);
	return take;
}

/* libmicrohttpd's own diagnostics go to our log; fmt is its printf format. */
__attribute__((format(printf, 2, 0))) static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
	unsigned long long more;
	char line[512];

	(void)cls;
	if (!mhd_log_take(fmt, clock_mono_usec(), &more))
		return;
	vsnprintf(line, sizeof(line), fmt, ap);
	if (more)
		log_warn("http: %s (and %llu more like it since the last one logged)", line, more);
	else
		log_warn("http: %s", line);
}

/* True when the path of uri (as sent, before the query) has an escaped
 * NUL or slash. libmicrohttpd decodes the path before routing, so %00
 * would cut an id short where the string ends and %2F would add a path
 * segment: "/v1/keys/k1%00x" would be served as key k1. */
static bool path_escape_bad(const char *uri)
{
	for (const char *p = uri; *p && *p != '?'; p++)
		if (p[0] == '%' && p[1] &&
		    ((p[1] == '0' && p[2] == '0') || (p[1] == '2' && (p[2] == 'f' || p[2] == 'F'))))
			return true;
	return false;
}

/* The path of a request target: url itself (origin-form, "/v1/keys"), or
 * what follows the scheme and authority of the absolute-form
 * ("http://host:port/v1/keys"), which a server must accept too (RFC 9112,
 * 3.2.2): "/" when there is no path. */
static const char *target_path(const char *url)
{
	const char *p;

	if (strncasecmp(url, "http://", 7) == 0)
		p = url + 7;
	else if (strncasecmp(url, "https://", 8) == 0)
		p = url + 8;
	else
		return url;
	p = strchr(p, '/');
	return p ? p : "/";
}

/* Cuts off the query of uri when it has more than QUERY_PARAMS_MAX
 * parameters; true when it did. libmicrohttpd 0.9.75 keeps each parameter
 * as a record in the connection's memory, and when they do not fit (about
 * 900 short ones) it queues a 431 and then reads on with no buffer: the
 * connection hangs, unanswered, until its timeout. It parses the query from
 * the characters after the '?' of the very string given to on_uri (its own
 * read buffer, called before it parses), so ending that string right after
 * the '?' leaves it no parameters; route_request then refuses the request.
 * (A libmicrohttpd that read the query by its length instead would parse
 * it all the same, and the request would still be refused; the write is
 * within the request target either way.) */
static bool query_cut(const char *uri)
{
	const char *q = strchr(uri, '?');
	size_t n = 1;

	if (!q || !q[1])
		return false;
	for (const char *p = q + 1; *p; p++)
		if (*p == '&' && ++n > QUERY_PARAMS_MAX) {
			((char *)q)[1] = '\0';
			return true;
		}
	return false;
}

/* The first callback of every request: allocate its state and id. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct http_server *srv = cls;
	struct http_req *req = calloc(1, sizeof(*req));
	struct conn_watch *w;
	uint64_t n;

	if (!req)
		return NULL;
	req->target_end = uri ? uri + strlen(uri) : NULL;
	req->path_escape_bad = uri && path_escape_bad(uri);
	req->query_cut = uri && query_cut(uri);
	req->conn = conn;
	req->app = srv->app;
	req->srv = srv;
	atomic_fetch_add(&srv->live, 1);
	req->start_usec = http_now_usec();
	n = atomic_fetch_add(&srv->rid_next, 1);
	snprintf(req->request_id, sizeof(req->request_id), "%08llx%08llx",
		 (unsigned long long)(srv->rid_prefix & 0xffffffffu),
		 (unsigned long long)(n & 0xffffffffu));
	w = conn_watch_of(conn);
	if (w)
		w->req = req;
	return req;
}

/* Queues req's response with the headers every response carries. */
static enum MHD_Result queue(struct http_req *req)
{
	enum MHD_Result r;

	if (!req->resp) {
		/* A handler that set nothing, or an allocation that failed. */
		static const char body[] =
		    "{\"error\":{\"code\":\"internal\",\"message\":\"no response\"}}";
		req->resp = MHD_create_response_from_buffer(sizeof(body) - 1, (void *)body,
							    MHD_RESPMEM_PERSISTENT);
		req->status = 500;
		if (!req->resp)
			return MHD_NO;
		if (MHD_add_response_header(req->resp, MHD_HTTP_HEADER_CONTENT_TYPE,
					    "application/json") != MHD_YES)
			log_warn("could not add Content-Type");
	}
	/* nosniff on every answer: a JSON error quotes what the client sent
	 * ("unknown query parameter \"<script>...\""), and no browser may
	 * take it, or a CSV export, for a page. */
	if (MHD_add_response_header(req->resp, "X-Request-Id", req->request_id) != MHD_YES ||
	    MHD_add_response_header(req->resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store") !=
		MHD_YES ||
	    (!MHD_get_response_header(req->resp, "X-Content-Type-Options") &&
	     MHD_add_response_header(req->resp, "X-Content-Type-Options", "nosniff") != MHD_YES))
		log_warn("could not add response headers");
	/* The dashboard's answers that are not its pages (a JSON error, a
	 * redirect) carry a policy too: nothing may run, load or frame them.
	 * Its pages set their own, with the stylesheet. */
	if (req->path && strncmp(req->path, "/dashboard", 10) == 0 &&
	    !MHD_get_response_header(req->resp, "Content-Security-Policy") &&
	    (MHD_add_response_header(req->resp, "Content-Security-Policy",
				     "default-src 'none'; frame-ancestors 'none'") != MHD_YES ||
	     MHD_add_response_header(req->resp, "X-Frame-Options", "DENY") != MHD_YES))
		log_warn("could not add the dashboard's headers");
	/* Shutting down: the client sends its next request elsewhere. */
	if (req->srv && atomic_load(&req->srv->draining) &&
	    MHD_add_response_header(req->resp, MHD_HTTP_HEADER_CONNECTION, "close") != MHD_YES)
		log_warn("could not add Connection: close");
	r = MHD_queue_response(req->conn, req->status, req->resp);
	MHD_destroy_response(req->resp);
	req->resp = NULL;
	req->queued = true;
	return r;
}

/* A request whose head (its request line and header lines) holds a NUL
 * byte. libmicrohttpd 0.9.75 hands over each part of the head as a C
 * string, so a NUL ends it there and hides the rest: "GET /v1/keys/k1\0x"
 * would be served as key k1, and "Content-Length: 5\0 0" or
 * "Transfer-Encoding: chunked\0x" would frame the body by what a proxy in
 * front may have read otherwise. It keeps the head as it was read, in one
 * buffer, in the order sent, and writes a NUL in it where each part ends:
 * after the method, before the version, at each header's colon and at
 * each line's CR and LF. So each part must start exactly where the one
 * before it ended, past those NULs and the spaces libmicrohttpd skips,
 * and the head must end right after its last line and the empty line;
 * anything else between them is what a NUL hid. A header line folded
 * onto the next (obs-fold, which RFC 9112 lets a server refuse) is moved
 * elsewhere when libmicrohttpd joins it, and is refused the same way. A
 * head not laid out in that buffer at all (another libmicrohttpd, which
 * reads the head its own way) is let through. Not seen: a NUL right
 * before an LF, which reads as the CR libmicrohttpd wrote a NUL over (it
 * hides nothing but itself, or ends the head as an empty line would), and
 * a line before the request line, which libmicrohttpd skips as empty when
 * it starts with a NUL (README, the API's errors). */
struct head_walk {
	const char *head;   /* the head's first byte (the method's) */
	size_t end;	    /* its length */
	size_t at;	    /* where the part just checked ended (its NUL) */
	const char *last;   /* the header just checked (NULL: the request line) */
	const char *hidden; /* the header whose line hid something */
	bool found;
};

/* Where p lies in the head, as an offset; false when it lies outside. */
static bool head_at(const struct head_walk *w, const char *p, size_t *off)
{
	uintptr_t x = (uintptr_t)p, lo = (uintptr_t)w->head;

	if (!p || x < lo || x - lo >= w->end)
		return false;
	*off = (size_t)(x - lo);
	return true;
}

/* The length of the C string at offset i, within the head. */
static size_t head_len(const struct head_walk *w, size_t i)
{
	return strnlen(w->head + i, w->end - i);
}

/* True when offset next starts a line right after the line ending at
 * offset at: its CR and LF, or a bare LF, each written over with a NUL. */
static bool head_next_line(const struct head_walk *w, size_t at, size_t next)
{
	return at < w->end && w->head[at] == '\0' &&
	       (next == at + 1 || (next == at + 2 && at + 1 < w->end && w->head[at + 1] == '\0'));
}

static enum MHD_Result head_walk_one(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	struct head_walk *w = cls;
	size_t k, v, p;

	(void)kind;
	if (!head_at(w, key, &k) || !head_at(w, value, &v) || !head_next_line(w, w->at, k)) {
		w->found = true;
		w->hidden = w->last;
		return MHD_NO;
	}
	/* The name, its colon (a NUL now) and the spaces and tabs before the
	 * value. */
	p = k + head_len(w, k) + 1;
	while (p < v && (w->head[p] == ' ' || w->head[p] == '\t'))
		p++;
	if (p != v) {
		w->found = true;
		w->hidden = key;
		return MHD_NO;
	}
	w->at = v + head_len(w, v);
	w->last = key;
	return MHD_YES;
}

/* True when the head of req holds a NUL byte; *field is then the part
 * where it was found: "method", "path" or a header's name. */
static bool head_nul(struct http_req *req, const char *url, const char **field)
{
	const union MHD_ConnectionInfo *ci;
	struct head_walk w = {.head = req->method};
	size_t p, u, v, t;

	ci = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
	if (!ci || !req->method || ci->header_size == 0)
		return false;
	w.end = ci->header_size;
	if (!head_at(&w, url, &u) || !head_at(&w, req->version, &v) ||
	    !head_at(&w, req->target_end, &t) || u == 0 || v <= u || t < u || t >= v)
		return false; /* not laid out in one buffer */
	/* The method, its NUL and the spaces before the target. */
	p = head_len(&w, 0) + 1;
	while (p < u && w.head[p] == ' ')
		p++;
	if (p != u) {
		*field = "method";
		return true;
	}
	/* The target as given to on_uri, untouched then, ends at the NUL
	 * written over the space before the version. */
	if (t + 1 != v) {
		*field = "path";
		return true;
	}
	w.at = v + head_len(&w, v);
	MHD_get_connection_values(req->conn, MHD_HEADER_KIND, head_walk_one, &w);
	if (!w.found) {
		/* The last line's end and the empty line: two to four NULs,
		 * the head's last bytes. */
		w.found = w.end - w.at < 2 || w.end - w.at > 4;
		for (p = w.at; !w.found && p < w.end; p++)
			w.found = w.head[p] != '\0';
		w.hidden = w.last;
	}
	*field = w.hidden ? w.hidden : "headers";
	return w.found;
}

/* What the request's header lines say of its body's framing and its
 * target: its Content-Length lines (how many, whether their values
 * differ), its Transfer-Encoding lines (how many, the first one's value)
 * and its Host lines (how many). */
struct headers_scan {
	const char *first_length;
	int lengths;
	bool lengths_differ;
	const char *encoding;
	int encodings;
	int hosts;
	int authorizations;
	const char *blank_name; /* the first header name holding a space or tab */
};

static enum MHD_Result headers_one(void *cls, enum MHD_ValueKind kind, const char *key,
				   const char *value)
{
	struct headers_scan *f = cls;

	(void)kind;
	if (key && !f->blank_name && key[strcspn(key, " \t")])
		f->blank_name = key;
	if (key && strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0)
		f->hosts++;
	if (key && strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION) == 0)
		f->authorizations++;
	if (key && strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0 && f->encodings++ == 0)
		f->encoding = value ? value : "";
	if (!key || strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0)
		return MHD_YES;
	if (f->lengths++ == 0)
		f->first_length = value ? value : "";
	else if (strcmp(value ? value : "", f->first_length) != 0)
		f->lengths_differ = true;
	return MHD_YES;
}

/* The reply decided for req closes the connection: nothing past the
 * request's headers is read. */
static void reply_closes(struct http_req *req)
{
	if (req->resp &&
	    MHD_add_response_header(req->resp, MHD_HTTP_HEADER_CONNECTION, "close") != MHD_YES)
		log_warn("could not add Connection: close");
}

/* A request whose body's length its header lines do not tell one way
 * (RFC 9112, 6.1 and 6.3): two Content-Lengths that differ, a
 * Content-Length beside a Transfer-Encoding, or a Transfer-Encoding other
 * than chunked alone (the one coding that ends itself; compared as
 * libmicrohttpd compares it, whole and in any case). Read one way,
 * whatever lies past the body would be taken for the next request on the
 * connection, where a proxy in front that framed it the other way saw one
 * request; libmicrohttpd does so for the first two and waits out the
 * connection's timeout on the third. And one whose Host lines are not the
 * one HTTP/1.1 requires (RFC 9112, 3.2; an HTTP/1.0 request may have
 * none; libmicrohttpd serves HTTP/1.2 to 1.9 as 1.1, as RFC 9110 2.5 asks,
 * so they need it too). Answers 400 and closes the connection, before any of the body is
 * read, and returns true. So it does, with 401, for more than one
 * Authorization line: credentials that are not one (libmicrohttpd gives
 * the first, and a proxy in front may have added or checked another).
 * Before all of these, a head that holds a NUL byte (head_nul) is 400
 * too: its parts are not what they seem, framing included; and so is a
 * header name with a blank in it (RFC 9112, 5.1, which says to refuse
 * it): libmicrohttpd keeps "Content-Length : 5" as a header named
 * "Content-Length ", which frames nothing here, where a proxy in front
 * may have read it as the body's length. */
static bool headers_refused(struct http_req *req, const char *url)
{
	struct headers_scan f = {0};
	const char *why, *field = "Content-Length", *nul_in = NULL;
	char name[PARSE_ID_MAX + 1];

	MHD_get_connection_values(req->conn, MHD_HEADER_KIND, headers_one, &f);
	if (head_nul(req, url, &nul_in)) {
		why = "the request line and header lines may not hold a NUL byte, nor a header "
		      "line go on to the next (obsolete line folding)";
		http_safe_name(nul_in, name);
		field = name;
	} else if (f.blank_name) {
		size_t cut = strcspn(f.blank_name, " \t");

		why = "a header's name may not hold a space or tab (none goes before its colon)";
		http_safe_name(f.blank_name, name); /* byte for byte, up to its bound */
		if (cut < sizeof(name))
			name[cut] = '\0';
		field = name[0] ? name : "headers";
	} else if (f.lengths_differ) {
		why = "Content-Length is given more than once, with different values";
	} else if (f.lengths > 0 && f.encodings > 0) {
		why = "Content-Length and Transfer-Encoding may not both be given";
	} else if (f.encodings > 1 ||
		   (f.encodings == 1 && strcasecmp(f.encoding, "chunked") != 0)) {
		why = "Transfer-Encoding: only chunked is accepted";
		field = "Transfer-Encoding";
	} else if (f.hosts > 1 || (f.hosts == 0 && req->version &&
				   strcmp(req->version, MHD_HTTP_VERSION_1_0) != 0)) {
		why = "Host: an HTTP/1.1 request has exactly one";
		field = "Host";
	} else if (f.authorizations > 1) {
		why = NULL;
	} else {
		return false;
	}
	if (why)
		http_reply_error(req, 400, "invalid_request", why,
				 json_pack("{s:s}", "field", field));
	else
		http_reply_error(req, 401, "unauthorized", "Authorization is given more than once",
				 NULL);
	reply_closes(req);
	return true;
}

/* Routes a new request (url: its target as libmicrohttpd handed it to
 * on_request); returns false when a reply is already decided. */
static bool route_request(struct http_req *req, const char *url)
{
	char allow[64];
	const char *clen;
	const struct route *route = NULL;
	char msg[128];

	if (headers_refused(req, url))
		return false;
	if (req->query_cut) {
		snprintf(msg, sizeof(msg), "a request may have at most %d query parameters",
			 QUERY_PARAMS_MAX);
		http_reply_error(req, 400, "invalid_request", msg,
				 json_pack("{s:s}", "field", "query"));
		reply_closes(req);
		return false;
	}
	if (req->path_escape_bad) {
		http_reply_error(req, 400, "invalid_request",
				 "the path may not hold an escaped NUL or slash (%00, %2F)",
				 json_pack("{s:s}", "field", "path"));
		return false;
	}
	switch (routes_match(req->method, req->path, req, &route, allow, sizeof(allow))) {
	case ROUTE_FOUND:
		break;
	case ROUTE_NO_PATH:
		http_reply_error(req, 404, "not_found", "no such route", NULL);
		return false;
	case ROUTE_NO_METHOD:
		http_reply_error(req, 405, "method_not_allowed", "method not allowed on this path",
				 json_pack("{s:s}", "allow", allow));
		if (req->resp &&
		    MHD_add_response_header(req->resp, MHD_HTTP_HEADER_ALLOW, allow) != MHD_YES)
			log_warn("could not add Allow");
		return false;
	case ROUTE_BAD_ID:
		snprintf(msg, sizeof(msg), "%s must be 1 to 64 characters of A-Z a-z 0-9 _ . -",
			 allow);
		http_reply_error(req, 400, "invalid_request", msg,
				 json_pack("{s:s}", "field", allow));
		return false;
	}
	req->route = route;
	req->body_max = route->max_body;
	clen = http_header(req, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (clen) {
		int64_t n;
		/* HTTP allows leading zeros here; parse_int64 does not. */
		while (clen[0] == '0' && clen[1] >= '0' && clen[1] <= '9')
			clen++;
		switch (parse_int64(clen, 0, INT64_MAX, &n)) {
		case METER_OK:
			if ((uint64_t)n > req->body_max)
				req->body_too_large = true;
			break;
		case METER_ERANGE:
			/* Digits past 64 signed bits, which libmicrohttpd took
			 * (up to 2^64 - 1): over every cap. */
			if (clen[0] != '-') {
				req->body_too_large = true;
				break;
			}
			/* fall through */
		default:
			http_reply_error(req, 400, "invalid_request", "bad Content-Length",
					 json_pack("{s:s}", "field", "Content-Length"));
			return false;
		}
	}
	return true;
}

/* Appends a chunk of the body, or drops it once over the cap. */
static void take_body(struct http_req *req, const char *data, size_t len)
{
	char *grown;

	if (req->body_too_large || req->body_ignored)
		return;
	if (len > req->body_max - req->body_len) {
		req->body_too_large = true;
		free(req->body);
		req->body = NULL;
		req->body_len = 0;
		return;
	}
	grown = realloc(req->body, req->body_len + len + 1);
	if (!grown) {
		/* The rest is read and dropped, as past the cap, but answered
		 * 500: a client told 413 would not send it again. */
		req->body_too_large = true;
		req->body_no_memory = true;
		free(req->body);
		req->body = NULL;
		req->body_len = 0;
		return;
	}
	memcpy(grown + req->body_len, data, len);
	req->body = grown;
	req->body_len += len;
	req->body[req->body_len] = '\0';
}

/* 413 payload_too_large: the body is over the route's cap (or 500 when
 * memory ran out while it was read). */
static void reply_too_large(struct http_req *req)
{
	char msg[96];

	if (req->body_no_memory) {
		log_error("request %s: out of memory reading its body", req->request_id);
		http_reply_error(req, 500, "internal", "internal error", NULL);
		return;
	}
	if (req->body_max == 0)
		snprintf(msg, sizeof(msg), "this route takes no request body");
	else
		snprintf(msg, sizeof(msg), "request body larger than %zu bytes", req->body_max);
	http_reply_error(req, 413, "payload_too_large", msg,
			 json_pack("{s:I}", "max_bytes", (json_int_t)req->body_max));
}

/* Calls req's handler, its credentials accepted. No route that changes
 * anything takes query parameters: one that is there was meant for
 * something else, so the change is refused (400 naming it) rather than
 * made without it. Nor an Idempotency-Key header, which many APIs read: a
 * client that sends one believes its retries safe, where no route reads
 * it (a check takes its key in the body, and no other route keeps one).
 * Decided here, after the credentials, so that a caller without them, or
 * with a read-only key, gets their refusal first, as on the read routes,
 * whose handlers check their own parameters. First of all, a route that
 * uses the database is answered 503 while its schema is not this
 * binary's (schema_gate.h): the request is not worked on at all. */
static void call_handler(struct http_req *req)
{
	static const char *const none[] = {NULL};
	char why[SCHEMA_WHY_MAX];

	if (!req->route->any_schema && !schema_gate_open(why, sizeof(why))) {
		http_reply_error(req, 503, "metering_unavailable", why, NULL);
		return;
	}
	if (strcmp(req->route->method, "GET") != 0 && strcmp(req->route->method, "HEAD") != 0) {
		if (!http_query_allowed(req, none))
			return;
		if (http_header(req, "Idempotency-Key")) {
			http_reply_error(req, 400, "invalid_request",
					 "an Idempotency-Key header is not read: a check takes its "
					 "key in the body, as idempotency_key, and no other route "
					 "keeps one",
					 json_pack("{s:s}", "field", "Idempotency-Key"));
			return;
		}
	}
	req->route->handler(req);
}

/* Runs req's handler once the whole request is in and its caller is
 * allowed, or answers 413 when the body was over the route's cap. */
static void run_handler(struct http_req *req)
{
	req->handled = true;
	if (req->body_too_large)
		reply_too_large(req);
	else
		call_handler(req);
}

/* Runs on a lane's workers: each request's handler (its credentials first
 * when they need the database), then wakes its connection, which
 * libmicrohttpd then answers with the reply set. */
static void *work_main(void *arg)
{
	struct lane *l = arg;

	for (;;) {
		struct http_req *req;
		bool stopping, trim;

		pthread_mutex_lock(&l->lock);
		while (!l->head && !l->stopping)
			pthread_cond_wait(&l->cond, &l->lock);
		req = l->head;
		if (req) {
			l->head = req->work_next;
			if (!l->head)
				l->tail = NULL;
		}
		stopping = l->stopping;
		pthread_mutex_unlock(&l->lock);
		if (!req)
			break;
		if (stopping) {
			http_reply_error(req, 503, "metering_unavailable",
					 "the service is shutting down", NULL);
		} else if (req->auth_pending) {
			/* Credentials first. Refused: its reply is set. Allowed: a
			 * route of this lane runs here; one of the HTTP threads'
			 * runs there once resumed (on_request). */
			req->auth_pending = false;
			if (auth_finish(req) && req->route->lane != ROUTE_LANE_HTTP)
				run_handler(req);
		} else {
			call_handler(req);
		}
		/* A worker's handler answers, or hands the request, still
		 * parked, to a thread of its own that answers it and wakes its
		 * connection (an export's producer). */
		if (!req->resp && req->on_suspended) {
			void (*hand_over)(struct http_req *) = req->on_suspended;

			req->on_suspended = NULL;
			hand_over(req);
			continue;
		}
		/* What a large body took while it was worked on (a pushed
		 * document's sandboxes, their ingestion: many small blocks, some
		 * 15 times the body) is free now, and glibc's heaps would keep
		 * it: its pages go back to the system once the answer is on its
		 * way (the request is not to be touched after the resume). */
		trim = req->body_len > HTTP_TRIM_BYTES;
		req->suspended = false;
		MHD_resume_connection(req->conn);
		if (trim)
			malloc_trim(0);
	}
	return NULL;
}

/* Called once a request's connection is parked: queues it on its lane
 * (answered at once while shutting down). */
static void work_submit(struct http_req *req)
{
	struct lane *l = req->handler_ctx;
	bool stopping;

	req->handler_ctx = NULL;
	req->on_suspended = NULL; /* called: a handler may set its own */
	req->work_next = NULL;
	pthread_mutex_lock(&l->lock);
	stopping = l->stopping || l->nworkers == 0;
	if (!stopping) {
		if (l->tail)
			l->tail->work_next = req;
		else
			l->head = req;
		l->tail = req;
		pthread_cond_signal(&l->cond);
	}
	pthread_mutex_unlock(&l->lock);
	if (stopping) {
		http_reply_error(req, 503, "metering_unavailable", "the service is shutting down",
				 NULL);
		req->suspended = false;
		MHD_resume_connection(req->conn);
	}
}

/* The lanes' workers for a pool of n connections (n >= 2, as the
 * configuration allows). Reads get all but a quarter of them (at least
 * one), which they therefore never hold; the writes' workers (at least
 * one) get that quarter, so slow reads cannot starve them. A worker holds
 * one connection at a time (the key look-up of a request's credentials,
 * then its handler), and nothing else takes one, so no worker waits for a
 * connection. */
static void server_workers(int n, int *reads, int *writes)
{
	int reserved;

	if (n < 2)
		n = 2; /* not reached: the configuration's minimum */
	reserved = n / 4 > 1 ? n / 4 : 1;
	*reads = n - reserved;
	*writes = reserved;
}

/* Starts n workers on lane l (its lock and condition first). */
static enum meter_rc lane_start(struct lane *l, const char *name, int n)
{
	l->name = name;
	if (pthread_mutex_init(&l->lock, NULL) != 0)
		return METER_ENOMEM;
	if (pthread_cond_init(&l->cond, NULL) != 0) {
		pthread_mutex_destroy(&l->lock);
		return METER_ENOMEM;
	}
	l->ready = true;
	l->workers = calloc((size_t)n, sizeof(*l->workers));
	for (int i = 0; l->workers && i < n; i++) {
		if (pthread_create(&l->workers[i], NULL, work_main, l) != 0)
			break;
		l->nworkers++;
	}
	if (l->nworkers == 0)
		log_warn("http: no %s worker started; those routes answer 503", name);
	return METER_OK;
}

/* Stops a lane's workers: what is queued is answered 503, what runs
 * finishes. */
static void lane_stop(struct lane *l)
{
	if (!l->ready)
		return;
	pthread_mutex_lock(&l->lock);
	l->stopping = true;
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&l->lock);
	for (int i = 0; i < l->nworkers; i++)
		pthread_join(l->workers[i], NULL);
	pthread_mutex_lock(&l->lock);
	l->nworkers = 0;
	pthread_mutex_unlock(&l->lock);
	free(l->workers);
	l->workers = NULL;
}

static void lane_destroy(struct lane *l)
{
	if (!l->ready)
		return;
	pthread_cond_destroy(&l->cond);
	pthread_mutex_destroy(&l->lock);
	l->ready = false;
}

/* Starts both lanes for a pool of n connections. */
static enum meter_rc work_start(struct http_server *srv, int n)
{
	int reads, writes;

	server_workers(n, &reads, &writes);
	if (lane_start(&srv->lanes[ROUTE_LANE_READ], "read", reads) != METER_OK)
		return METER_ENOMEM;
	if (lane_start(&srv->lanes[ROUTE_LANE_WRITE], "write", writes) != METER_OK) {
		lane_stop(&srv->lanes[ROUTE_LANE_READ]);
		lane_destroy(&srv->lanes[ROUTE_LANE_READ]);
		return METER_ENOMEM;
	}
	return METER_OK;
}

static void work_stop(struct http_server *srv)
{
	for (int i = 0; i < ROUTE_LANES; i++)
		lane_stop(&srv->lanes[i]);
}

static void work_destroy(struct http_server *srv)
{
	for (int i = 0; i < ROUTE_LANES; i++)
		lane_destroy(&srv->lanes[i]);
}

/* Parks req's connection and hands req to a worker of its route's lane (of
 * the read lane for a route of the HTTP threads, which comes back to
 * on_request once its credentials are decided). */
static void to_worker(struct http_server *srv, struct MHD_Connection *conn, struct http_req *req)
{
	enum route_lane lane = req->route->lane;

	req->handled = !req->auth_pending;
	req->handler_ctx = &srv->lanes[lane != ROUTE_LANE_HTTP ? lane : ROUTE_LANE_READ];
	req->on_suspended = work_submit;
	req->suspended = true;
	MHD_suspend_connection(conn);
	req->on_suspended(req);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **req_cls)
{
	struct http_server *srv = cls;
	struct http_req *req = *req_cls;

	if (!req)
		return MHD_NO; /* out of memory in on_uri */
	if (!req->started) {
		req->started = true;
		req->method = method;
		req->path = target_path(url);
		req->version = version;
		if (atomic_load(&srv->draining)) {
			http_reply_error(req, 503, "metering_unavailable",
					 "the service is shutting down", NULL);
			conn_watch_mark(srv, conn, false);
			return queue(req);
		}
		if (!route_request(req, url)) {
			conn_watch_mark(srv, conn, false);
			return queue(req);
		}
		switch (auth_begin(req)) {
		case AUTH_REFUSED:
			conn_watch_mark(srv, conn, false);
			return queue(req);
		case AUTH_LOOKUP:
			/* Decided on a worker once the request is in (an
			 * oversized body is answered after the credentials).
			 * On a route that takes no account key the look-up
			 * only picks the refusal (401, 403 or read_only_key):
			 * the body is not kept meanwhile, so an unknown key
			 * cannot make this process hold up to the route's cap
			 * (16 MiB for samples) per connection. */
			req->auth_pending = true;
			req->body_ignored = !(req->route->roles & (ROLE_FULL | ROLE_READ_ONLY));
			if (req->body_too_large) {
				/* Its Content-Length is over the cap: the
				 * credentials are decided now, with none of the
				 * body read (nor a 100 Continue sent), and the
				 * answer is theirs or 413. */
				req->body_ignored = true;
				conn_watch_mark(srv, conn, false);
				to_worker(srv, conn, req);
			}
			return MHD_YES;
		case AUTH_ALLOWED:
			break;
		}
		if (req->body_too_large) {
			reply_too_large(req);
			conn_watch_mark(srv, conn, false);
			return queue(req);
		}
		return MHD_YES;
	}
	if (req->queued || !req->route) {
		/* Answered already, on its first call (refused before its
		 * route was known, or while draining): if libmicrohttpd calls
		 * again, nothing is left to do. test_shutdown once met such a
		 * call during a drain, and routed it through a NULL route. */
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (*upload_data_size) {
		take_body(req, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (req->resp && !req->queued)
		return queue(req); /* refused on a worker (its credentials) */
	if (!req->handled) {
		enum route_lane lane = req->route->lane;

		conn_watch_mark(srv, conn, false); /* the whole request is in */
		if (req->auth_pending || (lane != ROUTE_LANE_HTTP && !req->body_too_large)) {
			/* To a worker, which looks the key up first when it
			 * must. */
			to_worker(srv, conn, req);
			return MHD_YES;
		}
		run_handler(req);
		if (!req->resp && req->suspended) {
			MHD_suspend_connection(conn);
			if (req->on_suspended)
				req->on_suspended(req);
			return MHD_YES;
		}
	}
	return queue(req);
}

#define ACCESS_PATH_MAX 200 /* characters of a path the access line keeps */

/* in (at most ACCESS_PATH_MAX bytes of it) for the access line's quoted
 * path: '"' and '\\' escaped with a backslash, any other byte outside
 * printable ASCII as \\xNN, so that a path (decoded, so it may hold any
 * byte) cannot end the quotes and write fields of its own. */
static void access_quote(const char *in, char *out, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	for (size_t i = 0; i < ACCESS_PATH_MAX && in[i] && o + 5 <= len; i++) {
		unsigned char c = (unsigned char)in[i];

		if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (c < 0x20 || c >= 0x7f) {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		} else {
			out[o++] = (char)c;
		}
	}
	out[o] = '\0';
}

/* A path with every run of at least KEYS_SECRET_LEN base64url characters
 * after a '.' (a key's secret, as in its token "<key_id>.<secret>")
 * written "[redacted]": an operator who pastes a key's whole token where
 * its id belongs (`GET /v1/keys/<token>`, with a blank, a line end or
 * ".json" after it or not) must not leave a live credential in the log. A
 * sandbox id shaped so loses that part in the log, nothing else. */
static void access_redact(const char *in, char *out, size_t len)
{
	static const char b64url[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	size_t o = 0;

	while (*in && o + 1 < len) {
		size_t run = *in == '.' ? strspn(in + 1, b64url) : 0;

		out[o++] = *in++;
		if (run >= KEYS_SECRET_LEN) {
			o += (size_t)snprintf(out + o, len - o, "[redacted]");
			if (o >= len)
				o = len - 1;
			in += run;
		}
	}
	out[o] = '\0';
}

/* Whether a method is an HTTP token (RFC 9110: letters, digits and
 * !#$%&'*+-.^_`|~) of at most 32 bytes: every method a route takes is, and
 * such a one is logged as it is; another is quoted as a path is, so that
 * a method cannot write fields of its own into the line ("GET\tstatus=201",
 * whose tab the log would make a space). */
static bool access_method_plain(const char *m)
{
	size_t i;

	for (i = 0; m[i]; i++) {
		char c = m[i];

		if (i >= 32 || !((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
				 (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c)))
			return false;
	}
	return i > 0;
}

/* The access-log line of req, then free it (and forget it on its
 * connection). aborted: it did not complete normally. */
static void req_finish(struct MHD_Connection *conn, struct http_req *req, bool aborted)
{
	const union MHD_ConnectionInfo *ci;
	struct conn_watch *w = conn_watch_of(conn);
	char addr[INET6_ADDRSTRLEN] = "-";
	char path[ACCESS_PATH_MAX * 4 + 1], quoted[ACCESS_PATH_MAX * 4 + 1];
	char method[sizeof(quoted) + 2];

	if (w && w->req == req)
		w->req = NULL;
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (ci && ci->client_addr) {
		const struct sockaddr *sa = ci->client_addr;
		if (sa->sa_family == AF_INET)
			inet_ntop(AF_INET,
				  &((const struct sockaddr_in *)(const void *)sa)->sin_addr, addr,
				  sizeof(addr));
		else if (sa->sa_family == AF_INET6)
			inet_ntop(AF_INET6,
				  &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, addr,
				  sizeof(addr));
	}
	access_redact(req->path ? req->path : "-", quoted, sizeof(quoted));
	access_quote(quoted, path, sizeof(path));
	if (!req->method)
		snprintf(method, sizeof(method), "-");
	else if (access_method_plain(req->method))
		snprintf(method, sizeof(method), "%s", req->method);
	else {
		access_quote(req->method, quoted, sizeof(quoted));
		snprintf(method, sizeof(method), "\"%s\"", quoted);
	}
	log_info("access rid=%s ip=%s method=%s path=\"%s\" status=%u dur_us=%lld%s",
		 req->request_id, addr, method, path, req->queued ? req->status : 0,
		 (long long)(http_now_usec() - req->start_usec), aborted ? " aborted=1" : "");
	if (req->resp)
		MHD_destroy_response(req->resp);
	http_answer_end(req);
	if (req->srv)
		atomic_fetch_sub(&req->srv->live, 1);
	free(req->body);
	free(req->auth);
	free(req);
}

/* The last callback of every request a handler saw: the access-log line,
 * then free. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_server *srv = cls;
	struct http_req *req = *req_cls;

	/* A kept-alive connection awaits its next request from now. */
	conn_watch_mark(srv, conn, true);
	if (!req)
		return;
	req_finish(conn, req, toe != MHD_REQUEST_TERMINATED_COMPLETED_OK);
	*req_cls = NULL;
}

int64_t http_server_threads(int64_t http_threads, int64_t max_connections)
{
	int64_t need = (max_connections + HTTP_THREAD_CONNECTIONS - 1) / HTTP_THREAD_CONNECTIONS;

	return need > http_threads ? need : http_threads;
}

enum meter_rc http_server_start(struct app *app, struct http_server **out, char *err, size_t errlen)
{
	const struct meter_config *cfg = app->cfg;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST},
			*ai = NULL;
	struct http_server *srv;
	const union MHD_DaemonInfo *info;
	char host[256], port_s[8];
	unsigned flags;
	int port, gai;
	const int64_t threads = http_server_threads(cfg->http_threads, cfg->max_connections);
	/* One thread is the daemon's own: libmicrohttpd warns of a pool of 1.
	 * The pool splits the connection limit evenly between its threads. */
	struct MHD_OptionItem pool[] = {
	    {threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, (intptr_t)threads, NULL},
	    {MHD_OPTION_END, 0, NULL}};

	metrics_describe(SLOW_CUT, METRICS_COUNTER,
			 "Connections cut off for not delivering a whole request within "
			 "request_timeout_s.");
	metrics_counter_add(SLOW_CUT, NULL, 0); /* listed from the start, at 0 */
	metrics_describe("meter_http_answers_refused_total", METRICS_COUNTER,
			 "Answers over 64 KiB answered 503 instead, for the answers waiting for "
			 "their clients and the answers being built held answers_memory_mib.");
	metrics_counter_add("meter_http_answers_refused_total", NULL, 0);
	if (config_listen_split(cfg->listen, host, sizeof(host), &port) != METER_OK) {
		snprintf(err, errlen, "bad listen address \"%s\"", cfg->listen);
		return METER_EINVAL;
	}
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	snprintf(port_s, sizeof(port_s), "%d", port);
	gai = getaddrinfo(host, port_s, &hints, &ai);
	if (gai != 0) {
		snprintf(err, errlen, "listen address %s: %s (use a numeric address)", host,
			 gai_strerror(gai));
		return METER_EINVAL;
	}
	srv = calloc(1, sizeof(*srv));
	if (!srv) {
		freeaddrinfo(ai);
		return METER_ENOMEM;
	}
	srv->app = app;
	srv->quiesced = MHD_INVALID_SOCKET;
	srv->request_timeout_usec = cfg->request_timeout_s * 1000000;
	if (watch_init(srv) != METER_OK) {
		freeaddrinfo(ai);
		free(srv);
		return METER_ENOMEM;
	}
	if (work_start(srv, (int)cfg->db_pool_size) != METER_OK) {
		pthread_cond_destroy(&srv->watch_cond);
		pthread_mutex_destroy(&srv->watch_lock);
		freeaddrinfo(ai);
		free(srv);
		return METER_ENOMEM;
	}
	if (getrandom(&srv->rid_prefix, sizeof(srv->rid_prefix), 0) != sizeof(srv->rid_prefix))
		srv->rid_prefix = (uint64_t)http_now_usec();
	http_answers_limit_set(cfg->answers_memory_mib << 20);
	flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* clang-format off: one option and its value per line */
	srv->daemon = MHD_start_daemon(
	    flags, (uint16_t)port, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER,
	    mhd_logger, srv, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_ARRAY, pool,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->per_ip_connections,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->connection_timeout_s,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY_LIMIT,
	    MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv,
	    MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION,
	    on_connection, srv, MHD_OPTION_END);
	/* clang-format on */
	freeaddrinfo(ai);
	if (!srv->daemon) {
		/* libmicrohttpd's own line (an http: warning, logged from
		 * log_level warn) names the cause. */
		snprintf(err, errlen,
			 "cannot serve HTTP on %s: the address is in use or not permitted, or "
			 "no thread could be started for the server (libmicrohttpd's http: "
			 "warning says which)",
			 cfg->listen);
		work_stop(srv);
		work_destroy(srv);
		pthread_cond_destroy(&srv->watch_cond);
		pthread_mutex_destroy(&srv->watch_lock);
		free(srv);
		return METER_EIO;
	}
	if (srv->request_timeout_usec > 0) {
		if (pthread_create(&srv->sweeper, NULL, sweeper_main, srv) != 0) {
			snprintf(err, errlen, "cannot start the slow-client sweeper");
			http_server_stop(srv);
			return METER_ENOMEM;
		}
		srv->sweeper_started = true;
	}
	if (threads > cfg->http_threads)
		log_info("http: %lld threads, one for each %d connections of max_connections"
			 " (http_threads is %lld)",
			 (long long)threads, HTTP_THREAD_CONNECTIONS, (long long)cfg->http_threads);
	info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
	srv->port = info ? info->port : port;
	*out = srv;
	return METER_OK;
}

int http_server_port(const struct http_server *srv)
{
	return srv->port;
}

void http_server_quiesce(struct http_server *srv)
{
	if (!srv || atomic_exchange(&srv->draining, true))
		return;
	/* No new connection is taken, and none is let wait: the socket stops
	 * listening now, so a connection attempt is refused at once (a
	 * caller tries another process, knowing its request was never
	 * sent) and one the kernel had queued is reset. The descriptor
	 * itself is closed after the stop, so that its number is not reused
	 * while libmicrohttpd's threads may still hold it. */
	srv->quiesced = MHD_quiesce_daemon(srv->daemon);
	if (srv->quiesced != MHD_INVALID_SOCKET && shutdown(srv->quiesced, SHUT_RD) != 0)
		log_warn("could not stop listening: %s", strerror(errno));
}

bool http_server_drained(struct http_server *srv, int64_t wait_ms)
{
	const struct timespec step = {.tv_nsec = 10 * 1000000L};

	if (!srv)
		return true;
	for (int64_t waited = 0; atomic_load(&srv->live) > 0; waited += 10) {
		if (waited >= wait_ms)
			return false;
		nanosleep(&step, NULL);
	}
	return true;
}

void http_server_stop(struct http_server *srv)
{
	if (!srv)
		return;
	if (srv->sweeper_started) {
		pthread_mutex_lock(&srv->watch_lock);
		srv->stopping = true;
		pthread_cond_signal(&srv->watch_cond);
		pthread_mutex_unlock(&srv->watch_lock);
		pthread_join(srv->sweeper, NULL);
	}
	/* No export and no request of a worker may stay parked:
	 * libmicrohttpd refuses to stop then. One arriving from here on is
	 * answered 503 at once. */
	h_reports_stop();
	work_stop(srv);
	/* Every connection is closed here, and its watch entry freed. */
	MHD_stop_daemon(srv->daemon);
	if (srv->quiesced != MHD_INVALID_SOCKET)
		close(srv->quiesced);
	work_destroy(srv);
	pthread_cond_destroy(&srv->watch_cond);
	pthread_mutex_destroy(&srv->watch_lock);
	free(srv);
}
