/* Integration: a burst of requests on connections kept alive, all arriving
 * while meterd's HTTP threads are away (the process stopped), is answered
 * at once when they come back. libmicrohttpd 0.9.75's epoll loop held a
 * burst of exactly 128 or 256 unserved until another event came or a
 * connection timed out (connection_timeout_s, 30 s by default): meterd now
 * runs a thread for each HTTP_THREAD_CONNECTIONS connections of
 * max_connections, so no thread can have 128 events at once. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "apitest.h"
#include "check.h"
#include "rawhttp.h"
#include "server.h"

#define BURST_MAX  256
#define ANSWER_MS  5000 /* far under the 30 s a stalled burst waited */
#define SETTLE_MS  300	/* for the threads to be back in their waits */
#define BETWEEN_MS 50

static const char REQ[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

static void sleep_ms(long ms)
{
	const struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* One request and its answer on fd: true on a 200. */
static bool healthz(int fd, int timeout_ms)
{
	struct rawhttp_resp r;
	bool ok = rawhttp_send(fd, REQ, sizeof(REQ) - 1, timeout_ms) == 0 &&
		  rawhttp_read(fd, timeout_ms, 4096, &r) == 0 && r.status == 200;

	rawhttp_resp_release(&r);
	return ok;
}

/* n connections, each answered once (so kept alive); then, with meterd
 * stopped, one request on each; then meterd goes on. Returns how many
 * were answered within ANSWER_MS of that, *ms the time it took. */
static int burst(pid_t pid, int port, int n, long long *ms)
{
	int fds[BURST_MAX], answered = 0, open = 0;
	long long t0;

	*ms = -1;
	for (; open < n; open++) {
		fds[open] = rawhttp_connect(port);
		if (fds[open] < 0 || !healthz(fds[open], ANSWER_MS)) {
			if (fds[open] >= 0)
				close(fds[open]);
			break;
		}
	}
	CHECK_I64(open, n);
	sleep_ms(SETTLE_MS);
	CHECK(kill(pid, SIGSTOP) == 0);
	sleep_ms(BETWEEN_MS);
	for (int i = 0; i < open; i++)
		CHECK(rawhttp_send(fds[i], REQ, sizeof(REQ) - 1, ANSWER_MS) == 0);
	sleep_ms(BETWEEN_MS);
	t0 = rawhttp_now_ms();
	CHECK(kill(pid, SIGCONT) == 0);
	for (int i = 0; i < open; i++) {
		struct rawhttp_resp r;
		long long left = ANSWER_MS - (rawhttp_now_ms() - t0);

		if (left > 0 && rawhttp_read(fds[i], (int)left, 4096, &r) == 0 && r.status == 200)
			answered++;
		rawhttp_resp_release(&r);
	}
	*ms = rawhttp_now_ms() - t0;
	for (int i = 0; i < open; i++)
		close(fds[i]);
	return answered;
}

static void test_threads_rule(void)
{
	CHECK_I64(http_server_threads(2, 1024), 9);
	CHECK_I64(http_server_threads(1, 125), 1);
	CHECK_I64(http_server_threads(1, 126), 2);
	CHECK_I64(http_server_threads(4, 100), 4);
	CHECK_I64(http_server_threads(16, 1024), 16);
	CHECK_I64(http_server_threads(64, 100000), 800);
}

int main(void)
{
	/* One thread asked for: before, it took every connection. */
	static const char *const args[] = {"--http-threads", "1", NULL};
	static const int sizes[] = {128, 256, 252};
	struct apitest t;
	char *log;

	test_threads_rule();
	if (apitest_start(&t, "burst", 1, args, NULL) < 0) {
		CHECK(0);
		return check_done();
	}
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		long long ms;
		int got = burst(t.servers[0].pid, t.servers[0].port, sizes[s], &ms);

		fprintf(stderr, "burst of %d: %d answered in %lld ms\n", sizes[s], got, ms);
		CHECK_I64(got, sizes[s]);
	}
	log = apitest_read_log(&t, 0);
	CHECK(log && strstr(log, " http: 9 threads, one for each 125 connections of"
				 " max_connections (http_threads is 1)") != NULL);
	free(log);
	CHECK_I64(apitest_stop(&t), 0);
	apitest_drop(&t);
	return check_done();
}
