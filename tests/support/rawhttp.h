/* Raw HTTP/1.1 over TCP to 127.0.0.1, for tests that need what a client
 * library would not send (CR and LF in a target or header, NUL bytes,
 * unencoded characters), many sockets at once, or control of timing
 * (bytes trickled one at a time).
 *
 *     struct rawhttp_resp r;
 *     rawhttp_request(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n"
 *                     "Connection: close\r\n\r\n", len, 5000, &r);
 *     ... r.status, rawhttp_header(&r, "Content-Type"), r.body ...
 *     rawhttp_resp_release(&r);
 *
 * Nothing here is thread-unsafe: functions touch only their arguments. */
#ifndef METER_TEST_RAWHTTP_H
#define METER_TEST_RAWHTTP_H

#include <stdbool.h>
#include <stddef.h>

/* One response. Everything owned; rawhttp_resp_release frees. */
struct rawhttp_resp {
	int status;	 /* 0 when no status line arrived */
	char *head;	 /* status line and header lines, NUL-terminated */
	char *body;	 /* decoded body (chunks joined), NUL-terminated */
	size_t body_len; /* bytes before that NUL */
	bool closed;	 /* the server closed the connection after it */
};

/* A TCP connection to 127.0.0.1:port (blocking connect, close-on-exec).
 * Returns the socket, or -1 with errno as connect left it. */
int rawhttp_connect(int port);

/* Sends len bytes of buf on fd, waiting up to timeout_ms in all. Returns 0,
 * or -1 on an error, a closed connection or the timeout. */
int rawhttp_send(int fd, const void *buf, size_t len, int timeout_ms);

/* Reads one response from fd (its body by Content-Length, chunked, or to
 * the end of the connection), waiting up to timeout_ms in all; bodies of
 * more than max_body bytes are an error. Returns 0 with *out filled, or -1
 * (out->status may still be set). Release out either way. */
int rawhttp_read(int fd, int timeout_ms, size_t max_body, struct rawhttp_resp *out);

/* Connects, sends req (len bytes), reads one response and closes. Returns
 * as rawhttp_read (-1 when the connection failed). */
int rawhttp_request(int port, const void *req, size_t len, int timeout_ms,
		    struct rawhttp_resp *out);

/* The first header named name (case-insensitive) of r, copied into out
 * (len bytes, truncated), or NULL when r has none. */
const char *rawhttp_header(const struct rawhttp_resp *r, const char *name, char *out, size_t len);

/* Waits up to timeout_ms for the peer to close fd (reading and discarding
 * whatever arrives). Returns 1 when it closed (end of stream or reset), 0
 * on the timeout, -1 on another error. */
int rawhttp_wait_closed(int fd, int timeout_ms);

void rawhttp_resp_release(struct rawhttp_resp *r);

/* Milliseconds on the monotonic clock. */
long long rawhttp_now_ms(void);

/* Microseconds on the monotonic clock. */
long long rawhttp_now_usec(void);

#endif
