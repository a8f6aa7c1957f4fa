/* meter API: the libmicrohttpd server.
 *
 * epoll with a pool of internal threads (http_threads, or one for each
 * HTTP_THREAD_CONNECTIONS connections if more), an explicit connection limit,
 * a per-address limit, an idle timeout, a per-connection memory limit, and a
 * deadline for each request to arrive whole (request_timeout_s, so clients
 * trickling a header or a body a byte at a time are cut off).
 * Request bodies are read by our code, capped per route (413
 * payload_too_large); routing by the table in routes.c with 404/405
 * fallbacks; every response carries X-Request-Id; one access-log line per
 * request. */
#ifndef METER_SERVER_H
#define METER_SERVER_H

#include <stdint.h>

#include "app.h"
#include "rc.h"

struct http_server;

/* The most connections one HTTP thread is given. libmicrohttpd 0.9.75's
 * epoll loop takes ready events 128 at a time, and takes more for as long
 * as a call returns 128, each call waiting as long as the first may: when a
 * burst leaves exactly 128 or 256 waiting, the call after them waits, with
 * the requests it took unserved, until another event comes or a connection
 * times out (connection_timeout_s). A thread with at most this many
 * connections has at most this many + 2 events (its listening socket and
 * its wake-up), so its first call always returns fewer than 128. */
#define HTTP_THREAD_CONNECTIONS 125

/* The HTTP threads meterd runs: http_threads, or more so that none has over
 * HTTP_THREAD_CONNECTIONS of max_connections (9 for 1,024). */
int64_t http_server_threads(int64_t http_threads, int64_t max_connections);

/* Starts serving app on cfg->listen. Port 0 picks a free port (see
 * http_server_port). On METER_OK *out is new; stop it with
 * http_server_stop(). err gets a reason on failure. */
METER_MUSTCHECK enum meter_rc http_server_start(struct app *app, struct http_server **out,
						char *err, size_t errlen);

/* The port actually bound. */
int http_server_port(const struct http_server *srv);

/* The start of a shutdown: from now on every answer closes its connection
 * (Connection: close), and a request that comes on a connection kept
 * alive is answered 503 metering_unavailable at once. */
void http_server_quiesce(struct http_server *srv);

/* Waits up to wait_ms for every request under way to be answered and its
 * answer sent (after http_server_quiesce). False when some were not. */
bool http_server_drained(struct http_server *srv, int64_t wait_ms);

/* Stops accepting, finishes nothing further, frees the server. */
void http_server_stop(struct http_server *srv);

#endif
