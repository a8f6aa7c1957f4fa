/* Raw HTTP/1.1 client for tests (see rawhttp.h). */
#include "rawhttp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RAWHTTP_HEAD_MAX (256 * 1024)

long long rawhttp_now_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

long long rawhttp_now_ms(void)
{
	return rawhttp_now_usec() / 1000;
}

int rawhttp_connect(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd < 0)
		return -1;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		int e = errno;

		close(fd);
		errno = e; /* the caller may ask why (ECONNREFUSED) */
		return -1;
	}
	/* Small writes (one trickled byte) go out at once. */
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Milliseconds left until deadline_ms, at least 0. */
static int left_ms(long long deadline_ms)
{
	long long l = deadline_ms - rawhttp_now_ms();

	return l < 0 ? 0 : (int)l;
}

int rawhttp_send(int fd, const void *buf, size_t len, int timeout_ms)
{
	const char *p = buf;
	long long deadline = rawhttp_now_ms() + timeout_ms;

	while (len > 0) {
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		ssize_t n;
		int pr = poll(&pfd, 1, left_ms(deadline));

		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return -1;
		n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A growable byte buffer. */
struct rbuf {
	char *p;
	size_t len, cap;
};

static int rbuf_reserve(struct rbuf *b, size_t more)
{
	char *g;
	size_t cap = b->cap ? b->cap : 4096;

	if (b->cap - b->len > more)
		return 0;
	while (cap - b->len <= more)
		cap *= 2;
	g = realloc(b->p, cap);
	if (!g)
		return -1;
	b->p = g;
	b->cap = cap;
	return 0;
}

/* Reads what is there (waiting up to the deadline for something) into b.
 * Returns bytes read, 0 at the end of the stream, -1 on error/timeout. */
static ssize_t fill(int fd, struct rbuf *b, long long deadline)
{
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t n;
		int pr;

		if (rbuf_reserve(b, 16384) < 0)
			return -1;
		pr = poll(&pfd, 1, left_ms(deadline));
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return -1;
		n = recv(fd, b->p + b->len, b->cap - b->len - 1, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0)
			return errno == ECONNRESET ? 0 : -1;
		b->len += (size_t)n;
		b->p[b->len] = '\0';
		return n;
	}
}

const char *rawhttp_header(const struct rawhttp_resp *r, const char *name, char *out, size_t len)
{
	size_t nl = strlen(name);
	const char *line;

	if (!r->head || len == 0)
		return NULL;
	line = strstr(r->head, "\r\n");
	while (line && line[2]) {
		const char *start = line + 2, *end = strstr(start, "\r\n");
		size_t vl;

		if (!end)
			end = start + strlen(start);
		if ((size_t)(end - start) > nl && strncasecmp(start, name, nl) == 0 &&
		    start[nl] == ':') {
			const char *v = start + nl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			vl = (size_t)(end - v);
			if (vl >= len)
				vl = len - 1;
			memcpy(out, v, vl);
			out[vl] = '\0';
			return out;
		}
		line = *end ? end : NULL;
	}
	return NULL;
}

/* Parses a chunked body out of raw[0..len); appends the data to out.
 * Returns 1 when complete, 0 when more bytes are needed, -1 on garbage. */
static int dechunk(const char *raw, size_t len, struct rbuf *out)
{
	size_t pos = 0;

	out->len = 0;
	for (;;) {
		const char *eol = memmem(raw + pos, len - pos, "\r\n", 2);
		char *end;
		unsigned long size;

		if (!eol)
			return 0;
		size = strtoul(raw + pos, &end, 16);
		if (end == raw + pos)
			return -1;
		pos = (size_t)(eol - raw) + 2;
		if (size == 0) {
			/* Trailers end with an empty line. */
			const char *fin = memmem(raw + pos - 2, len - pos + 2, "\r\n\r\n", 4);
			return fin ? 1 : 0;
		}
		if (len - pos < size + 2)
			return 0;
		if (rbuf_reserve(out, size) < 0)
			return -1;
		memcpy(out->p + out->len, raw + pos, size);
		out->len += size;
		out->p[out->len] = '\0';
		pos += size + 2;
	}
}

int rawhttp_read(int fd, int timeout_ms, size_t max_body, struct rawhttp_resp *out)
{
	struct rbuf b = {0}, body = {0};
	long long deadline = rawhttp_now_ms() + timeout_ms;
	char *sep = NULL, val[64];
	size_t head_len = 0;
	int ret = -1;
	bool eof = false;

	memset(out, 0, sizeof(*out));
	/* The head, skipping interim 1xx responses. */
	for (;;) {
		while (!(sep = b.p ? strstr(b.p, "\r\n\r\n") : NULL)) {
			ssize_t n;

			if (b.len > RAWHTTP_HEAD_MAX)
				goto out;
			n = fill(fd, &b, deadline);
			if (n <= 0) {
				eof = n == 0;
				goto out;
			}
		}
		head_len = (size_t)(sep - b.p) + 4;
		if (b.len >= 12 && strncmp(b.p, "HTTP/1.", 7) == 0 && b.p[9] == '1') {
			memmove(b.p, b.p + head_len, b.len - head_len + 1);
			b.len -= head_len;
			continue;
		}
		break;
	}
	if (strncmp(b.p, "HTTP/1.", 7) != 0 || b.len < 12)
		goto out;
	out->status = (int)strtol(b.p + 9, NULL, 10);
	out->head = strndup(b.p, head_len - 4);
	if (!out->head)
		goto out;
	if (rawhttp_header(out, "Transfer-Encoding", val, sizeof(val)) &&
	    strcasecmp(val, "chunked") == 0) {
		int d;

		while ((d = dechunk(b.p + head_len, b.len - head_len, &body)) == 0) {
			ssize_t n;

			if (b.len - head_len > max_body + 65536)
				goto out;
			n = fill(fd, &b, deadline);
			if (n <= 0) {
				eof = n == 0;
				goto out;
			}
		}
		if (d < 0)
			goto out;
	} else if (rawhttp_header(out, "Content-Length", val, sizeof(val))) {
		size_t want = strtoul(val, NULL, 10);

		if (want > max_body)
			goto out;
		while (b.len - head_len < want) {
			ssize_t n = fill(fd, &b, deadline);
			if (n <= 0) {
				eof = n == 0;
				goto out;
			}
		}
		if (rbuf_reserve(&body, want) < 0)
			goto out;
		memcpy(body.p, b.p + head_len, want);
		body.len = want;
		body.p[want] = '\0';
	} else if (out->status == 204 || out->status == 304) {
		/* No body. */
	} else {
		/* To the end of the connection. */
		for (;;) {
			ssize_t n;

			if (b.len - head_len > max_body)
				goto out;
			n = fill(fd, &b, deadline);
			if (n < 0)
				goto out;
			if (n == 0)
				break;
		}
		eof = true;
		if (rbuf_reserve(&body, b.len - head_len) < 0)
			goto out;
		memcpy(body.p, b.p + head_len, b.len - head_len);
		body.len = b.len - head_len;
		body.p[body.len] = '\0';
	}
	ret = 0;
out:
	if (rbuf_reserve(&body, 0) == 0) {
		out->body = body.p;
		out->body_len = body.len;
		out->body[out->body_len] = '\0';
	} else {
		free(body.p);
	}
	out->closed = eof || (out->head && rawhttp_header(out, "Connection", val, sizeof(val)) &&
			      strcasecmp(val, "close") == 0);
	free(b.p);
	return ret;
}

int rawhttp_request(int port, const void *req, size_t len, int timeout_ms, struct rawhttp_resp *out)
{
	int fd = rawhttp_connect(port);
	int ret;

	memset(out, 0, sizeof(*out));
	if (fd < 0)
		return -1;
	if (rawhttp_send(fd, req, len, timeout_ms) != 0) {
		/* The server may have answered and closed before taking it all
		 * (a 413 or 414 while the rest was still being sent). */
		ret = rawhttp_read(fd, timeout_ms, 64u * 1024 * 1024, out);
		close(fd);
		return ret;
	}
	ret = rawhttp_read(fd, timeout_ms, 64u * 1024 * 1024, out);
	close(fd);
	return ret;
}

int rawhttp_wait_closed(int fd, int timeout_ms)
{
	long long deadline = rawhttp_now_ms() + timeout_ms;
	char buf[4096];

	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t n;
		int pr = poll(&pfd, 1, left_ms(deadline));

		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return -1;
		if (pr == 0)
			return 0;
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE)))
			return 1;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
	}
}

void rawhttp_resp_release(struct rawhttp_resp *r)
{
	free(r->head);
	free(r->body);
	memset(r, 0, sizeof(*r));
}
