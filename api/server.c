/* meter API: the libmicrohttpd server (see server.h). */
#include "server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "auth.h"
#include "http.h"
#include "log.h"
#include "routes.h"

#define CONNECTION_MEMORY_LIMIT (64 * 1024) /* headers and MHD's buffers */

struct http_server {
	struct MHD_Daemon *daemon;
	struct app *app;
	int port;
	uint64_t rid_prefix;
	atomic_uint_fast64_t rid_next;
};

/* libmicrohttpd's own diagnostics go to our log. */
static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
	char line[512];

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	log_warn("http: %s", line);
}

/* The first callback of every request: allocate its state and id. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct http_server *srv = cls;
	struct http_req *req = calloc(1, sizeof(*req));
	uint64_t n;

	(void)uri;
	if (!req)
		return NULL;
	req->conn = conn;
	req->app = srv->app;
	req->start_usec = http_now_usec();
	n = atomic_fetch_add(&srv->rid_next, 1);
	snprintf(req->request_id, sizeof(req->request_id), "%08llx%08llx",
		 (unsigned long long)(srv->rid_prefix & 0xffffffffu),
		 (unsigned long long)(n & 0xffffffffu));
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
	if (MHD_add_response_header(req->resp, "X-Request-Id", req->request_id) != MHD_YES ||
	    MHD_add_response_header(req->resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store") !=
		MHD_YES)
		log_warn("could not add response headers");
	r = MHD_queue_response(req->conn, req->status, req->resp);
	MHD_destroy_response(req->resp);
	req->resp = NULL;
	req->queued = true;
	return r;
}

/* Routes a new request; returns false when a reply is already decided. */
static bool route_request(struct http_req *req)
{
	char allow[64];
	const char *clen;
	const struct route *route = NULL;
	char msg[128];

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
		if (parse_int64(clen, 0, INT64_MAX, &n) != METER_OK) {
			http_reply_error(req, 400, "invalid_request", "bad Content-Length", NULL);
			return false;
		}
		if ((uint64_t)n > req->body_max) {
			req->body_too_large = true;
		}
	}
	return true;
}

/* Appends a chunk of the body, or drops it once over the cap. */
static void take_body(struct http_req *req, const char *data, size_t len)
{
	char *grown;

	if (req->body_too_large)
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
		req->body_too_large = true; /* answered as too large: nothing better to do */
		return;
	}
	memcpy(grown + req->body_len, data, len);
	req->body = grown;
	req->body_len += len;
	req->body[req->body_len] = '\0';
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **req_cls)
{
	struct http_req *req = *req_cls;
	char msg[96];

	(void)cls;
	(void)version;
	if (!req)
		return MHD_NO; /* out of memory in on_uri */
	if (!req->started) {
		req->started = true;
		req->method = method;
		req->path = url;
		if (!route_request(req) || !auth_authorize(req))
			return queue(req);
		if (req->body_too_large) {
			snprintf(msg, sizeof(msg), "request body larger than %zu bytes",
				 req->body_max);
			http_reply_error(
			    req, 413, "payload_too_large", msg,
			    json_pack("{s:I}", "max_bytes", (json_int_t)req->body_max));
			return queue(req);
		}
		return MHD_YES;
	}
	if (*upload_data_size) {
		take_body(req, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (!req->handled) {
		req->handled = true;
		if (req->body_too_large) {
			snprintf(msg, sizeof(msg), "request body larger than %zu bytes",
				 req->body_max);
			http_reply_error(
			    req, 413, "payload_too_large", msg,
			    json_pack("{s:I}", "max_bytes", (json_int_t)req->body_max));
		} else {
			req->route->handler(req);
		}
		if (!req->resp && req->suspended) {
			MHD_suspend_connection(conn);
			if (req->on_suspended)
				req->on_suspended(req);
			return MHD_YES;
		}
	}
	return queue(req);
}

/* The last callback of every request: the access-log line, then free. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_req *req = *req_cls;
	const union MHD_ConnectionInfo *ci;
	char addr[INET6_ADDRSTRLEN] = "-";

	(void)cls;
	if (!req)
		return;
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
	log_info("access rid=%s ip=%s method=%s path=\"%.200s\" status=%u dur_us=%lld%s",
		 req->request_id, addr, req->method ? req->method : "-",
		 req->path ? req->path : "-", req->queued ? req->status : 0,
		 (long long)(http_now_usec() - req->start_usec),
		 toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " aborted=1");
	if (req->resp)
		MHD_destroy_response(req->resp);
	free(req->body);
	free(req->auth);
	free(req);
	*req_cls = NULL;
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
	if (getrandom(&srv->rid_prefix, sizeof(srv->rid_prefix), 0) != sizeof(srv->rid_prefix))
		srv->rid_prefix = (uint64_t)http_now_usec();
	flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* clang-format off: one option and its value per line */
	srv->daemon = MHD_start_daemon(
	    flags, (uint16_t)port, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER,
	    mhd_logger, srv, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_THREAD_POOL_SIZE,
	    (unsigned)cfg->http_threads, MHD_OPTION_CONNECTION_LIMIT,
	    (unsigned)cfg->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
	    (unsigned)cfg->per_ip_connections, MHD_OPTION_CONNECTION_TIMEOUT,
	    (unsigned)cfg->connection_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
	    (size_t)CONNECTION_MEMORY_LIMIT, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
	    MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
	    srv, MHD_OPTION_END);
	/* clang-format on */
	freeaddrinfo(ai);
	if (!srv->daemon) {
		snprintf(err, errlen, "cannot listen on %s (address in use or not permitted?)",
			 cfg->listen);
		free(srv);
		return METER_EIO;
	}
	info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
	srv->port = info ? info->port : port;
	*out = srv;
	return METER_OK;
}

int http_server_port(const struct http_server *srv)
{
	return srv->port;
}

void http_server_stop(struct http_server *srv)
{
	if (!srv)
		return;
	MHD_stop_daemon(srv->daemon);
	free(srv);
}
